"""SECURITY.md promises that every Python envsolver starts runs isolated (`-I`, or PYTHONSAFEPATH=1 where a variable
must reach it) from a private working directory, built by one helper, envsolver/core/pystart.py (issue 32: install's
`python -m pip` ran a `pip/` package from the caller's directory). This reads the source of every module, as
tests/test_no_shell.py does for shells, finds every place that starts a process, and fails on one that starts a
python whose command line core/pystart did not build, or that runs it in the caller's working directory.

How a place is found: a call of subprocess.Popen/run/call/check_*, os.exec*/spawn*/posix_spawn* (a primitive), or of
a function that hands one of its parameters to such a call as the command (a wrapper: core/procrun.run, the probe's
_run, slurm.run, ...), or of a parameter typed as a Runner. The command's first word is followed through the
function's assignments, the functions that return it (in the module or imported from envsolver) and list displays;
a python there (sys.executable, a name or attribute called python or py, python_of(...), PREFIX / "bin" / "python")
that no pystart call (or, in the standard-library files that run without envsolver, their copy of the rule) built is
a failure, and so is a pystart-built command started without a cwd (a wrapper passes its own). Separately, no list or
tuple display anywhere may begin with a python followed by its arguments: a command line built by hand, even one that
only reaches srun's argv or a message.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envsolver.cluster import slurm_launch
from envsolver.core import pystart
from envsolver.verify import gate, probe

PACKAGE = Path(__file__).resolve().parent.parent / "envsolver"
HELPER_MODULE = "core/pystart.py"
HELPERS = {"command", "keeping_environment"}  # pystart's functions that build a python's command line
# The standard-library files that run in the target environment, where envsolver cannot be imported, and the
# function holding each one's copy of the rule (tests below hold the copies equal to pystart's).
MIRRORS = {"verify/probe.py": "_python", "verify/gate.py": "_isolated", "cluster/slurm_launch.py": "_isolated"}
# Places that start a pystart-built python in the caller's working directory on purpose, and why.
CWD_KEPT = {
    "lock/worker_call.py:_start": "the rattler worker: a request names paths relative to the caller's directory; "
    "PYTHONSAFEPATH=1 and _BOOT keep that directory off its sys.path",
    "cluster/slurm_launch.py:main": "the launcher becomes torchrun for the user's job, which runs in the job's "
    "working directory",
    "cluster/slurm_launch.py:_run_deepspeed": "DeepSpeed's runner for the user's job, in the job's working directory",
}
PRIMITIVES = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output"},
    "os": {"execv", "execve", "execvp", "execvpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
           "posix_spawnp"},
}  # fmt: skip
EXEC_ARGS_SECOND = {"execv", "execve", "execvp", "execvpe", "posix_spawn", "posix_spawnp"}  # (path, argv, ...)
PYTHON_NAME = re.compile(r"(?:^|_)(?:py|python\d*|interpreter)$")  # python, py, env_python, python3
# What follows a python in a command line: a flag, arguments spliced in, or a script (a module constant such as
# PROBE, RUNNER, WORKER; a name that says it is one)
SCRIPT_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$|(?i:file|script|worker|launcher|runner|probe|gate)")
PYTHON_WORD = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")

HELPER, PARAM, OTHER = "helper", "param", "other"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> tuple[ast.Module, dict[ast.AST, ast.AST], tuple[ast.Call, ...]]:
    """A module's tree, each node's parent, and its calls: parsed once per source text (the mutations change one)."""
    tree = ast.parse(text)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return tree, parents, tuple(n for n in ast.walk(tree) if isinstance(n, ast.Call))


def looks_python(node: ast.expr) -> bool:
    """Whether NODE names a python interpreter as envsolver's code names one."""
    if isinstance(node, ast.Attribute):
        if node.attr == "executable" and isinstance(node.value, ast.Name) and node.value.id == "sys":
            return True
        return bool(PYTHON_NAME.search(node.attr))
    if isinstance(node, ast.Name):
        return bool(PYTHON_NAME.search(node.id))
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(PYTHON_WORD.fullmatch(node.value))
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("str", "Path", "fspath", "abspath", "realpath") and node.args:
            return looks_python(node.args[0])
        return bool(PYTHON_NAME.search(name)) or name == "python_of"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return looks_python(node.right)
    if isinstance(node, (ast.BoolOp, ast.IfExp)):
        parts = node.values if isinstance(node, ast.BoolOp) else [node.body, node.orelse]
        return any(looks_python(p) for p in parts)
    return False


@dataclass
class Site:
    """One place that starts a process: module:function, line, what its command's first word is."""

    where: str
    line: int
    heads: set[str] = field(default_factory=set)  # HELPER, PARAM:<name>, OTHER, or "python: <source>"
    cwd: bool = False


class Walker:
    """The process starts of a set of modules (relative path -> source)."""

    def __init__(self, sources: dict[str, str]) -> None:
        parsed = {path: _parsed(text) for path, text in sources.items()}
        self.trees = {path: tree for path, (tree, _, _) in parsed.items()}
        self.calls = {path: calls for path, (_, _, calls) in parsed.items()}
        self.functions: dict[tuple[str, str], ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        self.imports: dict[str, dict[str, tuple[str, str | None]]] = {}  # module -> local name -> (module, attr)
        for path, tree in self.trees.items():
            self.parents.update(parsed[path][1])
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions[(path, node.name)] = node
            self.imports[path] = self._imports(tree)
        self.wrappers: dict[tuple[str, str], tuple[int, bool]] = {}  # (module, function) -> (argv position, cwd)

    @staticmethod
    def _imports(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
        out: dict[str, tuple[str, str | None]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("envsolver"):
                base = node.module.removeprefix("envsolver").lstrip(".").replace(".", "/")
                for alias in node.names:
                    local = alias.asname or alias.name
                    module = f"{base}/{alias.name}.py".lstrip("/")
                    out[local] = (module, None) if module in _MODULES else (f"{base}.py", alias.name)
        return out

    # -- where a node is --------------------------------------------------------------------------------------
    def enclosing(self, node: ast.AST) -> list[ast.AST]:
        """The functions and lambdas around NODE, innermost first."""
        out = []
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                out.append(node)
        return out

    def where(self, module: str, node: ast.AST) -> str:
        named = [f.name for f in self.enclosing(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return f"{module}:{named[-1] if named else '<module>'}"

    # -- following a command's first word ---------------------------------------------------------------------
    def heads(self, module: str, expr: ast.expr, scope: list[ast.AST], depth: int = 0) -> set[str]:
        """What the first word of the command EXPR builds can be: HELPER, PARAM:name, OTHER or 'python: ...'."""
        if depth > 12:
            return {OTHER}
        if isinstance(expr, (ast.List, ast.Tuple)):
            if not expr.elts:
                return {OTHER}
            first = expr.elts[0]
            if isinstance(first, ast.Starred):
                return self.heads(module, first.value, scope, depth + 1)
            return {f"python: {ast.unparse(first)}"} if looks_python(first) else {OTHER}
        if isinstance(expr, ast.Call):
            return self._call_heads(module, expr, scope, depth)
        if isinstance(expr, ast.Name):
            return self._name_heads(module, expr.id, scope, depth)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self.heads(module, expr.left, scope, depth + 1)
        if isinstance(expr, ast.IfExp):
            return self.heads(module, expr.body, scope, depth + 1) | self.heads(module, expr.orelse, scope, depth + 1)
        return {f"python: {ast.unparse(expr)}"} if looks_python(expr) else {OTHER}

    def _is_helper(self, module: str, func: ast.expr) -> bool:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = self.imports[module].get(func.value.id)
            return target == (HELPER_MODULE, None) and func.attr in HELPERS
        if isinstance(func, ast.Name):
            if MIRRORS.get(module) == func.id:
                return True
            return self.imports[module].get(func.id, ("", None))[0] == HELPER_MODULE and func.id in HELPERS
        return False

    def resolve(self, module: str, func: ast.expr) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The envsolver function a call's FUNC names, when it can be found."""
        if isinstance(func, ast.Name):
            if (module, func.id) in self.functions:
                return module, self.functions[(module, func.id)]
            target = self.imports[module].get(func.id)
            if target and target[1] and (target[0], target[1]) in self.functions:
                return target[0], self.functions[(target[0], target[1])]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = self.imports[module].get(func.value.id)
            if target and target[1] is None and (target[0], func.attr) in self.functions:
                return target[0], self.functions[(target[0], func.attr)]
        return None

    def _call_heads(self, module: str, call: ast.Call, scope: list[ast.AST], depth: int) -> set[str]:
        if self._is_helper(module, call.func):
            return {HELPER}
        if isinstance(call.func, ast.Name) and call.func.id in ("list", "tuple") and call.args:
            return self.heads(module, call.args[0], scope, depth + 1)
        found = self.resolve(module, call.func)
        if found is None:
            return {OTHER}
        where, function = found
        out: set[str] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None and self.enclosing(node)[0] is function:
                value = node.value
                if isinstance(value, ast.Tuple) and value.elts and isinstance(self.parents.get(call), ast.Assign):
                    value = value.elts[0]  # `argv, env = f()`: the command is the first
                out |= self.heads(where, value, [function], depth + 1)
        # a parameter of the callee is the caller's argument
        return {h for h in out if not h.startswith(PARAM)} | (
            self._argument_heads(module, call, function, out, scope, depth)
        )

    def _argument_heads(
        self,
        module: str,
        call: ast.Call,
        function: ast.FunctionDef | ast.AsyncFunctionDef,
        heads: set[str],
        scope: list[ast.AST],
        depth: int,
    ) -> set[str]:
        names = [a.arg for a in function.args.args]
        out: set[str] = set()
        for head in heads:
            if head.startswith(PARAM) and head[len(PARAM) + 1 :] in names:
                index = names.index(head[len(PARAM) + 1 :])
                if index < len(call.args):
                    out |= self.heads(module, call.args[index], scope, depth + 1)
        return out

    def _name_heads(self, module: str, name: str, scope: list[ast.AST], depth: int) -> set[str]:
        for function in scope:
            values = list(self._assigned(function, name))
            if values:
                out: set[str] = set()
                for value in values:
                    out |= self.heads(module, value, scope, depth + 1) if value is not None else {HELPER}
                return out
            params = [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]
            if name in params:
                return {f"{PARAM}:{name}"}
        return {f"python: {name}"} if PYTHON_NAME.search(name) else {OTHER}

    def _assigned(self, function: ast.AST, name: str) -> Iterator[ast.expr | None]:
        """The values assigned to NAME in FUNCTION (None: the first of a tuple a pystart helper returned)."""
        for node in ast.walk(function):
            if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == name:
                        yield node.value
                    if isinstance(target, ast.Tuple) and any(
                        isinstance(e, ast.Name) and e.id == name for e in target.elts
                    ):
                        yield node.value  # `argv, env = ...`: _call_heads takes the first of a returned tuple
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                yield from [node.value] if node.target.id == name and node.value is not None else []

    # -- the places ---------------------------------------------------------------------------------------------
    def _primitive(self, call: ast.Call) -> ast.expr | None:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            names = PRIMITIVES.get(func.value.id, set())
            if func.attr in names:
                index = 1 if func.attr in EXEC_ARGS_SECOND else 0
                if len(call.args) > index:
                    return call.args[index]
                return next((k.value for k in call.keywords if k.arg == "args"), None)
        return None

    def _runner_param(self, module: str, call: ast.Call, scope: list[ast.AST]) -> bool | None:
        """Whether CALL calls a parameter typed Runner (None: it does not), and whether that runner gives its child a
        private cwd (core/procrun's does)."""
        if not isinstance(call.func, ast.Name):
            return None
        for function in scope:
            if isinstance(function, ast.Lambda):
                continue
            assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for arg in (*function.args.args, *function.args.kwonlyargs):
                if arg.arg == call.func.id and arg.annotation is not None and "Runner" in ast.unparse(arg.annotation):
                    return self.imports[module].get("Runner", ("", None))[0] == "core/procrun.py"
        return None

    def sites(self) -> list[Site]:
        """Every place that starts a process, wrappers found first (to a fixed point)."""
        found: dict[tuple[str, int], Site] = {}
        for _ in range(8):
            before = dict(self.wrappers)
            found = {}
            for module, calls in self.calls.items():
                for call in calls:
                    self._visit(module, call, found)
            if self.wrappers == before:
                break
        return sorted(found.values(), key=lambda s: (s.where, s.line))

    def _visit(self, module: str, call: ast.Call, found: dict[tuple[str, int], Site]) -> None:
        scope = self.enclosing(call)
        argv = self._primitive(call)
        cwd = any(k.arg == "cwd" for k in call.keywords)
        if argv is None:
            target = self.resolve(module, call.func)
            if target is not None and (target[0], target[1].name) in self.wrappers:
                index, cwd = self.wrappers[(target[0], target[1].name)]
                argv = call.args[index] if index < len(call.args) else None
            else:
                given = self._runner_param(module, call, scope)
                if given is None or not call.args:
                    return
                argv, cwd = call.args[0], given
        if argv is None:
            return
        heads = self.heads(module, argv, scope)
        params = [h for h in heads if h.startswith(PARAM)]
        named = next((f for f in scope if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if params and named is not None:
            names = [a.arg for a in named.args.args]
            for head in params:
                if head[len(PARAM) + 1 :] in names:
                    key = (module, named.name)
                    self.wrappers[key] = (names.index(head[len(PARAM) + 1 :]), cwd)
            return
        found[(module, call.lineno)] = Site(self.where(module, call), call.lineno, heads, cwd)


_MODULES = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}


def hand_built(sources: dict[str, str]) -> list[str]:
    """List and tuple displays that begin with a python and its arguments, outside pystart and its copies."""
    out = []
    for module, text in sources.items():
        if module == HELPER_MODULE:
            continue
        tree = _parsed(text)[0]
        mirror = MIRRORS.get(module)
        skip: set[ast.AST] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == mirror:
                skip |= set(ast.walk(node))
        for node in ast.walk(tree):
            if node in skip or not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
                continue
            first, rest = node.elts[0], node.elts[1:]
            if isinstance(first, ast.Starred) or not looks_python(first) or not any(map(_an_argument, rest)):
                continue
            out.append(f"{module}:{node.lineno}: {ast.unparse(node)[:80]}")
    return out


def _an_argument(node: ast.expr) -> bool:
    """Whether NODE reads as what follows a python in its command line (SCRIPT_NAME)."""
    if isinstance(node, ast.Starred):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith("-")
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and isinstance(node.values[0], ast.Constant) and str(node.values[0].value)[:1] == "-"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return _an_argument(node.args[0])
    if isinstance(node, (ast.Name, ast.Attribute)):
        return bool(SCRIPT_NAME.search(node.id if isinstance(node, ast.Name) else node.attr))
    if isinstance(node, ast.BoolOp):
        return any(map(_an_argument, node.values))
    return False


def problems(sources: dict[str, str]) -> list[str]:
    """Every process start that runs a python pystart did not build, or in the caller's directory; every command
    line that begins with a python built by hand."""
    out = []
    for site in Walker(sources).sites():
        bad = sorted(h for h in site.heads if h.startswith("python:"))
        if bad:
            out.append(f"{site.where} (line {site.line}) starts a python without core/pystart: {bad[0][8:]}")
        elif HELPER in site.heads and not site.cwd and site.where not in CWD_KEPT:
            out.append(f"{site.where} (line {site.line}) starts a python in the caller's working directory")
    return out + [f"{p}: a python's command line built by hand" for p in hand_built(sources)]


# --- the tests --------------------------------------------------------------------------------------------------


def test_every_python_envsolver_starts_is_isolated_and_in_a_private_directory() -> None:
    assert problems(_sources()) == []


def test_the_walk_finds_the_places_that_start_a_python() -> None:
    """Not a vacuous pass: the places the audit named (and the others) are found, each with pystart's command."""
    started = {s.where for s in Walker(_sources()).sites() if HELPER in s.heads}
    expected = {
        "install/pypi.py:install",  # python -m pip install, in the staging directory
        "install/shadowing.py:remove",  # python -m pip uninstall
        "verify/run.py:probe",  # verify's probe
        "verify/probe.py:_start",  # the probe's torch and DeepSpeed children
        "verify/probe.py:_gpu_test",  # the probe's GPU test (op_runner.py adam-check)
        "verify/nccl_run.py:processes",  # verify --nccl's GPU count
        "verify/nccl_run.py:run_local",  # torchrun
        "verify/gate.py:probe",  # the job's gate runs the probe
        "hook/build.py:build_ops",  # the hook's op runner
        "hook/build.py:prove",
        "hook/ops.py:read_key_facts",
        "lock/worker_call.py:_start",  # the rattler worker
        "cluster/slurm_launch.py:main",  # torchrun / DeepSpeed's runner on a node
    }
    assert expected <= started, sorted(expected - started)


def _mutated(module: str, old: str, new: str) -> dict[str, str]:
    sources = _sources()
    assert old in sources[module], f"{module} no longer holds {old!r}: update this mutation"
    return {**sources, module: sources[module].replace(old, new, 1)}


MUTATIONS = [
    pytest.param(
        "install/pypi.py", 'return pystart.command(\n        python, "-m", "pip",',
        'return list((\n        python, "-m", "pip",',
        "install/pypi.py:install", id="pip-without-pystart",
    ),
    pytest.param(
        "verify/nccl_run.py", 'pystart.command(python, "-c", COUNT_GPUS)', '[str(python), "-c", COUNT_GPUS]',
        "verify/nccl_run.py:processes", id="gpu-count-by-hand",
    ),
    pytest.param(
        "hook/ops.py", 'pystart.command(python, str(RUNNER), "key")', '[str(python), str(RUNNER), "key"]',
        "hook/ops.py:read_key_facts", id="op-runner-by-hand",
    ),
    pytest.param(
        "verify/run.py", "env=env, cwd=where)", "env=env)", "verify/run.py:probe", id="probe-in-the-callers-directory",
    ),
    pytest.param(
        "verify/probe.py", "[*_python(), \"-c\", code, *args]", "[sys.executable, \"-c\", code, *args]",
        "verify/probe.py:_start", id="probe-child-by-hand",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("module", "old", "new", "named"), MUTATIONS)
def test_a_call_site_that_drops_the_helper_fails(module: str, old: str, new: str, named: str) -> None:
    if "list((" in new:  # the call's closing parenthesis: list((python, ...)) is a tuple display
        sources = _mutated(module, old, new)
        sources[module] = sources[module].replace(
            '"-r", str(requirements),\n    )  # fmt: skip', '"-r", str(requirements),\n    ))  # fmt: skip', 1
        )
    else:
        sources = _mutated(module, old, new)
    found = problems(sources)
    assert any(named in p for p in found), found


def test_the_checker_finds_what_it_looks_for() -> None:
    bad = (
        "import subprocess, sys\n"
        "def count(python):\n"
        "    return subprocess.run([str(python), '-c', 'print(1)'], cwd='/tmp')\n"
        "def mine():\n"
        "    argv = [sys.executable, '-m', 'pip']\n"
        "    subprocess.Popen(argv)\n"
        "def names():\n"
        "    return ('python3', 'python')\n"
    )
    found = problems({**_sources(), "x.py": bad})
    assert any(p.startswith("x.py:count (line 3) starts a python without core/pystart") for p in found), found
    assert any(p.startswith("x.py:mine (line 6) starts a python without core/pystart") for p in found), found
    assert not any("x.py:8" in p for p in found), found


def test_the_copies_of_the_rule_are_pystarts() -> None:
    """probe.py, gate.py and slurm_launch.py run where envsolver cannot be imported: their copies of the rule are
    held equal to core/pystart's here."""
    assert probe.FLAGS == gate.FLAGS == slurm_launch.FLAGS == pystart.FLAGS == ("-I",)
    assert probe.SAFE_PATH == pystart.SAFE_PATH == ("PYTHONSAFEPATH", "1")
    assert gate._isolated("/p/python", "x") == pystart.command("/p/python", "x")
    assert slurm_launch._isolated("/p/python", "x") == pystart.command("/p/python", "x")


def test_pystart_builds_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert pystart.command("env/bin/python", "-m", "pip") == [str(tmp_path / "env/bin/python"), "-I", "-m", "pip"]
    assert pystart.command("python3", "-c", "1") == ["python3", "-I", "-c", "1"]
    argv, env = pystart.keeping_environment("/p/python", {"PYTHONPATH": "/x"}, "probe.py")
    assert argv == ["/p/python", "probe.py"] and env == {"PYTHONPATH": "/x", "PYTHONSAFEPATH": "1"}
    with pystart.workdir() as where:
        assert where.is_dir() and (where.stat().st_mode & 0o777) == 0o700 and not list(where.iterdir())
    assert not where.exists()
