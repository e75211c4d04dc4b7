"""fairseq-sparse-postedit: a file of MT post-edited from the command line, as PostEditor
does it; and the checks on PostEditor's own arguments."""

import pytest

import fairseq_sparse
fairseq_sparse.load_plugin()
from fairseq_sparse.ape.postedit import PostEditor  # noqa: E402
from tests.ape.test_task import generate  # noqa: E402
from tests.conftest import run_cli  # noqa: E402


def test_a_file_of_mt_is_post_edited_line_for_line_as_post_editor_does(tmp_path, ape_trained):
    data, checkpoint = ape_trained
    src, mt = (data / "test.src", data / "test.mt")
    editor = PostEditor.from_checkpoint(checkpoint, beam=2, max_len_b=30)
    want = editor.postedit(src.read_text().splitlines(), mt.read_text().splitlines())
    got = run_cli("fairseq-sparse-postedit", "--path", checkpoint, "--src", src, "--mt", mt, "--beam", "2",
                  "--max-len-b", "30", "--batch-size", "7")
    assert got.stdout.splitlines() == want and len(want) == 20
    kept = run_cli("fairseq-sparse-postedit", "--path", checkpoint, "--src", src, "--mt", mt, "--keep-mt-margin", "inf")
    assert kept.stdout == mt.read_text(), "the gate keeps every MT: its own text, line for line"


def test_bad_input_files_and_options_are_named(tmp_path, ape_trained):
    data, checkpoint = ape_trained
    lines = (data / "test.mt").read_text().splitlines()
    blank = tmp_path / "blank.mt"
    blank.write_text("\n".join(lines[:3] + [""] + lines[3:]) + "\n")
    cases = [(["--mt", blank], f"{blank}:4: empty line"),
             (["--mt", data / "valid.mt"], "has 20 lines but --mt"),
             (["--mt", data / "test.mt", "--beam", "0"], "PostEditor beam=0: must be a whole number >= 1"),
             (["--mt", data / "test.mt", "--batch-size", "0"], "PostEditor batch_size=0: must be a whole number >= 1"),
             (["--mt", data / "test.mt", "--device", "cuda:99"], "--device cuda:99: not available here")]
    for options, message in cases:
        proc = run_cli("fairseq-sparse-postedit", "--path", checkpoint, "--src", data / "test.src", *options,
                       check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-1500:]


def test_post_editor_refuses_bad_sizes_and_a_margin_that_is_no_number(ape_trained):
    _, checkpoint = ape_trained
    for options, message in ((dict(beam=0), "beam=0"), (dict(batch_size=0), "batch_size=0"),
                             (dict(beam=2.5), "beam=2.5"), (dict(max_len_b=-1), "max_len_b=-1")):
        with pytest.raises(ValueError, match=f"PostEditor {message}: must be a whole number"):
            PostEditor.from_checkpoint(checkpoint, **options)
    with pytest.raises(TypeError, match="--keep-mt-margin '0.5': must be a number, not a str"):
        PostEditor.from_checkpoint(checkpoint, keep_mt_margin="0.5")


def test_generate_on_a_split_without_post_edits_points_to_the_post_editing_commands(tmp_path, ape_trained):
    data, checkpoint = ape_trained
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("test.src", "test.mt"):
        (bare / name).write_bytes((data / name).read_bytes())
    (bare / "tokenizer").symlink_to(data / "tokenizer")
    proc = generate(bare, checkpoint, check=False)
    assert proc.returncode != 0
    assert "test.pe: missing: fairseq-generate scores post-edits against test.pe" in proc.stderr
    assert "fairseq-sparse-postedit --path CKPT --src" in proc.stderr and "fairseq-interactive" in proc.stderr


def test_post_editing_with_data_writes_nothing_into_it(tmp_path, ape_trained):
    """--data names where the tokenizer is; a directory without one got a tokenizer/ folder written
    into it unasked."""
    data, checkpoint = ape_trained
    mine = tmp_path / "my_data"
    mine.mkdir()
    run_cli("fairseq-sparse-postedit", "--path", checkpoint, "--src", data / "test.src", "--mt", data / "test.mt",
            "--data", mine)
    assert not any(mine.iterdir())
