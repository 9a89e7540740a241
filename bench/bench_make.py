#!/usr/bin/env python3
"""Benchmark: `envsolver make` against rattler's bare solve, and `envsolver install` from a warm cache.

    python bench/bench_make.py [--repeat 15] [--profile a100]

1. make vs bare solve, measured in one run, alternating, against the bundled snapshot channel:
   - bare: rattler.solve of the plan's specs with the plan's virtual packages (what any rattler user pays);
   - envsolver: resolve + solve + check + write environment.yml, conda-lock.yml and the explicit lock.
   Both read the same local channel with a fresh gateway each time. Reported: medians and their ratio.
2. install: a local channel of synthetic packages (tests/conda_packages.py) installed into a new prefix
   with the archives already verified and extracted in the cache (warm), then re-installed unchanged (no-op).
3. with --processes N: whole `python -m envsolver make --profile P --offline` processes, N of them; with
   --baseline-src DIR (an older envsolver package tree, e.g. from `git archive REV envsolver | tar -x -C DIR`)
   the same command from that tree, alternating, so both are measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rattler  # noqa: E402
from rattler.channel import ChannelPriority  # noqa: E402
from rattler.package.build_string import BuildString  # noqa: E402

from envsolver.install import run as install  # noqa: E402
from envsolver.kb import default_kb  # noqa: E402
from envsolver.lock import outputs, snapshot  # noqa: E402
from envsolver.lock import run as lock  # noqa: E402
from envsolver.lock.solve import ChannelSource, solve  # noqa: E402
from envsolver.lock.writers import condalock  # noqa: E402
from envsolver.resolve.inputs import Options, build_target, make_command  # noqa: E402
from tests.conda_packages import build_package  # noqa: E402


def bare_solve(specs: list[str], channels: list[str], plat: str, virtual: dict[str, str], cache: Path) -> int:
    vps = []
    for name, value in virtual.items():
        version, _, build = value.partition(" ")
        vps.append(
            rattler.GenericVirtualPackage(
                rattler.PackageName(name), rattler.Version(version), BuildString(build or "0")
            )
        )
    records = asyncio.run(
        rattler.solve(
            [rattler.Channel(c) for c in channels],
            specs,
            gateway=rattler.Gateway(cache_dir=cache),
            platforms=[rattler.Subdir(plat), rattler.Subdir("noarch")],
            virtual_packages=vps,
            channel_priority=ChannelPriority.Strict,
            timestamp_policy="allow-missing",
        )
    )
    return len(records)


def bench_make(profile: str, repeat: int, work: Path) -> dict[str, float]:
    kb = default_kb()
    target = build_target(Options(profile=profile), kb).target
    first = lock.lock(target, kb, "offline", (), work / "cache", lambda _: None)
    plan = first.plan
    specs = [str(s) for s in plan.specs]
    channels = [snapshot.channels()[c] for c in first.channels]
    virtual = lock.virtual_packages(kb, plan)
    bare, ours = [], []
    for i in range(repeat):
        started = time.perf_counter()
        count = bare_solve(specs, channels, plan.platform, virtual, work / "cache")
        bare.append(time.perf_counter() - started)
        out = work / f"out{i}"
        started = time.perf_counter()
        result = lock.lock(target, kb, "offline", (), work / "cache", lambda _: None)
        outputs.write_all(result, kb, out, make_command(target, offline=True), None, force=True)
        ours.append(time.perf_counter() - started)
        assert count == len(result.records[plan.platform])
    return {
        "bare": statistics.median(bare),
        "envsolver": statistics.median(ours),
        "packages": float(count),
        "bare_min": min(bare),
        "envsolver_min": min(ours),
    }


def bench_install(packages: int, work: Path) -> dict[str, float]:
    channel = work / "channel"
    for i in range(packages):
        files = {f"share/bench{i}/file{j}.txt": f"package {i} file {j}\n" * 50 for j in range(20)}
        build_package(channel, f"bench-pkg{i}", "1.0", files)
    (channel / "noarch").mkdir(exist_ok=True)
    from envsolver.lock.solve import index_channel

    index_channel(channel)
    records = solve(
        [f"bench-pkg{i}" for i in range(packages)],
        [ChannelSource(channel.as_uri(), channel.as_uri())],
        "linux-64",
        {"__unix": "0"},
        work / "cache",
    )
    lock_path = work / "conda-lock.yml"
    lock_path.write_text(
        condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, {}, "bench", "bench")
    )
    cache = work / "icache"
    started = time.perf_counter()
    install.install(lock_path, work / "env-cold", None, {}, cache, lambda _: None)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    install.install(lock_path, work / "env-warm", None, {}, cache, lambda _: None)
    warm = time.perf_counter() - started
    noop = []
    for _ in range(5):
        started = time.perf_counter()
        install.install(lock_path, work / "env-warm", None, {}, cache, lambda _: None)
        noop.append(time.perf_counter() - started)
    return {
        "cold": cold,
        "warm": warm,
        "noop": statistics.median(noop),
        "packages": float(packages),
        "files": float(packages * 20),
    }


def _make_process(out: Path, cache: Path, profile: str, src: Path) -> float:
    env = {**os.environ, "ENVSOLVER_CACHE_DIR": str(cache), "PYTHONPATH": str(src)}
    command = [sys.executable, "-m", "envsolver", "make", "--profile", profile, "--offline", "--out", str(out)]
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=out.parent)
    return time.perf_counter() - started


def bench_processes(profile: str, repeat: int, work: Path, baseline: Path | None) -> dict[str, float]:
    """Median wall time of whole make --offline processes from this tree and, alternating, from `baseline`."""
    trees = {"current": ROOT, **({"baseline": baseline} if baseline else {})}
    for name, src in trees.items():  # which envsolver each tree really imports
        where = subprocess.run(
            [sys.executable, "-c", "import envsolver; print(envsolver.__file__)"],
            env={**os.environ, "PYTHONPATH": str(src)},
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert where.startswith(str(src)), f"{name}: PYTHONPATH={src} imports {where}"
    times: dict[str, list[float]] = {name: [] for name in trees}
    for i in range(repeat):
        for name, src in trees.items():
            times[name].append(_make_process(work / f"p{name}{i}", work / f"pc{name}", profile, src))
    return {
        f"{name}{stat}": f(values)
        for name, values in times.items()
        for stat, f in (("", statistics.median), ("_min", min))
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--profile", default="a100")
    parser.add_argument("--install-packages", type=int, default=100)
    parser.add_argument("--processes", type=int, default=0, help="also time N whole make --offline processes")
    parser.add_argument("--baseline-src", type=Path, help="an older envsolver tree to time alternately")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envsolver-bench-"))
    try:
        make = bench_make(args.profile, args.repeat, work)
        inst = bench_install(args.install_packages, work)
        procs = bench_processes(args.profile, args.processes, work, args.baseline_src) if args.processes else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"machine: {platform.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"rattler {rattler.__version__ if hasattr(rattler, '__version__') else '?'}"
    )
    print(f"make --profile {args.profile} --offline ({int(make['packages'])} packages), median of {args.repeat}:")
    print(f"  bare rattler solve        {make['bare'] * 1000:8.1f} ms (min {make['bare_min'] * 1000:.1f})")
    print(f"  envsolver make (all)      {make['envsolver'] * 1000:8.1f} ms (min {make['envsolver_min'] * 1000:.1f})")
    print(f"  ratio envsolver / bare    {make['envsolver'] / make['bare']:8.2f}")
    print(f"install ({int(inst['packages'])} synthetic packages, {int(inst['files'])} files):")
    print(f"  cold cache (fetch+verify+extract+link) {inst['cold'] * 1000:8.1f} ms")
    print(f"  warm cache (link into a new prefix)    {inst['warm'] * 1000:8.1f} ms")
    print(f"  no-op re-install (median of 5)         {inst['noop'] * 1000:8.1f} ms")
    if procs:
        print(f"whole `envsolver make --profile {args.profile} --offline` processes, median of {args.processes}:")
        for name in ("current", "baseline"):
            if name in procs:
                print(f"  {name:<9} {procs[name] * 1000:8.1f} ms (min {procs[name + '_min'] * 1000:.1f})")
        if "baseline" in procs:
            print(f"  ratio current / baseline {procs['current'] / procs['baseline']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
