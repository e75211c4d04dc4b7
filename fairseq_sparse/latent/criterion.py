"""``latent_marginalization``: train a model with a discrete latent by any estimator of
the registry (``--estimator``), the experiments of Correia et al. (NeurIPS 2020).

The estimator works in the task's latent space (``task.latent_space``: the 10
classes of ``ssvae``, the 256 messages of ``signaling_game``, the D bits of
``bitvector_vae``); the objective is the model's own (``model.latent_loss``), which
returns the summed loss and sums of statistics.  This criterion turns those into
fairseq metrics: ``decoder_calls`` (per example whose latent was estimated),
``accuracy`` (ssvae), ``success`` (signaling_game), ``neg_elbo_bits_per_dim``,
``nll_bits_per_dim``, and what comes before a collapsed code (``code_entropy_bits``,
``score_abs``, ``score_shared``, ``score_spread``, ``positive_bits`` and, in training,
``gradient_alignment``: see ``BitVectorVAEModel.code_statistics``) (bitvector_vae).
"""

import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from .estimators import ESTIMATORS, EstimatorOptions, build_estimator_from_options


@dataclass
class LatentMarginalizationConfig(EstimatorOptions, FairseqDataclass):
    estimator: ChoiceEnum(sorted(ESTIMATORS)) = field(
        default="sparsemax", metadata={"help": "how E_pi[loss] and its gradient are estimated"})


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
        # estimators without parameters, by compat/trainer_state.py).
        if cfg.estimator == "sum_and_sample" and cfg.topk != EstimatorOptions.topk:
            raise ValueError(f"--topk {cfg.topk}: --topk is the structures topk_sparsemax keeps; the categories "
                             "sum_and_sample sums are --summed")
        self.estimator = build_estimator_from_options(cfg.estimator, cfg, task.latent_space)
        # Relaxed samples (Gumbel-softmax at temperature 0.5) and peaked distributions put
        # denormal floats into the decoders' matrix products, and on CPU each such product
        # runs many times slower (docs/results/latent.md).  Flushing them to zero
        # (process-wide, CPU only) changes nothing above float32's smallest normal, 1.2e-38.
        torch.set_flush_denormal(True)

    def forward(self, model, sample, reduce=True):
        loss, stats = model.latent_loss(sample, self.estimator)
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
        if total("sender_entropy"):
            metrics.log_scalar("sender_entropy", total("sender_entropy") / total("estimated"), total("estimated"),
                               round=3)
        if total("games"):
            metrics.log_scalar("success", 100 * total("won") / total("games"), total("games"), round=2)
        if total("dims"):
            per_dim = total("dims") * math.log(2)
            metrics.log_scalar("neg_elbo_bits_per_dim", total("neg_elbo") / per_dim, total("dims"), round=4)
            if total("nll"):
                metrics.log_scalar("nll_bits_per_dim", total("nll") / per_dim, total("dims"), round=4)
        if any("code_entropy" in log for log in logging_outputs):  # logged even at 0: a collapsed code
            metrics.log_scalar("code_entropy_bits", total("code_entropy") / math.log(2) / total("estimated"),
                               total("estimated"), round=3)
            for key in ("score_abs", "score_shared", "score_spread", "positive_bits"):
                metrics.log_scalar(key, total(key) / total("estimated"), total("estimated"), round=3)
        if total("gradient_batches"):  # training only: one value per batch
            metrics.log_scalar("gradient_alignment", total("gradient_alignment") / total("gradient_batches"),
                               total("gradient_batches"), round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
