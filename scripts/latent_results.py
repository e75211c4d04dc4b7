"""The estimator x experiment grid of Correia et al. (NeurIPS 2020) through fairseq-train, tabulated
next to the paper's numbers (fairseq_sparse.latent.experiment_grid).

    python scripts/latent_results.py --out results/latent              # digits, 3 seeds
    python scripts/latent_results.py --out results/mnist --dataset mnist      # the full MNIST, official split
    python scripts/latent_results.py --out results/ssvae --dataset mnist --experiments ssvae \\
        --warm-start-epochs 100 --epochs '{"ssvae": 200}' --fairseq-args "--lr 5e-4 --latent-dim 8"  # the paper's protocol
"""

from fairseq_sparse import configs
from fairseq_sparse.latent import experiment_grid


def main(argv=None):
    experiment_grid.run(configs.parse(experiment_grid.LatentResultsConfig, experiment_grid.__doc__, argv))


if __name__ == "__main__":
    main()
