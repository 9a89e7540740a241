"""`envsolver verify --cluster` against the real Slurm lab, from `cluster init` through `make --cluster` to one
report: one srun step per partition running verify's probe under the prefix's own python, verify's checks over
its facts and the checks across partitions on the login node, a node whose driver is below the lock's floor
(exit 1, naming partition and node), steps that cannot start or nodes that cannot run the prefix's python (exit 2,
naming the partition, with the fix), --json.

The prefix is the lab's stand-in environment (tests/slurmlab.write_env): verify's real probe on the node, torch's
facts from the lock. verify is asked for the checks that stand-in answers (--check), as a user would for a
subset."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.cluster import verify as cluster_verify
from envsolver.cluster import verify_report
from envsolver.kb import default_kb
from tests.cluster.captures import ONLY  # the checks the lab's stand-in python answers
from tests.hostile import HOSTILE, assert_shown
from tests.signals import default_dispositions
from tests.slurmlab import A100, V100, Gpu, SlurmLab, write_env, write_hanging_python

CHECKS = [word for check_id in ONLY for word in ("--check", check_id)]
PARTITIONS = ["a100", "h100", "mixed", "pair", "tesla", "v100"]  # cluster init writes them by name
# The table's node row: the node, or how many (mixed reaches gpu02 and gpu03, pair gpu05 and gpu06)
NODES = {"a100": "gpu02", "h100": "gpu03", "mixed": "2 nodes", "pair": "2 nodes", "tesla": "gpu04", "v100": "gpu01"}
MEMBERS = {"a100": ["gpu02"], "h100": ["gpu03"], "mixed": ["gpu02", "gpu03"], "pair": ["gpu05", "gpu06"]}
MEMBERS |= {"tesla": ["gpu04"], "v100": ["gpu01"]}


@dataclass(frozen=True)
class Setup:
    lab: SlurmLab
    root: Path

    @property
    def file(self) -> Path:
        return self.root / "cluster.yaml"

    @property
    def prefix(self) -> Path:
        return self.root / "env"

    def invoke(self, *args: str) -> Result:
        return CliRunner(env={"SLURM_CONF": str(self.lab.conf)}).invoke(main, list(args), catch_exceptions=False)

    def verify(self, *args: str, file: Path | None = None) -> Result:
        return self.invoke("verify", "--cluster", str(file or self.file), "-p", str(self.prefix), *CHECKS, *args)

    def edited(self, name: str, change: dict[str, object]) -> Path:
        """A copy of the drafted file with partitions changed (None removes one), as a user would edit it."""
        doc = yaml.safe_load(self.file.read_text())
        parts = {p["name"]: p for p in doc["partitions"]}
        for key, value in change.items():
            if value is None:
                parts.pop(key, None)
            else:
                parts[key] = value  # type: ignore[assignment]
        doc["partitions"] = list(parts.values())
        path = self.root / name
        path.write_text(yaml.safe_dump(doc))
        return path


@pytest.fixture(scope="module")
def setup(slurm_lab: SlurmLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """The lab drafted with `cluster init`, locked with `make --cluster --offline`, and a prefix installed from
    that lock (its metadata, as `envsolver install` keeps it; the stand-in python)."""
    made = Setup(slurm_lab, tmp_path_factory.mktemp("verify-cluster"))
    drafted = made.invoke("cluster", "init", "--out", str(made.file))
    assert drafted.exit_code == 0, drafted.output
    env = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None, "SLURM_CONF": str(slurm_lab.conf)}
    locked = CliRunner(env=env).invoke(
        main, ["make", "--cluster", str(made.file), "--offline", "--out", str(made.root / "envs")]
    )
    assert locked.exit_code == 0, locked.output
    lock = yaml.safe_load((made.root / "envs" / "linux-64" / "conda-lock.yml").read_text())
    write_env(made.prefix, "linux-64", lock["metadata"]["custom_metadata"], sys.executable)
    yield made


def table_rows(stdout: str) -> dict[str, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            words = line.split()
            label = " ".join(words[:3]) if words[1:3] == ["(login", "node)"] else words[0]
            rows[label.split(" (")[0]] = words[3:] if label != words[0] else words[1:]
    return rows


def test_every_partition_is_verified_on_a_node_and_reported_in_one_table(setup: Setup) -> None:
    result = setup.verify()
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows["check"] == PARTITIONS, result.output
    nodes = dict(zip(PARTITIONS, [" ".join(w) for w in _pairs(rows["node"])], strict=True))
    assert nodes == NODES, result.output
    for check_id in (*ONLY, "lock_partition", "lock_driver", "lock_glibc", "lock_arch", "cluster_file"):
        assert check_id in rows and len(rows[check_id]) == 6, (check_id, result.output)
    assert set(rows["lock_driver"]) == {"pass"} and set(rows["lock_arch"]) == {"pass"}
    # Every partition runs the lock's CUDA 12.9 through minor-version compatibility only (drivers 535-570).
    assert set(rows["driver_supports_torch_cuda"]) == {"warn"} and set(rows["result"]) == {"warn"}
    assert "upgrade the driver to 575.51.03 or newer" in result.stdout
    assert result.stdout.rstrip().endswith("6 partition(s): 0 pass, 6 warn, 0 fail, 0 could not run; 8 node(s)")
    for name in PARTITIONS:  # progress, per partition, on stderr
        assert f"verifying {name}: srun --partition={name}" in result.stderr, result.stderr
        count = len(MEMBERS[name])
        assert f"  {name}: warn on {count} node(s) (0 pass, {count} warn" in result.stderr, result.stderr


def _pairs(words: list[str]) -> list[list[str]]:
    """The node row's cells: 'gpu02' or '2 nodes' (two words)."""
    cells: list[list[str]] = []
    for word in words:
        if word == "nodes" and cells:
            cells[-1].append(word)
        else:
            cells.append([word])
    return cells


def test_json_holds_every_partitions_own_verify_document(setup: Setup) -> None:
    result = setup.verify("--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["cluster"] == "lab", doc
    assert doc["lock"]["platform"] == "linux-64" and doc["lock"]["partitions"] == sorted(PARTITIONS)
    assert [p["name"] for p in doc["partitions"]] == PARTITIONS
    for part in doc["partitions"]:
        assert part["status"] == "warn" and part["error"] is None, part
        assert [n["node"] for n in part["nodes"]] == MEMBERS[part["name"]], part
        assert part["failing_nodes"] == [] and part["left_out"] == [], part
        assert part["argv"][:2] == ["srun", f"--partition={part['name']}"], part
        assert f"--nodelist={','.join(MEMBERS[part['name']])}" in part["argv"], part
        for node in part["nodes"]:
            assert node["verify"]["ok"] is True, node  # the node's own document, whole
            assert [c["id"] for c in node["verify"]["checks"]] == list(ONLY), node
            assert {c["on"] for c in node["checks"]} == {"node", "login"}, node
            assert node["probe"]["gpus"] and node["status"] == "warn", node
    assert "error" not in doc


def test_a_node_below_the_locks_driver_floor_fails_its_partition(setup: Setup) -> None:
    old = Gpu(V100.name, "450.80.02", V100.compute_cap, V100.memory)
    with setup.lab.node_gpus("gpu01", (old, old)):
        result = setup.verify()
    assert result.exit_code == 1, result.output
    rows = table_rows(result.stdout)
    v100 = PARTITIONS.index("v100")
    assert rows["result"][v100] == "FAIL" and _pairs(rows["node"])[v100] == ["gpu01"], result.output
    assert [r for i, r in enumerate(rows["result"]) if i != v100] == ["warn"] * 5, result.output
    for check_id in ("driver_supports_torch_cuda", "host_vs_lock", "lock_driver"):
        assert rows[check_id][v100] == "FAIL", check_id
    assert rows["cluster_file"][v100] == "warn"
    assert "v100 on gpu01: FAIL" in result.stdout
    assert "lock_driver: gpu01: driver 450.80.02 is older than the lock's floor 525.60.13" in result.stdout
    assert "fix: upgrade the driver on gpu01 (driver >= 525.60.13)" in result.stdout
    assert "1 fail" in result.stdout.splitlines()[-1] and "failing: gpu01 (v100)" in result.stdout.splitlines()[-1]


def test_a_partition_slurm_does_not_know_is_exit_2_naming_it_with_the_fix(setup: Setup) -> None:
    file = setup.edited("unknown.yaml", {"ghost": {**_partition(setup, "h100"), "name": "ghost"}})
    result = setup.verify("--json", file=file)
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2, doc
    statuses = {p["name"]: p["status"] for p in doc["partitions"]}
    assert statuses == {**dict.fromkeys(PARTITIONS, "warn"), "ghost": "error"}
    ghost = next(p for p in doc["partitions"] if p["name"] == "ghost")
    assert "sinfo lists no partition 'ghost'" in ghost["error"]["message"], ghost
    assert "srun --partition=ghost --gres=gpu:h100:1 --nodes=1 --time=10 hostname" in ghost["error"]["fix"], ghost
    assert "partition ghost" in doc["error"]["message"] and doc["error"]["fix"].startswith("do what each line says")
    assert "error: the verify step could not run on 1 partition(s)" in result.stderr
    text = setup.verify(file=file)
    assert text.exit_code == 2 and "ghost: ERROR, the step could not run" in text.stdout


def _partition(setup: Setup, name: str) -> dict[str, object]:
    doc = yaml.safe_load(setup.file.read_text())
    found: dict[str, object] = next(p for p in doc["partitions"] if p["name"] == name)
    return found


def test_a_partition_whose_only_node_is_drained_is_exit_2_and_its_other_nodes_are_checked(setup: Setup) -> None:
    """gpu03 drained: h100 (gpu03 alone) cannot run, named with its state and reason and the way out; mixed
    (gpu02 and gpu03) is checked on gpu02, gpu03 listed as left out; the fix that leaves h100 out works."""
    lab = setup.lab
    down = lab.run(["scontrol", "update", "NodeName=gpu03", "State=DRAIN", "Reason=envsolver-test"])
    assert down.returncode == 0, down.stderr
    try:
        result = setup.verify("--json")
        text = setup.verify()
        others = [w for name in PARTITIONS if name != "h100" for w in ("--partition", name)]
        narrowed = setup.verify(*others)
    finally:
        lab.run(["scontrol", "update", "NodeName=gpu03", "State=RESUME"])
    assert result.exit_code == 2, result.output
    parts = {p["name"]: p for p in json.loads(result.stdout)["partitions"]}
    h100 = parts["h100"]
    assert h100["status"] == "error" and h100["nodes"] == [], h100
    assert "no node of it can run a step: gpu03 (IDLE+DRAIN: envsolver-test" in h100["error"]["message"], h100
    assert "--partition NAME for each other partition" in h100["error"]["fix"], h100
    assert h100["left_out"][0]["node"] == "gpu03" and h100["left_out"][0]["reason"].startswith("envsolver-test")
    mixed = parts["mixed"]
    assert mixed["status"] == "warn" and [n["node"] for n in mixed["nodes"]] == ["gpu02"], mixed
    assert [n["node"] for n in mixed["left_out"]] == ["gpu03"], mixed
    assert "mixed: left out gpu03 (IDLE+DRAIN: envsolver-test" in text.stdout, text.output
    assert "h100: ERROR, the step could not run" in text.stdout, text.output
    assert narrowed.exit_code == 0, narrowed.output  # the way out: every other partition, by --partition
    assert table_rows(narrowed.stdout)["check"] == [p for p in PARTITIONS if p != "h100"], narrowed.output


def test_a_node_with_an_older_driver_than_its_partition_mates_is_the_oldest_and_fails_named(setup: Setup) -> None:
    """The issue's done-when: gpu06's nvidia-smi says 470.182.03 while gpu05 says 550.54.15 (partition pair).
    `cluster init` records 470.182.03 as pair's oldest driver, from gpu06; `verify --cluster` fails pair on
    gpu06 alone, named in the text and in --json."""
    old = Gpu(A100.name, "470.182.03", A100.compute_cap, A100.memory)
    drafted = setup.root / "old-gpu06.yaml"
    with setup.lab.node_gpus("gpu06", (old, old)):
        init = setup.invoke("cluster", "init", "--out", str(drafted), "--partition", "pair", "--json")
        result = setup.verify("--partition", "pair")
        as_json = setup.verify("--partition", "pair", "--json")
    assert init.exit_code == 0, init.output
    (pair,) = json.loads(init.stdout)["cluster"]["partitions"]
    assert pair["driver"] == "470.182.03", pair
    assert "470.182.03 on gpu06; 550.54.15 on gpu05" in pair["provenance"]["driver"], pair
    assert result.exit_code == 1, result.output
    assert "pair on gpu06: FAIL" in result.stdout, result.output
    assert "lock_driver: gpu06: driver 470.182.03 is older than the lock's floor" in result.stdout, result.output
    assert "pair on gpu05: warn" in result.stdout and "pair on gpu05: FAIL" not in result.stdout, result.output
    assert result.stdout.splitlines()[-1].endswith("failing: gpu06 (pair)"), result.output
    doc = json.loads(as_json.stdout)
    (part,) = doc["partitions"]
    assert part["status"] == "fail" and part["failing_nodes"] == ["gpu06"], part
    statuses = {n["node"]: n["status"] for n in part["nodes"]}
    assert statuses == {"gpu05": "warn", "gpu06": "fail"}, statuses


def test_a_step_whose_nodes_stay_busy_is_exit_2_and_a_longer_wait_works(setup: Setup) -> None:
    """Both GPUs of gpu01 held by another job: v100's step gives up after --wait 1 (exit 2, naming v100, the
    fix suggesting --wait 120); run again with --wait 120 once the job ends, it passes."""
    lab = setup.lab
    with lab.holding(["--partition=v100", "--gres=gpu:v100:2", "--nodes=1"]):
        busy = setup.verify("--partition", "v100", "--wait", "1", "--json")
    assert busy.exit_code == 2, busy.output
    (v100,) = json.loads(busy.stdout)["partitions"]
    assert v100["status"] == "error" and "--wait 120" in v100["error"]["fix"], v100
    again = setup.verify("--partition", "v100", "--wait", "120")
    assert again.exit_code == 0, again.output


def test_an_unknown_partition_is_refused_with_the_list(setup: Setup) -> None:
    result = setup.verify("--partition", "b200", "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "no partition 'b200'" in error["message"] and "a100, h100, mixed, pair, tesla, v100" in error["message"]
    assert "--partition" in error["fix"], error
    stray = setup.invoke("verify", "-p", str(setup.prefix), "--partition", "a100")
    said = "--partition applies to --nccl across nodes (with --nodes N) or to --cluster"
    assert stray.exit_code == 2 and said in stray.stderr, stray.output


def test_a_prefix_whose_python_the_nodes_cannot_run_is_exit_2_with_the_fix(setup: Setup, tmp_path: Path) -> None:
    """The prefix's bin/python is not a program the nodes may run (its execute bit lost): each partition is an
    error naming its node, the python and the fix."""
    prefix = tmp_path / "env"
    shutil.copytree(setup.prefix, prefix)
    (prefix / "bin" / "python").chmod(0o644)
    request = cluster_verify.Request(setup.file, prefix, only=ONLY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(setup.lab.conf))
        report = cluster_verify.verify(request, default_kb())
    assert report.exit_code == 2, [o.error for o in report.outcomes]
    for outcome in report.outcomes:
        assert outcome.status == "error" and outcome.nodes, (outcome.partition.name, outcome.error, outcome.left_out)
        for node in outcome.nodes:
            said = str(node.error)
            assert f"{node.node} ({os.uname().machine}) cannot run the environment's python {prefix}/bin/python" in said
            assert "(exit 126:" in said and "Permission denied" in said, said
            assert "every node mounts at the same path" in said, said
            assert said.endswith("then run the same command again."), said


def test_a_controller_that_does_not_answer_is_one_error_before_any_step(setup: Setup) -> None:
    dead = setup.lab.dead_conf()
    result = CliRunner(env={"SLURM_CONF": str(dead)}).invoke(
        main, ["verify", "--cluster", str(setup.file), "-p", str(setup.prefix), "--json"]
    )
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"ok", "exit_code", "error"}
    assert doc["error"]["message"].startswith("the Slurm controller does not answer")
    assert "scontrol ping" in doc["error"]["fix"]
    assert "verifying" not in result.stderr  # no step was started


def test_partitions_of_another_platform_are_not_checked(setup: Setup) -> None:
    gh200 = {"name": "gh200", "gpus": ["gh200"], "driver": "570.133.20", "platform": "linux-aarch64", "glibc": None}
    file = setup.edited("aarch64.yaml", {"gh200": gh200, "mixed": None, "tesla": None, "h100": None, "pair": None})
    result = setup.verify(file=file)
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout)["check"] == ["a100", "v100"], result.output
    assert "gh200: not checked: the prefix is for linux-64, gh200 is linux-aarch64" in result.stdout
    assert result.stdout.rstrip().endswith("(1 not checked); 2 node(s)"), result.output
    assert "lock was made for partitions" not in result.stdout  # v100 and a100 were among the lock's


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--python", sys.executable], "no --python"),
        ([], "pass -p PREFIX"),
    ],
)
def test_cluster_needs_a_prefix_and_no_python(setup: Setup, args: list[str], phrase: str) -> None:
    words = ["verify", "--cluster", str(setup.file), *args]
    if "--python" in args:
        words += ["-p", str(setup.prefix)]
    result = setup.invoke(*words)
    assert result.exit_code == 2 and phrase in result.stderr, result.output


def test_a_prefix_for_no_partition_of_the_cluster_is_refused(setup: Setup, tmp_path: Path) -> None:
    lock = yaml.safe_load((setup.root / "envs" / "linux-64" / "conda-lock.yml").read_text())
    meta = lock["metadata"]["custom_metadata"]
    write_env(tmp_path / "arm", "linux-aarch64", meta, sys.executable)
    result = setup.invoke("verify", "--cluster", str(setup.file), "-p", str(tmp_path / "arm"), "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "is for linux-aarch64" in error["message"] and "no linux-aarch64 partition" in error["message"]


def test_ctrl_c_ends_every_step_and_exits_130(setup: Setup, tmp_path: Path) -> None:
    """Ctrl-C in a terminal (SIGINT to the foreground process group: envsolver and its sruns) while every node's
    verify hangs: exit 130 with the interrupted document, and no step is left running in Slurm."""
    started = tmp_path / "started"
    started.mkdir()
    hanging = tmp_path / "hanging"
    write_hanging_python(hanging, started)
    proc = subprocess.Popen(
        [sys.executable, "-m", "envsolver", "verify", "--cluster", str(setup.file), "-p", str(hanging), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SLURM_CONF": str(setup.lab.conf)},
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
        preexec_fn=default_dispositions,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(started.iterdir())) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(list(started.iterdir())) >= 4, proc.communicate(timeout=30)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, (stdout, stderr)
    assert json.loads(stdout)["error"]["kind"] == "interrupted"
    left = ["?"]
    for _ in range(50):
        left = setup.lab.run(["squeue", "--noheader", "--name=envsolver-verify"]).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert left == []


def test_what_a_node_says_reaches_the_terminal_escaped_and_the_json_as_it_came(setup: Setup) -> None:
    """gpu01's nvidia-smi names a GPU with a title set, a clear screen, an 8-bit CSI, rich markup and an emoji
    code in it: the node's verify reports it in a check's detail, the login node's probe reads it too."""
    hostile = Gpu(HOSTILE, V100.driver, V100.compute_cap, V100.memory)
    with setup.lab.node_gpus("gpu01", (hostile, hostile)):
        result = setup.verify()
        as_json = setup.verify("--json")
    assert result.exit_code in (0, 1), result.output
    assert_shown(result.stdout + result.stderr, result.output)
    assert as_json.exit_code == result.exit_code, as_json.output
    (v100,) = next(p for p in json.loads(as_json.stdout)["partitions"] if p["name"] == "v100")["nodes"]
    assert any(HOSTILE in c["detail"] for c in v100["verify"]["checks"]), v100["verify"]["checks"]
    assert v100["probe"]["gpus"][0]["name"] == HOSTILE


def test_a_nodes_failure_message_reaches_the_terminal_escaped(setup: Setup, tmp_path: Path) -> None:
    """The prefix's python crashes on every node, saying something hostile: the nodes' verify fails (its error
    quotes the probe), the login node reports exit 2 quoting each node."""
    lock = yaml.safe_load((setup.root / "envs" / "linux-64" / "conda-lock.yml").read_text())
    prefix = tmp_path / "env"
    write_env(prefix, "linux-64", lock["metadata"]["custom_metadata"], sys.executable)
    (prefix / "bin" / "python").write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(HOSTILE)} >&2\nexit 3\n")
    words = ["verify", "--cluster", str(setup.file), "-p", str(prefix), *CHECKS]
    result = setup.invoke(*words)
    assert result.exit_code == 2, result.output
    assert_shown(result.stdout, result.output)
    assert_shown(result.stderr, result.output)
    as_json = setup.invoke(*words, "--json")
    assert as_json.exit_code == 2, as_json.output
    doc = json.loads(as_json.stdout)
    assert all(HOSTILE in n["error"]["message"] for p in doc["partitions"] for n in p["nodes"]), doc["partitions"]


def test_what_a_python_that_prints_no_facts_says_is_shown_escaped(setup: Setup, tmp_path: Path) -> None:
    """The prefix's python prints no facts at all, only hostile text: each partition's error quotes it, spelled
    out, one line each."""
    prefix = tmp_path / "env"
    shutil.copytree(setup.prefix, prefix)
    python = prefix / "bin" / "python"
    python.write_text(f"#!/bin/sh\nprintf '%s\\n%s\\n' {shlex.quote(HOSTILE)} '  pass driver: fake'\n")
    request = cluster_verify.Request(setup.file, prefix, only=ONLY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(setup.lab.conf))
        report = cluster_verify.verify(request, default_kb())
    assert report.exit_code == 2 and {o.status for o in report.outcomes} == {"error"}, [
        o.error for o in report.outcomes
    ]
    lines = verify_report.lines(report)
    assert_shown("\n".join(lines), lines)
    assert not any(line.startswith("  pass driver") for line in lines), lines
    problem = verify_report.error_text(report)
    assert problem is not None
    assert_shown(problem)


# A fresh process runs verify --cluster (the library call the CLI makes) and prints the outcome and its own peak
# RSS (VmHWM, kB): the peak is the reading of the node's output alone.
FLOOD_READER = """
import json, sys
from pathlib import Path
from envsolver.cluster import verify
from envsolver.kb import default_kb
file, prefix, *only = sys.argv[1:]
request = verify.Request(Path(file), Path(prefix), only=tuple(only))
report = verify.verify(request, default_kb())
status = open("/proc/self/status").read()
print(json.dumps({
    "exit_code": report.exit_code,
    "outcomes": [[o.partition.name, o.status, [n.node for n in o.nodes], o.error] for o in report.outcomes],
    "vmhwm_kb": int(status.split("VmHWM:")[1].split()[0]),
}))
"""


@pytest.mark.parametrize(
    "flood",
    # srun relays about 30 MB/s here: 150 MB in the default run (the old reader peaked at 331 MB and lost the
    # report), the 700 MB with -m slow (about 35 s).
    [pytest.param(150_000_000, id="150MB"), pytest.param(700_000_000, id="700MB", marks=pytest.mark.slow)],
)
def test_a_node_that_prints_a_flood_keeps_memory_flat_and_its_report_is_read(
    setup: Setup, tmp_path: Path, flood: int
) -> None:
    """The prefix's python prints FLOOD bytes before the probe runs: envsolver keeps the start and the end of the
    step's output (the facts are at the end), under 200 MB of memory."""
    file = setup.edited("v100-only.yaml", {name: None for name in PARTITIONS if name != "v100"})
    prefix = tmp_path / "env"
    shutil.copytree(setup.prefix, prefix)
    stand_in = setup.prefix / "bin" / "python"
    python = prefix / "bin" / "python"
    python.write_text(f"#!/bin/sh\nhead -c {flood} /dev/zero | tr '\\0' x\necho\nexec {stand_in} \"$@\"\n")
    argv = [sys.executable, "-c", FLOOD_READER, str(file), str(prefix), *ONLY]
    started = time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": str(setup.lab.conf)}, timeout=600
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    said = f"{str(outcome)[:2000]} after {time.monotonic() - started:.1f} s; stderr: {done.stderr}"
    assert outcome["vmhwm_kb"] < 200 * 1024, said
    assert outcome["outcomes"] == [["v100", "warn", ["gpu01"], None]], said
