"""The PyPI part of a lock, end to end: PyPI's real deepspeed sdist, locked by its real URL and sha256, installed
by `envsolver install` into the environment's own python (from a local mirror of files.pythonhosted.org, through
--mirror), proven by hash, a second run changing nothing; then conda-lock's own reading of the same lock, the
printed `envsolver hook -n NAME`, and verify.

The environment's python is a conda package built here from this interpreter (a venv-style copy: bin/python3.X
and pyvenv.cfg), whose site-packages sees this test run's packages (pip, setuptools, torch) through a .pth file:
pip installs into the environment's own site-packages, as it would in a conda environment. The sdist comes from
PyPI once per machine (cached by its sha256); without network the tests that need it skip, saying so.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import EnvsolverError
from envsolver.install import pypi as pypi_install
from envsolver.lock import howto, lockfile
from envsolver.lock.pypi import pins
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.solve import ChannelSource, index_channel, solve
from envsolver.lock.writers import condalock, explicit, pipreqs
from envsolver.net import pypi_index as index
from tests import httplab
from tests.envpython import python_package
from tests.pypisix import fetched

VERSION = "0.19.8"
PYPI = "https://files.pythonhosted.org"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
ARCH_LIST = "9.0+PTX"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def release() -> PipRecord:
    """deepspeed 0.19.8 as the bundled snapshot of PyPI's page gives it, with its requirements from the KB."""
    _, files = pins.bundled("deepspeed")
    found = index.release_file(files, VERSION)
    assert found is not None, "the bundled PyPI snapshot has no deepspeed 0.19.8 sdist"
    return PipRecord(found.name, found.version, found.filename, found.url, found.sha256, (("einops", "*"),))


@pytest.fixture(scope="session")
def sdist(release: PipRecord) -> Path:
    """PyPI's real file, downloaded once per machine and kept by its sha256 (tests/pypisix.fetched)."""
    return fetched(release)


@pytest.fixture(scope="session")
def mirror(sdist: Path, release: PipRecord, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httplab.Lab]:
    """A local server holding the sdist under the same path as files.pythonhosted.org."""
    root = tmp_path_factory.mktemp("mirror")
    target = root / release.url.removeprefix(PYPI + "/")
    target.parent.mkdir(parents=True)
    shutil.copyfile(sdist, target)
    with httplab.serve(root) as lab:
        yield lab


@pytest.fixture(scope="session")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-channel")
    channel = root / "channel"
    python_package(channel)
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    return channel


def write_locks(channel: Path, out: Path, release: PipRecord) -> tuple[Path, Path]:
    """conda-lock.yml and the explicit lock (with its .pip.txt) of the python package and the sdist."""
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(["python"], [source], "linux-64", {"__unix": "0"}, out / "solve-cache")
    custom = {"envsolver_torch_cuda_arch_list": ARCH_LIST}
    out.mkdir(parents=True, exist_ok=True)
    lock = out / "conda-lock.yml"
    pip = {"linux-64": (release,)}
    hashes = {"linux-64": "0" * 64}
    lock.write_text(condalock.render({"linux-64": records}, [channel.as_uri()], hashes, custom, "test", "test", pip))
    plain = out / explicit.file_name("linux-64")
    plain.write_text(explicit.render(records, "linux-64", "test", "test", (release,)))
    (out / explicit.pip_file_name("linux-64")).write_text(pipreqs.render((release,), "linux-64", "test", "test"))
    return lock, plain


def run_cli(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(main, args, env=env)
    return result.exit_code, result.stdout, result.stderr


def test_the_lock_holds_the_pypi_file_as_conda_lock_writes_and_reads_it(
    channel: Path, release: PipRecord, tmp_path: Path
) -> None:
    """conda-lock's parser reads the entry, and its explicit render gives the `# pip NAME @ URL#sha256=` line
    that `conda-lock install` hands to `pip install --no-deps -r`: PyPI's URL and sha256."""
    from conda_lock.conda_lock import render_lockfile_for_platform
    from conda_lock.lockfile import parse_conda_lock_file

    lock, plain = write_locks(channel, tmp_path, release)
    parsed = parse_conda_lock_file(lock)
    (entry,) = [p for p in parsed.package if p.manager == "pip"]
    assert (entry.name, entry.version, entry.url, entry.hash.sha256) == (
        "deepspeed", VERSION, release.url, release.sha256
    )  # fmt: skip
    rendered = render_lockfile_for_platform(
        lockfile=parsed, include_dev_dependencies=False, extras=None, kind="explicit", platform="linux-64",
        suppress_warning_for_pip_and_explicit=True,
    )  # fmt: skip
    pip_lines = [line for line in rendered if line.startswith("# pip ")]
    assert pip_lines == [f"# pip deepspeed @ {release.url}#sha256={release.sha256}"], rendered
    assert explicit.pip_line(release) == pip_lines[0]  # envsolver's explicit lock carries the same line
    read_back = lockfile.read(plain, None).pip
    assert [(r.name, r.version, r.url, r.sha256) for r in read_back] == [
        (release.name, release.version, release.url, release.sha256)
    ]
    requirements = (tmp_path / "conda-linux-64.pip.txt").read_text().splitlines()
    assert requirements[-1] == f"deepspeed=={VERSION} --hash=sha256:{release.sha256}"


@pytest.fixture(scope="module")
def installed(
    channel: Path, release: PipRecord, mirror: httplab.Lab, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, dict[str, object], dict[str, str], list[str]]:
    """One `envsolver install` (with its hook) into ENVS/train: (lock, prefix, its JSON, env, its argv). pip builds
    the sdist in the env (about a minute: DeepSpeed's setup.py imports torch), so the tests share it."""
    root = tmp_path_factory.mktemp("installed")
    lock, _ = write_locks(channel, root / "locks", release)
    prefix = root / "envs" / "train"
    env = {
        "ENVSOLVER_CACHE_DIR": str(root / "cache"),
        "CONDA_ENVS_DIRS": str(root / "envs"),
        "HOME": str(root),
        "DS_BUILD_OPS": "1",  # the pip step must override it: the hook builds the ops
        "PIP_INDEX_URL": "http://127.0.0.1:9",  # and ignore pip's settings: nothing comes from an index
    }
    args = ["install", str(lock), "-n", "train", "--json", "--mirror", f"{PYPI}={mirror.url}"]
    code, out, err = run_cli(args, env)
    # The hook's pre-flight fails here (no nvcc, a CPU torch): exit 1 after installing, activation written.
    assert code == 1, f"install: exit {code}: {out}\n{err}"
    return lock, prefix, json.loads(out), env, args


def test_install_installs_the_pypi_part_by_hash_then_a_second_run_changes_nothing(
    installed: tuple[Path, Path, dict[str, object], dict[str, str], list[str]],
    release: PipRecord,
    mirror: httplab.Lab,
) -> None:
    lock, prefix, doc, env, args = installed
    assert doc["pip"] == {"installed": [f"deepspeed {VERSION}"], "kept": [], "removed": []}, doc
    assert pypi_install.installed_version(prefix, "deepspeed") == VERSION
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    assert (site / f"deepspeed-{VERSION}.dist-info" / "METADATA").read_text().count(f"Version: {VERSION}") == 1
    assert (site / f"deepspeed-{VERSION}.dist-info" / "INSTALLER").read_text().strip() == "pip"
    # DS_BUILD_OPS=1 in the user's environment was overridden: no op was compiled into the wheel.
    assert not list(site.glob("deepspeed/ops/**/*.so")), "an op was built during the pip step"
    assert pypi_install.recorded(prefix)["deepspeed"]["sha256"] == release.sha256
    assert [p for p, _ in mirror.requests if p.endswith(release.filename)], "the sdist was not fetched from the mirror"
    assert (prefix / "etc" / "conda" / "activate.d" / "envsolver.sh").is_file(), "the hook wrote no activation"

    before = len(mirror.requests)
    code, out, err = run_cli([*args, "--no-hook"], env)
    assert code == 0, f"second install failed: {out}\n{err}"
    again = json.loads(out)
    assert (again["changed"], again["fetched"], again["pip"]) == (
        False, 0, {"installed": [], "kept": [f"deepspeed {VERSION}"], "removed": []}
    ), again  # fmt: skip
    assert len(mirror.requests) == before, "the second run fetched something"

    code, out, err = run_cli(["install", str(lock), "-p", str(prefix), "--dry-run", "--json"], env)
    assert code == 0, err
    rows = {p["name"]: p for p in json.loads(out)["packages"]}
    assert (rows["deepspeed"]["manager"], rows["deepspeed"]["state"]) == ("pip", "installed"), rows


def test_verify_after_install_checks_the_pypi_part_against_the_lock(
    installed: tuple[Path, Path, dict[str, object], dict[str, str], list[str]],
) -> None:
    lock, prefix, _, env, _ = installed
    code, out, err = run_cli(["verify", "-p", str(prefix), "--lock", str(lock), "--check", "lock_drift", "--json"], env)
    check = json.loads(out)["checks"][0]
    assert (code, check["status"]) == (0, "pass"), f"{out}\n{err}"
    assert check["detail"] == "the 2 packages match the lock, 1 of them from PyPI", check


def test_a_pypi_file_that_is_not_the_locked_one_is_refused_before_pip_runs(
    channel: Path, release: PipRecord, mirror: httplab.Lab, tmp_path: Path
) -> None:
    forged = PipRecord(release.name, release.version, release.filename, release.url, "1" * 64, ())
    lock, _ = write_locks(channel, tmp_path / "locks", forged)
    prefix = tmp_path / "env"
    env = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    code, out, err = run_cli(
        ["install", str(lock), "-p", str(prefix), "--no-hook", "--json", "--mirror", f"{PYPI}={mirror.url}"], env
    )
    assert code == 2, f"expected exit 2: {out}\n{err}"
    error = json.loads(out)["error"]
    assert error["kind"] == "integrity" and "does not match the lock: sha256" in error["message"], error
    assert pypi_install.installed_version(prefix, "deepspeed") is None
    assert not list((tmp_path / "cache" / "pypi").glob("*")), "a file that failed its hash was cached"


def test_the_printed_conda_lock_path_ends_with_the_hook(
    installed: tuple[Path, Path, dict[str, object], dict[str, str], list[str]],
) -> None:
    """`conda-lock install -n NAME LOCK && envsolver hook -n NAME`: conda-lock is not run here (no conda); the
    environment it would create is the one installed under the envs directory, its activation removed, and the
    printed hook command, word for word, finds it by name and writes it again."""
    lock, prefix, _, env, _ = installed
    activate = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
    activate.unlink()
    _, conda_lock_way = howto.conda_lock_steps(str(lock), "train")
    hook = conda_lock_way.split(" && ", 1)[1].split()
    assert hook == ["envsolver", "hook", "-n", "train"]
    code, out, err = run_cli([*hook[1:], "--no-build", "--lock", str(lock), "--json"], env)
    doc = json.loads(out)
    assert doc["torch_cuda_arch_list"] == ARCH_LIST, f"{out}\n{err}"
    failed = {c["id"] for c in doc["checks"] if c["status"] == "fail"}
    assert code == (1 if failed else 0), f"{out}\n{err}"  # the pre-flight fails here: no nvcc, a CPU torch
    shown = subprocess.run(
        ["bash", "-c", f". {activate}; echo $TORCH_CUDA_ARCH_LIST $DS_ACCELERATOR"],
        env={"PATH": "/usr/bin:/bin", "CONDA_PREFIX": str(prefix)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.stdout.split() == [ARCH_LIST, "cuda"], shown.stderr


def test_a_lock_that_lists_a_pypi_file_twice_is_refused(channel: Path, release: PipRecord, tmp_path: Path) -> None:
    _, plain = write_locks(channel, tmp_path, release)
    plain.write_text(plain.read_text() + explicit.pip_line(release) + "\n")
    with pytest.raises(EnvsolverError) as info:
        lockfile.read(plain, None)
    assert "lists the PyPI package 'deepspeed' twice" in str(info.value), str(info.value)
