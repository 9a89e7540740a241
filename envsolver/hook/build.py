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

from envsolver.procrun import Runner, run

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


def compiler_line(text: str) -> str:
    """The compiler's own error line from a failed build log (fatal error / nvcc fatal / error:)."""
    for line in text.splitlines():
        if "fatal error" in line or "nvcc fatal" in line or re.search(r"\berror\b:", line):
            return line.strip()
    for line in text.splitlines():
        if re.match(r"^\w+(Error|Exception): ", line.strip()):
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


def build_ops(
    python: Path,
    ops: tuple[str, ...],
    env: Mapping[str, str],
    jobs: int,
    progress: Callable[[str], None],
    runner: Runner = run,
    mode: str = "build",
) -> list[OpResult]:
    """Build the ops concurrently (each op's compile uses MAX_JOBS = jobs // len(ops), at least 1). Mode "build"
    loads an op DeepSpeed was installed with instead of compiling it; mode "jit" always compiles."""
    per_op = max(1, jobs // max(1, len(ops)))
    build_env = {**env, "MAX_JOBS": str(per_op)}

    def one(op: str) -> OpResult:
        progress(f"building {op}")
        code, out = runner([str(python), str(RUNNER), mode, op], build_env)
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
    sass = None
    missing: tuple[int, ...] = ()
    cuobjdump = cuda_home / "bin" / "cuobjdump"
    tool = str(cuobjdump) if cuobjdump.exists() else shutil.which("cuobjdump")
    if tool and result.op not in ("cpu_adam", "cpu_adagrad", "cpu_lion"):
        code, out = runner([tool, "--list-elf", result.file], env)
        if code == 0:
            sass = parse_elf_list(out)
            missing = tuple(a for a in archs if a not in sass)
    code, out = runner([str(python), str(RUNNER), "load", result.op], env)
    doc = _json_line(out)
    load = doc.get("load_seconds")
    return dataclasses.replace(
        result,
        ok=result.ok and not missing,
        sass=sass,
        missing_sass=missing,
        load_seconds=float(load) if isinstance(load, (int, float)) else None,
    )


def adam_check(python: Path, env: Mapping[str, str], runner: Runner = run) -> dict[str, object]:
    _, out = runner([str(python), str(RUNNER), "adam-check"], env)
    return _json_line(out)


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


def load_state(path: Path, key: Mapping[str, str]) -> dict[str, OpResult]:
    """Ops already built and proven for exactly this arch list, torch and nvcc, whose files still exist."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("key") != dict(key):
        return {}
    out = {}
    for item in doc.get("ops", []):
        if isinstance(item, dict) and item.get("file") and Path(str(item["file"])).exists():
            out[str(item["op"])] = OpResult(
                str(item["op"]),
                True,
                item.get("seconds"),
                str(item["file"]),
                None,
                tuple(item["sass"]) if item.get("sass") is not None else None,
                (),
                item.get("load_seconds"),
            )
    return out


def save_state(path: Path, key: Mapping[str, str], results: list[OpResult]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "key": dict(key),
        "ops": [
            {
                "op": r.op,
                "file": r.file,
                "seconds": r.seconds,
                "sass": list(r.sass) if r.sass is not None else None,
                "load_seconds": r.load_seconds,
            }
            for r in sorted(results, key=lambda r: r.op)
        ],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
