"""Checks of what DeepSpeed's op builder needs from the environment beyond headers: the libraries its ops
link, and an arch list its ahead-of-time builds can use. Pure functions over the probe's facts and the KB."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from envsolver.kb.model import DeepSpeedDefaultCcs
from envsolver.resolve import deepspeed as ds_rules
from envsolver.verify import archplan
from envsolver.verify.checks_base import Check, Context, prefix_of
from envsolver.versions import MajorMinor, leading_major_minor


def deepspeed_version(ctx: Context) -> Version | None:
    """DeepSpeed's version: probed, else its conda package, else the lock's PyPI part; None when unknown."""
    ds = ctx.facts.get("deepspeed")
    texts = [ds.get("version") if isinstance(ds, dict) else None]
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
