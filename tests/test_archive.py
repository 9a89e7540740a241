"""envsolver.install.archive: reading archives (both formats, hostile bytes) and what linking may create."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envsolver.install import archive
from tests.conda_packages import build_package


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("lib/libz.so.1", True),
        ("bin/python3.11", True),
        ("site-packages/a b/c.py", True),
        ("..", False),
        ("../x", False),
        ("lib/../x", False),
        ("lib/./x", False),
        ("./lib", False),
        ("/etc/passwd", False),
        ("lib//x", False),
        ("lib/", False),
        ("", False),
        ("lib/\0x", False),
        ("x" * 5000, False),
    ],
)
def test_path_problem(path: str, ok: bool) -> None:
    assert (archive.path_problem(path) is None) is ok


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "c.d"]), min_size=1, max_size=6))
def test_an_accepted_path_never_leaves_its_root(parts: list[str]) -> None:
    path = "/".join(parts)
    if archive.path_problem(path) is None:
        root = Path("/root-of-prefix")
        assert (root / path).resolve().is_relative_to(root)


@pytest.mark.parametrize("fmt", ["tar.bz2", "conda"])
def test_read_info_of_both_formats(tmp_path: Path, fmt: str) -> None:
    path = build_package(tmp_path, "pkg", "1.0", {"lib/a.txt": "a"}, symlinks={"lib/b": "a.txt"}, fmt=fmt)
    info = archive.read_info(path)
    assert (info.name, info.version, info.build, info.subdir) == ("pkg", "1.0", "h0_0", "linux-64")
    assert info.paths == (("lib/a.txt", "hardlink"), ("lib/b", "softlink"))
    assert archive.Member("lib/b", "symlink", "a.txt") in info.members
    assert archive.own_problems(info) == [] and archive.softlinks(info) == {"lib/b"}


def test_an_undeclared_symlink_in_the_payload_counts_as_a_link(tmp_path: Path) -> None:
    """A payload symlink that paths.json calls a hardlink is still a link that others must not write through."""
    path = build_package(
        tmp_path,
        "pkg",
        "1.0",
        {},
        symlinks={"lib/evil": "/etc"},
        paths=[{"_path": "lib/evil", "path_type": "hardlink"}],
    )
    links = archive.softlinks(archive.read_info(path))
    assert links == {"lib/evil"}
    assert archive.crossing_problems({"other": ["lib/evil/passwd"]}, {"pkg": links, "other": set()})


def test_entry_points_must_be_plain_names(tmp_path: Path) -> None:
    info = archive.PackageInfo("p", "1", "b", None, "python", (), ("ok-cmd", "../../evil", ".hidden"), ())
    problems = archive.own_problems(info)
    assert len(problems) == 2 and "'../../evil'" in problems[0] and "'.hidden'" in problems[1]


def test_crossing_problems() -> None:
    links = {"a": {"lib/link"}, "b": set(), "c": {"share/x"}}
    assert archive.crossing_problems({"b": ["lib/linked", "lib/link2/x"]}, links) == []
    through = archive.crossing_problems({"b": ["lib/link/x"]}, links)
    assert through == ["b: 'lib/link/x' would be written through the symbolic link 'lib/link' (a)"]
    clobber = archive.crossing_problems({"b": ["share/x"]}, links)
    assert clobber == ["b: 'share/x' is a symbolic link of c, which b would overwrite"]
    assert archive.crossing_problems({"c": ["share/x"]}, links) == []  # its own link


def test_prefix_problems(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "inside").symlink_to(prefix / "lib")
    (prefix / "lib" / "outside").symlink_to(tmp_path)
    assert archive.prefix_problems(prefix, ["lib/inside/x", "lib/plain", "new/dir/x"]) == []
    assert len(archive.prefix_problems(prefix, ["lib/outside/x", "lib/outside/y/z"])) == 2


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            item = tarfile.TarInfo(name)
            item.size = len(data)
            tar.addfile(item, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("members", "phrase"),
    [
        ({}, "info/index.json is missing"),
        ({"info/index.json": b"{"}, "not valid JSON"),
        ({"info/index.json": b'{"name": 1}'}, "lacks name"),
        ({"info/index.json": b'{"name": "p", "version": "1", "build": "b"}'}, "neither info/paths.json nor info/files"),
        (
            {"info/index.json": b'{"name": "p", "version": "1", "build": "b"}', "info/paths.json": b'{"paths": 3}'},
            "no 'paths' list",
        ),
    ],
)
def test_bad_info_is_an_archive_error(tmp_path: Path, members: dict[str, bytes], phrase: str) -> None:
    path = tmp_path / "p-1-b.tar.bz2"
    import bz2

    path.write_bytes(bz2.compress(_tar(members)))
    with pytest.raises(archive.ArchiveError, match=phrase):
        archive.read_info(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000), fmt=st.sampled_from(["tar.bz2", "conda"]), cut=st.integers(0, 4000))
def test_any_bytes_are_read_or_refused(tmp_path: Path, data: bytes, fmt: str, cut: int) -> None:
    """Random bytes, and real archives cut short or with bytes flipped, end in ArchiveError or a PackageInfo."""
    real = build_package(tmp_path / "c", "pkg", "1.0", {"lib/a.txt": "a" * 100}, fmt=fmt).read_bytes()
    variants = [data, real[:cut], real[:cut] + data + real[cut + len(data) :]]
    for number, body in enumerate(variants):
        path = tmp_path / f"v{number}-1.0-h0_0.{fmt}"
        path.write_bytes(body)
        try:
            info = archive.read_info(path)
        except archive.ArchiveError:
            continue
        assert isinstance(info, archive.PackageInfo)


def test_a_conda_archive_without_its_info_section_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p-1-b.conda"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
    with pytest.raises(archive.ArchiveError, match="no info"):
        archive.read_info(path)
