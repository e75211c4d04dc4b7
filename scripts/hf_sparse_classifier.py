"""Softmax vs 1.5-entmax vs alpha-entmax attention, and the conversion recipe, in a Hugging
Face BERT classifier at the same budget (fairseq_sparse.hf.experiment_classifier).

    python scripts/hf_sparse_classifier.py --out outputs/hf_dbpedia [--updates 300] [--seeds 1 2 3]
"""

from fairseq_sparse import configs
from fairseq_sparse.hf import experiment_classifier


def main(argv=None):
    experiment_classifier.run(configs.parse(experiment_classifier.ClassifierConfig, experiment_classifier.__doc__, argv))


if __name__ == "__main__":
    main()
