"""Checks: small pure functions over the probe's facts (and the KB, and the lock when given).

Each returns a Check with a stable id, a status (pass, fail, warn, skip), a detail and, for fail and warn,
the exact fix. A failed prerequisite makes its dependents skip.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from envsolver import toolchain
from envsolver.hook.build import compiler_line
from envsolver.kb.gpus import lookup
from envsolver.kb.load import parse_arch_list
from envsolver.kb.model import KnowledgeBase
from envsolver.lockfile import LockEntry
from envsolver.resolve import driver as driver_rules
from envsolver.versions import DriverVersion, MajorMinor
from envsolver.versions import driver as parse_driver

Status = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    id: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Context:
    facts: Mapping[str, Any]
    kb: KnowledgeBase
    lock_meta: Mapping[str, str] = field(default_factory=dict)
    lock_entries: tuple[LockEntry, ...] = ()
    deepspeed_wanted: bool = False
    gpu_test: bool = False


def _mm(text: Any) -> MajorMinor | None:
    match = re.match(r"^\s*(\d+)\.(\d+)", str(text or ""))
    return MajorMinor(int(match.group(1)), int(match.group(2))) if match else None


def _driver(ctx: Context) -> DriverVersion | None:
    version = (ctx.facts.get("driver") or {}).get("version")
    try:
        return parse_driver(version) if version else None
    except ValueError:
        return None


def _torch(ctx: Context) -> dict[str, Any]:
    value = ctx.facts.get("torch")
    return value if isinstance(value, dict) else {}


def _prefix(ctx: Context) -> str:
    return str((ctx.facts.get("python") or {}).get("prefix") or "PREFIX")


def check_driver(ctx: Context) -> Check:
    d = ctx.facts.get("driver") or {}
    version = _driver(ctx)
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


def check_torch_import(ctx: Context) -> Check:
    t = _torch(ctx)
    if not t.get("version"):
        return Check(
            "torch_import",
            "fail",
            f"torch does not import: {t.get('error') or ctx.facts.get('torch_error')}",
            f"install the environment from its lock: envsolver install conda-lock.yml -p {_prefix(ctx)}",
        )
    how = (
        "conda"
        if any(m["name"] == "pytorch" for m in ctx.facts.get("conda_meta") or [])
        else (ctx.facts.get("torch_installer") or "unknown")
    )
    return Check("torch_import", "pass", f"torch {t['version']} at {t.get('file')} (installed by {how})")


def check_torch_cuda_build(ctx: Context) -> Check:
    t = _torch(ctx)
    if t.get("cuda"):
        return Check("torch_cuda_build", "pass", f"torch is a CUDA {t['cuda']} build")
    return Check(
        "torch_cuda_build",
        "fail",
        f"torch {t.get('version')} is a CPU-only build (torch.version.cuda is None): the silent fallback",
        "reinstall torch as a CUDA build: envsolver make --gpu <your GPU> && envsolver install conda-lock.yml "
        f"-p {_prefix(ctx)} (the lock pins a CUDA build string)",
    )


def check_driver_supports_torch_cuda(ctx: Context) -> Check:
    version, built = _driver(ctx), _mm(_torch(ctx).get("cuda"))
    if version is None or built is None:
        return Check("driver_supports_torch_cuda", "skip", "needs the driver and torch's CUDA version")
    level = driver_rules.support(ctx.kb, version, built)
    toolkit = ctx.kb.toolkit(built)
    need = f"{toolkit.driver}" if toolkit else "a newer driver"
    if level == "full":
        return Check("driver_supports_torch_cuda", "pass", f"driver {version} fully supports CUDA {built}")
    if level == "minor":
        return Check(
            "driver_supports_torch_cuda",
            "warn",
            f"driver {version} runs CUDA {built} only through minor-version compatibility: PTX JIT of code "
            "built with a newer toolkit fails",
            f"upgrade the driver to {need} or newer",
        )
    return Check(
        "driver_supports_torch_cuda",
        "fail",
        f"{driver_rules.requirement_text(ctx.kb, built)}; driver "
        f"{version} {driver_rules.supports_text(ctx.kb, version)}",
        f"upgrade the driver to {need} or newer",
    )


def check_cuda_available(ctx: Context) -> Check:
    t = _torch(ctx)
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
    arch_list = _torch(ctx).get("arch_list") or []
    sass = {int(a.split("_")[1]) for a in arch_list if re.fullmatch(r"sm_\d+", a)}
    ptx = {int(a.split("_")[1]) for a in arch_list if re.fullmatch(r"compute_\d+", a)}
    gpus = (ctx.facts.get("driver") or {}).get("gpus") or []
    if not gpus or not arch_list:
        return Check("arch_coverage", "skip", "needs visible GPUs and torch's arch list")
    bad = []
    for g in gpus:
        cc = _mm(g.get("compute_capability"))
        if cc is None:
            continue
        has_sass = any(s // 10 == cc.major and s % 10 <= cc.minor for s in sass)
        has_ptx = any(p <= cc.sm for p in ptx)
        if not has_sass and not has_ptx:
            bad.append(f"{g['name']} (sm_{cc.sm})")
    if bad:
        return Check(
            "arch_coverage",
            "fail",
            f"torch has no kernel for {', '.join(bad)} (its archs: "
            f"{' '.join(arch_list)}): 'no kernel image is available for execution on the device'",
            "install a torch build with SASS for these GPUs: envsolver make --gpu auto",
        )
    return Check("arch_coverage", "pass", f"every visible GPU has SASS or PTX in {' '.join(arch_list)}")


def check_nvcc(ctx: Context) -> Check:
    n = ctx.facts.get("nvcc") or {}
    home = ctx.facts.get("cuda_home") or {}
    if not n.get("exists"):
        return Check(
            "nvcc",
            "fail",
            f"no nvcc where torch's extension builder looks (CUDA_HOME resolved to "
            f"{home.get('path')} via {home.get('how')})",
            f"conda install -p {_prefix(ctx)} -c conda-forge cuda-nvcc cuda-version="
            f"{_torch(ctx).get('cuda') or '<torch CUDA>'}, then set CUDA_HOME=$CONDA_PREFIX",
        )
    return Check("nvcc", "pass", f"nvcc {n.get('version')} at {n.get('path')} (CUDA_HOME via {home.get('how')})")


def check_cuda_version_match(ctx: Context) -> Check:
    nvcc, built = _mm((ctx.facts.get("nvcc") or {}).get("version")), _mm(_torch(ctx).get("cuda"))
    if nvcc is None or built is None:
        return Check("cuda_version_match", "skip", "needs nvcc and a CUDA torch")
    verdict, detail = toolchain.nvcc_vs_torch(ctx.kb, nvcc, built)
    fix = f"conda install -p {_prefix(ctx)} -c conda-forge cuda-nvcc cuda-version={built}"
    if verdict == "fail" and nvcc.major == built.major:
        fix += " (or DS_SKIP_CUDA_CHECK=1)"
    return Check("cuda_version_match", "pass" if verdict == "ok" else verdict, detail, fix if verdict != "ok" else "")


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
        f"conda install -p {_prefix(ctx)} -c conda-forge {' '.join(wanted)}, and add "
        "$CONDA_PREFIX/targets/<arch>/include to CPATH (envsolver hook does both)",
    )


def check_libcudart(ctx: Context) -> Check:
    t = _torch(ctx)
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
    shadow = [p for p in others if not any(p.startswith(lp.rsplit("/", 1)[0]) for lp in loaded)]
    if shadow:
        return Check(
            "libcudart",
            "warn",
            f"torch loaded {loaded[0]}; LD_LIBRARY_PATH also offers {', '.join(shadow)}",
            "remove the other CUDA runtime from LD_LIBRARY_PATH (unset LD_LIBRARY_PATH in the env)",
        )
    return Check("libcudart", "pass", f"torch loaded {loaded[0]}")


def check_cudnn(ctx: Context) -> Check:
    t = _torch(ctx)
    if not t.get("cuda"):
        return Check("cudnn", "skip", "needs a CUDA torch")
    if t.get("cudnn"):
        return Check("cudnn", "pass", f"cuDNN {t['cudnn']}")
    return Check(
        "cudnn",
        "fail",
        f"cuDNN does not load: {t.get('cudnn_error')}",
        "install the environment from its lock (the cudnn package of torch's CUDA major)",
    )


def check_nccl(ctx: Context) -> Check:
    t = _torch(ctx)
    if not t.get("cuda"):
        return Check("nccl", "skip", "needs a CUDA torch")
    if t.get("nccl"):
        return Check("nccl", "pass", f"NCCL {t['nccl']}")
    return Check(
        "nccl",
        "warn",
        f"NCCL version unknown: {t.get('nccl_error')}",
        "install the environment from its lock (the nccl package)",
    )


def check_host_compiler(ctx: Context) -> Check:
    c = ctx.facts.get("compiler") or {}
    nvcc = _mm((ctx.facts.get("nvcc") or {}).get("version"))
    if not c.get("path"):
        return Check(
            "host_compiler", "fail", "no C++ compiler (CXX, c++, g++)", "conda install -c conda-forge gxx gxx_linux-64"
        )
    limit = toolchain.gcc_limit(ctx.kb, nvcc)
    major = c.get("major")
    if limit is None or major is None:
        return Check("host_compiler", "skip", f"{c.get('path')}: {c.get('version')} (no nvcc range to compare)")
    if major > limit:
        return Check(
            "host_compiler",
            "fail",
            f"{c['path']} is GCC {major}; nvcc {nvcc} accepts GCC <= {limit}",
            f"conda install -c conda-forge 'gxx<{limit + 1}' 'gxx_linux-64<{limit + 1}'",
        )
    return Check("host_compiler", "pass", f"{c['path']} is GCC {major} (nvcc {nvcc} accepts <= {limit})")


def check_torch_cuda_arch_list(ctx: Context) -> Check:
    value = (ctx.facts.get("env") or {}).get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return Check("torch_cuda_arch_list", "skip", "TORCH_CUDA_ARCH_LIST is not set")
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
        cc = _mm(g.get("compute_capability"))
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


def check_deepspeed_ops(ctx: Context) -> Check:
    ds = ctx.facts.get("deepspeed")
    if not isinstance(ds, dict):
        return Check("deepspeed_ops", "skip", "not probed (pass --deepspeed, or --gpu-test)")
    if ds.get("error"):
        return Check(
            "deepspeed_ops",
            "warn" if not ctx.deepspeed_wanted else "fail",
            f"DeepSpeed: {ds['error']}",
            "install the environment from its lock (deepspeed is in it)",
        )
    installed = sorted(k for k, v in (ds.get("installed_ops") or {}).items() if v)
    if ds.get("accelerator") and ds.get("accelerator") != "cuda":
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {ds.get('version')} selected its "
            f"{ds.get('accelerator')!r} accelerator, so its CUDA ops are not used",
            "use a CUDA torch and export DS_ACCELERATOR=cuda (envsolver hook sets it on activation)",
        )
    if not ds.get("fused_adam_built"):
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {ds.get('version')}: FusedAdam is not built (not prebuilt, "
            f"not in {ds.get('fused_adam_cache')}); its first use would JIT-compile it",
            f"envsolver hook -p {_prefix(ctx)} (builds the ops for the target GPUs and proves them)",
        )
    if not ds.get("fused_adam_loads"):
        return Check(
            "deepspeed_ops",
            "fail",
            f"DeepSpeed {ds.get('version')}: FusedAdam does not load: {compiler_line(str(ds.get('fused_adam_error')))}",
            f"envsolver hook -p {_prefix(ctx)} (builds and proves the ops)",
        )
    gpu = ctx.facts.get("gpu_test")
    if ctx.gpu_test and isinstance(gpu, dict):
        diff = gpu.get("max_abs_diff")
        if diff is None or diff > 1e-5:
            return Check(
                "deepspeed_ops",
                "fail",
                f"FusedAdam vs torch.optim.AdamW: {gpu.get('error') or diff}",
                f"rebuild the ops: rm -rf the extensions cache, then envsolver hook -p {_prefix(ctx)}",
            )
    extra = (
        f"; 5 FusedAdam steps match AdamW (max |diff| {gpu['max_abs_diff']:.1e})"
        if (ctx.gpu_test and isinstance(gpu, dict) and gpu.get("max_abs_diff") is not None)
        else ""
    )
    prebuilt = f"; prebuilt: {', '.join(installed)}" if installed else ""
    return Check(
        "deepspeed_ops",
        "pass",
        f"DeepSpeed {ds.get('version')}: FusedAdam loads in "
        f"{ds.get('fused_adam_load_seconds', 0):.3f} s{prebuilt}{extra}",
    )


def check_extensions_cache(ctx: Context) -> Check:
    cache = ctx.facts.get("extensions_cache") or {}
    t = _torch(ctx)
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
            " ".join(f"rm -rf {root}/{e}" for e in stale),
        )
    return Check("extensions_cache", "pass", f"{cache.get('root')}: {', '.join(entries)}")


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


def check_lock_drift(ctx: Context) -> Check:
    if not ctx.lock_entries:
        return Check("lock_drift", "skip", "no lock (pass --lock, or install with envsolver install)")
    have = {m["name"]: (m["version"], m["build"]) for m in ctx.facts.get("conda_meta") or []}
    want = {e.name: (e.version, e.build) for e in ctx.lock_entries}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    changed = sorted(n for n in set(want) & set(have) if want[n] != have[n])
    if not (missing or extra or changed):
        return Check("lock_drift", "pass", f"the {len(want)} packages match the lock")
    parts = []
    if missing:
        parts.append(f"missing: {', '.join(missing[:8])}{' …' if len(missing) > 8 else ''}")
    if extra:
        parts.append(f"extra: {', '.join(extra[:8])}{' …' if len(extra) > 8 else ''}")
    if changed:
        parts.append("changed: " + ", ".join(f"{n} {have[n][0]} (lock {want[n][0]})" for n in changed[:8]))
    return Check(
        "lock_drift",
        "fail",
        "; ".join(parts),
        f"envsolver install conda-lock.yml -p {_prefix(ctx)} (it brings the prefix back to the lock)",
    )


def check_host_vs_lock(ctx: Context) -> Check:
    meta = ctx.lock_meta
    if not meta:
        return Check("host_vs_lock", "skip", "no lock metadata")
    problems = []
    version = _driver(ctx)
    plat = next((k for k in meta if k.endswith("_cuda") and k.startswith("envsolver_virtual_")), None)
    if version is not None and plat:
        wanted = _mm(meta[plat])
        have = driver_rules.newest_full_cuda(ctx.kb, version)
        floor = meta.get("envsolver_driver_min_minor_compat")
        if floor and version < parse_driver(floor):
            problems.append(f"driver {version} is older than the lock's floor {floor}")
        elif wanted and have and have.version < wanted:
            problems.append(
                f"the lock was solved for __cuda={wanted}; driver {version} fully supports CUDA <= {have.version}"
            )
    glibc_key = next((k for k in meta if k.endswith("_glibc") and k.startswith("envsolver_virtual_")), None)
    host_glibc = _mm(ctx.facts.get("glibc"))
    lock_glibc = _mm(meta[glibc_key]) if glibc_key else None
    if host_glibc and lock_glibc and host_glibc < lock_glibc:
        problems.append(f"host glibc {host_glibc} is older than the lock's {lock_glibc}")
    ccs = [c for c in (meta.get("envsolver_compute_capabilities") or "").split(";") if c]
    for g in (ctx.facts.get("driver") or {}).get("gpus") or []:
        if ccs and g.get("compute_capability") not in ccs:
            problems.append(
                f"{g['name']} (CC {g.get('compute_capability')}) is not a target of the lock ({', '.join(ccs)})"
            )
    if problems:
        return Check(
            "host_vs_lock", "fail", "; ".join(problems), "remake the lock for this host: envsolver make --gpu auto"
        )
    return Check("host_vs_lock", "pass", "this host meets the lock's driver, glibc and GPU assumptions")


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


# id, function, prerequisites (ids that must pass or warn)
CHECKS: tuple[tuple[str, Callable[[Context], Check], tuple[str, ...]], ...] = (
    ("driver", check_driver, ()),
    ("gpus", check_gpus, ("driver",)),
    ("torch_import", check_torch_import, ()),
    ("torch_cuda_build", check_torch_cuda_build, ("torch_import",)),
    ("driver_supports_torch_cuda", check_driver_supports_torch_cuda, ("driver", "torch_cuda_build")),
    ("cuda_available", check_cuda_available, ("driver", "torch_cuda_build")),
    ("arch_coverage", check_arch_coverage, ("cuda_available",)),
    ("nvcc", check_nvcc, ()),
    ("cuda_version_match", check_cuda_version_match, ("nvcc", "torch_cuda_build")),
    ("headers", check_headers, ()),
    ("libcudart", check_libcudart, ("torch_cuda_build",)),
    ("cudnn", check_cudnn, ("torch_cuda_build",)),
    ("nccl", check_nccl, ("torch_cuda_build",)),
    ("host_compiler", check_host_compiler, ()),
    ("torch_cuda_arch_list", check_torch_cuda_arch_list, ()),
    ("deepspeed_ops", check_deepspeed_ops, ("torch_import",)),
    ("extensions_cache", check_extensions_cache, ()),
    ("pip_conda_mix", check_pip_conda_mix, ()),
    ("lock_drift", check_lock_drift, ()),
    ("host_vs_lock", check_host_vs_lock, ()),
    ("shm", check_shm, ()),
)
IDS = tuple(c[0] for c in CHECKS)
# Checks that read only host facts (no torch, no DeepSpeed): they can run before torch has imported.
HOST_ONLY = (
    "driver",
    "gpus",
    "nvcc",
    "headers",
    "host_compiler",
    "torch_cuda_arch_list",
    "pip_conda_mix",
    "lock_drift",
    "host_vs_lock",
    "shm",
)


def run(ctx: Context, only: tuple[str, ...] = ()) -> list[Check]:
    """Every check in order (or only the named ones); a failed or skipped prerequisite skips its dependents."""
    results: dict[str, Check] = {}
    for check_id, function, needs in CHECKS:
        blocked = [n for n in needs if n in results and results[n].status in ("fail", "skip")]
        if blocked:
            results[check_id] = Check(check_id, "skip", f"skipped: {', '.join(blocked)} did not pass")
            continue
        try:
            results[check_id] = function(ctx)
        except Exception as exc:  # a check must never take verify down; say what broke instead
            results[check_id] = Check(
                check_id,
                "fail",
                f"the check itself failed on these facts: {type(exc).__name__}: {exc}",
                "report it with `envsolver verify --json` output attached",
            )
    return [results[i] for i in IDS if not only or i in only]
