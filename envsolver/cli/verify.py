"""`envsolver verify`: check an environment end to end, on this host, across a cluster's nodes, or NCCL across
GPUs and nodes. Parse options, call, print, exit."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from envsolver.cli import render
from envsolver.cli.base import Command, diagnostics, error, progress, verbosity_of
from envsolver.cluster import file as cluster_file
from envsolver.cluster import grammar as cluster_grammar
from envsolver.cluster import nccl_nodes, verify_report
from envsolver.cluster import step as cluster_step
from envsolver.cluster import verify as cluster_verify
from envsolver.core import interrupts
from envsolver.core.errors import BadInputError
from envsolver.core.redact import redact_text
from envsolver.kb import default_kb
from envsolver.verify import checks as verify_checks
from envsolver.verify import nccl as verify_nccl
from envsolver.verify import nccl_run
from envsolver.verify import render as verify_render
from envsolver.verify import run as verify_run

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
    "pip_conda_mix": "no PyPI copy of what the conda part provides (torch, triton, numpy, CUDA libraries)",
    "lock_drift": "the installed packages match the lock",
    "host_vs_lock": "this host's driver and glibc meet what the lock was solved for",
    "shm": "/dev/shm is large enough for DataLoader workers",
}


def _checks_epilog() -> str:
    width = max(len(i) for i in verify_checks.IDS)
    rows = [f"  {i:<{width}}  {CHECK_MEANINGS.get(i, '')}".rstrip() for i in verify_checks.IDS]
    return "\b\nChecks (--check ID, repeatable; default: all, in this order):\n" + "\n".join(rows)


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
@click.option("--port", type=int, help="--nccl --nodes: rendezvous port [default: 29500 + job id % 3000].")
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
) -> nccl_nodes.Across:
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
            nccl_nodes.time_limit(time_limit)
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
    return nccl_nodes.Across(nodes, gpus, partition, slurm_options, time_limit, port)


def _verify_nccl_slurm(
    prefix: Path | None,
    python: Path | None,
    across: nccl_nodes.Across,
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
    with nccl_nodes.run_dir(nccl_nodes.scratch_root(os.environ)) as out_dir:
        job, inside = nccl_nodes.slurm_job(chosen.python, across, options, out_dir, os.environ)
        cluster = str(cluster_path) if cluster_path else None
        rerun = nccl_nodes.slurm_rerun(chosen.prefix, job.python, job, across, cluster)
        ranks = job.nodes * job.gpus_per_node
        where = f"{job.nodes} node(s)" + (f" of job {os.environ.get('SLURM_JOB_ID')}" if inside else "")
        with interrupts.like_ctrl_c(), diagnostics().status(f"NCCL check: {ranks} ranks on {where}", spinner="dots"):
            run = nccl_nodes.run_slurm(job, inside, chosen.prefix, os.environ, rerun)
    doc = None
    if as_json:
        doc = nccl_run.report_json(run, chosen.python, chosen.prefix)
        doc["slurm"] = nccl_nodes.slurm_json(run, job, inside, os.environ)
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
