"""The latent_marginalization criterion's options: a setting the estimator would turn into a
crash or a NaN mid-training is refused up front, by its option name (each estimator
checks the options it takes)."""

import re

import pytest

from fairseq_sparse.latent import BitVector, Categorical, build_estimator_from_options
from fairseq_sparse.latent.criterion import LatentMarginalizationConfig


@pytest.mark.parametrize("estimator, setting, space, message", [
    ("topk_sparsemax", {"topk": 0}, Categorical(10), "--topk 0: must be at least 1"),
    ("sum_and_sample", {"summed": -1}, Categorical(10), "--summed -1: must be at least 1"),
    ("unordered_set", {"set_size": 9}, Categorical(10), "--set-size 9: must be 1 to 6"),
    ("unordered_set", {"set_size": 0}, Categorical(10), "--set-size 0: must be 1 to 6"),
    ("sparsemap_budget", {"budget": 20}, BitVector(8), "--budget 20: must be 0 (half the bits) to the 8 latent bits"),
    ("sparsemap_budget", {"budget": -2}, BitVector(8), "--budget -2: must be 0"),
    ("sfe", {"baseline_decay": 1.5}, Categorical(10), "--baseline-decay 1.5: must be in [0, 1]"),
    ("gumbel", {"gumbel_min_temperature": 0.0}, Categorical(10), "--gumbel-min-temperature 0.0: must be above 0"),
    ("st_gumbel", {"gumbel_temperature": -1.0}, BitVector(8), "--gumbel-temperature -1.0: must be above 0"),
    ("gumbel", {"gumbel_anneal_rate": -1e-4}, Categorical(10), "--gumbel-anneal-rate -0.0001: must be at least 0"),
])
def test_bad_settings_are_refused_by_option_name(estimator, setting, space, message):
    cfg = LatentMarginalizationConfig(estimator=estimator, **setting)
    with pytest.raises(ValueError, match=re.escape(message)):
        build_estimator_from_options(estimator, cfg, space)


@pytest.mark.parametrize("estimator, setting, space", [
    ("topk_sparsemax", {"topk": 1}, Categorical(10)),
    ("unordered_set", {"set_size": 6}, Categorical(10)),
    ("sparsemap_budget", {"budget": 0}, BitVector(8)),  # 0: half the bits
    ("sparsemap_budget", {"budget": 8}, BitVector(8)),
    ("nvil", {"baseline_decay": 0.0}, Categorical(10)),
])
def test_settings_at_the_limits_build(estimator, setting, space):
    cfg = LatentMarginalizationConfig(estimator=estimator, **setting)
    built = build_estimator_from_options(estimator, cfg, space)
    for argument, value in setting.items():
        assert getattr(built.options, argument) == value
        if argument == "budget":
            assert built.space.budget == (value or space.bits // 2)
        elif argument == "baseline_decay":
            assert built.centre.decay == value
        else:
            assert getattr(built, argument) == value


def test_criterion_flushes_denormals_which_slowed_cpu_products_many_times():
    from types import SimpleNamespace

    import torch

    from fairseq_sparse.latent.criterion import LatentMarginalizationCriterion

    tiny = torch.tensor([1e-30])
    torch.set_flush_denormal(False)
    try:
        assert (tiny * 1e-10).item() > 0  # a denormal, kept
        LatentMarginalizationCriterion(LatentMarginalizationConfig(estimator="gumbel"),
                                       SimpleNamespace(latent_space=Categorical(10)))
        assert (tiny * 1e-10).item() == 0  # flushed
        assert (tiny * 1e-5).item() > 0  # normal numbers are untouched
    finally:
        torch.set_flush_denormal(False)


def test_code_entropy_is_logged_in_bits_even_when_the_code_has_collapsed():
    """A collapsed code has H(q) = 0: the metric must still appear (a sum of 0 is not 'absent')."""
    import math

    import torch
    from fairseq import metrics

    from fairseq_sparse.latent.criterion import LatentMarginalizationCriterion

    logs = [{"sample_size": 2, "estimated": 2, "decoder_calls": torch.tensor(2.0), "code_entropy": torch.tensor(0.0),
             "score_abs": torch.tensor(60.0)},
            {"sample_size": 2, "estimated": 2, "decoder_calls": torch.tensor(2.0), "code_entropy": torch.tensor(0.0),
             "score_abs": torch.tensor(20.0)}]
    with metrics.aggregate() as agg:
        LatentMarginalizationCriterion.reduce_metrics(logs)
    assert agg.get_smoothed_value("code_entropy_bits") == 0
    assert agg.get_smoothed_value("score_abs") == 20  # (60 + 20) / 4 images
    assert "gradient_alignment" not in agg.get_smoothed_values()  # no training batch: not logged
    logs[0]["code_entropy"] = torch.tensor(4 * math.log(2))  # 2 bits, 2 images
    for log, alignment in zip(logs, (0.9, 0.3)):
        log.update(score_shared=torch.tensor(8.0), score_spread=torch.tensor(2.0), positive_bits=torch.tensor(6),
                   gradient_alignment=torch.tensor(alignment), gradient_batches=1)
    with metrics.aggregate() as agg:
        LatentMarginalizationCriterion.reduce_metrics(logs)
    assert agg.get_smoothed_value("code_entropy_bits") == 1.0
    assert agg.get_smoothed_value("score_shared") == 4 and agg.get_smoothed_value("score_spread") == 1
    assert agg.get_smoothed_value("positive_bits") == 3
    assert agg.get_smoothed_value("gradient_alignment") == pytest.approx(0.6)  # a mean over batches


def test_each_estimator_has_the_command_line_s_defaults_and_one_name_per_option():
    """An estimator built in Python is the one the command line builds: each constructor
    argument's default is its option's (SumAndSample's k was 1 in Python, 10 on the command
    line); the old names of renamed arguments and options are refused naming the new ones."""
    import dataclasses
    import inspect

    from fairseq_sparse.latent import ESTIMATORS, build_estimator
    from fairseq_sparse.latent.criterion import LatentMarginalizationConfig
    from fairseq_sparse.latent.estimators import EstimatorOptions

    defaults = {f.name: f.default for f in dataclasses.fields(EstimatorOptions)}
    offered = {f.name: (f.default, f.metadata.get("help")) for f in dataclasses.fields(LatentMarginalizationConfig)}
    taken = set()
    for name, cls in ESTIMATORS.items():
        signature = inspect.signature(cls.__init__).parameters
        for f in dataclasses.fields(cls.Options):
            # The constructor argument is the option, by name and default; the command line offers it alike.
            assert signature[f.name].default == f.default == defaults[f.name], (name, f.name)
            assert offered[f.name] == (f.default, f.metadata["help"]), (name, f.name)
            taken.add(f.name)
        assert build_estimator(name, **({} if name not in ("sparsemap", "sparsemap_budget") else
                                        {"space": BitVector(4)})).options == cls.Options()
    assert taken == set(defaults), "every command-line option is some estimator's"
    assert build_estimator("sum_and_sample").summed == defaults["summed"] == 10
    with pytest.raises(TypeError, match=r"SumAndSample takes no argument 'topk': it is now summed= \(--summed\)"):
        build_estimator("sum_and_sample", topk=3)
    with pytest.raises(TypeError, match=r"UnorderedSet takes no argument 'topk': it is now set_size="):
        build_estimator("unordered_set", topk=3)


def test_topk_with_sum_and_sample_names_summed(tmp_path):
    from tests.conftest import REPO, run_cli

    proc = run_cli("fairseq-train", "--user-dir", REPO / "fairseq_sparse", "--task", "ssvae", "--arch", "ssvae",
                   "--criterion", "latent_marginalization", "--estimator", "sum_and_sample", "--topk", "3",
                   "--dataset", "digits", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "64",
                   "--max-update", "1", "--cpu", "--no-save", "--num-workers", "0", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "--topk 3: --topk is the structures topk_sparsemax keeps; the categories sum_and_sample sums are --summed" \
        in proc.stderr
