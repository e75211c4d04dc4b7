"""fairseq-sparse-sentence-vae-binarize: the binarized corpus is the text corpus, item for item,
and fairseq-train reads it."""

import numpy as np
import pytest
import torch

from fairseq_sparse.sentence_vae.task import SentenceVAEConfig, SentenceVAETask
from tests.conftest import REPO, run_cli, valid_metrics, yelp_corpus


@pytest.fixture
def yelp_dir(tmp_path):
    return yelp_corpus(tmp_path / "yelp", 200, 40, 50)


def test_binarized_equals_text_and_trains(yelp_dir, tiny_bert, tmp_path):
    binarized = tmp_path / "bin"
    run_cli("fairseq-sparse-sentence-vae-binarize", "--raw", yelp_dir, "--destdir", binarized, "--vocab-size", "500",
            "--bert-model", tiny_bert)
    text = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(yelp_dir), vocab_size=500, bert_model=str(tiny_bert)))
    binary = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(binarized), bert_model=str(tiny_bert)))
    assert binary.corpora is None and text.dictionary.symbols == binary.dictionary.symbols
    assert text.num_classes == binary.num_classes == 5
    for split, size in (("train", 200), ("valid", 40), ("test", 50)):
        for task in (text, binary):
            task.load_dataset(split)
        a, b = text.datasets[split], binary.datasets[split]
        assert len(a) == len(b) == size and np.array_equal(a.sizes, b.sizes)
        batch_a = a.collater([a[i] for i in range(size)])
        batch_b = b.collater([b[i] for i in range(size)])
        for key in ("src_tokens", "prev_output_tokens", "bert_tokens"):
            assert torch.equal(batch_a["net_input"][key], batch_b["net_input"][key]), key
        assert torch.equal(batch_a["labels"], batch_b["labels"])

    proc = run_cli("fairseq-train", binarized, "--user-dir", REPO / "fairseq_sparse", "--task", "sentence_vae",
                   "--arch", "sentence_vae", "--criterion", "hsvae", "--latent-dim", "4", "--embed-dim", "16",
                   "--hidden-dim", "16", "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "32", "--cpu",
                   "--num-workers", "0", "--no-save", "--max-update", "3", "--log-format", "simple", cwd=tmp_path)
    assert "binarized; vocabulary" in proc.stdout and 0 <= valid_metrics(proc.stdout)["average_hoyer"] <= 1


def test_binarized_errors_name_what_is_missing(yelp_dir, tiny_bert, tmp_path):
    binarized = tmp_path / "bin"
    run_cli("fairseq-sparse-sentence-vae-binarize", "--raw", yelp_dir, "--destdir", binarized)
    with pytest.raises(FileNotFoundError, match="bert_tokenizer: missing; .* binarized without --bert-model"):
        SentenceVAETask.setup_task(SentenceVAEConfig(data=str(binarized), bert_model=str(tiny_bert)))
    (binarized / "valid.labels.npy").unlink()
    task = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(binarized)))
    with pytest.raises(FileNotFoundError, match="valid.words.idx/.bin or valid.labels.npy missing"):
        task.load_dataset("valid")
    (yelp_dir / "test.txt").write_text("1 fine\n\n", encoding="utf-8")
    proc = run_cli("fairseq-sparse-sentence-vae-binarize", "--raw", yelp_dir, "--destdir", tmp_path / "b2",
                   check=False)
    assert proc.returncode != 0 and "test.txt:2: empty line" in proc.stderr
