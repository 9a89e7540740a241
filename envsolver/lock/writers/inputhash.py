"""conda-lock's content hash of environment.yml and the virtual-package file, computed without conda-lock.

`conda-lock lock -f environment.yml --virtual-package-spec virtual-packages.yml --check-input-hash` solves
again unless the lock's `metadata.content_hash[platform]` is what conda-lock 4 computes for these inputs
(conda_lock/content_hash.py, `compute_content_hashes`, whose digests conda-lock keeps stable across releases:
its `backwards_compatible_content_hashes` accepts them). That digest is the sha256 of the JSON (sorted keys)
of, per platform:

    channels:              each channel of environment.yml as conda-lock's `Channel` model dumps it to JSON
    specs:                 each dependency as conda-lock's `Dependency` model dumps it, sorted by (manager,
                           name), a null `markers` left out; a `pip:` section adds its requirements
                           (manager pip) and the conda package `pip`, which replaces a `pip` spec
    virtual_package_hash:  conda-lock's fake repodata of the virtual packages, for noarch and the platform,
                           with the build number conda-lock 2 put in each build string

Importing conda-lock loads its whole tool (writers/condalock.py says why `make` avoids it), so this module
reproduces that reading for the forms envsolver writes, and refuses (ValueError) any other form rather than
give a digest conda-lock would not: tests/test_inputhash.py checks every accepted form against conda-lock's
own parsers, and tests/test_content_hash.py the digests of written files against `compute_content_hashes`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

# conda-lock's virtual packages: build number 0, no noarch, no depends, 2020-01-01 (virtual_package.py).
_TIMESTAMP = 1577854800000

_NAME = r"[a-z0-9_][a-z0-9_.-]*"
_RELEASE = r"[0-9a-z]+(?:\.[0-9a-z]+)*"
# `.*` only without an operator: conda reads `==2.10.*` (and `>=2.10.*`) as `==2.10`, warning that it drops the `.*`.
_CLAUSE = rf"(?:(?:==|>=|<=|<|>|!=){_RELEASE}|{_RELEASE}(?:\.\*)?)"
# The version forms MatchSpec leaves as they are (a project's specs, resolve/project.py, are written in these
# forms too), but for a leading `==` it drops when no build follows.
_VERSION = rf"\*|{_CLAUSE}(?:,{_CLAUSE})*"
_BUILD = r"[A-Za-z0-9_*]+"
_CONDA = re.compile(rf"(?P<name>{_NAME})(?: (?P<version>{_VERSION})(?: (?P<build>{_BUILD}))?)?")
_CHANNEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_VIRTUAL_NAME = re.compile(r"__[a-z][a-z0-9_]*")
_VIRTUAL_VALUE = re.compile(r"(?P<version>[A-Za-z0-9_.+]+)(?: (?P<build>[A-Za-z0-9_.+]+))?")


class Entries(NamedTuple):
    """What environment.yml lists: its channels, its conda dependencies, its pip requirements."""

    channels: tuple[str, ...]
    conda: tuple[str, ...]
    pip: tuple[str, ...]


def _refused(what: str, text: str, expected: str) -> ValueError:
    return ValueError(
        f"envsolver cannot compute conda-lock's content hash for the {what} {text!r}: conda-lock's reading of it "
        f"is not reproduced here (expected {expected}). This is an envsolver bug; please report it."
    )


def _dependency(name: str, manager: str, version: str, build: str | None) -> dict[str, Any]:
    """A `VersionedDependency` as conda-lock's model dumps it, without its null `markers`."""
    return {
        "name": name,
        "manager": manager,
        "category": "main",
        "extras": [],
        "version": version,
        "build": build,
        "conda_channel": None,
        "hash": None,
    }


def conda_dependency(spec: str) -> dict[str, Any]:
    """A conda spec of environment.yml (`name`, `name version` or `name version build`) as conda-lock reads
    it (conda_spec_to_versioned_dep, through its vendored MatchSpec). Raises ValueError for another form."""
    found = _CONDA.fullmatch(spec)
    if found is None:
        raise _refused("conda spec", spec, "`name [version [build]]` in the forms envsolver writes")
    version, build = found["version"] or "", found["build"]
    if version.startswith("==") and build is None:
        version = version[2:]
    return _dependency(found["name"], "conda", version, build)


def _canonical(name: str) -> str:
    """PEP 503's normalised name, as packaging.utils.canonicalize_name gives it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_dependency(line: str) -> dict[str, Any]:
    """A PEP 508 requirement as conda-lock reads it (parse_python_requirement, manager pip): the markers after the
    last `;`, the canonical name, the specifiers joined by `,` in sorted order (`*` for none), the extras sorted
    (conda-lock lists packaging's set of them, whose order it does not fix). A direct reference (`name @ URL`)
    is refused with ValueError, as envsolver never writes one."""
    from packaging.requirements import InvalidRequirement, Requirement

    requirement_text, _, markers = line.rpartition(";") if ";" in line else (line, "", "")
    try:
        requirement = Requirement(requirement_text.strip())
    except InvalidRequirement:
        raise _refused("pip requirement", line, "a PEP 508 requirement") from None
    if requirement.url:
        raise _refused("pip requirement", line, "a requirement without a URL")
    specifiers = str(requirement.specifier).replace("===", "==")
    version = ",".join(sorted(specifiers.split(","))) if specifiers else "*"
    dep = _dependency(_canonical(requirement.name), "pip", version, None)
    dep["extras"] = sorted(requirement.extras)
    if markers.strip():
        dep["markers"] = markers.strip()
    return dep


def channel_json(channel: str) -> str:
    """A channel name of environment.yml as conda-lock's `Channel.from_string(...).model_dump_json()`."""
    if not _CHANNEL.fullmatch(channel):
        raise _refused("channel", channel, "a channel name such as conda-forge")
    return json.dumps({"url": channel, "used_env_vars": []}, separators=(",", ":"))


def virtual_entry(name: str, value: str, platform: str) -> tuple[str, dict[str, Any]]:
    """A virtual package (`__cuda: "12.4"`, `__archspec: "1 x86_64"`) as an entry of conda-lock's fake
    repodata for `platform`: its file name and record, with the build number conda-lock 2 wrote."""
    found = _VIRTUAL_VALUE.fullmatch(value)
    if not _VIRTUAL_NAME.fullmatch(name) or found is None:
        raise _refused("virtual package", f"{name} {value}", "`__name: version [build]`")
    version, build_string = found["version"], found["build"] or ""
    build = f"{build_string}_0" if build_string else "0"
    record: dict[str, Any] = {
        "name": name,
        "version": version,
        "build_string": build_string,
        "build_number": 0,
        "noarch": "",
        "depends": [],
        "timestamp": _TIMESTAMP,
        "package_type": "virtual_system",
        "build": build,
        "subdir": platform,
    }
    return f"{name}-{version}-{build}.tar.bz2", record


def _specs(entries: Entries) -> list[dict[str, Any]]:
    deps: dict[tuple[str, str], dict[str, Any]] = {}
    for spec in entries.conda:
        dep = conda_dependency(spec)
        deps[(dep["manager"], dep["name"])] = dep
    if entries.pip:
        for line in entries.pip:
            dep = pip_dependency(line)
            deps[(dep["manager"], dep["name"])] = dep
        deps[("conda", "pip")] = _dependency("pip", "conda", "*", None)  # conda-lock makes sure pip is there
    return [deps[key] for key in sorted(deps)]


def _subdir(platform: str, virtual: Mapping[str, str]) -> dict[str, Any]:
    packages = dict(virtual_entry(name, value, platform) for name, value in virtual.items())
    return {"info": {"subdir": platform}, "packages": packages}


def content_hashes(entries: Entries, virtual: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Platform -> conda-lock's content hash for environment.yml holding `entries`, solved with the virtual
    packages `virtual[platform]` (the file virtualpkgs.render writes). Raises ValueError for an entry in a form
    whose conda-lock reading is not reproduced here."""
    channels = [channel_json(c) for c in entries.channels]
    specs = _specs(entries)
    out = {}
    for platform, packages in virtual.items():
        content = {
            "channels": channels,
            "specs": specs,
            "virtual_package_hash": {"noarch": _subdir("noarch", {}), platform: _subdir(platform, packages)},
        }
        out[platform] = hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()
    return out
