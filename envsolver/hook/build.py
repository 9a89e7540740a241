"""Build DeepSpeed ops for the target archs inside the target env, in parallel, then prove each one:
cuobjdump shows SASS for every target arch, and the op loads in a new process."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from envsolver.core import pystart
from envsolver.core.procrun import Runner, run
from envsolver.hook.opkey import CPU_OPS
from envsolver.resolve.toolchain import compiler_line

RUNNER = Path(__file__).with_name("op_runner.py")
DEFAULT_OPS = ("fused_adam", "cpu_adam", "fused_lamb")
# The ops op_runner.py knows (keys of its BUILDERS table).
KNOWN_OPS = (
    "fused_adam",
    "cpu_adam",
    "fused_lamb",
    "fused_lion",
    "cpu_lion",
    "cpu_adagrad",
    "quantizer",
    "transformer_inference",
)
# Sample (cuobjdump --list-elf fused_adam.so):
#   ELF file    1: fused_adam.1.sm_90.cubin
_ELF = re.compile(r"\.sm_(\d+)a?\.cubin")


@dataclass(frozen=True)
class OpResult:
    op: str
    ok: bool
    seconds: float | None
    file: str | None
    error: str | None
    sass: tuple[int, ...] | None = None
    missing_sass: tuple[int, ...] = ()
    load_seconds: float | None = None
    prebuilt: bool = False  # shipped built with DeepSpeed (e.g. conda-forge's), proven rather than rebuilt
    source: str = "built"  # built | cache (the shared op cache) | unchanged (a re-run) | prebuilt


def parse_elf_list(text: str) -> tuple[int, ...]:
    return tuple(sorted({int(m) for m in _ELF.findall(text)}))


def _json_line(out: str) -> dict[str, object]:
    for line in reversed(out.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {"ok": False, "error": out.strip()[-2000:] or "no output"}


def build_ops(
    python: Path,
    ops: tuple[str, ...],
    env: Mapping[str, str],
    jobs: int,
    progress: Callable[[str], None],
    runner: Runner = run,
) -> list[OpResult]:
    """Build the ops concurrently (each op's compile uses MAX_JOBS = jobs // len(ops), at least 1); an op DeepSpeed
    was installed with is loaded instead of compiled (op_runner.py build)."""
    per_op = max(1, jobs // max(1, len(ops)))
    build_env = {**env, "MAX_JOBS": str(per_op)}

    def one(op: str) -> OpResult:
        progress(f"building {op}")
        code, out = runner(pystart.command(python, str(RUNNER), "build", op), build_env)
        doc = _json_line(out)
        ok = code == 0 and bool(doc.get("ok"))
        error = None if ok else compiler_line(str(doc.get("trace", "")) + "\n" + str(doc.get("error", "")) + "\n" + out)
        if not ok and env.get("TORCH_EXTENSIONS_DIR"):
            # Leave no half-written op behind: the next build starts clean instead of reusing partial objects.
            shutil.rmtree(Path(env["TORCH_EXTENSIONS_DIR"]) / op, ignore_errors=True)
        progress(f"{op}: {'built' if ok else 'failed'}")
        seconds = doc.get("seconds")
        return OpResult(
            op,
            ok,
            float(seconds) if isinstance(seconds, (int, float)) else None,
            str(doc["file"]) if doc.get("file") else None,
            error,
            prebuilt=bool(doc.get("prebuilt")),
        )

    with ThreadPoolExecutor(max_workers=max(1, min(len(ops), jobs))) as pool:
        return list(pool.map(one, ops))


def list_sass(library: Path, cuda_home: Path, env: Mapping[str, str], runner: Runner = run) -> tuple[int, ...] | None:
    """The SMs a library has SASS for (cuobjdump --list-elf: the toolkit's, else the one on PATH); None when there
    is no cuobjdump or it fails."""
    tool = cuda_home / "bin" / "cuobjdump"
    found = str(tool) if tool.exists() else shutil.which("cuobjdump")
    if not found:
        return None
    code, out = runner([found, "--list-elf", str(library)], env)
    return parse_elf_list(out) if code == 0 else None


def prove(
    result: OpResult,
    python: Path,
    cuda_home: Path,
    archs: tuple[int, ...],
    env: Mapping[str, str],
    runner: Runner = run,
) -> OpResult:
    """SASS per target arch (cuobjdump) and the load time in a new process."""
    if not result.ok or not result.file:
        return result
    sass = None if result.op in CPU_OPS else list_sass(Path(result.file), cuda_home, env, runner)
    missing = tuple(a for a in archs if sass is not None and a not in sass)
    _, out = runner(pystart.command(python, str(RUNNER), "load", result.op), env)
    doc = _json_line(out)
    load = doc.get("load_seconds")
    return dataclasses.replace(
        result,
        ok=result.ok and not missing,
        sass=sass,
        missing_sass=missing,
        load_seconds=float(load) if isinstance(load, (int, float)) else None,
    )


def default_jobs() -> int:
    return os.cpu_count() or 1


def prove_all(
    results: list[OpResult],
    python: Path,
    cuda_home: Path,
    archs: tuple[int, ...],
    env: Mapping[str, str],
    runner: Runner = run,
) -> list[OpResult]:
    """prove() for every op, concurrently (each load runs in its own process)."""
    with ThreadPoolExecutor(max_workers=max(1, len(results))) as pool:
        return list(pool.map(lambda r: prove(r, python, cuda_home, archs, env, runner), results))
