"""Two measured reasons envsolver.net.http uses requests' HTTPAdapter but not its Session (docs/downloads.md).

1. Session.send reads a redirect's whole body into memory before it returns, with allow_redirects=False and
   stream=True too: a 302 whose body never ends (tests/httplab.py's endless server, stopped at 256 MiB) grows
   the process by that much. envsolver.net.http.download closes the redirect unread.
2. With trust_env (requests' default), netrc's `default` entry is sent to the host a redirect names
   (Session.rebuild_auth asks netrc again for the new host, and `default` answers for every host).

Run: python bench/requests_limits.py   (no network: two servers on 127.0.0.1 and 127.0.0.2)
"""

from __future__ import annotations

import http.server
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from envsolver.net.http import download

ENDLESS = 256 << 20


def _serve(handler: type[http.server.BaseHTTPRequestHandler], host: str = "127.0.0.1") -> str:
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_address[1]}"


def redirect_body(target: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Connection", "close")
            self.end_headers()
            piece = b"x" * (64 << 10)
            try:
                for _ in range(ENDLESS // len(piece)):
                    self.wfile.write(piece)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            return None

    return Handler


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        Recorder.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        return None


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    final = _serve(Recorder)
    url = _serve(redirect_body(final + "/x"))
    with tempfile.TemporaryDirectory() as tmp:
        before, started = _rss_mib(), time.monotonic()
        download(url + "/x", Path(tmp) / "x", environ={})
        print(
            f"envsolver.net.http.download: {time.monotonic() - started:.2f} s, peak RSS +{_rss_mib() - before:.0f} MiB"
        )
    before, started = _rss_mib(), time.monotonic()
    with requests.Session() as session:
        response = session.get(url + "/x", allow_redirects=False, stream=True, timeout=60)
        response.close()
    print(
        f"requests.Session.get(allow_redirects=False, stream=True): {time.monotonic() - started:.2f} s, "
        f"peak RSS +{_rss_mib() - before:.0f} MiB (the redirect's body: {ENDLESS >> 20} MiB)"
    )

    other = _serve(Recorder, host="127.0.0.2")
    first = _serve(redirect_to_other(other + "/y"))
    with tempfile.TemporaryDirectory() as tmp:
        netrc = Path(tmp) / "netrc"
        netrc.write_text("default login alice password DEFAULT-SECRET\n")
        Recorder.seen.clear()
        download(first + "/x", Path(tmp) / "x", environ={"NETRC": str(netrc)})
        print(f"envsolver.net.http.download: the redirect target got Authorization={Recorder.seen[-1]!r}")
        os.environ["NETRC"] = str(netrc)
        Recorder.seen.clear()
        requests.get(first + "/x", timeout=60)
        print(f"requests.get (trust_env): the redirect target got Authorization={Recorder.seen[-1]!r}")


def redirect_to_other(target: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    return Handler


if __name__ == "__main__":
    main()
