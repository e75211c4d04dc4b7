"""What the experiments of every research line share: running fairseq commands and logging
them, and reading fairseq's logs and output.  (Corpora are their line's: the APE triplets'
in :mod:`fairseq_sparse.ape.triplets`.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

# The package itself, as fairseq's --user-dir.
PLUGIN_DIR = Path(__file__).resolve().parent
# fairseq's command lines as modules of this interpreter: where the wheels were installed with
# --target (a leased GPU machine, benchmarks/gpu_session.sh), no console script sits beside it.
FAIRSEQ_TRAIN = [sys.executable, "-m", "fairseq_cli.train"]
FAIRSEQ_GENERATE = [sys.executable, "-m", "fairseq_cli.generate"]
FAIRSEQ_VALIDATE = [sys.executable, "-m", "fairseq_cli.validate"]
FAIRSEQ_PREPROCESS = [sys.executable, "-m", "fairseq_cli.preprocess"]
# glibc's malloc tunables (read at a process's start; other C libraries ignore them): keep up to
# 1 GiB of freed memory rather than trimming the heap or unmapping large blocks, so that a
# step that allocates and frees tensors of tens of MB does not fault them back in every time
# (docs/results/latent.md measured it on the signaling game).
MALLOC_KEEP = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
               "MALLOC_TOP_PAD_": str(1 << 28)}


def threads_each(jobs):
    """OMP_NUM_THREADS for one of ``jobs`` runs at the same time: the user's, else the machine's cores
    shared out among the runs (at least 1 each)."""
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // jobs))


def job_env(jobs):
    """The environment for one of ``jobs`` runs at the same time: OMP_NUM_THREADS as set by
    the user, else this machine's cores shared out (at least 1 each), so that the runs
    together do not ask for more threads than there are cores (oversubscribed, OpenMP's
    threads wait on each other, and the runs train several times slower), and glibc's
    malloc told to keep freed memory (``MALLOC_KEEP``)."""
    # The user's own malloc tunables win.
    return {**MALLOC_KEEP, **os.environ, "OMP_NUM_THREADS": threads_each(jobs)}


def training_env(device, members=1, tf32=False):
    """fairseq-train's environment for one of ``members`` models trained side by side (None:
    this process's): with ``tf32``, PyTorch's override that lets float32 matrix products run
    on tensor cores (inputs rounded to TF32's 10-bit mantissa, sums in float32); on CPU, the
    cores shared out among the members (each with torch's default of a thread per core, they
    would oversubscribe them and spin-wait), unless OMP_NUM_THREADS already says how many."""
    env = {}
    if tf32:
        env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = "1"
    if device == "cpu" and members > 1:
        env["OMP_NUM_THREADS"] = threads_each(members)
    return dict(os.environ, **env) if env else None


def device_name(device, members=1, amp=False, tf32=False):
    """The device training ran on, as a results table names it, with its precision where not
    float32; on CPU with the threads a model trained with (each member's, for ``members``
    models trained side by side: :func:`training_env` shares the cores out)."""
    import platform

    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0) + (", mixed precision (float16)" if amp else ", TF32" if tf32 else "")
    precision = ", mixed precision (bfloat16)" if amp else ""
    processor = platform.processor() or platform.machine()
    if members == 1:
        return f"CPU ({processor}, {torch.get_num_threads()} threads){precision}"
    threads = (training_env(device, members) or os.environ).get("OMP_NUM_THREADS", torch.get_num_threads())
    return f"CPU ({processor}, {threads} threads a member){precision}"


def run_logged(cmd, log, env=None, append=False):
    """Run a command line (in ``env``, default this process's), keep its whole output in
    `log`, stop with its tail if it fails.

    stdout goes to `log` as it is written (fairseq logs its progress there), so a long
    run can be followed with ``tail -f``; stderr is appended when the command ends.  With
    ``append`` (a run resumed from its checkpoint) the log keeps what it holds, the epochs
    logged before the interruption; the result's stdout is this command's alone."""
    start = log.stat().st_size if append and log.is_file() else 0
    with open(log, "a" if append else "w", encoding="utf-8") as out:
        proc = subprocess.run([str(c) for c in cmd], stdout=out, stderr=subprocess.PIPE, text=True, env=env)
    stdout = log.read_bytes()[start:].decode("utf-8")
    with open(log, "a", encoding="utf-8") as out:
        out.write(proc.stderr)
    if proc.returncode != 0:
        program = cmd[2] if len(cmd) > 2 and str(cmd[1]) == "-m" else cmd[0]  # FAIRSEQ_TRAIN &c.: the module
        raise SystemExit(f"{program} failed ({proc.returncode}); full log in {log}:\n{(stdout + proc.stderr)[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, proc.stderr)


def training_done(log, epochs=None):
    """Whether ``log`` holds a fairseq-train run that reached its end and, given ``epochs``,
    logged at least that many: a grid rerun with more epochs trains on (from the checkpoint
    where there is one) instead of reporting the shorter run."""
    if not log.is_file():
        return False
    text = log.read_text(encoding="utf-8")
    if "done training" not in text:
        return False
    ended = [entry["epoch"] for entry in epoch_metrics(text).get("train", [])]
    return epochs is None or (bool(ended) and ended[-1] >= epochs)


def generate_hypotheses(output):
    """{sentence id: detokenised hypothesis} from fairseq-generate's stdout (its D- lines)."""
    hyps = {}
    for line in output.split("\n"):  # print's line ends only: a hypothesis may hold U+2028
        if line.startswith("D-"):
            sid, _, text = line.split("\t", 2)
            hyps[int(sid[2:])] = text
    return hyps


def epoch_metrics(log_text):
    """The per-epoch metrics of a fairseq-train log (``--log-format simple``):
    {"train": [{metric: value}, ...], "valid": [...], "test": [...]}, one dict per epoch
    and subset, in epoch order.  The log of a run resumed from its checkpoint (appended to)
    repeats an epoch that was logged but not saved before the interruption: the later
    entry is kept."""
    found = {}
    for line in log_text.splitlines():
        if "| train | epoch" in line:
            subset = "train"
        else:
            match = re.search(r"valid on '(\w+)' subset", line)
            if not match:
                continue
            subset = match.group(1)
        number = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"  # fairseq writes large values as 2.08011e+06
        entry = {k: float(v) for k, v in re.findall(rf"\| (\w+) ({number})\b", line)}
        rows = found.setdefault(subset, {})
        rows[int(entry.get("epoch", len(rows) + 1))] = entry
    return {subset: [rows[epoch] for epoch in sorted(rows)] for subset, rows in found.items()}


def interval_metrics(log_text):
    """The training metrics fairseq logs every ``--log-interval`` updates (its
    ``train_inner`` lines, ``--log-format simple``): one {metric: value} per line, in
    order, each with ``num_updates``; a resumed run's repeated updates are kept once (the
    later)."""
    number = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan|inf"
    by_update = {}
    for line in log_text.splitlines():
        if "| train_inner |" not in line:
            continue
        entry = {k: float(v) for k, v in re.findall(rf"(\w+)=({number})(?=,|$)", line.split("| train_inner |", 1)[1])}
        if "num_updates" in entry:
            by_update[int(entry["num_updates"])] = entry
    return [by_update[u] for u in sorted(by_update)]
