"""Adaptively sparse attention (Correia, Niculae & Martins, EMNLP 2019): the
``entmax_transformer`` architectures and the decoder-only ``entmax_transformer_lm``, the
``label_smoothed_entmax`` loss of sparse output layers, the ``length_extrapolation``
synthetic tasks and the attention report (``fairseq-sparse-attention-report``)."""

from .. import compat

compat.apply()  # before the line's modules import what it fixes

from . import entmax_lm, entmax_transformer, label_smoothed_entmax, length_task  # noqa: E402,F401  (registration)
