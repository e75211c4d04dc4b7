"""A sparse model stays sparse wherever transformers loads it: ``from_pretrained`` of the Auto
classes, ``pipeline(model=DIR)``, half precision, PEFT's LoRA (whose adapters train the
alphas when ``modules_to_save`` names them); and where it cannot be loaded sparse, an error
or a warning, never a silent softmax.  Tiny random BERT (classification) and Llama
(generation), each saved with a word-level tokenizer."""

import json
import subprocess
import sys

import pytest
import torch
from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification, BertConfig,
                          BertForSequenceClassification, BertTokenizer, LlamaConfig, LlamaForCausalLM, pipeline)

import fairseq_sparse.hf as hf
from fairseq_sparse.entmax import AlphaFloor
from tests.conftest import REPO

WORDS = [f"w{i}" for i in range(56)]
SENTENCES = ["w1 w2 w3 w4", "w5 w6 w7", "w8 w9 w10 w11 w12 w13", "w14 w1 w9"]


def tokenizer(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return BertTokenizer(str(directory / "vocab.txt"))


def bert(vocab):
    return BertForSequenceClassification(BertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def llama(vocab):
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=37, pad_token_id=0))


def sparse_saved(kind, directory, floor=None):
    """A sparsified model with alphas that no fresh model would draw, saved with its tokenizer."""
    tok = tokenizer(directory)
    torch.manual_seed(0)
    model = (bert if kind == "bert" else llama)(len(tok)).eval()
    hf.sparsify(model, "alpha_entmax", floor=floor)
    with torch.no_grad():
        for module in hf.attention_modules(model).values():
            module.head_alpha.pre_alpha.add_(torch.linspace(-0.5, 2.5, 4))
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return model, tok


def logits(model, tok):
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits


def assert_same_alphas(got, want):
    """The same alphas, layer by layer (PEFT prefixes the module names with its own)."""
    assert [name.split("bert.")[-1] for name in got] == [name.split("bert.")[-1] for name in want]
    for (name, value), expected in zip(got.items(), want.values()):
        torch.testing.assert_close(value, expected, atol=0, rtol=0, msg=name)


def test_auto_classes_and_pipelines_load_the_saved_sparse_model(tmp_path, caplog):
    model, tok = sparse_saved("bert", tmp_path / "bert", floor=AlphaFloor(target=1.3, updates=4))
    hf.set_num_updates(model, 2)  # a floor part of the way up is saved with the alphas
    model.save_pretrained(tmp_path / "bert")
    want = logits(model, tok)
    assert json.loads((tmp_path / "bert" / "config.json").read_text())["attn_implementation"] == "alpha_entmax"
    with caplog.at_level("WARNING"):
        loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert")
    assert "UNEXPECTED" not in caplog.text and "MISSING" not in caplog.text
    assert loaded.config._attn_implementation == "alpha_entmax"
    assert_same_alphas(hf.head_alphas(loaded), hf.head_alphas(model))
    torch.testing.assert_close(logits(loaded, tok), want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(logits(hf.from_pretrained(BertForSequenceClassification, tmp_path / "bert"), tok), want,
                               atol=1e-6, rtol=1e-6)
    classify = pipeline("text-classification", model=str(tmp_path / "bert"), device="cpu")
    assert [int(p["label"].split("_")[-1]) for p in classify(SENTENCES)] == want.argmax(-1).tolist()
    assert_same_alphas(hf.head_alphas(classify.model), hf.head_alphas(model))
    # Loaded again and saved again: still sparse, with the floor reached.
    loaded.save_pretrained(tmp_path / "again")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "again")
    assert again.config.fairseq_sparse["floor"] == {"target": 1.3, "updates": 4}
    assert_same_alphas(hf.head_alphas(again), hf.head_alphas(model))
    # Half precision: the weights in bfloat16, the alphas kept in float32.
    half = AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert", dtype=torch.bfloat16)
    assert all(a.dtype == torch.float32 for a in hf.head_alphas(half).values())
    assert_same_alphas(hf.head_alphas(half), hf.head_alphas(model))


def test_a_causal_model_generates_as_saved_through_the_pipeline(tmp_path):
    model, tok = sparse_saved("llama", tmp_path / "llama")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "llama")
    assert loaded.config._attn_implementation == "alpha_entmax"
    assert_same_alphas(hf.head_alphas(loaded), hf.head_alphas(model))
    torch.testing.assert_close(logits(loaded, tok), logits(model, tok), atol=1e-6, rtol=1e-6)
    options = dict(max_new_tokens=6, do_sample=False)
    generate = pipeline("text-generation", model=str(tmp_path / "llama"), device="cpu")
    assert_same_alphas(hf.head_alphas(generate.model), hf.head_alphas(model))
    assert generate(SENTENCES[0], **options) == pipeline("text-generation", model=model, tokenizer=tok,
                                                         device="cpu")(SENTENCES[0], **options)


def test_where_it_cannot_load_sparse_it_says_so(tmp_path):
    sparse_saved("bert", tmp_path / "bert")
    # Without the package imported, transformers refuses the normaliser by name.
    code = ("from transformers import AutoModelForSequenceClassification as A; "
            f"A.from_pretrained({str(tmp_path / 'bert')!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode != 0 and 'attn_implementation="alpha_entmax"' in proc.stderr, proc.stderr[-2000:]
    # Another implementation asked for: the alphas are loaded, and the call is told its heads are not sparse.
    with pytest.warns(UserWarning, match="records the alpha_entmax normaliser .* attn_implementation='sdpa'"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert", attn_implementation="sdpa")
    # A directory whose config records the normaliser only as fairseq_sparse loads sparse through the package.
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    del config["attn_implementation"]
    (tmp_path / "bert" / "config.json").write_text(json.dumps(config))
    assert hf.from_pretrained(BertForSequenceClassification, tmp_path / "bert").config._attn_implementation \
        == "alpha_entmax"
    with pytest.warns(UserWarning, match="records the alpha_entmax normaliser"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert")


def test_lora_trains_the_alphas_saves_and_merges_them(tmp_path):
    peft = pytest.importorskip("peft")  # an optional extra of the package; installed by the README's set-up
    model, tok = sparse_saved("bert", tmp_path / "base")
    batch = {**tok(SENTENCES, padding=True, return_tensors="pt"), "labels": torch.tensor([0, 1, 2, 1])}

    def alpha_gradients(m):
        m.zero_grad()
        m(**batch).loss.backward()
        return torch.cat([p.grad.flatten() for mod in m.modules() if isinstance(mod, hf.HeadAlpha)
                          for p in mod.parameters() if p.grad is not None])

    plain = hf.from_pretrained(BertForSequenceClassification, tmp_path / "base")
    config = dict(task_type="SEQ_CLS", r=4, target_modules=["query", "value"])
    with pytest.warns(UserWarning, match="alphas are frozen.*modules_to_save=\\['head_alpha'\\]"):
        frozen = peft.get_peft_model(hf.from_pretrained(BertForSequenceClassification, tmp_path / "base"),
                                     peft.LoraConfig(**config))
        hf.parameter_groups(frozen, lr=1e-3, alpha_lr=1e-2)
    lora = peft.get_peft_model(hf.from_pretrained(BertForSequenceClassification, tmp_path / "base"),
                               peft.LoraConfig(**config, modules_to_save=hf.PEFT_MODULES))
    # LoRA's adapters start at zero: the alphas' first gradient is the model's own.
    torch.testing.assert_close(alpha_gradients(lora), alpha_gradients(plain))
    start = hf.head_alphas(lora)
    optimizer = torch.optim.AdamW(hf.parameter_groups(lora, lr=1e-3, alpha_lr=1e-2))
    lora.train()
    for _ in range(3):
        optimizer.zero_grad()
        lora(**batch).loss.backward()
        optimizer.step()
    lora.eval()
    trained = hf.head_alphas(lora)
    assert all(bool((trained[n] != start[n]).all()) for n in start), "every head's alpha moved"
    want = logits(lora, tok)
    lora.save_pretrained(tmp_path / "adapter")
    base = AutoModelForSequenceClassification.from_pretrained(tmp_path / "base")
    reloaded = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    assert_same_alphas(hf.head_alphas(reloaded), trained)
    torch.testing.assert_close(logits(reloaded, tok), want, atol=1e-5, rtol=1e-5)
    merged = reloaded.merge_and_unload()
    assert_same_alphas(hf.head_alphas(merged), trained)
    merged.save_pretrained(tmp_path / "merged")
    final = AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged")
    assert_same_alphas(hf.head_alphas(final), trained)
    torch.testing.assert_close(logits(final, tok), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("normalizer, form", [("entmax15", "adaptive"), ("alpha_entmax", "log"), ("softmax", "log"),
                                                     ("alpha_entmax", "adaptive_paper")])
def test_a_length_scale_decodes_with_the_cache_as_recomputed_and_is_saved(tmp_path, normalizer, form):
    tok = tokenizer(tmp_path / "llama")
    torch.manual_seed(0)
    model = hf.sparsify(llama(len(tok)).eval(), normalizer, length_scale=form)
    for module in hf.attention_modules(model).values():  # away from the start, which is near the identity
        for parameter in module.length_scale.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
    tokens = torch.randint(5, len(tok), (2, 9))
    with torch.no_grad():
        whole = model(tokens).logits
        unscaled = hf.sparsify(llama(len(tok)).eval(), normalizer)
        unscaled.load_state_dict(model.state_dict(), strict=False)
        assert not torch.allclose(unscaled(tokens).logits, whole, atol=1e-3)  # the scale changes the output
        cache, steps = None, []
        for i in range(tokens.shape[1]):
            out = model(tokens[:, i:i + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits[:, -1])
        # With left padding too: the padded row's scale counts its own tokens only.
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), tokens[:1, :6]], 1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], 1)
        alone = model(tokens[:1, :6]).logits
        left = model(padded, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits[:, 3:]
    torch.testing.assert_close(torch.stack(steps, 1), whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(left, alone, atol=1e-5, rtol=1e-5)
    model.save_pretrained(tmp_path / "llama")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "llama")
    assert loaded.config.fairseq_sparse["length_scale"] == form
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens).logits, whole, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="length_scale 'cubic'"):
        hf.sparsify(model, normalizer, length_scale="cubic")
