"""Every file envsolver reads from a prefix or a path a user names is opened without waiting and read only when it is
a regular file (envsolver/core/boundedread.py, or its copy in the files that run in the environment's own python:
verify's probe, the hook's op runner and site module). A FIFO in its place is refused or skipped at once: before,
a FIFO at PREFIX/etc/envsolver/pip-part.json or at a .dist-info/METADATA hung `install` (a plain open() waits for
a writer that never comes). Each case runs under a 1 s alarm, so a read that would wait fails the test instead."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from envsolver.cluster import modulefile
from envsolver.core import boundedread
from envsolver.core.errors import BadInputError
from envsolver.hook import ds_ops_site, ops, register
from envsolver.install import envsdir, pkgcache, prefixmeta
from envsolver.install import pypi as pypi_install
from envsolver.install import run as install_run
from envsolver.verify import nccl_run, probe
from tests.fuzz.harness import Hang, hard_limit
from tests.test_install_noop import (  # noqa: F401  (the fixtures)
    _install,
    channel_lock,
    installed,
    tiny_channel,
)

SITE = Path("lib") / "python3.12" / "site-packages"


@contextmanager
def _within_a_second() -> Iterator[None]:
    started = time.monotonic()
    try:
        with hard_limit(1.0):
            yield
    except Hang:
        pytest.fail("the read waited on the FIFO")
    assert time.monotonic() - started < 1.0


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _op_runner() -> Any:
    path = Path(ds_ops_site.__file__).parent / "op_runner.py"
    spec = importlib.util.spec_from_file_location("envsolver_op_runner_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (where the FIFO goes under the prefix, what reads it, what that read gives)
CASES: dict[str, tuple[Path, Callable[[Path, Path], object], object]] = {
    "conda-meta record": (
        Path("conda-meta") / "x-1-0.json",
        lambda prefix, fifo: install_run.records(prefix),
        {},
    ),
    "METADATA": (
        SITE / "x-1.0.dist-info" / "METADATA",
        lambda prefix, fifo: pypi_install.installed_version(prefix, "x"),
        "1.0",  # the directory's name says it
    ),
    "lock metadata": (prefixmeta.METADATA, lambda prefix, fifo: prefixmeta.load(prefix), None),
    "environments.txt": (
        Path(".conda") / "environments.txt",
        lambda prefix, fifo: envsdir.candidates("x", {"HOME": str(prefix)})[-1].name,
        "x",
    ),
    "cached archive": (
        Path("cache") / "x.conda",
        lambda prefix, fifo: _raises(lambda: pkgcache._copy_hashed(fifo, prefix / "copy", "sha256")),
        "Refused",
    ),
    "probe: conda-meta record": (
        Path("conda-meta") / "y-1-0.json",
        lambda prefix, fifo: [probe.read_regular(str(fifo), 100)],
        [None],
    ),
    "nccl report": (Path("nccl") / "report.json", lambda prefix, fifo: nccl_run._read_bounded(fifo, 100), None),
    "hook state": (ops.state_path(Path(".")), lambda prefix, fifo: ops.load_state(prefix), None),
    "ds_ops module": (
        SITE / f"{register.MODULE}.py",
        lambda prefix, fifo: register.in_place(prefix / SITE),
        False,
    ),
    "ds_ops site: version.txt": (
        SITE / "deepspeed" / "version.txt",
        lambda prefix, fifo: ds_ops_site.read_regular(str(fifo), 100),
        None,
    ),
    "op runner: version file": (
        SITE / "torch" / "version.py",
        lambda prefix, fifo: _op_runner()._text(str(fifo)),
        None,
    ),
}


def _raises(call: Callable[[], object]) -> str:
    try:
        call()
    except (OSError, boundedread.Refused) as exc:
        return type(exc).__name__
    return "nothing raised"


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_fifo_in_the_prefix_is_refused_at_once(tmp_path: Path, case: str) -> None:
    where, read, expected = CASES[case]
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    fifo = _fifo(prefix / where)
    with _within_a_second():
        found = read(prefix, fifo)
    assert found == expected, f"{case}: {found!r}"


def test_a_fifo_as_the_pip_part_record_is_refused_with_the_fix(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "env" / pypi_install.RECORD)
    with _within_a_second(), pytest.raises(BadInputError) as caught:
        pypi_install.recorded(tmp_path / "env")
    message = str(caught.value)
    assert "is a FIFO, not the record envsolver writes" in message and f"rm -r {fifo}" in message, message


def test_a_fifo_as_the_activation_script_is_refused_with_the_fix(tmp_path: Path) -> None:
    _fifo(tmp_path / "env" / modulefile.ACTIVATE)
    with _within_a_second(), pytest.raises(BadInputError) as caught:
        modulefile.read_activation(tmp_path / "env", ["x86_64-linux"])
    assert "is a FIFO, not the script envsolver hook writes" in str(caught.value), str(caught.value)


def test_install_over_a_prefix_whose_pip_record_is_a_fifo_ends_in_a_second_and_its_fix_works(
    installed: tuple[Path, Path],  # noqa: F811
) -> None:
    """The whole command: exit 2 with the refusal within a second of starting to read the prefix (the process's
    start, the lock's read and the prefix's turn are most of the time measured), then the fix it names works."""
    lock, prefix = installed
    record = prefix / pypi_install.RECORD
    record.unlink(missing_ok=True)
    _fifo(record)
    env = {**os.environ, "ENVSOLVER_CACHE_DIR": str(prefix.parent / "cache")}
    argv = [sys.executable, "-m", "envsolver", "install", str(lock), "-p", str(prefix), "--no-hook"]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    took = time.monotonic() - started
    assert done.returncode == 2 and "is a FIFO" in done.stderr and took < 15, f"{took:.1f} s: {done.stderr}"
    subprocess.run(["rm", "-r", str(record)], check=True)
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
