"""The length-extrapolation study (fairseq_sparse.sparse_transformer.length_study): decoder-only
models trained on synthetic tasks at prompt lengths 32 to 64, scored at 1x to 16x, one per task,
attention variant, position option and seed; resumable, results gathered in RESULTS/.

    python scripts/length_study.py [--tasks reverse sort associative_recall] [--seeds 1 2 3] [--jobs 2]
"""

import sys

from fairseq_sparse.sparse_transformer import length_study

if __name__ == "__main__":
    sys.exit(length_study.main())
