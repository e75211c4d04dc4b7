"""fairseq checkpoints load under torch >= 2.6 through the plugin, and hostile pickles do not."""

import argparse
import os
import pickle

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_sparse
fairseq_sparse.load_plugin()  # installs the allow-list
from fairseq_sparse.compat.checkpoints import FAIRSEQ_CHECKPOINT_GLOBALS

from tests.conftest import run_cli

TINY_TRANSFORMER = [
    "--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu",
    "--no-progress-bar", "--log-format", "simple", "--seed", "1",
]


def test_no_global_safety_switch():
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    assert argparse.Namespace in torch.serialization.get_safe_globals()
    assert all(g in torch.serialization.get_safe_globals() for g in FAIRSEQ_CHECKPOINT_GLOBALS)


def test_train_resume_and_generate_through_the_clis(multi30k_bin, tmp_path):
    save = tmp_path / "ckpt"
    common = [multi30k_bin, "--user-dir", fairseq_sparse.__path__[0], "--save-dir", save, *TINY_TRANSFORMER]
    run_cli("fairseq-train", *common, "--max-epoch", "1")
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    updates_after_epoch1 = state["optimizer_history"][-1]["num_updates"]
    assert updates_after_epoch1 > 0

    resumed = run_cli("fairseq-train", *common, "--max-epoch", "2")
    log = resumed.stdout + resumed.stderr
    assert f"Loaded checkpoint {save}/checkpoint_last.pt (epoch 2 @ {updates_after_epoch1} updates)" in log, log[-3000:]
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    # The second epoch continued from the first: same batches again, nothing redone or lost.
    assert state["optimizer_history"][-1]["num_updates"] == 2 * updates_after_epoch1

    gen = run_cli(
        "fairseq-generate", multi30k_bin, "--user-dir", fairseq_sparse.__path__[0],
        "--path", save / "checkpoint_last.pt", "--gen-subset", "valid", "--cpu",
        "--max-tokens", "1000", "--beam", "2", "--max-len-b", "30",
    )
    assert "BLEU4" in gen.stdout + gen.stderr

    sentences = tmp_path / "input.en"
    sentences.write_text("a man is riding a bike .\ntwo dogs play in the snow .\n")
    interactive = run_cli(
        "fairseq-interactive", multi30k_bin, "--user-dir", fairseq_sparse.__path__[0],
        "--path", save / "checkpoint_last.pt", "--cpu", "--beam", "2", "--input", sentences,
        "--source-lang", "en", "--target-lang", "de", "--max-len-b", "30",
    )
    hypotheses = [line for line in interactive.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 2, interactive.stdout[-2000:]


def test_numpy_scalars_in_metrics_state_load(tmp_path):
    path = tmp_path / "ck.pt"
    torch.save({"extra_state": {"metrics": {"loss": np.float64(1.5), "n": np.int64(3)}}, "args": argparse.Namespace(a=1)}, path)
    state = torch.load(path)
    assert state["extra_state"]["metrics"]["loss"] == 1.5 and state["args"].a == 1


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = _RunsCode()
    evil.marker = marker
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "args": None, "payload": evil}, path)
    with pytest.raises(pickle.UnpicklingError, match="system"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_options_that_moved_from_the_criterion_to_a_model_move_when_an_older_checkpoint_loads():
    """--classification-weight (ssvae) and --nll-samples (bitvector_vae) were options of the
    latent_marginalization criterion; fairseq-validate rebuilds the criterion from the
    checkpoint's config, which failed on the unknown key until they were moved on loading."""
    from omegaconf import OmegaConf

    from fairseq_sparse.checkpoint_migrations import move_options

    def older(model):
        cfg = OmegaConf.create({"model": {"_name": model, "hidden_dim": 8},
                                "criterion": {"_name": "latent_marginalization", "estimator": "sfe",
                                              "classification_weight": 3.0, "nll_samples": 5}})
        OmegaConf.set_struct(cfg, True)
        return {"cfg": cfg}

    ssvae = move_options(older("ssvae"))["cfg"]
    assert ssvae.model.classification_weight == 3.0 and "nll_samples" not in ssvae.model
    assert set(ssvae.criterion) == {"_name", "estimator"}
    bitvector = move_options(older("bitvector_vae"))["cfg"]
    assert bitvector.model.nll_samples == 5 and "classification_weight" not in bitvector.model
    game = move_options(older("signaling_game"))["cfg"]
    assert set(game.model) == {"_name", "hidden_dim"} and set(game.criterion) == {"_name", "estimator"}


def test_a_sentence_vae_checkpoint_of_a_former_objective_name_loads_renamed():
    """The objectives vae, vae_l1 and vae_l2 are elbo, elbo_l1 and elbo_l2 now: a checkpoint's
    criterion (config or legacy args) is renamed on loading, its options kept."""
    import argparse

    from omegaconf import OmegaConf

    from fairseq_sparse.checkpoint_migrations import move_options

    for former, now in (("vae", "elbo"), ("vae_l1", "elbo_l1"), ("vae_l2", "elbo_l2")):
        cfg = OmegaConf.create({"model": {"_name": "sentence_vae"}, "criterion": {"_name": former, "kl_weight": 0.5}})
        OmegaConf.set_struct(cfg, True)
        state = move_options({"cfg": cfg, "args": argparse.Namespace(criterion=former)})
        assert state["cfg"].criterion == {"_name": now, "kl_weight": 0.5} and state["args"].criterion == now
    kept = move_options({"cfg": OmegaConf.create({"criterion": {"_name": "hsvae"}}), "args": None})
    assert kept["cfg"].criterion._name == "hsvae"


def test_an_ape_checkpoint_with_the_removed_risk_gate_option_loads(ape_trained, tmp_path):
    """Checkpoints of the ape task saved while it had --keep-mt-risk keep that key in their
    task config: the task no longer has it, and such a checkpoint still loads and post-edits
    (fairseq leaves out a saved option its task's dataclass does not have)."""
    from fairseq_sparse.ape.postedit import PostEditor

    data, checkpoint = ape_trained
    state = torch.load(checkpoint, weights_only=False)
    state["cfg"]["task"]["keep_mt_risk"] = 2.0  # a checkpoint holds its config as plain containers
    torch.save(state, tmp_path / "older.pt")
    editor = PostEditor.from_checkpoint(str(tmp_path / "older.pt"), data=data, beam=1, max_len_b=5)
    assert "keep_mt_risk" not in editor.task.cfg
    assert len(editor.postedit(["Das ist gut ."], ["This is good ."])) == 1
