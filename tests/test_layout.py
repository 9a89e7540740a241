"""The package layout is the pipeline (docs/architecture.md): each stage package imports only from itself and from
earlier stages. Every import counts, lazy ones inside functions and TYPE_CHECKING ones included."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "envsolver"

# The stages in import order; a module may import from its own stage and from any earlier one. verify comes before
# hook: the hook proves its work with verify's probe and checks, and verify needs nothing of the hook.
STAGES = ("core", "net", "kb", "resolve", "lock", "install", "verify", "hook", "cluster", "cli")
ROOT_MODULES = 6  # at most, besides __init__ and __main__


def _stage(module: str) -> str:
    """The stage of a dotted module name under envsolver ('' for the package itself and its root modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else ""


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported envsolver module) for every import in a file; `from envsolver.x import y` counts y when y
    is a module of x."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "envsolver"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("envsolver"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((node.lineno, sub if _is_module(sub) else str(node.module)))
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _backward(modules: list[tuple[Path, str]]) -> list[str]:
    found = []
    for path, name in modules:
        own = _stage(name)
        for line, imported in _imports(path) if own else []:
            theirs = _stage(imported)
            if theirs and STAGES.index(theirs) > STAGES.index(own):
                found.append(f"{name}:{line} ({own}) imports {imported} ({theirs})")
    return found


def test_no_module_imports_from_a_later_stage() -> None:
    backward = _backward([(p, _module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))])
    assert backward == [], "imports against the stage order (docs/architecture.md):\n" + "\n".join(backward)


def test_every_package_is_a_stage_and_the_root_stays_small() -> None:
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(STAGES), f"envsolver/'s packages differ from the stages {STAGES}: {packages}"
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert len(modules) <= ROOT_MODULES, f"{len(modules)} modules at the package root: {modules}"


def test_the_checker_sees_a_lazy_backward_import(tmp_path: Path) -> None:
    """The checker itself: a lazy import of the CLI inside a core module is reported, an earlier stage is not."""
    module = tmp_path / "m.py"
    module.write_text("from envsolver.core import errors\n\n\ndef f() -> None:\n    from envsolver.cli import main\n")
    found = _backward([(module, "envsolver.core.m")])
    assert found == ["envsolver.core.m:5 (core) imports envsolver.cli.main (cli)"], found


# Files that run under the target environment's python, on a node, or as a source string: no envsolver there.
STANDALONE = (
    "verify/probe.py",
    "verify/gate.py",
    "verify/nccl_worker.py",
    "hook/op_runner.py",
    "hook/ds_ops_site.py",
    "cluster/slurm_launch.py",
)


def test_the_files_that_run_outside_envsolver_import_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"torch", "deepspeed"}
    for name in STANDALONE:
        imported = set()
        for node in ast.walk(ast.parse((PACKAGE / name).read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert imported <= allowed, f"{name} imports {sorted(imported - allowed)}"
