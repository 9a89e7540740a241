"""Checks of torch and DeepSpeed inside the environment (they need the probe's torch facts)."""

from __future__ import annotations

import re
import shlex

from envsolver.core.versions import leading_major_minor
from envsolver.resolve import driver as driver_rules
from envsolver.resolve import toolchain
from envsolver.verify import gate
from envsolver.verify.checks_base import (
    Check,
    Context,
    conda_env,
    driver_version,
    host_toolkit_fix,
    new_env_fix,
    prefix_of,
    remake_fix,
    torch_facts,
)


def check_torch_import(ctx: Context) -> Check:
    t = torch_facts(ctx)
    if not t.get("version"):
        return Check(
            "torch_import",
            "fail",
            f"torch does not import: {t.get('error') or ctx.facts.get('torch_error')}",
            f"install the environment from its lock: envsolver install conda-lock.yml -p {prefix_of(ctx)}"
            if conda_env(ctx)
            else new_env_fix(ctx, "the lock's torch", remake=not ctx.lock_entries),
        )
    # The INSTALLER of the torch that imports (conda-build writes `conda`; pip's torch over conda's says pip), else
    # conda where conda-meta has pytorch (a package without the file)
    conda = any(m["name"] == "pytorch" for m in ctx.facts.get("conda_meta") or [])
    how = ctx.facts.get("torch_installer") or ("conda" if conda else "unknown")
    return Check("torch_import", "pass", f"torch {t['version']} at {t.get('file')} (installed by {how})")


def check_torch_cuda_build(ctx: Context) -> Check:
    t = torch_facts(ctx)
    if t.get("cuda"):
        return Check("torch_cuda_build", "pass", f"torch is a CUDA {t['cuda']} build")
    return Check(
        "torch_cuda_build",
        "fail",
        f"torch {t.get('version')} is a CPU-only build (torch.version.cuda is None): the silent fallback",
        cuda_torch_fix(ctx),
    )


def cuda_torch_fix(ctx: Context) -> str:
    """How a CPU-only torch becomes a CUDA one (torch_cuda_build's fix, and deepspeed_ops')."""
    if not conda_env(ctx):
        what = "the lock's CUDA build of torch" if ctx.lock_entries else "a CUDA build of torch"
        return new_env_fix(ctx, what, remake=not ctx.lock_entries)
    return (
        "reinstall torch as a CUDA build: envsolver make --gpu <your GPU> && envsolver install conda-lock.yml "
        f"-p {prefix_of(ctx)} (the lock pins a CUDA build string)"
    )


def check_driver_supports_torch_cuda(ctx: Context) -> Check:
    version, built = driver_version(ctx), leading_major_minor(torch_facts(ctx).get("cuda"))
    if version is None or built is None:
        return Check("driver_supports_torch_cuda", "skip", "needs the driver and torch's CUDA version")
    level = driver_rules.support(ctx.kb, version, built)
    toolkit = ctx.kb.toolkit(built)
    need = f"{toolkit.driver} or newer" if toolkit and toolkit.driver else f"one that fully supports CUDA {built}"
    if level == "full":
        return Check("driver_supports_torch_cuda", "pass", f"driver {version} fully supports CUDA {built}")
    if level == "minor":
        detail = (
            f"driver {version} runs CUDA {built} only through minor-version compatibility: PTX JIT of code built "
            "with a newer toolkit fails"
        )
        if toolkit and toolkit.driver is None:
            detail = (
                f"driver {version} runs CUDA {built} at least through minor-version compatibility; whether it fully "
                f"supports it the knowledge base does not know (NVIDIA publishes no minimum for CUDA {built}), and "
                "without full support PTX JIT of code built with a newer toolkit fails"
            )
        return Check(
            "driver_supports_torch_cuda",
            "warn",
            detail,
            f"upgrade the driver to {need}",
        )
    return Check(
        "driver_supports_torch_cuda",
        "fail",
        f"{driver_rules.requirement_text(ctx.kb, built)}; driver "
        f"{version} {driver_rules.supports_text(ctx.kb, version)}",
        f"upgrade the driver to {need}",
    )


def check_cuda_available(ctx: Context) -> Check:
    t = torch_facts(ctx)
    if t.get("available"):
        return Check("cuda_available", "pass", f"torch.cuda.is_available(): True, {t.get('device_count')} device(s)")
    why = t.get("cuda_error") or "torch.cuda.is_available() is False"
    return Check(
        "cuda_available",
        "fail",
        str(why),
        "check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES, and that this torch is a CUDA build",
    )


def check_arch_coverage(ctx: Context) -> Check:
    arch_list = torch_facts(ctx).get("arch_list") or []
    gpus = (ctx.facts.get("driver") or {}).get("gpus") or []
    if not gpus or not arch_list:
        return Check("arch_coverage", "skip", "needs visible GPUs and torch's arch list")
    bad = []
    for g in gpus:
        cc = leading_major_minor(g.get("compute_capability"))
        if cc is not None and not gate.covers(arch_list, (cc.major, cc.minor)):  # the job's gate's rule too
            bad.append(f"{g['name']} (sm_{cc.sm})")
    if bad:
        return Check(
            "arch_coverage",
            "fail",
            f"torch has no kernel for {', '.join(bad)} (its archs: "
            f"{' '.join(arch_list)}): 'no kernel image is available for execution on the device'",
            _sass_fix(ctx),
        )
    return Check("arch_coverage", "pass", f"every visible GPU has SASS or PTX in {' '.join(arch_list)}")


def _sass_fix(ctx: Context) -> str:
    if (ctx.facts.get("env") or {}).get("SLURM_JOB_ID"):
        return remake_fix(ctx, "GPUs")
    return "install a torch build with SASS for these GPUs: envsolver make --gpu auto"


def check_cuda_version_match(ctx: Context) -> Check:
    nvcc = leading_major_minor((ctx.facts.get("nvcc") or {}).get("version"))
    built = leading_major_minor(torch_facts(ctx).get("cuda"))
    if nvcc is None or built is None:
        return Check("cuda_version_match", "skip", "needs nvcc and a CUDA torch")
    verdict, detail = toolchain.nvcc_vs_torch(ctx.kb, nvcc, built)
    fix = toolchain.nvcc_fix(nvcc, built, verdict, prefix_of(ctx))
    if fix and not conda_env(ctx):
        skip = " (or DS_SKIP_CUDA_CHECK=1)" if "DS_SKIP_CUDA_CHECK" in fix else ""
        fix = host_toolkit_fix(ctx, f"cuda-nvcc of CUDA {built}", str(built)) + skip
    return Check("cuda_version_match", "pass" if verdict == "ok" else verdict, detail, fix)


def check_libcudart(ctx: Context) -> Check:
    t = torch_facts(ctx)
    loaded = [p for p in (t.get("loaded_libs") or []) if "libcudart" in p]
    others = ctx.facts.get("ld_library_path_cudart") or []
    if not t.get("cuda"):
        return Check("libcudart", "skip", "needs a CUDA torch")
    if not loaded:
        return Check(
            "libcudart",
            "warn",
            "torch loaded no libcudart (CUDA not initialised, or linked statically)",
            "run verify on a GPU node, where the probe initialises CUDA and sees which libcudart loads",
        )
    shadow = [p for p in others if not any(p.startswith(lp.rsplit("/", 1)[0] + "/") for lp in loaded)]
    if shadow:
        return Check(
            "libcudart",
            "warn",
            f"torch loaded {loaded[0]}; LD_LIBRARY_PATH also offers {', '.join(shadow)}",
            "remove the other CUDA runtime from LD_LIBRARY_PATH (unset LD_LIBRARY_PATH in the env)",
        )
    return Check("libcudart", "pass", f"torch loaded {loaded[0]}")


def check_cudnn(ctx: Context) -> Check:
    t = torch_facts(ctx)
    if not t.get("cuda"):
        return Check("cudnn", "skip", "needs a CUDA torch")
    if t.get("cudnn"):
        return Check("cudnn", "pass", f"cuDNN {t['cudnn']}")
    return Check(
        "cudnn",
        "fail",
        f"cuDNN does not load: {t.get('cudnn_error')}",
        "install the environment from its lock (the cudnn package of torch's CUDA major)"
        if conda_env(ctx)
        else _pip_wheel_fix(ctx, "cuDNN", "nvidia-cudnn"),
    )


def check_nccl(ctx: Context) -> Check:
    t = torch_facts(ctx)
    if not t.get("cuda"):
        return Check("nccl", "skip", "needs a CUDA torch")
    if t.get("nccl"):
        return Check("nccl", "pass", f"NCCL {t['nccl']}")
    return Check(
        "nccl",
        "warn",
        f"NCCL version unknown: {t.get('nccl_error')}",
        "install the environment from its lock (the nccl package)"
        if conda_env(ctx)
        else _pip_wheel_fix(ctx, "NCCL", "nvidia-nccl"),
    )


def _pip_wheel_fix(ctx: Context, library: str, wheel: str) -> str:
    """Where a library of a pip-installed CUDA torch comes from, in an environment that is no conda one."""
    return (
        f"a pip-installed CUDA torch takes {library} from its {wheel}-cu* wheel: reinstall torch with pip from the "
        "index it came from, so that its requirements are installed too"
    )


def check_extensions_cache(ctx: Context) -> Check:
    cache = ctx.facts.get("extensions_cache") or {}
    t = torch_facts(ctx)
    entries = cache.get("entries") or []
    if not entries:
        return Check("extensions_cache", "pass", f"{cache.get('root')}: empty")
    py = (ctx.facts.get("python") or {}).get("version", "")
    flavour = "cu" + "".join(str(t["cuda"]).split(".")[:2]) if t.get("cuda") else "cpu"
    want = "py" + "".join(py.split(".")[:2]) + "_" + flavour
    stale = [e for e in entries if re.match(r"py\d+_(cu\d+|cpu)", e) and e != want]
    if stale:
        root = cache.get("root")
        return Check(
            "extensions_cache",
            "warn",
            f"{root} holds ops built for another Python, torch or CUDA: {', '.join(stale)} (this env is {want})",
            "rm -rf " + " ".join(shlex.quote(f"{root}/{e}") for e in stale),
        )
    return Check("extensions_cache", "pass", f"{cache.get('root')}: {', '.join(entries)}")
