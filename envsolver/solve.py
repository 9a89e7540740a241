"""The only module that calls rattler: solve a set of specs for a target platform, index a local channel,
install records into a prefix.

Results come back as envsolver's own `Record` type, with URLs in their public form (a record read from a
local copy of a channel, such as the bundled snapshot, gets the public channel's URL).
"""

from __future__ import annotations

import asyncio
import datetime
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver.errors import ConflictError, EnvsolverError
from envsolver.lockfile import LockEntry
from envsolver.redact import redact, redact_text


@dataclass(frozen=True)
class ChannelSource:
    """A channel to read (`location`: https:// or file://) and the URL it stands for in written files."""

    public: str
    location: str


@dataclass(frozen=True)
class Record:
    name: str
    version: str
    build: str
    build_number: int
    subdir: str
    channel: str
    url: str
    md5: str
    sha256: str
    size: int | None
    depends: tuple[str, ...]
    constrains: tuple[str, ...]
    noarch: str | None = None

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


class SolveFailed(ConflictError):
    """The solver found no solution (exit 1); the message carries its explanation."""


class ChannelsUnreachable(EnvsolverError):
    """Repodata could not be fetched from a channel (exit 2)."""


def _public_url(url: str, sources: Sequence[ChannelSource]) -> tuple[str, str]:
    for source in sources:
        location = source.location.rstrip("/")
        if url.startswith(location + "/"):
            return source.public.rstrip("/") + url[len(location) :], source.public.rstrip("/")
    return url, url.rsplit("/", 2)[0]


async def _solve(
    specs: Sequence[str],
    sources: Sequence[ChannelSource],
    platform: str,
    virtual_packages: dict[str, str],
    cache_dir: Path,
    timeout: datetime.timedelta,
) -> list[Record]:
    import rattler
    from rattler.channel import ChannelPriority
    from rattler.exceptions import FetchRepoDataError, GatewayError, InvalidChannelError, SolverError
    from rattler.package.build_string import BuildString

    gateway = rattler.Gateway(cache_dir=cache_dir)
    try:
        channels = [rattler.Channel(s.location) for s in sources]
    except InvalidChannelError as exc:
        raise ChannelsUnreachable(
            f"a channel URL is not valid: {redact_text(str(exc))}. Pass http(s):// or file:// channel URLs."
        ) from None
    virtual = []
    for name, value in sorted(virtual_packages.items()):
        version, _, build = value.partition(" ")
        virtual.append(
            rattler.GenericVirtualPackage(
                rattler.PackageName(name), rattler.Version(version), BuildString(build or "0")
            )
        )
    try:
        solved = await rattler.solve(
            channels,
            list(specs),
            gateway=gateway,
            platforms=[rattler.Subdir(platform), rattler.Subdir("noarch")],
            virtual_packages=virtual,
            channel_priority=ChannelPriority.Strict,
            timeout=timeout,
            timestamp_policy="allow-missing",
        )
    except SolverError as exc:  # rattler's texts may name a channel URL: redacted
        raise SolveFailed(f"no solution for {platform}:\n{redact_text(str(exc))}") from None
    except (FetchRepoDataError, GatewayError) as exc:
        raise ChannelsUnreachable(f"could not fetch repodata: {redact_text(str(exc))}") from None
    out = []
    for rec in solved:
        url, channel = _public_url(rec.url, sources)
        out.append(
            Record(
                name=rec.name.normalized,
                version=str(rec.version),
                build=str(rec.build),
                build_number=rec.build_number,
                subdir=rec.subdir,
                channel=channel,
                url=url,
                md5=rec.md5.hex() if rec.md5 else "",
                sha256=rec.sha256.hex() if rec.sha256 else "",
                size=rec.size,
                depends=tuple(rec.depends),
                constrains=tuple(rec.constrains),
                noarch="python" if rec.noarch.python else ("generic" if rec.noarch.generic else None),
            )
        )
    return sorted(out, key=lambda r: r.name)


def solve(
    specs: Sequence[str],
    sources: Sequence[ChannelSource],
    platform: str,
    virtual_packages: dict[str, str],
    cache_dir: Path,
    timeout_s: float = 300.0,
) -> list[Record]:
    """Solve `specs` for `platform` (plus noarch) with strict channel priority and exactly these virtual
    packages (never the host's). A channel whose URL carries credentials is read through a private repodata
    cache that is removed afterwards. Raises SolveFailed (exit 1) or ChannelsUnreachable (exit 2)."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if not any(redact(s.location) != s.location for s in sources):
        return asyncio.run(_solve(specs, sources, platform, virtual_packages, cache_dir, timeout))
    # rattler's repodata cache records the URL it fetched; a URL with credentials gets a cache of its own,
    # removed afterwards, so no credential is left in a file.
    with tempfile.TemporaryDirectory(prefix="envsolver-solve-") as private:
        return asyncio.run(_solve(specs, sources, platform, virtual_packages, Path(private), timeout))


def index_channel(path: Path) -> None:
    """Write repodata.json for every subdir of a local channel directory (tests build channels this way)."""
    from rattler.index import index_fs

    asyncio.run(index_fs(channel_directory=path, write_zst=False, write_shards=False))


def install_records(
    entries: Sequence[tuple[LockEntry, str]],
    prefix: Path,
    platform: str,
    cache_dir: Path,
    reinstall: set[str] | None = None,
) -> None:
    """Link lock entries into `prefix` with rattler; each comes with the URL of its already-verified archive.
    Packages in the prefix that the lock does not list are removed; those named in `reinstall` are linked
    again even where the prefix has the same name, version and build. Link scripts are not run."""
    import rattler
    from rattler.package.build_string import BuildString

    records = []
    for entry, url in entries:
        package = rattler.PackageRecord(
            name=entry.name,
            version=entry.version,
            build=BuildString(entry.build),
            build_number=0,
            subdir=entry.subdir,
            depends=list(entry.depends),
            sha256=bytes.fromhex(entry.sha256) if entry.sha256 else None,
            md5=bytes.fromhex(entry.md5) if entry.md5 else None,
        )
        channel = entry.url.rsplit("/", 2)[0]
        records.append(rattler.RepoDataRecord(package, entry.file_name, url, channel))
    try:
        asyncio.run(
            rattler.install(
                records,
                prefix,
                cache_dir=cache_dir,
                platform=rattler.Subdir(platform),
                reinstall_packages=reinstall or None,
                execute_link_scripts=False,
                show_progress=False,
            )
        )
    except Exception as exc:  # rattler raises its own error types for IO, extraction and linking
        raise EnvsolverError(
            f"installing into {str(prefix)!r} failed: {exc}. Fix the cause and run the same "
            "command again; it picks up where it stopped."
        ) from None
