"""The bundled PyPI snapshot (envsolver.lock.pypi.snapshot) and its loopback index (loopback): every page reads,
every metadata file a page names is there and is its file's, the pages served as PEP 503 with PEP 714's metadata
attributes; and reading a file's metadata from a wheel or an sdist (sources), and choosing a package's file."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from envsolver.core.versions import MajorMinor
from envsolver.lock.pypi import loopback, pylock, snapshot, sources
from envsolver.lock.pypi.project import choose
from envsolver.lock.pypi.target import Target
from envsolver.net import coremeta
from envsolver.net import pypi_index as index

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def test_every_page_reads_and_every_metadata_file_named_is_its_files() -> None:
    pages = sorted(snapshot.data_dir().glob("*.json"))
    assert len(pages) > 20, pages
    named = set()
    for path in pages:
        found = snapshot.page(path.stem)
        assert found is not None and found[1], path
        doc = json.loads(path.read_text())
        assert doc["index"] == f"https://pypi.org/simple/{path.stem}/" and doc["fetched"], path
        for file in found[1]:
            assert file.url.startswith("https://files.pythonhosted.org/"), file.url
            if file.core_metadata:
                data = snapshot.metadata(file.core_metadata)
                assert data is not None and hashlib.sha256(data).hexdigest() == file.core_metadata, file.filename
                meta = coremeta.parse(data, name=file.name, version=file.version)
                assert meta.name == file.name, file.filename
                named.add(file.core_metadata)
    kept = {p.stem for p in (snapshot.data_dir() / "metadata").glob("*.metadata")}
    assert kept == named, f"metadata files no page names: {sorted(kept - named)}"


def test_the_loopback_index_serves_pages_and_metadata_and_nothing_else() -> None:
    accelerate = snapshot.page("accelerate")
    assert accelerate is not None
    wheel = next(f for f in accelerate[1] if f.core_metadata)
    with loopback.serve() as url:
        page = OPENER.open(f"{url}/accelerate/", timeout=10).read().decode()
        files = index.parse_html(page, "accelerate", f"{url}/accelerate/")
        assert {f.sha256 for f in files} == {f.sha256 for f in accelerate[1]}, "the page lists the bundled files"
        served = next(f for f in files if f.sha256 == wheel.sha256)
        assert served.core_metadata == wheel.core_metadata, "data-core-metadata carries the metadata's sha256"
        data = OPENER.open(served.url + ".metadata", timeout=10).read()
        assert hashlib.sha256(data).hexdigest() == wheel.core_metadata
        for missing in (f"{url}/no-such-project/", served.url, f"{url}/../../etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                OPENER.open(missing, timeout=10)
            assert caught.value.code == 404, missing


def _real_metadata(project: str) -> tuple[index.PypiFile, bytes]:
    found = snapshot.page(project)
    assert found is not None
    file = next(f for f in found[1] if f.core_metadata)
    return file, snapshot.metadata(file.core_metadata or "") or b""


def test_a_wheels_metadata_is_its_one_top_level_dist_info_metadata(tmp_path: Path) -> None:
    file, data = _real_metadata("peft")
    wheel = tmp_path / file.filename
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"peft-{file.version}.dist-info/METADATA", data)
        archive.writestr("peft/vendored/x.dist-info/METADATA", b"Metadata-Version: 2.1\nName: x\nVersion: 1\n")
    assert sources.wheel_metadata(wheel, file) == data
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("other-1.0.dist-info/METADATA", data)
    with pytest.raises(coremeta.BadMetadata):
        sources.wheel_metadata(wheel, file)
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with pytest.raises(coremeta.BadMetadata):
        sources.wheel_metadata(tmp_path / "bad.whl", file)


def test_an_sdists_metadata_is_its_pkg_info(tmp_path: Path) -> None:
    file, data = _real_metadata("peft")
    sdist = tmp_path / f"peft-{file.version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        info = tarfile.TarInfo(f"peft-{file.version}/PKG-INFO")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    assert sources.sdist_metadata(sdist, file) == data


def test_one_file_per_package_the_best_wheel_else_the_sdist() -> None:
    target = Target(MajorMinor(3, 12), "linux-64", MajorMinor(2, 28))
    sha = "0" * 64

    def f(name: str) -> pylock.LockedFile:
        return pylock.LockedFile(name, f"https://x/{name}", sha, None)

    names = ("cp312-cp312-manylinux_2_17_x86_64", "cp312-cp312-manylinux_2_28_x86_64", "py3-none-any",
             "cp312-cp312-manylinux_2_31_x86_64")  # fmt: skip
    wheels = tuple(f(f"regex-1.0-{tags}.whl") for tags in names)
    package = pylock.LockedPackage("regex", "1.0", None, wheels, f("regex-1.0.tar.gz"))
    assert choose(package, target).filename == "regex-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    only_sdist = pylock.LockedPackage("regex", "1.0", None, (wheels[3],), f("regex-1.0.tar.gz"))
    assert choose(only_sdist, target).filename == "regex-1.0.tar.gz", "no wheel fits: the sdist"
