"""Sparse sentence VAEs (Prokhorov, Li, Shareghi & Collier 2021): the ``sentence_vae``
task, the GRU and BERT-encoder models, the objectives (``elbo``, ``elbo_l1``, ``elbo_l2``,
``mat_vae``, ``hsvae``) and the average Hoyer measure of code sparsity."""

from .. import compat

compat.apply()  # before the line's modules import what it fixes

from ..checkpoint_migrations import RENAMED_CRITERIA  # noqa: E402
from . import bert_sentence_vae, elbo, hsvae, mat_vae, regularized, sentence_vae, task  # noqa: E402,F401

for _former, _now in RENAMED_CRITERIA.items():  # the objectives' former names, refused by their names now
    elbo.refuse_former_name(_former, _now)
