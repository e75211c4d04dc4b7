"""Registered fairseq models (importing registers them)."""

from . import (  # noqa: F401
    bert_ape,
    bert_sentence_vae,
    bitvector_vae,
    dual_source_transformer,
    entmax_transformer,
    sentence_vae,
    signaling_game,
    ssvae,
)
