#!/usr/bin/env python3
"""The verdicts of bench/gpu_ds_matrix.sh: reads what it wrote for each release in WORK and writes OUT/summary.txt
(the table) and OUT/results.json (every document). Exit 0 when every cell passed, 1 otherwise.

    python3 bench/gpu_ds_matrix_report.py WORK OUT 0.17.6 0.18.9 0.19.8

Per release, WORK holds hook-V.json and hook-V.rc (`envsolver hook --json`, its exit code and seconds),
probe-V.json (verify's probe after the hook), verify-V.json and verify-V.rc (`envsolver verify --check
deepspeed_ops --gpu-test --json`), and cuda-wheel-V/*.whl (the sdist built on DeepSpeed's CUDA accelerator).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import zipfile
from typing import Any

from packaging.version import Version

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envsolver.kb import default_kb
from envsolver.resolve import deepspeed as ds_rules

OPS = ("fused_adam", "cpu_adam", "fused_lamb")
CPU_OPS = ("cpu_adam",)  # no GPU code: no SASS to list
COLUMNS = ("hook", "probe", "verify", "CUDA build requires")
Cell = tuple[bool, str]


def read(work: str, name: str) -> Any:
    """A JSON document, or the words of a .rc file; {"unreadable": why} when it cannot be read."""
    try:
        with open(os.path.join(work, name), encoding="utf-8") as handle:
            text = handle.read()
        return json.loads(text) if name.endswith(".json") else text.split()
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{name}: {exc}"}


def hook_cell(hook: Any, rc: Any) -> Cell:
    ops = hook.get("ops", []) if isinstance(hook, dict) else []
    proven = [
        o["op"]
        for o in ops
        if o.get("ok") and o.get("source") == "built" and (o["op"] in CPU_OPS or 90 in (o.get("sass") or []))
    ]
    seconds = rc[1] if isinstance(rc, list) and len(rc) > 1 else "?"
    code = rc[0] if isinstance(rc, list) and rc else "?"
    # the hook runs FusedAdam against torch's AdamW where it sees a GPU (/proc/driver/nvidia/version); verify's
    # --gpu-test runs the same check in its own column
    adam = hook.get("gpu_check") if isinstance(hook, dict) else None
    ok = code == "0" and sorted(proven) == sorted(OPS) and (adam is None or bool(adam.get("ok")))
    done = ",".join(proven) or "none"
    check = "not run" if adam is None else ("passed" if adam.get("ok") else f"failed: {adam}")
    return ok, f"rc {code}, built+registered+proven {done} (sm_90), its AdamW check {check}, {seconds} s"


def probe_cell(version: str, probe: Any) -> Cell:
    ds = probe.get("deepspeed", {}) if isinstance(probe, dict) else {}
    new = Version(version) >= Version("0.19.8")
    where = "deepspeed.ops.__compatible_ops__" if new else "deepspeed.git_version_info"
    installed = sorted(k for k, v in (ds.get("installed_ops") or {}).items() if v)
    errors = [k for k in ds if k == "error" or k.endswith("_error")]
    ok = (
        not errors
        and (ds.get("version"), ds.get("accelerator"), ds.get("compatible_ops_from")) == (version, "cuda", where)
        and set(OPS) <= set(installed)
        and ds.get("fused_adam_loads") is True
    )
    seen = f"{ds.get('version')} on {ds.get('accelerator')!r}, {ds.get('compatible_ops_from')}, "
    seen += f"installed {','.join(installed)}"
    return ok, seen + (f"; errors: {', '.join(errors)}" if errors else "")


def verify_cell(verify: Any, rc: Any) -> Cell:
    checks = verify.get("checks") or [] if isinstance(verify, dict) else []
    check = next((c for c in checks if c.get("id") == "deepspeed_ops"), {})
    code = rc[0] if isinstance(rc, list) and rc else "?"
    ok = code == "0" and check.get("status") == "pass" and "match AdamW" in str(check.get("detail"))
    return ok, f"rc {code}, {check.get('status')}: {check.get('detail')}"


def requires_cell(kb: Any, work: str, version: str) -> tuple[Cell, list[str] | None]:
    wheels = glob.glob(os.path.join(work, f"cuda-wheel-{version}", "*.whl"))
    if not wheels:
        return (False, "not built"), None
    with zipfile.ZipFile(wheels[0]) as archive:
        meta = archive.read(f"deepspeed-{version}.dist-info/METADATA").decode()
    have = [
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    want = [str(r) for r in ds_rules.requirements_of(kb, Version(version), cuda_build=True) or ()]
    plain = [str(r) for r in ds_rules.requirements_of(kb, Version(version), cuda_build=False) or ()]
    added = ", ".join(r for r in have if r not in plain) or "nothing"
    return (have == want, f"as the KB: adds {added}" if have == want else f"{have}, the KB says {want}"), have


def main(argv: list[str]) -> int:
    work, out, releases = argv[0], argv[1], argv[2:]
    kb = default_kb()
    docs: dict[str, Any] = {}
    rows = []
    for v in releases:
        hook, hook_rc = read(work, f"hook-{v}.json"), read(work, f"hook-{v}.rc")
        verify, verify_rc = read(work, f"verify-{v}.json"), read(work, f"verify-{v}.rc")
        probe = read(work, f"probe-{v}.json")
        requires, have = requires_cell(kb, work, v)
        cells = {
            "hook": hook_cell(hook, hook_rc),
            "probe": probe_cell(v, probe),
            "verify": verify_cell(verify, verify_rc),
            "CUDA build requires": requires,
        }
        docs[v] = {"hook": hook, "hook_rc": hook_rc, "probe": probe, "verify": verify, "verify_rc": verify_rc,
                   "cuda_build_requires": have, "cells": cells}  # fmt: skip
        rows.append((v, cells))
    try:
        with open(os.path.join(work, "machine.txt"), encoding="utf-8") as handle:
            machine = handle.read().strip()
    except OSError:
        machine = "(machine.txt missing)"
    lines = [machine, "", "| release | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for v, cells in rows:
        shown = [("ok: " if cells[c][0] else "**FAIL**: ") + cells[c][1].replace("|", "/") for c in COLUMNS]
        lines.append(f"| {v} | " + " | ".join(shown) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as handle:
        handle.write(text)
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(docs, handle, indent=1, default=str)
    print(text)
    return 0 if rows and all(cell[0] for _, cells in rows for cell in cells.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
