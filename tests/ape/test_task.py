"""The ape task end to end through fairseq's CLIs on real WMT APE triplets, and its input checks."""

import json
import re

import pytest
import torch

import fairseq_sparse
fairseq_sparse.load_plugin()  # allow-lists what fairseq checkpoints hold, for torch.load
from tests.conftest import APE_TRAIN as TRAIN, REPO, assert_two_gloo_workers_equal_one, run_cli, run_script


def generate(data, checkpoint, *extra, check=True):
    return run_cli("fairseq-generate", data, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                   "--path", checkpoint, "--gen-subset", "test", "--cpu", "--beam", "2", "--max-len-b", "30", *extra,
                   check=check)


def hypotheses(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", stdout, re.M)}


def test_train_generate_score_and_postedit_on_raw_triplets(tmp_path, ape_raw, tiny_bert):
    save = tmp_path / "ckpt"
    train = run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-epoch", "2",
                    "--save-dir", save)
    assert "ape train: 200 triplets" in train.stderr + train.stdout
    assert "alpha_encoder0" in train.stderr + train.stdout
    assert (ape_raw / "tokenizer").is_dir()  # kept with the data: generation needs no --bert-model

    # Interrupted after one epoch and resumed (BERT's dropout on): the same weights as the
    # uninterrupted run, so resuming re-reads neither BERT's weights nor other batches.
    split = tmp_path / "split"
    run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-epoch", "1", "--save-dir", split)
    resumed = run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-epoch", "2",
                      "--save-dir", split)
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch 2 @ \d+ updates\)", resumed.stdout)
    straight = torch.load(save / "checkpoint_last.pt")["model"]
    for name, weight in torch.load(split / "checkpoint_last.pt")["model"].items():
        torch.testing.assert_close(weight, straight[name], atol=1e-6, rtol=1e-5, msg=f"{name} differs after the resume")

    ter = generate(ape_raw, save / "checkpoint_best.pt", "--scoring", "ter")
    hyps = hypotheses(ter.stdout)
    assert sorted(hyps) == list(range(20)), "every test sentence is post-edited (fairseq dropped some)"
    assert all("##" not in h for h in hyps.values()), "WordPieces are merged back"
    assert re.search(r"TER = [0-9.]+ \(signature: nrefs:1\|case:mixed\|tok:tercom\|norm:no\|punct:yes", ter.stdout)
    bleu = generate(ape_raw, save / "checkpoint_best.pt", "--scoring", "sacrebleu")
    assert "BLEU = " in bleu.stdout

    out = tmp_path / "generate.out"
    out.write_text(ter.stdout, encoding="utf-8")
    score = run_cli("fairseq-sparse-score-ape", "--hyp", out, "--mt", ape_raw / "test.mt", "--pe", ape_raw / "test.pe",
                       "--fairseq-output", "--lowercase", check=False)
    assert score.returncode == 0, score.stderr
    assert re.search(r"do-nothing \(MT\)\s+[0-9.]+\s+[0-9.]+", score.stdout)
    assert re.search(r"post-edited\s+[0-9.]+\s+[0-9.]+", score.stdout)
    assert "TER signature:  nrefs:1|case:mixed|tok:tercom|norm:no|punct:yes" in score.stdout
    assert "BLEU signature: nrefs:1|case:mixed|eff:no|tok:none" in score.stdout

    from fairseq_sparse.ape.postedit import PostEditor

    editor = PostEditor.from_checkpoint(save / "checkpoint_best.pt", data=ape_raw, beam=2, max_len_b=30)
    src = (ape_raw / "test.src").read_text(encoding="utf-8").splitlines()[:3]
    mt = (ape_raw / "test.mt").read_text(encoding="utf-8").splitlines()[:3]
    assert editor.postedit(src, mt) == [hyps[i] for i in range(3)]
    assert editor.postedit([], []) == []
    shorter = PostEditor.from_checkpoint(save / "checkpoint_best.pt", data=ape_raw, max_segment_tokens=3)
    assert shorter.task.cfg.max_segment_tokens == 3 and editor.task.cfg.max_segment_tokens == 200

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{m}\n" for s, m in zip(src, mt)), encoding="utf-8")
    interactive = run_cli("fairseq-interactive", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape",
                          "--path", save / "checkpoint_best.pt", "--cpu", "--beam", "2", "--max-len-b", "30",
                          "--input", pairs)
    assert hypotheses(interactive.stdout) == {i: hyps[i] for i in range(3)}
    with pytest.raises(ValueError, match=r"one 'src<TAB>mt' pair per line, both non-empty; this line has 1 "
                                         r"tab-separated field: 'Das ist gut \.' \(an empty src or mt loses its tab"):
        editor.task.get_interactive_tokens_and_lengths(["Das ist gut ."], encode_fn=None)


def test_binarized_data_trains_and_generates(tmp_path, ape_raw, tiny_bert):
    binarized = tmp_path / "bin"
    proc = run_cli("fairseq-sparse-ape-binarize", "--bert-model", tiny_bert, "--raw", ape_raw, "--destdir", binarized,
                   "--max-segment-tokens", "20")
    assert "train: 200 triplets; cut to 20 WordPieces:" in proc.stderr
    cut = re.search(r"train: 200 triplets; cut to 20 WordPieces: (\d+) src, (\d+) mt, (\d+) pe", proc.stderr)
    assert all(int(n) > 0 for n in cut.groups()), "long pharma sentences are cut, and counted"
    assert not list(binarized.glob("*.src"))  # no raw text: the task reads the memory-mapped datasets
    save = tmp_path / "ckpt"
    train = run_cli("fairseq-train", binarized, *TRAIN, "--bert-model", tiny_bert, "--max-epoch", "1",
                    "--save-dir", save)
    assert "ape train: 200 binarized triplets" in train.stderr + train.stdout
    assert sorted(hypotheses(generate(binarized, save / "checkpoint_last.pt").stdout)) == list(range(20))


def test_raw_and_binarized_inputs_are_the_same(tmp_path, ape_raw, tiny_bert):
    from fairseq_sparse.ape.task import APEConfig, APETask

    run_cli("fairseq-sparse-ape-binarize", "--bert-model", tiny_bert, "--raw", ape_raw, "--destdir", tmp_path / "bin",
            "--splits", "valid")
    raw, binarized = (APETask.setup_task(APEConfig(data=str(d), bert_model=str(tiny_bert)))
                      for d in (ape_raw, tmp_path / "bin"))
    raw.load_dataset("valid")
    binarized.load_dataset("valid")
    for i in range(30):
        a, b = raw.dataset("valid")[i], binarized.dataset("valid")[i]
        assert a["source"].tolist() == b["source"].tolist() and a["target"].tolist() == b["target"].tolist()
    first = raw.dataset("valid")[0]["source"].tolist()
    d = raw.source_dictionary
    assert first[0] == d.bos() and first[-1] == d.eos() and first.count(d.eos()) == 2  # [CLS] src [SEP] mt [SEP]


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "valid.pe").write_text("one\ntwo\n"), r"not line-aligned: .*valid.src has 30, .*valid.pe has 2"),
    (lambda d: (d / "valid.mt").write_text(""), r"valid.mt: empty file"),
    (lambda d: (d / "valid.src").unlink(), r"valid.src: missing"),
    (lambda d: (d / "valid.src").write_bytes(b"\xff\xfe bad\n"), r"valid.src:1: not UTF-8 \(invalid start byte at byte 0 of the line\)"),
    # An empty or blank line would be an empty triplet, silently post-edited and scored.
    (lambda d: insert_line(d / "valid.mt", 4, ""), r"valid.mt:5: empty line"),
    (lambda d: insert_line(d / "valid.src", 0, " \t "), r"valid.src:1: empty line"),
    (lambda d: [p.write_text(p.read_text() + "\n") for p in d.glob("valid.*")], r"valid.src:31: empty line"),
    (lambda d: (d / "valid.pe").write_text("\n".join(["x"] * 12 + [""] + ["x"] * 17) + "\n"), r"valid.pe:13: empty line"),
])
def test_bad_triplet_files_are_named(ape_raw, tiny_bert, damage, message):
    from fairseq_sparse.ape.task import APEConfig, APETask

    damage(ape_raw)
    task = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert)))
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        task.load_dataset("valid")


def insert_line(path, index, text):
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join(lines[:index] + [text] + lines[index:]), encoding="utf-8")


@pytest.mark.parametrize("line_end", ["\r", "\r\n"])
def test_classic_mac_and_windows_line_ends_give_the_same_triplets(tmp_path, ape_raw, tiny_bert, line_end):
    """CR-only files were one triplet of everything (1 post-edit for 20); a "\r" inside a
    line of a "\n" file stays in its line."""
    from fairseq_sparse.ape.task import APEConfig, APETask
    from fairseq_sparse.ape.triplets import read_triplets

    want = read_triplets(ape_raw, "valid")
    other = tmp_path / "other"
    other.mkdir()
    for name, lines in want.items():
        (other / f"valid.{name}").write_bytes(line_end.join(lines).encode() + line_end.encode())
    assert read_triplets(other, "valid") == want
    tasks = [APETask.setup_task(APEConfig(data=str(d), bert_model=str(tiny_bert))) for d in (ape_raw, other)]
    for task in tasks:
        task.load_dataset("valid")
    assert len(tasks[1].dataset("valid")) == 30
    for i in range(30):
        assert tasks[0].dataset("valid")[i]["source"].tolist() == tasks[1].dataset("valid")[i]["source"].tolist()
    run_cli("fairseq-sparse-ape-binarize", "--bert-model", tiny_bert, "--raw", other, "--destdir", tmp_path / "bin",
            "--splits", "valid")
    binarized = APETask.setup_task(APEConfig(data=str(tmp_path / "bin"), bert_model=str(tiny_bert)))
    binarized.load_dataset("valid")
    assert [binarized.dataset("valid")[i]["target"].tolist() for i in range(30)] == \
        [tasks[0].dataset("valid")[i]["target"].tolist() for i in range(30)]

    inner = tmp_path / "inner"
    inner.mkdir()
    for name, lines in want.items():
        lines = [lines[0] + "\r" + lines[0]] + lines[1:] if name == "src" else lines
        (inner / f"valid.{name}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_triplets(inner, "valid")["src"][0] == want["src"][0] + "\r" + want["src"][0]


def test_binarizing_a_blank_line_names_it(tmp_path, ape_raw, tiny_bert):
    insert_line(ape_raw / "valid.pe", 7, "")
    result = run_cli("fairseq-sparse-ape-binarize", "--bert-model", tiny_bert, "--raw", ape_raw, "--destdir",
                     tmp_path / "bin", "--splits", "valid", check=False)
    assert result.returncode != 0 and "valid.pe:8: empty line" in result.stderr


def test_generation_needs_the_tokenizer_or_bert_model(tmp_path, ape_raw):
    from fairseq_sparse.ape.task import APEConfig, APETask

    with pytest.raises(ValueError, match="--bert-model is required"):
        APETask.setup_task(APEConfig(data=str(ape_raw)))
    with pytest.raises(FileNotFoundError, match="--bert-model .*nowhere"):
        APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tmp_path / "nowhere")))


def test_triplets_too_long_for_the_model_stop_training_instead_of_being_dropped(ape_raw, tiny_bert):
    from fairseq_sparse.ape.task import APEConfig, APETask

    def train_batches(max_segment_tokens):
        task = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert), max_source_positions=64,
                                            max_segment_tokens=max_segment_tokens))
        task.load_dataset("train")
        # ignore_invalid_inputs=True is what fairseq's trainer always passes for training
        return task.get_batch_iterator(task.dataset("train"), max_tokens=2000, max_positions=task.max_positions(),
                                       ignore_invalid_inputs=True).frozen_batches

    assert sum(len(b) for b in train_batches(30)) == 200  # cut to fit: every triplet is trained on
    task = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert)))
    task.load_dataset("train")
    sizes = task.dataset("train").src_sizes
    first_too_long = 1 + min(i for i in range(200) if sizes[i] > 64)
    with pytest.raises(ValueError, match=rf"ape train: {sum(sizes > 64)} triplets are longer than the model's "
                                         rf".* \(64, 512\), the first on line {first_too_long} of the train "
                                         rf"triplets .*lower --max-segment-tokens"):
        train_batches(200)


def test_inputs_to_post_edit_are_cut_like_training_data_and_counted(ape_raw, tiny_bert, caplog):
    from fairseq_sparse.ape.task import APEConfig, APETask

    task = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert), max_segment_tokens=3))
    with caplog.at_level("WARNING"):
        sources = task.encode_inputs(["Das ist ein langer Satz .", "gut"], ["This is well .", "good"])
    assert [len(s) for s in sources] == [1 + 3 + 1 + 3 + 1, 1 + 1 + 1 + 1 + 1]  # [CLS] src [SEP] mt [SEP]
    assert "ape input: of 2 (src, mt) pairs, 1 src and 1 mt cut to --max-segment-tokens 3" in caplog.text


def test_a_pair_too_long_for_the_model_is_named_when_post_editing(ape_raw, tiny_bert):
    from fairseq import options, tasks

    from fairseq_sparse.ape.postedit import PostEditor

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(ape_raw), *map(str, TRAIN), "--bert-model", str(tiny_bert),
                                                "--max-source-positions", "64"])
    task = tasks.setup_task(args)
    editor = PostEditor([task.build_model(args)], task, beam=1, max_len_b=3)
    assert len(editor.postedit(["das ist gut ."], ["this is good ."])) == 1
    with pytest.raises(ValueError, match=r"ape input: 1 \(src, mt\) pairs are longer than the model's 64 source "
                                         r"positions, the first is pair 2 \(99 tokens .*lower --max-segment-tokens"):
        editor.postedit(["ja", "das ist gut . " * 12], ["yes", "this is good . " * 12])


def test_bad_inputs_to_post_edit_are_named(ape_raw, tiny_bert):
    from fairseq import options, tasks

    from fairseq_sparse.ape.postedit import PostEditor

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(ape_raw), *map(str, TRAIN), "--bert-model", str(tiny_bert)])
    task = tasks.setup_task(args)
    editor = PostEditor([task.build_model(args)], task, beam=1, max_len_b=3)
    with pytest.raises(TypeError, match=r"ape input: src must be a list of sentences, not one str \(wrap"):
        editor.postedit("Das ist gut .", "This is good .")
    with pytest.raises(TypeError, match=r"ape input pair 2: mt is NoneType, not a sentence"):
        editor.postedit(["ja", "nein"], ["yes", None])
    with pytest.raises(ValueError, match=r"ape input pair 1: src is not UTF-8 text \(surrogates not allowed"):
        editor.postedit(["gut \udcff"], ["good"])  # how undecodable stdin bytes arrive (surrogateescape)
    with pytest.raises(ValueError, match=r"this line has 2 tab-separated fields \(one empty\): 'Das ist gut \.\\t '"):
        task.get_interactive_tokens_and_lengths(["Das ist gut .\t "], encode_fn=None)


@pytest.mark.parametrize("max_segment_tokens", [0, -5])
def test_a_cut_below_one_wordpiece_is_refused(tmp_path, ape_raw, tiny_bert, capsys, max_segment_tokens):
    from fairseq_sparse.ape.binarize import main as binarize
    from fairseq_sparse.ape.task import APEConfig, APETask

    task = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert),
                                        max_segment_tokens=max_segment_tokens))
    with pytest.raises(ValueError, match=f"--max-segment-tokens {max_segment_tokens}: must be at least 1"):
        task.load_dataset("valid")
    with pytest.raises(ValueError, match=f"--max-segment-tokens {max_segment_tokens}: must be at least 1"):
        task.encode_inputs(["Das ist gut ."], ["This is well ."])
    with pytest.raises(SystemExit):
        binarize(["--bert-model", str(tiny_bert), "--raw", str(ape_raw), "--destdir", str(tmp_path / "bin"),
                  "--max-segment-tokens", str(max_segment_tokens)])
    assert f"--max-segment-tokens {max_segment_tokens}: must be at least 1" in capsys.readouterr().err


def test_two_gloo_workers_on_new_raw_data_equal_one_worker_with_the_same_total_batch(tmp_path, ape_raw, tiny_bert):
    """Both ranks start on a DATA_DIR without a tokenizer: each keeps one, and they agree."""
    common = [ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-tokens", "1000", "--dropout", "0",
              "--attention-dropout", "0", "--max-update", "3", "--disable-validation", "--ddp-backend", "legacy_ddp"]
    assert_two_gloo_workers_equal_one(common, tmp_path)
    assert [p.name for p in ape_raw.iterdir() if p.name.startswith(".tokenizer")] == []


def test_a_tokenizer_kept_first_by_another_rank_is_left_as_it_is(tmp_path, tiny_bert, monkeypatch):
    from fairseq_sparse.modules.bert import load_bert_tokenizer
    from fairseq_sparse.ape.task import keep_tokenizer

    tokenizer = load_bert_tokenizer(tiny_bert)
    keep_tokenizer(tokenizer, tmp_path / "tokenizer")
    first = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "tokenizer").iterdir()}
    keep_tokenizer(tokenizer, tmp_path / "tokenizer")  # the rename loses the race: no error, nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "tokenizer").iterdir()} == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer"]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="junk exists but holds no tokenizer"):
        keep_tokenizer(tokenizer, tmp_path / "junk")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk", "tokenizer"]

    def disk_full(directory):
        raise OSError("No space left on device")

    monkeypatch.setattr(tokenizer, "save_pretrained", disk_full)
    with pytest.raises(OSError, match="cannot keep the tokenizer with the data in .*new .*No space left"):
        keep_tokenizer(tokenizer, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk", "tokenizer"]  # no half-written copy left


def test_a_tokenizer_of_another_vocabulary_is_refused_wherever_weights_are_loaded(tmp_path, ape_trained, tiny_bert,
                                                                                   caplog):
    """Same size, two tokens swapped: without the check, generation would run on wrong ids."""
    import shutil

    from fairseq_sparse.ape.postedit import PostEditor

    ape_raw, checkpoint = ape_trained
    other = tmp_path / "other"
    other.mkdir()
    for name in ("test.src", "test.mt", "test.pe"):
        shutil.copy(ape_raw / name, other / name)
    shutil.copytree(ape_raw / "tokenizer", other / "tokenizer")
    spec = json.loads((other / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    first, second = (token for token, i in vocab.items() if i in (2000, 2001))
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer" / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    message = r"trained with another BERT vocabulary \(sha256 [0-9a-f]{12}\) than the tokenizer kept with the data " \
              rf"in {re.escape(str(other / 'tokenizer'))} \(sha256 [0-9a-f]{{12}}\)"
    for cli in ("fairseq-generate", "fairseq-interactive"):
        proc = (run_cli(cli, other, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path", checkpoint,
                        "--cpu", "--gen-subset", "test", "--input", "/dev/null", check=False)
                if cli == "fairseq-interactive" else generate(other, checkpoint, check=False))
        assert proc.returncode != 0 and re.search(message, proc.stderr), proc.stderr[-2000:]
    # Here the checkpoint's own --bert-model is still on disk: the error names the checkpoint, that
    # model and the data directory (it blamed a --bert-model nobody gave, and advised deleting
    # the data's tokenizer).
    with pytest.raises(ValueError) as refused:
        PostEditor.from_checkpoint(checkpoint, data=other)
    assert str(refused.value).startswith(
        f"{checkpoint} with data={other}: the checkpoint's model was trained from {tiny_bert}, whose vocabulary is "
        f"not that of the tokenizer kept with the data in {other / 'tokenizer'}: {other} was encoded for another "
        "model; give the data directory it was trained on"), str(refused.value)
    assert "remove" not in str(refused.value)
    # A checkpoint from before the digest was kept: loaded, with a warning.
    state = torch.load(checkpoint, weights_only=False)
    del state["model"]["bert_vocabulary.sha256"]
    torch.save(state, tmp_path / "old.pt")
    with caplog.at_level("WARNING"):
        editor = PostEditor.from_checkpoint(tmp_path / "old.pt", data=ape_raw, beam=1, max_len_b=3)
    assert "does not record its BERT vocabulary" in caplog.text and len(editor.postedit(["gut"], ["good"])) == 1

    # A checkpoint of another task: PostEditor says so before fairseq tries to build that
    # task; fairseq-generate --task ape names the vocabulary sizes, not torch's size mismatch.
    state["cfg"]["task"]["_name"] = "translation"
    torch.save(state, tmp_path / "translation.pt")
    with pytest.raises(ValueError, match=r"translation.pt was trained with --task translation, not --task ape"):
        PostEditor.from_checkpoint(tmp_path / "translation.pt", data=ape_raw)
    for key in [k for k in state["model"] if k.endswith("embed_tokens.weight")]:
        state["model"][key] = state["model"][key][:1000]
    torch.save(state, tmp_path / "other_vocabulary.pt")
    proc = generate(ape_raw, tmp_path / "other_vocabulary.pt", check=False)
    assert proc.returncode != 0 and re.search(r"token embeddings have 1000 rows, not the \d+ tokens of the tokenizer "
                                              r"kept with the data", proc.stderr), proc.stderr[-2000:]


@pytest.mark.parametrize("option", ["--fp16", "--bf16"])
def test_half_precision_without_a_gpu_is_a_plain_error(ape_raw, tiny_bert, tmp_path, option):
    proc = run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-epoch", "1", "--save-dir",
                   tmp_path, option, check=False)
    assert proc.returncode != 0
    assert f"{option}: half-precision training and generation need a CUDA GPU, and --cpu is given" in proc.stderr
    assert not list(tmp_path.glob("*.pt"))


def test_mt_masking_touches_only_the_mt_words_of_training_inputs(ape_raw, tiny_bert):
    from fairseq_sparse.ape.task import APEConfig, APETask

    def task(prob, seed=1):
        t = APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert), mt_mask_prob=prob, seed=seed))
        t.load_dataset("train")
        t.load_dataset("valid")
        return t

    plain, masked = task(0.0), task(0.3)
    d = masked.source_dictionary
    mask = masked.tokenizer.mask_token_id
    train = masked.dataset("train")
    changed = mt_words = 0
    for i in range(200):
        clean, item = plain.dataset("train")[i], train[i]
        assert item["target"].tolist() == clean["target"].tolist()
        source, original = item["source"], clean["source"]
        first_sep = original.tolist().index(d.eos())
        # [CLS] src [SEP] and the closing [SEP] as they were; within mt only [MASK] is written
        assert source[:first_sep + 1].tolist() == original[:first_sep + 1].tolist()
        assert source[-1] == d.eos() and len(source) == len(original)
        differs = source.ne(original)
        assert source[differs].eq(mask).all()
        changed += int(differs.sum())
        mt_words += len(original) - first_sep - 2
    assert 0.25 < changed / mt_words < 0.35, changed / mt_words
    for i in range(30):  # validation inputs are never masked
        assert masked.dataset("valid")[i]["source"].tolist() == plain.dataset("valid")[i]["source"].tolist()

    # The masks are a function of (seed, epoch, example): a resumed run draws the same ones,
    # and each epoch draws new ones.
    again = task(0.3).dataset("train")
    assert all(again[i]["source"].tolist() == train[i]["source"].tolist() for i in range(20))
    assert any(task(0.3, seed=2).dataset("train")[i]["source"].tolist() != train[i]["source"].tolist()
               for i in range(20))
    first = [train[i]["source"].tolist() for i in range(20)]
    train.set_epoch(2)
    assert any(train[i]["source"].tolist() != first[i] for i in range(20))
    again.set_epoch(2)
    assert all(again[i]["source"].tolist() == train[i]["source"].tolist() for i in range(20))


@pytest.mark.parametrize("prob", [-0.1, 1.0, float("nan")])
def test_an_mt_mask_probability_outside_0_1_is_refused(ape_raw, tiny_bert, prob):
    from fairseq_sparse.ape.task import APEConfig, APETask

    with pytest.raises(ValueError, match=rf"--mt-mask-prob {prob}: must be in \[0, 1\)"):
        APETask.setup_task(APEConfig(data=str(ape_raw), bert_model=str(tiny_bert), mt_mask_prob=prob, seed=1))


def test_fairseq_train_masks_the_mt_of_its_batches(tmp_path, ape_raw, tiny_bert):
    """The option reaches fairseq-train's batches: with the same seed, masked inputs train other
    weights (training is deterministic here: see the resume check above)."""
    weights = {}
    for prob in ("0", "0.2"):
        proc = run_cli("fairseq-train", ape_raw, *TRAIN, "--bert-model", tiny_bert, "--max-update", "2",
                       "--disable-validation", "--save-dir", tmp_path / prob, "--mt-mask-prob", prob)
        assert f"'mt_mask_prob': {float(prob)}" in proc.stdout + proc.stderr
        state = torch.load(tmp_path / prob / "checkpoint_last.pt")
        assert state["cfg"]["task"]["mt_mask_prob"] == float(prob)
        weights[prob] = state["model"]
    assert any(not torch.equal(w, weights["0.2"][name]) for name, w in weights["0"].items())


@pytest.mark.parametrize("task, model", [("ssvae", "ssvae"), ("sentence_vae", "sentence_vae")])
def test_another_tasks_checkpoint_is_named_with_its_task(tmp_path, ape_trained, task, model):
    """It failed deep inside the other model (ssvae: "'APETask' object has no attribute
    'input_dim'"; sentence_vae: a state_dict mismatch after an "old checkpoint" warning)."""
    ape_raw, checkpoint = ape_trained
    state = torch.load(checkpoint)
    state["cfg"]["task"]["_name"] = task
    for option, value in (("_name", model), ("arch", model), ("task", task)):
        setattr(state["cfg"]["model"], option, value)
    other = tmp_path / "other.pt"
    torch.save(state, other)
    want = f"--task ape: the checkpoint holds a '{model}' model, trained with --task {task}, not an APE model"
    proc = generate(ape_raw, other, check=False)
    assert proc.returncode != 0 and want in proc.stderr, proc.stderr[-1500:]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b\tc d\n", encoding="utf-8")
    proc = run_cli("fairseq-interactive", ape_raw, "--user-dir", REPO / "fairseq_sparse", "--task", "ape", "--path",
                   other, "--cpu", "--input", pairs, check=False)
    assert proc.returncode != 0 and want in proc.stderr, proc.stderr[-1500:]


def test_a_foreign_model_config_is_named_with_the_task_beside_it():
    """A checkpoint's model config names its task where its config holds one beside it."""
    from omegaconf import OmegaConf

    from fairseq_sparse.ape.task import check_ape_checkpoint

    cfg = OmegaConf.create({"task": {"_name": "ssvae"}, "model": {"_name": "ssvae"}})
    with pytest.raises(ValueError, match="'ssvae' model, trained with --task ssvae, not an APE model"):
        check_ape_checkpoint(cfg.model)
    with pytest.raises(ValueError, match="'ssvae' model, trained for another task, not an APE model"):
        check_ape_checkpoint(OmegaConf.create({"_name": "ssvae"}))
