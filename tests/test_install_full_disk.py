"""A full disk while rattler links (install/linking.py): the real command on a small tmpfs. A prefix it creates is
removed again, one it adds to is left byte for byte as it was, and one whose old packages rattler had already
unlinked holds whole packages only, each with its record, with the message naming what is not linked; after a
SIGKILL mid-link the next install undoes first. The same command, once there is space, completes each time.

Needs root and mount(8) for the tmpfs; without them the tests skip, saying so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsolver.install import linking
from envsolver.install.installstate import LINKING
from tests.conda_packages import build_package, explicit_lock

SMALL_MB = 12  # the tmpfs: room for about half of BIG's packages
COUNT = 24  # packages, as in the audit's lock


def _can_mount() -> str | None:
    """Why a tmpfs cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs (run as root, as the development machine does)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "needs mount(8) and umount(8)"
    return None


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of SMALL_MB MiB at tmp_path/disk, unmounted after the test."""
    why = _can_mount()
    if why is not None:
        pytest.skip(why)
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_MB}m", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (mount said: {done.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _grow(disk: Path) -> None:
    """Room for everything: the fix a full disk's message names (free space), done here by growing the tmpfs."""
    subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True, capture_output=True)


def _lock(tmp_path: Path, name: str, version: str, big: bool, count: int = COUNT, stem: str = "pkg") -> Path:
    """An explicit lock of COUNT packages STEMNN-VERSION, each of about 0.9 MB of random bytes when BIG (1 kB else),
    built as real .conda archives in a channel of their own."""
    channel = tmp_path / f"channel-{name}"
    size = 900_000 if big else 1_000
    archives = [
        build_package(
            channel, f"{stem}{i:02d}", version,
            {f"share/{stem}{i:02d}/data.bin": os.urandom(size), f"lib/{stem}{i:02d}.txt": f"{i} {version}\n"},
            fmt="conda",
        )
        for i in range(count)
    ]  # fmt: skip
    (tmp_path / name).mkdir()
    return explicit_lock(tmp_path / name / "conda-linux-64.lock", archives)


def _install(lock: Path, prefix: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}  # off the tmpfs: rattler copies onto it
    argv = [sys.executable, "-m", "envsolver", "install", str(lock), "-p", str(prefix), "--no-hook"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


def _tree(prefix: Path) -> dict[str, bytes | str]:
    """Every file (its bytes), link (its target) and directory ("dir") under PREFIX."""
    if not prefix.exists():
        return {}
    out: dict[str, bytes | str] = {}
    for path in sorted(prefix.rglob("*")):
        key = str(path.relative_to(prefix))
        out[key] = os.readlink(path) if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes()
    return out


def _unclaimed(prefix: Path) -> list[str]:
    """Files under PREFIX that no conda-meta record claims (conda-meta's own files aside)."""
    claimed: set[str] = set()
    for record in (prefix / "conda-meta").glob("*.json"):
        claimed.update(json.loads(record.read_text())["files"])
    return sorted(
        str(p.relative_to(prefix))
        for p in prefix.rglob("*")
        if not p.is_dir() and p.parts[len(prefix.parts)] != "conda-meta" and str(p.relative_to(prefix)) not in claimed
    )


def test_a_full_disk_removes_the_prefix_it_was_creating(disk: Path, tmp_path: Path) -> None:
    lock, prefix = _lock(tmp_path, "big", "1.0", big=True), disk / "env"
    done = _install(lock, prefix, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "No space left on device" in done.stderr, done.stderr
    assert "nothing of it is left (the prefix did not exist before, and was removed again)" in done.stderr, done.stderr
    assert f"Free space on the file system that holds it (df -h {disk})" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not prefix.exists() and list(disk.iterdir()) == [], sorted(disk.rglob("*"))
    _grow(disk)
    again = _install(lock, prefix, tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(list((prefix / "conda-meta").glob("pkg*.json"))) == COUNT, again.stderr


def test_a_full_disk_leaves_a_prefix_it_was_adding_to_as_it_was(disk: Path, tmp_path: Path) -> None:
    """The prefix holds four small packages; a lock of those and COUNT large ones fills the disk."""
    small = _lock(tmp_path, "small", "0.1", big=False, count=4, stem="lib")
    big = _lock(tmp_path, "big", "1.0", big=True)
    both = explicit_lock(tmp_path / "both.lock", [*_archives(small), *_archives(big)])
    prefix = disk / "env"
    first = _install(small, prefix, tmp_path)
    assert first.returncode == 0, first.stderr
    before = _tree(prefix)
    done = _install(both, prefix, tmp_path)
    assert done.returncode == 2 and "No space left on device" in done.stderr, done.stderr
    assert "; the prefix is as it was; the " in done.stderr and " files this run had written (" in done.stderr, (
        done.stderr
    )
    assert _tree(prefix) == before, "the prefix differs from what it held before the failed install"
    _grow(disk)
    again = _install(both, prefix, tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(list((prefix / "conda-meta").glob("*.json"))) == 4 + COUNT, again.stderr


def _archives(lock: Path) -> list[Path]:
    lines = [line for line in lock.read_text().splitlines() if line.startswith("file:")]
    return [Path(line.split("#")[0].removeprefix("file://")) for line in lines]


def test_a_full_disk_after_rattler_unlinked_leaves_whole_packages_and_names_the_rest(
    disk: Path, tmp_path: Path
) -> None:
    """Version 1.0 of every package is small; 2.0 is large: rattler unlinks the old versions it replaces, which
    cannot be brought back, so the prefix keeps whole packages only and the message names those not linked."""
    old, new = _lock(tmp_path, "old", "1.0", big=False), _lock(tmp_path, "new", "2.0", big=True)
    prefix = disk / "env"
    assert _install(old, prefix, tmp_path).returncode == 0
    unclaimed = _unclaimed(prefix)  # CACHEDIR.TAG, etc/envsolver's records: the first install's, kept
    done = _install(new, prefix, tmp_path)
    assert done.returncode == 2 and "No space left on device" in done.stderr, done.stderr
    assert "so the prefix cannot be put back: it holds whole packages only, each with its record" in done.stderr, (
        done.stderr
    )
    linked = sorted(p.stem for p in (prefix / "conda-meta").glob("pkg*-2.0-*.json"))
    missing = [f"pkg{i:02d}-2.0-h0_0" for i in range(COUNT) if f"pkg{i:02d}-2.0-h0_0" not in linked]
    assert linked and missing, (linked, done.stderr)
    assert f"not linked: {', '.join(missing[: 2 * linking.SHOWN])}" in done.stderr, done.stderr
    assert _unclaimed(prefix) == unclaimed, "half-linked files were left"
    assert not (prefix / LINKING).exists(), done.stderr
    _grow(disk)
    again = _install(new, prefix, tmp_path)
    assert again.returncode == 0, again.stderr
    assert len(list((prefix / "conda-meta").glob("pkg*-2.0-*.json"))) == COUNT, again.stderr
    assert _unclaimed(prefix) == unclaimed


def test_after_a_sigkill_mid_link_the_next_install_undoes_it_first(tmp_path: Path) -> None:
    """A link killed after writing a partial file of a package it was linking (no record yet): the journal stays,
    and the next install (nothing else to do) removes the partial file and says so."""
    lock, prefix = _lock(tmp_path, "small", "0.1", big=False, count=3), tmp_path / "env"
    assert _install(lock, prefix, tmp_path).returncode == 0
    before = _tree(prefix)

    def half_link() -> None:
        (prefix / "share" / "half").mkdir(parents=True)
        (prefix / "share" / "half" / "data.bin").write_bytes(b"partial")
        os.kill(os.getpid(), signal.SIGKILL)

    pid = os.fork()
    if pid == 0:
        try:
            linking.link(prefix, half_link, ())
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and (prefix / LINKING).exists()
    done = _install(lock, prefix, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"an earlier install into {prefix} stopped while linking; the 1 files it had written were removed" in (
        done.stderr
    ), done.stderr
    after = _tree(prefix)
    assert {k: v for k, v in after.items() if not k.startswith("etc/envsolver")} == {
        k: v for k, v in before.items() if not k.startswith("etc/envsolver")
    }, "the prefix differs from what it held before the killed link"


def test_a_journal_envsolver_did_not_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    lock, prefix = _lock(tmp_path, "small", "0.1", big=False, count=1), tmp_path / "env"
    assert _install(lock, prefix, tmp_path).returncode == 0
    (prefix / LINKING).write_text(json.dumps({"format": 1, "existed": True, "records": {}, "unclaimed": ["../x"],
                                              "dirs": []}))  # fmt: skip
    done = _install(lock, prefix, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is not a journal envsolver wrote ('../x' is not a path inside the prefix)" in done.stderr, done.stderr
    assert f"(rm {prefix / LINKING})" in done.stderr, done.stderr
    (prefix / LINKING).unlink()
    assert _install(lock, prefix, tmp_path).returncode == 0
