"""Captures of a trained fairseq transformer's self-attention (benchmarks/capture_fairseq.py):
the packed q, k and v give back, with their offsets, the attention the model computed sentence by
sentence, and the tile benchmark counts them, and structured inputs fitted to them."""

import json

import torch

import fairseq_sparse
fairseq_sparse.load_plugin()  # allow-lists what fairseq checkpoints hold for torch.load
from fairseq import checkpoint_utils

import attention_inputs
from attention_inputs import explicit_attend
from tests.conftest import REPO, run_cli, run_script


def test_packed_capture_is_the_models_attention_sentence_by_sentence(multi30k_bin, tmp_path):
    run_cli("fairseq-train", multi30k_bin, "--user-dir", REPO / "fairseq_sparse", "--task", "translation",
            "--arch", "entmax_transformer_tiny", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--cpu", "--seed", "3", "--max-update", "2", "--save-dir", tmp_path / "ck", "--num-workers", "0")
    checkpoint = tmp_path / "ck" / "checkpoint_last.pt"
    proc = run_script("benchmarks/capture_attention.py", "--checkpoint", checkpoint, "--data", multi30k_bin,
                      "--length", "128", "--out", tmp_path / "captured.pt")
    assert proc.returncode == 0, proc.stderr[-3000:]
    layers = attention_inputs.captured(tmp_path / "captured.pt")
    assert [(c.module, c.causal) for c in layers] == [
        ("encoder.layers.0.self_attn", False), ("encoder.layers.1.self_attn", False),
        ("decoder.layers.0.self_attn", True), ("decoder.layers.1.self_attn", True)]
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                   arg_overrides={"data": str(multi30k_bin)})
    model = models[0].eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    modules = dict(model.named_modules())
    for m in (modules[c.module] for c in layers):
        m.record_attention = True
    for layer in layers:
        offsets = layer.cu_seqlens.tolist()
        assert offsets[0] == 0 and offsets[-1] == layer.q.shape[2] <= 128 and len(offsets) > 3
        eye = torch.eye(layer.q.shape[2]).expand(1, layer.q.shape[1], -1, -1)
        probs = explicit_attend(layer.q, layer.k, eye, layer.alpha, causal=layer.causal, scale=layer.scale,
                                    cu_seqlens=layer.cu_seqlens)  # the weights themselves
        for s in (0, len(offsets) - 2):  # the first sentence and the last
            with torch.no_grad():
                model(**dataset.collater([dataset[s]])["net_input"])
            own = modules[layer.module].last_attention[0]
            a, b = offsets[s], offsets[s + 1]
            torch.testing.assert_close(probs[0, :, a:b, a:b], own, atol=2e-3, rtol=2e-3)
            assert float(probs[0, :, a:b].sum(-1).min()) > 0.999 and float(probs[0, :, a:b, :a].abs().sum()) == 0
    proc = run_script("benchmarks/bench_attention_tiles.py", "--lengths", "32", "--tiles", "32", "32",
                      "--families", "gaussian", "--head-dim", "16", "--captured", tmp_path / "captured.pt", "--fit",
                      tmp_path / "captured.pt", "--json", tmp_path / "rows.json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fitted = attention_inputs.fit(layers, (32, 32))
    assert f"band width {fitted.width:.1f}, {fitted.global_keys} global keys" in proc.stdout, proc.stdout
    rows = [r for r in json.load(open(tmp_path / "rows.json")) if r["family"] == "captured"]
    assert len(rows) == 8 and all(r["packed"] for r in rows)
    assert [r["causal"] for r in rows[::2]] == [False, False, True, True]
    # Short sentences packed: a key tile far from a query tile's sentences is never visited.
    assert all(r["density"] < 1.0 and r["total"] < 1.0 for r in rows), rows
