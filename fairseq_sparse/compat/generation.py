"""A hypothesis that no token can continue ends: generation with a sparse output layer
always finishes, instead of failing with fairseq's bare ``AssertionError: 200 < 200``.

At the length limit fairseq's ``SequenceGenerator`` keeps only end of sentence, giving
every other token log-probability -inf, and finalises only hypotheses whose end has a
finite score.  Under a sparse output layer (``--output-normalizer sparsemax`` or
``entmax15``) end of sentence is often outside the support, log-probability -inf as
well: no hypothesis can end, and the generator's assertion fails, at any beam.

Each generator's search is given, for a hypothesis whose every token has score -inf,
end of sentence at ``CUT_OFF`` instead: finite, so the hypothesis is finalised, and far
below any score a token of the support gives, so it ranks below every hypothesis that
ended by itself.  Nothing else changes: a row with any finite score (every step before
the limit, and every step of a softmax model) is left as it is.
"""

import functools

import torch
from fairseq import sequence_generator

# The log-probability given to end of sentence where nothing else could follow.
CUT_OFF = -1e4

_original_init = sequence_generator.SequenceGenerator.__init__


def _ending(step, eos):
    @functools.wraps(step)
    def search_step(i, lprobs, *args, **kwargs):
        stuck = torch.isneginf(lprobs).all(-1)
        if bool(stuck.any()):
            lprobs = lprobs.clone()
            lprobs[..., eos] = torch.where(stuck, torch.full_like(lprobs[..., eos], CUT_OFF), lprobs[..., eos])
        return step(i, lprobs, *args, **kwargs)

    return search_step


@functools.wraps(_original_init)
def _init(self, *args, **kwargs):
    _original_init(self, *args, **kwargs)
    self.search.step = _ending(self.search.step, self.eos)


def apply():
    if sequence_generator.SequenceGenerator.__init__ is not _init:
        sequence_generator.SequenceGenerator.__init__ = _init
