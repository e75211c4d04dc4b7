"""Experiment configurations: a frozen dataclass per experiment, its fields the options.

Each field has one default and its help text (``field(metadata={"help": ...})``, fairseq's
own convention for options); :func:`add_options` builds an argparse parser from the fields
and :func:`from_namespace` reads the parsed options back into the dataclass, so an
experiment's script states nothing the dataclass already says, and Python callers build
the same configuration without a parser.  ``metadata`` may add ``choices``, ``required``,
``metavar``, ``least`` (the smallest count the field takes: the parser refuses less with
:func:`at_least`, and :func:`check` refuses it in Python), ``type`` (an argparse type that
parses and checks one value, instead of the field's own type), ``shown`` (the default as
the help states it), ``repeat`` (a tuple field whose option is given once per value,
``--x A --x B``, rather than ``--x A B``) and ``positional`` (an argument without a dash,
as the first on the command line); a tuple field takes one or more values.

The real data sets live in one place, :func:`data_path`: ``$FAIRSEQ_SPARSE_DATA`` when set,
else ``../shared/data`` beside the source checkout.
"""

import argparse
import os
import typing
from dataclasses import MISSING, fields
from pathlib import Path

# The environment variable that says where the shared data sets are.
DATA_ENV = "FAIRSEQ_SPARSE_DATA"


def at_least(minimum):
    """An argparse ``type``: an integer no smaller than ``minimum``, so that argparse's error
    names the option (``argument --epochs: must be at least 1, not 0``).  Counts of epochs,
    seeds or jobs of 0 otherwise reach fairseq-train (where ``--max-epoch 0`` means no
    limit: a run that never ends) or the thread pool."""
    def parse(text):
        value = int(text)  # a ValueError: argparse's "invalid int value"
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    parse.__name__ = "int"
    return parse


def check(config):
    """Refuse, naming the option, a field below its ``least`` (a config's ``__post_init__``
    calls it, so that Python callers meet the parser's rule)."""
    for f in fields(config):
        value = getattr(config, f.name)
        if "least" in f.metadata and value is not None and value < f.metadata["least"]:
            raise ValueError(f"--{f.name.replace('_', '-')} {value}: must be at least {f.metadata['least']}")


def data_path(*parts):
    """A path under the shared data directory (``$FAIRSEQ_SPARSE_DATA``, else the
    ``shared/data`` directory beside the checkout this package runs from)."""
    root = os.environ.get(DATA_ENV)
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "data"
    return base.joinpath(*parts)


def _value_type(annotation):
    """(the type one value is parsed with, whether the field takes several values)."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is tuple:
        return args[0], True
    if origin is typing.Union or (origin is not None and type(None) in typing.get_args(annotation)):
        return _value_type(args[0])
    return annotation, False


def add_options(parser, config_class):
    """Add one option per field of ``config_class`` to ``parser`` (``--field-name``)."""
    hints = typing.get_type_hints(config_class)
    for f in fields(config_class):
        help_text = f.metadata.get("help", "")
        kind, several = _value_type(hints[f.name])
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else None)
        option = "--" + f.name.replace("_", "-")
        if kind is bool:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
            continue
        extra = {key: f.metadata[key] for key in ("choices", "required", "metavar", "nargs") if key in f.metadata}
        kind = at_least(f.metadata["least"]) if "least" in f.metadata else f.metadata.get("type", kind)
        if f.metadata.get("positional"):
            parser.add_argument(f.name, type=kind, help=help_text.replace("%", "%%"))
            continue
        if several and f.metadata.get("repeat"):
            parser.add_argument(option, action="append", type=kind, default=list(default), help=help_text.replace(
                "%", "%%"), **extra)
            continue
        if several:
            extra.setdefault("nargs", "+")
        if "shown" in f.metadata:
            help_text = f"{help_text} (default: {f.metadata['shown']})".replace("%", "%%")
        elif default not in (None, (), "") and not extra.get("required"):
            shown = " ".join(map(str, default)) if several else default
            help_text = f"{help_text} (default: {shown})".replace("%", "%%")
        else:
            help_text = help_text.replace("%", "%%")
        parser.add_argument(option, type=kind, default=default, help=help_text, **extra)
    return parser


def from_namespace(config_class, namespace):
    """``config_class`` from parsed options (tuples for the fields that take several)."""
    values = {}
    for f in fields(config_class):
        value = getattr(namespace, f.name)
        values[f.name] = tuple(value) if isinstance(value, list) else value
    return config_class(**values)


def parse(config_class, description, argv=None):
    """Parse ``argv`` into ``config_class``: an invalid configuration (the dataclass's
    ``__post_init__`` raises a ValueError) is a usage error naming the option."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser, config_class)
    try:
        return from_namespace(config_class, parser.parse_args(argv))
    except ValueError as e:
        parser.error(str(e))
