"""No import circle among the CLI modules: each imports in a fresh interpreter whatever was imported before it,
and no command module imports the module that assembles `main`."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import envsolver

MODULES = (
    "envsolver.cli.main",
    "envsolver.cli.env",
    "envsolver.cli.install",
    "envsolver.cli.hook",
    "envsolver.cli.verify",
    "envsolver.cli.base",
    "envsolver.cli.cluster",
)
ROOT = Path(envsolver.__file__).parent


def _imports(order: tuple[str, ...]) -> tuple[tuple[str, ...], int, str]:
    code = "; ".join(f"import {m}" for m in order) + "; from envsolver.cli.main import main; assert main.commands"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return order, done.returncode, done.stderr[-600:]


def _orders() -> list[tuple[str, ...]]:
    """Each module imported first (where an import cycle would show), then the others forwards and backwards: 2n
    orders rather than n! (5040 for seven modules)."""
    orders = []
    for first in MODULES:
        rest = tuple(m for m in MODULES if m != first)
        orders += [(first, *rest), (first, *reversed(rest))]
    return orders


def test_every_module_imported_first_works_in_a_fresh_interpreter() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_imports, _orders()))
    assert len(results) == 2 * len(MODULES)
    failed = [(order, err) for order, code, err in results if code != 0]
    assert failed == []


def test_python_m_envsolver_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "envsolver", "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    listed = {line.split()[0] for line in done.stdout.split("Commands:")[1].splitlines() if line.strip()}
    assert listed == {"cluster", "diff", "explain", "gpus", "hook", "install", "make", "module", "verify"}


def test_no_command_module_imports_the_assembler() -> None:
    """cli/main.py imports the command modules; none of them (nor the shared machinery) imports it back."""
    names = ("cli/env.py", "cli/install.py", "cli/hook.py", "cli/verify.py", "cli/base.py", "cli/cluster.py")
    for name in (*names, "cli/module.py", "cli/diff.py"):
        tree = ast.parse((ROOT / name).read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        assert "envsolver.cli.main" not in imported, name
        assert not any(
            isinstance(n, ast.ImportFrom) and n.module == "envsolver.cli" and any(a.name == "main" for a in n.names)
            for n in ast.walk(tree)
        ), name
