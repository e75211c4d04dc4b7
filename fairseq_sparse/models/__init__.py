"""Registered fairseq models (importing registers them)."""

from . import entmax_transformer  # noqa: F401
