#!/usr/bin/env python3
"""The DeepSpeed release matrix here (no GPU): each release from PyPI's sdist, built without ops, in its own venv
with the CPU torch 2.13.0, checked through verify's probe, the hook's registration on DeepSpeed's CPU accelerator and
`envsolver verify --check deepspeed_ops` (what each column checks: tests/dsmatrix.py). Prints the table.

    python bench/ds_matrix.py [--releases 0.18.9,0.19.8] [--cache DIR] [--json FILE]
    python bench/ds_matrix.py --gpu-wheels DIR [--no-matrix]   # also (or only): what bench/gpu_ds_matrix.sh takes

The same matrix runs as tests: `python -m pytest -m deepspeed_matrix tests/test_ds_matrix.py`. Exit 0 when every
cell is right, 1 when one is not, 2 when PyPI cannot be reached.
--gpu-wheels DIR: the newest three releases' wheels (as built here) and sdists, and the packages the GPU image
lacks (hjson, pydantic and its parts, platformdirs for envsolver itself) for Python 3.12 on x86-64, with SHA256SUMS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envsolver.kb import default_kb
from tests import dsmatrix

# What the GPU image lacks for DeepSpeed and envsolver (device/KINDS.md's package list), at the versions pip
# resolves here for Python 3.12.
GPU_EXTRA = (
    "hjson==3.1.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
    "platformdirs",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def gpu_wheels(out: Path, cache: Path, files: dict[str, tuple[str, str]]) -> None:
    """The GPU run's files: each release's wheel as built here and its sdist (the GPU run builds it once more on
    DeepSpeed's CUDA accelerator), the extra wheels, and SHA256SUMS over all of them."""
    out.mkdir(parents=True, exist_ok=True)
    for version in dsmatrix.GPU_RELEASES:
        sdist = dsmatrix.fetch_sdist(version, files, cache)
        shutil.copy2(dsmatrix.build_wheel(sdist, cache / "wheels"), out)
        shutil.copy2(sdist, out)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
            "3.12", "--implementation", "cp", "-d", str(out)]  # fmt: skip
    for tag in PLATFORMS:
        argv += ["--platform", tag]
    subprocess.run([*argv, *GPU_EXTRA], check=True)
    found = sorted(p for p in out.iterdir() if p.name.endswith((".whl", ".tar.gz")))
    sums = [f"{dsmatrix.sha256_of(p)}  {p.name}" for p in found]
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    print("\n".join(sums))


def machine() -> str:
    with open("/proc/loadavg") as handle:
        load = " ".join(handle.read().split()[:3])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cpus = len(os.sched_getaffinity(0))
    return f"{when}; {platform.machine()}, {cpus} CPUs, load {load}; python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", default=",".join(dsmatrix.RELEASES))
    parser.add_argument("--cache", type=Path, default=dsmatrix.cache_dir())
    parser.add_argument("--json", type=Path, help="write every result and the facts behind it here")
    parser.add_argument("--gpu-wheels", type=Path, help="write the GPU run's wheels and sdists here")
    parser.add_argument("--no-matrix", action="store_true", help="with --gpu-wheels: only write those")
    args = parser.parse_args()
    args.cache = args.cache.resolve()
    try:
        files = dsmatrix.index()
    except dsmatrix.Unreachable as exc:
        print(f"PyPI cannot be reached: {exc}", file=sys.stderr)
        return 2
    kb = default_kb()
    if args.gpu_wheels:
        gpu_wheels(args.gpu_wheels.resolve(), args.cache, files)
        if args.no_matrix:
            return 0
    print(machine(), flush=True)
    results = []
    for version in args.releases.split(","):
        results.append(dsmatrix.run_release(kb, version, files, args.cache, lambda m: print(m, flush=True)))
        print(dsmatrix.table(results[-1:]).splitlines()[-1], flush=True)
    print(dsmatrix.table(results))
    if args.json:
        doc = [{"release": r.release, "cells": r.cells, "problems": r.problems, "seconds": r.seconds,
                "facts": r.facts} for r in results]  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
