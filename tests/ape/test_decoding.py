"""Conservative decoding and the keep-the-MT gates (fairseq_sparse.ape.decoding), against
fairseq's own beam search, its own forced-decoding scorer and sacrebleu's sentence TER."""

import copy
import math
import re

import pytest
import torch

import fairseq_sparse
fairseq_sparse.load_plugin()
from fairseq.dataclass.configs import GenerationConfig  # noqa: E402
from fairseq.sequence_scorer import SequenceScorer  # noqa: E402
from fairseq.tasks import FairseqTask  # noqa: E402

from fairseq_sparse.ape.bert_dictionary import WordPieceDetokenizer  # noqa: E402
from fairseq_sparse.ape.decoding import (MarginRule, build_ape_generator, check_can_score_mt,  # noqa: E402
                                         mt_targets, word_edits)
from fairseq_sparse.ape.postedit import PostEditor  # noqa: E402
from fairseq_sparse.ape.ter import ape_scores  # noqa: E402
from tests.ape.test_task import TRAIN, generate  # noqa: E402
from tests.conftest import REPO, run_cli  # noqa: E402


@pytest.fixture
def ape_model(ape_raw, tiny_bert):
    """A randomly initialised bert_ape and its task (a fixed seed: its output is arbitrary
    but deterministic), with the first 12 test pairs."""
    from fairseq import options, tasks

    torch.manual_seed(3)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(ape_raw), *map(str, TRAIN), "--bert-model", str(tiny_bert)])
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    src = (ape_raw / "test.src").read_text(encoding="utf-8").splitlines()[:12]
    mt = (ape_raw / "test.mt").read_text(encoding="utf-8").splitlines()[:12]
    return model, task, src, mt


def batch(task, src, mt):
    sources = task.encode_inputs(src, mt)
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    return dataset.collater([dataset[i] for i in range(len(sources))])


def test_zero_conservativeness_is_fairseqs_own_search_hypothesis_for_hypothesis(ape_model):
    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    stock = FairseqTask.build_generator(task, [model], GenerationConfig(beam=3, max_len_b=12))
    ours = task.build_generator([model], GenerationConfig(beam=3, max_len_b=12))
    assert type(ours.model).__name__ == "ConservativeEnsemble", "C = 0 runs through the same code as C > 0"
    expected, got = stock.generate([model], sample), ours.generate([model], sample)
    for a, b in zip(expected, got, strict=True):
        assert len(a) == len(b) == 3
        for x, y in zip(a, b):
            assert torch.equal(x["tokens"], y["tokens"])
            assert torch.equal(x["positional_scores"], y["positional_scores"]) and float(x["score"]) == float(y["score"])


def forced_positional_scores(task, model, sample, targets):
    """fairseq's SequenceScorer on given target rows: per-token log-probabilities (of the
    ensemble where ``model`` is a list)."""
    from fairseq.data import data_utils

    pad, eos = task.dictionary.pad(), task.dictionary.eos()
    scored = dict(sample, target=data_utils.collate_tokens(targets, pad, eos),
                  net_input=dict(sample["net_input"], prev_output_tokens=data_utils.collate_tokens(
                      targets, pad, eos, move_eos_to_beginning=True)))
    models = model if isinstance(model, list) else [model]
    return [h[0]["positional_scores"] for h in SequenceScorer(task.dictionary).generate(models, scored)]


@pytest.mark.parametrize("penalty", [0.01, 5.0])
def test_conservativeness_subtracts_c_from_exactly_the_tokens_in_neither_src_nor_mt(ape_model, penalty):
    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    generator = task.build_generator([model], GenerationConfig(beam=3, max_len_b=12))
    generator.model.penalty = penalty
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    targets = [h[0]["tokens"] for h in hypos]
    plain = forced_positional_scores(task, model, sample, targets)
    novel_seen = 0
    for i, (hypo, reference) in enumerate(zip(hypos, plain)):
        present = set(sample["net_input"]["src_tokens"][i].tolist()) | {task.dictionary.eos()}
        novel = torch.tensor([t not in present for t in hypo[0]["tokens"].tolist()])
        novel_seen += int(novel.sum())
        torch.testing.assert_close(hypo[0]["positional_scores"], reference - penalty * novel, atol=1e-4, rtol=0)
    if penalty < 0.1:  # the random model's favourite token is in neither src nor mt
        assert novel_seen > 0, "the penalty is exercised on the hypotheses' own tokens"
    else:
        assert novel_seen == 0, "a large penalty steers the search to tokens of src and mt"


def test_infinite_conservativeness_writes_only_tokens_of_src_and_mt(ape_model):
    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    generator = build_ape_generator(FairseqTask.build_generator(task, [model], GenerationConfig(beam=3, max_len_b=12)),
                                    [model], task.dictionary, conservativeness=math.inf)
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    for i, nbest in enumerate(hypos):
        present = set(sample["net_input"]["src_tokens"][i].tolist())
        for hypo in nbest:
            assert set(hypo["tokens"].tolist()) <= present and math.isfinite(float(hypo["score"]))


def test_the_gate_scores_the_mt_as_fairseqs_forced_decoding_scorer_does(ape_model):
    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    gate = build_ape_generator(FairseqTask.build_generator(task, [model], GenerationConfig(beam=2, max_len_b=12)),
                               [model], task.dictionary, keep_mt_margin=-math.inf)
    rows, scored = gate.mt_scores(sample)
    reference = forced_positional_scores(task, model, sample, rows)
    encoded_mt = task.encode_inputs(mt, mt)  # [CLS] mt [SEP] mt [SEP]: the mt segment is the encoded mt
    for i, ((score, positional), expected) in enumerate(zip(scored, reference)):
        j = int(sample["id"][i])  # the collater orders rows by length
        assert rows[i].tolist()[:-1] == encoded_mt[j].tolist()[1:len(rows[i])] and rows[i][-1] == task.dictionary.eos()
        torch.testing.assert_close(positional, expected, atol=1e-5, rtol=0)
        # The beam's length normalisation (--lenpen 1): the mean over the tokens and [SEP].
        assert float(score) == pytest.approx(float(expected.mean()), abs=1e-5)


def test_an_ensembles_search_and_mt_scores_are_fairseqs_for_that_ensemble(ape_model):
    """Two models (the second perturbed): the beam search is fairseq's own ensemble
    search, and the gate scores the MT as fairseq's scorer scores it with the same ensemble
    (the log of the members' averaged probabilities)."""
    model, task, src, mt = ape_model
    other = copy.deepcopy(model)
    torch.manual_seed(4)
    with torch.no_grad():  # the first, made to disagree with it
        for weight in other.parameters():
            weight.add_(torch.randn_like(weight))
    models = [model, other]
    sample = batch(task, src, mt)
    config = GenerationConfig(beam=3, max_len_b=12)
    stock = FairseqTask.build_generator(task, models, config).generate(models, sample)
    gate = build_ape_generator(FairseqTask.build_generator(task, models, config), models, task.dictionary,
                               keep_mt_margin=-math.inf)
    with torch.no_grad():
        ours = gate.generate(models, sample)
    for a, b in zip(stock, ours, strict=True):
        for x, y in zip(a, b):  # M = -inf keeps no MT: the beam's own hypotheses, in its order
            assert torch.equal(x["tokens"], y["tokens"]) and float(x["score"]) == float(y["score"])
    rows, scored = gate.mt_scores(sample)
    reference = forced_positional_scores(task, models, sample, rows)
    single = forced_positional_scores(task, models[:1], sample, rows)
    for (score, positional), expected, alone in zip(scored, reference, single):
        torch.testing.assert_close(positional, expected, atol=1e-5, rtol=0)
        assert not torch.allclose(positional, alone, atol=0.1), "the second member counts"
        assert float(score) == pytest.approx(float(expected.mean()), abs=1e-5)


def test_the_mt_competes_with_each_returned_hypothesis(ape_model):
    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    config = GenerationConfig(beam=3, max_len_b=12)
    with torch.no_grad():
        plain = FairseqTask.build_generator(task, [model], config).generate([model], sample)
        _, scored = build_ape_generator(FairseqTask.build_generator(task, [model], config), [model],
                                        task.dictionary, keep_mt_margin=0.0).mt_scores(sample)
        # A margin inside the spread of (best - MT) scores, so that some MTs win and some lose.
        margin = float(torch.tensor([float(b[0]["score"] - s) for b, (s, _) in zip(plain, scored)]).median())
        gated = build_ape_generator(FairseqTask.build_generator(task, [model], config), [model], task.dictionary,
                                    keep_mt_margin=margin).generate([model], sample)
    rows = mt_targets(sample["net_input"]["src_tokens"], task.dictionary)[0]
    kept = 0
    for beam, nbest, mt_row in zip(plain, gated, rows, strict=True):
        mt_score = float(nbest[0]["mt_score"])
        ahead = [h for h in beam if float(h["score"]) - mt_score > margin]
        expected = [h["tokens"].tolist() for h in ahead] + [mt_row.tolist()]
        expected += [h["tokens"].tolist() for h in beam[len(ahead):] if h["tokens"].tolist() != mt_row.tolist()]
        assert [h["tokens"].tolist() for h in nbest] == expected[:3]
        assert [h["is_mt"] for h in nbest] == [t == mt_row.tolist() for t in expected[:3]]
        kept += nbest[0]["is_mt"]
    assert 0 < kept < len(plain), "some MTs win at this margin and some lose, or the test shows little"


def test_an_edit_limit_puts_the_mt_before_hypotheses_further_from_it(ape_model):
    from sacrebleu.metrics import TER

    model, task, src, mt = ape_model
    sample = batch(task, src, mt)
    config = GenerationConfig(beam=3, max_len_b=12)
    detokenizer, ter = WordPieceDetokenizer(), TER(case_sensitive=True)  # tercom's settings, built here

    def text(tokens):
        return detokenizer.decode(task.dictionary.string(tokens.int()))

    margin = -math.inf  # every hypothesis beats the MT by the margin: the limit alone decides
    rows = mt_targets(sample["net_input"]["src_tokens"], task.dictionary)[0]
    with torch.no_grad():
        plain = FairseqTask.build_generator(task, [model], config).generate([model], sample)
        distances = [[ter.sentence_score(text(h["tokens"]), [text(row)]).num_edits for h in beam]
                     for beam, row in zip(plain, rows)]
        # A limit inside the spread of the hypotheses' distances to their MT.
        limit = int(torch.tensor([d for ds in distances for d in ds]).median())
        gated = build_ape_generator(FairseqTask.build_generator(task, [model], config), [model], task.dictionary,
                                    keep_mt_margin=margin, keep_mt_max_edits=limit).generate([model], sample)
    reordered = 0
    for beam, nbest, mt_row, ds in zip(plain, gated, rows, distances, strict=True):
        ahead = [h for h, d in zip(beam, ds) if d <= limit]
        expected = [h["tokens"].tolist() for h in ahead] + [mt_row.tolist()]
        expected += [h["tokens"].tolist() for h, d in zip(beam, ds) if d > limit]
        expected = [t for i, t in enumerate(expected) if t != mt_row.tolist() or mt_row.tolist() not in expected[:i]]
        assert [h["tokens"].tolist() for h in nbest] == expected[:3]
        reordered += [h["tokens"].tolist() for h in nbest] != [h["tokens"].tolist() for h in beam]
    assert reordered > 0, "the limit moved the MT ahead of some hypothesis, or the test shows little"
    assert word_edits("a b c d", "a c b d e") == ter.sentence_score("a b c d", ["a c b d e"]).num_edits == 2


def test_an_edit_limit_of_zero_returns_every_mt_and_a_huge_one_is_the_margin_alone(ape_model, ape_raw):
    model, task, src, mt = ape_model
    pe = (ape_raw / "test.pe").read_text(encoding="utf-8").splitlines()[:12]
    kept_all = PostEditor([model], task, beam=2, max_len_b=12, keep_mt_margin=-math.inf,
                          keep_mt_max_edits=0).postedits(src, mt)
    assert [e.text for e in kept_all] == mt and all(e.is_mt for e in kept_all)
    assert ape_scores([e.text for e in kept_all], pe)[0] == ape_scores(mt, pe)[0]
    alone = PostEditor([model], task, beam=2, max_len_b=12, keep_mt_margin=0.0).postedit(src, mt)
    assert PostEditor([model], task, beam=2, max_len_b=12, keep_mt_margin=0.0,
                      keep_mt_max_edits=10 ** 6).postedit(src, mt) == alone


def test_an_infinite_margin_returns_every_mt_so_ter_equals_doing_nothing(ape_model, ape_raw):
    model, task, src, mt = ape_model
    pe = (ape_raw / "test.pe").read_text(encoding="utf-8").splitlines()[:12]
    kept_all = PostEditor([model], task, beam=2, max_len_b=12, keep_mt_margin=math.inf).postedits(src, mt)
    assert [e.text for e in kept_all] == mt and all(e.is_mt for e in kept_all), "the MT's own text, case and all"
    assert ape_scores([e.text for e in kept_all], pe)[0] == ape_scores(mt, pe)[0]
    plain = PostEditor([model], task, beam=2, max_len_b=12).postedit(src, mt)
    never = PostEditor([model], task, beam=2, max_len_b=12, keep_mt_margin=-math.inf).postedits(src, mt)
    assert [e.text for e in never] == plain, "M = -inf scores the MT but returns the beam's output"
    assert all(e.mt_score is not None and e.mt_score <= 0 for e in never)


def test_the_margin_rule_names_the_first_candidate_that_outranks_the_mt():
    """MarginRule is the gate's rule for generation and for tuning alike: beat the MT's score by
    more than the margin and, with an edit limit, lie within it."""
    rule = MarginRule(0.5)
    assert rule.outranks(-1.0, -1.6) and not rule.outranks(-1.0, -1.5) and not rule.outranks(-2.0, -1.0)
    assert rule.first([-2.0, -1.0, -0.5], -1.6) == 1 and rule.first([-2.0, -1.5], -1.6) is None
    limited = MarginRule(0.5, max_edits=1)
    assert limited.first([-1.0, -1.0], -1.6, edits=[3, 1]) == 1, "too far from the MT: the next one"
    assert MarginRule(-math.inf).first([-9.0], 0.0) == 0 and MarginRule(math.inf).first([0.0], -9.0) is None


def test_a_model_that_cannot_score_the_mt_and_bad_values_are_refused(ape_model):
    model, task, src, mt = ape_model
    with pytest.raises(ValueError, match="--keep-mt-margin: Linear is not an encoder-decoder model"):
        check_can_score_mt([torch.nn.Linear(2, 2)])
    for value, message in ((-0.5, r"--conservativeness -0.5: must be a number >= 0"),
                           (float("nan"), r"--conservativeness nan: must be a number >= 0")):
        with pytest.raises(ValueError, match=message):
            PostEditor([model], task, conservativeness=value)
    with pytest.raises(ValueError, match=r"--keep-mt-margin nan: must be a number"):
        PostEditor([model], task, keep_mt_margin=float("nan"))
    for value in (-1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match=rf"--keep-mt-max-edits {value}: must be a whole number of word edits"):
            PostEditor([model], task, keep_mt_margin=0.1, keep_mt_max_edits=value)
    with pytest.raises(ValueError, match="--keep-mt-max-edits limits the margin gate: give --keep-mt-margin too"):
        PostEditor([model], task, keep_mt_max_edits=2)


def test_generate_and_interactive_take_the_options_and_log_kept_mts(tmp_path, ape_trained, tiny_bert):
    ape_raw, checkpoint = ape_trained
    plain = generate(ape_raw, checkpoint)
    zero = generate(ape_raw, checkpoint, "--conservativeness", "0")
    assert zero.stdout == plain.stdout
    kept = generate(ape_raw, checkpoint, "--keep-mt-margin", "inf", "--nbest", "2")
    assert "keep-the-MT gate (--keep-mt-margin inf): 20 of 20 sentences so far kept their MT" in kept.stderr
    from fairseq_sparse.ape.bert_dictionary import model_spelling
    from fairseq_sparse.modules.bert import load_bert_tokenizer

    mt = (ape_raw / "test.mt").read_text(encoding="utf-8").splitlines()
    spelled = model_spelling(load_bert_tokenizer(tiny_bert), mt)  # what the D- lines print: WordPieces merged
    firsts = {}
    for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", kept.stdout, re.M):
        firsts.setdefault(int(m.group(1)), m.group(2))
    assert len(re.findall(r"^D-", kept.stdout, re.M)) == 40, "--nbest 2: the MT and the beam's best"
    assert [firsts[i] for i in range(20)] == spelled
    bad = run_cli("fairseq-generate", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                  checkpoint, "--cpu", "--conservativeness", "-1", check=False)
    assert bad.returncode != 0 and "--conservativeness -1.0: must be a number >= 0" in bad.stderr
    pairs = tmp_path / "pairs.tsv"
    src = (ape_raw / "test.src").read_text(encoding="utf-8").splitlines()[:2]
    pairs.write_text("".join(f"{s}\t{m}\n" for s, m in zip(src, mt)), encoding="utf-8")
    interactive = run_cli("fairseq-interactive", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                          "--path", checkpoint, "--cpu", "--beam", "2", "--max-len-b", "30", "--input", pairs,
                          "--conservativeness", "2", "--keep-mt-margin", "0.5")
    assert "keep-the-MT gate (--keep-mt-margin 0.5)" in interactive.stderr
    # The minimum-Bayes-risk gate is gone: its option is an unknown argument, not silently ignored.
    gone = run_cli("fairseq-generate", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                   checkpoint, "--cpu", "--keep-mt-risk", "1", check=False)
    assert gone.returncode != 0 and "unrecognized arguments: --keep-mt-risk 1" in gone.stderr
    near = generate(ape_raw, checkpoint, "--keep-mt-margin=-inf", "--keep-mt-max-edits", "0")
    assert ("keep-the-MT gate (--keep-mt-margin -inf --keep-mt-max-edits 0): 20 of 20 sentences so far kept their "
            "MT") in near.stderr
    alone = run_cli("fairseq-generate", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                    checkpoint, "--cpu", "--keep-mt-max-edits", "2", check=False)
    assert alone.returncode != 0 and "--keep-mt-max-edits limits the margin gate" in alone.stderr
    scored = run_cli("fairseq-generate", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                     checkpoint, "--cpu", "--gen-subset", "test", "--score-reference", "--keep-mt-margin", "0.5",
                     "--conservativeness", "1", check=False)
    assert scored.returncode != 0
    assert "--score-reference scores the reference post-edits and searches nothing, so --conservativeness and " \
           "--keep-mt-margin would be ignored" in scored.stderr


def test_search_options_with_a_reference_scorer_are_refused(ape_model):
    model, task, _, _ = ape_model
    scorer = SequenceScorer(task.dictionary)
    assert build_ape_generator(scorer, [model], task.dictionary) is scorer
    for options, named in ((dict(keep_mt_margin=0.5), "so --keep-mt-margin would be ignored"),
                           (dict(conservativeness=1.0), "so --conservativeness would be ignored")):
        with pytest.raises(ValueError, match=f"--score-reference .*{named}"):
            build_ape_generator(scorer, [model], task.dictionary, **options)


def favour(model, token_ids, boost=100.0):
    """Make ``model`` put almost all its probability on ``token_ids`` at every step."""
    normalized = model.get_normalized_probs

    def biased(net_output, log_probs, sample=None):
        logits = net_output[0].clone()
        logits[..., token_ids] += boost
        return normalized((logits, *net_output[1:]), log_probs, sample)

    model.get_normalized_probs = biased
    return model


def test_special_tokens_other_than_sep_are_never_generated(ape_model):
    """A model that favours [CLS] and [MASK] (as a briefly trained one favours [CLS]) writes
    neither: fairseq's own search would repeat them up to the length limit."""
    model, task, src, mt = ape_model
    tokenizer = task.tokenizer
    never = [tokenizer.cls_token_id, tokenizer.mask_token_id]
    favour(model, never)
    sample = batch(task, src, mt)
    stock = FairseqTask.build_generator(task, [model], GenerationConfig(beam=3, max_len_b=12))
    assert set(never) & set(stock.generate([model], sample)[0][0]["tokens"].tolist()), "the test's model favours them"
    assert task.dictionary.never_generated == sorted(set(tokenizer.all_special_ids) - {tokenizer.sep_token_id,
                                                                                        tokenizer.unk_token_id})
    for conservativeness, alignment in ((0.0, None), (2.0, None), (0.0, "hard")):
        stock_kind = FairseqTask.build_generator(task, [model], GenerationConfig(beam=3, max_len_b=12,
                                                                                 print_alignment=alignment))
        ours = build_ape_generator(stock_kind, [model], task.dictionary, conservativeness)
        for nbest in ours.generate([model], sample):
            for hypo in nbest:
                assert not set(hypo["tokens"].tolist()) & set(task.dictionary.never_generated)
                assert math.isfinite(float(hypo["score"]))


def test_empty_post_edits_are_said(ape_model, caplog):
    model, task, src, mt = ape_model
    favour(model, [task.dictionary.eos()])
    generator = task.build_generator([model], GenerationConfig(beam=2, max_len_b=12, min_len=0))
    with caplog.at_level("WARNING", logger="fairseq_sparse.ape.task"):
        hypos = task.inference_step(generator, [model], batch(task, src[:4], mt[:4]))
    assert all(h[0]["tokens"].tolist() == [task.dictionary.eos()] for h in hypos)
    assert "4 of 4 post-edits of this batch are empty" in caplog.text


def test_the_gate_counts_word_edits_only_where_the_margin_does_not_decide(ape_model, monkeypatch):
    """Generation ran a sentence TER for every hypothesis under an edit limit, and listed every
    candidate for tuning; it now counts edits only for hypotheses that beat the MT by the
    margin, and only PostEditor (whose output carries them) lists candidates."""
    from fairseq_sparse.ape import decoding

    model, task, src, mt = ape_model
    counted = []
    real = decoding.word_edits
    monkeypatch.setattr(decoding, "word_edits", lambda h, m: counted.append(h) or real(h, m))
    sample = batch(task, src, mt)
    for margin, some in ((math.inf, False), (-math.inf, True)):
        counted.clear()
        gate = build_ape_generator(FairseqTask.build_generator(task, [model], GenerationConfig(beam=3, max_len_b=12)),
                                   [model], task.dictionary, keep_mt_margin=margin, keep_mt_max_edits=2)
        with torch.no_grad():
            hypos = gate.generate([model], sample)
        assert bool(counted) == some, margin  # an infinite margin decides alone: no TER at all
        assert not any("candidates" in h for nbest in hypos for h in nbest)
    edits = PostEditor([model], task, beam=3, max_len_b=12, keep_mt_margin=0.0, keep_mt_max_edits=2).postedits(src, mt)
    assert all(e.candidates for e in edits)
