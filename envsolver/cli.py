"""The `envsolver` command: parse options, call the library, print, exit. Nothing else lives here.

Exit codes: 0 ok; 1 no consistent stack for the target; 2 bad input.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from envsolver import __version__, detect, lock, lockfile, outputs, profile, render
from envsolver import install as installer
from envsolver.errors import BadInputError, EnvsolverError
from envsolver.hook import activation as hook_activation
from envsolver.hook import build as hook_build
from envsolver.hook import render as hook_render
from envsolver.hook import run as hook_run
from envsolver.inputs import Inputs, Options, build_target, make_command
from envsolver.kb import default_kb
from envsolver.outputs import cache_dir
from envsolver.plan import Plan
from envsolver.resolve import resolve
from envsolver.verify import checks as verify_checks
from envsolver.verify import render as verify_render
from envsolver.verify import run as verify_run

F = TypeVar("F", bound=Callable[..., Any])

EPILOG_MAKE = """\b
Examples:
  envsolver make --gpu a100
  envsolver make --gpu v100 --gpu a100 --gpu h100 --driver 535.104.05 --out envs/cluster
  envsolver make --profile gh200
  envsolver make --gpu a100 --torch 2.3.1 --python 3.11
  envsolver make --gpu auto            # on a GPU node: detect GPUs and driver
  envsolver make --profile gh200 --offline                 # lock against the bundled snapshot
  envsolver make --gpu a100 --channel https://mirror.example.org/conda-forge
  envsolver make --gpu a100 --no-lock  # environment.yml only

Exit codes: 0 ok, 1 no consistent stack for the target (or no solution), 2 bad input.
"""

EPILOG_EXPLAIN = """\b
Examples:
  envsolver explain --gpu v100 --driver 580.65.06
  envsolver explain --gpu rtx5090 --driver 550.54.14     # exits 1: names the driver upgrade
  envsolver explain --gpu a100 --torch 2.3.1 --json

Exit codes: 0 ok, 1 no consistent stack for the target, 2 bad input.
"""


class _Group(click.Group):
    """Maps EnvsolverError to its message on stderr and its exit code, in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EnvsolverError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def target_options(func: F) -> F:
    options = [
        click.option(
            "--gpu",
            "gpus",
            multiple=True,
            metavar="NAME",
            help="Target GPU (repeatable): a key, alias or nvidia-smi name (a100, 'NVIDIA H100 80GB HBM3'), "
            "or 'auto' to detect this host's GPUs and driver.",
        ),
        click.option(
            "--profile",
            metavar="NAME|FILE",
            help=f"A named target: {', '.join(profile.available())}; or a path to a profile YAML.",
        ),
        click.option(
            "--driver",
            metavar="VERSION",
            help="The oldest NVIDIA driver on the nodes, e.g. 535.104.05. "
            "Absent: assume a current driver (with a warning).",
        ),
        click.option("--python", metavar="X.Y", help="Python version, e.g. 3.11."),
        click.option("--torch", metavar="VERSION", help="torch version or range: 2.5, 2.3.1, '>=2.4,<2.6'."),
        click.option("--cuda", metavar="X.Y", help="CUDA toolkit version for nvcc and the runtime, e.g. 12.4."),
        click.option(
            "--driver-compat",
            type=click.Choice(["full", "minor"]),
            default=None,
            help="'full': only CUDA the driver fully supports; 'minor' (default) also accepts "
            "minor-version compatibility.",
        ),
        click.option(
            "--source",
            type=click.Choice(["conda-forge", "pytorch"]),
            default=None,
            help="Where torch comes from: conda-forge (default) or the legacy pytorch channel (<= 2.5.1).",
        ),
        click.option(
            "--platform",
            type=click.Choice(["linux-64", "linux-aarch64"]),
            default=None,
            help="Conda platform; default: the GPUs' usual host (linux-aarch64 for GH200/GB200/GB300).",
        ),
        click.option("--glibc", metavar="X.Y", help="The nodes' glibc (default 2.28)."),
        click.option("--deepspeed/--no-deepspeed", default=None, help="Include DeepSpeed (default: yes)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _options(kwargs: dict[str, Any]) -> Options:
    return Options(
        gpus=tuple(kwargs["gpus"]),
        profile=kwargs["profile"],
        driver=kwargs["driver"],
        python=kwargs["python"],
        torch=kwargs["torch"],
        cuda=kwargs["cuda"],
        source=kwargs["source"],
        platform=kwargs["platform"],
        deepspeed=kwargs["deepspeed"],
        driver_compat=kwargs["driver_compat"],
        glibc=kwargs["glibc"],
    )


def _plan(kwargs: dict[str, Any]) -> tuple[Inputs, Plan]:
    kb = default_kb()
    inputs = build_target(_options(kwargs), kb, detect=detect.detect, environ=os.environ)
    return inputs, resolve(inputs.target, kb)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="envsolver")
def main() -> None:
    """Resolve GPU models and a driver into a consistent conda GPU training stack
    (PyTorch + CUDA toolkit with nvcc and headers + cuDNN + NCCL + DeepSpeed)."""


@main.command(epilog=EPILOG_EXPLAIN)
@target_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (stable keys).")
def explain(as_json: bool, **kwargs: Any) -> None:
    """Show the plan for a target: decisions with sources, rejected candidates, warnings."""
    inputs, plan = _plan(kwargs)
    if as_json:
        doc = plan.to_json()
        doc["detected"] = inputs.detected
        click.echo(json.dumps(doc, indent=2))
        return
    render.plan(Console(), plan, inputs.detected)


@main.command(epilog=EPILOG_MAKE)
@target_options
@click.option("--name", help="Environment name (default: envsolver-<gpus>).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory for environment.yml, conda-lock.yml and conda-<platform>.lock.",
)
@click.option("--offline", is_flag=True, help="Lock against the bundled snapshot of real channel records.")
@click.option(
    "--channel",
    "channels",
    multiple=True,
    metavar="URL",
    help="Lock against this channel instead of the live ones (repeatable): a site mirror or a file:// channel.",
)
@click.option("--no-lock", is_flag=True, help="Write environment.yml only; do not solve.")
@click.option("--force", is_flag=True, help="Overwrite files that were edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written, and the plan, as JSON.")
def make(
    name: str | None,
    out_dir: Path,
    offline: bool,
    channels: tuple[str, ...],
    no_lock: bool,
    force: bool,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Resolve the target, solve it for the target platform and write environment.yml, conda-lock.yml and
    conda-<platform>.lock to DIR."""
    if offline and channels:
        raise BadInputError("--offline and --channel exclude each other. Pass one of them.")
    kb = default_kb()
    inputs = build_target(_options(kwargs), kb, detect=detect.detect, environ=os.environ)
    command = make_command(inputs.target, name=name, offline=offline, channels=channels, no_lock=no_lock)
    console = Console(stderr=True)
    if no_lock:
        plan = resolve(inputs.target, kb)
        written = outputs.write_environment(plan, out_dir, command, name, force)
        lock_result = None
    else:
        mode: lock.Mode = "offline" if offline else ("custom" if channels else "live")
        with console.status("resolving", spinner="dots") as status:
            lock_result = lock.lock(inputs.target, kb, mode, channels, cache_dir(), lambda m: status.update(m))
        plan = lock_result.plan
        written = outputs.write_all(lock_result, kb, out_dir, command, name, force)
    if as_json:
        doc: dict[str, Any] = {"files": {str(p): o.value for p, o in written.items()}, "plan": plan.to_json()}
        if lock_result is not None:
            doc["lock"] = {
                "channels": list(lock_result.channels),
                "used": lock_result.used,
                "snapshot_date": lock_result.snapshot_date,
                "packages": {p: len(r) for p, r in lock_result.records.items()},
                "warnings": list(lock_result.warnings),
            }
        click.echo(json.dumps(doc, indent=2))
        return
    out = Console()
    for path, outcome in written.items():
        out.print(f"{path}: {outcome.value}", highlight=False)
    out.print(
        f"torch {plan.torch_version} (CUDA {plan.torch_cuda} build), CUDA {plan.cuda_version}, Python "
        f"{plan.python_version}, TORCH_CUDA_ARCH_LIST={plan.torch_cuda_arch_list}",
        highlight=False,
    )
    if lock_result is not None:
        where = (
            f"the bundled snapshot of {lock_result.snapshot_date}"
            if lock_result.used == "snapshot"
            else (", ".join(lock_result.channels))
        )
        count = sum(len(r) for r in lock_result.records.values())
        out.print(f"locked {count} packages against {where}", highlight=False)
        for w in lock_result.warnings:
            out.print(f"[yellow]warning[/]: {escape(w)}")
    for w in plan.warnings:
        out.print(f"[yellow]warning[/]: {escape(w)}")
    lockfile = out_dir / "conda-lock.yml"
    out.print(
        f"Create it with: conda-lock install -n NAME {lockfile}   (or: envsolver install {lockfile} -p PREFIX)"
        if lock_result
        else f"Create it with: conda env create -f {out_dir / 'environment.yml'}",
        highlight=False,
    )


@main.command(name="install")
@click.argument(
    "lock_path", metavar="[LOCK]", default="conda-lock.yml", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "-p",
    "--prefix",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The environment directory to create or update.",
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
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def install_command(
    lock_path: Path, prefix: Path, platform: str | None, mirrors: tuple[str, ...], no_hook: bool, as_json: bool
) -> None:
    """Install a conda-lock.yml or explicit lock into PREFIX, without conda.

    Every archive is checked against the lock's sha256 before the prefix changes; a tampered or truncated
    archive is refused and the prefix is left as it was. Re-running on an unchanged prefix does nothing.

    \b
    Examples:
      envsolver install conda-lock.yml -p ~/envs/train
      envsolver install conda-linux-64.lock -p /scratch/envs/train
      envsolver install -p ./env --mirror https://conda.anaconda.org=https://mirror.example.org/conda
    """
    mirror_map = {}
    for item in mirrors:
        old, sep, new = item.partition("=")
        if not sep or "://" not in old or "://" not in new:
            raise BadInputError(
                f"--mirror {item!r} is not FROM=TO with two URLs. Pass e.g. "
                "--mirror https://conda.anaconda.org=https://mirror.example.org/conda."
            )
        mirror_map[old] = new
    console = Console(stderr=True)
    with console.status("reading the lock", spinner="dots") as status:
        report = installer.install(lock_path, prefix, platform, mirror_map, cache_dir(), lambda m: status.update(m))
    meta = lockfile.metadata(lock_path)
    hook_run.save_lock_metadata(prefix, report.platform, meta)
    hook_report = None
    skipped = "not run (--no-hook); run `envsolver hook -p PREFIX` later"
    if not no_hook and "envsolver_torch_cuda_arch_list" not in meta:
        skipped = (
            "skipped: the lock carries no envsolver metadata (it was not written by envsolver make); run "
            "`envsolver hook -p PREFIX --arch-list ...`"
        )
    elif not no_hook:
        with console.status("post-install hook", spinner="dots") as status:
            hook_report = hook_run.hook(
                prefix,
                default_kb(),
                None,
                None,
                hook_build.DEFAULT_OPS,
                hook_build.default_jobs(),
                False,
                None,
                os.environ,
                lambda m: status.update(m),
            )
    if as_json:
        doc = {
            "prefix": str(report.prefix),
            "platform": report.platform,
            "packages": report.packages,
            "fetched": report.fetched,
            "changed": report.changed,
            "hook": hook_render.as_json(hook_report) if hook_report else skipped,
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        state = "installed" if report.changed else "already up to date"
        out = Console()
        out.print(
            f"{report.prefix}: {state} ({report.packages} packages for {report.platform}, "
            f"{report.fetched} fetched and verified)",
            highlight=False,
        )
        if hook_report is not None:
            hook_render.show(out, hook_report)
        else:
            out.print(f"post-install hook: {skipped}", highlight=False)
    if hook_report is not None and not hook_report.ok:
        sys.exit(1)


@main.command(name="hook")
@click.option(
    "-p", "--prefix", required=True, type=click.Path(file_okay=False, path_type=Path), help="The environment to set up."
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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def hook_command(
    prefix: Path,
    lock_path: Path | None,
    arch_list: str | None,
    ops: str,
    jobs: int,
    no_build: bool,
    print_env: bool,
    python: Path | None,
    as_json: bool,
) -> None:
    """Write activation scripts (CUDA_HOME, CPATH, TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR, TORCH_EXTENSIONS_DIR),
    check the toolchain before any compiler runs, then build DeepSpeed's ops for the target GPUs and prove them.

    \b
    Examples:
      envsolver hook -p ~/envs/train
      envsolver hook -p ~/envs/train --no-build
      envsolver hook -p ~/envs/train --ops fused_adam --arch-list '8.0;9.0+PTX'
      eval "$(envsolver hook -p ~/envs/train --print-env)"

    Exit codes: 0 ok, 1 a pre-flight check or an op build failed, 2 bad input.
    """
    kb = default_kb()
    if print_env:
        arch, platform = hook_run.arch_list_and_platform(prefix, lock_path, arch_list)
        click.echo(hook_activation.exports(prefix, arch, hook_run.TARGETS[platform]), nl=False)
        return
    wanted = tuple(o.strip() for o in ops.split(",") if o.strip())
    unknown = [o for o in wanted if o not in hook_build.KNOWN_OPS]
    if unknown:
        raise BadInputError(f"unknown op(s) {unknown}. Known: {', '.join(hook_build.KNOWN_OPS)}. Fix --ops.")
    console = Console(stderr=True)
    with console.status("hook", spinner="dots") as status:
        report = hook_run.hook(
            prefix, kb, lock_path, arch_list, wanted, jobs, no_build, python, os.environ, lambda m: status.update(m)
        )
    if as_json:
        click.echo(json.dumps(hook_render.as_json(report), indent=2))
    else:
        hook_render.show(Console(), report)
    if not report.ok:
        sys.exit(1)


@main.command(name="verify")
@click.option("-p", "--prefix", type=click.Path(file_okay=False, path_type=Path), help="The environment to check.")
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The interpreter to check (default: PREFIX/bin/python, the active conda env, or python3).",
)
@click.option(
    "--lock",
    "lock_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Compare the installed packages and this host with a conda-lock.yml.",
)
@click.option("--gpu-test", is_flag=True, help="Also run five FusedAdam steps against torch.optim.AdamW on the GPU.")
@click.option(
    "--check",
    "only",
    multiple=True,
    type=click.Choice(list(verify_checks.IDS)),
    help="Run only these checks (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {ok, target, checks} as JSON.")
def verify_command(
    prefix: Path | None,
    python: Path | None,
    lock_path: Path | None,
    gpu_test: bool,
    only: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check an environment end to end: driver, GPUs, torch's CUDA build, nvcc and headers, cuDNN, NCCL,
    DeepSpeed's ops, the lock. Every failure names its fix.

    \b
    Examples:
      envsolver verify                       # the active conda env
      envsolver verify -p ~/envs/train --lock conda-lock.yml
      envsolver verify --python ./venv/bin/python --json
      envsolver verify --gpu-test            # on a GPU node

    Exit codes: 0 everything passed (warnings allowed), 1 a check failed, 2 verify could not run.
    """
    kb = default_kb()
    out = Console()
    if as_json:
        chosen, _, checks = verify_run.verify(kb, prefix, python, lock_path, gpu_test, only, os.environ)
        click.echo(json.dumps(verify_render.as_json(chosen.python, chosen.prefix, checks), indent=2))
    else:
        out.print(f"verify {python or prefix or 'the active environment'}", highlight=False)
        chosen, _, checks = verify_run.verify(
            kb, prefix, python, lock_path, gpu_test, only, os.environ, on_check=lambda c: verify_render.line(out, c)
        )
        out.print(verify_render.summary(checks), highlight=False)
    if any(c.status == "fail" for c in checks):
        sys.exit(1)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of GPUs.")
def gpus(as_json: bool) -> None:
    """List the GPUs envsolver knows, with compute capability, memory, bf16 and fp8 support.

    \b
    Examples:
      envsolver gpus
      envsolver gpus --json | jq '.[] | select(.compute_capability == "9.0") | .name'
    """
    kb = default_kb()
    if as_json:
        click.echo(json.dumps(render.gpu_rows(kb.gpus), indent=2))
        return
    render.gpu_table(Console(), kb.gpus)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
