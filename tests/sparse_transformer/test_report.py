"""The report command end to end on a trained tiny entmax_transformer."""

import re
import statistics

import pytest
import torch

import fairseq_sparse
fairseq_sparse.load_plugin()  # allow-lists what fairseq checkpoints hold for torch.load
from fairseq_sparse.sparse_transformer import report as attention_report
from tests.conftest import REPO, run_cli, write_ape_split
from tests.ape import test_bert_ape, test_dual_source_transformer

USER_DIR = str(REPO / "fairseq_sparse")


def test_report_from_checkpoints(multi30k_bin, tmp_path):
    run_cli("fairseq-train", multi30k_bin, "--user-dir", USER_DIR, "--task", "translation",
            "--arch", "entmax_transformer_tiny", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
            "--cpu", "--seed", "2", "--max-epoch", "2", "--save-dir", tmp_path / "ck", "--num-workers", "0")
    out = tmp_path / "report"
    run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt", "--data", multi30k_bin,
            "--out", out, "--sentences", "0", "1", "--trajectory", tmp_path / "ck" / "checkpoint1.pt",
            tmp_path / "ck" / "checkpoint2.pt")
    for png in ["alpha_per_head", "alpha_change", "alpha_histogram", "alpha_trajectories", "density", "diversity",
                "attention_0_encoder0", "attention_1_cross1"]:
        assert (out / f"{png}.png").stat().st_size > 5000, png
    report = (out / "report.md").read_text()
    learned_md, change_md = report.split("## Attention density")[0].split("Change since initialisation")
    learned, change = heads_table(learned_md), heads_table(change_md)
    assert len(learned) == 6 and set(change) == set(learned)
    # Learned minus change is the initial alpha the checkpoint keeps.
    state = torch.load(tmp_path / "ck" / "checkpoint_last.pt")["model"]
    for (site, layer), values in learned.items():
        assert all(1.01 <= x <= 2.0 for x in values)
        owner = {"encoder": f"encoder.layers.{layer}.self_attn", "decoder": f"decoder.layers.{layer}.self_attn",
                 "cross": f"decoder.layers.{layer}.encoder_attn"}[site]
        initial = state[f"{owner}.head_alpha.initial_alpha"].tolist()
        assert [a - c for a, c in zip(values, change[(site, layer)])] == pytest.approx(initial, abs=2e-3)
    # Whether the heads kept their initial order: two epochs move no head as far as half the median
    # gap between neighbouring initial alphas, so the report says the order cannot be told yet.
    starts = sorted(initial_alpha for v in initial_alphas(state).values() for initial_alpha in v)
    gap = statistics.median(b - a for a, b in zip(starts, starts[1:]))
    moved = max(abs(c) for v in change.values() for c in v)
    assert moved < gap / 2
    assert "cannot be told yet" in report and "Spearman" not in report
    assert "## Head roles" in report
    # Per site: shares of heads below 1.3 and above 1.7 and the bimodality coefficient.
    sites = re.findall(r"^\| (encoder|decoder|cross) \| [0-9.]+ to [0-9.]+ \| 8 \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$",
                       report, re.M)
    assert [s for s, *_ in sites] == ["encoder", "decoder", "cross"]
    assert all(0 <= float(below) + float(above) <= 1 for _, below, above, _ in sites)
    moves = re.search(r"Of (\d+) heads, (\d+) first moved to denser attention \(alpha down\), (\d+) to sparser and "
                      r"(\d+) by less than 0.001; (\d+) of the \2 that", report)
    assert moves and int(moves[1]) == 24 == sum(map(int, moves.groups()[1:4])) and int(moves[5]) <= int(moves[2])
    # Each head's favourite key token: 40 validation sentences, so every site has pieces in 10 of them.
    favourite = report.split("Favourite key token type per head")[1].split("## ")[0]
    rows = re.findall(r"^\| (encoder|decoder|cross) \| (\d) \| (.*) \|$", favourite, re.M)
    assert len(rows) == 6
    shares = [float(x) for _, _, cells in rows for x in re.findall(r"` ([0-9.]+)", cells)]
    assert len(shares) == 24 and all(0 < x <= 1 for x in shares)
    trajectory = report.split("## Alpha trajectories")[1]
    assert [int(u) for u in re.findall(r"^\| (\d+) \|", trajectory, re.M)][:2] == [0, updates(tmp_path / "ck" / "checkpoint1.pt")]

    # Checkpoints of another run were plotted as this run's history (its update 0 as this
    # run's initialisation): another normaliser, or the same one from another seed.
    for name, options, why in (("softmax", ["--attention-normalizer", "softmax"], "other initial alphas"),
                               ("seed3", ["--seed", "3"], "other initial alphas")):
        run_cli("fairseq-train", multi30k_bin, "--user-dir", USER_DIR, "--task", "translation",
                "--arch", "entmax_transformer_tiny", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                "--cpu", "--seed", "2", "--max-epoch", "1", "--save-dir", tmp_path / name, "--num-workers", "0",
                *options)
        proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt", "--data",
                       multi30k_bin, "--out", tmp_path / f"r_{name}", "--trajectory", tmp_path / "ck" / "checkpoint1.pt",
                       tmp_path / name / "checkpoint1.pt", check=False)
        assert proc.returncode != 0, proc.stderr[-1500:]
        assert (f"--trajectory {tmp_path / name / 'checkpoint1.pt'}: not a checkpoint of the run of --path "
                f"{tmp_path / 'ck' / 'checkpoint_last.pt'} ({why}") in proc.stderr, proc.stderr[-1500:]
    proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt", "--data",
                   multi30k_bin, "--out", tmp_path / "r0", "--max-sentences", "0", check=False)
    assert proc.returncode != 0 and "--max-sentences 0: must be at least 1" in proc.stderr


def heads_table(markdown):
    """{(site, layer): value per head} of a report table, its mean column left out."""
    rows = re.findall(r"^\| (encoder|mt_encoder|decoder|cross|mt_cross) \| (\d) \| ([-+0-9. |]+)$", markdown, re.M)
    return {(s, int(i)): [float(x) for x in cells.split("|") if x.strip()][:-1] for s, i, cells in rows}


def updates(checkpoint):
    return torch.load(checkpoint)["optimizer_history"][-1]["num_updates"]


def test_initial_order_needs_distinct_initial_alphas():
    alphas = {("encoder", 0): [1.2, 1.3, 1.1], ("decoder", 0): [1.4, 1.6, 1.5]}
    same = {sl: [1.5] * 3 for sl in alphas}  # --alpha-init 1.5
    assert attention_report.initial_order_md(same, alphas) == "(Every head started at the same alpha: no initial order to keep.)"
    initial = {("encoder", 0): [1.5, 1.7, 1.3], ("decoder", 0): [1.6, 1.9, 1.8]}
    text = attention_report.initial_order_md(initial, alphas)
    assert "of the 6 heads: 0.943 (1: " in text and "6 of 6 pairs of heads kept their order" in text


def test_report_rejects_a_missing_checkpoint(tmp_path):
    proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "nope.pt", "--data", tmp_path,
                   "--out", tmp_path / "r", check=False)
    assert proc.returncode != 0 and "checkpoint not found" in proc.stderr


def test_report_rejects_a_stock_transformer(multi30k_bin, tmp_path):
    run_cli("fairseq-train", multi30k_bin, "--user-dir", USER_DIR, "--task", "translation", "--arch", "transformer_tiny",
            "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu", "--max-epoch", "1",
            "--save-dir", tmp_path / "ck", "--num-workers", "0")
    proc = run_cli("fairseq-sparse-attention-report", "--path", tmp_path / "ck" / "checkpoint_last.pt",
                   "--data", multi30k_bin, "--out", tmp_path / "r", check=False)
    assert proc.returncode != 0 and "not a checkpoint of entmax_transformer" in proc.stderr


BUILD = {"bert_ape": test_bert_ape.build, "dual_source_transformer": test_dual_source_transformer.build}


@pytest.mark.parametrize("arch", sorted(BUILD))
def test_ape_attention_maps_label_every_position(tmp_path, tiny_bert, arch):
    """Every row and column of a map is labelled with its own token, [CLS] and [SEP]
    included; the maps are the model's attention for that sentence; a sentence past
    --max-sentences is still drawn, one outside the split is named."""
    write_ape_split(tmp_path, "test", 0, 6)
    torch.manual_seed(0)
    model, task = BUILD[arch](tmp_path, tiny_bert, "--attention-normalizer", "alpha_entmax")
    task.load_dataset("test")
    dataset = task.dataset("test")
    longest = int(dataset.src_sizes.argmax())  # batched last: past --max-sentences 1
    _, maps, seen = attention_report.collect(model, task, "test", 1, {longest})
    assert seen == 1
    d = task.source_dictionary
    source = [d[i] for i in dataset[longest]["source"].tolist()]
    post_edit = [d[i] for i in dataset[longest]["target"].tolist()]
    first_sep = source.index("[SEP]") + 1
    assert source[0] == "[CLS]" and source.count("[SEP]") == 2 and post_edit[-1] == "[SEP]"
    if arch == "bert_ape":
        expected = {"encoder": (source, source), "cross": (post_edit, source)}
    else:
        expected = {"encoder": (source[:first_sep], source[:first_sep]),
                    "mt_encoder": (source[first_sep:], source[first_sep:]),
                    "cross": (post_edit, source[:first_sep]), "mt_cross": (post_edit, source[first_sep:])}
    # The decoder's self and cross attention label their queries alike: the token each predicts.
    expected["decoder"] = (post_edit, ["[SEP]"] + post_edit[:-1])
    for (sid, site, layer), (p, queries, keys) in maps.items():
        assert sid == longest and (queries, keys) == expected[site], site
        assert p.shape[1:] == (len(queries), len(keys))
    assert {site for _, site, _ in maps} == set(expected)

    # The same attention as the model gives this sentence alone (no padding anywhere).
    sample = dataset.collater([dataset[longest]])
    modules = {(site, i): m for site, i, m in model.attention_modules()}
    for m in modules.values():
        m.record_attention = True
    with torch.no_grad():
        model(**sample["net_input"])
    torch.testing.assert_close(maps[(longest, "decoder", 0)][0], modules[("decoder", 0)].last_attention[0])
    if arch == "bert_ape":
        torch.testing.assert_close(maps[(longest, "encoder", 0)][0], modules[("encoder", 0)].last_attention[0])

    with pytest.raises(ValueError, match="--sentences 6: split test has 6 sentences"):
        attention_report.collect(model, task, "test", 1, {6})


def test_dual_source_report_has_every_attention_site(tmp_path, tiny_bert, monkeypatch):
    write_ape_split(tmp_path, "test", 0, 6)
    model, task = test_dual_source_transformer.build(tmp_path, tiny_bert, "--attention-normalizer", "alpha_entmax")
    monkeypatch.setattr(attention_report, "load", lambda path, data: (model, task))
    out = tmp_path / "report"
    attention_report.main(["--path", __file__, "--data", str(tmp_path), "--split", "test", "--out", str(out)])
    report = (out / "report.md").read_text()
    learned = heads_table(report.split("Change since initialisation")[0])
    sites = ["encoder", "mt_encoder", "decoder", "cross", "mt_cross"]
    assert sorted(learned) == sorted([(s, 0) for s in sites] + [("decoder", 1), ("cross", 1), ("mt_cross", 1)])
    for site in sites:
        assert (out / f"attention_0_{site}0.png").stat().st_size > 5000, site


def test_figures_fit_their_titles_and_wrap_many_heads(tmp_path):
    """A 4-head heatmap is wide enough for its title; a 12-head attention map is a grid of
    MAP_COLUMNS heads a row (not one row of 12 panels) with a colour bar; the alpha histogram
    has one panel per site present (not overlaid bars)."""
    from PIL import Image

    from fairseq_sparse.sparse_transformer import figures

    sites = ("encoder", "decoder", "cross")
    values = {("encoder", 0): [1.2, 1.5, 1.7, 1.9], ("decoder", 0): [1.1, 1.3, 1.6, 2.0]}
    figures.heatmap(values, "attention density (fraction of keys with nonzero weight)", tmp_path / "h.png", sites)
    width, _ = Image.open(tmp_path / "h.png").size
    assert width >= figures.MIN_WIDTH * 120
    p = torch.softmax(torch.randn(12, 9, 9), -1).numpy()
    tokens = [f"t{i}" for i in range(9)]
    figures.attention_map(p, tokens, tokens, [1.5] * 12, "sentence 0", "query", tmp_path / "m.png")
    width, height = Image.open(tmp_path / "m.png").size
    panel_width, panel_height = 3.2 * 120, 3.4 * 120  # the smallest panel, in pixels at 120 dpi
    assert figures.MAP_COLUMNS == 4 and height >= 3 * panel_height and width < 6 * panel_width
    figures.alpha_histogram({("encoder", 0): [1.2, 1.5]}, tmp_path / "a1.png", sites)
    figures.alpha_histogram(values, tmp_path / "a2.png", sites)
    one, two = Image.open(tmp_path / "a1.png").size[1], Image.open(tmp_path / "a2.png").size[1]
    assert two - one >= 1.6 * 120 - 1  # a second site adds a panel


def test_heatmap_labels_read_on_light_and_dark_cells():
    """A cell's label is black on the light ends of the report's colour maps (magma's and
    viridis's top, RdBu_r's middle) and white on their dark ends."""
    from matplotlib import colormaps

    from fairseq_sparse.sparse_transformer.figures import label_color

    assert [label_color(colormaps["magma"](x)) for x in (0.0, 1.0)] == ["w", "k"]
    assert [label_color(colormaps["viridis"](x)) for x in (0.0, 1.0)] == ["w", "k"]
    assert [label_color(colormaps["RdBu_r"](x)) for x in (0.0, 0.5, 1.0)] == ["w", "k", "w"]


def initial_alphas(state):
    return {k: v.tolist() for k, v in state.items() if k.endswith("head_alpha.initial_alpha")}


def test_initial_order_is_not_claimed_for_alphas_that_have_not_moved():
    """After 20 updates the report said "training kept the heads in the order of their
    initialisation (Spearman 1.000)" when no head had moved."""
    initial = {("encoder", 0): [1.2, 1.5, 1.8], ("decoder", 0): [1.3, 1.6, 1.9]}
    barely = {sl: [a - 0.0004 for a in v] for sl, v in initial.items()}
    text = attention_report.initial_order_md(initial, barely)
    assert "moved by more than 0.0004" in text and "cannot be told yet" in text and "Spearman" not in text


def test_small_alpha_changes_are_printed_not_rounded_to_zero_and_colour_bars_are_named(tmp_path):
    """alpha_change printed +0.000 in every cell after a short run, and its colour bar had no label."""
    from fairseq_sparse.sparse_transformer import figures

    assert figures.signed_format([0.02, -0.3]) == "{:+.3f}"
    assert figures.signed_format([0.00012, -0.00004]).format(0.00012) == "+0.00012"
    assert figures.signed_format([0.004, -0.0004, 0.0003, 0.0]) == "{:+.5f}"  # the typical change, not the largest
    assert figures.signed_format([0.0, 0.0]) == "{:+.3f}"
    change = {("encoder", 0): [0.00012, -0.00004], ("decoder", 0): [0.00003, 0.0]}
    fig = figures.heatmap(change, "alpha change", tmp_path / "c.png", ("encoder", "decoder"), -0.00012, 0.00012,
                          "RdBu_r", figures.signed_format([x for v in change.values() for x in v]),
                          label="learned minus initial alpha")
    cells = [t.get_text() for t in fig.axes[0].texts]
    assert "+0.000120" in cells and "-0.000040" in cells and not any(c == "+0.000" for c in cells)
    assert fig.axes[1].get_ylabel() == "learned minus initial alpha"


def test_attention_maps_of_four_heads_are_a_square_grid_with_readable_labels(tmp_path):
    """Four heads were a 1,656 x 408 strip with 5-point labels."""
    from PIL import Image

    from fairseq_sparse.sparse_transformer import figures

    tokens = [f"t{i}" for i in range(12)]
    p = torch.softmax(torch.randn(4, 12, 12), -1).numpy()
    fig = figures.attention_map(p, tokens, tokens, [1.5] * 4, "sentence 0", "query", tmp_path / "m.png")
    width, height = Image.open(tmp_path / "m.png").size
    assert 0.6 < height / width < 1.6, (width, height)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 4
    assert all(label.get_fontsize() >= 7 for ax in panels for label in ax.get_xticklabels())


def test_a_long_sentences_maps_take_pages_whose_labels_read_at_full_size(tmp_path):
    """Heads over 128 tokens would be one figure shrunk past reading on any screen: each
    page is at most MAP_PAGE inches a side (one head a page where one map is larger),
    every head drawn once, the labels at MAP_LABEL_SIZE points; short sentences share
    pages."""
    from PIL import Image

    from fairseq_sparse.sparse_transformer import figures

    tokens = [f"t{i}" for i in range(128)]
    p = torch.softmax(torch.randn(12, 128, 128), -1).numpy()
    names = figures.attention_maps(p[:2], tokens, tokens, [1.5] * 2, "sentence 0", "query", tmp_path, "m")
    assert names == [f"m_heads{h}-{h}.png" for h in range(2)]
    for name in names:
        width, height = Image.open(tmp_path / name).size
        assert width <= 2 * figures.MAP_PAGE * 120 and height <= 2 * figures.MAP_PAGE * 120
    short = figures.attention_maps(p[:, :20, :20], tokens[:20], tokens[:20], [1.5] * 12, "s", "query", tmp_path, "s")
    assert short == ["s_heads0-8.png", "s_heads9-11.png"]
    width, height = Image.open(tmp_path / short[0]).size
    assert width <= figures.MAP_PAGE * 120 + 1 and height <= figures.MAP_PAGE * 120 + 1
