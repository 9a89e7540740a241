"""lock/dryrun.py's package diff: what `make --dry-run` says a new lock changes against the conda-lock.yml it would
replace, from a real offline lock of the bundled snapshot. (The --update case, end to end through the CLI, is in
tests/test_keep.py.)"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from envsolver.kb import default_kb
from envsolver.lock import dryrun, outputs, pkgdiff
from envsolver.lock import run as lock
from envsolver.lock.run import LockResult
from envsolver.resolve.inputs import Options, build_target

PROJECTS = pkgdiff.pypi_of_conda(default_kb())


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[LockResult, Path]:
    """An a100 lock of the snapshot, solved here and written by make's writers into a directory."""
    kb = default_kb()
    target = build_target(Options(gpus=("a100",), driver="580.65.06"), kb).target
    root = tmp_path_factory.mktemp("dryrun")
    result = lock.lock(target, kb, "offline", (), root / "cache", lambda _: None)
    outputs.write_all(result, kb, root / "out", "envsolver make --gpu a100 --offline", None, False)
    return result, root / "out"


def test_no_lock_in_out_is_no_package_diff(made: tuple[LockResult, Path], tmp_path: Path) -> None:
    result, _ = made
    assert dryrun.against_lock(tmp_path, result, PROJECTS) is None, "nothing to compare with"
    assert dryrun.package_lines(None) == [], "and nothing printed for it"


def test_the_same_solve_changes_no_package(made: tuple[LockResult, Path]) -> None:
    result, out = made
    against = dryrun.against_lock(out, result, PROJECTS)
    assert against is not None and against.diff is not None and not against.diff.differ, against
    platform = result.plan.platform
    count = len(result.records[platform]) + len(result.pip.get(platform, ()))  # conda and PyPI packages alike
    assert dryrun.package_lines(against) == [
        f"packages against {out / 'conda-lock.yml'}:",
        f"no package differs ({count} packages, each the same version and build).",
    ]
    assert against.to_json() == {
        "against": str(out / "conda-lock.yml"),
        "differ": False,
        "counts": {"changed": 0, "added": 0, "removed": 0, "moved": 0, "unchanged": count},
        "changes": [],
    }


def test_a_solve_without_a_package_shows_it_removed(made: tuple[LockResult, Path]) -> None:
    result, out = made
    platform = result.plan.platform
    gone = next(r for r in result.records[platform] if r.name == "tzdata")
    fewer = dataclasses.replace(result, records={platform: tuple(r for r in result.records[platform] if r != gone)})
    against = dryrun.against_lock(out, fewer, PROJECTS)
    assert against is not None and against.diff is not None
    assert [(c.kind, c.name) for c in against.diff.changes] == [("removed", "tzdata")], against.diff.changes
    lines = dryrun.package_lines(against)
    assert lines[1].split() == ["removed", "tzdata", "conda", gone.version, gone.build, "->", "-"], lines


def test_an_unreadable_lock_is_said_not_raised(made: tuple[LockResult, Path], tmp_path: Path) -> None:
    result, out = made
    broken = tmp_path / "out"
    shutil.copytree(out, broken)
    (broken / "conda-lock.yml").write_text("version: 9\n")
    against = dryrun.against_lock(broken, result, PROJECTS)
    assert against is not None and against.diff is None and "lock version 9" in (against.error or ""), against
    (line,) = dryrun.package_lines(against)
    assert line.startswith(f"packages: {broken / 'conda-lock.yml'} cannot be read, so there is no package diff"), line
    assert list(against.to_json()) == ["against", "error"], against.to_json()
