"""Tiny synthetic conda packages for install tests: real .tar.bz2 archives with info/index.json and
info/paths.json, built on the fly, indexed into a local channel by rattler."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def build_package(
    channel: Path,
    name: str,
    version: str,
    files: dict[str, str],
    depends: tuple[str, ...] = (),
    subdir: str = "linux-64",
    build: str = "h0_0",
) -> Path:
    """Write CHANNEL/SUBDIR/NAME-VERSION-BUILD.tar.bz2 holding `files` (path -> text)."""
    target = channel / subdir
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{name}-{version}-{build}.tar.bz2"
    index = {
        "name": name,
        "version": version,
        "build": build,
        "build_number": 0,
        "depends": list(depends),
        "subdir": subdir,
        "license": "MIT",
    }
    paths = {
        "paths_version": 1,
        "paths": [
            {
                "_path": p,
                "path_type": "hardlink",
                "sha256": hashlib.sha256(t.encode()).hexdigest(),
                "size_in_bytes": len(t.encode()),
            }
            for p, t in sorted(files.items())
        ],
    }
    with tarfile.open(path, "w:bz2") as tar:
        for rel, text in sorted(files.items()):
            _add(tar, rel, text.encode())
        _add(tar, "info/index.json", json.dumps(index).encode())
        _add(tar, "info/paths.json", json.dumps(paths).encode())
        _add(tar, "info/files", ("\n".join(sorted(files)) + "\n").encode())
    return path


def build_channel(root: Path) -> Path:
    """A local channel with three small packages, one depending on the others, indexed by rattler."""
    from envsolver.solve import index_channel

    channel = root / "channel"
    build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "tiny lib\n"})
    build_package(channel, "tiny-data", "2.1", {"share/tiny/data.txt": "data " * 100 + "\n"})
    build_package(
        channel, "tiny-app", "0.3", {"bin/tiny-app": "#!/bin/sh\necho tiny\n"}, depends=("tiny-lib >=1", "tiny-data")
    )
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    return channel
