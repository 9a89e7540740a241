"""The PyPI part of a lock (envsolver.net.pypi_index, pins): reading a real simple page, choosing the release's file,
the live index and its fallback to the bundled snapshot, and the check that the conda part holds every run
requirement of what pip installs without dependencies.

tests/data/pypi/deepspeed-simple.html is PyPI's page as served on 2026-12-01 (`curl
https://pypi.org/simple/deepspeed/`), unchanged."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from envsolver.core.errors import BadInputError, ConflictError, EnvsolverError
from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase
from envsolver.lock.pypi import pins
from envsolver.lock.solve import Record
from envsolver.net import pypi_index as index
from tests import httplab
from tests.conftest import plan_for

PAGE = Path(__file__).parent / "data" / "pypi" / "deepspeed-simple.html"
SHA_0198 = "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"


def _record(name: str, version: str) -> Record:
    return Record(name, version, "h0_0", 0, "noarch", "conda-forge", f"https://x/noarch/{name}-{version}-h0_0.conda",
                  "0" * 32, "0" * 64, None, (), ())  # fmt: skip


CONDA = [
    _record(name, version)
    for name, version in [
        ("einops", "0.8.1"), ("hjson-py", "3.1.0"), ("msgpack-python", "1.1.2"), ("ninja", "1.13.2"),
        ("numpy", "2.3.5"), ("packaging", "25.0"), ("psutil", "7.2.2"), ("py-cpuinfo", "9.0.0"),
        ("pydantic", "2.12.5"), ("pytorch", "2.13.0"), ("tqdm", "4.67.3"), ("nvidia-ml-py", "13.580.82"),
    ]
]  # fmt: skip


def _pin(kb: KnowledgeBase, mode: pins.Mode, environ: dict[str, str], conda: list[Record] = CONDA) -> pins.PipPart:
    plan = replace(
        plan_for(kb, gpus=("a100",)), pip=("deepspeed==0.19.8",), python_version=MajorMinor(3, 13), platform="linux-64"
    )
    return pins.pin(plan, conda, kb, mode, environ)


def test_pypis_real_simple_page_parses_into_its_lockable_files() -> None:
    files = index.parse_html(PAGE.read_text(), "deepspeed", "https://pypi.org/simple/deepspeed/")
    assert len(files) >= 140, len(files)
    found = index.release_file(files, "0.19.8")
    assert found is not None
    assert (found.filename, found.sha256) == ("deepspeed-0.19.8.tar.gz", SHA_0198)
    assert found.url.startswith("https://files.pythonhosted.org/packages/") and "#" not in found.url
    # The bundled snapshot was read from the same index: every file it holds is on the page, byte for byte.
    _, bundled = pins.bundled("deepspeed")
    page = {(f.filename, f.url, f.sha256) for f in files}
    assert {(f.filename, f.url, f.sha256) for f in bundled} <= page


@pytest.mark.parametrize(
    ("anchor", "kept"),
    [
        ('<a href="https://h/p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', True),
        ('<a href="https://h/p/deepspeed-1.0.tar.gz#md5=' + "a" * 32 + '">x</a>', False),  # no sha256
        ('<a href="https://h/p/deepspeed-1.0.tar.gz">x</a>', False),  # no hash at all
        ('<a href="https://h/p/other-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),  # another project
        ('<a href="https://h/p/deepspeed-1.0.zip#sha256=' + "a" * 64 + '">x</a>', False),  # not wheel or sdist
        ('<a href="https://h/p/deep speed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),  # a space
        ('<a href="javascript:alert(1)//deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),
        ('<a href="https://h/p/deepspeed-1.0.tar.gz;rm%20-rf#sha256=' + "a" * 64 + '">x</a>', False),
        ('<a href="../p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', True),  # relative to the page
        ('<a href="https://h/p/deepspeed-1.0.tar.gz#sha256=' + "A" * 64 + '">x</a>', False),  # not lowercase hex
        (
            '<a href="https://h/p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '" data-requires-python="&gt;=3.9">x</a>',
            True,
        ),
        ('<a href="https://h/p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '" data-requires-python="3.x!">x</a>', False),
        # a remote page never names a file of this machine, absolute or through percent-encoded dots
        ('<a href="file:///etc/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),
        ('<a href="file://localhost/tmp/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),
        ('<a href="ftp://h/p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', False),
        # a relative path above the index stays on the index's own origin (devpi's and Artifactory's `../../`)
        ('<a href="../../../../p/deepspeed-1.0.tar.gz#sha256=' + "a" * 64 + '">x</a>', True),
    ],
)
def test_a_simple_pages_entries_are_held_to_their_grammar(anchor: str, kept: bool) -> None:
    files = index.parse_html(f"<html><body>{anchor}</body></html>", "deepspeed", "https://h/simple/deepspeed/")
    assert bool(files) == kept, files


def test_a_local_pages_files_are_ignored_and_relative_paths_stay_on_the_origin() -> None:
    """A page read from a file: URL would name files of this machine by relative paths (`../../../../etc/...`);
    a page's files are taken from http(s) URLs only, and a relative one resolves on the page's own origin."""
    sha = "c" * 64
    page = f'<a href="../../../../etc/deepspeed-1.0.tar.gz#sha256={sha}">x</a>'
    assert index.parse_html(page, "deepspeed", "file:///srv/index/simple/deepspeed/") == []
    (kept,) = index.parse_html(page, "deepspeed", "https://h/simple/deepspeed/")
    assert kept.url == "https://h/etc/deepspeed-1.0.tar.gz", kept.url
    doc = {"files": [{"filename": "deepspeed-1.0.tar.gz", "url": "file:///etc/deepspeed-1.0.tar.gz",
                      "hashes": {"sha256": sha}}]}  # fmt: skip
    assert index.parse_json(doc, "deepspeed") == [], "a JSON page's file: URL is ignored too"


def test_a_yanked_file_is_never_chosen_and_a_py3_none_any_wheel_is_preferred() -> None:
    sha = "b" * 64
    page = (
        f'<a href="https://h/deepspeed-1.0.tar.gz#sha256={sha}" data-yanked="">a</a>'
        f'<a href="https://h/deepspeed-2.0.tar.gz#sha256={sha}">b</a>'
        f'<a href="https://h/deepspeed-2.0-py3-none-any.whl#sha256={sha}">c</a>'
    )
    files = index.parse_html(page, "deepspeed", "https://h/simple/deepspeed/")
    assert index.release_file(files, "1.0") is None
    chosen = index.release_file(files, "2.0")
    assert chosen is not None and chosen.filename == "deepspeed-2.0-py3-none-any.whl"


def test_offline_the_pypi_part_comes_from_the_bundled_snapshot_without_a_warning(kb: KnowledgeBase) -> None:
    part = _pin(kb, "offline", {})
    (record,) = part.records
    assert (record.name, record.version, record.sha256, part.warnings) == ("deepspeed", "0.19.8", SHA_0198, ())
    assert part.index.startswith("the bundled PyPI snapshot of ")
    assert dict(record.dependencies)["torch"] == ">=2.0.0" and dict(record.dependencies)["einops"] == "*"


def test_a_live_index_is_read_and_an_unreachable_one_falls_back_with_one_warning(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    root = tmp_path / "index"
    (root / "simple" / "deepspeed").mkdir(parents=True)
    shutil.copyfile(PAGE, root / "simple" / "deepspeed" / "index.html")
    with httplab.serve(root) as lab:
        part = _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple"})
    assert (part.records[0].sha256, part.index, part.warnings) == (SHA_0198, f"{lab.url}/simple", ())
    assert lab.requests[0][0] == "/simple/deepspeed/"
    closed = _pin(kb, "live", {index.INDEX_ENV: "http://127.0.0.1:9/simple"})
    assert closed.records[0].sha256 == SHA_0198
    (warning,) = closed.warnings
    assert warning.startswith("the Python package index could not be read (") and "bundled snapshot" in warning


def test_an_index_that_serves_another_file_under_pypis_name_is_refused(kb: KnowledgeBase, tmp_path: Path) -> None:
    root = tmp_path / "index"
    (root / "simple" / "deepspeed").mkdir(parents=True)
    (root / "simple" / "deepspeed" / "index.html").write_text(PAGE.read_text().replace(SHA_0198, "c" * 64))
    with httplab.serve(root) as lab, pytest.raises(EnvsolverError) as info:
        _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple"})
    assert f"gives deepspeed-0.19.8.tar.gz the sha256 {'c' * 64}, but PyPI's is {SHA_0198}" in str(info.value)


def test_the_conda_part_must_hold_every_run_requirement(kb: KnowledgeBase) -> None:
    without = [r for r in CONDA if r.name != "hjson-py"]
    old = [r if r.name != "pydantic" else _record("pydantic", "1.10.16") for r in CONDA]
    with pytest.raises(ConflictError) as missing:
        _pin(kb, "offline", {}, without)
    assert "hjson (the conda part holds no hjson-py)" in str(missing.value)
    with pytest.raises(ConflictError) as wrong:
        _pin(kb, "offline", {}, old)
    assert "pydantic>=2.0.0 (the conda part holds pydantic 1.10.16)" in str(wrong.value)


def test_every_bundled_page_reads() -> None:
    for path in sorted(pins.snapshot_dir().glob("*.json")):
        date, files = index.read_snapshot(path, path.stem)
        assert files and len(date) == 10, path


def test_an_index_without_the_release_is_refused_naming_what_to_do(kb: KnowledgeBase, tmp_path: Path) -> None:
    root = tmp_path / "index"
    (root / "simple" / "deepspeed").mkdir(parents=True)
    page = "\n".join(line for line in PAGE.read_text().splitlines() if "deepspeed-0.19.8" not in line)
    (root / "simple" / "deepspeed" / "index.html").write_text(page)
    with httplab.serve(root) as lab, pytest.raises(ConflictError) as info:
        _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple"})
    assert str(info.value) == (
        f"{lab.url}/simple has no file of deepspeed 0.19.8 with a sha256 (and not yanked), so it cannot be locked. "
        "Point ENVSOLVER_PYPI_INDEX (or PIP_INDEX_URL) at an index that holds it, or pass --no-deepspeed."
    )


def test_an_index_page_past_its_bound_is_not_read_past_it_and_the_snapshot_serves(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """An index that streams its page without end: the download stops at MAX_PAGE_BYTES (not the 4 GiB ceiling
    of package downloads), and the PyPI part comes from the bundled snapshot with one warning."""
    root = tmp_path / "index"
    root.mkdir()
    with httplab.serve(root, httplab.Faults(endless="close")) as lab:
        part = _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple"})
    (warning,) = part.warnings
    assert "is larger than 16 MiB; it is not a simple page" in warning, warning
    assert part.records[0].sha256 == SHA_0198
    assert lab.sent < 2 * index.MAX_PAGE_BYTES, lab.sent


@pytest.mark.parametrize("headers", [False, True], ids=["body-trickles", "headers-trickle"])
def test_a_trickling_index_ends_in_the_snapshot_within_its_deadline(
    kb: KnowledgeBase, tmp_path: Path, headers: bool
) -> None:
    """An index that sends one byte every 0.5 s never lets a read time out (before, a byte every 5 s kept the page's
    read 290 s); the read's deadline ($ENVSOLVER_INDEX_DEADLINE, 2 s here) ends it, and the PyPI part comes from the
    bundled snapshot with its one warning, which names the deadline and how to raise it."""
    (tmp_path / "index").mkdir()
    faults = httplab.Faults(trickle_s=0.5, trickle_headers=headers)
    with httplab.serve(tmp_path / "index", faults) as lab:
        started = time.monotonic()
        part = _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple", index.DEADLINE_ENV: "2"})
        took = time.monotonic() - started
    (warning,) = part.warnings
    assert "not done within 2 s" in warning and f"{index.DEADLINE_ENV}=SECONDS" in warning, warning
    assert part.records[0].sha256 == SHA_0198 and took < 10, f"{took:.1f} s: {warning}"


@pytest.mark.slow
def test_a_trickling_index_ends_in_the_snapshot_within_60_s_by_default(kb: KnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    with httplab.serve(tmp_path / "index", httplab.Faults(trickle_s=5.0)) as lab:
        started = time.monotonic()
        part = _pin(kb, "live", {index.INDEX_ENV: f"{lab.url}/simple"})
        took = time.monotonic() - started
    (warning,) = part.warnings
    assert f"not done within {index.DEADLINE_S} s" in warning and took < 60, f"{took:.1f} s: {warning}"


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "abc", "99999999", "\u0663"])
def test_an_index_deadline_that_is_not_seconds_is_bad_input(value: str) -> None:
    with pytest.raises(BadInputError) as caught:
        index.deadline({index.DEADLINE_ENV: value})
    assert f"export {index.DEADLINE_ENV}=120" in str(caught.value), str(caught.value)


def test_the_knowledge_bases_sdists_are_the_bundled_pages_files(kb: KnowledgeBase) -> None:
    """Two records of PyPI's deepspeed files stand in the tree: the KB's pypi_sdists (the files its requirement rows
    were read from) and the bundled page the PyPI part is locked from. They must be the same files."""
    _, files = pins.bundled("deepspeed")
    page = {f.version: (f.url, f.sha256) for f in files if not f.wheel}
    for sdist in kb.deepspeed_sdists:
        assert page.get(str(sdist.version)) == (sdist.url, sdist.sha256), sdist
