"""`envsolver verify --nccl --nodes N` on the real Slurm lab (tests/slurmlab.py): one srun step on the `mixed`
partition's two nodes (gpu02, gpu03), the Slurm launcher on each, torchrun and the NCCL check's worker under the
environment's python, gloo on CPU (no GPU here).

The environment is a stand-in prefix whose bin/python logs each start (the Slurm node it ran on, the file it ran)
and then runs this test's python (the CPU torch), so the tests see that srun ran the env's python on each node,
for the launcher and for every rank. From a login node srun makes the allocation; inside a batch job the check
is a step of that job; SIGTERM to envsolver alone cancels the step; a partition Slurm does not have is exit 2
with srun's own words.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import nccl_nodes
from envsolver.verify import nccl, nccl_run
from tests.cluster.test_sbatch_lab import init_cluster, submit
from tests.dist import needs_torch
from tests.slurmlab import SlurmLab, free_ports

FAST = ["--backend", "gloo", "--sizes", "4K,64K", "--iters", "2", "--nccl-timeout", "60"]
LAUNCHER = str(nccl_nodes.LAUNCHER)
WORKER = str(nccl_run.WORKER)


def stand_in_env(root: Path, hang: str | None = None) -> Path:
    """A prefix whose bin/python appends `NODE FILE` to PREFIX/starts.log, then runs this test's python; asked to
    run the file `hang` (WORKER: each rank; LAUNCHER: the step's task itself), it sleeps instead, so the step runs
    until it is cancelled."""
    prefix = root / "envs" / "train env"
    (prefix / "bin").mkdir(parents=True)
    log = prefix / "starts.log"
    hang_line = f'[ "$file" = "{hang}" ] && exec sleep 600\n' if hang else ""
    (prefix / "bin" / "python").write_text(  # the file it runs: its first word after -I (core/pystart)
        f'#!/bin/sh\nfile="$1"; [ "$file" = "-I" ] && file="$2"\n'
        f'printf \'%s %s\\n\' "${{SLURMD_NODENAME:-login}}" "$file" >> "{log}"\n'
        f'{hang_line}exec {sys.executable} "$@"\n'
    )
    (prefix / "bin" / "python").chmod(0o755)
    return prefix


def starts(prefix: Path) -> list[tuple[str, str]]:
    text = (prefix / "starts.log").read_text() if (prefix / "starts.log").exists() else ""
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in text.splitlines() if " " in line]


def verify(args: list[str], env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(main, ["verify", "--nccl", "--json", *args], env=env)
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None
    return result.exit_code, doc, result.output


@needs_torch
def test_verify_nccl_across_two_lab_nodes(lab: SlurmLab, tmp_path: Path) -> None:
    """From the login node (nccl_nodes.srun_argv: srun makes the allocation): one step on gpu02 and gpu03, a rank
    on each, one group of two that met at gpu02 (the step's first host); every check judged, busbw for each size;
    the env's python ran the launcher on both nodes and a rank on both; nothing ran on the login node but srun."""
    prefix = stand_in_env(tmp_path)
    port = str(free_ports(1)[0])
    args = ["-p", str(prefix), "--nodes", "2", "--partition", "mixed", "--port", port, *FAST]
    code, doc, output = verify(args, {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert code == 0, output
    assert doc["ok"] is True and doc["nccl_tested"] is False, output  # gloo is never an NCCL pass
    assert doc["backend"] == "gloo" and doc["world_size"] == 2, output
    assert sorted(r["host"] for r in doc["ranks"]) == ["gpu02", "gpu03"], output
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["nccl-ranks"]["status"] == "pass" and "gpu02, gpu03" in checks["nccl-ranks"]["detail"], output
    assert checks["nccl-sum"]["status"] == "pass", output
    assert [row["bytes"] for row in doc["bandwidth"]] == [4096, 65536], output
    assert all(row["busbw_gbps"] and row["busbw_gbps"] > 0 for row in doc["bandwidth"]), output
    launched = doc["slurm"]["launched"]
    assert len(launched) == 2 and all(f":{port} (gpu02" in line for line in launched), launched
    assert all("(gpu02, the step's first host)" in line for line in launched), launched
    assert sorted(line.split()[1] for line in launched) == ["gpu02", "gpu03"], launched
    assert doc["command"].startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1"), doc["command"]
    assert "--quit-on-interrupt" in doc["command"] and "--partition=mixed" in doc["command"], doc["command"]
    seen = starts(prefix)
    assert sorted(node for node, file in seen if file == LAUNCHER) == ["gpu02", "gpu03"], seen
    assert sorted(node for node, file in seen if file == WORKER) == ["gpu02", "gpu03"], seen
    assert not [s for s in seen if s[0] == "login"], seen
    assert not list((tmp_path / "cache" / "envsolver" / "nccl").iterdir()), "the run directory was left behind"


@needs_torch
def test_the_cluster_files_partition_gives_the_steps_slurm_options(lab: SlurmLab, tmp_path: Path) -> None:
    """`--cluster FILE --partition mixed` (the file `cluster init` drafted from the lab), as text: the step runs
    across the partition's two nodes and each check is printed, the ranks' nodes named."""
    cluster = init_cluster(lab, tmp_path)
    prefix = stand_in_env(tmp_path)
    args = ["verify", "--nccl", "-p", str(prefix), "--cluster", str(cluster), "--partition", "mixed"]
    args += ["--nodes", "2", "--port", str(free_ports(1)[0]), *FAST]
    result = CliRunner().invoke(main, args, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    assert "2 ranks on 2 node(s), gloo" in result.stdout, result.output
    assert "nccl-ranks: 2 ranks joined and finished on gpu02, gpu03" in result.stdout, result.output
    for check in nccl.CHECK_IDS:
        assert f"{check}:" in result.stdout, result.output


@needs_torch
def test_inside_a_batch_job_the_check_is_a_step_on_the_jobs_nodes(lab: SlurmLab, tmp_path: Path) -> None:
    """`envsolver verify --nccl --nodes 2` in a 2-node batch job: a step on both of the job's nodes (no
    partition, no GPU request: the job's), whose report names the job."""
    prefix = stand_in_env(tmp_path)
    out = tmp_path / "verify.json"
    argv = [sys.executable, "-m", "envsolver", "verify", "--nccl", "-p", str(prefix), *FAST, "--json"]
    argv += ["--nodes", "2", "--port", str(free_ports(1)[0])]
    script = tmp_path / "job.sh"
    quoted = " ".join(f"'{a}'" for a in argv)
    script.write_text(
        "#!/bin/sh\n#SBATCH --partition=mixed\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=5\n"
        f"XDG_CACHE_HOME='{tmp_path}/cache' {quoted} > '{out}'\n"
    )
    code, output = submit(lab, script, "envsolver-nccl-inside")
    assert code == 0, output
    doc = json.loads(out.read_text())
    assert doc["ok"] is True and doc["world_size"] == 2, output
    assert doc["slurm"]["inside_job"] and doc["slurm"]["nodes"] == 2, doc["slurm"]
    assert sorted(r["host"] for r in doc["ranks"]) == ["gpu02", "gpu03"], doc["ranks"]
    assert "--partition" not in doc["command"], doc["command"]  # the job's own partition


@needs_torch
def test_sigterm_to_envsolver_cancels_the_step(lab: SlurmLab, tmp_path: Path) -> None:
    """The ranks hang (the stand-in sleeps); SIGTERM to envsolver's PID alone: exit 143, the step is cancelled
    and squeue is empty within seconds."""
    prefix = stand_in_env(tmp_path, hang=WORKER)
    argv = [sys.executable, "-m", "envsolver", "verify", "--nccl", "-p", str(prefix), "--nodes", "2"]
    argv += ["--partition", "mixed", *FAST]
    env = {**lab.env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while sum(1 for node, file in starts(prefix) if file == WORKER) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate(timeout=30)
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    left = squeue_empty_within(lab, 20)
    assert not left, f"still queued or running after SIGTERM: {left}; envsolver said: {stderr}"


def test_a_partition_slurm_does_not_have_is_exit_2_with_sruns_words(lab: SlurmLab, tmp_path: Path) -> None:
    prefix = stand_in_env(tmp_path)
    args = ["-p", str(prefix), "--nodes", "2", "--partition", "nosuch", *FAST]
    code, doc, output = verify(args, {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert code == 2, output
    message = doc["error"]["message"]
    assert "srun did not start" in message and "invalid partition" in message.lower(), message
    assert starts(prefix) == [], starts(prefix)


def test_the_report_is_read_from_sruns_stdout_when_the_directory_is_not_shared(tmp_path: Path) -> None:
    """rank 0's marker line is the report when report.json never reached the login node's directory."""
    document = json.dumps({"tool": nccl.TOOL, "schema": nccl.SCHEMA, "backend": "gloo", "world_size": 1, "ranks": []})
    text, ranks = nccl_run.reports(tmp_path, f"noise\n{nccl.MARKER}{document}\nmore\n".splitlines())
    assert text == nccl.MARKER + document and ranks == {}
    (tmp_path / "rank-0.json").write_text("x" * (nccl_run.MAX_REPORT_BYTES + 10))
    _, ranks = nccl_run.reports(tmp_path, [])
    assert len(ranks[0]) == nccl_run.MAX_REPORT_BYTES, "a rank file is read bounded"


def test_environment_for_the_nodes_drops_the_submit_shells_python_settings() -> None:
    env = nccl_nodes.slurm_environ(Path("/envs/t"), {"PATH": "/usr/bin", "PYTHONPATH": "/x", "PYTHONHOME": "/y"})
    assert "PYTHONPATH" not in env and "PYTHONHOME" not in env
    assert env["PATH"] == "/envs/t/bin:/usr/bin" and env["CONDA_PREFIX"] == "/envs/t"


def squeue_empty_within(lab: SlurmLab, seconds: float) -> list[str]:
    """What squeue still lists of the check's steps after up to `seconds`."""
    deadline = time.monotonic() + seconds
    left = lab.run(["squeue", "--noheader", f"--name={nccl_nodes.STEP_NAME}"]).stdout.split()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = lab.run(["squeue", "--noheader", f"--name={nccl_nodes.STEP_NAME}"]).stdout.split()
    return left


def test_a_step_past_its_deadline_is_cancelled_and_judged(lab: SlurmLab, tmp_path: Path) -> None:
    """The step hangs from its start (each node's task sleeps where the launcher would run: the step outlasts
    any deadline, whatever the machine's load); run_slurm's deadline (3 s here) stops srun, the step leaves
    squeue, and the judge says what happened: no rank finished, the launcher's word on the deadline."""
    prefix = stand_in_env(tmp_path, hang=LAUNCHER)
    options = nccl_run.Options(backend="gloo", sizes=(4096,), iters=1, warmup=0, timeout=60.0)
    across = nccl_nodes.Across(nodes=2, gpus=1, partition="mixed", port=free_ports(1)[0])
    environ = {**lab.env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with nccl_nodes.run_dir(nccl_nodes.scratch_root(environ)) as out_dir:
        job, inside = nccl_nodes.slurm_job(prefix / "bin" / "python", across, options, out_dir, environ)
        started = time.monotonic()
        run = nccl_nodes.run_slurm(job, inside, prefix, environ, "envsolver verify --nccl ...", limit=3.0)
    assert time.monotonic() - started < 60, "the deadline did not stop srun"
    seen = starts(prefix)
    assert sorted(node for node, file in seen if file == LAUNCHER) == ["gpu02", "gpu03"], seen  # it ran, past it
    checks = {c.id: c for c in run.checks}
    assert checks["nccl-report"].status == "fail", checks["nccl-report"]
    assert "did not finish in 3 s" in checks["nccl-report"].detail, checks["nccl-report"]
    left = squeue_empty_within(lab, 20)
    assert not left, f"still queued or running after the deadline: {left}"
