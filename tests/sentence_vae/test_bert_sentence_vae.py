"""bert_sentence_vae (B-VAE, B-HSVAE): a BERT checkpoint as the sentence VAE's encoder."""

import pytest
import torch

from fairseq_sparse.sentence_vae.bert_sentence_vae import BertSentenceVAEModel, BertSentenceVAEModelConfig
from fairseq_sparse.sentence_vae.task import SentenceVAEConfig, SentenceVAETask
from tests.conftest import REPO, run_cli, valid_metrics, yelp_corpus
from tests.sentence_vae.test_analysis_command import run_analysis


@pytest.fixture
def yelp_dir(tmp_path):
    return yelp_corpus(tmp_path / "yelp", 150, 40, 60)


def build(data, bert, **model_options):
    task = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(data), bert_model=str(bert)))
    task.load_dataset("valid")
    options = dict(bert_model=str(bert), embed_dim=16, hidden_dim=16, latent_dim=4, **model_options)
    return task, BertSentenceVAEModel.build_model(BertSentenceVAEModelConfig(**options), task).eval()


def test_posterior_reads_the_mean_of_berts_last_layer_over_each_sentence(yelp_dir, tiny_bert):
    """Padded batch vs. Hugging Face's BertModel on each sentence alone: padding must not leak in."""
    from transformers import AutoTokenizer, BertModel

    task, model = build(yelp_dir, tiny_bert)
    dataset = task.datasets["valid"]
    batch = dataset.collater([dataset[i] for i in range(8)])
    bert_tokens = batch["net_input"]["bert_tokens"]
    assert bert_tokens.eq(0).any(), "the slice should need padding"
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    reference = BertModel.from_pretrained(str(tiny_bert), add_pooling_layer=False).eval()
    lines = (yelp_dir / "valid.txt").read_text(encoding="utf-8").splitlines()
    with torch.no_grad():
        posterior = model.encode(batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"],
                                 bert_tokens=bert_tokens)
        for row in range(8):
            ids = bert_tokens[row][bert_tokens[row].ne(tokenizer.pad_token_id)]
            # BERT reads the raw sentence (label dropped), words outside the task's vocabulary included.
            sentence = lines[batch["id"][row]].split(maxsplit=1)[1]
            assert ids.tolist() == tokenizer(sentence)["input_ids"]
            pooled = reference(input_ids=ids[None]).last_hidden_state.mean(1)
            mean = model.posterior(pooled).chunk(4, -1)[0]
            torch.testing.assert_close(posterior["mean"][row], mean[0], atol=1e-5, rtol=1e-5)


def test_freeze_and_errors(yelp_dir, tiny_bert, tmp_path):
    _, model = build(yelp_dir, tiny_bert, freeze_bert=True)
    assert not any(p.requires_grad for p in model.encoder.parameters())
    assert all(p.requires_grad for p in model.posterior.parameters())
    with pytest.raises(FileNotFoundError, match="--bert-model .*no BERT tokenizer"):
        build(yelp_dir, tmp_path / "nowhere")
    task = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(yelp_dir)))
    with pytest.raises(ValueError, match="needs --bert-model"):
        BertSentenceVAEModel.build_model(BertSentenceVAEModelConfig(bert_model=None), task)
    (yelp_dir / "train.txt").write_text("1 fine\n2 " + "supercalifragilistic " * 200 + "\n", encoding="utf-8")
    task = SentenceVAETask.setup_task(SentenceVAEConfig(data=str(yelp_dir), bert_model=str(tiny_bert)))
    with pytest.raises(ValueError, match=r"train.txt:2: \d+ WordPieces, more than the BERT's 512 positions"):
        task.load_dataset("train")


def test_b_hsvae_trains_through_fairseq_train_and_is_analysed(yelp_dir, tiny_bert, tmp_path):
    proc = run_cli("fairseq-train", yelp_dir, "--user-dir", REPO / "fairseq_sparse", "--task", "sentence_vae",
                   "--arch", "bert_sentence_vae", "--bert-model", tiny_bert, "--criterion", "hsvae",
                   "--latent-dim", "6", "--embed-dim", "16", "--hidden-dim", "32", "--optimizer", "adam", "--lr",
                   "1e-3", "--batch-size", "16", "--cpu", "--num-workers", "0", "--max-epoch", "2",
                   "--save-dir", tmp_path / "ckpt", "--log-format", "simple", cwd=tmp_path)
    metrics = valid_metrics(proc.stdout)
    assert metrics["reconstruction"] > 0 and 0 <= metrics["average_hoyer"] <= 1
    assert "BertModel" in proc.stdout  # fairseq prints the model: BERT, not the GRU, encodes
    results, _ = run_analysis(tmp_path / "ckpt" / "checkpoint_last.pt", yelp_dir, tmp_path / "analysis", samples=2,
                              classifier_epochs=2)
    assert results["objective"] == "hsvae" and results["latent_dim"] == 6
    assert 0 <= results["frozen_encoder_accuracy"] <= 100

    # The checkpoint loaded with a BERT whose vocabulary has two tokens swapped: refused, both named.
    import json
    import re
    import shutil

    from fairseq import checkpoint_utils

    other = tmp_path / "other_bert"
    shutil.copytree(tiny_bert, other)
    spec = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    first, second = (token for token, i in vocab.items() if i in (2000, 2001))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"another BERT vocabulary \(sha256 [0-9a-f]{{12}}\) than --bert-model "
                                         rf"{re.escape(str(other))} \(sha256"):
        checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "ckpt" / "checkpoint_last.pt")],
                                                      arg_overrides={"bert_model": str(other)})
