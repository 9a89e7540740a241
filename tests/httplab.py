"""A local package server for download tests: serves a directory over HTTP on 127.0.0.1 and can fail on
purpose, per path: answer 503 (or 429 with Retry-After) to the first N requests, drop the connection halfway
through the body, ignore Range requests, or send slowly; or, for every path, stream without end (with no
length, or chunked, or under a Content-Length that lies). It records every request (path, Range header,
Proxy-less absolute form), the most requests it served at once, and the body bytes it sent. A second server
kind is a forwarding HTTP proxy (absolute-form GET, no CONNECT), and a CONNECT recorder that refuses every
tunnel."""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Faults:
    """What the server does wrong. Counts are per path (the path without the query)."""

    fail: int = 0  # the first N requests of each path get 503
    status: int = 503  # ... or this status (429, 404)
    retry_after: str | None = None  # a Retry-After header on those answers
    drop: int = 0  # the first N requests of each path get half the body, then the connection closes
    ranges: bool = True  # answer `Range: bytes=N-` with 206
    bytes_per_s: float | None = None  # send the body at this rate (in 4 KiB pieces)
    delay_s: float = 0.0  # wait this long before answering
    reason: str | None = None  # the reason phrase of a failing answer (default: the status's own, "Not Found")
    endless: str | None = None  # "close" (no length: until the connection closes) or "chunked": x's, any path
    length: int | None = None  # with `endless`: this Content-Length header, whatever is sent
    endless_status: int = 200  # with `endless`: the status of that answer (503: a failing server's endless page)
    endless_stop: int = 256 << 20  # an endless body stops after this many bytes, so a client that never stops
    # reading cannot fill the disk of the machine that runs the tests
    trickle_s: float | None = None  # any path: a 1 MiB answer, one byte every trickle_s seconds (never a read timeout)
    trickle_headers: bool = False  # with trickle_s: the status line and headers trickle too, not only the body


ENDLESS_PIECE = b"x" * (64 << 10)


@dataclass
class Lab:
    url: str
    root: Path
    faults: Faults
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    active: int = 0
    most_active: int = 0
    sent: int = 0  # body bytes written to the sockets
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(lab: Lab) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            with lab.lock:
                lab.requests.append((path, self.headers.get("Range")))
                lab.seen[path] += 1
                number = lab.seen[path]
                lab.active += 1
                lab.most_active = max(lab.most_active, lab.active)
            try:
                self._answer(path, number)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with lab.lock:
                    lab.active -= 1

        def _answer(self, path: str, number: int) -> None:
            faults = lab.faults
            time.sleep(faults.delay_s)
            if faults.endless is not None:
                self._endless(faults)
                return
            if faults.trickle_s is not None:
                self._trickle(faults.trickle_s, faults.trickle_headers)
                return
            file = (lab.root / path.lstrip("/")).resolve()
            if file.is_dir():  # a directory's index.html, as a static index (a PEP 503 simple page) serves it
                file = file / "index.html"
            if lab.root.resolve() not in file.parents or not file.is_file():
                self._status(404)
                return
            if number <= faults.fail:
                self._status(faults.status, faults.retry_after)
                return
            body = file.read_bytes()
            start = 0
            wanted = self.headers.get("Range")
            if faults.ranges and wanted and wanted.startswith("bytes=") and wanted.endswith("-"):
                start = int(wanted[6:-1])
                if start >= len(body):
                    self._status(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Accept-Ranges", "bytes" if faults.ranges else "none")
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            part = body[start:]
            if number <= faults.fail + faults.drop:
                self.wfile.write(part[: len(part) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._send(part, faults.bytes_per_s)

        def _send(self, data: bytes, rate: float | None) -> None:
            if rate is None:
                self.wfile.write(data)
                self._count(len(data))
                return
            for offset in range(0, len(data), 4096):
                self.wfile.write(data[offset : offset + 4096])
                self.wfile.flush()
                self._count(len(data[offset : offset + 4096]))
                time.sleep(4096 / rate)

        def _count(self, sent: int) -> None:
            with lab.lock:
                lab.sent += sent

        def _endless(self, faults: Faults) -> None:
            chunked = faults.endless == "chunked"
            self.send_response(faults.endless_status)
            if faults.length is not None:
                self.send_header("Content-Length", str(faults.length))
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            sent = 0
            while sent < faults.endless_stop:
                piece = ENDLESS_PIECE
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
                self._count(len(piece))

        def _trickle(self, every_s: float, headers: bool) -> None:
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n"
            self.close_connection = True
            if not headers:
                self.wfile.write(head)
                head = b""
            for byte in head + b"<" * (1 << 20):
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                self._count(1)
                time.sleep(every_s)

        def _status(self, code: int, retry_after: str | None = None) -> None:
            self.send_response(code, lab.faults.reason)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    return Handler


# How often a serving server looks for shutdown(): socketserver's default, 0.5 s, made every test that stops a
# server wait a quarter to half a second at its end (8.5 s of test_http.py's 24 s, 2026-12-02).
POLL_S = 0.02


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    """SERVER answering in a thread of its own for the time of the block; stopped and closed after it."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _run(handler: type[socketserver.BaseRequestHandler]) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with serving(server):
        yield server.server_address[1]


@contextmanager
def serve(root: Path, faults: Faults | None = None) -> Iterator[Lab]:
    """Serve ROOT on 127.0.0.1 with FAULTS (none by default) until the block ends."""
    lab = Lab("", root, faults or Faults())
    with _run(_handler(lab)) as port:
        lab.url = f"http://127.0.0.1:{port}"
        yield lab


@dataclass
class Proxy:
    url: str
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, target, Proxy-Authorization


@contextmanager
def proxy() -> Iterator[Proxy]:
    """A forwarding HTTP proxy: absolute-form GETs are fetched (without any proxy) and relayed; CONNECT is
    recorded and refused with 403, so an https request shows it tried to tunnel."""
    state = Proxy("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append(("GET", self.path, self.headers.get("Proxy-Authorization")))
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(self.path, timeout=10) as upstream:
                body = upstream.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_CONNECT(self) -> None:
            state.seen.append(("CONNECT", self.path, self.headers.get("Proxy-Authorization")))
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    with _run(Handler) as port:
        state.url = f"http://127.0.0.1:{port}"
        yield state


def channel_with_big(root: Path, big_bytes: int = 0) -> Path:
    """tests.conda_packages' channel of three tiny packages, plus `tiny-big` holding BIG_BYTES of
    incompressible text when BIG_BYTES > 0 (so a throttled download takes a while), indexed by rattler."""
    import secrets

    from envsolver.lock.solve import index_channel
    from tests.conda_packages import build_channel, build_package

    channel = build_channel(root)
    if big_bytes:
        text = secrets.token_hex(big_bytes // 2)  # bzip2 cannot shrink random hex below about half
        build_package(channel, "tiny-big", "1.0", {"share/big.txt": text})
        index_channel(channel)
    return channel


def write_lock(channel: Path, out: Path, specs: tuple[str, ...] = ("tiny-app",)) -> Path:
    """conda-lock.yml for SPECS solved from CHANNEL (file:// URLs, hashes from the channel's index)."""
    from envsolver.lock.solve import ChannelSource, solve
    from envsolver.lock.writers import condalock

    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(list(specs), [source], "linux-64", {"__unix": "0"}, out / "solve-cache")
    path = out / "conda-lock.yml"
    path.write_text(
        condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, {}, "test", "test")
    )
    return path
