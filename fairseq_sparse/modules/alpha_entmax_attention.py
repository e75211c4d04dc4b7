"""Multi-head attention whose heads are normalised by softmax, sparsemax, 1.5-entmax
or alpha-entmax with a learnable alpha per head (Correia, Niculae & Martins,
"Adaptively Sparse Transformers", EMNLP 2019)."""

import torch
from fairseq.modules import MultiheadAttention

from ..entmax.normalizers import get_normalizer
from .head_alpha import ALPHA_MIN, HeadAlpha


class AlphaEntmaxAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` with a pluggable normaliser.

    Everything up to the attention scores (projections, key padding and causal
    masks, incremental state, beam reordering, encoder output shared across the
    beam) is fairseq's own code: ``super().forward(..., before_softmax=True)``
    returns the masked scores and the values.  Only the normaliser and what
    follows it are here.

    fairseq otherwise sends every call without incremental state (all of
    training) to ``F.multi_head_attention_forward``, which has the softmax built
    in and would silently bypass any other normaliser.  fairseq's switch for
    leaving that fast path is ``skip_embed_dim_check``; it is set here, and the
    embedding-size check it also skips is done in ``forward`` instead.
    """

    def __init__(self, *args, normalizer="alpha_entmax", alpha_init="random", alpha_min=ALPHA_MIN, **kwargs):
        super().__init__(*args, **kwargs)
        # A registry entry (fairseq_sparse.entmax.normalizers), resolved once here.
        self.normalizer = get_normalizer(normalizer)
        self.head_alpha = HeadAlpha(self.num_heads, alpha_init, alpha_min) if self.normalizer.learned else None
        self.skip_embed_dim_check = True
        # Set by analysis code: keep the last attention probabilities (B, H, T, S).
        self.record_attention = False
        self.last_attention = None

    def alpha(self, initial=False):
        """Current alpha of each head, shape (num_heads,), or with ``initial`` its alpha at
        initialisation (:class:`HeadAlpha`); fixed for the fixed normalisers."""
        if self.head_alpha is not None:
            return self.head_alpha.initial_alpha if initial else self.head_alpha()
        return torch.full((self.num_heads,), self.normalizer.alpha, device=self.q_proj.weight.device)

    def normalize(self, scores):
        """Attention probabilities from masked scores of shape (B*H, T, S), in float32 or wider."""
        if self.head_alpha is None:
            return self.normalizer(scores, dim=-1)
        heads = scores.view(-1, self.num_heads, scores.size(1), scores.size(2))
        alpha = self.head_alpha().to(heads.dtype).view(1, -1, 1, 1)
        return self.normalizer(heads, dim=-1, alpha=alpha).view_as(scores)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        incremental_state=None,
        need_weights=True,
        static_kv=False,
        attn_mask=None,
        before_softmax=False,
        need_head_weights=False,
    ):
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.size()
        if embed_dim != self.embed_dim:
            raise ValueError(f"query dim {embed_dim} != {self.embed_dim}")
        scores, v = super().forward(
            query, key, value, key_padding_mask=key_padding_mask, incremental_state=incremental_state,
            need_weights=False, static_kv=static_kv, attn_mask=attn_mask, before_softmax=True,
        )
        if before_softmax:
            return scores, v
        src_len = scores.size(-1)
        probs_float = self.normalize(scores.float())
        probs = self.dropout_module(probs_float.type_as(scores))
        if self.record_attention:
            self.last_attention = probs_float.detach().view(bsz, self.num_heads, tgt_len, src_len)

        kv_bsz = v.size(0) // self.num_heads
        if self.encoder_decoder_attention and bsz != kv_bsz:
            # The encoder output is shared by the beam (fairseq's set_beam_size):
            # one key/value set serves beam_size queries.
            attn = torch.einsum(
                "bxhts,bhsd->bxhtd",
                probs.view((kv_bsz, -1, self.num_heads) + probs.size()[1:]),
                v.view((kv_bsz, self.num_heads) + v.size()[1:]),
            ).reshape(bsz * self.num_heads, tgt_len, self.head_dim)
        else:
            attn = torch.bmm(probs, v)
        attn = self.out_proj(attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim))

        weights = None
        if need_weights:
            weights = probs_float.view(bsz, self.num_heads, tgt_len, src_len).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights
