"""scripts/bitvector_dynamics.py: a real fairseq-train log read interval by interval,
the first update at one code found, and logs it cannot read named."""

import sys

import pytest

from tests.conftest import REPO, run_cli

from bitvector_dynamics import main


def inner(update, calls, entropy, shared, spread, alignment):
    """A train_inner line; no alignment (None) while the encoder is held (--encoder-delay)."""
    aligned = "" if alignment is None else f"gradient_alignment={alignment}, "
    return (f"2026-11-25 18:26:17 | INFO | train_inner | epoch 001:  {update} / 9 loss=1.0, decoder_calls={calls}, "
            f"neg_elbo_bits_per_dim=1.7, code_entropy_bits={entropy}, score_abs={shared}, score_shared={shared}, "
            f"score_spread={spread}, positive_bits={update * 2}, {aligned}num_updates={update}, gnorm=2.0")


def cells(text, label):
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_collapse_is_dated_and_a_real_log_is_read(tmp_path):
    collapsing = tmp_path / "collapsing.log"
    collapsing.write_text("\n".join([inner(1, 3.5, 1.6, 0.1, 0.05, None), inner(2, 1.2, 0.2, 4.0, 1.0, 0.3),
                                     inner(3, 1.0, 0.005, 30.0, 2.0, 0.0), inner(4, 1.0, 0.0, 45.0, 2.5, 0.0)]))
    log = tmp_path / "real.log"
    proc = run_cli("fairseq-train", "--user-dir", REPO / "fairseq_sparse", "--task", "bitvector_vae", "--arch",
                   "bitvector_vae", "--criterion", "latent_marginalization", "--estimator", "sparsemap",
                   "--latent-bits", "8", "--optimizer", "adam", "--lr", "2e-3", "--batch-size", "64", "--cpu",
                   "--num-workers", "0", "--no-save", "--log-format", "simple", "--log-interval", "1",
                   "--max-update", "3", "--nll-samples", "2", "--encoder-input", "centered", cwd=tmp_path)
    log.write_text(proc.stdout)
    main([f"lr 2e-3={collapsing}", str(log), "--out", str(tmp_path / "out"), "--updates", "2", "3", "--early", "2"])
    text = (tmp_path / "out" / "dynamics.md").read_text()
    assert cells(text, "lr 2e-3") == ["lr 2e-3", "4", "3", "0.20 / 4.00 / 1.00", "0.01 / 30.00 / 2.00", "0.300",
                                      "8.0", "1.00"]
    real = cells(text, "real")
    assert real[0:2] == ["real", "3"]
    entropy, shared, spread = map(float, real[4].split(" / "))  # at update 3
    # An untrained encoder on centred images: q over at most 9 codes, small scores.
    assert 0 <= entropy <= 3 + 1e-3 and 0 <= shared < 1 and 0 < spread < 1
    assert 0 < float(real[5]) <= 1 and 0 <= float(real[6]) <= 8
    assert (tmp_path / "out" / "dynamics.png").stat().st_size > 10_000


def test_logs_it_cannot_read_are_named(tmp_path, capsys):
    empty = tmp_path / "epoch_only.log"
    empty.write_text("2026-11-25 18:26:18 | INFO | train | epoch 001 | loss 180.255 | num_updates 4\n")
    with pytest.raises(SystemExit, match="epoch_only.log: no train_inner lines; train with --log-format simple"):
        main([str(empty), "--out", str(tmp_path / "out")])
    vae = tmp_path / "sentence_vae.log"
    vae.write_text("2026-11-25 | INFO | train_inner | epoch 001:  1 / 9 loss=1.0, kl=3.0, num_updates=1\n")
    with pytest.raises(SystemExit, match="sentence_vae.log: its interval lines lack decoder_calls, code_entropy_bits"):
        main([str(vae), "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "absent.log"), "--out", str(tmp_path / "out")])
    assert "absent.log: no such log" in capsys.readouterr().err
    for option, message in ((["--updates", "0"], "--updates 0: updates are counted from 1"),
                            (["--early", "0"], "--early 0: must be at least 1")):
        with pytest.raises(SystemExit):
            main([str(vae), "--out", str(tmp_path / "out"), *option])
        assert message in capsys.readouterr().err
