import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
BIN = Path(sys.executable).parent


def shared_data(*parts):
    """Path under ../shared/data; skipped outside CI when the data is absent, an error in CI."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            raise FileNotFoundError(f"{path} is missing: CI expects ../shared/data beside the clone")
        pytest.skip(f"real data not available at {path}")
    return path


def run_cli(name, *args, cwd=None, check=True, timeout=600):
    """Run a console script of this virtual environment (fairseq-train, ...) and return it."""
    cmd = [str(BIN / name), *map(str, args)]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@pytest.fixture(scope="session")
def multi30k_bin(tmp_path_factory):
    """A small slice of Multi30k en-de binarised by the stock fairseq-preprocess."""
    src = shared_data("mt", "multi30k-en-de")
    out = tmp_path_factory.mktemp("multi30k")
    for split, name, n in (("train", "train", 300), ("valid", "val", 40), ("test", "test_2016_flickr", 40)):
        for lang in ("en", "de"):
            lines = (src / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_cli(
        "fairseq-preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", out / "train", "--validpref", out / "valid", "--testpref", out / "test",
        "--destdir", out / "bin", "--joined-dictionary", "--workers", "1",
    )
    return out / "bin"
