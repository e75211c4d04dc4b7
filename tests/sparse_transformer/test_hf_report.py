"""The attention report of a saved Hugging Face model (fairseq-sparse-attention-report --hf),
end to end at tiny size, on real sentences: its densities against a count made here from
the model's own attention weights."""

import re

import pytest
import torch
from transformers import AutoTokenizer, BartConfig, BartModel, BertConfig, BertModel, LlamaConfig, LlamaModel

import fairseq_sparse.hf as hf
from tests.conftest import minilm_path, run_cli, shared_data


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    # The first 16 words of each: maps of about 20 WordPieces a side draw in a fraction of
    # the time of the whole sentences' and show the same.
    lines = [" ".join(line.split()[:16]) for line in
             (shared_data("text", "hsvae-dbpedia14") / "test.txt").read_text(encoding="utf-8").splitlines()[:12]]
    path = tmp_path_factory.mktemp("text") / "sentences.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def save(model, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model", tokenizer


def brute_density(model, tokenizer, lines, causal, keys=False):
    """Per layer and head: the mean over queries of the fraction of allowed keys with weight
    (with ``keys``, of the number of keys with weight)."""
    out = []
    for line in lines:
        batch = tokenizer([line], return_tensors="pt", truncation=True, max_length=128)
        with torch.no_grad():
            attentions = model(**batch, output_attentions=True).attentions
        per_layer = []
        for p in attentions:
            p = p[0]
            T = p.shape[-1]
            allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)) if causal else torch.ones(T, T, dtype=torch.bool)
            kept = ((p > 0) & allowed).sum(-1)
            per_layer.append((kept if keys else kept / allowed.sum(-1)).sum(-1))  # (H,) summed over queries
        out.append((per_layer, attentions[0].shape[-1]))
    queries = sum(T for _, T in out)
    return [[float(sum(o[0][layer][h] for o in out) / queries) for h in range(out[0][0][layer].numel())]
            for layer in range(len(out[0][0]))]


def table_rows(report, heading):
    section = report.split(heading, 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| self |")][:2]
    return [[float(x) for x in line.split("|")[3:-2]] for line in rows]


@pytest.mark.parametrize("kind", ["bert_alpha", "llama_entmax15"])
def test_the_report_of_a_saved_hf_model(tmp_path, sentences, kind):
    torch.manual_seed(0)
    tokenizer_vocab = len(AutoTokenizer.from_pretrained(str(minilm_path())).get_vocab())
    if kind == "bert_alpha":
        model = BertModel(BertConfig(vocab_size=tokenizer_vocab, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=37))
        hf.sparsify(model, "alpha_entmax", alpha_init="random")
        with torch.no_grad():  # alphas that training moved
            for module in hf.attention_modules(model).values():
                module.head_alpha.pre_alpha.add_(0.2)
    else:
        model = LlamaModel(LlamaConfig(vocab_size=tokenizer_vocab, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, intermediate_size=37))
        hf.sparsify(model, "entmax15")
    with torch.no_grad():  # scores large enough for zeros in a 32-wide random model
        for name, p in model.named_parameters():
            if name.endswith(("query.weight", "key.weight", "q_proj.weight", "k_proj.weight")):
                p.mul_(6)
    path, tokenizer = save(model, tmp_path)
    out = tmp_path / "report"
    run_cli("fairseq-sparse-attention-report", "--hf", path, "--text", sentences, "--out", out,
            "--sentences", "0", "3", "--max-sentences", "10")
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "10 sentences" in text
    for png in ("alpha_per_head", "alpha_change", "alpha_histogram", "density", "diversity"):
        assert (out / f"{png}.png").stat().st_size > 5000, png
    # A sentence's maps may take several pages (figures.map_pages); report.md shows each.
    for stem in ("attention_0_self0", "attention_3_self1"):
        pages = sorted(out.glob(f"{stem}*.png"))
        assert pages and all(p.stat().st_size > 5000 for p in pages), stem
        assert all(f"![]({p.name})" in text for p in pages), stem
    model = hf.from_pretrained(type(model), path).eval()
    lines = sentences.read_text(encoding="utf-8").splitlines()[:10]
    want = brute_density(model, tokenizer, lines, causal=kind.startswith("llama"))
    got = table_rows(text, "## Attention density per head")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-3, rtol=0)
    assert any(d < 0.9 for layer in got for d in layer), "sparse heads: some keys get no weight"
    want = brute_density(model, tokenizer, lines, causal=kind.startswith("llama"), keys=True)
    got = table_rows(text, "## Keys attended per query")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=6e-3, rtol=0)
    alphas = table_rows(text, "## Learned alpha per head")
    expected = [a.tolist() for a in hf.head_alphas(model).values()] if kind == "bert_alpha" else [[1.5] * 4] * 2
    torch.testing.assert_close(torch.tensor(alphas), torch.tensor(expected), atol=1e-3, rtol=0)
    if kind == "bert_alpha":
        assert re.search(r"Change since initialisation.*\n\n\| site", text)
        assert "+0.0" in text.split("Change since initialisation", 1)[1].split("##", 1)[0]


def test_a_softmax_model_reads_as_dense_and_an_encoder_decoder_is_refused(tmp_path, sentences):
    vocab = len(AutoTokenizer.from_pretrained(str(minilm_path())).get_vocab())
    path, _ = save(BertModel(BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=37)), tmp_path / "bert")
    run_cli("fairseq-sparse-attention-report", "--hf", path, "--text", sentences, "--out", tmp_path / "r")
    text = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert table_rows(text, "## Attention density per head") == [[1.0] * 4] * 2
    # Softmax keeps every key: the support is the number of keys a query may attend to.
    support = table_rows(text, "## Keys attended per query")
    section = text.split("## Keys attended per query", 1)[1].split("##", 1)[0]
    allowed = [float(row.split("|")[3]) for row in section.splitlines() if row.startswith("| self |")][-2:]
    assert support == [[allowed[0]] * 4, [allowed[1]] * 4] and allowed[0] > 10
    assert table_rows(text, "## Learned alpha per head") == [[1.0] * 4] * 2
    bart, _ = save(BartModel(BartConfig(vocab_size=vocab, d_model=32, encoder_layers=1, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
                                        decoder_ffn_dim=37)), tmp_path / "bart")
    proc = run_cli("fairseq-sparse-attention-report", "--hf", bart, "--text", sentences, "--out", tmp_path / "b",
                   check=False)
    assert proc.returncode != 0 and "encoder-decoder" in proc.stderr
    proc = run_cli("fairseq-sparse-attention-report", "--hf", path, "--out", tmp_path / "c", check=False)
    assert proc.returncode == 2 and "--hf needs --text" in proc.stderr


def test_a_model_saved_without_its_tokenizer_is_refused_unless_one_is_given(tmp_path):
    """transformers builds a default tokenizer of five special tokens for a directory without
    one, which would read every word as [UNK]: the report refuses it, naming --tokenizer."""
    from fairseq_sparse.sparse_transformer import hf_report

    vocab = len(AutoTokenizer.from_pretrained(str(minilm_path())).get_vocab())
    BertModel(BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=37)).save_pretrained(tmp_path / "bare")
    with pytest.raises(ValueError, match=r"--hf .*bare: no tokenizer saved beside the model.*--tokenizer"):
        hf_report.load(tmp_path / "bare")
    _, tokenizer, _ = hf_report.load(tmp_path / "bare", tokenizer=str(minilm_path()))
    assert tokenizer.tokenize("the report reads words") == ["the", "report", "reads", "words"]
