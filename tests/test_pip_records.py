"""Issue 32's false record: with six 1.17.0 installed from its sdist (lock A), `envsolver install` of lock B (the
wheel of the same release) ran pip, which said "already satisfied" and installed nothing, and envsolver recorded B's
sha256 in PREFIX/etc/envsolver/pip-part.json over A's files; verify's lock_drift passed. Now B's files are installed
(pip is told --force-reinstall whenever envsolver finds a file not in place) and proven before B's sha256 is
recorded (install/pipfiles), and lock_drift fails whenever the installed files are not the recorded ones. PyPI's real
files (tests/pypisix.py); the commands run as the console script."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

from envsolver.install import pipfiles
from envsolver.install import pypi as pypi_install
from tests import httplab
from tests.pypisix import SDIST, WHEEL, environ, envsolver, fetched, mirror_flag, python_channel, six_mirror, write_lock

__all__ = ["python_channel", "six_mirror"]  # the fixtures, used by name


def _install(lock: Path, prefix: Path, env: dict[str, str], lab: httplab.Lab, cwd: Path) -> dict[str, object]:
    done = envsolver(["install", str(lock), "-p", str(prefix), "--no-hook", "--json", *mirror_flag(lab)], env, cwd)
    assert done.returncode == 0, f"install: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def _drift(lock: Path, prefix: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    done = envsolver(["verify", "-p", str(prefix), "--lock", str(lock), "--check", "lock_drift", "--json"], env, cwd)
    check: dict[str, str] = json.loads(done.stdout)["checks"][0]
    assert (done.returncode == 0) == (check["status"] in ("pass", "warn")), f"{done.stdout}\n{done.stderr}"
    return check


def _wheels_own(prefix: Path) -> None:
    """The dist-info pip left is the wheel's: its WHEEL and METADATA are the wheel's bytes, and so is six.py."""
    info = pipfiles.find(prefix, "six", "1.17.0")
    assert info is not None, "six 1.17.0 is not installed"
    with zipfile.ZipFile(fetched(WHEEL)) as wheel:
        for member in ("six-1.17.0.dist-info/WHEEL", "six-1.17.0.dist-info/METADATA", "six.py"):
            installed = info.parent / member
            assert installed.read_bytes() == wheel.read(member), f"{member} is not the wheel's"


def test_lock_b_over_the_same_version_from_sdist_a_installs_bs_files_and_records_bs_sha256(
    python_channel: Path, six_mirror: httplab.Lab, tmp_path: Path
) -> None:
    env, work = environ(tmp_path), tmp_path
    prefix = tmp_path / "env"
    lock_a = write_lock(python_channel, tmp_path / "a", SDIST)
    lock_b = write_lock(python_channel, tmp_path / "b", WHEEL)

    first = _install(lock_a, prefix, env, six_mirror, work)
    assert first["pip"] == {"installed": ["six 1.17.0"], "kept": [], "removed": []}, first
    assert pypi_install.recorded(prefix)["six"]["sha256"] == SDIST.sha256
    info = pipfiles.find(prefix, "six", "1.17.0")
    assert info is not None
    with zipfile.ZipFile(fetched(WHEEL)) as wheel:
        assert (info / "WHEEL").read_bytes() != wheel.read("six-1.17.0.dist-info/WHEEL"), "A's build is B's wheel"
    assert _drift(lock_a, prefix, env, work)["status"] == "pass"
    # lock B's sha256 is not recorded: lock_drift fails before B is installed
    check = _drift(lock_b, prefix, env, work)
    assert check["status"] == "fail" and "six was installed from another file" in check["detail"], check

    second = _install(lock_b, prefix, env, six_mirror, work)
    assert second["pip"] == {"installed": ["six 1.17.0"], "kept": [], "removed": []}, second
    _wheels_own(prefix)
    kept = pypi_install.recorded(prefix)["six"]
    assert kept["sha256"] == WHEEL.sha256, kept
    assert kept["record"] == pipfiles.read(pipfiles.find(prefix, "six", "1.17.0") or prefix).record_sha256, kept
    assert _drift(lock_b, prefix, env, work) == {
        "id": "lock_drift", "status": "pass", "detail": "the 2 packages match the lock, 1 of them from PyPI",
        "fix": None,
    }  # fmt: skip
    again = _install(lock_b, prefix, env, six_mirror, work)
    assert again["pip"] == {"installed": [], "kept": ["six 1.17.0"], "removed": []}, again


def test_lock_drift_fails_when_the_installed_files_are_not_the_locks_and_its_fix_works(
    python_channel: Path, six_mirror: httplab.Lab, tmp_path: Path
) -> None:
    """After B is installed, A's files put over it by pip, or one of B's files changed by hand: lock_drift fails
    naming what differs, and the command its fix names (envsolver install, the fast no-op path included) installs B's
    files again."""
    env, work = environ(tmp_path), tmp_path
    prefix = tmp_path / "env"
    lock_b = write_lock(python_channel, tmp_path / "b", WHEEL)
    _install(lock_b, prefix, env, six_mirror, work)
    assert _drift(lock_b, prefix, env, work)["status"] == "pass"

    # A's files over B's, by the environment's own pip (a user's `pip install --force-reinstall six-1.17.0.tar.gz`)
    done = subprocess.run(
        [str(prefix / "bin" / "python"), "-I", "-m", "pip", "install", "--no-deps", "--force-reinstall",
         "--no-index", "--no-build-isolation", "--disable-pip-version-check", str(fetched(SDIST))],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert pypi_install.recorded(prefix)["six"]["sha256"] == WHEEL.sha256  # the record still names B
    check = _drift(lock_b, prefix, env, work)
    assert check["status"] == "fail", check
    assert "six-1.17.0.dist-info/RECORD is not the one envsolver installed from the lock's file" in check["detail"]
    assert check["fix"].startswith(f"envsolver install conda-lock.yml -p {prefix}"), check
    fixed = _install(lock_b, prefix, env, six_mirror, work)
    assert fixed["pip"]["installed"] == ["six 1.17.0"], fixed  # type: ignore[index]
    _wheels_own(prefix)
    assert _drift(lock_b, prefix, env, work)["status"] == "pass"

    # one of B's files changed by hand: RECORD is B's, the file is not
    info = pipfiles.find(prefix, "six", "1.17.0")
    assert info is not None
    module = info.parent / "six.py"
    text = module.read_text()
    assert "Copyright" in text
    module.write_text(text.replace("Copyright", "Copyleft!", 1))  # the same size: only its sha256 tells
    check = _drift(lock_b, prefix, env, work)
    assert check["status"] == "fail" and f"{module} is not the file pip installed" in check["detail"], check
    fixed = _install(lock_b, prefix, env, six_mirror, work)
    assert fixed["pip"]["installed"] == ["six 1.17.0"], fixed  # type: ignore[index]
    _wheels_own(prefix)
    assert _drift(lock_b, prefix, env, work)["status"] == "pass"


def test_a_lost_record_leads_to_a_reinstall_never_a_guessed_record(
    python_channel: Path, six_mirror: httplab.Lab, tmp_path: Path
) -> None:
    env, work = environ(tmp_path), tmp_path
    prefix = tmp_path / "env"
    lock_b = write_lock(python_channel, tmp_path / "b", WHEEL)
    _install(lock_b, prefix, env, six_mirror, work)
    (prefix / pypi_install.RECORD).unlink()
    check = _drift(lock_b, prefix, env, work)
    assert check["status"] == "warn" and "is not in etc/envsolver/pip-part.json" in check["detail"], check
    again = _install(lock_b, prefix, env, six_mirror, work)
    assert again["pip"] == {"installed": ["six 1.17.0"], "kept": [], "removed": []}, again
    assert pypi_install.recorded(prefix)["six"]["sha256"] == WHEEL.sha256
    _wheels_own(prefix)
    assert _drift(lock_b, prefix, env, work)["status"] == "pass"
