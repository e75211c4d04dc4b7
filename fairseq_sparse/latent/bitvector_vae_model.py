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
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
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
    encoder_input: ChoiceEnum(["intensities", "centered"]) = field(
        default="intensities",
        metadata={"help": "what the encoder reads: 'intensities', grey levels scaled to [0, 1] (the paper's code); "
                          "'centered', each pixel less its mean over the training images, so that no part of the "
                          "input is shared by every image (see docs/latent.md: with intensities, Adam's first steps "
                          "move every image's scores together)"})
    encoder_delay: int = field(
        default=0,
        metadata={"help": "updates for which the encoder is held (no gradient reaches it) while the decoder learns "
                          "what every image shares; 0: none (the paper's). Without it, the first updates push every "
                          "image's code the same way, out of SparseMAP's fractional band (see docs/latent.md)"})


@register_model("bitvector_vae", dataclass=BitVectorVAEModelConfig)
class BitVectorVAEModel(BaseFairseqModel):
    def __init__(self, pixels, levels, bits, hidden_dim, output_rank, nll_samples=32, input_mean=None,
                 encoder_delay=0):
        super().__init__()
        self.pixels, self.levels, self.bits, self.rank = pixels, levels, bits, output_rank
        self.nll_samples = nll_samples
        self.encoder_delay, self.num_updates = encoder_delay, 0
        # The training images' mean intensity per pixel, subtracted from the encoder's input
        # (--encoder-input centered); a buffer, so that a checkpoint keeps the mean it trained with.
        if input_mean is not None:
            self.register_buffer("input_mean", input_mean.float())
        else:
            self.input_mean = None
        self.encoder = nn.Sequential(nn.Linear(pixels, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, bits))
        self.decoder = nn.Sequential(nn.Linear(bits, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, pixels * output_rank))
        self.output = nn.Linear(output_rank, levels)

    @classmethod
    def build_model(cls, cfg, task):
        if cfg.encoder_delay < 0:
            raise ValueError(f"--encoder-delay {cfg.encoder_delay}: a number of updates, 0 or more")
        input_mean = task.train_intensity_mean() if cfg.encoder_input == "centered" else None
        return cls(task.input_dim, task.num_levels, task.cfg.latent_bits, cfg.hidden_dim, cfg.output_rank,
                   cfg.nll_samples, input_mean, cfg.encoder_delay)

    def set_num_updates(self, num_updates):
        """fairseq's call before each training step (the updates made so far)."""
        super().set_num_updates(num_updates)
        self.num_updates = num_updates

    def forward(self, levels):
        """Scores (B, D) of the bits given the images' grey levels (B, pixels)."""
        return self.scores(self.intensities(levels))

    def scores(self, pixels):
        """The encoder's scores (B, D) of intensities (B, pixels), centred if the model is."""
        return self.encoder(pixels if self.input_mean is None else pixels - self.input_mean)

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
        scores = self.scores(pixels)
        if self.training and self.num_updates < self.encoder_delay:
            scores = scores.detach()
        est = estimator(scores, lambda rows, z: self.reconstruction(levels[rows], z), features=pixels)
        prior = self.bits * math.log(2)
        neg_elbo = est.surrogate - est.entropy + prior
        stats = {"decoder_calls": est.decoder_calls.sum(), "estimated": len(levels),
                 "neg_elbo": (est.loss - est.entropy).detach().sum() + prior * len(levels),
                 "dims": len(levels) * self.pixels, **self.code_statistics(scores, est.entropy)}
        if not self.training and self.nll_samples > 0:
            stats["nll"] = -self.importance_log_likelihood(levels, scores.detach(), estimator, self.nll_samples).sum()
        return neg_elbo.sum(), stats

    def code_statistics(self, scores, entropy):
        """What follows the encoder's drift towards one deterministic code for every image,
        where no gradient reaches it any more (sums over the batch's images, but for the
        gradient's alignment, one value per batch with its count):

        - ``code_entropy``: H(q) per image;
        - ``score_abs``: the mean |score| of a bit;
        - ``score_shared`` and ``score_spread``: per bit, the |mean| and the standard deviation
          of its scores over the batch's images, averaged over the bits: the part of the scores
          every image shares and the part that tells images apart;
        - ``positive_bits``: the bits with a positive score, the ones of the most likely code
          (a budget of B ones binds once more than B are positive);
        - ``gradient_alignment`` (training): ||mean_i g_i||^2 / mean_i ||g_i||^2 for g_i the
          gradient of the loss in image i's scores, 1 when every image is pushed the same way,
          about 1 / B when the pushes are unrelated.  It is filled in by a hook during the
          backward pass, which fairseq runs before it reduces the logging outputs.
        """
        detached = scores.detach()
        stats = {"code_entropy": entropy.detach().sum(), "score_abs": detached.abs().mean(-1).sum(),
                 "score_shared": detached.mean(0).abs().mean() * len(scores),
                 "score_spread": detached.std(0, unbiased=False).mean() * len(scores),
                 "positive_bits": (detached > 0).sum()}
        if self.training and scores.requires_grad:
            alignment = scores.new_zeros(())

            def measure(grad):  # 0 when no image gets a gradient (a collapsed code)
                energy = grad.square().sum(-1).mean().clamp_min(torch.finfo(grad.dtype).tiny)
                alignment.copy_(grad.mean(0).square().sum() / energy)

            scores.register_hook(measure)
            stats.update(gradient_alignment=alignment, gradient_batches=1)
        return stats

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
