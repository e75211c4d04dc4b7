"""The attention report of a saved Hugging Face model (``fairseq-sparse-attention-report
--hf PATH --text FILE --out DIR``): the statistics and figures of the fairseq report
(:mod:`.report`) over the sentences of a text file, one per line.

The model is loaded with :func:`fairseq_sparse.hf.from_pretrained` (its normaliser and
learned alphas) as ``AutoModel``, with the tokenizer saved beside it; its self-attention
is the one site, ``self`` (causal where the model's attention is).  A head of a fixed
normaliser has that normaliser's alpha (softmax 1, 1.5-entmax 1.5, sparsemax 2), and a
model that was never sparsified is softmax.  Models whose outputs carry no
``attentions`` (encoder-decoders, which also need target text) are refused.
"""

from collections import defaultdict
from pathlib import Path

import torch

from ..hf import attends_causally, attn_implementation, attention_alphas, attention_modules, evaluating, from_pretrained, load_tokenizer
from ..text import read_lines
from . import stats

SITE = "self"


def load(path, tokenizer=None):
    """(model, tokenizer, whether the attention is causal) of a save_pretrained directory;
    the tokenizer saved beside the model, or the one at ``tokenizer``."""
    from transformers import AutoModel

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"--hf {path}: not a save_pretrained directory (no config.json)")
    tokenizer = load_tokenizer(path, "--tokenizer" if tokenizer is not None else "--hf", tokenizer)
    model = from_pretrained(AutoModel, path).eval()
    if model.config.is_encoder_decoder:
        raise ValueError(f"--hf {path}: an encoder-decoder ({type(model).__name__}); the report reads models whose "
                         "outputs carry one self-attention per layer (BERT, RoBERTa, Llama, GPT-2, ...)")
    modules = list(attention_modules(model).values())
    if not modules:
        raise ValueError(f"--hf {path}: {type(model).__name__} has no attention module of transformers' interface")
    return model, tokenizer, attends_causally(model)


def alphas_of(model):
    """({(site, layer): alpha per head}, the same at initialisation): learned heads from their
    HeadAlpha, fixed ones from the normaliser (which training does not move)."""
    def by_layer(alphas):
        return {(SITE, layer): a.tolist() for layer, a in enumerate(alphas.values())}

    return by_layer(attention_alphas(model)), by_layer(attention_alphas(model, initial=True))


@torch.no_grad()
def collect(model, tokenizer, causal, sentences, keep, max_length, batch_size=32):
    """The sums of :func:`stats.add_sentence` per (site, layer) over ``sentences`` (one
    string each), and the attention maps of the ``keep`` ids."""
    kind = "decoder" if causal else "encoder"
    specials = set(tokenizer.all_special_tokens)
    acc = defaultdict(lambda: defaultdict(float))
    maps = {}
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(sentences[start:start + batch_size], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
        with evaluating(model, weights=True):  # sdpa and flash attention return no weights
            attentions = model(**batch, output_attentions=True).attentions
        if attentions is None or any(a is None for a in attentions):
            raise ValueError(f"{type(model).__name__} returned no attention weights")
        for b in range(batch["input_ids"].size(0)):
            sid = start + b
            real = batch["attention_mask"][b].bool()
            pieces = tokenizer.convert_ids_to_tokens(batch["input_ids"][b][real].tolist())
            words = stats.word_ids_from_pieces(pieces, specials) if kind == "encoder" else None
            for layer, weights in enumerate(attentions):
                p = weights[b][:, real][:, :, real].float()
                stats.add_sentence(acc[(SITE, layer)], p, kind, pieces, words)
                if sid in keep:
                    rows = pieces[1:] + ["(next)"] if causal else pieces
                    maps[(sid, SITE, layer)] = (p.clone(), rows, pieces)
    return acc, maps


def analyse(path, text, sentence_ids, max_sentences, max_length, tokenizer=None):
    """The report's statistics (the shape :func:`.report.analyse` gives) of the model at
    ``path`` over the first ``max_sentences`` lines of ``text`` (tokenized by the tokenizer
    saved with the model, or the one at ``tokenizer``)."""
    model, tokenizer, causal = load(path, tokenizer)
    sentences = list(read_lines(text))[:max_sentences]
    outside = sorted(i for i in sentence_ids if not 0 <= i < len(sentences))
    if outside:
        raise ValueError(f"--sentences {' '.join(map(str, outside))}: the report reads {len(sentences)} sentences of "
                         f"{text} (ids 0 to {len(sentences) - 1})")
    acc, maps = collect(model, tokenizer, causal, sentences, set(sentence_ids), max_length)
    alphas, initial = alphas_of(model)
    return dict(
        sites=(SITE,), alphas=alphas, initial=initial,
        change={sl: [a - i for a, i in zip(alphas[sl], initial[sl])] for sl in alphas},
        density=stats.per_head(acc, "density"), support=stats.per_head(acc, "support"),
        allowed={sl: a["allowed"] / a["queries"] for sl, a in acc.items()},
        diversity={sl: a["diversity"] / a["queries"] for sl, a in acc.items()},
        previous=stats.per_head(acc, "previous", "previous_queries"),
        same_word=stats.per_head(acc, "same_word", "same_word_queries"),
        tokens=stats.favourite_tokens(acc), series=None, maps=maps, sentences=len(sentences),
        title=f"`{path}` ({type(model).__name__}, {attn_implementation(model)})", corpus=f"`{text}`",
        query_labels={SITE: stats.QUERY_LABELS[causal]})
