"""The facts the upstream audit compares, as read from their sources, and their recorded form.

A recording (tests/data/kb_audit/upstream.json) holds only these fields, the date they were read and the URL of
each source, so CI compares the KB with them offline. `load` checks every field's type and grammar: a hand-edited
or truncated recording is refused (ValueError with the field's path), never half-read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from envsolver.core import atomic

MAX_RECORDING = 1 << 20
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MM = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")


@dataclass(frozen=True)
class TorchRelease:
    """One torch release on PyPI: its default wheel (manylinux x86_64, the lowest CPython), that wheel's
    Requires-Python and its Requires-Dist lines that pin CUDA, cuDNN and NCCL; the CPython versions of its
    manylinux x86_64 wheels."""

    wheel: str
    metadata_from: str  # 'PEP 658 file' (the wheel URL + .metadata) or 'wheel' (its .dist-info/METADATA)
    requires_python: str | None
    cuda_requires: tuple[str, ...]
    python_tags: tuple[str, ...]


@dataclass(frozen=True)
class DeepSpeedSdist:
    url: str
    sha256: str
    requires: tuple[str, ...]
    cuda_build_adds: tuple[str, ...]
    cuda_minor_mismatch_ok: dict[str, tuple[str, ...]]
    min_torch: str | None


@dataclass(frozen=True)
class Nvcc:
    """One nvcc wheel (x86_64): the SM targets its compiler lists (sm_from says how) and the GCC limit of the
    host_config.h it compiles with (its own from CUDA 11/12 wheels; nvidia-cuda-crt's of the same version from 13.0)."""

    wheel: str
    sm: tuple[int, ...]
    sm_from: str  # 'nvcc --list-gpu-code' or 'ptxas --help' (wheels.gpu_targets)
    gcc_max: int | None
    host_config_from: str


@dataclass(frozen=True)
class Facts:
    read: str
    sources: dict[str, str]
    torch_versions: tuple[str, ...]  # every final release with a file on PyPI
    torch: dict[str, TorchRelease]  # the releases read (the KB's upstream_releases and any newer)
    deepspeed_versions: tuple[str, ...]  # every final release with an sdist that is not yanked
    deepspeed: dict[str, DeepSpeedSdist]  # the sdists read (from the KB's oldest pypi_sdists row on)
    cuda_versions: dict[str, tuple[str, ...]]  # package -> its final releases (nvidia-cuda-runtime, -nvcc, ...)
    nvcc: dict[str, Nvcc] = field(default_factory=dict)  # nvcc wheel version -> what it says


HEADER = "envsolver KB audit recording; regenerate: python scripts/kb_audit.py --live --record FILE"


def to_json(facts: Facts) -> dict[str, Any]:
    return {
        "header": HEADER,
        "read": facts.read,
        "sources": dict(sorted(facts.sources.items())),
        "torch_versions": list(facts.torch_versions),
        "torch": {
            v: {
                "wheel": r.wheel,
                "metadata_from": r.metadata_from,
                "requires_python": r.requires_python,
                "cuda_requires": list(r.cuda_requires),
                "python_tags": list(r.python_tags),
            }
            for v, r in _sorted(facts.torch)
        },
        "deepspeed_versions": list(facts.deepspeed_versions),
        "deepspeed": {
            v: {
                "url": s.url,
                "sha256": s.sha256,
                "requires": list(s.requires),
                "cuda_build_adds": list(s.cuda_build_adds),
                "cuda_minor_mismatch_ok": {k: list(m) for k, m in s.cuda_minor_mismatch_ok.items()},
                "min_torch": s.min_torch,
            }
            for v, s in _sorted(facts.deepspeed)
        },
        "cuda_versions": {k: list(v) for k, v in sorted(facts.cuda_versions.items())},
        "nvcc": {
            v: {
                "wheel": n.wheel,
                "sm": list(n.sm),
                "sm_from": n.sm_from,
                "gcc_max": n.gcc_max,
                "host_config_from": n.host_config_from,
            }
            for v, n in _sorted(facts.nvcc)
        },
    }


def _sorted(items: dict[str, Any]) -> list[tuple[str, Any]]:
    return sorted(items.items(), key=lambda kv: Version(kv[0]))


def dump(facts: Facts, path: Path) -> None:
    """Write the recording atomically (core.atomic), keys in a fixed order."""
    atomic.replace(path, (json.dumps(to_json(facts), indent=1) + "\n").encode("utf-8"))


def load(path: Path) -> Facts:
    """A recording. Raises OSError when it cannot be read, ValueError (naming the field) when it is not one."""
    with path.open("rb") as handle:
        data = handle.read(MAX_RECORDING + 1)
    if len(data) > MAX_RECORDING:
        raise ValueError(f"{path}: larger than {MAX_RECORDING} bytes; a recording holds only the compared fields")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    return from_json(doc)


def from_json(doc: Any) -> Facts:
    d = _dict(doc, "")
    return Facts(
        read=_text(d.get("read"), "read", _DATE),
        sources={k: _text(v, f"sources.{k}") for k, v in _dict(d.get("sources"), "sources").items()},
        torch_versions=_versions(d.get("torch_versions"), "torch_versions"),
        torch={_version(v, "torch"): _torch(r, f"torch.{v}") for v, r in _dict(d.get("torch"), "torch").items()},
        deepspeed_versions=_versions(d.get("deepspeed_versions"), "deepspeed_versions"),
        deepspeed={
            _version(v, "deepspeed"): _sdist(s, f"deepspeed.{v}")
            for v, s in _dict(d.get("deepspeed"), "deepspeed").items()
        },
        cuda_versions={
            k: _versions(v, f"cuda_versions.{k}") for k, v in _dict(d.get("cuda_versions"), "cuda_versions").items()
        },
        nvcc={_version(v, "nvcc"): _nvcc(n, f"nvcc.{v}") for v, n in _dict(d.get("nvcc"), "nvcc").items()},
    )


def _torch(value: Any, where: str) -> TorchRelease:
    d = _dict(value, where)
    python = d.get("requires_python")
    return TorchRelease(
        wheel=_text(d.get("wheel"), f"{where}.wheel"),
        metadata_from=_text(d.get("metadata_from"), f"{where}.metadata_from", re.compile(r"PEP 658 file|wheel")),
        requires_python=None if python is None else _text(python, f"{where}.requires_python"),
        cuda_requires=_texts(d.get("cuda_requires"), f"{where}.cuda_requires"),
        python_tags=_texts(d.get("python_tags"), f"{where}.python_tags", _MM),
    )


def _sdist(value: Any, where: str) -> DeepSpeedSdist:
    d = _dict(value, where)
    min_torch = d.get("min_torch")
    return DeepSpeedSdist(
        url=_text(d.get("url"), f"{where}.url"),
        sha256=_text(d.get("sha256"), f"{where}.sha256", _SHA256),
        requires=_texts(d.get("requires"), f"{where}.requires"),
        cuda_build_adds=_texts(d.get("cuda_build_adds"), f"{where}.cuda_build_adds"),
        cuda_minor_mismatch_ok={
            _text(k, f"{where}.cuda_minor_mismatch_ok", re.compile(r"[0-9]{1,3}")): _texts(
                v, f"{where}.cuda_minor_mismatch_ok.{k}", _MM
            )
            for k, v in _dict(d.get("cuda_minor_mismatch_ok"), f"{where}.cuda_minor_mismatch_ok").items()
        },
        min_torch=None if min_torch is None else _text(min_torch, f"{where}.min_torch", _MM),
    )


def _nvcc(value: Any, where: str) -> Nvcc:
    d = _dict(value, where)
    sm = d.get("sm")
    if not isinstance(sm, list) or not sm or not all(type(x) is int and 10 <= x <= 999 for x in sm):
        raise ValueError(f"{where}.sm: expected a list of SM numbers (75, 120)")
    gcc = d.get("gcc_max")
    if gcc is not None and not (type(gcc) is int and 1 <= gcc <= 99):
        raise ValueError(f"{where}.gcc_max: expected a GCC major or null")
    sm_from = _text(d.get("sm_from"), f"{where}.sm_from", re.compile(r"nvcc --list-gpu-code|ptxas --help"))
    return Nvcc(
        _text(d.get("wheel"), f"{where}.wheel"),
        tuple(sm),
        sm_from,
        gcc,
        _text(d.get("host_config_from"), f"{where}.host_config_from"),
    )


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{where or 'the recording'}: expected an object")
    return value


def _text(value: Any, where: str, grammar: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or (grammar and not grammar.fullmatch(value)):
        raise ValueError(f"{where}: {str(value)[:80]!r} is not {'a ' + grammar.pattern if grammar else 'a string'}")
    return value


def _texts(value: Any, where: str, grammar: re.Pattern[str] | None = None) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list")
    return tuple(_text(v, f"{where}[{i}]", grammar) for i, v in enumerate(value))


def _version(value: str, where: str) -> str:
    try:
        return str(Version(value)) if str(Version(value)) == value else _bad(value, where)
    except InvalidVersion:
        return _bad(value, where)


def _bad(value: str, where: str) -> str:
    raise ValueError(f"{where}: {value[:80]!r} is not a canonical version")


def _versions(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_version(v, where) for v in _texts(value, where))
