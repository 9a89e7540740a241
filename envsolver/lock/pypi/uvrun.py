"""Run uv's resolver (`uv pip compile`) for a PyPI part: the trust boundary between envsolver and uv.

- Which uv: the `uv` package's own binary (its find_uv_bin: the scripts directory of the python that runs
  envsolver, never PATH), whose `uv --version` must be the installed package's version and at least UV_FLOOR.
- What it is given: files and arguments built from values already held to their grammar (names, versions and
  requirements by requirements.py, the index by pypi_index.URL), as a list (never a shell), in a private
  working directory (mode 0700) that is removed after.
- What it may read: no user or project configuration (`--no-config`; HOME and the cache are private), an
  environment of its own: PATH=os.defpath, the proxy variables, the certificates envsolver itself trusts
  (SSL_CERT_FILE / SSL_CERT_DIR, envsolver.net.netconf), NETRC where the user has one, and the index as
  UV_DEFAULT_INDEX, so an index URL's credentials never reach argv (which `ps` shows). Nothing else: no UV_*,
  PIP_*, PYTHONPATH, VIRTUAL_ENV or CONDA_PREFIX of the user's reaches it.
- What it may run: nothing from PyPI. `--no-build`: uv reads wheels' metadata (and static sdist metadata) and
  never builds an sdist to learn its requirements, since a build runs the package's setup code on the machine
  that runs make. `--python` is envsolver's own interpreter and `--no-python-downloads` holds: without them uv
  queries every python3.X on PATH and may download a CPython.
- What comes back: stderr bounded (core/pipes: head and tail kept) within TIMEOUT_S, redacted and made printable
  (core/printable) before any message carries it; the pylock.toml read at most pylock.MAX_BYTES.

Source for the options: `uv pip compile --help` (uv 0.13.9). UV_FLOOR: 0.10.0 is the first release with
`--excludes` (0.9 has none); `--format pylock.toml`, `--python-platform x86_64-manylinux_2_40` and
`[[dependency-metadata]]` are older.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from envsolver.core import pipes
from envsolver.core.errors import EnvsolverError, Kind
from envsolver.core.printable import printable
from envsolver.core.redact import redact_text
from envsolver.lock.pypi import pylock
from envsolver.lock.pypi.target import Target
from envsolver.net import netconf

UV_FLOOR = Version("0.10.0")
TIMEOUT_S = 600.0
VERSION_TIMEOUT_S = 20.0
STDERR = pipes.Bound(256 << 10, 64 << 10)
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,126}[a-z0-9])?")  # normalized (PEP 503)
_VERSION_LINE = re.compile(r"uv ([0-9][0-9A-Za-z.+!-]{0,40})(?: .*)?\n?")
_HOST = re.compile(r"[A-Za-z0-9.\-]{1,253}(?::[0-9]{1,5})?")
_SCHEMES = ("HTTP", "HTTPS", "ALL", "NO")
PROXY_VARIABLES = (*(f"{s}_PROXY" for s in _SCHEMES), *(f"{s.lower()}_proxy" for s in _SCHEMES))


class UvUnusable(EnvsolverError):
    """uv cannot be found, is not the installed package's, or cannot run (exit 2)."""

    kind: Kind = "failed"


@dataclass(frozen=True)
class Request:
    """One `uv pip compile`: requirement lines (each a re-serialized PEP 508 requirement, no marker), held
    (name -> version: a constraint `==version`, metadata with no requirements, never emitted), excluded names,
    preferences (name -> version, uv's soft pins), names free to move (--upgrade-package), the target, the index
    (credentials and all: it goes into the environment only) and the cache (None: none kept)."""

    requirements: tuple[str, ...]
    held: tuple[tuple[str, str], ...]
    excluded: tuple[str, ...]
    preferences: tuple[tuple[str, str], ...]
    upgrade: tuple[str, ...]
    target: Target
    index: str
    cache: Path | None


@dataclass(frozen=True)
class Answer:
    """uv's exit code, its pylock.toml (None when it wrote none), and its messages (redacted, printable)."""

    code: int
    pylock: bytes | None
    messages: str


def binary() -> Path:
    """The uv binary of the installed `uv` package. Raises UvUnusable when there is none, or it is another."""
    from importlib import metadata

    try:
        from uv import find_uv_bin

        found = Path(find_uv_bin())
        installed = Version(metadata.version("uv"))
    except (ImportError, FileNotFoundError, metadata.PackageNotFoundError, InvalidVersion):
        raise UvUnusable(
            "uv, which resolves the PyPI part, is not installed beside envsolver. Reinstall envsolver with its "
            f"dependencies (`python -m pip install 'uv>={UV_FLOOR}'` into envsolver's environment)."
        ) from None
    if installed < UV_FLOOR:
        raise UvUnusable(
            f"uv {installed} is installed beside envsolver; resolving a PyPI part needs uv {UV_FLOOR} or later. "
            f"Run `python -m pip install 'uv>={UV_FLOOR}'` in envsolver's environment."
        )
    return found


def check_binary(uv: Path, workdir: Path) -> None:
    """`uv --version` must name the installed package's version. Raises UvUnusable."""
    from importlib import metadata

    code, err, out = _run(
        [str(uv), "--version"], {"PATH": os.defpath, "HOME": str(workdir)}, workdir, VERSION_TIMEOUT_S
    )
    match = _VERSION_LINE.fullmatch(out)
    try:
        said = Version(match.group(1)) if match else None
    except InvalidVersion:
        said = None
    if code != 0 or said is None or said != Version(metadata.version("uv")):
        shown = printable(redact_text((out or err).strip()))[:200]
        raise UvUnusable(
            f"{str(uv)!r} answered {shown!r} to --version (exit {code}), not the installed uv package's version "
            f"{metadata.version('uv')}. Reinstall it: `python -m pip install --force-reinstall 'uv>={UV_FLOOR}'`."
        )


def compile_part(request: Request, environ: Mapping[str, str]) -> Answer:
    """Run `uv pip compile` for the request. Raises UvUnusable when uv cannot run or runs past TIMEOUT_S."""
    uv = binary()
    workdir = Path(tempfile.mkdtemp(prefix="envsolver-uv-"))
    try:
        check_binary(uv, workdir)
        write_inputs(request, workdir)
        env, flags = environment(request, environ, workdir)
        code, messages, _ = _run(argv(request, uv, workdir) + flags, env, workdir, TIMEOUT_S)  # stdout: the lock again
        out = workdir / "pylock.toml"
        data = None
        if code == 0 and out.is_file():
            with out.open("rb") as handle:
                data = handle.read(pylock.MAX_BYTES + 1)
        return Answer(code, data, printable(redact_text(messages), newlines=True))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def write_inputs(request: Request, workdir: Path) -> None:
    """req.in, constraints.txt, excludes.txt, uv.toml (the held packages' metadata: no requirements) and the
    preferences as a pylock.toml that uv reads from its output path (names and versions only)."""
    for name, version in (*request.held, *request.preferences):
        _check_name(name)
        _check_version(version)
    for name in (*request.excluded, *request.upgrade):
        _check_name(name)
    lines = "".join(f"{line}\n" for line in request.requirements)
    (workdir / "req.in").write_text(lines, encoding="utf-8")
    (workdir / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in request.held), encoding="utf-8")
    (workdir / "excludes.txt").write_text("".join(f"{n}\n" for n in request.excluded), encoding="utf-8")
    metadata = "".join(
        f"[[dependency-metadata]]\nname = {json.dumps(n)}\nversion = {json.dumps(v)}\nrequires-dist = []\n\n"
        for n, v in request.held
    )
    (workdir / "uv.toml").write_text(metadata, encoding="utf-8")
    if request.preferences:
        packages = "".join(
            f"\n[[packages]]\nname = {json.dumps(n)}\nversion = {json.dumps(v)}\n" for n, v in request.preferences
        )
        (workdir / "pylock.toml").write_text(f'lock-version = "1.0"\ncreated-by = "envsolver"\n{packages}')


def argv(request: Request, uv: Path, workdir: Path) -> list[str]:
    """The command line: fixed options and validated names only (the index travels in the environment)."""
    platform = request.target.uv_platform()
    if platform is None:
        raise ValueError(f"uv knows no manylinux level for glibc {request.target.glibc}")
    import sys

    out = [
        str(uv), "pip", "compile", "req.in",
        "--constraints", "constraints.txt",
        "--no-config", "--config-file", "uv.toml",
        "--python", sys.executable, "--no-python-downloads",
        "--python-version", str(request.target.python),
        "--python-platform", platform,
        "--format", "pylock.toml", "--output-file", "pylock.toml",
        "--no-build", "--no-header", "--no-annotate", "--no-progress", "--color", "never",
        "--keyring-provider", "disabled",
    ]  # fmt: skip
    if request.excluded:
        out += ["--excludes", "excludes.txt"]
    out += ["--cache-dir", str(request.cache)] if request.cache is not None else ["--no-cache"]
    for name, _ in request.held:
        out += ["--no-emit-package", name]
    for name in request.upgrade:
        out += ["--upgrade-package", name]
    return out


def environment(request: Request, environ: Mapping[str, str], workdir: Path) -> tuple[dict[str, str], list[str]]:
    """uv's whole environment, and the options that follow from the user's TLS settings."""
    env = {"PATH": os.defpath, "HOME": str(workdir), "TMPDIR": str(workdir), "UV_DEFAULT_INDEX": request.index}
    env.update({k: environ[k] for k in PROXY_VARIABLES if environ.get(k)})
    netrc = environ.get("NETRC") or (str(Path(environ["HOME"]) / ".netrc") if environ.get("HOME") else "")
    if netrc and Path(netrc).is_file():
        env["NETRC"] = netrc
    flags: list[str] = []
    tls = netconf.tls(environ)
    if not tls.verify:
        host = urlsplit(request.index).netloc.rpartition("@")[2]
        if _HOST.fullmatch(host):
            flags += ["--allow-insecure-host", host]
        return env, flags
    defaults = ssl.get_default_verify_paths()
    cafile = tls.cafile or (defaults.cafile if tls.capath is None else None)
    capath = tls.capath or (defaults.capath if cafile is None else None)
    if cafile:
        env["SSL_CERT_FILE"] = cafile
    elif capath:
        env["SSL_CERT_DIR"] = capath
    return env, flags


def _check_name(name: str) -> None:
    """A name that may go into uv's files and argv; anything else is an envsolver bug."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a normalized PyPI name: {name[:80]!r}")


def _check_version(version: str) -> None:
    """A version that may go into uv's files; anything else is an envsolver bug."""
    try:
        canonical = str(Version(version))
    except InvalidVersion:
        canonical = ""
    if canonical != version:
        raise ValueError(f"not a canonical PEP 440 version: {version[:80]!r}")


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
    """(exit code, stderr, stdout), both bounded; raises UvUnusable when it cannot start or times out."""
    try:
        child = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:
        raise UvUnusable(
            f"uv could not start ({exc.strerror or exc}). Reinstall it in envsolver's environment."
        ) from None
    try:
        out, err = pipes.collect(child, timeout, STDERR, STDERR)
    except subprocess.TimeoutExpired:
        pipes.stop(child)
        raise UvUnusable(
            f"uv ran past {int(timeout)} s resolving the PyPI part. Check that the index answers, or try again."
        ) from None
    except BaseException:
        pipes.stop(child)
        raise
    return child.returncode, err.text(), out.text()
