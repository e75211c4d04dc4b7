"""bert_ape against Hugging Face BERT: encoder outputs, decoder initialisation, sharing flags."""

import pytest
import torch
from fairseq import options, tasks
from transformers import AutoTokenizer, BertModel

from tests.conftest import REPO, minilm_path, write_ape_split


def build(data, bert, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", "fairseq_sparse", "--task", "ape",
                                                "--arch", "bert_ape", "--bert-model", str(bert), *extra])
    task = tasks.setup_task(args)
    return task.build_model(args).eval(), task


@pytest.fixture
def data(tmp_path):
    write_ape_split(tmp_path, "test", 0, 8)
    return tmp_path


def bert_inputs(task, n=8):
    """Padded two-segment inputs of real triplets, as the task builds them."""
    task.load_dataset("test")
    ds = task.dataset("test")
    batch = ds.collater([ds[i] for i in range(n)])
    return batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]


def test_encoder_equals_hugging_face_bert(data):
    """The real MiniLM BERT: our encoder's states equal BertModel's on the same padded,
    two-segment batch (1e-5), so the embedding, segments, positions, post-norm layers
    and the attention module all match BERT."""
    model, task = build(data, minilm_path())
    tokens, lengths = bert_inputs(task)
    assert tokens.eq(task.source_dictionary.pad()).any(), "the batch should contain padding"
    out = model.encoder(tokens, src_lengths=lengths)["encoder_out"][0].transpose(0, 1)
    segments, _ = model.encoder.segments_and_positions(tokens)
    bert = BertModel.from_pretrained(str(minilm_path()), add_pooling_layer=False).eval()
    mask = tokens.ne(task.source_dictionary.pad())
    with torch.no_grad():
        ref = bert(input_ids=tokens, attention_mask=mask.long(), token_type_ids=segments).last_hidden_state
    torch.testing.assert_close(out[mask], ref[mask], atol=1e-5, rtol=1e-5)


def test_segments_and_restarted_positions(tiny_bert, data):
    model, task = build(data, tiny_bert, "--restart-mt-positions")
    d = task.source_dictionary
    cls, sep, pad, a, b = d.bos(), d.eos(), d.pad(), 1000, 2000
    tokens = torch.tensor([[cls, a, a, sep, b, sep, pad], [cls, a, sep, b, b, b, sep]])
    segments, positions = model.encoder.segments_and_positions(tokens)
    assert segments.tolist() == [[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]]
    # BERT position p is fairseq row p + pad + 1; padding keeps row pad.
    assert (positions - pad - 1).tolist() == [[0, 1, 2, 3, 0, 1, -1], [0, 1, 2, 0, 1, 2, 3]]
    model.encoder.restart_mt_positions = False
    assert (model.encoder.segments_and_positions(tokens)[1] - pad - 1).tolist()[1] == [0, 1, 2, 3, 4, 5, 6]


def test_decoder_starts_as_the_bert_layers(tiny_bert, data):
    """Right after initialisation every decoder weight equals the BERT weight it came
    from: self-attention and feed-forward from the same layer, context attention
    from that self-attention (CA <- SA), embeddings tied to BERT's word embeddings."""
    model, _ = build(data, tiny_bert)
    bert = BertModel.from_pretrained(str(tiny_bert), add_pooling_layer=False).state_dict()
    dec = model.decoder
    assert dec.embed_tokens.weight is model.encoder.embed_tokens.weight
    assert dec.output_projection.weight is dec.embed_tokens.weight
    torch.testing.assert_close(dec.embed_tokens.weight, bert["embeddings.word_embeddings.weight"], rtol=0, atol=0)
    # Decoder inputs are segment B (1), as in the authors' code; --decoder-segment 0 gives A.
    pos = bert["embeddings.position_embeddings.weight"] + bert["embeddings.token_type_embeddings.weight"][1]
    torch.testing.assert_close(dec.embed_positions.weight[1:513], pos, rtol=0, atol=0)
    segment_a, _ = build(data, tiny_bert, "--decoder-segment", "0")
    pos = bert["embeddings.position_embeddings.weight"] + bert["embeddings.token_type_embeddings.weight"][0]
    torch.testing.assert_close(segment_a.decoder.embed_positions.weight[1:513], pos, rtol=0, atol=0)
    # Fewer positions than BERT's (to save memory) keep its first ones; row 0 is padding.
    short, _ = build(data, tiny_bert, "--max-source-positions", "64", "--max-target-positions", "32")
    assert short.max_positions() == (64, 32)
    table = bert["embeddings.position_embeddings.weight"]
    torch.testing.assert_close(short.encoder.embed_positions.weight[1:], table[:64], rtol=0, atol=0)
    segment_b = bert["embeddings.token_type_embeddings.weight"][1]
    torch.testing.assert_close(short.decoder.embed_positions.weight[1:], table[:32] + segment_b, rtol=0, atol=0)
    for i, layer in enumerate(dec.layers):
        p = f"encoder.layer.{i}"
        for attn, norm in ((layer.self_attn, layer.self_attn_layer_norm),
                           (layer.encoder_attn, layer.encoder_attn_layer_norm)):
            for ours, theirs in (("q_proj", "attention.self.query"), ("k_proj", "attention.self.key"),
                                 ("v_proj", "attention.self.value"), ("out_proj", "attention.output.dense")):
                torch.testing.assert_close(getattr(attn, ours).weight, bert[f"{p}.{theirs}.weight"], rtol=0, atol=0)
                torch.testing.assert_close(getattr(attn, ours).bias, bert[f"{p}.{theirs}.bias"], rtol=0, atol=0)
            torch.testing.assert_close(norm.weight, bert[f"{p}.attention.output.LayerNorm.weight"], rtol=0, atol=0)
        torch.testing.assert_close(layer.fc1.weight, bert[f"{p}.intermediate.dense.weight"], rtol=0, atol=0)
        torch.testing.assert_close(layer.fc2.weight, bert[f"{p}.output.dense.weight"], rtol=0, atol=0)
        torch.testing.assert_close(layer.final_layer_norm.bias, bert[f"{p}.output.LayerNorm.bias"], rtol=0, atol=0)
        assert layer.encoder_attn.q_proj.weight is not layer.self_attn.q_proj.weight  # copied, not tied


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def attention_size(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("normalizer", ["softmax", "alpha_entmax"])
def test_each_sharing_flag_shares_and_saves_the_expected_parameters(tiny_bert, data, normalizer):
    base, _ = build(data, tiny_bert, "--attention-normalizer", normalizer)
    layers = len(base.decoder.layers)
    attn = attention_size(base.decoder.layers[0].self_attn)  # projections (+ per-head alphas)
    ffn = sum(p.numel() for m in (base.decoder.layers[0].fc1, base.decoder.layers[0].fc2) for p in m.parameters())
    cases = {
        "--share-self-attn-with-encoder": (layers * attn, lambda e, d: [(d.self_attn, e.self_attn)]),
        "--tie-context-to-self-attn": (layers * attn, lambda e, d: [(d.encoder_attn, d.self_attn)]),
        "--share-ffn-with-encoder": (layers * ffn, lambda e, d: [(d.fc1, e.fc1), (d.fc2, e.fc2)]),
    }
    for flag, (saved, pairs) in cases.items():
        model, _ = build(data, tiny_bert, "--attention-normalizer", normalizer, flag)
        assert n_params(base) - n_params(model) == saved, flag
        for enc_layer, dec_layer in zip(model.encoder.layers, model.decoder.layers):
            for target, source in pairs(enc_layer, dec_layer):
                for (name, p), (_, q) in zip(target.named_parameters(), source.named_parameters()):
                    assert p is q, f"{flag}: {name} not shared"
    every, _ = build(data, tiny_bert, "--attention-normalizer", normalizer, *cases)
    assert n_params(base) - n_params(every) == layers * (2 * attn + ffn)
    layer = every.decoder.layers[0]
    assert layer.encoder_attn.k_proj.weight is every.encoder.layers[0].self_attn.k_proj.weight


def test_random_initialisation_uses_nothing_from_bert(tiny_bert, data):
    bert = BertModel.from_pretrained(str(tiny_bert), add_pooling_layer=False).state_dict()
    model, _ = build(data, tiny_bert, "--encoder-init", "random", "--decoder-init", "random")
    assert not torch.equal(model.encoder.embed_tokens.weight, bert["embeddings.word_embeddings.weight"])
    assert not torch.equal(model.encoder.layers[0].fc1.weight, bert["encoder.layer.0.intermediate.dense.weight"])
    decoder_only, _ = build(data, tiny_bert, "--decoder-init", "random")
    torch.testing.assert_close(decoder_only.encoder.layers[0].fc1.weight, bert["encoder.layer.0.intermediate.dense.weight"])
    assert not torch.equal(decoder_only.decoder.layers[0].fc1.weight, bert["encoder.layer.0.intermediate.dense.weight"])


def test_sparse_attention_in_every_site(tiny_bert, data):
    from fairseq_sparse.modules import AlphaEntmaxAttention

    model, _ = build(data, tiny_bert, "--attention-normalizer", "alpha_entmax", "--cross-attention-normalizer",
                     "entmax15")
    sites = {(site, m.normalizer.name) for site, _, m in model.attention_modules()}
    assert sites == {("encoder", "alpha_entmax"), ("decoder", "alpha_entmax"), ("cross", "entmax15")}
    assert all(isinstance(m, AlphaEntmaxAttention) for _, _, m in model.attention_modules())
    assert any("alpha" in name for name, _ in model.named_parameters())


def test_dropout_options_override_bert_s_and_sizes_must_agree_with_it(tiny_bert, data):
    from transformers import BertConfig

    config = BertConfig.from_pretrained(str(tiny_bert))
    model, _ = build(data, tiny_bert)
    assert model.encoder.dropout_module.p == config.hidden_dropout_prob
    assert model.decoder.layers[0].self_attn.dropout_module.p == config.attention_probs_dropout_prob
    model, _ = build(data, tiny_bert, "--dropout", "0.3", "--attention-dropout", "0")
    assert model.encoder.dropout_module.p == model.decoder.layers[1].dropout_module.p == 0.3
    assert model.encoder.layers[0].self_attn.dropout_module.p == 0
    model, _ = build(data, tiny_bert, "--encoder-layers", str(config.num_hidden_layers), "--share-all-embeddings")
    assert len(model.encoder.layers) == config.num_hidden_layers  # agreeing with BERT is allowed
    with pytest.raises(ValueError, match="--decoder-layers 1: bert_ape takes it from the BERT checkpoint .*--bert-layers"):
        build(data, tiny_bert, "--decoder-layers", "1")
    with pytest.raises(ValueError, match="--encoder-embed-dim 64: bert_ape takes it from the BERT checkpoint \\(32\\)"):
        build(data, tiny_bert, "--encoder-embed-dim", "64")


def test_missing_bert_checkpoint_is_named(tmp_path, data):
    with pytest.raises(FileNotFoundError, match="--bert-model .*no-such-bert"):
        build(data, tmp_path / "no-such-bert")


def test_tokenizer_is_bert_s_own(tiny_bert, data):
    _, task = build(data, tiny_bert)
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    d = task.source_dictionary
    assert (d.pad(), d.eos(), d.bos(), d.unk()) == (tok.pad_token_id, tok.sep_token_id, tok.cls_token_id,
                                                    tok.unk_token_id)
    assert [d[i] for i in range(5)] == tok.convert_ids_to_tokens(list(range(5)))
    assert (data / "tokenizer" / "tokenizer_config.json").exists()


def test_shared_parameters_hold_their_source_s_weights(tiny_bert, data):
    """Shared as the decoder is built, a shared parameter holds what its source holds, as when
    the sharing came after loading BERT: a random encoder's self-attention and feed-forward are
    the decoder's too (BERT's are not loaded into them from the decoder's side), while the
    decoder's LayerNorms still come from BERT."""
    bert = BertModel.from_pretrained(str(tiny_bert), add_pooling_layer=False).state_dict()
    model, _ = build(data, tiny_bert, "--encoder-init", "random", "--share-self-attn-with-encoder",
                     "--share-ffn-with-encoder", "--tie-context-to-self-attn")
    for i, (enc, dec) in enumerate(zip(model.encoder.layers, model.decoder.layers)):
        assert dec.self_attn.q_proj.weight is enc.self_attn.q_proj.weight is dec.encoder_attn.q_proj.weight
        assert dec.fc1.weight is enc.fc1.weight
        assert not torch.equal(enc.self_attn.q_proj.weight, bert[f"encoder.layer.{i}.attention.self.query.weight"])
        assert not torch.equal(enc.fc1.weight, bert[f"encoder.layer.{i}.intermediate.dense.weight"])
        torch.testing.assert_close(dec.self_attn_layer_norm.weight,
                                   bert[f"encoder.layer.{i}.attention.output.LayerNorm.weight"])


def test_a_model_written_by_the_earlier_build_loads_and_gives_the_same_outputs(tmp_path):
    """tests/fixtures/bert_ape_written_with_build_context.pt: a tiny bert_ape (a 40-WordPiece,
    16-wide random BERT; alpha-entmax at random alphas; all three sharing flags; weights moved
    off their start) written, with its outputs, by the code that passed the build's state
    through context variables and swapped shared parameters in after building each layer.
    Built from its arguments as a checkpoint is (BERT's config kept in them), the model loads
    its weights strictly, shares what it shared and gives those outputs."""
    from transformers import BertTokenizer

    saved = torch.load(REPO / "tests" / "fixtures" / "bert_ape_written_with_build_context.pt")
    data = tmp_path / "data"
    (data / "tokenizer").mkdir(parents=True)
    (tmp_path / "vocab.txt").write_text("\n".join(saved["vocab"]) + "\n")
    BertTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True).save_pretrained(str(data / "tokenizer"))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--user-dir", "fairseq_sparse", "--task", "ape",
                                                *saved["argv"]])
    args.bert_config_json = saved["bert_config_json"]  # as a checkpoint's args keep it
    model = tasks.setup_task(args).build_model(args).eval()
    model.load_state_dict(saved["state"])  # strict: the same names, nothing missing or left over
    encoder, decoder = model.encoder.layers[1], model.decoder.layers[1]
    assert decoder.self_attn.k_proj.weight is encoder.self_attn.k_proj.weight
    assert decoder.encoder_attn.v_proj.weight is decoder.self_attn.v_proj.weight
    assert decoder.fc2.weight is encoder.fc2.weight
    assert decoder.self_attn.head_alpha.pre_alpha is encoder.self_attn.head_alpha.pre_alpha
    with torch.no_grad():
        logits = model(saved["src"], saved["lengths"], saved["prev"])[0]
    torch.testing.assert_close(logits, saved["logits"], atol=1e-5, rtol=1e-5)
