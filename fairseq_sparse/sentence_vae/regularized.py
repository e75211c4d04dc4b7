"""``elbo_l1`` and ``elbo_l2``: the ELBO plus ``--regularization-weight`` times the L1
norms (``elbo_l1``) or the squared L2 norms (``elbo_l2``) of the posterior's mean and
standard deviation, baselines that encourage sparse codes by a penalty rather than
a prior (Prokhorov et al. 2021, Sec. 5)."""

from dataclasses import dataclass, field

from fairseq.criterions import register_criterion

from .elbo import VAEConfig, VAECriterion


@dataclass
class RegularizedVAEConfig(VAEConfig):
    regularization_weight: float = field(default=1.0, metadata={"help": "weight of the norm penalty"})


@register_criterion("elbo_l1", dataclass=RegularizedVAEConfig)
class L1RegularizedVAECriterion(VAECriterion):
    def regularizer(self, posterior):
        std = (0.5 * posterior["log_var"]).exp()
        return self.cfg.regularization_weight * (posterior["mean"].abs() + std).sum(-1)


@register_criterion("elbo_l2", dataclass=RegularizedVAEConfig)
class L2RegularizedVAECriterion(VAECriterion):
    def regularizer(self, posterior):
        return self.cfg.regularization_weight * (posterior["mean"].pow(2) + posterior["log_var"].exp()).sum(-1)
