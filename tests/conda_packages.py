"""Tiny synthetic conda packages for install tests: real .tar.bz2 and .conda archives with info/index.json and
info/paths.json, built on the fly, indexed into a local channel by rattler. Hostile variants (paths out of the
prefix, symbolic links, an index.json that names another package) are built the same way."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o755 if name.startswith("bin/") else 0o644  # what lies in bin/ is run
    tar.addfile(info, io.BytesIO(data))


def _bytes(content: str | bytes) -> bytes:
    return content if isinstance(content, bytes) else content.encode()


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mtime = 0
    tar.addfile(info)


def _tar_bytes(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """An uncompressed tar of (name, data, symlink target) members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, target in members:
            if target is not None:
                _add_symlink(tar, name, target)
            else:
                _add(tar, name, data or b"")
    return buffer.getvalue()


def build_package(
    channel: Path,
    name: str,
    version: str,
    files: dict[str, str] | dict[str, bytes] | dict[str, str | bytes],
    depends: tuple[str, ...] = (),
    subdir: str = "linux-64",
    build: str = "h0_0",
    symlinks: dict[str, str] | None = None,
    paths: list[dict[str, Any]] | None = None,
    index: dict[str, Any] | None = None,
    fmt: str = "tar.bz2",
) -> Path:
    """Write CHANNEL/SUBDIR/NAME-VERSION-BUILD.<fmt> holding `files` (path -> text or bytes) and `symlinks` (path
    -> target). `paths` replaces the generated paths.json entries; `index` overrides index.json keys."""
    target = channel / subdir
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{name}-{version}-{build}.{fmt}"
    index_doc = {
        "name": name,
        "version": version,
        "build": build,
        "build_number": 0,
        "depends": list(depends),
        "subdir": subdir,
        "license": "MIT",
        **(index or {}),
    }
    links = symlinks or {}
    generated = [
        {
            "_path": p,
            "path_type": "hardlink",
            "sha256": hashlib.sha256(_bytes(t)).hexdigest(),
            "size_in_bytes": len(_bytes(t)),
        }
        for p, t in sorted(files.items())
    ] + [{"_path": p, "path_type": "softlink"} for p in sorted(links)]
    paths_doc = {"paths_version": 1, "paths": paths if paths is not None else generated}
    payload = [(rel, _bytes(text), None) for rel, text in sorted(files.items())]
    payload += [(rel, None, target_) for rel, target_ in sorted(links.items())]
    info = [
        ("info/index.json", json.dumps(index_doc).encode(), None),
        ("info/paths.json", json.dumps(paths_doc).encode(), None),
        ("info/files", ("\n".join(sorted([*files, *links])) + "\n").encode(), None),
    ]
    if fmt == "tar.bz2":
        with tarfile.open(path, "w:bz2") as tar:
            for rel, data, link in payload + info:
                if link is not None:
                    _add_symlink(tar, rel, link)
                else:
                    _add(tar, rel, data or b"")
        return path
    import zstandard

    stem = path.name.removesuffix(".conda")
    compress = zstandard.ZstdCompressor().compress
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        archive.writestr(f"pkg-{stem}.tar.zst", compress(_tar_bytes(payload)))
        archive.writestr(f"info-{stem}.tar.zst", compress(_tar_bytes(info)))
    return path


def build_channel(root: Path, name: str = "channel") -> Path:
    """A local channel with three small packages, one depending on the others, indexed by rattler."""
    from envsolver.lock.solve import index_channel

    channel = root / name
    build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "tiny lib\n"})
    build_package(channel, "tiny-data", "2.1", {"share/tiny/data.txt": "data " * 100 + "\n"})
    build_package(
        channel, "tiny-app", "0.3", {"bin/tiny-app": "#!/bin/sh\necho tiny\n"}, depends=("tiny-lib >=1", "tiny-data")
    )
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    return channel


def explicit_lock(path: Path, archives: list[Path], platform: str = "linux-64") -> Path:
    """An explicit lock (url#sha256) naming `archives` by their file:// URLs, as a lock pins them: whatever the
    archives hold, their hashes match."""
    lines = [f"# platform: {platform}", "@EXPLICIT"]
    lines += [f"{a.as_uri()}#sha256={hashlib.sha256(a.read_bytes()).hexdigest()}" for a in archives]
    path.write_text("\n".join(lines) + "\n")
    return path
