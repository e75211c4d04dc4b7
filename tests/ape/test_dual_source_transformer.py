"""dual_source_transformer: two encoders, a decoder attending to both; trains and generates on ape data."""

import re

import torch
from fairseq import options, tasks

from tests.conftest import REPO, assert_two_gloo_workers_equal_one, run_cli, write_ape_split

TINY = ["--encoder-layers", "1", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
        "--decoder-attention-heads", "4"]


def build(data, bert, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", "fairseq_sparse", "--task", "ape",
                                                "--arch", "dual_source_transformer", "--bert-model", str(bert),
                                                "--dropout", "0", *TINY, *extra])
    task = tasks.setup_task(args)
    return task.build_model(args).eval(), task


def batch(task, tmp_path, n=4):
    write_ape_split(tmp_path, "test", 0, n)
    task.load_dataset("test")
    ds = task.dataset("test")
    return ds.collater([ds[i] for i in range(n)])


def test_source_is_split_into_src_and_mt(tmp_path, tiny_bert):
    model, task = build(tmp_path, tiny_bert)
    d = task.source_dictionary
    tokens = torch.tensor([[d.bos(), 1000, 1001, d.eos(), 2000, d.eos(), d.pad()]])
    src, mt = model.encoder.split(tokens)
    assert src.tolist() == [[d.bos(), 1000, 1001, d.eos(), d.pad(), d.pad(), d.pad()]]
    assert mt.tolist() == [[d.pad(), d.pad(), d.pad(), d.pad(), 2000, d.eos(), d.pad()]]
    assert model.encoder.src_encoder.embed_tokens is model.encoder.mt_encoder.embed_tokens
    assert model.encoder.src_encoder.layers[0].fc1.weight is not model.encoder.mt_encoder.layers[0].fc1.weight


def test_decoder_reads_both_sources_and_decodes_incrementally(tmp_path, tiny_bert):
    """Both the src and the mt encoder change the output, and step-by-step decoding with
    cached keys (self, src and mt attention) equals the full causal pass."""
    torch.manual_seed(0)
    model, task = build(tmp_path, tiny_bert, "--attention-normalizer", "alpha_entmax")
    sample = batch(task, tmp_path)
    net = sample["net_input"]
    full, _ = model(**net)

    encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
    state, steps = {}, []
    for t in range(net["prev_output_tokens"].size(1)):
        out, _ = model.decoder(net["prev_output_tokens"][:, :t + 1], encoder_out=encoder_out, incremental_state=state)
        steps.append(out)
    incremental = torch.cat(steps, 1)
    mask = net["prev_output_tokens"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(incremental[mask], full[mask], atol=1e-5, rtol=1e-4)

    src_part, mt_part = model.encoder.split(net["src_tokens"])
    for part in (src_part, mt_part):  # change one token of one segment only
        changed = net["src_tokens"].clone()
        position = (part[0] != task.source_dictionary.pad()).nonzero()[1, 0]
        changed[0, position] = 1999
        out, _ = model(changed, net["src_lengths"], net["prev_output_tokens"])
        assert not torch.allclose(out[0], full[0]) and torch.allclose(out[1:], full[1:], atol=1e-6)


def test_trains_and_generates_on_the_ape_task(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    train = run_cli("fairseq-train", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                    "--arch", "dual_source_transformer", "--bert-model", tiny_bert, *TINY,
                    "--attention-normalizer", "alpha_entmax", "--optimizer", "adam", "--lr", "1e-3",
                    "--max-tokens", "2000", "--max-epoch", "1", "--cpu", "--num-workers", "0",
                    "--save-dir", save, "--no-epoch-checkpoints")
    assert "alpha_mt_encoder0" in train.stdout and "alpha_mt_cross1" in train.stdout
    gen = run_cli("fairseq-generate", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                  "--path", save / "checkpoint_last.pt", "--gen-subset", "test", "--cpu", "--beam", "3",
                  "--max-len-b", "20", "--scoring", "ter")
    assert len(re.findall(r"^D-\d+\t", gen.stdout, re.M)) == 20
    assert "TER = " in gen.stdout


def test_two_gloo_workers_equal_one_worker_with_the_same_total_batch(tmp_path, ape_raw, tiny_bert):
    common = [ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--arch", "dual_source_transformer",
              "--bert-model", tiny_bert, *TINY, "--attention-normalizer", "alpha_entmax", "--optimizer", "adam",
              "--lr", "1e-3", "--max-tokens", "1000", "--dropout", "0", "--max-update", "3", "--cpu",
              "--num-workers", "0", "--disable-validation", "--ddp-backend", "legacy_ddp"]
    assert_two_gloo_workers_equal_one(common, tmp_path)
