#!/usr/bin/env python3
"""Where `envsolver make --gpu GPU --offline` spends its own CPU: each step of the parent process, timed in-process.

    python bench/make_breakdown.py [--repeat 5] [--gpu v100]

Each repeat is a fresh Python process (imports are only cold once) that does make's steps in make's order and
notes time.process_time() (this process's CPU, which other load on the machine moves less than the wall clock)
after each: the imports (lock.worker_call, which the early prestart needs; the CLI; the locker and resolver), the
compiled KB, the target, the KB restricted to the snapshot, the plan, the solve (the parent's part only: sending
the request and reading the answer; the worker's CPU is not in it), then what runs after the answer: importing the
writers (make does that while rattler solves), rendering the four texts, and committing them to a new directory
(fsyncs included). One cache directory is used for all repeats, warmed by a first untimed run. Reported: the
median per step, in ms of CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """\
import json, sys, time
from pathlib import Path
T = time.process_time
marks = [("start", T())]
def mark(name):
    marks.append((name, T()))
from envsolver.lock import worker_call
mark("import lock.worker_call (the early prestart's)")
import envsolver.cli.main
mark("import the CLI (click, envsolver.cli.main)")
from envsolver.cli import render
from envsolver.lock import run as lock
from envsolver.resolve import detect
from envsolver.resolve.inputs import Options, build_target
mark("import cli.render, lock.run, the resolver, the KB model")
from envsolver.cli.main import default_kb
kb = default_kb()
mark("the compiled KB")
target = build_target(Options(gpus=(sys.argv[1],)), kb).target
mark("the target")
restricted = lock._restricted(kb)
mark("the KB restricted to the snapshot")
from envsolver.resolve.run import choose
choose(target, restricted, advise=False)
mark("the plan")
result = lock.lock(target, kb, "offline", (), Path(sys.argv[2]), lambda _: None)
mark("lock (the plan again, the solve's round trip, the checks)")
from envsolver.lock import outputs
mark("after the answer: import the writers (make: during the solve)")
texts = outputs.render_all(result, kb, "envsolver make", None)
mark("after the answer: render the four texts")
from envsolver.lock.writers import fileset
fileset.commit(Path(sys.argv[3]), texts, force=False, command="envsolver make")
mark("after the answer: commit the files (fsyncs included)")
print(json.dumps([(name, t - prev) for (name, t), (_, prev) in zip(marks[1:], marks)]))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gpu", default="v100")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envsolver-make-breakdown-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENVSOLVER_CACHE_DIR": str(work / "cache")}
    steps: dict[str, list[float]] = {}
    for i in range(-1, args.repeat):  # -1 warms the caches
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.gpu, str(work / "rattler"), str(work / f"out{i}")],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if i >= 0:
            for name, seconds in json.loads(out):
                steps.setdefault(name, []).append(seconds)
    load = os.getloadavg()
    print(f"make --gpu {args.gpu} --offline, parent CPU per step, median of {args.repeat} fresh processes")
    print(f"(load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end)")
    for name, values in steps.items():
        print(f"  {statistics.median(values) * 1000:7.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
