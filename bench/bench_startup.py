#!/usr/bin/env python3
"""Benchmark: whole `envsolver` processes against a bare rattler solve process, alternating, in one run.

    python bench/bench_startup.py [--repeat 7] [--gpu a100] [--baseline-src DIR] [--make-only]

Each round runs, one after another, fresh processes of:
  - bare:    `python BARE REQUEST`: a script that imports rattler and solves exactly what `make --offline`
             solves (the same specs, virtual packages, platforms, channel directory and solver options; the
             request is captured from envsolver's own solve call before the rounds start);
  - make:    `python -m envsolver make --gpu GPU --offline --out DIR` (a new DIR each time; one cache directory
             per tree, as a user has, warmed by one untimed round first, so the compiled KB is read from it);
  - explain: `python -m envsolver explain --gpu GPU`;
  - gpus:    `python -m envsolver gpus` (on a pipe: the plain table);
  - with --baseline-src DIR (an older tree: `git archive REV envsolver profiles | tar -x -C DIR`), the same
    three commands from that tree, so before and after are measured in the same run.
Every tree's envsolver package is byte-compiled first (compileall). The timer is time.perf_counter around
subprocess.run of the whole process (start-up, imports, the worker child, writing the files, exit).
Reported: medians, minimums, and each median's ratio to the bare solve's median; beside them the median CPU time
(user + system of the process and its children, from getrusage), which other load on the machine moves less.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE = """\
import asyncio, datetime, json, sys
import rattler
from rattler.channel import ChannelPriority
from rattler.package.build_string import BuildString

request = json.load(open(sys.argv[1]))
virtual = [
    rattler.GenericVirtualPackage(rattler.PackageName(n), rattler.Version(v), BuildString(b))
    for n, v, b in request["virtual_packages"]
]
records = asyncio.run(
    rattler.solve(
        [rattler.Channel(url) for url in request["channels"]],
        request["specs"],
        gateway=rattler.Gateway(cache_dir=sys.argv[2]),
        platforms=[rattler.Subdir(p) for p in request["platforms"]],
        virtual_packages=virtual,
        channel_priority=ChannelPriority.Strict,
        timeout=datetime.timedelta(seconds=request["timeout_s"]),
        timestamp_policy="allow-missing",
    )
)
print(len(records))
"""

CAPTURE = """\
import json, sys
from pathlib import Path
from envsolver.lock import run as lock
from envsolver.lock import worker_call
from envsolver.resolve.inputs import Options, build_target
from envsolver.kb import default_kb

seen = []
real = worker_call.call

def call(request, *rest):
    seen.append(request)
    return real(request, *rest)

worker_call.call = call
kb = default_kb()
target = build_target(Options(gpus=(sys.argv[1],)), kb).target
result = lock.lock(target, kb, "offline", (), Path(sys.argv[2]), lambda _: None)
solves = [r for r in seen if r["op"] == "solve"]
packages = sum(len(r) for r in result.records.values())
print(json.dumps({"requests": solves, "packages": packages}))
"""


def _env(src: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "ENVSOLVER_CACHE_DIR": str(cache)}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the process and its children: less moved by other load than
    the wall clock) and stdout of one run."""
    cpu = _cpu()
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed, _cpu() - cpu, done.stdout


def _check_tree(src: Path, work: Path) -> None:
    where = subprocess.run(
        [sys.executable, "-c", "import envsolver; print(envsolver.__file__)"],
        env={**os.environ, "PYTHONPATH": str(src)},
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(src)):
        raise SystemExit(f"PYTHONPATH={src} imports envsolver from {where}")


def capture(gpu: str, work: Path) -> tuple[dict[str, object], int]:
    """The one solve request `make --gpu GPU --offline` sends to rattler, and how many packages it locks."""
    out = subprocess.run(
        [sys.executable, "-c", CAPTURE, gpu, str(work / "capture-cache")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    doc = json.loads(out)
    if len(doc["requests"]) != 1:
        raise SystemExit(
            f"make --gpu {gpu} --offline solves {len(doc['requests'])} times; pick a target that solves once"
        )
    return doc["requests"][0], int(doc["packages"])


def run(gpu: str, repeat: int, work: Path, baseline: Path | None, make_only: bool = False) -> dict[str, list[float]]:
    request, packages = capture(gpu, work)
    (work / "request.json").write_text(json.dumps(request))
    (work / "bare.py").write_text(BARE)
    trees = {"": ROOT, **({"baseline ": baseline} if baseline else {})}
    for src in trees.values():
        _check_tree(src, work)
        # bytecode for every tree, so no tree compiles its sources on each run (PYTHONDONTWRITEBYTECODE=1 would
        # otherwise leave a fresh tree uncompiled and slow)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "envsolver")], check=True)
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def add(name: str, timed: tuple[float, float, str]) -> str:
        times.setdefault(name, []).append(timed[0])
        cpu.setdefault(name, []).append(timed[1])
        return timed[2]

    for i in range(-1, repeat):  # round -1 warms the file cache and the caches; it is not counted
        cache = work / f"bare-cache{i}"
        bare = [sys.executable, str(work / "bare.py"), str(work / "request.json"), str(cache)]
        out = add("bare solve", _timed(bare, dict(os.environ), work))
        if int(out) != packages:
            raise SystemExit(f"the bare solve found {out.strip()} packages, make locks {packages}")
        for label, src in trees.items():
            env = _env(src, work / f"cache-{label.strip() or 'current'}")
            out_dir = work / f"out{label.strip()}{i}"
            command = [sys.executable, "-m", "envsolver", "make", "--gpu", gpu, "--offline", "--out", str(out_dir)]
            add(f"{label}make --offline", _timed(command, env, work))
            if make_only:
                continue
            add(f"{label}explain", _timed([sys.executable, "-m", "envsolver", "explain", "--gpu", gpu], env, work))
            add(f"{label}gpus", _timed([sys.executable, "-m", "envsolver", "gpus"], env, work))
            cli = [sys.executable, "-c", "import envsolver.cli.main"]
            add(f"{label}python -c 'import envsolver.cli.main'", _timed(cli, env, work))
        if not make_only:
            add("python -c pass", _timed([sys.executable, "-c", "pass"], dict(os.environ), work))
        if i < 0:
            times.clear()
            cpu.clear()
    times.update({f"cpu {name}": values for name, values in cpu.items()})
    times["packages"] = [float(packages)]
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--gpu", default="a100")
    parser.add_argument("--baseline-src", type=Path, help="an older envsolver tree to time alternately")
    parser.add_argument("--make-only", action="store_true", help="time the bare solve and make alone (more rounds)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envsolver-bench-startup-"))
    before = os.getloadavg()
    try:
        baseline = args.baseline_src.resolve() if args.baseline_src else None
        times = run(args.gpu, args.repeat, work, baseline, args.make_only)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import rattler  # only for its version in the report

    load = os.getloadavg()
    print(
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.machine()}, {os.cpu_count()} "
        f"cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, py-rattler "
        f"{getattr(rattler, '__version__', '?')}; load average {before[0]:.2f} {before[1]:.2f} {before[2]:.2f} at "
        f"the start, {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end"
    )
    packages = int(times.pop("packages")[0])
    print(
        f"whole processes, median of {args.repeat}, alternating "
        f"(make --gpu {args.gpu} --offline locks {packages} packages)"
    )
    cpu = {name.removeprefix("cpu "): times.pop(name) for name in list(times) if name.startswith("cpu ")}
    bare, bare_cpu = statistics.median(times["bare solve"]), statistics.median(cpu["bare solve"])
    print(f"  {'process':<40} {'median':>9} {'min':>9} {'ratio to bare':>14} {'CPU median':>11} {'CPU ratio':>10}")
    for name, values in times.items():
        median, used = statistics.median(values), statistics.median(cpu[name])
        print(
            f"  {name:<40} {median * 1000:7.0f} ms {min(values) * 1000:6.0f} ms {median / bare:14.2f} "
            f"{used * 1000:8.0f} ms {used / bare_cpu:10.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
