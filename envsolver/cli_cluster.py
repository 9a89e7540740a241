"""The cluster commands of `envsolver`: `cluster init`. Parse options, call, print, exit.

cli.py registers the group (`main.add_command(cluster)`); its `_Group` turns every exception into a message
and an exit code (0 ok; 2 bad input, or Slurm could not answer; 130 interrupted), and with --json into one
failure document. Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click

from envsolver import render
from envsolver.cluster import discover, report, slurm
from envsolver.cluster import file as cluster_file
from envsolver.kb import default_kb

# cli.py's handler reads whether a command runs with --json from this key of ctx.meta (its `_JSON`), once the
# command's options are parsed; without it, it looks for --json among the words of the command line.
_JSON_META = "envsolver.json"


class _Command(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[_JSON_META] = bool(ctx.params.get("as_json"))
        return super().invoke(ctx)


@click.group()
def cluster() -> None:
    """Work with a Slurm cluster as a whole: draft its cluster file from Slurm (`cluster init`)."""


EPILOG_INIT = """\b
Examples:
  envsolver cluster init                                  # every GPU partition, one short srun step each
  envsolver cluster init --partition a100 --partition h100
  envsolver cluster init --no-probe --map tesla=v100      # from Slurm alone; GRES type 'tesla' is a V100
  envsolver cluster init --out clusters/hpc.yaml --json

Each value in the file says where it came from (`provenance:`). With --no-probe the drivers and glibc are
unknown (null), and `make --cluster` assumes a current driver and glibc 2.28 for them.

Exit codes: 0 ok, 2 bad input or Slurm could not answer (the message ends with the fix).
"""


@cluster.command(name="init", cls=_Command, epilog=EPILOG_INIT)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("cluster.yaml"),
    show_default=True,
    help="The cluster file to write.",
)
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    metavar="NAME",
    help="Draft only this partition (repeatable); default: every partition with GPUs.",
)
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="TYPE=GPU",
    help="The GPU behind a site's GRES type name (repeatable), e.g. --map tesla=v100; `envsolver gpus` lists GPUs.",
)
@click.option(
    "--no-probe",
    is_flag=True,
    help="Draft from sinfo and scontrol alone: no srun step, so drivers and glibc stay unknown.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.IntRange(0, 3600),
    default=slurm.IMMEDIATE_S,
    show_default=True,
    metavar="SECONDS",
    help="How long each probe step waits for a free node of its partition before giving up.",
)
@click.option("--force", is_flag=True, help="Overwrite a cluster file that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print what was drafted and written as JSON.")
def init_command(
    out: Path,
    partitions: tuple[str, ...],
    maps: tuple[str, ...],
    no_probe: bool,
    wait_s: int,
    force: bool,
    as_json: bool,
) -> None:
    """Draft the cluster file through Slurm from a login node: partitions, nodes and GPU GRES from sinfo and
    scontrol, then one short srun step per partition (and GRES type) for what Slurm does not know: nvidia-smi's
    GPU names and driver, glibc (ldd --version) and the architecture (uname -m)."""
    err = render.console(stderr=True)
    command = discover.words(partitions, maps, not no_probe, wait_s, str(out))
    request = discover.Request(partitions, maps, not no_probe, wait_s, command)
    found = discover.discover(request, default_kb(), lambda line: render.text(err, line))
    outcome = cluster_file.write(found.draft.cluster, out, shlex.join(command), force).value
    if as_json:
        click.echo(json.dumps(report.document(found, out, outcome), indent=2))
        return
    console = render.console()
    for line in report.lines(found, out, outcome):
        render.text(console, line)
    render.warnings(err, found.draft.notes)
