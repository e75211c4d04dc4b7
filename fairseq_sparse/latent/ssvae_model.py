"""``ssvae``: Kingma et al.'s M2 model for the ``ssvae`` task.

A classifier pi(y | x) over the classes, a Gaussian encoder q(z | x, y) and a
Bernoulli decoder p(x | y, z), all small MLPs.  ``neg_elbo(x, y)`` is one decoder
call: -E_q(z|x,y)[log p(x | y, z)] + KL(q(z | x, y) || N(0, I)) - log p(y), with a
single reparameterised z and a uniform p(y); ``y`` is a one-hot row or a relaxed one.

``latent_loss`` is the objective of the ``latent_marginalization`` criterion, per image x:
- label hidden: E_{y ~ pi(.|x)} [-ELBO(x, y)] - H(pi(.|x)), the expectation taken by
  the estimator (exactly, or by sampling), H the entropy that goes with pi
  (Shannon for softmax, Gini for sparsemax);
- label y shown: -ELBO(x, y) + ``--classification-weight`` * loss(pi(.|x), y)
  (cross-entropy, or the sparsemax loss for sparsemax estimators).
In validation every label is hidden from the objective (it is the unsupervised
bound, with the estimator's decoder calls) and used for ``accuracy``.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model
from torch import nn

from ..modules.probability import gaussian_kl, reparameterized_sample


@dataclass
class SSVAEModelConfig(FairseqDataclass):
    hidden_dim: int = field(default=256, metadata={"help": "width of every hidden layer"})
    latent_dim: int = field(default=16, metadata={"help": "dimension of the continuous latent z"})
    classification_weight: float = field(
        default=10.0, metadata={"help": "weight of the classification loss on labelled examples"})


def mlp(inputs, hidden, outputs):
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


@register_model("ssvae", dataclass=SSVAEModelConfig)
class SSVAEModel(BaseFairseqModel):
    def __init__(self, input_dim, num_classes, hidden_dim, latent_dim, classification_weight=10.0):
        super().__init__()
        self.num_classes, self.latent_dim = num_classes, latent_dim
        self.classification_weight = classification_weight
        self.classifier = mlp(input_dim, hidden_dim, num_classes)
        self.encoder = mlp(input_dim + num_classes, hidden_dim, 2 * latent_dim)
        self.decoder = mlp(latent_dim + num_classes, hidden_dim, input_dim)

    @classmethod
    def build_model(cls, cfg, task):
        for option, value in (("--hidden-dim", cfg.hidden_dim), ("--latent-dim", cfg.latent_dim)):
            if value < 1:
                raise ValueError(f"{option} {value}: must be at least 1")
        return cls(task.input_dim, task.num_classes, cfg.hidden_dim, cfg.latent_dim, cfg.classification_weight)

    def forward(self, images):
        """Class scores (B, classes): the logits of pi(y | x)."""
        return self.classifier(images)

    def neg_elbo(self, images, y):
        mean, log_var = self.encoder(torch.cat([images, y], -1)).chunk(2, -1)
        z = reparameterized_sample(mean, log_var) if self.training else mean
        logits = self.decoder(torch.cat([z, y], -1))
        reconstruction = F.binary_cross_entropy_with_logits(logits, images, reduction="none").sum(-1)
        return reconstruction + gaussian_kl(mean, log_var) + math.log(self.num_classes)

    def latent_loss(self, sample, estimator):
        images, labels = sample["net_input"]["images"], sample["labels"]
        shown = sample["labelled"] if self.training else torch.zeros_like(sample["labelled"])
        scores = self(images)
        loss = images.new_zeros(())
        calls = images.new_zeros(())
        hidden = (~shown).nonzero().squeeze(1)
        if len(hidden):
            x = images[hidden]
            est = estimator(scores[hidden], lambda rows, y: self.neg_elbo(x[rows], y), features=x)
            # Every estimator's surrogate has the loss estimate as its value, so this is also what is logged.
            loss = loss + (est.surrogate - estimator.generalized_entropy(scores[hidden])).sum()
            calls = est.decoder_calls.sum()
        known = shown.nonzero().squeeze(1)
        if len(known):
            one_hot = F.one_hot(labels[known], scores.shape[1]).to(images.dtype)
            loss = loss + (self.neg_elbo(images[known], one_hot) + self.classification_weight
                           * estimator.classification_loss(scores[known], labels[known])).sum()
        stats = {"decoder_calls": calls, "estimated": len(hidden)}
        if not self.training:
            stats.update(correct=(scores.argmax(-1) == labels).sum(), classified=len(labels))
        return loss, stats
