"""``bitvector_vae``: encoder scores over D bits, a decoder from bits to a categorical
over grey levels per pixel (a low-rank output layer, as in the paper's code).

``latent_loss``, the objective of ``latent_marginalization``, is the negative ELBO

    -ELBO(x) = E_{z ~ q} [-log p(x | z)] - H(q) + D log 2

(KL to the uniform prior over {0,1}^D), E_q taken by the estimator and H(q) the
Shannon entropy of the estimator's own distribution: the mean-field Bernoulli for
the Monte Carlo estimators, the sparse distribution over a few structures for
top-k sparsemax and SparseMAP.  In validation it also estimates -log p(x) by
importance sampling (``--nll-samples``) with the proposal
r = (1 - eps) q + eps uniform, which covers every z even when q is sparse.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model
from torch import nn

PROPOSAL_UNIFORM_WEIGHT = 0.05
# Decoder logits held at once by the NLL estimate (samples x pixels x levels).
LOGITS_PER_CHUNK = 2 ** 24


@dataclass
class BitVectorVAEModelConfig(FairseqDataclass):
    hidden_dim: int = field(default=128, metadata={"help": "width of the encoder's and decoder's hidden layer"})
    output_rank: int = field(default=5, metadata={"help": "rank of the per-pixel output layer over grey levels"})
    nll_samples: int = field(default=32, metadata={"help": "importance samples per image of the validation "
                                                           "NLL estimate (0: none)"})


@register_model("bitvector_vae", dataclass=BitVectorVAEModelConfig)
class BitVectorVAEModel(BaseFairseqModel):
    def __init__(self, pixels, levels, bits, hidden_dim, output_rank, nll_samples=32):
        super().__init__()
        self.pixels, self.levels, self.bits, self.rank = pixels, levels, bits, output_rank
        self.nll_samples = nll_samples
        self.encoder = nn.Sequential(nn.Linear(pixels, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, bits))
        self.decoder = nn.Sequential(nn.Linear(bits, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, pixels * output_rank))
        self.output = nn.Linear(output_rank, levels)

    @classmethod
    def build_model(cls, cfg, task):
        return cls(task.input_dim, task.num_levels, task.cfg.latent_bits, cfg.hidden_dim, cfg.output_rank,
                   cfg.nll_samples)

    def forward(self, levels):
        """Scores (B, D) of the bits given the images' grey levels (B, pixels)."""
        return self.encoder(self.intensities(levels))

    def intensities(self, levels):
        """Grey levels scaled to [0, 1]: the encoder's input and NVIL's baseline features."""
        return levels.float() / (self.levels - 1)

    def reconstruction(self, levels, z):
        """-log p(x | z), one per row: z (N, D) bits (or relaxed ones), levels (N, pixels)."""
        # Pixels as rows of one (N * pixels, levels) matrix: cross-entropy over a last, contiguous
        # dimension runs in about 60% of the time of the same over dim 1 of (N, levels, pixels).
        logits = self.output(self.decoder(z).view(-1, self.rank))
        return F.cross_entropy(logits, levels.reshape(-1), reduction="none").view(len(levels), -1).sum(-1)

    def latent_loss(self, sample, estimator):
        levels = sample["net_input"]["images"]
        pixels = self.intensities(levels)
        scores = self.encoder(pixels)
        est = estimator(scores, lambda rows, z: self.reconstruction(levels[rows], z), features=pixels)
        prior = self.bits * math.log(2)
        neg_elbo = est.surrogate - est.entropy + prior
        stats = {"decoder_calls": est.decoder_calls.sum(), "estimated": len(levels),
                 "neg_elbo": (est.loss - est.entropy).detach().sum() + prior * len(levels),
                 "dims": len(levels) * self.pixels}
        if not self.training and self.nll_samples > 0:
            stats["nll"] = -self.importance_log_likelihood(levels, scores.detach(), estimator, self.nll_samples).sum()
        return neg_elbo.sum(), stats

    @torch.no_grad()
    def importance_log_likelihood(self, levels, scores, estimator, samples):
        """log p(x) ~ log mean_m p(x | z_m) p(z_m) / r(z_m), z_m ~ r (see the module docstring)."""
        B, D = scores.shape
        support = estimator.support(scores) if hasattr(estimator, "support") else None
        eps = PROPOSAL_UNIFORM_WEIGHT
        log_weights = []
        chunk = max(1, LOGITS_PER_CHUNK // (B * self.pixels * self.levels))
        for start in range(0, samples, chunk):
            m = min(chunk, samples - start)
            uniform = torch.bernoulli(torch.full((B, m, D), 0.5, dtype=scores.dtype, device=scores.device))
            if support is None:
                z_q = torch.bernoulli(torch.sigmoid(scores)[:, None].expand(B, m, D))
            else:
                probs, structures = support
                pick = torch.multinomial(probs.float(), m, replacement=True)
                z_q = structures.gather(1, pick[..., None].expand(B, m, D))
            z = torch.where(torch.rand(B, m, 1, device=scores.device) < eps, uniform, z_q)
            if support is None:
                log_q = estimator.space.log_prob(scores[:, None], z)
            else:
                same = (z[:, :, None] == structures[:, None]).all(-1)  # (B, m, S)
                mass = (same * probs[:, None]).sum(-1)
                log_q = torch.log(mass.clamp_min(1e-300)).masked_fill(mass <= 0, -math.inf)
            log_r = torch.logaddexp(math.log(1 - eps) + log_q, torch.full_like(log_q, math.log(eps) - D * math.log(2)))
            nll = self.reconstruction(levels[:, None].expand(B, m, -1).reshape(B * m, -1), z.reshape(B * m, D))
            log_weights.append(-nll.view(B, m) - D * math.log(2) - log_r)
        return torch.logsumexp(torch.cat(log_weights, 1), 1) - math.log(samples)
