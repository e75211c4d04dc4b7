"""Capture the q, k and v of a trained model's attention, for bench_attention_tiles.py --captured:
a Hugging Face model's over sentences packed into one sequence (capture_hf.py),
or a fairseq transformer's self-attention over a split's sentences packed with their offsets
(capture_fairseq.py).

    python benchmarks/capture_attention.py --model outputs/hf/models/recipe_seed1 \\
        --text ../shared/data/text/hsvae-dbpedia14/test.txt --out outputs/captured_dbpedia.pt
    python benchmarks/capture_attention.py --checkpoint ckpt/checkpoint_best.pt --data m30k/bin \\
        --out outputs/captured_m30k.pt
"""

import argparse

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a Hugging Face save_pretrained directory with its tokenizer")
    parser.add_argument("--text", help="with --model: sentences, one per line, packed into one sequence")
    parser.add_argument("--packed", action="store_true",
                        help="with --model: run each sentence alone and pack them with their offsets (cu_seqlens), "
                             "as a packing collator gives them, rather than as one long sequence")
    parser.add_argument("--checkpoint", help="a fairseq transformer's checkpoint (entmax_transformer, ...)")
    parser.add_argument("--data", help="with --checkpoint: its binarized data directory")
    parser.add_argument("--split", default="test", help="with --checkpoint: the split whose sentences are packed "
                                                         "(default: %(default)s)")
    parser.add_argument("--length", type=int, default=512, help="positions of the packed row (default: %(default)s)")
    parser.add_argument("--out", required=True, help="the capture, for torch.load")
    args = parser.parse_args()
    if (args.model is None) == (args.checkpoint is None):
        parser.error("give --model (with --text) or --checkpoint (with --data)")
    if args.model is not None:
        if args.text is None:
            parser.error("--model needs --text")
        from capture_hf import capture
        result, source = capture(args.model, args.text, args.length, args.packed), args.model
    else:
        if args.data is None:
            parser.error("--checkpoint needs --data")
        from capture_fairseq import capture
        result, source = capture(args.checkpoint, args.data, args.split, args.length), args.checkpoint
    torch.save(result, args.out)
    print(f"captured {len(result['layers'])} attention modules of {source} over {args.length} positions: {args.out}")


if __name__ == "__main__":
    main()
