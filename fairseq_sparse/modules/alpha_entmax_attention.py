"""Multi-head attention whose heads are normalised by softmax, sparsemax, 1.5-entmax
or alpha-entmax with a learnable alpha per head (Correia, Niculae & Martins,
"Adaptively Sparse Transformers", EMNLP 2019)."""

import torch
from fairseq.modules import MultiheadAttention

from ..entmax.attention import AttentionOptions, attend
from ..entmax.head_alpha import ALPHA_MIN, HeadAlpha
from ..entmax.length_scale import LengthScale, check_length_scale
from ..entmax.positions import alibi_slopes, check_positions, rotate, unpositioned_heads
from ..entmax.normalizers import get_normalizer


class AlphaEntmaxAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` with a pluggable normaliser.

    The projections, key padding, incremental state (cached keys, beam reordering) and
    the encoder output shared across the beam are fairseq's, kept here as fairseq keeps
    them (``_project``); the attention itself is :func:`fairseq_sparse.entmax.attend`, the
    package's one entry point, which decides between the fused kernels and the explicit
    path.  fairseq's ``attn_mask`` is its future mask where ``causal_attn_mask`` says the
    module is a decoder's self-attention (passed as ``causal``, so the fused kernel masks
    the future itself), and any other mask elsewhere.  ``add_bias_kv`` and
    ``add_zero_attn`` are refused: no architecture of the package uses them.

    ``positions`` (:mod:`~fairseq_sparse.entmax.positions`: none, alibi, rope, nape) and
    ``length_scale`` (:mod:`~fairseq_sparse.entmax.length_scale`: none, log, adaptive, adaptive_paper) serve
    self-attention, for length extrapolation: RoPE rotates the queries and the keys here, at
    their positions after the cached keys, before the keys are cached; ALiBi's slopes and
    the length scale (bound to this layer's input) go to ``attend``.

    fairseq would otherwise send every call without incremental state (all of training)
    to ``F.multi_head_attention_forward``, which has the softmax built in and would
    silently bypass any other normaliser; its switch for leaving that fast path,
    ``skip_embed_dim_check``, is set, and the embedding-size check it also skips is done
    in ``forward`` instead.

    ``shares``: another attention module whose projections and per-head alphas this one
    uses as its own (the same modules: one set of parameters, saved under both names), for
    models that tie attention across layers or sites; its shapes must be this one's.
    """

    def __init__(self, *args, normalizer="alpha_entmax", alpha_init="random", alpha_min=ALPHA_MIN,
                 alpha_lr_scale=1.0, alpha_floor=None, causal_attn_mask=False, positions="none", length_scale="none",
                 shares=None, **kwargs):
        for option in ("add_bias_kv", "add_zero_attn"):
            if kwargs.get(option):
                raise ValueError(f"AlphaEntmaxAttention: {option} is not supported")
        super().__init__(*args, **kwargs)
        # attn_mask, when given, is fairseq's future mask (decoder self-attention).
        self.causal_attn_mask = causal_attn_mask
        # False keeps the explicit path everywhere (benchmarks compare the two).
        self.use_fused_kernel = True
        # How the fused kernels run (a kernels.KernelConfig; None: the package's).
        self.kernel_config = None
        # A registry entry (fairseq_sparse.entmax.normalizers), resolved once here.
        self.normalizer = get_normalizer(normalizer)
        self.head_alpha = (HeadAlpha(self.num_heads, alpha_init, alpha_min, alpha_lr_scale, alpha_floor)
                           if self.normalizer.learned else None)
        self.skip_embed_dim_check = True
        check_positions(positions)
        if (positions != "none" or check_length_scale(length_scale) != "none") and not self.self_attention:
            raise ValueError("AlphaEntmaxAttention: positions and length scales serve self-attention only")
        self.positions = positions
        slopes = alibi_slopes(self.num_heads, positions)
        self.register_buffer("alibi_slopes", slopes, persistent=False)
        self.length_scale = None if length_scale == "none" else LengthScale(
            length_scale, self.num_heads, self.embed_dim, unpositioned_heads(self.num_heads, positions))
        # Set by analysis code: keep the last attention probabilities (B, H, T, S).
        self.record_attention = False
        self.last_attention = None
        if shares is not None:
            self._use_parameters_of(shares)

    def _use_parameters_of(self, other):
        """Take ``other``'s projections and per-head alphas as this module's (at construction:
        ``shares``)."""
        for name in ("q_proj", "k_proj", "v_proj", "out_proj", "head_alpha"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if (mine is None) != (theirs is None) or (
                    mine is not None and [p.shape for p in mine.parameters()] != [p.shape for p in theirs.parameters()]):
                raise ValueError(f"AlphaEntmaxAttention: cannot share {name} with a module of another shape "
                                 "or normaliser")
            setattr(self, name, theirs)

    def alpha(self, initial=False):
        """Current alpha of each head, shape (num_heads,), or with ``initial`` its alpha at
        initialisation (:class:`HeadAlpha`); fixed for the fixed normalisers."""
        if self.head_alpha is not None:
            return self.head_alpha.initial_alpha if initial else self.head_alpha()
        return torch.full((self.num_heads,), self.normalizer.alpha, device=self.q_proj.weight.device)

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
        if before_softmax:  # fairseq's masked scores and values
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=False, static_kv=static_kv,
                                   attn_mask=attn_mask, before_softmax=True)
        q, k, v, key_padding_mask = self._project(query, key, value, key_padding_mask, incremental_state, static_kv)
        kv_bsz = k.size(0)
        beam = bsz // kv_bsz
        if beam > 1:  # the beam shares the encoder output: its queries become rows of one key set
            q = q.view(kv_bsz, beam, self.num_heads, tgt_len, self.head_dim).transpose(1, 2) \
                .reshape(kv_bsz, self.num_heads, beam * tgt_len, self.head_dim)
        causal, mask = False, None
        if attn_mask is not None:
            if self.causal_attn_mask:
                causal = True
            else:  # (T, S), added to the scores by fairseq; a bool one is True where masked
                mask = (~attn_mask if attn_mask.dtype == torch.bool else attn_mask)[None, None]
        dropping = self.training or self.dropout_module.apply_during_inference
        weighed = need_weights or self.record_attention
        length_scale = None
        if self.length_scale is not None:
            inputs = query.transpose(0, 1)  # (bsz, T, E): the layer input, which the adaptive scale reads
            length_scale = lambda seen: self.length_scale(seen, inputs)  # noqa: E731
        options = AttentionOptions(causal=causal, scale=self.scaling,
                                   dropout=self.dropout_module.p if dropping else 0.0, length_scale=length_scale,
                                   alibi=self.alibi_slopes, fused=self.use_fused_kernel, kernel=self.kernel_config)
        attn, probs = attend(
            q, k, v, self.normalizer, alpha=self.head_alpha() if self.head_alpha is not None else None,
            alpha_min=self.head_alpha.alpha_min if self.head_alpha is not None else ALPHA_MIN, options=options,
            key_padding_mask=key_padding_mask, mask=mask, need_weights=weighed)
        if beam > 1:
            attn = attn.view(kv_bsz, self.num_heads, beam, tgt_len, self.head_dim).transpose(1, 2)
            if probs is not None:
                probs = probs.view(kv_bsz, self.num_heads, beam, tgt_len, -1).transpose(1, 2)
        attn = attn.reshape(bsz, self.num_heads, tgt_len, self.head_dim).permute(2, 0, 1, 3)
        attn = self.out_proj(attn.reshape(tgt_len, bsz, self.embed_dim))
        if probs is not None:
            probs = probs.reshape(bsz, self.num_heads, tgt_len, -1)
            if self.record_attention:
                self.last_attention = probs.detach()
        weights = None
        if need_weights:
            weights = probs.transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return attn, weights

    def _project(self, query, key, value, key_padding_mask, incremental_state, static_kv):
        """q (bsz, H, T, D), k and v (kv_bsz, H, S, D) and the key padding mask (kv_bsz, S) or
        None: fairseq's ``MultiheadAttention.forward`` up to its scores, incremental state
        included (without ``add_bias_kv`` and ``add_zero_attn``); q is not scaled."""
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
        if self.positions == "rope":  # at the positions after the cached keys
            start = saved_state["prev_key"].size(2) if saved_state is not None and "prev_key" in saved_state else 0
            q, k = rotate(q, start), rotate(k, start)
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
