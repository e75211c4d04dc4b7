"""The plugin's own checkpoint migrations: what a checkpoint of an older version of this
plugin needs to load and train on under the current one, applied to every checkpoint
fairseq loads (:func:`migrate`, called from fairseq's ``_upgrade_state_dict`` by
:mod:`fairseq_sparse.compat.checkpoints`).  A model's own weight renames stay in its
``upgrade_state_dict_named``, as fairseq's models keep theirs.

- ``--classification-weight`` (``ssvae``) and ``--nll-samples`` (``bitvector_vae``) were
  options of the ``latent_marginalization`` criterion and are now the models' own.
  fairseq rebuilds a criterion from a checkpoint's config (``fairseq-validate``), which
  would fail on the unknown keys, so they are moved to the model's config (or dropped,
  for a model that has no such option).
- The sentence VAE's objectives ``vae``, ``vae_l1`` and ``vae_l2`` are now ``elbo``,
  ``elbo_l1`` and ``elbo_l2`` ("vae" names models): a checkpoint's criterion is renamed.
"""

# {criterion option that moved to a model: the model that owns it now}
MOVED_TO_MODEL = {"classification_weight": "ssvae", "nll_samples": "bitvector_vae"}
# {criterion's former name: its name now}
RENAMED_CRITERIA = {"vae": "elbo", "vae_l1": "elbo_l1", "vae_l2": "elbo_l2"}


def migrate(state):
    """``state`` (a loaded fairseq checkpoint) with every migration applied, in place."""
    return move_options(state)


def move_options(state):
    """Move the options of MOVED_TO_MODEL from a checkpoint's criterion config to its model's,
    and give a criterion of RENAMED_CRITERIA its name now."""
    from omegaconf import open_dict

    cfg = state.get("cfg")
    criterion = cfg.get("criterion") if cfg is not None else None
    if criterion is not None and criterion.get("_name") in RENAMED_CRITERIA:
        with open_dict(criterion):
            criterion["_name"] = RENAMED_CRITERIA[criterion["_name"]]
    args = state.get("args")
    if getattr(args, "criterion", None) in RENAMED_CRITERIA:
        args.criterion = RENAMED_CRITERIA[args.criterion]
    if criterion is None or not any(option in criterion for option in MOVED_TO_MODEL):
        return state
    model = cfg.get("model")
    with open_dict(criterion):
        for option, owner in MOVED_TO_MODEL.items():
            if option not in criterion:
                continue
            value = criterion.pop(option)
            if model is not None and model.get("_name") == owner and option not in model:
                with open_dict(model):
                    model[option] = value
    return state
