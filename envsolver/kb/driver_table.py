"""Readers for the two tables that name NVIDIA's PCI devices: the driver's "Compatible GPUs" table and pci.ids.

Used by scripts/update_pci_devices.py (which writes kb/data/pci_devices.yaml from them) and by the tests that
hold the whole table against the knowledge base. Pure functions over text; they never raise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Sample (NVIDIA/open-gpu-kernel-modules README.md, "Compatible GPUs"; a row with three IDs names the PCI device,
# then the subsystem vendor and subsystem device):
#   | NVIDIA GeForce RTX 2080 Ti                              | 1E04           |
#   | Quadro RTX 8000                                         | 1E30 1028 129E |
_ROW = re.compile(r"\| ([^|]{1,120}?) {0,120}\| ([0-9A-F]{4})(?: ([0-9A-F]{4}) ([0-9A-F]{4}))? {0,40}\|")


@dataclass(frozen=True)
class DriverRow:
    device_id: str  # four upper-case hex digits, "2233"
    subsystem: str | None  # "10DE 129E" (subsystem vendor and device), None where the row names the device only
    name: str


def parse_readme(text: str) -> list[DriverRow]:
    """The rows of the "Compatible GPUs" table, in the README's order (lines of any other table are skipped:
    only rows whose second cell is a PCI ID match)."""
    start = text.find("## Compatible GPUs")
    rows = []
    for line in text[start if start >= 0 else 0 :].splitlines():
        match = _ROW.fullmatch(line.strip())
        if match:
            name, device, vendor, sub = match.groups()
            rows.append(DriverRow(device, f"{vendor} {sub}" if vendor and sub else None, name.strip()))
    return rows


# Sample (pci.ids: a vendor line, then its devices indented by one tab; subsystems by two):
#   10de  NVIDIA Corporation
#   \t2233  GA102GL [RTX A5500]
#   \t\t10de 165a  RTX A5500
_VENDOR = re.compile(r"[0-9a-f]{4}  .{0,200}")
_DEVICE = re.compile(r"\t([0-9a-f]{4})  (\S{1,40})(?: .{0,200})?")
# The chip is the first word of a device's text, without the suffix for a workstation (GL), mobile (M, GLM) or
# embedded (BM) part: "GA102GL" -> "GA102", "AD107GLM" -> "AD107"; "GB20B" has none.
_CHIP = re.compile(r"((?:TU|GA|GH|AD|GB)[0-9]{2}[0-9B])(?:GL|GLM|M|BM)?")


def parse_pci_ids(text: str, vendor: str = "10de") -> dict[str, str]:
    """Device ID (upper-case hex) -> chip, for the devices of `vendor` whose text starts with a chip name of
    Turing or later (older chips and devices without one are left out)."""
    chips: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if _VENDOR.fullmatch(line):
            inside = line.startswith(f"{vendor}  ")
            continue
        match = _DEVICE.fullmatch(line) if inside else None
        if match and (chip := _CHIP.fullmatch(match.group(2))):
            chips[match.group(1).upper()] = chip.group(1)
    return chips
