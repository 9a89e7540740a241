"""verify's modes exclude each other: --cluster with --nccl, and the NCCL options without --nccl, exit 2 with
the fix (before anything runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nccl", "--cluster", "cluster.yaml"], "--nccl and --cluster exclude each other"),
        (["--cluster", "cluster.yaml", "--gpus", "2"], "--gpus applies to the NCCL check only"),
        (["--cluster", "cluster.yaml", "--backend", "gloo"], "--backend applies to the NCCL check only"),
    ],
)
def test_modes_exclude_each_other(args: list[str], expected: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", "-p", str(tmp_path), *args, "--json"])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "bad_input"
