"""Runs inside the TARGET environment's python (not envsolver's): build, load or test one DeepSpeed op.

Standard library plus torch and deepspeed only; prints one JSON line. Usage:
    python op_runner.py build OP        # JIT-build OP for TORCH_CUDA_ARCH_LIST into TORCH_EXTENSIONS_DIR
                                        # (an op DeepSpeed was installed with, e.g. conda-forge's, is loaded)
    python op_runner.py jit OP          # JIT-build OP even when DeepSpeed has it prebuilt
    python op_runner.py install OP      # build OP as DeepSpeed's own DS_BUILD_OPS install would (the library
                                        # named after DeepSpeed's module for it, fused_adam_op...), without -g,
                                        # for `envsolver hook` to register; prints the facts the registry needs
    python op_runner.py load OP         # time OP's load() after `import torch` (a prebuilt op loads at once)
    python op_runner.py registered [--adam-check] OP..
                                        # load each OP through DeepSpeed's own load() (registered ops import at
                                        # once): the library it loaded and the time, in one process; with
                                        # --adam-check, then FusedAdam against torch's AdamW on the GPU
    python op_runner.py key             # what decides the ops' binaries, read from files without importing
                                        # torch or DeepSpeed (fast: the hook decides a no-op from it)
    python op_runner.py adam-check      # 5 FusedAdam steps against torch.optim.AdamW on the GPU
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import sysconfig
import time
import traceback
from typing import Any

BUILDERS = {
    "fused_adam": "FusedAdamBuilder",
    "cpu_adam": "CPUAdamBuilder",
    "fused_lamb": "FusedLambBuilder",
    "fused_lion": "FusedLionBuilder",
    "cpu_lion": "CPULionBuilder",
    "cpu_adagrad": "CPUAdagradBuilder",
    "quantizer": "QuantizerBuilder",
    "transformer_inference": "InferenceBuilder",
}


def builder(op: str) -> Any:
    import deepspeed.ops.op_builder as op_builder

    return getattr(op_builder, BUILDERS[op])()


def build(op: str, jit: bool = False) -> dict[str, Any]:
    """Build (or, for an op DeepSpeed was installed with, load) OP. With jit, always JIT-build it."""
    from deepspeed.git_version_info import installed_ops

    op_builder = builder(op)
    prebuilt = bool(installed_ops.get(op)) and not jit
    started = time.perf_counter()
    module = op_builder.jit_load(verbose=False) if jit else op_builder.load(verbose=False)
    return {
        "op": op,
        "seconds": time.perf_counter() - started,
        "file": getattr(module, "__file__", None),
        "prebuilt": prebuilt,
    }


def _package_dir(name: str) -> str | None:
    """Where a package is installed, found without importing it."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return locations[0] if locations else None


MAX_TEXT = 1 << 20  # a version file's bytes read (torch/version.py, DeepSpeed's version.txt: a few hundred)
MAX_SOURCE = 64 << 20  # an op source file's bytes hashed (DeepSpeed's largest is under 1 MiB)


def _tree_sha256(base: str, parts: tuple[str, ...]) -> str:
    """SHA-256 over the relative paths and contents of every file under base/part (sorted)."""
    digest = hashlib.sha256()
    for part in parts:
        top = os.path.join(base, part)
        found = []
        for root, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [os.path.join(root, n) for n in names if not n.endswith(".pyc")]
        for path in sorted(found):
            digest.update(os.path.relpath(path, base).encode() + b"\0")
            data = _read(path, MAX_SOURCE)
            digest.update(hashlib.sha256(data).digest() if data is not None else b"\0not a readable regular file")
    return digest.hexdigest()


def _stdout(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu() -> dict[str, str]:
    """The build host's CPU as -march=native sees it (DeepSpeed's CPU ops are built with it)."""
    wanted = ("vendor_id", "cpu family", "model", "flags")
    found: dict[str, str] = {"machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in wanted and name not in found:
                    found[name] = value.strip()
                if not line.strip() and len(found) > 1:
                    break
    except OSError:
        pass
    return found


def _assigned(info: str | None, name: str) -> Any:
    """A literal assigned to `name` in the text of DeepSpeed's git_version_info_installed.py, read as data
    (ast.literal_eval), never run; None when absent or not a literal."""
    import ast

    try:
        tree = ast.parse(info or "")
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


def _installed_ops(info: str | None) -> list[str]:
    """The ops DeepSpeed was installed with (built at install: conda-forge's, DS_BUILD_OPS=1)."""
    value = _assigned(info, "installed_ops")
    return sorted(str(k) for k, v in value.items() if v is True) if isinstance(value, dict) else []


def _deepspeed_version() -> str | None:
    """DeepSpeed's version as its git_version_info reads it (the installed info module, else version.txt),
    from files, without importing DeepSpeed."""
    ds_dir = _package_dir("deepspeed")
    if not ds_dir:
        return None
    info = _text(os.path.join(ds_dir, "git_version_info_installed.py"))
    version = _assigned(info, "version") if info is not None else None
    if isinstance(version, str):
        return version
    text = _text(os.path.join(ds_dir, "version.txt"))
    return text.strip() if text is not None else None


def _read(path: str, limit: int) -> bytes | None:
    """At most LIMIT bytes of the regular file PATH (a FIFO refused at once: verify's probe's read_regular)."""
    data: bytes | None = _probe().read_regular(path, limit)
    return data


def _text(path: str) -> str | None:
    data = _read(path, MAX_TEXT)
    return data.decode("utf-8", "replace") if data is not None else None


@functools.cache
def _probe() -> Any:
    """verify's probe (envsolver/verify/probe.py, standard library only), loaded from its file: the home of the rule
    for the toolkit cpp_extension uses (find_cuda_home), which this file runs in the same interpreter."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "verify", "probe.py")
    spec = importlib.util.spec_from_file_location("envsolver_verify_probe", os.path.normpath(path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def key_facts() -> dict[str, Any]:
    """What the ops' binaries depend on, besides the arch list and the op: python's ABI, torch's and DeepSpeed's
    exact builds (torch/version.py; DeepSpeed's op sources and builders), nvcc and the C++ compiler as torch's
    cpp_extension finds them (CUDA_HOME or nvcc on PATH; CXX or c++), and the CPU (-march=native)."""
    torch_dir, ds_dir = _package_dir("torch"), _package_dir("deepspeed")
    torch_version_file = os.path.join(torch_dir, "version.py") if torch_dir else None
    torch_text = None
    if torch_version_file and os.path.isfile(torch_version_file):
        torch_text = _text(torch_version_file)
    ds_version = None
    if ds_dir:
        for name in ("git_version_info_installed.py", "version.txt"):
            path = os.path.join(ds_dir, name)
            if os.path.isfile(path):
                ds_version = (_text(path) or "").strip()
                break
    home = _probe().find_cuda_home()["path"] or "/usr/local/cuda"
    nvcc = os.path.join(home, "bin", "nvcc")
    return {
        "python": sys.version,
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "site": sysconfig.get_paths()["purelib"],
        "torch_version_py": torch_text,
        "deepspeed_info": ds_version,
        "deepspeed_tree": _tree_sha256(ds_dir, ("ops/csrc", "ops/op_builder")) if ds_dir else None,
        "nvcc": _stdout([nvcc, "--version"]) if os.path.isfile(nvcc) else None,
        "cxx": _stdout([os.environ.get("CXX") or "c++", "--version"]),
        "cpu": _cpu(),
        "deepspeed_installed_ops": _installed_ops(ds_version),
    }


def _without_debug(args: list[str]) -> list[str]:
    """DeepSpeed's flags less -g: debug information is a quarter of the compile time and changes no code."""
    return [arg for arg in args if arg != "-g"]


def _builders_only() -> str:
    """DeepSpeed's builders without DeepSpeed's package init: `deepspeed` and `deepspeed.ops` go into sys.modules
    as bare packages over their real directories, so `deepspeed.ops.op_builder` and `deepspeed.accelerator` import
    only themselves and torch, as DeepSpeed's own setup.py imports its op_builder to build ops at install time.
    DeepSpeed's package init imports most of DeepSpeed, and with it transformers and torch._dynamo: ~10 s on the
    GPU machine's image, before a build could start. Only this build process sees the bare packages; the proof
    imports DeepSpeed whole. Returns DeepSpeed's version, as its git_version_info reads it."""
    import types

    base = _package_dir("deepspeed")
    version = _deepspeed_version()
    if base is None or version is None:
        raise RuntimeError("DeepSpeed is not installed in this python")
    for name, path in (("deepspeed", base), ("deepspeed.ops", os.path.join(base, "ops"))):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            package.__file__ = os.path.join(path, "__init__.py")
            sys.modules[name] = package
    setattr(sys.modules["deepspeed"], "__version__", version)  # noqa: B010
    return version


def build_installable(op: str) -> dict[str, Any]:
    """Build OP under the name of DeepSpeed's module for it (deepspeed.ops.adam.fused_adam_op: the library's
    init function is PyInit_fused_adam_op, as a DS_BUILD_OPS install makes it) with DeepSpeed's own flags less -g,
    through DeepSpeed's own jit_load (its flags, arch list and CPU probing), into TORCH_EXTENSIONS_DIR."""
    import torch  # type: ignore[import-not-found,unused-ignore]

    version = _builders_only()

    op_builder = builder(op)
    module_name = op_builder.absolute_name()
    op_builder.name = module_name.rsplit(".", 1)[1]
    cxx_args, nvcc_args = op_builder.cxx_args, op_builder.nvcc_args
    op_builder.cxx_args = lambda: _without_debug(cxx_args())
    op_builder.nvcc_args = lambda: _without_debug(nvcc_args())
    started = time.perf_counter()
    module = op_builder.jit_load(verbose=False)
    seconds = time.perf_counter() - started
    cuda = torch.version.cuda
    from deepspeed.accelerator import get_accelerator

    return {
        "op": op,
        "seconds": seconds,
        "file": getattr(module, "__file__", None),
        "module": module_name,
        "accelerator": get_accelerator()._name,
        "deepspeed": version,
        "torch": torch.__version__,
        "torch_info": {
            "version": ".".join(torch.__version__.split(".")[:2]),
            "bf16_support": False,
            "cuda_version": ".".join(cuda.split(".")[:2]) if cuda else "0.0",
            "nccl_version": "0.0",
            "hip_version": "0.0",
        },
    }


def load(op: str) -> dict[str, Any]:
    """Time only the load() call: torch and DeepSpeed's op_builder are imported before the clock starts."""
    import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

    op_builder = builder(op)
    started = time.perf_counter()
    module = op_builder.load(verbose=False)
    return {"op": op, "load_seconds": time.perf_counter() - started, "file": getattr(module, "__file__", None)}


def registered(ops: list[str]) -> dict[str, Any]:
    """Each op through DeepSpeed's load() in this one process, after `import torch, deepspeed`: which library
    DeepSpeed loaded (a registered op's, or one it JIT-built) and how long load() took."""
    import deepspeed  # noqa: F401
    import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

    rows = []
    for op in ops:
        started = time.perf_counter()
        try:
            module = builder(op).load(verbose=False)
        except Exception as exc:  # one op's failure is that op's result
            rows.append({"op": op, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        seconds = time.perf_counter() - started
        rows.append({"op": op, "ok": True, "file": getattr(module, "__file__", None), "load_seconds": seconds})
    return {"ops": rows}


def adam_check() -> dict[str, Any]:
    import torch
    from deepspeed.ops.adam import FusedAdam

    torch.manual_seed(0)
    params = [torch.randn(1024, 257, device="cuda"), torch.randn(4099, device="cuda")]
    ours = [p.clone().requires_grad_(True) for p in params]
    ref = [p.clone().requires_grad_(True) for p in params]
    opt = FusedAdam(ours, lr=1e-3, weight_decay=0.01, adam_w_mode=True)
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.01)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(ours, grads):
            p.grad = g.clone()
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        opt.step()
        ref_opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(ours, ref))
    return {
        "check": "fused_adam_vs_adamw",
        "steps": 5,
        "max_abs_diff": diff,
        "ok": diff <= 1e-5,
        "device": torch.cuda.get_device_name(0),
    }


def main(argv: list[str]) -> int:
    try:
        if argv[0] == "build":
            result = build(argv[1])
        elif argv[0] == "jit":
            result = build(argv[1], jit=True)
        elif argv[0] == "install":
            result = build_installable(argv[1])
        elif argv[0] == "registered":
            check = argv[1:2] == ["--adam-check"]
            result = registered(argv[2:] if check else argv[1:])
            if check:
                try:
                    result["adam_check"] = adam_check()
                except Exception as exc:  # the check's failure is its own result, not the loads'
                    result["adam_check"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        elif argv[0] == "key":
            result = key_facts()
        elif argv[0] == "load":
            result = load(argv[1])
        elif argv[0] == "adam-check":
            result = adam_check()
        else:
            raise SystemExit(f"unknown mode {argv[0]!r}")
        result["ok"] = result.get("ok", True)
    except Exception as exc:  # report, never crash without JSON
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:]}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
