#!/usr/bin/env python3
"""Mutation testing where the decisions are made: plant one small bug at a time and see whether the tests notice.

    python scripts/mutate.py [GROUP ...] [-j 2] [--json] [--only TEXT] [--rerun RESULT.json] [--list]

GROUP is resolve, writers, checks or versions (all four by default; GROUPS below names each one's files and
tests). Each mutant changes one node of one file (ast, then ast.unparse):
  compare      a comparison flipped: < to >=, == to !=, in to not in, is to is not (and back)
  boundary     a comparison's boundary moved: < to <=, > to >= (and back)
  constant     an integer constant n to n + 1 and n - 1
  boolop       and to or, or to and
  negate       an if / while / conditional-expression / comprehension condition negated (except a single
               comparison, which `compare` already flips)
  return-none  `return X` to `return None`
  delete       a statement in a function body (call, assignment, raise, assert, break, continue) to `pass`
Docstrings, annotations, decorators and imports are left alone.

Each mutant runs the group's tests only (`pytest -x`): first the tests that ran its line in the baseline run
(traced), then, if they pass, the rest, so that a survivor is a mutant no test of the group kills. Runs happen
in a copy of the checkout per worker (-j), first on PYTHONPATH so that subprocesses the tests start import the
mutated code too, forked from a python that imported pytest and the slow libraries once, with a timeout (a
mutant that loops is killed; a timeout is tried once more at twice the limit), PYTHONHASHSEED=0, hypothesis's
seed 0 and no hypothesis deadline (timing is not behaviour). A failing test or a timeout kills the mutant.
scripts/mutate-equivalent.txt lists the equivalent mutants (no test can tell them apart from the code), each
with the reason; they are left out of the score, still run, and reported if a test kills one after all.

Output: per group the score (killed / mutants not excluded) and the survivors as file:line, function and the
mutation; --json for the same as JSON. Exit 0 when every group scores at least --min-score (90) and no public
function's `return None` mutant survives; 1 otherwise; 2 when a group's tests fail on the unmutated code.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import gc
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXCLUSIONS = ROOT / "scripts" / "mutate-equivalent.txt"
PYTEST = ("-p", "no:cacheprovider", "-x", "-q", "--no-header", "-p", "no:randomly")
COPY_IGNORE = (".git", ".venv", "venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis")


@dataclass(frozen=True)
class Group:
    name: str
    files: tuple[str, ...]  # globs, relative to the root
    tests: tuple[str, ...]  # pytest arguments: files or node ids, the fastest and most telling first
    pytest_args: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()  # slow imports of the tests, made once per worker (never envsolver's own)


# What envsolver and its tests import from outside: made once per worker, not once per mutant.
PRELOAD = (
    "asyncio",
    "click.testing",
    "concurrent.futures",
    "conda_lock.lockfile",
    "conda_lock.lockfile.v1.models",
    "difflib",
    "http.client",
    "jsonschema",
    "packaging.specifiers",
    "packaging.version",
    "platformdirs",
    "rattler",
    "rich.console",
    "rich.markup",
    "rich.status",
    "rich.table",
    "rich.text",
    "ruamel.yaml",
    "tarfile",
    "urllib.request",
    "yaml",
    "zipfile",
)
MIN_LIMIT_S = 20.0  # the shortest timeout of a run
SEED = ("--hypothesis-seed=0",)  # the same examples for every mutant

# Each group's tests: those that exercise its decisions directly, small enough to run once per mutant.
GROUPS = {
    "resolve": Group(
        "resolve",
        ("envsolver/resolve/*.py",),
        (
            "tests/test_resolve.py",
            "tests/test_profiles.py",
            "tests/test_plan_invariants.py",
            "tests/test_writers.py::test_golden",  # the plans' reasons, word for word, as environment.yml shows them
        ),
        SEED,
        PRELOAD,
    ),
    "writers": Group(
        "writers",
        ("envsolver/lock/writers/*.py",),
        (
            "tests/test_writers.py",
            "tests/test_fileset.py",
            "tests/test_yamlemit.py",
            "tests/test_outputs.py",
            "tests/test_explicit_order.py",
        ),
        SEED,
        PRELOAD,
    ),
    "checks": Group(
        "checks",
        ("envsolver/hook/activation.py", "envsolver/verify/checks_*.py"),
        ("tests/test_verify.py", "tests/test_activation.py", "tests/test_hook.py"),
        SEED,
        PRELOAD,
    ),
    "versions": Group(
        "versions",
        ("envsolver/core/versions.py",),
        ("tests/test_versions.py", "tests/test_version_options.py"),
        SEED,
        PRELOAD,
    ),
}

# --- mutants ------------------------------------------------------------------------------------------------

_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.GtE,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.GtE: ast.Lt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_SKIPPED_FIELDS = {"annotation", "returns", "decorator_list", "type_comment", "type_params"}
_DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Assert, ast.Break, ast.Continue)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the root, with /
    line: int
    qualname: str  # the enclosing function or class (`MajorMinor.__lt__`), `<module>` at the top
    kind: str
    text: str  # the mutation in words
    site: int  # the node's index in the walk
    variant: int  # which of the node's mutations
    key: str  # path::qualname::text, with #n for the n-th twin; stable when lines shift

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def public_return_none(self) -> bool:
        """A `return None` mutant of a function that other modules may call (no _private name on its path)."""
        names = self.qualname.split(".")
        private = any(n.startswith("_") and not (n.startswith("__") and n.endswith("__")) for n in names)
        return self.kind == "return-none" and not private


@dataclass(frozen=True)
class _Site:
    node: ast.AST
    parent: ast.AST | None
    field: str
    index: int | None
    qualname: str
    in_function: bool


def _skipped(node: ast.AST, parent: ast.AST, field: str, index: int | None) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    docstring = field == "body" and index == 0 and isinstance(parent, (ast.Module, *_SCOPES))
    if docstring and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)
    if isinstance(node, ast.If):  # `if TYPE_CHECKING:` and `if __name__ == "__main__":`
        text = ast.unparse(node.test)
        return text in ("TYPE_CHECKING", "__name__ == '__main__'")
    return False


def _walk(
    node: ast.AST,
    parent: ast.AST | None = None,
    field: str = "",
    index: int | None = None,
    qual: str = "<module>",
    in_function: bool = False,
) -> Iterator[_Site]:
    yield _Site(node, parent, field, index, qual, in_function)
    inner, inside = qual, in_function
    if isinstance(node, _SCOPES):
        inner = node.name if qual == "<module>" else f"{qual}.{node.name}"
        inside = not isinstance(node, ast.ClassDef)
    for name, value in ast.iter_fields(node):
        if name in _SKIPPED_FIELDS:
            continue
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            position = i if isinstance(value, list) else None
            if isinstance(item, ast.AST) and not _skipped(item, node, name, position):
                yield from _walk(item, node, name, position, inner, inside)


# A line of source as the parser splits them (ast's own splitter): on \r\n, \r or \n only, not on a form feed.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


@functools.lru_cache(maxsize=4)
def _lines(source: str) -> list[str]:
    """The source's lines, split once per module: ast.get_source_segment splits the whole source again for
    each node, character by character, which took most of the time of listing a group's mutants."""
    return _LINE.findall(source)


def source_segment(source: str, node: ast.AST) -> str | None:
    """ast.get_source_segment(source, node), the same text, from the lines split once (_lines)."""
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None or not hasattr(node, "lineno") or not hasattr(node, "col_offset"):
        return None
    lines, first, col = _lines(source), node.lineno - 1, node.col_offset
    if end_line - 1 == first:
        return lines[first].encode()[col:end_col].decode()
    head, tail = lines[first].encode()[col:].decode(), lines[end_line - 1].encode()[:end_col].decode()
    return "".join([head, *lines[first + 1 : end_line - 1], tail])


def _segment(source: str, node: ast.AST) -> str:
    """The node's source text on one line, cut at 70 characters; ast.unparse where the recorded position does
    not give the node back (expressions inside f-strings before Python 3.12)."""
    text = source_segment(source, node)
    try:
        tree = ast.parse(text or "", mode="eval" if isinstance(node, ast.expr) else "exec")
        found = tree.body if isinstance(tree, ast.Expression) else (tree.body[0] if tree.body else None)
        same = found is not None and ast.dump(found) == ast.dump(node)
    except SyntaxError:
        same = False
    text = " ".join((text if same and text else ast.unparse(node)).split())
    return text if len(text) <= 70 else text[:69] + "…"


def _not(test: ast.expr) -> ast.expr:
    return ast.UnaryOp(op=ast.Not(), operand=test)


Option = tuple[str, str, Callable[[_Site], None]]  # kind, text, how to apply it to a fresh tree's site


def _negatable(test: ast.expr) -> bool:
    return not (isinstance(test, ast.Compare) and len(test.ops) == 1)


def _options(site: _Site, source: str) -> list[Option]:
    node = site.node
    options: list[Option] = []
    in_body = site.in_function and site.field in ("body", "orelse", "finalbody")
    if isinstance(node, _DELETABLE) and in_body and not (isinstance(node, ast.AnnAssign) and node.value is None):

        def delete(s: _Site) -> None:
            getattr(s.parent, s.field)[s.index] = ast.Pass()

        options.append(("delete", f"deleted `{_segment(source, node)}`", delete))
    if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _negatable(node.test):

        def negate(s: _Site) -> None:
            s.node.test = _not(s.node.test)  # type: ignore[attr-defined]

        options.append(("negate", f"negated condition `{_segment(source, node.test)}`", negate))
    if isinstance(node, ast.comprehension):
        for i, test in enumerate(node.ifs):
            if _negatable(test):

                def negate_if(s: _Site, i: int = i) -> None:
                    s.node.ifs[i] = _not(s.node.ifs[i])  # type: ignore[attr-defined]

                options.append(("negate", f"negated condition `{_segment(source, test)}`", negate_if))
    returns_none = isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and node.value.value is None
    if isinstance(node, ast.Return) and node.value is not None and not returns_none:

        def return_none(s: _Site) -> None:
            s.node.value = ast.Constant(value=None)  # type: ignore[attr-defined]

        options.append(("return-none", f"`{_segment(source, node)}` -> `return None`", return_none))
    if isinstance(node, ast.BoolOp):
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")

        def swap(s: _Site) -> None:
            s.node.op = ast.Or() if isinstance(s.node.op, ast.And) else ast.And()  # type: ignore[attr-defined]

        options.append(("boolop", f"`{old}` -> `{new}` in `{_segment(source, node)}`", swap))
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for kind, table in (("boundary", _BOUNDARY), ("compare", _FLIP)):
                if type(op) in table:
                    new_op = table[type(op)]

                    def replace(s: _Site, i: int = i, new_op: type[ast.cmpop] = new_op) -> None:
                        s.node.ops[i] = new_op()  # type: ignore[attr-defined]

                    text = f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[new_op]}` in `{_segment(source, node)}`"
                    options.append((kind, text, replace))
    if isinstance(node, ast.Constant) and type(node.value) is int:
        where = _segment(source, site.parent) if site.parent is not None else ""
        for delta in (1, -1):

            def shift(s: _Site, delta: int = delta) -> None:
                s.node.value += delta  # type: ignore[attr-defined]

            options.append(("constant", f"`{node.value}` -> `{node.value + delta}` in `{where}`", shift))
    return options


def mutants(source: str, path: str) -> list[Mutant]:
    """Every mutant of this module's source, in source order (the order of the walk)."""
    found: list[Mutant] = []
    seen: dict[str, int] = {}
    for site_index, site in enumerate(_walk(ast.parse(source))):
        for variant, (kind, text, _apply) in enumerate(_options(site, source)):
            key = f"{path}::{site.qualname}::{text}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += f"#{seen[key]}"
            line = _first_line(site.node)
            found.append(Mutant(path, line, site.qualname, kind, text, site_index, variant, key))
    return found


def _first_line(node: ast.AST) -> int:
    return next((n.lineno for n in ast.walk(node) if hasattr(n, "lineno")), 0)


def unparsed_lines(source: str) -> list[int]:
    """The line of each walked node in the unparsed module (the baseline the tests run on), by site index."""
    return [_first_line(site.node) for site in _walk(ast.parse(unparsed(source)))]


def unparsed(source: str) -> str:
    """The module as every mutant of it is written (ast.unparse), unmutated: the baseline the tests run on."""
    return ast.unparse(ast.parse(source)) + "\n"


def mutated_source(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source)
    site = next(s for i, s in enumerate(_walk(tree)) if i == mutant.site)
    _options(site, source)[mutant.variant][2](site)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# --- exclusions ---------------------------------------------------------------------------------------------


def read_exclusions(path: Path) -> dict[str, str]:
    """{mutant key: why it is equivalent}. The file holds records of two lines, a key at the start of a line
    and `    because: <one line>` under it; # comments and blank lines between. Raises ValueError."""
    found: dict[str, str] = {}
    key: str | None = None
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if key is not None:
            reason = line.strip().removeprefix("because:").strip()
            if not line[:1].isspace() or not line.strip().startswith("because:") or not reason:
                raise ValueError(f"{path}:{number}: expected `    because: <why no test can kill it>` under {key!r}")
            found[key] = reason
            key = None
        elif line.strip() and not line.startswith("#"):
            if line[:1].isspace():
                raise ValueError(f"{path}:{number}: a reason without a mutant key above it")
            key = line.rstrip()
    if key is not None:
        raise ValueError(f"{path}:{len(lines)}: expected `    because: <why no test can kill it>` under {key!r}")
    return found


# --- running ------------------------------------------------------------------------------------------------


class BaselineError(Exception):
    """The group's tests fail (or time out) on the unmutated code: no mutant result would mean anything."""


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    outcome: str  # killed | timeout | survived | equivalent (an excluded mutant that survived)
    seconds: float
    killed_by_exclusion: bool = False  # an excluded mutant that a test killed: the exclusion is wrong
    selected: tuple[str, ...] = ()  # the tests that cover its line, run first (none: the group's tests only)


@dataclass
class GroupResult:
    group: Group
    files: list[str]
    baseline_s: float
    timeout_s: float
    results: list[Result] = field(default_factory=list)
    exclusions: dict[str, str] = field(default_factory=dict)
    stale_exclusions: list[str] = field(default_factory=list)
    partial: bool = False
    wall_s: float = 0.0  # from the baseline's start to the last mutant's end

    @property
    def killed(self) -> int:
        return sum(r.outcome in ("killed", "timeout") for r in self.results if not r.killed_by_exclusion)

    @property
    def considered(self) -> int:
        return sum(r.outcome != "equivalent" and not r.killed_by_exclusion for r in self.results)

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.considered if self.considered else 100.0

    @property
    def survivors(self) -> list[Result]:
        return [r for r in self.results if r.outcome == "survived"]

    @property
    def public_return_none(self) -> list[Result]:
        return [r for r in self.survivors if r.mutant.public_return_none]

    @property
    def wrongly_excluded(self) -> list[Result]:
        return [r for r in self.results if r.killed_by_exclusion]


def group_files(root: Path, group: Group) -> list[str]:
    return sorted({p.relative_to(root).as_posix() for pattern in group.files for p in root.glob(pattern)})


def group_mutants(root: Path, group: Group) -> list[Mutant]:
    return [m for path in group_files(root, group) for m in mutants((root / path).read_text("utf-8"), path)]


class _Workspace:
    """A copy of the root with the group's files unparsed, and a fork server working in it; one mutant at a
    time is written into it."""

    def __init__(self, root: Path, group: Group, files: list[str], sources: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="envsolver-mutate-"))
        self.root = self.dir / "root"
        shutil.copytree(root, self.root, ignore=shutil.ignore_patterns(*COPY_IGNORE), symlinks=True)
        self.group = group
        self.sources = sources
        for path in files:
            self._put(path, unparsed(sources[path]))
        self.server = _Server(self.root, group.preload)

    def _put(self, path: str, text: str) -> None:
        target = self.root / path
        target.write_text(text, encoding="utf-8")
        for cached in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            cached.unlink(missing_ok=True)

    @contextlib.contextmanager
    def holding(self, mutant: Mutant) -> Iterator[None]:
        self._put(mutant.path, mutated_source(self.sources[mutant.path], mutant))
        try:
            yield
        finally:
            self._put(mutant.path, unparsed(self.sources[mutant.path]))

    def pytest(self, timeout_s: float, tests: Sequence[str] = (), trace: bool = False) -> tuple[str, float]:
        """('passed' | 'failed' | 'timeout' | 'unusable', seconds) for these tests (node ids; the group's tests when
        none) as the workspace holds the code now. With `trace`, the lines of the group's files that each test
        runs are written to self.trace_file. 'unusable': pytest could not run the node ids given."""
        shutil.rmtree(self.root / ".hypothesis", ignore_errors=True)  # no example saved by an earlier mutant
        argv = [*PYTEST, *self.group.pytest_args, *(tests or self.group.tests)]
        traced = [str(self.root / path) for path in self.sources] if trace else []
        code, seconds = self.server.run(argv, timeout_s, traced, str(self.trace_file))
        if code in (4, 5):
            if tests:
                return "unusable", seconds
            raise BaselineError(f"{self.group.name}: pytest collected no tests from {' '.join(self.group.tests)}")
        return ("timeout" if code is None else "passed" if code == 0 else "failed"), seconds

    @property
    def trace_file(self) -> Path:
        return self.dir / "trace.json"

    def remove(self) -> None:
        self.server.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class _Server:
    """A python that imported pytest (and `preload`, the tests' slow imports) once, in the workspace with the
    workspace first on PYTHONPATH (so that what the tests start imports the mutated code too). Each run is a
    fork of it in a session of its own: a timeout kills the run and everything it started."""

    def __init__(self, root: Path, preload: tuple[str, ...]) -> None:
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--fork-server", *preload],
            cwd=root,
            env=dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0"),  # the same set orders in every run
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def run(self, argv: list[str], timeout_s: float, trace: list[str], trace_file: str) -> tuple[int | None, float]:
        """(pytest's exit code, or None on a timeout; seconds)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        job = {"argv": argv, "timeout": timeout_s, "trace": trace, "trace_file": trace_file}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise BaselineError(f"the fork server stopped (exit {self.process.wait()})")
        answer = json.loads(line)
        return answer["code"], answer["seconds"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Tracer:
    """A pytest plugin for the baseline run: which lines of the traced files each test runs (setup, call and
    teardown) and how long it took, written as {"tests": [node id, ...] in run order, "seconds": [...],
    "lines": {"FILE:LINE": [test index, ...]}}."""

    def __init__(self, files: list[str], out: str) -> None:
        self.files = set(files) | {os.path.realpath(f) for f in files}
        self.out = out
        self.tests: list[str] = []
        self.seconds: list[float] = []
        self.lines: dict[str, list[int]] = {}
        self.current: set[str] = set()

    def _call(self, frame: Any, event: str, arg: object) -> Any:
        if frame.f_code.co_filename not in self.files:
            return None
        self.current.add(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        return self._line

    def _line(self, frame: Any, event: str, arg: object) -> Any:
        if event == "line":
            self.current.add(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        return self._line

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Iterator[None]:
        self.current = set()
        start = time.monotonic()
        sys.settrace(self._call)
        threading.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
            self.seconds.append(time.monotonic() - start)
            self.tests.append(item.nodeid)
            for line in self.current:
                self.lines.setdefault(line, []).append(len(self.tests) - 1)

    def pytest_sessionfinish(self) -> None:
        doc = {"tests": self.tests, "seconds": self.seconds, "lines": self.lines}
        Path(self.out).write_text(json.dumps(doc), encoding="utf-8")


_CHILD: list[int] = []  # the run in progress in this fork server


def _kill_child(*_: object) -> None:
    for pid in _CHILD:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    os._exit(1)


def serve(preload: Sequence[str]) -> int:
    """The fork server's loop: one JSON line {argv, timeout} in, one {code, seconds} out, until stdin ends."""
    import importlib
    from importlib.metadata import entry_points

    sys.path[0] = os.getcwd()  # the workspace, not this script's directory
    for plugin in entry_points(group="pytest11"):  # pytest's plugins (hypothesis), loaded once
        with contextlib.suppress(Exception):
            plugin.load()
    for name in ("hypothesis", *preload):  # imported under pytest's assertion rewriter, hypothesis takes seconds
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with contextlib.suppress(ImportError):  # timing is no behaviour: under load or the tracer, no deadline
        import hypothesis

        quiet = [hypothesis.HealthCheck.too_slow]
        hypothesis.settings.register_profile("mutate", deadline=None, database=None, suppress_health_check=quiet)
        hypothesis.settings.load_profile("mutate")
    mutated = [m for m in sys.modules if m.split(".")[0] == "envsolver"]
    if mutated:
        raise SystemExit(f"preloading imported {mutated[0]}, which the mutants must import afresh")
    signal.signal(signal.SIGTERM, _kill_child)
    # What is imported now stays for every run: out of the collector's sight, each run's collections (pytest
    # collects twice as it ends) walk only what that run made, and its pages stay shared with this process.
    gc.freeze()
    for line in sys.stdin:
        job = json.loads(line)
        start = time.monotonic()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the run: its own session, no output, pytest in the workspace
            exit_code = 3
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                plugins = [_Tracer(job["trace"], job["trace_file"])] if job["trace"] else []
                exit_code = int(pytest.main(job["argv"], plugins=plugins))
            finally:
                os._exit(exit_code)
        _CHILD[:] = [pid]
        code: int | None = None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - start > job["timeout"]:
                break
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a timeout, or what the run left behind
        if not done:
            os.waitpid(pid, 0)
        _CHILD.clear()
        print(json.dumps({"code": code, "seconds": round(time.monotonic() - start, 3)}), flush=True)
    return 0


def _covering(space: _Workspace, trace: dict[str, Any]) -> dict[tuple[str, int], tuple[str, ...]]:
    """{(file, line): the tests that run that line in the baseline, in run order}."""
    names = {str(space.root / path): path for path in space.sources}
    names |= {os.path.realpath(full): path for full, path in list(names.items())}
    found: dict[tuple[str, int], tuple[str, ...]] = {}
    for where, indexes in trace["lines"].items():
        full, _, line = where.rpartition(":")
        if full in names:
            found[(names[full], int(line))] = tuple(trace["tests"][i] for i in sorted(indexes))
    return found


class _Limits:
    """The timeout of a run: 3 times what its tests took in the (traced, so slower) baseline, plus what the
    baseline spent outside tests (collection, imports), at least MIN_LIMIT_S; or the user's --timeout."""

    def __init__(self, baseline_s: float, trace: dict[str, Any], fixed: float | None) -> None:
        self.each = dict(zip(trace["tests"], trace["seconds"], strict=True))
        self.overhead = max(0.0, baseline_s - sum(self.each.values()))
        self.baseline_s = baseline_s
        self.fixed = fixed

    def __call__(self, tests: Sequence[str]) -> float:
        if self.fixed:
            return self.fixed
        took = sum(self.each.get(t, 0.0) for t in tests) + self.overhead if tests else self.baseline_s
        return max(MIN_LIMIT_S, 3.0 * took)


def _verdict(space: _Workspace, limits: _Limits, selected: Sequence[str], order: Sequence[str]) -> tuple[str, float]:
    """Run the tests that cover the mutant (in the baseline) first, then, when they pass, the rest of the
    group's tests (`order`: every test of the baseline run): a survivor is a mutant that no test of the group
    kills. With no covering test the group's tests run as given. Without a fixed --timeout, a timeout is tried
    once more at twice the limit (a busy machine, rather than a loop)."""
    chosen = set(selected)
    rest = tuple(t for t in order if t not in chosen)
    runs: list[Sequence[str]] = [selected, rest] if selected else [()]
    seconds = 0.0
    for tests in runs:
        if selected and not tests:
            continue
        status, took = space.pytest(limits(tests), tests)
        if status == "unusable":  # node ids pytest would not take: the group's tests as given
            status, more = space.pytest(limits(()))
            took += more
        seconds += took
        if status == "timeout" and not limits.fixed:
            status, took = space.pytest(2 * limits(tests), tests)
            seconds += took
        if status in ("failed", "timeout"):
            return status, seconds
    return "passed", seconds


def run_group(
    root: Path,
    group: Group,
    exclusions: dict[str, str],
    jobs: int = 1,
    timeout_s: float | None = None,
    only: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> GroupResult:
    """Run every mutant of the group (those whose key or file:line contains one of `only`, when given) against
    the group's tests. Raises BaselineError when the tests fail on the unmutated code."""
    started = time.monotonic()
    files = group_files(root, group)
    sources = {path: (root / path).read_text("utf-8") for path in files}
    every = [m for path in files for m in mutants(sources[path], path)]
    chosen = [m for m in every if not only or any(o in m.key or o in m.where for o in only)]
    keys = {m.key for m in every}
    prefixes = tuple(f"{path}::" for path in files)
    mine = {k: v for k, v in exclusions.items() if k.startswith(prefixes)}
    stale = sorted(k for k in mine if k not in keys)
    spaces: queue.Queue[_Workspace] = queue.Queue()
    made: list[_Workspace] = []
    try:
        first = _Workspace(root, group, files, sources)
        made.append(first)
        outcome, baseline_s = first.pytest(10 * timeout_s if timeout_s else 3600.0, trace=True)
        if outcome != "passed":
            raise BaselineError(
                f"{group.name}: the tests fail on the unmutated code ({outcome}): "
                f"python -m pytest {' '.join(group.tests)}"
            )
        trace = json.loads(first.trace_file.read_text(encoding="utf-8"))
        covering, order = _covering(first, trace), tuple(trace["tests"])
        limits = _Limits(baseline_s, trace, timeout_s)
        lines = {path: unparsed_lines(sources[path]) for path in files}  # where the trace saw each node
        spaces.put(first)
        for _ in range(min(jobs, len(chosen)) - 1):
            made.append(_Workspace(root, group, files, sources))
            spaces.put(made[-1])
        done: list[Result] = []

        def one(mutant: Mutant) -> Result:
            selected = covering.get((mutant.path, lines[mutant.path][mutant.site]), ())
            space = spaces.get()
            try:
                with space.holding(mutant):
                    status, seconds = _verdict(space, limits, selected, order)
            finally:
                spaces.put(space)
            excluded = mutant.key in mine
            if status == "passed":
                result = Result(mutant, "equivalent" if excluded else "survived", seconds, selected=selected)
            else:
                outcome = "killed" if status == "failed" else "timeout"
                result = Result(mutant, outcome, seconds, excluded, selected)
            done.append(result)
            if progress and result.outcome == "survived":
                progress(f"{group.name}: survived {mutant.where} {mutant.qualname}: {mutant.text}")
            if progress and (len(done) % 10 == 0 or len(done) == len(chosen)):
                progress(f"{group.name}: {len(done)}/{len(chosen)} mutants run")
            return result

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            try:
                results = list(pool.map(one, chosen))
            except BaseException:  # Ctrl-C: stop the runs in progress rather than wait for them
                pool.shutdown(wait=False, cancel_futures=True)
                for space in made:
                    space.server.close()
                raise
    finally:
        for space in made:
            space.remove()
    limit = limits(())
    partial = len(chosen) < len(every)
    return GroupResult(group, files, baseline_s, limit, results, mine, stale, partial, time.monotonic() - started)


# --- reports ------------------------------------------------------------------------------------------------


def _row(m: Mutant) -> dict[str, str]:
    return {"where": m.where, "function": m.qualname, "mutation": m.text, "key": m.key}


def ok(results: Sequence[GroupResult], min_score: float) -> bool:
    return all(
        r.score >= min_score and not r.public_return_none and not r.wrongly_excluded and not r.stale_exclusions
        for r in results
    )


def report_json(results: Sequence[GroupResult], min_score: float) -> dict[str, Any]:
    groups = []
    for r in results:
        timeouts = sum(x.outcome == "timeout" for x in r.results if not x.killed_by_exclusion)
        groups.append(
            {
                "group": r.group.name,
                "files": r.files,
                "tests": list(r.group.tests),
                "partial": r.partial,
                "mutants": len(r.results),
                "killed": r.killed,
                "timeouts": timeouts,
                "equivalent": [
                    {**_row(x.mutant), "because": r.exclusions[x.mutant.key]}
                    for x in r.results
                    if x.outcome == "equivalent"
                ],
                "score": round(r.score, 1),
                "survivors": [_row(x.mutant) for x in r.survivors],
                "public_return_none_survivors": [_row(x.mutant) for x in r.public_return_none],
                "excluded_but_killed": [_row(x.mutant) for x in r.wrongly_excluded],
                "stale_exclusions": r.stale_exclusions,
                "baseline_s": round(r.baseline_s, 1),
                "timeout_s": round(r.timeout_s, 1),
                "seconds": round(sum(x.seconds for x in r.results), 1),
                "wall_s": round(r.wall_s, 1),
            }
        )
    return {"min_score": min_score, "ok": ok(results, min_score), "groups": groups}


def report_text(results: Sequence[GroupResult], min_score: float) -> str:
    lines = []
    for r in results:
        data = report_json([r], min_score)["groups"][0]
        partial = " (a partial run: --only/--rerun)" if r.partial else ""
        lines.append(
            f"{r.group.name}: {data['score']:.1f}%{partial}  killed {r.killed} of {r.considered} "
            f"({data['timeouts']} by timeout), {len(data['equivalent'])} equivalent left out; "
            f"{len(r.files)} files, tests {' '.join(r.group.tests)} "
            f"(baseline {r.baseline_s:.1f} s, wall {r.wall_s:.0f} s)"
        )
        for x in r.survivors:
            flag = "  [public return None]" if x.mutant.public_return_none else ""
            lines.append(f"  survived  {x.mutant.where}  {x.mutant.qualname}: {x.mutant.text}{flag}")
        for x in r.wrongly_excluded:
            lines.append(f"  listed as equivalent but killed (fix the list): {x.mutant.key}")
        for key in r.stale_exclusions:
            lines.append(f"  listed as equivalent but no such mutant (fix the list): {key}")
    verdict = "ok" if ok(results, min_score) else "NOT ok"
    lines.append(f"{verdict}: every group >= {min_score:g}% and no public `return None` survivor is the goal")
    return "\n".join(lines)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/mutate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help=f"one of {', '.join(GROUPS)} (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--only", action="append", default=[], help="run the mutants whose key or file:line has TEXT")
    parser.add_argument("--rerun", type=Path, help="run the survivors of an earlier --json report only")
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: 3x the baseline, at least 20)")
    parser.add_argument("--min-score", type=float, default=90.0)
    parser.add_argument("--exclusions", type=Path, default=EXCLUSIONS)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--fork-server"]:
        return serve(argv[1:])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, _interrupted)
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group {unknown[0]!r}: choose from {', '.join(GROUPS)}")
    groups = [GROUPS[g] for g in args.groups or GROUPS]
    if args.list:
        listed = [{**_row(m), "kind": m.kind} for g in groups for m in group_mutants(ROOT, g)]
        print(
            json.dumps(listed, indent=1) if args.json else "\n".join(f"{m['where']}  {m['mutation']}" for m in listed)
        )
        return 0
    only = list(args.only)
    if args.rerun:
        earlier = json.loads(args.rerun.read_text(encoding="utf-8"))
        only += [s["key"] for g in earlier["groups"] for s in g["survivors"]]
        if not only:
            print("no survivors in the earlier report", file=sys.stderr)
            return 0
    try:
        exclusions = read_exclusions(args.exclusions)
        results = [
            run_group(ROOT, g, exclusions, args.jobs, args.timeout, only, lambda s: print(s, file=sys.stderr))
            for g in groups
        ]
    except (BaselineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130  # each workspace's fork server was told to stop, and stops its run
    report = report_json(results, args.min_score)
    print(json.dumps(report, indent=1) if args.json else report_text(results, args.min_score))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
