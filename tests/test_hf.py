"""Sparse attention in Hugging Face models (fairseq_sparse.hf), on tiny random configs of an
encoder with padding (BERT), a causal LM with grouped-query attention (Llama) and an
encoder-decoder with cross-attention (BART), against transformers' own eager attention
and against it with its softmax swapped for the `entmax` package's function."""

import contextlib
import sys

import entmax as entmax_package
import pytest
import torch
from transformers import (BartConfig, BartForConditionalGeneration, BertConfig, BertModel, LlamaConfig,
                          LlamaForCausalLM)

import fairseq_sparse.hf as hf
from fairseq_sparse.entmax import AlphaFloor

VOCAB = 61


def bert(layers=2):
    return BertModel(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                intermediate_size=37, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def llama(layers=2):
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=layers,
                                        num_attention_heads=4, num_key_value_heads=2, intermediate_size=37))


def bart(layers=2):
    return BartForConditionalGeneration(BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=4,
        decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, dropout=0.0, attention_dropout=0.0,
        max_position_embeddings=64))


MODELS = {"bert": bert, "llama": llama, "bart": bart}


def inputs(kind, seed=0):
    """Inputs with padding: BERT and BART right-padded, Llama left-padded (as for generation)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    if kind == "llama":
        mask[1, :3] = 0
    else:
        mask[1, 6:] = 0
    batch = dict(input_ids=ids, attention_mask=mask)
    if kind == "bart":
        batch["decoder_input_ids"] = torch.randint(3, VOCAB, (3, 6), generator=g)
    return batch


def build(kind, seed=0, layers=2):
    torch.manual_seed(seed)
    return MODELS[kind](layers).eval()


def output_of(model, batch):
    out = model(**batch)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None \
        else out.logits


def masked_outputs(kind, output, batch):
    """The positions whose output means something (padding queries' rows are arbitrary)."""
    if kind == "bart":
        return output
    return output[batch["attention_mask"].bool()]


@contextlib.contextmanager
def softmax_swapped(model, normalize):
    """transformers' eager attention with its softmax replaced by ``normalise(scores, module)``:
    the reference each sparse attention is checked against."""
    current = {}
    hooks = [m.register_forward_pre_hook(lambda m, *_: current.update(module=m))
             for m in hf.attention_modules(model).values()]
    softmax = torch.nn.functional.softmax

    def swapped(x, dim=None, dtype=None, **kwargs):
        return normalize(x.to(dtype or x.dtype), current["module"]).to(dtype or x.dtype)

    torch.nn.functional.softmax = swapped
    try:
        model.set_attn_implementation("eager")
        yield
    finally:
        torch.nn.functional.softmax = softmax
        for h in hooks:
            h.remove()


def package_normalizer(name):
    def normalize(x, module):
        # Eager masks add finfo.min, on which entmax_bisect's bisection gives NaN for a padding
        # query that sees no key; -1e6 is as masked for every query that sees one.
        x = x.clamp_min(-1e6)
        if name == "sparsemax":
            return entmax_package.sparsemax(x.double(), dim=-1).float()
        if name == "entmax15":
            return entmax_package.entmax15(x.double(), dim=-1).float()
        alpha = module.head_alpha().double().view(1, -1, 1, 1).expand(x.shape[0], -1, x.shape[2], 1)
        return entmax_package.entmax_bisect(x.double(), alpha, dim=-1, n_iter=80).float()
    return normalize


@pytest.mark.parametrize("kind", MODELS)
def test_softmax_through_our_path_is_transformers_eager_attention(kind):
    model, batch = build(kind), inputs(kind)
    model.set_attn_implementation("eager")
    want = output_of(model, batch)
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))  # a loss whose gradients are O(1)
    (want * weights).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.set_attn_implementation("softmax")
    got = output_of(model, batch)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, grad in want_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15", "alpha_entmax"])
@pytest.mark.parametrize("kind", MODELS)
def test_each_sparse_normalizer_is_eager_attention_with_the_entmax_package(kind, normalizer):
    model, batch = build(kind), inputs(kind)
    hf.sparsify(model, normalizer)
    got = model(**batch, output_attentions=True)
    with softmax_swapped(model, package_normalizer(normalizer)):
        want = model(**batch, output_attentions=True)
    torch.testing.assert_close(masked_outputs(kind, got.logits if kind != "bert" else got.last_hidden_state, batch),
                               masked_outputs(kind, want.logits if kind != "bert" else want.last_hidden_state, batch),
                               atol=1e-5, rtol=1e-4)
    weights = [w for name in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions")
               for w in (getattr(got, name, None) or ())]
    assert weights and all(bool((w == 0).any()) for w in weights), "exact zeros in every layer's weights"
    mask = batch["attention_mask"].bool()
    if kind == "bert":  # padding keys: exactly 0 for every query
        assert all(bool((w[1][:, :, ~mask[1]] == 0).all()) for w in got.attentions)
    if kind == "llama":  # the future and the left padding: exactly 0
        future = torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)
        for w in got.attentions:
            assert bool((w[:, :, future] == 0).all())
            assert bool((w[1][:, 3:, :3] == 0).all())
    if kind == "bart":
        future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
        assert all(bool((w[:, :, future] == 0).all()) for w in got.decoder_attentions)
        assert all(bool((w[1][:, :, ~mask[1]] == 0).all()) for w in got.cross_attentions)


@pytest.mark.parametrize("kind", MODELS)
def test_gradients_reach_every_heads_alpha_and_training_moves_them(kind):
    model, batch = build(kind), inputs(kind)
    hf.sparsify(model, "alpha_entmax", alpha_init=1.5)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)  # built after sparsify: it holds the alphas
    start = {n: a.clone() for n, a in hf.head_alphas(model).items()}
    assert start and all(len(a) == hf.query_heads(m) for (n, a), m in zip(start.items(),
                                                                          hf.attention_modules(model).values()))
    for step in range(3):
        optimizer.zero_grad()
        output_of(model, batch).pow(2).mean().backward()
        if step == 0:
            for name, module in hf.attention_modules(model).items():
                grad = module.head_alpha.pre_alpha.grad
                assert grad is not None and bool((grad != 0).all()), f"{name}: a head without an alpha gradient"
        optimizer.step()
    for name, alpha in hf.head_alphas(model).items():
        assert bool((alpha != start[name]).all()), name
        torch.testing.assert_close(dict(hf.attention_modules(model))[name].head_alpha.initial_alpha, start[name])


@pytest.mark.parametrize("kind", MODELS)
def test_saved_and_loaded_with_the_same_normalizer_alphas_and_outputs(tmp_path, kind):
    model, batch = build(kind), inputs(kind)
    hf.sparsify(model, "alpha_entmax")
    with torch.no_grad():  # alphas that are not a fresh draw of the loading model's
        for module in hf.attention_modules(model).values():
            module.head_alpha.pre_alpha.add_(0.3)
    want = output_of(model, batch)
    model.save_pretrained(tmp_path / "saved")
    loaded = hf.from_pretrained(type(model), tmp_path / "saved").eval()
    assert loaded.config._attn_implementation == "alpha_entmax"
    saved_alphas, loaded_alphas = hf.head_alphas(model), hf.head_alphas(loaded)
    assert saved_alphas.keys() == loaded_alphas.keys()
    for name in saved_alphas:
        torch.testing.assert_close(loaded_alphas[name], saved_alphas[name], atol=0, rtol=0)
    torch.testing.assert_close(output_of(loaded, batch), want, atol=1e-6, rtol=1e-6)
    fixed = build(kind)
    hf.sparsify(fixed, "entmax15").save_pretrained(tmp_path / "fixed")
    assert hf.from_pretrained(type(fixed), tmp_path / "fixed").config._attn_implementation == "entmax15"


def greedy_by_recomputation(model, batch, steps):
    """Greedy decoding with the whole sequence recomputed at every step (no cache)."""
    if isinstance(model, BartForConditionalGeneration):
        decoded = torch.full((len(batch["input_ids"]), 1), model.config.decoder_start_token_id)
        for _ in range(steps):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           decoder_input_ids=decoded, use_cache=False).logits
            decoded = torch.cat([decoded, logits[:, -1].argmax(-1, keepdim=True)], 1)
        return decoded
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for _ in range(steps):
        position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False).logits
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return ids


@pytest.mark.parametrize("normalizer", ["sparsemax", "alpha_entmax"])
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_generate_with_a_cache_is_greedy_decoding_by_recomputation(kind, normalizer):
    model, batch = build(kind, seed=2), inputs(kind, seed=2)
    batch.pop("decoder_input_ids", None)
    hf.sparsify(model, normalizer)
    steps = 6
    generated = model.generate(**batch, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, num_beams=1,
                               use_cache=True, pad_token_id=0, eos_token_id=None)
    want = greedy_by_recomputation(model, batch, steps)
    assert generated.tolist() == want.tolist()


@pytest.mark.parametrize("kind, normalizer, backend", [
    ("bert", "alpha_entmax", "aot_eager"), ("bert", "entmax15", "aot_eager"),
    ("llama", "entmax15", "aot_eager"), ("llama", "alpha_entmax", "inductor")])
def test_torch_compile_fullgraph_equals_eager(kind, normalizer, backend):
    """One graph (no break) through dynamo, forward and backward as eager computes them. Each
    model and normaliser is traced; inductor lowers one of them, the learned alphas of a
    decoder, at one layer: its lowering and C++ code generation are most of the test's time and
    grow with the layers, while the normalisers are the same custom ops in every layer's and
    every model's graph."""
    model, batch = build(kind, layers=1 if backend == "inductor" else 2), inputs(kind)
    hf.sparsify(model, normalizer)
    want = output_of(model, batch)
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))  # a loss whose gradients are O(1)
    (want * weights).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    got = output_of(compiled, batch)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, grad in want_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4, msg=name)


def test_bad_arguments_are_named():
    model = build("bert")
    with pytest.raises(ValueError, match="normalizer: unknown normaliser 'entmax2'"):
        hf.sparsify(model, "entmax2")
    with pytest.raises(ValueError, match="--alpha-init must lie in"):
        hf.sparsify(model, "alpha_entmax", alpha_init=2.5)
    with pytest.raises(ValueError, match="--alpha-min must lie in"):
        hf.sparsify(model, "alpha_entmax", alpha_min=2.0)
    with pytest.raises(ValueError, match="model: Linear has no attention module"):
        hf.sparsify(torch.nn.Linear(2, 2), "sparsemax")
    model.set_attn_implementation("alpha_entmax")
    with pytest.raises(ValueError, match="call fairseq_sparse.hf.sparsify"):
        output_of(model, inputs("bert"))


def test_every_normalizer_of_the_registry_is_an_attention_implementation():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from fairseq_sparse.entmax.normalizers import normalizer_names

    for name in normalizer_names():
        assert name in AttentionInterface._global_mapping and name in AttentionMaskInterface._global_mapping


def test_the_module_imports_without_fairseq():
    import subprocess

    program = ("import sys, fairseq_sparse.hf; "
               "print(sorted(m for m in sys.modules if m == 'fairseq' or m.startswith('fairseq.')))")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["[]"], proc.stdout


def test_what_would_change_the_scores_is_refused_not_dropped():
    model = build("bert")
    module = next(iter(hf.attention_modules(model).values()))
    q = torch.randn(1, 4, 3, 8)
    attend = hf.attention_function("sparsemax")
    with pytest.raises(ValueError, match="passes position_bias, which this attention does not apply"):
        attend(module, q, q, q, None, position_bias=torch.zeros(1, 4, 3, 3))
    out, weights = attend(module, q, q, q, None, output_attentions=True)
    assert out.shape == (1, 3, 4, 8) and torch.allclose(weights.sum(-1), torch.ones(1, 4, 3))
    assert attend(module, q, q, q, None)[1] is None  # weights not asked for: none kept


@pytest.mark.parametrize("kind, normalizer", [("bert", "alpha_entmax"), ("llama", "entmax15")])
def test_the_fused_kernel_serves_padding_and_causal_masks_with_the_same_outputs(kind, normalizer, monkeypatch):
    """Where the fused kernels run (CUDA; here CPU tensors under Triton's interpreter), a
    padding and/or causal mask goes to the fused kernel, with the explicit path's outputs."""
    from fairseq_sparse.entmax import use_backend

    model, batch = build(kind), inputs(kind)
    hf.sparsify(model, normalizer)
    want = masked_outputs(kind, output_of(model, batch), batch)
    calls = fused_calls(monkeypatch)
    with use_backend("triton"):
        got = masked_outputs(kind, output_of(model, batch), batch)
        assert len(calls) == 2, "every layer's attention took the fused kernel"
        assert all(k["key_padding_mask"] is not None and k["causal"] == (kind == "llama") for k in calls)
        model(**batch, output_attentions=True)  # weights asked for: the explicit path
        assert len(calls) == 2
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("config_class, sizes", [
    ("DebertaV2Config", dict(num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)),
    ("BloomConfig", dict(n_layer=1, n_head=2)),
    ("FalconConfig", dict(num_hidden_layers=1, num_attention_heads=2)),
])
def test_a_model_whose_attention_is_its_own_code_is_refused_by_name(tmp_path, config_class, sizes):
    """Its heads would stay softmax (DeBERTa-v2, Bloom) or fail with a KeyError (Falcon)."""
    import transformers
    from transformers import AutoModel

    config = getattr(transformers, config_class)(vocab_size=50, hidden_size=16, **sizes)
    AutoModel.from_config(config).save_pretrained(tmp_path)
    for name in ("sparsemax", "entmax15"):
        with pytest.raises(ValueError, match=rf"attn_implementation='{name}': \w+Model computes its attention in its "
                                             "own code"):
            AutoModel.from_pretrained(tmp_path, attn_implementation=name)


def test_sparsify_again_with_other_alphas_is_refused_and_the_default_is_near_softmax():
    model = bert()
    hf.sparsify(model, "alpha_entmax")
    assert all(torch.allclose(a, torch.tensor(hf.ALPHA_INIT)) for a in hf.head_alphas(model).values())
    hf.sparsify(model, "alpha_entmax")  # the same choice again: kept
    with pytest.raises(ValueError, match=r"alpha_init=1.9.*already have learned alphas \(alpha_init='1.05'"):
        hf.sparsify(model, "alpha_entmax", alpha_init=1.9)
    hf.sparsify(model, "softmax")
    hf.sparsify(model, "alpha_entmax", alpha_init=1.9)
    assert all(torch.allclose(a, torch.tensor(1.9)) for a in hf.head_alphas(model).values())
    assert model.config.fairseq_sparse["alpha_init"] == "1.9"


def test_loading_a_sparsified_model_reports_no_unexpected_alphas(tmp_path, caplog):
    from transformers import BertModel

    model = hf.sparsify(bert(), "alpha_entmax", alpha_init=1.5)
    model.save_pretrained(tmp_path)
    with caplog.at_level("WARNING"):
        loaded = hf.from_pretrained(BertModel, tmp_path)
    assert "UNEXPECTED" not in caplog.text
    assert all(torch.allclose(a, torch.tensor(1.5)) for a in hf.head_alphas(loaded).values())
    with caplog.at_level("WARNING"):  # transformers' own from_pretrained builds the alphas too
        again = BertModel.from_pretrained(tmp_path)
    assert "UNEXPECTED" not in caplog.text and "MISSING" not in caplog.text
    assert all(torch.allclose(a, torch.tensor(1.5)) for a in hf.head_alphas(again).values())


def test_the_alpha_floor_rises_with_the_updates_and_is_saved_with_the_model(tmp_path):
    """The conversion recipe: from near softmax, every head's floor rises linearly to the
    target; each head keeps its place above the floor and its gradient; the floor reached
    is saved, so the loaded model gives the same alphas without being told the updates."""
    model = bert()
    hf.sparsify(model, "alpha_entmax", floor=AlphaFloor(target=1.5, updates=10))
    with torch.no_grad():  # heads at different places above the floor
        for module in hf.attention_modules(model).values():
            module.head_alpha.pre_alpha.add_(torch.linspace(-1, 3, 4))
    before = torch.cat(list(hf.head_alphas(model).values()))
    for update, floor in ((0, 1.01), (5, 1.255), (10, 1.5), (1000, 1.5)):
        hf.set_num_updates(model, update)
        alphas = torch.cat(list(hf.head_alphas(model).values()))
        # alpha = floor + (2 - floor) s, the same s per head at every floor
        torch.testing.assert_close((alphas - floor) / (2 - floor), (before - 1.01) / (2 - 1.01))
    hf.set_num_updates(model, 5)
    module = next(iter(hf.attention_modules(model).values()))
    module.head_alpha().sum().backward()
    assert bool((module.head_alpha.pre_alpha.grad > 0).all())
    want = output_of(model.eval(), inputs("bert"))
    model.save_pretrained(tmp_path)
    loaded = hf.from_pretrained(BertModel, tmp_path).eval()
    assert loaded.config.fairseq_sparse["floor"] == {"target": 1.5, "updates": 10}
    torch.testing.assert_close(torch.cat(list(hf.head_alphas(loaded).values())),
                               torch.cat(list(hf.head_alphas(model).values())), atol=0, rtol=0)
    torch.testing.assert_close(output_of(loaded, inputs("bert")), want, atol=1e-6, rtol=1e-6)
    hf.set_num_updates(loaded, 10)  # training on from the loaded model goes on with the schedule
    assert min(torch.cat(list(hf.head_alphas(loaded).values()))) >= 1.5


@pytest.mark.parametrize("make, message", [
    (lambda: AlphaFloor(target=2.5), "--alpha-floor must lie in"),
    (lambda: AlphaFloor(target=1.0), "--alpha-floor must lie in"),
    (lambda: AlphaFloor(updates=-1), "--alpha-floor-updates"),
    (lambda: AlphaFloor(updates=2.5), "--alpha-floor-updates"),
    (lambda: hf.sparsify(bert(), "entmax15", floor=AlphaFloor()), "entmax15 has no learned alpha"),
    (lambda: hf.sparsify(bert(), "alpha_entmax", floor=1.5), "AlphaFloor"),
    (lambda: hf.sparsify(bert(), "alpha_entmax", alpha_min=1.2, floor=AlphaFloor(target=1.1)), "above --alpha-min"),
])
def test_a_wrong_floor_is_an_error_naming_the_option(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def fused_calls(monkeypatch):
    """The keyword arguments of every call that reaches the fused kernels from here on (skips
    where they cannot run on CPU: Triton's interpreter, set by tests/conftest.py)."""
    from fairseq_sparse.entmax import attention, has_triton_kernel

    if not (has_triton_kernel() and attention.kernels.INTERPRET):
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py)")
    calls = []
    fused = attention._fused_entmax
    monkeypatch.setattr(attention, "_fused_entmax", lambda *a, **k: calls.append(k) or fused(*a, **k))
    return calls


@pytest.mark.parametrize("normalizer", ["entmax15", "alpha_entmax"])
def test_a_sliding_window_model_is_eager_attention_and_reaches_the_fused_kernel(normalizer, monkeypatch):
    """Mistral with a sliding window of 3 keys (left-padded, grouped-query attention): the
    sparse attention is transformers' eager attention with the entmax package's normaliser,
    window and all; where the fused kernels run (here under Triton's interpreter) every layer
    takes them with the window transformers names, with the same outputs."""
    from transformers import MistralConfig, MistralForCausalLM

    from fairseq_sparse.entmax import use_backend

    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
                                             sliding_window=3)).eval()
    batch = inputs("llama")
    hf.sparsify(model, normalizer, **({"alpha_init": "random"} if normalizer == "alpha_entmax" else {}))
    want = masked_outputs("llama", output_of(model, batch), batch)
    with softmax_swapped(model, package_normalizer(normalizer)):
        eager = masked_outputs("llama", output_of(model, batch), batch)
    torch.testing.assert_close(want, eager, atol=1e-5, rtol=1e-4)
    model.set_attn_implementation(normalizer)
    calls = fused_calls(monkeypatch)
    with use_backend("triton"):
        got = masked_outputs("llama", output_of(model, batch), batch)
    assert len(calls) == 2 and all(k["window"] == 3 and k["causal"] for k in calls), calls
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("normalizer", ["entmax15", "alpha_entmax"])
def test_packed_sequences_are_each_sequence_alone_and_reach_the_fused_kernel(normalizer, monkeypatch):
    """Three sequences packed into one row, as transformers' DataCollatorWithFlattening gives them
    (position_ids restarting at 0, no cache): the logits are each sequence's run alone; where the
    fused kernels run (here under Triton's interpreter) every layer takes them with the
    sequences' offsets (cu_seqlens), with the same logits."""
    from fairseq_sparse.entmax import use_backend

    model = build("llama")
    hf.sparsify(model, normalizer, **({"alpha_init": "random"} if normalizer == "alpha_entmax" else {}))
    ids = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(4))
    bounds = ((0, 5), (5, 8), (8, 12))
    position_ids = torch.cat([torch.arange(b - a) for a, b in bounds])[None]
    packed = model(input_ids=ids, position_ids=position_ids, use_cache=False).logits
    alone = torch.cat([model(input_ids=ids[:, a:b], use_cache=False).logits for a, b in bounds], 1)
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-4)
    calls = fused_calls(monkeypatch)
    with use_backend("triton"):
        got = model(input_ids=ids, position_ids=position_ids, use_cache=False).logits
    assert len(calls) == 2 and all(k["cu_seqlens"].tolist() == [0, 5, 8, 12] and k["causal"] for k in calls)
    torch.testing.assert_close(got, alone, atol=1e-5, rtol=1e-4)
