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

from envsolver import __version__, detect, profile, render
from envsolver.errors import EnvsolverError
from envsolver.inputs import Inputs, Options, build_target, canonical_command
from envsolver.kb import default_kb
from envsolver.kb.load import kb_date
from envsolver.plan import Plan
from envsolver.resolve import resolve
from envsolver.writers import environment, files

F = TypeVar("F", bound=Callable[..., Any])

EPILOG_MAKE = """\b
Examples:
  envsolver make --gpu a100
  envsolver make --gpu v100 --gpu a100 --gpu h100 --driver 535.104.05 --out envs/cluster
  envsolver make --profile gh200
  envsolver make --gpu a100 --torch 2.3.1 --python 3.11
  envsolver make --gpu auto            # on a GPU node: detect GPUs and driver

Exit codes: 0 ok, 1 no consistent stack for the target, 2 bad input.
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
    help="Directory for environment.yml.",
)
@click.option("--force", is_flag=True, help="Overwrite an environment.yml that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written, and the plan, as JSON.")
def make(name: str | None, out_dir: Path, force: bool, as_json: bool, **kwargs: Any) -> None:
    """Resolve the target and write DIR/environment.yml."""
    inputs, plan = _plan(kwargs)
    command = canonical_command("make", inputs.target) + (f" --name {name}" if name else "")
    text = environment.render(plan, command, kb_date(), name)
    path = out_dir / "environment.yml"
    outcome = files.write(path, text, force=force)
    if as_json:
        click.echo(json.dumps({"files": {str(path): outcome.value}, "plan": plan.to_json()}, indent=2))
        return
    console = Console()
    console.print(
        f"{path}: {outcome.value} (torch {plan.torch_version}, CUDA {plan.cuda_version}, "
        f"Python {plan.python_version}, TORCH_CUDA_ARCH_LIST={plan.torch_cuda_arch_list})"
    )
    for w in plan.warnings:
        console.print(f"[yellow]warning[/]: {w}")
    console.print(f"Create it with: conda env create -f {path}   (or: micromamba create -f {path})")


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
