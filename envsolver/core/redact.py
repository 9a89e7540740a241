"""Keep credentials out of files, output and messages.

Three forms of credential can ride in a URL, and all are handled wherever a URL appears:
  - user info:     https://alice:s3cret@mirror.example.org/conda-forge   (or a token as the user name)
  - a path token:  https://conda.anaconda.org/t/tk-1234/private           (anaconda.org's form)
  - a query value: https://mirror.example.org/conda-forge?token=tk-1234   (any key in SECRET_KEY_PARTS)

`redact(url)` gives the public form for written files (the credentials removed, the rest as it was);
`redact_text(text)` masks every credential in free text with `***`, for messages and foreign error text.
Neither parses the URL strictly, so neither can raise, and a malformed URL (`http://[::1`) loses its
credentials just the same. A secret is found by where it stands, never by what it looks like.
"""

from __future__ import annotations

import re
import string
from bisect import bisect_left
from collections.abc import Callable, Iterator

MASK = "***"
# The spelled-out forms envsolver's own messages use to show where credentials go; never a real secret.
PLACEHOLDERS = frozenset({"USER:TOKEN", "USER:PASSWORD", "USER", "TOKEN"})

# A query or fragment key whose name contains one of these is treated as a secret (case-insensitive, with
# '-' read as '_'): token, access_token, auth_token, private_token, X-Amz-Security-Token, api_key, apikey,
# key (Google), password, passwd, pwd, secret, client_secret, sig/signature (presigned URLs), credential.
SECRET_KEY_PARTS = ("token", "key", "passw", "pwd", "secret", "sig", "credential", "auth")

# What ends a URL: whitespace and the characters RFC 3986 never allows in one. A quote does not end it (it is
# a legal sub-delimiter, and stopping early would leave the rest of a secret behind).
_NOT_URL = r"\s\"<>`{}|\\^"
_URL_END = re.compile(rf"[{_NOT_URL}]")
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+.-")
# `/t/TOKEN`, also chained (`/t/t/TOKEN`, where the first `t` could be the token) so nothing is left over.
# Any text, URL or not: `conda.anaconda.org/t/TOKEN/x` names a channel without a scheme.
_PATH_TOKEN = re.compile(rf"(?:/t(?=/))+/[^/?#{_NOT_URL}]+")
# The segment after any `/t/`; overlapping matches, so `/t/t/TOKEN` masks both.
_PATH_TOKEN_SEGMENT = re.compile(rf"(?<=/t/)[^/?#{_NOT_URL}]+")
# Every `key=` that follows a query, parameter or fragment separator, overlapping ones included.
_PARAM = re.compile(rf"(?=([?&;#])([^=&;#?/{_NOT_URL}]*)=)")
# A value ends at the next parameter; a '#' does not end it (a token with an unencoded '#' is still secret).
_VALUE_END = re.compile(rf"[&;{_NOT_URL}]")
# A file:// URL carries no credential; its `/t/` is a real directory and is left alone.
_FILE_URL = re.compile(rf"(?<![A-Za-z0-9+.\-])file://[^{_NOT_URL}]*", re.IGNORECASE)


def redact(url: str) -> str:
    """The public form of `url`: user info, `/t/TOKEN` and secret query parameters removed.

    Any text is accepted and returned with its credentials removed; nothing is raised.
    """
    text = _replace(url, [(start, end, "") for start, end in _userinfo(url)])
    text = _outside_file_urls(text, lambda part: _PATH_TOKEN.sub("", part))
    return _remove_params(text)


def redact_text(text: str) -> str:
    """`text` with every credential in every URL in it replaced by `***`. Never raises."""
    cuts = [(start, end - 1, MASK) for start, end in _userinfo(text) if text[start : end - 1] not in PLACEHOLDERS]
    text = _replace(text, cuts)
    text = _outside_file_urls(
        text, lambda part: _PATH_TOKEN_SEGMENT.sub(lambda m: m[0] if m[0] in PLACEHOLDERS else MASK, part)
    )
    return _replace(text, [(start, end, MASK) for start, end in _merged(_secret_values(text))])


def _replace(text: str, cuts: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) range, in order and apart, replaced by its string."""
    pieces, last = [], 0
    for start, end, new in cuts:
        pieces += [text[last:start], new]
        last = end
    return "".join([*pieces, text[last:]])


def _userinfo(text: str) -> list[tuple[int, int]]:
    """(start, end) of every `userinfo@` after a `://`: up to the last '@' before the URL ends or the next URL
    starts, so a password with an unencoded '/', '?' or '#' (which no URL parser reads as user info) goes too.
    Linear in the text: error texts can be long."""
    marks = [m.start() for m in re.finditer("://", text)]
    ends = [m.start() for m in _URL_END.finditer(text)]
    schemes = [_scheme_start(text, mark) for mark in marks]
    out = []
    next_scheme = len(text)
    for n in range(len(marks) - 1, -1, -1):
        begin = marks[n] + 3
        index = bisect_left(ends, begin)
        end = min(ends[index] if index < len(ends) else len(text), next_scheme)
        at = text.rfind("@", begin, end)
        if at >= 0:
            out.append((begin, at + 1))
        scheme = schemes[n]
        if scheme is not None:
            next_scheme = scheme
    apart: list[tuple[int, int]] = []
    for start, end in reversed(out):
        if not apart or start >= apart[-1][1]:  # a span inside an earlier one is already covered
            apart.append((start, end))
    return apart


def _scheme_start(text: str, mark: int) -> int | None:
    """Where the scheme before the `://` at `mark` starts (its first letter); None when no scheme precedes it."""
    start = mark
    while start > 0 and text[start - 1] in _SCHEME_CHARS:
        start -= 1
    while start < mark and text[start] not in string.ascii_letters:
        start += 1
    return start if start < mark else None


def _is_secret(key: str) -> bool:
    name = key.lower().replace("-", "_")
    return any(part in name for part in SECRET_KEY_PARTS)


def _secret_values(text: str) -> Iterator[tuple[int, int, int]]:
    """(separator, value start, value end) of every secret `key=value`; intervals may overlap."""
    stops = [m.start() for m in _VALUE_END.finditer(text)]
    for match in _PARAM.finditer(text):
        if _is_secret(match.group(2)):
            separator = match.start()
            start = separator + 1 + len(match.group(2)) + 1
            index = bisect_left(stops, start)
            yield separator, start, stops[index] if index < len(stops) else len(text)


def _merged(values: Iterator[tuple[int, int, int]]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for _, start, end in sorted(values, key=lambda v: v[1]):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _remove_params(text: str) -> str:
    cuts: list[tuple[int, int, str]] = []
    for separator, _, end in sorted(_secret_values(text)):
        keep = text[separator] if text[separator] in "?#" else ""
        if cuts and separator < cuts[-1][1]:
            cuts[-1] = (cuts[-1][0], max(end, cuts[-1][1]), cuts[-1][2])
        else:
            cuts.append((separator, end, keep))
    if not cuts:
        return text
    out = _replace(text, cuts)
    # `?token=x&a=1` -> `?&a=1` -> `?a=1`; `?token=x` -> `?` -> `` (a separator left with nothing after it).
    out = re.sub(r"([?#])[&;]+", r"\1", out)
    return re.sub(rf"[?#](?=[#{_NOT_URL}]|$)", "", out)


def _outside_file_urls(text: str, change: Callable[[str], str]) -> str:
    pieces, last = [], 0
    for match in _FILE_URL.finditer(text):
        if "://" in match.group()[len("file://") :]:
            continue  # another URL inside it: not a plain file URL, so no exemption
        pieces += [change(text[last : match.start()]), match.group()]
        last = match.end()
    return "".join([*pieces, change(text[last:])])
