"""Issue 31's Done-when, end to end: a project's conda and PyPI packages locked with the GPU stack.

The project is what the bundled snapshot's real records let an a100 stack hold: conda jupyterlab, scipy, pandas,
huggingface_hub, safetensors and tokenizers beside torch 2.12.0 cu129 (conda-forge's transformers and datasets
cannot: every one of their records pulls a pyarrow built against an older libabseil than every torch the snapshot
locks; tests/test_clash.py shows the refusal), and PyPI's accelerate and peft (with the transformers peft needs).
Offline, everything comes from the bundled snapshots; the live tests read PyPI itself and skip without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.lock import lockfile
from envsolver.lock.pypi import pins
from envsolver.lock.solve import ChannelSource, index_channel, solve
from envsolver.lock.writers import condalock
from envsolver.net import pypi_index
from tests.envpython import PY, python_package

PROJECT = """\
# a training project's own packages
channels: [conda-forge]
dependencies:
  - jupyterlab
  - scipy
  - pandas
  - huggingface_hub
  - safetensors
  - tokenizers
  - pip:
    - accelerate
    - peft
"""
CONDA = ("jupyterlab", "scipy", "pandas", "huggingface_hub", "safetensors", "tokenizers")
PYPI = "https://pypi.org/simple"


def _invoke(args: list[str], **env: str) -> Result:
    return CliRunner().invoke(main, args, env=env)


def _make(tmp_path: Path, out: Path, *more: str, **env: str) -> Result:
    return _invoke(["make", "--gpu", "a100", "-f", str(tmp_path / "env.yml"), "-o", str(out), *more], **env)


def _packages(lock: Path) -> dict[tuple[str, str], dict[str, Any]]:
    from conda_lock.lockfile import parse_conda_lock_file

    return {(p.manager, p.name): p.model_dump() for p in parse_conda_lock_file(lock).package}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "env.yml"
    path.write_text(PROJECT)
    return path


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{PYPI}/accelerate/", timeout=10) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_offline_the_lock_holds_the_projects_conda_and_pypi_packages(project: Path, tmp_path: Path) -> None:
    before = hashlib.sha256(project.read_bytes()).hexdigest()
    out = tmp_path / "out"
    result = _make(tmp_path, out, "--offline")
    assert result.exit_code == 0, result.output
    packages = _packages(out / "conda-lock.yml")  # conda-lock's own parser reads it
    conda = {name for manager, name in packages if manager == "conda"}
    pip = {name: p for (manager, name), p in packages.items() if manager == "pip"}
    assert set(CONDA) <= conda and "pytorch" in conda, sorted(conda)
    assert {"accelerate", "peft"} <= set(pip), sorted(pip)
    assert not {n for n in pip if n in ("torch", "triton", "numpy") or n.startswith("nvidia-")}, sorted(pip)
    assert not set(pip) & {"huggingface-hub", "safetensors", "tokenizers", "pyyaml", "psutil"}, "conda holds them"
    for name, entry in pip.items():  # each file is PyPI's, with the sha256 PyPI's page gives it
        _, files = pins.bundled(name)
        (page,) = [f for f in files if f.url == entry["url"]]
        assert entry["hash"]["sha256"] == page.sha256, name
    accelerate = pip["accelerate"]["dependencies"]
    assert accelerate.get("torch") and accelerate.get("numpy"), (
        f"accelerate's requirements, held by conda: {accelerate}"
    )
    assert hashlib.sha256(project.read_bytes()).hexdigest() == before, "make wrote the project file"
    explained = _invoke(["explain", "--gpu", "a100", "-f", str(project), "--offline", "--json"])
    assert explained.exit_code == 0, explained.output
    plan, made = json.loads(explained.stdout), json.loads(_make(tmp_path, out, "--offline", "--json").stdout)
    for key in ("torch_version", "cuda_version", "python_version", "specs", "pip", "channels", "project"):
        assert plan[key] == made["plan"][key], key
    assert [f["name"] for f in plan["pypi"]["files"]] == sorted(pip), "explain names the PyPI part make locks"


@pytest.mark.network
def test_with_pypi_the_part_downloads_installs_by_hash_and_a_second_make_is_the_same(
    project: Path, tmp_path: Path
) -> None:
    if not _pypi_reachable():
        pytest.skip(f"{PYPI} cannot be reached: this test reads PyPI's real pages and files")
    live = {"ENVSOLVER_PYPI_INDEX": PYPI}
    out = tmp_path / "out"
    result = _make(tmp_path, out, **live)  # the conda part from the snapshot (no conda channel is reachable here)
    assert result.exit_code == 0, result.output
    first = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    again = _make(tmp_path, out, **live)
    assert again.exit_code == 0, again.output
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()} == first, "a second make differs"

    companion = out / "conda-linux-64.pip.txt"
    downloaded = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "-r", str(companion),
         "-d", str(tmp_path / "files"), "--isolated", "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert downloaded.returncode == 0, downloaded.stdout + downloaded.stderr

    # Installed: the lock's PyPI part (every file but DeepSpeed's sdist, which its own tests build) into the
    # environment's python, a conda package from a local channel.
    lock = lockfile.read(out / "conda-lock.yml", None)
    wanted = tuple(r for r in lock.pip if r.name != "deepspeed")
    channel = tmp_path / "channel"
    python_package(channel)
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(["python"], [source], "linux-64", {"__unix": "0"}, tmp_path / "solve-cache")
    installable = tmp_path / "installable" / "conda-lock.yml"
    installable.parent.mkdir()
    custom = {"envsolver_torch_cuda_arch_list": "8.0+PTX"}
    installable.write_text(
        condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, custom, "t", "t",
                         {"linux-64": wanted})
    )  # fmt: skip
    prefix = tmp_path / "env"
    env = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    installed = _invoke(["install", str(installable), "-p", str(prefix), "--no-hook", "--json"], **env)
    assert installed.exit_code == 0, installed.output
    report = json.loads(installed.stdout)["pip"]
    assert {"accelerate", "peft"} <= {r.split()[0] for r in report["installed"]}, report
    site = prefix / "lib" / f"python{PY}" / "site-packages"
    for record in wanted:
        info = site / f"{pypi_index.normalize(record.name).replace('-', '_')}-{record.version}.dist-info"
        assert (info / "INSTALLER").read_text().strip() == "pip", f"{record.name} was not installed by pip"
    drift = _invoke(["verify", "-p", str(prefix), "--lock", str(installable), "--check", "lock_drift", "--json"], **env)
    check = json.loads(drift.stdout)["checks"][0]
    assert (drift.exit_code, check["status"]) == (0, "pass"), drift.output
    assert os.environ.get("ENVSOLVER_PYPI_INDEX", "").startswith("http://127.0.0.1"), "the suite's own index stays"


def test_update_moves_only_the_named_packages_and_diff_shows_exactly_that(project: Path, tmp_path: Path) -> None:
    """A lock made with jupyterlab and accelerate held back; the pins taken out of the file; `make` keeps the
    lock's versions; `--update jupyterlab --update accelerate` moves those two (and what jupyterlab's new version
    needs) and nothing else; `envsolver diff` says exactly that."""
    out = tmp_path / "out"
    project.write_text(PROJECT.replace("  - jupyterlab\n", "  - jupyterlab <4.6\n").replace(
        "    - accelerate\n", "    - accelerate<1.16\n"))  # fmt: skip
    assert _make(tmp_path, out, "--offline").exit_code == 0
    old = tmp_path / "old.yml"
    old.write_bytes((out / "conda-lock.yml").read_bytes())
    project.write_text(PROJECT)
    kept = _make(tmp_path, out, "--offline")
    assert kept.exit_code == 0, kept.output
    same = _invoke(["diff", str(old), str(out / "conda-lock.yml"), "--json"])
    assert json.loads(same.stdout)["differ"] is False, f"make without --update moved packages: {same.stdout}"
    updated = _make(tmp_path, out, "--offline", "--update", "jupyterlab", "--update", "accelerate")
    assert updated.exit_code == 0, updated.output
    shown = _invoke(["diff", str(old), str(out / "conda-lock.yml"), "--json"])
    changes = {c["name"]: c for c in json.loads(shown.stdout)["changes"]}
    assert changes["jupyterlab"]["kind"] == "changed" and changes["accelerate"]["kind"] == "changed", changes
    # Besides the two, only what jupyterlab's new release needs (jupyter-builder) or its old one needed and the new
    # one does not (importlib_metadata) may change: nothing else of the lock moved.
    deps = {
        d.split()[0]
        for path in (old, out / "conda-lock.yml")
        for e in lockfile.read(path, None).entries
        if e.name == "jupyterlab"
        for d in e.depends
    }
    others = set(changes) - {"jupyterlab", "accelerate"}
    assert others <= deps, f"more moved than the two and what they need: {sorted(others - deps)}"
    assert {changes[n]["kind"] for n in others} <= {"added", "removed"}, changes
    text = _invoke(["diff", str(old), str(out / "conda-lock.yml")]).stdout
    assert "jupyterlab" in text and "accelerate" in text, text


def test_a_pypi_requirement_the_conda_part_must_meet_gets_a_conda_way_out_that_locks(tmp_path: Path) -> None:
    """`numpy<2` under pip: the lock's conda numpy is 2.x, so uv cannot meet it; make names the conda-side way out
    (`--add 'numpy <2'` in its place), locked whole before it is named, and it works when run."""
    out = tmp_path / "out"
    refused = _invoke(["make", "--gpu", "a100", "--offline", "--add-pypi", "numpy<2", "-o", str(out)])
    assert refused.exit_code == 1, refused.output
    assert "names numpy, which the lock already holds" in refused.output, refused.output
    assert "`--add 'numpy <2'` (in place of the PyPI requirement 'numpy<2') locks torch" in refused.output
    fixed = _invoke(["make", "--gpu", "a100", "--offline", "--add", "numpy <2", "-o", str(out)])
    assert fixed.exit_code == 0, fixed.output
    numpy = [e for e in lockfile.read(out / "conda-lock.yml", None).entries if e.name == "numpy"]
    assert numpy and numpy[0].version.startswith("1."), numpy
