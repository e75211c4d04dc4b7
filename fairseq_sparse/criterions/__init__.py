"""Registered fairseq criteria (importing registers them)."""

from . import label_smoothed_entmax, latent_marginalization, vae, vae_l1, vae_l2  # noqa: F401
