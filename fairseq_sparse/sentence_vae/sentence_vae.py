"""``sentence_vae``: the GRU text VAE of Prokhorov et al. (2021, Sec. 5; after Bowman
et al. 2016).

Shared word embeddings for encoder and decoder; the encoder's last GRU state
parametrises the posterior; the code z is concatenated to the decoder's word
embedding at every step.  The paper: embeddings 256, hidden 512, latent 32 or 768.

``encode`` returns the posterior's parameters per dimension: the Gaussian's
``mean`` and ``log_var`` and, for the hierarchical sparse posterior of ``hsvae``,
the Beta parameters ``gamma_a``, ``gamma_b`` of q(gamma | x) (unused by the other
objectives); ``decode(z, prev_output_tokens)`` gives the next-word logits.  The
objective (the criterion) draws z from the posterior it defines.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from ..modules.probability import clamp_keep_gradient

# The Beta posterior's parameters are kept in this range: the HSVAE authors' cure for
# training that turned NaN (VictorProkhorov/HSVAE, README, "Numerical stability").  A
# Beta with a parameter below 1 has unbounded density at 0 or 1, where its samples pile up.
BETA_PARAMETER_RANGE = (0.5, 100.0)


def encoder_input(net_input):
    """The encoder's share of a batch's ``net_input``: all but the decoder's input."""
    return {name: value for name, value in net_input.items() if name != "prev_output_tokens"}


@dataclass
class SentenceVAEModelConfig(FairseqDataclass):
    embed_dim: int = field(default=256, metadata={"help": "word embedding size (shared by encoder and decoder)"})
    hidden_dim: int = field(default=512, metadata={"help": "GRU state size of encoder and decoder"})
    latent_dim: int = field(default=32, metadata={"help": "dimension of the code z (the paper: 32 and 768)"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the embeddings and decoder states"})
    word_dropout: float = field(default=0.0, metadata={
        "help": "in training, the probability that each word of the decoder's input (the start symbol excepted) "
                "is replaced by <unk>, so that the decoder must lean on the code (Bowman et al. 2016, Sec. 3.1); "
                "1: the decoder sees no words"})


@register_model("sentence_vae", dataclass=SentenceVAEModelConfig)
class SentenceVAEModel(BaseFairseqModel):
    def __init__(self, cfg, dictionary):
        super().__init__()
        self.pad = dictionary.pad()
        self.unk = dictionary.unk()
        self.word_dropout = cfg.word_dropout
        self.latent_dim = cfg.latent_dim
        self.embed = nn.Embedding(len(dictionary), cfg.embed_dim, padding_idx=self.pad)
        self.encoder, encoded_dim = self.build_encoder(cfg)
        self.posterior = nn.Linear(encoded_dim, 4 * cfg.latent_dim)
        self.decoder = nn.GRU(cfg.embed_dim + cfg.latent_dim, cfg.hidden_dim, batch_first=True)
        self.output = nn.Linear(cfg.hidden_dim, len(dictionary))
        self.dropout = nn.Dropout(cfg.dropout)

    @classmethod
    def build_model(cls, cfg, task):
        # Checked before training: the average Hoyer that validation measures needs two dimensions.
        if cfg.latent_dim < 2:
            raise ValueError(f"--latent-dim {cfg.latent_dim}: must be at least 2 (validation measures the codes' "
                             "average Hoyer sparsity, defined for two dimensions or more)")
        for option in ("embed_dim", "hidden_dim"):
            if getattr(cfg, option) < 1:
                raise ValueError(f"--{option.replace('_', '-')} {getattr(cfg, option)}: must be at least 1")
        if not 0 <= cfg.dropout < 1:
            raise ValueError(f"--dropout {cfg.dropout}: must lie in [0, 1)")
        if not 0 <= cfg.word_dropout <= 1:
            raise ValueError(f"--word-dropout {cfg.word_dropout}: must lie in [0, 1]")
        return cls(cfg, task.dictionary)

    def build_encoder(self, cfg):
        """The sentence encoder and the size of the vector it gives the posterior."""
        return nn.GRU(cfg.embed_dim, cfg.hidden_dim, batch_first=True), cfg.hidden_dim

    def encode(self, src_tokens, src_lengths, **encoder_inputs):
        """The posterior's parameters, each (B, latent_dim), from the last state of each
        sentence.  ``encoder_inputs``: what else the task gives an encoder (BERT's ids)."""
        packed = pack_padded_sequence(self.dropout(self.embed(src_tokens)), src_lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, last = self.encoder(packed)
        return self.posterior_parameters(last[-1])

    def posterior_parameters(self, sentence_vector):
        mean, log_var, raw_a, raw_b = self.posterior(sentence_vector).chunk(4, -1)
        low, high = BETA_PARAMETER_RANGE
        return {"mean": mean, "log_var": log_var.clamp(-20, 20),
                "gamma_a": clamp_keep_gradient(F.softplus(raw_a), low, high),
                "gamma_b": clamp_keep_gradient(F.softplus(raw_b), low, high)}

    def decode(self, z, prev_output_tokens):
        """Next-word logits (B, T, vocabulary) given codes z (B, latent_dim)."""
        words = self.dropout(self.embed(self.drop_words(prev_output_tokens)))
        states, _ = self.decoder(torch.cat([words, z[:, None].expand(-1, words.shape[1], -1)], -1))
        return self.output(self.dropout(states))

    def drop_words(self, prev_output_tokens):
        """In training, each input word but the first (the start symbol, which tells the
        decoder where the sentence begins) becomes <unk> with probability ``word_dropout``;
        padding stays padding.  A decoder that cannot read the previous words must take
        them from z, which keeps an autoregressive decoder from ignoring the code."""
        if not self.training or self.word_dropout == 0:
            return prev_output_tokens
        drop = torch.rand(prev_output_tokens.shape, device=prev_output_tokens.device) < self.word_dropout
        drop[:, 0] = False
        return prev_output_tokens.masked_fill(drop & prev_output_tokens.ne(self.pad), self.unk)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **encoder_inputs):
        """The Gaussian posterior's mean code and the logits given it (what a plain
        autoencoder pass would do; the objectives call ``encode`` and ``decode``)."""
        posterior = self.encode(src_tokens, src_lengths, **encoder_inputs)
        return self.decode(posterior["mean"], prev_output_tokens), posterior
