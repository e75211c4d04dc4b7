"""The synthetic length-extrapolation tasks and the decoder-only entmax_transformer_lm: every
generator's answers against a computation from the prompt alone, the splits' lengths and
draws, the loss on the answer only, and greedy exact match against decoding by full
recomputation."""

import argparse

import numpy as np
import pytest
import torch
from fairseq import options, tasks

import fairseq_sparse
fairseq_sparse.load_plugin()  # registers the task and the model
from fairseq_sparse.entmax.length_scale import LengthScale  # noqa: E402
from fairseq_sparse.sparse_transformer import length_task, synthetic  # noqa: E402
from tests.conftest import REPO, run_cli  # noqa: E402

USER_DIR = str(REPO / "fairseq_sparse")


@pytest.mark.parametrize("name", synthetic.TASKS)
def test_every_answer_is_the_one_the_prompt_asks_for(name):
    rng = np.random.default_rng(0)
    vocabulary = set(synthetic.words(name))
    for length in (1, 2, 7, 32, 64, 200):
        for _ in range(20):
            prompt, answer = synthetic.TASKS[name](rng, length)
            assert answer == synthetic.answer_of(name, prompt)
            assert set(prompt) | set(answer) <= vocabulary
            if name in ("copy", "reverse", "sort"):
                assert len(prompt) == length
    # The same seed, the same examples.
    first = [synthetic.TASKS[name](np.random.default_rng(5), 40) for _ in range(2)]
    assert first[0] == first[1]


def test_the_recall_and_flip_flop_prompts_are_as_the_paper_builds_them():
    rng = np.random.default_rng(1)
    prompt, answer = synthetic.associative_recall(rng, 64)
    question = prompt.index(synthetic.ASK)
    assert question == 64 and len(prompt) == 64 + 3 * synthetic.RECALL_QUERIES and len(answer) == 12
    keys = [tuple(prompt[i - 2:i]) for i, t in enumerate(prompt[:question]) if t == synthetic.BIND]
    assert len(keys) == len(set(keys)) == int(64 * synthetic.RECALL_SHARE) // 6
    prompt, answer = synthetic.flip_flop(rng, 64)
    assert prompt[0] == synthetic.WRITE and prompt[-1] == synthetic.READ and len(prompt) == 63
    assert set(prompt[1::2]) <= {"0", "1"} and answer in (["0"], ["1"])


def task(**overrides):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["--task", "length_extrapolation", "--user-dir", USER_DIR,
                                                "--arch", "entmax_transformer_lm_tiny",
                                                *[f"--{k.replace('_', '-')}={v}" for k, v in overrides.items()]])
    return tasks.setup_task(args), args


def test_the_splits_have_their_lengths_and_their_own_draws():
    t, _ = task(synthetic_task="sort", train_examples=50, valid_examples=5, test_examples=3, test_factors="1,2,4")
    assert list(t.splits()) == ["train", "valid", "test1x", "test2x", "test4x"]
    train = t.examples("train")
    assert {len(p) for p, _ in train} <= set(range(32, 65)) and len({len(p) for p, _ in train}) > 5
    assert [len(p) for p, _ in t.examples("valid")] == [96] * 5
    assert [len(p) for p, _ in t.examples("test4x")] == [256] * 3
    assert t.examples("test1x") == t.examples("test1x") and t.examples("train", 1) != t.examples("train", 2)
    assert t.examples("valid")[0] != t.examples("test1x")[0]
    with pytest.raises(ValueError, match="no split 'test3x'"):
        t.examples("test3x")


def test_only_the_answer_and_its_end_are_scored():
    t, _ = task(synthetic_task="reverse")
    prompt, answer = ["1", "2", "3"], ["3", "2", "1"]
    dataset = length_task.SyntheticDataset([(prompt, answer)], t.dictionary, shuffle=False)
    item = dataset[0]
    words = [t.dictionary[i] for i in item["source"]]
    assert words == ["</s>", "1", "2", "3", "=", "3", "2", "1"]
    scored = [t.dictionary[i] for i in item["target"] if i != t.dictionary.pad()]
    assert scored == ["3", "2", "1", "</s>"]
    assert dataset.collater([item])["ntokens"] == 4


@pytest.mark.parametrize("option, value, message", [
    ("synthetic_task", "parity", "--synthetic-task 'parity'"), ("min_length", "70", "--min-length 70"),
    ("test_factors", "1,x", "--test-factors"), ("train_examples", "0", "--train-examples 0")])
def test_a_wrong_option_is_an_error_naming_it(option, value, message):
    with pytest.raises(ValueError, match=message):
        task(**{option: value})


def greedy_by_recomputation(model, t, prompt, steps):
    tokens = torch.tensor([[t.dictionary.eos()] + [t.dictionary.index(w) for w in [*prompt, length_task.ANSWER]]])
    for _ in range(steps):
        logits = model(tokens)[0][:, -1]
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
    return [t.dictionary[i] for i in tokens[0, -steps:]]


def test_the_decoder_only_model_trains_and_greedy_exact_match_is_decoding_by_recomputation(tmp_path):
    common = ["--user-dir", USER_DIR, "--task", "length_extrapolation", "--synthetic-task", "reverse",
              "--min-length", "4", "--max-length", "8", "--train-examples", "64", "--valid-examples", "8",
              "--test-examples", "6", "--test-factors", "1,2"]
    log = run_cli("fairseq-train", *common, "--arch", "entmax_transformer_lm_tiny", "--attention-normalizer",
                  "alpha_entmax", "--positions", "nape", "--length-scale", "adaptive", "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", "3e-3",
                  "--max-tokens", "2000", "--max-update", "6", "--cpu", "--save-dir", tmp_path, "--num-workers", "0",
                  "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1").stdout
    assert "alpha_decoder1" in log and "valid on 'valid' subset" in log
    from fairseq import checkpoint_utils

    (model,), cfg, t = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "checkpoint_last.pt")])
    model.eval()
    assert [site for site, _, _ in model.attention_modules()] == ["decoder", "decoder"]
    assert model.decoder.embed_positions is None  # the attention holds the positions
    attention = model.decoder.layers[0].self_attn
    assert attention.alibi_slopes.tolist() == [1.0, 0.5, 0.0, 0.0]
    assert attention.length_scale.scaled_heads == (2, 3)
    assert attention.length_scale.beta.weight.abs().sum() > 0  # trained, and saved with the model
    for split in ("test1x", "test2x"):
        examples = t.examples(split)
        want = 100.0 * sum(greedy_by_recomputation(model, t, p, len(a)) == a for p, a in examples) / len(examples)
        assert length_task.exact_match(model, t, split, batch_size=4) == want
    # A model that answers right: the reference's answers scored as the model's give 100; one
    # that errs at the third answer token of the prompts that start with a symbol below 10
    # loses exactly those (and greedy decoding by recomputation agrees example by example).
    assert length_task.exact_match(_Oracle(t), t, "test1x") == 100.0
    wrong = _Oracle(t, errs=lambda prompt: int(prompt[0]) < 10)
    examples = t.examples("test2x")
    want = [not int(p[0]) < 10 for p, _ in examples]
    assert 0 < sum(want) < len(want)
    assert [greedy_by_recomputation(wrong, t, p, len(a)) == a for p, a in examples] == want
    assert length_task.exact_match(wrong, t, "test2x") == 100.0 * sum(want) / len(want)


class _Oracle(torch.nn.Module):
    """A stand-in decoder that gives the right next token of every example (the reverse of its
    prompt), but the third answer token of the prompts ``errs`` names, for which it gives "="."""

    def __init__(self, t, errs=lambda prompt: False):
        super().__init__()
        self.t, self.errs = t, errs
        object.__setattr__(self, "decoder", self)  # not a submodule of itself

    def forward(self, tokens, incremental_state=None):
        d = self.t.dictionary
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], len(d))
        for row in range(tokens.shape[0]):
            for position in range(tokens.shape[1]):  # the next token after each prefix
                words = [d[i] for i in tokens[row, :position + 1]]
                if length_task.ANSWER in words:
                    at = words.index(length_task.ANSWER)
                    answer = synthetic.answer_of("reverse", words[1:at])
                    done = len(words) - at - 1
                    if done < len(answer):
                        wrong = done == 2 and self.errs(words[1:at])
                        logits[row, position, d.index(length_task.ANSWER if wrong else answer[done])] = 1.0
        return logits, None


@pytest.mark.parametrize("positions, length_scale", [
    ("none", "none"), ("alibi", "log"), ("rope", "adaptive"), ("nape", "log"), ("fairseq", "adaptive"),
    ("nape", "adaptive_paper")])
def test_each_position_and_length_scale_decodes_incrementally_as_it_computes_whole(positions, length_scale):
    t, args = task(synthetic_task="copy", positions=positions, length_scale=length_scale,
                   attention_normalizer="alpha_entmax")
    torch.manual_seed(0)
    model = t.build_model(args).eval()
    for module in model.modules():  # away from the identity start, so that the scale shows
        if isinstance(module, LengthScale):
            for parameter in module.parameters():
                torch.nn.init.normal_(parameter, std=0.5)
    tokens = torch.randint(4, len(t.dictionary), (3, 11))
    with torch.no_grad():
        whole = model(tokens)[0]
        state, steps = {}, []
        for i in range(tokens.shape[1]):
            steps.append(model.decoder(tokens[:, :i + 1], incremental_state=state)[0][:, -1])
    torch.testing.assert_close(torch.stack(steps, 1), whole, atol=1e-5, rtol=1e-5)
    # Without embeddings a model has its positions in the attention: shifting the context changes the output.
    if positions in ("alibi", "rope", "nape"):
        assert model.decoder.embed_positions is None
        with torch.no_grad():
            shifted = model(torch.cat([tokens[:, :1], tokens], 1))[0][:, 1:]
        assert not torch.allclose(shifted[:, -1], whole[:, -1], atol=1e-4)


def test_positions_and_length_scales_are_refused_by_name():
    with pytest.raises(ValueError, match="--positions 'sinusoid'"):
        t, args = task(positions="sinusoid")
        t.build_model(args)
    with pytest.raises(ValueError, match="--length-scale 'loglog'"):
        t, args = task(length_scale="loglog")
        t.build_model(args)


def test_the_task_needs_no_data_directory():
    t, args = task(synthetic_task="flip_flop", train_examples=4)
    t.load_dataset("train")
    assert len(t.dataset("train")) == 4
    assert isinstance(args, argparse.Namespace)
