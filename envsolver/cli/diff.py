"""`envsolver diff OLD NEW`: the packages added, removed, changed and moved between conda and PyPI from one lock or
installed prefix to another. Parse, call install.inventory and lock.pkgdiff, print, exit. Defined on its own;
cli/main.py adds it to `main`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from envsolver.cli.base import Command, verbosity
from envsolver.kb.model import PLATFORMS

EPILOG = """\b
Examples:
  envsolver diff old/conda-lock.yml conda-lock.yml          # what a new lock changes
  envsolver diff envs/a100 envs/a100-new                    # directories make wrote: their conda-lock.yml
  envsolver diff conda-lock.yml /shared/envs/train          # the lock against what is installed
  envsolver diff conda-lock.yml -n train --json             # ... the existing environment NAME, as JSON
  envsolver diff conda-linux-64.lock conda-lock.yml --platform linux-64
  envsolver diff --exit-code conda-lock.yml /shared/envs/train || echo "the env drifted from its lock"

Each line: the change (changed, added, removed, or moved: the package left conda for PyPI or the other way,
such as conda's pytorch replaced by PyPI's torch), the name, the manager (conda or pip), the old version and
build, and the new. A PyPI distribution added while a conda package still provides its project says so
("over conda's pytorch 2.10.0"). A prefix is read from its conda-meta/*.json records and its site-packages'
*.dist-info (those another installer than conda put there).

Exit codes: 0 compared (whether or not they differ), or, with --exit-code, 0 the same and 1 they differ (as
diff(1) and `git diff --exit-code`); 2 bad input: a path that is not a lock or a prefix, a lock with several
platforms and no --platform, a file that cannot be read.
"""


@click.command(name="diff", cls=Command, epilog=EPILOG)
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path), required=False)
@click.option(
    "-n",
    "--name",
    "env_name",
    metavar="NAME",
    help="Instead of NEW: the existing environment NAME, found as conda finds it.",
)
@click.option(
    "--platform",
    type=click.Choice(PLATFORMS),
    default=None,
    help="The platform to compare where a conda-lock.yml locks several.",
)
@click.option("--exit-code", is_flag=True, help="Exit 1 when they differ, 0 when they do not.")
@click.option("--json", "as_json", is_flag=True, help="Print both sides and the changes as JSON (stable keys).")
@verbosity
def diff_command(
    old: Path, new: Path | None, env_name: str | None, platform: str | None, exit_code: bool, as_json: bool
) -> None:
    """Show the packages that differ between two locks, or a lock and an installed prefix: added, removed, changed
    (version or build) and moved between conda and PyPI.

    OLD and NEW are each a conda-lock.yml, an explicit conda-<platform>.lock (its `# pip` lines are its PyPI
    part), a directory make wrote (its conda-lock.yml), or an installed environment (a directory with
    conda-meta/); -n NAME stands for NEW.
    """
    from envsolver.cli import render
    from envsolver.cli.env import prefix_or_name
    from envsolver.core.printable import printable
    from envsolver.install import inventory
    from envsolver.kb import default_kb
    from envsolver.lock import pkgdiff

    if (new is None) == (env_name is None):
        raise click.UsageError("Pass NEW or -n NAME (one of them).")
    target = new if new is not None else prefix_or_name(None, env_name, True, "the environment to compare.")
    before, after = inventory.side(old, platform), inventory.side(target, platform)
    found = pkgdiff.diff(before.packages, after.packages, pkgdiff.pypi_of_conda(default_kb()))
    if as_json:
        click.echo(
            json.dumps({"ok": True, "old": before.to_json(), "new": after.to_json(), **found.to_json()}, indent=2)
        )
    else:
        for label, shown in (("old", before), ("new", after)):
            where = f", {shown.platform}" if shown.platform else ""
            kind = "lock" if shown.kind == "lock" else "installed prefix"
            click.echo(printable(f"{label}: {shown.path} ({kind}{where}, {len(shown.packages)} packages)"))
        for line in pkgdiff.lines(found):
            click.echo(line)
    notes = [
        f"{label} {shown.path}: {note}" for label, shown in (("old", before), ("new", after)) for note in shown.skipped
    ]
    render.warnings(render.out(stderr=True), notes)  # each escaped there
    if exit_code and found.differ:
        click.get_current_context().exit(1)
