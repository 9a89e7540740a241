"""Where the hook's cold build of DeepSpeed's ops spends its time (GPU machine; issue 12).

Run from the repository root on a machine with nvcc and a CUDA torch, DeepSpeed importable (PYTHONPATH):
    python3 bench/gpu_build_profile.py OUTDIR [--arch 9.0] [--variants base,nog,O2,ftime]

1. The three ops (fused_adam, cpu_adam, fused_lamb) JIT-built side by side through DeepSpeed's own builders
   (envsolver/hook/op_runner.py build OP), as the hook builds them: the wall time of each and of the three.
2. The same ninja builds again from their build.ninja, with one change to the flags each time (a variant), the
   three ops side by side: ninja's own log gives every translation unit's time.
3. Loading: in fresh processes, `import torch, deepspeed` then constructing FusedAdam, DeepSpeedCPUAdam and
   FusedLamb, each timed, and a profile of the slowest construction.
Everything lands in OUTDIR (summary.json, and the build files and logs in one tar.gz).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OPS = ("fused_adam", "cpu_adam", "fused_lamb")
RUNNER = Path(__file__).resolve().parent.parent / "envsolver" / "hook" / "op_runner.py"

# A variant: (text appended to cflags, text appended to cuda_cflags, (old, new) replacements in both)
VARIANTS: dict[str, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    "base": ("", "", ()),
    "nog": ("", "", ((" -g ", " "),)),
    "O2": ("", "", ((" -O3 ", " -O2 "),)),
    "O1nog": ("", "", ((" -O3 ", " -O1 "), (" -g ", " "))),
    "ftime": ("-ftime-report", "-Xcompiler -ftime-report --time {dir}/nvcc-time.csv", ()),
    # torch/extension.h precompiled with the op's own flags, then included first by every C++ unit
    "pch": ("-include {dir}/pch.h -Winvalid-pch", "", ()),
}


def run(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def ninja_log(path: Path) -> list[dict[str, object]]:
    """ninja's .ninja_log (v5/v6): start and end in ms per output."""
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) >= 4:
            rows.append({"target": parts[3], "seconds": (int(parts[1]) - int(parts[0])) / 1000})
    return rows


def cold_build(ext: Path, arch: str, env: dict[str, str]) -> dict[str, object]:
    shutil.rmtree(ext, ignore_errors=True)
    env = {**env, "TORCH_EXTENSIONS_DIR": str(ext), "TORCH_CUDA_ARCH_LIST": arch, "MAX_JOBS": "5"}

    def one(op: str) -> dict[str, object]:
        code, out, secs = run([sys.executable, str(RUNNER), "jit", op], env)
        return {"op": op, "rc": code, "wall": round(secs, 2), "tail": out.strip().splitlines()[-1:]}

    started = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        ops = list(pool.map(one, OPS))
    total = time.perf_counter() - started
    units = {op: ninja_log(ext / op / ".ninja_log") for op in OPS if (ext / op / ".ninja_log").exists()}
    ninja = {op: (ext / op / "build.ninja").read_text() for op in OPS if (ext / op / "build.ninja").exists()}
    return {"ops": ops, "total_wall": round(total, 2), "units": units, "build_ninja": ninja}


def variant(src: Path, dst: Path, name: str) -> dict[str, object]:
    cflags_add, cuda_add, swaps = VARIANTS[name]
    shutil.rmtree(dst, ignore_errors=True)
    for op in OPS:
        shutil.copytree(src / op, dst / op, ignore=shutil.ignore_patterns("*.o", "*.so", ".ninja_*"))
        ninja = dst / op / "build.ninja"
        text = ninja.read_text()
        out = []
        for line in text.splitlines():
            if re.match(r"^(cflags|cuda_cflags|post_cflags|cuda_post_cflags) = ", line):
                line = line + " "
                for old, new in swaps:
                    line = line.replace(old, new)
                if line.startswith("cflags = ") and cflags_add:
                    line += cflags_add.format(dir=dst / op)
                if line.startswith("cuda_cflags = ") and cuda_add:
                    line += cuda_add.format(dir=dst / op)
                line = line.rstrip()
            out.append(line)
        ninja.write_text("\n".join(out) + "\n")

    def one(op: str) -> dict[str, object]:
        pch: dict[str, object] = {}
        if name == "pch":
            pch = precompile(src / op / "build.ninja", dst / op)
        code, text, secs = run(["ninja", "-j", "5"], cwd=str(dst / op))
        (dst / op / "ninja-output.txt").write_text(text)
        row = {"op": op, "rc": code, "wall": round(secs, 2), "units": ninja_log(dst / op / ".ninja_log")}
        return {**row, **pch}

    started = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        ops = list(pool.map(one, OPS))
    return {"variant": name, "ops": ops, "total_wall": round(time.perf_counter() - started, 2)}


def precompile(ninja: Path, dst: Path) -> dict[str, object]:
    """torch/extension.h as a GCC precompiled header, with the flags of the op's C++ units."""
    import shlex

    values = dict(
        line.split(" = ", 1)
        for line in ninja.read_text().splitlines()
        if re.match(r"^(cxx|cflags|post_cflags) = ", line)
    )
    (dst / "pch.h").write_text("#include <torch/extension.h>\n")
    argv = [values.get("cxx", "c++"), *shlex.split(values.get("cflags", ""))]
    argv += ["-x", "c++-header", str(dst / "pch.h"), "-o", str(dst / "pch.h.gch")]
    argv += shlex.split(values.get("post_cflags", ""))
    code, text, secs = run(argv)
    return {"pch_rc": code, "pch_seconds": round(secs, 2), "pch_out": text[-800:]}


LOAD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, deepspeed
t1 = time.perf_counter()
which = sys.argv[1]
p = [torch.nn.Parameter(torch.zeros(1024, device="cuda" if which != "cpu_adam" else "cpu"))]
torch.cuda.synchronize()
t2 = time.perf_counter()
if which == "fused_adam":
    from deepspeed.ops.adam import FusedAdam as Opt
elif which == "cpu_adam":
    from deepspeed.ops.adam import DeepSpeedCPUAdam as Opt
else:
    from deepspeed.ops.lamb import FusedLamb as Opt
t3 = time.perf_counter()
if len(sys.argv) > 2:
    import cProfile, pstats, io
    prof = cProfile.Profile(); prof.enable(); Opt(p); prof.disable()
    s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40); print(s.getvalue(), file=sys.stderr)
else:
    Opt(p)
t4 = time.perf_counter()
print(json.dumps({"op": which, "import": round(t1 - t0, 3), "class_import": round(t3 - t2, 3), "construct": round(t4 - t3, 4)}))
"""


def loads(ext: Path, arch: str, env: dict[str, str], out: Path) -> list[dict[str, object]]:
    env = {**env, "TORCH_EXTENSIONS_DIR": str(ext), "TORCH_CUDA_ARCH_LIST": arch}
    rows: list[dict[str, object]] = []
    for rep in range(2):
        for op in OPS:
            code, text, secs = run([sys.executable, "-c", LOAD, op], env)
            line = text.strip().splitlines()[-1] if text.strip() else ""
            try:
                row = json.loads(line)
            except ValueError:
                row = {"op": op, "error": text[-1500:]}
            row.update(rep=rep, rc=code, process=round(secs, 2))
            rows.append(row)
    for op in OPS:
        code, text, _ = run([sys.executable, "-c", LOAD, op, "profile"], env)
        (out / f"profile-{op}.txt").write_text(text)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--arch", default="9.0")
    parser.add_argument("--variants", default="pch,nog,ftime,O2,base")
    args = parser.parse_args()
    out = Path(args.out)
    work = Path("/tmp/profile-work")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    env = dict(os.environ)
    summary: dict[str, object] = {}
    summary["cold"] = cold_build(work / "ext", args.arch, env)
    print(json.dumps({"cold": summary["cold"]}), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    summary["loads"] = loads(work / "ext", args.arch, env, work)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({"loads": summary["loads"]}), flush=True)
    variants = []
    for name in args.variants.split(","):
        row = variant(work / "ext", work / "var" / name, name)
        variants.append(row)
        print(json.dumps(row), flush=True)
        summary["variants"] = variants
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    with tarfile.open(out / "build-files.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.suffix not in (".o", ".so") and path.stat().st_size < 4_000_000:
                tar.add(path, arcname=str(path.relative_to(work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
