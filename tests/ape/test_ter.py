"""The ``ter`` scorer and fairseq-sparse-score-ape agree with sacrebleu's own command line."""

import subprocess
import unicodedata

import pytest
from fairseq.scoring import build_scorer

from fairseq_sparse.ape.bert_dictionary import model_spelling
from fairseq_sparse.modules.bert import load_bert_tokenizer
from fairseq_sparse.ape import ter as ter_module
from fairseq_sparse.ape.ter import corpus_ter, edit_effects, official_ter

from tests.conftest import BIN, minilm_path, run_cli, run_script, shared_data


def sacrebleu_cli(ref, hyp, *metric_args):
    proc = subprocess.run([str(BIN / "sacrebleu"), str(ref), "-i", str(hyp), "-b", "-w", "4", *metric_args],
                          capture_output=True, text=True, check=True)
    return float(proc.stdout.strip())


@pytest.fixture
def it_triplets(tmp_path):
    """The do-nothing baseline of 300 real WMT16/17 APE en-de (IT) triplets."""
    base = shared_data("ape", "wmt16-17-en-de-it-subset")
    for field in ("mt", "pe"):
        lines = (base / f"train.{field}").read_text(encoding="utf-8").splitlines()[:300]
        (tmp_path / f"test.{field}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path / "test.mt", tmp_path / "test.pe"


def test_ter_scorer_equals_sacrebleu_cli_case_sensitive(it_triplets):
    mt, pe = it_triplets
    scorer = build_scorer("ter", None)
    for hyp, ref in zip(mt.read_text(encoding="utf-8").splitlines(), pe.read_text(encoding="utf-8").splitlines()):
        scorer.add_string(ref, hyp)
    expected = sacrebleu_cli(pe, mt, "-m", "ter", "--ter-case-sensitive")
    assert scorer.score() == pytest.approx(expected, abs=0.005)
    assert "case:mixed|tok:tercom|norm:no|punct:yes" in scorer.result_string()
    # Case matters: a lowercased hypothesis is penalised unless asked otherwise.
    lowered = build_scorer("ter", None)
    for hyp, ref in zip(scorer.pred, scorer.ref):
        lowered.add_string(ref, hyp.lower())
    assert lowered.score() > scorer.score()


def test_score_script_matches_sacrebleu_cli(it_triplets, tmp_path):
    mt, pe = it_triplets
    hyp = tmp_path / "hyp"
    lines = mt.read_text(encoding="utf-8").splitlines()
    hyp.write_text("\n".join(lines[:150] + [line.replace(" ,", "") for line in lines[150:]]) + "\n", encoding="utf-8")
    proc = run_cli("fairseq-sparse-score-ape", "--hyp", hyp, "--mt", mt, "--pe", pe, check=True)
    rows = {line[:18].strip(): [float(x) for x in line[18:].split()] for line in proc.stdout.splitlines()[1:3]}
    for name, path in (("do-nothing (MT)", mt), ("post-edited", hyp)):
        ter, bleu = rows[name]
        assert ter == pytest.approx(sacrebleu_cli(pe, path, "-m", "ter", "--ter-case-sensitive"), abs=0.005)
        assert bleu == pytest.approx(sacrebleu_cli(pe, path, "-m", "bleu", "-tok", "none"), abs=0.005)
    effects = edit_effects(hyp.read_text(encoding="utf-8").splitlines(), lines,
                           pe.read_text(encoding="utf-8").splitlines())
    assert effects["modified"] == sum(" ," in line for line in lines[150:]) > 0
    assert (f"edits: modified {effects['modified']} of 300 sentences, improved {effects['improved']}, "
            f"deteriorated {effects['deteriorated']}") in proc.stdout


def test_score_script_names_misaligned_files(it_triplets, tmp_path):
    mt, pe = it_triplets
    hyp = tmp_path / "short"
    hyp.write_text("only one line\n", encoding="utf-8")
    proc = run_cli("fairseq-sparse-score-ape", "--hyp", hyp, "--mt", mt, "--pe", pe, check=False)
    assert proc.returncode != 0 and f"{hyp} has 1 lines but {pe} has 300" in proc.stderr


def sentence_ters_cli(ref, hyp):
    proc = subprocess.run([str(BIN / "sacrebleu"), str(ref), "-i", str(hyp), "-m", "ter", "--ter-case-sensitive",
                           "--sentence-level", "-b", "-w", "4"], capture_output=True, text=True, check=True)
    return [float(x) for x in proc.stdout.split()]


def test_edit_effects_match_sentence_ter_of_sacrebleu_cli(it_triplets, tmp_path):
    mt, pe = it_triplets
    mts, pes = (path.read_text(encoding="utf-8").splitlines() for path in (mt, pe))
    # 75 left alone, 75 replaced by the reference, 75 lose their commas, 75 get noise.
    hyps = (mts[:75] + pes[75:150] + [line.replace(" ,", "") for line in mts[150:225]]
            + ["zzz qqq " + line for line in mts[225:]])
    hyp = tmp_path / "hyp"
    hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    before, after = sentence_ters_cli(pe, mt), sentence_ters_cli(pe, hyp)
    changed = [i for i in range(300) if hyps[i] != mts[i]]
    effects = edit_effects(hyps, mts, pes)
    assert effects["sentences"] == 300 and effects["modified"] == len(changed)
    assert effects["improved"] == sum(after[i] < before[i] for i in changed)
    assert effects["deteriorated"] == sum(after[i] > before[i] for i in changed)
    assert effects["precision"] == pytest.approx(effects["improved"] / len(changed))
    # Copying the reference repairs every sentence the MT had wrong; noise breaks them all.
    assert effects["improved"] >= sum(mts[i] != pes[i] for i in range(75, 150))
    assert effects["deteriorated"] >= 75


def test_score_script_counts_edits_against_the_models_own_spelling_of_the_mt(it_triplets, tmp_path):
    """An uncased BERT copying German MT drops its umlauts: that copy is no edit when the
    script knows the BERT, and is one when it does not."""
    mt, pe = it_triplets
    mts = mt.read_text(encoding="utf-8").splitlines()
    copy = tmp_path / "copy"
    copy.write_text("\n".join(model_spelling(load_bert_tokenizer(minilm_path()), mts)) + "\n", encoding="utf-8")
    # BERT's uncased tokenizer strips what Unicode decomposes into combining marks (ä, é; not ß).
    accented = sum(any(unicodedata.category(c) == "Mn" for c in unicodedata.normalize("NFD", line)) for line in mts)
    assert accented > 10

    def edits(*extra):
        proc = run_cli("fairseq-sparse-score-ape", "--hyp", copy, "--mt", mt, "--pe", pe, "--lowercase", *extra, check=True)
        return next(line for line in proc.stdout.splitlines() if line.startswith("edits:"))

    assert edits("--bert-model", str(minilm_path())).startswith("edits: modified 0 of 300 sentences")
    assert edits().startswith(f"edits: modified {accented} of 300 sentences")


def test_corpus_ter_from_sentence_scores_is_sacrebleus_corpus_score(it_triplets, monkeypatch):
    """The grid's corpus TER from the sentences' statistics equals sacrebleu's corpus score of
    the text, through sacrebleu's aggregation and through the text where that is missing."""
    mt, pe = (path.read_text(encoding="utf-8").splitlines()[:60] for path in it_triplets)
    ter = official_ter()
    want = ter.corpus_score(mt, [pe]).score
    sentences = [ter.sentence_score(h, [r]) for h, r in zip(mt, pe)]
    assert corpus_ter(ter, sentences, mt, pe).score == pytest.approx(want, abs=1e-9)
    monkeypatch.setattr(ter_module, "_aggregates_statistics", lambda ter: False)  # a sacrebleu without it
    assert corpus_ter(ter, sentences[:1], mt, pe).score == pytest.approx(want, abs=1e-9)
