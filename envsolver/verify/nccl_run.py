"""Launch the NCCL check on this node (`envsolver verify --nccl`): torchrun under the env's python, judged by
nccl.judge; the worker is nccl_worker.py. Across the nodes of a Slurm allocation it is cluster/nccl_nodes.py.

`PYTHON -I -m torch.distributed.run --standalone --nproc-per-node=N nccl_worker.py ...` under the env's python
(isolated, in the run's private directory: core/pystart), with
CONDA_PREFIX and PATH as activation sets them (every NCCL_* setting of the caller is kept: a site's
NCCL_NVLS_ENABLE=0 must reach the ranks), a hard time limit (the process group is killed), progress on stderr.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envsolver.core import boundedread, pystart
from envsolver.core.errors import BadInputError
from envsolver.verify import nccl
from envsolver.verify import render as verify_render
from envsolver.verify.checks_base import Check
from envsolver.verify.run import VerifyError

WORKER = Path(__file__).with_name("nccl_worker.py")
DEFAULT_SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)  # all_reduce_perf -b 1M -e 1G -f 4
PROGRESS = "envsolver-nccl: "
Backend = Literal["nccl", "gloo"]


@dataclass(frozen=True)
class Options:
    """What the worker does. `timeout` bounds the join and each collective; `inject_fault` (RANK:KIND, comma-
    separated, one per rank: the worker's --inject-fault) is for tests only."""

    backend: Backend = "nccl"
    sizes: tuple[int, ...] = DEFAULT_SIZES
    iters: int = 20
    warmup: int = 5
    timeout: float = 120.0
    check_count: int | None = None
    inject_fault: str = ""


@dataclass(frozen=True)
class Run:
    collected: nccl.Collected
    checks: list[Check]
    command: str
    seconds: float
    processes: int
    launched: tuple[str, ...] = ()  # across nodes: the launcher's line from each node (node, rank, rendezvous)


def worker_args(options: Options, out_dir: str) -> list[str]:
    args = ["--out-dir", out_dir, "--backend", options.backend, "--sizes", ",".join(str(s) for s in options.sizes)]
    args += ["--iters", str(options.iters), "--warmup", str(options.warmup), "--timeout", f"{options.timeout:g}"]
    if options.check_count is not None:
        args += ["--check-count", str(options.check_count)]
    if options.inject_fault:
        args += ["--inject-fault", options.inject_fault]
    return args


def local_argv(python: Path, processes: int, options: Options, out_dir: Path) -> list[str]:
    head = pystart.command(python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1")
    head += [f"--nproc-per-node={processes}", "--max-restarts=0", str(WORKER)]
    return head + worker_args(options, str(out_dir))


def deadline(options: Options) -> float:
    """The launcher's hard limit: above the worker's own (timeout * (3 + sizes) + 60) so the ranks end first."""
    return options.timeout * (3 + len(options.sizes)) + 120


def environ_for(prefix: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment as the prefix's activation would leave it, for the ranks."""
    env = dict(environ)
    env["PYTHONUNBUFFERED"] = "1"
    if prefix is not None:
        prefix = Path(os.path.abspath(prefix))  # the ranks run in a private directory: a relative path names nothing
        env["CONDA_PREFIX"] = str(prefix)
        env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env['PATH']}" if env.get("PATH") else str(prefix / "bin")
    return env


# The count, then out without the interpreter's teardown (0.55 s of CPU time once torch is imported).
COUNT_GPUS = "import os, sys, torch; print(torch.cuda.device_count()); sys.stdout.flush(); os._exit(0)"


def processes(python: Path, requested: int | None, options: Options, environ: Mapping[str, str]) -> int:
    """--gpus N, else 2 for gloo, else the GPUs the env's torch sees. Raises VerifyError / BadInputError."""
    if requested is not None:
        return requested
    if options.backend == "gloo":
        return 2
    try:
        with pystart.workdir() as where:
            done = subprocess.run(
                pystart.command(python, "-c", COUNT_GPUS),
                capture_output=True,
                text=True,
                timeout=180,
                env=dict(environ),
                cwd=where,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyError(f"could not count the GPUs with {python}: {exc}. Pass --gpus N.") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not (lines[-1].strip().isascii() and lines[-1].strip().isdigit()):
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise VerifyError(
            f"could not count the GPUs with {python} (exit {done.returncode}): {tail}. Check that the env's torch "
            f"imports (`{shlex.join(pystart.command(python, '-c', 'import torch'))}`), or pass --gpus N."
        )
    count = int(lines[-1])
    if count == 0:
        raise BadInputError(
            f"no GPU is visible to the torch of {python} (torch.cuda.device_count() is 0). Run on a GPU node "
            "(`nvidia-smi` lists its GPUs), or pass --backend gloo to test the launch and the checks on CPU (not "
            "an NCCL pass)."
        )
    return count


def rerun_command(prefix: Path | None, python: Path, count: int, options: Options) -> str:
    argv = ["envsolver", "verify", "--nccl"] + (["-p", str(prefix)] if prefix else ["--python", str(python)])
    argv += ["--gpus", str(count)] + (["--backend", "gloo"] if options.backend == "gloo" else [])
    return shlex.join(argv)


@dataclass
class _Streams:
    stdout: list[str] = field(default_factory=list)
    stderr: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))


def _kill(proc: subprocess.Popen[str]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _execute(
    argv: list[str], env: Mapping[str, str], limit: float, progress: Callable[[str], None] | None, cwd: Path
) -> tuple[int | None, _Streams]:
    """Run in CWD (private: the run's own directory) to the end or to `limit` seconds (then the whole process group
    is killed; None is returned)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
            start_new_session=True,
            cwd=cwd,
        )
    except OSError as exc:
        raise VerifyError(f"could not start {argv[0]}: {exc}. Pass an existing interpreter (-p or --python).") from None
    streams = _Streams()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout, proc.stderr

    def read_out() -> None:
        for line in out:
            if line.startswith(nccl.MARKER) or len(streams.stdout) < 200:
                streams.stdout.append(line)

    def read_err() -> None:
        for line in err:
            if line.startswith(PROGRESS) and progress is not None:
                progress(line[len(PROGRESS) :].rstrip())
            elif line.strip():
                streams.stderr.append(line.rstrip())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for reader in readers:
        reader.start()
    code: int | None
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(proc)
        code = None
    except BaseException:  # Ctrl-C: no rank outlives envsolver
        _kill(proc)
        raise
    for reader in readers:
        reader.join(timeout=5)
    return code, streams


MAX_REPORT_BYTES = 8 << 20  # report.json as read back; a rank's own file is a few KB
MAX_RANK_FILES = 4096


def _read_bounded(path: Path, limit: int) -> str | None:
    """At most `limit` bytes of a file the ranks wrote (a longer one is cut, so it does not parse); None when it is
    missing or no regular file (a FIFO refused at once, core.boundedread)."""
    try:
        return boundedread.read_head(path, limit).decode("utf-8", errors="replace")
    except (OSError, boundedread.Refused):
        return None


def reports(out_dir: Path, stdout: Iterable[str]) -> tuple[str | None, dict[int, str]]:
    """report.json (else rank 0's marker line among the lines of stdout) and each rank's own file, every read
    bounded: on this node and across nodes alike."""
    report = out_dir / "report.json"
    document = _read_bounded(report, MAX_REPORT_BYTES) if report.is_file() else None
    if document is None:
        document = next((line for line in stdout if line.startswith(nccl.MARKER)), None)
    ranks: dict[int, str] = {}
    for path in sorted(out_dir.glob("rank-*.json"))[:MAX_RANK_FILES]:
        number = path.stem.split("-", 1)[1]
        text = _read_bounded(path, MAX_REPORT_BYTES) if number.isascii() and number.isdigit() else None
        if text is not None:
            ranks[int(number)] = text
    return document, ranks


def _failure(code: int | None, limit: float, streams: _Streams) -> str:
    if code is None:
        return f"did not finish in {limit:.0f} s and was stopped"
    if code == 0:
        return ""
    tail = " / ".join(line.strip() for line in list(streams.stderr)[-6:])
    return f"torchrun exited {code}: {tail[-700:]}"


def run_local(
    python: Path,
    prefix: Path | None,
    count: int,
    options: Options,
    environ: Mapping[str, str],
    progress: Callable[[str], None] | None = None,
    limit: float | None = None,
) -> Run:
    """Run the check with `count` processes on this node and judge it. Raises VerifyError when torchrun cannot
    start at all; every other outcome (a crash, a hang, a wrong sum) is in the checks."""
    limit = limit if limit is not None else deadline(options)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envsolver-nccl-") as tmp:
        out_dir = Path(tmp)
        argv = local_argv(python, count, options, out_dir)
        code, streams = _execute(argv, environ_for(prefix, environ), limit, progress, out_dir)
        document, ranks = reports(out_dir, streams.stdout)
    failure = _failure(code, limit, streams)
    collected = nccl.Collected(count, document, ranks, failure, rerun_command(prefix, python, count, options))
    return Run(collected, nccl.judge(collected), shlex.join(argv), time.monotonic() - started, count)


def report_json(run: Run, python: Path, prefix: Path | None) -> dict[str, Any]:
    return {
        "ok": nccl.passed(run.checks),
        "nccl_tested": nccl.tested(run.checks),
        "target": {"python": str(python), "prefix": str(prefix) if prefix else None},
        "command": run.command,
        "seconds": round(run.seconds, 1),
        **nccl.summary(run.collected),
        "checks": [verify_render.check_json(c) for c in run.checks],
    }
