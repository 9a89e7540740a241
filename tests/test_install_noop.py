"""A no-op `envsolver install` decided from what the last install recorded (install/installstate.py), before the
installer, the lock reader, conda-lock or rattler are imported; and every change that must take the full path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver import __version__
from envsolver.cli.main import main
from envsolver.install import installstate
from tests.conda_packages import build_channel
from tests.test_install import write_lock
from tests.test_startup import modules_at_exit

# What a real install needs and a no-op must not import.
HEAVY = ("envsolver.install.run", "envsolver.lock.lockfile", "conda_lock", "pydantic", "rattler", "envsolver.hook",
         "envsolver.verify", "envsolver.cluster", "envsolver.net.http", "envsolver.lock.solve",
         "envsolver.lock.worker_call")  # fmt: skip


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["ENVSOLVER_CACHE_DIR"] = str(cwd / "cache")
    return subprocess.run(
        [sys.executable, "-m", "envsolver", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def _install(root: Path, lock: Path) -> tuple[Path, Path]:
    """Install LOCK into ROOT/env with the install command, in this process (the setup of a test about what that
    install recorded; the tests of what a process does run `envsolver` in one, `_run` or modules_at_exit)."""
    prefix = root / "env"
    words = ["install", str(lock), "-p", str(prefix), "--no-hook"]
    done = CliRunner().invoke(main, words, env={"ENVSOLVER_CACHE_DIR": str(root / "cache")})
    assert done.exit_code == 0 and "installed (3 packages" in done.stdout, f"{done.output}{done.exception!r}"
    assert (prefix / installstate.STATE).is_file(), "install recorded nothing for the next run"
    return lock, prefix


@pytest.fixture(scope="module")
def tiny_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One channel of three packages per module."""
    return build_channel(tmp_path_factory.mktemp("channel"))


@pytest.fixture(scope="module")
def channel_lock(tiny_channel: Path) -> Path:
    """A lock of tiny_channel's three packages (it names the channel by its file URL); each install starts from a
    copy of it, which a test may edit."""
    return write_lock(tiny_channel, tiny_channel.parent)


@pytest.fixture
def installed(tmp_path: Path, channel_lock: Path) -> tuple[Path, Path]:
    """A prefix of its own, for a test that changes the prefix or the lock."""
    return _install(tmp_path, _copy(channel_lock, tmp_path))


@pytest.fixture(scope="module")
def _shared_install(tmp_path_factory: pytest.TempPathFactory, channel_lock: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("shared-install")
    return _install(root, _copy(channel_lock, root))


def _copy(lock: Path, root: Path) -> Path:
    copy = root / lock.name
    copy.write_bytes(lock.read_bytes())
    return copy


@pytest.fixture
def installed_once(_shared_install: tuple[Path, Path]) -> Iterator[tuple[Path, Path]]:
    """One install shared by the module's tests that leave the lock and the prefix as they found them; the record
    is put back after each (a test may overwrite it), and every test first proves it still answers."""
    lock, prefix = _shared_install
    state = prefix / installstate.STATE
    kept = state.read_bytes()
    assert installstate.unchanged(prefix, installstate.request(lock, None, (), __version__)) is not None, (
        "the shared install's record no longer answers: a test before this one changed the prefix or the lock"
    )
    yield lock, prefix
    state.write_bytes(kept)


def _loaded(hook_modules: set[str]) -> list[str]:
    return sorted(m for m in hook_modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_a_noop_install_imports_nothing_a_real_install_needs(installed_once: tuple[Path, Path], tmp_path: Path) -> None:
    lock, prefix = installed_once
    loaded = modules_at_exit(tmp_path, "install", str(lock), "-p", str(prefix), "--no-hook")
    assert _loaded(loaded) == [], "a no-op install imported what only a real one needs"


def test_the_shortcut_says_what_the_full_path_says(installed_once: tuple[Path, Path], tmp_path: Path) -> None:
    """Text and JSON of the recorded no-op equal those of the full decision (the record removed first; the full
    path on a prefix that holds the lock changes nothing but the record)."""
    lock, prefix = installed_once
    before = installstate.prefix_digest(prefix)
    outputs = []
    for _ in range(2):
        text = _run("install", str(lock), "-p", str(prefix), "--no-hook", cwd=tmp_path)
        doc = _run("install", str(lock), "-p", str(prefix), "--no-hook", "--json", cwd=tmp_path)
        assert text.returncode == 0 and doc.returncode == 0, text.stderr + doc.stderr
        outputs.append((text.stdout, json.loads(doc.stdout)))
        (prefix / installstate.STATE).unlink()  # the second round takes the full path (and records again)
    assert outputs[0] == outputs[1]
    assert "already up to date (3 packages for linux-64, 0 fetched and verified)" in outputs[0][0]
    assert outputs[0][1]["changed"] is False and outputs[0][1]["fetched"] == 0
    assert installstate.prefix_digest(prefix) == before, "the full path changed a prefix that held the lock"


def _edit_lock(lock: Path, prefix: Path) -> None:
    lock.write_text(lock.read_text() + "\n# a comment: other bytes, the same packages\n")


def _remove_a_package_record(lock: Path, prefix: Path) -> None:
    record = next((prefix / "conda-meta").glob("tiny-data-*.json"))
    record.unlink()


def _touch_a_package_record(lock: Path, prefix: Path) -> None:
    record = next((prefix / "conda-meta").glob("tiny-lib-*.json"))
    os.utime(record, ns=(1, 1))


def _pip_installed_something(lock: Path, prefix: Path) -> None:
    site = prefix / "lib" / "python3.12" / "site-packages" / "extra-1.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Name: extra\nVersion: 1.0\n")


@pytest.mark.parametrize(
    "change", [_edit_lock, _remove_a_package_record, _touch_a_package_record, _pip_installed_something]
)
def test_any_change_takes_the_full_path(
    installed: tuple[Path, Path], tmp_path: Path, change: Callable[[Path, Path], None]
) -> None:
    lock, prefix = installed
    change(lock, prefix)
    asked = installstate.request(lock, None, (), __version__)
    assert installstate.unchanged(prefix, asked) is None, "the record still answered after the change"
    loaded = modules_at_exit(tmp_path, "install", str(lock), "-p", str(prefix), "--no-hook")
    assert "envsolver.install.run" in loaded, "the full path was not taken"
    done = _run("install", str(lock), "-p", str(prefix), "--no-hook", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(list((prefix / "conda-meta").glob("tiny-*.json"))) == 3, "the full path did not restore the prefix"
    assert installstate.unchanged(prefix, installstate.request(lock, None, (), __version__))


@pytest.mark.parametrize("options", [("--platform", "linux-64"), ("--mirror", "https://a.example=https://b.example")])
def test_other_options_are_another_request(installed_once: tuple[Path, Path], options: tuple[str, str]) -> None:
    lock, prefix = installed_once
    version = __version__
    assert installstate.unchanged(prefix, installstate.request(lock, None, (), version)) is not None
    platform = options[1] if options[0] == "--platform" else None
    mirrors = (options[1],) if options[0] == "--mirror" else ()
    assert installstate.unchanged(prefix, installstate.request(lock, platform, mirrors, version)) is None


def test_a_dry_run_and_a_copied_prefix_never_take_the_shortcut(
    installed_once: tuple[Path, Path], tmp_path: Path
) -> None:
    lock, prefix = installed_once
    # in this process: that a dry run is left to click by the no-op before click (cli/fast.py) is
    # test_fast_install's test_other_command_lines_are_left_to_click[--dry-run]
    words = ["install", str(lock), "-p", str(prefix), "--dry-run", "--json"]
    dry = CliRunner().invoke(main, words, env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")})
    assert dry.exit_code == 0 and json.loads(dry.stdout)["dry_run"] is True, f"{dry.output}{dry.exception!r}"
    copy = tmp_path / "copy"
    shutil.copytree(prefix, copy)  # the same records (copy2 keeps mtimes), but not this prefix's
    version = __version__
    assert installstate.unchanged(copy, installstate.request(lock, None, (), version)) is None


@pytest.mark.parametrize(
    "record", ["", "{", "[]", '{"format": 1}', '{"format": 1, "request": "x", "prefix": null, "pip": 3}', "\0" * 10]
)
def test_a_broken_record_is_no_answer(installed_once: tuple[Path, Path], record: str) -> None:
    lock, prefix = installed_once
    (prefix / installstate.STATE).write_text(record)
    version = __version__
    assert installstate.unchanged(prefix, installstate.request(lock, None, (), version)) is None
