"""torch.yaml facts issue 24 corrected against primary sources: NCCL floors of torch 2.8.0 cu129 per build (real
records in shared/realdata, cited by sha256), and the 2.10.0 tegra build the feedstock defines but no record shows."""

from __future__ import annotations

from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase
from envsolver.kb.model import TorchBuild


def rows(kb: KnowledgeBase, version: str, platform: str, variant: str | None = None) -> list[TorchBuild]:
    return [
        r
        for r in kb.torch_builds
        if Version(version) in r.versions
        and r.platform == platform
        and r.cuda == MajorMinor(12, 9)
        and r.channel == "conda-forge"
        and (variant is None or r.arm_variant == variant)
    ]


def test_torch_2_8_0_nccl_floor_per_platform(kb: KnowledgeBase) -> None:
    """linux-aarch64's only record (build 201) depends nccl >=2.27.7.1; on linux-64 build 301 depends >=2.27.7.1
    and build 302 >=2.28.7.1, so the row (which serves both) holds 2.28 and names 301's floor."""
    (arm,) = rows(kb, "2.8.0", "linux-aarch64")
    (x86,) = rows(kb, "2.8.0", "linux-64")
    assert arm.nccl == "2.27", arm
    assert "LOCK-PT280-201" in arm.source, arm
    assert x86.nccl == "2.28", x86
    assert {"LOCK-PT28", "LOCK-PT280-301"} <= set(x86.source), x86
    assert "_301 needs >=2.27.7.1" in (x86.note or ""), x86
    assert "nccl >=2.27.7.1" in kb.sources["LOCK-PT280-201"] and "nccl >=2.27.7.1" in kb.sources["LOCK-PT280-301"]


def test_torch_2_10_0_tegra_is_recorded_as_unconfirmed(kb: KnowledgeBase) -> None:
    """The feedstock's v2.10.x @ b79ad3ff defines a tegra build (8.7;10.1+PTX) in a config whose name lacks
    'tegra'; no repodata record of it is at hand, so no row plans it and the source says so."""
    assert rows(kb, "2.10.0", "linux-aarch64", "tegra") == []
    text = kb.sources["CF-PT-TEGRA"]
    assert "none at 2.10.0" not in text, text
    assert "b79ad3ff33df7d00462218a94af2007947d0abb8" in text and "8.7;10.1+PTX" in text, text
    assert "unconfirmed" in text, text
