from __future__ import annotations

import pytest

from envsolver.errors import UnknownGpuError
from envsolver.kb import KnowledgeBase
from envsolver.kb.gpus import closest, lookup


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("a100", "a100"),
        ("A100", "a100"),
        ("a100-80gb", "a100"),
        ("A100 80GB", "a100"),
        ("a100_80gb", "a100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("GeForce RTX 4090", "rtx4090"),
        ("RTX 4090", "rtx4090"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10G", "a10g"),
        ("gh200", "gh200"),
        ("rtx-pro-6000", "rtx-pro-6000-blackwell"),
    ],
)
def test_lookup_ignores_case_spaces_dashes(kb: KnowledgeBase, name: str, key: str) -> None:
    assert lookup(kb, name).key == key


def test_unknown_name_lists_three_closest(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError) as info:
        lookup(kb, "a1000")
    assert info.value.closest == ["a100", "a6000", "a5000"]
    assert info.value.exit_code == 2
    assert str(info.value).endswith("pass one of its names or aliases to --gpu.")


def test_closest_always_gives_three(kb: KnowledgeBase) -> None:
    assert len(closest(kb, "zzzz")) == 3
