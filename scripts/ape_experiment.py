"""The APE experiment on real WMT triplets, two domains (fairseq_sparse.ape.experiment).

    python scripts/ape_experiment.py --domain it --out outputs/ape-it [--device cuda] [--systems bert ...]
"""

from fairseq_sparse import configs
from fairseq_sparse.ape import experiment


def main(argv=None):
    experiment.run(configs.parse(experiment.APEExperimentConfig, experiment.__doc__, argv))


if __name__ == "__main__":
    main()
