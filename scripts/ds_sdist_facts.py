#!/usr/bin/env python3
"""Read DeepSpeed's facts from its PyPI sdists and compare them with the knowledge base (deepspeed.yaml).

    python scripts/ds_sdist_facts.py [--cache DIR] [--since 0.14.0] [--json]

Every sdist from --since on PyPI's simple index is downloaded (once, into DIR, proven by PyPI's sha256) and read
without running it (envsolver/kb/upstream/sdists.py, which `python scripts/kb_audit.py --live` also runs):
requirements/requirements.txt (setup.py's install_requires), what setup.py appends to install_requires and under
which condition (ast), and op_builder/builder.py's cuda_minor_mismatch_ok. Consecutive
releases that say the same are grouped into the rows pypi_requirements holds. Prints the diff ('-' the KB, '+' the
sdists) and exits 0 when the KB agrees, 1 when it does not, 2 when PyPI cannot be reached or a file is unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envsolver.kb import default_kb
from envsolver.kb.upstream import sdists
from tests import dsmatrix


def facts(path: Path, version: str) -> dict[str, Any]:
    """The sdist's facts as envsolver/kb/upstream/sdists.py reads them (the audit's --live reads the same)."""
    found = sdists.read(path, version)
    mismatch = {int(major): list(minors) for major, minors in found.cuda_minor_mismatch_ok.items()}
    return {"requires": list(found.requires), "cuda_build_adds": list(found.cuda_build_adds), "mismatch": mismatch}


def rows(by_version: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive releases with the same requirements, as pypi_requirements rows (since, latest, requires, adds)."""
    out: list[dict[str, Any]] = []
    for version in sorted(by_version, key=Version):
        key = (by_version[version]["requires"], by_version[version]["cuda_build_adds"])
        if out and (out[-1]["requires"], out[-1]["cuda_build_adds"]) == key:
            out[-1]["latest"] = version
        else:
            out.append({"since": version, "latest": version, "requires": key[0], "cuda_build_adds": key[1]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=dsmatrix.cache_dir())
    parser.add_argument("--since", default="0.14.0")
    parser.add_argument("--json", action="store_true", help="print every release's facts as JSON")
    args = parser.parse_args()
    try:
        files = dsmatrix.index()
        wanted = sorted((v for v in files if Version(v) >= Version(args.since)), key=Version)
        by_version = {v: facts(dsmatrix.fetch_sdist(v, files, args.cache.resolve()), v) for v in wanted}
    except (dsmatrix.Unreachable, OSError, ValueError, KeyError, tarfile.TarError, sdists.WheelUnreadable) as exc:
        print(f"cannot read the sdists: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(by_version, indent=1))
        return 0
    kb = default_kb()
    ours = [
        {"since": str(r.since), "latest": str(r.latest), "requires": list(r.requires), "adds": list(r.cuda_build_adds)}
        for r in sorted(kb.deepspeed_requirements, key=lambda r: r.since)
    ]
    theirs = [
        {"since": r["since"], "latest": r["latest"], "requires": r["requires"], "adds": r["cuda_build_adds"]}
        for r in rows(by_version)
    ]
    diff = [f"- {json.dumps(r)}" for r in ours if r not in theirs]
    diff += [f"+ {json.dumps(r)}" for r in theirs if r not in ours]
    for version, found in by_version.items():
        release = next((r for r in kb.deepspeed_releases if r.since <= Version(version) <= r.latest), None)
        lists = release.cuda_minor_mismatch_ok if release else {}
        recorded = {m: sorted(str(v) for v in vs) for m, vs in lists.items()} if release else None
        if recorded != {m: sorted(vs) for m, vs in found["mismatch"].items()}:
            diff.append(f"- {version} cuda_minor_mismatch_ok {recorded}")
            diff.append(f"+ {version} cuda_minor_mismatch_ok {found['mismatch']}")
    print("\n".join(diff) if diff else f"the KB agrees with the {len(by_version)} sdists {wanted[0]}..{wanted[-1]}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
