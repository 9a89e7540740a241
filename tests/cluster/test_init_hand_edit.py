"""Issue 21 item 6: `cluster init` over a cluster file edited by hand refuses before it asks Slurm anything (it
probed every partition first, 31 s on a busy cluster, and then refused); the fix it names (--force) works."""

from __future__ import annotations

import time
from pathlib import Path

from click.testing import CliRunner

from envsolver.cli.main import main
from tests.slurmlab import SlurmLab


def _edited(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text("format: 1\ncluster: mine\npartitions:\n  - {name: a100, gpus: [a100], platform: linux-64}\n")
    return path


def test_a_hand_edited_file_is_refused_before_slurm_is_asked(tmp_path: Path) -> None:
    """SLURM_CONF names no file: had init asked Slurm first, that would be the error."""
    path = _edited(tmp_path)
    before = path.read_text()
    started = time.monotonic()
    result = CliRunner(env={"SLURM_CONF": str(tmp_path / "missing.conf")}).invoke(
        main, ["cluster", "init", "--out", str(path)]
    )
    took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert "was edited by hand" in result.stderr and "--force" in result.stderr, result.stderr
    assert "SLURM_CONF" not in result.stderr and "asking Slurm" not in result.stderr, result.stderr
    assert path.read_text() == before
    assert took < 5, f"took {took:.1f} s"


def test_the_fix_force_works(lab: SlurmLab, tmp_path: Path) -> None:
    path = _edited(tmp_path)
    result = CliRunner().invoke(main, ["cluster", "init", "--out", str(path), "--force"])
    assert result.exit_code == 0, result.output
    assert "cluster: lab" in path.read_text(), path.read_text()
