"""A fork server for the console scripts and the scripts/*.py the tests run
(tests/_harness/commands.py: run_cli, run_script).

Every fairseq CLI process spends about 5.5 s of a 2-core machine importing torch and
fairseq (fairseq imports all its tasks, models and criterions, and through two of them
scikit-learn and SciPy) before it does any work, and the suite starts about 150 of them,
and about 35 runs of the experiment scripts, which import the same. This server imports
them once and forks a child per call. The child is the process a fresh start would be
from that point on: it takes the caller's working directory, environment, argv and
output files, runs the console script's entry point (or, for `python SCRIPT.py ...` and
`python -m MODULE ...`, the script or module as __main__), and exits as the
interpreter's own shutdown would (non-daemon threads joined, atexit handlers run, stdout
and stderr flushed; only the module teardown after them is skipped, see finish()), with
the exit status a fresh process would have. The commands a script starts (fairseq-train,
...) are forked the same way, from a copy of the script's child made before the script
runs (fork_commands_here).

What a child inherits that a fresh process would not have is only the state those
imports leave (see serve(); their objects frozen out of the garbage collector's reach,
freeze_heap()), two speed-ups of hydra's composition of a command's configuration
(remember_parsed_overrides, share_the_config_store: the same configuration, sooner) and,
under Triton's interpreter, the tests' speed-ups of it (triton_interpreter.py: the same
outputs, sooner), with one correction: importing
fairseq configures the root logger (several of its task and model modules call
logging.basicConfig), and a fresh process does that at its first import of fairseq,
which fairseq-train reaches after its own basicConfig and fairseq-generate before. So
the child starts with the root logger unconfigured and replays fairseq's configuration
at its own first `import fairseq...` (replay_fairseq_logging), and each CLI logs as it
would from a fresh start. fairseq_cli and the plugin are imported in the child, as a
fresh process imports them.

It relies on CPython 3.11's ``subprocess.Popen._execute_child`` and on how fairseq 0.12
configures logging at import (``WRITTEN_FOR``); ``supported()`` says whether this is that
environment, and elsewhere the tests start every command fresh. The hydra speed-ups rely on
hydra-core 1.3's internals and are left out under another release.

Protocol (one call at a time, JSON lines): the caller writes
{"argv", "cwd", "env", "stdout", "stderr"} on stdin; the server answers {"pid": ...}
when the child is forked and {"returncode": ...} when it has exited.

The shell pipelines the tests run (data_prep/*.sh) start the project's Python through
$PYTHON; the tests point it at python_client.py, which asks this server, on the Unix socket
named by its first argument, for a child that runs its arguments (serve_client). The client
hands over its own stdin, stdout and stderr, waits for the child's status and exits with it.
What the server cannot run as that Python would, it answers with "exec", and the client
executes the interpreter itself.
"""

import builtins
import functools
import gc
import inspect
import json
import logging
import os
import runpy
import select
import socket
import sys
import types

# The environment this server was written and checked against.
WRITTEN_FOR = {"python": (3, 11), "fairseq": ("0.12.2", "0.12.3"), "hydra-core": "1.3."}


def installed_version(*distributions):
    """The version of the first of `distributions` that is installed, or None."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in distributions:
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return None


def supported():
    """(whether the server applies here, why not): Linux, CPython WRITTEN_FOR["python"] and
    one of the fairseq releases of WRITTEN_FOR["fairseq"]."""
    if not sys.platform.startswith("linux"):
        return False, f"written for Linux (fork, prctl), not {sys.platform}"
    if sys.version_info[:2] != WRITTEN_FOR["python"] or sys.implementation.name != "cpython":
        return False, f"written for CPython {'.'.join(map(str, WRITTEN_FOR['python']))}, not {sys.version.split()[0]}"
    installed = installed_version("ve-fairseq", "fairseq")
    if installed is None:
        return False, "fairseq is not installed"
    if installed not in WRITTEN_FOR["fairseq"]:
        return False, f"written for fairseq {' and '.join(WRITTEN_FOR['fairseq'])}, not {installed}"
    return True, None


def replay_fairseq_logging(handlers, root_level):
    """Unconfigure the root logger and give it back `handlers` and `root_level` (what
    importing fairseq left on it in the server) at the child's first import of fairseq or
    one of its modules, unless something configured it before then: what basicConfig does
    when a fresh process imports fairseq."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    real_import = builtins.__import__

    def first_fairseq_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "fairseq" or name.startswith("fairseq.")):
            builtins.__import__ = real_import
            if not root.handlers:
                for handler in handlers:
                    root.addHandler(handler)
                root.setLevel(root_level)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = first_fairseq_import


def run_child(argv, cwd, env, stdio, root_logging):
    """In a child forked from the server: become the command on `stdio` and never return."""
    replay_fairseq_logging(*root_logging)
    become(argv, cwd, env, stdio, root_logging)


def output_files(request):
    """A caller's request's stdio: nothing to read, its stdout and stderr files."""
    return (os.open(os.devnull, os.O_RDONLY),
            os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
            os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def become(argv, cwd, env, stdio, root_logging):
    """Take `stdio` (three fds, closed here) as fds 0, 1 and 2, `cwd` and `env`, and run
    `argv` as a fresh process would; never return."""
    os.chdir(cwd)
    threads = env.get("OMP_NUM_THREADS")
    if threads != os.environ.get("OMP_NUM_THREADS") and threads and threads.isdigit():
        # A fresh torch reads this at start; here torch is already loaded.
        import torch

        torch.set_num_threads(int(threads))
    os.environ.clear()
    os.environ.update(env)
    for fd, target in zip(stdio, (0, 1, 2)):
        os.dup2(fd, target)
    for fd in set(stdio) - {0, 1, 2}:
        os.close(fd)
    try:
        run_main(argv, root_logging)
        status = 0
    except SystemExit as exit:
        status = exit_status(exit.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # as the interpreter reports an uncaught exception
        status = 1
    finish(status)


def run_main(argv, root_logging):
    """Run `argv` in this process as a fresh interpreter runs it, up to its SystemExit."""
    if argv[0] == sys.executable and argv[1] == "-m":  # `python -m MODULE ARGS` (scripts/ape_experiment.py)
        sys.argv = list(argv[2:])
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        return
    if argv[0] == sys.executable and argv[1] == "-c":  # `python -c CODE ARGS` (data_prep/mnist.sh)
        sys.argv = ["-c", *argv[3:]]
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        exec(compile(argv[2], "<string>", "exec"), vars(main))
        return
    if argv[0] == sys.executable:  # `python SCRIPT.py ARGS`, as the interpreter runs it
        sys.argv = list(argv[1:])
        sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
        # The commands the script starts are forked as well (fork_commands_here).
        fork_commands_here(root_logging)
        runpy.run_path(argv[1], run_name="__main__")
        return
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(argv[0])  # where a console script's own sys.path starts
    sys.exit(console_script(os.path.basename(argv[0])).load()())  # as the console-script wrapper does


def exit_status(code):
    """The status the interpreter exits with on an uncaught SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def finish(status):
    """Exit with `status` as the interpreter's own shutdown would, but for its last part.

    The interpreter first waits for non-daemon threads, runs the atexit handlers (logging's
    flush, fairseq's tensorboard writers, tempfile's and multiprocessing's clean-ups) and
    flushes stdout and stderr; that is done here. It then tears down every module and
    collects what they held, which takes 2.5 to 3 s after these imports on 2 cores (most
    of a short fairseq-train call) and can be seen only through the __del__ of objects
    still alive at exit: that part is skipped (os._exit)."""
    import atexit
    import threading

    threading._shutdown()
    leave_libraries_registered()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except OSError:
            status = 120  # what the interpreter exits with when it cannot flush them
    os._exit(status)


def leave_libraries_registered():
    """Skip torch.library's exit finalizers, which take every operator registration of every
    torch.library.Library out of torch's dispatcher one by one (torch registers thousands of
    its own at import): the process ends next, and a dispatcher table is seen by nothing
    after it, as with the module teardown that os._exit skips."""
    import weakref

    try:
        from torch.library import _del_library
    except ImportError:  # torch not imported, or a torch without it: nothing to skip
        return
    for finalizer, info in list(weakref.finalize._registry.items()):
        if info.func is _del_library:
            finalizer.atexit = False


def freeze_heap():
    """Before a fork: move every object this process tracks out of reach of the garbage
    collector (gc.freeze, as Python's documentation advises for fork without exec). A child
    inherits the imports' hundreds of thousands of objects; its first full collection would walk
    them all, writing to each one's header, and so copy nearly every page of the parent's
    heap into itself. The child's own objects are collected as in a fresh process."""
    gc.freeze()


def fork():
    """os.fork() from the server or the zygote, after flushing stdout and stderr (what they
    buffer would otherwise be written by both processes) and freezing the heap."""
    sys.stdout.flush()
    sys.stderr.flush()
    freeze_heap()
    return os.fork()


def speed_up_hydra():
    """The two hydra speed-ups below, under the hydra-core release they were checked against
    (WRITTEN_FOR); under another, children compose their configurations as fresh processes do."""
    if (installed_version("hydra-core") or "").startswith(WRITTEN_FOR["hydra-core"]):
        # hydra's first composition scans its core plugins by executing their modules again
        # (hydra.core.plugins), which defines StructuredConfigSource anew: the scan comes
        # first, so that the class patched is the one every later composition uses.
        from hydra.core.plugins import Plugins

        Plugins.instance()
        share_the_config_store()
        remember_parsed_overrides()


def remember_parsed_overrides():
    """Make hydra's override parser remember what it parsed, and parse a default fairseq-train
    configuration's overrides here, once, for every child.

    fairseq hands hydra one override per option of every configuration group
    ("common.log_interval=100", ...: hundreds a command, nearly all at their defaults and
    the same in every command), and hydra parses each with its ANTLR grammar, a sizeable part
    of a short command (docs/notes/stack.md). The result of a parse depends on the string and
    the rule alone, and hydra reads the Override it returns without changing it; a child holds
    its own copy of the table (fork), so what one child parses is seen by no other. A string
    that does not parse is not remembered: it raises as before."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parse_rule = OverridesParser.parse_rule
    parsed = {}

    @functools.wraps(parse_rule)
    def remembered(self, s, rule_name):
        key = (s, rule_name)
        if key not in parsed:
            parsed[key] = parse_rule(self, s, rule_name)
        return parsed[key]

    OverridesParser.parse_rule = remembered
    import warnings

    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    # Ignored rather than shown, so that no warning is marked as already shown in the children,
    # which warn as a fresh process does (hydra's about its version_base, for one).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = options.parse_args_and_arch(options.get_training_parser(), [os.devnull, "--arch", "transformer"])
        convert_namespace_to_omegaconf(args)


def share_the_config_store():
    """Let hydra's copy of its config repository, made for every composition, share the
    ConfigStore instead of copying it whole (every fairseq and plugin configuration, for each
    fairseq command). The copy exists so that composing does not change the repository's list
    of sources; the store is only read through it, and each configuration it hands out is a
    deep copy of its own (ConfigStore.load), so sharing it changes no result."""
    import copy

    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource

    def deepcopy_sharing_the_store(self, memo):
        clone = copy.copy(self)
        memo[id(self)] = clone
        for name, value in vars(self).items():
            if name != "store":
                setattr(clone, name, copy.deepcopy(value, memo))
        return clone

    StructuredConfigSource.__deepcopy__ = deepcopy_sharing_the_store


@functools.lru_cache(maxsize=None)
def console_script(name):
    """This environment's console script `name` (an entry point), or None."""
    from importlib.metadata import entry_points

    found = entry_points(group="console_scripts", name=name)
    return next(iter(found)) if found else None


def runs_as_fresh(argv, cwd):
    """Whether run_main() runs `argv`, started in `cwd`, as a fresh process would: this
    environment's console scripts, `python -m MODULE`, `python -c CODE` and `python
    SCRIPT.py` with the script there (a missing one gets the interpreter's own error)."""
    if not argv:
        return False
    if argv[0] == sys.executable:
        if len(argv) >= 3 and argv[1] in ("-m", "-c"):
            return True
        return len(argv) >= 2 and argv[1].endswith(".py") and os.path.isfile(os.path.join(cwd, argv[1]))
    return (os.path.dirname(argv[0]) == os.path.dirname(sys.executable)
            and console_script(os.path.basename(argv[0])) is not None)


def differs(env, base_env, free=frozenset()):
    """Whether `env` differs from `base_env` in a variable other than those ignored() names
    and those in `free`."""
    return any(env.get(name) != base_env.get(name) and name not in free and not ignored(name)
               for name in set(env) | set(base_env))


def forkable(argv, executable, env, base_env):
    """Whether Popen(argv, executable=executable, env=env) can be forked rather than
    executed: a command runs_as_fresh() accepts, in `base_env` (the calling script's, which
    run_cli checked is the one the server imported under) but for the variables ignored()
    names."""
    return (bool(argv) and executable in (None, argv[0]) and runs_as_fresh(argv, os.getcwd())
            and not differs(env, base_env))


def ignored(variable):
    """Whether forkable() lets a command's environment differ from its script's in
    `variable`: the thread count, which become() sets, and glibc's malloc tunables (the
    experiment scripts set them, fairseq_sparse.experiments.job_env), which a process reads at
    its start, so that a forked child keeps the server's: they change how fast it runs,
    not what it computes."""
    return variable in ("PYTEST_CURRENT_TEST", "OMP_NUM_THREADS") or variable.startswith("MALLOC_")


def fork_commands_here(root_logging):
    """Before a script runs: fork a zygote, a copy of this process as it is now, and make
    subprocess.Popen ask it for a copy of itself for every command forkable() accepts
    (the experiment scripts' fairseq-train, fairseq-generate, ...), which then runs the
    command as run_child does. The copy is the zygote's grandchild, its parent exits at
    once, and this process is the subreaper of its descendants (prctl), so the copy
    becomes this process's child: Popen waits for it, polls it and kills it as it would a
    process it had executed itself. Anything else is executed as usual."""
    import ctypes
    import subprocess
    import threading

    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return  # not Linux: the scripts' commands are executed
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        ours.close()
        zygote(theirs, root_logging)
    theirs.close()
    execute = subprocess.Popen._execute_child
    lock = threading.Lock()
    base_env = dict(os.environ)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       restore_signals, gid, gids, uid, umask, start_new_session, process_group):
        argv = [os.fsdecode(a) for a in args] if isinstance(args, (list, tuple)) else None
        child_env = {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
        plain = not (shell or preexec_fn or pass_fds or start_new_session or process_group != -1
                     or gid is not None or gids is not None or uid is not None or umask >= 0)
        if not (plain and forkable(argv, None if executable is None else os.fsdecode(executable), child_env,
                                     base_env)):
            return execute(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                           creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                           restore_signals, gid, gids, uid, umask, start_new_session, process_group)
        request = {"argv": argv, "cwd": os.fsdecode(cwd) if cwd is not None else os.getcwd(), "env": child_env}
        stdio = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                 errwrite if errwrite != -1 else 2]
        with lock:
            socket.send_fds(ours, [json.dumps(request).encode()], stdio)
            self.pid = json.loads(ours.recv(4096))["pid"]
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    subprocess.Popen._execute_child = _execute_child


def zygote(sock, root_logging):
    """fork_commands_here's zygote: for each request (argv, cwd, env, and the three stdio
    fds), fork, fork again in the child and exit it, answer the grandchild's pid once it is
    an orphan (so its caller, the subreaper, may wait for it), and exit when the caller has
    closed its end. The grandchild becomes the command (become())."""
    while True:
        message, stdio, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        if not message:
            os._exit(0)
        request = json.loads(message)
        read_pid, write_pid = os.pipe()
        middle = fork()
        if middle == 0:
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.close(read_pid)
                os.close(write_pid)
                become(request["argv"], request["cwd"], request["env"], stdio, root_logging)
            os.write(write_pid, str(pid).encode())
            os._exit(0)
        os.close(write_pid)
        os.waitpid(middle, 0)  # the grandchild has been handed to the subreaper
        pid = int(os.read(read_pid, 64))
        os.close(read_pid)
        for fd in set(stdio):
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())


# Variables that libraries set in the test process itself, which no import reads (a child
# gets them, as would a fresh process started from there): pytest's name of the running test;
# inductor's cache directory, which it exports at its first use (its default unless set); the
# address of one of torch's functions in that process, which inductor exports for the kernels
# it loads; the tokenizers' parallelism, which transformers settles at use.
SET_IN_THE_TEST_PROCESS = frozenset({"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR",
                                     "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "TOKENIZERS_PARALLELISM"})

# Where a pipeline's environment may differ from the one the server imported under: PATH
# (the tests run the pipelines as a user would, outside the virtual environment), what bash
# sets for itself, the client's own variables and those ignored() names. The variables a
# test names in PIPELINE_INPUTS (the pipeline's inputs: MIRROR, VERIFY, ...) may differ too.
PIPELINE_INPUTS = "FAIRSEQ_SPARSE_TESTS_PIPELINE_INPUTS"
PIPELINE_VARIABLES = {"PATH", "PWD", "OLDPWD", "SHLVL", "_", "PYTHON", "FAIRSEQ_SPARSE_TESTS_FORK_SOCKET",
                      PIPELINE_INPUTS}


def serve_client(listener, base_env, root_logging, closing):
    """Accept one python_client.py and run its request: fork a waiter, which forks the child
    (the command, on the client's stdio), tells the client its pid, waits for it and sends its
    status. The server goes back to its callers at once: a pipeline may run several clients
    at a time (`python a.py | python b.py`). It declines (the client executes Python) a
    command that runs_as_fresh() does not accept, or an environment that differs from
    `base_env` (the server's) in more than PIPELINE_VARIABLES, SET_IN_THE_TEST_PROCESS and
    the variables the client's PIPELINE_INPUTS names. Returns the waiter's pid, or None."""
    conn, _ = listener.accept()
    fds = []
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        argv, cwd, env = [sys.executable, *request["argv"]], request["cwd"], request["env"]
        free = PIPELINE_VARIABLES | SET_IN_THE_TEST_PROCESS | set(env.get(PIPELINE_INPUTS, "").split(","))
        if len(fds) != 3 or not runs_as_fresh(argv, cwd) or differs(env, base_env, free):
            conn.send(json.dumps({"exec": True}).encode())
            return None
        waiter = fork()
        if waiter == 0:
            for f in closing:
                f.close()
            pid = os.fork()
            if pid == 0:
                conn.close()
                run_child(argv, cwd, env, fds, root_logging)
            for fd in set(fds):
                os.close(fd)
            try:
                conn.send(json.dumps({"pid": pid}).encode())
                _, status = os.waitpid(pid, 0)
                conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            finally:
                os._exit(0)
        return waiter
    finally:
        for fd in set(fds):
            os.close(fd)
        conn.close()


def serve():
    # The environment the server was started in (its caller's), before its imports add
    # their own variables (torch's KMP_*, ...), which a fresh process's imports add as well.
    base_env = dict(os.environ)
    # The pipelines' clients (python_client.py) connect on the socket the caller names. It is
    # listening from here on: a client that comes during the imports waits for its answer.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sys.argv[1])
    listener.listen(16)
    # What a fairseq CLI spends most of its start on: torch, fairseq with everything it
    # imports (its tasks, models and criterions; SciPy and scikit-learn through two of
    # them), torch's compiler stack (the first optimiser step imports it) and the parts of
    # transformers the APE models use. None of them prints anything.
    import bitarray  # noqa: F401
    import numpy  # noqa: F401
    import sacrebleu  # noqa: F401
    import tensorboardX  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import tqdm  # noqa: F401
    import yaml  # noqa: F401

    import fairseq  # noqa: F401

    root = logging.getLogger()
    root_logging = (list(root.handlers), root.level)  # what importing fairseq configured
    from transformers import AutoTokenizer, BertConfig, BertModel, BertTokenizer  # noqa: F401

    # What the experiment scripts and the latent line's data import besides: pyplot (its
    # backend is chosen at the first figure, in the child, from the same environment) and
    # scikit-learn's datasets (the digits).
    import matplotlib.pyplot  # noqa: F401
    import sklearn.datasets  # noqa: F401

    # inspect.getmodule() maps every loaded module's file to the module, anew for each module
    # it has not seen; torch.library does it for each operator the plugin registers (the
    # first time: a realpath for each of the thousands of modules loaded). Seen here once,
    # each child maps only the modules it imports itself.
    inspect.getmodule(sys._getframe(), _filename=os.devnull)

    if os.environ.get("TRITON_INTERPRET") == "1":
        # The children run the Triton kernels as the test processes do, with the tests'
        # speed-ups of the interpreter (the same outputs; this folder's triton_interpreter.py).
        import triton_interpreter

        triton_interpreter.apply()

    # The protocol keeps its own copies of the pipes; fds 0 and 1 (what sys.stdin and
    # sys.stdout wrap) are pointed elsewhere, so a child never sees the protocol.
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    speed_up_hydra()  # after the protocol's fds are set aside: its warm-up may log
    waiters, pending = set(), b""
    while True:
        ready = select.select([requests, listener], [], [])[0]
        if listener in ready:
            try:
                waiter = serve_client(listener, base_env, root_logging, (requests, answers, listener))
            except (OSError, ValueError):  # a client that left before its request was read whole
                waiter = None
            if waiter is not None:
                waiters.add(waiter)
        waiters -= {pid for pid in waiters if os.waitpid(pid, os.WNOHANG)[0]}
        if requests not in ready:
            continue
        chunk = os.read(requests.fileno(), 1 << 16)
        if not chunk:
            return  # the caller has gone
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = fork()
            if pid == 0:
                requests.close()
                answers.close()
                listener.close()
                run_child(request["argv"], request["cwd"], request["env"], output_files(request), root_logging)
            answers.write(json.dumps({"pid": pid}) + "\n")
            _, status = os.waitpid(pid, 0)
            answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()
