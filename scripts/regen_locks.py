#!/usr/bin/env python3
"""Regenerate locks/: for every profile, `envsolver make --profile NAME --offline` into locks/NAME/.

    python scripts/regen_locks.py [--out locks]

Profiles the bundled snapshot cannot lock are listed, with the reason, in OUT/SKIPPED.md. The files are
deterministic, so a rerun on unchanged inputs rewrites nothing (tests/test_locks_dir.py checks this).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envsolver.core.errors import EnvsolverError
from envsolver.kb import default_kb
from envsolver.lock import outputs
from envsolver.lock import run as lock
from envsolver.resolve import profile
from envsolver.resolve.inputs import Options, build_target, make_command

ROOT = Path(__file__).resolve().parent.parent


def regenerate(out: Path, cache: Path) -> list[tuple[str, str]]:
    """Write OUT/<profile>/ for every profile the snapshot can lock; return the (profile, reason) skipped."""
    kb = default_kb()
    skipped = []
    for name in profile.available():
        inputs = build_target(Options(profile=name), kb)
        try:
            result = lock.lock(inputs.target, kb, "offline", (), cache, lambda _: None)
        except EnvsolverError as exc:
            skipped.append((name, str(exc).splitlines()[0]))
            continue
        command = make_command(inputs.target, offline=True)
        outputs.write_all(result, kb, out / name, command, None, force=True)
    lines = [
        "# Profiles the bundled snapshot cannot lock",
        "",
        "Written by scripts/regen_locks.py. Each needs packages the snapshot does not hold.",
        "",
    ]
    lines += [f"- `{name}`: {reason}" for name, reason in skipped] or ["(none)"]
    (out / "SKIPPED.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "locks")
    parser.add_argument("--cache", type=Path, default=outputs.cache_dir())
    args = parser.parse_args(argv)
    skipped = regenerate(args.out, args.cache)
    locked = sorted(p.name for p in args.out.iterdir() if p.is_dir())
    print(f"locked: {', '.join(locked)}")
    for name, reason in skipped:
        print(f"skipped {name}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
