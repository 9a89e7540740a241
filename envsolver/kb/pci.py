"""GPUs known by their PCI device ID or by the compute capability the driver reports, for names no GPU row holds.

The driver's table (pci_devices.yaml) names every device it supports; pci.ids gives each device's chip and
chips.yaml the chip's compute capability. A device whose driver name no gpus.yaml row knows becomes a row of its
own, keyed `0x` + its device ID, with its chip's CC and nothing else (memory, BF16/FP8 and its host's platform:
unknown). A GPU that neither its name nor its ID identifies, but whose driver reports its CC, becomes a row keyed
`sm_XY`. Neither kind guesses a platform: resolve takes it from --platform or the detected host, else its default.
"""

from __future__ import annotations

import re

from envsolver.core.versions import MajorMinor
from envsolver.kb.model import Gpu, KnowledgeBase, PciDevice

# The forms a device ID is given in: "0x2233", and as nvidia-smi's pci.device_id prints it, the device then
# NVIDIA's vendor ID: "0x223310DE". The 0x is required: "a100" is a name, not device 0xA100.
_DEVICE_ID = re.compile(r"0x([0-9a-f]{4})(?:10de)?", re.IGNORECASE)
# Sample (nvidia-smi --query-gpu=compute_cap): "8.6", "12.0"; "[N/A]" on a driver that cannot tell.
_CC = re.compile(r"([0-9]{1,2})\.([0-9])")
_SM = re.compile(r"sm_([0-9]{1,2})([0-9])", re.IGNORECASE)


def device_id(text: str | None) -> str | None:
    """The four upper-case hex digits of a device ID written in one of its forms, else None."""
    match = _DEVICE_ID.fullmatch((text or "").strip())
    return match.group(1).upper() if match else None


def compute_capability(text: str | None) -> MajorMinor | None:
    """A CC as nvidia-smi reports it ("8.6") or as `sm_86`; None for "[N/A]" or anything else."""
    text = (text or "").strip()
    match = _CC.fullmatch(text) or _SM.fullmatch(text)
    return MajorMinor(int(match.group(1)), int(match.group(2))) if match else None


def devices(kb: KnowledgeBase, wanted: str) -> tuple[PciDevice, ...]:
    """The driver table's rows of one device ID, the row naming the device itself (no subsystem) first."""
    rows = [d for d in kb.pci_devices if d.device_id == wanted]
    return tuple(sorted(rows, key=lambda d: d.subsystem is not None))


def chip_row(kb: KnowledgeBase, device: PciDevice) -> Gpu | None:
    """The row for a device whose name no GPU row knows, from its chip; None when the chip's CC is unknown."""
    chip = next((c for c in kb.chips if c.chip == device.chip), None)
    if chip is None or chip.compute_capability is None:
        return None
    return Gpu(
        key=f"0x{device.device_id}",
        name=device.name,
        aliases=(),
        smi_names=(device.name,),
        compute_capability=chip.compute_capability,
        architecture=chip.architecture,
        segment="unknown",
        memory_gb=None,
        bf16=None,
        fp8=None,
        min_driver=None,
        platform=None,
        source=tuple(dict.fromkeys((*device.source, *chip.source))),
        note=(
            f"PCI device 0x{device.device_id}, chip {device.chip}: no GPU row names it, so only its chip's "
            "compute capability is known; its host's platform is not recorded (--platform or the detected host "
            "gives it)"
        ),
    )


def reported_row(kb: KnowledgeBase, cc: MajorMinor) -> Gpu:
    """The row for a GPU known only by the compute capability its driver reports (the same for every such GPU of
    that CC, so its key `sm_XY` gives it back); the architecture is the one the chips of that CC share, else
    unknown."""
    archs = {c.architecture for c in kb.chips if c.compute_capability == cc}
    return Gpu(
        key=f"sm_{cc.sm}",
        name=f"GPU of compute capability {cc}",
        aliases=(),
        smi_names=(),
        compute_capability=cc,
        architecture=archs.pop() if len(archs) == 1 else "unknown",
        segment="unknown",
        memory_gb=None,
        bf16=None,
        fp8=None,
        min_driver=None,
        platform=None,
        source=("driver-reported",),
        note=f"compute capability {cc} as the driver reported it; the knowledge base knows neither name nor ID",
    )
