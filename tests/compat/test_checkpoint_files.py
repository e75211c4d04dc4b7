"""Checkpoint files are written atomically; a torn one is named at resume with the
whole checkpoint beside it (fairseq_sparse.compat.checkpoint_files)."""

import re

import pytest
import torch

import fairseq_sparse
fairseq_sparse.load_plugin()
from fairseq import checkpoint_utils  # noqa: E402

from tests.ape.test_task import TRAIN  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def test_a_kill_during_a_copy_leaves_the_old_file_whole(tmp_path, monkeypatch):
    old, new = tmp_path / "checkpoint_last.pt", tmp_path / "checkpoint1.pt"
    torch.save({"version": "old"}, old)
    torch.save({"version": "new", "weights": torch.zeros(1000)}, new)

    def killed(source, target, length=0):
        target.write(source.read(100))
        raise KeyboardInterrupt  # what a kill does to the writer mid-copy

    monkeypatch.setattr("shutil.copyfileobj", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.PathManager.copy(str(new), str(old), overwrite=True)
    assert torch.load(old)["version"] == "old", "the name still holds the previous, whole checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint1.pt", "checkpoint_last.pt"], "no debris"
    monkeypatch.undo()
    assert checkpoint_utils.PathManager.copy(str(new), str(old), overwrite=True)
    assert torch.load(old)["version"] == "new"
    torch.manual_seed(0)
    checkpoint_utils.torch_persistent_save({"version": "saved", "x": torch.randn(3)}, str(new))
    assert torch.load(new)["version"] == "saved" and sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint1.pt", "checkpoint_last.pt"]


def test_a_torn_checkpoint_is_named_with_the_whole_one_to_resume_from(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--save-dir", save, "--no-epoch-checkpoints",
              "--save-interval-updates", "2", "--keep-interval-updates", "1"]
    run_cli("fairseq-train", *common, "--max-update", "4")
    whole = sorted(save.glob("checkpoint_*_*.pt"))
    assert [p.name for p in whole] == ["checkpoint_1_4.pt"]
    last = save / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 3])  # torn as a kill mid-copy used to leave it
    proc = run_cli("fairseq-train", *common, "--max-update", "6", check=False)
    assert proc.returncode != 0
    message = re.search(r"checkpoint_last\.pt: torn or not a checkpoint \(\d+ bytes.*", proc.stderr).group(0)
    assert f"resume from it with --restore-file {whole[0]}" in message
    resumed = run_cli("fairseq-train", *common, "--max-update", "6", "--restore-file", whole[0])
    assert re.search(r"Loaded checkpoint .*checkpoint_1_4\.pt \(epoch 1 @ 4 updates\)", resumed.stdout)


@pytest.mark.parametrize("content", [b"hello, not a checkpoint\n", b"these are my notes\n", b"PK junk\n", b"\x80\x02junk"])
def test_a_text_file_given_as_a_checkpoint_is_named(tmp_path, content):
    """It failed in torch's legacy unpickler with `KeyError: 101`, or `IndexError: pop from
    empty list`, depending on its first bytes; torch's advice to load with
    weights_only=False (running code from an untrusted file) is not passed on."""
    text = tmp_path / "notes.pt"
    text.write_bytes(content)
    with pytest.raises(RuntimeError, match=rf"{re.escape(str(text))}: torn or not a checkpoint") as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(text))
    assert "weights_only" not in str(error.value)


def test_commands_name_a_text_file_given_as_a_checkpoint(tmp_path, ape_raw):
    """fairseq-sparse-postedit, the attention report and the sentence-VAE analysis stop with
    the message, no traceback (they crashed with `IndexError: pop from empty list`)."""
    text = tmp_path / "notes.pt"
    text.write_text("these are my notes\n")
    for command, *arguments in (
            ("fairseq-sparse-postedit", "--path", text, "--src", ape_raw / "test.src", "--mt", ape_raw / "test.mt"),
            ("fairseq-sparse-attention-report", "--path", text, "--data", ape_raw, "--out", tmp_path / "r"),
            ("fairseq-sparse-sentence-vae-analysis", text, ape_raw, "--out", tmp_path / "a")):
        proc = run_cli(command, *arguments, check=False)
        assert proc.returncode != 0 and f"{text}: torn or not a checkpoint" in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr, command
