"""`envsolver install`: install a lock into a prefix without conda, then run the post-install hook. Parse options,
call, print, exit."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envsolver import __version__
from envsolver.cli import install_report, render
from envsolver.cli.base import Command, diagnostics, progress, verbosity_of
from envsolver.cli.env import OP_CACHE, OP_CACHE_GROUP, OP_CACHE_TRUST, OpCache, install_prefix
from envsolver.cli.install_report import Done
from envsolver.core import interrupts
from envsolver.install import installstate
from envsolver.net import progress as byte_progress

if TYPE_CHECKING:
    from envsolver.install import run as installer


@click.command(name="install", cls=Command)
@click.argument(
    "lock_path", metavar="[LOCK]", default="conda-lock.yml", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "-p",
    "--prefix",
    type=click.Path(file_okay=False, path_type=Path),
    help="The environment directory to create or update.",
)
@click.option(
    "-n",
    "--name",
    metavar="NAME",
    help="Instead of -p: the named environment NAME in conda's envs directory (the first entry of "
    "CONDA_ENVS_DIRS or CONDA_ENVS_PATH, else ~/.conda/envs), as conda's -n NAME.",
)
@click.option(
    "--platform",
    type=click.Choice(["linux-64", "linux-aarch64"]),
    default=None,
    help="Which platform of a multi-platform lock (default: the lock's only one).",
)
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="FROM=TO",
    help="Rewrite package URLs starting with FROM to start with TO (a site mirror); repeatable.",
)
@click.option("--no-hook", is_flag=True, help="Do not run the post-install hook.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be linked (each package: installed already, cached or to download) and write nothing.",
)
@OP_CACHE
@OP_CACHE_TRUST
@OP_CACHE_GROUP
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@verbosity_of(
    "each step as it starts (each archive fetched, the archives checked, the linking, the PyPI files installed, "
    "then the post-install hook's pre-flight and ops)"
)
def install_command(
    lock_path: Path,
    prefix: Path | None,
    name: str | None,
    platform: str | None,
    mirrors: tuple[str, ...],
    no_hook: bool,
    dry_run: bool,
    op_cache: Path | None,
    op_cache_trust: frozenset[int],
    op_cache_group: int | None,
    as_json: bool,
) -> None:
    """Install a conda-lock.yml or explicit lock into PREFIX, without conda.

    Every archive is proven against the lock's hash before the prefix changes: its sha256 where the lock records
    one (a conda-lock.yml from envsolver make records it for every package; an explicit lock only on
    `URL#sha256=HASH` lines), else its md5 (an explicit lock's `URL#MD5` lines, the form conda and envsolver's
    conda-<platform>.lock write); PyPI files by sha256 always. A tampered or truncated archive is refused and
    the prefix is left as it was. Re-running on an unchanged prefix does nothing.

    \b
    Examples:
      envsolver install conda-lock.yml -p ~/envs/train
      envsolver install conda-linux-64.lock -p /scratch/envs/train
      envsolver install conda-lock.yml -n train     # ~/.conda/envs/train (or CONDA_ENVS_DIRS's first)
      envsolver install -p ./env --mirror https://conda.anaconda.org=https://mirror.example.org/conda

    Exit codes: 0 installed (or already up to date) and the hook passed or was not run; 1 the post-install
    hook failed (a pre-flight check or an op build); 2 bad input or the install could not run (the prefix is
    left as it was); 130 interrupted (Ctrl-C); 143 terminated by SIGTERM; 129 terminated by SIGHUP (both
    cleaned up as after Ctrl-C).
    """
    with interrupts.like_ctrl_c():
        cache = OpCache(op_cache, op_cache_trust, op_cache_group)
        _install(lock_path, prefix, name, platform, mirrors, no_hook, dry_run, cache, as_json)


def _install(
    lock_path: Path,
    prefix: Path | None,
    name: str | None,
    platform: str | None,
    mirrors: tuple[str, ...],
    no_hook: bool,
    dry_run: bool,
    cache: OpCache,
    as_json: bool,
) -> None:
    """install's work (install_command runs it with SIGTERM and SIGHUP ending like Ctrl-C); CACHE: the op cache
    options (a missing op cache that the hook would not make is refused before anything is installed). A prefix
    that the same request left as it is now is decided up to date from what that install recorded
    (install/installstate.py), before the installer is imported."""
    prefix = install_prefix(prefix, name)
    asked = None if dry_run else installstate.request(lock_path, platform, mirrors, __version__)
    recorded = installstate.unchanged(prefix, asked)
    if recorded is not None:
        done = Done(prefix, recorded.platform, recorded.packages, 0, False, (), recorded.pip)
        _finish(done, recorded.hook, no_hook, cache, as_json)
        return
    from envsolver.install import prefixmeta
    from envsolver.install import run as installer
    from envsolver.lock.lockfile import ARCH_LIST_KEY
    from envsolver.lock.outputs import cache_dir
    from envsolver.net.http import parse_mirrors

    mirror_map = parse_mirrors(mirrors)
    if dry_run:
        _show_plan(installer.plan(lock_path, prefix, platform, mirror_map, cache_dir()), as_json)
        return
    if cache.path is not None and not no_hook:
        from envsolver.core.errors import BadInputError
        from envsolver.hook import opcachedir

        try:
            opcachedir.plan(cache.path, cache.trust)  # the hook makes it: refused now, not after the install
        except opcachedir.NotMade as exc:
            raise BadInputError(str(exc)) from None
    err = diagnostics()
    warn = render.console(stderr=True)  # warnings print with -q too
    with err.status("reading the lock", spinner="dots") as status:
        report = installer.install(
            lock_path, prefix, platform, mirror_map, cache_dir(), progress(status), None,
            lambda warning: render.warnings(warn, [warning]),
        )  # fmt: skip
    prefixmeta.save(prefix, report.platform, report.lock_metadata)
    pip = (*report.pip_installed, *report.pip_kept)
    has_metadata = ARCH_LIST_KEY in report.lock_metadata
    installstate.record(prefix, asked, installstate.Recorded(report.platform, report.packages, pip, has_metadata))
    done = Done(
        report.prefix, report.platform, report.packages, report.fetched, report.changed, report.pip_installed,
        report.pip_kept, report.pip_removed,
    )  # fmt: skip
    _finish(done, has_metadata, no_hook, cache, as_json)


def _finish(
    report: Done,
    has_metadata: bool,
    no_hook: bool,
    cache: OpCache,
    as_json: bool,
) -> None:
    """The post-install hook (unless --no-hook, or the lock has no envsolver metadata: HAS_METADATA, its arch list),
    then the report (install_report, which the no-op before click prints too)."""
    hook_report = None
    skipped = install_report.hook_skipped(no_hook, has_metadata)
    if skipped is None:
        from envsolver.hook import build as hook_build
        from envsolver.hook import render as hook_render
        from envsolver.hook import run as hook_run
        from envsolver.kb import default_kb

        with diagnostics().status("post-install hook", spinner="dots") as status:
            hook_report = hook_run.hook(
                report.prefix,
                default_kb(),
                None,
                None,
                hook_build.DEFAULT_OPS,
                hook_build.default_jobs(),
                False,
                None,
                os.environ,
                progress(status),
                op_cache=cache.path,
                op_cache_trust=cache.trust,
                op_cache_group=cache.group,
            )
    ok = hook_report is None or hook_report.ok
    if as_json:
        hook = hook_render.as_json(hook_report) if hook_report else skipped
        click.echo(json.dumps(install_report.document(report, ok, hook), indent=2))
    else:
        out = render.out()  # rich on a terminal only
        for line in install_report.lines(report):
            render.text(out, line)
        if hook_report is not None:
            hook_render.show(render.console(), hook_report)
        elif skipped is not None:
            render.text(out, install_report.skipped_line(skipped))
    if not ok:
        sys.exit(1)


def _show_plan(plan: installer.InstallPlan, as_json: bool) -> None:
    """install --dry-run: every package and what would happen to it, then one summary line."""
    if as_json:
        doc = {
            "dry_run": True,
            "prefix": str(plan.prefix),
            "platform": plan.platform,
            "changes": plan.changes,
            "packages": [dataclasses.asdict(p) for p in plan.packages],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    out = render.console()
    width = max((len(p.name) for p in plan.packages), default=0)
    for p in plan.packages:
        size = "" if p.size is None else byte_progress.size(p.size)
        render.text(out, f"{p.name:<{width}}  {p.version} {p.build} {p.state} {size}".rstrip())
    states = ("download", "cached", "installed", "remove")
    counts = {state: sum(p.state == state for p in plan.packages) for state in states}
    what = "would link" if plan.changes else "already holds"
    copies = "copy" if counts["remove"] == 1 else "copies"
    remove = f", {counts['remove']} PyPI {copies} of the conda part's to remove" if counts["remove"] else ""
    render.text(
        out,
        f"{plan.prefix}: {what} {len(plan.packages) - counts['remove']} packages for {plan.platform} "
        f"({counts['download']} to download, {counts['cached']} cached, {counts['installed']} installed already"
        f"{remove}); dry run, nothing was written",
    )
