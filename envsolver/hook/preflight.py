"""Pre-flight checks, before any compiler runs. Small pure functions over Facts and the KB; each finding
says what is wrong and ends with the one-line fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envsolver import toolchain
from envsolver.archlist import Arch, parse_arch_list
from envsolver.hook.facts import Facts
from envsolver.kb.model import KnowledgeBase
from envsolver.versions import leading_major_minor

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    id: str
    status: Status
    detail: str
    fix: str = ""


def check_nvcc(f: Facts, prefix: str) -> Finding:
    if f.nvcc is None:
        want = f"cuda-version={f.torch_cuda}" if f.torch_cuda else "cuda-version=<torch's CUDA>"
        return Finding(
            "nvcc",
            "fail",
            f"no nvcc at {f.cuda_home}/bin/nvcc (CUDA_HOME={f.cuda_home})",
            f"conda install -p {prefix} -c conda-forge cuda-nvcc {want}",
        )
    return Finding("nvcc", "ok", f"nvcc {f.nvcc_version or '?'} at {f.nvcc}")


def check_torch(f: Facts) -> Finding:
    if f.torch_version is None:
        return Finding(
            "torch",
            "fail",
            f"torch does not import in the target python: {f.torch_error}",
            "install the environment's lock first (envsolver install conda-lock.yml -p PREFIX)",
        )
    if f.torch_cuda is None:
        return Finding(
            "torch",
            "fail",
            f"torch {f.torch_version} is a CPU-only build (torch.version.cuda is None)",
            "reinstall from the lock, which pins a CUDA build: envsolver install conda-lock.yml -p PREFIX",
        )
    return Finding("torch", "ok", f"torch {f.torch_version}, built with CUDA {f.torch_cuda}")


def check_cuda_match(f: Facts, kb: KnowledgeBase, prefix: str) -> Finding:
    nvcc, built = leading_major_minor(f.nvcc_version), leading_major_minor(f.torch_cuda)
    if nvcc is None or built is None:
        return Finding("cuda_version_match", "warn", "skipped: nvcc or torch's CUDA version is unknown")
    verdict, detail = toolchain.nvcc_vs_torch(kb, nvcc, built)
    return Finding("cuda_version_match", verdict, detail, toolchain.nvcc_fix(nvcc, built, verdict, prefix))


def check_headers(f: Facts, kb: KnowledgeBase, prefix: str) -> list[Finding]:
    out = []
    wanted = f"cuda-version={f.nvcc_version}" if f.nvcc_version else ""
    where = ", ".join(str(d) for d in f.include_dirs)
    for header in kb.op_headers:
        path = f.headers.get(header.header)
        if path is None:
            out.append(
                Finding(
                    f"header:{header.header}",
                    "fail",
                    f"{header.header} not found in {where}",
                    f"conda install -p {prefix} -c conda-forge {header.package} {wanted}".rstrip(),
                )
            )
        else:
            out.append(Finding(f"header:{header.header}", "ok", f"{header.header} at {path}"))
    return out


def check_host_compiler(f: Facts, kb: KnowledgeBase) -> Finding:
    nvcc = leading_major_minor(f.nvcc_version)
    limit = toolchain.gcc_limit(kb, nvcc)
    if f.cxx is None or f.cxx_major is None:
        return Finding(
            "host_compiler",
            "fail",
            "no C++ compiler found (CXX, the env's conda c++, c++ on PATH)",
            f"conda install -c conda-forge gxx{f'<{limit + 1}' if limit else ''} gxx_linux-64",
        )
    if limit is None:
        return Finding(
            "host_compiler",
            "warn",
            f"{f.cxx} is GCC {f.cxx_major}; the newest GCC nvcc {f.nvcc_version} accepts is not in the knowledge base",
        )
    return Finding("host_compiler", *toolchain.gcc_vs_nvcc(f.cxx, f.cxx_major, nvcc, limit))


def buildable(f: Facts, kb: KnowledgeBase) -> set[int] | None:
    """The SM numbers this nvcc builds: from `nvcc --list-gpu-arch`, else the KB row for its version."""
    if f.nvcc_archs is not None:
        return set(f.nvcc_archs)
    nvcc = leading_major_minor(f.nvcc_version)
    toolkit = kb.toolkit(nvcc) if nvcc else None
    return set(toolkit.sm) if toolkit and toolkit.sm is not None else None


def check_arch_list(f: Facts, kb: KnowledgeBase, arch_list: str) -> tuple[Finding, str]:
    """(finding, the arch list to build with): unbuildable archs are dropped while others remain."""
    try:
        archs = parse_arch_list(arch_list)
    except ValueError:
        return Finding(
            "arch_list",
            "fail",
            f"TORCH_CUDA_ARCH_LIST {arch_list!r} is malformed",
            "pass --arch-list like '8.0;9.0+PTX'",
        ), arch_list
    suffixed = [str(a) for a in archs if a.suffix]
    if suffixed:
        archs = tuple(Arch(a.cc, a.ptx) for a in archs)
    able = buildable(f, kb)
    if able is None:
        return Finding(
            "arch_list", "warn", f"cannot tell which archs nvcc {f.nvcc_version} builds; using {arch_list}"
        ), arch_list
    keep = [a for a in archs if a.cc.sm in able]
    dropped = [a for a in archs if a.cc.sm not in able]
    if not keep:
        return Finding(
            "arch_list",
            "fail",
            f"nvcc {f.nvcc_version} builds none of {arch_list} (it builds sm_{min(able)} to sm_{max(able)})",
            "use a toolkit that builds these GPUs: regenerate the env with envsolver make",
        ), arch_list
    fixed = _with_ptx(keep)
    if suffixed:
        return Finding(
            "arch_list",
            "warn",
            f"{', '.join(suffixed)} built as plain archs ({fixed}): DeepSpeed's op "
            f"builder cannot parse arch suffixes (seen with DeepSpeed {kb.deepspeed_arch_suffixes.value})",
            "use plain major.minor entries in TORCH_CUDA_ARCH_LIST",
        ), fixed
    if dropped:
        names = ", ".join(str(a.cc) for a in dropped)
        return Finding(
            "arch_list",
            "warn",
            f"dropped {names}: nvcc {f.nvcc_version} cannot build them (it would stop with 'nvcc fatal : "
            f"Unsupported gpu architecture'); building {fixed}",
            "leave those GPUs out of TORCH_CUDA_ARCH_LIST, or use an older toolkit for them",
        ), fixed
    return Finding("arch_list", "ok", f"nvcc {f.nvcc_version} builds every arch in {fixed}"), fixed


def _with_ptx(archs: list[Arch]) -> str:
    ordered = sorted({a.cc for a in archs})
    return ";".join([str(cc) for cc in ordered[:-1]] + [f"{ordered[-1]}+PTX"])


def run_all(f: Facts, kb: KnowledgeBase, arch_list: str, prefix: str) -> tuple[list[Finding], str]:
    """Every finding, in order, and the arch list the build should use."""
    arch, fixed = check_arch_list(f, kb, arch_list)
    findings = [
        check_nvcc(f, prefix),
        check_torch(f),
        check_cuda_match(f, kb, prefix),
        *check_headers(f, kb, prefix),
        check_host_compiler(f, kb),
        arch,
    ]
    return findings, fixed
