"""Register the hook's DeepSpeed ops in an environment, so that DeepSpeed's own `load()` imports them at once.

Writes three files into the environment's site-packages (inside the prefix): `envsolver_ds_ops.py` (a copy of
envsolver/hook/ds_ops_site.py, which says how DeepSpeed finds them), `envsolver_ds_ops.pth` (the one line that
imports it at interpreter start) and `envsolver_ds_ops.json` (the registry: which ops, their libraries, and the
DeepSpeed and torch they were built for). No DeepSpeed file is touched; removing the three files unregisters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver.core import atomic, boundedread
from envsolver.hook import ds_ops_site

MODULE = "envsolver_ds_ops"
SOURCE = Path(__file__).with_name("ds_ops_site.py")
PTH_LINE = f"import {MODULE}\n"
# The grammars live in ds_ops_site.py, which checks them again when it reads the registry.
_OP = re.compile(ds_ops_site.OP)
_MODULE_NAME = re.compile(ds_ops_site.MODULE_NAME)
_VERSION = re.compile(ds_ops_site.VERSION)
_MAJOR_MINOR = re.compile(ds_ops_site.MAJOR_MINOR)
_ACCELERATOR = re.compile(ds_ops_site.ACCELERATOR)


@dataclass(frozen=True)
class Registered:
    op: str  # fused_adam
    module: str  # deepspeed.ops.adam.fused_adam_op
    file: Path  # the op's shared library, absolute


@dataclass(frozen=True)
class Built:
    """What the build reported about the versions the ops were built against."""

    deepspeed: str
    torch: str
    torch_info: Mapping[str, object]
    accelerator: str = "cuda"  # DeepSpeed's accelerator the ops were built for (its accelerator_name)


def registry(ops: Sequence[Registered], built: Built) -> dict[str, object]:
    """The registry document. Raises ValueError on a value outside its grammar (nothing unchecked is written)."""
    if not _VERSION.fullmatch(built.deepspeed) or not _VERSION.fullmatch(built.torch):
        raise ValueError(f"unexpected versions: DeepSpeed {built.deepspeed!r}, torch {built.torch!r}")
    if not _ACCELERATOR.fullmatch(built.accelerator):
        raise ValueError(f"unexpected accelerator name: {built.accelerator!r}")
    info = {
        "version": str(built.torch_info.get("version", "")),
        "bf16_support": bool(built.torch_info.get("bf16_support", False)),
        "cuda_version": str(built.torch_info.get("cuda_version", "")),
        "nccl_version": str(built.torch_info.get("nccl_version", "0.0")),
        "hip_version": str(built.torch_info.get("hip_version", "0.0")),
    }
    for key in ("version", "cuda_version", "nccl_version", "hip_version"):
        if not _MAJOR_MINOR.fullmatch(str(info[key])):
            raise ValueError(f"unexpected torch_info {key}: {info[key]!r}")
    entries: dict[str, object] = {}
    for item in sorted(ops, key=lambda r: r.op):
        named = _OP.fullmatch(item.op) and _MODULE_NAME.fullmatch(item.module)
        if not (named and ds_ops_site.library_path(str(item.file))):
            raise ValueError(f"unexpected op {item.op!r}, module {item.module!r} or library {str(item.file)!r}")
        entries[item.op] = {"module": item.module, "file": str(item.file)}
    return {
        "format": 1,
        "deepspeed": built.deepspeed,
        "torch": built.torch,
        "accelerator": built.accelerator,
        "torch_info": info,
        "ops": entries,
    }


def write(site_packages: Path, ops: Sequence[Registered], built: Built) -> list[Path]:
    """Write the module, the registry, then the .pth (last: nothing imports the module before it is complete).
    With no ops, remove all three (the environment is unregistered). Returns the paths written or removed."""
    paths = [site_packages / f"{MODULE}.py", site_packages / f"{MODULE}.json", site_packages / f"{MODULE}.pth"]
    if not ops:
        for path in reversed(paths):
            path.unlink(missing_ok=True)
        return paths
    doc = registry(ops, built)
    atomic.replace(paths[0], SOURCE.read_bytes())
    atomic.replace(paths[1], (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    atomic.replace(paths[2], PTH_LINE.encode())
    return paths


def in_place(site_packages: Path) -> bool:
    """The module and the .pth are there as write() leaves them (this envsolver's module, the one-line .pth)."""
    source = SOURCE.read_bytes()
    try:  # regular files, no longer than this envsolver writes them (core.boundedread: a FIFO refused at once)
        module = boundedread.read_head(site_packages / f"{MODULE}.py", len(source) + 1)
        pth = boundedread.read_head(site_packages / f"{MODULE}.pth", len(PTH_LINE) + 1)
    except (OSError, boundedread.Refused):
        return False
    return module == source and pth == PTH_LINE.encode()


def read(site_packages: Path) -> dict[str, object] | None:
    """The registry as the site module reads it, or None."""
    return ds_ops_site.read_registry(str(site_packages / f"{MODULE}.json"))
