"""Registered fairseq tasks (importing registers them)."""

from . import ape, bitvector_vae, sentence_vae, signaling_game, ssvae  # noqa: F401
