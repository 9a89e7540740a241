#!/usr/bin/env python3
"""Bundle prefix-dev/parselmouth's conda-forge -> PyPI name mapping, unchanged, with where it came from.

    python scripts/build_conda_pypi_map.py --git CLONE [--commit SHA] [--out envsolver/kb/data/condamap]

CLONE is a git clone (bare or not) of https://github.com/prefix-dev/parselmouth. The script copies
files/v0/conda-forge/compressed_mapping.json (conda-forge package name -> the PyPI names of the Python
distributions its packages install, or null for none; parselmouth reads them from each package's *.dist-info)
and the repository's LICENSE (BSD-3-Clause, which asks that the notice travel with the data) byte for byte from
that commit, checks the mapping's shape, and writes provenance.json (repository, commit, its date, path, license,
sha256, entry count). envsolver.kb.condamap reads these files when a PyPI part is resolved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO = "https://github.com/prefix-dev/parselmouth"
MAPPING = "files/v0/conda-forge/compressed_mapping.json"
LICENSE = "LICENSE"


def git(clone: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(clone), *args], check=True, capture_output=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--git", type=Path, required=True, help="a clone of prefix-dev/parselmouth")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path, default=ROOT / "envsolver" / "kb" / "data" / "condamap")
    args = parser.parse_args()
    commit = git(args.git, "rev-parse", f"{args.commit}^{{commit}}").decode().strip()
    date = git(args.git, "show", "-s", "--format=%cI", commit).decode().strip()
    data = git(args.git, "show", f"{commit}:{MAPPING}")
    license_text = git(args.git, "show", f"{commit}:{LICENSE}")
    mapping = json.loads(data)
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and (v is None or (isinstance(v, list) and all(isinstance(n, str) for n in v)))
        for k, v in mapping.items()
    ):
        print(f"{MAPPING} at {commit} is not an object of name -> list of names or null", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compressed_mapping.json").write_bytes(data)
    (args.out / "LICENSE").write_bytes(license_text)
    provenance = {
        "description": "conda-forge package name -> the PyPI names of the Python distributions it installs (null: "
        "none), copied unchanged by scripts/build_conda_pypi_map.py",
        "repository": REPO,
        "commit": commit,
        "commit_date": date,
        "path": MAPPING,
        "license": "BSD-3-Clause (LICENSE beside this file, copied from the same commit)",
        "sha256": hashlib.sha256(data).hexdigest(),
        "entries": len(mapping),
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {len(mapping)} entries from {REPO} at {commit} ({date})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
