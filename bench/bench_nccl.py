"""Bus bandwidth of `envsolver verify --nccl` against NCCL's own all_reduce_perf (NVIDIA/nccl-tests), on the same
GPUs, with the same NCCL library, in one run; then the NCCL check with a fault injected into one rank.

Run on a GPU node, with envsolver importable (installed, or PYTHONPATH=checkout):
    python3 bench/bench_nccl.py --all-reduce-perf PATH/all_reduce_perf --out DIR [--python PY] [--repeat 2]

all_reduce_perf is NVIDIA/nccl-tests built with nvcc against the NCCL headers of the version torch loads or older
(`make -C src NCCL_HOME=... NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR=B B/all_reduce_perf`); it
runs here with LD_LIBRARY_PATH set to the folder of the very libnccl the envsolver ranks mapped, so both use one
NCCL. Sizes are nccl-tests' `-b 1M -e 1G -f 4`. The runs alternate (envsolver, all_reduce_perf, ...) --repeat
times, so a drifting clock or a neighbour shows as spread, not as a gap. NVLink multicast stays off
(NCCL_NVLS_ENABLE=0 and the others are set to their off value where unset, never turned on).

Writes into DIR: facts.txt (GPUs, links, versions, NCCL_* settings), verify-nccl-N.json (the CLI's --json),
all_reduce_perf-N.txt, fault-sum.json and fault-nccl-version.json (the launcher with --inject-fault on rank 1),
compare.md (busbw per size: envsolver's median, all_reduce_perf's out-of-place and in-place medians, the gap);
with --mixed-nccl LIB, mixed-preload.json and mixed-ld-library-path.json: rank 1 started with LIB through
LD_PRELOAD / LD_LIBRARY_PATH, the other ranks with torch's own NCCL (a real mixed-NCCL job, judged).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = "1M,4M,16M,64M,256M,1G"
OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# all_reduce_perf line: size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
_NUM = r"([\d.e+-]+)"
_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+float\s+sum\s+-?\d+\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\S+)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\S+)"
)


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def sh(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    log("$ " + shlex.join(argv))
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return 124, str(exc.stdout or ""), f"timed out after {timeout} s"
    except OSError as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def parse_perf(text: str) -> dict[int, tuple[float, float, float, float]]:
    """bytes -> (busbw out-of-place, busbw in-place in GB/s, time out-of-place, time in-place in us)."""
    rows = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            rows[int(match.group(1))] = tuple(float(match.group(i)) for i in (5, 9, 3, 7))
    return rows  # type: ignore[return-value]


def facts(python: str, env: dict[str, str]) -> str:
    parts = []
    for argv in (
        ["nvidia-smi", "-L"],
        ["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv"],
        ["nvidia-smi", "topo", "-m"],
        ["nvidia-smi", "nvlink", "--status"],
        [python, "-c", "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"],
        ["uname", "-a"],
    ):
        code, out, err = sh(argv, env, 120)
        parts.append(f"$ {shlex.join(argv)}  (exit {code})\n{out}{err}")
    nccl_env = "\n".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(("NCCL_", "TORCH_", "NVSHMEM_")))
    return "\n".join(parts) + f"\n$ env | grep NCCL_/TORCH_/NVSHMEM_\n{nccl_env}\n"


def verify(python: str, gpus: int, env: dict[str, str], out: Path, n: int, backend: str) -> dict[str, Any] | None:
    argv = [python, "-m", "envsolver", "verify", "--nccl", "--python", python, "--gpus", str(gpus), "--sizes", SIZES]
    code, stdout, stderr = sh([*argv, "--backend", backend, "--json"], env, 300)
    (out / f"verify-nccl-{n}.json").write_text(stdout)
    (out / f"verify-nccl-{n}.err").write_text(stderr[-20000:])
    log(f"verify --nccl exit {code}")
    try:
        doc: dict[str, Any] = json.loads(stdout)
        return doc
    except ValueError:
        return None


def fault(python: str, gpus: int, env: dict[str, str], out: Path, kind: str, backend: str) -> None:
    """The launcher itself with one rank's fault injected (the worker's test-only option), as --json prints."""
    code = (
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "from envsolver.verify import nccl_run\n"
        f"o = nccl_run.Options({backend!r}, sizes=(1 << 20,), iters=5, timeout=60.0, inject_fault='1:{kind}')\n"
        f"run = nccl_run.run_local(Path({python!r}), None, {gpus}, o, dict(os.environ))\n"
        f"print(json.dumps(nccl_run.report_json(run, Path({python!r}), None), indent=2))\n"
    )
    status, stdout, stderr = sh([python, "-c", code], env, 240)
    (out / f"fault-{kind}.json").write_text(stdout or stderr[-5000:])
    log(f"fault {kind}: exit {status}")


def perf(
    binary: str, gpus: int, libdirs: list[str], env: dict[str, str], out: Path, n: int
) -> dict[int, tuple[float, float]]:
    libdir = ":".join(p for p in (*libdirs, env.get("LD_LIBRARY_PATH", "")) if p)
    env = {**env, "LD_LIBRARY_PATH": libdir}
    argv = [binary, "-b", "1M", "-e", "1G", "-f", "4", "-g", str(gpus)]
    code, stdout, stderr = sh(argv, env, 300)
    (out / f"all_reduce_perf-{n}.txt").write_text(f"$ LD_LIBRARY_PATH={libdir} {shlex.join(argv)}\n{stdout}{stderr}")
    log(f"all_reduce_perf exit {code}")
    return parse_perf(stdout)


def compare(ours: list[dict[str, Any]], theirs: list[dict[int, tuple[float, float, float, float]]]) -> str:
    """Medians over the runs; the gap is envsolver's busbw against all_reduce_perf's better column. The times
    (us per all-reduce) show whether a gap is per-call overhead (a constant) or bandwidth (grows with size)."""
    lines = [
        "| size | envsolver busbw GB/s | all_reduce_perf busbw out-of-place | in-place | gap to best "
        "| time us: envsolver | all_reduce_perf in-place |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    sizes = sorted({row["bytes"] for doc in ours for row in doc["bandwidth"]} | {s for t in theirs for s in t})
    nan = float("nan")
    for size in sizes:
        rows = [r for doc in ours for r in doc["bandwidth"] if r["bytes"] == size and r["busbw_gbps"]]
        mine = [r["busbw_gbps"] for r in rows]
        columns = [[t[size][i] for t in theirs if size in t] for i in range(4)]
        a = statistics.median(mine) if mine else nan
        b, c, _, d = (statistics.median(v) if v else nan for v in columns)
        t = statistics.median(r["seconds"] * 1e6 for r in rows) if rows else nan
        best = max(b, c)
        gap = (a - best) / best * 100 if best == best and best > 0 else nan
        spread = f" ({min(mine):.1f}-{max(mine):.1f})" if len(mine) > 1 else ""
        lines.append(f"| {size >> 20} MiB | {a:.1f}{spread} | {b:.1f} | {c:.1f} | {gap:+.1f}% | {t:.1f} | {d:.1f} |")
    return "\n".join(lines) + "\n"


def mixed(python: str, gpus: int, env: dict[str, str], out: Path, lib: str, how: str) -> None:
    """A real mixed-NCCL job: the ranks started by hand (torchrun gives every rank one environment), rank 1 with
    another libnccl through LD_PRELOAD or LD_LIBRARY_PATH; then the judge on what they reported."""
    from envsolver.verify import nccl, nccl_run

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = nccl_run.Options(sizes=(1 << 20,), iters=5, timeout=30.0)
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(gpus):
            rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(gpus)}
            rank_env.update(LOCAL_WORLD_SIZE=str(gpus), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            if rank == 1 and how == "preload":
                rank_env["LD_PRELOAD"] = lib
            elif rank == 1:
                rank_env["LD_LIBRARY_PATH"] = ":".join(
                    p for p in (os.path.dirname(lib), env.get("LD_LIBRARY_PATH")) if p
                )
            argv = [python, str(nccl_run.WORKER), *nccl_run.worker_args(options, tmp), "--deadline", "100"]
            log(f"rank {rank}: $ {shlex.join(argv)}")
            procs.append(
                subprocess.Popen(argv, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        tails = []
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=150)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            tails.append(f"exit {proc.returncode}: {err.strip()[-600:]}")
        folder = Path(tmp)
        report = folder / "report.json"
        document = report.read_text() if report.exists() else None
        ranks = {int(p.stem.split("-")[1]): p.read_text() for p in folder.glob("rank-*.json")}
    failure = "" if all(p.returncode == 0 for p in procs) else " | ".join(tails)
    collected = nccl.Collected(gpus, document, ranks, failure, f"envsolver verify --nccl --python {python}")
    checks = nccl.judge(collected)
    doc = {
        "case": f"rank 1 with {how} {lib}",
        "ok": nccl.passed(checks),
        **nccl.summary(collected),
        "processes": tails,
        "checks": [{"id": c.id, "status": c.status, "detail": c.detail, "fix": c.fix} for c in checks],
    }
    (out / f"mixed-{how}.json").write_text(json.dumps(doc, indent=2))
    log(f"mixed {how}: " + ", ".join(f"{c.id} {c.status}" for c in checks))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--all-reduce-perf", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--backend", default="nccl", help="gloo: a dry run of this script on CPU")
    parser.add_argument("--nccl-lib", default="", help="libnccl's folder for all_reduce_perf (default: the ranks')")
    parser.add_argument(
        "--mixed-nccl", default="", help="another libnccl: rank 1 loads it (LD_PRELOAD, then LD_LIBRARY_PATH)"
    )
    parser.add_argument("--mixed-only", action="store_true", help="run only the --mixed-nccl cases")
    parser.add_argument("--extra-lib", action="append", default=[], help="more LD_LIBRARY_PATH for all_reduce_perf")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for name, value in OFF.items():
        env.setdefault(name, value)
    if env["NCCL_NVLS_ENABLE"] != "0":
        print("NCCL_NVLS_ENABLE is not 0: refusing to run (NVLink multicast must stay off)", file=sys.stderr)
        return 2
    counted = sh([args.python, "-c", "import torch; print(torch.cuda.device_count())"], env, 120)[1]
    gpus = args.gpus or int(counted.strip().splitlines()[-1])
    (args.out / "facts.txt").write_text(facts(args.python, env))
    if args.mixed_nccl:
        for how in ("preload", "ld-library-path"):
            mixed(args.python, gpus, env, args.out, args.mixed_nccl, how)
    if args.mixed_only:
        return 0
    ours, theirs = [], []
    libdir = args.nccl_lib
    for n in range(1, args.repeat + 1):
        doc = verify(args.python, gpus, env, args.out, n, args.backend)
        if doc is not None and doc.get("bandwidth"):
            ours.append(doc)
            library = next((r["nccl_library"] for r in doc["ranks"] if r.get("nccl_library")), None)
            if library and os.path.dirname(library) != libdir:
                log(f"the ranks mapped {library}; all_reduce_perf uses its folder, not {libdir}")
                libdir = os.path.dirname(library)
        else:
            log(f"verify --nccl run {n} gave no bandwidth: {json.dumps(doc)[:2000]}")
        theirs.append(perf(args.all_reduce_perf, gpus, [libdir, *args.extra_lib], env, args.out, n))
    for kind in ("sum", "nccl-version"):
        fault(args.python, gpus, env, args.out, kind, args.backend)
    table = compare(ours, theirs)
    (args.out / "compare.md").write_text(f"{gpus} GPUs, NCCL from {libdir}\n\n{table}")
    print(table)
    return 0 if ours and all(d.get("ok") for d in ours) else 1


if __name__ == "__main__":
    sys.exit(main())
