"""Registered fairseq criteria (importing registers them)."""

from . import label_smoothed_entmax, hsvae, latent_marginalization, mat_vae, vae, vae_l1, vae_l2  # noqa: F401
