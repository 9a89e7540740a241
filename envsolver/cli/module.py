"""`envsolver module`: write an Lmod modulefile for an installed prefix. Parse options, call, print, exit.
Defined on its own; cli/main.py adds it to `main`.

Exit codes: 0 written (or already up to date); 2 bad input, or the file could not be written.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from envsolver.cli.base import Command, diagnostics, verbosity
from envsolver.cli.env import prefix_or_name
from envsolver.core.printable import printable

EPILOG = """\b
Examples:
  envsolver module train/2026.12 -p /shared/envs/train --out /shared/modulefiles
  envsolver module train/2026.12 -n train --out ~/modulefiles --conflict anaconda3
  envsolver module train/2026.12 -p /shared/envs/train --out /shared/modulefiles --json
  module use /shared/modulefiles && module load train/2026.12     # then, in any shell with Lmod

Exit codes: 0 written (or already up to date); 2 bad input: no activation scripts from envsolver hook in the
prefix, a name or path the modulefile cannot carry, a modulefile edited by hand (pass --force), or the file
could not be written.
"""


@click.command(name="module", cls=Command, epilog=EPILOG)
@click.argument("module_name", metavar="MODULE")
@click.option("-p", "--prefix", type=click.Path(file_okay=False, path_type=Path), help="The installed environment.")
@click.option(
    "-n",
    "--name",
    "env_name",
    metavar="NAME",
    help="Instead of -p: the existing environment NAME, found as conda finds it.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The module directory (the one on MODULEPATH): the file is OUT/MODULE.lua.",
)
@click.option(
    "--family",
    default="conda_env",
    show_default=True,
    metavar="NAME",
    help="Lmod family: loading another module of the family swaps this one out (one conda env at a time).",
)
@click.option("--no-family", is_flag=True, help="Write no family() line.")
@click.option(
    "--conflict",
    "conflicts",
    multiple=True,
    metavar="MODULE",
    help="A module that must not be loaded with this one (repeatable), e.g. a site's anaconda3.",
)
@click.option("--force", is_flag=True, help="Overwrite a modulefile that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@verbosity
def module_command(
    module_name: str,
    prefix: Path | None,
    env_name: str | None,
    out: Path,
    family: str,
    no_family: bool,
    conflicts: tuple[str, ...],
    force: bool,
    as_json: bool,
) -> None:
    """Write an Lmod modulefile (Lua) for an installed environment: `module load MODULE` sets what activating it
    sets (PATH, CONDA_PREFIX, and the hook's TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR, TORCH_EXTENSIONS_DIR, and
    CUDA_HOME and CPATH when the prefix holds the CUDA toolkit), and `module unload MODULE` gives every variable
    back its earlier value.

    MODULE is NAME/VERSION (e.g. train/2026.12). The settings are read from the activation scripts envsolver hook
    wrote into the prefix; the lock it was installed from is named in the module's whatis and help.
    """
    from envsolver.cluster import modulefile
    from envsolver.kb import default_kb

    prefix = prefix_or_name(prefix, env_name, True, "the environment to load.")
    request = modulefile.Request(prefix, module_name, out, None if no_family else family, conflicts, force)
    result = modulefile.write(request, {k: v.value for k, v in default_kb().targets_include.items()})
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
        return
    verb = "wrote" if result.outcome.value == "written" else "unchanged:"
    click.echo(printable(f"{verb} {result.path}"))
    click.echo(printable(f"load it with: module use {shlex.quote(result.out)} && module load {result.module}"))
    if result.not_covered:
        note = f"note: the module does not run the prefix's other activate.d scripts: {', '.join(result.not_covered)}"
        diagnostics().print(printable(note), markup=False, highlight=False)
