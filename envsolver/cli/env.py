"""What the environment commands (install: cli/install.py, hook: cli/hook.py, verify: cli/verify.py) share: the
prefix from -p or -n, and the op cache's options. Each command lives in its own module so that running one imports
only what it needs (a no-op install imports no hook, verify or cluster code)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

# hook's and install's --op-cache (install runs the hook)

OP_CACHE = click.option(
    "--op-cache",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ENVSOLVER_OP_CACHE",
    help="A shared op cache (a directory on the cluster's shared filesystem; env ENVSOLVER_OP_CACHE): ops built "
    "once for the same DeepSpeed, torch, nvcc, compiler and arch list are copied from it instead of rebuilt. A "
    "missing one is made 0700 (0750 with --op-cache-group), never directly in a directory anyone may write: use "
    "/tmp/$USER/ops, not /tmp/ops.",
)


def _op_cache_trust(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> frozenset[int]:
    if not values:
        return frozenset()
    try:
        from envsolver.hook import optrust  # only when the option is given

        return optrust.parse(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# hook's and install's --op-cache-trust: the op cache's trust model is in SECURITY.md
OP_CACHE_TRUST = click.option(
    "--op-cache-trust",
    "op_cache_trust",
    multiple=True,
    metavar="USER",
    envvar="ENVSOLVER_OP_CACHE_TRUST",
    callback=_op_cache_trust,
    help="Also use an op cache directory owned by USER, and entries written by USER (a user name or uid; "
    "repeatable; env ENVSOLVER_OP_CACHE_TRUST, space-separated). Only yours and root's are used without it; "
    "anything anyone else owns or could have written is refused (naming them) and the op is built.",
)


def _op_cache_group(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from envsolver.hook import opcachedir  # only when the option is given

    try:
        return opcachedir.parse_group(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# hook's and install's --op-cache-group: the group of an op cache they make
OP_CACHE_GROUP = click.option(
    "--op-cache-group",
    "op_cache_group",
    metavar="GROUP",
    envvar="ENVSOLVER_OP_CACHE_GROUP",
    callback=_op_cache_group,
    help="Make a missing --op-cache 0750 with GROUP (a group name or gid of yours; env ENVSOLVER_OP_CACHE_GROUP) "
    "instead of 0700, so that its members can read it. An existing cache is left as it is.",
)


@dataclass(frozen=True)
class OpCache:
    """install's op cache options, as parsed: --op-cache, the uids of --op-cache-trust, the gid of --op-cache-group."""

    path: Path | None
    trust: frozenset[int]
    group: int | None


def install_prefix(prefix: Path | None, name: str | None) -> Path:
    """-p PREFIX, or -n NAME under conda's envs directory (install/envsdir.py); exactly one of them."""
    return prefix_or_name(
        prefix, name, False, "the environment to install into. Pass -p PREFIX (a directory), or -n NAME for a named "
        "environment under conda's envs directory.",
    )  # fmt: skip


def hook_prefix(prefix: Path | None, name: str | None) -> Path:
    """-p PREFIX, or -n NAME of an existing environment (envsdir.existing); exactly one of them."""
    return prefix_or_name(
        prefix, name, True, "the environment to set up. Pass -p PREFIX, or -n NAME for a named environment (as "
        "conda-lock install -n NAME made it).",
    )  # fmt: skip


def prefix_or_name(prefix: Path | None, name: str | None, existing: bool, missing: str) -> Path:
    """The prefix -p gives, or -n NAME's: an existing environment found as conda finds it (EXISTING), else the
    directory conda's -n NAME names. Raises click.UsageError for both or neither (MISSING: what it is for)."""
    if prefix is not None and name is not None:
        raise click.UsageError("-n/--name and -p/--prefix exclude each other. Pass one of them.")
    if name is not None:
        from envsolver.install import envsdir

        return envsdir.existing(name, os.environ) if existing else envsdir.prefix_for(name, os.environ)
    if prefix is None:
        raise click.UsageError(f"Missing option '-p' / '--prefix' (or '-n' / '--name'): {missing}")
    return prefix
