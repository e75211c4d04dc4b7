"""Adaptively sparse attention (Correia, Niculae & Martins, EMNLP 2019): the
``entmax_transformer`` architectures, the ``label_smoothed_entmax`` loss of sparse
output layers and the attention report (``fairseq-sparse-attention-report``)."""

from .. import load_plugin

load_plugin()

from . import entmax_transformer, label_smoothed_entmax  # noqa: E402,F401  (registration)
