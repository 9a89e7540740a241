"""Checks of the host and its toolchain: driver, GPUs, nvcc, headers, host compiler, arch list, shm."""

from __future__ import annotations

from envsolver import toolchain
from envsolver.archlist import parse_arch_list
from envsolver.kb.gpus import lookup
from envsolver.resolve import driver as driver_rules
from envsolver.verify.checks_base import Check, Context, driver_version, prefix_of, torch_facts
from envsolver.verify.checks_deepspeed import unset_arch_list
from envsolver.versions import leading_major_minor


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
            row = lookup(ctx.kb, g["name"])
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
            f"conda install -p {prefix_of(ctx)} -c conda-forge cuda-nvcc cuda-version="
            f"{torch_facts(ctx).get('cuda') or '<torch CUDA>'}, then set CUDA_HOME=$CONDA_PREFIX",
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
    packages = {h.header: h.package for h in (*ctx.kb.op_headers, *ctx.kb.extra_headers)}
    wanted = sorted({packages[h] for h in missing if h in packages})
    dirs = ", ".join(ctx.facts.get("include_dirs") or [])
    return Check(
        "headers",
        "fail",
        f"missing {', '.join(missing)} in {dirs}",
        f"conda install -p {prefix_of(ctx)} -c conda-forge {' '.join(wanted)}, and add "
        "$CONDA_PREFIX/targets/<arch>/include to CPATH (envsolver hook does both)",
    )


def check_host_compiler(ctx: Context) -> Check:
    c = ctx.facts.get("compiler") or {}
    nvcc = leading_major_minor((ctx.facts.get("nvcc") or {}).get("version"))
    if not c.get("path"):
        return Check(
            "host_compiler", "fail", "no C++ compiler (CXX, c++, g++)", "conda install -c conda-forge gxx gxx_linux-64"
        )
    limit = toolchain.gcc_limit(ctx.kb, nvcc)
    major = c.get("major")
    if limit is None or major is None:
        return Check("host_compiler", "skip", f"{c.get('path')}: {c.get('version')} (no nvcc range to compare)")
    verdict, detail, fix = toolchain.gcc_vs_nvcc(c["path"], major, nvcc, limit)
    return Check("host_compiler", "pass" if verdict == "ok" else verdict, detail, fix)


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
    able = (ctx.facts.get("nvcc") or {}).get("archs")
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
        suggestion = ";".join(str(c) for c in keep) + "+PTX" if keep else "<your GPUs' CCs>"
        return Check(
            "torch_cuda_arch_list",
            "fail",
            f"TORCH_CUDA_ARCH_LIST={value}: " + "; ".join(problems),
            f"export TORCH_CUDA_ARCH_LIST='{suggestion}' (envsolver hook sets it from the lock)",
        )
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


def check_pip_conda_mix(ctx: Context) -> Check:
    wheels = ctx.facts.get("pip_cuda_wheels") or []
    conda = {m["name"]: m["version"] for m in ctx.facts.get("conda_meta") or []}
    cuda_version = conda.get("cuda-version")
    if not wheels:
        return Check("pip_conda_mix", "pass", "no pip nvidia-* CUDA wheels")
    if not cuda_version:
        return Check("pip_conda_mix", "pass", f"CUDA comes from pip wheels ({len(wheels)}), no conda CUDA libraries")
    majors = {w["name"].rsplit("-cu", 1)[-1] for w in wheels if "-cu1" in w["name"]}
    other = [m for m in majors if m != cuda_version.split(".")[0]]
    if other:
        return Check(
            "pip_conda_mix",
            "warn",
            f"pip CUDA {'/'.join(sorted(other))} wheels "
            f"({', '.join(w['name'] for w in wheels)}) beside conda CUDA {cuda_version}",
            "pip uninstall the nvidia-*-cu* wheels, or rebuild the env from its lock",
        )
    return Check(
        "pip_conda_mix",
        "warn",
        f"pip nvidia wheels beside conda CUDA {cuda_version}: {', '.join(w['name'] for w in wheels)}",
        "keep one source of CUDA libraries (the lock's)",
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
