"""Rules an extension build must pass, shared by the hook's pre-flight and verify. Pure."""

from __future__ import annotations

import re
from typing import Literal

from envsolver.core.versions import MajorMinor
from envsolver.kb.model import KnowledgeBase
from envsolver.resolve.specs import gcc_max

Verdict = Literal["ok", "warn", "fail"]


def nvcc_vs_torch(kb: KnowledgeBase, nvcc: MajorMinor, built: MajorMinor) -> tuple[Verdict, str]:
    """nvcc against torch.version.cuda under torch's rule (same major) and DeepSpeed's (same major.minor, or both
    in its per-major allow-list, which has no CUDA 13 entry)."""
    if nvcc.major != built.major:
        return "fail", (
            f"nvcc {nvcc} and torch's CUDA {built} differ in the major version, which torch's extension builder refuses"
        )
    if nvcc == built:
        return "ok", f"nvcc {nvcc} = torch.version.cuda {built}"
    newest = max(kb.deepspeed_releases, key=lambda r: r.since)
    if newest.accepts_mismatch(nvcc, built):
        return "warn", (
            f"nvcc {nvcc} vs torch's CUDA {built}: accepted by torch and by DeepSpeed's allow-list (>= {newest.since})"
        )
    return "fail", (
        f"nvcc {nvcc} vs torch's CUDA {built}: DeepSpeed's op builder has no CUDA {built.major} "
        "minor-version allow-list for this pair and stops with 'Installed CUDA version ... does not "
        "match the version torch was compiled with'"
    )


def nvcc_fix(nvcc: MajorMinor, built: MajorMinor, verdict: Verdict, prefix: str) -> str:
    """The fix for a `nvcc_vs_torch` warn or fail: nvcc of torch's CUDA in the prefix (or, within one major,
    DeepSpeed's own escape hatch). Empty for ok."""
    if verdict == "ok":
        return ""
    fix = f"conda install -p {prefix} -c conda-forge cuda-nvcc cuda-version={built}"
    return fix + " (or DS_SKIP_CUDA_CHECK=1)" if verdict == "fail" and nvcc.major == built.major else fix


def gcc_limit(kb: KnowledgeBase, nvcc: MajorMinor | None) -> int | None:
    """The newest GCC major this nvcc accepts, or None when the KB cannot say."""
    toolkit = kb.toolkit(nvcc) if nvcc else None
    return gcc_max(kb, toolkit)[0] if toolkit else None


def gcc_vs_nvcc(cxx: str, major: int, nvcc: MajorMinor | None, limit: int) -> tuple[Verdict, str]:
    """(verdict, detail) for host compiler `cxx` of GCC `major` under nvcc's newest accepted GCC `limit`."""
    if major > limit:
        return "fail", f"{cxx} is GCC {major}; nvcc {nvcc} accepts GCC <= {limit}"
    return "ok", f"{cxx} is GCC {major} (nvcc {nvcc} accepts <= {limit})"


def cxx_specs(kb: KnowledgeBase, platform: str, limit: int | None) -> list[str]:
    """conda-forge's C++ compiler packages for `platform` (the KB's toolchain.cxx: gxx and gxx_<platform>), each
    below GCC `limit` + 1 where the limit is known: 'gxx<16', 'gxx_linux-aarch64<16'."""
    below = f"<{limit + 1}" if limit is not None else ""
    return [name.replace("{platform}", platform) + below for name in kb.cxx_packages[0]]


def compiler_line(text: str) -> str:
    """The compiler's own error line from a failed build log (fatal error / nvcc fatal / error:)."""
    for line in text.splitlines():
        if "fatal error" in line or "nvcc fatal" in line or re.search(r"\berror\b:", line):
            return line.strip()
    for line in text.splitlines():
        if re.match(r"^\w+(Error|Exception): ", line.strip()):
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else ""
