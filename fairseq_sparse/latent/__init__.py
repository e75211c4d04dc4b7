"""Latent-variable estimators: one registry shared by every experiment, the latent
spaces they work in, and SparseMAP."""

from .estimators import ESTIMATORS, Estimate, Estimator, build_estimator, register_estimator, topk_sparsemax  # noqa: F401
from .estimators import unordered_set_probability  # noqa: F401
from .sparsemap import active_set, sparsemap  # noqa: F401
from .spaces import BitVector, Categorical  # noqa: F401
