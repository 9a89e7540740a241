"""The KB restricted to the snapshot, kept compiled (envsolver/lock/snapshot/restricted.py, issue 13): read back it
equals the uncached restriction exactly; a change to the snapshot's files, a KB from elsewhere, or a broken
file never serves a stale or foreign restriction."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsolver.kb import cache, load_kb
from envsolver.kb.model import KnowledgeBase
from envsolver.lock import run as lock
from envsolver.lock import snapshot
from envsolver.lock.snapshot import restricted


@pytest.fixture(scope="module")
def fresh_kb() -> KnowledgeBase:
    return load_kb()


@pytest.fixture
def cached_kb(fresh_kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KnowledgeBase]:
    """The KB as the compiled cache in tmp_path/cache holds it, the cache directory set for the test."""
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    cache.write(cache.path_for(tmp_path / "cache", "k" * 64), fresh_kb, "2026-01-01")
    kept = cache.read(cache.path_for(tmp_path / "cache", "k" * 64))
    assert kept is not None
    restricted.digest.cache_clear()
    yield kept[0]
    restricted.digest.cache_clear()


def _files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "kb").glob(f"{restricted.PREFIX}*{cache.SUFFIX}"))


def test_the_kept_restriction_equals_the_uncached_one(
    cached_kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = restricted.compute(cached_kb)
    assert expected.holding is not None and expected.torch_builds and expected != cached_kb
    first = restricted.restricted(cached_kb)
    assert first == expected
    [written] = _files(tmp_path)
    kept = cache.read(written)
    assert kept is not None and kept[0] == expected and kept[1] == snapshot.date()

    def must_not_run(kb: KnowledgeBase) -> KnowledgeBase:
        raise AssertionError("restricted again instead of read")

    monkeypatch.setattr(restricted, "compute", must_not_run)
    again = restricted.restricted(cached_kb)
    assert again == expected and again is not first  # read from the file


def test_a_change_to_the_snapshots_files_names_another_file(
    cached_kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = restricted.key(cached_kb)
    copy = tmp_path / "data"
    shutil.copytree(snapshot.data_dir(), copy)
    monkeypatch.setattr(snapshot, "data_dir", lambda: copy)
    restricted.digest.cache_clear()
    assert restricted.key(cached_kb) == before  # the same bytes elsewhere: the same name
    repodata = next(copy.rglob("repodata.json"))
    repodata.write_bytes(repodata.read_bytes() + b" ")
    restricted.digest.cache_clear()
    assert restricted.key(cached_kb) not in (None, before)


def test_a_kb_that_did_not_come_from_the_cache_is_restricted_afresh(
    fresh_kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path / "cache"))
    other = load_kb()
    assert cache.key_of(other) is None and restricted.key(other) is None
    assert restricted.restricted(other) == restricted.compute(fresh_kb)
    assert _files(tmp_path) == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-kb"])
def test_a_broken_or_foreign_file_is_ignored_and_replaced(
    cached_kb: KnowledgeBase, fresh_kb: KnowledgeBase, tmp_path: Path, damage: str
) -> None:
    expected = restricted.compute(cached_kb)
    label = restricted.key(cached_kb)
    assert label is not None
    path = cache.path_for(tmp_path / "cache", label, restricted.PREFIX)
    if damage == "garbage":
        path.write_bytes(b"not a pickle")
    elif damage == "truncated":
        cache.write(path, expected, snapshot.date(), restricted.PREFIX)
        path.write_bytes(path.read_bytes()[:-100])
    else:  # a valid file holding the unrestricted KB, under an older date: not this snapshot's
        cache.write(path, fresh_kb, "1999-01-01", restricted.PREFIX)
    assert restricted.restricted(cached_kb) == expected
    kept = cache.read(path)
    assert kept is not None and kept[0] == expected


def test_lock_plans_offline_with_the_kept_restriction(cached_kb: KnowledgeBase, tmp_path: Path) -> None:
    lock._RESTRICTED.clear()
    assert lock.snapshot_kb(cached_kb) == restricted.compute(cached_kb)
    assert len(_files(tmp_path)) == 1
    lock._RESTRICTED.clear()
