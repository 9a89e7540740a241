"""Every download is bounded in time (envsolver.net.pace): a server that trickles, its body or its headers, stalls
below the minimum rate and is cut (and tried again); past a deadline the download ends at once, a wait between
tries included; a slow server above the rate is never cut. Servers: tests/httplab.py on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from envsolver.net.http import DownloadError, Retry, download
from envsolver.net.pace import Pace, Watchdog
from tests.httplab import Faults, serve

FAST_STALL = Pace(stall_s=1.0, stall_bytes=1024)


@pytest.mark.parametrize("headers", [False, True], ids=["body-trickles", "headers-trickle"])
def test_a_trickle_below_the_minimum_rate_stalls_and_is_tried_again(tmp_path: Path, headers: bool) -> None:
    faults = Faults(trickle_s=0.05, trickle_headers=headers)  # 20 bytes a second: no read ever times out
    with serve(tmp_path, faults) as lab, pytest.raises(DownloadError) as info:
        started = time.monotonic()
        try:
            download(f"{lab.url}/x-1-0.conda", tmp_path / "x", environ={}, retry=Retry(2, cap_s=0), pace=FAST_STALL)
        finally:
            took = time.monotonic() - started
    text = str(info.value)
    assert "it stalled (less than 1024 bytes in 1 s)" in text and "(tried 2 times)" in text, text
    assert lab.seen["/x-1-0.conda"] == 2 and 2 <= took < 6, f"{lab.seen} {took:.1f} s: {text}"
    assert not (tmp_path / "x").exists(), "the partial file is removed"


def test_a_deadline_ends_a_trickle_at_once_and_it_is_not_tried_again(tmp_path: Path) -> None:
    with serve(tmp_path, Faults(trickle_s=0.05, trickle_headers=True)) as lab, pytest.raises(DownloadError) as info:
        started = time.monotonic()
        try:
            download(f"{lab.url}/simple/x/", tmp_path / "x", environ={}, pace=Pace(deadline_s=1, deadline_fix="FIX"))
        finally:
            took = time.monotonic() - started
    text = str(info.value)
    assert "not done within 1 s, the time it is given. FIX" in text, text
    assert lab.seen["/simple/x/"] == 1 and took < 3, f"{lab.seen} {took:.1f} s: {text}"


def test_a_deadline_cuts_the_wait_for_a_retry_after(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x")
    faults = Faults(fail=5, retry_after="30")
    with serve(tmp_path, faults) as lab, pytest.raises(DownloadError) as info:
        started = time.monotonic()
        try:
            download(f"{lab.url}/x", tmp_path / "got", environ={}, retry=Retry(4, cap_s=30), pace=Pace(deadline_s=1))
        finally:
            took = time.monotonic() - started
    assert "not done within 1 s" in str(info.value) and took < 3, f"{took:.1f} s: {info.value}"


def test_a_deadline_cuts_urllib3s_own_wait_between_connections(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there: each connection is refused
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        download(f"http://127.0.0.1:{port}/x", tmp_path / "x", environ={}, retry=Retry(4, 10, 10), pace=Pace(1))
    took = time.monotonic() - started
    assert "not done within 1 s" in str(info.value) and took < 3, f"{took:.1f} s: {info.value}"


def test_a_slow_server_above_the_rate_is_never_cut(tmp_path: Path) -> None:
    data = bytes(range(256)) * 400  # 100 KiB, sent in 4 KiB pieces at 40 KiB/s: 2.5 s
    (tmp_path / "x.conda").write_bytes(data)
    with serve(tmp_path, Faults(bytes_per_s=40 << 10)) as lab:
        download(f"{lab.url}/x.conda", tmp_path / "got", environ={}, pace=Pace(stall_s=0.5, stall_bytes=4096))
    assert (tmp_path / "got").read_bytes() == data and lab.seen["/x.conda"] == 1, lab.seen


def test_a_socket_watched_after_the_deadline_is_shut_at_once() -> None:
    left, right = socket.socketpair()
    with left, right, Watchdog(Pace(deadline_s=0.01)) as dog:
        time.sleep(0.1)
        assert dog.expired and dog.remaining() == 0
        dog.watch(left)
        left.settimeout(1)
        started = time.monotonic()
        assert left.recv(1) == b"" and time.monotonic() - started < 0.5, "a read of a shut socket returns at once"
