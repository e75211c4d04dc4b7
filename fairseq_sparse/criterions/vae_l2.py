"""``vae_l2``: the ELBO plus ``--regularization-weight`` times the squared L2 norms of
the posterior's mean and standard deviation (Prokhorov et al. 2021, Sec. 5)."""

from fairseq.criterions import register_criterion

from .vae import VAECriterion
from .vae_l1 import RegularizedVAEConfig


@register_criterion("vae_l2", dataclass=RegularizedVAEConfig)
class L2RegularizedVAECriterion(VAECriterion):
    def regularizer(self, posterior):
        return self.cfg.regularization_weight * (posterior["mean"].pow(2) + posterior["log_var"].exp()).sum(-1)
