"""Runs inside the TARGET python (standard library only) and prints one JSON document of facts: the one source
of facts for `envsolver verify` and for the hook's pre-flight.

One `try` per fact: a fact that cannot be had is null, with the error text beside it. torch is imported in
a child process with a timeout, so a hung CUDA initialisation cannot hang the probe; with --no-torch it is not
(no `torch` fact: what envsolver passes when no check it runs reads torch's facts, verify/checks.probe_needs).
Usage: python probe.py [--timeout SECONDS] [--headers a.h,b.h] [--no-torch] [--deepspeed] [--gpu-test] [--stream]
                       [--prefix DIR] [--target TARGET] [--activate] [--no-devices] [--toolkit-only]
                       [--dists a,b] [--op-runner PATH]
It needs no file of its own: `python -I -c "$(cat probe.py)" ARGS` runs it as well (how `verify --cluster` runs
it on a node, with the environment's python: no envsolver, no other interpreter there). Under -I its children
(torch's, DeepSpeed's, the GPU test) are isolated too; without it (`envsolver verify`, which must see the caller's
PYTHONPATH) they see what it sees, with PYTHONSAFEPATH=1. Every child starts in a private directory of the probe's.
With --stream, a first line {"partial": facts} carries the host facts (everything but torch and DeepSpeed) as
soon as they are known; the last line is always the complete document.
--prefix is the environment (default: sys.prefix) and --target its CUDA include target (x86_64-linux,
sbsa-linux; default: every targets/*/include): `prefix_toolkit` says whether the prefix holds nvcc and the
headers. With --activate, when it holds them, the probe first sets what the hook's activation scripts set for
them (CUDA_HOME=PREFIX, CPATH=PREFIX/targets/TARGET/include[:$CPATH], as envsolver/hook/activation.py writes),
so the facts are those of the activated environment. --no-devices skips torch's GPU queries (the hook's
pre-flight needs torch's version and CUDA build only); --toolkit-only prints `prefix_toolkit` alone.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import selectors
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

# The default header list; envsolver passes the knowledge base's with --headers.
HEADERS = [
    "cuda.h",
    "cuda_runtime_api.h",
    "cusparse.h",
    "cublas_v2.h",
    "cublasLt.h",
    "cusolverDn.h",
    "curand.h",
    "cuda_profiler_api.h",
]
ENV_KEYS = [
    "CONDA_PREFIX",
    "CUDA_HOME",
    "CUDA_PATH",
    "CPATH",
    "LD_LIBRARY_PATH",
    "TORCH_CUDA_ARCH_LIST",
    "TORCH_EXTENSIONS_DIR",
    "DS_ACCELERATOR",
    "CXX",
    "CUDA_VISIBLE_DEVICES",
    "DS_SKIP_CUDA_CHECK",
    "SLURM_JOB_ID",  # inside a Slurm job: a compute node, where a fix is made from a login node (checks_base)
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
]

# Each child prints its JSON line, then leaves without the interpreter's teardown (os._exit): once torch is
# imported that teardown took 0.6 s of CPU time, a third of the child's (torch 2.13 on CPU, 2026-12-02).
_LEAVE = r"""
def done():
    print(json.dumps(out))
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)
"""
TORCH_CHILD = (
    r"""
import json, os, sys
out = {}
devices = "--no-devices" not in sys.argv
"""
    + _LEAVE
    + r"""
try:
    import torch
    out["version"] = torch.__version__
    out["file"] = torch.__file__
    out["cuda"] = torch.version.cuda
    try:
        out["arch_list"] = torch.cuda.get_arch_list()
    except Exception as exc:
        out["arch_list"] = None; out["arch_list_error"] = str(exc)
    if not devices:
        done()
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn"] = None; out["cudnn_error"] = str(exc)
    try:
        out["available"] = torch.cuda.is_available()
        out["device_count"] = torch.cuda.device_count()
        out["devices"] = [{"name": torch.cuda.get_device_name(i),
                           "capability": "%d.%d" % torch.cuda.get_device_capability(i)}
                          for i in range(out["device_count"])]
    except Exception as exc:
        out["available"] = False; out["cuda_error"] = str(exc)
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        out["nccl"] = None; out["nccl_error"] = str(exc)
    try:
        if out.get("available"):
            torch.zeros(1, device="cuda")
        with open("/proc/self/maps") as maps:
            libs = sorted({line.split()[-1] for line in maps if "libcudart" in line or "libcudnn.so" in line
                           or "libnccl" in line})
        out["loaded_libs"] = libs
    except Exception as exc:
        out["loaded_libs"] = None; out["loaded_libs_error"] = str(exc)
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
done()
"""
)

# DeepSpeed's facts, one try each. DeepSpeed keeps compatible_ops in deepspeed.git_version_info up to 0.19.7
# (computed when it is imported); 0.19.8 moved them to the lazy deepspeed.ops.__compatible_ops__.
DS_CHILD = (
    r"""
import json, os, re, sys, time
from importlib import metadata
out = {}
"""
    + _LEAVE
    + r"""
def fact(name, get):
    try:
        out[name] = get()
    except Exception as exc:
        out[name] = None
        out[name + "_error"] = "%s: %s" % (type(exc).__name__, exc)
def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()
def requires_missing():
    # DeepSpeed's run requirements (its metadata's Requires-Dist, extras left out) with no distribution installed
    have = set(key(d.metadata["Name"] or "") for d in metadata.distributions())
    names = [re.match(r"[A-Za-z0-9._-]+", line).group(0) for line in metadata.requires("deepspeed") or []
             if "extra" not in line.partition(";")[2]]
    return sorted(set(key(n) for n in names if key(n) not in have))
def compatible_ops():
    import deepspeed.git_version_info as info
    if hasattr(info, "compatible_ops"):
        out["compatible_ops_from"] = "deepspeed.git_version_info"
        found = info.compatible_ops
    else:
        import deepspeed.ops
        out["compatible_ops_from"] = "deepspeed.ops.__compatible_ops__"
        found = deepspeed.ops.__compatible_ops__
    return dict((k, bool(v)) for k, v in found.items())
def accelerator():
    from deepspeed.accelerator import get_accelerator
    return get_accelerator()._name
def installed_ops():
    from deepspeed.git_version_info import installed_ops
    return dict((k, bool(v)) for k, v in installed_ops.items())
def extensions_root():
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return root
    import torch
    from torch.utils.cpp_extension import get_default_build_root
    flavour = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
    return os.path.join(get_default_build_root(), "py%d%d%s_%s" % (sys.version_info[0], sys.version_info[1],
                                                                   getattr(sys, "abiflags", ""), flavour))
fact("distribution", lambda: metadata.version("deepspeed"))
fact("requires_missing", requires_missing)
try:
    import deepspeed
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
    done()
fact("version", lambda: deepspeed.__version__)
fact("accelerator", accelerator)
fact("installed_ops", installed_ops)
fact("compatible_ops", compatible_ops)
fact("fused_adam_cache", lambda: os.path.join(extensions_root(), "fused_adam", "fused_adam.so"))
so = out.get("fused_adam_cache")
out["fused_adam_built"] = bool((out.get("installed_ops") or {}).get("fused_adam")) or bool(so and os.path.exists(so))
if out.get("accelerator") == "cuda" and out["fused_adam_built"]:
    try:
        from deepspeed.ops.op_builder import FusedAdamBuilder
        start = time.perf_counter()
        FusedAdamBuilder().load(verbose=False)
        out["fused_adam_load_seconds"] = time.perf_counter() - start
        out["fused_adam_loads"] = True
    except Exception as exc:
        out["fused_adam_loads"] = False
        out["fused_adam_error"] = "%s: %s" % (type(exc).__name__, str(exc)[-1500:])
done()
"""
)

# The FusedAdam-against-AdamW test is the hook's (envsolver/hook/op_runner.py adam-check), run as a file: the one
# beside this file's package, or --op-runner's when the probe runs as source (`python -I -c SOURCE`: no __file__).
_HERE = globals().get("__file__")
OP_RUNNER = (
    os.path.normpath(os.path.join(os.path.abspath(_HERE), os.pardir, os.pardir, "hook", "op_runner.py"))
    if _HERE
    else None
)


# How the probe starts a python: envsolver/core/pystart.py's rule (FLAGS, SAFE_PATH), copied here because the probe
# runs where envsolver cannot be imported; tests/test_isolation.py holds the copies equal.
FLAGS = ("-I",)
SAFE_PATH = ("PYTHONSAFEPATH", "1")
_WORKDIR: list[str] = []  # the probe's private directory, made on first use (_workdir)


def _python() -> list[str]:
    """This interpreter as its children run it: isolated (-I: PYTHONPATH, PYTHONHOME and the user's site-packages
    ignored) when the probe itself is, so torch's facts are the environment's own, not the submit shell's; else
    seeing the caller's PYTHONPATH as the probe does, with PYTHONSAFEPATH=1 (_child_env): in neither case is the
    working directory or a script's directory put first on sys.path (and it is the probe's private one)."""
    return [sys.executable, *FLAGS] if sys.flags.isolated else [sys.executable]


def _child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child python: the probe's (or ENV) with PYTHONSAFEPATH=1."""
    return dict(os.environ if env is None else env, **{SAFE_PATH[0]: SAFE_PATH[1]})


def _workdir() -> str:
    """The directory every child of the probe starts in: made private (mkdtemp, 0700) on first use, removed when
    the probe exits, so nothing in the caller's working directory is found by a child python."""
    if not _WORKDIR:
        import atexit
        import tempfile

        try:
            _WORKDIR.append(tempfile.mkdtemp(prefix="envsolver-probe-"))
            atexit.register(shutil.rmtree, _WORKDIR[0], True)
        except OSError:  # no writable temporary directory: the root directory, where only root can put a file
            _WORKDIR.append(os.sep)
    return _WORKDIR[0]


# What is read of a child's output (nvidia-smi, nvcc, the compiler, torch's and DeepSpeed's children) at most, in
# bytes: a child that prints more is stopped (the probe holds and prints what it reads; envsolver's own read of
# the probe is bounded too, core/pipes).
MAX_OUTPUT = 1 << 20
EXIT_TIMED_OUT, EXIT_TOO_MUCH, EXIT_NOT_STARTED = 124, 125, 127


class _TooMuch(Exception):
    """A child printed more than MAX_OUTPUT bytes."""


def _collect(child: subprocess.Popen[bytes], timeout: float) -> str:
    """What CHILD prints on its pipes (stdout, then stderr), read together until both close and it has exited,
    within TIMEOUT seconds and MAX_OUTPUT bytes; decoded as UTF-8, a byte that is not shown as U+FFFD. Else the
    child is killed and reaped and subprocess.TimeoutExpired or _TooMuch raised."""
    deadline = time.monotonic() + timeout
    got = {pipe: bytearray() for pipe in (child.stdout, child.stderr) if pipe is not None}
    try:
        with selectors.DefaultSelector() as selector:
            for pipe in got:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(child.args, timeout)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    got[key.fileobj] += chunk  # type: ignore[index]
                    if sum(len(part) for part in got.values()) > MAX_OUTPUT:
                        raise _TooMuch
        child.wait(max(0.0, deadline - time.monotonic()))
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        for pipe in got:
            pipe.close()
    return b"".join(got.values()).decode("utf-8", "replace")


def _run(argv: list[str], timeout: float = 30.0, env: dict[str, str] | None = None) -> tuple[int, str]:
    """ARGV's exit status and output (bounded: _collect); EXIT_TIMED_OUT, EXIT_TOO_MUCH or EXIT_NOT_STARTED with
    why, when it could not be had."""
    try:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_workdir()
        )
    except OSError as exc:
        return EXIT_NOT_STARTED, str(exc)
    try:
        text = _collect(child, timeout)
    except subprocess.TimeoutExpired:
        return EXIT_TIMED_OUT, "timed out after %ss" % timeout
    except _TooMuch:
        return EXIT_TOO_MUCH, "printed more than %d bytes, so it was stopped" % MAX_OUTPUT
    return child.returncode, text


def _start(code: str, *args: str) -> subprocess.Popen[bytes]:
    """Start a child python now (torch imports take seconds); collect it later with _finish."""
    return subprocess.Popen(
        [*_python(), "-c", code, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_child_env(),
        cwd=_workdir(),
    )


def _finish(child: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    try:
        out = _collect(child, timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %ss (a hung CUDA initialisation?)" % timeout}
    except _TooMuch:
        return {"error": "printed more than %d bytes, so it was stopped" % MAX_OUTPUT}
    return _parse(out, child.returncode)


def _parse(out: str, rc: int) -> dict[str, Any]:
    for line in reversed(out.strip().splitlines()):
        try:
            doc = json.loads(line)
            if isinstance(doc, dict):
                return doc
        except ValueError:
            continue
    return {"error": out.strip()[-2000:] or ("exit %d" % rc)}


def fact(facts: dict[str, Any], name: str, getter: Any) -> None:
    try:
        facts[name] = getter()
    except Exception as exc:  # one try per fact: record the error, keep going
        facts[name] = None
        facts[name + "_error"] = "%s: %s" % (type(exc).__name__, exc)


# The fields asked for, most first, as resolve/detect.SMI_FIELDS asks them (this file runs without envsolver): a
# driver that refuses one (compute_cap came with R510) is asked again without it; a field it cannot fill it prints
# as "[N/A]".
_SMI_FIELDS = (
    ("name", "pci.device_id", "compute_cap", "memory.total", "driver_version"),
    ("name", "pci.device_id", "memory.total", "driver_version"),
    ("name", "memory.total", "driver_version"),
)
# Sample (nvidia-smi --query-gpu=pci.device_id --format=csv,noheader: the device ID, then NVIDIA's vendor ID):
#   0x233510DE
_DEVICE_ID = re.compile(r"0x[0-9A-Fa-f]{8}")


def _smi_gpus(smi: str) -> tuple[list[dict[str, Any]], str | None] | None:
    """Each GPU (name, compute_capability, memory, and device_id where the driver gives a well-formed one) and the
    driver version, from the first of _SMI_FIELDS nvidia-smi answers; None when it answers none."""
    for fields in _SMI_FIELDS:
        rc, text = _run([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader"])
        if rc == 0:
            break
        if rc != 2:  # nvidia-smi refuses an unknown field with exit 2; anything else is no answer at all
            return None
    else:
        return None
    gpus: list[dict[str, Any]] = []
    version = None
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            continue
        row = dict(zip(fields, cells))
        gpu: dict[str, Any] = {"name": row["name"], "compute_capability": row.get("compute_cap", "[N/A]")}
        gpu["memory"] = row["memory.total"]
        if _DEVICE_ID.fullmatch(row.get("pci.device_id", "")):
            gpu["device_id"] = row["pci.device_id"]
        gpus.append(gpu)
        version = row["driver_version"]
    return gpus, version


def driver() -> dict[str, Any]:
    out: dict[str, Any] = {"source": None, "version": None, "cuda": None, "gpus": []}
    smi = shutil.which("nvidia-smi")
    answered = _smi_gpus(smi) if smi else None
    if smi and answered is not None:
        out["gpus"], out["version"] = answered
        out["source"] = "nvidia-smi"
        _rc, banner = _run([smi])
        match = re.search(r"CUDA Version:\s*([\d.]+)", banner)
        out["cuda"] = match.group(1) if match else None
    if out["version"] is None:
        for path in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
            if os.path.exists(path):
                with open(path) as handle:
                    text = handle.read()
                match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
                if match:
                    out["version"], out["source"] = match.group(1), path
                    break
    return out


def find_cuda_home(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """As torch.utils.cpp_extension._find_cuda_home: CUDA_HOME, CUDA_PATH, which nvcc, /usr/local/cuda (in
    `environ`, else this process's). The one home of the rule: the hook (ops.cuda_home) and op_runner.py's key use
    it too."""
    env = os.environ if environ is None else environ
    for key in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(key):
            return {"path": env[key], "how": key}
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        return {"path": os.path.dirname(os.path.dirname(nvcc)), "how": "nvcc on PATH"}
    if os.path.exists("/usr/local/cuda"):
        return {"path": "/usr/local/cuda", "how": "/usr/local/cuda"}
    return {"path": None, "how": None}


def nvcc(home: str | None) -> dict[str, Any]:
    path = os.path.join(home, "bin", "nvcc") if home else None
    if not path or not os.path.exists(path):
        return {"path": path, "exists": False, "version": None, "archs": None}
    _, text = _run([path, "--version"])
    match = re.search(r"release (\d+\.\d+)", text)
    rc2, archs = _run([path, "--list-gpu-arch"])
    found = sorted({int(m) for m in re.findall(r"compute_(\d+)", archs)}) if rc2 == 0 else None
    return {"path": path, "exists": True, "version": match.group(1) if match else None, "archs": found or None}


def include_dirs(home: str | None) -> list[str]:
    dirs = []
    if home:
        dirs.append(os.path.join(home, "include"))
        dirs += sorted(glob.glob(os.path.join(home, "targets", "*", "include")))
    dirs += [p for p in os.environ.get("CPATH", "").split(":") if p]
    seen = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def headers(dirs: list[str], names: list[str]) -> dict[str, str | None]:
    return {h: next((os.path.join(d, h) for d in dirs if os.path.exists(os.path.join(d, h))), None) for h in names}


def find_compiler(prefix: str) -> tuple[str | None, str | None]:
    """(path, how): CXX, else the prefix's conda compiler (<machine>-conda-linux-gnu-c++), else c++ or g++."""
    if os.environ.get("CXX"):
        return os.environ["CXX"], "CXX"
    conda_cxx = os.path.join(prefix, "bin", "%s-conda-linux-gnu-c++" % platform.machine())
    if os.path.exists(conda_cxx):
        return conda_cxx, "the prefix's conda compiler"
    found = shutil.which("c++") or shutil.which("g++")
    return found, ("PATH" if found else None)


def compiler(prefix: str) -> dict[str, Any]:
    cxx, how = find_compiler(prefix)
    if not cxx:
        return {"path": None, "version": None, "major": None, "how": None}
    rc, text = _run([cxx, "--version"])
    first = text.splitlines()[0] if text.strip() and rc == 0 else ""
    match = re.search(r"(\d+)\.\d+(?:\.\d+)?\s*$", first)
    return {"path": cxx, "version": first.strip(), "major": int(match.group(1)) if match else None, "how": how}


def prefix_toolkit(prefix: str, target: str | None, names: list[str]) -> dict[str, Any]:
    """Whether PREFIX holds the CUDA toolkit an op build needs: nvcc in PREFIX/bin and every header in
    PREFIX/targets/TARGET/include (conda-forge's layout)."""
    if target:
        dirs = [os.path.join(prefix, "targets", target, "include")]
    else:
        dirs = sorted(glob.glob(os.path.join(prefix, "targets", "*", "include")))
    tool = nvcc(prefix)
    found = headers(dirs, names)
    missing = [h for h in names if found.get(h) is None]
    return {
        "prefix": prefix,
        "conda": os.path.isdir(os.path.join(prefix, "conda-meta")),
        "nvcc": tool,
        "include_dir": dirs[0] if dirs else None,
        "headers": found,
        "missing": missing,
        "complete": bool(tool["exists"]) and bool(dirs) and not missing,
        "activated": False,
    }


def activate(toolkit: dict[str, Any]) -> None:
    """Set what the hook's activation scripts set for a prefix that holds the toolkit (CUDA_HOME, CPATH)."""
    old = os.environ.get("CPATH")
    os.environ["CUDA_HOME"] = toolkit["prefix"]
    os.environ["CPATH"] = toolkit["include_dir"] + (":" + old if old else "")
    toolkit["activated"] = True


def libcudart_candidates() -> list[str]:
    dirs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    out = []
    for d in dirs:
        out += sorted(glob.glob(os.path.join(d, "libcudart.so*")))
    return out


def conda_meta() -> list[dict[str, Any]]:
    """Each conda-meta record's name, version and build, and the *.dist-info directories its files list in a
    site-packages directory (relative to the prefix; not those a package vendors): the Python distributions that
    package installed. envsolver/install/shadowing.listed_infos reads a record the same way."""
    meta = os.path.join(sys.prefix, "conda-meta")
    out = []
    for path in sorted(glob.glob(os.path.join(meta, "*.json"))):
        try:
            doc = json.loads(read_regular(path, MAX_RECORD) or b"")
            record: dict[str, Any] = {"name": doc["name"], "version": doc["version"], "build": doc["build"]}
            heads = {f.split(".dist-info/", 1)[0] for f in doc.get("files") or () if ".dist-info/" in f}
            infos = {h + ".dist-info" for h in heads if h.rpartition("/")[0].rpartition("/")[2] == "site-packages"}
            if infos:
                record["dist_infos"] = sorted(infos)
            out.append(record)
        except Exception:
            continue
    return out


# What a PyPI installer writes in a distribution's INSTALLER file; conda-build writes "conda" there. The same list as
# envsolver/install/shadowing.PYPI_INSTALLERS (this file runs without envsolver).
PYPI_INSTALLERS = ("pip", "uv")
MAX_DISTS = 2000  # distributions foreign_dists reports at most
MAX_REQUIRES = 64  # Requires-Dist lines kept of each
MAX_LINE = 300  # characters kept of each line
MAX_METADATA = 1 << 18  # bytes read of each METADATA (its headers come first)
MAX_RECORD = 64 << 20  # bytes read of a conda-meta record (envsolver/install/inventory.py MAX_RECORD_BYTES)


def _dist_key(name: str) -> str:
    """A distribution's name as PEP 503 normalises it (torch, nvidia-cublas-cu12)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _read(path: str, limit: int) -> str | None:
    data = read_regular(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def read_regular(path: str, limit: int) -> bytes | None:
    """At most LIMIT bytes of the regular file PATH; None when it is missing, unreadable or no regular file (a FIFO
    is opened without waiting and refused: envsolver/core/boundedread.py's rule, which this file cannot import)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as handle:
            return handle.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _dist_metadata(info: str) -> dict[str, Any]:
    """Name, Version and the Requires-Dist lines that no extra asks for, from INFO/METADATA's headers."""
    out: dict[str, Any] = {"name": None, "version": None, "requires": []}
    for line in (_read(os.path.join(info, "METADATA"), MAX_METADATA) or "").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        value = value.strip()[:MAX_LINE]
        if key == "Name":
            out["name"] = value
        elif key == "Version":
            out["version"] = value
        elif key == "Requires-Dist" and "extra" not in value.partition(";")[2] and len(out["requires"]) < MAX_REQUIRES:
            out["requires"].append(value)
    return out


def foreign_dists(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distributions on sys.path that no conda package installed, up to and including the environment's own
    site-packages (what lies after it cannot shadow it): each *.dist-info whose directory no conda-meta record lists,
    or whose INSTALLER names a PyPI installer. Each with its name (PEP 503), version, installer, directory, where that
    directory is (prefix, user: the user site-packages, pythonpath, other), whether it was asked for by name (pip's
    REQUESTED) and its Requires-Dist lines. None are looked for outside a conda environment (no RECORDS)."""
    if not records:
        return []
    import site

    listed = {info for record in records for info in record.get("dist_infos") or ()}
    prefix = os.path.normpath(sys.prefix)
    env_sites = {os.path.normpath(p) for p in site.getsitepackages() if p.startswith(prefix)}
    user = os.path.normpath(site.getusersitepackages()) if site.ENABLE_USER_SITE else None
    pythonpath = {os.path.normpath(os.path.abspath(p)) for p in os.environ.get("PYTHONPATH", "").split(":") if p}
    out: list[dict[str, Any]] = []
    done = False
    for entry in sys.path:
        if done or not entry or not os.path.isdir(entry):
            continue
        path = os.path.normpath(os.path.abspath(entry))
        inside = path == prefix or path.startswith(prefix + os.sep)
        where = "prefix" if inside else "user" if path == user else "pythonpath" if path in pythonpath else "other"
        for name in sorted(os.listdir(path)):
            if not name.endswith(".dist-info") or len(out) >= MAX_DISTS:
                continue
            info = os.path.join(path, name)
            installer = (_read(os.path.join(info, "INSTALLER"), 100) or "").strip() or None
            if inside and os.path.relpath(info, prefix) in listed and installer not in PYPI_INSTALLERS:
                continue
            meta = _dist_metadata(info)
            out.append({
                "name": _dist_key(meta["name"] or name[: -len(".dist-info")].split("-")[0]),
                "version": meta["version"],
                "installer": installer,
                "path": info,
                "where": where,
                "requested": os.path.exists(os.path.join(info, "REQUESTED")),
                "requires": meta["requires"],
            })  # fmt: skip
        done = path in env_sites
    return out


def distributions(names: list[str]) -> dict[str, Any]:
    """The installed version of each distribution NAMES lists (a lock's PyPI part), None where it is absent."""
    from importlib import metadata

    out: dict[str, Any] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def torch_installer() -> str | None:
    from importlib import metadata

    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    where = getattr(dist, "_path", None)  # a PathDistribution's .dist-info directory: read as every prefix file is
    if where is None:
        text = dist.read_text("INSTALLER")
    else:
        data = read_regular(os.path.join(str(where), "INSTALLER"), 100)
        text = data.decode("utf-8", "replace") if data is not None else None
    return text.strip() if text else None


def extensions_cache() -> dict[str, Any]:
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions")
    entries = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return {"root": root, "entries": entries}


def shm() -> dict[str, Any]:
    stat = os.statvfs("/dev/shm")
    return {"bytes": stat.f_frsize * stat.f_blocks}


def _gpu_test(timeout: float, runner: str | None) -> dict[str, Any]:
    if not runner:
        return {"error": "no op_runner.py to run (pass --op-runner PATH when the probe runs as source)"}
    rc, out = _run([*_python(), runner, "adam-check"], timeout, _child_env())
    return _parse(out, rc)


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def main(argv: list[str]) -> int:
    timeout = float(_option(argv, "--timeout") or 120.0)
    names = (_option(argv, "--headers") or ",".join(HEADERS)).split(",")
    prefix = _option(argv, "--prefix") or sys.prefix
    facts: dict[str, Any] = {"probe_version": 2}
    # First, as the activation scripts would see it: they set CUDA_HOME and CPATH only for a prefix with the toolkit.
    fact(facts, "prefix_toolkit", lambda: prefix_toolkit(prefix, _option(argv, "--target"), names))
    toolkit = facts.get("prefix_toolkit")
    if "--activate" in argv and toolkit and toolkit["complete"]:
        activate(toolkit)
    if "--toolkit-only" in argv:  # `envsolver hook --print-env`: whether activation sets CUDA_HOME, nothing else
        print(json.dumps(facts, sort_keys=True))
        return 0
    # torch (and DeepSpeed) import in children started next, so the host facts below cost no extra time.
    torch_child = (
        None if "--no-torch" in argv else _start(TORCH_CHILD, *(["--no-devices"] if "--no-devices" in argv else []))
    )
    ds_child = _start(DS_CHILD) if "--deepspeed" in argv else None
    fact(
        facts,
        "python",
        lambda: {
            "executable": sys.executable,
            "version": platform.python_version(),
            "prefix": sys.prefix,
            "machine": platform.machine(),
            # what kind of environment sys.prefix is (envsolver/install/envkind.py decides it from these two)
            "conda_meta": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
            "pyvenv_cfg": os.path.isfile(os.path.join(sys.prefix, "pyvenv.cfg")),
        },
    )
    fact(facts, "env", lambda: {k: os.environ.get(k) for k in ENV_KEYS})
    fact(facts, "glibc", lambda: platform.libc_ver()[1] or None)
    fact(facts, "driver", driver)
    fact(facts, "cuda_home", find_cuda_home)
    home = (facts.get("cuda_home") or {}).get("path")
    fact(facts, "nvcc", lambda: nvcc(home))
    fact(facts, "include_dirs", lambda: include_dirs(home))
    fact(facts, "headers", lambda: headers(facts.get("include_dirs") or [], names))
    fact(facts, "compiler", lambda: compiler(prefix))
    fact(facts, "ld_library_path_cudart", libcudart_candidates)
    fact(facts, "torch_installer", torch_installer)
    fact(facts, "conda_meta", conda_meta)
    fact(facts, "foreign_dists", lambda: foreign_dists(facts.get("conda_meta") or []))
    wanted = [n for n in (_option(argv, "--dists") or "").split(",") if n]
    if wanted:
        fact(facts, "distributions", lambda: distributions(wanted))
    fact(facts, "extensions_cache", extensions_cache)
    fact(facts, "shm", shm)
    if "--stream" in argv:  # the host facts now, for checks that need no torch; everything at the end
        print(json.dumps({"partial": facts}, sort_keys=True), flush=True)
    if torch_child is not None:
        fact(facts, "torch", lambda: _finish(torch_child, timeout))
    if ds_child is not None:
        fact(facts, "deepspeed", lambda: _finish(ds_child, timeout))
    if "--gpu-test" in argv:
        fact(facts, "gpu_test", lambda: _gpu_test(timeout, _option(argv, "--op-runner") or OP_RUNNER))
    print(json.dumps(facts, sort_keys=True) if "--stream" in argv else json.dumps(facts, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
