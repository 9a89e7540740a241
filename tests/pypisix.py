"""A lock whose PyPI part is six 1.17.0, from PyPI's real files (its wheel and its sdist: the same release from two
files, as issue 32's false record needed), installed by `envsolver install` into an environment's python (the
`python` conda package tests/envpython.py makes from this interpreter). The files come from PyPI once per machine,
kept by their sha256; without network the tests that need them skip, saying so. The commands run as a user runs them:
the `envsolver` console script in a child process, from a working directory the test chooses."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.solve import ChannelSource, index_channel, solve
from envsolver.lock.writers import condalock
from tests import httplab
from tests.envpython import python_package

PYPI = "https://files.pythonhosted.org"
# https://pypi.org/simple/six/ (the two files of six 1.17.0, each with the sha256 PyPI gives it)
WHEEL = PipRecord(
    "six", "1.17.0", "six-1.17.0-py2.py3-none-any.whl",
    f"{PYPI}/packages/b7/ce/149a00dd41f10bc29e5921b496af8b574d8413afcd5e30dfa0ed46c2cc5e/"
    "six-1.17.0-py2.py3-none-any.whl",
    "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274",
)  # fmt: skip
SDIST = PipRecord(
    "six", "1.17.0", "six-1.17.0.tar.gz",
    f"{PYPI}/packages/94/e7/b2c673351809dca68a0e064b6af791aa332cf192da575fd474ed7d6f16a2/six-1.17.0.tar.gz",
    "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81",
)  # fmt: skip
ARCH_LIST = "9.0+PTX"
ENVSOLVER = Path(sys.executable).parent / "envsolver"  # the console script, as a user runs it


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetched(record: PipRecord) -> Path:
    """PyPI's file, downloaded once per machine and kept by its sha256; the test skips when PyPI cannot be reached."""
    cache = Path(os.environ.get("ENVSOLVER_TEST_CACHE") or Path.home() / ".cache" / "envsolver-tests") / "pypi"
    path = cache / f"{record.sha256}-{record.filename}"
    if path.is_file() and _sha256(path) == record.sha256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    try:
        with urllib.request.urlopen(record.url, timeout=60) as response, part.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        part.unlink(missing_ok=True)
        pytest.skip(f"PyPI's {record.filename} could not be downloaded ({exc}); these tests need it once")
    assert _sha256(part) == record.sha256, f"PyPI served {record.filename} with another sha256"
    part.replace(path)
    return path


@pytest.fixture(scope="session")
def six_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httplab.Lab]:
    """A local server holding both files under the paths files.pythonhosted.org gives them."""
    root = tmp_path_factory.mktemp("six-mirror")
    for record in (WHEEL, SDIST):
        target = root / record.url.removeprefix(PYPI + "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fetched(record), target)
    with httplab.serve(root) as lab:
        yield lab


@pytest.fixture(scope="session")
def python_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    channel = tmp_path_factory.mktemp("six-python-channel") / "channel"
    python_package(channel)
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    return channel


def write_lock(channel: Path, out: Path, record: PipRecord) -> Path:
    """conda-lock.yml of the python package and RECORD as its PyPI part, with an arch list (the hook runs)."""
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(["python"], [source], "linux-64", {"__unix": "0"}, out / "solve-cache")
    out.mkdir(parents=True, exist_ok=True)
    lock = out / "conda-lock.yml"
    custom = {"envsolver_torch_cuda_arch_list": ARCH_LIST}
    lock.write_text(
        condalock.render(
            {"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, custom, "test", "test",
            {"linux-64": (record,)},
        )
    )  # fmt: skip
    return lock


def environ(root: Path) -> dict[str, str]:
    """What the commands run with: this machine's PATH, a home, envsolver's cache and envs directory under ROOT."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "ENVSOLVER_CACHE_DIR": str(root / "cache"),
        "CONDA_ENVS_DIRS": str(root / "envs"),
    }


def envsolver(
    args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """The console script with ARGS, from CWD."""
    return subprocess.run(
        [str(ENVSOLVER), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def mirror_flag(lab: httplab.Lab) -> list[str]:
    return ["--mirror", f"{PYPI}={lab.url}"]
