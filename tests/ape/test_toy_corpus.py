"""The generated APE corpus of the main job: real errors in the MT, correct post-edits."""

from fairseq_sparse.ape import toy_corpus as toy_ape_corpus


def test_corpus_is_deterministic_and_mostly_damaged(tmp_path):
    triplets = toy_ape_corpus.generate(seed=0)
    assert triplets == toy_ape_corpus.generate(seed=0)
    assert len({pe for _, _, pe in triplets}) == len(triplets)  # every reference sentence once
    damaged = sum(mt != pe for _, mt, pe in triplets) / len(triplets)
    assert 0.65 < damaged < 0.85  # about a quarter is left correct
    sizes = toy_ape_corpus.write(tmp_path)
    assert sizes == {"test": 200, "valid": 100, "train": len(triplets) - 300}
    for split, n in sizes.items():
        for field in ("src", "mt", "pe"):
            assert len((tmp_path / f"{split}.{field}").read_text(encoding="utf-8").splitlines()) == n
    whole = (tmp_path / "train.pe").read_text(encoding="utf-8").splitlines()
    assert toy_ape_corpus.write(tmp_path / "cut", train=50) == {"test": 200, "valid": 100, "train": 50}
    assert (tmp_path / "cut" / "train.pe").read_text(encoding="utf-8").splitlines() == whole[:50]


def test_each_error_kind_occurs():
    triplets = toy_ape_corpus.generate(seed=0)
    mts = [(mt.split(), pe.split()) for _, mt, pe in triplets if mt != pe]
    assert any(len(m) < len(p) for m, p in mts)  # dropped article
    assert any(len(m) > len(p) for m, p in mts)  # repeated word
    assert any("to house" in " ".join(m) for m, _ in mts)  # literal preposition
    assert any(sorted(m) == sorted(p) and m != p for m, p in mts)  # word order
