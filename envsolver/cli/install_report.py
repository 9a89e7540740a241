"""What `envsolver install` prints once the prefix holds the lock (its text lines and its --json document), in one
place for both of the command's paths: the click command (cli/install.py) and the no-op answered before click is
imported (cli/fast.py). The standard library only, so the no-op imports nothing slower (core.printable only for a
line that needs it: its patterns take a millisecond to compile)."""

from __future__ import annotations

from pathlib import Path

HOOK_NOT_RUN = "not run (--no-hook); run `envsolver hook -p PREFIX` later"
HOOK_NO_METADATA = (
    "skipped: the lock carries no envsolver metadata (it was not written by envsolver make); run "
    "`envsolver hook -p PREFIX --arch-list ...`"
)


class Done:
    """What the install did, as its report prints it (a plain class: dataclasses imports inspect and ast)."""

    __slots__ = ("changed", "fetched", "packages", "pip_installed", "pip_kept", "pip_removed", "platform", "prefix")

    def __init__(
        self,
        prefix: Path,
        platform: str,
        packages: int,
        fetched: int,
        changed: bool,
        pip_installed: tuple[str, ...],
        pip_kept: tuple[str, ...],
        pip_removed: tuple[str, ...] = (),
    ) -> None:
        self.prefix = prefix
        self.platform = platform
        self.packages = packages
        self.fetched = fetched
        self.changed = changed
        self.pip_installed = pip_installed
        self.pip_kept = pip_kept
        self.pip_removed = pip_removed  # PyPI's copies over the conda part that the install removed


def hook_skipped(no_hook: bool, has_metadata: bool) -> str | None:
    """Why the post-install hook does not run (NO_HOOK: --no-hook; HAS_METADATA: the lock carries the hook's arch
    list); None when it runs."""
    if no_hook:
        return HOOK_NOT_RUN
    return None if has_metadata else HOOK_NO_METADATA


def document(done: Done, ok: bool, hook: object) -> dict[str, object]:
    """install's --json document; HOOK: the hook's own document, or why it did not run."""
    return {
        "ok": ok,
        "prefix": str(done.prefix),
        "platform": done.platform,
        "packages": done.packages,
        "fetched": done.fetched,
        "changed": done.changed,
        "pip": {"installed": list(done.pip_installed), "kept": list(done.pip_kept), "removed": list(done.pip_removed)},
        "hook": hook,
    }


def lines(done: Done) -> list[str]:
    """The report's lines before the hook's part, as they are (the printer spells out control characters)."""
    state = "installed" if done.changed else "already up to date"
    said = [
        f"{done.prefix}: {state} ({done.packages} packages for {done.platform}, {done.fetched} fetched and verified)"
    ]
    if done.pip_removed:
        them = "them" if len(done.pip_removed) > 1 else "it"
        said.append(f"removed PyPI's {', '.join(done.pip_removed)}: the lock's conda part provides {them}")
    if done.pip_installed or done.pip_kept:
        pip = [f"{p} installed" for p in done.pip_installed] + [f"{p} in place" for p in done.pip_kept]
        said.append(f"PyPI part (pip, by sha256): {', '.join(pip)}")
    return said


def skipped_line(skipped: str) -> str:
    return f"post-install hook: {skipped}"


def plain(said: list[str]) -> str:
    """LINES as render.Plain prints them (and rich, for these unstyled lines): control characters spelled out
    (core.printable; a line of printable ASCII holds none, so it is left as it is)."""
    return "".join((line if line.isascii() and line.isprintable() else _printable(line)) + "\n" for line in said)


def _printable(line: str) -> str:
    from envsolver.core.printable import printable

    return printable(line)
