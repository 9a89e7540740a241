"""Readers of what NVIDIA's and PyTorch's wheels say: a wheel's METADATA (Requires-Dist), the python tags of its
file name, nvcc's `--list-gpu-code` (or ptxas's targets), and host_config.h's GCC limit. Pure, except
gpu_targets, which runs the nvcc (or ptxas) of a wheel (proven by PyPI's sha256 before it gets here) with a
time limit and a bounded output.

Every member is read from the zip without installing it, at most `limit` bytes: a member that says it is larger,
or that inflates past what it says, is refused (WheelUnreadable).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.versions import MajorMinor

MAX_HEADER = 1 << 20  # host_config.h is 11 KiB (nvidia-cuda-crt 13.5.37)
MAX_TOOL = 256 << 20  # bin/nvcc is 35 MiB, bin/ptxas 49 MiB (nvidia-cuda-nvcc 13.5.37)
MAX_OUTPUT = 256 << 10  # ptxas --help prints about 20 KiB
TOOL_TIMEOUT_S = 60.0

# The names of the pins that say which CUDA, cuDNN and NCCL a torch wheel runs with (PyPI's torch METADATA:
# `cuda-toolkit[cublas,...]==13.2.2; platform_system == "Linux"` from 2.14, `nvidia-cuda-runtime-cu12==12.8.90`
# before; `nvidia-cudnn-cu13==9.26.0.51`, `nvidia-nccl-cu13==2.30.7`).
_PIN_KEYS = (
    ("cuda", re.compile(r"cuda-toolkit|nvidia-cuda-runtime(?:-cu[0-9]+)?")),
    ("cudnn", re.compile(r"nvidia-cudnn(?:-cu[0-9]+)?")),
    ("nccl", re.compile(r"nvidia-nccl(?:-cu[0-9]+)?")),
)
# host_config.h (nvidia-cuda-crt 13.5.37, lines 133-137):
#   #if defined(__GNUC__)
#   #if __GNUC__ > 16
#   #error -- unsupported GNU version! gcc versions later than 16 are not supported! ...
_GCC_LIMIT = re.compile(
    r"^[ \t]*#[ \t]*if[ \t]+__GNUC__[ \t]*>[ \t]*([0-9]{1,3})[ \t]*\n(?:[ \t]*\n){0,3}"
    r"[ \t]*#[ \t]*error[ \t]+-- unsupported GNU version",
    re.MULTILINE,
)
# `nvcc --list-gpu-code` (nvidia-cuda-nvcc 13.5.37): one `sm_NN` per line.
_SM = re.compile(r"sm_([0-9]{2,3})")
# `ptxas --help` (nvidia-cuda-nvcc-cu12 12.4.131), --gpu-name: "Allowed values for this option:  'compute_50',
# ... 'sm_90','sm_90a'." (one quoted value each)
_SM_QUOTED = re.compile(r"'sm_([0-9]{2,3})'")
# Wheel file names (the binary distribution format spec): name-version(-build)?-python-abi-platform.whl
_CP_TAG = re.compile(r"cp3([0-9]{1,2})")


class WheelUnreadable(EnvsolverError):
    """A wheel or sdist does not hold what its readers expect, or holds it past their limits (exit 2)."""

    kind: Kind = "fetch"


def requires_dist(metadata: str) -> tuple[str, ...]:
    """The Requires-Dist values of a core metadata file (the header block, RFC 822 style), as written."""
    head = metadata.replace("\r\n", "\n").split("\n\n", 1)[0]
    return tuple(line.split(":", 1)[1].strip() for line in head.split("\n") if line.startswith("Requires-Dist:"))


def metadata_field(metadata: str, name: str) -> str | None:
    head = metadata.replace("\r\n", "\n").split("\n\n", 1)[0]
    return next((line.split(":", 1)[1].strip() for line in head.split("\n") if line.startswith(f"{name}:")), None)


def cuda_requirements(requires: tuple[str, ...]) -> tuple[str, ...]:
    """The requirements that name the CUDA runtime, cuDNN or NCCL (what the audit compares), as written."""
    return tuple(r for r in requires if pin_key(r) is not None)


def pin_key(requirement: str) -> str | None:
    """'cuda', 'cudnn' or 'nccl' for a requirement on that package; None for any other (or an unparsable one)."""
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None
    return next((key for key, pattern in _PIN_KEYS if pattern.fullmatch(name)), None)


def pins(requires: tuple[str, ...]) -> dict[str, str]:
    """{'cuda': '13.0.3', 'cudnn': '9.24.0.43', 'nccl': '2.30.7'}: the exact (==) version of each pin. Raises
    ValueError for a pin that is not one exact version (the audit cannot read a range as 'the' version)."""
    out: dict[str, str] = {}
    for text in requires:
        key = pin_key(text)
        if key is None:
            continue
        specs = list(Requirement(text).specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise ValueError(f"{text!r} is not pinned to one version (==X)")
        if key in out and out[key] != specs[0].version:
            raise ValueError(f"two {key} pins: {out[key]} and {specs[0].version}")
        out[key] = specs[0].version
    return out


def python_tag(filename: str) -> MajorMinor | None:
    """The CPython version of a wheel's python tag: 'torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl' -> 3.11;
    None for a file that is not a wheel or has another tag (py3)."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return None
    match = _CP_TAG.fullmatch(parts[-3])
    return MajorMinor(3, int(match.group(1))) if match else None


def gcc_limit(host_config: str) -> int | None:
    """N of host_config.h's `#if __GNUC__ > N` / `#error -- unsupported GNU version`: the newest GCC major nvcc
    accepts. None when the file holds no such check. Raises ValueError when it holds two different ones."""
    found = {int(m.group(1)) for m in _GCC_LIMIT.finditer(host_config.replace("\r\n", "\n"))}
    if len(found) > 1:
        raise ValueError(f"host_config.h holds more than one GCC limit: {sorted(found)}")
    return found.pop() if found else None


def gpu_codes(output: str) -> frozenset[int]:
    """The SM numbers of `nvcc --list-gpu-code`'s output. Raises ValueError for a line that is not `sm_NN`."""
    found = set()
    for line in output.split("\n"):
        line = line.strip()
        if not line:
            continue
        match = _SM.fullmatch(line)
        if match is None:
            raise ValueError(f"nvcc --list-gpu-code printed {line[:80]!r}, not sm_NN")
        found.add(int(match.group(1)))
    if not found:
        raise ValueError("nvcc --list-gpu-code printed no sm_NN line")
    return frozenset(found)


def member(archive: zipfile.ZipFile, suffix: str) -> zipfile.ZipInfo | None:
    """The one member whose name ends with `suffix`; None when there is none. Raises WheelUnreadable for two."""
    found = [info for info in archive.infolist() if info.filename.endswith(suffix) and not info.is_dir()]
    if len(found) > 1:
        raise WheelUnreadable(f"{len(found)} members end with {suffix!r}; expected one")
    return found[0] if found else None


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """The member's bytes, at most `limit` (the size its header says, and what it inflates to, both checked)."""
    if info.file_size > limit:
        raise WheelUnreadable(f"{info.filename!r} is {info.file_size} bytes, more than the {limit} allowed")
    with archive.open(info) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit or len(data) != info.file_size:
        raise WheelUnreadable(f"{info.filename!r} does not inflate to the {info.file_size} bytes its header says")
    return data


def host_config(wheel: Path) -> int | None:
    """The GCC limit of the wheel's include/crt/host_config.h; None when the wheel has no such file."""
    with zipfile.ZipFile(wheel) as archive:
        info = member(archive, "/include/crt/host_config.h")
        if info is None:
            return None
        text = read_member(archive, info, MAX_HEADER).decode("utf-8", errors="replace")
    try:
        return gcc_limit(text)
    except ValueError as exc:
        raise WheelUnreadable(f"{wheel.name}: {exc}") from None


def gpu_targets(wheel: Path, timeout: float = TOOL_TIMEOUT_S) -> tuple[frozenset[int], str]:
    """(the SM numbers, how they were read) of the wheel's compiler: `nvcc --list-gpu-code` where the wheel holds
    bin/nvcc (nvidia-cuda-nvcc, CUDA 13), else the `sm_NN` values `ptxas --help` allows for --gpu-name (the
    CUDA 11 and 12 wheels hold ptxas, the assembler that writes each target's SASS, but no nvcc)."""
    with zipfile.ZipFile(wheel) as archive:
        nvcc = member(archive, "/bin/nvcc")
        tool = nvcc or member(archive, "/bin/ptxas")
        if tool is None:
            raise WheelUnreadable(f"{wheel.name} holds neither bin/nvcc nor bin/ptxas")
        data = read_member(archive, tool, MAX_TOOL)
    args = ["--list-gpu-code"] if nvcc else ["--help"]
    how = f"{'nvcc' if nvcc else 'ptxas'} {args[0]}"
    text = _run(data, args, wheel.name, timeout)
    try:
        return (gpu_codes(text) if nvcc else ptxas_targets(text)), how
    except ValueError as exc:
        raise WheelUnreadable(f"{wheel.name}: {how}: {exc}") from None


def _run(program: bytes, args: list[str], shown: str, timeout: float) -> str:
    """Run `program` (a tool copied out of a wheel into a private temporary directory: nothing is installed) with an
    empty environment but PATH, a time limit and at most MAX_OUTPUT bytes of output read."""
    with tempfile.TemporaryDirectory(prefix="envsolver-tool-") as tmp:
        path = Path(tmp) / "tool"
        path.write_bytes(program)
        os.chmod(path, 0o700)
        out = Path(tmp) / "out"
        try:
            with out.open("wb") as sink:
                done = subprocess.run(
                    [str(path), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env={"PATH": "/usr/bin:/bin"},
                    cwd=tmp,
                    timeout=timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise WheelUnreadable(f"{shown}: {' '.join(args)} ran past {timeout:.0f} s") from None
        except OSError as exc:
            raise WheelUnreadable(f"{shown}: its tool cannot run here ({exc.strerror or exc})") from None
        with out.open("rb") as handle:
            text = handle.read(MAX_OUTPUT).decode("utf-8", errors="replace")
    if done.returncode != 0:
        raise WheelUnreadable(f"{shown}: {' '.join(args)} exited {done.returncode}: {text[:300]!r}")
    return text


def ptxas_targets(help_text: str) -> frozenset[int]:
    """The plain `sm_NN` values of `ptxas --help`'s --gpu-name "Allowed values for this option" (not sm_90a or
    sm_100f, which are variants of sm_90 and sm_100). Raises ValueError when the help holds no such list."""
    start = help_text.find("--gpu-name")
    allowed = help_text.find("Allowed values for this option:", start) if start >= 0 else -1
    end = help_text.find("Default value", allowed) if allowed >= 0 else -1
    if end < 0:
        raise ValueError("no --gpu-name 'Allowed values' list")
    found = frozenset(int(m.group(1)) for m in _SM_QUOTED.finditer(help_text[allowed:end]))
    if not found:
        raise ValueError("the --gpu-name list holds no sm_NN value")
    return found
