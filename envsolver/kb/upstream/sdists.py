"""What a DeepSpeed sdist says, read without running it (the rules scripts/ds_sdist_facts.py applied first):
requirements/requirements.txt (setup.py's install_requires), what setup.py appends to it and under which
condition (ast), op_builder/builder.py's cuda_minor_mismatch_ok (the nvcc vs torch CUDA allow-list), and
README.md's "we recommend a version of PyTorch that is >= X". Pure but for reading the file it is given.

Bounded: at most MAX_MEMBERS members and MAX_INFLATED bytes are walked, and each file read is at most MAX_MEMBER.
"""

from __future__ import annotations

import ast
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from envsolver.kb.upstream.wheels import WheelUnreadable

MAX_MEMBER = 1 << 20  # builder.py is 40 KiB, README.md 30 KiB (0.19.8)
MAX_MEMBERS = 20_000  # 0.19.8 holds about 1,300
MAX_INFLATED = 256 << 20  # 0.19.8 inflates to about 10 MiB
WANTED = ("requirements/requirements.txt", "setup.py", "op_builder/builder.py", "README.md")
# README.md (0.14.0 line 151, 0.19.8 line 135): "* For full feature support we recommend a version of PyTorch that is
# >= 2.0 and ideally the latest PyTorch stable release."
_MIN_TORCH = re.compile(r"we recommend a version of PyTorch that is >= ([0-9]+\.[0-9]+)")


@dataclass(frozen=True)
class SdistFacts:
    requires: tuple[str, ...]
    cuda_build_adds: tuple[str, ...]
    cuda_minor_mismatch_ok: dict[str, tuple[str, ...]]  # CUDA major -> the minors builder.py lists, as written
    min_torch: str | None


def read(path: Path, version: str) -> SdistFacts:
    """The facts of deepspeed-VERSION.tar.gz at `path`. Raises WheelUnreadable when a file is missing, too large,
    or not what the rules read (setup.py's install_requires other than the file plus CUDA appends)."""
    texts = _members(path, version)
    missing = [name for name in WANTED if name not in texts]
    if missing:
        raise WheelUnreadable(f"deepspeed-{version}.tar.gz lacks {', '.join(missing)}")
    lines = texts["requirements/requirements.txt"].splitlines()
    requires = tuple(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))
    setup = texts["setup.py"]
    try:
        extra = appended(setup)
        mismatch = mismatch_ok(texts["op_builder/builder.py"])
    except (SyntaxError, ValueError) as exc:
        raise WheelUnreadable(f"deepspeed-{version}.tar.gz: a file the audit reads does not parse ({exc})") from None
    if any("device_name() == 'cuda'" not in cond for _, cond in extra) or (
        "fetch_requirements('requirements/requirements.txt')" not in setup
    ):
        raise WheelUnreadable(f"deepspeed {version}: setup.py's install_requires is not the file plus CUDA appends")
    found = _MIN_TORCH.search(texts["README.md"])
    return SdistFacts(requires, tuple(r for r, _ in extra), mismatch, found.group(1) if found else None)


def _members(path: Path, version: str) -> dict[str, str]:
    prefix = f"deepspeed-{version}/"
    texts: dict[str, str] = {}
    walked = inflated = 0
    try:
        with tarfile.open(path, mode="r:gz") as archive:
            for info in archive:
                walked += 1
                inflated += max(info.size, 0)
                if walked > MAX_MEMBERS or inflated > MAX_INFLATED:
                    raise WheelUnreadable(f"{path.name} holds more than {MAX_MEMBERS} members or {MAX_INFLATED} bytes")
                name = info.name.removeprefix(prefix)
                if name not in WANTED or not info.name.startswith(prefix):
                    continue
                if not info.isfile() or info.size > MAX_MEMBER:
                    raise WheelUnreadable(f"{name} in {path.name} is not a regular file of at most {MAX_MEMBER} bytes")
                handle = archive.extractfile(info)
                if handle is None:
                    raise WheelUnreadable(f"{name} in {path.name} cannot be read")
                texts[name] = handle.read(MAX_MEMBER).decode("utf-8", errors="replace")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise WheelUnreadable(f"{path.name} is not a readable .tar.gz ({exc})") from None
    return texts


def appended(setup: str) -> list[tuple[str, str]]:
    """(requirement, the condition's source) for each `install_requires.append('X')` under an `if` in setup.py."""
    found = []
    for node in ast.walk(ast.parse(setup)):
        if not isinstance(node, ast.If):
            continue
        for child in node.body:
            call = child.value if isinstance(child, ast.Expr) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "install_requires"
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                found.append((str(call.args[0].value), ast.get_source_segment(setup, node.test) or ""))
    return found


def mismatch_ok(builder: str) -> dict[str, tuple[str, ...]]:
    """builder.py's module-level `cuda_minor_mismatch_ok = {10: [...], 11: [...], 12: [...]}` as strings. Raises
    ValueError when it is not a literal dict of lists of strings; {} when there is none."""
    for node in ast.parse(builder).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "cuda_minor_mismatch_ok" for t in node.targets):
            value = ast.literal_eval(node.value)
            if not isinstance(value, dict) or not all(
                isinstance(k, int) and isinstance(v, list) and all(isinstance(x, str) for x in v)
                for k, v in value.items()
            ):
                raise ValueError("cuda_minor_mismatch_ok is not {major: [minor, ...]}")
            return {str(k): tuple(v) for k, v in sorted(value.items())}
    return {}
