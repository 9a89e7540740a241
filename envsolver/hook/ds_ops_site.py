"""DeepSpeed ops built by `envsolver hook`, registered so that DeepSpeed's own `OpBuilder.load()` imports them.

This file is copied, unchanged, into the environment's site-packages as `envsolver_ds_ops.py`, with a one-line
`envsolver_ds_ops.pth` (`import envsolver_ds_ops`) beside it and the registry `envsolver_ds_ops.json` that the
hook writes. Standard library only; it runs at the start of every Python of that environment, so it does nothing
there but put a finder on sys.meta_path. It edits no DeepSpeed file.

DeepSpeed loads an op without compiling when `deepspeed.git_version_info_installed.installed_ops[NAME]` is true
(what `DS_BUILD_OPS=1 pip install deepspeed` writes): it then imports the op's module
(`deepspeed.ops.adam.fused_adam_op`, ...) at once instead of deriving compile flags, probing the CPU and asking
ninja. The finder serves exactly those names:
- `deepspeed.git_version_info_installed`: DeepSpeed's own module (when it has one), then the registered ops marked
  installed, with the torch and CUDA versions they were built against;
- each registered op's module: the op's shared library, from the registry's absolute path.
It registers nothing when the registry is unreadable, larger than MAX_REGISTRY, holds a value outside the
grammar the hook wrote it with (checked again here: module names under `deepspeed.` only, versions, absolute
library paths of printable characters), or was written for another DeepSpeed or torch than the one being
imported (an update since the hook ran): DeepSpeed then JIT-builds as it would without envsolver, and in the last
case one line on stderr says how to register again.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import stat
import sys
from types import ModuleType
from typing import Any

REGISTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "envsolver_ds_ops.json")
INFO = "deepspeed.git_version_info_installed"
MAX_REGISTRY = 1 << 20  # the registry of every op DeepSpeed has is ~2 KiB
MAX_VERSION = 1024  # DeepSpeed's version.txt: one line

# The grammar of every registry value, checked when the hook writes the registry (envsolver/hook/register.py) and
# again here when it is read.
OP = r"[a-z][a-z0-9_]{0,63}"  # fused_adam
MODULE_NAME = r"deepspeed(\.[a-z][a-z0-9_]*)+"  # deepspeed.ops.adam.fused_adam_op: DeepSpeed's absolute_name()
VERSION = r"[0-9A-Za-z.+_-]{1,64}"  # 0.19.8, 2.11.0+cu130
MAJOR_MINOR = r"\d{1,3}\.\d{1,3}"
ACCELERATOR = r"[a-z][a-z0-9_]{0,31}"  # cuda
KEYS = ("accelerator", "deepspeed", "format", "ops", "torch", "torch_info")
TORCH_INFO = ("bf16_support", "cuda_version", "hip_version", "nccl_version", "version")


def _matches(pattern: str, value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def library_path(value: object) -> bool:
    """An op's library: an absolute path of printable characters (no line break, NUL or escape)."""
    return isinstance(value, str) and os.path.isabs(value) and value.isprintable()


def valid(doc: object) -> bool:
    """`doc` is a registry as the hook writes it: these keys, and every value within its grammar."""
    if not isinstance(doc, dict) or sorted(doc) != list(KEYS) or type(doc["format"]) is not int or doc["format"] != 1:
        return False
    if not (_matches(VERSION, doc["deepspeed"]) and _matches(VERSION, doc["torch"])):
        return False
    info, ops = doc["torch_info"], doc["ops"]
    if not _matches(ACCELERATOR, doc["accelerator"]) or not isinstance(info, dict) or not isinstance(ops, dict):
        return False
    if sorted(info) != list(TORCH_INFO) or not isinstance(info["bf16_support"], bool):
        return False
    if not all(_matches(MAJOR_MINOR, info[key]) for key in TORCH_INFO if key != "bf16_support"):
        return False
    return all(
        _matches(OP, op)
        and isinstance(entry, dict)
        and sorted(entry) == ["file", "module"]
        and _matches(MODULE_NAME, entry["module"])
        and library_path(entry["file"])
        for op, entry in ops.items()
    )


def read_registry(path: str = REGISTRY) -> dict[str, Any] | None:
    """The registry, or None when it is missing, not a regular file, larger than MAX_REGISTRY, or not what the
    hook writes (every value is checked against its grammar again)."""
    data = read_regular(path, MAX_REGISTRY + 1)
    if data is None or len(data) > MAX_REGISTRY:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if valid(doc) else None


def read_regular(path: str, limit: int) -> bytes | None:
    """At most LIMIT bytes of the regular file PATH; None when it is missing, unreadable or no regular file (a FIFO
    is opened without waiting, then refused: envsolver/core/boundedread.py's rule, which this file cannot import)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit)
        while len(data) < limit:
            more = os.read(fd, limit - len(data))
            if not more:
                break
            data += more
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def matches(doc: dict[str, Any], deepspeed_version: str, torch_version: str | None) -> bool:
    """The registry was written for this DeepSpeed and this torch (the full version strings)."""
    return bool(doc["deepspeed"] == deepspeed_version and doc["torch"] == torch_version)


class _Info(importlib.abc.Loader):
    """deepspeed.git_version_info_installed: DeepSpeed's own (if any), then the registered ops."""

    def __init__(self, original: importlib.machinery.ModuleSpec | None, doc: dict[str, Any]) -> None:
        self.original = original
        self.doc = doc

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        if self.original is not None and self.original.loader is not None:
            self.original.loader.exec_module(module)
        version = getattr(module, "version", None)
        if version is None:
            version = _deepspeed_version()
        torch = sys.modules.get("torch")
        torch_version = getattr(torch, "__version__", None)
        if not matches(self.doc, str(version), None if torch_version is None else str(torch_version)):
            sys.stderr.write(
                f"envsolver: the DeepSpeed ops registered by `envsolver hook` were built for DeepSpeed "
                f"{self.doc['deepspeed']} and torch {self.doc['torch']}, not DeepSpeed {version} and torch "
                f'{torch_version}: DeepSpeed will JIT-build them. Run `envsolver hook -p "$CONDA_PREFIX"` '
                "to build and register them again.\n"
            )
            _REGISTERED.clear()
            return
        ours = module.__dict__
        if self.original is None:
            ours.update(version=version, git_hash="[none]", git_branch="[none]", compatible_ops={})
        installed = dict(ours.get("installed_ops") or {})
        installed.update(dict.fromkeys(self.doc["ops"], True))
        ours.update(
            installed_ops=installed, accelerator_name=self.doc["accelerator"], torch_info=dict(self.doc["torch_info"])
        )


def _deepspeed_version() -> str:
    package = sys.modules.get("deepspeed")
    base = os.path.dirname(getattr(package, "__file__", "") or "")
    data = read_regular(os.path.join(base, "version.txt"), MAX_VERSION)
    return data.decode("utf-8", "replace").strip() if data is not None else "unknown"


_REGISTERED: dict[str, str] = {}  # module name -> shared library, while the registry holds


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname == INFO:
            doc = read_registry()
            if doc is None:
                return None
            _REGISTERED.clear()
            _REGISTERED.update({op["module"]: op["file"] for op in doc["ops"].values() if os.path.isfile(op["file"])})
            original = importlib.machinery.PathFinder.find_spec(fullname, path)
            return importlib.util.spec_from_loader(fullname, _Info(original, doc), origin=REGISTRY)
        library = _REGISTERED.get(fullname)
        if library is None:
            return None
        return library_spec(fullname, library)


def library_spec(fullname: str, library: str) -> Any:
    """How a registered op's module is imported: its shared library, under DeepSpeed's module name."""
    loader = importlib.machinery.ExtensionFileLoader(fullname, library)
    return importlib.util.spec_from_file_location(fullname, library, loader=loader)


def install() -> None:
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())


if __name__ == "envsolver_ds_ops":  # the copy in site-packages; envsolver itself only reads the registry
    install()
