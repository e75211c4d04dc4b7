"""``label_smoothed_entmax``: training loss for models with a sparse output layer."""

import math
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from ..entmax.losses import entmax_loss
from ..entmax.normalizers import get_normalizer

@dataclass
class LabelSmoothedEntmaxConfig(FairseqDataclass):
    label_smoothing: float = field(
        default=0.0, metadata={"help": "epsilon for label smoothing, 0 means no label smoothing"}
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("label_smoothed_entmax", dataclass=LabelSmoothedEntmaxConfig)
class LabelSmoothedEntmaxCriterion(FairseqCriterion):
    """Label-smoothed entmax loss (Peters, Niculae & Martins, ACL 2019) of the
    model's output normaliser (``--output-normalizer sparsemax`` or ``entmax15``):
    see :mod:`fairseq_sparse.entmax.losses`.  Also logs the mean number of
    vocabulary entries with nonzero probability (``output_support``)."""

    def __init__(self, task, label_smoothing, sentence_avg):
        super().__init__(task)
        self.eps = label_smoothing
        self.sentence_avg = sentence_avg

    def forward(self, model, sample, reduce=True):
        normalizer = get_normalizer(getattr(model, "output_normalizer", "softmax"), "--output-normalizer")
        if not normalizer.sparse:
            raise ValueError(
                f"--criterion label_smoothed_entmax needs a sparse output layer (--output-normalizer "
                f"sparsemax or entmax15 with --arch entmax_transformer*), but the model's output is {normalizer.name}"
            )
        net_output = model(**sample["net_input"])
        logits = net_output[0].float()
        target = model.get_targets(sample, net_output)
        keep = target.ne(self.padding_idx).view(-1)
        z = logits.view(-1, logits.size(-1))[keep]
        y = target.view(-1)[keep]
        losses, support = entmax_loss(z, y, normalizer.alpha, self.eps, return_support=True)
        loss = losses.sum() if reduce else losses
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "output_support": support.sum().data,
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        support = sum(log.get("output_support", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("output_support", utils.item(support) / max(ntokens, 1), ntokens, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
