"""The sentence-VAE stability grid of Prokhorov et al. (2021, Sec. 6) through fairseq-train
(fairseq_sparse.sentence_vae.experiment_stability).

    python scripts/sentence_vae_stability.py DATA_DIR --out DIR [--seeds 3] [--epochs 10] [--analyse]
"""

from fairseq_sparse import configs
from fairseq_sparse.sentence_vae import experiment_stability


def main(argv=None):
    experiment_stability.run(configs.parse(experiment_stability.StabilityConfig, experiment_stability.__doc__, argv))


if __name__ == "__main__":
    main()
