#!/usr/bin/env python3
"""Kill real `envsolver make` runs mid-write, and run pairs at once into one --out; count mixed sets.

    python scripts/race_make.py [--kills 93] [--terms 20] [--pairs 20] [--stopped 10] [--seed 0] [-v]

A trial's --out starts with the complete h100 set; a `make --gpu a100 --offline` is started into it and
signalled a spread-out delay after its first change to the directory (the write phase). A pair starts
`make --gpu a100` and `make --gpu h100` into one empty --out at once; a stopped pair makes them overlap for
sure by stopping the first mid-write while the second runs.

Consistent means: the directory's environment.yml, conda-lock.yml and conda-linux-64.lock are, byte for
byte, the complete set one of the runs writes on its own (the old set or the new one), and no temporary
or journal file is left. After a SIGKILL the set is checked twice: as the killed run left it, and after
the repair that the next envsolver run on the directory does first (envsolver.lock.writers.fileset.repair,
when that module exists). tests/test_outputs.py runs a few trials of each kind through this module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MEMBERS = ("environment.yml", "conda-lock.yml", "conda-linux-64.lock")
LOCK_FILE = ".envsolver.lock"
POLL_S = 0.0003
RUN_S = [0.0]  # the longest undisturbed run, measured by references()


def make_argv(gpu: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "envsolver", "make", "--gpu", gpu, "--offline", "--out", str(out)]


def members(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in MEMBERS if (out / name).is_file()}


def references(root: Path, gpus: tuple[str, ...] = ("a100", "h100")) -> dict[str, dict[str, bytes]]:
    """The complete set each target writes on its own, made by one undisturbed run each (timed in RUN_S)."""
    refs = {}
    for gpu in gpus:
        out = root / f"ref-{gpu}"
        started = time.monotonic()
        subprocess.run(make_argv(gpu, out), check=True, capture_output=True)
        RUN_S[0] = max(RUN_S[0], time.monotonic() - started)
        refs[gpu] = members(out)
        assert set(refs[gpu]) == set(MEMBERS), f"the {gpu} run wrote {sorted(refs[gpu])}"
    return refs


def verdict(out: Path, refs: dict[str, dict[str, bytes]]) -> str:
    """The name of the reference set the directory holds byte for byte, else 'mixed: ...'."""
    found = members(out)
    for name, ref in refs.items():
        if found == ref:
            return name
    parts = [f"{m}={next((n for n, r in refs.items() if r.get(m) == found.get(m)), 'other')}" for m in MEMBERS]
    return "mixed: " + ", ".join(parts)


def leftovers(out: Path, lock_file_allowed: bool = False) -> list[str]:
    """Hidden files left in `out`. The lock file is allowed after a SIGTERM before the commit began (the
    next run takes it over and removes it); a repair or a run that ends removes it."""
    allowed = {LOCK_FILE} if lock_file_allowed else set()
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".") and p.name not in allowed)


def repair(out: Path) -> bool:
    """Run the repair the next envsolver run does; False when this checkout has no such step."""
    if importlib.util.find_spec("envsolver.lock.writers.fileset") is None:
        return False
    from envsolver.lock.writers import fileset

    fileset.repair(out)
    return True


def holds_open(pid: int, path: Path) -> bool:
    """True when process `pid` has `path` open (the second run of a pair waiting on the lock file)."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(path):
                    return True
    return False


def signal_when_writing(argv: list[str], out: Path, sig: int, delay_s: float) -> int:
    """Start argv, send `sig` `delay_s` after the first change to `out`'s entries; return its exit status."""
    before = os.stat(out).st_mtime_ns
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        if os.stat(out).st_mtime_ns != before:
            if delay_s:
                time.sleep(delay_s)
            proc.send_signal(sig)
            break
        time.sleep(POLL_S)
    return proc.wait()


@dataclass
class Trial:
    kind: str
    delay_s: float
    status: int
    as_left: str
    repaired: str
    leftovers: list[str]

    @property
    def consistent(self) -> bool:
        failed = self.kind.endswith("pair") and self.status != 0
        return not failed and not self.repaired.startswith("mixed") and not self.leftovers


def kill_trial(root: Path, refs: dict[str, dict[str, bytes]], sig: int, delay_s: float, index: int) -> Trial:
    out = root / f"kill-{index}"
    shutil.copytree(root / "ref-h100", out)
    status = signal_when_writing(make_argv("a100", out), out, sig, delay_s)
    as_left = verdict(out, refs)
    repaired = verdict(out, refs) if sig == signal.SIGKILL and repair(out) else as_left
    return Trial(signal.Signals(sig).name, delay_s, status, as_left, repaired, leftovers(out, sig != signal.SIGKILL))


def pair_trial(root: Path, refs: dict[str, dict[str, bytes]], index: int) -> Trial:
    """Both targets into one empty --out at once; both must succeed and leave one complete set."""
    out = root / f"pair-{index}"
    out.mkdir()
    procs = [subprocess.Popen(make_argv(g, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for g in refs]
    statuses = [p.wait() for p in procs]
    as_left = verdict(out, refs)
    return Trial("pair", 0.0, max(statuses, key=abs), as_left, as_left, leftovers(out))


def stopped_pair_trial(root: Path, refs: dict[str, dict[str, bytes]], delay_s: float, index: int) -> Trial:
    """A pair that overlaps for sure: the a100 run is stopped (SIGSTOP) `delay_s` into its write phase, the
    h100 run is started and given its full run time (or until it ends), then the a100 run continues. Both
    must succeed and leave one complete set."""
    out = root / f"stopped-{index}"
    out.mkdir()
    first = subprocess.Popen(make_argv("a100", out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = os.stat(out).st_mtime_ns
    while first.poll() is None and os.stat(out).st_mtime_ns == before:
        time.sleep(POLL_S)
    time.sleep(delay_s)
    first.send_signal(signal.SIGSTOP)
    second = subprocess.Popen(make_argv("h100", out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 2 * RUN_S[0] + 1
    while second.poll() is None and time.monotonic() < deadline and not holds_open(second.pid, out / LOCK_FILE):
        time.sleep(0.01)  # until the second ends, or waits on the directory's lock, or has had its run time
    first.send_signal(signal.SIGCONT)
    statuses = [first.wait(), second.wait()]
    as_left = verdict(out, refs)
    return Trial("stopped pair", delay_s, max(statuses, key=abs), as_left, as_left, leftovers(out))


def delays(count: int, rng: random.Random, spread_s: float = 0.03) -> list[float]:
    """Spread over the write phase: evenly from 0 to spread_s, each jittered, in a shuffled order."""
    values = [(i + rng.random()) * spread_s / max(count, 1) for i in range(count)]
    rng.shuffle(values)
    return values


def run(kills: int, terms: int, pairs: int, stopped: int, seed: int, root: Path) -> list[Trial]:
    rng = random.Random(seed)
    refs = references(root)
    trials = [kill_trial(root, refs, signal.SIGKILL, d, i) for i, d in enumerate(delays(kills, rng))]
    trials += [kill_trial(root, refs, signal.SIGTERM, d, kills + i) for i, d in enumerate(delays(terms, rng))]
    trials += [pair_trial(root, refs, i) for i in range(pairs)]
    trials += [stopped_pair_trial(root, refs, d, i) for i, d in enumerate(delays(stopped, rng))]
    return trials


def summary(trials: list[Trial]) -> str:
    lines = []
    for kind in ("SIGKILL", "SIGTERM", "pair", "stopped pair"):
        some = [t for t in trials if t.kind == kind]
        if not some:
            continue
        killed = sum(1 for t in some if t.status < 0)
        mixed_left = sum(1 for t in some if t.as_left.startswith("mixed"))
        bad = sum(1 for t in some if not t.consistent)
        lines.append(
            f"{kind}: {len(some)} runs ({killed} died by the signal); mixed as left: {mixed_left}; "
            f"inconsistent (mixed after any repair, or files left): {bad}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=93)
    parser.add_argument("--terms", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stopped", type=int, default=10, help="Pairs whose first run is stopped mid-write.")
    parser.add_argument("-v", "--verbose", action="store_true", help="One line per trial.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="race-make-") as tmp:
        trials = run(args.kills, args.terms, args.pairs, args.stopped, args.seed, Path(tmp))
    if args.verbose:
        for t in trials:
            print(f"{t.kind} {t.delay_s * 1000:5.1f} ms exit {t.status}: {t.as_left} -> {t.repaired} {t.leftovers}")
    print(summary(trials))
    return 0 if all(t.consistent for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
