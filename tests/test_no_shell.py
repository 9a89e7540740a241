"""SECURITY.md promises that envsolver never runs a shell: every command is an argument list. This reads the
source of every module and fails on any call that would hand a string to a shell or evaluate one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "envsolver"
MODULES = sorted(PACKAGE.rglob("*.py"))
FORBIDDEN_CALLS = {("os", "system"), ("os", "popen"), ("os", "execl"), ("os", "execlp"), ("os", "spawnl")}
FORBIDDEN_NAMES = {"eval", "exec"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def problems(source: str) -> list[str]:
    """Calls that would run a shell or evaluate text: shell=<anything but False>, os.system/popen, eval/exec."""
    out = []
    for call in _calls(ast.parse(source)):
        for keyword in call.keywords:
            if keyword.arg == "shell" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                out.append(f"line {call.lineno}: shell=...")
        func = call.func
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        if isinstance(func, ast.Attribute) and (owner, func.attr) in FORBIDDEN_CALLS:
            out.append(f"line {call.lineno}: {owner}.{func.attr}()")
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES:
            out.append(f"line {call.lineno}: {func.id}()")
    return out


def test_the_checker_finds_what_it_looks_for() -> None:
    bad = "import os, subprocess\nsubprocess.run('ls', shell=True)\nos.system('ls')\neval('1')\n"
    assert problems(bad) == ["line 2: shell=...", "line 3: os.system()", "line 4: eval()"]
    assert problems("import subprocess\nsubprocess.run(['ls'], shell=False, check=True)\n") == []


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(PACKAGE)) for m in MODULES])
def test_no_module_runs_a_shell_or_evaluates_text(module: Path) -> None:
    assert problems(module.read_text(encoding="utf-8")) == []
