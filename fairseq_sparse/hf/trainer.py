"""The conversion recipe inside ``transformers.Trainer``: the alphas' own learning rate,
the floor schedule as a ``TrainerCallback``, and the heads' mean alpha and attention
density per layer in the Trainer's logs (console, ``log_history``, tensorboard)::

    hf.sparsify(model, "alpha_entmax", floor=AlphaFloor(target=1.5, updates=500))
    optimizer = torch.optim.AdamW(hf.parameter_groups(model, lr=5e-5, alpha_lr=1e-2))
    trainer = Trainer(model=model, args=args, train_dataset=train, optimizers=(optimizer, None))
    SparseAttentionCallback(probe=tokenizer(sentences, padding=True, return_tensors="pt")).attach(trainer)
    trainer.train()

Under ``torchrun`` or ``accelerate launch`` every process moves its floor by the same
global step, so the ranks' models stay identical, as data parallelism needs.

Imports torch and transformers, never fairseq.
"""

import warnings

import torch
from transformers import DefaultFlowCallback, TrainerCallback

from . import (attends_causally, attention_density_counts, attention_modules, evaluating, head_alpha_of,
               head_alphas, set_num_updates, warn_if_alphas_frozen)

# The prefix of the metrics the callback adds to the Trainer's logs.
PREFIX = "sparse_attention"


class SparseAttentionCallback(TrainerCallback):
    """Moves the floor of every head with an :class:`~fairseq_sparse.entmax.AlphaFloor` at
    the start of each step (``state.global_step`` updates done), and at each logging step
    adds to the logs ``sparse_attention/floor``, ``sparse_attention/alpha_layer_<i>`` (the
    mean alpha of layer i's heads) and, given a ``probe`` batch (the model's inputs with an
    ``attention_mask``), ``sparse_attention/density_layer_<i>``: the share of nonzero
    weights among the (query, key) pairs of real tokens, measured on the probe in eval mode.

    Add it with :meth:`attach`, which places it before the reporting integrations
    (tensorboard, ...) so that they receive its metrics; given in ``Trainer(callbacks=...)``
    it still moves the floor and logs to the console and ``log_history``, but the
    integrations before it in the list miss its metrics (a warning says so).
    """

    def __init__(self, probe=None):
        self.probe = probe
        self.attached = False

    def attach(self, trainer):
        """Add to ``trainer`` right after its flow callback, before every reporting one."""
        callbacks = trainer.callback_handler.callbacks
        place = next((i + 1 for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)), 0)
        callbacks.insert(place, self)
        self.attached = True
        return self

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.attached and args.report_to not in ([], ["none"], "none", None):
            warnings.warn("SparseAttentionCallback was given in Trainer(callbacks=...), after the reporting "
                          f"integrations ({args.report_to}), which will not see its metrics; add it with "
                          "SparseAttentionCallback(...).attach(trainer) instead", stacklevel=2)
        warn_if_alphas_frozen(model)
        set_num_updates(model, state.global_step)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        set_num_updates(model, state.global_step)

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if logs is None or "loss" not in logs:  # training logs only, not evaluation or the final summary
            return
        metrics = self.metrics(model)
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)

    @torch.no_grad()
    def metrics(self, model):
        """{name: value} of the heads' floor, mean alpha per layer and (with a probe) density."""
        metrics = {}
        floor = next((head_alpha_of(m).alpha_floor for m in attention_modules(model).values()
                      if head_alpha_of(m) is not None), None)
        if floor is not None:
            metrics[f"{PREFIX}/floor"] = float(floor)
        for i, alpha in enumerate(head_alphas(model).values()):
            metrics[f"{PREFIX}/alpha_layer_{i}"] = float(alpha.mean())
        if self.probe is not None:
            device = next(model.parameters()).device
            batch = {k: v.to(device) for k, v in self.probe.items() if k != "labels"}
            with evaluating(model, weights=True):
                attentions = model(**batch, output_attentions=True).attentions
            nonzero, allowed = attention_density_counts(attentions, batch["attention_mask"], attends_causally(model))
            for i, density in enumerate((nonzero / allowed).tolist()):
                metrics[f"{PREFIX}/density_layer_{i}"] = density
        return metrics
