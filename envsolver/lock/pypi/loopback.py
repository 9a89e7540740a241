"""The bundled PyPI snapshot served as a simple index on 127.0.0.1, so that uv resolves offline from the real
pages and metadata (uv reads a file:// index's wheels themselves; over http it takes PEP 658 metadata).

    GET /simple/NAME/                   PEP 503 page: one <a> per bundled file, href /files/SHA256/FILENAME with
                                        its #sha256, data-requires-python, data-yanked and, where the snapshot
                                        holds the file's metadata, data-core-metadata (PEP 714) and
                                        data-dist-info-metadata (PEP 658) "sha256=..."
    GET /files/SHA256/FILENAME.metadata that file's core metadata, as its wheel holds it
    anything else                       404 (a project the snapshot lacks has no page: uv sees no release)

The server binds an ephemeral port of the loopback interface only, answers GET and HEAD, and stops when the
`serve` block ends. The wheels themselves are not bundled: a URL uv writes is mapped back to PyPI's by its sha256
(snapshot.by_sha256).
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from envsolver.lock.pypi import snapshot
from envsolver.net import pypi_index as index

_PAGE = re.compile(r"/simple/([A-Za-z0-9._-]{1,128})/?")
_METADATA = re.compile(r"/files/([0-9a-f]{64})/([A-Za-z0-9._+!-]{1,255})\.metadata")


def page_html(project: str, base: str) -> bytes | None:
    """The PEP 503 page of PROJECT's bundled files, links under `base`; None when the snapshot has no page."""
    found = snapshot.page(project)
    if found is None:
        return None
    links = []
    for f in found[1]:
        attrs = [f'href="{base}/files/{f.sha256}/{html.escape(f.filename)}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.yanked:
            attrs.append('data-yanked=""')
        if f.core_metadata and snapshot.metadata(f.core_metadata) is not None:
            attrs += [
                f'data-core-metadata="sha256={f.core_metadata}"',
                f'data-dist-info-metadata="sha256={f.core_metadata}"',
            ]
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a><br/>")
    name = html.escape(index.normalize(project))
    body = "\n".join(links)
    return (
        f"<!DOCTYPE html>\n<html><head><title>Links for {name}</title></head><body>\n{body}\n</body></html>\n".encode()
    )


def metadata_of(sha256: str, filename: str) -> bytes | None:
    """The core metadata of the bundled file with this sha256 and name; None when there is none."""
    found = index.name_version(filename)
    file = snapshot.by_sha256(found[0], sha256) if found else None
    if file is None or file.filename != filename or not file.core_metadata:
        return None
    return snapshot.metadata(file.core_metadata)


class _Handler(BaseHTTPRequestHandler):
    server_version = "envsolver-snapshot"
    base = ""

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        body, kind = None, "text/html"
        if match := _PAGE.fullmatch(path):
            body = page_html(match.group(1), self.base)
        elif match := _METADATA.fullmatch(path):
            body, kind = metadata_of(match.group(1), match.group(2)), "application/octet-stream"
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve() -> Iterator[str]:
    """Serve the snapshot for the block; yields the index URL (http://127.0.0.1:PORT/simple)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    handler = type("Handler", (_Handler,), {"base": base})
    server.RequestHandlerClass = handler
    thread = threading.Thread(target=server.serve_forever, name="envsolver-pypi-snapshot", daemon=True)
    thread.start()
    try:
        yield f"{base}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
