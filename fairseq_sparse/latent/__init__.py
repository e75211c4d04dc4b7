"""Sparse marginalisation of discrete and structured latent variables (Correia, Niculae,
Aziz & Martins, NeurIPS 2020): the estimator registry, the latent spaces, SparseMAP,
the ``latent_marginalization`` criterion and the three experiments (``ssvae``,
``signaling_game``, ``bitvector_vae``: a task and a model each)."""

from .. import compat

compat.apply()  # before the line's modules import what it fixes

from .estimators import ESTIMATORS, Estimate, Estimator, build_estimator, register_estimator, topk_sparsemax  # noqa: E402,F401,E501
from .estimators import EstimatorOptions, build_estimator_from_options, unordered_set_probability  # noqa: E402,F401
from .sparsemap import active_set, sparsemap  # noqa: E402,F401
from .spaces import BitVector, Categorical  # noqa: E402,F401

from . import (  # noqa: E402,F401  (registration)
    bitvector_vae_model,
    bitvector_vae_task,
    criterion,
    signaling_game_model,
    signaling_game_task,
    ssvae_model,
    ssvae_task,
)
