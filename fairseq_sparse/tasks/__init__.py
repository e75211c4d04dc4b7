"""Registered fairseq tasks (importing registers them)."""

from . import ape, bitvector_vae, signaling_game, ssvae  # noqa: F401
