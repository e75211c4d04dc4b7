"""benchmarks/timing.py, which the attention benchmarks time with: every round times each
variant once in a rotating order, a variant that fails is reported and left out, and a
ratio is the median of the rounds' ratios."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from timing import interleaved_ms, paired_ratio  # noqa: E402


def test_rounds_rotate_and_failures_are_left_out():
    calls = []

    def variant(name, fail_at=None):
        def run():
            calls.append(name)
            if fail_at is not None and calls.count(name) >= fail_at:
                raise RuntimeError(f"{name} failed")
        return run

    fns = {"a": variant("a"), "refused": variant("refused", fail_at=1), "b": variant("b"),
           "later": variant("later", fail_at=4), "c": variant("c")}
    times = interleaved_ms(fns, repeats=5, min_ms=0)
    assert isinstance(times["refused"], RuntimeError) and isinstance(times["later"], RuntimeError)
    assert all(len(times[name]) == 5 and all(ms >= 0 for ms in times[name]) for name in "abc")
    # First call and one timed call each (refused: its first only), then rounds over the rest.
    warm_up, rounds = calls[:9], calls[9:]
    assert warm_up == ["a", "a", "refused", "b", "b", "later", "later", "c", "c"]
    # Round r starts at the (r mod 4)-th of the variants that survived their first call;
    # "later" fails in round 1 (its 4th call) and is skipped from then on.
    assert rounds == ["a", "b", "later", "c",
                      "b", "later", "c", "a",
                      "c", "a", "b",
                      "c", "a", "b",
                      "a", "b", "c"]


def test_paired_ratio_is_the_median_of_the_rounds_ratios():
    baseline = [1.0, 2.0, 4.0, 8.0, 16.0]  # a machine that slows down round by round
    samples = [b * r for b, r in zip(baseline, [3.0, 1.0, 2.0, 5.0, 4.0])]
    assert paired_ratio(samples, baseline) == pytest.approx((3.0, 2.0, 4.0))
    # The ratio of the medians would mix rounds: 16 / 4 = 4, not the typical round's 3.
    assert paired_ratio([2.0], [4.0]) == (0.5, 0.5, 0.5)
