#!/usr/bin/env python3
"""Kill real `envsolver make` runs mid-write, and run pairs at once into one --out; count mixed sets.

    python scripts/race_make.py [--kills 93] [--terms 20] [--pairs 20] [--stopped 10] [--seed 0] [-v]

--kills runs are killed (runs that end before their signal come on top, with new delays, until that many die by
it).

A trial's --out starts with the complete h100 set and a file of the user's (notes.txt); a `make --gpu a100
--offline` is started into it and signalled a spread-out delay after its first change to the directory: from 0
to the time an undisturbed run lives after that change (write_phase: the commit, then the summary and the exit;
about 20 ms on the development machine, the commit 5 to 20 of them). A pair starts `make --gpu a100` and
`make --gpu h100` into one empty --out at once; a stopped pair makes them overlap for sure by stopping the
first mid-write while the second runs.

Consistent means: the files of a set in the directory (every name a set may hold: environment.yml,
conda-lock.yml, virtual-packages.yml, conda-linux-64.lock and its .pip.txt), read as any reader reads them
(following links, as cat or conda do), are byte for byte the complete set one of the runs writes on its own (the
old set or the new one); the user's file is as it was; and once the next envsolver run on the directory has done
its repair (envsolver.lock.writers.fileset.repair), no temporary, journal or link is left. After a SIGKILL the set
is checked both as the killed run left it, before any repair (what the user's cat, conda-lock or conda reads),
and after the repair. "mid-commit" counts the kills that left the commit's links behind (they hit the window
in which an envsolver before the swap left a mix). tests/test_outputs.py runs a few trials of each kind through
this module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The names a set may hold (envsolver.lock.writers.setmark.MEMBER); what a100 and h100 write for linux-64 is
# the five of CORE and the pip companion.
MEMBER = re.compile(
    r"environment\.yml|conda-lock\.yml|virtual-packages\.yml|conda-[a-z0-9]+-[a-z0-9]+\.(?:lock|pip\.txt)"
)
CORE = ("environment.yml", "conda-lock.yml", "virtual-packages.yml", "conda-linux-64.lock", "conda-linux-64.pip.txt")
USER_FILE = ("notes.txt", b"the user's own file in --out\n")
SWAP = ".envsolver-swap"  # what a commit killed mid-swap leaves (envsolver.lock.writers.swap.SWAP)
LOCK_FILE = ".envsolver.lock"
POLL_S = 0.0003
RUN_S = [0.0]  # the longest undisturbed run, measured by references()


def make_argv(gpu: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "envsolver", "make", "--gpu", gpu, "--offline", "--out", str(out)]


def members(out: Path) -> dict[str, bytes]:
    """Every file of a set in OUT as a reader reads it (through links; a link to nothing is no file)."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if MEMBER.fullmatch(p.name) and p.is_file()}


def references(root: Path, gpus: tuple[str, ...] = ("a100", "h100")) -> dict[str, dict[str, bytes]]:
    """The complete set each target writes on its own, made by one undisturbed run each (timed in RUN_S)."""
    refs = {}
    for gpu in gpus:
        out = root / f"ref-{gpu}"
        started = time.monotonic()
        subprocess.run(make_argv(gpu, out), check=True, capture_output=True)
        RUN_S[0] = max(RUN_S[0], time.monotonic() - started)
        refs[gpu] = members(out)
        assert set(refs[gpu]) == set(CORE), f"the {gpu} run wrote {sorted(refs[gpu])}"
    return refs


def verdict(out: Path, refs: dict[str, dict[str, bytes]]) -> str:
    """The name of the reference set the directory holds byte for byte, else 'mixed: ...'."""
    found = members(out)
    for name, ref in refs.items():
        if found == ref:
            return name
    names = sorted(set(found).union(*refs.values()))
    parts = [f"{m}={next((n for n, r in refs.items() if r.get(m) == found.get(m)), 'other')}" for m in names]
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
    as_left: str  # the set as the run left it, read before any repair
    repaired: str  # ... and after the repair the next run does first
    leftovers: list[str]
    mid_commit: bool = False  # the run died with the commit's links in place
    user_file_kept: bool = True

    @property
    def consistent(self) -> bool:
        failed = self.kind.endswith("pair") and self.status != 0
        mixed = self.as_left.startswith("mixed") or self.repaired.startswith("mixed")
        return not failed and not mixed and not self.leftovers and self.user_file_kept


def kill_trial(root: Path, refs: dict[str, dict[str, bytes]], sig: int, delay_s: float, index: int) -> Trial:
    out = root / f"kill-{index}"
    shutil.copytree(root / "ref-h100", out)
    (out / USER_FILE[0]).write_bytes(USER_FILE[1])
    status = signal_when_writing(make_argv("a100", out), out, sig, delay_s)
    as_left = verdict(out, refs)
    mid_commit = (out / SWAP).exists()
    repaired = verdict(out, refs) if sig == signal.SIGKILL and repair(out) else as_left
    kept = (out / USER_FILE[0]).read_bytes() == USER_FILE[1]
    left = leftovers(out, sig != signal.SIGKILL)
    return Trial(signal.Signals(sig).name, delay_s, status, as_left, repaired, left, mid_commit, kept)


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


def write_phase(root: Path, runs: int = 3) -> float:
    """How long an undisturbed a100 run over the h100 set lives after its first change to the directory (the
    commit, then the summary and the exit): the median of RUNS, the spread of the kills' delays."""
    lived = []
    for index in range(runs):
        out = root / f"phase-{index}"
        shutil.copytree(root / "ref-h100", out)
        before = os.stat(out).st_mtime_ns
        proc = subprocess.Popen(make_argv("a100", out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and os.stat(out).st_mtime_ns == before:
            time.sleep(POLL_S)
        changed = time.monotonic()
        proc.wait()
        lived.append(time.monotonic() - changed)
    return sorted(lived)[len(lived) // 2]


def delays(count: int, rng: random.Random, spread_s: float = 0.03) -> list[float]:
    """Spread over the write phase: evenly from 0 to spread_s, each jittered, in a shuffled order."""
    values = [(i + rng.random()) * spread_s / max(count, 1) for i in range(count)]
    rng.shuffle(values)
    return values


def run(kills: int, terms: int, pairs: int, stopped: int, seed: int, root: Path) -> list[Trial]:
    rng = random.Random(seed)
    refs = references(root)
    spread = write_phase(root) if kills or terms else 0.0
    trials = [kill_trial(root, refs, signal.SIGKILL, d, i) for i, d in enumerate(delays(kills, rng, spread))]
    while sum(t.status == -signal.SIGKILL for t in trials) < kills:  # a run that ended first was not killed
        trials.append(kill_trial(root, refs, signal.SIGKILL, rng.uniform(0, spread), 1000 + len(trials)))
    trials += [kill_trial(root, refs, signal.SIGTERM, d, kills + i) for i, d in enumerate(delays(terms, rng, spread))]
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
        mid = sum(1 for t in some if t.mid_commit)
        mixed_left = sum(1 for t in some if t.as_left.startswith("mixed"))
        bad = sum(1 for t in some if not t.consistent)
        lines.append(
            f"{kind}: {len(some)} runs ({killed} died by the signal, {mid} of them mid-commit); mixed as left: "
            f"{mixed_left}; inconsistent (mixed as left or after the repair, files left, the user's file "
            f"changed): {bad}"
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
            head = f"{t.kind} {t.delay_s * 1000:5.1f} ms exit {t.status}{' mid-commit' if t.mid_commit else ''}"
            print(f"{head}: {t.as_left} -> {t.repaired} {t.leftovers}")
    print(summary(trials))
    return 0 if all(t.consistent for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
