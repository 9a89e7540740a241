"""The explicit lock lists its packages in conda-lock's own order: every shipped lock, and any set of records
(cycles, python and pip, virtual packages, missing dependencies), equals conda-lock's `render --kind explicit`
of the conda-lock.yml written from the same records, line for line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conda_lock.conda_lock import render_lockfile_for_platform
from conda_lock.lockfile import parse_conda_lock_file
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.lock.solve import Record
from envsolver.lock.writers import condalock, explicit

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIRS = sorted(p.parent for p in (ROOT / "locks").glob("*/conda-lock.yml"))


def body(text: str) -> list[str]:
    """The package lines of an explicit lock: everything after `@EXPLICIT`, comments and blanks dropped."""
    lines = text.splitlines()
    return [line for line in lines[lines.index("@EXPLICIT") + 1 :] if line and not line.startswith("#")]


def conda_lock_render(path: Path, platform: str) -> list[str]:
    lines = render_lockfile_for_platform(
        lockfile=parse_conda_lock_file(path), include_dev_dependencies=True, extras=None, kind="explicit",
        platform=platform,
    )  # fmt: skip
    return body("\n".join(lines))


def test_there_are_shipped_locks_to_compare() -> None:
    assert len(LOCK_DIRS) >= 5


@pytest.mark.parametrize("directory", LOCK_DIRS, ids=lambda p: p.name)
def test_every_shipped_explicit_lock_is_conda_locks_own_render(directory: Path) -> None:
    (ours,) = directory.glob("conda-*.lock")
    platform = ours.name.removeprefix("conda-").removesuffix(".lock")
    mine = body(ours.read_text(encoding="utf-8"))
    assert len(mine) > 20
    assert mine == conda_lock_render(directory / "conda-lock.yml", platform)


NAMES = st.sampled_from(["python", "pip", "libgcc", "zlib", "openssl", "ca-certificates", "a", "b", "c", "d"])
VIRTUAL = st.sampled_from(["__glibc", "__cuda", "missing-package"])


def _record(name: str, depends: list[str]) -> Record:
    url = f"https://conda.anaconda.org/conda-forge/linux-64/{name}-1.0-h0_0.conda"
    return Record(name, "1.0", "h0_0", 0, "linux-64", "conda-forge", url, "0" * 32, "a" * 64, 1, tuple(depends), ())


@st.composite
def graphs(draw: st.DrawFn) -> list[Record]:
    names = draw(st.lists(NAMES, min_size=1, max_size=10, unique=True))
    dep = st.one_of(st.sampled_from(names), VIRTUAL).map(lambda n: n + draw(st.sampled_from(["", " >=1.0", " 1.*"])))
    return [_record(n, draw(st.lists(dep, max_size=5))) for n in names]


@settings(deadline=None, max_examples=150)
@given(records=graphs())
def test_any_records_are_listed_as_conda_lock_lists_them(
    tmp_path_factory: pytest.TempPathFactory, records: list[Record]
) -> None:
    path = tmp_path_factory.mktemp("lock") / "conda-lock.yml"
    path.write_text(condalock.render({"linux-64": records}, ["conda-forge"], {"linux-64": "0" * 64}, {}, "c", "d"))
    assert body(explicit.render(records, "linux-64", "c", "d")) == conda_lock_render(path, "linux-64")


def test_dependencies_come_first_and_cycles_are_broken_by_fewest_dependencies() -> None:
    graph = {"pip": {"python"}, "python": {"libgcc", "pip"}, "libgcc": {"__glibc"}, "a": {"b"}, "b": {"a", "zlib"}}
    assert explicit.toposort(graph) == ["__glibc", "zlib", "libgcc", "python", "pip", "a", "b"]
