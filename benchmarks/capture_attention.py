"""Capture the q, k and v of a trained Hugging Face model's attention over packed sentences,
for bench_attention_tiles.py --captured (fairseq_sparse.hf.capture).

    python benchmarks/capture_attention.py --model outputs/hf/models/recipe_seed1 \\
        --text ../shared/data/text/hsvae-dbpedia14/test.txt --out outputs/captured_dbpedia.pt
"""

import argparse

import torch

from fairseq_sparse.hf.capture import capture


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a save_pretrained directory with its tokenizer")
    parser.add_argument("--text", required=True, help="sentences, one per line, packed into one sequence")
    parser.add_argument("--length", type=int, default=512, help="tokens of the packed sequence (default: %(default)s)")
    parser.add_argument("--out", required=True, help="the capture, for torch.load")
    args = parser.parse_args()
    result = capture(args.model, args.text, args.length)
    torch.save(result, args.out)
    print(f"captured {len(result['layers'])} attention modules of {args.model} over {args.length} tokens: {args.out}")


if __name__ == "__main__":
    main()
