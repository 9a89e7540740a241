"""What `make --channel` takes, as conda takes it: a channel name (`conda-forge`, `nvidia`,
`conda-forge/label/broken`), which conda maps onto its default channel_alias https://conda.anaconda.org/NAME,
or a full http(s) or file:// URL (a site mirror, a local channel), checked by envsolver.net.http.check_url.

A name's grammar: one or two path words, `OWNER` or `OWNER/label/LABEL`, each starting with a letter or a digit
and made of letters, digits, '.', '_' and '-' (anaconda.org's owner and label names; conda-forge, nvidia,
pytorch, rapidsai). Nothing else passes: no other '/', no '..', no space, no shell or URL character, so a name
appended to the alias is one path of that host and one shell word.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from envsolver.core.errors import BadInputError

ALIAS = "https://conda.anaconda.org"  # conda's default channel_alias
_WORD = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_NAME = re.compile(rf"(?P<owner>{_WORD})(?:/label/(?P<label>{_WORD}))?")
URL_EXAMPLE = "https://mirror.example.org/conda-forge or file:///srv/channels/conda-forge"


def is_name(value: str) -> bool:
    """Whether `value` is meant as a channel name rather than a URL (it has no scheme)."""
    return "://" not in value


def name(value: str) -> str:
    """`value` when it is a channel name by the grammar above; else BadInputError (exit 2) whose fix is a value
    that passes: the name, a file:// URL for what looks like a local path, or an example."""
    match = _NAME.fullmatch(value)
    if match is not None and ".." not in value:
        return value
    from envsolver.core.printable import printable

    shown = printable(value)
    if value.startswith(("/", "./", "../", "~")):
        path = Path(os.path.abspath(os.path.expanduser(value)))
        fix = f"Pass a local channel as a URL: --channel {path.as_uri()}" if str(path).isprintable() else ""
    else:
        fix = ""
    raise BadInputError(
        f"--channel {shown!r} is neither a channel name nor a URL: a name is OWNER or OWNER/label/LABEL of "
        "letters, digits, '.', '_' and '-' (conda-forge, nvidia, conda-forge/label/broken). "
        + (fix + "." if fix else f"Pass a name such as conda-forge, or a URL such as {URL_EXAMPLE}.")
    )


def check(value: str) -> None:
    """Raise BadInputError (exit 2) unless `value` is a channel name or a usable channel URL."""
    if is_name(value):
        name(value)
        return
    from envsolver.net.http import check_url  # http.client and urllib.request: only a --channel URL needs them

    check_url(value, "--channel", URL_EXAMPLE)
