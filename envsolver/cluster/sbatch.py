"""The job script `envsolver cluster sbatch` writes: a batch job for one partition of a cluster file that activates
the environment, checks it on every allocated node, then runs the user's command under torchrun on every node,
meeting at the step's first host by construction (envsolver/cluster/slurm_launch.py).

    #!/bin/bash
    #SBATCH lines          the partition's Slurm options (cluster file), nodes, one task per node, GPUs per node,
                           time, job name
    set -euo pipefail
    activation             CONDA_PREFIX and PATH as verify/nccl_run.environ_for sets them, then the prefix's own
                           etc/conda/activate.d/*.sh (the hook's settings): no conda needed on the nodes
    verify step            srun, one task per node: the environment's python runs envsolver's gate (stdlib only;
                           cluster/gate_step.py) on every node against what the login node derived from the KB and
                           the lock; a failure ends the job before the command, naming the node and each fix
    launch step            srun, one task per node: PREFIX/bin/python slurm_launch.py --nproc-per-node=G -- COMMAND

Every value is checked before any text exists: Slurm values against the cluster file's grammars (grammar.py; the
time limit against nccl_run.TIME), paths absolute without control characters, command words without control
characters. Every value is single-quoted where the shell reads it (shlex.quote / shlex.join): nothing the user
gave is expanded. #SBATCH lines are comments to bash; sbatch reads them, and grammar values hold no space or quote.

GPUs per node: --gpus-per-node, else the fewest GPUs of the requested type on the partition's nodes as Slurm
reports them (sinfo's GRES), asked once on the login node.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envsolver import prefixmeta
from envsolver.cluster import gate_step, grammar, parse, slurm, slurm_launch
from envsolver.cluster.model import Partition, SlurmOptions
from envsolver.errors import BadInputError
from envsolver.kb import default_kb
from envsolver.printable import has_controls
from envsolver.verify import nccl_run

LAUNCHER = Path(slurm_launch.__file__).resolve()
MAX_NODES = 4096
MAX_GPUS = 64
MAX_WORDS = 4096
_PATH_MARK = "\x00PATH\x00"  # stands for the job's own $PATH while rendering the activation
# Slurm's own variables, expanded by the job's shell.
VERIFYING = (
    'echo "envsolver: verifying the environment on every node of job ${SLURM_JOB_ID:-} (${SLURM_JOB_NODELIST:-})" >&2'
)
VERIFY_STEP_TIME = 15  # minutes: the verify step's limit (verify's probe gives up after about 7)


@dataclass(frozen=True)
class Job:
    """One job for one partition. `envsolver` is the login node's interpreter that runs `-m envsolver` (on the
    shared filesystem); `checks` narrows the verify step to these check ids (empty: every check)."""

    cluster: str
    partition: Partition
    prefix: str
    envsolver: str
    command: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    time: str | None = None
    job_name: str | None = None
    cpus_per_task: int | None = None
    verify: bool = True
    checks: tuple[str, ...] = ()
    launcher: str = str(LAUNCHER)

    @property
    def where(self) -> str:
        """The prefix as every line of the script names it: Path's form (no trailing or doubled '/')."""
        return str(Path(self.prefix))


def _refuse(what: str, value: object, problem: str, fix: str) -> BadInputError:
    return BadInputError(f"{what} {value!r}: {problem}. {fix}")


def validate(job: Job) -> None:
    """Every value against its grammar. Raises BadInputError naming the value and its fix."""
    for what, path in (("--prefix", job.prefix), ("the envsolver interpreter", job.envsolver)):
        try:
            nccl_run.absolute_path(path)
        except ValueError as exc:
            raise _refuse(what, path, str(exc), "Pass an absolute path on the shared filesystem.") from None
    try:
        nccl_run.absolute_path(job.launcher)
    except ValueError as exc:
        raise _refuse("the launcher", job.launcher, str(exc), "Reinstall envsolver at an absolute path.") from None
    if not job.command:
        raise BadInputError("no command to run. Put it after --, e.g. `-- python train.py --lr 3e-4`.")
    if len(job.command) > MAX_WORDS or any(has_controls(w) or not w for w in job.command):
        raise BadInputError(
            "the command has an empty word, a control character (a newline, a tab) or more than "
            f"{MAX_WORDS} words. Pass each argument as one plain word (a long or multi-line value belongs in a "
            "file the command reads)."
        )
    for what, value, check in (
        ("--time", job.time, nccl_run.time_limit),
        ("--job-name", job.job_name, lambda text: grammar.name(text, "job name")),
    ):
        if value is not None:
            try:
                check(value)
            except ValueError as exc:
                raise _refuse(what, value, str(exc), f"Fix {what}.") from None
    for what, number, high in (("--nodes", job.nodes, MAX_NODES), ("--gpus-per-node", job.gpus_per_node, MAX_GPUS)):
        if not 1 <= number <= high:
            raise _refuse(what, number, f"not from 1 to {high}", f"Pass {what} from 1 to {high}.")
    if job.cpus_per_task is not None and not 1 <= job.cpus_per_task <= 4096:
        raise _refuse("--cpus-per-task", job.cpus_per_task, "not from 1 to 4096", "Pass --cpus-per-task N.")
    _check_slurm(job.partition)


def _check_slurm(partition: Partition) -> None:
    """The partition's Slurm options again (a Partition may be built by hand): the cluster file's grammars."""
    options = partition.slurm
    for what, value, check in (
        ("name", partition.name, grammar.name),
        ("slurm.partition", options.partition, grammar.name),
        ("slurm.account", options.account, grammar.name),
        ("slurm.constraint", options.constraint, grammar.constraint),
        ("slurm.gres", options.gres, grammar.gres),
        ("slurm.gpus", options.gpus, grammar.gpus),
    ):
        if value is not None:
            try:
                check(value)
            except ValueError as exc:
                raise _refuse(
                    f"partition {partition.name!r}: {what}", value, str(exc), "Fix it in the cluster file."
                ) from None


def gpu_type(options: SlurmOptions) -> str | None:
    """The GPU type the partition's options ask for (`gpu:a100:1` -> 'a100', `gpus: a100:1` -> 'a100'), if any."""
    if options.gres is not None:
        for item in options.gres.split(","):
            parts = item.split(":")
            if parts[0] == "gpu" and len(parts) >= 2 and not parts[1].isdigit():
                return parts[1]
        return None
    if options.gpus is not None and ":" in options.gpus:
        return options.gpus.split(":")[0]
    return None


def gpu_request(options: SlurmOptions, gpus_per_node: int) -> list[str]:
    """The options that ask for `gpus_per_node` GPUs on each node, keeping the partition's GPU type and its other
    GRES: `--gres` with each gpu item's count replaced; `--gpus` becomes `--gpus-per-node` (sbatch's --gpus counts
    the whole job); otherwise `--gpus-per-node=G`."""
    if options.gres is not None:
        items, asked = [], False
        for item in options.gres.split(","):
            parts = item.split(":")
            if parts[0] == "gpu":
                typed = [p for p in parts[1:2] if not p.isdigit()]
                items.append(":".join(["gpu", *typed, str(gpus_per_node)]))
                asked = True
            else:
                items.append(item)
        words = [f"--gres={grammar.gres(','.join(items))}"]
        return words if asked else [*words, f"--gpus-per-node={gpus_per_node}"]
    kind = gpu_type(options)
    return [f"--gpus-per-node={grammar.gpus(f'{kind}:{gpus_per_node}' if kind else str(gpus_per_node))}"]


def directives(job: Job) -> list[str]:
    """The #SBATCH options, in a fixed order."""
    options = job.partition.slurm
    words = [f"--job-name={job.job_name}"] if job.job_name else []
    words += [w for w in job.partition.srun_argv() if not w.startswith(("--gres=", "--gpus="))]
    words += [f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    words += [f"--cpus-per-task={job.cpus_per_task}"] if job.cpus_per_task else []
    words += gpu_request(options, job.gpus_per_node)
    words += [f"--time={job.time}"] if job.time else []
    return words


def activation(prefix: str) -> list[str]:
    """`export` lines for what nccl_run.environ_for sets (the one rule for an env's variables), each value
    single-quoted, the job's own $PATH kept where environ_for keeps it."""
    environ = nccl_run.environ_for(Path(prefix), {"PATH": _PATH_MARK})
    lines = []
    for key, value in sorted(environ.items()):
        if value == _PATH_MARK:
            continue
        parts = value.split(_PATH_MARK)
        lines.append(f"export {key}=" + '"${PATH}"'.join(shlex.quote(p) if p else "" for p in parts))
    return lines


def verify_argv(job: Job) -> list[str]:
    """The verify step: every node at once, each node's outcome labelled; the step's own time limit. The
    environment's python runs envsolver's gate on each node (cluster/gate_step.py): never this interpreter."""
    wanted = gate_step.demands_for(job.where, default_kb())
    return gate_step.argv(job.where, job.nodes, job.checks, wanted, VERIFY_STEP_TIME)


def launch_argv(job: Job) -> list[str]:
    """The command's step: one launcher per node (slurm_launch.py), which runs torchrun with G processes."""
    head = ["srun", f"--nodes={job.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    head += [f"--cpus-per-task={job.cpus_per_task}"] if job.cpus_per_task else []
    python = str(Path(job.where) / "bin" / "python")
    return [*head, *slurm_launch.task_argv(python, job.gpus_per_node, job.command, launcher=job.launcher)]


def _echo(text: str) -> str:
    return f"echo {shlex.quote(text)} >&2"


def render(job: Job) -> str:
    """The script's text. Raises BadInputError on a value outside its grammar."""
    validate(job)
    prefix = shlex.quote(job.where)
    shown = f"{job.nodes} node(s) x {job.gpus_per_node} GPU(s)"
    lines = [
        "#!/bin/bash",
        f"# envsolver cluster sbatch: partition {job.partition.name} of cluster {job.cluster}, {shown}.",
        f"# The environment: {prefix}. Submit this script with sbatch; it runs the command on every node under",
        "# torchrun (one process per GPU), meeting at the first host of the step (envsolver's Slurm launcher).",
        *[f"#SBATCH {word}" for word in directives(job)],
        "set -euo pipefail",
        "",
        "# The environment, as activating it sets it (no conda needed on the nodes); srun passes it to every step.",
        *activation(job.where),
        "set +eu",
        f"for envsolver_script in {prefix}/etc/conda/activate.d/*.sh; do",
        '  if [ -r "$envsolver_script" ]; then . "$envsolver_script"; fi',
        "done",
        "set -eu",
        "",
    ]
    if job.verify:
        failed = (
            "envsolver: the environment failed verify on a node of this job (srun names the node above); the "
            "command was not run. Fix what the failing checks say (each names its fix), then submit the job again."
        )
        lines += [
            "# Verify the environment on every node before the command: a node that fails ends the job here.",
            VERIFYING,
            f"if ! {shlex.join(verify_argv(job))}; then",
            f"  {_echo(failed)}",
            "  exit 1",
            "fi",
            "",
        ]
    lines += [
        "# The command: torchrun on every node, rendezvous on the step's first host (the launcher finds it).",
        _echo(f"envsolver: starting the command on {shown}"),
        shlex.join(launch_argv(job)),
    ]
    return "\n".join(lines) + "\n"


# --- the environment and the GPUs per node --------------------------------------------------------------------


def absolute_prefix(path: Path) -> str:
    """The prefix as an absolute path (not resolved: the shared filesystem's own name for it)."""
    return os.path.abspath(os.fspath(path))


def check_prefix(prefix: str, partition: Partition) -> list[str]:
    """The prefix holds an environment for this partition's platform. Returns notes (the lock was made for
    other partitions). Raises BadInputError."""
    quoted = shlex.quote(prefix)
    if not (Path(prefix) / "bin" / "python").is_file():
        raise BadInputError(
            f"{prefix!r} has no bin/python, so it is not an environment the job can use. Install it there first "
            f"(`envsolver install conda-lock.yml -p {quoted}`, on the shared filesystem), or pass its prefix with -p."
        )
    kept = prefixmeta.load(Path(prefix))
    if kept is None:
        return []
    if kept.platform != partition.platform:
        raise BadInputError(
            f"{prefix!r} was installed for {kept.platform}, but partition {partition.name!r} is "
            f"{partition.platform}. Pass the environment installed from the {partition.platform} lock (make "
            f"--cluster writes one per platform: OUT/{partition.platform}/conda-lock.yml)."
        )
    made_for = kept.custom.get("envsolver_cluster_partitions")
    if made_for is not None and partition.name not in made_for.split(";"):
        return [
            f"the environment's lock was made for partitions {made_for.replace(';', ', ')}, not {partition.name}: "
            "the verify step checks it on the nodes; to plan for it too, run envsolver make --cluster again with "
            "this partition in the cluster file"
        ]
    return []


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs per node a partition offers: the fewest over its nodes, and where that came from."""

    count: int
    origin: str
    nodes: tuple[str, ...]


def gpus_from_sinfo(rows: Sequence[parse.SinfoRow], slurm_partition: str, kind: str | None) -> NodeGpus | None:
    """The fewest GPUs (of `kind`, when given) on a node of the partition; None when no node has any."""
    counts: dict[str, tuple[int, str]] = {}
    for row in rows:
        if row.partition != slurm_partition:
            continue
        count = sum(g.count for g in row.gpus if kind is None or g.type == kind)
        if count > 0:
            counts[row.node] = (count, row.gres_text)
    if not counts:
        return None
    node, (fewest, text) = min(counts.items(), key=lambda item: (item[1][0], item[0]))
    others = len(counts) - 1
    origin = f"sinfo GRES {text} on {node}" + (f" (the fewest of {others + 1} nodes)" if others else "")
    return NodeGpus(fewest, origin, tuple(sorted(counts)))


def sinfo_argv(slurm_partition: str) -> tuple[str, ...]:
    """sinfo for one partition's nodes in parse.SINFO_FORMAT (--partition, not --all: sinfo takes one of them)."""
    return ("sinfo", "--noheader", "--Node", f"--format={parse.SINFO_FORMAT}", f"--partition={slurm_partition}")


def node_gpus(partition: Partition) -> NodeGpus:
    """Ask Slurm (sinfo, on this login node) how many GPUs the partition's nodes have. Raises SlurmError or
    BadInputError, each ending with --gpus-per-node as the way out."""
    name = partition.slurm.partition or partition.name
    kind = gpu_type(partition.slurm)
    way_out = "or pass --gpus-per-node N"
    try:
        slurm.check_conf()
        text = slurm.run(sinfo_argv(name), slurm.QUERY_TIMEOUT_S, "the GPUs of the partition's nodes")
    except slurm.SlurmError as exc:
        raise slurm.SlurmError(f"{str(exc).rstrip('.')}; {way_out}.", exc.said) from None
    rows, _ = parse.parse_sinfo(text)
    found = gpus_from_sinfo(rows, name, kind)
    if found is None:
        asked = f"GPUs of type {kind}" if kind else "GPUs"
        raise BadInputError(
            f"sinfo shows no node of partition {name!r} with {asked} in its GRES, so envsolver cannot tell how many "
            f"processes to start per node. Check the partition (`sinfo --partition={name} --Node --format=%N,%G`), "
            f"{way_out}."
        )
    return found
