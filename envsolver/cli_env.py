"""The environment commands of `envsolver`: install, hook, verify. Parse options, call, print, exit.
Defined on their own; cli.py adds them to `main`.

Exit codes: 0 ok; 1 a check, a pre-flight or an op build failed; 2 bad input, or the command could not run;
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from envsolver import install as installer
from envsolver import interrupts, prefixmeta, render
from envsolver import progress as byte_progress
from envsolver.cli_base import Command, diagnostics, error, progress, verbosity_of
from envsolver.cluster import file as cluster_file
from envsolver.cluster import grammar as cluster_grammar
from envsolver.cluster import step as cluster_step
from envsolver.cluster import verify as cluster_verify
from envsolver.cluster import verify_report
from envsolver.errors import BadInputError
from envsolver.hook import activation as hook_activation
from envsolver.hook import build as hook_build
from envsolver.hook import opcache
from envsolver.hook import render as hook_render
from envsolver.hook import run as hook_run
from envsolver.http import parse_mirrors
from envsolver.kb import default_kb
from envsolver.outputs import cache_dir
from envsolver.redact import redact_text
from envsolver.verify import checks as verify_checks
from envsolver.verify import nccl as verify_nccl
from envsolver.verify import nccl_run
from envsolver.verify import render as verify_render
from envsolver.verify import run as verify_run

# hook's and install's --op-cache (install runs the hook)
OP_CACHE = click.option(
    "--op-cache",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ENVSOLVER_OP_CACHE",
    help="A shared op cache (a directory on the cluster's shared filesystem; env ENVSOLVER_OP_CACHE): ops built "
    "once for the same DeepSpeed, torch, nvcc, compiler and arch list are copied from it instead of rebuilt.",
)


def _op_cache_trust(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> frozenset[int]:
    try:
        return opcache.parse_trust(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# hook's and install's --op-cache-trust: the op cache's trust model is in SECURITY.md
OP_CACHE_TRUST = click.option(
    "--op-cache-trust",
    "op_cache_trust",
    multiple=True,
    metavar="USER",
    envvar="ENVSOLVER_OP_CACHE_TRUST",
    callback=_op_cache_trust,
    help="Also use op cache entries written by USER (a user name or uid; repeatable; env "
    "ENVSOLVER_OP_CACHE_TRUST, space-separated). Entries by you, root and the cache directory's owner are used "
    "without it; an entry anyone else could have written is refused and the op is built.",
)

# verify --help's list of checks: what each id looks at, one line each (help text only; the checks themselves
# live in envsolver/verify). tests/test_cli_flags.py holds it to verify_checks.IDS.
CHECK_MEANINGS = {
    "driver": "the NVIDIA driver's version and the CUDA it supports",
    "gpus": "the GPUs the driver sees",
    "torch_import": "torch imports in the environment's Python",
    "torch_cuda_build": "torch is a CUDA build (not CPU-only)",
    "driver_supports_torch_cuda": "the driver runs the CUDA torch was built with",
    "cuda_available": "torch.cuda.is_available() and the device count",
    "arch_coverage": "torch's build has code for every visible GPU's compute capability",
    "prefix_toolkit": "the prefix holds the CUDA toolkit an op build needs (nvcc and the op headers)",
    "nvcc": "nvcc is there and says its version",
    "cuda_version_match": "nvcc's CUDA and torch's CUDA fit together for DeepSpeed's op builds",
    "headers": "the CUDA headers DeepSpeed's ops include",
    "op_libraries": "the unversioned CUDA libraries DeepSpeed's ops link (the -dev packages)",
    "libcudart": "which libcudart torch loads, and no other one on LD_LIBRARY_PATH",
    "cudnn": "the cuDNN torch uses",
    "nccl": "the NCCL torch uses",
    "host_compiler": "a C++ compiler nvcc accepts",
    "torch_cuda_arch_list": "TORCH_CUDA_ARCH_LIST is set, well-formed, and covers the GPUs",
    "deepspeed_ops": "DeepSpeed's accelerator and its built ops",
    "extensions_cache": "no ops in the torch extensions cache built for another Python, torch or CUDA",
    "pip_conda_mix": "no pip nvidia-* CUDA wheels beside conda's CUDA",
    "lock_drift": "the installed packages match the lock",
    "host_vs_lock": "this host's driver and glibc meet what the lock was solved for",
    "shm": "/dev/shm is large enough for DataLoader workers",
}


def _checks_epilog() -> str:
    width = max(len(i) for i in verify_checks.IDS)
    rows = [f"  {i:<{width}}  {CHECK_MEANINGS.get(i, '')}".rstrip() for i in verify_checks.IDS]
    return "\b\nChecks (--check ID, repeatable; default: all, in this order):\n" + "\n".join(rows)


@click.command(name="install", cls=Command)
@click.argument(
    "lock_path", metavar="[LOCK]", default="conda-lock.yml", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "-p",
    "--prefix",
    type=click.Path(file_okay=False, path_type=Path),
    help="The environment directory to create or update.",
)
@click.option(
    "-n",
    "--name",
    metavar="NAME",
    help="Instead of -p: the named environment NAME in conda's envs directory (the first entry of "
    "CONDA_ENVS_DIRS or CONDA_ENVS_PATH, else ~/.conda/envs), as conda's -n NAME.",
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
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be linked (each package: installed already, cached or to download) and write nothing.",
)
@OP_CACHE
@OP_CACHE_TRUST
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@verbosity_of(
    "each step as it starts (each archive fetched, the archives checked, the linking, the PyPI files installed, "
    "then the post-install hook's pre-flight and ops)"
)
def install_command(
    lock_path: Path,
    prefix: Path | None,
    name: str | None,
    platform: str | None,
    mirrors: tuple[str, ...],
    no_hook: bool,
    dry_run: bool,
    op_cache: Path | None,
    op_cache_trust: frozenset[int],
    as_json: bool,
) -> None:
    """Install a conda-lock.yml or explicit lock into PREFIX, without conda.

    Every archive is proven against the lock's hash before the prefix changes: its sha256 where the lock records
    one (a conda-lock.yml from envsolver make records it for every package; an explicit lock only on
    `URL#sha256=HASH` lines), else its md5 (an explicit lock's `URL#MD5` lines, the form conda and envsolver's
    conda-<platform>.lock write); PyPI files by sha256 always. A tampered or truncated archive is refused and
    the prefix is left as it was. Re-running on an unchanged prefix does nothing.

    \b
    Examples:
      envsolver install conda-lock.yml -p ~/envs/train
      envsolver install conda-linux-64.lock -p /scratch/envs/train
      envsolver install conda-lock.yml -n train     # ~/.conda/envs/train (or CONDA_ENVS_DIRS's first)
      envsolver install -p ./env --mirror https://conda.anaconda.org=https://mirror.example.org/conda

    Exit codes: 0 installed (or already up to date) and the hook passed or was not run; 1 the post-install
    hook failed (a pre-flight check or an op build); 2 bad input or the install could not run (the prefix is
    left as it was); 130 interrupted (Ctrl-C); 143 terminated by SIGTERM; 129 terminated by SIGHUP (both
    cleaned up as after Ctrl-C).
    """
    with interrupts.like_ctrl_c():
        _install(lock_path, prefix, name, platform, mirrors, no_hook, dry_run, (op_cache, op_cache_trust), as_json)


def _install(
    lock_path: Path,
    prefix: Path | None,
    name: str | None,
    platform: str | None,
    mirrors: tuple[str, ...],
    no_hook: bool,
    dry_run: bool,
    cache: tuple[Path | None, frozenset[int]],
    as_json: bool,
) -> None:
    """install's work (install_command runs it with SIGTERM and SIGHUP ending like Ctrl-C); CACHE: the op cache
    and the uids whose entries it trusts."""
    op_cache, op_cache_trust = cache
    prefix = _install_prefix(prefix, name)
    mirror_map = parse_mirrors(mirrors)
    if dry_run:
        _show_plan(installer.plan(lock_path, prefix, platform, mirror_map, cache_dir()), as_json)
        return
    err = diagnostics()
    warn = render.console(stderr=True)  # warnings print with -q too
    with err.status("reading the lock", spinner="dots") as status:
        report = installer.install(
            lock_path, prefix, platform, mirror_map, cache_dir(), progress(status), None,
            lambda warning: render.warnings(warn, [warning]),
        )  # fmt: skip
    meta = report.lock_metadata
    prefixmeta.save(prefix, report.platform, meta)
    hook_report = None
    skipped = "not run (--no-hook); run `envsolver hook -p PREFIX` later"
    if not no_hook and "envsolver_torch_cuda_arch_list" not in meta:
        skipped = (
            "skipped: the lock carries no envsolver metadata (it was not written by envsolver make); run "
            "`envsolver hook -p PREFIX --arch-list ...`"
        )
    elif not no_hook:
        with err.status("post-install hook", spinner="dots") as status:
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
                progress(status),
                op_cache=op_cache,
                op_cache_trust=op_cache_trust,
            )
    ok = hook_report is None or hook_report.ok
    if as_json:
        doc = {
            "ok": ok,
            "prefix": str(report.prefix),
            "platform": report.platform,
            "packages": report.packages,
            "fetched": report.fetched,
            "changed": report.changed,
            "pip": {"installed": list(report.pip_installed), "kept": list(report.pip_kept)},
            "hook": hook_render.as_json(hook_report) if hook_report else skipped,
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        state = "installed" if report.changed else "already up to date"
        out = render.console()
        render.text(
            out,
            f"{report.prefix}: {state} ({report.packages} packages for {report.platform}, "
            f"{report.fetched} fetched and verified)",
        )
        if report.pip_installed or report.pip_kept:
            done = [f"{p} installed" for p in report.pip_installed] + [f"{p} in place" for p in report.pip_kept]
            render.text(out, f"PyPI part (pip, by sha256): {', '.join(done)}")
        if hook_report is not None:
            hook_render.show(out, hook_report)
        else:
            render.text(out, f"post-install hook: {skipped}")
    if not ok:
        sys.exit(1)


def _show_plan(plan: installer.InstallPlan, as_json: bool) -> None:
    """install --dry-run: every package and what would happen to it, then one summary line."""
    if as_json:
        doc = {
            "dry_run": True,
            "prefix": str(plan.prefix),
            "platform": plan.platform,
            "changes": plan.changes,
            "packages": [dataclasses.asdict(p) for p in plan.packages],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    out = render.console()
    width = max((len(p.name) for p in plan.packages), default=0)
    for p in plan.packages:
        size = "" if p.size is None else byte_progress.size(p.size)
        render.text(out, f"{p.name:<{width}}  {p.version} {p.build} {p.state} {size}".rstrip())
    counts = {state: sum(p.state == state for p in plan.packages) for state in ("download", "cached", "installed")}
    what = "would link" if plan.changes else "already holds"
    render.text(
        out,
        f"{plan.prefix}: {what} {len(plan.packages)} packages for {plan.platform} ({counts['download']} to download,"
        f" {counts['cached']} cached, {counts['installed']} installed already); dry run, nothing was written",
    )


def _install_prefix(prefix: Path | None, name: str | None) -> Path:
    """-p PREFIX, or -n NAME under conda's envs directory (envsdir.py); exactly one of them."""
    return _prefix_or_name(
        prefix, name, False, "the environment to install into. Pass -p PREFIX (a directory), or -n NAME for a named "
        "environment under conda's envs directory.",
    )  # fmt: skip


def _hook_prefix(prefix: Path | None, name: str | None) -> Path:
    """-p PREFIX, or -n NAME of an existing environment (envsdir.existing); exactly one of them."""
    return _prefix_or_name(
        prefix, name, True, "the environment to set up. Pass -p PREFIX, or -n NAME for a named environment (as "
        "conda-lock install -n NAME made it).",
    )  # fmt: skip


def _prefix_or_name(prefix: Path | None, name: str | None, existing: bool, missing: str) -> Path:
    """The prefix -p gives, or -n NAME's: an existing environment found as conda finds it (EXISTING), else the
    directory conda's -n NAME names. Raises click.UsageError for both or neither (MISSING: what it is for)."""
    if prefix is not None and name is not None:
        raise click.UsageError("-n/--name and -p/--prefix exclude each other. Pass one of them.")
    if name is not None:
        from envsolver import envsdir

        return envsdir.existing(name, os.environ) if existing else envsdir.prefix_for(name, os.environ)
    if prefix is None:
        raise click.UsageError(f"Missing option '-p' / '--prefix' (or '-n' / '--name'): {missing}")
    return prefix


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
    prefix = _hook_prefix(prefix, name)
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
        )
    if as_json:
        click.echo(json.dumps(hook_render.as_json(report), indent=2))
    else:
        hook_render.show(render.console(), report)
    if not report.ok:
        sys.exit(1)


@click.command(name="verify", cls=Command, epilog=_checks_epilog())
@click.option("-p", "--prefix", type=click.Path(file_okay=False, path_type=Path), help="The environment to check.")
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The interpreter to check (default: PREFIX/bin/python, the active conda env, or python3).",
)
@click.option(
    "--cluster",
    "cluster_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Check PREFIX (on the shared filesystem) on every usable node of every partition of this cluster file, "
    "from the login node: one srun step per partition, one task per node; failing nodes are named.",
)
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    metavar="NAME",
    help="--cluster: check only this partition of the cluster file (repeatable) [default: every partition]. "
    "--nccl --nodes: the one partition srun asks (with --cluster FILE: its account, constraint and GPU type too).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.IntRange(0, 3600),
    metavar="SECONDS",
    help=f"--cluster: how long each step waits for its nodes to be free [default: {cluster_step.WAIT_S}].",
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
    metavar="ID",
    help="Run only this check (repeatable); the checks are listed below.",
)
@click.option(
    "--nccl",
    is_flag=True,
    help="Run the NCCL check instead: all-reduce on every GPU of this node (torchrun, one process per GPU), "
    "exact sums, bus bandwidth, the same NCCL on every rank; with --nodes, across nodes through srun.",
)
@click.option("--gpus", type=int, help="--nccl: processes, one per GPU (default: every GPU the env's torch sees).")
@click.option("--sizes", help="--nccl: all-reduce sizes, 1024-based K/M/G [default: 1M,4M,16M,64M,256M,1G].")
@click.option("--iters", type=int, help="--nccl: timed all-reduces per size [default: 20].")
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    help="--nccl: gloo runs the launch and the checks on CPU only, to test the plumbing; never an NCCL pass.",
)
@click.option("--nccl-timeout", type=float, help="--nccl: seconds for joining and for each collective [default: 120].")
@click.option(
    "--nodes",
    type=int,
    help="--nccl across nodes: one srun step on N nodes (one task per node, torchrun on each; --gpus is then per "
    "node). Inside an allocation (salloc, a batch job) the step runs on N of its nodes.",
)
@click.option("--time", "time_limit", help="--nccl --nodes: the step's --time [default: the check's own deadline].")
@click.option("--port", type=int, help="--nccl --nodes: rendezvous port [default: 29500 + job id % 20000].")
@click.option("--json", "as_json", is_flag=True, help="Print {ok, target, checks} as JSON.")
@verbosity_of("with --nccl on this node, each step of the run as it comes (the ranks joining, each size's all-reduce)")
@interrupts.ends_like_ctrl_c  # SIGTERM and SIGHUP end the steps of --cluster and --nccl as Ctrl-C does
def verify_command(
    prefix: Path | None,
    python: Path | None,
    cluster_path: Path | None,
    partitions: tuple[str, ...],
    wait_s: int | None,
    lock_path: Path | None,
    gpu_test: bool,
    only: tuple[str, ...],
    nccl: bool,
    gpus: int | None,
    sizes: str | None,
    iters: int | None,
    backend: str | None,
    nccl_timeout: float | None,
    nodes: int | None,
    time_limit: str | None,
    port: int | None,
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
      envsolver verify --nccl -p ~/envs/train  # all-reduce over this node's GPUs
      envsolver verify --nccl -p /shared/envs/train --nodes 2 --gpus 8 --partition h100   # across nodes (srun)
      envsolver verify --cluster cluster.yaml -p /shared/envs/train   # every node of every partition
      envsolver verify --cluster cluster.yaml -p /shared/envs/train --partition a100

    With --nccl, --json also carries nccl_tested (true only for NCCL on GPUs with every check passed), the
    bus bandwidth per size (nccl-tests' busbw), each rank's GPU and NCCL library, and the ranks' own report.

    Exit codes: 0 everything passed (warnings allowed); 1 a check failed; 2 bad input, or verify could not
    run; 130 interrupted (Ctrl-C), 143 terminated by SIGTERM, 129 by SIGHUP (Slurm steps it started are cancelled
    first).
    """
    if nccl and (nodes is not None or (cluster_path is not None and partitions)):
        options = _nccl_options(lock_path, gpu_test, only, gpus, sizes, iters, backend, nccl_timeout)
        across = _across(cluster_path, partitions, nodes, gpus, time_limit, port)
        _verify_nccl_slurm(prefix, python, across, options, cluster_path, as_json)
        return
    if nccl and cluster_path is not None:
        raise BadInputError(
            "--nccl and --cluster exclude each other, unless --nccl runs across nodes: --cluster checks every "
            "partition, --nccl this node's GPUs. Pass one of them, or --nccl --cluster FILE --partition P --nodes N."
        )
    stray_across = next((n for n, v in (("--time", time_limit), ("--port", port)) if v is not None), None)
    if nccl and stray_across:
        raise BadInputError(f"{stray_across} applies to --nccl across nodes only. Pass --nodes N too, or remove it.")
    if partitions and (nccl or cluster_path is None):
        raise BadInputError(
            "--partition applies to --nccl across nodes (with --nodes N) or to --cluster. Pass one of them, or "
            "remove --partition."
        )
    if nccl:
        options = _nccl_options(lock_path, gpu_test, only, gpus, sizes, iters, backend, nccl_timeout)
        _verify_nccl(prefix, python, gpus, options, as_json)
        return
    given: dict[str, object] = {"--gpus": gpus, "--sizes": sizes, "--iters": iters, "--backend": backend}
    given |= {"--nccl-timeout": nccl_timeout, "--nodes": nodes, "--time": time_limit, "--port": port}
    stray = [name for name, value in given.items() if value is not None]
    if stray:
        raise BadInputError(f"{stray[0]} applies to the NCCL check only. Pass --nccl too, or remove {stray[0]}.")
    if cluster_path is None and (partitions or wait_s is not None):
        name = "--partition" if partitions else "--wait"
        raise BadInputError(f"{name} applies to --cluster only. Pass --cluster FILE too, or remove {name}.")
    if cluster_path is not None:
        request = cluster_verify.Request(
            cluster_path,
            prefix or Path(),
            lock_path,
            gpu_test,
            only,
            wait_s=wait_s if wait_s is not None else cluster_step.WAIT_S,
            partitions=partitions,
        )
        _verify_cluster(request, prefix, python, as_json)
        return
    kb = default_kb()
    if as_json:
        chosen, _, checks = verify_run.verify(kb, prefix, python, lock_path, gpu_test, only, os.environ)
        click.echo(json.dumps(verify_render.as_json(chosen.python, chosen.prefix, checks), indent=2))
    else:
        out = render.console()
        chosen, _, checks = verify_run.verify(
            kb,
            prefix,
            python,
            lock_path,
            gpu_test,
            only,
            os.environ,
            on_check=lambda c: verify_render.line(out, c),
            on_target=lambda t: render.text(out, f"verify {t.python} ({t.chosen_by})"),
        )
        render.text(out, verify_render.summary(checks))
    if any(c.status == "fail" for c in checks):
        sys.exit(1)


def _nccl_options(
    lock_path: Path | None,
    gpu_test: bool,
    only: tuple[str, ...],
    gpus: int | None,
    sizes: str | None,
    iters: int | None,
    backend: str | None,
    timeout: float | None,
) -> nccl_run.Options:
    """The --nccl options, each checked. Raises BadInputError."""
    for name, used in (("--lock", lock_path is not None), ("--gpu-test", gpu_test), ("--check", bool(only))):
        if used:
            raise BadInputError(f"{name} does not apply to --nccl. Remove {name}, or run verify without --nccl.")
    if gpus is not None and not 1 <= gpus <= 64:
        raise BadInputError(f"--gpus {gpus} is not from 1 to 64. Pass --gpus N with N GPUs on this node.")
    if iters is not None and not 1 <= iters <= 10_000:
        raise BadInputError(f"--iters {iters} is not from 1 to 10000. Pass e.g. --iters 20.")
    if timeout is not None and not 1 <= timeout <= 3600:
        raise BadInputError(f"--nccl-timeout {timeout:g} is not from 1 to 3600 seconds. Pass e.g. --nccl-timeout 120.")
    return nccl_run.Options(
        backend="gloo" if backend == "gloo" else "nccl",
        sizes=verify_nccl.parse_sizes(sizes) if sizes is not None else nccl_run.DEFAULT_SIZES,
        iters=iters if iters is not None else 20,
        timeout=timeout if timeout is not None else 120.0,
    )


def _verify_nccl(
    prefix: Path | None, python: Path | None, gpus: int | None, options: nccl_run.Options, as_json: bool
) -> None:
    """`verify --nccl`: torchrun on this node, then the checks."""
    chosen = verify_run.target(prefix, python, os.environ)
    env = nccl_run.environ_for(chosen.prefix, os.environ)
    count = nccl_run.processes(chosen.python, gpus, options, env)
    with diagnostics().status(f"NCCL check: {count} ranks", spinner="dots") as status:
        run = nccl_run.run_local(chosen.python, chosen.prefix, count, options, os.environ, progress(status))
    doc = nccl_run.report_json(run, chosen.python, chosen.prefix) if as_json else None
    _print_nccl(run, doc, f"verify --nccl {chosen.prefix or chosen.python}: {count} ranks, {options.backend}")


def _print_nccl(run: nccl_run.Run, doc: dict[str, Any] | None, title: str) -> None:
    """The NCCL check's result: `doc` as JSON (with --json), else the title and a line per check; exit 1 unless it
    passed. One printer for the run on this node and the run across nodes."""
    if doc is not None:
        click.echo(json.dumps(doc, indent=2))
    else:
        out = render.console()
        render.text(out, title)
        for check in run.checks:
            verify_render.line(out, check)
        render.text(out, verify_render.summary(run.checks))
    if not verify_nccl.passed(run.checks):
        sys.exit(1)


def _across(
    cluster_path: Path | None,
    partitions: tuple[str, ...],
    nodes: int | None,
    gpus: int | None,
    time_limit: str | None,
    port: int | None,
) -> nccl_run.Across:
    """--nccl across nodes, as asked: each value checked, the cluster file's partition read. Raises
    BadInputError."""
    if len(partitions) > 1:
        raise BadInputError(
            f"--nccl runs one step on one partition; {len(partitions)} --partition given. Pass one --partition."
        )
    if nodes is not None and not 1 <= nodes <= 4096:
        raise BadInputError(f"--nodes {nodes} is not from 1 to 4096. Pass --nodes N with the nodes to use.")
    if port is not None and not 1024 <= port <= 65535:
        raise BadInputError(f"--port {port} is not from 1024 to 65535. Pass a free port, e.g. --port 29533.")
    if time_limit is not None:
        try:
            nccl_run.time_limit(time_limit)
        except ValueError as exc:
            raise BadInputError(f"--time {time_limit!r}: {exc}. Pass e.g. --time 30.") from None
    partition = partitions[0] if partitions else None
    if partition is not None:
        try:
            cluster_grammar.name(partition)
        except ValueError as exc:
            raise BadInputError(f"--partition {partition!r}: {exc}. Pass a partition `sinfo` lists.") from None
    slurm_options = None
    if cluster_path is not None:
        if partition is None:
            raise BadInputError("--nccl --cluster FILE runs on one partition of it. Pass --partition P too.")
        found = cluster_file.load(cluster_path, default_kb()).partition(partition)
        if found is None:
            raise BadInputError(
                f"{str(cluster_path)!r} has no partition {partition!r}. Pass one of its partitions "
                "(`envsolver cluster show` lists them), or remove --cluster to use --partition as Slurm names it."
            )
        slurm_options = dataclasses.replace(found.slurm, partition=found.slurm.partition or found.name)
    return nccl_run.Across(nodes, gpus, partition, slurm_options, time_limit, port)


def _verify_nccl_slurm(
    prefix: Path | None,
    python: Path | None,
    across: nccl_run.Across,
    options: nccl_run.Options,
    cluster_path: Path | None,
    as_json: bool,
) -> None:
    """`verify --nccl --nodes N`: one srun step across the nodes (torchrun on each), then the checks."""
    if prefix is None and python is None and not os.environ.get("CONDA_PREFIX"):
        raise BadInputError(
            "--nccl --nodes runs the environment's python on every node, not this machine's python3. Pass -p PREFIX "
            "(the environment on the shared filesystem), e.g. envsolver verify --nccl -p /shared/envs/train --nodes 2."
        )
    chosen = verify_run.target(prefix, python, os.environ)
    with nccl_run.run_dir(nccl_run.scratch_root(os.environ)) as out_dir:
        job, inside = nccl_run.slurm_job(chosen.python, across, options, out_dir, os.environ)
        cluster = str(cluster_path) if cluster_path else None
        rerun = nccl_run.slurm_rerun(chosen.prefix, job.python, job, across, cluster)
        ranks = job.nodes * job.gpus_per_node
        where = f"{job.nodes} node(s)" + (f" of job {os.environ.get('SLURM_JOB_ID')}" if inside else "")
        with interrupts.like_ctrl_c(), diagnostics().status(f"NCCL check: {ranks} ranks on {where}", spinner="dots"):
            run = nccl_run.run_slurm(job, inside, chosen.prefix, os.environ, rerun)
    doc = None
    if as_json:
        doc = nccl_run.report_json(run, chosen.python, chosen.prefix)
        doc["slurm"] = nccl_run.slurm_json(run, job, inside, os.environ)
    title = f"verify --nccl {chosen.prefix or chosen.python}: {ranks} ranks on {where}, {options.backend}"
    _print_nccl(run, doc, title)


def _verify_cluster(request: cluster_verify.Request, prefix: Path | None, python: Path | None, as_json: bool) -> None:
    """verify --cluster: the report on stdout, progress on stderr; exit 1 when a partition failed, 2 (with the
    error on stderr, and in the document) when a step could not run."""
    if prefix is None or python is not None:
        raise BadInputError(
            "--cluster checks an environment prefix on every partition: pass -p PREFIX (on the shared filesystem), "
            "and no --python (each node runs PREFIX/bin/python)."
        )
    err = diagnostics()
    report = cluster_verify.verify(request, default_kb(), lambda line: render.text(err, line))
    if as_json:
        click.echo(json.dumps(verify_report.document(report), indent=2))
    else:
        out = render.console()
        for line in verify_report.lines(report):
            render.text(out, line)
    problem = verify_report.error_text(report)
    if problem is not None:
        error(redact_text(problem))
    if report.exit_code:
        sys.exit(report.exit_code)
