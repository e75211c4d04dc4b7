"""Shared by the experiment scripts (importable because Python puts a script's own
directory on sys.path)."""

import subprocess


def run_logged(cmd, log):
    """Run a command line, keep its whole output in `log`, stop with its tail if it fails.

    stdout goes to `log` as it is written (fairseq logs its progress there), so a long
    run can be followed with ``tail -f``; stderr is appended when the command ends."""
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.run([str(c) for c in cmd], stdout=out, stderr=subprocess.PIPE, text=True)
    stdout = log.read_text(encoding="utf-8")
    with open(log, "a", encoding="utf-8") as out:
        out.write(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}); full log in {log}:\n{(stdout + proc.stderr)[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, proc.stderr)


def generate_hypotheses(output):
    """{sentence id: detokenised hypothesis} from fairseq-generate's stdout (its D- lines)."""
    hyps = {}
    for line in output.splitlines():
        if line.startswith("D-"):
            sid, _, text = line.split("\t", 2)
            hyps[int(sid[2:])] = text
    return hyps


def epoch_metrics(log_text):
    """The per-epoch metrics of a fairseq-train log (``--log-format simple``):
    {"train": [{metric: value}, ...], "valid": [...], "test": [...]}, one dict per epoch
    and subset, in order."""
    import re

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
        found.setdefault(subset, []).append({k: float(v) for k, v in re.findall(rf"\| (\w+) ({number})\b", line)})
    return found
