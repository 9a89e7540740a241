"""Core metadata read from untrusted bytes (envsolver.net.coremeta): real METADATA files of the bundled snapshot
parse; hostile ones are refused, naming the field."""

from __future__ import annotations

import pytest

from envsolver.lock.pypi import snapshot
from envsolver.net import coremeta

GOOD = (
    b"Metadata-Version: 2.1\nName: Example_Pkg\nVersion: 1.0\nRequires-Python: >=3.9\n"
    b"Requires-Dist: numpy<3,>=1.17\nRequires-Dist: black~=23.1; extra == 'quality'\n"
    b"License: a long\n  folded text with \x1b[31m colours\n\nthe description\n"
)


def test_every_bundled_metadata_file_parses_as_its_files() -> None:
    count = 0
    for path in sorted((snapshot.data_dir() / "metadata").glob("*.metadata")):
        meta = coremeta.parse(path.read_bytes())
        assert meta.name and meta.version, path
        count += 1
    assert count > 10, f"only {count} metadata files are bundled"


def test_a_good_header_block() -> None:
    meta = coremeta.parse(GOOD, name="example-pkg", version="1.0.0")
    assert meta.name == "example-pkg" and meta.version == "1.0", meta
    assert [str(r) for r in meta.requires_dist] == ["numpy<3,>=1.17", 'black~=23.1; extra == "quality"'], meta
    assert str(meta.requires_python) == ">=3.9", meta
    # fields a lock does not use (License) may hold anything: they are never used


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"Name: x\nVersion: 1\n", "0 Metadata-Version fields"),
        (b"Metadata-Version: 2.1\nName: x\nName: y\nVersion: 1\n", "2 Name fields"),
        (b"Metadata-Version: 2.1\nName: x;rm -rf /\nVersion: 1\n", "is not a distribution name"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1.0$(id)\n", "is not a PEP 440 version"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: y; os_name == `id`\n", "not a PEP 508"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: y @ https://evil.example/y.whl\n", "names a URL"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: y\x1b]0;t\x07\n", "control character"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Python: >=3.9; x\n", "not a version specifier"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\nnot a field\n", "is not `Field: value`"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 1\n" + b"Requires-Dist: y\n" * 2001, "more than the 2000"),
        (b"Metadata-Version: 2.1\nName: other\nVersion: 1\n", "not 'x''s"),
        (b"Metadata-Version: 2.1\nName: x\nVersion: 2\n", "not 1"),
        (b"x" * (coremeta.MAX_BYTES + 1), "more than the"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_hostile_metadata_is_refused_naming_the_field(data: bytes, why: str) -> None:
    with pytest.raises(coremeta.BadMetadata) as caught:
        coremeta.parse(data, name="x", version="1")
    assert why in str(caught.value), str(caught.value)
