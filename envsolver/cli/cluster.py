"""The cluster commands of `envsolver`: `cluster init`, `cluster sbatch`. Parse options, call, print, exit.

cli/main.py registers the group (`main.add_command(cluster)`); its `_Group` turns every exception into a message
and an exit code (0 ok; 2 bad input, or Slurm could not answer; 130 interrupted, 143 SIGTERM, 129 SIGHUP), and
with --json into one failure document. Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from envsolver.cli import completion, render
from envsolver.cli.base import Command, diagnostics, verbosity
from envsolver.cluster import discover, job_options, limits, report, sbatch, slurm
from envsolver.cluster import file as cluster_file
from envsolver.cluster.job_options import JobOptions
from envsolver.core import interrupts
from envsolver.core.errors import BadInputError
from envsolver.kb import default_kb
from envsolver.lock.writers import files
from envsolver.verify.checks import IDS as CHECK_IDS


class _Command(Command):
    """base.Command (--json recorded, the help's one layout), and `-c` answered with the option it was."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:  # `sbatch -c FILE`, as before -c became --channel's alone
            if exc.option_name != "-c" or not any("--cluster" in p.opts for p in self.params):
                raise
            message = "No such option '-c': pass the cluster file as --cluster FILE (-c is --channel, as in `make`)."
            raise click.NoSuchOption("-c", message, ctx=ctx) from None


@click.group()
def cluster() -> None:
    """Work with a Slurm cluster as a whole: draft its cluster file from Slurm (`cluster init`), write a job
    script for a partition (`cluster sbatch`)."""


EPILOG_INIT = """\b
Examples:
  envsolver cluster init                                  # every GPU partition: one srun step on all its nodes
  envsolver cluster init --partition a100 --partition h100
  envsolver cluster init --no-probe --map tesla=v100      # from Slurm alone; GRES type 'tesla' is a V100
  envsolver cluster init --out clusters/hpc.yaml --json

Each value in the file says where it came from (`provenance:`). Nodes that are down, drained, reserved or not
responding are left out and named. A probe that cannot run is an error with the ways out (a longer --wait,
--partition to leave it out, --no-probe). With --no-probe the drivers and glibc are unknown (null), and
`make --cluster` assumes a current driver and glibc 2.28 for them.

Exit codes: 0 ok, 2 bad input, Slurm could not answer or a probe could not run (the message ends with the fix).
"""


@cluster.command(name="init", cls=_Command, epilog=EPILOG_INIT)
@click.option(
    "-o",
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
    help="How long each probe step waits for its partition's nodes to be free before giving up.",
)
@click.option("--force", is_flag=True, help="Overwrite a cluster file that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print what was drafted and written as JSON.")
@verbosity
@interrupts.ends_like_ctrl_c  # SIGTERM and SIGHUP cancel the probe steps as Ctrl-C does
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
    scontrol, then one short srun step per partition (and GRES type), one task on each usable node, for what
    Slurm does not know: nvidia-smi's GPU names and driver, glibc (ldd --version) and the architecture
    (uname -m); the file keeps the oldest driver and glibc of all the nodes."""
    err = diagnostics()
    command = discover.words(partitions, maps, not no_probe, wait_s, str(out))
    request = discover.Request(partitions, maps, not no_probe, wait_s, command)
    if not force:
        files.refuse_hand_edit(out)  # before Slurm is asked and the probes wait for nodes
    found = discover.discover(request, default_kb(), lambda line: render.text(err, line))
    outcome = cluster_file.write(found.draft.cluster, out, shlex.join(command), force).value
    if as_json:
        click.echo(json.dumps(report.document(found, out, outcome), indent=2))
        return
    console = render.console()
    for line in report.lines(found, out, outcome):
        render.text(console, line)
    render.warnings(render.console(stderr=True), found.draft.notes)


EPILOG_SBATCH = """\b
Examples:
  envsolver cluster sbatch --cluster cluster.yaml --partition a100 -p /shared/envs/train --nodes 2 \\
      --time 04:00:00 --out train.sh -- python train.py --lr 3e-4
  sbatch train.sh
  envsolver cluster sbatch --cluster cluster.yaml --partition h100 -p /shared/envs/train python train.py   # prints it
  envsolver cluster sbatch --cluster cluster.yaml --partition a100 -p /shared/envs/train --launch per-gpu \\
      --qos high --mem-per-gpu 80G --exclusive --output 'logs/%x-%j.out' --signal B:USR1@300 --requeue \\
      --sbatch-line --mail-type=END --out train.sh -- python train.py
  envsolver cluster sbatch ... --launch deepspeed -- train.py --deepspeed_config ds.json

The script: #SBATCH lines from the partition's Slurm options and the job's options; a clean start (module purge
where modules exist; the submit shell's PYTHON*, LD_*, CONDA* and rendezvous variables unset); the environment
activated (CONDA_PREFIX, PATH, its etc/conda/activate.d scripts); `envsolver verify -p PREFIX` on every node (a
failing node ends the job before the command; --no-verify leaves it out, --check narrows it); then the command
by --launch: torchrun on every node (one process per GPU), one Slurm task per GPU (per-gpu: RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR from Slurm), or DeepSpeed's launcher on every node with a hostfile of the allocation
(deepspeed: the command is the training script). Rendezvous on the step's first host. Every value is checked
against its grammar and shell-quoted. --sbatch-line takes one long sbatch option, `--NAME[=VALUE]`.

Before writing, the partition's limits and nodes are read (scontrol, sinfo): a job over MaxTime or MaxNodes,
with more GPUs per node than a node has, more nodes than are up, or a --constraint naming no feature of the
partition is refused; the CPUs per GPU come from its nodes (CPUs / GPUs).

Exit codes: 0 ok; 1 the partition cannot run the job (each reason with its fix); 2 bad input (an unknown
partition, no environment at PREFIX, a value outside its grammar) or Slurm could not answer (pass
--gpus-per-node, or --no-slurm-check); every message ends with the fix.
"""


@cluster.command(name="sbatch", cls=_Command, epilog=EPILOG_SBATCH, context_settings={"allow_interspersed_args": False})
@click.option(
    "--cluster",  # no -c: -c is --channel, as in conda and `make` (one meaning per short flag)
    "cluster_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cluster file (from `envsolver cluster init`).",
)
@click.option(
    "--partition",
    "partition_name",
    required=True,
    metavar="NAME",
    shell_complete=completion.complete_partition,
    help="The partition to run on.",
)
@click.option(
    "-p",
    "--prefix",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The environment, on the filesystem the nodes share.",
)
@click.option("--nodes", type=click.IntRange(1, sbatch.MAX_NODES), default=1, show_default=True, help="Nodes.")
@click.option(
    "--gpus-per-node",
    type=click.IntRange(1, sbatch.MAX_GPUS),
    help="Processes (GPUs) per node [default: the partition's nodes' GPUs, from sinfo].",
)
@click.option(
    "--launch",
    type=click.Choice(list(sbatch.LAUNCHES)),
    default="torchrun",
    show_default=True,
    help="torchrun on every node; per-gpu: one Slurm task per GPU; deepspeed: DeepSpeed's launcher per node.",
)
@click.option(
    "--cpus-per-gpu",
    type=click.IntRange(1, sbatch.MAX_CPUS),
    help="CPUs for each GPU's process [default: the partition's nodes' CPUs / GPUs].",
)
@click.option(
    "--cpus-per-task",
    type=click.IntRange(1, sbatch.MAX_CPUS),
    help="CPUs for each task (a node's processes together, or one GPU's for per-gpu); overrides --cpus-per-gpu.",
)
@click.option("--time", "time_limit", metavar="TIME", help="Time limit, e.g. 30, 04:00:00, 1-12.")
@click.option("--job-name", metavar="NAME", help="The job's name.")
@click.option("--constraint", metavar="EXPR", help="Node features, e.g. 'ib&rack1'; replaces the cluster file's.")
@click.option("--qos", metavar="NAME", help="The job's QOS.")
@click.option("--mem", metavar="SIZE", help="Memory per node, e.g. 200G (0: all of it).")
@click.option("--mem-per-gpu", metavar="SIZE", help="Memory per GPU, e.g. 80G.")
@click.option("--exclusive", is_flag=True, help="Whole nodes, shared with no other job.")
@click.option("--output", "job_output", metavar="PATTERN", help="The job's stdout file, e.g. logs/%x-%j.out.")
@click.option("--error", "job_error", metavar="PATTERN", help="The job's stderr file, e.g. logs/%x-%j.err.")
@click.option("--exclude", metavar="NODES", help="Nodes not to use, e.g. gpu07 or gpu[01-03].")
@click.option(
    "--signal",
    "job_signal",
    metavar="[R:|B:]SIG[@SECONDS]",
    help="Signal the job before its end, e.g. USR1@300 (every step's processes) or B:USR1@300 (passed to the step).",
)
@click.option("--requeue", is_flag=True, help="Let Slurm requeue the job (after a node failure or preemption).")
@click.option("--array", metavar="INDEXES", help="A job array, e.g. 0-15 or 0-99%10.")
@click.option(
    "--sbatch-line",
    "site_lines",
    multiple=True,
    metavar="--NAME[=VALUE]",
    help="One more #SBATCH option for the site (repeatable), e.g. --sbatch-line=--reservation=maint.",
)
@click.option(
    "--no-slurm-check",
    is_flag=True,
    help="Write the script without reading the partition's limits and nodes (away from a login node).",
)
@click.option("--no-verify", is_flag=True, help="Leave out the verify step before the command.")
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Choice(list(CHECK_IDS)),
    metavar="ID",
    help="The verify step reports only this check (repeatable) [default: every check]; `envsolver verify --help` "
    "lists the check ids.",
)
@click.option(
    "-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the script here [default: print]."
)
@click.option("--force", is_flag=True, help="With --out: overwrite a script that was edited by hand.")
@click.option("--json", "as_json", is_flag=True, help="Print {ok, script, partition, ...} as JSON.")
@verbosity
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def sbatch_command(
    cluster_path: Path,
    partition_name: str,
    prefix: Path,
    nodes: int,
    gpus_per_node: int | None,
    launch: sbatch.Launch,
    cpus_per_gpu: int | None,
    cpus_per_task: int | None,
    time_limit: str | None,
    job_name: str | None,
    constraint: str | None,
    qos: str | None,
    mem: str | None,
    mem_per_gpu: str | None,
    exclusive: bool,
    job_output: str | None,
    job_error: str | None,
    exclude: str | None,
    job_signal: str | None,
    requeue: bool,
    array: str | None,
    site_lines: tuple[str, ...],
    no_slurm_check: bool,
    no_verify: bool,
    checks: tuple[str, ...],
    out: Path | None,
    force: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Write an sbatch script that runs COMMAND on a partition of the cluster file: a clean start, the
    environment activated and verified on every node, then COMMAND under torchrun on every node (one process
    per GPU), one Slurm task per GPU (--launch per-gpu) or DeepSpeed's launcher (--launch deepspeed), meeting
    at the step's first host. The partition's limits and nodes are read first; a job it cannot run is refused.
    Put COMMAND last (after --, or after the options)."""
    if no_verify and checks:
        raise BadInputError("--check narrows the verify step, which --no-verify leaves out. Remove one of them.")
    cluster = cluster_file.load(cluster_path, default_kb())
    partition = cluster.partition(partition_name)
    if partition is None:
        names = ", ".join(p.name for p in cluster.partitions)
        raise BadInputError(
            f"cluster file {str(cluster_path)!r} has no partition {partition_name!r}. Pass --partition with one "
            f"of: {names}."
        )
    options = JobOptions(
        constraint,
        qos,
        mem,
        mem_per_gpu,
        exclusive,
        job_output,
        job_error,
        exclude,
        job_signal,
        requeue,
        array,
        site_lines,
    )
    job_options.validate(options)
    where = sbatch.absolute_prefix(prefix)
    notes = sbatch.check_prefix(where, partition)
    sbatch.check_launch(where, launch)
    if gpus_per_node is None:
        found = sbatch.node_gpus(partition)
        gpus_per_node, origin = found.count, found.origin
        if nodes > len(found.nodes):
            notes.append(
                f"--nodes {nodes}, but sinfo shows {len(found.nodes)} node(s) with those GPUs in {partition.name}"
            )
    else:
        origin = "--gpus-per-node"
    cpus_from = "--cpus-per-task" if cpus_per_task else "--cpus-per-gpu" if cpus_per_gpu else None
    if no_slurm_check:
        notes.append("the partition's limits and nodes were not read (--no-slurm-check): sbatch may still refuse it")
    else:
        slurm_partition = partition.slurm.partition or partition.name
        asked = sbatch.cpus_for(launch, gpus_per_node, cpus_per_task, cpus_per_gpu)
        request = limits.Request(
            nodes,
            gpus_per_node,
            sbatch.gpu_type(partition.slurm),
            time_limit,
            constraint or partition.slurm.constraint,
            frozenset(job_options.excluded_nodes(exclude)) if exclude else frozenset(),
            asked * sbatch.tasks_for(launch, gpus_per_node) if asked else None,
        )
        verdict = limits.judge(limits.read(slurm_partition), request)
        verdict.raise_refusals(partition.name)
        notes += verdict.warnings
        if cpus_from is None and verdict.cpus_per_gpu is not None:
            cpus_per_gpu, cpus_from = verdict.cpus_per_gpu, f"the CPUs / GPUs of {partition.name}'s nodes (sinfo)"
    job = sbatch.Job(
        cluster=cluster.name,
        partition=partition,
        prefix=where,
        command=command,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        time=time_limit,
        job_name=job_name,
        cpus_per_task=cpus_per_task,
        verify=not no_verify,
        checks=checks,
        launch=launch,
        options=options,
        cpus_per_gpu=cpus_per_gpu,
    )
    text = sbatch.render(job)
    notes += sbatch.launch_notes(job)
    script = files.stamp(text)  # as written: the hash line tells a later --out whether it was edited by hand
    outcome = files.write(out, text, force).value if out is not None else None
    if as_json:
        doc = {
            "ok": True,
            "script": script,
            "cluster": cluster.name,
            "partition": partition.name,
            "prefix": where,
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "gpus_per_node_from": origin,
            "launch": launch,
            "cpus_per_task": sbatch.task_cpus(job),
            "cpus_from": cpus_from,
            "verify": not no_verify,
            "command": list(command),
            "out": str(out) if out is not None else None,
            "outcome": outcome,
            "notes": notes,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    err = render.console(stderr=True)
    if out is None:
        click.echo(script, nl=False)
    else:
        render.text(
            render.console(),
            f"wrote {out} ({outcome}): partition {partition.name}, {nodes} node(s) x {gpus_per_node} GPU(s) "
            f"({origin}); submit it with: sbatch {shlex.quote(str(out))}",
        )
    render.warnings(err, tuple(notes))
