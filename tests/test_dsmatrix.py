"""The DeepSpeed matrix's own judgements (tests/dsmatrix.py), offline: each one fails on the wrong facts, so a green
matrix (tests/test_ds_matrix.py, bench/ds_matrix.py) means what it says."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests import dsmatrix

RIGHT_0198: dict[str, Any] = {
    "version": "0.19.8",
    "distribution": "0.19.8",
    "accelerator": "cpu",
    "compatible_ops_from": "deepspeed.ops.__compatible_ops__",
    "installed_ops": {"cpu_adam": False, "fused_adam": False},
    "compatible_ops": {"cpu_adam": True, "fused_adam": True},
    "requires_missing": [],
    "fused_adam_built": False,
}


def test_the_right_facts_pass() -> None:
    assert dsmatrix.expect_probe("0.19.8", RIGHT_0198) == []
    older = {**RIGHT_0198, "version": "0.18.9", "distribution": "0.18.9"}
    assert dsmatrix.expect_probe("0.18.9", {**older, "compatible_ops_from": "deepspeed.git_version_info"}) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"error": "ImportError: cannot import name 'compatible_ops'"}, "error: ImportError"),
        ({"compatible_ops": None, "compatible_ops_error": "AttributeError: x"}, "compatible_ops_error"),
        ({"compatible_ops_from": "deepspeed.git_version_info"}, "compatible_ops_from"),
        ({"accelerator": "cuda"}, "accelerator"),
        ({"version": "0.19.7"}, "version"),
        ({"installed_ops": {"cpu_adam": True}}, "expected every op False"),
        ({"requires_missing": ["hjson"]}, "requires_missing"),
        ({"fused_adam_built": True}, "fused_adam_built"),
    ],
)
def test_each_wrong_fact_is_a_problem(change: dict[str, Any], problem: str) -> None:
    found = dsmatrix.expect_probe("0.19.8", {**RIGHT_0198, **change})
    assert any(problem in p for p in found), found


def test_wheel_requires_reads_requires_dist_without_extras(tmp_path: Path) -> None:
    wheel = tmp_path / "deepspeed-0.19.8-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            "deepspeed-0.19.8.dist-info/METADATA",
            "Name: deepspeed\nRequires-Dist: einops\nRequires-Dist: torch>=2.0.0\n"
            'Requires-Dist: xgboost; extra == "all"\nRequires-Dist: nvidia-ml-py\n',
        )
    assert dsmatrix.wheel_requires(wheel) == ["einops", "torch>=2.0.0", "nvidia-ml-py"]


def test_a_release_with_a_problem_is_not_ok_and_the_table_says_why() -> None:
    result = dsmatrix.Result("0.19.8")
    for column in dsmatrix.COLUMNS:
        result.note(column, "seen", [])
    assert result.ok
    result.note("probe", "seen", ["error: ImportError: cannot import name 'compatible_ops'\nmore | text"])
    assert not result.ok
    row = dsmatrix.table([result]).splitlines()[-1]
    assert "**FAIL** error: ImportError: cannot import name 'compatible_ops' more / text" in row
    missing = dsmatrix.Result("0.19.8")
    missing.note("sdist", "seen", [])
    assert not missing.ok  # a column that did not run is not a pass
