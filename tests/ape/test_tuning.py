"""fairseq_sparse.ape.tuning (fairseq-sparse-tune-ape): the grid it simulates is what the gate does."""

import json

import pytest

import fairseq_sparse
fairseq_sparse.load_plugin()
from fairseq_sparse.ape.postedit import PostEditor  # noqa: E402
from fairseq_sparse.ape import tuning  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def test_the_grid_is_what_generation_with_those_values_gives(tmp_path, ape_trained):
    ape_raw, checkpoint = ape_trained
    out = tmp_path / "tuning"
    proc = run_cli("fairseq-sparse-tune-ape", "--path", checkpoint,
                      "--data", ape_raw, "--out", out, "--conservativeness", "0", "1.5", "--beam", "2",
                      "--max-len-b", "30", "--keep-mt-margin", "off", "-1", "0", "0.5", "inf",
                      "--keep-mt-max-edits", "off", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen = json.loads((out / "chosen.json").read_text())
    grid = [line.split("\t") for line in (out / "grid.tsv").read_text().splitlines()]
    assert grid[0] == ["C", "M", "E", "TER", "BLEU", "modified", "improved", "deteriorated", "kept"]
    # Per C: no gate, 3 finite margins each without and with the edit limit, M = inf.
    assert len(grid) == 1 + 2 * (1 + 3 * 2 + 1)
    assert (out / "tuning.png").stat().st_size > 10_000 and "Chosen: C = " in (out / "grid.md").read_text()
    assert chosen["split"] == "valid" and chosen["max_len_b"] == 30
    assert "keep_mt_risk" not in chosen and "keep_mt_max_edits" in chosen
    # M = inf keeps every MT: doing nothing, whatever C.
    for row in grid[1:]:
        if row[1] == "inf":
            assert row[3] == f"{chosen['do_nothing_ter']:.2f}" and row[5] == "0" and row[8] == "30"
    # The simulated grid cell equals real generation with the gate at that C and M.
    texts = tuning.read_triplets(ape_raw, "valid")
    models, task = tuning.load(checkpoint, ape_raw, "cpu")
    edits = tuning.beam_pass(models, task, 1.5, texts["src"], texts["mt"], beam=2, max_len_b=30)
    distances = tuning.mt_distances(edits)
    limited = 0
    for margin in (-1.0, 0.0, 0.5):
        for max_edits in (None, 2):
            simulated, kept = tuning.gated(edits, texts["mt"], margin, max_edits, distances)
            real = PostEditor(models, task, beam=2, max_len_b=30, conservativeness=1.5, keep_mt_margin=margin,
                              keep_mt_max_edits=max_edits).postedits(texts["src"], texts["mt"])
            assert [e.text for e in real] == simulated and sum(e.is_mt for e in real) == kept
            limited += simulated != tuning.gated(edits, texts["mt"], margin)[0]
    assert limited > 0, "the edit limit changed some output, or the test shows little"
    spread = [e.score - e.mt_score for e in edits]
    assert min(spread) < 0.5 < max(spread) or min(spread) < -1 < max(spread), "the margins tried split the dev set"


def test_bad_grid_values_are_named(tmp_path):
    for option, value, message in (("--keep-mt-margin", "nan", "--keep-mt-margin nan: must be a number"),
                                   ("--keep-mt-margin", "big", "--keep-mt-margin big: not a number or 'off'"),
                                   ("--conservativeness", "-2", "--conservativeness -2.0: must be a number >= 0"),
                                   ("--keep-mt-risk", "1", "unrecognized arguments: --keep-mt-risk 1"),
                                   ("--keep-mt-max-edits", "-1", "--keep-mt-max-edits -1: must be a whole number"),
                                   ("--keep-mt-max-edits", "2.5", "--keep-mt-max-edits 2.5: not a whole number")):
        proc = run_cli("fairseq-sparse-tune-ape", "--path", "x", "--data",
                          tmp_path, "--out", tmp_path / "o", option, value, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


def test_the_scorer_shares_sentence_scores_and_gives_sacrebleus_corpus_figures(ape_raw, tiny_bert):
    from fairseq_sparse.ape.ter import ape_scores, edit_effects

    mts = (ape_raw / "test.mt").read_text(encoding="utf-8").splitlines()
    refs = (ape_raw / "test.pe").read_text(encoding="utf-8").splitlines()
    scorer = tuning.Scorer(tiny_bert, mts, refs)
    # Outputs that share sentences: the MT, the reference, and half of each.
    half = [r if i % 2 else m for i, (m, r) in enumerate(zip(mts, refs))]
    for hyps in (mts, refs, half, half[::-1]):
        ter, bleu, effects = scorer.score(hyps)
        spelled = scorer.spell(hyps)
        expected = ape_scores(spelled, scorer.refs)
        assert ter == pytest.approx(expected[0], abs=1e-9) and bleu == pytest.approx(expected[2], abs=1e-9)
        assert effects == edit_effects(spelled, scorer.mts, scorer.refs)
    assert scorer.score(half)[2]["improved"] > 0
    with pytest.raises(ValueError, match="3 outputs for 20 references"):
        scorer.score(mts[:3])


def test_the_tuning_figure_keeps_its_legend_off_the_curves(tmp_path):
    """The main job's tuning.png legend covered a curve."""
    rows = [{"conservativeness": c, "keep_mt_margin": m, "keep_mt_max_edits": e, "ter": 20 - c + (m or 0) / 10}
            for c in (0.0, 0.5, 1.0) for m in (None, -1.0, 0.0, 1.0) for e in (None, 2)]
    fig = tuning.plot(rows, rows[0], 21.0, tmp_path / "tuning.png", "valid")
    assert (tmp_path / "tuning.png").stat().st_size > 5000
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent(renderer)), "the legend lies on a panel"
    assert {t.get_text() for t in fig.legends[0].get_texts()} >= {"doing nothing (MT as is)", "no gate"}
