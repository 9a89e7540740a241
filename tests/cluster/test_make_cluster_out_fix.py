"""Issue 21 item 6: when `make --cluster` cannot write its output directory, the command it suggests has one
--out (it had the user's and its own), naming a directory for the whole cluster (make --cluster writes
DIR/<platform>); the chmod it suggests names a directory that exists. Each suggestion is run."""

from __future__ import annotations

import errno
import os
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.lock.writers import fileset

MIXED = Path(__file__).parent.parent / "data" / "cluster" / "mixed.yaml"
SUGGESTED = re.compile(r"e\.g\.: (envsolver make .*)$")


def _run(args: list[str], home: Path) -> Result:
    env = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None, "HOME": str(home)}
    return CliRunner(env=env).invoke(main, args, catch_exceptions=False)


def _suggestion(result: Result) -> list[str]:
    found = SUGGESTED.search(result.stderr.strip())
    assert found is not None, result.stderr
    words = shlex.split(found.group(1))
    assert words.count("--out") == 1, result.stderr
    return words[1:]


def _check_the_suggestion_runs(result: Result, tmp_path: Path) -> None:
    args = _suggestion(result)
    out = Path(args[args.index("--out") + 1])
    assert out == tmp_path / "home" / "envs" / "blocked", result.stderr
    again = _run(args, tmp_path / "home")
    assert again.exit_code == 0, (args, again.output)
    assert sorted(p.name for p in out.iterdir()) == ["linux-64", "linux-aarch64"], again.output


def test_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file")
    out = tmp_path / "blocker" / "blocked"
    result = _run(["make", "--cluster", str(MIXED), "--offline", "--out", str(out)], tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert "is a file, not a directory" in result.stderr, result.stderr
    _check_the_suggestion_runs(result, tmp_path)


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES where the output directory would be made (root is never refused, so the refusal is injected at
    os.mkdir for that one directory)."""
    out = tmp_path / "locked" / "blocked"
    real = os.mkdir

    def refusing(path: object, *args: object, **kwargs: object) -> None:
        if Path(str(path)).is_relative_to(out):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    (tmp_path / "locked").mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(os, "mkdir", refusing)
        result = _run(["make", "--cluster", str(MIXED), "--offline", "--out", str(out)], tmp_path / "home")
    assert result.exit_code == 2, result.output
    assert "permission denied" in result.stderr, result.stderr
    assert f"chmod u+w {tmp_path / 'locked'})" in result.stderr, result.stderr
    _check_the_suggestion_runs(result, tmp_path)


def test_a_plain_make_keeps_its_one_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    fix = fileset._out_fix("Lead", Path("/readonly/blocked"), "envsolver make --gpu a100")
    assert fix == f"Lead, e.g.: envsolver make --gpu a100 --out {tmp_path / 'home' / 'envs' / 'blocked'}"


def test_the_chmod_names_the_nearest_directory_that_exists(tmp_path: Path) -> None:
    out = tmp_path / "not" / "yet" / "linux-64"
    error = fileset._cannot_write(out, PermissionError(errno.EACCES, "Permission denied"), "envsolver make")
    assert f"(chmod u+w {tmp_path})" in str(error), str(error)
