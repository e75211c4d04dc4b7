"""Registered fairseq criteria (importing registers them)."""

from . import label_smoothed_entmax  # noqa: F401
