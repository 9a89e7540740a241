"""envkind: what a directory is (conda environment, pip venv, other), and install's refusal of a directory that
holds something and is no conda environment: the dry run and the real install refuse alike (exit 2, why and a
new prefix), change nothing, and the fix they suggest installs when run."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.install import envkind
from envsolver.install import run as installer
from tests.httplab import channel_with_big, write_lock


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _venv(path: Path) -> Path:
    """A real venv (python -m venv, without pip: it needs no network and takes a moment)."""
    done = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return path


def _install(lock: Path, prefix: Path, cache: Path, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(prefix), "--no-hook", *more], env={"ENVSOLVER_CACHE_DIR": str(cache)}
    )
    return result.exit_code, result.output


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return write_lock(channel_with_big(tmp_path / "channel-root"), tmp_path)


def test_the_kind_of_a_directory(lock: Path, tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv")
    conda = tmp_path / "conda"
    installer.install(lock, conda, None, {}, tmp_path / "cache", lambda _: None, {})
    (tmp_path / "plain").mkdir()
    found = {p.name: envkind.of_path(p) for p in (venv, conda, tmp_path / "plain", tmp_path / "absent")}
    assert found == {"venv": "venv", "conda": "conda", "plain": "other", "absent": "other"}, found


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "install"])
@pytest.mark.parametrize("what", ["venv", "plain directory"])
def test_install_refuses_a_directory_that_is_no_conda_environment(
    lock: Path, tmp_path: Path, dry_run: bool, what: str
) -> None:
    if what == "venv":
        prefix = _venv(tmp_path / "v")
        expected = "is a Python virtual environment (pyvenv.cfg, no conda-meta/) and is not empty"
    else:
        prefix = tmp_path / "home"
        prefix.mkdir()
        (prefix / "notes.txt").write_text("mine\n")
        expected = "is not a conda environment (no conda-meta/) and is not empty"
    before = _tree(prefix)
    code, out = _install(lock, prefix, tmp_path / "cache", *(["--dry-run"] if dry_run else []))
    assert code == 2, f"expected exit 2 (refused), got {code}: {out}"
    assert f"{str(prefix)!r} {expected}" in out.replace("\n", " "), out
    assert "nothing was changed" in out and "Traceback" not in out, out
    assert _tree(prefix) == before, "the refused install changed the directory"
    assert not (prefix / "conda-meta").exists()


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "install"])
def test_the_refusals_fix_installs_into_a_new_prefix(lock: Path, tmp_path: Path, dry_run: bool) -> None:
    venv = _venv(tmp_path / "v")
    code, out = _install(lock, venv, tmp_path / "cache", *(["--dry-run"] if dry_run else []))
    assert code == 2, out
    fix = " ".join(out.split()).split("instead: ", 1)[1]
    argv = shlex.split(fix.replace("NEW_PREFIX", str(tmp_path / "new")))
    assert argv[:2] == ["envsolver", "install"] and argv[2] == str(lock), fix
    code, out = _install(Path(argv[2]), Path(argv[4]), tmp_path / "cache", *argv[5:])
    assert code == 0, f"the suggested fix {fix!r} failed: {out}"
    assert envkind.of_path(tmp_path / "new") == "conda"
    assert set(installer.installed(tmp_path / "new")) == {"tiny-app", "tiny-lib", "tiny-data"}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "install"])
def test_an_empty_directory_or_a_conda_environment_is_installed_into(lock: Path, tmp_path: Path, dry_run: bool) -> None:
    empty, conda = tmp_path / "empty", tmp_path / "conda"
    empty.mkdir()
    installer.install(lock, conda, None, {}, tmp_path / "cache", lambda _: None, {})
    for prefix in (empty, conda):
        code, out = _install(lock, prefix, tmp_path / "cache", *(["--dry-run"] if dry_run else []))
        assert code == 0, f"{prefix.name}: {out}"
