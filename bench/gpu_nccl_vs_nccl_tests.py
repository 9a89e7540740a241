"""`envsolver verify --nccl` against NVIDIA/nccl-tests' all_reduce_perf on one GPU machine, busbw per size side by
side with the ratio (issue 21: the check's busbw must be >= 0.9x all_reduce_perf's from 16 MiB up).

Run by bench/gpu_nccl_vs_nccl_tests.sh (which says how); by hand, from the checkout root on a GPU node:
    python3 bench/gpu_nccl_vs_nccl_tests.py --out DIR [--python PY] [--gpus 2] [--repeat 2]
                                            [--all-reduce-perf BIN | --tarball nccl-tests.tar.gz] [--build-only]

1. Facts: the GPUs (nvidia-smi), torch, the NCCL torch reports, the libnccl.so.2 and nccl.h of the nvidia-nccl wheel
   beside torch (found from the interpreter: site-packages/nvidia/*/lib/libnccl.so.2).
2. all_reduce_perf built from the nccl-tests tarball (bench/vendor/, NVIDIA/nccl-tests a0b82b2, `git archive`):
   `make -C src MPI=0 NCCL_HOME=H CUDA_HOME=C NVCC_GENCODE=sm_XY BUILDDIR=B B/all_reduce_perf`, H holding the
   wheel's include/ and a lib/libnccl.so link to its libnccl.so.2, XY the GPUs' compute capability. It runs with
   LD_LIBRARY_PATH=the wheel's lib first, so both sides load the one libnccl file torch loads (checked: the
   ranks report the files they mapped; all_reduce_perf prints nccl-library=VERSION).
3. Alternating --repeat times: `all_reduce_perf -b 16M -e 1G -f 2 -g N`, then `python -m envsolver verify --nccl
   --python PY --gpus N --sizes 16M,32M,...,1G --json` (torchrun on this node, one process per GPU, 20 timed
   iterations and 5 warm-up per size, as all_reduce_perf's defaults).
4. Once, the multi-node launch path on the same GPUs: two "nodes" of one GPU each (CUDA_VISIBLE_DEVICES=0 and 1),
   each the node command `verify --nccl --nodes` has srun start (envsolver's Slurm launcher -> torchrun -> the
   worker), with SLURM_* set as srun sets them and a stand-in scontrol naming this host twice; its busbw is shown
   in its own column (NCCL between two processes that each see one GPU), not judged.
5. compare.json and compare.txt in DIR (and on stdout): per size, the medians of envsolver's busbw and of
   all_reduce_perf's out-of-place and in-place busbw, and envsolver / the better of the two.

Exit 0: every size from 16 MiB up at >= 0.9x; 1: a size below; 2: a step could not run (the reason on stderr and
in compare.json). NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and the torch/NVSHMEM equivalents) where unset.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_nccl import parse_perf  # noqa: E402  (the all_reduce_perf table's one parser)

TARBALL = HERE / "vendor" / "nccl-tests-a0b82b2.tar.gz"
SIZES = [16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20, 1 << 30]
THRESHOLD = 0.9
BACKEND = "nccl"  # gloo only with --smoke
OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
BUILD_TIMEOUT_S = 420
RUN_TIMEOUT_S = 240
LAUNCHER_PATH_TIMEOUT_S = 150  # an extra after the verdict's runs: bounded so the whole call stays under 570 s
FIND_WHEEL = r"""
import glob, json, os, site, sys
roots = [p for p in [*site.getsitepackages(), site.getusersitepackages(), *sys.path] if p and os.path.isdir(p)]
found = {"lib": None, "include": None}
for root in dict.fromkeys(roots):
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnccl.so.2"))):
        found["lib"] = os.path.dirname(lib)
        header = os.path.join(os.path.dirname(found["lib"]), "include", "nccl.h")
        found["include"] = os.path.dirname(header) if os.path.isfile(header) else None
        break
    if found["lib"]:
        break
print(json.dumps(found))
"""
TORCH_FACTS = r"""
import json, torch
n = torch.cuda.device_count()
cc = [torch.cuda.get_device_capability(i) for i in range(n)]
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": n,
                  "names": [torch.cuda.get_device_name(i) for i in range(n)],
                  "capabilities": [f"{a}.{b}" for a, b in cc],
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())) if n else None}))
"""


class Stop(Exception):
    """A step that could not run; the message says which and why."""


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def sh(argv: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> tuple[int, str, str]:
    log("$ " + shlex.join(argv))
    try:
        done = subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return 124, out, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def size_word(nbytes: int) -> str:
    """16M, 1G, 16K: the 1024-based form both nccl-tests and `verify --sizes` read."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(nbytes)


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def wheel_nccl(python: str, env: dict[str, str]) -> dict[str, str | None]:
    code, out, err = sh([python, "-c", FIND_WHEEL], env, 120)
    if code != 0:
        raise Stop(f"{python} could not look for the nvidia-nccl wheel (exit {code}): {tail(err)}")
    found: dict[str, str | None] = json.loads(out)
    if not found["lib"]:
        raise Stop(f"no site-packages/nvidia/*/lib/libnccl.so.2 beside {python}'s torch: is torch a CUDA wheel?")
    return found


def torch_facts(python: str, env: dict[str, str]) -> dict[str, Any]:
    code, out, err = sh([python, "-c", TORCH_FACTS], env, 180)
    if code != 0:
        raise Stop(f"{python} could not import torch (exit {code}): {tail(err)}")
    facts: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return facts


def nccl_home(out: Path, wheel: dict[str, str | None]) -> Path:
    """A NCCL_HOME for nccl-tests' Makefile: include/ (the wheel's, else the system's nccl.h) and lib/libnccl.so."""
    home = out / "ncclhome"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    lib = Path(str(wheel["lib"])) / "libnccl.so.2"
    for name in ("libnccl.so", "libnccl.so.2"):
        link = home / "lib" / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(lib)
    include = home / "include"
    if include.is_symlink() or include.exists():
        include.unlink() if include.is_symlink() else shutil.rmtree(include)
    if wheel["include"]:
        include.symlink_to(Path(wheel["include"]))
    elif Path("/usr/include/nccl.h").is_file():
        include.mkdir()
        for header in Path("/usr/include").glob("nccl*.h"):
            (include / header.name).symlink_to(header)
        log("the wheel has no include/nccl.h: building against /usr/include/nccl.h (same major API)")
    else:
        raise Stop(f"no nccl.h: neither {wheel['lib']}/../include nor /usr/include has one")
    return home


def cuda_toolkit(env: dict[str, str]) -> Path:
    """The CUDA toolkit: $CUDA_HOME, /usr/local/cuda, else the folder above the nvcc on PATH (which may be a
    wrapper script: a folder counts only with bin/nvcc and include/cuda_runtime.h)."""
    candidates = [env.get("CUDA_HOME", ""), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for candidate in candidates:
        home = Path(candidate) if candidate else None
        if home and (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file():
            return home
    raise Stop(f"no CUDA toolkit (bin/nvcc and include/cuda_runtime.h) in {candidates}: cannot build all_reduce_perf")


def build(
    out: Path, cache: Path, tarball: Path, wheel: dict[str, str | None], capability: str, env: dict[str, str]
) -> Path:
    """all_reduce_perf in `cache` (kept between runs: a second call on a warm machine skips the build)."""
    sm = capability.replace(".", "")
    builddir = cache / f"nccl-tests-build-sm{sm}"
    if (builddir / "all_reduce_perf").is_file() and (builddir / "built").is_file():
        log(f"reusing {builddir / 'all_reduce_perf'} (remove {builddir} to rebuild)")
        return builddir / "all_reduce_perf"
    cuda_home = cuda_toolkit(env)
    source = cache / "nccl-tests-src"
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(source, filter="data")
    tree = next(p for p in source.iterdir() if (p / "src" / "Makefile").is_file())
    home = nccl_home(cache, wheel)
    argv = ["make", "-C", str(tree / "src"), f"-j{os.cpu_count() or 4}", "MPI=0", f"BUILDDIR={builddir}"]
    argv += [f"NCCL_HOME={home}", f"CUDA_HOME={cuda_home}", f"NVCC_GENCODE=-gencode=arch=compute_{sm},code=sm_{sm}"]
    argv.append(str(builddir / "all_reduce_perf"))
    started = time.monotonic()
    code, stdout, stderr = sh(argv, {**env, "PATH": f"{cuda_home / 'bin'}:{env.get('PATH', '')}"}, BUILD_TIMEOUT_S)
    (out / "build.log").write_text(f"$ {shlex.join(argv)}\n{stdout}{stderr}")
    if code != 0 or not (builddir / "all_reduce_perf").is_file():
        raise Stop(f"building all_reduce_perf failed (exit {code}; {out / 'build.log'}):\n{tail(stdout + stderr)}")
    log(f"built {builddir / 'all_reduce_perf'} in {time.monotonic() - started:.0f} s")
    (builddir / "built").write_text(f"{shlex.join(argv)}\n")
    return builddir / "all_reduce_perf"


def perf(
    binary: Path, gpus: int, env: dict[str, str], out: Path, n: int
) -> dict[int, tuple[float, float, float, float]]:
    argv = [str(binary), "-b", size_word(SIZES[0]), "-e", size_word(SIZES[-1]), "-f", "2", "-g", str(gpus)]
    try:  # the toolkit's libcudart.so.13, which all_reduce_perf links (after the wheel's libnccl)
        cuda = cuda_toolkit(env)
        extra = [str(cuda / "lib64"), str(cuda / "lib")]
    except Stop:
        extra = []
    env = {**env, "LD_LIBRARY_PATH": ":".join(p for p in (env["LD_LIBRARY_PATH"], *extra) if p)}
    code, stdout, stderr = sh(argv, env, RUN_TIMEOUT_S)
    (out / f"all_reduce_perf-{n}.txt").write_text(
        f"$ LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']} {shlex.join(argv)}\n{stdout}{stderr}"
    )
    rows = parse_perf(stdout)
    if code != 0 or not rows:
        raise Stop(f"all_reduce_perf exit {code}, {len(rows)} rows:\n{tail(stdout + stderr)}")
    return rows


def verify(python: str, gpus: int, env: dict[str, str], out: Path, n: int) -> dict[str, Any]:
    sizes = ",".join(size_word(s) for s in SIZES)
    argv = [python, "-m", "envsolver", "verify", "--nccl", "--python", python, "--gpus", str(gpus), "--sizes", sizes]
    code, stdout, stderr = sh([*argv, "--backend", BACKEND, "--json"], env, RUN_TIMEOUT_S, cwd=ROOT)
    (out / f"verify-nccl-{n}.json").write_text(stdout)
    (out / f"verify-nccl-{n}.err").write_text(stderr[-20000:])
    try:
        doc: dict[str, Any] = json.loads(stdout)
    except ValueError:
        raise Stop(f"verify --nccl exit {code}, no JSON:\n{tail(stderr)}") from None
    if code != 0 or not doc.get("bandwidth"):
        failed = [f"{c['id']}: {c['detail']}" for c in doc.get("checks", []) if c.get("status") == "fail"]
        raise Stop(f"verify --nccl exit {code}: {failed or doc.get('error')}\n{tail(stderr)}")
    return doc


SCONTROL = """#!/bin/sh
case "$1 $2" in
  'show hostnames') printf '%s\\n%s\\n' "{host}" "{host}" ;;
  *) exit 1 ;;
esac
"""


def launcher_path(python: str, env: dict[str, str], out: Path) -> dict[str, Any]:
    """Two 'nodes' of one GPU each through the node command srun starts for `verify --nccl --nodes 2`."""
    sys.path.insert(0, str(ROOT))
    from envsolver.cluster import nccl_nodes
    from envsolver.verify import nccl, nccl_run

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        (bin_dir / "scontrol").write_text(SCONTROL.format(host="127.0.0.1"))
        (bin_dir / "scontrol").chmod(0o755)
        options = nccl_run.Options(
            "gloo" if BACKEND == "gloo" else "nccl", sizes=tuple(SIZES), timeout=LAUNCHER_PATH_TIMEOUT_S / 6
        )
        job = nccl_nodes.SlurmJob(python, 2, 1, str(Path(tmp) / "ranks"), port=port, options=options)
        command = nccl_nodes.node_command(job)
        base = nccl_nodes.slurm_environ(None, {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}"})
        base.update(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_STEP_NODELIST="node[1-2]", SLURM_STEP_NUM_NODES="2")
        base.update(SLURM_STEP_TASKS_PER_NODE="1(x2)")
        log("$ " + shlex.join(command) + "  (x2: SLURM_NODEID=0,1, CUDA_VISIBLE_DEVICES=0,1)")
        logs = [(out / f"launcher-node{n + 1}.log").open("w") for n in (0, 1)]
        procs = [
            subprocess.Popen(
                command,
                env={**base, "SLURM_NODEID": str(n), "SLURMD_NODENAME": f"node{n + 1}", "CUDA_VISIBLE_DEVICES": str(n)},
                stdout=logs[n],
                stderr=subprocess.STDOUT,
                start_new_session=True,  # torchrun and its ranks in one group: stopped together at the deadline
            )
            for n in (0, 1)
        ]
        deadline = time.monotonic() + LAUNCHER_PATH_TIMEOUT_S
        try:
            for proc in procs:
                proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            raise Stop(f"the launcher path did not finish in {LAUNCHER_PATH_TIMEOUT_S} s (stopped)") from None
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # torchrun passes SIGTERM on to its ranks, then exits
                for proc in procs:
                    if proc.poll() is None:
                        with contextlib.suppress(OSError):
                            os.killpg(proc.pid, sig)
                for proc in procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=15)
            for handle in logs:
                handle.close()
        report = Path(tmp) / "ranks" / "report.json"
        if not report.is_file():
            said = tail((out / "launcher-node1.log").read_text(errors="replace"))
            raise Stop(f"the launcher path wrote no report (exits {[p.returncode for p in procs]}):\n{said}")
        text = report.read_text()
    (out / "launcher-path.json").write_text(text)
    checks = nccl.judge(nccl.Collected(2, text))
    rows = nccl.bandwidth(nccl.parse_document(text))
    return {
        "checks": {c.id: c.status for c in checks},
        "busbw": {r.nbytes: r.busbw for r in rows},
        "exits": [p.returncode for p in procs],
    }


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def compare(
    ours: list[dict[str, Any]], theirs: list[dict[int, tuple[float, float, float, float]]], launched: dict[int, float]
) -> list[dict[str, Any]]:
    rows = []
    for size in SIZES:
        mine = [r["busbw_gbps"] for d in ours for r in d["bandwidth"] if r["bytes"] == size and r["busbw_gbps"]]
        oop = median([t[size][0] for t in theirs if size in t])
        inplace = median([t[size][1] for t in theirs if size in t])
        ours_median = median(mine)
        best = max(v for v in (oop, inplace) if v is not None) if (oop or inplace) else None
        ratio = ours_median / best if ours_median and best else None
        rows.append(
            {
                "bytes": size,
                "envsolver_busbw": ours_median,
                "envsolver_runs": mine,
                "all_reduce_perf_oop_busbw": oop,
                "all_reduce_perf_inplace_busbw": inplace,
                "ratio_to_better": ratio,
                "ratio_to_oop": ours_median / oop if ours_median and oop else None,
                "launcher_path_busbw": launched.get(size),
                "ok": ratio is not None and ratio >= THRESHOLD,
            }
        )
    return rows


def text_table(rows: list[dict[str, Any]], launched: bool) -> str:
    def f(value: float | None, spec: str = ".1f") -> str:
        return format(value, spec) if value is not None else "-"

    head = "| size | verify --nccl busbw GB/s | all_reduce_perf busbw GB/s oop / in-place | ratio to better |"
    head += " multi-node launch path GB/s |" if launched else ""
    lines = [head, "|---|---|---|---|" + ("---|" if launched else "")]
    for r in rows:
        size = size_word(r["bytes"]).replace("K", " KiB").replace("M", " MiB").replace("G", " GiB")
        verdict = "ok" if r["ok"] else ("LOW" if r["ratio_to_better"] is not None else "missing")
        line = f"| {size} | {f(r['envsolver_busbw'])} | {f(r['all_reduce_perf_oop_busbw'])} / "
        line += f"{f(r['all_reduce_perf_inplace_busbw'])} | {f(r['ratio_to_better'], '.3f')} {verdict} |"
        line += f" {f(r['launcher_path_busbw'])} |" if launched else ""
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tarball", type=Path, default=TARBALL)
    parser.add_argument("--all-reduce-perf", type=Path, help="a built all_reduce_perf (skips the build)")
    parser.add_argument("--build-only", action="store_true", help="build all_reduce_perf, run nothing (no GPU)")
    parser.add_argument("--capability", help="compute capability to build for (default: the GPUs')")
    parser.add_argument("--no-launcher-path", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="check this script without a GPU: gloo, sizes 16K and 64K, no GPU facts"
    )
    parser.add_argument("--cache", type=Path, default=ROOT / "bench" / "out", help="where all_reduce_perf is built")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for key, value in OFF.items():
        env.setdefault(key, value)
    result: dict[str, Any] = {"ok": False, "python": args.python, "gpus": args.gpus, "repeat": args.repeat}
    result["settings"] = {k: v for k, v in sorted(env.items()) if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_"))}
    code = 2
    try:
        wheel = wheel_nccl(args.python, env)
        result["wheel_nccl"] = wheel
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(wheel["lib"]), env.get("LD_LIBRARY_PATH", "")) if p)
        if args.smoke:
            global BACKEND, SIZES
            BACKEND, SIZES = "gloo", [16 << 10, 64 << 10]
        if args.build_only or args.smoke:
            capability = args.capability or "9.0"
        else:
            facts = torch_facts(args.python, env)
            result["torch"] = facts
            if facts["gpus"] < args.gpus:
                raise Stop(f"torch sees {facts['gpus']} GPU(s), --gpus {args.gpus} asked")
            capability = args.capability or facts["capabilities"][0]
            smi = sh(["nvidia-smi", "topo", "-m"], env, 60)
            (out / "topo.txt").write_text(smi[1] + smi[2])
        binary = args.all_reduce_perf or build(out, args.cache.resolve(), args.tarball, wheel, capability, env)
        result["all_reduce_perf"] = str(binary)
        if args.build_only:
            result["ok"] = True
            print(json.dumps(result, indent=2))
            return 0
        ours: list[dict[str, Any]] = []
        theirs: list[dict[int, tuple[float, float, float, float]]] = []
        errors: list[str] = []
        for n in range(1, args.repeat + 1):  # alternating; a failed run is reported, the others still count
            try:
                theirs.append(perf(binary, args.gpus, env, out, n))
            except Stop as exc:
                errors.append(f"all_reduce_perf run {n}: {exc}")
            try:
                ours.append(verify(args.python, args.gpus, env, out, n))
            except Stop as exc:
                errors.append(f"verify --nccl run {n}: {exc}")
        result["failed_runs"] = errors
        if not ours or not theirs:
            raise Stop(
                "no run of "
                + ("verify --nccl" if not ours else "all_reduce_perf")
                + " succeeded:\n"
                + "\n".join(errors)
            )
        libraries = sorted({str(r.get("nccl_library")) for d in ours for r in d.get("ranks", [])})
        result["envsolver_nccl_libraries"] = libraries
        result["envsolver_command"] = ours[0].get("command")
        perf_text = "\n".join(f.read_text(errors="replace") for f in sorted(out.glob("all_reduce_perf-*.txt")))
        header = next((line for line in perf_text.splitlines() if "nccl-library" in line), "")
        result["all_reduce_perf_header"] = header.strip()
        rows = compare(ours, theirs, {})
        (out / "compare.txt").write_text(text_table(rows, False))  # the verdict's table, before the extra
        launched: dict[int, float] = {}
        if not args.no_launcher_path:
            try:
                path = launcher_path(args.python, env, out)
                launched = path["busbw"]
                result["launcher_path"] = {**path, "busbw": {str(k): v for k, v in launched.items()}}
            except Stop as exc:  # an extra: reported, never the verdict
                result["launcher_path"] = {"error": str(exc)}
                log(f"launcher path: {exc}")
        rows = compare(ours, theirs, launched)
        result["rows"] = rows
        result["ok"] = all(r["ok"] for r in rows)
        code = 0 if result["ok"] else 1
        table = text_table(rows, bool(launched))
        (out / "compare.txt").write_text(table)
    except Stop as exc:
        result["error"] = str(exc)
        log(f"stopped: {exc}")
        table = f"stopped: {exc}\n"
    (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    verdict = {0: "PASS", 1: f"BELOW {THRESHOLD}x at some size", 2: "DID NOT RUN"}[code]
    print(f"\n{table}\nverdict: {verdict} (verify --nccl busbw / all_reduce_perf's better busbw, 16 MiB to 1 GiB)")
    return code


if __name__ == "__main__":
    sys.exit(main())
