"""The NCCL check's launcher (envsolver/verify/nccl_run.py) and `envsolver verify --nccl`.

Without a GPU: the torchrun and srun command lines (golden argv; hostile values refused by the cluster file's
grammars), the per-node command srun and sbatch run (the Slurm launcher, envsolver/cluster/slurm_launch.py,
executed here with stand-ins for srun and scontrol, so the rendezvous host and node rank are the ones it computes),
and the worker end to end in gloo mode through the real torchrun with 2 processes: it passes, and faults injected
into its ranks (one launch, one fault per rank) each fail the right check. A rank that cannot join ends within its
timeout. Each real launch is a module fixture that several tests read (torch's import costs seconds of CPU)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.cluster import grammar, nccl_nodes, slurm_launch
from envsolver.cluster.model import SlurmOptions
from envsolver.core.errors import BadInputError
from envsolver.verify import nccl, nccl_run, nccl_worker
from tests.dist import needs_torch

WORKER = str(nccl_run.WORKER)
LAUNCHER = str(nccl_nodes.LAUNCHER)
PACKAGE = Path(nccl_run.__file__).resolve().parents[1]
FAST = nccl_run.Options(backend="gloo", sizes=(4096, 65536), iters=2, warmup=1, timeout=60.0, check_count=4099)


def test_local_argv_is_torchrun_standalone_one_process_per_gpu() -> None:
    argv = nccl_run.local_argv(Path("/envs/train/bin/python"), 4, nccl_run.Options(), Path("/tmp/out"))
    assert argv == [
        "/envs/train/bin/python",
        "-I",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=4",
        "--max-restarts=0",
        WORKER,
        "--out-dir",
        "/tmp/out",
        "--backend",
        "nccl",
        "--sizes",
        "1048576,4194304,16777216,67108864,268435456,1073741824",
        "--iters",
        "20",
        "--warmup",
        "5",
        "--timeout",
        "120",
    ]


def test_the_prefix_environment_keeps_the_sites_nccl_settings() -> None:
    env = nccl_run.environ_for(Path("/envs/train"), {"PATH": "/usr/bin", "NCCL_NVLS_ENABLE": "0", "HOME": "/h"})
    assert env["CONDA_PREFIX"] == "/envs/train"
    assert env["PATH"] == "/envs/train/bin:/usr/bin"
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert nccl_run.environ_for(None, {"PATH": "/usr/bin"})["PATH"] == "/usr/bin"


def job(**changes: Any) -> nccl_nodes.SlurmJob:
    base: dict[str, Any] = {
        "python": "/shared/envs/train/bin/python",
        "nodes": 2,
        "gpus_per_node": 4,
        "out_dir": "/shared/scratch/nccl-check",
        "worker": "/shared/envsolver/envsolver/verify/nccl_worker.py",
        "launcher": "/shared/envsolver/envsolver/cluster/slurm_launch.py",
        "partition": "h100",
        "account": "proj-42",
        "options": nccl_run.Options(sizes=(1 << 20, 1 << 30)),
    }
    base.update(changes)
    return nccl_nodes.SlurmJob(**base)


def test_srun_argv_golden() -> None:
    """No shell anywhere: srun starts the Slurm launcher on each node (it finds the first host and runs torchrun),
    and the launcher runs the worker under the env's python."""
    assert nccl_nodes.srun_argv(job()) == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--quit-on-interrupt",
        "--job-name=envsolver-nccl",
        "--partition=h100",
        "--account=proj-42",
        "--gpus-per-node=4",
        "/shared/envs/train/bin/python",
        "-I",
        "/shared/envsolver/envsolver/cluster/slurm_launch.py",
        "--nproc-per-node=4",
        "--",
        "/shared/envs/train/bin/python",
        "-I",
        "/shared/envsolver/envsolver/verify/nccl_worker.py",
        "--out-dir",
        "/shared/scratch/nccl-check",
        "--backend",
        "nccl",
        "--sizes",
        "1048576,1073741824",
        "--iters",
        "20",
        "--warmup",
        "5",
        "--timeout",
        "120",
    ]


def test_srun_argv_with_gres_constraint_time_and_a_port() -> None:
    argv = nccl_nodes.srun_argv(job(gres="gpu:h100:4", constraint="ib&h100", time="00:10:00", port=29533))
    assert "--gres=gpu:h100:4" in argv and "--constraint=ib&h100" in argv and "--time=00:10:00" in argv
    assert not any(a.startswith("--gpus-per-node") for a in argv)
    launcher = argv.index("/shared/envsolver/envsolver/cluster/slurm_launch.py")
    assert argv[launcher + 1 : argv.index("--")] == ["--nproc-per-node=4", "--port=29533"]


def test_the_launch_rule_is_the_launchers() -> None:
    """One launch rule: the command srun runs per node is the launcher's own task_argv around the worker, and no
    other module of envsolver writes a torchrun rendezvous."""
    one = job(port=29533)
    worker = [one.python, "-I", one.worker, *nccl_run.worker_args(one.options, one.out_dir)]
    assert nccl_nodes.node_command(one) == slurm_launch.task_argv(one.python, 4, worker, 29533, one.launcher)
    writers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "--rdzv-endpoint" in path.read_text() or "--rdzv-backend" in path.read_text()
    )
    assert writers == ["cluster/slurm_launch.py"]


# What the cluster file accepts, srun_argv accepts, and the other way round: one grammar (cluster/grammar.py).
GRAMMAR = [
    ("partition", "gpu-h100.v2", True),
    ("partition", "a100,h100", False),
    ("partition", "a+b", False),
    ("constraint", "a100&[ib1|ib2]", True),
    ("constraint", "[rack1*2&rack2*4]", True),
    ("constraint", "(a100|h100)*2", False),
    ("constraint", "a100)", False),
    ("constraint", "a100&&ib", False),
    ("gres", "gpu:nvidia_h100_80gb_hbm3:4", True),
    ("gres", "gpu:4,nvme:1", True),
    ("gres", "gpu:1g.10gb:1", True),
    ("account", "ml-team", True),
    ("account", "-x", False),
]


@pytest.mark.parametrize(("key", "value", "accepted"), GRAMMAR, ids=[f"{k}={v}" for k, v, _ in GRAMMAR])
def test_slurm_values_follow_the_cluster_files_grammar(key: str, value: str, accepted: bool) -> None:
    check = {"partition": grammar.name, "constraint": grammar.constraint, "gres": grammar.gres}
    check["account"] = grammar.name
    try:
        check[key](value)
        valid = True
    except grammar.GrammarError:
        valid = False
    assert valid is accepted
    if accepted:
        assert f"--{key}={value}" in nccl_nodes.srun_argv(job(**{key: value}))
    else:
        with pytest.raises(BadInputError, match=key):
            nccl_nodes.srun_argv(job(**{key: value}))


HOSTILE = [
    ("partition", "h100;rm -rf ~"),
    ("partition", "$(id)"),
    ("partition", "-p"),
    ("partition", "a b"),
    ("account", "proj\n#SBATCH --uid=0"),
    ("constraint", "x'y"),
    ("constraint", "a`id`"),
    ("gres", "gpu:a100:4 --uid=0"),
    ("gres", "gpu:a100:x"),
    ("time", "10; id"),
    ("python", "relative/bin/python"),
    ("python", "/shared/env\n/bin/python"),
    ("out_dir", ""),
    ("worker", "/a/\x00b"),
    ("launcher", "slurm_launch.py"),
    ("time", "1-"),
    ("port", 80),
    ("port", 70000),
    ("nodes", 0),
    ("gpus_per_node", 0),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE, ids=[f"{k}={v!r}" for k, v in HOSTILE])
def test_hostile_values_are_refused(key: str, value: Any) -> None:
    with pytest.raises(BadInputError, match=key.replace("_", "[-_ ]")):
        nccl_nodes.srun_argv(job(**{key: value}))
    with pytest.raises(BadInputError):
        nccl_nodes.sbatch_fragment(job(**{key: value}))


# The tests' --inject-fault: (value, the worker takes it, the srun line's grammar takes it: it does not count ranks)
FAULTS = [
    ("1:sum", True, True),
    ("1:sum,0:nccl-version", True, True),
    ("0:sum,0:nccl-version", False, True),
    ("1:sum,", False, False),
    ("1:sum;id", False, False),
    ("x:sum", False, False),
    ("1:hang", False, False),
]


@pytest.mark.parametrize(("faults", "worker", "srun"), FAULTS, ids=[f for f, *_ in FAULTS])
def test_injected_faults_are_rank_kind_one_per_rank(
    faults: str, worker: bool, srun: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--out-dir", "o", "--inject-fault", faults]
    if worker:
        pairs = (one.partition(":") for one in faults.split(","))
        assert nccl_worker.parse_args(argv).faults == {int(rank): kind for rank, _, kind in pairs}
    else:
        with pytest.raises(SystemExit):
            nccl_worker.parse_args(argv)
        assert "RANK:KIND, one per rank" in capsys.readouterr().err
    if srun:
        nccl_nodes.check_options(nccl_run.Options(inject_fault=faults))
    else:
        with pytest.raises(BadInputError, match="is not RANK:KIND"):
            nccl_nodes.check_options(nccl_run.Options(inject_fault=faults))


def test_the_sbatch_fragment_quotes_paths_with_spaces_and_quotes() -> None:
    """Paths are free text (only control characters are refused); the batch shell must see each as one word."""
    odd = job(python="/shared/my envs/it's/bin/python", out_dir="/shared/o $HOME")
    srun = nccl_nodes.sbatch_fragment(odd).splitlines()[-1]
    assert shlex.split(srun) == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *nccl_nodes.node_command(odd)]
    assert "/shared/my envs/it's/bin/python" in shlex.split(srun)
    assert "/shared/o $HOME" in shlex.split(srun)


def slurm_bin(tmp_path: Path) -> Path:
    """Stand-ins for the two Slurm commands the path uses: scontrol (the allocation's hosts: this machine first,
    then a host that does not exist, so a rendezvous on any host but the first cannot work) and srun (drops its
    options and runs the command once per node of the allocation, SLURM_NNODES, each with its SLURM_NODEID, all at
    once, as the fragment's `--ntasks-per-node=1` step does; it fails when one of them fails)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "scontrol": '#!/bin/sh\ncase "$1 $2 $3" in\n'
        "  'show hostnames gpu-a[07-08]') printf '127.0.0.1\\nno-such-host.invalid\\n' ;;\n"
        "  'show hostnames gpu-a07') printf '127.0.0.1\\n' ;;\n  *) exit 1 ;;\nesac\n",
        "srun": '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nnode=0; pids=""\n'
        'while [ "$node" -lt "$SLURM_NNODES" ]; do\n'
        '  SLURM_NODEID=$node "$@" & pids="$pids $!"; node=$((node + 1))\ndone\n'
        'status=0\nfor pid in $pids; do wait "$pid" || status=1; done\nexit $status\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return bin_dir


def slurm_env(bin_dir: Path, nnodes: int, nodeid: int) -> dict[str, str]:
    nodelist = "gpu-a[07-08]" if nnodes == 2 else "gpu-a07"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": nodelist}
    env.update(SLURM_NNODES=str(nnodes), SLURM_NODEID=str(nodeid), SLURM_JOB_ID="4242")
    return env


def judged(out: Path, world: int) -> dict[str, Any]:
    checks = nccl.judge(nccl.Collected(world, (out / "report.json").read_text()))
    return {c.id: c.status for c in checks}


# --- the real runs (torchrun, gloo on the CPU): each fixture launches once and several tests read what it left,
# each asserting one thing. Each launch costs a few seconds of CPU time (torch imported by torchrun and every
# rank); a fixture's tests stand side by side, so pytest-xdist sends them to one worker, which launches once.


@dataclass(frozen=True)
class BatchJob:
    fragment: str
    done: subprocess.CompletedProcess[str]
    out: Path
    port: int


@pytest.fixture(scope="module")
def batch_job(tmp_path_factory: pytest.TempPathFactory) -> BatchJob:
    """The sbatch fragment of a 2-node job, one rank per node, run as the job script under /bin/sh with the
    stand-in srun and scontrol: srun starts the fragment's command (the Slurm launcher) as node 0 and node 1,
    each asks scontrol for the hosts and meets the other at the first one. The output directory has a space."""
    tmp = tmp_path_factory.mktemp("batch")
    bin_dir, out, port = slurm_bin(tmp), tmp / "out dir", free_port()
    two = job(python=sys.executable, worker=WORKER, launcher=LAUNCHER, out_dir=str(out), gpus_per_node=1)
    fragment = nccl_nodes.sbatch_fragment(nccl_nodes.SlurmJob(**{**two.__dict__, "port": port, "options": FAST}))
    script = tmp / "job.sh"
    script.write_text("#!/bin/sh\n" + fragment)
    return BatchJob(fragment, run_job(["/bin/sh", str(script)], slurm_env(bin_dir, 2, 0)), out, port)


def run_job(argv: list[str], env: dict[str, str], limit: float = 240) -> subprocess.CompletedProcess[str]:
    """argv in a session of its own, to its end or for `limit` seconds (then every process of the session is
    killed and stderr says so, for the tests to show)."""
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[the job did not end in {limit:.0f} s; it was killed]"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@needs_torch
def test_the_sbatch_fragment_runs_as_a_batch_script(batch_job: BatchJob) -> None:
    """The fragment as a job script under /bin/sh: its #SBATCH lines, then its srun line runs and every rank
    reports."""
    lines = batch_job.fragment.splitlines()
    assert "#SBATCH --partition=h100" in lines and "#SBATCH --nodes=2" in lines, lines
    assert "#SBATCH --ntasks-per-node=1" in lines and "#SBATCH --gpus-per-node=1" in lines, lines
    assert batch_job.done.returncode == 0, batch_job.done.stderr[-2000:]
    assert judged(batch_job.out, 2)["nccl-ranks"] == "pass"


@needs_torch
def test_two_nodes_through_the_srun_argv_meet_on_the_first_host(batch_job: BatchJob) -> None:
    """Two 'nodes' (SLURM_NODEID 0 and 1, one rank each) run the srun line's command: each launcher names the
    first host as the rendezvous, and the ranks joined there and summed right."""
    done = batch_job.done
    assert done.returncode == 0, done.stderr[-2000:]
    for node in (0, 1):
        said = f"(node {node} of 2): torchrun with 1 process(es), rendezvous at 127.0.0.1:{batch_job.port} (127.0.0.1,"
        assert said in done.stderr, done.stderr[-2000:]
    assert nccl.MARKER in done.stdout, done.stdout[-2000:]
    assert judged(batch_job.out, 2)["nccl-ranks"] == "pass"
    assert judged(batch_job.out, 2)["nccl-sum"] == "pass"


def test_the_node_command_outside_slurm_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    command = nccl_nodes.node_command(
        job(python=sys.executable, worker=WORKER, launcher=LAUNCHER, out_dir=str(tmp_path))
    )
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "SLURM_JOB_NODELIST" in done.stderr and "srun" in done.stderr


@pytest.fixture(scope="module")
def gloo_cli() -> Result:
    """`envsolver verify --nccl --backend gloo --gpus 2 --json -v` with this python: torchrun and two ranks. -v
    changes stderr only (its steps, test_verbose_prints_each_step_of_the_run_as_it_comes); stdout is --json's."""
    args = ["verify", "--nccl", "--python", sys.executable, "--backend", "gloo", "--gpus", "2"]
    return CliRunner().invoke(main, [*args, "--sizes", "4K,64K", "--iters", "2", "--json", "-v"])


@needs_torch
def test_the_worker_passes_in_gloo_mode_through_torchrun(gloo_cli: Result) -> None:
    """Every check of a clean gloo run (the CLI's run; the JSON's checks are the run's, test_cli_verify_nccl_gloo_json
    holds the JSON to them): a pass, but never an NCCL pass; each rank timed each size."""
    assert gloo_cli.exit_code == 0, gloo_cli.output
    doc = json.loads(gloo_cli.stdout)
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status == {
        "nccl-report": "pass",
        "nccl-ranks": "pass",
        "nccl-backend": "warn",
        "nccl-sum": "pass",
        "nccl-version": "skip",
        "nccl-library": "skip",
        "nccl-bandwidth": "skip",
    }, doc["checks"]
    assert doc["ok"] is True and doc["nccl_tested"] is False, doc
    report = nccl.parse_document(json.dumps(doc["report"]))
    assert [r.rank for r in report.ranks] == [0, 1] and report.backend == "gloo", doc["report"]
    assert [t.nbytes for t in report.ranks[1].times] == [4096, 65536], doc["report"]


@needs_torch
def test_cli_verify_nccl_gloo_json(gloo_cli: Result) -> None:
    assert gloo_cli.exit_code == 0, gloo_cli.output
    doc = json.loads(gloo_cli.stdout)
    assert doc["ok"] is True and doc["nccl_tested"] is False
    assert doc["backend"] == "gloo" and doc["world_size"] == 2
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert {c["id"] for c in doc["checks"]} == set(nccl.CHECK_IDS)
    assert doc["command"].startswith(shlex.quote(sys.executable) + " -I -m torch.distributed.run --standalone")


STEP = re.compile(r"^\[\s*(\d+\.\d\d)s\] (.*)$")


@needs_torch
def test_verbose_prints_each_step_of_the_run_as_it_comes(gloo_cli: Result) -> None:
    """-v, as its help says: the ranks joining and each size's all-reduce, each on a stderr line of its own with
    the seconds since the start, then the command's end. The steps come from torchrun's reader threads, where
    click has no context: each must still print."""
    assert gloo_cli.exit_code == 0, gloo_cli.output
    lines = gloo_cli.stderr.splitlines()
    steps = [m.groups() for m in map(STEP.match, lines) if m]
    assert len(steps) == len(lines), gloo_cli.stderr  # every stderr line is a step line (no spinner off a terminal)
    said = [text for _, text in steps]
    for words in ("joining 2 ranks (gloo)", "all-reduce 4096 bytes: ", "all-reduce 65536 bytes: ", "checking sums"):
        assert any(text.startswith(words) for text in said), (words, gloo_cli.stderr)
    assert said[-1].endswith(" verify: done"), gloo_cli.stderr  # CliRunner names the program `main`
    seconds = [float(at) for at, _ in steps]
    assert seconds == sorted(seconds), gloo_cli.stderr


# Independent faults on different ranks, injected in one launch: each must fail its own check and name its own
# rank, and no check but theirs may fail. (fault, the check it fails, words of that check, words it must not say)
INJECTED = [
    ("1:sum", "nccl-sum", "rank 1", "rank 0"),
    ("0:nccl-version", "nccl-version", "0.0.0-injected (torch) on rank 0 (", "0.0.0-injected (torch) on ranks"),
]


@dataclass(frozen=True)
class Faulty:
    run: nccl_run.Run
    progress: list[str]


@pytest.fixture(scope="module")
def faulty() -> Faulty:
    """run_local with every fault of INJECTED at once, the ranks' progress lines kept."""
    options = nccl_run.Options(**{**FAST.__dict__, "inject_fault": ",".join(f for f, *_ in INJECTED)})
    seen: list[str] = []
    return Faulty(nccl_run.run_local(Path(sys.executable), None, 2, options, dict(os.environ), seen.append), seen)


@needs_torch
@pytest.mark.parametrize(("fault", "check_id", "words", "not_words"), INJECTED, ids=[f[0] for f in INJECTED])
def test_an_injected_fault_fails_the_right_check(
    faulty: Faulty, fault: str, check_id: str, words: str, not_words: str
) -> None:
    failed = {c.id: c for c in faulty.run.checks if c.status == "fail"}
    assert set(failed) == {c for _, c, *_ in INJECTED}, faulty.run.checks
    detail = failed[check_id].detail
    rank, _, kind = fault.partition(":")
    assert words in detail and not_words not in detail, detail
    assert "injected by --inject-fault: " in detail and f"{kind} on rank {rank}" in detail, detail
    assert failed[check_id].fix


@needs_torch
def test_the_ranks_progress_reaches_the_caller(faulty: Faulty) -> None:
    """Rank 0's progress lines (envsolver-nccl: ...) on torchrun's stderr reach run_local's callback as they come
    (the fault run's: progress does not depend on what the sums found)."""
    assert any("joining 2 ranks (gloo)" in line for line in faulty.progress), faulty.progress
    assert any("checking sums" in line for line in faulty.progress), faulty.progress
    assert any(line.startswith("all-reduce 65536 bytes: ") for line in faulty.progress), faulty.progress


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_torch
def test_a_rank_that_cannot_join_ends_within_its_timeout(tmp_path: Path) -> None:
    """Rank 0 of 2 started alone: its join times out, its file says so, the judge names the missing rank."""
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env["MASTER_PORT"] = str(free_port())
    argv = [sys.executable, WORKER, "--out-dir", str(tmp_path), "--backend", "gloo", "--timeout", "3"]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and time.monotonic() - started < 100, done.stderr
    ranks = {0: (tmp_path / "rank-0.json").read_text()}
    checks = {c.id: c for c in nccl.judge(nccl.Collected(2, None, ranks, "exit 3", "envsolver verify --nccl"))}
    assert checks["nccl-ranks"].status == "fail"
    assert "rank 1 did not report" in checks["nccl-ranks"].detail
    assert "stage 'failed': join" in checks["nccl-ranks"].detail


def test_a_launch_that_hangs_is_killed_and_reported(tmp_path: Path) -> None:
    sleeper = tmp_path / "python"
    sleeper.write_text("#!/bin/sh\nexec sleep 600\n")
    sleeper.chmod(stat.S_IRWXU)
    started = time.monotonic()
    run = nccl_run.run_local(sleeper, None, 2, FAST, dict(os.environ), limit=3.0)
    assert time.monotonic() - started < 30
    checks = {c.id: c for c in run.checks}
    assert checks["nccl-report"].status == "fail"
    assert "did not finish in 3 s" in checks["nccl-report"].detail


REFUSED = [
    (["--nccl", "--lock", "LOCK"], "--lock"),
    (["--nccl", "--gpu-test"], "--gpu-test"),
    (["--nccl", "--check", "nccl"], "--check"),
    (["--gpus", "2"], "--nccl"),
    (["--nccl", "--gpus", "0"], "--gpus"),
    (["--nccl", "--sizes", "1X"], "--sizes"),
    (["--nccl", "--iters", "0"], "--iters"),
]


@pytest.mark.parametrize(("args", "word"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_cli_refuses_options_that_do_not_fit(tmp_path: Path, args: list[str], word: str) -> None:
    lock = tmp_path / "conda-lock.yml"
    lock.write_text("version: 1\n")
    args = [str(lock) if a == "LOCK" else a for a in args]
    result = CliRunner().invoke(main, ["verify", "--python", sys.executable, *args, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert word in error["message"] + (error["fix"] or "")
    assert error["fix"]


@needs_torch
def test_cli_without_gpus_says_how_to_run(tmp_path: Path) -> None:
    """This machine's torch sees no GPU: the refusal names the CPU plumbing run, and that run works."""
    result = CliRunner().invoke(main, ["verify", "--nccl", "--python", sys.executable, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "no GPU" in error["message"] and "--backend gloo" in error["fix"]


FAKE_NCCL = "int ncclGetVersion(int *version) { *version = 29901; return 0; }\n"


def fake_libnccl(tmp_path: Path) -> Path:
    """A stand-in libnccl.so.2 that only answers ncclGetVersion with 2.99.1 (NCCL's code 29901)."""
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libnccl")
    source = tmp_path / "nccl.c"
    source.write_text(FAKE_NCCL)
    lib = tmp_path / "fake" / "libnccl.so.2"
    lib.parent.mkdir()
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True, timeout=120)
    return lib


@needs_torch
def test_a_rank_that_preloads_another_libnccl_is_named_with_its_version(tmp_path: Path) -> None:
    """The case seen on the 2-H200 machine (tests/data/nccl/h200x2/mixed-preload.json), here on CPU: rank 1
    started with LD_PRELOAD of another libnccl. The worker reads each mapped file's own version (ncclGetVersion),
    so the judge names the file, its version and the variable to unset."""
    lib = fake_libnccl(tmp_path)
    out = tmp_path / "out"
    base = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    argv = [sys.executable, WORKER, "--out-dir", str(out), "--backend", "gloo", "--timeout", "60"]
    argv += ["--sizes", "4096", "--iters", "1", "--warmup", "0", "--check-count", "64"]
    procs = [
        subprocess.Popen(
            argv,
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), **({"LD_PRELOAD": str(lib)} if r == 1 else {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in range(2)
    ]
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    report = json.loads((out / "report.json").read_text())
    assert report["ranks"][1]["nccl_file_versions"] == {str(lib): "2.99.1"}
    checks = {c.id: c for c in nccl.judge(nccl.Collected(2, (out / "report.json").read_text()))}
    assert checks["nccl-library"].status == "fail"
    assert f"{lib} (2.99.1, the system's NCCL) on rank 1" in checks["nccl-library"].detail
    assert f"LD_PRELOAD={lib}" in checks["nccl-library"].fix and "unset LD_PRELOAD" in checks["nccl-library"].fix
    assert checks["nccl-version"].status == "fail" and "2.99.1 on rank 1" in checks["nccl-version"].detail


# --- across nodes: the step envsolver runs itself (the lab runs it: tests/cluster/test_verify_nccl_nodes.py) ---------

LOGIN: dict[str, str] = {"PATH": "/usr/bin"}
IN_JOB = {"PATH": "/usr/bin", "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "3"}


def across_job(across: nccl_nodes.Across, environ: dict[str, str], backend: str = "nccl") -> nccl_nodes.SlurmJob:
    options = nccl_run.Options(backend="gloo" if backend == "gloo" else "nccl", sizes=(1 << 20,))
    job, _ = nccl_nodes.slurm_job(Path("/shared/envs/t/bin/python"), across, options, Path("/shared/o"), environ)
    return job


def test_the_step_inside_an_allocation_takes_its_nodes_and_gpus() -> None:
    """In a job: every node of it by default, no partition, no GPU request (the step gets the job's GPUs), the
    check's own time limit, one task per node said three ways (a job's SLURM_NTASKS must not ask for more)."""
    job = across_job(nccl_nodes.Across(gpus=4), IN_JOB)
    argv = nccl_nodes.step_argv(job)
    head = argv[: argv.index("/shared/envs/t/bin/python")]
    assert head == [
        "srun",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--quit-on-interrupt",
        "--job-name=envsolver-nccl",
        f"--time={nccl_nodes.minutes(job.options)}",
    ], argv
    assert nccl_nodes.minutes(job.options) == "11"  # 120 s x (3 + 1 size) + 120 s = 10 min, + 1


def test_from_a_login_node_the_cluster_files_partition_gives_account_constraint_and_gpu_type() -> None:
    slurm = SlurmOptions(partition="gpu", gres="gpu:a100:1", account="ml", constraint="ib&a100")
    job = across_job(nccl_nodes.Across(nodes=2, gpus=8, partition="a100", slurm_options=slurm), LOGIN)
    argv = nccl_nodes.srun_argv(job)
    for word in ("--partition=gpu", "--account=ml", "--constraint=ib&a100", "--gres=gpu:a100:8", "--nodes=2"):
        assert word in argv, argv
    untyped = across_job(nccl_nodes.Across(nodes=2, gpus=8, slurm_options=SlurmOptions(gpus="h100:1")), LOGIN)
    assert untyped.gres == "gpu:h100:8"
    plain = across_job(nccl_nodes.Across(nodes=2, gpus=8, partition="p"), LOGIN)
    assert "--gpus-per-node=8" in nccl_nodes.srun_argv(plain) and "--partition=p" in nccl_nodes.srun_argv(plain)


REFUSED_ACROSS = [
    (nccl_nodes.Across(gpus=1), LOGIN, "--nodes N"),
    (nccl_nodes.Across(nodes=2), LOGIN, "--gpus G"),
    (nccl_nodes.Across(nodes=4, gpus=1), IN_JOB, "--nodes 3 or fewer"),
    (nccl_nodes.Across(gpus=1, partition="p"), IN_JOB, "Remove them"),
]


@pytest.mark.parametrize(("across", "environ", "words"), REFUSED_ACROSS)
def test_a_step_that_cannot_be_run_is_refused_with_the_way_out(
    across: nccl_nodes.Across, environ: dict[str, str], words: str
) -> None:
    with pytest.raises(BadInputError) as caught:
        across_job(across, environ)
    assert words in str(caught.value), str(caught.value)


REFUSED_CLI = [
    (["--nccl", "--nodes", "0"], "--nodes"),
    (["--nccl", "--nodes", "2", "--partition", "a", "--partition", "b"], "one --partition"),
    (["--nccl", "--nodes", "2", "--time", "soon"], "--time"),
    (["--nccl", "--nodes", "2", "--port", "80"], "--port"),
    (["--nccl", "--nodes", "2", "--partition", "a;b"], "--partition"),
    (["--nccl", "--partition", "a"], "--nodes"),
    (["--nccl", "--port", "29533"], "--nodes"),
    (["--nccl", "--cluster", "CLUSTER"], "--partition P"),
    (["--nccl", "--cluster", "CLUSTER", "--partition", "nosuch", "--nodes", "2"], "has no partition 'nosuch'"),
    (["--nodes", "2"], "--nccl"),
    (["--nccl", "--nodes", "2", "--gpus", "0"], "--gpus"),
]


def test_cli_across_nodes_never_falls_back_to_this_machines_python3() -> None:
    """Without -p, --python or an active env, verify picks python3 on PATH; across nodes that would be the
    login node's interpreter on every node, so it is refused with the way out."""
    result = CliRunner().invoke(main, ["verify", "--nccl", "--nodes", "2", "--json"], env={"CONDA_PREFIX": None})
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "-p PREFIX" in error["message"] + (error["fix"] or ""), error


@pytest.mark.parametrize(("args", "word"), REFUSED_CLI, ids=[" ".join(a) for a, _ in REFUSED_CLI])
def test_cli_refuses_across_nodes_options_that_do_not_fit(args: list[str], word: str) -> None:
    cluster = str(Path(__file__).parent / "data" / "cluster" / "mixed.yaml")
    args = [cluster if a == "CLUSTER" else a for a in args]
    result = CliRunner().invoke(main, ["verify", "--python", sys.executable, *args, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert word in error["message"] + (error["fix"] or ""), error
