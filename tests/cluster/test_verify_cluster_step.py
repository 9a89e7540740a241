"""The step `verify --cluster` runs on a node of each partition (envsolver/cluster/step.py): its argv (hostile
values stay single words, never shell), and what it printed read back: real step outputs captured in the lab
(tests/data/cluster-verify/, see its README), and broken ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envsolver.cluster import step
from envsolver.cluster.file import parse
from envsolver.kb import default_kb

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-verify"
PYTHON = "/shared/envsolver/bin/python"
PREFIX = "/shared/envs/train"

FILE = """\
cluster: lab
partitions:
  - name: v100
    gpus: [v100]
    driver: '535.104.05'
    platform: linux-64
    glibc: '2.36'
    slurm: {gres: 'gpu:v100:1', account: ml-team}
  - name: h100
    gpus: [h100]
    driver: null
    platform: linux-64
    glibc: null
"""


def captured(name: str) -> str:
    return (DATA / f"step-{name}.txt").read_text()


def test_the_argv_runs_the_constant_script_with_every_value_as_its_own_word() -> None:
    cluster = parse(FILE, default_kb(), "cluster.yaml")
    v100, h100 = cluster.partitions
    command = step.node_command(PYTHON, PREFIX, "/shared/envs/conda-lock.yml", True, ("driver", "gpus"))
    assert command == (
        PYTHON, "-m", "envsolver", "verify", "-p", PREFIX, "--json", "--lock", "/shared/envs/conda-lock.yml",
        "--gpu-test", "--check", "driver", "--check", "gpus",
    )  # fmt: skip
    argv = step.argv(step.options(v100), command, 30)
    assert argv == (
        "srun", "--partition=v100", "--gres=gpu:v100:1", "--account=ml-team", "--nodes=1", "--ntasks=1",
        "--immediate=30", "--time=10", "--quit-on-interrupt", "--job-name=envsolver-verify", "sh", "-c", step.SCRIPT,
        "envsolver-verify", *command,
    )  # fmt: skip
    # A partition whose file names no GPU option still gets a GPU: the step must see one.
    assert step.options(h100) == ("--partition=h100", "--gres=gpu:1")


HOSTILE = ["/tmp/a b/p", "$(touch pwned)", "`touch pwned`", "'; touch pwned; '", "-p", "a\nb", "*"]


def test_hostile_values_reach_the_node_verbatim_and_run_nothing(tmp_path: Path) -> None:
    """The script after `sh -c` is run for real (here, without srun): what it runs is "$@", word for word."""
    command = ("printf", "<%s>\\n", *HOSTILE)
    argv = step.argv(("--partition=x",), command, 30)
    script_at = argv.index("-c") + 1
    assert argv[script_at] == step.SCRIPT and argv[script_at + 2 :] == command
    done = subprocess.run(["sh", *argv[script_at - 1 :]], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    reply = step.read(done.stdout)
    assert reply.started and reply.exit == 0
    assert reply.said == "\n".join(f"<{value}>" for value in HOSTILE)
    assert not (tmp_path / "pwned").exists()


def test_a_passing_node() -> None:
    reply = step.read(captured("tesla-gpu04-pass"))
    assert reply.probe.node == "gpu04" and reply.probe.glibc is not None
    assert [r.name for r in reply.probe.gpus] == ["Tesla V100-SXM2-32GB"] * 2
    assert reply.exit == 0 and reply.document is not None and reply.document["ok"] is True
    assert [c.id for c in reply.checks] == [
        "driver", "gpus", "torch_import", "torch_cuda_build", "driver_supports_torch_cuda", "cuda_available",
        "arch_coverage", "host_vs_lock",
    ]  # fmt: skip
    assert {c.status for c in reply.checks} == {"pass", "warn"}
    assert step.trouble(reply, PYTHON, PREFIX) is None


def test_a_node_whose_checks_fail_is_a_report_not_trouble() -> None:
    reply = step.read(captured("v100-gpu01-old-driver"))
    assert reply.exit == 1 and reply.probe.node == "gpu01"
    failed = {c.id: c for c in reply.checks if c.status == "fail"}
    assert set(failed) == {"driver_supports_torch_cuda", "host_vs_lock"}
    assert "older than the lock's floor 525.60.13" in failed["host_vs_lock"].detail
    assert step.trouble(reply, PYTHON, PREFIX) is None


@pytest.mark.parametrize(
    ("name", "message", "fix"),
    [
        ("h100-no-python", "gpu03 cannot run /shared/envsolver/bin/python", "Install envsolver"),
        (
            "h100-no-envsolver",
            "cannot import envsolver or a package it needs (/usr/bin/python3: No module named envsolver)",
            "Install",
        ),
        ("h100-no-prefix", "on gpu03: '/tmp/cv-lab/work/nope' has no bin/python", "mount"),
    ],
)
def test_a_node_that_cannot_run_verify_says_why_with_the_fix(name: str, message: str, fix: str) -> None:
    reply = step.read(captured(name))
    assert reply.checks == ()
    said = step.trouble(reply, PYTHON, PREFIX)
    assert said is not None and message in said, said
    assert fix in said.split(message, 1)[1], said


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("", "printed no verify section"),
        ("srun: error: task 0 launch failed\n", "printed no verify section"),
        ('== envsolver-verify: begin\n{"ok": true, "checks": 3}\n== envsolver-verify: exit 0\n', "no report"),
        ('== envsolver-verify: begin\n{"ok": true, "checks": [{"id": 1}]}\n', "no report"),
        # a status that is a list (unhashable): found by the fuzz suite's fresh seed as a TypeError
        (
            '== envsolver-verify: begin\n{"ok": true, "checks": [{"id": "shm", "status": [], "detail": "x"}]}\n',
            "no report",
        ),
        ("== envsolver-verify: begin\n[1, 2]\nTraceback (most recent call last):\n", "Traceback"),
    ],
)
def test_output_that_is_not_a_report_is_trouble(text: str, phrase: str) -> None:
    reply = step.read(text)
    said = step.trouble(reply, PYTHON, PREFIX)
    assert said is not None and phrase in said, said
    assert said.rstrip().endswith("then run the same command again."), said


def test_a_report_amid_other_lines_is_found() -> None:
    report = '{\n  "ok": true,\n  "checks": [{"id": "shm", "status": "pass", "detail": "8 GiB", "fix": ""}]\n}'
    text = f"== envsolver-verify: begin\nwarning: something\n{report}\nmore noise\n== envsolver-verify: exit 0\n"
    reply = step.read(text)
    assert [c.id for c in reply.checks] == ["shm"] and reply.said == "warning: something\nmore noise"


@pytest.mark.parametrize("noise", ["{\n", '{"a":\n', "{" * 40 + "\n"], ids=["open-brace", "open-key", "forty-braces"])
def test_reading_5_mb_of_lines_that_start_like_json_takes_seconds(noise: str) -> None:
    """Lines that start with `{` before the report (as much as slurm.run keeps of a step's output): each try to
    decode one is bounded, and the report after them is found. In a fresh process, stopped at 60 s: the reader
    used to copy the rest of the text for every such line (5 MB of `{` lines: hours)."""
    report = '{\n  "ok": true,\n  "checks": [{"id": "shm", "status": "pass", "detail": "8 GiB", "fix": ""}]\n}'
    count = (5 << 20) // len(noise)
    script = (
        "import sys, time\nfrom envsolver.cluster import step\n"
        f"text = {step.MARK!r} + 'begin\\n' + {noise!r} * {count} + {report!r} + '\\n' + {step.MARK!r} + 'exit 0\\n'\n"
        "started = time.monotonic()\nreply = step.read(text)\n"
        "print([c.id for c in reply.checks], reply.exit, round(time.monotonic() - started, 2))\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"step.read of {count} lines {noise!r} and a report took more than 60 s")
    assert done.returncode == 0, done.stderr
    checks, exit_status, seconds = done.stdout.rsplit(" ", 2)
    assert (checks, exit_status) == ("['shm']", "0"), done.stdout
    assert float(seconds) < 15, done.stdout
