"""Check a solution against the plan before anything is written. Pure: records in, problems out.

Every lock is held to the same rules here, whether it was solved against the live channels, a --channel
mirror or the bundled snapshot: the plan's choices are in it (problems), and it holds one CUDA runtime
(coherence).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from fnmatch import fnmatchcase

from envsolver.kb.model import KnowledgeBase
from envsolver.lock.solve import Record
from envsolver.resolve.plan import Plan

# The packages of the CUDA runtime (libcudart, its headers, its static library). conda-forge's, and the nvidia
# channel's 12.6 ones, come as NAME plus NAME_<platform> at one version (conda-forge's cuda-cudart 12.9.79
# depends on cuda-cudart_linux-64 12.9.79, nvidia's cuda-cudart-static 12.6.77 on cuda-cudart-static_linux-64
# 12.6.77); the nvidia channel's cuda-cudart 12.1.105 and 12.4.127 come alone, without dependencies (the
# snapshot's records). Two of them at different CUDA minors are two runtimes in one prefix.
RUNTIME = ("cuda-cudart", "cuda-cudart-dev", "cuda-cudart-static")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _through(name: str, records: Sequence[Record], roots: Sequence[str]) -> str:
    """' (required through pytorch-cuda 12.1)': the first root package whose dependencies reach `name`."""
    found = {r.name: r for r in records}
    for root in roots:
        seen, queue = {root}, deque([root])
        while queue:
            current = found.get(queue.popleft())
            for dep in current.depends if current else ():
                dep_name = dep.split(" ", 1)[0]
                if dep_name == name:
                    return f" (required through {root} {found[root].version})"
                if dep_name not in seen:
                    seen.add(dep_name)
                    queue.append(dep_name)
    return ""


def coherence(plan: Plan, kb: KnowledgeBase, records: Sequence[Record]) -> list[str]:
    """The ways the solution holds more than one CUDA runtime, in plain words; empty when it holds one: every
    runtime package of one CUDA minor, cuda-cudart and cuda-cudart_<platform> of one version, and the solved
    cuda-version that minor."""
    names = [name for n in RUNTIME for name in (n, f"{n}_{plan.platform}")]
    found = {r.name: r for r in records}
    family = [found[n] for n in names if n in found]
    if not family:
        return []
    roots = ["pytorch-cuda", kb.nvcc_package.value, "pytorch"]
    by_minor: dict[str, Record] = {}
    for record in family:  # the first named in RUNTIME order stands for its minor
        by_minor.setdefault(_minor(record.version), record)
    out = []
    if len(by_minor) > 1:
        first, second = sorted(by_minor.values(), key=lambda r: names.index(r.name))[:2]
        out.append(
            f"{first.name} {first.version}{_through(first.name, records, roots)} and {second.name} {second.version}"
            f"{_through(second.name, records, roots)} would be two CUDA runtimes, "
            f"{' and '.join(sorted(by_minor, key=lambda m: tuple(int(p) for p in m.split('.'))))}, in one prefix"
        )
        return out
    cudart, split = found.get("cuda-cudart"), found.get(f"cuda-cudart_{plan.platform}")
    if cudart and split and cudart.version != split.version:
        out.append(f"cuda-cudart {cudart.version} and {split.name} {split.version} are not one runtime version")
    [(minor, runtime)] = by_minor.items()
    version = found.get("cuda-version")
    if version is not None and _minor(version.version) != minor:
        out.append(
            f"cuda-version {version.version} does not match the CUDA {minor} runtime ({runtime.name} {runtime.version})"
        )
    return out


def problems(plan: Plan, kb: KnowledgeBase, records: Sequence[Record]) -> list[str]:
    """Every way the solved records contradict the plan or hold more than one CUDA runtime; empty when they
    agree."""
    found = {r.name: r for r in records}
    out = coherence(plan, kb, records)
    torch = found.get("pytorch")
    if torch is None:
        out.append("pytorch is missing from the solution")
    else:
        if torch.version != plan.torch_version:
            out.append(f"pytorch {torch.version} was solved, the plan chose {plan.torch_version}")
        if not fnmatchcase(torch.build, plan.torch_build) or "cpu" in torch.build:
            out.append(f"pytorch build {torch.build!r} is not the plan's CUDA build ({plan.torch_build})")
    if plan.source == "conda-forge":
        version = found.get("cuda-version")
        if version is None or version.version != str(plan.cuda_version):
            got = version.version if version else "nothing"
            out.append(f"cuda-version {got} was solved, the plan pins {plan.cuda_version}")
    else:
        pytorch_cuda = found.get("pytorch-cuda")
        if pytorch_cuda is None or pytorch_cuda.version != str(plan.torch_cuda):
            got = pytorch_cuda.version if pytorch_cuda else "nothing"
            out.append(f"pytorch-cuda {got} was solved, the plan needs {plan.torch_cuda}")
    nvcc = found.get(kb.nvcc_package.value)
    if nvcc is None:
        out.append(f"{kb.nvcc_package.value} (nvcc) is missing from the solution")
    elif not nvcc.version.startswith(f"{plan.cuda_version}."):
        out.append(f"{nvcc.name} {nvcc.version} is not CUDA {plan.cuda_version}")
    for header in kb.op_headers:
        if header.package not in found:
            out.append(f"{header.package} ({header.header}) is missing from the solution")
    if plan.deepspeed and not plan.pip and "deepspeed" not in found:
        out.append("deepspeed is missing from the solution")
    return list(dict.fromkeys(out))
