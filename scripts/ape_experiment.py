"""The APE experiment on real WMT triplets, two domains (fairseq_sparse.ape.experiment_wmt).

    python scripts/ape_experiment.py --domain it --out outputs/ape-it [--device cuda] [--systems bert ...]
"""

from fairseq_sparse import configs
from fairseq_sparse.ape import experiment_wmt


def main(argv=None):
    experiment_wmt.run(configs.parse(experiment_wmt.APEExperimentConfig, experiment_wmt.__doc__, argv))


if __name__ == "__main__":
    main()
