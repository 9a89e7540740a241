"""A project's own packages: the conda specs, PyPI requirements and channels a user adds to the GPU stack, read
from environment files (`make -f FILE`: conda's and conda-lock's environment.yml, or a pip requirements file) and
from `--add SPEC` and `--add-pypi REQ`, every value checked against its exact grammar here. Input only: nothing
in this module writes, and the user's files are never rewritten.

An environment file (conda's format; conda-lock reads the same):

    channels: [conda-forge, bioconda]        # after the stack's own, in conda's priority order
    dependencies:
      - python=3.12                          # a stack package: a constraint on the plan (resolve/projectmerge.py)
      - transformers >=4.40,<5
      - jupyterlab
      - pip:
        - accelerate
        - peft>=0.10

A requirements file (`.txt`, `.in`) holds one PEP 508 requirement a line (`#` comments, `\\` continuations); pip's
options (`-r`, `-e`, `--index-url`, `--hash`) are refused: envsolver resolves and hashes the PyPI part itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsolver.core.errors import BadInputError
from envsolver.core.printable import printable
from envsolver.core.redact import redact

MAX_BYTES = 1 << 20  # a project's environment file is a few hundred lines
MAX_ENTRIES = 2000
ADD = "--add"
ADD_PYPI = "--add-pypi"

# conda's MatchSpec, the forms an environment file writes (conda's package-spec docs: "Package match
# specifications"; https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html):
#   name             numpy
#   name OPVERSION   numpy>=1.26,<2   numpy==1.26.4   (the operator attached to the name; `==1.26.*` is read
#                    as 1.26.*, any 1.26.x, as pip means it: conda itself would read it as exactly 1.26)
#   name=VERSION     python=3.12      (conda's fuzzy `=`: any 3.12.x, i.e. 3.12.*)
#   name=VER=BUILD   numpy=1.26.4=py312h*
#   name VER [BUILD] numpy 1.26.* py312*   numpy >=1.26,<2
# A version is release parts of letters and digits joined by dots, an optional `.*` tail; clauses joined by `,`
# (and). Not read: `|` (or), `~=`, a channel prefix `conda-forge::numpy`, brackets `numpy[version='>=1']`, each
# refused with the spelling that is read. A build is a glob of letters, digits, `_` and `*` (rattler's strict
# parser, which the solve uses, reads no other).
_CONDA_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,127}")
_RELEASE = r"[0-9A-Za-z]+(?:\.[0-9A-Za-z]+){0,7}"
_CLAUSE = rf"(?:(?:==|!=|>=|<=|>|<){_RELEASE}|{_RELEASE}(?:\.\*)?)"  # `.*` without an operator only
_VERSION = re.compile(rf"\*|{_CLAUSE}(?:,{_CLAUSE}){{0,7}}")
_BUILD = re.compile(r"[A-Za-z0-9_*]{1,128}")
_ATTACHED = re.compile(r"(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(?P<rest>(?:==|!=|>=|<=|>|<|=).*)?")
_OPERATOR_SPACE = re.compile(r"(==|!=|>=|<=|>|<)\s+")
_PIP_OPTION = re.compile(r"(?:^|\s)(-[A-Za-z]|--[A-Za-z][A-Za-z-]*)")


@dataclass(frozen=True)
class CondaWant:
    """One conda spec of the project: its name, version constraint (match-spec syntax: `3.12.*`, `>=4.40,<5`) and
    build glob, and where it came from (the file as given, or `--add`)."""

    name: str
    version: str | None
    build: str | None
    origin: str

    @property
    def spec(self) -> str:
        """The canonical match spec, `name version build`, as the plan's own specs are written."""
        if self.build:
            return f"{self.name} {self.version or '*'} {self.build}"
        return f"{self.name} {self.version}" if self.version else self.name


@dataclass(frozen=True)
class PipWant:
    """One PyPI requirement of the project: its normalized name, its canonical PEP 508 text and its origin."""

    name: str
    text: str
    origin: str


@dataclass(frozen=True)
class Project:
    """What a project adds to the stack; empty when no -f, --add or --add-pypi was given."""

    conda: tuple[CondaWant, ...] = ()
    pip: tuple[PipWant, ...] = ()
    channels: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # the -f paths as given (the regenerate command names them so)
    platforms: tuple[str, ...] = ()  # a conda-lock `platforms:` list, checked against the plan's platform
    added: tuple[str, ...] = ()  # the --add specs and --add-pypi requirements as read (canonical), for the
    added_pypi: tuple[str, ...] = ()  # command that regenerates the files
    notes: tuple[str, ...] = field(default=(), compare=False)  # about the input: keys read and not carried

    def __bool__(self) -> bool:
        return bool(self.conda or self.pip or self.channels)

    def conda_named(self, name: str) -> CondaWant | None:
        return next((w for w in self.conda if w.name == name), None)


def read(files: Sequence[str] = (), add: Sequence[str] = (), add_pypi: Sequence[str] = ()) -> Project:
    """The project from its environment files (in order) and the command line's additions. Raises BadInputError
    (exit 2) naming the file, the entry and the spelling that is read."""
    conda: list[CondaWant] = []
    pip: list[PipWant] = []
    channels: list[str] = []
    platforms: list[str] = []
    notes: list[str] = []
    for given in files:
        got = _read_file(given)
        conda += got.conda
        pip += got.pip
        channels += got.channels
        platforms += got.platforms
        notes += got.notes
    added = [conda_want(text, ADD) for text in add]
    added_pypi = [pip_want(text, ADD_PYPI) for text in add_pypi]
    conda += added
    pip += added_pypi
    return Project(
        conda=_merged_conda(conda),
        pip=_merged_pip(pip),
        channels=tuple(dict.fromkeys(channels)),
        files=tuple(files),
        platforms=tuple(dict.fromkeys(platforms)),
        added=tuple(w.spec for w in added),
        added_pypi=tuple(w.text for w in added_pypi),
        notes=tuple(notes),
    )


def _shown(text: object) -> str:
    return repr(printable(str(text)))


def conda_want(text: str, origin: str) -> CondaWant:
    """One conda spec in a form of the grammar above, canonical. Raises BadInputError."""
    raw = text.strip() if isinstance(text, str) else text
    if not isinstance(raw, str) or not raw:
        raise BadInputError(f"{origin}: {_shown(text)} is not a conda spec. Write a package name, e.g. jupyterlab.")
    where = f"{origin}: the conda spec {_shown(raw)}"
    if "::" in raw:
        name = raw.split("::", 1)[1]
        raise BadInputError(
            f"{where} names a channel: a spec of a project is solved against the plan's channels in conda's "
            f"priority order. List the channel under `channels:` and write {_shown(name)}."
        )
    if "[" in raw or "]" in raw:
        raise BadInputError(
            f"{where} uses brackets, which envsolver does not read. Write it as `name version build`, e.g. "
            "'numpy >=1.26,<2' or 'numpy 1.26.* py312*'."
        )
    if "|" in raw or "~=" in raw:
        raise BadInputError(
            f"{where} uses '|' or '~=', which envsolver does not read. Write the range with ',' (and), e.g. "
            "'numpy >=1.26,<2'."
        )
    words = _OPERATOR_SPACE.sub(r"\1", raw).split()
    attached = _ATTACHED.fullmatch(words[0])
    if attached is None:
        raise _bad_conda(where)
    name, rest = attached["name"].lower(), attached["rest"]
    version: str | None
    build: str | None = None
    if rest is not None:  # numpy>=1.26  python=3.12  numpy=1.26.4=py312h*
        if len(words) > 1:
            raise _bad_conda(where)
        if rest.startswith("=") and not rest.startswith("=="):
            version, _, build_text = rest[1:].partition("=")
            build = build_text or None
            if build is None and not version.endswith("*"):
                version = f"{version}.*"  # conda's fuzzy `=3.12`: any 3.12.x
        else:
            version = rest
    else:
        if len(words) > 3:
            raise _bad_conda(where)
        version = words[1] if len(words) > 1 else None
        build = words[2] if len(words) > 2 else None
    if version == "*" and build is None:
        version = None
    version = version.lower() if version is not None else None  # conda compares versions without case
    if version is not None:  # `==1.26.*` means any 1.26.x, which conda writes `1.26.*` (it reads `==1.26.*` as 1.26)
        version = ",".join(c[2:] if c.startswith("==") and c.endswith(".*") else c for c in version.split(","))
    if not _CONDA_NAME.fullmatch(name):
        raise _bad_conda(where)
    if version is not None and not _VERSION.fullmatch(version):
        raise _bad_conda(where)
    if build is not None and not _BUILD.fullmatch(build):
        raise _bad_conda(where)
    return CondaWant(name, version, build, origin)


def _bad_conda(where: str) -> BadInputError:
    return BadInputError(
        f"{where} is not a conda spec envsolver reads: expected a name (letters, digits, '_', '.', '-'), then "
        "optionally a version (>=4.40,<5  1.26.*  ==1.26.4, or name=3.12) and a build glob. Write it as e.g. "
        "'transformers >=4.40,<5' or 'python=3.12'."
    )


def pip_want(text: str, origin: str) -> PipWant:
    """One PyPI requirement (PEP 508: name, extras, specifiers, markers), canonical. A direct reference
    (`name @ URL`) is refused: the lock proves every file by the sha256 its index gives. Raises BadInputError."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    raw = text.strip() if isinstance(text, str) else text
    if not isinstance(raw, str) or not raw:
        raise BadInputError(f"{origin}: {_shown(text)} is not a PyPI requirement. Write one such as 'accelerate'.")
    where = f"{origin}: the PyPI requirement {_shown(raw)}"
    if _PIP_OPTION.search(raw):
        raise BadInputError(
            f"{where} holds a pip option ({_PIP_OPTION.search(raw)[1]}): envsolver resolves, locks and hashes the "  # type: ignore[index]
            "PyPI part itself, from its index (ENVSOLVER_PYPI_INDEX or PyPI). Write the requirement alone, e.g. "
            "'accelerate>=1.0'."
        )
    try:
        requirement = Requirement(raw)
    except InvalidRequirement as exc:
        raise BadInputError(
            f"{where} is not a PEP 508 requirement ({printable(str(exc)).splitlines()[0]}). Write e.g. "
            "'peft>=0.10' or 'wandb; python_version < \"3.14\"'."
        ) from None
    if requirement.url:
        raise BadInputError(
            f"{where} is a direct reference (name @ URL): the lock proves every PyPI file by the sha256 its index "
            f"gives, so envsolver locks releases from an index only. Publish it to a site index "
            f"(ENVSOLVER_PYPI_INDEX), or write {_shown(requirement.name)} for its release on PyPI."
        )
    return PipWant(canonicalize_name(requirement.name), str(requirement), origin)


def _merged_conda(wants: Iterable[CondaWant]) -> tuple[CondaWant, ...]:
    """One spec a name: constraints on the same name from several places hold together (`,` is and); two builds
    of one name are refused."""
    out: dict[str, CondaWant] = {}
    for want in wants:
        kept = out.get(want.name)
        if kept is None or kept == want:
            out.setdefault(want.name, want)
            continue
        if kept.build and want.build and kept.build != want.build:
            raise BadInputError(
                f"{want.name} is given the build {kept.build!r} ({kept.origin}) and {want.build!r} ({want.origin}). "
                "Keep one of them."
            )
        versions = [v for v in (kept.version, want.version) if v]
        origin = kept.origin if kept.origin == want.origin else f"{kept.origin}, {want.origin}"
        version = ",".join(dict.fromkeys(versions)) or None
        if version is not None and not _VERSION.fullmatch(version):
            raise BadInputError(
                f"{want.name} is given too many constraints ({kept.origin}: {kept.spec}; {want.origin}: "
                f"{want.spec}). Write one spec for it."
            )
        out[want.name] = CondaWant(want.name, version, kept.build or want.build, origin)
    return tuple(out.values())


def _merged_pip(wants: Iterable[PipWant]) -> tuple[PipWant, ...]:
    """One requirement a name; the same requirement twice is kept once, two different ones are refused."""
    out: dict[str, PipWant] = {}
    for want in wants:
        kept = out.setdefault(want.name, want)
        if kept.text != want.text:
            raise BadInputError(
                f"the PyPI requirement of {want.name} is given twice: {kept.text!r} ({kept.origin}) and "
                f"{want.text!r} ({want.origin}). Keep one of them."
            )
    return tuple(out.values())


@dataclass(frozen=True)
class _FileProject:
    conda: tuple[CondaWant, ...] = ()
    pip: tuple[PipWant, ...] = ()
    channels: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _read_file(given: str) -> _FileProject:
    from envsolver.core import safeyaml

    path = Path(given)
    try:
        text = safeyaml.read_text(path, MAX_BYTES)
    except OSError as exc:
        raise BadInputError(
            f"cannot read the project file {_shown(given)}: {exc.strerror or exc}. Pass an existing environment "
            "file (environment.yml) or requirements file (requirements.txt) to -f."
        ) from None
    except safeyaml.SafeYamlError as exc:
        raise BadInputError(f"the project file {_shown(given)}: {exc}. Fix the file.") from None
    if path.suffix in (".txt", ".in"):
        return _FileProject(pip=tuple(pip_want(line, given) for line in _requirement_lines(text, given)))
    if path.suffix not in (".yml", ".yaml"):
        raise BadInputError(
            f"the project file {_shown(given)} is neither an environment file (.yml, .yaml) nor a requirements "
            "file (.txt, .in). Rename it, or pass one of those to -f."
        )
    limits = safeyaml.Limits(chars=MAX_BYTES, depth=16, aliases=100, nodes=50_000)
    try:
        doc = safeyaml.load(text, limits)
    except safeyaml.SafeYamlError as exc:
        raise BadInputError(f"the project file {_shown(given)}: {exc}. Fix the file.") from None
    return _environment_file(doc, given)


KEYS = ("name", "channels", "dependencies", "variables", "prefix", "platforms")


def _environment_file(doc: Any, given: str) -> _FileProject:
    """An environment.yml document: `channels`, `dependencies` (strings, and one `pip:` list), conda-lock's
    `platforms`; `name` and `prefix` are read and not carried (make's -n names the environment); `variables` are
    not carried either (the hook's activation sets the stack's), which a note says."""
    if doc is None:
        return _FileProject()
    if not isinstance(doc, dict):
        raise BadInputError(f"the project file {_shown(given)} must be a mapping with dependencies:. Fix the file.")
    unknown = sorted((k for k in doc if k not in KEYS), key=repr)
    if unknown:
        shown = ", ".join(_shown(k) for k in unknown)
        raise BadInputError(
            f"the project file {_shown(given)} has the unknown key(s) {shown}; an environment file holds "
            f"{', '.join(KEYS)}. Fix the file."
        )
    notes = []
    if doc.get("variables"):
        notes.append(
            f"{given}: its variables: are not carried into the environment envsolver writes (the post-install "
            "hook's activation sets the stack's); set them in your job script or activation"
        )
    channels = _strings(doc.get("channels"), given, "channels")
    from envsolver.net import channels as channel_names

    for channel in channels:
        if not channel_names.is_name(channel):
            raise BadInputError(
                f"the project file {_shown(given)} lists the channel URL {_shown(redact(channel))}: a project's "
                "channels are names (conda-forge, bioconda), read from conda's channel_alias. Lock against a site "
                "mirror with make's --channel URL instead, and list the name here."
            )
        try:
            channel_names.name(channel)
        except BadInputError as exc:
            raise BadInputError(f"the project file {_shown(given)}: {exc}") from None
    platforms = _strings(doc.get("platforms"), given, "platforms")
    conda: list[CondaWant] = []
    pip: list[PipWant] = []
    deps = doc.get("dependencies")
    if deps is not None and not isinstance(deps, list):
        raise BadInputError(f"the project file {_shown(given)}: dependencies: must be a list. Fix the file.")
    for entry in (deps or [])[: MAX_ENTRIES + 1]:
        if len(conda) + len(pip) >= MAX_ENTRIES:
            raise BadInputError(f"the project file {_shown(given)} lists more than {MAX_ENTRIES} packages.")
        if isinstance(entry, dict):
            if set(entry) != {"pip"}:
                raise BadInputError(
                    f"the project file {_shown(given)}: a mapping in dependencies: may only be `pip:`, not "
                    f"{', '.join(_shown(k) for k in entry)}. Fix the file."
                )
            pip += [pip_want(line, given) for line in _strings(entry["pip"], given, "pip")]
        else:
            conda.append(conda_want(entry, given))
    return _FileProject(
        conda=tuple(conda),
        pip=tuple(pip),
        channels=tuple(c for c in channels if c != "nodefaults"),
        platforms=tuple(platforms),
        notes=tuple(notes),
    )


def _strings(value: Any, given: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInputError(f"the project file {_shown(given)}: {key}: must be a list of strings. Fix the file.")
    if len(value) > MAX_ENTRIES:
        raise BadInputError(f"the project file {_shown(given)}: {key}: lists more than {MAX_ENTRIES} entries.")
    return [v.strip() for v in value if v.strip()]


def _requirement_lines(text: str, given: str) -> list[str]:
    """The requirements of a requirements file: comments cut (` #`), `\\` continuations joined, blank lines out."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            lines.append(line)
        if len(lines) > MAX_ENTRIES:
            raise BadInputError(f"the project file {_shown(given)} lists more than {MAX_ENTRIES} requirements.")
    if pending.strip():
        lines.append(pending.strip())
    return lines
