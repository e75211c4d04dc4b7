"""The length-extrapolation study (fairseq_sparse.sparse_transformer.experiment_length): decoder-only
models trained on synthetic tasks at prompt lengths 16 to 32 (--min-length, --max-length), scored
at 1x to 16x, one per task, attention variant, position option and seed; resumable, results
gathered in RESULTS/.

    python scripts/length_study.py [--tasks copy flip_flop sort] [--seeds 1 2 3] [--jobs 2]
"""

import sys

from fairseq_sparse.sparse_transformer import experiment_length

if __name__ == "__main__":
    sys.exit(experiment_length.main())
