#!/usr/bin/env python3
"""Benchmark: `envsolver install` against a bare rattler install of the same lock, whole fresh processes.

    python bench/bench_install.py [--repeat 5] [--packages 100] [--big-mib 64] [--format conda|tar.bz2]

The channel holds `--packages` small synthetic packages (20 files each, tests/conda_packages.py) and one package
with a `--big-mib` MiB payload of incompressible bytes, so that hashing and copying archives shows. Every run
is a new process on a new prefix, alternating in one run:
  - bare:  `python -c` that reads the lock's records and calls rattler.install with an empty package cache
           (what rattler does alone: fetch from the file:// channel, extract, link; no envsolver checks);
  - cold:  `envsolver install LOCK -p PREFIX --no-hook` with an empty cache: fetch, sha256, read and check every
           archive (envsolver.install.archive), extract and link;
  - warm:  the same with the proven archives already in envsolver's cache (each still re-hashed as it is
           copied to the staging directory);
  - no-op: the same command again on the installed prefix, as `python -m envsolver` and as the `envsolver`
           console script beside this Python (where one is installed), with `python -c pass` timed in the same
           loop: the interpreter's own start, which no envsolver change can take away.
Reported: medians (and the no-ops' minimums), the ratios to bare, and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
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

from envsolver.lock.solve import ChannelSource, index_channel, solve  # noqa: E402
from envsolver.lock.writers import condalock  # noqa: E402
from tests.conda_packages import build_package  # noqa: E402

BARE = """
import asyncio, sys, rattler
from rattler.package.build_string import BuildString
from envsolver.lock import lockfile
lock = lockfile.read(__import__("pathlib").Path(sys.argv[1]), None)
records = []
for e in lock.entries:
    package = rattler.PackageRecord(
        name=e.name, version=e.version, build=BuildString(e.build), build_number=0, subdir=e.subdir,
        depends=list(e.depends), sha256=bytes.fromhex(e.sha256) if e.sha256 else None,
    )
    records.append(rattler.RepoDataRecord(package, e.file_name, e.url, e.url.rsplit("/", 2)[0]))
asyncio.run(rattler.install(records, sys.argv[2], cache_dir=sys.argv[3], execute_link_scripts=False,
                            show_progress=False))
"""


def build_lock(work: Path, packages: int, big_mib: int, fmt: str) -> Path:
    channel = work / "channel"
    for i in range(packages):
        files = {f"share/bench{i}/file{j}.txt": f"package {i} file {j}\n" * 50 for j in range(20)}
        build_package(channel, f"bench-pkg{i}", "1.0", files, fmt=fmt)
    payload = os.urandom(big_mib << 19).hex()  # random hex: compresses to about half, like binaries do
    build_package(channel, "bench-big", "1.0", {"share/big/blob.txt": payload}, fmt=fmt)
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    specs = [f"bench-pkg{i}" for i in range(packages)] + ["bench-big"]
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(specs, [source], "linux-64", {"__unix": "0"}, work / "solve-cache")
    path = work / "conda-lock.yml"
    path.write_text(condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, {}, "b", "b"))
    return path


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--packages", type=int, default=100)
    parser.add_argument("--big-mib", type=int, default=64)
    parser.add_argument("--format", choices=["conda", "tar.bz2"], default="conda")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envsolver-bench-install-"))
    before = os.getloadavg()
    try:
        lock = build_lock(work, args.packages, args.big_mib, args.format)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        envsolver = [sys.executable, "-m", "envsolver", "install", str(lock), "--no-hook", "-p"]
        warm_cache = work / "warm-cache"
        subprocess.run(
            [*envsolver, str(work / "prime")], check=True, env={**env, "ENVSOLVER_CACHE_DIR": str(warm_cache)}
        )
        script = Path(sys.executable).parent / "envsolver"
        console = [str(script), "install", str(lock), "--no-hook", "-p"] if script.is_file() else None
        runs: dict[str, list[float]] = {"bare": [], "cold": [], "warm": [], "noop": [], "script": [], "pass": []}
        for i in range(args.repeat):
            runs["bare"].append(
                timed([sys.executable, "-c", BARE, str(lock), str(work / f"bare{i}"), str(work / f"bc{i}")], env)
            )
            cold = {**env, "ENVSOLVER_CACHE_DIR": str(work / f"cc{i}")}
            runs["cold"].append(timed([*envsolver, str(work / f"cold{i}")], cold))
            warm = {**env, "ENVSOLVER_CACHE_DIR": str(warm_cache)}
            runs["warm"].append(timed([*envsolver, str(work / f"warm{i}")], warm))
            runs["noop"].append(timed([*envsolver, str(work / f"warm{i}")], warm))
            if console is not None:
                runs["script"].append(timed([*console, str(work / f"warm{i}")], warm))
            runs["pass"].append(timed([sys.executable, "-c", "pass"], env))
            for name in (f"bare{i}", f"bc{i}", f"cold{i}", f"cc{i}", f"warm{i}"):
                shutil.rmtree(work / name, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}"
    print(f"machine: {machine}, Python {platform.python_version()}")
    print(f"load average {before[0]:.2f} {before[1]:.2f} {before[2]:.2f} at the start, {load[0]:.2f} at the end")
    what = f"{args.packages} small packages + one of {args.big_mib} MiB, .{args.format}"
    print(f"install of {what}, median of {args.repeat} fresh processes:")
    for key, label in (
        ("bare", "bare rattler.install, empty cache"),
        ("cold", "envsolver install, empty cache"),
        ("warm", "envsolver install, proven archives cached"),
        ("noop", "envsolver install, prefix up to date"),
        ("script", "the same, `envsolver` console script"),
        ("pass", "python -c pass"),
    ):
        if key in med:
            least = f"   min {min(runs[key]):5.3f} s" if key in ("noop", "script", "pass") else ""
            print(f"  {label:45s} {med[key]:7.3f} s   ratio to bare {med[key] / med['bare']:5.2f}{least}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
