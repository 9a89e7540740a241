"""An Lmod modulefile (Lua) for an installed prefix: `module load NAME` sets what activating the prefix sets (PATH,
CONDA_PREFIX and the variables of the hook's activate.d/envsolver.sh), `module unload NAME` restores them.

The settings come from where the activation scripts come from (hook/activation.py's `settings`): the inputs the
hook wrote the prefix's activate.d/envsolver.sh with (arch list, include target, whether the prefix holds the CUDA
toolkit) are read back from that script and proven by rendering it again, byte for byte; a script edited by hand
or written by another envsolver is refused. Lmod's `pushenv` sets a variable and on unload gives back its earlier
value (or unsets it), as deactivate.d/envsolver.sh does; `prepend_path` adds a directory in front of a path list
(`${CPATH:+:${CPATH}}` in the script) and takes it out again on unload. One difference: Lmod keeps no empty
values, so a variable set to the empty string before load is unset after unload (deactivate.d gives back '').
The module runs none of the prefix's other activate.d scripts (conda packages' own); `Result.not_covered` names them.

Every value that reaches the file is checked against its grammar here and written as a Lua literal (lua.py).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envsolver import __version__
from envsolver.cluster import lua
from envsolver.core import boundedread
from envsolver.core.archlist import canonical
from envsolver.core.errors import BadInputError
from envsolver.hook import activation
from envsolver.hook.activation import Part, Ref
from envsolver.install import prefixmeta
from envsolver.lock.writers import files

ACTIVATE = Path("etc") / "conda" / "activate.d" / "envsolver.sh"
MAX_SCRIPT = 64 * 1024
# Lmod module names: one to four '/'-separated parts (name/version, or a hierarchy), each starting with a letter,
# digit or '_': no '.', '..' or hidden parts, nothing a file name or Lmod's own syntax would read another way.
_PART = r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}"
NAME = re.compile(rf"{_PART}(?:/{_PART}){{0,3}}")
FAMILY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # Lmod names a variable after it: LMOD_FAMILY_<NAME>
VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
TARGET = re.compile(r"[a-z0-9_]+-[a-z0-9_]+")
META_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,128}")  # the keys lockfile.read accepts in custom_metadata
MAX_VALUE = 4096
DEFAULT_FAMILY = "conda_env"
# What `conda activate` itself sets, in activation's parts: the prefix and its bin directory first on PATH.
CONDA: dict[str, tuple[Part, ...]] = {
    "CONDA_PREFIX": (Ref("CONDA_PREFIX"),),
    "PATH": (Ref("CONDA_PREFIX"), "/bin", Ref("PATH", append=True)),
}
# The lock's facts `module whatis` shows (help lists them all), where the lock metadata has them.
WHATIS_KEYS = ("envsolver_torch", "envsolver_cuda_version", "envsolver_gpus", "envsolver_kb_date", "envsolver_version")


@dataclass(frozen=True)
class Activation:
    """The inputs the hook wrote PREFIX/etc/conda/activate.d/envsolver.sh with."""

    arch_list: str
    target: str
    toolkit: bool


@dataclass(frozen=True)
class Setting:
    """One variable: `pushenv` (set; unload restores) with its value's parts, or `prepend_path` of a directory."""

    name: str
    how: Literal["pushenv", "prepend_path"]
    parts: tuple[Part, ...]

    def value(self, prefix: str) -> str:
        """What load puts in front (prepend_path) or sets (pushenv), for the prefix at `prefix`."""
        return activation.resolve(self.parts, {"CONDA_PREFIX": prefix})


@dataclass(frozen=True)
class Request:
    """What to write: the modulefile MODULE (name/version) under OUT for PREFIX."""

    prefix: Path
    module: str
    out: Path
    family: str | None = DEFAULT_FAMILY
    conflicts: tuple[str, ...] = ()
    force: bool = False


@dataclass(frozen=True)
class Result:
    path: Path
    outcome: files.Outcome
    module: str
    prefix: str
    out: str  # the directory that goes on MODULEPATH
    activation: Activation
    settings: tuple[Setting, ...]
    platform: str | None
    lock: dict[str, str]
    not_covered: tuple[str, ...]  # the prefix's other activate.d scripts, which the module does not run

    def as_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "module": self.module,
            "file": str(self.path),
            "outcome": self.outcome.value,
            "prefix": self.prefix,
            "use": f"module use {shlex.quote(self.out)}",
            "load": f"module load {self.module}",
            "settings": [{"name": s.name, "how": s.how, "value": s.value(self.prefix)} for s in self.settings],
            "platform": self.platform,
            "lock_metadata": self.lock,
            "not_run": list(self.not_covered),
        }


def _path(text: str, what: str, fix: str) -> str:
    """An absolute path that Lmod and a shell's path lists carry as it is: printable characters (space included),
    no ':' (it splits PATH, CPATH and MODULEPATH). Raises BadInputError naming what is wrong and the fix."""
    if not text.startswith("/"):
        raise BadInputError(f"{what} {text!r} is not an absolute path. {fix}")
    bad = next((ch for ch in text if ch == ":" or not (ch == " " or ch.isprintable())), None)
    if bad is not None or len(text) > MAX_VALUE:
        why = (
            f"longer than {MAX_VALUE} characters"
            if bad is None
            else "holds ':', which splits PATH, CPATH and MODULEPATH"
            if bad == ":"
            else f"holds the character {bad!r}, which a modulefile does not carry"
        )
        raise BadInputError(f"{what} {text!r} {why}. {fix}")
    return text


def _lock(prefix: str, kept: prefixmeta.Kept | None) -> dict[str, str]:
    """The kept lock metadata, each key a plain name and each value one printable line. Raises BadInputError."""
    if kept is None:
        return {}
    path = shlex.quote(f"{prefix}/{prefixmeta.METADATA}")
    fix = (
        f"{path} was edited or not written by envsolver. Run envsolver install LOCK -p {shlex.quote(prefix)} again "
        f"to rewrite it, or delete {path} (the module then names the lock as unknown)."
    )
    for key, value in sorted(kept.custom.items()):
        if not META_KEY.fullmatch(key):
            raise BadInputError(f"lock metadata key {key[:128]!r} is not a plain name; {fix}")
        if len(value) > MAX_VALUE or not all(ch == " " or ch.isprintable() for ch in value):
            raise BadInputError(f"lock metadata {key!r} {value[:200]!r} is not a one-line printable value; {fix}")
    return dict(sorted(kept.custom.items()))


def check_request(request: Request) -> tuple[str, str]:
    """The prefix and output directory as absolute paths, the names checked. Raises BadInputError."""
    if not NAME.fullmatch(request.module):
        raise BadInputError(
            f"module name {request.module!r} is not NAME/VERSION: one to four '/'-separated parts of letters, "
            "digits, '_', '.', '+' and '-', each starting with a letter, digit or '_'. E.g. train/2026.12."
        )
    if request.family is not None and not FAMILY.fullmatch(request.family):
        raise BadInputError(
            f"--family {request.family!r} is not a family name (letters, digits and '_') such as conda_env."
        )
    for conflict in request.conflicts:
        if not NAME.fullmatch(conflict):
            raise BadInputError(f"--conflict {conflict!r} is not a module name such as anaconda3 or cuda/12.4.")
    prefix = _path(os.path.abspath(request.prefix), "the prefix", "Install the environment at a path without it.")
    out = _path(os.path.abspath(request.out), "--out", "Pass a directory without it (it goes on MODULEPATH).")
    return prefix, out


def read_activation(prefix: Path, targets: Iterable[str]) -> Activation:
    """The inputs PREFIX's activate.d/envsolver.sh was written with: its TORCH_CUDA_ARCH_LIST, and the include
    target (one of `targets`) and toolkit flag with which activation.activate renders the script exactly.
    Raises BadInputError when the script is missing, unreadable, or no rendering matches it."""
    path = prefix / ACTIVATE
    rerun = f"envsolver hook -p {shlex.quote(str(prefix))}"
    if not prefix.is_dir():
        raise BadInputError(
            f"prefix {str(prefix)!r} does not exist. Install the environment first (envsolver install "
            f"conda-lock.yml -p {shlex.quote(str(prefix))}), then run this command again."
        )
    try:
        raw = boundedread.read_head(path, MAX_SCRIPT + 1)  # a regular file only: a FIFO refused at once
    except boundedread.Refused as exc:
        raise BadInputError(
            f"{str(path)!r} is {exc}, not the script envsolver hook writes. Remove it (rm -r "
            f"{shlex.quote(str(path))}) and run {rerun}, then this command again."
        ) from None
    except FileNotFoundError:
        raise BadInputError(
            f"{str(prefix)!r} has no activation scripts from envsolver hook ({ACTIVATE} is missing). Run {rerun} "
            "first (--no-build writes the scripts alone), then this command again."
        ) from None
    except OSError as exc:
        raise BadInputError(f"cannot read {str(path)!r}: {files.reason(exc)}.") from None
    text = raw.decode("utf-8", "replace")
    line = next((x for x in text.splitlines() if x.startswith("export TORCH_CUDA_ARCH_LIST=")), "")
    try:
        words = shlex.split(line.partition("=")[2])
        arch = canonical(words[0]) if len(words) == 1 and len(raw) <= MAX_SCRIPT else None
    except ValueError:
        arch = None
    if arch is not None:
        for target in sorted(set(targets)):
            for toolkit in (True, False):
                if files.stamp(activation.activate(arch, target, toolkit)) == text:
                    return Activation(arch, target, toolkit)
    how = "was edited by hand" if files.edited_by_hand(text) else "was written by another version of envsolver"
    raise BadInputError(
        f"{str(path)!r} {how}: the module would not set what activation sets. Run {rerun} to write it again "
        "(--no-build writes the scripts alone), then this command again."
    )


def settings(found: Activation) -> tuple[Setting, ...]:
    """conda's own (CONDA_PREFIX, PATH), then the hook's settings for `found`, as Lmod statements. Raises
    ValueError for a setting of a shape this module cannot load and unload exactly (a new one in activation)."""
    out = []
    for name, parts in {**CONDA, **activation.settings(found.arch_list, found.target, found.toolkit)}.items():
        if not VARIABLE.fullmatch(name):
            raise ValueError(f"variable name {name!r}")
        last = parts[-1]
        if isinstance(last, Ref) and last.append and last.name == name:
            setting = Setting(name, "prepend_path", parts[:-1])
        else:
            setting = Setting(name, "pushenv", parts)
        for part in setting.parts:
            if isinstance(part, Ref) and (part.name != "CONDA_PREFIX" or part.append):
                raise ValueError(f"{name}: a reference to {part.name} cannot be loaded and unloaded exactly")
            if isinstance(part, str) and (
                not part.isprintable() or len(part) > MAX_VALUE or (setting.how == "prepend_path" and ":" in part)
            ):
                raise ValueError(f"{name}: {part!r} is not a printable one-line value (or holds ':' in a path)")
        out.append(setting)
    return tuple(out)


def _expression(parts: tuple[Part, ...]) -> str:
    """`prefix` for the reference to CONDA_PREFIX, literals quoted (settings() allows nothing else)."""
    return lua.concat(["prefix" if isinstance(p, Ref) else lua.string(p) for p in parts])


def _activate_d(prefix: Path, most: int = 20) -> tuple[str, ...]:
    """The prefix's other activate.d scripts (conda packages' own, e.g. the compilers'), by name: the first `most`
    in order, then how many more."""
    try:
        names = sorted(p.name for p in (prefix / ACTIVATE).parent.iterdir() if p.name != ACTIVATE.name)
    except OSError:
        return ()
    shown = [n if n.isprintable() and ":" not in n else ascii(n) for n in names[:most]]
    return tuple(shown + ([f"and {len(names) - most} more"] if len(names) > most else []))


def render(
    request: Request,
    prefix: str,
    out: str,
    found: Activation,
    kept: prefixmeta.Kept | None,
    not_covered: tuple[str, ...],
) -> str:
    """The modulefile's text (without the hash line files.write adds)."""
    lock = _lock(prefix, kept)
    command = ["envsolver", "module", request.module, "-p", prefix, "--out", out]
    command += ["--no-family"] if request.family is None else ["--family", request.family]
    for conflict in request.conflicts:
        command += ["--conflict", conflict]
    made = settings(found)
    name, _, version = request.module.rpartition("/")
    help_lines = [
        f"{request.module}: the conda environment {prefix}, set up as activating it does.",
        "Load sets (unload gives each variable back its earlier value):",
    ]
    help_lines += [
        f"  {s.name}: {s.value(prefix)} in front" if s.how == "prepend_path" else f"  {s.name}={s.value(prefix)}"
        for s in made
    ]
    if not_covered:
        help_lines.append(f"The prefix's other activate.d scripts are not run: {', '.join(not_covered)}.")
    if kept is None:
        help_lines.append("Lock: unknown (the prefix was not installed by envsolver install).")
    else:
        help_lines.append(f"Lock (platform {kept.platform}):")
        help_lines += [f"  {k}: {v}" for k, v in lock.items()]
    help_lines.append(f"Regenerate with: {shlex.join(command)}")
    whatis = [f"Name: {name or request.module}"] + ([f"Version: {version}"] if name else [])
    whatis.append(f"Description: the conda environment {prefix} (written by envsolver {__version__})")
    whatis.append(f"TORCH_CUDA_ARCH_LIST: {found.arch_list}")
    whatis += [f"{k}: {lock[k]}" for k in WHATIS_KEYS if k in lock]
    lines = [
        f"-- Written by envsolver {__version__}: an Lmod modulefile that sets what activating a conda prefix sets.",
        f"-- Regenerate with: {shlex.join(command)}",
        f"local prefix = {lua.string(prefix)}",
        'if mode() == "load" and not isDir(prefix) then',
        f"  LmodError({lua.string('envsolver: the environment ')}, prefix, "
        f"{lua.string(' is gone; reinstall it, or ask the module owner to regenerate this module.')})",
        "end",
    ]
    lines += [f"whatis({lua.string(line)})" for line in whatis]
    lines.append("help(")
    lines += [
        f"  {lua.string(line + chr(10))}{' ..' if i < len(help_lines) - 1 else ''}" for i, line in enumerate(help_lines)
    ]
    lines.append(")")
    if request.family is not None:
        lines.append(f"family({lua.string(request.family)})")
    lines += [f"conflict({lua.string(c)})" for c in request.conflicts]
    lines += [f"{s.how}({lua.string(s.name)}, {_expression(s.parts)})" for s in made]
    return "\n".join(lines) + "\n"


def write(request: Request, targets: Mapping[str, str]) -> Result:
    """Write OUT/MODULE.lua for the prefix (atomically; a file edited by hand is kept unless `force`). `targets`:
    the include target of each conda platform (the knowledge base's targets_include). Raises BadInputError."""
    prefix, out = check_request(request)
    found = read_activation(Path(prefix), targets.values())
    if not TARGET.fullmatch(found.target):
        raise BadInputError(f"include target {found.target!r} is not a conda target such as x86_64-linux.")
    kept = prefixmeta.load(Path(prefix))
    not_covered = _activate_d(Path(prefix))
    text = render(request, prefix, out, found, kept, not_covered)
    path = Path(out) / f"{request.module}.lua"
    try:
        outcome = files.write(path, text, force=request.force, comment="--")
    except OSError as exc:
        raise BadInputError(
            f"cannot write {str(path)!r}: {files.reason(exc)}. Pass --out a directory you can write."
        ) from None
    return Result(
        path,
        outcome,
        request.module,
        prefix,
        out,
        found,
        settings(found),
        None if kept is None else kept.platform,
        {} if kept is None else dict(sorted(kept.custom.items())),
        not_covered,
    )
