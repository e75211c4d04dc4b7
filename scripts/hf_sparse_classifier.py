"""Softmax vs 1.5-entmax vs alpha-entmax attention, and the conversion recipe, in a Hugging
Face BERT classifier at the same budget (fairseq_sparse.hf.classifier).

    python scripts/hf_sparse_classifier.py --out outputs/hf_dbpedia [--updates 300] [--seeds 1 2 3]
"""

from fairseq_sparse import configs
from fairseq_sparse.hf import classifier


def main(argv=None):
    classifier.run(configs.parse(classifier.ClassifierConfig, classifier.__doc__, argv))


if __name__ == "__main__":
    main()
