"""data_prep/ape_en_de.sh and prepare_ape.py against mirrors laid out as the WMT16 APE
(zip), WMT17 APE and AMU (tar.gz) releases, built from real WMT APE en-de triplets."""

import io
import subprocess
import tarfile
import zipfile

from tests.conftest import REPO, pipeline_env, run_cli, run_script, shared_data

FIELDS = ("src", "mt", "pe")


def real_triplets():
    ape = shared_data("ape", "wmt16-17-en-de-it-subset")
    columns = [(ape / f"train.{f}").read_text(encoding="utf-8").splitlines() for f in FIELDS]
    return list(zip(*columns))


def files_of(parts):
    """{archive path: text} for {name prefix: triplets}."""
    return {f"{prefix}.{field}": "".join(t[i] + "\n" for t in triplets)
            for prefix, triplets in parts.items() for i, field in enumerate(FIELDS)}


def write_zip(path, files):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def write_tgz(path, files):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def build_mirror(mirror, t):
    """WMT16: 40 train, 10 dev, 10 test; WMT17: 30 train (5 of them WMT16's again) and
    10 test; AMU: 4M (20) and 500K (15).  Names as in the releases: WMT16's references
    unpack apart from Test/ (their own archive), WMT17 names its test files
    en-de.{src,mt,pe}.test.2017; a macOS resource fork rides along."""
    write_zip(mirror / "2016" / "TrainDev.zip", {**files_of({"TrainDev/train": t[:40], "TrainDev/dev": t[40:50]}),
                                                 "__MACOSX/TrainDev/._train.pe": "\x00\x05\x16\x07"})
    test = files_of({"Test/test": t[50:60]})
    write_zip(mirror / "2016" / "Test.zip", {k: v for k, v in test.items() if not k.endswith(".pe")})
    write_zip(mirror / "2016" / "test_pe.zip", {"test.pe": test["Test/test.pe"]})
    wmt17 = files_of({"train/en-de.train": t[60:85] + t[:5]})
    wmt17.update({f"test/en-de.{field}.test.2017": "".join(triplet[i] + "\n" for triplet in t[85:95])
                  for i, field in enumerate(FIELDS)})
    write_tgz(mirror / "2017" / "ape17.tar.gz", wmt17)
    write_tgz(mirror / "amu" / "data.tgz", files_of({"data/4M/4M": t[100:120], "data/500K/500K": t[120:135]}))


def run(out, mirror, **env):
    return subprocess.run(["bash", str(REPO / "data_prep" / "ape_en_de.sh"), str(out)], capture_output=True,
                          text=True, env=pipeline_env(MIRROR=mirror, PATH="/usr/bin:/bin", OVERSAMPLE="3", **env))


def read(out, split):
    return list(zip(*[(out / f"{split}.{f}").read_text(encoding="utf-8").splitlines() for f in FIELDS]))


def test_pipeline_assembles_oversamples_and_keeps_triplets_aligned(tmp_path, tiny_bert):
    t = real_triplets()
    mirror = tmp_path / "mirror"
    build_mirror(mirror, t)
    out = tmp_path / "out"
    proc = run(out, mirror, WMT17_APE_URLS="https://example.org/ape17.tar.gz")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WMT18 APE: WMT18_APE_URLS not set, so it is left out" in proc.stderr
    real = t[:40] + t[60:85]  # WMT17's copies of WMT16 triplets are kept once
    assert "train: 230 triplets = 35 artificial + 65 real x 3" in proc.stderr and "5 real duplicates" in proc.stderr
    train = read(out, "train")
    assert train[:35] == t[100:135] and train[35:] == real * 3
    assert read(out, "valid") == t[40:50]
    assert read(out, "test2016") == read(out, "test") == t[50:60] and read(out, "test2017") == t[85:95]
    # The documented next step reads the result.
    proc = run_cli("fairseq-sparse-ape-binarize", "--bert-model", tiny_bert, "--raw", out, "--destdir", out / "bin",
                   "--splits", "train", "valid", "test2017")
    assert "train: 230 triplets" in proc.stderr and "test2017: 10 triplets" in proc.stderr
    # A rerun finds every archive in place and unpacked.
    again = run(out, tmp_path / "empty", WMT17_APE_URLS="https://example.org/ape17.tar.gz")
    assert again.returncode == 0 and again.stdout.count("already here") == 5


def test_misaligned_release_and_bad_options_are_named(tmp_path):
    t = real_triplets()
    mirror = tmp_path / "mirror"
    build_mirror(mirror, t)
    files = files_of({"TrainDev/train": t[:40], "TrainDev/dev": t[40:50]})
    files["TrainDev/train.mt"] = "".join(m + "\n" for _, m, _ in t[:39])
    write_zip(mirror / "2016" / "TrainDev.zip", files)
    proc = run(tmp_path / "out", mirror, ARTIFICIAL="none")
    assert proc.returncode != 0
    assert "TrainDev/train.mt ends at line 39 but" in proc.stderr and "goes on: not line-aligned" in proc.stderr
    proc = run(tmp_path / "out2", mirror, ARTIFICIAL="escape")
    assert proc.returncode == 2 and "needs ESCAPE_URLS" in proc.stderr
    (mirror / "2016" / "Test.zip").write_bytes(b"<html>accept the licence</html>")
    proc = run(tmp_path / "out3", mirror, ARTIFICIAL="none")
    assert proc.returncode != 0 and "Test.zip is not a readable zip archive" in proc.stderr


def test_a_triplet_with_a_field_nowhere_is_named(tmp_path):
    t = real_triplets()
    release = tmp_path / "2016"
    for name, text in files_of({"train": t[:5]}).items():
        if not name.endswith(".mt"):
            (release / name).parent.mkdir(parents=True, exist_ok=True)
            (release / name).write_text(text, encoding="utf-8")
    proc = run_script("data_prep/prepare_ape.py", tmp_path / "out", "--real", release)
    assert proc.returncode != 0
    assert f"{release / 'train.pe'}: its train.mt is not beside it and nowhere in the release" in proc.stderr
