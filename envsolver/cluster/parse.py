"""Pure parsers for what Slurm and a compute node print: `sinfo` in envsolver's layout, `scontrol show node -o`,
`scontrol show config`, GRES strings, and the probe a step runs (nvidia-smi's CSV, `ldd --version`, `uname -m`).

None of them raises, whatever the text: a value they cannot read is missing (None or left out), and lines they
cannot read are returned as such. Patterns have bounded repeats, so a long line costs linear time. Every parser
is tested on real captured output (tests/data/slurm/, see its README) and fuzzed (tests/fuzz/).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from envsolver.core import textlines
from envsolver.core.errors import BadInputError
from envsolver.core.versions import MAX_DIGITS, DriverVersion, MajorMinor, driver
from envsolver.resolve.detect import SMI_FIELDS

MAX_LINE = 64 * 1024  # longer lines are not read (a real scontrol line is about 1 KiB)

# sinfo, one line per (partition, node): partition name (no `*` for the default), node name, partition
# availability, node state (long form), GRES. GRES goes last: it is the only field that can hold '|'-free
# commas and parentheses, and splitting at most 4 times keeps it whole.
SINFO_FORMAT = "%R|%N|%a|%T|%G"
SINFO_ARGV = ("sinfo", "--noheader", "--all", "--Node", f"--format={SINFO_FORMAT}")
NULL = "(null)"


@dataclass(frozen=True)
class Gres:
    """One GRES item: `gpu:a100:4(S:0-1)` -> name 'gpu', type 'a100', count 4 (the socket part dropped)."""

    name: str
    type: str | None
    count: int
    text: str


@dataclass(frozen=True)
class SinfoRow:
    partition: str
    node: str
    available: str
    state: str
    gres: tuple[Gres, ...]
    gres_text: str

    @property
    def gpus(self) -> tuple[Gres, ...]:
        return tuple(g for g in self.gres if g.name == "gpu" and g.count > 0)


# Samples of GRES as sinfo %G and scontrol's Gres= print them (tests/data/slurm/ and the sources in its README):
#   gpu:v100:2   gpu:a100:2(S:0)   gpu:8(S:0-1)   gpu:a100:2(S:2,5)   gpu:a100:no_consume:4   gpu:2K(S:0-2023)
#   gpu:(null):8(IDX:0-7)   gpu:p100:2(S:0-1),gpu:v100:2(S:0-1)   (null)
_GRES_COUNT = re.compile(r"([0-9]{1,9})([KMGTP]?)")
_MULTIPLIERS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_GRES_FLAGS = frozenset({"no_consume"})
_GRES_DETAIL = re.compile(r"\((?:S|IDX):[^()]{0,1000}\)$")  # sockets or indices after the count


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_gres(text: str) -> tuple[Gres, ...]:
    """The GRES items of a node; `(null)` or an unreadable item gives nothing for it."""
    if len(text) > MAX_LINE:
        return ()
    items = []
    for raw in _split_outside_parens(text.strip()):
        item = raw.strip()
        if not item or item == NULL:
            continue
        item = _GRES_DETAIL.sub("", item)
        fields = [f for f in item.split(":") if f not in _GRES_FLAGS]
        if len(fields) < 2:
            continue
        count = _GRES_COUNT.fullmatch(fields[-1])
        if not count:
            continue
        name, kind = fields[0], ":".join(fields[1:-1]) or None
        if not name or kind == NULL:
            kind = None
        items.append(Gres(name, kind, int(count.group(1)) * _MULTIPLIERS[count.group(2)], raw.strip()))
    return tuple(items)


# Sample (sinfo --noheader --all --Node --format=%R|%N|%a|%T|%G):
#   a100|gpu02|up|idle|gpu:a100:2(S:0)
#   cpu|cpu01|up|idle|(null)
def parse_sinfo(text: str) -> tuple[tuple[SinfoRow, ...], tuple[str, ...]]:
    """(rows, lines that are not rows of SINFO_FORMAT)."""
    rows, bad = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", 4) if len(line) <= MAX_LINE else []
        if len(fields) != 5 or not all(f.strip() for f in fields[:4]):
            bad.append(line[:200])
            continue
        partition, node, available, state, gres = (f.strip() for f in fields)
        rows.append(SinfoRow(partition, node, available, state, parse_gres(gres), gres))
    return tuple(rows), tuple(bad)


# Sample (scontrol --oneliner show node; values may hold spaces, e.g. OS=):
#   NodeName=gpu02 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 ... Gres=gpu:a100:2(S:0) NodeAddr=vm ...
#   OS=Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=500 ... State=IDLE ... Partitions=a100,mixed ...
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:]{0,63})=")


def parse_key_values(line: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces` -> {Key: value, Key2: 'value with spaces'}. A value runs to the next
    ` Key=`; the first word must be a key."""
    if len(line) > MAX_LINE:
        return {}
    matches = list(_KEY.finditer(line))
    if not matches or line[: matches[0].start()].strip():
        return {}
    out: dict[str, str] = {}
    for match, after in zip(matches, [*matches[1:], None], strict=True):
        end = after.start() if after is not None else len(line)
        out.setdefault(match.group(1), line[match.end() : end].strip())
    return out


@dataclass(frozen=True)
class NodeInfo:
    """What scontrol says of a node; None where it does not say (or says `(null)`)."""

    name: str
    arch: str | None
    gres: tuple[Gres, ...]
    state: str | None
    partitions: tuple[str, ...]
    os: str | None
    reason: str | None = None  # Reason= (why a node is down or drained), as an admin wrote it
    features: tuple[str, ...] = ()  # AvailableFeatures=, for --constraint


def _known(value: str | None) -> str | None:
    return None if value in (None, "", NULL, "N/A") else value


def parse_scontrol_nodes(text: str) -> dict[str, NodeInfo]:
    """Nodes by name from `scontrol --oneliner show node`; lines without NodeName= are left out."""
    nodes: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        values = parse_key_values(line)
        name = _known(values.get("NodeName"))
        if name is None:
            continue
        nodes[name] = NodeInfo(
            name=name,
            arch=_known(values.get("Arch")),
            gres=parse_gres(values.get("Gres", "")),
            state=_known(values.get("State")),
            partitions=tuple(p for p in values.get("Partitions", "").split(",") if p),
            os=_known(values.get("OS")),
            reason=_known(values.get("Reason")),
            features=tuple(f for f in (_known(values.get("AvailableFeatures")) or "").split(",") if f),
        )
    return nodes


# Sample (scontrol show config):
#   ClusterName             = lab
_CONFIG_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,63})[ \t]{0,64}=[ \t]{0,64}(.{0,1000})")


def parse_config(text: str) -> dict[str, str]:
    """`Key = value` lines of `scontrol show config`."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.fullmatch(line.strip()) if len(line) <= 2000 else None
        if match:
            out.setdefault(match.group(1), match.group(2).strip())
    return out


@dataclass(frozen=True)
class SmiRow:
    """One GPU of the probe's nvidia-smi query. `compute_cap` and `device_id` (pci.device_id as nvidia-smi prints
    it, "0x233510DE") are None where the driver printed "[N/A]" or was not asked (it refused the field)."""

    name: str
    driver: DriverVersion
    compute_cap: MajorMinor | None = None
    device_id: str | None = None

    def doc(self) -> dict[str, str | None]:
        """The row for --json (None: not reported)."""
        cc = str(self.compute_cap) if self.compute_cap is not None else None
        return {"name": self.name, "driver": str(self.driver), "compute_cap": cc, "device_id": self.device_id}


_CC = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})\.([0-9]{{1,{MAX_DIGITS}}})")
_DEVICE_ID = re.compile(r"0x[0-9A-Fa-f]{4,8}")
# The field lists whose header the probe's nvidia-smi may print (it asks with SMI_FIELDS, one after another,
# until the driver knows every field), and the fields of a section without a header: the probe's query before
# it asked for pci.device_id (name,driver_version,compute_cap --format=csv,noheader; the captures in
# tests/data/slurm/ are of that query).
_HEADERLESS = ("name", "driver_version", "compute_cap")
_HEADERS = frozenset({*SMI_FIELDS, _HEADERLESS})


# Sample (nvidia-smi --query-gpu=name,pci.device_id,compute_cap,driver_version --format=csv; H200):
#   name, pci.device_id, compute_cap, driver_version
#   NVIDIA H200, 0x233510DE, 9.0, 580.159.04
# and on a driver that refuses a field (R470 and compute_cap), before the next query's header and rows:
#   Field "compute_cap" is not a valid field to query.
def parse_smi_rows(text: str) -> tuple[SmiRow, ...]:
    """The GPUs of nvidia-smi's CSV answer: the rows after its last header (one of SMI_FIELDS), or without a
    header the probe's former query's rows. Other lines (a refusal, an error message) are not rows; nor is one
    whose name is empty or whose driver is not a version. A compute capability or device ID that is "[N/A]" or
    not of its form is None."""
    rows: list[SmiRow] = []
    fields: tuple[str, ...] = _HEADERLESS
    for line in text.splitlines():
        cells = tuple(c.strip() for c in line.split(",")) if len(line) <= 1000 else ()
        if cells in _HEADERS:
            fields, rows = cells, []
            continue
        if len(cells) != len(fields):
            continue
        row = dict(zip(fields, cells, strict=True))
        try:
            checked = driver(row["driver_version"])
        except BadInputError:
            continue
        if not row["name"]:
            continue
        cc = _CC.fullmatch(row.get("compute_cap", ""))
        device = row.get("pci.device_id", "")
        rows.append(
            SmiRow(
                row["name"],
                checked,
                MajorMinor(int(cc.group(1)), int(cc.group(2))) if cc else None,
                device.upper().replace("0X", "0x") if _DEVICE_ID.fullmatch(device) else None,
            )
        )
    return tuple(rows)


# Samples (first line of `ldd --version`; tests/data/slurm/README.md gives the sources):
#   ldd (Debian GLIBC 2.36-9+deb12u14) 2.36       ldd (GNU libc) 2.17       ldd (Ubuntu GLIBC 2.31-0ubuntu9.1) 2.31
#   ldd (Gentoo 2.43-r2 (patchset 3)) 2.43
# musl's ldd prints `musl libc (x86_64)` and `Version 1.2.3` instead: no glibc.
_LDD = re.compile(rf"ldd \(.{{0,200}}\) ([0-9]{{1,{MAX_DIGITS}}})\.([0-9]{{1,{MAX_DIGITS}}})(?:\.[0-9]{{1,9}})?")


def parse_ldd_version(text: str) -> MajorMinor | None:
    """glibc's version from `ldd --version` (its first line that reads `ldd (...) X.Y`); None for musl or junk."""
    for line in text.splitlines()[:20]:
        match = _LDD.fullmatch(line.strip()) if len(line) <= 400 else None
        if match:
            return MajorMinor(int(match.group(1)), int(match.group(2)))
    return None


# The probe a step runs on a compute node (slurm.PROBE_SCRIPT prints these markers), sample from the lab:
#   == envsolver-probe: node gpu02
#   == envsolver-probe: nvidia-smi
#   name, pci.device_id, compute_cap, driver_version
#   NVIDIA A100-SXM4-80GB, 0x20B210DE, 8.0, 550.54.15
#   == envsolver-probe: nvidia-smi exit 0
#   == envsolver-probe: ldd --version
#   ldd (Debian GLIBC 2.36-9+deb12u14) 2.36
#   ...
#   == envsolver-probe: uname -m
#   x86_64
#   == envsolver-probe: end
MARK = "== envsolver-probe: "
SECTIONS = ("nvidia-smi", "ldd --version", "uname -m")
_MARK_LINE = re.compile(
    r"== envsolver-probe: (node|nvidia-smi exit|nvidia-smi|ldd --version|uname -m|end)(?: (.{0,200}))?"
)


@dataclass(frozen=True)
class Probe:
    """What one probe step saw on its node. `smi_exit` is nvidia-smi's exit status (127: not installed);
    `smi_text` what it printed (rows or its error); `complete` whether the probe ran to its end marker."""

    node: str | None
    gpus: tuple[SmiRow, ...]
    smi_exit: int | None
    smi_text: str
    glibc: MajorMinor | None
    ldd_text: str
    machine: str | None
    complete: bool

    @property
    def smi_error(self) -> str | None:
        """Why nvidia-smi gave no GPUs, in a line; None when it gave some."""
        if self.gpus:
            return None
        if self.smi_exit == 127:
            return "nvidia-smi is not installed on the node (exit 127)"
        text = " ".join(self.smi_text.split())[:300]
        status = f"exit {self.smi_exit}" if self.smi_exit is not None else "no exit status"
        return f"nvidia-smi printed no GPU ({status}{': ' + text if text else ''})"


def parse_probe(text: str) -> Probe:
    """The sections of a probe's output; a section that is missing is empty."""
    sections: dict[str, list[str]] = {}
    found: dict[str, str | None] = {}
    current: list[str] | None = None
    for _, line in itertools.islice(textlines.lines(text), 10_000):  # one at a time: a node's text is 5 MB
        match = _MARK_LINE.fullmatch(line.rstrip()) if line.startswith(MARK) and len(line) <= 300 else None
        if match is None:
            if current is not None:
                current.append(line)
            continue
        key, value = match.group(1), match.group(2)
        found.setdefault(key, value)
        current = sections.setdefault(key, []) if key in SECTIONS else None
    smi_text = "\n".join(sections.get("nvidia-smi", []))
    ldd_text = "\n".join(sections.get("ldd --version", []))
    machine_lines = [w for w in sections.get("uname -m", []) if w.strip()]
    machine = machine_lines[0].strip()[:64] if len(machine_lines) == 1 else None
    status = found.get("nvidia-smi exit")
    node = found.get("node")
    return Probe(
        node=(node.strip() or None) if node else None,
        gpus=parse_smi_rows(smi_text),
        smi_exit=int(status) if status and status.isascii() and status.isdigit() and len(status) <= 3 else None,
        smi_text=smi_text,
        glibc=parse_ldd_version(ldd_text),
        ldd_text=ldd_text,
        machine=machine,
        complete="end" in found,
    )
