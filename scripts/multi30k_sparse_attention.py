"""The Multi30k experiment: softmax vs 1.5-entmax vs alpha-entmax transformers on Multi30k en-de
(fairseq_sparse.sparse_transformer.experiment_multi30k), after preparing the data with data_prep/multi30k.sh.

    python scripts/multi30k_sparse_attention.py --out outputs/multi30k [--max-epoch 4] [--device cuda] \\
        [--patience 5] [--test-prefix RAW/test_2017_flickr ...]
"""

import dataclasses
import subprocess
from pathlib import Path

from fairseq_sparse import configs
from fairseq_sparse.sparse_transformer import experiment_multi30k

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    config = configs.parse(experiment_multi30k.Multi30kConfig, experiment_multi30k.__doc__, argv)
    config.out.mkdir(parents=True, exist_ok=True)
    prepared = config.out / "data"
    if config.data is None:
        if not (prepared / "bin" / "dict.en.txt").exists():
            subprocess.run(["bash", str(REPO / "data_prep" / "multi30k.sh"), str(prepared)], check=True)
        config = dataclasses.replace(config, data=prepared / "bin")
    experiment_multi30k.run(config)


if __name__ == "__main__":
    main()
