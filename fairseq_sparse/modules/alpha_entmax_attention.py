"""Multi-head attention whose heads are normalised by softmax, sparsemax, 1.5-entmax
or alpha-entmax with a learnable alpha per head (Correia, Niculae & Martins,
"Adaptively Sparse Transformers", EMNLP 2019)."""

import logging

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention

from ..entmax import fused_attention
from ..entmax.activations import FLOAT32_ALPHA_MIN
from ..entmax.normalizers import get_normalizer
from ..entmax.head_alpha import ALPHA_MIN, HeadAlpha

logger = logging.getLogger(__name__)


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

    Fused path: where :func:`~fairseq_sparse.entmax.entmax_attention` runs (CUDA, or
    CPU tensors under Triton's interpreter with ``use_backend("triton")``) and no
    attention weights are asked for, the sparse normalisers go through the fused
    kernel (softmax through PyTorch's SDPA), which never stores the (T, S) scores:
    training, and incremental decoding with its cached keys.  Its projections and
    incremental state are those of fairseq's code, above, for the configurations
    taken here (no ``add_bias_kv`` or ``add_zero_attn``).  ``attn_mask`` is taken
    only as fairseq's future mask, and only where ``causal_attn_mask`` says the
    module is a decoder's self-attention (the fused kernel masks the future itself,
    without reading it).  Attention dropout in training, recording attention, or
    any other mask keep the explicit path.
    """

    def __init__(self, *args, normalizer="alpha_entmax", alpha_init="random", alpha_min=ALPHA_MIN,
                 alpha_lr_scale=1.0, causal_attn_mask=False, **kwargs):
        super().__init__(*args, **kwargs)
        # attn_mask, when given, is fairseq's future mask (decoder self-attention).
        self.causal_attn_mask = causal_attn_mask
        # False keeps the explicit path everywhere (benchmarks compare the two).
        self.use_fused_kernel = True
        # How the fused kernels run (an attention_kernel.KernelConfig; None: the package's).
        self.kernel_config = None
        self._dropout_noted = False
        # A registry entry (fairseq_sparse.entmax.normalizers), resolved once here.
        self.normalizer = get_normalizer(normalizer)
        self.head_alpha = (HeadAlpha(self.num_heads, alpha_init, alpha_min, alpha_lr_scale)
                           if self.normalizer.learned else None)
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
        return self.normalizer(heads, dim=-1, alpha=alpha, alpha_min=self.head_alpha.alpha_min).view_as(scores)

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
        if not (need_weights or before_softmax) and self._fused_applies(query, attn_mask, incremental_state):
            return self._fused_forward(query, key, value, key_padding_mask, incremental_state, static_kv,
                                       causal=attn_mask is not None), None
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

    def _fused_applies(self, query, attn_mask, incremental_state):
        if not self.use_fused_kernel or self.record_attention or self.bias_k is not None or self.add_zero_attn:
            return False
        if not fused_attention.uses_fused_kernel(query):
            return False
        if self.head_alpha is not None and self.head_alpha.alpha_min < FLOAT32_ALPHA_MIN:
            return False  # such alphas need float64 (entmax_alpha), which the fused kernel has not
        if attn_mask is not None and not (self.causal_attn_mask and incremental_state is None):
            return False
        if self.training and self.dropout_module.p > 0:
            if not self._dropout_noted:
                logger.info("attention dropout %g: the fused attention kernel has none, so this module keeps "
                            "the explicit path (it stores the scores) while training", self.dropout_module.p)
                self._dropout_noted = True
            return False
        return True

    def _project(self, query, key, value, key_padding_mask, incremental_state, static_kv):
        """q (bsz, H, T, D), k and v (kv_bsz, H, S, D) and the key padding mask (kv_bsz, S) or
        None: fairseq's ``MultiheadAttention.forward`` up to its scores, incremental state
        included, for the configurations the fused path takes; q is not scaled."""
        tgt_len, bsz, _ = query.size()
        saved_state = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if saved_state is not None and "prev_key" in saved_state and static_kv:
                key = None
        q = self.q_proj(query)
        if self.self_attention:
            k, v = self.k_proj(query), self.v_proj(query)
        elif key is None:
            k = v = None
        else:
            if self.encoder_decoder_attention and self.beam_size > 1 and bsz == key.size(1):
                key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(-1, self.beam_size, key_padding_mask.size(1))[:, 0, :]
            # fairseq projects the encoder output (key) to both in encoder-decoder attention.
            k, v = self.k_proj(key), self.v_proj(key if self.encoder_decoder_attention else value)

        def heads(t):  # (T, batch, E) -> (batch, H, T, D)
            return t.contiguous().view(t.size(0), -1, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q = heads(q)
        k = heads(k) if k is not None else None
        v = heads(v) if v is not None else None
        if saved_state is not None:
            if "prev_key" in saved_state:
                prev_key, prev_value = saved_state["prev_key"], saved_state["prev_value"]
                k = prev_key if static_kv else torch.cat([prev_key, k], dim=2)
                v = prev_value if static_kv else torch.cat([prev_value, v], dim=2)
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask, prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
                batch_size=k.size(0), src_len=k.size(2), static_kv=static_kv)
            saved_state["prev_key"], saved_state["prev_value"] = k, v
            saved_state["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved_state)
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        return q, k, v, (key_padding_mask.bool() if key_padding_mask is not None else None)

    def _fused_forward(self, query, key, value, key_padding_mask, incremental_state, static_kv, causal):
        tgt_len, bsz, _ = query.size()
        q, k, v, key_padding_mask = self._project(query, key, value, key_padding_mask, incremental_state,
                                                  static_kv)
        kv_bsz = k.size(0)
        beam = bsz // kv_bsz
        if beam > 1:  # the beam shares the encoder output: its queries become rows of one key set
            q = q.view(kv_bsz, beam, self.num_heads, tgt_len, self.head_dim).transpose(1, 2) \
                .reshape(kv_bsz, self.num_heads, beam * tgt_len, self.head_dim)
        if self.normalizer.sparse:
            alpha = self.head_alpha() if self.head_alpha is not None else self.normalizer.alpha
            attn = fused_attention.entmax_attention(q, k, v, alpha, causal=causal, key_padding_mask=key_padding_mask,
                                                    scale=self.scaling, kernel=self.kernel_config)
        else:
            attn = _softmax_attention(q, k, v, causal, key_padding_mask, self.scaling)
        if beam > 1:
            attn = attn.view(kv_bsz, self.num_heads, beam, tgt_len, self.head_dim).transpose(1, 2)
        attn = attn.reshape(bsz, self.num_heads, tgt_len, self.head_dim).permute(2, 0, 1, 3)
        return self.out_proj(attn.reshape(tgt_len, bsz, self.embed_dim))


def _softmax_attention(q, k, v, causal, key_padding_mask, scale):
    """Softmax attention by PyTorch's SDPA (flash or memory-efficient kernels on CUDA).
    A query row with no visible key gives zeros, as the entmax kernel does (SDPA gives NaN)."""
    mask = None
    Tq, Tk = q.size(2), k.size(2)
    if key_padding_mask is not None:
        mask = ~key_padding_mask[:, None, None, :]
    if causal and (mask is not None or Tq != Tk):  # SDPA's own causal mask is aligned at the start
        keys = torch.arange(Tk, device=q.device)
        rows = torch.arange(Tq, device=q.device)
        visible = keys[None, :] <= rows[:, None] + (Tk - Tq)
        mask = visible if mask is None else mask & visible
        causal = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    if mask is not None:
        out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return out
