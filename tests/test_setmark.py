"""writers/setmark.py: every file of a set names its set, and `install` and `verify` refuse a lock beside a file of
another set, naming the files, with a fix that works (the no-op install included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.lock.writers import fileset, setmark
from tests.conda_packages import build_channel
from tests.test_install import write_lock

COMMAND = "envsolver make --gpu a100"


def test_every_member_names_the_set_and_two_sets_differ() -> None:
    a = fileset.stamped_texts({"environment.yml": "# a\nname: a\n", "conda-lock.yml": "# a\nversion: 1\n"})
    b = fileset.stamped_texts({"environment.yml": "# a\nname: a\n", "conda-lock.yml": "# b\nversion: 1\n"})
    parsed = {name: setmark.parse(text) for name, text in a.items()}
    ident = setmark.set_id({"environment.yml": "# a\nname: a\n", "conda-lock.yml": "# a\nversion: 1\n"})
    assert set(parsed.values()) == {(ident, ("environment.yml", "conda-lock.yml"))}, parsed
    assert setmark.parse(b["environment.yml"]) != parsed["environment.yml"], "a change in one file changes them all"
    assert a["environment.yml"].splitlines()[1].startswith(setmark.LINE), a  # in the header, above the hash line


@pytest.mark.parametrize(
    "text",
    [
        "name: x\n",  # no header
        "# envsolver-sha256: 00\nname: x\n",  # an earlier envsolver's file
        "# h\nname: x\n# envsolver-set: 0123456789abcdef (environment.yml)\n",  # not in the leading comments
        "# envsolver-set: 0123456789ABCDEF (environment.yml)\n",  # not lowercase hex
        "# envsolver-set: 0123456789abcdef (../etc/passwd)\n",  # not a member's name
        "# envsolver-set: 0123456789abcdef environment.yml\n",  # no parentheses
    ],
)
def test_a_file_that_names_no_set_as_make_writes_it_names_none(text: str) -> None:
    assert setmark.parse(text) is None


@given(st.text(max_size=300))
def test_parse_never_raises(text: str) -> None:
    found = setmark.parse(text)
    assert found is None or (len(found[0]) == setmark.ID_LENGTH and found[1])


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, Path]:
    """(a directory whose conda-lock.yml is of one set and environment.yml of another, a prefix): the lock is a
    real one of a local channel, committed as make commits a set."""
    channel = build_channel(tmp_path)
    lock_text = write_lock(channel, tmp_path).read_text()
    out = tmp_path / "out"
    fileset.commit(out, {"conda-lock.yml": lock_text, "environment.yml": "# one\nname: one\n"}, force=False,
                   command=COMMAND)  # fmt: skip
    other = tmp_path / "other"
    fileset.commit(other, {"conda-lock.yml": lock_text, "environment.yml": "# two\nname: two\n"}, force=False,
                   command=COMMAND)  # fmt: skip
    shutil.copy(other / "environment.yml", out / "environment.yml")
    return out, tmp_path / "env"


def _refusal_says(out: Path, text: str) -> None:
    lock_id = setmark.parse((out / "conda-lock.yml").read_text())
    env_id = setmark.parse((out / "environment.yml").read_text())
    assert lock_id and env_id and lock_id != env_id
    assert f"the files in {str(out)!r} are not one set: conda-lock.yml is of set {lock_id[0]}, but " in text, text
    assert f"environment.yml of set {env_id[0]}" in text and f"rm {out / 'environment.yml'}" in text, text


def test_install_refuses_a_lock_beside_a_file_of_another_set_and_the_fix_works(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    out, prefix = mixed
    env = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    argv = ["install", str(out / "conda-lock.yml"), "-p", str(prefix), "--no-hook"]
    result = CliRunner().invoke(main, argv, env=env)
    assert result.exit_code == 2, result.output
    _refusal_says(out, result.output)
    assert not prefix.exists(), result.output
    (out / "environment.yml").unlink()  # the fix the message names
    result = CliRunner().invoke(main, argv, env=env)
    assert result.exit_code == 0, result.output


def test_verify_refuses_a_lock_beside_a_file_of_another_set(mixed: tuple[Path, Path]) -> None:
    out, _ = mixed
    result = CliRunner().invoke(main, ["verify", "--python", sys.executable, "--lock", str(out / "conda-lock.yml")])
    assert result.exit_code == 2, result.output
    _refusal_says(out, result.output)


def test_the_no_op_install_leaves_a_mixed_set_to_the_full_path_which_refuses_it(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    """A prefix recorded up to date for this very lock: once a file of another set is beside it, the no-op
    (cli/fast.py) does not answer, and the full path refuses."""
    out, prefix = mixed
    odd = tmp_path / "odd-environment.yml"
    os.replace(out / "environment.yml", odd)
    env = {**os.environ, "ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "envsolver", "install", str(out / "conda-lock.yml"), "-p", str(prefix), "--no-hook"]
    first = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert again.returncode == 0 and "up to date" in again.stdout, (again.stdout, again.stderr)
    os.replace(odd, out / "environment.yml")
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    _refusal_says(out, refused.stderr)
