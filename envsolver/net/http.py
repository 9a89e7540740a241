"""Fetch one URL into a file, with the credentials an authenticated mirror needs, and parse --mirror items.

Credentials come from the URL's user info (`https://alice:s3cret@mirror/...`, or a token as the user name)
or, when the URL has none, from a netrc file: $NETRC when set, else ~/.netrc (requests does the same; curl
reads ~/.netrc): the entry for the URL's host, else the file's `default`. They are sent as an
`Authorization: Basic` header to the URL's own origin only (its scheme, host and port): a redirect to another
host or port, or from https to http, carries no credentials at all, neither the URL's nor any netrc entry, so
a `default` entry never reaches a host the user did not name and nothing meant for https travels in clear
text. An anaconda.org path token (`/t/TOKEN/`) stays in the URL that is fetched, because it is the
credential. No message ever carries a credential: every URL in
one goes through `redact_text`.

Every body is bounded (envsolver.net.bodylimit): by the file's size where the caller knows it, else by the ceiling
($ENVSOLVER_MAX_DOWNLOAD). A body announced or sent past its limit is refused at once, never tried again. Every
download is bounded in time too (envsolver.net.pace): by a minimum rate, and by a deadline where the caller sets one.

The bytes travel through requests and urllib3 (envsolver.net.transport, imported when a download over http(s)
begins): requests' adapter, proxies and TLS, urllib3's Retry. What stays here, and why: docs/downloads.md.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import netrc
import os
import random
import re
import ssl
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urljoin, urlsplit, urlunsplit

from envsolver import __version__
from envsolver.core.errors import BadInputError, EnvsolverError, Kind
from envsolver.core.redact import redact_text
from envsolver.net import bodylimit, netconf
from envsolver.net.bodylimit import Limit
from envsolver.net.pace import Pace, Watchdog

if TYPE_CHECKING:  # imported where a download over http(s) begins (envsolver.net.transport says why)
    import urllib3

    from envsolver.net import transport

CHUNK = 1 << 18  # read1 returns what has arrived, up to this; a cancel is seen between chunks
TIMEOUT_S = 60.0
SCHEMES = ("http", "https", "file")
_TRANSIENT_STATUS = frozenset({408, 429, *range(500, 600)})  # answers that another try may cure
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_CONTENT_RANGE = re.compile(r"bytes +([0-9]{1,18})-[0-9]{1,18}/(?:[0-9]{1,18}|\*)")
_NUMBER = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit() takes '²', which int() refuses
_MIRROR = re.compile(r"(?P<old>.+?)=(?P<new>[A-Za-z][A-Za-z0-9+.\-]*://.*)", re.DOTALL)
_FIX_URL = "Check the URL, or rewrite it to a mirror with --mirror FROM=TO."
AUTH_FIX = (
    "If the server needs credentials, put them in the URL (https://USER:TOKEN@host/...), or in a netrc file "
    "(a line `machine HOST login USER password TOKEN` in ~/.netrc, or in the file $NETRC names)."
)


class DownloadError(EnvsolverError, OSError):
    """A URL could not be fetched into its file (exit 2). Also an OSError, so a caller that catches OSError
    around a copy (install's `_copy`) catches it too. The message names the URL without its credentials."""

    kind: Kind = "fetch"
    status: int | None = None  # the HTTP status the server answered, where it answered one


@dataclass(frozen=True)
class _Auth:
    """Who gets an Authorization header: the fetched URL's own origin, with its user info, else the netrc entry
    for its host (or netrc's `default`); any other origin (a redirect elsewhere, https -> http) gets none."""

    origin: tuple[str, str, int | None]
    userinfo: str | None
    netrc_file: Path | None

    def header(self, url: str) -> str | None:
        parts = urlsplit(url)
        try:
            elsewhere = _origin(parts) != self.origin
        except ValueError:  # a port that is not a number in range: not this origin
            return None
        if elsewhere:
            return None
        if self.userinfo is not None:
            return self.userinfo
        return _netrc_header(self.netrc_file, parts.hostname or "")


@dataclass(frozen=True)
class Retry:
    """How often a transient failure is tried again: ATTEMPTS tries in all, waiting a random time up to
    BASE_S * 2**n (full jitter) after the n-th failure, and never more than CAP_S (a server's Retry-After is
    honoured up to CAP_S too)."""

    attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 30.0

    def wait(self, failures: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.cap_s)
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** (failures - 1)))


@dataclass
class Watch:
    """What a download reports and obeys: the total size when known, bytes as they arrive (negative when a
    restart drops what was received), and a cancel event checked between chunks and during waits."""

    total: Callable[[int], None] = lambda _: None
    received: Callable[[int], None] = lambda _: None
    cancel: threading.Event = field(default_factory=threading.Event)


class Cancelled(DownloadError):
    """The download was cancelled (Ctrl-C in another thread); the partial file is removed."""

    kind: Kind = "interrupted"


class Mismatch(DownloadError):
    """A downloaded file is not the one its sha256 names (exit 2); the file is removed."""

    kind: Kind = "integrity"


class TooLarge(DownloadError):
    """A body past its limit (the file's size, or the ceiling); the partial file is removed, the URL not tried
    again (exit 2)."""

    kind: Kind = "fetch"


class _Transient(Exception):
    """A failure worth another try: what happened, the fix should it be the last, a Retry-After in seconds."""

    def __init__(self, what: str, fix: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.what, self.fix, self.retry_after = what, fix, retry_after


def download(
    url: str,
    target: Path,
    timeout: float = TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    retry: Retry = Retry(),
    watch: Watch | None = None,
    context: ssl.SSLContext | None = None,
    size: int | None = None,
    ceiling: int | None = None,
    sha256: str | None = None,
    pace: Pace | None = None,
) -> None:
    """Fetch `url` (http, https or file) into the file `target`, streaming.

    `environ` (default os.environ) supplies NETRC and HOME for the netrc lookup, the proxy variables and, unless
    `context` is given, the certificate settings (envsolver.net.netconf). Transient failures (a reset or dropped
    connection, a timeout, HTTP 408, 429, 5xx) are tried again as `retry` says, resuming with a Range request
    where the server allows it.
    The body may hold at most `size` bytes where the file's size is known, else `ceiling` (default: from
    $ENVSOLVER_MAX_DOWNLOAD in `environ`, envsolver.net.bodylimit); a body announced or sent past it is refused and
    not tried again. With `sha256` (hex), the whole file must have that digest (a file whose size and sha256 a
    record gives: download(url, path, size=..., sha256=...)); else the caller proves the content itself.
    `pace` (envsolver.net.pace; by default its minimum rate alone) bounds the time: an attempt that brings less
    than the minimum rate has stalled and is tried again as a timeout is; past the deadline (the whole download)
    it fails at once.
    On any failure `target` is removed and DownloadError (an OSError) is raised with the URL redacted;
    Mismatch for another sha256, Cancelled when `watch.cancel` is set; BadInputError for an
    $ENVSOLVER_MAX_DOWNLOAD that is not a size.
    """
    try:
        env = os.environ if environ is None else environ
        limit = bodylimit.for_file(size, bodylimit.ceiling(env) if ceiling is None else ceiling)
        _download(url, target, timeout, env, retry, watch or Watch(), context, limit, pace or Pace())
        if sha256 is not None:
            _prove(target, sha256.lower(), redact_text(url))
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def _download(
    url: str,
    target: Path,
    timeout: float,
    environ: Mapping[str, str],
    retry: Retry,
    watch: Watch,
    context: ssl.SSLContext | None,
    limit: Limit,
    pace: Pace,
) -> None:
    shown = redact_text(url)
    problem = _problem(url)
    if problem:
        raise DownloadError(f"cannot fetch {shown!r}: {problem}. Fix the URL in the lock, or rewrite it with --mirror.")
    parts = urlsplit(url)
    if parts.scheme == "file":
        _copy_file(parts, shown, target, limit)
        return
    from envsolver.net import transport  # requests and urllib3: only a download over http(s) needs them

    try:
        target.open("wb").close()
    except OSError as exc:
        raise DownloadError(
            f"cannot write {str(target)!r}: {_describe(exc)}. Check the directory is writable."
        ) from None
    auth = _Auth(_origin(parts), _userinfo_header(parts), _netrc_path(environ))
    tls = (lambda: context) if context is not None else (lambda: netconf.tls(environ).context())
    with (
        Watchdog(pace) as dog,
        transport.Way(auth.header, netconf.proxies(environ), tls, timeout, f"envsolver/{__version__}", dog) as way,
    ):
        attempts, failures = max(retry.attempts, 1), 0
        while True:
            if watch.cancel.is_set():
                raise Cancelled(f"cancelled fetching {shown!r}.")
            dog.attempt()
            retries = transport.Retries.make(
                attempts - failures - 1,
                lambda n, header: retry.wait(n, retry_after(header)),
                watch.cancel,
                failures,
                dog,
            )
            try:
                _attempt(way, _without_userinfo(parts), target, shown, watch, limit, retries)
                _paced(dog, shown)  # a body without a length that the watchdog cut ends as if whole
                return
            except transport.WaitCancelled:
                raise Cancelled(f"cancelled fetching {shown!r}.") from None
            except transport.Expired:
                raise _late(shown, dog.pace) from None
            except (_Transient, DownloadError) as exc:
                cut = _paced_error(dog, shown)  # the watchdog's reason, where it shut the attempt's sockets
                if isinstance(cut, DownloadError):
                    raise cut from None
                if cut is None and isinstance(exc, DownloadError):
                    raise
                transient = cut if cut is not None else exc
                assert isinstance(transient, _Transient)
                failures += retries.tally.retries + 1
                if failures >= attempts:
                    raise DownloadError(f"{transient.what} (tried {failures} times). {transient.fix}") from None
                wait = retry.wait(failures, transient.retry_after)
                left = dog.remaining()
                if watch.cancel.wait(wait if left is None else min(wait, left)):
                    raise Cancelled(f"cancelled fetching {shown!r}.") from None
                if left is not None and left <= wait:
                    raise _late(shown, dog.pace) from None


def _paced(dog: Watchdog, shown: str) -> None:
    """Raise what the watchdog found, if it cut the attempt: DownloadError past the deadline, _Transient for a
    stall."""
    problem = _paced_error(dog, shown)
    if problem is not None:
        raise problem


def _paced_error(dog: Watchdog, shown: str) -> DownloadError | _Transient | None:
    if dog.expired:
        return _late(shown, dog.pace)
    if dog.stalled:
        pace = dog.pace
        return _Transient(
            f"cannot fetch {shown!r}: it stalled (less than {pace.stall_bytes} bytes in {pace.stall_s:g} s)",
            _fix_reach(),
        )
    return None


def _late(shown: str, pace: Pace) -> DownloadError:
    return DownloadError(
        f"cannot fetch {shown!r}: not done within {pace.deadline_s:g} s, the time it is given. {pace.deadline_fix}"
    )


def _redirected(url: str, location: str, shown: str) -> str:
    """The URL a Location header sends `url` to, without user info or fragment. Raises DownloadError unless it
    is an http(s) URL with a host (a server never sends the download to a local file)."""
    problem: str | None
    try:
        new = urljoin(url, location)
    except ValueError:  # urljoin parses both: a Location such as http://[::1/x
        new, problem = location, "it cannot be parsed as a URL"
    else:
        problem = _problem(new)
    if problem is None and urlsplit(new).scheme not in ("http", "https"):
        problem = "it is not an http:// or https:// URL"
    if problem:
        raise DownloadError(
            f"cannot fetch {shown!r}: the server redirects to {redact_text(new)!r}, and {problem}. Check the URL, "
            "or rewrite it to a mirror with --mirror FROM=TO."
        )
    return _without_userinfo(urlsplit(new))


def _attempt(
    way: transport.Way,
    url: str,
    target: Path,
    shown: str,
    watch: Watch,
    limit: Limit,
    retries: transport.Retries,
) -> None:
    """One GET into `target` (urllib3 tries it again within `retries`), resuming after the bytes it holds when
    the server answers the Range with 206. Raises _Transient for what another try may cure, DownloadError for
    what it will not (a body past `limit`, a refused certificate, a client error)."""
    import http.client

    import requests
    import urllib3

    from envsolver.net import transport

    have = target.stat().st_size
    try:
        with way.get(url, have, retries, lambda old, new: _redirected(old, new, shown)) as response:
            status, reason = response.status_code, redact_text(str(response.reason or ""))
            if status in _TRANSIENT_STATUS:
                raise _Transient(
                    f"cannot fetch {shown!r}: HTTP {status} {reason}",
                    "The server is busy or failing: run the same command again later, or use another mirror with "
                    "--mirror FROM=TO.",
                    retry_after(response.headers.get("Retry-After")),
                )
            if status == 416 and have:  # the bytes held are not a prefix the server knows: start again
                target.open("wb").close()
                watch.received(-have)
                raise _Transient(f"cannot fetch {shown!r}: HTTP 416 for a resumed download", _fix_reach())
            if not 200 <= status <= 299:
                fix = AUTH_FIX if status in (401, 403) else _FIX_URL
                failed = DownloadError(f"cannot fetch {shown!r}: HTTP {status} {reason}. {fix}")
                failed.status = status
                raise failed
            resumed = have > 0 and status == 206 and range_start(response.headers.get("Content-Range", "")) == have
            if not resumed:
                watch.received(-have)
                have = 0
            with target.open("ab" if resumed else "wb") as out:
                body = response.headers.get("Content-Length")
                _stream(response.raw, body, out, shown, have, watch, limit, way.watchdog.received)
    except (DownloadError, _Transient):
        raise
    except transport.Redirects:
        raise DownloadError(
            f"cannot fetch {shown!r}: more than {transport.MAX_REDIRECTS} redirects. Check the URL, or rewrite it "
            "to a mirror with --mirror FROM=TO."
        ) from None
    except requests.exceptions.SSLError as exc:
        raise DownloadError(
            f"cannot fetch {shown!r}: {transport.reason(exc)}. The server's certificate is not trusted here: point "
            "REQUESTS_CA_BUNDLE (or SSL_CERT_FILE, or conda's ssl_verify) at your site's CA bundle."
        ) from None
    except (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError):
        what = f"cannot fetch {shown!r}: timed out (no answer within {way.timeout:g} s)"
        raise _Transient(what, _fix_reach()) from None
    except requests.exceptions.ConnectionError as exc:  # a refused or dropped connection, a proxy's refusal
        raise _Transient(f"cannot fetch {shown!r}: {transport.reason(exc)}", _fix_reach()) from None
    except requests.exceptions.RequestException as exc:  # a URL or proxy URL requests cannot use
        raise DownloadError(
            f"cannot fetch {shown!r}: requests cannot send it ({type(exc).__name__}). Check the URL and the proxy "
            "variables (HTTPS_PROXY, HTTP_PROXY)."
        ) from None
    except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException, ValueError) as exc:
        raise _Transient(f"cannot fetch {shown!r}: {transport.reason(exc)}", _fix_reach()) from None


def range_start(header: str) -> int | None:
    """The first byte of a Content-Range header (`bytes 100-199/200` -> 100), or None when it is not one."""
    match = _CONTENT_RANGE.fullmatch(header.strip())
    return int(match.group(1)) if match else None


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    if _NUMBER.fullmatch(value.strip()):
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
        return when.timestamp() - time.time() if when.tzinfo else None
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _stream(
    body: urllib3.BaseHTTPResponse,
    length: str | None,
    out: IO[bytes],
    shown: str,
    have: int,
    watch: Watch,
    limit: Limit,
    paced: Callable[[int], None],
) -> None:
    """The body into `out` after the `have` bytes it holds; never more than `limit` bytes in all (urllib3 reads
    no further than a Content-Length), each chunk counted by `paced` (the watchdog's rate). Bytes as sent: a
    Content-Encoding is not decoded (identity was asked)."""
    received = 0
    expected = int(length) if length is not None and _NUMBER.fullmatch(length.strip()) else None
    if expected is not None and have + expected > limit.bytes:
        raise _too_big(shown, f"the server announces {have + expected} bytes", limit)
    if expected is not None or limit.exact:
        watch.total(have + expected if expected is not None else limit.bytes)
    while chunk := body.read1(CHUNK, decode_content=False):
        if watch.cancel.is_set():
            raise Cancelled(f"cancelled fetching {shown!r}.")
        if have + received + len(chunk) > limit.bytes:
            raise _too_big(shown, f"the server sent more than {limit.bytes} bytes", limit)
        out.write(chunk)
        received += len(chunk)
        watch.received(len(chunk))
        paced(len(chunk))
    if expected is not None and expected != received:
        raise _Transient(
            f"cannot fetch {shown!r}: the connection closed after {have + received} of {have + expected} bytes",
            "Run the same command again; if it keeps failing, check the server or use another mirror.",
        )


def _prove(target: Path, expected: str, shown: str) -> None:
    hasher = hashlib.sha256()
    with target.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
    if hasher.hexdigest() != expected:
        raise Mismatch(
            f"{shown!r} is not the file its record names: sha256 {hasher.hexdigest()}, expected {expected}; it was "
            "removed. Run the same command again; if it fails the same way, the server holds other bytes: check it, "
            "or fetch from another with --mirror FROM=TO."
        )


def _too_big(shown: str, what: str, limit: Limit) -> TooLarge:
    return TooLarge(f"cannot fetch {shown!r}: {what}, past {limit.what()}. {limit.fix()}")


def _copy_file(parts: SplitResult, shown: str, target: Path, limit: Limit) -> None:
    """Copy a local file, a regular one only (a FIFO or a device is refused, not read), up to `limit`."""
    try:
        fd = os.open(unquote(parts.path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DownloadError(f"cannot fetch {shown!r}: it is not a regular file. Point the URL at the archive.")
            with target.open("wb") as out:
                copied = 0
                while chunk := src.read(CHUNK):
                    copied += len(chunk)
                    if copied > limit.bytes:
                        raise _too_big(shown, f"the file holds more than {limit.bytes} bytes", limit)
                    out.write(chunk)
    except DownloadError:
        raise
    except OSError as exc:
        raise DownloadError(
            f"cannot fetch {shown!r}: {_describe(exc)}. Check the path exists and is readable."
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return redact_text(str(exc)) or type(exc).__name__


def _fix_reach() -> str:
    return "Check the URL is reachable from this host, or rewrite it to a mirror with --mirror FROM=TO."


def _origin(parts: SplitResult) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname or "", parts.port or default


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _userinfo_header(parts: SplitResult) -> str | None:
    if "@" not in parts.netloc:
        return None
    return _basic(unquote(parts.username or ""), unquote(parts.password or ""))


def _without_userinfo(parts: SplitResult) -> str:
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _netrc_path(environ: Mapping[str, str]) -> Path | None:
    if environ.get("NETRC"):
        return Path(environ["NETRC"]).expanduser()
    home = environ.get("HOME")
    return Path(home) / ".netrc" if home else None


def _netrc_header(path: Path | None, host: str) -> str | None:
    """Basic auth from the netrc entry for `host` (or its `default`); None when there is no file or entry.
    Raises DownloadError for a file that exists but cannot be read (its content is never quoted)."""
    if path is None or not host or not path.is_file():
        return None
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except netrc.NetrcParseError as exc:
        raise DownloadError(
            f"the netrc file {str(path)!r} cannot be parsed (near line {exc.lineno}), so no credentials could be "
            f"looked up for {host!r}. Fix that part (`machine HOST login USER password TOKEN`), or point NETRC at "
            "another file."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DownloadError(
            f"the netrc file {str(path)!r} cannot be read ({_describe(exc)}). Fix its permissions or encoding, "
            "or point NETRC at another file."
        ) from None
    if entry is None:
        return None
    login, _, password = entry
    return _basic(login, password or "")


def _problem(url: str) -> str | None:
    """Why `url` is not an http(s) URL with a host or a local file:// URL; None when it is one."""
    if _CONTROL.search(url):
        return "it contains a space or a control character"
    try:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and "@" in parts.path + parts.query + parts.fragment:
            return (
                "an '@' after the host: a password with '/', '?' or '#' in it must be percent-encoded "
                "(%2F, %3F, %23, and %40 for '@')"
            )
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return "it cannot be parsed as a URL"  # the parser's own words may quote part of a password
    if parts.scheme not in SCHEMES:
        return "it is not an http://, https:// or file:// URL"
    if parts.scheme == "file":
        return None if parts.netloc in ("", "localhost") else "a file:// URL names no host (file:///absolute/path)"
    return None if parts.hostname else "it names no host"


def check_url(url: str, what: str, example: str) -> None:
    """Raise BadInputError (exit 2) unless `url` is an http(s) URL with a host, or a local file:// URL, with no
    query or fragment (file paths are appended to it). `what` names the option in the message (`--channel`),
    `example` is a URL that would be accepted."""
    problem = _problem(url)
    if problem is None and ("?" in url or "#" in url):
        problem = (
            "it has a query or fragment, and file paths are appended to this URL, so a ?token= in it would "
            "never reach the server as one. Put a token in the path (https://HOST/t/TOKEN/...) or the user "
            "info (https://USER:TOKEN@HOST/...) instead"
        )
    if problem:
        raise BadInputError(f"{what} {redact_text(url)!r} is not usable: {problem}. Pass a URL such as {example}.")


def parse_mirrors(items: Sequence[str]) -> dict[str, str]:
    """`FROM=TO` items of --mirror -> {FROM: TO}; TO may carry credentials. Raises BadInputError (exit 2)."""
    example = "https://conda.anaconda.org=https://mirror.example.org/conda"
    out: dict[str, str] = {}
    for item in items:
        match = _MIRROR.fullmatch(item)
        if match is None or "://" not in match["old"]:
            raise BadInputError(
                f"--mirror {redact_text(item)!r} is not FROM=TO with two URLs. Pass e.g. --mirror {example}."
            )
        for url in (match["old"], match["new"]):
            check_url(url, "--mirror", "https://mirror.example.org/conda")
        out[match["old"]] = match["new"]
    return out
