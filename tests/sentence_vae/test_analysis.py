"""fairseq_sparse.sentence_vae.analysis's parts, on codes built to hold what is probed
(the whole analysis runs in tests/sentence_vae/test_analysis_command.py)."""

import torch

from fairseq_sparse.sentence_vae.analysis import length_probe_r2


def test_length_probe_reads_length_off_a_code_that_holds_it():
    """The length probe's R^2: near 1 for codes that carry the length (plus noise), near 0 or
    below for codes that do not."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 40, (1200,), generator=gen)
    noise = torch.randn(1200, 8, generator=gen)
    holds = noise.clone()
    holds[:, 3] = (lengths.float() - 20) / 10 + 0.05 * noise[:, 3]
    train, test = slice(0, 1000), slice(1000, None)
    assert length_probe_r2(holds[train], lengths[train], holds[test], lengths[test], 20, 1) > 0.95
    assert length_probe_r2(noise[train], lengths[train], noise[test], lengths[test], 20, 1) < 0.1
