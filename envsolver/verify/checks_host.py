"""Checks of the host and its toolchain: driver, GPUs, the prefix's CUDA toolkit, nvcc, headers, host compiler,
arch list, shm. The build-relevant ones are also the hook's pre-flight (checks.BUILD)."""

from __future__ import annotations

import shlex

from envsolver.core.archlist import canonical, parse_arch_list
from envsolver.core.versions import leading_major_minor
from envsolver.kb.gpus import identify
from envsolver.resolve import driver as driver_rules
from envsolver.resolve import toolchain
from envsolver.resolve.detect import host_platform
from envsolver.verify import archplan
from envsolver.verify.checks_base import (
    Check,
    Context,
    conda_env,
    driver_version,
    host_toolkit_fix,
    new_env_fix,
    prefix_of,
    torch_facts,
)
from envsolver.verify.checks_deepspeed import unset_arch_list


def check_driver(ctx: Context) -> Check:
    d = ctx.facts.get("driver") or {}
    version = driver_version(ctx)
    if version is None:
        return Check(
            "driver",
            "fail",
            "no NVIDIA driver found (nvidia-smi, /sys/module/nvidia, /proc/driver/nvidia)",
            "run verify on a GPU node, or install the NVIDIA driver (login nodes usually have none)",
        )
    supports = driver_rules.supports_text(ctx.kb, version)
    smi = f"; nvidia-smi says CUDA {d['cuda']}" if d.get("cuda") else ""
    return Check("driver", "pass", f"driver {version} (from {d.get('source')}) {supports}{smi}")


def check_gpus(ctx: Context) -> Check:
    gpus = (ctx.facts.get("driver") or {}).get("gpus") or []
    if not gpus:
        return Check("gpus", "skip", "no GPU visible")
    parts, unknown = [], []
    for g in gpus:
        try:
            row = identify(ctx.kb, g["name"], g.get("device_id"))
        except Exception:
            unknown.append(g["name"])
            parts.append(f"{g['name']} (CC {g.get('compute_capability')}, not in the knowledge base)")
            continue
        bf16 = {True: "bf16", False: "no bf16", None: "bf16 ?"}[row.bf16]
        fp8 = {True: "fp8", False: "no fp8", None: "fp8 ?"}[row.fp8]
        parts.append(f"{g['name']}: CC {row.compute_capability}, {g.get('memory')}, {bf16}, {fp8}")
    if unknown:
        return Check(
            "gpus",
            "warn",
            "; ".join(parts),
            "the knowledge base does not know these GPUs; arch checks use the CC nvidia-smi reports",
        )
    return Check("gpus", "pass", "; ".join(parts))


def check_nvcc(ctx: Context) -> Check:
    n = ctx.facts.get("nvcc") or {}
    home = ctx.facts.get("cuda_home") or {}
    if not n.get("exists"):
        return Check(
            "nvcc",
            "fail",
            f"no nvcc where torch's extension builder looks (CUDA_HOME resolved to "
            f"{home.get('path')} via {home.get('how')})",
            f"conda install -p {prefix_of(ctx)} -c conda-forge {ctx.kb.nvcc_package.value} cuda-version="
            f"{torch_facts(ctx).get('cuda') or '<torch CUDA>'}, then envsolver hook -p {prefix_of(ctx)} (its "
            "activation sets CUDA_HOME once the prefix holds nvcc and the headers)"
            if conda_env(ctx)
            else host_toolkit_fix(ctx, ctx.kb.nvcc_package.value, torch_facts(ctx).get("cuda") or "<torch CUDA>"),
        )
    return Check("nvcc", "pass", f"nvcc {n.get('version')} at {n.get('path')} (CUDA_HOME via {home.get('how')})")


def check_headers(ctx: Context) -> Check:
    found = ctx.facts.get("headers") or {}
    missing = [h for h, path in found.items() if path is None]
    if ctx.facts.get("headers_error"):
        return Check(
            "headers",
            "fail",
            f"the probe could not look for headers: {ctx.facts['headers_error']}",
            "report it with `envsolver verify --json` output attached",
        )
    if not found:
        return Check("headers", "skip", "no include directories to search")
    if not missing:
        return Check("headers", "pass", f"all {len(found)} headers found")
    dirs = ", ".join(ctx.facts.get("include_dirs") or [])
    # The activation adds the prefix's include dir to CPATH only when the prefix also holds nvcc (prefix_toolkit):
    # without it in the prefix, the headers alone would not be found, so the fix installs nvcc too.
    toolkit = ctx.facts.get("prefix_toolkit")
    no_nvcc = isinstance(toolkit, dict) and not (toolkit.get("nvcc") or {}).get("exists")
    packages = ([ctx.kb.nvcc_package.value] if no_nvcc else []) + _header_packages(ctx, missing).split()
    pin = _pin((ctx.facts.get("nvcc") or {}).get("version"))
    if not conda_env(ctx):
        cuda = pin.partition("=")[2] or "<nvcc's CUDA>"
        return Check(
            "headers",
            "fail",
            f"missing {', '.join(missing)} in {dirs}",
            host_toolkit_fix(ctx, " ".join(packages), cuda),
        )
    return Check(
        "headers",
        "fail",
        f"missing {', '.join(missing)} in {dirs}",
        f"conda install -p {prefix_of(ctx)} -c conda-forge {' '.join(packages)}{pin}, then envsolver hook -p "
        f"{prefix_of(ctx)} (its activation adds the prefix's include dir to CPATH)",
    )


def _header_packages(ctx: Context, missing: list[str]) -> str:
    """The packages that hold these headers (the KB's op_headers and extra_headers), sorted."""
    packages = {h.header: h.package for h in (*ctx.kb.op_headers, *ctx.kb.extra_headers)}
    return " ".join(sorted({packages[h] for h in missing if h in packages}))


def _pin(version: object) -> str:
    """` cuda-version=X.Y` for a CUDA version (nvcc's, the env's), so the packages match that toolkit; else ''."""
    mm = leading_major_minor(str(version)) if version else None
    return f" cuda-version={mm}" if mm else ""


def check_prefix_toolkit(ctx: Context) -> Check:
    """Whether the environment's prefix holds the CUDA toolkit an op build needs (nvcc and the op headers): only
    then does the hook's activation point CUDA_HOME and CPATH at it."""
    t = ctx.facts.get("prefix_toolkit")
    if not isinstance(t, dict) or not t.get("prefix"):
        return Check("prefix_toolkit", "skip", "not probed")
    if not t.get("conda"):
        return Check("prefix_toolkit", "skip", f"{t['prefix']} is not a conda prefix (no conda-meta/)")
    nvcc = t.get("nvcc") or {}
    where = t.get("include_dir") or f"{t['prefix']}/targets/<target>/include"
    if t.get("complete"):
        return Check(
            "prefix_toolkit",
            "pass",
            f"{t['prefix']} holds nvcc {nvcc.get('version')} and the op headers in {where}: the hook's activation "
            "sets CUDA_HOME and CPATH to them",
        )
    missing = [str(h) for h in t.get("missing") or []]
    parts = ([] if nvcc.get("exists") else [f"no nvcc in {t['prefix']}/bin"]) + (
        [f"no {', '.join(missing)} in {where}"] if missing else []
    )
    packages = ([] if nvcc.get("exists") else [ctx.kb.nvcc_package.value]) + _header_packages(ctx, missing).split()
    conda = {m.get("name"): m.get("version") for m in ctx.facts.get("conda_meta") or []}
    home = ctx.facts.get("cuda_home") or {}
    builds = (
        f"op builds use CUDA_HOME={home['path']} (from {home.get('how')})"
        if home.get("path")
        else "op builds find no CUDA toolkit"
    )
    prefix = shlex.quote(str(t["prefix"]))
    return Check(
        "prefix_toolkit",
        "warn",
        f"{t['prefix']} holds no complete CUDA toolkit ({'; '.join(parts)}): the hook's activation leaves "
        f"CUDA_HOME and CPATH as they are, so {builds}",
        f"conda install -p {prefix} -c conda-forge {' '.join(dict.fromkeys(packages))}"
        f"{_pin(conda.get('cuda-version') or torch_facts(ctx).get('cuda'))}, then envsolver hook -p {prefix}",
    )


def check_host_compiler(ctx: Context) -> Check:
    c = ctx.facts.get("compiler") or {}
    nvcc = leading_major_minor((ctx.facts.get("nvcc") or {}).get("version"))
    limit = toolchain.gcc_limit(ctx.kb, nvcc)
    if not c.get("path") or c.get("major") is None:
        found = f"{c['path']} gives no GCC version" if c.get("path") else "no C++ compiler found"
        return Check(
            "host_compiler", "fail", f"{found} (CXX, the env's conda c++, c++ or g++ on PATH)", _gcc_fix(ctx, limit)
        )
    major = int(c["major"])
    if nvcc is None:
        return Check("host_compiler", "skip", f"{c.get('path')}: {c.get('version')} (no nvcc to compare with)")
    if limit is None:
        return Check(
            "host_compiler",
            "warn",
            f"{c['path']} is GCC {major}; the newest GCC nvcc {nvcc} accepts is not in the knowledge base",
            "check nvcc's host compiler range in NVIDIA's installation guide for this CUDA release",
        )
    verdict, detail = toolchain.gcc_vs_nvcc(c["path"], major, nvcc, limit)
    return Check(
        "host_compiler", "pass" if verdict == "ok" else verdict, detail, _gcc_fix(ctx, limit) if verdict != "ok" else ""
    )


def _gcc_fix(ctx: Context, limit: int | None) -> str:
    """A host compiler nvcc accepts: conda-forge's, into the environment when it is a conda one (for its machine's
    platform); else the host's g++ named by CXX, or a new conda environment."""
    if conda_env(ctx):
        machine = (ctx.facts.get("python") or {}).get("machine") or "x86_64"
        names = toolchain.cxx_specs(ctx.kb, host_platform(machine) or "linux-64", limit)
        return f"conda install -p {prefix_of(ctx)} -c conda-forge {' '.join(shlex.quote(n) for n in names)}"
    most = f" of GCC {limit} or older" if limit else ""
    return (
        f"install a g++{most} from the host's packages and export CXX=its path, or: "
        f"{new_env_fix(ctx, 'the gxx compiler')}"
    )


def check_torch_cuda_arch_list(ctx: Context) -> Check:
    value = (ctx.facts.get("env") or {}).get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return unset_arch_list(ctx)
    try:
        archs = parse_arch_list(value)
    except ValueError:
        return Check(
            "torch_cuda_arch_list",
            "fail",
            f"TORCH_CUDA_ARCH_LIST={value!r} is malformed",
            "export TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX' (your GPUs' compute capabilities)",
        )
    able = archplan.buildable(ctx.facts, ctx.kb)
    problems = []
    if able:
        bad = [str(a.cc) for a in archs if a.cc.sm not in able]
        if bad:
            problems.append(f"nvcc cannot build {', '.join(bad)} ('nvcc fatal : Unsupported gpu architecture')")
    ccs = {a.cc for a in archs}
    for g in (ctx.facts.get("driver") or {}).get("gpus") or []:
        cc = leading_major_minor(g.get("compute_capability"))
        if cc and not any(c.major == cc.major and c.minor <= cc.minor for c in ccs):
            problems.append(f"it does not cover {g['name']} ({cc})")
    suffixed = [str(a) for a in archs if a.suffix]
    if problems:
        keep = sorted({a.cc for a in archs if not able or a.cc.sm in able})
        if not keep and able:
            return Check(
                "torch_cuda_arch_list",
                "fail",
                f"TORCH_CUDA_ARCH_LIST={value}: " + "; ".join(problems) + f" (it builds sm_{min(able)} to "
                f"sm_{max(able)})",
                "use a toolkit that builds these GPUs: regenerate the env with envsolver make --gpu <your GPUs>",
            )
        suggestion = ";".join(str(c) for c in keep) + "+PTX" if keep else "<your GPUs' CCs>"
        return Check(
            "torch_cuda_arch_list",
            "fail",
            f"TORCH_CUDA_ARCH_LIST={value}: " + "; ".join(problems),
            f"export TORCH_CUDA_ARCH_LIST='{suggestion}' (envsolver hook sets it from the lock)",
        )
    adjusted = _adjusted(ctx, value, able)
    if adjusted is not None:
        return adjusted
    if suffixed:
        plain = ";".join(str(c) for c in sorted({a.cc for a in archs})) + "+PTX"
        fact = ctx.kb.deepspeed_arch_suffixes
        return Check(
            "torch_cuda_arch_list",
            "warn",
            f"TORCH_CUDA_ARCH_LIST={value}: torch builds {', '.join(suffixed)}, "
            f"but DeepSpeed's op builder cannot parse arch suffixes (seen with DeepSpeed {fact.value}: "
            "ValueError: invalid literal for int() with base 10: '0a')",
            f"export TORCH_CUDA_ARCH_LIST='{plain}' before building DeepSpeed ops",
        )
    return Check("torch_cuda_arch_list", "pass", f"TORCH_CUDA_ARCH_LIST={value} is buildable and covers the GPUs")


def _adjusted(ctx: Context, value: str, able: set[int] | None) -> Check | None:
    """A warning when TORCH_CUDA_ARCH_LIST is the lock's list made buildable (archs nvcc cannot build, or arch
    suffixes, dropped: what the hook builds and activates); None otherwise."""
    requested = ctx.lock_meta.get("envsolver_torch_cuda_arch_list")
    made = archplan.plan(requested, able) if requested else None
    if made is None or made.value != canonical(value) or not (made.dropped or made.suffixed):
        return None
    if made.dropped:
        nvcc = (ctx.facts.get("nvcc") or {}).get("version")
        return Check(
            "torch_cuda_arch_list",
            "warn",
            f"TORCH_CUDA_ARCH_LIST={value}: the lock's {requested} without {', '.join(made.dropped)}, which nvcc "
            f"{nvcc} cannot build (it would stop with 'nvcc fatal : Unsupported gpu architecture')",
            "leave those GPUs out of the target list (envsolver make --gpu ...), or use an older toolkit for them",
        )
    return Check(
        "torch_cuda_arch_list",
        "warn",
        f"TORCH_CUDA_ARCH_LIST={value}: the lock's {requested} built as plain archs: DeepSpeed's op builder "
        f"cannot parse arch suffixes (seen with DeepSpeed {ctx.kb.deepspeed_arch_suffixes.value})",
        "use plain major.minor entries in the target list",
    )


def check_shm(ctx: Context) -> Check:
    size = (ctx.facts.get("shm") or {}).get("bytes")
    if size is None:
        return Check("shm", "skip", "/dev/shm not readable")
    gib = size / 2**30
    if gib < 1:
        return Check(
            "shm",
            "warn",
            f"/dev/shm is {gib:.2f} GiB: DataLoader workers can fail ('bus error')",
            "give the job more shared memory (e.g. docker --shm-size=8g, or num_workers=0)",
        )
    return Check("shm", "pass", f"/dev/shm is {gib:.1f} GiB")
