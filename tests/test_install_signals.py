"""SIGTERM and SIGHUP sent to a real `envsolver install` mid-download end it like Ctrl-C: one line on stderr,
exit 128 + the signal's number, the staging directory and its partial files removed, the install lock file
removed, no prefix. After SIGKILL (no cleanup possible) the next install removes what was left and completes.
The server is tests/httplab.py, sending slowly, so the signal arrives while archives are being fetched."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.httplab import Faults, Lab, channel_with_big, serve, write_lock
from tests.signals import default_dispositions

ENVSOLVER = Path(sys.executable).parent / "envsolver"
WAIT_S = 60.0  # for a loaded 2-core machine


@contextmanager
def _installing(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Lab]]:
    """`envsolver install` of four archives (one of 600 kB) from a server sending 100 kB/s, started and seen
    fetching (a partial file in its staging directory)."""
    big = channel_with_big(tmp_path, big_bytes=600_000)
    lock = write_lock(big, tmp_path, ("tiny-app", "tiny-big"))
    with serve(big, Faults(bytes_per_s=100_000)) as lab:
        argv = [str(ENVSOLVER), "install", str(lock), "-p", str(tmp_path / "env"), "--no-hook"]
        argv += ["--mirror", f"{big.as_uri()}={lab.url}"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_dispositions
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while not _partials(tmp_path / "cache") and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is not None or not _partials(tmp_path / "cache"):
                proc.kill()
                _, err = proc.communicate()
                pytest.fail(f"the install never started fetching (exit {proc.returncode}): {err}")
            yield proc, lab
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _partials(cache: Path) -> list[Path]:
    return list((cache / "staging").glob("*/.*.part")) if (cache / "staging").exists() else []


def _leftovers(cache: Path) -> list[str]:
    """Staging directories, partial files and lock files under the cache."""
    found = [str(p) for p in cache.rglob("*.part")] + [str(p) for p in (cache / "locks").glob("*")]
    staging = cache / "staging"
    return found + ([str(p) for p in staging.iterdir()] if staging.exists() else [])


@pytest.mark.parametrize(
    ("sig", "code", "name"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP")], ids=["TERM", "HUP"]
)
def test_a_signal_mid_download_ends_like_ctrl_c_and_leaves_nothing(
    tmp_path: Path, sig: signal.Signals, code: int, name: str
) -> None:
    with _installing(tmp_path) as (proc, _):
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == code, f"exit {proc.returncode}: {err}"
    assert err.strip().splitlines() == [f"error: terminated ({name}). Run the same command again."], err
    assert out == "", err
    assert _leftovers(tmp_path / "cache") == [], err
    assert not (tmp_path / "env").exists(), err


def test_after_sigkill_the_next_install_cleans_up_and_completes(tmp_path: Path) -> None:
    with _installing(tmp_path) as (proc, lab):
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == -signal.SIGKILL, err
        left = _leftovers(tmp_path / "cache")
        assert any("/staging/" in p for p in left), left  # nothing could clean up
        lab.faults.bytes_per_s = None
        argv = [str(ENVSOLVER), "install", str(next(tmp_path.glob("conda-lock.yml"))), "-p", str(tmp_path / "env")]
        argv += ["--no-hook", "--mirror", f"{(tmp_path / 'channel').as_uri()}={lab.url}"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=WAIT_S * 2)
    assert done.returncode == 0, done.stderr
    assert _leftovers(tmp_path / "cache") == [], done.stderr
    assert (tmp_path / "env" / "share" / "big.txt").exists(), done.stderr


def test_the_next_install_sweeps_the_partial_cache_copies_of_dead_installs(tmp_path: Path) -> None:
    """A SIGKILL inside pkgcache._keep leaves cache/verified/.NAME~HOST-pidPID-XXXX.part: the next install's
    staging_dir removes those of this host's dead processes, and keeps a live writer's and another host's (one
    whose name ends in this host's too)."""
    from envsolver.install import pkgcache

    verified = tmp_path / "verified"
    verified.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = pkgcache._owner()
    host = owner.rpartition("-pid")[0]
    mark = pkgcache.PART_MARK
    names = {
        "dead": f".a-1.0-h0_0.tar.bz2{mark}{host}-pid{dead.stdout.strip()}-x1y2.part",
        "live": f".b-1.0-h0_0.tar.bz2{mark}{owner}-q3r4.part",
        "other host": f".c-1.0-h0_0.tar.bz2{mark}elsewhere-pid{dead.stdout.strip()}-s5t6.part",
        "host with this name in it": f".d-1.0-h0_0.tar.bz2{mark}login.{host}-pid{dead.stdout.strip()}-u7v8.part",
    }
    for name in names.values():
        (verified / name).write_bytes(b"partial")
    pkgcache.staging_dir(tmp_path)
    kept = sorted(p.name for p in verified.iterdir())
    assert kept == sorted([names["live"], names["other host"], names["host with this name in it"]]), kept
