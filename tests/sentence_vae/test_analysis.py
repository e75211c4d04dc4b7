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


def test_figures_that_seem_to_contradict_each_other_are_explained():
    """`always_zero: 32` beside 0.47 bits, and `active_units: 0` beside a length R2 of 0.29,
    were printed without a word on how both hold."""
    from fairseq_sparse.sentence_vae.analysis import notes

    said = notes({"active_units": 0, "length_probe_r2_means": 0.29, "largest_mean_variance": 0.004,
                  "spike_pattern": {"always_zero": 32, "information_bits": 0.47}})
    assert len(said) == 2
    assert said[0].startswith("active_units 0 beside a length probe R2 of 0.29") and "0.004" in said[0]
    assert said[1].startswith("always_zero 32 beside 0.47 bits decided by the sentence")
    assert notes({"active_units": 3, "length_probe_r2_means": 0.29, "largest_mean_variance": 0.5}) == []


def test_gamma_class_keeps_the_scale_of_a_fraction(tmp_path):
    """A constant 1 was auto-scaled to a colour bar of 0.90 to 1.10."""
    import numpy as np

    from fairseq_sparse.sentence_vae.figures import heat_map

    fig = heat_map(np.ones((3, 4)), tmp_path / "g.png", "t", "x", "y", "fraction", limits=(0, 1))
    assert fig.axes[0].images[0].get_clim() == (0, 1)
