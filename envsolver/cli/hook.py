"""`envsolver hook`: the post-install hook for a prefix (activation scripts, DeepSpeed's ops built and proven).
Parse options, call, print, exit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from envsolver.cli import render
from envsolver.cli.base import Command, diagnostics, progress, verbosity_of
from envsolver.cli.env import OP_CACHE, OP_CACHE_GROUP, OP_CACHE_TRUST, hook_prefix
from envsolver.core.errors import BadInputError
from envsolver.hook import activation as hook_activation
from envsolver.hook import build as hook_build
from envsolver.hook import render as hook_render
from envsolver.hook import run as hook_run
from envsolver.kb import default_kb


@click.command(name="hook", cls=Command)
@click.option("-p", "--prefix", type=click.Path(file_okay=False, path_type=Path), help="The environment to set up.")
@click.option(
    "-n",
    "--name",
    metavar="NAME",
    help="Instead of -p: the existing environment NAME, found as conda finds it (CONDA_ENVS_DIRS, the root "
    "prefix's envs, ~/.conda/envs, ~/.conda/environments.txt).",
)
@click.option(
    "--lock",
    "lock_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The conda-lock.yml the env came from (default: what envsolver install kept in the prefix).",
)
@click.option("--arch-list", help="TORCH_CUDA_ARCH_LIST to build for, e.g. '8.0;9.0+PTX' (default: the lock's).")
@click.option(
    "--ops",
    default=",".join(hook_build.DEFAULT_OPS),
    show_default=True,
    help="DeepSpeed ops to build, comma-separated.",
)
@click.option(
    "--jobs",
    type=int,
    default=hook_build.default_jobs(),
    show_default=True,
    help="Parallel compile jobs, shared by the ops.",
)
@click.option("--no-build", is_flag=True, help="Write the activation scripts and run the pre-flight only.")
@click.option("--print-env", is_flag=True, help="Print the settings as export lines and stop.")
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The env's python (default: PREFIX/bin/python).",
)
@OP_CACHE
@OP_CACHE_TRUST
@OP_CACHE_GROUP
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@verbosity_of("each step as it starts (the pre-flight, each op built or taken from the op cache, the ops proven)")
def hook_command(
    prefix: Path | None,
    name: str | None,
    lock_path: Path | None,
    arch_list: str | None,
    ops: str,
    jobs: int,
    no_build: bool,
    print_env: bool,
    python: Path | None,
    op_cache: Path | None,
    op_cache_trust: frozenset[int],
    op_cache_group: int | None,
    as_json: bool,
) -> None:
    """Write activation scripts (TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR, TORCH_EXTENSIONS_DIR, and CUDA_HOME and
    CPATH when the prefix holds the CUDA toolkit), check the toolchain before any compiler runs (verify's build
    checks), then build DeepSpeed's ops for the target GPUs (or take them from --op-cache), register them so
    DeepSpeed's own load() imports them without compiling, and prove them (cuobjdump; DeepSpeed's load() in a new
    process). A re-run with nothing changed is decided before torch starts.

    \b
    Examples:
      envsolver hook -p ~/envs/train
      envsolver hook -n train     # after `conda-lock install -n train conda-lock.yml`
      envsolver hook -p /shared/envs/train --op-cache /shared/envsolver-ops
      envsolver hook -p ~/envs/train --no-build
      envsolver hook -p ~/envs/train --ops fused_adam --arch-list '8.0;9.0+PTX'
      eval "$(envsolver hook -p ~/envs/train --print-env)"

    Exit codes: 0 ok; 1 a pre-flight check or an op build failed; 2 bad input, or the hook could not run;
    130 interrupted (Ctrl-C).
    """
    prefix = hook_prefix(prefix, name)
    kb = default_kb()
    if print_env:
        where = hook_run.arch_list_and_platform(prefix, lock_path, arch_list, kb)
        toolkit = hook_run.toolkit_in(prefix, python, where, kb, os.environ)
        exports = hook_activation.exports(prefix, where.arch_list, where.target, toolkit)
        if as_json:
            click.echo(json.dumps(hook_render.env_json(prefix, where.arch_list, exports), indent=2))
        else:
            click.echo(exports, nl=False)
        return
    wanted = tuple(o.strip() for o in ops.split(",") if o.strip())
    unknown = [o for o in wanted if o not in hook_build.KNOWN_OPS]
    if unknown:
        raise BadInputError(f"unknown op(s) {unknown}. Known: {', '.join(hook_build.KNOWN_OPS)}. Fix --ops.")
    with diagnostics().status("hook", spinner="dots") as status:
        report = hook_run.hook(
            prefix,
            kb,
            lock_path,
            arch_list,
            wanted,
            jobs,
            no_build,
            python,
            os.environ,
            progress(status),
            op_cache=op_cache,
            op_cache_trust=op_cache_trust,
            need_python=True,
            op_cache_group=op_cache_group,
        )
    if as_json:
        click.echo(json.dumps(hook_render.as_json(report), indent=2))
    else:
        hook_render.show(render.console(), report)
    if not report.ok:
        sys.exit(1)
