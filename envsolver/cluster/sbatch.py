"""The job script `envsolver cluster sbatch` writes: a batch job for one partition of a cluster file that activates
the environment, checks it on every allocated node, then runs the user's command under torchrun on every node,
meeting at the step's first host by construction (envsolver/cluster/slurm_launch.py).

    #!/bin/bash
    #SBATCH lines          the partition's Slurm options (cluster file), nodes, one task per node, GPUs per node,
                           time, job name; then the job's options (job_options.py) and the site's lines
    set -euo pipefail
    clean start            (clean_environment) `module purge` where a `module` command exists; every exported
                           variable that changes which Python, libraries or rendezvous the steps get is unset
                           (job_shell.CLEANED); PYTHONNOUSERSITE=1 (no ~/.local packages); SLURM_EXPORT_ENV=ALL
    activation             CONDA_PREFIX and PATH as verify/nccl_run.environ_for sets them, then the prefix's own
                           etc/conda/activate.d/*.sh (the hook's settings): no conda needed on the nodes
    verify step            srun, one task per node: the environment's python runs envsolver's gate (stdlib only;
                           cluster/gate_step.py) on every node against what the login node derived from the KB and
                           the lock; a failure ends the job before the command, naming the node and each fix
    launch step            srun, one task per node: PREFIX/bin/python -I slurm_launch.py --nproc-per-node=G -- COMMAND

The launch step by --launch (launch_argv; the verify step is verify_section, one call in render):
  torchrun   as above: torchrun starts G processes per node.
  per-gpu    srun --ntasks-per-node=G --gpus-per-task=1 --gpu-bind=none: one task per GPU; the launcher
             (--style=per-task) sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from Slurm's variables
             and runs COMMAND. --gpu-bind=none: every task sees its node's G GPUs, so LOCAL_RANK indexes them as
             under torchrun (a task bound to one GPU sees it as device 0, and `torch.cuda.set_device(LOCAL_RANK)`
             fails from local rank 1 on).
  deepspeed  srun, one task per node: the launcher (--style=deepspeed) writes the step's hostfile and runs
             DeepSpeed's own launcher with --no_ssh on each node; COMMAND is the training script and its arguments.
With `--signal B:SIG`, the step runs in the background and the batch shell passes the signal on
(job_shell.launch_lines).

The clean start, decided: the script unsets what it must rather than asking sbatch for --export=NONE. With
--export=NONE sbatch leaves only SLURM_* variables (PATH, HOME and the `module` function go too, so srun and
module purge may not be found) and puts SLURM_EXPORT_ENV=NONE into the job, so every srun step inside would start
empty as well and lose the activation. srun passes the batch step's environment to its steps (--export=ALL, the
default); the script sets SLURM_EXPORT_ENV=ALL so that stays true even when the job was submitted with
--export=NONE or SBATCH_EXPORT=NONE. The submit shell's PATH stays (after the env's bin/ once activated): srun,
scontrol and the site's tools are found through it.

Every value is checked before any text exists: Slurm values against the cluster file's grammars (grammar.py; the
time limit against nccl_nodes.TIME), paths absolute without control characters, command words without control
characters. Every value is single-quoted where the shell reads it (shlex.quote / shlex.join): nothing the user
gave is expanded. #SBATCH lines are comments to bash; sbatch reads them, and grammar values hold no space or quote.

GPUs per node: --gpus-per-node, else the fewest GPUs of the requested type on the partition's nodes as Slurm
reports them (sinfo's GRES), asked once on the login node. CPUs per task: --cpus-per-task, else --cpus-per-gpu
times the GPUs a task drives (G; 1 for per-gpu); the CLI fills --cpus-per-gpu from the partition's nodes
(limits.py: the CPUs / GPUs of its smallest usable node).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from envsolver.cluster import gate_step, grammar, job_options, job_shell, nccl_nodes, parse, slurm, slurm_launch, step
from envsolver.cluster.job_options import JobOptions
from envsolver.cluster.model import Partition, SlurmOptions
from envsolver.core.errors import BadInputError
from envsolver.core.printable import has_controls
from envsolver.install import prefixmeta
from envsolver.kb import default_kb
from envsolver.verify import nccl_run

LAUNCHER = Path(slurm_launch.__file__).resolve()
MAX_NODES = 4096
MAX_GPUS = 64
MAX_WORDS = 4096
MAX_CPUS = 4096
Launch = Literal["torchrun", "per-gpu", "deepspeed"]
LAUNCHES: tuple[Launch, ...] = get_args(Launch)
# The launcher's --style for each launch.
STYLE: dict[Launch, str] = {"torchrun": "torchrun", "per-gpu": "per-task", "deepspeed": "deepspeed"}
_PYTHONS = ("python", "python3")
_PATH_MARK = "\x00PATH\x00"  # stands for the job's own $PATH while rendering the activation
# Slurm's own variables, expanded by the job's shell.
VERIFYING = (
    'echo "envsolver: verifying the environment on every node of job ${SLURM_JOB_ID:-} (${SLURM_JOB_NODELIST:-})" >&2'
)
VERIFY_STEP_TIME = 15  # minutes: the verify step's limit (verify's probe gives up after about 7)


@dataclass(frozen=True)
class Job:
    """One job for one partition. `checks` narrows the verify step to these check ids (empty: every check);
    `cpus_per_task` wins over `cpus_per_gpu` (None and None: Slurm's default, one CPU per task). Nothing of the
    login node's interpreter is in it: the nodes run the environment's python (verify_argv, launch_argv)."""

    cluster: str
    partition: Partition
    prefix: str
    command: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    time: str | None = None
    job_name: str | None = None
    cpus_per_task: int | None = None
    verify: bool = True
    checks: tuple[str, ...] = ()
    launcher: str = str(LAUNCHER)
    launch: Launch = "torchrun"
    options: JobOptions = field(default_factory=JobOptions)
    cpus_per_gpu: int | None = None

    @property
    def where(self) -> str:
        """The prefix as every line of the script names it: Path's form (no trailing or doubled '/')."""
        return str(Path(self.prefix))


def _refuse(what: str, value: object, problem: str, fix: str) -> BadInputError:
    return BadInputError(f"{what} {value!r}: {problem}. {fix}")


def validate(job: Job) -> None:
    """Every value against its grammar. Raises BadInputError naming the value and its fix."""
    try:
        nccl_nodes.absolute_path(job.prefix)
    except ValueError as exc:
        raise _refuse("--prefix", job.prefix, str(exc), "Pass an absolute path on the shared filesystem.") from None
    try:
        nccl_nodes.absolute_path(job.launcher)
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
        ("--time", job.time, nccl_nodes.time_limit),
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
    for what, cpus in (("--cpus-per-task", job.cpus_per_task), ("--cpus-per-gpu", job.cpus_per_gpu)):
        if cpus is not None and not 1 <= cpus <= MAX_CPUS:
            raise _refuse(what, cpus, f"not from 1 to {MAX_CPUS}", f"Pass {what} from 1 to {MAX_CPUS}.")
    if job.launch not in LAUNCHES:
        raise _refuse("--launch", job.launch, f"not one of {', '.join(LAUNCHES)}", "Pass one of them.")
    if job.launch == "deepspeed" and Path(job.command[0]).name.startswith(_PYTHONS):
        raise BadInputError(
            f"--launch deepspeed runs the training script with the environment's python itself, so the command "
            f"starts with the script, not {job.command[0]!r}. Pass the script first, e.g. `-- train.py "
            "--deepspeed_config ds.json`."
        )
    job_options.validate(job.options)
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


def tasks_for(launch: Launch, gpus_per_node: int) -> int:
    """Tasks per node: one per GPU for per-gpu; one (its launcher starts the processes) otherwise."""
    return gpus_per_node if launch == "per-gpu" else 1


def cpus_for(launch: Launch, gpus_per_node: int, cpus_per_task: int | None, cpus_per_gpu: int | None) -> int | None:
    """CPUs per task: --cpus-per-task, else --cpus-per-gpu times the GPUs a task drives; None: Slurm's default."""
    if cpus_per_task is not None:
        return cpus_per_task
    if cpus_per_gpu is None:
        return None
    return min(MAX_CPUS, cpus_per_gpu * (gpus_per_node // tasks_for(launch, gpus_per_node)))


def tasks_per_node(job: Job) -> int:
    return tasks_for(job.launch, job.gpus_per_node)


def task_cpus(job: Job) -> int | None:
    return cpus_for(job.launch, job.gpus_per_node, job.cpus_per_task, job.cpus_per_gpu)


def directives(job: Job) -> list[str]:
    """The #SBATCH options, in a fixed order: the job, the partition, the shape, then the job's options."""
    options = job.partition.slurm
    words = [f"--job-name={job.job_name}"] if job.job_name else []
    dropped = ("--gres=", "--gpus=", *(("--constraint=",) if job.options.constraint else ()))
    words += [w for w in job.partition.srun_argv() if not w.startswith(dropped)]
    words += [f"--constraint={job.options.constraint}"] if job.options.constraint else []
    words += [f"--nodes={job.nodes}", f"--ntasks-per-node={tasks_per_node(job)}"]
    cpus = task_cpus(job)
    words += [f"--cpus-per-task={cpus}"] if cpus else []
    words += gpu_request(options, job.gpus_per_node)
    words += [f"--time={job.time}"] if job.time else []
    return [*words, *job_options.directives(job.options)]


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
    """The command's step, by --launch: one launcher per node (torchrun, deepspeed) or per GPU (per-gpu)."""
    head = ["srun", f"--nodes={job.nodes}", f"--ntasks-per-node={tasks_per_node(job)}"]
    head += ["--gpus-per-task=1", "--gpu-bind=none"] if job.launch == "per-gpu" else []
    head += ["--kill-on-bad-exit=1"]
    cpus = task_cpus(job)
    head += [f"--cpus-per-task={cpus}"] if cpus else []
    python = step.python_of(job.where)  # as the verify step names it
    style = STYLE[job.launch]
    return [
        *head,
        *slurm_launch.task_argv(python, job.gpus_per_node, job.command, launcher=job.launcher, style=style),
    ]


def _echo(text: str) -> str:
    return f"echo {shlex.quote(text)} >&2"


ABOUT: dict[Launch, str] = {
    "torchrun": "torchrun (one process per GPU)",
    "per-gpu": "one Slurm task per GPU (RANK, LOCAL_RANK, WORLD_SIZE from Slurm)",
    "deepspeed": "DeepSpeed's launcher (one process per GPU, hostfile from the allocation)",
}


def verify_section(job: Job) -> list[str]:
    """The verify step's lines: every node checked before the command; a failing node ends the job."""
    failed = (
        "envsolver: the environment failed verify on a node of this job (srun names the node above); the "
        "command was not run. Fix what the failing checks say (each names its fix), then submit the job again."
    )
    return [
        "# Verify the environment on every node before the command: a node that fails ends the job here.",
        VERIFYING,
        f"if ! {shlex.join(verify_argv(job))}; then",
        f"  {_echo(failed)}",
        "  exit 1",
        "fi",
        "",
    ]


def render(job: Job) -> str:
    """The script's text. Raises BadInputError on a value outside its grammar."""
    validate(job)
    prefix = shlex.quote(job.where)
    shown = f"{job.nodes} node(s) x {job.gpus_per_node} GPU(s)"
    lines = [
        "#!/bin/bash",
        f"# envsolver cluster sbatch: partition {job.partition.name} of cluster {job.cluster}, {shown}.",
        f"# The environment: {prefix}. Submit this script with sbatch; it runs the command on every node under",
        f"# {ABOUT[job.launch]}, meeting at the first host of the step (envsolver's Slurm launcher).",
        *[f"#SBATCH {word}" for word in directives(job)],
        "set -euo pipefail",
        "",
        *job_shell.clean_environment(),
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
        lines += verify_section(job)
    lines += [
        f"# The command: {ABOUT[job.launch]}, rendezvous on the step's first host (the launcher finds it).",
        _echo(f"envsolver: starting the command on {shown}"),
        *job_shell.launch_lines(shlex.join(launch_argv(job)), job.options),
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


def launch_notes(job: Job) -> list[str]:
    """What the user should know of the job's launch (notes, not refusals)."""
    if job.launch == "deepspeed" and not job.options.exclusive:
        return [
            "DeepSpeed's launcher sets CUDA_VISIBLE_DEVICES=0..G-1 on each node (deepspeed/launcher/launch.py): "
            "right on whole nodes (--exclusive) or where Slurm confines a job to its GPUs (cgroup "
            "ConstrainDevices=yes); on a node shared with other jobs without that, pass --exclusive"
        ]
    return []


def check_launch(prefix: str, launch: Launch) -> None:
    """The environment can run the launch: DeepSpeed's needs DeepSpeed in it (its `deepspeed` command marks it).
    Raises BadInputError."""
    if launch == "deepspeed" and not (Path(prefix) / "bin" / "deepspeed").is_file():
        raise BadInputError(
            f"{prefix!r} has no bin/deepspeed, so --launch deepspeed cannot start DeepSpeed's launcher there. "
            "Make and install the environment with DeepSpeed (`envsolver make` includes it unless "
            "--no-deepspeed), or pass --launch torchrun."
        )


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
