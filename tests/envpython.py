"""An environment's python for install tests: a `python` conda package made from this interpreter (a venv-style copy:
bin/python3.X and pyvenv.cfg) whose site-packages sees this test run's packages (pip, setuptools, torch) through a
.pth file, so pip installs into the environment's own site-packages, as it would in a conda environment."""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
from pathlib import Path

from tests.conda_packages import build_package

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def host_view(root: Path) -> Path:
    """This run's site-packages as one directory of links, less DeepSpeed (the test extra installs it for the
    launch tests): the environment must get the lock's DeepSpeed from the PyPI part, and pip would take a
    deepspeed it can import from here as already installed."""
    view = root / "host-site-packages"
    view.mkdir(parents=True, exist_ok=True)
    for site in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]):
        for entry in sorted(Path(site).iterdir()):
            link = view / entry.name
            if entry.name.lower().startswith("deepspeed") or link.exists() or link.is_symlink():
                continue
            link.symlink_to(entry)
    return view


def python_package(channel: Path) -> Path:
    """A `python` conda package made from this interpreter, venv style, seeing this run's site-packages (less
    DeepSpeed: host_view)."""
    real = Path(os.path.realpath(sys.executable))
    site = [str(host_view(channel.parent))]
    files: dict[str, str | bytes] = {
        f"bin/python{PY}": real.read_bytes(),
        "pyvenv.cfg": (
            f"home = {real.parent}\ninclude-system-site-packages = false\nversion = {platform.python_version()}\n"
        ),
        f"lib/python{PY}/site-packages/envsolver-test-host.pth": "".join(f"{p}\n" for p in dict.fromkeys(site)),
    }
    links = {"bin/python": f"python{PY}", "bin/python3": f"python{PY}"}
    return build_package(channel, "python", platform.python_version(), files, symlinks=links)
