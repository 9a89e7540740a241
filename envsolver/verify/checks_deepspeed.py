"""Checks of DeepSpeed in the environment: that it imports and uses its CUDA ops (deepspeed_ops), what its op
builder needs beyond headers (the libraries its ops link), and an arch list its ahead-of-time builds can use.
Pure functions over the probe's facts and the KB."""

from __future__ import annotations

import shlex
from typing import Any

from packaging.version import InvalidVersion, Version

from envsolver.core.versions import MajorMinor, leading_major_minor
from envsolver.kb.model import DeepSpeedDefaultCcs
from envsolver.resolve import deepspeed as ds_rules
from envsolver.resolve.toolchain import compiler_line
from envsolver.verify import archplan
from envsolver.verify.checks_base import Check, Context, Status, conda_env, new_env_fix, prefix_of, torch_facts
from envsolver.verify.checks_torch import cuda_torch_fix


def deepspeed_version(ctx: Context) -> Version | None:
    """DeepSpeed's version: probed, else its conda package, else the lock's PyPI part; None when unknown."""
    ds = ctx.facts.get("deepspeed")
    texts = [ds.get("version") or ds.get("distribution") if isinstance(ds, dict) else None]
    texts += [m.get("version") for m in ctx.facts.get("conda_meta") or [] if m.get("name") == "deepspeed"]
    texts += [r.version for r in ctx.lock_pip if r.name == "deepspeed"]
    for text in texts:
        try:
            if text:
                return Version(str(text))
        except InvalidVersion:
            continue
    return None


def _deepspeed_absent(ctx: Context) -> bool:
    ds = ctx.facts.get("deepspeed")
    return isinstance(ds, dict) and bool(ds.get("error")) and deepspeed_version(ctx) is None


def _defaults(ctx: Context, nvcc: MajorMinor) -> DeepSpeedDefaultCcs | None:
    """DeepSpeed's defaults for this nvcc's major: for its version when known, else the newest release's."""
    version = deepspeed_version(ctx)
    if version is not None:
        return ds_rules.default_ccs(ctx.kb, version, nvcc.major)
    rows = [r for r in ctx.kb.deepspeed_default_ccs if r.cuda_major == nvcc.major]
    return max(rows, key=lambda r: r.since) if rows else None


def _arch_list_to_set(ctx: Context, able: set[int]) -> tuple[str, str]:
    """(arch list, where it comes from) for an export that builds: the lock's, else this node's GPUs'."""
    locked = ctx.lock_meta.get("envsolver_torch_cuda_arch_list")
    if locked:
        return locked, "the lock's; envsolver hook sets it on activation"
    ccs = sorted(
        {
            cc
            for g in (ctx.facts.get("driver") or {}).get("gpus") or []
            if (cc := leading_major_minor(g.get("compute_capability")))
        }
    )
    keep = [cc for cc in ccs if cc.sm in able]
    if keep:
        return ";".join([str(c) for c in keep[:-1]] + [f"{keep[-1]}+PTX"]), "this node's GPUs"
    return "<the compute nodes' compute capabilities, e.g. 8.0;9.0+PTX>", f"nvcc builds sm_{min(able)} and newer"


def unset_arch_list(ctx: Context) -> Check:
    """TORCH_CUDA_ARCH_LIST unset: DeepSpeed's ahead-of-time builds (DS_BUILD_OPS=1, or an install with no GPU
    visible) target its default CCs, which nvcc 13 cannot build."""
    nvcc = leading_major_minor((ctx.facts.get("nvcc") or {}).get("version"))
    row = _defaults(ctx, nvcc) if nvcc is not None and not _deepspeed_absent(ctx) else None
    able = archplan.buildable(ctx.facts, ctx.kb) if nvcc is not None else None
    bad = [a for a in row.ccs if a.cc.sm not in able] if row is not None and able else []
    if nvcc is None or row is None or not able or not bad:
        return Check("torch_cuda_arch_list", "skip", "TORCH_CUDA_ARCH_LIST is not set")
    value, why = _arch_list_to_set(ctx, able)
    return Check(
        "torch_cuda_arch_list",
        "warn",
        f"TORCH_CUDA_ARCH_LIST is not set: DeepSpeed {row.since}-{row.latest}'s op builder then defaults to "
        f"{row.text} when it builds ops ahead of time (DS_BUILD_OPS=1 or DS_BUILD_<OP>=1, or an install with no GPU "
        f"visible), and nvcc {nvcc} cannot build {', '.join(str(a.cc) for a in bad)} "
        "('nvcc fatal : Unsupported gpu architecture')",
        f"export TORCH_CUDA_ARCH_LIST='{value}' ({why})",
    )


def check_op_libraries(ctx: Context) -> Check:
    """The CUDA libraries DeepSpeed's ops link (-lcurand -lcublas -lcudart for CPUAdam up to 0.19.7) need their
    unversioned libX.so, which only the -dev packages hold."""
    conda = {m.get("name"): m.get("version") for m in ctx.facts.get("conda_meta") or []}
    if not conda:
        return Check("op_libraries", "skip", "no conda packages in this environment to look for the libraries in")
    version = deepspeed_version(ctx)
    if version is None:
        return Check("op_libraries", "skip", "DeepSpeed's version is unknown (pass --deepspeed, or --lock)")
    rows = ds_rules.op_libraries(ctx.kb, version)
    if not rows:
        return Check("op_libraries", "pass", f"DeepSpeed {version} links no CUDA library for the ops the KB lists")
    missing = [r for r in rows if r.package not in conda]
    if not missing:
        held = ", ".join(f"lib{r.library}.so ({r.package})" for r in rows)
        return Check("op_libraries", "pass", f"the libraries DeepSpeed {version}'s ops link are installed: {held}")
    names = " ".join(dict.fromkeys(r.package for r in missing))
    pin = f" cuda-version={conda['cuda-version']}" if conda.get("cuda-version") else ""
    links = ", ".join(f"{r.op} links -l{r.library} (lib{r.library}.so is in {r.package})" for r in missing)
    return Check(
        "op_libraries",
        "fail",
        f"DeepSpeed {version}: {links}; not installed, so the build stops with 'cannot find -l{missing[0].library}'",
        f"conda install -p {prefix_of(ctx)} -c conda-forge {names}{pin}",
    )


def check_deepspeed_ops(ctx: Context) -> Check:
    """DeepSpeed imports, runs on its CUDA accelerator, and its FusedAdam is built and loads (with --gpu-test,
    5 steps match torch's AdamW)."""
    ds = ctx.facts.get("deepspeed")
    if not isinstance(ds, dict):
        return Check("deepspeed_ops", "skip", "not probed (pass --deepspeed, or --gpu-test)")
    if ds.get("error"):
        return _does_not_import(ctx, ds)
    version = ds.get("version") or ds.get("distribution") or "(version unknown)"
    torch = torch_facts(ctx)
    if not torch.get("cuda"):
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {version} ({ds.get('accelerator')!r} accelerator) cannot build or use its CUDA ops: "
            f"torch {torch.get('version')} is a CPU-only build",
            cuda_torch_fix(ctx),
        )
    if ds.get("accelerator") != "cuda":
        return _cpu_accelerator(ctx, ds, version)
    if not ds.get("fused_adam_built"):
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {version}: FusedAdam is not built (not prebuilt, not in {ds.get('fused_adam_cache')}); its "
            "first use would JIT-compile it",
            f"envsolver hook -p {prefix_of(ctx)} (builds the ops for the target GPUs and proves them)",
        )
    if not ds.get("fused_adam_loads"):
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {version}: FusedAdam does not load: {compiler_line(str(ds.get('fused_adam_error')))}",
            f"envsolver hook -p {prefix_of(ctx)} (builds and proves the ops)",
        )
    gpu = ctx.facts.get("gpu_test")
    if ctx.gpu_test and isinstance(gpu, dict):
        diff = gpu.get("max_abs_diff")
        if diff is None or diff > 1e-5:
            return Check(
                "deepspeed_ops",
                "fail",
                f"FusedAdam vs torch.optim.AdamW: {gpu.get('error') or diff}",
                f"rebuild the ops: rm -rf the extensions cache, then envsolver hook -p {prefix_of(ctx)}",
            )
    extra = (
        f"; 5 FusedAdam steps match AdamW (max |diff| {gpu['max_abs_diff']:.1e})"
        if (ctx.gpu_test and isinstance(gpu, dict) and gpu.get("max_abs_diff") is not None)
        else ""
    )
    installed = sorted(k for k, v in (ds.get("installed_ops") or {}).items() if v)
    prebuilt = f"; prebuilt: {', '.join(installed)}" if installed else ""
    return Check(
        "deepspeed_ops",
        "pass",
        f"DeepSpeed {version}: FusedAdam loads in {ds.get('fused_adam_load_seconds', 0):.3f} s{prebuilt}{extra}",
    )


def _cpu_accelerator(ctx: Context, ds: dict[str, Any], version: str) -> Check:
    """A CUDA torch, but DeepSpeed chose another accelerator: DS_ACCELERATOR says so, or it saw no GPU."""
    chosen = (ctx.facts.get("env") or {}).get("DS_ACCELERATOR")
    why = (
        f"DS_ACCELERATOR={shlex.quote(str(chosen))} is set; envsolver hook's activation sets cuda"
        if chosen
        else "DeepSpeed picks its CPU accelerator where it sees no GPU; envsolver hook's activation sets it"
    )
    name = ds.get("accelerator")
    detail = (
        f"DeepSpeed {version} selected its {name!r} accelerator, so its CUDA ops are not used"
        if name
        else f"DeepSpeed {version}'s accelerator is unknown ({ds.get('accelerator_error')})"
    )
    return Check("deepspeed_ops", "fail", detail, f"export DS_ACCELERATOR=cuda ({why})")


def _does_not_import(ctx: Context, ds: dict[str, Any]) -> Check:
    """`import deepspeed` failed: DeepSpeed is not installed (where the lock puts it decides the fix), lacks some
    of its requirements (installed without its dependencies), or is broken (reinstalled)."""
    installed = _version_text(ds.get("distribution"))
    if installed is None:
        return _not_installed(ctx)
    status: Status = "fail" if ctx.deepspeed_wanted else "warn"
    python = _python(ctx)
    conda = {m.get("name") for m in ctx.facts.get("conda_meta") or []}
    missing = [str(n) for n in ds.get("requires_missing") or [] if isinstance(n, str)]
    # a conda package that provides the program but not the PyPI distribution (ninja) is installed as it should be
    missing = [n for n in missing if not ((row := ds_rules.conda_package(ctx.kb, n)) and row.conda in conda)]
    detail = f"DeepSpeed {installed} does not import: {ds['error']}"
    if missing:
        detail += f"; its requirements {', '.join(missing)} are not installed"
        return Check("deepspeed_ops", status, detail, _install_fix(ctx, missing, bool(conda), python))
    if "deepspeed" in conda:
        fix = f"conda install -p {prefix_of(ctx)} -c conda-forge --force-reinstall deepspeed={installed}"
    else:
        fix = f"{python} -m pip install --no-deps --force-reinstall deepspeed=={installed}"
    return Check("deepspeed_ops", status, detail, fix)


def _install_fix(ctx: Context, names: list[str], conda_env: bool, python: str) -> str:
    """Install the PyPI projects `names`: from conda-forge (its names) in a conda env where the KB knows them, the
    rest with the env's pip."""
    by_conda = [ds_rules.conda_name(ctx.kb, n) for n in names] if conda_env else [None] * len(names)
    conda = [c for c in by_conda if c]
    pip = [shlex.quote(n) for n, c in zip(names, by_conda, strict=True) if not c]
    parts = [f"conda install -p {prefix_of(ctx)} -c conda-forge {' '.join(conda)}"] if conda else []
    parts += [f"{python} -m pip install {' '.join(pip)}"] if pip else []
    return " && ".join(parts)


def _not_installed(ctx: Context) -> Check:
    if not ctx.deepspeed_wanted:
        return Check(
            "deepspeed_ops",
            "skip",
            "DeepSpeed is not installed in this python (nothing asks for it: no lock, no envsolver install)",
        )
    entry = next((e for e in ctx.lock_entries if e.name == "deepspeed"), None)
    if entry is not None:
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed is not installed in this python; the lock holds deepspeed {entry.version}",
            _from_lock(ctx, "installs what the lock holds and is missing"),
        )
    pypi = next((r for r in ctx.lock_pip if r.name == "deepspeed"), None)
    if pypi is not None:
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed is not installed in this python; the lock takes DeepSpeed {pypi.version} from PyPI "
            f"({pypi.filename}, sha256 {pypi.sha256[:12]}…)",
            _from_lock(
                ctx,
                "installs the lock's PyPI part by its sha256, then runs the hook, which builds and registers the ops",
            ),
        )
    pip = _version_text(_pip_pin(ctx))
    if pip is not None:
        arch = ctx.lock_meta.get("envsolver_torch_cuda_arch_list")
        hook = f"envsolver hook -p {prefix_of(ctx)}" + (f" --arch-list {shlex.quote(arch)}" if arch else "")
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed is not installed in this python; the lock takes DeepSpeed {pip} from PyPI",
            f"{_python(ctx)} -m pip install --no-deps deepspeed=={pip} && {hook} (DeepSpeed builds no ops when pip "
            "installs it on Linux; the hook builds and registers them)",
        )
    if ctx.lock_entries:
        return Check("deepspeed_ops", "skip", "DeepSpeed is not installed in this python, and the lock holds none")
    return Check(
        "deepspeed_ops",
        "warn",
        "DeepSpeed is not installed in this python; the environment's metadata does not say whether its lock holds "
        "DeepSpeed",
        _from_lock(ctx, "installs DeepSpeed if the lock holds it"),
    )


def _from_lock(ctx: Context, does: str) -> str:
    """Install the lock into this environment (DOES: what that does), or, where it is no conda environment, into
    a new one."""
    if conda_env(ctx):
        return f"envsolver install conda-lock.yml -p {prefix_of(ctx)} ({does})"
    return new_env_fix(ctx, "the lock's DeepSpeed among them")


def _pip_pin(ctx: Context) -> str | None:
    """The DeepSpeed version an older lock's unlocked pip part names (deepspeed==X, in the metadata of locks made
    before the PyPI part was locked), or None."""
    pins = ctx.lock_meta.get("envsolver_pip_not_locked", "").split()
    return next((p.split("==", 1)[1] for p in pins if p.startswith("deepspeed==")), None)


def _version_text(text: object) -> str | None:
    """A version from the probe or the lock as it may appear in a command (normalised), or None."""
    try:
        return str(Version(str(text))) if text else None
    except InvalidVersion:
        return None


def _python(ctx: Context) -> str:
    executable = (ctx.facts.get("python") or {}).get("executable")
    return shlex.quote(str(executable)) if executable else "python"
