"""Host detection for `--gpu auto`: GPU names, the driver and the platform (uname -m), each with where it came
from.

Detection only fills defaults; it never decides anything. Order: the ENVSOLVER_GPUS and
ENVSOLVER_DRIVER overrides, NVML (nvidia-ml-py), `nvidia-smi`, then /sys/module/nvidia/version and
/proc/driver/nvidia/version (driver only). Every probe is injectable so tests run on captured real output.
The parsers never raise, whatever the text: a value they cannot find is missing (None or empty), and their
patterns have bounded repeats, so a long line costs linear time.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsolver.core import pipes

# The fields asked for, most first; a driver that refuses one (compute_cap came with R510) is asked again without
# it. A field a driver cannot fill it prints as "[N/A]", which counts as missing.
SMI_FIELDS = (
    ("name", "pci.device_id", "compute_cap", "driver_version"),
    ("name", "pci.device_id", "driver_version"),
    ("name", "driver_version"),
)
SMI_QUERIES = tuple(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"] for fields in SMI_FIELDS)
SMI_QUERY = SMI_QUERIES[0]
SYS_MODULE_VERSION = "/sys/module/nvidia/version"
PROC_VERSION = "/proc/driver/nvidia/version"


@dataclass(frozen=True)
class Found:
    """A detected value and where it came from; for a GPU (value: its name) also the PCI device ID and the compute
    capability the driver reports, where it does."""

    value: str
    origin: str
    device_id: str | None = None
    compute_cap: str | None = None


@dataclass(frozen=True)
class HostFacts:
    """The GPUs and driver found, and this host's conda platform (value "linux-aarch64", origin "uname -m:
    aarch64"; None on a machine envsolver has no platform for)."""

    gpus: tuple[Found, ...]
    driver: Found | None
    platform: Found | None = None


Runner = Callable[[list[str]], str | None]
Reader = Callable[[str], str | None]
NvmlProbe = Callable[[], tuple[Sequence[str | Found], str] | None]


# Sample (nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,pci.bus_id --format=csv, H200):
#   name, compute_cap, driver_version, memory.total [MiB], pci.bus_id
#   NVIDIA H200, 9.0, 580.159.04, 143771 MiB, 00000000:00:06.0
def parse_smi_csv(text: str, fields: tuple[str, ...] = ("name", "driver_version")) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv`, keyed by the header's field names.

    Without a header (`noheader`), `fields` names the queried fields in order.
    Units in the header (`memory.total [MiB]`) are dropped from the keys. Blank lines are ignored.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    first = [c.strip() for c in lines[0].split(",")]
    if "name" in first or "driver_version" in first:
        keys = [c.split(" [")[0] for c in first]
        lines = lines[1:]
    else:
        keys = list(fields)
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(keys):
            rows.append(dict(zip(keys, cells, strict=True)))
    return rows


# Sample (nvidia-smi -L; MIG devices are indented under their GPU):
#   GPU 0: NVIDIA H200 (UUID: GPU-7fb43fb7-50d9-2a84-e002-f6c1a3f4ea7f)
_SMI_LIST = re.compile(r"GPU [0-9]{1,6}: (.{1,256}?) \(UUID: [^)]{0,128}\)\s{0,64}")


def parse_smi_list(text: str) -> list[str]:
    """GPU names from `nvidia-smi -L` (MIG lines are skipped)."""
    return [m.group(1) for line in text.splitlines() if (m := _SMI_LIST.fullmatch(line))]


# Sample (/proc/driver/nvidia/version):
#   NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
#   GCC version:  gcc version 15.3.0 (GCC)
_PROC_DRIVER = re.compile(r"NVRM version:[^\n]{0,256}?\s([0-9]{1,9}\.[0-9]{1,9}(?:\.[0-9]{1,9})?)\s")


def parse_proc_version(text: str) -> str | None:
    match = _PROC_DRIVER.search(text)
    return match.group(1) if match else None


# Sample (the banner line of plain `nvidia-smi`):
#   | NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
_SMI_BANNER = re.compile(r"Driver Version:[ \t]{0,64}(\S{1,64})[ \t]{1,64}CUDA Version:[ \t]{0,64}(\S{1,64})")


def parse_smi_banner(text: str) -> tuple[str, str] | None:
    """(driver, newest CUDA) from the header of plain `nvidia-smi` output."""
    match = _SMI_BANNER.search(text)
    return (match.group(1), match.group(2)) if match else None


# nvidia-smi answers in well under a second; a driver stuck in a GPU reset can hang it for minutes. Its answer is a
# row per GPU (about 100 bytes each): 1 MiB is thousands of GPUs, more is not nvidia-smi's answer.
SMI_TIMEOUT_S = 15.0
SMI_MAX_BYTES = 1 << 20


class SmiHung(Exception):
    """nvidia-smi ran past its deadline: asking again with fewer fields would only wait again."""


def _run(argv: list[str], timeout: float = SMI_TIMEOUT_S) -> str | None:
    """The program's stdout when it exits 0 within `timeout` and prints at most SMI_MAX_BYTES; None when it
    cannot start, fails or floods; SmiHung when it runs past the deadline (it is killed)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    try:
        out, _ = pipes.collect(proc, timeout, pipes.Bound(SMI_MAX_BYTES))
    except subprocess.TimeoutExpired:
        pipes.stop(proc, signal.SIGKILL)
        raise SmiHung(argv[0]) from None
    except pipes.TooLarge:
        pipes.stop(proc, signal.SIGKILL)
        return None
    return out.text() if proc.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _nvml() -> tuple[Sequence[str | Found], str] | None:
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError has many subclasses; any means "no usable driver"
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        gpus = [_nvml_gpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        return gpus, _text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvml_gpu(pynvml: Any, handle: object) -> Found:
    """One GPU as NVML describes it; the device ID and CC each only where this NVML answers for them."""
    name = _text(pynvml.nvmlDeviceGetName(handle))
    device_id = compute_cap = None
    with contextlib.suppress(Exception):
        device_id = f"0x{int(pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId):08X}"
    with contextlib.suppress(Exception):
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        compute_cap = f"{int(major)}.{int(minor)}"
    return Found(name, "NVML", device_id, compute_cap)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _smi(run: Runner) -> tuple[list[Found], str] | None:
    """GPUs and driver from nvidia-smi: the first of SMI_QUERIES it answers, field by field ("[N/A]" is None). A
    query it refuses is asked again with fewer fields; one it hangs on is not asked again."""
    for query in SMI_QUERIES:
        try:
            out = run(query)
        except SmiHung:
            return None
        if out is None:
            continue
        rows = parse_smi_csv(out)
        if not rows:
            return None
        gpus = [
            Found(r["name"], "nvidia-smi", _known(r.get("pci.device_id")), _known(r.get("compute_cap")))
            for r in rows
            if r.get("name")
        ]
        return gpus, next((r["driver_version"] for r in rows if _known(r.get("driver_version"))), "")
    return None


def _known(cell: str | None) -> str | None:
    """A cell's value; None for a missing cell and for what nvidia-smi prints where it has none."""
    return None if cell is None or cell.strip() in ("", "[N/A]", "N/A", "[Not Supported]") else cell.strip()


def detect(
    environ: Mapping[str, str],
    run: Runner = _run,
    read: Reader = _read,
    nvml: NvmlProbe | None = None,
    machine: Callable[[], str] | None = None,
) -> HostFacts:
    """GPU names, driver and platform of this host. Overrides win; each value says where it came from.
    `machine` gives uname -m (default: platform.machine)."""
    gpus: tuple[Found, ...] = ()
    driver: Found | None = None
    here = _platform(machine)
    if environ.get("ENVSOLVER_GPUS"):
        names = [n.strip() for n in environ["ENVSOLVER_GPUS"].split(",") if n.strip()]
        gpus = tuple(Found(n, "ENVSOLVER_GPUS") for n in names)
    if environ.get("ENVSOLVER_DRIVER"):
        driver = Found(environ["ENVSOLVER_DRIVER"].strip(), "ENVSOLVER_DRIVER")
    if gpus and driver:
        return HostFacts(gpus, driver, here)

    probed: tuple[Sequence[str | Found], str] | None = (nvml or _nvml)()
    origin = "NVML"
    if probed is None:
        probed = _smi(run)
        origin = "nvidia-smi"
    if probed is not None:
        seen, version = probed
        gpus = gpus or tuple(n if isinstance(n, Found) else Found(n, origin) for n in seen)
        driver = driver or (Found(version, origin) if version else None)
    if driver is None:
        module = (read(SYS_MODULE_VERSION) or "").strip()
        if module:
            driver = Found(module, SYS_MODULE_VERSION)
    if driver is None:
        text = read(PROC_VERSION)
        proc_driver = parse_proc_version(text) if text else None
        if proc_driver:
            driver = Found(proc_driver, PROC_VERSION)
    return HostFacts(gpus, driver, here)


def _platform(machine: Callable[[], str] | None) -> Found | None:
    import platform

    name = (machine or platform.machine)()
    found = host_platform(name) if name else None
    return Found(found, f"uname -m: {name}") if found else None


# conda's platform for this machine's architecture (uname -m), for the platforms envsolver supports.
_MACHINES = {"x86_64": "linux-64", "amd64": "linux-64", "aarch64": "linux-aarch64", "arm64": "linux-aarch64"}


def host_platform(machine: str | None = None) -> str | None:
    """'linux-64' or 'linux-aarch64' for this host (or for `machine`, as uname -m prints it); None otherwise."""
    import platform

    return _MACHINES.get((machine or platform.machine()).lower())
