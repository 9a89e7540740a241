"""The wheel carries every module and data file a non-editable install needs."""

from __future__ import annotations

import importlib.util
import re
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
        "envsolver/cli/main.py",
        "envsolver/kb/data/gpus.yaml",
        "envsolver/kb/data/meta.yaml",
        "envsolver/lock/snapshot/data/provenance.json",
        "envsolver/lock/snapshot/data/conda-forge/linux-64/repodata.json",
        "envsolver/hook/op_runner.py",
        "envsolver/verify/probe.py",
        "envsolver/profiles/a100.yaml",
        "envsolver/profiles/cluster-v100-a100-h100.yaml",
        "envsolver/py.typed",
    ):
        assert required in names, required


def _setup_block() -> list[str]:
    """The command lines of README's "Set up and test" block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up and test\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readmes_install_and_test_commands_are_what_ci_runs() -> None:
    """README's set-up makes a venv first, then its install and test commands are lines .ci/run runs, word for word
    (.ci/run makes its own fresh venv)."""
    venv, install, test = _setup_block()
    assert venv.startswith("python3 -m venv "), venv
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install in ci, f"README's install {install!r} is not a line of .ci/run"
    assert test in ci, f"README's test command {test!r} is not a line of .ci/run"
    assert "python3 -m pip install -e '.[dist]'" in ci, ".ci/run does not install the dist extra"


def test_the_test_extra_pulls_no_torch_and_the_dist_extra_holds_it() -> None:
    """`pip install -e '.[test]'` must download no torch (PyPI's is its CUDA build, gigabytes): torch and DeepSpeed
    (which requires torch) live in the dist extra alone."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {
        extra: {re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower() for req in reqs} for extra, reqs in extras.items()
    }
    assert not names["test"] & {"torch", "deepspeed"}, names["test"]
    assert {"torch", "deepspeed"} <= names["dist"], names["dist"]
    assert "pytest-xdist" in names["test"], "README's test command runs pytest -n auto"


def test_the_fast_tier_leaves_out_every_marker_the_default_run_leaves_out() -> None:
    """`-m "not heavy"` replaces addopts' -m: each long marker addopts leaves out must be heavy too (conftest's
    LONG_MARKERS), or the fast tier runs the full sweep the default run samples."""
    import re

    from tests.conftest import LONG_MARKERS

    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    addopts = re.search(r"^addopts = \"(.*)\"$", text, re.M)
    assert addopts is not None, "pyproject.toml has no addopts line"
    left_out = set(re.findall(r"not (\w+)", addopts.group(1)))
    assert left_out and left_out == set(LONG_MARKERS), (sorted(left_out), LONG_MARKERS)
