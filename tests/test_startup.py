"""What a whole `envsolver` process imports (issue 13): `make --offline`, `explain` and `gpus` stay off the
heavy packages that only other commands or the tests need. Each command runs in a fresh Python whose exit
hook writes the names in sys.modules to a file; the tests read that list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# conda-lock imports its whole tool (ensureconda, its vendored poetry, pydantic) from its package __init__;
# envsolver renders conda-lock.yml itself, and conda-lock's parser and schema check that in the tests.
HEAVY = ("conda_lock", "pydantic", "pydantic_core", "ensureconda")

HOOK = """\
import atexit, json, runpy, sys
out = sys.argv.pop(1)
import gc
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules) + [f"frozen {gc.get_freeze_count()}"])))
sys.argv[0] = "envsolver"
runpy.run_module("envsolver", run_name="__main__", alter_sys=True)
"""


def modules_at_exit(tmp_path: Path, *args: str) -> set[str]:
    """The modules loaded when `envsolver ARGS` exits (it must exit 0)."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", HOOK, str(out), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**_env(), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_the_hook_sees_what_a_command_imports(tmp_path: Path) -> None:
    """The check can fail: the list holds what the command itself loaded (click, the KB model)."""
    loaded = modules_at_exit(tmp_path, "gpus")
    assert {"click", "envsolver.kb.model", "envsolver.cli.main"} <= loaded


# What `python -m envsolver make` must not import before it starts its worker (envsolver/__main__.py imports
# envsolver.lock.worker_call first): what only a call needs (json, core.pipes, the error classes and, with them,
# typing and dataclasses) is imported in the call, while the worker starts.
NOT_BEFORE_THE_WORKER = ("typing", "dataclasses", "inspect", "json", "pathlib")


def test_the_early_prestart_imports_only_what_starting_a_worker_needs() -> None:
    code = (
        "import runpy, sys; before = set(sys.modules); from envsolver.lock import worker_call; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    added = set(done.stdout.split())
    assert "envsolver.lock.worker_call" in added, done.stdout  # the check can fail: it sees what the import loads
    ours = sorted(m for m in added if m.split(".")[0] == "envsolver")
    assert ours == ["envsolver", "envsolver.lock", "envsolver.lock.worker_call"], ours
    assert sorted(added & set(NOT_BEFORE_THE_WORKER)) == [], sorted(added)


def test_make_offline_imports_neither_conda_lock_nor_pydantic(tmp_path: Path) -> None:
    loaded = modules_at_exit(tmp_path, "make", "--gpu", "a100", "--offline", "--out", str(tmp_path / "out"))
    assert (tmp_path / "out" / "conda-lock.yml").is_file()
    assert sorted(_top(loaded) & set(HEAVY)) == []


@pytest.mark.parametrize("args", [("explain", "--gpu", "a100"), ("gpus",)], ids=["explain", "gpus"])
def test_explain_and_gpus_import_neither_conda_lock_pydantic_nor_rattler(tmp_path: Path, args: tuple[str, ...]) -> None:
    loaded = modules_at_exit(tmp_path, *args)
    assert sorted(_top(loaded) & {*HEAVY, "rattler"}) == []


# What each command must not import (issue 13): the modules of the other commands, and what only they need.
OTHER_COMMANDS = (
    "envsolver.cli.env",
    "envsolver.cli.install",
    "envsolver.cli.hook",
    "envsolver.cli.verify",
    "envsolver.cli.cluster",
    "envsolver.install.run",
    "envsolver.net.http",
    "envsolver.net.transport",
    "requests",  # imported by envsolver.net.transport when a download over http(s) begins, by nothing else
    "urllib3",
    "envsolver.hook",
    "envsolver.verify",
    "envsolver.cluster",
    "envsolver.lock.lockfile",
)
NOT_IMPORTED = {
    "gpus": (
        *OTHER_COMMANDS,
        "envsolver.lock.run",
        "envsolver.lock.solve",
        "envsolver.lock.worker_call",
        "envsolver.resolve.run",
        "envsolver.resolve.candidates",
        "rattler",
        "rich",
    ),
    "explain": (
        *OTHER_COMMANDS,
        "envsolver.lock.run",
        "envsolver.lock.solve",
        "envsolver.lock.worker_call",
        "rattler",
        "rich",
    ),
    "make": (*OTHER_COMMANDS, "rattler", "rich"),
    "--help": (*OTHER_COMMANDS, "envsolver.kb", "envsolver.cli.render", "envsolver.lock.run", "rich", "rattler"),
    "--version": (*OTHER_COMMANDS, "envsolver.kb", "envsolver.cli.render", "envsolver.lock.run", "rich", "rattler"),
}
ARGS = {
    "gpus": ("gpus",),
    "explain": ("explain", "--gpu", "a100"),
    "make": ("make", "--gpu", "a100", "--offline", "--out", "out"),
    "--help": ("--help",),
    "--version": ("--version",),
}


def _under(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("command", sorted(NOT_IMPORTED))
def test_each_command_imports_only_its_own_modules(tmp_path: Path, command: str) -> None:
    """On a pipe, `gpus`, `explain` and `make` print without rich, `gpus` and `explain` without the locker; no
    command imports another command's modules."""
    loaded = modules_at_exit(tmp_path, *ARGS[command])
    assert "envsolver.cli.main" in loaded
    assert _under(loaded, NOT_IMPORTED[command]) == []


def test_the_final_collection_skips_what_the_command_made(tmp_path: Path) -> None:
    """envsolver freezes its objects at exit (gc.freeze), so Python's last collection does not walk them all."""
    loaded = modules_at_exit(tmp_path, "gpus", "--json")
    [frozen] = [m for m in loaded if m.startswith("frozen ")]
    assert int(frozen.split()[1]) > 10_000
