"""The KB's PCI devices (pci_devices.yaml) against NVIDIA's driver table: a README of NVIDIA/open-gpu-kernel-modules,
its "Compatible GPUs" section. compare(kb, rows, name) -> Report. Pure, but for `read`.

Rows are matched by PCI ID (the device, and the subsystem where the driver names a board by it). A row the README
has and the KB lacks is "added", one the KB has and the README lacks "removed", one whose name differs "renamed":
each a contradiction naming the row. Order is not compared. The fix is the update script, run on the README and a
pci.ids of the same time (it gives each new device its chip, chips.yaml its compute capability).
"""

from __future__ import annotations

from pathlib import Path

from envsolver.core.errors import BadInputError, Kind
from envsolver.kb.driver_table import DriverRow, parse_readme
from envsolver.kb.findings import Collector, Report
from envsolver.kb.model import KnowledgeBase

# The README is ~90 KB; a file far larger is not one.
MAX_BYTES = 8 << 20
TABLE = "pci_devices.yaml"
FIX = (
    "Record the README in tests/data/driver_table (its commit and date in SOURCES.md), then regenerate: python "
    "scripts/update_pci_devices.py README.md pci.ids --readme-at COMMIT --pci-ids-at COMMIT (pci.ids of "
    "pciutils/pciids gives a new device its chip; chips.yaml must give the chip a sourced CC or null)."
)


class DriverTableUnreadable(BadInputError):
    """The file given is unreadable, too large, or holds no "Compatible GPUs" table (exit 2)."""

    kind: Kind = "bad_input"


def read(path: Path) -> list[DriverRow]:
    """The rows of the README at `path`, read up to MAX_BYTES. Raises DriverTableUnreadable."""
    fix = (
        "Pass NVIDIA/open-gpu-kernel-modules' README.md, e.g. tests/data/driver_table/compatible-gpus-df1c9a3.md "
        "or one saved from https://github.com/NVIDIA/open-gpu-kernel-modules/blob/main/README.md."
    )
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise DriverTableUnreadable(f"cannot read {str(path)!r}: {exc.strerror or exc}. {fix}") from None
    if len(data) > MAX_BYTES:
        raise DriverTableUnreadable(f"{str(path)!r} is larger than {MAX_BYTES >> 20} MiB: not the README. {fix}")
    rows = parse_readme(data.decode("utf-8", errors="replace"))
    if not rows:
        raise DriverTableUnreadable(f'{str(path)!r} holds no row of a "Compatible GPUs" table. {fix}')
    return rows


def _pci_id(device: str, subsystem: str | None) -> str:
    return f"{device} {subsystem}" if subsystem else device


def _line(name: str, device: str, subsystem: str | None) -> str:
    return f"{name} | {_pci_id(device, subsystem)}"


def compare(kb: KnowledgeBase, rows: list[DriverRow], name: str) -> Report:
    """The driver table's rows against the KB's, row by row (see the module's docstring)."""
    found = Collector()
    held = {(d.device_id, d.subsystem): d for d in kb.pci_devices}
    table = {(r.device_id, r.subsystem): r for r in rows}
    for key, row in table.items():
        kept = held.get(key)
        if kept is None:
            found.add("contradiction", "added", TABLE, "no row", _line(row.name, *key), FIX)
        elif kept.name != row.name:
            found.add("contradiction", "renamed", TABLE, _line(kept.name, *key), _line(row.name, *key), FIX)
    for key, kept in held.items():
        if key not in table:
            found.add("contradiction", "removed", TABLE, _line(kept.name, *key), "no row", FIX)
    order = {"added": 0, "removed": 1, "renamed": 2}
    findings = sorted(found.findings(), key=lambda f: (order[f.check], f.data if f.check == "added" else f.kb))
    return Report(f"the driver table in {name}", (), (), tuple(findings), len(rows))


def render_lines(report: Report, kb: KnowledgeBase) -> list[str]:
    """The header of the text report: what was compared."""
    return [
        f"KB audit: {TABLE} ({len(kb.pci_devices)} rows) against {report.data_name} ({report.records} rows)",
        f"  the KB's: {kb.sources.get('DRV-NAMES', 'DRV-NAMES')}",
    ]
