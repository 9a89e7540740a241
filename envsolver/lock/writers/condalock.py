"""Solved records and the plan -> conda-lock.yml (format version 1), written without conda-lock.

The document is the one conda-lock's own models write (`Lockfile.dict_for_output()` of conda-lock 4's v1
models: the same keys, in the same order, with unset and null fields left out), emitted by yamlemit; it is
built here because importing conda-lock loads its whole tool (ensureconda, its vendored poetry, pydantic),
which cost `make` more than everything else it does. tests/test_writers.py proves the bytes equal what
conda-lock's models give, and that conda-lock's parser and its JSON schema accept every file. One difference
by design: conda-lock replaces a credential it finds in a channel URL with the name of an environment
variable holding the same value; channels reach this module redacted, so only a `/t/NAME/` directory of a
file:// channel could look like one, and it is written as it is, whatever the environment holds.

The target's assumptions (GPUs and CCs, driver floor, virtual packages, arch list, envsolver and KB
versions, the snapshot date when one was used) go into `metadata.custom_metadata`, so `verify` can compare a
host against them later. Pure and deterministic: no timestamps, sorted packages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse, urlunparse

from envsolver import __version__
from envsolver.core.redact import redact
from envsolver.lock import howto
from envsolver.lock.pypi.record import PipRecord
from envsolver.lock.solve import Record
from envsolver.lock.writers import virtualpkgs, yamlemit


def _dependencies(record: Record) -> dict[str, str]:
    deps: dict[str, str] = {}
    for dep in record.depends:
        name, _, spec = dep.partition(" ")
        deps[name] = spec.strip()
    return dict(sorted(deps.items()))


def _channel(url: str) -> dict[str, Any]:
    """A channel as conda-lock's `Channel.from_string` stores it: a URL goes through urlparse/urlunparse."""
    public = redact(url)
    return {"url": urlunparse(urlparse(public)) if "://" in public else public, "used_env_vars": []}


def _package(record: Record, platform: str) -> dict[str, Any]:
    """One `LockedDependency` as conda-lock's model dumps it (its field order; a null sha256 left out)."""
    url = redact(record.url)
    if not url:  # conda-lock's model refuses an empty URL
        raise ValueError(f"the record {record.name} has no URL")
    digests = {"md5": record.md5, **({"sha256": record.sha256} if record.sha256 else {})}
    return {
        "name": record.name,
        "version": record.version,
        "manager": "conda",
        "platform": platform,
        "dependencies": _dependencies(record),
        "url": url,
        "hash": digests,
        "build": record.build,
        "category": "main",
        "optional": False,
    }


def _pip_package(record: PipRecord, platform: str) -> dict[str, Any]:
    """One PyPI `LockedDependency` as conda-lock's pip solver writes it: the file's URL without a fragment, its
    sha256, and the release's requirements (name -> specifier, '*' for any)."""
    return {
        "name": record.name,
        "version": record.version,
        "manager": "pip",
        "platform": platform,
        "dependencies": dict(record.dependencies),
        "url": redact(record.url),
        "hash": {"sha256": record.sha256},
        "category": "main",
        "optional": False,
    }


def document(
    records_by_platform: Mapping[str, Sequence[Record]],
    channels: Sequence[str],
    hashes: Mapping[str, str],
    custom: Mapping[str, str],
    pip: Mapping[str, Sequence[PipRecord]] | None = None,
) -> dict[str, Any]:
    """The lock as a plain document: what conda-lock's `Lockfile(...).dict_for_output()` gives. PIP: each
    platform's PyPI files (`manager: pip` entries, after the conda ones as conda-lock sorts them)."""
    packages = [
        _package(r, platform)
        for platform, records in sorted(records_by_platform.items())
        for r in sorted(records, key=lambda r: r.name)
    ]
    packages += [
        _pip_package(r, platform)
        for platform, records in sorted((pip or {}).items())
        for r in sorted(records, key=lambda r: r.name)
    ]
    packages.sort(key=lambda d: (d["manager"], d["name"], d["platform"]))  # conda-lock's LockKey order (stable)
    metadata = {
        "content_hash": dict(sorted(hashes.items())),
        "channels": [_channel(c) for c in channels],
        "platforms": sorted(records_by_platform),
        "sources": ["environment.yml"],
        "custom_metadata": dict(sorted(custom.items())),
    }
    return {"version": 1, "metadata": metadata, "package": packages}


def render(
    records_by_platform: Mapping[str, Sequence[Record]],
    channels: Sequence[str],
    hashes: Mapping[str, str],
    custom: Mapping[str, str],
    command: str,
    kb_date: str,
    pip: Mapping[str, Sequence[PipRecord]] | None = None,
) -> str:
    body = yamlemit.dump(document(records_by_platform, channels, hashes, custom, pip))
    envsolver_way, conda_lock_way = howto.conda_lock_steps("conda-lock.yml", "NAME")
    header = [
        f"# Generated by envsolver {__version__} (knowledge base {yamlemit.comment(kb_date)}) in conda-lock's "
        "format (version 1).",
        f"# Regenerate with: {yamlemit.comment(command)}",
        f"# Install with:    {envsolver_way}",
        f"#             or:  {conda_lock_way}",
        f"#   ({howto.HOOK_WHY})",
        f"# Solved for the virtual packages in {virtualpkgs.NAME}; content_hash is conda-lock's, so in this "
        "directory this finds the lock current:",
        f"#   {virtualpkgs.check_command(sorted(records_by_platform))}",
    ]
    return "\n".join(header) + "\n" + body
