"""core/boundedread.py: a file a user hands us is read only when it is a regular file, only up to a limit, and
never waits (a FIFO with no writer, a device that never ends)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from envsolver.core import boundedread


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b'{"name": "tqdm"}')
    assert boundedread.read_regular(path, 100) == b'{"name": "tqdm"}', "a file within the limit comes back as it is"


def test_a_file_at_the_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(b"x" * 64)
    assert boundedread.read_regular(path, 64) == b"x" * 64, "exactly LIMIT bytes is within the limit"
    with pytest.raises(boundedread.Refused, match="larger than 63 bytes"):
        boundedread.read_regular(path, 63)


def test_a_sparse_gigabyte_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse: no disk used
    started = time.monotonic()
    with pytest.raises(boundedread.Refused, match="larger than"):
        boundedread.read_regular(path, 1 << 20)
    assert time.monotonic() - started < 5, "only the limit (1 MiB) is read, not the gigabyte"


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "record.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(boundedread.Refused, match="a FIFO"):
        boundedread.read_regular(fifo, 1 << 20)
    assert time.monotonic() - started < 5, "a FIFO nobody writes must not be waited on"


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(path: str) -> None:
    with pytest.raises(boundedread.Refused, match="a character device"):
        boundedread.read_regular(Path(path), 1 << 20)


def test_a_directory_and_a_socket_are_refused(tmp_path: Path) -> None:
    with pytest.raises(boundedread.Refused, match="a directory"):
        boundedread.read_regular(tmp_path, 10)
    sock_path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock_path))
        with pytest.raises((boundedread.Refused, OSError)):  # open(2) of a socket fails (ENXIO) before fstat
            boundedread.read_regular(sock_path, 10)
    finally:
        server.close()


def test_a_symbolic_link_is_followed_only_when_allowed(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert boundedread.read_regular(link, 10) == b"{}", "follow=True (the default) reads through the link"
    with pytest.raises(boundedread.Refused, match="a symbolic link"):
        boundedread.read_regular(link, 10, follow=False)


def test_a_missing_file_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        boundedread.read_regular(tmp_path / "missing", 10)
    with pytest.raises(FileNotFoundError):
        boundedread.read_regular(tmp_path / "missing", 10, follow=False)
