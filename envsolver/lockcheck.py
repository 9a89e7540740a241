"""Check a solution against the plan before anything is written. Pure: records in, problems out."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from envsolver.kb.model import KnowledgeBase
from envsolver.plan import Plan
from envsolver.solve import Record


def problems(plan: Plan, kb: KnowledgeBase, records: Sequence[Record]) -> list[str]:
    """Every way the solved records contradict the plan; empty when they agree."""
    found = {r.name: r for r in records}
    out = []
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
