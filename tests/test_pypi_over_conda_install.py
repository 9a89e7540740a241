"""Torch is never replaced, with real components: the environment's own pip puts PyPI's copy over a conda package,
verify fails naming it, the hook refuses to build against it, and the fix verify prints is run.

- PyPI's real torch 2.13.0+cpu wheel (`pip download torch==2.13.0 --no-deps`: this machine keeps it on disk) goes
  into a real venv (with pip) whose conda-meta says pytorch 2.12.0 came from conda (conda-forge's real record of
  pytorch-2.12.0-cuda129_mkl_py311_h49b8cc7_300, from data-apis/array-api-extra pixi.lock in shared/realdata; the
  archive itself, 1 GB of CUDA build, is not at hand). The fix's pip part is run; its conda part needs conda.
- `envsolver install` undoes it: a conda package (built here, as tests/conda_packages builds the install tests' own,
  with a dist-info and RECORD as conda-build leaves them) linked from a local channel, replaced by pip with a wheel pip
  built; `envsolver install` of the same lock, the fix verify names, removes PyPI's copy and links conda's again.
"""

from __future__ import annotations

import json
import platform
import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from envsolver.install import shadowing
from envsolver.lock.lockfile import LockEntry
from envsolver.lock.solve import ChannelSource, index_channel, solve
from envsolver.lock.writers import condalock
from tests.conda_packages import build_package
from tests.test_pip_part import PY, python_package, run_cli

PYTORCH = {  # conda-forge's record (shared/realdata data-apis__array-api-extra/pixi.lock)
    "name": "pytorch",
    "version": "2.12.0",
    "build": "cuda129_mkl_py311_h49b8cc7_300",
    "build_number": 300,
    "subdir": "linux-64",
    "url": "https://prefix.dev/conda-forge/linux-64/pytorch-2.12.0-cuda129_mkl_py311_h49b8cc7_300.conda",
    "sha256": "868a2a4d5b78bc38fc1712ffc6fc4ff8e8b65dd9df7b3e5964188e570ec378da",
    "md5": "f551a3f17fb15c14e7106f9da6faf713",
}


def pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The environment's own pip, as a user runs it (no index: everything it installs is a file given here)."""
    argv = [str(python), "-m", "pip", "--isolated", "--disable-pip-version-check", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)


def verify(prefix: Path, *more: str) -> tuple[int, dict[str, object], str]:
    code, out, err = run_cli(["verify", "-p", str(prefix), "--check", "pip_conda_mix", "--json", *more], {})
    doc = json.loads(out)
    (found,) = doc["checks"]
    return code, found, f"{out}\n{err}"


@pytest.fixture(scope="module")
def torch_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("wheels")
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "torch==2.13.0", "--no-deps", "-d", str(where)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    wheels = list(where.glob("torch-2.13.0*.whl"))
    if got.returncode != 0 or not wheels:
        pytest.skip(f"PyPI's torch 2.13.0 wheel is not at hand for this python (pip download: {got.stderr[-300:]})")
    return wheels[0]


def test_pip_installing_pypis_torch_fails_verify_naming_it(torch_wheel: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(prefix)
    (prefix / "conda-meta").mkdir()
    record = {**PYTORCH, "channel": "https://conda.anaconda.org/conda-forge", "files": []}
    (prefix / "conda-meta" / "pytorch-2.12.0-cuda129_mkl_py311_h49b8cc7_300.json").write_text(json.dumps(record))
    python = prefix / "bin" / "python"
    done = pip(python, "install", "--no-deps", "--no-index", str(torch_wheel))
    assert done.returncode == 0, done.stderr

    code, found, said = verify(prefix)
    assert (code, found["status"]) == (1, "fail"), said
    assert found["detail"] == (
        "torch 2.13.0+cpu from PyPI (installed by pip, asked for by name) over conda's pytorch 2.12.0 "
        "cuda129_mkl_py311_h49b8cc7_300"
    ), said
    fix = str(found["fix"])
    remove, conda = fix.split(", then ")
    assert remove == f"{shlex.quote(str(python))} -m pip uninstall -y torch", fix
    assert conda == f"conda install -p {prefix} --force-reinstall pytorch=2.12.0=cuda129_mkl_py311_h49b8cc7_300"

    # The hook stops before building ops, with verify's finding.
    code, out, err = run_cli(["hook", "-p", str(prefix), "--arch-list", "9.0", "--no-build", "--json"], {})
    hooked = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 1 and hooked["pip_conda_mix"] == found, f"{out}\n{err}"

    # The fix's first half, as printed: PyPI's torch leaves; conda's record stays, and nothing shadows it.
    removed = subprocess.run(shlex.split(remove), capture_output=True, text=True, check=False, timeout=600)
    assert removed.returncode == 0, removed.stderr
    code, found, said = verify(prefix)
    assert (code, found["status"]) == (0, "pass"), said


# `envsolver install` undoes it: a conda package with a Python distribution, and pip's copy of a newer release.

SITE = f"lib/python{PY}/site-packages"


def tinydist(channel: Path) -> Path:
    """A conda package that installs the distribution tinydist 1.0 (its dist-info with INSTALLER `conda` and a
    RECORD, as conda-build leaves them), whose module says it came from conda."""
    info = f"{SITE}/tinydist-1.0.dist-info"
    record = "tinydist/__init__.py,,\n" + "".join(
        f"tinydist-1.0.dist-info/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")
    )
    files = {
        f"{SITE}/tinydist/__init__.py": "FROM = 'conda'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydist\nVersion: 1.0\n",
        f"{info}/INSTALLER": "conda\n",
        f"{info}/RECORD": record,
    }
    return build_package(channel, "tinydist", "1.0", files, depends=("python",))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the lock of python and tinydist from a local channel, PyPI's-style wheel of tinydist 2.0 that pip built)."""
    root = tmp_path_factory.mktemp("shadow")
    channel = root / "channel"
    python_package(channel)
    tinydist(channel)
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(["python", "tinydist"], [source], "linux-64", {"__unix": "0"}, root / "solve-cache")
    lock = root / "conda-lock.yml"
    custom = {"envsolver_torch_cuda_arch_list": "9.0+PTX", "envsolver_version": "test"}
    lock.write_text(condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, custom,
                                     "test", "test", {"linux-64": ()}))  # fmt: skip
    project = root / "tinydist-src"
    (project / "tinydist").mkdir(parents=True)
    (project / "tinydist" / "__init__.py").write_text("FROM = 'pypi'\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinydist"\nversion = "2.0"\n'
    )
    built = pip(Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "-w", str(root), str(project))
    assert built.returncode == 0, built.stderr
    (wheel,) = root.glob("tinydist-2.0-*.whl")
    return lock, wheel


def _install(lock: Path, prefix: Path, *more: str) -> dict[str, object]:
    env = {"ENVSOLVER_CACHE_DIR": str(prefix.parent / "cache")}
    code, out, err = run_cli(["install", str(lock), "-p", str(prefix), "--no-hook", "--json", *more], env)
    assert code == 0, f"install: exit {code}: {out}\n{err}"
    doc: dict[str, object] = json.loads(out)
    return doc


def _imported(prefix: Path) -> str:
    code = "import tinydist, importlib.metadata as m; print(tinydist.FROM, m.version('tinydist'))"
    done = subprocess.run([str(prefix / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("how", "infos"),
    [  # pip uninstalls conda's by the RECORD conda-build keeps; with --ignore-installed it writes beside it
        pytest.param(("install", "--no-deps", "--no-index"), ["tinydist-2.0.dist-info"], id="pip-replaces-condas"),
        pytest.param(
            ("install", "--no-deps", "--no-index", "--ignore-installed"),
            ["tinydist-1.0.dist-info", "tinydist-2.0.dist-info"],
            id="pip-beside-condas",
        ),
    ],
)
def test_envsolver_install_removes_pypis_copy_and_links_condas_again(
    lab: tuple[Path, Path], tmp_path: Path, how: tuple[str, ...], infos: list[str]
) -> None:
    lock, wheel = lab
    prefix = tmp_path / "env"
    _install(lock, prefix)
    assert _imported(prefix) == "conda 1.0"
    done = pip(prefix / "bin" / "python", *how, str(wheel))
    assert done.returncode == 0, done.stderr
    site = prefix / SITE
    assert sorted(p.name for p in site.glob("tinydist-*.dist-info")) == infos
    assert _imported(prefix).startswith("pypi ")

    code, found, said = verify(prefix)
    assert (code, found["status"]) == (1, "fail"), said
    assert str(found["detail"]).startswith("tinydist 2.0 from PyPI (installed by pip, asked for by name) over "), said
    assert found["fix"] == (
        f"envsolver install conda-lock.yml -p {prefix} (the lock it was installed from: it removes PyPI's tinydist "
        "with the environment's pip and links tinydist again)"
    ), said

    env = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    code, out, err = run_cli(["install", str(lock), "-p", str(prefix), "--dry-run", "--json"], env)
    rows = {(p["name"], p["state"]) for p in json.loads(out)["packages"]}
    assert ("tinydist", "remove") in rows and ("tinydist", "cached") in rows, f"{out}\n{err}"

    doc = _install(lock, prefix)  # the fix, as verify names it
    assert doc["pip"] == {"installed": [], "kept": [], "removed": ["tinydist 2.0"]}, doc
    assert _imported(prefix) == "conda 1.0"
    assert sorted(p.name for p in site.glob("tinydist*")) == ["tinydist", "tinydist-1.0.dist-info"]
    code, found, said = verify(prefix)
    assert (code, found["status"]) == (0, "pass"), said
    again = _install(lock, prefix)
    assert (again["changed"], again["pip"]) == (False, {"installed": [], "kept": [], "removed": []}), again


def test_envsolver_install_links_a_conda_package_pip_uninstalled_again(lab: tuple[Path, Path], tmp_path: Path) -> None:
    """`pip uninstall tinydist` removes conda's files (by the RECORD conda-build keeps): install links it again."""
    lock, _ = lab
    prefix = tmp_path / "env"
    _install(lock, prefix)
    done = pip(prefix / "bin" / "python", "uninstall", "-y", "tinydist")
    assert done.returncode == 0 and not (prefix / SITE / "tinydist").exists(), done.stderr
    doc = _install(lock, prefix)
    assert doc["changed"] is True and _imported(prefix) == "conda 1.0", doc


# conda-forge's cuda-nvtx record (NVIDIA/numba-cuda pixi.lock, shared/realdata pixi.torch280-cu129.lock)
CUDA_NVTX = LockEntry(
    "cuda-nvtx", "12.9.79", "hecca717_1", "linux-64", "linux-64",
    "https://conda.anaconda.org/conda-forge/linux-64/cuda-nvtx-12.9.79-hecca717_1.conda",
    "b4a3411fa031c409f98cfbd4b2db9ad7", "b16600e48ef3247366b83d5f195852fcefbc4d52bb245f82a632c7129d1d6283",
)  # fmt: skip


def test_a_cuda_wheel_beside_condas_library_is_found_and_removed(tmp_path: Path) -> None:
    """PyPI's real nvidia-nvtx-cu12 wheel (what PyPI's torch 2.8.0 requires) beside the lock's conda cuda-nvtx: the
    survey install makes finds it (nothing of conda's to link again: the wheel's files are its own), and the removal
    takes it out with the environment's pip. PyPI's wheel is fetched once; without network this test skips."""
    got = pip(Path(sys.executable), "download", "--no-deps", "-d", str(tmp_path), "nvidia-nvtx-cu12==12.8.90")
    wheels = list(tmp_path.glob("nvidia_nvtx_cu12-12.8.90-*.whl"))
    if got.returncode != 0 or not wheels:
        pytest.skip(f"PyPI's nvidia-nvtx-cu12 12.8.90 wheel could not be downloaded: {got.stderr[-300:]}")
    prefix = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(prefix)
    done = pip(prefix / "bin" / "python", "install", "--no-deps", "--no-index", str(wheels[0]))
    assert done.returncode == 0, done.stderr
    # what conda-meta would hold: the environment's python, and cuda-nvtx (its files are libraries, no dist-info)
    python = {"name": "python", "version": platform.python_version(), "build": "h0_0"}
    nvtx = {
        "name": "cuda-nvtx",
        "version": CUDA_NVTX.version,
        "build": CUDA_NVTX.build,
        "files": ["lib/libnvToolsExt.so.1"],
    }
    records = {"python": python, "cuda-nvtx": nvtx}
    found = shadowing.survey(prefix, [CUDA_NVTX], records)
    assert [(s.dist.name, s.dist.version, s.package.name, s.own) for s in found.shadows] == [
        ("nvidia-nvtx-cu12", "12.8.90", "cuda-nvtx", False)
    ], found
    assert found.relink == frozenset()
    removed = shadowing.remove(prefix, found.shadows, records, {"PATH": "/usr/bin:/bin"}, lambda _: None)
    assert removed == ("nvidia-nvtx-cu12 12.8.90",)
    assert shadowing.survey(prefix, [CUDA_NVTX], records).shadows == ()
