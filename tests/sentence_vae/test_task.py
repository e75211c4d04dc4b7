"""The sentence_vae task and its objectives through fairseq-train on real Yelp text."""

import pytest

from fairseq_sparse.sentence_vae.corpus import build_vocabulary, read_corpus
from tests.conftest import REPO, run_cli, shared_data, valid_metrics, yelp_corpus

COMMON = ["--user-dir", REPO / "fairseq_sparse", "--task", "sentence_vae", "--arch", "sentence_vae",
          "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "32", "--cpu", "--num-workers", "0", "--no-save",
          "--log-format", "simple", "--embed-dim", "32", "--hidden-dim", "64"]


@pytest.fixture
def yelp_dir(tmp_path):
    return yelp_corpus(tmp_path / "yelp", 400, 80, 80)


@pytest.mark.parametrize("criterion", ["elbo", "elbo_l1", "elbo_l2", "mat_vae", "hsvae"])
def test_every_objective_trains_and_logs_sparsity(criterion, yelp_dir, tmp_path):
    proc = run_cli("fairseq-train", yelp_dir, *COMMON, "--criterion", criterion, "--latent-dim", "8",
                   "--max-update", "6", cwd=tmp_path)
    assert "400 train, 80 valid, 80 test sentences with class labels" in proc.stdout
    metrics = valid_metrics(proc.stdout)
    assert 0 <= metrics["average_hoyer"] <= 1 and 0 <= metrics["average_hoyer_mean"] <= 1
    assert metrics["reconstruction"] > 0 and metrics["kl"] >= 0
    if criterion == "hsvae":  # its two KL terms also apart; they sum to the KL (up to logged rounding)
        assert abs(metrics["kl_z"] + metrics["kl_gamma"] - metrics["kl"]) < 0.01
    else:
        assert "kl_z" not in metrics


def test_former_objective_names_are_refused_by_their_names_now(yelp_dir, tmp_path):
    """vae_l1 is elbo_l1 now ("vae" names models): the command line is told so, options and all."""
    proc = run_cli("fairseq-train", yelp_dir, *COMMON, "--criterion", "vae_l1", "--regularization-weight", "0.1",
                   "--max-update", "1", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "--criterion vae_l1 is now --criterion elbo_l1" in proc.stderr


def test_hsvae_prior_near_one_gives_sparser_codes_than_near_zero(yelp_dir, tmp_path):
    """gamma is the spike probability: Beta(10, 1) puts most dimensions at exactly 0."""
    hoyer = {}
    for alpha, beta in ((10, 1), (1, 10)):
        proc = run_cli("fairseq-train", yelp_dir, *COMMON, "--criterion", "hsvae", "--latent-dim", "16",
                       "--prior-alpha", alpha, "--prior-beta", beta, "--max-epoch", "2", "--seed", "3", cwd=tmp_path)
        hoyer[alpha] = valid_metrics(proc.stdout)["average_hoyer"]
    assert hoyer[10] > hoyer[1] + 0.2, hoyer


def test_unlabelled_text_and_errors_name_file_and_line(tmp_path):
    ptb = shared_data("text", "ptb")
    words, labels = read_corpus(ptb / "valid.txt", 200)
    assert labels is None and len(words) == 3370
    vocabulary = build_vocabulary(words, 100)
    # Specials first, then by frequency; PTB's own <unk> is the dictionary's, not a new word.
    assert len(vocabulary) == 4 + 100 - 1 and vocabulary.index("the") == 4
    (tmp_path / "bad.txt").write_text("1 good line\n2 another\n\n3 after\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt:3: empty line"):
        read_corpus(tmp_path / "bad.txt", 200)
    (tmp_path / "long.txt").write_text("a b c\n" + " ".join(["w"] * 30) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"long.txt:2: 30 tokens, more than --max-sentence-tokens 20"):
        read_corpus(tmp_path / "long.txt", 20)
    proc = run_cli("fairseq-train", tmp_path, *COMMON, "--criterion", "elbo", "--max-update", "1", cwd=tmp_path,
                   check=False)
    assert proc.returncode != 0 and "train.txt is missing" in proc.stderr


def test_resume_from_a_checkpoint_with_the_hoyer_meter(yelp_dir, tmp_path):
    """An interrupted run resumes from its checkpoint (fairseq rebuilds checkpointed meters by
    class name; the average-Hoyer meter must not be among them)."""
    save = ["--save-dir", tmp_path / "ckpt", "--criterion", "hsvae", "--latent-dim", "8"]
    args = [a for a in COMMON if a != "--no-save"]
    run_cli("fairseq-train", yelp_dir, *args, *save, "--max-epoch", "1", cwd=tmp_path)
    proc = run_cli("fairseq-train", yelp_dir, *args, *save, "--max-epoch", "2", cwd=tmp_path)
    assert "Loaded checkpoint" in proc.stdout and "epoch 002 | valid on 'valid' subset" in proc.stdout


def test_a_split_is_labelled_as_a_whole_and_a_line_without_its_label_is_named(tmp_path):
    """One line missing its label made the whole split unlabelled and the labels words."""
    path = tmp_path / "train.txt"
    path.write_text("3 good food\n1 bad service\nno label here\n4 fine\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.txt:3: no class label, while 3 of the 4 lines start with one"):
        read_corpus(path, 200)
    path.write_text("3 good food\n1 bad service\n", encoding="utf-8")
    assert read_corpus(path, 200) == ([["good", "food"], ["bad", "service"]], [3, 1])
    # Numbers are words too: a text where few lines start with one is unlabelled.
    path.write_text("1990 was a year\nthe dog sleeps\nit rains\n", encoding="utf-8")
    assert read_corpus(path, 200)[1] is None


def test_text_that_is_not_utf8_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "valid.txt"
    path.write_bytes("good line\nstill good\nbad \xe9 here\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"valid.txt:3: not UTF-8 \(invalid continuation byte at byte 4 of the line\)"):
        read_corpus(path, 200)


@pytest.mark.parametrize("option, value, message", [
    ("--latent-dim", "1", "--latent-dim 1: must be at least 2"),
    ("--latent-dim", "0", "--latent-dim 0: must be at least 2"),
    ("--latent-dim", "-3", "--latent-dim -3: must be at least 2"),
    ("--hidden-dim", "0", "--hidden-dim 0: must be at least 1"),
    ("--word-dropout", "1.5", "--word-dropout 1.5: must lie in [0, 1]"),
    ("--word-dropout", "-0.1", "--word-dropout -0.1: must lie in [0, 1]"),
])
def test_model_options_are_checked_before_training(tmp_path, option, value, message):
    """--latent-dim 1 trained a whole epoch, then failed in validation with nothing saved;
    0 or negative gave raw tracebacks."""
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a b c\nb c d\n", encoding="utf-8")
    proc = run_cli("fairseq-train", tmp_path, *COMMON, "--criterion", "elbo", "--max-update", "1", option, value,
                   cwd=tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert "begin training epoch" not in proc.stdout + proc.stderr
