"""WordPiece ids that keep the data's tokenisation, and the detokeniser that merges them."""

import pytest

from fairseq_sparse.ape.bert_dictionary import model_spelling, wordpiece_ids
from fairseq_sparse.modules.bert import load_bert_tokenizer
from fairseq_sparse.ape.ter import ape_scores
from tests.conftest import minilm_path, shared_data

FIELDS = ("src", "mt", "pe")


@pytest.fixture(scope="module")
def tokenizer():
    return load_bert_tokenizer(minilm_path())


def read(corpus, field, n=None):
    lines = (corpus.parent / f"{corpus.name}{field}").read_text(encoding="utf-8").splitlines()
    return lines[-n:] if n else lines


def test_punctuation_inside_a_data_token_continues_the_word(tokenizer):
    ids = wordpiece_ids(tokenizer, ["Film-coated tablets ( see section 4.4 ) , b.i.d. ."])[0]
    assert tokenizer.convert_ids_to_tokens(ids) == [
        "film", "##-", "##coat", "##ed", "tablets", "(", "see", "section", "4", "##.", "##4", ")", ",",
        "b", "##.", "##i", "##.", "##d", "##.", "."]


@pytest.mark.parametrize("corpus", [("wmt16-17-en-de-it-subset", "train."), ("wmt17-de-en-pharma", "de-en.train.")])
def test_merging_wordpieces_gives_back_the_data_tokenisation(tokenizer, corpus):
    prefix = shared_data("ape", corpus[0]) / corpus[1]
    normalize = tokenizer.backend_tokenizer.normalizer.normalize_str  # the uncased BERT's lowercasing
    for field in FIELDS:
        lines = read(prefix, field, 4000)
        encoded = wordpiece_ids(tokenizer, lines)
        wrong = [(line, got) for line, got in zip(lines, model_spelling(tokenizer, lines))
                 if got != " ".join(normalize(line).split())]
        # Only characters the vocabulary cannot spell ([UNK]) may differ.
        assert all("[UNK]" in got for _, got in wrong), wrong[:3]
        assert len(wrong) < len(lines) / 500
        # Where no punctuation is attached to a word, the ids are the tokenizer's own.
        for line, ids in zip(lines[:500], encoded):
            if all(len(tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(w)) == 1 for w in line.split()):
                assert ids == tokenizer(line, add_special_tokens=False)["input_ids"]


def test_a_perfect_copy_of_the_mt_scores_as_doing_nothing(tokenizer):
    """What the task encodes and the detokeniser merges back is scorable against .pe: a
    system that copies the MT gets the do-nothing TER (BERT's own basic split loses 5)."""
    prefix = shared_data("ape", "wmt17-de-en-pharma") / "de-en.train."
    mt, pe = read(prefix, "mt", 1000), [line.lower() for line in read(prefix, "pe", 1000)]
    copied = model_spelling(tokenizer, mt)
    do_nothing = ape_scores([line.lower() for line in mt], pe)[0]
    assert ape_scores(copied, pe)[0] == pytest.approx(do_nothing, abs=0.05)
