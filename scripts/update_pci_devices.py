#!/usr/bin/env python3
"""Write envsolver/kb/data/pci_devices.yaml from NVIDIA's driver table and pci.ids; print the diff.

    python scripts/update_pci_devices.py README.md pci.ids --readme-at COMMIT --pci-ids-at COMMIT [--check]

README.md is NVIDIA/open-gpu-kernel-modules' README at COMMIT ("Compatible GPUs": the name the driver gives each
PCI device ID); pci.ids is pciutils/pciids' at its COMMIT (the chip of each device ID). The driver's rows are
kept whole and in order, each with the chip pci.ids gives its device. gpus.yaml's DRV-NAMES source must already
cite the README's commit (the two files share that id). Exits 0 when the file was already up to date, 1 when it
changed (or, with --check, would change), 2 when an input is unreadable or a device has no chip in pci.ids.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envsolver.core import atomic
from envsolver.kb import default_kb
from envsolver.kb.driver_table import DriverRow, parse_pci_ids, parse_readme

OUT = Path(__file__).resolve().parent.parent / "envsolver" / "kb" / "data" / "pci_devices.yaml"


def render(rows: list[DriverRow], chips: dict[str, str], drv_names: str, pci_ids: str) -> str:
    lines = [
        "# envsolver knowledge base: NVIDIA PCI devices, generated: do not edit by hand. Regenerate with",
        "#   python scripts/update_pci_devices.py README.md pci.ids --readme-at COMMIT --pci-ids-at COMMIT",
        "# Every row of the driver's 'Compatible GPUs' table (DRV-NAMES), in its order: the PCI device ID (four",
        "# upper-case hex digits), the subsystem (vendor and device) where the driver names a board by it, the name",
        "# the driver gives it (nvidia-smi and NVML print it), and the chip pci.ids gives the device (PCI-IDS).",
        "# A chip's compute capability is in chips.yaml.",
        "",
        "sources:",
        f"  DRV-NAMES: {json.dumps(drv_names)}",
        f"  PCI-IDS: {json.dumps(pci_ids)}",
        "",
        "devices:",
    ]
    for row in rows:
        sub = json.dumps(row.subsystem) if row.subsystem else "null"
        lines.append(
            f'  - {{id: "{row.device_id}", subsystem: {sub}, name: {json.dumps(row.name)}, '
            f"chip: {chips[row.device_id]}, source: [DRV-NAMES, PCI-IDS]}}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("readme", type=Path)
    parser.add_argument("pci_ids", type=Path)
    parser.add_argument("--readme-at", required=True, help="the open-gpu-kernel-modules commit of README.md")
    parser.add_argument("--pci-ids-at", required=True, help="the pciutils/pciids commit of pci.ids")
    parser.add_argument("--check", action="store_true", help="print the diff only; write nothing")
    args = parser.parse_args(argv)
    try:
        readme = args.readme.read_text(encoding="utf-8")
        pci_text = args.pci_ids.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"cannot read an input: {exc}", file=sys.stderr)
        return 2
    drv_names = default_kb().sources.get("DRV-NAMES", "")
    if args.readme_at not in drv_names:
        print(f"gpus.yaml's DRV-NAMES does not cite {args.readme_at}: update it first ({drv_names!r})", file=sys.stderr)
        return 2
    version = re.search(r"^#\s*Version:\s*(\S+)", pci_text, re.MULTILINE)
    pci_source = (
        f"pciutils/pciids pci.ids @ {args.pci_ids_at} (Version: {version.group(1) if version else 'unknown'}): "
        "vendor 10de, device lines 'ID  CHIP [name]'; the chip is the first word without its GL/GLM/M/BM suffix"
    )
    rows = parse_readme(readme)
    chips = parse_pci_ids(pci_text)
    missing = sorted({r.device_id for r in rows} - set(chips))
    if not rows or missing:
        print(f"{len(rows)} driver rows; devices without a chip in pci.ids: {missing}", file=sys.stderr)
        return 2
    new = render(rows, chips, drv_names, pci_source)
    old = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "kb", "sources"))
    if new == old:
        return 0
    if not args.check:
        atomic.replace(OUT, new.encode("utf-8"))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
