"""``signaling_game``: a sender (features -> message scores) and a receiver (message,
candidates -> which candidate is the target).

``latent_loss``, the objective of ``latent_marginalization``: E_{z ~ pi(.|target)}
[-log p_receiver(target | z, candidates)], the expectation taken by the estimator;
one decoder call is one receiver pass for one message.  In validation the sender
sends its best message and ``success`` counts the games the receiver then wins.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model
from torch import nn


@dataclass
class SignalingGameModelConfig(FairseqDataclass):
    hidden_dim: int = field(default=256, metadata={"help": "width of the sender's hidden layer and of the "
                                                           "receiver's message and candidate embeddings"})


@register_model("signaling_game", dataclass=SignalingGameModelConfig)
class SignalingGameModel(BaseFairseqModel):
    def __init__(self, features, messages, hidden_dim):
        super().__init__()
        self.sender = nn.Sequential(nn.Linear(features, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, messages))
        self.message_embedding = nn.Linear(messages, hidden_dim, bias=False)  # reads one-hot or relaxed messages
        self.candidate_embedding = nn.Linear(features, hidden_dim)

    @classmethod
    def build_model(cls, cfg, task):
        return cls(task.input_dim, task.cfg.num_messages, cfg.hidden_dim)

    def forward(self, target):
        """Message scores (B, messages) of the sender."""
        return self.sender(target)

    def receiver_scores(self, embedded_candidates, message):
        return torch.einsum("bch,bh->bc", embedded_candidates, self.message_embedding(message))

    def latent_loss(self, sample, estimator):
        target, candidates = sample["net_input"]["target"], sample["net_input"]["candidates"]
        position = sample["target_position"]
        scores = self(target)
        embedded = self.candidate_embedding(candidates)  # once, not once per decoded message

        def receiver_loss(rows, message):
            return F.cross_entropy(self.receiver_scores(embedded[rows], message), position[rows], reduction="none")

        est = estimator(scores, receiver_loss, features=target)
        stats = {"decoder_calls": est.decoder_calls.sum(), "estimated": len(target)}
        if not self.training:
            best = F.one_hot(scores.argmax(-1), scores.shape[1]).to(scores.dtype)
            stats.update(won=(self.receiver_scores(embedded, best).argmax(-1) == position).sum(),
                         games=len(target))
        return est.surrogate.sum(), stats
