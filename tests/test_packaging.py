"""The wheel carries every module and data file a non-editable install needs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("wheel") is None,
    reason="needs setuptools and wheel (the [test] extra installs both)",
)
def test_wheel_contents(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("envsolver-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "envsolver/cli.py",
        "envsolver/kb/data/gpus.yaml",
        "envsolver/kb/data/meta.yaml",
        "envsolver/snapshot/data/provenance.json",
        "envsolver/snapshot/data/conda-forge/linux-64/repodata.json",
        "envsolver/hook/op_runner.py",
        "envsolver/verify/probe.py",
        "envsolver/profiles/a100.yaml",
        "envsolver/profiles/cluster-v100-a100-h100.yaml",
        "envsolver/py.typed",
    ):
        assert required in names, required
