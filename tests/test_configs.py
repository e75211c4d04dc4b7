"""Typed experiment configurations (fairseq_sparse.configs): the parser a script builds from
its dataclass, and the one place the shared data is found."""

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from fairseq_sparse import configs
from fairseq_sparse.configs import at_least


@dataclass(frozen=True)
class Example:
    out: Path = field(metadata={"help": "where", "required": True})
    epochs: int = field(default=3, metadata={"help": "how long", "type": at_least(1)})
    rate: float = field(default=0.5, metadata={"help": "how fast (50%)"})
    names: tuple[str, ...] = field(default=("a", "b"), metadata={"help": "which", "choices": ("a", "b", "c")})
    extra: tuple[str, ...] = field(default=(), metadata={"help": "more", "repeat": True})
    seed: Optional[int] = field(default=None, metadata={"help": "optional"})
    quick: bool = field(default=False, metadata={"help": "hurry"})

    def __post_init__(self):
        if self.rate > 1:
            raise ValueError(f"--rate {self.rate}: at most 1")


def test_the_parser_has_one_option_per_field_with_its_default_and_reads_back_the_dataclass():
    config = configs.parse(Example, "example", ["--out", "x", "--names", "c", "a", "--extra", "p", "--extra", "q",
                                                "--quick"])
    assert config == Example(out=Path("x"), names=("c", "a"), extra=("p", "q"), quick=True)
    assert configs.parse(Example, "example", ["--out", "x"]) == Example(out=Path("x"))
    parser = configs.add_options(argparse.ArgumentParser(), Example)
    text = parser.format_help()
    assert "how fast (50%) (default: 0.5)" in text and "which (default: a b)" in text


@pytest.mark.parametrize("argv, message", [
    (["--out", "x", "--epochs", "0"], "argument --epochs: must be at least 1, not 0"),
    (["--out", "x", "--rate", "2"], "--rate 2.0: at most 1"),
    (["--out", "x", "--names", "d"], "invalid choice: 'd'"),
    ([], "the following arguments are required: --out"),
])
def test_bad_options_are_usage_errors_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        configs.parse(Example, "example", argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_shared_data_is_found_in_one_place(monkeypatch, tmp_path):
    monkeypatch.delenv(configs.DATA_ENV, raising=False)
    assert configs.data_path("text") == Path(configs.__file__).resolve().parents[2] / "shared" / "data" / "text"
    monkeypatch.setenv(configs.DATA_ENV, str(tmp_path))
    assert configs.data_path("ape", "x") == tmp_path / "ape" / "x"
