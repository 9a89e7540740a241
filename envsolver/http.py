"""Fetch one URL into a file, with the credentials an authenticated mirror needs, and parse --mirror items.

Credentials come from the URL's user info (`https://alice:s3cret@mirror/...`, or a token as the user name)
or, when the URL has none, from a netrc file: $NETRC when set, else ~/.netrc (requests does the same; curl
reads ~/.netrc). They are sent as an `Authorization: Basic` header to the URL's own host only: a redirect to
another host gets the netrc entry for that host or nothing. An anaconda.org path token (`/t/TOKEN/`) stays in
the URL that is fetched, because it is the credential. No message ever carries a credential: every URL in
one goes through `redact_text`.
"""

from __future__ import annotations

import base64
import http.client
import netrc
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from envsolver import __version__
from envsolver.errors import BadInputError, EnvsolverError, Kind
from envsolver.redact import redact_text

CHUNK = 1 << 20
TIMEOUT_S = 60.0
SCHEMES = ("http", "https", "file")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_MIRROR = re.compile(r"(?P<old>.+?)=(?P<new>[A-Za-z][A-Za-z0-9+.\-]*://.*)", re.DOTALL)
AUTH_FIX = (
    "If the server needs credentials, put them in the URL (https://USER:TOKEN@host/...), or in a netrc file "
    "(a line `machine HOST login USER password TOKEN` in ~/.netrc, or in the file $NETRC names)."
)


class DownloadError(EnvsolverError, OSError):
    """A URL could not be fetched into its file (exit 2). Also an OSError, so a caller that catches OSError
    around a copy (install's `_copy`) catches it too. The message names the URL without its credentials."""

    kind: Kind = "fetch"


@dataclass(frozen=True)
class _Auth:
    """Who gets which Authorization header: the URL's own origin gets its user info, other hosts netrc's."""

    origin: tuple[str, str, int | None]
    userinfo: str | None
    netrc_file: Path | None

    def header(self, url: str) -> str | None:
        parts = urlsplit(url)
        if self.userinfo is not None and _origin(parts) == self.origin:
            return self.userinfo
        return _netrc_header(self.netrc_file, parts.hostname or "")


class _Redirect(urllib.request.HTTPRedirectHandler):
    """urllib drops unredirected headers on a redirect; this adds back the ones the new URL is owed."""

    def __init__(self, auth: _Auth) -> None:
        super().__init__()
        self.auth = auth

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            header = self.auth.header(new.full_url)
            if header is not None:
                new.add_unredirected_header("Authorization", header)
        return new


def download(url: str, target: Path, timeout: float = TIMEOUT_S, environ: Mapping[str, str] | None = None) -> None:
    """Fetch `url` (http, https or file) into the file `target`, streaming.

    `environ` (default os.environ) supplies NETRC and HOME for the netrc lookup. On any failure `target` is
    removed and DownloadError (an OSError) is raised with the URL redacted.
    """
    try:
        _download(url, target, timeout, os.environ if environ is None else environ)
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def _download(url: str, target: Path, timeout: float, environ: Mapping[str, str]) -> None:
    shown = redact_text(url)
    problem = _problem(url)
    if problem:
        raise DownloadError(f"cannot fetch {shown!r}: {problem}. Fix the URL in the lock, or rewrite it with --mirror.")
    parts = urlsplit(url)
    if parts.scheme == "file":
        _copy_file(parts, shown, target)
        return
    auth = _Auth(_origin(parts), _userinfo_header(parts), _netrc_path(environ))
    request = urllib.request.Request(_without_userinfo(parts), headers={"User-Agent": f"envsolver/{__version__}"})
    header = auth.header(request.full_url)
    if header is not None:
        request.add_unredirected_header("Authorization", header)
    opener = urllib.request.build_opener(_Redirect(auth))
    try:
        out = target.open("wb")
    except OSError as exc:
        raise DownloadError(
            f"cannot write {str(target)!r}: {_describe(exc)}. Check the directory is writable."
        ) from None
    try:
        with out, opener.open(request, timeout=timeout) as response:
            _stream(response, out, shown)
    except DownloadError:
        raise
    except urllib.error.HTTPError as exc:
        fix = AUTH_FIX if exc.code in (401, 403) else "Check the URL, or rewrite it to a mirror with --mirror FROM=TO."
        raise DownloadError(f"cannot fetch {shown!r}: HTTP {exc.code} {redact_text(str(exc.reason))}. {fix}") from None
    except urllib.error.URLError as exc:
        raise DownloadError(f"cannot fetch {shown!r}: {redact_text(str(exc.reason))}. {_fix_reach()}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise DownloadError(f"cannot fetch {shown!r}: {_describe(exc)}. {_fix_reach()}") from None


def _stream(response: http.client.HTTPResponse, out: IO[bytes], shown: str) -> None:
    received = 0
    while chunk := response.read(CHUNK):
        out.write(chunk)
        received += len(chunk)
    expected = response.headers.get("Content-Length")
    if expected is not None and expected.isdigit() and int(expected) != received:
        raise DownloadError(
            f"cannot fetch {shown!r}: the connection closed after {received} of {expected} bytes. "
            "Run the same command again; if it keeps failing, check the server or use another mirror."
        )


def _copy_file(parts: SplitResult, shown: str, target: Path) -> None:
    try:
        shutil.copyfile(unquote(parts.path), target)
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
