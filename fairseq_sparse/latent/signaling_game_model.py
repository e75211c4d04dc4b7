"""``signaling_game``: a sender (features -> message scores) and a receiver (message,
candidates -> which candidate is the target).

``latent_loss``, the objective of ``latent_marginalization``: E_{z ~ pi(.|target)}
[-log p_receiver(target | z, candidates)], the expectation taken by the estimator,
minus ``--entropy-coeff`` times the Shannon entropy of the sender's pi (the paper's
code rewards it with 0.1); one decoder call is one receiver pass for one message.  In
validation the sender sends its best message and ``success`` counts the games the
receiver then wins.

The sender is an MLP (``--sender mlp``) or the paper code's (``--sender bounded``, see
:class:`BoundedSender`), whose scores are bounded and divided by a temperature.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model
from torch import nn


@dataclass
class SignalingGameModelConfig(FairseqDataclass):
    hidden_dim: int = field(default=256, metadata={"help": "width of the sender's hidden layer and of the "
                                                           "receiver's message and candidate embeddings"})
    sender: ChoiceEnum(["mlp", "bounded"]) = field(
        default="mlp", metadata={"help": "the sender: an MLP (features -> hidden -> ReLU -> messages) or the paper "
                                         "code's, whose scores are bounded (see BoundedSender)"})
    sender_filters: int = field(default=512, metadata={"help": "--sender bounded: basis functions of its learned "
                                                               "nonlinearity (the paper's hidden_size, 512)"})
    sender_temperature: float = field(default=1.0, metadata={"help": "the sender's scores are divided by it (the "
                                                                     "paper code's tau_s: 10)"})
    entropy_coeff: float = field(default=0.0, metadata={"help": "weight of the sender's entropy bonus: the loss "
                                                                "is E[receiver loss] - coeff * H(pi) (0.1 in the "
                                                                "paper's code)"})


class BoundedSender(nn.Module):
    """The sender of the paper's code (deep-spin/sparse-marginalization-lvm, after
    Lazaridou et al. 2017): e = W1 x (no bias), h_j = sigmoid(sum_f v_f sigmoid(u_f e_j))
    for each of e's dimensions (a learned scalar nonlinearity with ``filters`` basis
    functions, the code's two convolutions), scores = W4 h (the model then divides them by
    ``--sender-temperature``, the code's tau_s).

    Each h_j lies in (0, 1), so a score is bounded by its row of W4: a sparsemax sender
    stays inside the simplex (several messages kept) far longer than an MLP's, whose
    scores grow until one message is left and its gradient is zero."""

    def __init__(self, features, messages, embedding_dim, filters):
        super().__init__()
        self.embed = nn.Linear(features, embedding_dim, bias=False)
        self.basis_scale = nn.Parameter(torch.empty(filters))  # u: the code's 1x1 convolution
        self.basis_weight = nn.Parameter(torch.empty(filters))  # v: the code's (filters x 1) convolution
        # The code's initialisation: PyTorch's Conv2d default, uniform in +-1/sqrt(fan in).
        nn.init.uniform_(self.basis_scale, -1.0, 1.0)
        nn.init.uniform_(self.basis_weight, -filters ** -0.5, filters ** -0.5)
        self.output = nn.Linear(embedding_dim, messages, bias=False)

    def forward(self, x):
        e = self.embed(x)
        h = torch.sigmoid(torch.sigmoid(e.unsqueeze(-1) * self.basis_scale) @ self.basis_weight)
        return self.output(h)


@register_model("signaling_game", dataclass=SignalingGameModelConfig)
class SignalingGameModel(BaseFairseqModel):
    def __init__(self, features, messages, hidden_dim, entropy_coeff=0.0, sender="mlp", sender_filters=512,
                 sender_temperature=1.0):
        super().__init__()
        if not entropy_coeff >= 0:  # also refuses NaN
            raise ValueError(f"--entropy-coeff {entropy_coeff}: must be at least 0")
        if not sender_temperature > 0:
            raise ValueError(f"--sender-temperature {sender_temperature}: must be above 0")
        if sender_filters < 1:
            raise ValueError(f"--sender-filters {sender_filters}: must be at least 1")
        self.entropy_coeff, self.sender_temperature = entropy_coeff, sender_temperature
        if sender == "bounded":
            self.sender = BoundedSender(features, messages, hidden_dim, sender_filters)
        elif sender == "mlp":
            self.sender = nn.Sequential(nn.Linear(features, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, messages))
        else:
            raise ValueError(f"--sender {sender}: must be mlp or bounded")
        self.message_embedding = nn.Linear(messages, hidden_dim, bias=False)  # reads one-hot or relaxed messages
        self.candidate_embedding = nn.Linear(features, hidden_dim)

    @classmethod
    def build_model(cls, cfg, task):
        return cls(task.input_dim, task.cfg.num_messages, cfg.hidden_dim, cfg.entropy_coeff, cfg.sender,
                   cfg.sender_filters, cfg.sender_temperature)

    def forward(self, target):
        """Message scores (B, messages) of the sender."""
        return self.sender(target) / self.sender_temperature

    def receiver_scores(self, embedded_candidates, message):
        return torch.einsum("bch,bh->bc", embedded_candidates, self.message_embedding(message))

    def receiver_scores_of_rows(self, embedded_candidates, rows, message):
        """Receiver scores (R, C) of message r (R, messages) against the candidates of game
        rows[r], for an estimator that decodes several messages per game.

        The same as ``receiver_scores(embedded_candidates[rows], message)``, without its
        (R, C, hidden) copy of the candidates, which made dense marginalisation (R = 256 B)
        30 times slower than sparsemax: the message embedding is folded into the
        candidates once per game (B, C, messages), and each game's messages are stacked
        (B, most messages of a game, messages) for one batched product."""
        games = embedded_candidates.shape[0]
        # <E W, m> = <E, W m>: the candidates in message space, once per game.
        folded = embedded_candidates @ self.message_embedding.weight  # (B, C, messages)
        counts = torch.bincount(rows, minlength=games)
        order = torch.argsort(rows, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.empty_like(rows)
        slot[order] = torch.arange(len(rows), device=rows.device) - starts[rows[order]]
        stacked = message.new_zeros(games, int(counts.max()), message.shape[1]).index_put((rows, slot), message)
        return torch.bmm(stacked, folded.transpose(1, 2))[rows, slot]

    def latent_loss(self, sample, estimator):
        target, candidates = sample["net_input"]["target"], sample["net_input"]["candidates"]
        position = sample["target_position"]
        scores = self(target)
        embedded = self.candidate_embedding(candidates)  # once, not once per decoded message

        def receiver_loss(rows, message):
            return F.cross_entropy(self.receiver_scores_of_rows(embedded, rows, message), position[rows],
                                   reduction="none")

        est = estimator(scores, receiver_loss, features=target)
        stats = {"decoder_calls": est.decoder_calls.sum(), "estimated": len(target)}
        if not self.training:
            best = F.one_hot(scores.argmax(-1), scores.shape[1]).to(scores.dtype)
            stats.update(won=(self.receiver_scores(embedded, best).argmax(-1) == position).sum(),
                         games=len(target))
        objective = est.surrogate
        if self.entropy_coeff:
            objective = objective - self.entropy_coeff * est.entropy
            stats["sender_entropy"] = est.entropy.detach().sum()
        return objective.sum(), stats
