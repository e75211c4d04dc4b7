"""Capturing a trained model's q, k and v (benchmarks/capture_hf.py) for the kernel's
benchmarks, and the tile benchmark on a capture."""

import torch

import fairseq_sparse.hf as hf
import attention_inputs
from attention_inputs import explicit_attend
from capture_hf import capture
from tests.conftest import run_script, shared_data, sparse_bert


def test_a_capture_holds_each_layers_projections_and_alphas_and_the_benchmark_reads_it(tmp_path):
    model, tokenizer = sparse_bert(tmp_path / "model")
    text = shared_data("text", "hsvae-dbpedia14") / "test.txt"
    result = capture(tmp_path / "model", text, length=64)
    layers = result["layers"]
    assert len(layers) == 2 and layers[0]["q"].shape == (1, 4, 64, 8) and layers[0]["q"].dtype == torch.float16
    torch.testing.assert_close(torch.stack([layer["alpha"] for layer in layers]),
                               torch.stack(list(hf.head_alphas(model).values())))
    # Layer 0's queries, recomputed from the packed ids: [CLS] s1 [SEP] s2 [SEP] ...
    lines = text.read_text(encoding="utf-8").splitlines()
    ids = [tokenizer.cls_token_id]
    for line in lines:
        ids += tokenizer(line, add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]
        if len(ids) >= 64:
            break
    model.eval()
    with torch.no_grad():
        hidden = model.embeddings(input_ids=torch.tensor([ids[:64]]))
        want = model.encoder.layer[0].attention.self.query(hidden).view(1, 64, 4, 8).transpose(1, 2)
    torch.testing.assert_close(layers[0]["q"].float(), want, atol=2e-3, rtol=2e-3)

    torch.save(result, tmp_path / "captured.pt")
    second = attention_inputs.captured(tmp_path / "captured.pt")[1]
    assert second.q.dtype == torch.float32 and second.scale == 8 ** -0.5
    assert second.module.endswith("layer.1.attention.self") and not second.causal and second.cu_seqlens is None
    proc = run_script("benchmarks/bench_attention_tiles.py", "--lengths", "64", "--tiles", "32", "32",
                      "--families", "gaussian", "--heads", "4", "--head-dim", "8", "--captured", tmp_path / "captured.pt",
                      "--json", tmp_path / "rows.json", "--plot", tmp_path / "tiles.png", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    captured_rows = [line for line in proc.stdout.splitlines() if "| captured " in line]
    assert len(captured_rows) == 4  # two modules, at their learned alphas and at 1.5
    assert (tmp_path / "tiles.png").stat().st_size > 10000


def test_a_packed_capture_is_each_sentence_run_alone(tmp_path):
    """capture(..., packed=True): sentences run one at a time, packed with their offsets; the
    attention over the packed row with those offsets is the model's own on each sentence."""
    model, tokenizer = sparse_bert(tmp_path / "model", seed=1, attention_probs_dropout_prob=0.0)
    text = shared_data("text", "hsvae-dbpedia14") / "test.txt"
    layer = attention_inputs.captured_layers(capture(tmp_path / "model", text, length=256, packed=True))[1]
    offsets = layer.cu_seqlens.tolist()
    assert offsets[0] == 0 and offsets[-1] == layer.q.shape[2] <= 256 and len(offsets) > 2
    first = text.read_text(encoding="utf-8").splitlines()[0]
    ids = tokenizer(first, return_tensors="pt")
    assert ids["input_ids"].shape[1] == offsets[1]
    model.eval()
    with torch.no_grad():
        own = model(**ids, output_attentions=True).attentions[1][0]  # layer 1's weights on the first sentence
    eye = torch.eye(layer.q.shape[2]).expand(1, 4, -1, -1)
    probs = explicit_attend(layer.q, layer.k, eye, layer.alpha, scale=layer.scale, cu_seqlens=layer.cu_seqlens)
    torch.testing.assert_close(probs[0, :, :offsets[1], :offsets[1]], own, atol=2e-3, rtol=2e-3)
