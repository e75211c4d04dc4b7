"""``elbo``: the ELBO of a sentence VAE with a KL weight (beta-VAE; Higgins et al. 2017),

    loss = -log p(x | z) + kl_weight * KL(q(z | x) || N(0, I)),   z ~ q(z | x),

summed over sentences (one reparameterised z each, in training and validation).
Logged: ``reconstruction`` (nats per sentence), ``kl`` (the objective's prior
terms, unweighted; an objective with several also logs each, HSVAE its
``kl_z`` and ``kl_gamma``) and, in validation, ``average_hoyer`` of one sample z per
sentence and ``average_hoyer_mean`` of the posterior means
(:mod:`.hoyer`), computed over the whole validation set.

The other objectives subclass it: ``latent`` draws z and returns its prior terms
(already weighted) and its KL terms by name (unweighted), ``regularizer`` adds a
penalty.  "vae" names models (``sentence_vae``, and the papers' ``hsvae`` and
``mat_vae``, whose objectives carry their names), never a bare objective: ``vae``,
``vae_l1`` and ``vae_l2``, the former names of ``elbo``, ``elbo_l1`` and ``elbo_l2``,
are refused with their names now (``refuse_former_name``); checkpoints that hold them
load renamed (``checkpoint_migrations``).
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..modules.probability import gaussian_kl, reparameterized_sample
from .hoyer import AverageHoyerMeter
from .sentence_vae import encoder_input


@dataclass
class VAEConfig(FairseqDataclass):
    kl_weight: float = field(default=1.0, metadata={"help": "weight of the KL term (1: the ELBO)"})


def refuse_former_name(former, now):
    """Register criterion ``former`` (with the options of the registered ``now``, so that a
    command that names it parses) as an error naming ``now``."""
    def refuse(self, cfg, task):
        raise ValueError(f"--criterion {former} is now --criterion {now}")

    name = "Former" + "".join(part.title() for part in former.split("_")) + "Criterion"
    register_criterion(former, dataclass=CRITERION_DATACLASS_REGISTRY[now])(
        type(name, (FairseqCriterion,), {"__init__": refuse}))


@register_criterion("elbo", dataclass=VAEConfig)
class VAECriterion(FairseqCriterion):
    def __init__(self, cfg, task):
        super().__init__(task)
        names = cfg.keys() if hasattr(cfg, "keys") else vars(cfg)  # a DictConfig or the dataclass
        for name in [n for n in names if n.endswith("_weight")]:  # --kl-weight, --mmd-weight, --gamma-kl-weight...
            value = getattr(cfg, name)
            if isinstance(value, (int, float)) and not 0 <= value < math.inf:  # also NaN
                raise ValueError(f"--{name.replace('_', '-')} {value}: must be a finite number >= 0")
        self.cfg = cfg
        self.pad = task.target_dictionary.pad()

    def latent(self, posterior):
        """(z, weighted prior terms per sentence, {name: unweighted KL per sentence}, mean code)."""
        mean, log_var = posterior["mean"], posterior["log_var"]
        z = reparameterized_sample(mean, log_var)
        kl = gaussian_kl(mean, log_var)
        return z, self.cfg.kl_weight * kl, {"kl": kl}, mean

    def regularizer(self, posterior):
        """Extra per-sentence penalty on the posterior (none for the plain VAE)."""
        return torch.zeros_like(posterior["mean"][:, 0])

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        posterior = model.encode(**encoder_input(net_input))
        z, prior_terms, kl_terms, mean_code = self.latent(posterior)
        logits = model.decode(z, net_input["prev_output_tokens"])
        reconstruction = F.cross_entropy(logits.transpose(1, 2), sample["target"], ignore_index=self.pad,
                                         reduction="none").sum(-1)
        loss = (reconstruction + prior_terms + self.regularizer(posterior)).sum()
        batch = len(sample["id"])
        logging_output = {"loss": loss.detach(), "reconstruction": reconstruction.detach().sum(),
                          "kl": sum(kl_terms.values()).detach().sum(), "ntokens": sample["ntokens"],
                          "nsentences": batch, "sample_size": batch}
        if len(kl_terms) > 1:
            logging_output.update({name: value.detach().sum() for name, value in kl_terms.items()})
        if not model.training:
            logging_output["codes"] = z.detach()
            logging_output["means"] = mean_code.detach()
        return loss, batch, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        n = sum(log["sample_size"] for log in logging_outputs)
        parts = sorted(key for key in (logging_outputs[0] if logging_outputs else {}) if key.startswith("kl_"))
        for key in ("loss", "reconstruction", "kl", *parts):
            metrics.log_scalar(key, sum(float(log[key]) for log in logging_outputs) / max(n, 1), n, round=3)
        codes = [log["codes"] for log in logging_outputs if "codes" in log]
        if codes:
            metrics.log_custom(AverageHoyerMeter, "average_hoyer", torch.cat(codes))
            metrics.log_custom(AverageHoyerMeter, "average_hoyer_mean",
                               torch.cat([log["means"] for log in logging_outputs]))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return False  # the codes of a validation pass are gathered, not summed
