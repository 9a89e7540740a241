#!/usr/bin/env python3
"""Build the bundled snapshot of PyPI's simple pages for the projects envsolver's plans take from PyPI.

    python scripts/build_pypi_snapshot.py [--out envsolver/lock/pypi/data] [--since 0.14.0]

Reads each project's PEP 691 JSON simple page from https://pypi.org/simple/PROJECT/ and keeps the entries of
its releases from --since on (the releases the knowledge base covers), as PyPI gives them (file name, URL,
sha256, size, upload time, Requires-Python, yanked): nothing is edited. `make --offline`, and `make` when the
index cannot be reached, lock a plan's PyPI part from these pages. Output is deterministic for the same page.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import urllib.request
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envsolver.net.pypi_index import name_version  # noqa: E402

PROJECTS = ("deepspeed",)
KEEP = ("filename", "url", "hashes", "requires-python", "size", "upload-time", "yanked")


def page(project: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"https://pypi.org/simple/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        doc: dict[str, object] = json.loads(response.read(64 << 20))
    return doc


def keep(entry: dict[str, object], since: Version) -> bool:
    found = name_version(str(entry.get("filename", "")))
    if found is None:
        return False
    try:
        return Version(found[1]) >= since
    except InvalidVersion:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "envsolver" / "lock" / "pypi" / "data")
    parser.add_argument("--since", default="0.14.0", help="the oldest release kept")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for project in PROJECTS:
        doc = page(project)
        files = [
            {k: f[k] for k in KEEP if k in f}
            for f in doc["files"]  # type: ignore[union-attr]
            if isinstance(f, dict) and keep(f, Version(args.since))
        ]
        out = {
            "project": project,
            "index": f"https://pypi.org/simple/{project}/",
            "fetched": today,
            "meta": doc.get("meta"),
            "since": args.since,
            "files": sorted(files, key=lambda f: str(f["filename"])),
        }
        path = args.out / f"{project}.json"
        path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{path}: {len(files)} files of {project} from {args.since} on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
