"""The `envsolver` command: the `main` group, the plan commands (explain, make, gpus), and the assembly of the
others (install, hook and verify, each in a module of its own; cluster.py's `cluster` group), which are defined
without importing `main` and imported only when they run (LAZY). Parse options, call the library, print, exit.
Nothing else lives here. Each command imports what it needs when it runs, so a command pays for its own modules only.

Exit codes: 0 ok; 1 no consistent stack for the target; 2 bad input; 130 interrupted (Ctrl-C). Results go to
stdout, diagnostics (warnings, progress, errors) to stderr; with --json, stdout is one JSON document whatever
the outcome (errors.py documents the failure document and its kinds).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from envsolver import __version__
from envsolver.cli import completion
from envsolver.cli.base import (
    CONTEXT,
    INTERNAL,
    Group,
    detail,
    diagnostics,
    err_out,
    progress,
    verbosity,
    verbosity_of,
    with_detail,
)
from envsolver.core.errors import BadInputError
from envsolver.resolve import profile

if TYPE_CHECKING:  # each command imports what it uses when it runs (see LAZY): `gpus` needs no locker
    from envsolver.kb.model import KnowledgeBase
    from envsolver.lock.run import LockResult
    from envsolver.resolve.inputs import Inputs, Options
    from envsolver.resolve.plan import Plan
    from envsolver.resolve.target import Target

__all__ = ["INTERNAL", "main"]

F = TypeVar("F", bound=Callable[..., Any])

# At exit, Python's final garbage collection walks every object the process still holds (the modules, the KB):
# a fifth of a second of `make` on a loaded 2-core machine, for nothing a finished command needs. Frozen
# objects are left out of it (the interpreter still tears the modules down and closes what they hold).
atexit.register(gc.freeze)

# The commands defined in other modules, imported only when they run: name -> (where, the first paragraph of
# its help, which `envsolver --help` lists; tests/test_lazy_cli.py checks it against the command's own help).
LAZY = {
    "install": (
        "envsolver.cli.install:install_command",
        "Install a conda-lock.yml or explicit lock into PREFIX, without conda.",
    ),
    "hook": (
        "envsolver.cli.hook:hook_command",
        "Write activation scripts (TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR, TORCH_EXTENSIONS_DIR, and CUDA_HOME and\n"
        "CPATH when the prefix holds the CUDA toolkit), check the toolchain before any compiler runs (verify's build\n"
        "checks), then build DeepSpeed's ops for the target GPUs (or take them from --op-cache), register them so\n"
        "DeepSpeed's own load() imports them without compiling, and prove them (cuobjdump; DeepSpeed's load() in a new"
        "\nprocess). A re-run with nothing changed is decided before torch starts.",
    ),
    "verify": (
        "envsolver.cli.verify:verify_command",
        "Check an environment end to end: driver, GPUs, torch's CUDA build, nvcc and headers, cuDNN, NCCL,\n"
        "DeepSpeed's ops, the lock. Every failure names its fix.",
    ),
    "module": (
        "envsolver.cli.module:module_command",
        "Write an Lmod modulefile (Lua) for an installed environment: `module load MODULE` sets what activating it\n"
        "sets (PATH, CONDA_PREFIX, and the hook's TORCH_CUDA_ARCH_LIST, DS_ACCELERATOR, TORCH_EXTENSIONS_DIR, and\n"
        "CUDA_HOME and CPATH when the prefix holds the CUDA toolkit), and `module unload MODULE` gives every variable\n"
        "back its earlier value.",
    ),
    "diff": (
        "envsolver.cli.diff:diff_command",
        "Show the packages that differ between two locks, or a lock and an installed prefix: added, removed, changed\n"
        "(version or build) and moved between conda and PyPI.",
    ),
    "cluster": (
        "envsolver.cli.cluster:cluster",
        "Work with a Slurm cluster as a whole: draft its cluster file from Slurm (`cluster init`), write a job\n"
        "script for a partition (`cluster sbatch`).",
    ),
}

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
  envsolver make --cluster cluster.yaml --out envs   # one environment per platform of the cluster
  envsolver make --gpu a100 -o envs/a100 --dry-run    # what would be written, nothing written
  envsolver make --gpu a100 -f project.yml -o envs/a100    # your conda and PyPI packages in the same lock
  envsolver make --gpu a100 --add jupyterlab --add-pypi accelerate -o envs/a100   # the same without a file
  envsolver make --gpu a100 -o envs/a100 --update deepspeed    # move deepspeed (and what it needs) only
  envsolver make --gpu a100 -o envs/a100 --update deepspeed --dry-run    # the package changes, nothing written

Exit codes: 0 ok; 1 no consistent stack for the target (or the solver found no solution); 2 bad input, or
the files could not be written (a hand edit without --force, a channel that cannot be reached); 130
interrupted (Ctrl-C).
"""

EPILOG_EXPLAIN = """\b
Examples:
  envsolver explain --gpu v100 --driver 580.65.06
  envsolver explain --gpu rtx5090 --driver 550.54.14     # exits 1: names the driver upgrade
  envsolver explain --gpu a100 --torch 2.3.1 --json
  envsolver explain --gpu a100 -f project.yml --offline     # with your packages (and the PyPI part --offline locks)

Exit codes: 0 ok; 1 no consistent stack for the target; 2 bad input; 130 interrupted (Ctrl-C).
"""


def target_options(func: F) -> F:
    options = [
        click.option(
            "--gpu",
            "gpus",
            multiple=True,
            metavar="NAME",
            shell_complete=completion.complete_gpu,
            help="Target GPU (repeatable): a key, alias or nvidia-smi name (a100, 'NVIDIA H100 80GB HBM3'), "
            "or 'auto' to detect this host's GPUs and driver.",
        ),
        click.option(
            "--profile",
            metavar="NAME|FILE",
            shell_complete=completion.complete_profile,
            help=f"A named target: {', '.join(profile.available())}; or a path to a profile YAML.",
        ),
        click.option(
            "--driver",
            metavar="VERSION",
            help="The oldest NVIDIA driver on the nodes, e.g. 535.104.05; a branch alone (535) means its oldest "
            "release (with a warning). Absent: assume a current driver (with a warning).",
        ),
        click.option(
            "--python",
            metavar="X.Y",
            help="Python version, e.g. 3.11; a major alone (3) narrows to the knowledge base's Pythons (with a "
            "warning).",
        ),
        click.option("--torch", metavar="VERSION", help="torch version or range: 2.5, 2.3.1, '>=2.4,<2.6'."),
        click.option(
            "--cuda",
            metavar="X.Y",
            help="CUDA toolkit version for nvcc and the runtime, e.g. 12.4; a major alone (13) means the newest "
            "13.x the knowledge base knows (with a warning).",
        ),
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
        click.option("--glibc", metavar="X.Y", help="The nodes' glibc, as `ldd --version` prints it (default 2.28)."),
        click.option("--deepspeed/--no-deepspeed", default=None, help="Include DeepSpeed (default: yes)."),
        click.option(
            "-f",
            "--file",
            "files",
            multiple=True,
            metavar="FILE",
            help="Your project's packages (repeatable, conda-lock's flag): an environment file (environment.yml: "
            "dependencies: as conda specs, a pip: list, channels:) or a requirements file (.txt, .in), solved and "
            "locked with the stack. Read only, never written. A spec of python, pytorch or cuda-version constrains "
            "the plan as --python, --torch, --cuda do (which replace it).",
        ),
        click.option(
            "--add",
            "add",
            multiple=True,
            metavar="SPEC",
            help="One more conda package for the project (repeatable), as a conda spec: jupyterlab, "
            "'transformers >=4.40,<5', python=3.12.",
        ),
        click.option(
            "--add-pypi",
            "add_pypi",
            multiple=True,
            metavar="REQ",
            help="One more PyPI package for the project (repeatable), as a PEP 508 requirement: accelerate, "
            "'peft>=0.10'. Resolved against PyPI with the conda part held.",
        ),
        click.option(
            "--deepspeed-from",
            type=click.Choice(["auto", "conda-forge", "pypi"]),
            default=None,
            help="Where DeepSpeed comes from. auto (default): the newest torch some DeepSpeed release supports, "
            "with conda-forge's DeepSpeed build where one exists for it, else PyPI's (locked by sha256). "
            "conda-forge: prefer an older torch that conda-forge builds DeepSpeed for. pypi: always PyPI's.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def default_kb() -> KnowledgeBase:
    """The knowledge base (envsolver.kb.default_kb, imported when a command needs it)."""
    from envsolver.kb import default_kb as load

    return load()


def resolve(target: Target, kb: KnowledgeBase) -> Plan:
    """The plan for a target (envsolver.resolve.resolve, imported when a command needs it)."""
    from envsolver.resolve.run import resolve as plan_for

    return plan_for(target, kb)


def _options(kwargs: dict[str, Any]) -> Options:
    from envsolver.resolve.inputs import Options

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
        deepspeed_from=kwargs["deepspeed_from"],
        files=tuple(kwargs.get("files") or ()),
        add=tuple(kwargs.get("add") or ()),
        add_pypi=tuple(kwargs.get("add_pypi") or ()),
    )


def _plan(kwargs: dict[str, Any], offline: bool = False) -> tuple[Inputs, Plan, LockResult | None]:
    """The inputs, the plan (within the bundled snapshot with --offline) and, where --offline locks a project's
    PyPI part with it (explain names what that part takes), the whole lock."""
    from envsolver.resolve import detect
    from envsolver.resolve.inputs import build_target

    kb = default_kb()
    inputs = build_target(_options(kwargs), kb, detect=detect.detect, environ=os.environ)
    if offline:
        from envsolver.lock import run as lock
        from envsolver.lock.solve import cache_dir

        if inputs.target.project.pip:
            result = lock.lock(inputs.target, kb, "offline", (), cache_dir(), lambda _: None)
            return inputs, _warned(result.plan, inputs), result
        return inputs, _warned(lock.plan_offline(inputs.target, kb, cache_dir())[0], inputs), None
    return inputs, _warned(resolve(inputs.target, kb), inputs), None


def _warned(plan: Plan, inputs: Inputs) -> Plan:
    """The plan with the warnings about the inputs (a partial version, ...) first."""
    import dataclasses

    return dataclasses.replace(plan, warnings=(*inputs.warnings, *plan.warnings)) if inputs.warnings else plan


@click.group(cls=Group, lazy=LAZY, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="envsolver")
def main() -> None:
    """Resolve GPU models and a driver into a consistent conda GPU training stack
    (PyTorch + CUDA toolkit with nvcc and headers + cuDNN + NCCL + DeepSpeed).

    \b
    Shell completion (commands, options, GPU names, profiles, check ids, a cluster file's partitions):
      bash (4.4+), in ~/.bashrc:  eval "$(_ENVSOLVER_COMPLETE=bash_source envsolver)"
      zsh, in ~/.zshrc:           eval "$(_ENVSOLVER_COMPLETE=zsh_source envsolver)"
      fish, in ~/.config/fish/completions/envsolver.fish:
                                  _ENVSOLVER_COMPLETE=fish_source envsolver | source
    """


@main.command(epilog=EPILOG_EXPLAIN)
@target_options
@click.option(
    "--offline",
    is_flag=True,
    help="Plan within the bundled snapshot of real channel records: the plan `make --offline` locks.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (stable keys).")
@verbosity
def explain(as_json: bool, offline: bool, **kwargs: Any) -> None:
    """Show the plan for a target: decisions with sources, rejected candidates, warnings."""
    if offline:
        from envsolver.lock import worker_call

        worker_call.prestart()  # the offline plan is solved: its worker starts while this process plans
    from envsolver.cli import render

    inputs, plan, locked = _plan(kwargs, offline)
    if as_json:
        doc = {"ok": True, **plan.to_json(), "detected": inputs.detected, **render.pypi_json(locked)}
        click.echo(json.dumps(doc, indent=2))
        return
    render.plan(render.out(), plan, inputs.detected)
    render.pypi_part(render.out(), locked)
    render.warnings(render.out(stderr=True), plan.warnings)


@main.command(epilog=EPILOG_MAKE)
@target_options
@click.option(
    "-n",
    "--name",
    help="Environment name as conda takes it: no '/', ' ', ':', '#', not 'base' (default: envsolver-<gpus>).",
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory for environment.yml, conda-lock.yml and conda-<platform>.lock.",
)
@click.option("--offline", is_flag=True, help="Lock against the bundled snapshot of real channel records.")
@click.option(
    "-c",
    "--channel",
    "channels",
    multiple=True,
    metavar="NAME|URL",
    help="Lock against this channel instead of the live ones (repeatable): a name as conda takes it "
    "(conda-forge, nvidia: https://conda.anaconda.org/NAME), a site mirror's URL or a file:// channel.",
)
@click.option("--no-lock", is_flag=True, help="Write environment.yml only; do not solve.")
@click.option(
    "--cluster",
    "cluster_file",
    metavar="FILE",
    help="Plan for every partition of a cluster file (cluster.yaml, from `envsolver cluster init`): one "
    "environment per platform, in OUT/<platform>/.",
)
@click.option(
    "--partition",
    "only",
    multiple=True,
    metavar="NAME",
    shell_complete=completion.complete_partition,
    help="With --cluster: only this partition (repeatable).",
)
@click.option(
    "--skip-partition",
    "skip",
    multiple=True,
    metavar="NAME",
    shell_complete=completion.complete_partition,
    help="With --cluster: leave this partition out.",
)
@click.option("--force", is_flag=True, help="Overwrite files that were edited by hand.")
@click.option(
    "--update",
    "updates",
    multiple=True,
    metavar="NAME",
    help="Re-solve the lock in OUT keeping every other package at its locked version and build: NAME (conda or "
    "PyPI; repeatable) moves to the newest that fits, with only what its new version needs. Without --update a "
    "lock in OUT is kept too (its packages move only where the inputs need it); to solve anew, remove it.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Solve, then print each file that would be written (created, overwritten, unchanged, removed, or refused "
    "for a hand edit) and the packages that change against the conda-lock.yml in OUT, and write nothing; exit 2, "
    "as the real run, when a file would be refused.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written, and the plan, as JSON.")
@verbosity_of(
    "each step of the solve as it starts (the specs and channels of each platform's solve, the solver's own text "
    "where it finds no solution), then what was solved (the specs, the channels, each platform's virtual packages)"
)
def make(
    name: str | None,
    out_dir: Path,
    offline: bool,
    channels: tuple[str, ...],
    no_lock: bool,
    cluster_file: str | None,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    force: bool,
    updates: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Resolve the target, solve it for the target platform and write environment.yml, conda-lock.yml and
    conda-<platform>.lock to DIR."""
    from envsolver.core import names

    if offline and channels:
        raise BadInputError("--offline and --channel exclude each other. Pass one of them.")
    if channels:
        from envsolver.net import channels as channel_values

        for value in channels:
            channel_values.check(value)
    if name is not None:
        names.validate(name)
    if updates and (no_lock or cluster_file is not None):
        raise BadInputError(
            f"--update re-solves the lock in --out; it does not apply to {'--no-lock' if no_lock else '--cluster'}. "
            "Remove one of them."
        )
    if cluster_file is not None:
        if dry_run:
            raise BadInputError(
                "--dry-run does not apply to --cluster yet. Remove --dry-run, or pass --out a new directory to see "
                "the files."
            )
        _make_cluster(cluster_file, only, skip, name, out_dir, offline, channels, no_lock, force, as_json, kwargs)
        return
    if only or skip:
        raise BadInputError(
            "--partition and --skip-partition choose partitions of a cluster file. Pass --cluster FILE."
        )
    from envsolver.lock import worker_call

    if not no_lock:
        worker_call.prestart()  # rattler's worker starts while this process imports, loads the KB and plans
        worker_call.meanwhile(_import_writers)  # what only the answer needs is imported while rattler solves
    from envsolver.cli import render
    from envsolver.lock import run as lock
    from envsolver.resolve import detect
    from envsolver.resolve.inputs import build_target, make_command

    kb = default_kb()
    inputs = build_target(_options(kwargs), kb, detect=detect.detect, environ=os.environ)
    command = make_command(inputs.target, name=name, offline=offline, channels=channels, no_lock=no_lock)
    if inputs.target.project.files:
        from envsolver.lock.outputs import refuse_inputs

        refuse_inputs(out_dir, inputs.target.project.files, command)
    err = err_out()

    def notice(message: str) -> None:
        render.text(err, message)

    lock_result: LockResult | None = None
    if no_lock:
        plan = _warned(resolve(inputs.target, kb), inputs)
    else:
        import dataclasses

        from envsolver.lock import keep as kept
        from envsolver.lock.solve import cache_dir

        keep, unkept = kept.existing(out_dir, updates)  # the lock in OUT, kept (lock/keep.py)
        if keep is not None:
            moving = f"; updating {', '.join(keep.updates)}" if keep.updates else ""
            detail(err, f"preferring the {len(keep.conda)} conda packages kept of {keep.path}{moving}")
        mode: lock.Mode = "offline" if offline else ("custom" if channels else "live")
        with render.spinner(err, "resolving") as show:
            lock_result = lock.lock(inputs.target, kb, mode, channels, cache_dir(), with_detail(err, show), keep=keep)
        warned = (*((unkept,) if unkept else ()), *lock_result.warnings)
        lock_result = dataclasses.replace(lock_result, plan=_warned(lock_result.plan, inputs), warnings=warned)
        plan = lock_result.plan
        _solve_details(err, lock_result)
    from envsolver.lock import outputs

    if dry_run:
        if lock_result is None:
            texts = {"environment.yml": _environment_text(plan, command, name)}
        else:
            texts = outputs.render_all(lock_result, kb, command, name)
        _dry_run(out_dir, texts, force, plan, lock_result, as_json, kb)
        return
    if lock_result is None:
        written = outputs.write_environment(plan, out_dir, command, name, force, on_wait=notice)
    else:
        written = outputs.write_all(lock_result, kb, out_dir, command, name, force, on_wait=notice)
    if as_json:
        click.echo(json.dumps(render.made_json(written, plan, lock_result), indent=2))
        return
    render.made(render.out(), written, plan, lock_result, out_dir, name)
    render.warnings(render.out(stderr=True), [*(lock_result.warnings if lock_result else ()), *plan.warnings])


def _import_writers() -> None:
    """make's writers (lock.outputs and the modules it imports), imported while rattler solves."""
    import envsolver.lock.outputs  # noqa: F401


def _environment_text(plan: Plan, command: str, name: str | None) -> str:
    from envsolver.kb.load import kb_date
    from envsolver.lock.writers import environment

    return environment.render(plan, command, kb_date(), name)


def _solve_details(err: Any, result: LockResult) -> None:
    """-v: what was solved: the specs, the channels, each platform's virtual packages."""
    detail(err, f"solved {len(result.plan.specs)} specs: {' '.join(str(s) for s in result.plan.specs)}")
    detail(err, f"channels: {' '.join(result.channels)} ({result.used})")
    for platform, virtual in sorted(result.virtual_packages.items()):
        detail(err, f"virtual packages for {platform}: {' '.join(f'{k}={v}' for k, v in sorted(virtual.items()))}")


def _dry_run(
    out_dir: Path,
    texts: dict[str, str],
    force: bool,
    plan: Plan,
    lock_result: LockResult | None,
    as_json: bool,
    kb: KnowledgeBase,
) -> None:
    """make --dry-run: what writing would do, file by file, and package by package against the lock in OUT;
    nothing is written."""
    from envsolver.cli import render
    from envsolver.cli.base import error
    from envsolver.core.errors import failure, split_fix
    from envsolver.lock import dryrun, pkgdiff

    actions = dryrun.preview(out_dir, texts, force)
    refused = dryrun.refusal(actions)
    against = dryrun.against_lock(out_dir, lock_result, pkgdiff.pypi_of_conda(kb)) if lock_result else None
    if as_json:
        doc = render.made_json({}, plan, lock_result)
        del doc["files"]
        # A dry run the real run would refuse fails as it does (exit 2), its document also saying what it saw.
        failed = failure(2, "bad_input", *split_fix(refused)) if refused else {"ok": True}
        doc = {
            **failed,
            "dry_run": True,
            "would_write": dryrun.would_write(actions),
            "files": {str(path): action for path, action in actions.items()},
            "packages": against.to_json() if against else None,
            **{key: value for key, value in doc.items() if key != "ok"},
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        out = render.out()
        for line in [*dryrun.lines(actions), *dryrun.package_lines(against)]:
            render.text(out, line)
        render.warnings(render.out(stderr=True), [*(lock_result.warnings if lock_result else ()), *plan.warnings])
    if refused:
        error(refused)
        sys.exit(2)


def _make_cluster(
    cluster_file: str,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    name: str | None,
    out_dir: Path,
    offline: bool,
    channels: tuple[str, ...],
    no_lock: bool,
    force: bool,
    as_json: bool,
    kwargs: dict[str, Any],
) -> None:
    from envsolver.cli import render, render_cluster
    from envsolver.cluster import file as cluster_files
    from envsolver.cluster import make as cluster_make
    from envsolver.lock import run as lock
    from envsolver.lock.outputs import cache_dir

    kb = default_kb()
    cluster = cluster_files.load(Path(cluster_file), kb)
    mode: lock.Mode = "offline" if offline else ("custom" if channels else "live")
    request = cluster_make.Request(cluster_file, _options(kwargs), only, skip, mode, channels, name, no_lock, force)
    err = diagnostics()
    with err.status("resolving", spinner="dots") as status:
        results = cluster_make.make(
            cluster, kb, request, out_dir, cache_dir(), progress(status), lambda m: render.text(err, m)
        )
    if as_json:
        click.echo(json.dumps(render_cluster.made_json(cluster, results), indent=2))
        return
    render_cluster.made(render.console(), cluster, results, name)
    warn = render.console(stderr=True)
    for result in results:
        render.warnings(warn, [*(result.locked.warnings if result.locked else ()), *result.plan.warnings])


@main.command()
@click.argument("words", nargs=-1, metavar="[WORD]...")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of GPUs.")
@verbosity
def gpus(words: tuple[str, ...], as_json: bool) -> None:
    """List the GPUs envsolver knows, with compute capability, memory, bf16 and fp8 support. With WORDs, only
    the GPUs one of whose names (key, name, aliases) holds every word, case, spaces and punctuation ignored.

    \b
    Examples:
      envsolver gpus
      envsolver gpus 4090          # rtx4090, rtx4090-d, rtx4090-laptop
      envsolver gpus --json | jq '.[] | select(.compute_capability == "9.0") | .name'

    Exit codes: 0 listed; 2 no GPU matches the words (the closest keys are named).
    """
    from envsolver.cli import render
    from envsolver.kb.gpus import search

    found = search(default_kb(), words)
    if as_json:
        click.echo(json.dumps(render.gpu_rows(found), indent=2))
        return
    # rich lays the table out on a terminal; a pipe or a file gets plain aligned columns (and no rich import)
    render.gpu_table(render.console() if render.is_terminal(sys.stdout) else sys.stdout, found)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
