"""scripts/install_system_deps.sh: idempotent, and exits 0 with a message wherever it cannot install."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.slurmlab import missing_binaries

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "install_system_deps.sh"
TOOLS = ("bash", "env", "id", "echo")  # what the script needs besides the Slurm binaries and apt-get


def run(
    path: str, *prefix: str, script: Path = SCRIPT, cwd: Path | None = None, lmod: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The script with PATH=`path` (and LMOD_PKG=`lmod`: where it looks for Lmod's init/bash)."""
    return subprocess.run(
        [*prefix, shutil.which("bash") or "bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path, **({"LMOD_PKG": lmod} if lmod else {})},
        check=False,
        cwd=cwd,
    )


def bare_path(tmp_path: Path, *extra: str) -> str:
    """A PATH holding only the basic tools (and `extra`): sinfo (slurm-client) is missing there. (The script
    also looks in /usr/sbin and /sbin, where the daemons live.)"""
    for tool in (*TOOLS, *extra):
        found = shutil.which(tool)
        if found:
            (tmp_path / tool).symlink_to(found)
    return str(tmp_path)


@pytest.mark.skipif(bool(missing_binaries()), reason="Slurm is not installed here")
def test_nothing_to_do_when_everything_is_installed() -> None:
    done = run(os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    assert "already installed" in done.stdout


def test_without_apt_get_it_says_what_to_install(tmp_path: Path) -> None:
    done = run(bare_path(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "no apt-get" in done.stdout and "slurm-client" in done.stdout


def test_lmod_is_named_when_its_init_is_missing(tmp_path: Path) -> None:
    """Lmod has no command on PATH: the script looks for LMOD_PKG/init/bash (Debian's /usr/share/lmod/lmod)."""
    bin_dir, lmod = tmp_path / "bin", tmp_path / "lmod"
    bin_dir.mkdir()
    (lmod / "init").mkdir(parents=True)
    path = bare_path(bin_dir)
    missing = run(path, lmod=str(lmod))
    assert missing.returncode == 0, missing.stderr
    assert "no apt-get" in missing.stdout and " lmod " in missing.stdout, missing.stdout
    (lmod / "init" / "bash").write_text("# Lmod's init\n")
    found = run(path, lmod=str(lmod))
    assert found.returncode == 0, found.stderr
    assert " lmod " not in found.stdout, found.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_without_root_it_says_so() -> None:
    """As uid 65534, which may not enter the checkout (a clone under a 0700 directory): the script and the tools
    it needs are copied to a directory it can read, and it runs there."""
    with tempfile.TemporaryDirectory(prefix="deps-") as tmp:  # in /tmp: pytest's own is closed to other users
        bin_dir = Path(tmp)
        bin_dir.chmod(0o755)
        script = bin_dir / SCRIPT.name
        shutil.copyfile(SCRIPT, script)
        script.chmod(0o644)
        path = bare_path(bin_dir, "apt-get")
        setpriv = shutil.which("setpriv") or "setpriv"
        done = run(path, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", script=script, cwd=bin_dir)
    assert done.returncode == 0, done.stderr
    assert "needs root" in done.stdout and "sudo" in done.stdout
