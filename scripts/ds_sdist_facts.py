#!/usr/bin/env python3
"""Read DeepSpeed's facts from its PyPI sdists and compare them with the knowledge base (deepspeed.yaml).

    python scripts/ds_sdist_facts.py [--cache DIR] [--since 0.14.0] [--json]

Every sdist from --since on PyPI's simple index is downloaded (once, into DIR, proven by PyPI's sha256) and read
without running it: requirements/requirements.txt (setup.py's install_requires), what setup.py appends to
install_requires and under which condition (ast), and op_builder/builder.py's cuda_minor_mismatch_ok. Consecutive
releases that say the same are grouped into the rows pypi_requirements holds. Prints the diff ('-' the KB, '+' the
sdists) and exits 0 when the KB agrees, 1 when it does not, 2 when PyPI cannot be reached or a file is unreadable.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envsolver.kb import default_kb
from tests import dsmatrix

MAX_MEMBER = 1 << 20


def member(archive: tarfile.TarFile, version: str, name: str) -> str:
    info = archive.getmember(f"deepspeed-{version}/{name}")
    if not info.isfile() or info.size > MAX_MEMBER:
        raise ValueError(f"{name} in deepspeed-{version}.tar.gz is not a small regular file")
    handle = archive.extractfile(info)
    assert handle is not None
    return handle.read().decode("utf-8")


def appended(setup: str) -> list[tuple[str, str]]:
    """(requirement, the condition's source) for each `install_requires.append('X')` under an `if` in setup.py."""
    found = []
    for node in ast.walk(ast.parse(setup)):
        if not isinstance(node, ast.If):
            continue
        for child in node.body:
            call = child.value if isinstance(child, ast.Expr) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "install_requires"
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                found.append((str(call.args[0].value), ast.get_source_segment(setup, node.test) or ""))
    return found


def mismatch_ok(builder: str) -> dict[int, list[str]]:
    for node in ast.parse(builder).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "cuda_minor_mismatch_ok" for t in node.targets):
            value: dict[int, list[str]] = ast.literal_eval(node.value)
            return value
    return {}


def facts(path: Path, version: str) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(path.read_bytes()), mode="r:gz") as archive:
        lines = member(archive, version, "requirements/requirements.txt").splitlines()
        setup = member(archive, version, "setup.py")
        builder = member(archive, version, "op_builder/builder.py")
    requires = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    extra = appended(setup)
    strange = [cond for _, cond in extra if "device_name() == 'cuda'" not in cond]
    if strange or "fetch_requirements('requirements/requirements.txt')" not in setup:
        raise ValueError(f"deepspeed {version}: setup.py's install_requires is not the file plus CUDA appends")
    return {"requires": requires, "cuda_build_adds": [r for r, _ in extra], "mismatch": mismatch_ok(builder)}


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
    except (dsmatrix.Unreachable, OSError, ValueError, KeyError, tarfile.TarError) as exc:
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
