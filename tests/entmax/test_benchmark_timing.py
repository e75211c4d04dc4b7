"""benchmarks/timing.py, which the attention benchmarks time with: every round times each
variant once in a rotating order, a variant that fails is reported and left out, and a
ratio is the median of the rounds' ratios."""


import pytest
import torch

from timing import interleaved_ms, paired_ratio

from tests.conftest import run_script

# The training benchmark's model at one layer each side, 32 wide, 2 heads.
SMALL_MODEL = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
               "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 "
               "--decoder-attention-heads 2")


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


def test_training_benchmark_runs_every_variant_in_rounds_on_cpu():
    """benchmarks/bench_training_gpu.py with --device cpu and a one-layer model: the six
    models, the fused per-head one again with its scores recomputed on every pass, and one
    more at the tiles of --tiles, train in interleaved rounds and each gets
    its row, the stock transformer's ratio to itself 1.00 (CPU times mean nothing; the GPU
    runs give the figures); --profile gives each a row of its own, the top host ops of the
    stock and the alpha-entmax models, and the time of one attention call per path."""
    proc = run_script("benchmarks/bench_training_gpu.py", "--device", "cpu", "--steps", "2", "--warmup", "0",
                      "--tokens", "64", "--length", "8", "--vocab", "64", "--model-args", SMALL_MODEL,
                      "--profile", "1", "--tiles", "16,16,1", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    timed, profiled = proc.stdout.split("Profiled, 1 steps")
    profiled, calls = profiled.split("One attention call")
    rows = [line.split(" | ") for line in timed.splitlines() if line.startswith("| ") and "---" not in line]
    names = ["stock transformer (softmax)", "softmax, fused (SDPA)", "1.5-entmax, fused", "1.5-entmax, explicit",
             "alpha-entmax, fused", "alpha-entmax, explicit", "alpha-entmax, fused, scores recomputed each pass",
             "alpha-entmax, fused, 16 x 16 tiles, 1 warps"]
    assert [row[0].lstrip("| ") for row in rows[1:]] == names
    assert rows[1][2] == "1.00 (1.00-1.00)"
    assert all(float(row[1].replace(",", "")) > 0 for row in rows[1:])
    rows = [line.split(" | ") for line in profiled.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0].lstrip("| ") for row in rows[1:]] == names
    assert all(float(row[1]) > 0 and row[2:4] == ["–", "–"] for row in rows[1:])  # no GPU: no busy time
    assert "stock transformer (softmax): the ops with the most host time" in profiled
    assert "alpha-entmax, fused: the ops with the most host time" in profiled
    assert "aten::mm" in profiled
    rows = [line.split(" | ") for line in calls.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0].lstrip("| ") for row in rows[1:]] == [
        "SDPA", "1.5-entmax, fused", "1.5-entmax, explicit", "alpha-entmax per head, fused",
        "alpha-entmax per head, explicit"]
    assert all(0 < float(row[1].replace(",", "")) <= float(row[2].rstrip(" |").replace(",", "")) for row in rows[1:])
    assert "CPU (a check of the script)" in proc.stderr


def test_training_benchmark_settings_reach_every_kernel_launch(monkeypatch):
    """bench_training_gpu.py's kernel configurations (--tiles; one_tile=False for the scores
    recomputed on every pass), set on a model's attention modules: every fused kernel
    launched in that model's training step (forward and backward, under Triton's
    interpreter) gets them, and a model without them the package's."""
    pytest.importorskip("triton")
    import bench_training_gpu as bench
    import fairseq_sparse
    from fairseq_sparse.entmax import kernels, use_backend
    from fairseq_sparse.entmax.kernels import backward_pass, forward_pass

    if not kernels.INTERPRET:
        pytest.skip("needs TRITON_INTERPRET=1 (tests/conftest.py sets it)")
    fairseq_sparse.load_plugin()
    variant = next(row for row in bench.VARIANTS if row[0] == "alpha-entmax, fused")
    model = bench.build_variants(SMALL_MODEL.split(), 32, [variant])[variant[0]]
    dictionary = model.decoder.dictionary
    data = bench.batches(1, 16, 6, len(dictionary), dictionary.pad(), dictionary.eos(),
                         torch.Generator().manual_seed(0), "cpu")
    seen = []

    def record(real):  # the launches' tiles, from the configuration each launch is given (its last argument)
        def recorded(*args):
            seen.append((args[-1].tiles, args[-1].one_tile))
            return real(*args)
        return recorded

    monkeypatch.setattr(forward_pass, "forward_blocks", record(forward_pass.forward_blocks))
    monkeypatch.setattr(backward_pass, "blocks", record(backward_pass.blocks))
    with use_backend("triton"):
        bench.trainer(bench.with_kernel(model, kernels.KernelConfig(tiles=(32, 16, 2))), data,
                      dictionary.pad(), "cpu")()
        launched = len(seen)
        bench.trainer(bench.with_kernel(model, kernels.KernelConfig(one_tile=False)), data,
                      dictionary.pad(), "cpu")()
        bench.trainer(bench.with_kernel(model, None), data, dictionary.pad(), "cpu")()
    # 3 attention sites (encoder, decoder, cross) x forward and backward; fairseq's alignment
    # layer asks the last cross-attention for its weights, so that one stays explicit.
    assert launched >= 4 and set(seen[:launched]) == {((32, 16, 2, None), True)}
    assert len(seen) == 3 * launched and set(seen[launched:2 * launched]) == {(None, False)}
    assert set(seen[2 * launched:]) == {(None, True)}


def test_attention_op_count_runs_with_stubs_shaped_like_the_kernels():
    """benchmarks/count_attention_ops.py: its stand-ins take the Triton entry points' own
    parameters (so a changed kernel signature fails here, not silently there), and each
    path gets its row: the fused ones with 4 Triton launches, the others none.  Our
    attention reads nothing back to the host (on a GPU: waits for it), on either path (a
    learned alpha's bound is the module's, never read); over a training step, only
    fairseq's own remain.
    --step-host times each model's training step on the host."""
    import inspect

    import count_attention_ops
    from fairseq_sparse.entmax import kernels

    forward, backward = count_attention_ops.stub_kernels([0])
    assert list(inspect.signature(forward).parameters) == list(inspect.signature(kernels.forward).parameters)
    assert list(inspect.signature(backward).parameters) == list(inspect.signature(kernels.backward).parameters)
    proc = run_script("benchmarks/count_attention_ops.py", "--length", "6", "--batch", "3", "--embed-dim", "16",
                      "--heads", "2", "--step", "--step-host", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tables, host = proc.stdout.split("host time of a training step")
    rows = [[cell.strip() for cell in line.strip("| ").split(" | ")] for line in tables.splitlines()
            if line.startswith("| ") and "---" not in line]
    calls, step = rows[1:7], {name: int(n) for name, n in rows[8:]}
    # --step-host: each training benchmark model's host time per step, a ratio to the stock one's.
    timed = [[cell.strip() for cell in line.strip("| ").split(" | ")] for line in host.splitlines()
             if line.startswith("| ") and "---" not in line][1:]
    assert [row[0] for row in timed] == list(step) and timed[0][2] == "1.00 (1.00-1.00)"
    assert all(float(row[1]) > 0 for row in timed)
    assert [(row[0], row[3], row[4]) for row in calls] == [
        ("fairseq MultiheadAttention", "0", "0"), ("ours, softmax through SDPA", "0", "0"),
        ("ours, 1.5-entmax, fused", "0", "4"), ("ours, alpha-entmax per head, fused", "0", "4"),
        ("ours, 1.5-entmax, explicit", "0", "0"), ("ours, alpha-entmax per head, explicit", "0", "0")]
    assert all(int(row[1]) > 20 and int(row[2]) > 20 for row in calls)
    stock = step.pop("stock transformer (softmax)")
    assert stock > 0 and set(step.values()) == {stock}, step
