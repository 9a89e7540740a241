"""How envsolver starts a Python (the environment's, the login node's, a node's): the one home of the rule.

Before anything of its own runs, Python puts a directory first on sys.path: the working directory for `-c` and
`-m`, the script's directory for a file. A `pip/` package or a `torch.py` in the directory envsolver was started
from would then run as the user, in place of the real one (issue 32: `python -m pip` ran a planted `pip/`). So
every Python envsolver starts runs

- isolated, `PYTHON -I ARGS` (command): no PYTHON* variable, no user site-packages, neither the working directory
  nor the script's directory on sys.path; or, where a variable of the caller's must reach it (verify's probe sees
  the PYTHONPATH the user's jobs see; the rattler worker imports envsolver the way envsolver was imported),
  `PYTHON ARGS` with PYTHONSAFEPATH=1 in its environment (keeping_environment). `-P` is not passed there: a Python
  before 3.11 refuses it ("Unknown option: -P"), and an environment's python may be older; from 3.11 the
  variable does what -P does and reaches the children that python starts as well;
- from a private working directory: workdir() (a fresh directory only this user can enter, removed afterwards),
  or one the caller made private already (install's staging directory for pip). Nothing is there to import even
  for a Python older than 3.11, and nothing the child writes lands where the user works.

A relative interpreter path is made absolute first: it must name the same file from the private directory.

The standard-library files that run inside the target environment, where envsolver cannot be imported
(verify/probe.py, verify/gate.py, cluster/slurm_launch.py), carry a copy of FLAGS and SAFE_PATH;
tests/test_isolation.py holds the copies equal to these and walks every place envsolver starts a process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

FLAGS: tuple[str, ...] = ("-I",)
SAFE_PATH: tuple[str, str] = ("PYTHONSAFEPATH", "1")


def _interpreter(python: str | os.PathLike[str]) -> str:
    """PYTHON as argv[0]: a relative path made absolute (the child starts in another directory); a bare name
    (python3, found on PATH) and an absolute path as they are."""
    text = os.fspath(python)
    return os.path.abspath(text) if os.sep in text and not os.path.isabs(text) else text


def command(python: str | os.PathLike[str], *args: str) -> list[str]:
    """`PYTHON -I ARGS...`: the isolated interpreter (the default for every Python envsolver starts)."""
    return [_interpreter(python), *FLAGS, *args]


def keeping_environment(
    python: str | os.PathLike[str], environ: Mapping[str, str], *args: str
) -> tuple[list[str], dict[str, str]]:
    """`PYTHON ARGS...` and ENVIRON with PYTHONSAFEPATH=1: for a Python that must see the caller's PYTHON*
    variables (-I would drop them); nothing is put before sys.path by Python 3.11 and later, and the private
    working directory (workdir) is what keeps an older one safe."""
    return [_interpreter(python), *args], {**environ, SAFE_PATH[0]: SAFE_PATH[1]}


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A new, empty directory that only this user can enter (mkdtemp: mode 0700), for a Python to run in; removed
    with whatever the child left there. Raises OSError when no temporary directory can be made."""
    where = Path(tempfile.mkdtemp(prefix="envsolver-py-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
