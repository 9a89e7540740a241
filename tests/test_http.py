"""envsolver.net.http against real HTTP servers on 127.0.0.1 (no mocks): Basic auth from the URL or a netrc file,
anaconda.org path tokens, redirects that must not carry credentials away, timeouts, and --mirror parsing."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.server
import ssl
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.install import pkgcache
from envsolver.lock.lockfile import LockEntry
from envsolver.net.http import DownloadError, Retry, check_url, download, parse_mirrors
from envsolver.net.pace import Pace
from tests import httplab

USER, PASSWORD = "alice", "pw-S3CRET-1"
TOKEN = "tk-S3CRET-2"
BODY = b"archive bytes " * 1000
SECRETS = (PASSWORD, TOKEN, "S3CRET")


@dataclass
class Server:
    """A threaded HTTP server on 127.0.0.1; `seen` records (path, Authorization header) of every request."""

    url: str
    seen: list[tuple[str, str | None]] = field(default_factory=list)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


Route = Callable[[http.server.BaseHTTPRequestHandler], bool]


@contextmanager
def serve(route: Route, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    """Run a server on HOST whose GET handler is `route` (it answers and returns True, or returns False for a
    404); https when `tls` is given."""
    state = Server("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append((self.path, self.headers.get("Authorization")))
            try:
                if not route(self):
                    self.send_error(404)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up (the timeout test)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    with httplab.serving(server):
        state.url = f"{'https' if tls else 'http'}://{host}:{server.server_address[1]}"
        yield state


def send(handler: http.server.BaseHTTPRequestHandler, body: bytes, status: int = 200) -> bool:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    return True


def _mirror_route(handler: http.server.BaseHTTPRequestHandler) -> bool:
    path = handler.path
    if path == "/public/x.conda":
        return send(handler, BODY)
    if path.startswith("/private/"):
        if handler.headers.get("Authorization") != _basic(USER, PASSWORD):
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="mirror"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return True
        return send(handler, BODY) if path == "/private/x.conda" else False
    if path.startswith("/t/"):
        return send(handler, BODY) if path == f"/t/{TOKEN}/chan/x.conda" else send(handler, b"bad token", 403)
    if path == "/redirect/same":
        handler.send_response(302)
        handler.send_header("Location", "/private/x.conda")
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True
    if path == "/slow":  # far longer than the test's timeout and its bound, so the bound can be generous
        time.sleep(30)
        return send(handler, BODY)
    if path == "/truncated":
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(BODY) * 2))
        handler.end_headers()
        handler.wfile.write(BODY)
        handler.close_connection = True
        return True
    return False


@pytest.fixture
def mirror() -> Iterator[Server]:
    with serve(_mirror_route) as server:
        yield server


@pytest.fixture
def other() -> Iterator[Server]:
    """A second origin (another port): redirects to it must not carry the first one's credentials."""
    with serve(lambda handler: send(handler, BODY)) as server:
        yield server


def _userinfo(url: str, user: str = USER, password: str = PASSWORD) -> str:
    return url.replace("http://", f"http://{user}:{password}@")


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


def test_public_url(mirror: Server, tmp_path: Path) -> None:
    download(f"{mirror.url}/public/x.conda", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == BODY
    assert mirror.seen == [("/public/x.conda", None)]


def test_userinfo_is_sent_as_basic_auth_not_in_the_request(mirror: Server, tmp_path: Path) -> None:
    download(_userinfo(f"{mirror.url}/private/x.conda"), tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == BODY
    assert mirror.seen == [("/private/x.conda", _basic(USER, PASSWORD))]


def test_percent_encoded_userinfo_is_decoded(tmp_path: Path) -> None:
    user, password = "al@ce", "p/w:S3CRET?#"

    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        status = 200 if handler.headers.get("Authorization") == _basic(user, password) else 401
        return send(handler, BODY, status)

    with serve(route) as server:
        download(server.url.replace("http://", "http://al%40ce:p%2Fw%3AS3CRET%3F%23@") + "/x", tmp_path / "x")
        assert (tmp_path / "x").read_bytes() == BODY


def test_token_as_user_name(tmp_path: Path) -> None:
    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        return send(handler, BODY, 200 if handler.headers.get("Authorization") == _basic(TOKEN, "") else 401)

    with serve(route) as server:
        download(server.url.replace("http://", f"http://{TOKEN}@") + "/x", tmp_path / "x", environ={})
        assert (tmp_path / "x").read_bytes() == BODY


def test_no_credentials_is_refused_with_the_fix(mirror: Server, tmp_path: Path) -> None:
    target = tmp_path / "x"
    with pytest.raises(DownloadError) as info:
        download(f"{mirror.url}/private/x.conda", target, environ={"HOME": str(tmp_path)})
    message = str(info.value)
    assert "HTTP 401" in message and "netrc" in message and "USER:TOKEN@" in message
    assert isinstance(info.value, OSError) and info.value.exit_code == 2
    assert not target.exists()


def test_wrong_password_never_reaches_the_message(mirror: Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as info:
        download(_userinfo(f"{mirror.url}/private/x.conda", password="wrong-S3CRET"), tmp_path / "x", environ={})
    assert "HTTP 401" in str(info.value) and "***@127.0.0.1" in str(info.value)
    assert_clean(str(info.value))


@pytest.mark.parametrize("how", ["NETRC", "HOME", "default"])
def test_netrc_credentials(mirror: Server, tmp_path: Path, how: str) -> None:
    entry = "default" if how == "default" else "machine 127.0.0.1"
    netrc_file = tmp_path / ("custom-netrc" if how == "NETRC" else ".netrc")
    netrc_file.write_text(f"machine example.org login bob password other\n{entry} login {USER} password {PASSWORD}\n")
    environ = {"NETRC": str(netrc_file)} if how == "NETRC" else {"HOME": str(tmp_path)}
    download(f"{mirror.url}/private/x.conda", tmp_path / "x", environ=environ)
    assert (tmp_path / "x").read_bytes() == BODY


def test_netrc_env_wins_over_home(mirror: Server, tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text(f"machine 127.0.0.1 login {USER} password wrong\n")
    chosen = tmp_path / "chosen"
    chosen.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    download(f"{mirror.url}/private/x.conda", tmp_path / "x", environ={"HOME": str(tmp_path), "NETRC": str(chosen)})
    assert mirror.seen[-1] == ("/private/x.conda", _basic(USER, PASSWORD))


def test_userinfo_wins_over_netrc(mirror: Server, tmp_path: Path) -> None:
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine 127.0.0.1 login mallory password nope\n")
    download(_userinfo(f"{mirror.url}/private/x.conda"), tmp_path / "x", environ={"NETRC": str(netrc_file)})
    assert mirror.seen[-1][1] == _basic(USER, PASSWORD)


def test_broken_netrc_is_named_without_its_content(mirror: Server, tmp_path: Path) -> None:
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text(f"machine 127.0.0.1 login {USER}\npassword {PASSWORD} bogus-S3CRET\n")
    with pytest.raises(DownloadError) as info:
        download(f"{mirror.url}/private/x.conda", tmp_path / "x", environ={"NETRC": str(netrc_file)})
    assert "cannot be parsed (near line" in str(info.value) and "NETRC" in str(info.value)
    assert_clean(str(info.value))


def test_path_token_stays_in_the_fetched_url(mirror: Server, tmp_path: Path) -> None:
    download(f"{mirror.url}/t/{TOKEN}/chan/x.conda", tmp_path / "x", environ={})
    assert (tmp_path / "x").read_bytes() == BODY
    with pytest.raises(DownloadError) as info:
        download(f"{mirror.url}/t/wrong-S3CRET/chan/x.conda", tmp_path / "y", environ={})
    assert "HTTP 403" in str(info.value) and "/t/***/chan" in str(info.value)
    assert_clean(str(info.value))


def test_same_origin_redirect_keeps_the_credentials(mirror: Server, tmp_path: Path) -> None:
    download(_userinfo(f"{mirror.url}/redirect/same"), tmp_path / "x", environ={})
    assert mirror.seen[-1] == ("/private/x.conda", _basic(USER, PASSWORD))


def test_redirect_to_another_host_drops_the_credentials(other: Server, tmp_path: Path) -> None:
    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        handler.send_response(302)
        handler.send_header("Location", f"{other.url}/elsewhere.conda")
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True

    with serve(route) as server:
        download(_userinfo(f"{server.url}/x"), tmp_path / "x", environ={})
        assert server.seen == [("/x", _basic(USER, PASSWORD))]
    assert other.seen == [("/elsewhere.conda", None)]
    assert (tmp_path / "x").read_bytes() == BODY


# netrc's credentials, the `default` entry's above all, go to the URL's own origin only. Two hosts on one machine:
# 127.0.0.1 and 127.0.0.2 (all of 127/8 is the loopback on Linux).


def _redirect_to(location: str) -> Route:
    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True

    return route


def _netrc(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "netrc").write_text(text)
    return {"NETRC": str(tmp_path / "netrc")}


@pytest.mark.parametrize(
    "entries",
    [
        f"default login {USER} password DEFAULT-S3CRET\n",
        f"machine 127.0.0.1 login {USER} password A-S3CRET\ndefault login dflt password DEFAULT-S3CRET\n",
        f"machine 127.0.0.1 login {USER} password A-S3CRET\nmachine 127.0.0.2 login bob password B-S3CRET\n",
    ],
    ids=["default", "host-and-default", "both-hosts"],
)
def test_netrc_credentials_never_follow_a_redirect_to_another_host(tmp_path: Path, entries: str) -> None:
    with serve(lambda handler: send(handler, BODY), host="127.0.0.2") as other:
        with serve(_redirect_to(f"{other.url}/elsewhere.conda")) as first:
            download(f"{first.url}/x.conda", tmp_path / "x", environ=_netrc(tmp_path, entries))
        assert first.seen[0][1] is not None and first.seen[0][1].startswith("Basic "), first.seen
    assert other.seen == [("/elsewhere.conda", None)]
    assert (tmp_path / "x").read_bytes() == BODY


def test_netrc_credentials_follow_a_redirect_on_the_same_origin(mirror: Server, tmp_path: Path) -> None:
    download(f"{mirror.url}/redirect/same", tmp_path / "x", environ=_netrc(tmp_path, f"default login {USER} "
             f"password {PASSWORD}\n"))  # fmt: skip
    assert mirror.seen == [("/redirect/same", _basic(USER, PASSWORD)), ("/private/x.conda", _basic(USER, PASSWORD))]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), and its key."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    done = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return cert, key


@pytest.mark.parametrize("entry", ["default", "machine 127.0.0.1"])
def test_no_credentials_after_https_redirects_to_http(
    tmp_path: Path, certificate: tuple[Path, Path], entry: str
) -> None:
    """https://127.0.0.1:A -> http://127.0.0.1:B, the same host: the credentials would cross in clear text."""
    cert, key = certificate
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    environ = _netrc(tmp_path, f"{entry} login {USER} password {PASSWORD}\n")
    with serve(lambda handler: send(handler, BODY)) as plain:
        with serve(_redirect_to(f"{plain.url}/x.conda"), tls=server_side) as secure:
            download(f"{secure.url}/x.conda", tmp_path / "x", environ=environ,
                     context=ssl.create_default_context(cafile=str(cert)))  # fmt: skip
        assert secure.seen == [("/x.conda", _basic(USER, PASSWORD))]
    assert plain.seen == [("/x.conda", None)]


def _tls_server(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    cert, key = certificate
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    return server_side


@pytest.mark.parametrize("how", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "ssl_verify-path",
                                 "ssl_verify-false"])  # fmt: skip
def test_https_trusts_what_the_ca_settings_name(tmp_path: Path, certificate: tuple[Path, Path], how: str) -> None:
    """No context passed: download builds it from `environ` (envsolver.net.netconf), and requests' adapter uses it."""
    cert = str(certificate[0])
    environ = {"HOME": str(tmp_path)}
    if how.startswith("ssl_verify"):
        (tmp_path / ".condarc").write_text(f"ssl_verify: {'false' if how == 'ssl_verify-false' else cert}\n")
    else:
        environ[how] = cert
    with serve(lambda handler: send(handler, BODY), tls=_tls_server(certificate)) as secure, warnings.catch_warnings():
        warnings.simplefilter("error")  # urllib3's InsecureRequestWarning: netconf's own warning has said it
        download(f"{secure.url}/x.conda", tmp_path / "x", environ=environ)
    assert (tmp_path / "x").read_bytes() == BODY


def test_https_refuses_a_certificate_no_setting_trusts(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    """The self-signed certificate is in no store this process trusts: exit 2, the CA fix, not tried again."""
    with (
        serve(lambda handler: send(handler, BODY), tls=_tls_server(certificate)) as secure,
        pytest.raises(DownloadError) as info,
    ):
        download(f"https://{USER}:{PASSWORD}@{secure.url.removeprefix('https://')}/t/{TOKEN}/x.conda",
                 tmp_path / "x", environ={"HOME": str(tmp_path)}, retry=Retry(attempts=4, base_s=0.01))  # fmt: skip
    message = str(info.value)
    assert "CERTIFICATE_VERIFY_FAILED" in message and "REQUESTS_CA_BUNDLE" in message, message
    assert "tried" not in message and secure.seen == [], message
    assert_clean(message)
    assert not (tmp_path / "x").exists()


def _endless_redirect(location: str, sent: list[int]) -> Route:
    """A 302 whose body never ends (up to 256 MiB); `sent` gets the bytes written before the client hung up."""

    def route(handler: http.server.BaseHTTPRequestHandler) -> bool:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        written = 0
        try:
            while written < 256 << 20:
                handler.wfile.write(b"x" * (64 << 10))
                written += 64 << 10
        finally:
            sent.append(written)
        return True

    return route


def test_a_redirects_body_is_never_read(other: Server, tmp_path: Path) -> None:
    """requests' Session reads a redirect's whole body into memory (bench/requests_limits.py); download closes
    the redirect unread, so a server cannot make it read without end before the file."""
    sent: list[int] = []
    started = time.monotonic()
    with serve(_endless_redirect(f"{other.url}/elsewhere.conda", sent)) as server:
        download(f"{server.url}/x", tmp_path / "x", environ={})
        deadline = time.monotonic() + 20
        while not sent and time.monotonic() < deadline:  # the server's thread notices the closed connection
            time.sleep(0.05)
    assert (tmp_path / "x").read_bytes() == BODY
    assert sent and sent[0] < 32 << 20, f"the redirect's body: {sent} bytes written before the client hung up"
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/x", "http://[::1/x"])
def test_a_redirect_to_anything_but_http_is_refused(tmp_path: Path, location: str) -> None:
    with serve(_redirect_to(location)) as server, pytest.raises(DownloadError) as info:
        download(_userinfo(f"{server.url}/x"), tmp_path / "x", environ={})
    assert "the server redirects to" in str(info.value) and "--mirror" in str(info.value), info.value
    assert_clean(str(info.value))
    assert not (tmp_path / "x").exists()


def test_closed_port(tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as info:
        download(f"http://{USER}:{PASSWORD}@127.0.0.1:9/t/{TOKEN}/x.conda", tmp_path / "x", environ={})
    assert "refused" in str(info.value) and "reachable" in str(info.value)
    assert_clean(str(info.value))


def test_timeout(mirror: Server, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(DownloadError, match="timed out"):
        download(f"{mirror.url}/slow", tmp_path / "x", timeout=0.5, environ={}, retry=Retry(attempts=1))
    waited = time.monotonic() - started
    assert waited < 15, f"waited {waited:.1f} s for a 0.5 s timeout (the server answers after 30 s)"
    assert not (tmp_path / "x").exists()


def test_truncated_body_is_an_error(mirror: Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError):
        download(f"{mirror.url}/truncated", tmp_path / "x", environ={})
    assert not (tmp_path / "x").exists()


def test_file_urls(tmp_path: Path) -> None:
    source = tmp_path / "dir with space" / "x.conda"
    source.parent.mkdir()
    source.write_bytes(BODY)
    download(source.as_uri(), tmp_path / "x")
    assert (tmp_path / "x").read_bytes() == BODY
    with pytest.raises(DownloadError, match="exists"):
        download((tmp_path / "missing.conda").as_uri(), tmp_path / "y")


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        f"http://{USER}:{PASSWORD}@[::1/x",
        f"http://{USER}:pw/S3CRET@127.0.0.1/x",  # an unencoded '/' in the password
        f"http://{USER}:{PASSWORD}@127.0.0.1:99999/x",
        f"ftp://{USER}:{PASSWORD}@127.0.0.1/x",
        "http:///x",
        "file://otherhost/x",
        f"http://127.0.0.1/t/{TOKEN}/x y",
    ],
)
def test_malformed_urls_raise_download_error(url: str, tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as info:
        download(url, tmp_path / "x", environ={})
    assert_clean(str(info.value))
    assert str(info.value).rstrip().endswith(".")


def test_install_stages_archives_through_download(mirror: Server, tmp_path: Path) -> None:
    """install's staging (pkgcache.stage) fetches through download: credentials from the URL reach the server,
    a hash mismatch is refused and leaves no partial file."""
    entry = LockEntry(
        name="x",
        version="1",
        build="0",
        subdir="linux-64",
        platform="linux-64",
        url=f"{mirror.url}/private/x.conda",
        md5=None,
        sha256=hashlib.sha256(BODY).hexdigest(),
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    url = _userinfo(entry.url)
    staged = pkgcache.stage(entry, url, tmp_path / "cache", staging, download, lambda _: None)
    assert staged.read_bytes() == BODY
    refused = dataclasses.replace(entry, sha256="1" * 64)
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(pkgcache.IntegrityError) as info:
        pkgcache.stage(refused, url, tmp_path / "cache2", again, download, lambda _: None)
    assert not any(s in str(info.value) for s in SECRETS)
    assert not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ((), {}),
        (
            ("https://conda.anaconda.org=https://mirror.example.org/conda",),
            {"https://conda.anaconda.org": "https://mirror.example.org/conda"},
        ),
        (
            (f"https://conda.anaconda.org=https://{USER}:{PASSWORD}@mirror.example.org/t/{TOKEN}/conda",),
            {"https://conda.anaconda.org": f"https://{USER}:{PASSWORD}@mirror.example.org/t/{TOKEN}/conda"},
        ),
        (("file:///srv/a=b=file:///srv/c",), {"file:///srv/a=b": "file:///srv/c"}),
    ],
)
def test_parse_mirrors(items: tuple[str, ...], expected: dict[str, str]) -> None:
    assert parse_mirrors(items) == expected


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (f"FROM=http://user:{PASSWORD}@host/t/{TOKEN}/x", "is not FROM=TO with two URLs"),
        (f"https://conda.anaconda.org=http://[::1/t/{TOKEN}/", "cannot be parsed"),
        (f"https://conda.anaconda.org=https://mirror.example.org/conda?token={TOKEN}", "query"),
        (f"https://conda.anaconda.org=https://user:{PASSWORD}@/conda", "no host"),
        (f"https://conda.anaconda.org=https://u:a/{PASSWORD}@mirror.example.org/c", "percent-encoded"),
        ("https://conda.anaconda.org", "is not FROM=TO"),
        (f"https://conda.anaconda.org=ftp://user:{PASSWORD}@h/c", "not an http://"),
    ],
)
def test_bad_mirrors_are_refused_without_their_secrets(item: str, says: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_mirrors([item])
    assert says in str(info.value) and "--mirror" in str(info.value)
    assert_clean(str(info.value))


def test_check_url_accepts_channels() -> None:
    for url in ("https://mirror.example.org/conda-forge", f"http://{USER}:{PASSWORD}@h:8080/t/{TOKEN}/c", "file:///x"):
        check_url(url, "--channel", "https://mirror.example.org/conda-forge")


def test_cli_install_mirror_error_is_redacted(tmp_path: Path) -> None:
    """The issue's case: the --mirror error printed the credentials."""
    result = CliRunner().invoke(
        main,
        ["install", "-p", str(tmp_path / "env"), "--mirror", f"FROM=http://user:{PASSWORD}@host/t/{TOKEN}/x"],
        env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.exit_code == 2 and "is not FROM=TO" in result.output, result.output
    assert_clean(result.output)


def _trickle(handler: http.server.BaseHTTPRequestHandler) -> bool:
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    try:
        for _ in range(100000):
            handler.wfile.write(b"x")
            handler.wfile.flush()
            time.sleep(0.05)
    except OSError:  # the client shut the connection (an ssl.SSLError is an OSError)
        pass
    return True


@pytest.mark.parametrize("pace", [Pace(deadline_s=1), Pace(stall_s=1, stall_bytes=1024)], ids=["deadline", "stall"])
def test_https_that_trickles_is_cut_by_its_pace(tmp_path: Path, certificate: tuple[Path, Path], pace: Pace) -> None:
    """Over TLS too (envsolver.net.pace shuts the socket under the TLS layer): a body at 20 bytes a second ends
    past the deadline, or stalls below the rate, within about a second of it."""
    context = ssl.create_default_context(cafile=str(certificate[0]))
    with serve(_trickle, tls=_tls_server(certificate)) as secure, pytest.raises(DownloadError) as info:
        started = time.monotonic()
        try:
            download(f"{secure.url}/x.conda", tmp_path / "x", environ={}, context=context, retry=Retry(1), pace=pace)
        finally:
            took = time.monotonic() - started
    text = str(info.value)
    assert ("not done within 1 s" if pace.deadline_s else "it stalled") in text and took < 4, f"{took:.1f} s: {text}"
