"""`envsolver install [LOCK] -p PREFIX` on a prefix that the same request left as it is now, answered before click
and the CLI are imported (issue 23: a no-op within 0.1 s; click, the CLI's modules and the error classes were half
of it). __main__.run calls this first; None means "not decided here", and the full CLI runs as it always did.

Only a command line of the plainest form is taken: LOCK, -p/--prefix, --platform, --mirror, --no-hook, --json,
-q/--quiet, each value a separate word or after `=`. Anything else (-n, --dry-run, -v, --help, another option, a
word after `--`, an option given twice, an empty value or one that starts with '-', an environment variable that
gives an option a value or asks for shell completion) returns None before any file is read, and so does every
prefix that installstate does not find recorded up to date for this request, and a lock whose post-install hook
would run (the hook decides its own no-op). So the click command parses and checks everything this does not take,
and what this prints is what it would print: the same installstate decision, the same report (install_report).
tests/test_fast_install.py holds the options taken here to install_command's own, and compares both paths' output.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from envsolver import __version__
from envsolver.cli import install_report
from envsolver.install import installstate

# install_command's options taken here: the flags, and those that take one value (--mirror: repeatable).
FLAGS = ("--no-hook", "--json", "-q", "--quiet")
VALUED = ("-p", "--prefix", "--platform", "--mirror")
PLATFORMS = ("linux-64", "linux-aarch64")  # --platform's click.Choice
# With one of these set, click gives an option a value (envvar=) or completes the command line instead.
ENVIRON = ("ENVSOLVER_OP_CACHE", "ENVSOLVER_OP_CACHE_TRUST", "ENVSOLVER_OP_CACHE_GROUP", "_ENVSOLVER_COMPLETE")
LOCK_DEFAULT = "conda-lock.yml"


class Request:
    """An install command line taken here."""

    __slots__ = ("as_json", "lock", "mirrors", "no_hook", "platform", "prefix")

    def __init__(self) -> None:
        self.lock: str | None = None
        self.prefix: str | None = None
        self.platform: str | None = None
        self.mirrors: list[str] = []
        self.no_hook = False
        self.as_json = False


def parse(words: Sequence[str], environ: Mapping[str, str]) -> Request | None:
    """The request in WORDS (install's words, after `install`); None for anything not of the plainest form."""
    if any(name in environ for name in ENVIRON):
        return None
    asked = Request()
    rest = list(words)
    rest.reverse()
    while rest:
        word = rest.pop()
        if word in FLAGS:
            asked.no_hook |= word == "--no-hook"
            asked.as_json |= word == "--json"
            continue
        if not word.startswith("-"):
            if asked.lock is not None:
                return None
            asked.lock = word
            continue
        option, equals, value = word.partition("=")
        if option not in VALUED or (equals and option == "-p"):
            return None
        if not equals:
            if not rest:
                return None
            value = rest.pop()
        if not value or value.startswith("-") or not _take(asked, option, value):
            return None
    return asked if asked.prefix is not None else None


def _take(asked: Request, option: str, value: str) -> bool:
    if option == "--mirror":
        asked.mirrors.append(value)
    elif option == "--platform" and asked.platform is None and value in PLATFORMS:
        asked.platform = value
    elif option in ("-p", "--prefix") and asked.prefix is None:
        asked.prefix = value
    else:
        return False
    return True


def install(words: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """Print install's report and return its exit code when WORDS ask for a prefix that is up to date and whose
    hook does not run; else None, having printed nothing."""
    asked = parse(words, environ)
    if asked is None or asked.prefix is None or sys.stdout is None:  # None: a caller that did not set the streams
        return None  # up as __main__ does (a stream closed at start becomes /dev/null there)
    prefix = Path(asked.prefix)
    lock = Path(asked.lock or LOCK_DEFAULT)
    request = installstate.request(lock, asked.platform, asked.mirrors, __version__)
    recorded = installstate.unchanged(prefix, request)
    if recorded is None:
        return None
    skipped = install_report.hook_skipped(asked.no_hook, recorded.hook)
    if skipped is None:
        return None
    done = install_report.Done(prefix, recorded.platform, recorded.packages, 0, False, (), recorded.pip)
    if asked.as_json:
        text = json.dumps(install_report.document(done, True, skipped), indent=2) + "\n"
    else:
        text = install_report.plain([*install_report.lines(done), install_report.skipped_line(skipped)])
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        from envsolver.cli import base

        return base.print_failed(exc, asked.as_json)
    return 0
