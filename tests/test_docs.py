"""The READMEs and docs/, results and notes included: every relative link and image points at a file
of the repository."""

import re

import pytest

from tests.conftest import REPO

PAGES = [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# [text](target) or ![alt](target); the target up to a space, ')' or '#'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s#]+)[^)]*\)")


def relative_links(page):
    text = page.read_text(encoding="utf-8")
    # Code blocks and inline code hold commands, not links.
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    missing = [target for target in relative_links(page) if not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to files that do not exist: {missing}"


def test_the_link_pattern_finds_images_and_pages():
    found = LINK.findall("see ![a plot](figures/x.png) and [the page](docs/a.md#part) or [web](https://x.org)")
    assert found == ["figures/x.png", "docs/a.md", "https://x.org"]


def test_every_sparse_attention_option_is_listed_with_its_default():
    """fairseq-train --help does not show an architecture's options, so the attention page
    lists them: each option of EntmaxTransformerOptions, with its default."""
    from dataclasses import fields

    from fairseq_sparse.modules.transformer import EntmaxTransformerOptions

    text = (REPO / "docs" / "sparse_transformer.md").read_text(encoding="utf-8")
    for f in [f for f in fields(EntmaxTransformerOptions) if not f.name.startswith("_")]:
        row = next((line for line in text.splitlines() if line.startswith(f"  | `--{f.name.replace('_', '-')}` |")),
                   None)
        assert row is not None, f"--{f.name.replace('_', '-')} is not in docs/sparse_transformer.md's option table"
        if f.default is not None:
            assert f"| `{f.default}` |" in row or f"| {f.default} |" in row, row


# One spelling per word across the code and the reference pages (the results and notes record
# what was run, in the words of their day): the other spelling, and the one kept.
SPELLINGS = {"binaris": "binariz"}


def test_one_spelling_per_word():
    import subprocess

    for other, kept in SPELLINGS.items():
        found = subprocess.run(["git", "grep", "-n", "-i", other, "--", ".", ":!docs/results", ":!docs/notes",
                                ":!tests/test_docs.py"], cwd=REPO, capture_output=True, text=True).stdout
        assert not found, f"spell it {kept!r}:\n{found}"


def test_vae_names_models_and_objectives_are_named_for_what_they_compute():
    """"vae" names models: no criterion is a bare VAE name but the refusals of the objectives'
    former names, and the only criteria that carry "vae" are the papers' sparse VAEs,
    whose objectives are theirs."""
    import fairseq_sparse.sentence_vae  # noqa: F401  (registers the line)
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_sparse.checkpoint_migrations import RENAMED_CRITERIA

    with_vae = {name for name in CRITERION_REGISTRY if "vae" in name}
    assert with_vae == set(RENAMED_CRITERIA) | {"hsvae", "mat_vae"}, with_vae
    assert all(CRITERION_REGISTRY[name].__name__.startswith("Former") for name in RENAMED_CRITERIA)
