"""scripts/ape_source_ablation.py: the splits it writes and the losses it reads back."""

import json

import pytest

from fairseq_sparse.ape import source_ablation as ablation
from tests.conftest import REPO, run_cli, run_script


@pytest.mark.parametrize("lengths", [[3, 1], [5, 5, 5], [1, 9, 2, 8, 3, 7, 4], [4] * 6, list(range(11, 0, -1))])
def test_sources_are_swapped_between_neighbours_in_length_and_none_keeps_its_own(lengths):
    partner = ablation.swap_partners(lengths)
    assert sorted(partner) == list(range(len(lengths)))  # each source is used once
    assert all(partner[i] != i for i in range(len(lengths)))
    rank = {i: r for r, i in enumerate(sorted(range(len(lengths)), key=lambda i: (lengths[i], i)))}
    assert all(abs(rank[i] - rank[partner[i]]) <= 2 for i in range(len(lengths)))
    assert ablation.swap_partners(lengths) == partner


def test_one_sentence_cannot_be_swapped():
    with pytest.raises(SystemExit, match="1 sentence"):
        ablation.swap_partners([4])


def test_the_four_losses_are_fairseq_validates_on_faithful_splits(tmp_path, ape_trained):
    data, checkpoint = ape_trained
    out = tmp_path / "ablation"
    proc = run_script("ape_source_ablation.py", "--path", checkpoint, "--data", data, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "ablation.json").read_text())
    bits = result["bits_per_token"]
    assert sorted(bits) == ["valid", "valid_mt_as_target", "valid_src_swapped", "valid_src_swapped_mt_as_target"]
    assert result["source_worth_bits_per_pe_token"] == round(bits["valid_src_swapped"] - bits["valid"], 4)
    assert "What the right source is worth" in (out / "ablation.md").read_text()

    lines = {name: {f: (out / "data" / f"{name}.{f}").read_text().splitlines() for f in ("src", "mt", "pe")}
             for name in bits}
    src, mt, pe = (lines["valid"][f] for f in ("src", "mt", "pe"))
    assert (src, mt, pe) == tuple((data / f"valid.{f}").read_text().splitlines() for f in ("src", "mt", "pe"))
    swapped = lines["valid_src_swapped"]["src"]
    assert sorted(swapped) == sorted(src) and all(a != b for a, b in zip(swapped, src))
    assert lines["valid_src_swapped"]["mt"] == mt and lines["valid_src_swapped"]["pe"] == pe
    assert lines["valid_mt_as_target"]["pe"] == mt and lines["valid_src_swapped_mt_as_target"]["pe"] == mt
    assert lines["valid_src_swapped_mt_as_target"]["src"] == swapped

    # The plain split's loss is what fairseq-validate reports on the data's own valid split.
    own = run_cli("fairseq-validate", data, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                  checkpoint, "--valid-subset", "valid", "--criterion", "label_smoothed_cross_entropy", "--cpu",
                  "--max-tokens", "4000", "--num-workers", "0")
    assert ablation.validate_losses(own.stdout + own.stderr) == {"valid": bits["valid"]}


def test_a_missing_checkpoint_or_tokenizer_is_named(tmp_path, ape_trained):
    data, checkpoint = ape_trained
    proc = run_script("ape_source_ablation.py", "--path", tmp_path / "none.pt", "--data", data, "--out", tmp_path)
    assert proc.returncode != 0 and "--path " in proc.stderr and "no such checkpoint" in proc.stderr
    proc = run_script("ape_source_ablation.py", "--path", checkpoint, "--data", tmp_path, "--out", tmp_path / "o")
    assert proc.returncode != 0 and "no tokenizer kept there" in proc.stderr
