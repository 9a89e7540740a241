"""Print a hook report: findings with their fixes, ops with proof, the GPU check; values never read as markup,
their control characters spelled out. Or the JSON document, with the values as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from envsolver.core.printable import printable
from envsolver.hook.run import HookReport

MARK = {
    "ok": "[green]ok[/]  ",
    "pass": "[green]pass[/]",
    "warn": "[yellow]warn[/]",
    "fail": "[red]FAIL[/]",
    "skip": "[dim]skip[/]",
}


def _shown(value: str) -> str:
    """A value within a markup line: markup escaped, control characters spelled out (an op's error holds what
    the compiler printed)."""
    return escape(printable(value))


def _print(console: Console, line: str) -> None:
    console.print(line, highlight=False, emoji=False)


def show(console: Console, report: HookReport) -> None:
    for path, outcome in report.activation.items():
        _print(console, f"{_shown(str(path))}: {outcome.value}")
    _print(console, f"TORCH_CUDA_ARCH_LIST={_shown(report.arch_list)}")
    for f in report.findings:
        _print(console, f"{MARK[f.status]} {_shown(f.id)}: {_shown(f.detail)}")
        if f.fix and f.status in ("warn", "fail"):
            _print(console, f"       fix: {_shown(f.fix)}")
    for op in report.ops:
        if not op.ok:
            why = op.error or f"no SASS for {', '.join(f'sm_{a}' for a in op.missing_sass)}"
            _print(console, f"{MARK['fail']} op {_shown(op.op)}: {_shown(why)}")
            continue
        if op.source == "unchanged":
            _print(console, f"{MARK['ok']} op {_shown(op.op)}: unchanged ({_shown(str(op.file))})")
            continue
        sass = ", ".join(f"sm_{a}" for a in op.sass) if op.sass else "not checked (CPU op or no cuobjdump)"
        if op.source == "cache":  # a trusted entry: proven when it was stored, not loaded again (SECURITY.md)
            console.print(
                f"{MARK['ok']} op {escape(op.op)}: from the op cache, copied with its SHA-256; SASS {escape(sass)} "
                "and DeepSpeed's load() proven when it was stored",
                highlight=False,
            )
            continue
        load = f"{op.load_seconds:.3f} s" if op.load_seconds is not None else "?"
        came = {
            "prebuilt": "DeepSpeed's prebuilt op",
        }.get(op.source, f"built in {op.seconds:.1f} s" if op.seconds is not None else "built")
        _print(
            console,
            f"{MARK['ok']} op {_shown(op.op)}: {came}; SASS {_shown(sass)}; DeepSpeed's load() in a new process {load}",
        )
    for note in report.notes:
        _print(console, f"note: {_shown(note)}")
    if report.gpu_check is not None:
        state = "ok" if report.gpu_check.get("ok") else "fail"
        said = str(report.gpu_check.get("max_abs_diff", report.gpu_check.get("error")))
        _print(console, f"{MARK[state]} FusedAdam vs torch.optim.AdamW, 5 steps: max |diff| = {_shown(said)}")


def as_json(report: HookReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "prefix": str(report.prefix),
        "torch_cuda_arch_list": report.arch_list,
        "activation": {str(p): o.value for p, o in report.activation.items()},
        "checks": [{"id": f.id, "status": f.status, "detail": f.detail, "fix": f.fix} for f in report.findings],
        "ops": [
            {
                "op": o.op,
                "ok": o.ok,
                "build_seconds": o.seconds,
                "file": o.file,
                "error": o.error,
                "sass": list(o.sass) if o.sass is not None else None,
                "missing_sass": list(o.missing_sass),
                "load_seconds": o.load_seconds,
                "prebuilt": o.prebuilt,
                "source": o.source,
            }
            for o in report.ops
        ],
        "gpu_check": report.gpu_check,
        "unchanged": list(report.unchanged),
        "notes": list(report.notes),
    }


def env_json(prefix: Path, arch_list: str, exports: str) -> dict[str, Any]:
    """`hook --print-env --json`: the export lines, and the values they were made from."""
    return {"ok": True, "prefix": str(prefix), "torch_cuda_arch_list": arch_list, "exports": exports}
