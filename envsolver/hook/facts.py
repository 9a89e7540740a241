"""Facts the pre-flight needs, read from the prefix and its python: nvcc, torch's CUDA, headers, host g++.

Every probe goes through an injectable runner, so tests use fake prefixes and fake nvcc scripts.
Torch is imported in the target python (a subprocess), never in envsolver's own process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envsolver.hook import activation

Runner = Callable[[list[str], Mapping[str, str]], tuple[int, str]]

# Sample (nvcc --version, last lines):
#   Cuda compilation tools, release 13.0, V13.0.88
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")
# Sample (g++ --version, first line): g++ (Debian 12.2.0-14+deb12u1) 12.2.0
_GCC_VERSION = re.compile(r"(\d+)\.\d+(?:\.\d+)?\s*$")
TORCH_PROBE = "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda}))"


def run(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout + done.stderr


@dataclass(frozen=True)
class Facts:
    cuda_home: Path
    nvcc: Path | None
    nvcc_version: str | None
    nvcc_archs: tuple[int, ...] | None  # from `nvcc --list-gpu-arch`; None when it could not say
    torch_version: str | None
    torch_cuda: str | None
    torch_error: str | None
    include_dirs: tuple[Path, ...]
    headers: dict[str, Path | None] = field(default_factory=dict)
    cxx: str | None = None
    cxx_major: int | None = None


def parse_nvcc_version(text: str) -> str | None:
    match = _NVCC_RELEASE.search(text)
    return match.group(1) if match else None


def parse_gpu_archs(text: str) -> tuple[int, ...] | None:
    archs = sorted({int(m) for m in re.findall(r"compute_(\d+)", text)})
    return tuple(archs) or None


def parse_gcc_major(text: str) -> int | None:
    first = text.splitlines()[0] if text.strip() else ""
    match = _GCC_VERSION.search(first)
    return int(match.group(1)) if match else None


def cuda_home(prefix: Path, environ: Mapping[str, str]) -> Path:
    """Where the build will look for CUDA: the prefix when it holds nvcc (conda-forge's cuda-nvcc), else
    CUDA_HOME, CUDA_PATH, /usr/local/cuda (torch.utils.cpp_extension's order)."""
    if (prefix / "bin" / "nvcc").exists():
        return prefix
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(name):
            return Path(environ[name])
    return Path("/usr/local/cuda")


def include_dirs(home: Path, target: str, environ: Mapping[str, str]) -> tuple[Path, ...]:
    dirs = [home / "include", home / "targets" / target / "include"]
    dirs += [Path(p) for p in environ.get("CPATH", "").split(":") if p]
    return tuple(dict.fromkeys(dirs))


def _cxx(prefix: Path, environ: Mapping[str, str], target: str) -> str | None:
    if environ.get("CXX"):
        return environ["CXX"]
    triplet = "x86_64-conda-linux-gnu" if target.startswith("x86_64") else "aarch64-conda-linux-gnu"
    conda_cxx = prefix / "bin" / f"{triplet}-c++"
    if conda_cxx.exists():
        return str(conda_cxx)
    return shutil.which("c++") or shutil.which("g++")


def gather(
    prefix: Path, python: Path, headers: tuple[str, ...], target: str, environ: Mapping[str, str], runner: Runner = run
) -> Facts:
    home = cuda_home(prefix, environ)
    nvcc = home / "bin" / "nvcc"
    nvcc_version = nvcc_archs = None
    if nvcc.exists():
        _, out = runner([str(nvcc), "--version"], environ)
        nvcc_version = parse_nvcc_version(out)
        code, out = runner([str(nvcc), "--list-gpu-arch"], environ)
        nvcc_archs = parse_gpu_archs(out) if code == 0 else None
    code, out = runner([str(python), "-c", TORCH_PROBE], environ)
    torch_version = torch_cuda = torch_error = None
    if code == 0:
        try:
            doc = json.loads(out.strip().splitlines()[-1])
            torch_version, torch_cuda = doc["torch"], doc["cuda"]
        except (ValueError, KeyError, IndexError):
            torch_error = out.strip()[-300:]
    else:
        torch_error = out.strip()[-300:] or f"exit {code}"
    dirs = include_dirs(home, target, environ)
    found = {h: next((d / h for d in dirs if (d / h).exists()), None) for h in headers}
    cxx = _cxx(prefix, environ, target)
    cxx_major = None
    if cxx:
        code, out = runner([cxx, "--version"], environ)
        cxx_major = parse_gcc_major(out) if code == 0 else None
    return Facts(
        home,
        nvcc if nvcc.exists() else None,
        nvcc_version,
        nvcc_archs,
        torch_version,
        torch_cuda,
        torch_error,
        dirs,
        found,
        cxx,
        cxx_major,
    )


def environ_for_build(prefix: Path, arch_list: str, target: str, base: Mapping[str, str]) -> dict[str, str]:
    """The environment the activation scripts would set, applied to `base` (for builds and probes). CUDA_HOME and
    PATH point into the prefix only where it holds nvcc. Raises ValueError on a malformed arch list."""
    env = dict(base)
    env["CONDA_PREFIX"] = str(prefix)
    has_nvcc = (prefix / "bin" / "nvcc").exists()
    for name, parts in activation.settings(arch_list, target).items():
        if name != "CUDA_HOME" or has_nvcc:
            env[name] = activation.resolve(parts, env)
    if has_nvcc:
        env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env
