"""``latent_marginalization``: train a model with a discrete latent by any estimator of
the registry (``--estimator``), the experiments of Correia et al. (NeurIPS 2020).

The estimator works in the task's latent space (``task.latent_space``: the 10
classes of ``ssvae``, the 256 messages of ``signaling_game``, the D bits of
``bitvector_vae``); the objective is the model's own (``model.latent_loss``), which
returns the summed loss and sums of statistics.  This criterion turns those into
fairseq metrics: ``decoder_calls`` (per example whose latent was estimated),
``accuracy`` (ssvae), ``success`` (signaling_game), ``neg_elbo_bits_per_dim`` and
``nll_bits_per_dim`` (bitvector_vae).
"""

import math
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from ..latent import ESTIMATORS, BitVector, build_estimator


@dataclass
class LatentMarginalizationConfig(FairseqDataclass):
    estimator: ChoiceEnum(sorted(ESTIMATORS)) = field(
        default="sparsemax", metadata={"help": "how E_pi[loss] and its gradient are estimated"})
    topk: int = field(default=10, metadata={"help": "k of topk_sparsemax (structures kept) and sum_and_sample "
                                                    "(categories summed exactly)"})
    set_size: int = field(default=4, metadata={"help": "samples without replacement of unordered_set (at most 6)"})
    budget: int = field(default=0, metadata={"help": "most ones of a bit-vector under sparsemap_budget "
                                                     "(0: half the bits)"})
    baseline_decay: float = field(default=0.99, metadata={"help": "moving-average decay of the baseline of sfe, "
                                                                  "nvil and sum_and_sample"})
    gumbel_temperature: float = field(default=1.0, metadata={"help": "initial Gumbel-softmax temperature"})
    gumbel_min_temperature: float = field(default=0.5, metadata={"help": "lowest Gumbel-softmax temperature"})
    gumbel_anneal_rate: float = field(default=1e-4, metadata={"help": "tau = max(min, tau0 exp(-rate * step))"})
    classification_weight: float = field(
        default=10.0, metadata={"help": "ssvae: weight of the classification loss on labelled examples"})
    nll_samples: int = field(default=32, metadata={"help": "bitvector_vae: importance samples per image of the "
                                                           "validation NLL estimate"})


def check_options(cfg, space):
    """Refuse, by option name, settings the estimator would turn into a crash or a NaN
    far from the command line."""
    name = cfg.estimator
    if name in ("topk_sparsemax", "sum_and_sample") and cfg.topk < 1:
        raise ValueError(f"--topk {cfg.topk}: must be at least 1")
    if name == "unordered_set" and not 1 <= cfg.set_size <= 6:
        raise ValueError(f"--set-size {cfg.set_size}: must be 1 to 6 (the set's probability sums over its m! orders)")
    if name == "sparsemap_budget" and isinstance(space, BitVector) and not 0 <= cfg.budget <= space.bits:
        raise ValueError(f"--budget {cfg.budget}: must be 0 (half the bits) to the {space.bits} latent bits")
    if name in ("sfe", "nvil", "sum_and_sample") and not 0 <= cfg.baseline_decay <= 1:
        raise ValueError(f"--baseline-decay {cfg.baseline_decay}: must be in [0, 1]")
    if name in ("gumbel", "st_gumbel"):
        for option, value in (("--gumbel-temperature", cfg.gumbel_temperature),
                              ("--gumbel-min-temperature", cfg.gumbel_min_temperature)):
            if not value > 0:  # the relaxed sample divides by the temperature
                raise ValueError(f"{option} {value}: must be above 0")
        if cfg.gumbel_anneal_rate < 0:
            raise ValueError(f"--gumbel-anneal-rate {cfg.gumbel_anneal_rate}: must be at least 0")


def estimator_options(cfg, space):
    check_options(cfg, space)
    name = cfg.estimator
    options = {"space": space}
    if name == "topk_sparsemax":
        options["topk"] = cfg.topk
    elif name == "unordered_set":
        options["topk"] = cfg.set_size
    elif name == "sum_and_sample":
        options.update(topk=cfg.topk, baseline_decay=cfg.baseline_decay)
    elif name in ("sfe", "nvil"):
        options["baseline_decay"] = cfg.baseline_decay
    elif name in ("gumbel", "st_gumbel"):
        options.update(temperature=cfg.gumbel_temperature, min_temperature=cfg.gumbel_min_temperature,
                       anneal_rate=cfg.gumbel_anneal_rate)
    elif name == "sparsemap_budget":
        options["budget"] = cfg.budget or None
    return options


@register_criterion("latent_marginalization", dataclass=LatentMarginalizationConfig)
class LatentMarginalizationCriterion(FairseqCriterion):
    def __init__(self, cfg, task):
        super().__init__(task)
        self.cfg = cfg
        if getattr(task, "latent_space", None) is None:
            raise ValueError(f"--criterion latent_marginalization needs a task with a discrete latent "
                             f"(ssvae, signaling_game, bitvector_vae), not {type(task).__name__}")
        # A module of the criterion, so that NVIL's baseline is trained and every
        # estimator's state (baselines, temperature step) is checkpointed (for
        # estimators without parameters, by criterion_state_fix.py).
        self.estimator = build_estimator(cfg.estimator, **estimator_options(cfg, task.latent_space))

    def forward(self, model, sample, reduce=True):
        loss, stats = model.latent_loss(sample, self.estimator, self.cfg)
        batch = len(sample["id"])
        logging_output = {"loss": loss.detach(), "nsentences": batch, "ntokens": batch, "sample_size": batch}
        logging_output.update({k: v.detach() if hasattr(v, "detach") else v for k, v in stats.items()})
        return loss, batch, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        def total(key):
            return sum(float(log.get(key, 0)) for log in logging_outputs)

        n = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(n, 1), n, round=3)
        if total("estimated"):
            metrics.log_scalar("decoder_calls", total("decoder_calls") / total("estimated"), total("estimated"),
                               round=3)
        if total("classified"):
            metrics.log_scalar("accuracy", 100 * total("correct") / total("classified"), total("classified"),
                               round=2)
        if total("games"):
            metrics.log_scalar("success", 100 * total("won") / total("games"), total("games"), round=2)
        if total("dims"):
            per_dim = total("dims") * math.log(2)
            metrics.log_scalar("neg_elbo_bits_per_dim", total("neg_elbo") / per_dim, total("dims"), round=4)
            if total("nll"):
                metrics.log_scalar("nll_bits_per_dim", total("nll") / per_dim, total("dims"), round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
