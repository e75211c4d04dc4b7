"""The IWSLT14 and WMT14 pipelines, run offline against a local mirror of archives laid
out as the official releases are, filled with real Multi30k sentences."""

import subprocess
import tarfile

from tests.conftest import REPO, pipeline_env, shared_data


def real_pairs(n):
    """n real (en, de) pairs that pass the cleaning (length ratio <= 1.5), single-spaced."""
    src = shared_data("mt", "multi30k-en-de")
    en = (src / "train.en").read_text(encoding="utf-8").splitlines()
    de = (src / "train.de").read_text(encoding="utf-8").splitlines()
    pairs = [(norm(e), norm(d)) for e, d in zip(en, de)]
    return [(e, d) for e, d in pairs if max(len(e.split()), len(d.split())) <= 1.5 * min(len(e.split()), len(d.split()))][:n]


def norm(text):
    return " ".join(text.split())


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def tgz(mirror, name, root):
    mirror.mkdir(exist_ok=True)
    with tarfile.open(mirror / name, "w:gz") as tar:
        for path in sorted(root.iterdir()):
            tar.add(path, arcname=path.name)


def xml(pairs, side):
    return ['<doc docid="1">'] + [f'<seg id="{i}"> {p[side]} </seg>' for i, p in enumerate(pairs, 1)] + ["</doc>"]


def run_pipeline(script, out, mirror):
    proc = subprocess.run(["bash", str(REPO / "data_prep" / script), str(out)], capture_output=True, text=True,
                          env=pipeline_env(MIRROR=mirror, PATH="/usr/bin:/bin"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def nlines(path):
    return len(path.read_text(encoding="utf-8").split("\n")) - 1


# Dirty pairs every pipeline must drop: an empty side, over-long, and a length ratio > 1.5.
DIRTY = [("", "leer"), (" ".join(["word"] * 300), "lang"), ("one two three four five six seven", "eins")]


def test_iwslt14_pipeline_on_a_local_mirror(tmp_path):
    pairs = real_pairs(250)
    release = tmp_path / "release"
    meta = [("<url>http://www.ted.com/talks/x.html</url>",) * 2, ("<talkid>1</talkid>",) * 2,
            ("<keywords>talks, art</keywords>",) * 2, ("<title>A title</title>", "<title>Ein Titel</title>"),
            ("<description>About art</description>", "<description>Über Kunst</description>")]
    train = meta + pairs[:200] + DIRTY
    write(release / "de-en" / "train.tags.de-en.en", [p[0] for p in train])
    write(release / "de-en" / "train.tags.de-en.de", [p[1] for p in train])
    test_files = ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")
    for k, name in enumerate(test_files):
        chunk = pairs[200 + 10 * k:210 + 10 * k]
        write(release / "de-en" / f"IWSLT14.{name}.de-en.en.xml", xml(chunk, 0))
        write(release / "de-en" / f"IWSLT14.{name}.de-en.de.xml", xml(chunk, 1))
    mirror = tmp_path / "mirror"
    tgz(mirror, "de-en.tgz", release)

    out = tmp_path / "iwslt14"
    proc = run_pipeline("iwslt14.sh", out, mirror)
    assert "kept 202 of 205 (dropped 1 empty, 1 too long, 1 length ratio)" in proc.stderr
    train_de = (out / "raw" / "train.de").read_text(encoding="utf-8")
    assert "<url>" not in train_de and "talkid" not in train_de and "<title>" not in train_de
    assert "Ein Titel\n" in train_de and "Über Kunst\n" in train_de  # title and description keep their text
    # 202 kept pairs: every 23rd (8 of them) is valid; test = the 5 XML files' segments.
    assert nlines(out / "raw" / "valid.de") == 8 and nlines(out / "raw" / "train.en") == 194
    assert (out / "raw" / "test.en").read_text(encoding="utf-8").splitlines() == [p[0] for p in pairs[200:250]]
    assert (out / "test.raw.en").read_text(encoding="utf-8").splitlines()[0] == pairs[200][0]
    for split in ("train", "valid", "test"):
        assert (out / "bin" / f"{split}.de-en.de.bin").stat().st_size > 0
    # A second run reuses the verified archive instead of fetching it again.
    assert "de-en.tgz: already here" in run_pipeline("iwslt14.sh", out, mirror).stdout


def test_wmt14_pipeline_on_a_local_mirror(tmp_path):
    pairs = real_pairs(200)
    mirror = tmp_path / "mirror"
    corpora = {"training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en",
               "training-parallel-commoncrawl.tgz": "commoncrawl.de-en",
               "training-parallel-nc-v12.tgz": "training/news-commentary-v12.de-en"}
    # Common Crawl has stray carriage returns and Unicode line separators inside lines.
    chunks = [pairs[0:50] + DIRTY, [(e + "\u2028more", d + "\rmehr") for e, d in pairs[50:100]], pairs[100:150]]
    for (archive, prefix), chunk in zip(corpora.items(), chunks):
        root = tmp_path / archive
        write(root / f"{prefix}.en", [p[0] for p in chunk])
        write(root / f"{prefix}.de", [p[1] for p in chunk])
        tgz(mirror, archive, root)
    write(tmp_path / "dev" / "dev" / "newstest2013.en", [p[0] for p in pairs[150:170]])
    write(tmp_path / "dev" / "dev" / "newstest2013.de", [p[1] for p in pairs[150:170]])
    tgz(mirror, "dev.tgz", tmp_path / "dev")
    write(tmp_path / "test" / "test-full" / "newstest2014-deen-src.en.sgm", xml(pairs[170:200], 0))
    write(tmp_path / "test" / "test-full" / "newstest2014-deen-ref.de.sgm", xml(pairs[170:200], 1))
    tgz(mirror, "test-full.tgz", tmp_path / "test")

    out = tmp_path / "wmt14"
    proc = run_pipeline("wmt14_en_de.sh", out, mirror)
    assert "kept 150 of 153 (dropped 1 empty, 1 too long, 1 length ratio)" in proc.stderr
    assert nlines(out / "raw" / "train.en") == nlines(out / "raw" / "train.de") == 150
    assert f"\n{pairs[50][0]} more\n" in (out / "raw" / "train.en").read_text(encoding="utf-8")
    assert nlines(out / "raw" / "valid.de") == 20
    assert (out / "test.raw.de").read_text(encoding="utf-8").splitlines() == [p[1] for p in pairs[170:200]]
    for split in ("train", "valid", "test"):
        assert (out / "bin" / f"{split}.en-de.en.bin").stat().st_size > 0


def test_fetch_checks_the_checksum_and_names_the_file(tmp_path):
    mirror = tmp_path / "mirror"
    write(mirror / "corpus.tgz", ["not what was published"])
    script = f'. {REPO / "data_prep" / "fetch.sh"}; fetch https://example.org/corpus.tgz {tmp_path / "orig"} {"0" * 64}'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"MIRROR": str(mirror),
                                                                                     "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert f"{tmp_path / 'orig' / 'corpus.tgz'}: sha256 is" in proc.stderr and "expected 000" in proc.stderr
    assert not (tmp_path / "orig" / "corpus.tgz").exists()  # a bad file is never taken for the real one
