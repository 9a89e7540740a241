"""Keep credentials out of written files: `user:password@` and conda `/t/<token>/` segments."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_TOKEN = re.compile(r"/t/[^/]+/")


def redact(url: str) -> str:
    """The URL without user info or an anaconda.org-style token; other text is returned unchanged."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1] if "@" in parts.netloc else parts.netloc
    path = _TOKEN.sub("/", parts.path)
    if not parts.scheme:
        return _TOKEN.sub("/", url)
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))
