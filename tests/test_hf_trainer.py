"""The conversion recipe in transformers' Trainer: the documented example itself (the
Trainer section of docs/sparse_transformer.md), run on a tiny BERT without dropout, on one
process and under torchrun with two gloo processes at the same global batch."""

import re
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import fairseq_sparse.hf as hf
from fairseq_sparse.entmax import AlphaFloor
from fairseq_sparse.hf.trainer import PREFIX, SparseAttentionCallback
from tests.conftest import REPO, minilm_path, shared_data


def documented_example():
    page = (REPO / "docs" / "sparse_transformer.md").read_text(encoding="utf-8")
    return re.search(r"<!-- trainer-example -->\n```python\n(.*?)```", page, re.S).group(1)


def set_line(code, pattern, replacement):
    code, n = re.subn(pattern, replacement, code, flags=re.M)
    assert n == 1, f"the documented example no longer has {pattern!r}"
    return code


@pytest.fixture(scope="module")
def still_bert(tmp_path_factory):
    """A tiny random BERT without dropout (so that runs on one and two processes can agree)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("still_bert")
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer.get_vocab()), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def example_script(tmp_path, model, out, batch_size):
    code = documented_example()
    code = set_line(code, r"^MODEL = .*$", f"MODEL = {str(model)!r}")
    code = set_line(code, r"^DATA = .*$", f"DATA = {str(shared_data('text', 'hsvae-dbpedia14'))!r}")
    code = set_line(code, r"^OUT = .*$", f"OUT = {str(out)!r}")
    code = set_line(code, r"^STEPS = .*$", "STEPS = 4")
    code = set_line(code, r"per_device_train_batch_size=16", f"per_device_train_batch_size={batch_size}")
    code = set_line(code, r"logging_steps=50", "logging_steps=2")
    script = tmp_path / f"example_{batch_size}.py"
    script.write_text(code, encoding="utf-8")
    return script


def tensorboard_scalars(directory):
    """{tag: [(step, value)]} of the event files under ``directory`` (TFRecord framing: a
    length, its CRC, the Event protobuf, its CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(directory.rglob("events.out.tfevents*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def run(command, tmp_path):
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def test_the_documented_example_trains_logs_and_two_processes_equal_one(tmp_path, still_bert):
    one, two = tmp_path / "one", tmp_path / "two"
    proc = run([sys.executable, example_script(tmp_path, still_bert, one, 4)], tmp_path)
    # The callback's metrics reach the console and tensorboard (it is attached before it).
    logged = proc.stdout + proc.stderr
    for name in ("floor", "alpha_layer_1", "density_layer_1"):
        assert f"{PREFIX}/{name}" in logged
    scalars = tensorboard_scalars(one)  # the Trainer's tensorboard names its training logs train/...
    # Logged after steps 2 and 4 (logging_steps=2): the floor the step trained at, raised
    # halfway after one update (1.01 + 0.49 / 2) and at its target from the second on.
    floor = scalars[f"train/{PREFIX}/floor"]
    assert [step for step, _ in floor] == [2, 4] and [v for _, v in floor] == pytest.approx([1.255, 1.5])
    assert all(value >= 1.5 for _, value in scalars[f"train/{PREFIX}/alpha_layer_0"][1:])
    assert all(0 < value <= 1 for _, value in scalars[f"train/{PREFIX}/density_layer_1"])

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
         example_script(tmp_path, still_bert, two, 2)], tmp_path)
    want, got = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert set(got) == set(want) and any(".head_alpha.pre_alpha" in k for k in want)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=1e-5, rtol=1e-4, msg=name)
    from transformers import AutoModelForSequenceClassification, BertForSequenceClassification, pipeline

    loaded = hf.from_pretrained(BertForSequenceClassification, one)
    alphas = torch.cat(list(hf.head_alphas(loaded).values()))
    assert bool((alphas >= 1.5 - 1e-6).all()), "the floor reached (target 1.5 after 2 of 4 updates) is saved"
    assert loaded.config.fairseq_sparse["floor"] == {"target": 1.5, "updates": 2}
    # The tokenizer is saved with the model, so transformers' own loaders give the sparse model's predictions.
    texts = (shared_data("text", "hsvae-dbpedia14") / "valid.txt").read_text(encoding="utf-8").splitlines()[:8]
    tokenizer = hf.load_tokenizer(one, "--hf")
    assert "[UNK]" not in tokenizer.tokenize(texts[0])
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = loaded(**batch).logits
        torch.testing.assert_close(AutoModelForSequenceClassification.from_pretrained(one)(**batch).logits, want,
                                   atol=1e-6, rtol=1e-6)
    predicted = pipeline("text-classification", model=str(one), device="cpu")(texts)
    assert [int(p["label"].split("_")[-1]) for p in predicted] == want.argmax(-1).tolist()


def test_the_callback_moves_the_floor_with_the_global_step_and_measures_the_probe():
    from transformers import BertConfig, BertModel, TrainerControl, TrainerState, TrainingArguments

    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=37))
    hf.sparsify(model, "alpha_entmax", floor=AlphaFloor(target=1.6, updates=10))
    probe = {"input_ids": torch.randint(3, 50, (2, 7)), "attention_mask": torch.tensor([[1] * 7, [1] * 4 + [0] * 3])}
    callback = SparseAttentionCallback(probe=probe)
    state, control = TrainerState(), TrainerControl()
    args = TrainingArguments("unused", report_to="none", use_cpu=True)
    state.global_step = 5
    callback.on_step_begin(args, state, control, model=model)
    logs = {"loss": 1.0}
    state.log_history.append({**logs, "step": 5})
    model.train()
    callback.on_log(args, state, control, logs=logs, model=model)
    assert model.training, "the probe is measured in eval mode, and training mode restored"
    assert logs[f"{PREFIX}/floor"] == pytest.approx(1.305)
    assert sorted(k for k in logs if "layer" in k) == [f"{PREFIX}/{m}_layer_{i}" for m in ("alpha", "density")
                                                      for i in (0, 1)]
    assert all(0 < logs[f"{PREFIX}/density_layer_{i}"] <= 1 for i in (0, 1))
    assert state.log_history[-1] == {**logs, "step": 5}
    evaluation = {"eval_loss": 1.0}
    callback.on_log(args, state, control, logs=evaluation, model=model)
    assert evaluation == {"eval_loss": 1.0}


def test_parameter_groups_give_the_alphas_their_own_rate_without_decay():
    from transformers import BertConfig, BertModel

    model = hf.sparsify(BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=37)), "alpha_entmax")
    weights, alphas = hf.parameter_groups(model, lr=1e-4, alpha_lr=1e-2, weight_decay=0.1)
    assert (weights["lr"], weights["weight_decay"], alphas["lr"], alphas["weight_decay"]) == (1e-4, 0.1, 1e-2, 0.0)
    assert len(alphas["params"]) == 2 and len(weights["params"]) + 2 == len(list(model.parameters()))


def test_the_density_of_a_causal_model_counts_only_the_keys_a_query_may_see():
    """Softmax keeps every key a query may attend to, so its density is 1 on a causal model
    too, as the attention report says; counting future keys as allowed read it as 0.55."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=37))
    probe = {"input_ids": torch.randint(3, 50, (2, 9)), "attention_mask": torch.tensor([[1] * 9, [0] * 3 + [1] * 6])}
    hf.sparsify(model, "softmax")
    metrics = SparseAttentionCallback(probe=probe).metrics(model)
    assert [metrics[f"{PREFIX}/density_layer_{i}"] for i in (0, 1)] == [1.0, 1.0]
    hf.sparsify(model, "sparsemax")
    with torch.no_grad(), hf.evaluating(model, weights=True):
        attentions = model(**probe, output_attentions=True).attentions
    nonzero, allowed = hf.attention_density_counts(attentions, probe["attention_mask"], causal=True)
    # each query i of the full row sees i + 1 keys, of the left-padded one its own real prefix
    assert allowed.tolist() == [4 * (45 + 21)] * 2
    assert bool((nonzero <= allowed).all()) and bool((nonzero >= 4 * 15).all())
