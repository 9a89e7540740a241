"""How `verify --cluster` renders its report (envsolver/cluster/verify_report.py): the table of checks x
partitions, the failing and warning checks with node and fix, the partitions that could not run or were not
checked, and the JSON document. Built from real step outputs captured in the lab (tests/data/cluster-verify/)."""

from __future__ import annotations

import json

import pytest

from envsolver.cluster import compare, fanout, step, verify_report
from envsolver.cluster.file import parse
from envsolver.cluster.model import Cluster
from envsolver.cluster.verify import NodeOutcome, Outcome, Report, status_of
from envsolver.core.errors import split_fix
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.verify.checks_base import Check
from tests.cluster.captures import captured, read
from tests.hostile import HOSTILE, SHOWN, assert_shown

FILE = """\
cluster: lab
partitions:
  - {name: tesla, gpus: [v100], driver: '535.104.05', platform: linux-64, glibc: '2.36', slurm: {gres: 'gpu:tesla:1'}}
  - {name: v100, gpus: [v100], driver: '535.104.05', platform: linux-64, glibc: '2.36', slurm: {gres: 'gpu:v100:1'}}
  - {name: h100, gpus: [h100], driver: '570.133.20', platform: linux-64, glibc: '2.36', slurm: {gres: 'gpu:h100:1'}}
  - {name: gh200, gpus: [gh200], driver: '570.133.20', platform: linux-aarch64, glibc: null}
"""
# The lab lock's custom_metadata (make --cluster on the lab's drafted file, --offline), less the per-partition lines.
META = {
    "envsolver_cluster": "lab",
    "envsolver_cluster_partitions": "a100;h100;mixed;tesla;v100",
    "envsolver_compute_capabilities": "8.0;9.0;7.0",
    "envsolver_cuda_version": "12.9",
    "envsolver_driver_min_full": "575.51.03",
    "envsolver_driver_min_minor_compat": "525.60.13",
    "envsolver_gpus": "NVIDIA A100 (8.0); NVIDIA H100 (9.0); NVIDIA V100 (7.0)",
    "envsolver_torch_cuda_arch_list": "7.0;8.0;9.0+PTX",
    "envsolver_virtual_linux-64_cuda": "12.2",
    "envsolver_virtual_linux-64_glibc": "2.36",
}
PREFIX = "/shared/envs/lab"
H100_ERROR = (
    "partition h100: `srun` refused the verify step of partition h100 (exit 1: srun: Required node not available "
    "(down, drained or reserved) / srun: error: Unable to allocate resources: Requested nodes are busy). Check that "
    "`srun --partition=h100 --gres=gpu:h100:1 --nodes=1 --time=10 hostname` runs (a partition whose time limit is "
    "under 10 minutes refuses the step), or correct partition h100's slurm: options in cluster.yaml; then run the same "
    "command again."
)


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return default_kb()


def node_outcome(kb: KnowledgeBase, cluster: Cluster, name: str, capture: str, node: str | None = None) -> NodeOutcome:
    partition = cluster.partition(name)
    assert partition is not None
    reply = read(kb, captured(capture))
    cross = compare.compare(kb, compare.Scope(cluster, "cluster.yaml", PREFIX, META), partition, reply.probe)
    status = status_of((*reply.checks, *cross))
    return NodeOutcome(node or str(reply.probe.node), status, reply.checks, cross, reply)


def checked(kb: KnowledgeBase, cluster: Cluster, name: str, capture: str) -> Outcome:
    partition = cluster.partition(name)
    assert partition is not None
    node = node_outcome(kb, cluster, name, capture)
    words = ("sh", "-c", step.SCRIPT, step.NAME, *step.node_command(PREFIX, kb, None, False))
    argv = fanout.argv(step.options(partition), (node.node,), step.WAIT_S, step.TIME_MIN, step.NAME, words)
    return Outcome(partition, node.status, argv, (node,), seconds=3.5)


@pytest.fixture(scope="module")
def report(kb: KnowledgeBase) -> Report:
    cluster = parse(FILE, kb, "cluster.yaml")
    h100, gh200 = cluster.partitions[2:]
    outcomes = (
        checked(kb, cluster, "tesla", "tesla-gpu04-pass"),
        checked(kb, cluster, "v100", "v100-gpu01-old-driver"),
        Outcome(h100, "error", ("srun",), error=H100_ERROR, seconds=2.1),
        Outcome(gh200, "skipped", error="not checked: the prefix is for linux-64, gh200 is linux-aarch64"),
    )
    source = f"{PREFIX}/etc/envsolver/lock-metadata.json"
    return Report(cluster, "cluster.yaml", PREFIX, f"{PREFIX}/bin/python", "linux-64", source, META, outcomes)


def test_the_table_has_a_row_per_check_and_a_column_per_partition(report: Report) -> None:
    assert verify_report.table(report) == [
        "  check                        tesla  v100   h100",
        "  node                         gpu04  gpu01  ?",
        "  driver                       pass   pass   -",
        "  gpus                         pass   pass   -",
        "  torch_import                 pass   pass   -",
        "  torch_cuda_build             pass   pass   -",
        "  driver_supports_torch_cuda   warn   FAIL   -",
        "  cuda_available               pass   pass   -",
        "  arch_coverage                pass   pass   -",
        "  host_vs_lock                 pass   FAIL   -",
        "  lock_partition (login node)  pass   pass   -",
        "  lock_driver (login node)     pass   FAIL   -",
        "  lock_glibc (login node)      pass   pass   -",
        "  lock_arch (login node)       pass   pass   -",
        "  cluster_file (login node)    pass   warn   -",
        "  result                       warn   FAIL   ERROR",
    ]


def test_the_lines_name_each_failing_node_and_every_fix(report: Report) -> None:
    lines = verify_report.lines(report)
    assert lines[0] == (
        f"cluster lab (cluster.yaml), prefix {PREFIX}: linux-64 lock metadata from {PREFIX}/etc/envsolver/"
        "lock-metadata.json"
    )
    after = lines[1 + len(verify_report.table(report)) :]
    headers = [line for line in after if not line.startswith(" ")]
    assert headers == [
        "tesla on gpu04: warn",
        "v100 on gpu01: FAIL",
        f"h100: ERROR, the step could not run: {H100_ERROR.removeprefix('partition h100: ')}",
        "gh200: not checked: the prefix is for linux-64, gh200 is linux-aarch64",
        "3 partition(s): 0 pass, 1 warn, 1 fail, 1 could not run (1 not checked); 2 node(s), failing: gpu01 (v100)",
    ]
    v100 = after[after.index("v100 on gpu01: FAIL") + 1 : after.index(headers[2])]
    assert [line.split(":")[0].strip() for line in v100 if not line.startswith("       fix")] == [
        "FAIL driver_supports_torch_cuda",
        "FAIL host_vs_lock",
        "FAIL lock_driver",
        "warn cluster_file",
    ]
    fixes = [line for line in v100 if line.startswith("       fix: ")]
    assert len(fixes) == 4 and "upgrade the driver on gpu01 (driver >= 525.60.13)" in fixes[2]


def test_the_document_holds_each_nodes_document_and_the_error(report: Report, kb: KnowledgeBase) -> None:
    doc = json.loads(json.dumps(verify_report.document(report)))
    assert doc["ok"] is False and doc["exit_code"] == 2 == report.exit_code
    assert doc["lock"] == {
        "source": f"{PREFIX}/etc/envsolver/lock-metadata.json",
        "platform": "linux-64",
        "cluster": "lab",
        "partitions": ["a100", "h100", "mixed", "tesla", "v100"],
    }
    parts = {p["name"]: p for p in doc["partitions"]}
    assert {n: p["status"] for n, p in parts.items()} == {
        "tesla": "warn",
        "v100": "fail",
        "h100": "error",
        "gh200": "skipped",
    }
    assert parts["v100"]["failing_nodes"] == ["gpu01"] and parts["tesla"]["failing_nodes"] == []
    (v100,) = parts["v100"]["nodes"]
    assert v100["node"] == "gpu01" and v100["status"] == "fail", v100
    assert v100["verify"] == read(kb, captured("v100-gpu01-old-driver")).document
    assert v100["probe"] == {
        "gpus": [{"name": "Tesla V100-SXM2-16GB", "driver": "450.80.02", "compute_cap": "7.0", "device_id": None}] * 2,
        "glibc": "2.36",
        "machine": "x86_64",
    }
    assert [c["on"] for c in v100["checks"]] == ["node"] * 8 + ["login"] * 5
    assert parts["h100"]["error"] == dict(zip(("message", "fix"), split_fix(H100_ERROR), strict=True))
    assert parts["h100"]["error"]["fix"].startswith("Check that `srun --partition=h100")
    assert parts["gh200"]["reason"].startswith("not checked") and parts["gh200"]["error"] is None
    assert doc["error"]["kind"] == "failed" and "partition h100:" in doc["error"]["message"]
    assert doc["error"]["fix"] == "do what each line says, then run the same command again."


def test_a_partition_of_several_nodes_shows_the_worst_cell_and_names_the_failing_node(kb: KnowledgeBase) -> None:
    """tesla reached on two nodes: one as captured (warn), one with the v100 capture's old driver (fail):
    each cell is the worst of the two, the node row counts them, the lines and the JSON name the failing one."""
    cluster = parse(FILE, kb, "cluster.yaml")
    good = node_outcome(kb, cluster, "tesla", "tesla-gpu04-pass", "gpu04")
    bad = node_outcome(kb, cluster, "tesla", "v100-gpu01-old-driver", "gpu07")
    tesla = cluster.partitions[0]
    outcome = Outcome(tesla, "fail", ("srun",), (good, bad))
    report = Report(cluster, "cluster.yaml", PREFIX, "python", "linux-64", None, META, (outcome,))
    table = verify_report.table(report)
    assert table[1].split() == ["node", "2", "nodes"], table
    assert "  driver_supports_torch_cuda   FAIL" in table, table
    lines = verify_report.lines(report)
    assert "tesla on gpu07: FAIL" in lines and "tesla on gpu04: warn" in lines, lines
    assert lines[-1].endswith("2 node(s), failing: gpu07 (tesla)"), lines
    doc = verify_report.document(report)
    assert doc["partitions"][0]["failing_nodes"] == ["gpu07"], doc["partitions"][0]


def test_exit_codes(report: Report) -> None:
    without_error = Report(**{**vars(report), "outcomes": report.outcomes[:2]})
    assert without_error.exit_code == 1 and verify_report.error_text(without_error) is None
    assert "error" not in verify_report.document(without_error)
    warned = Report(**{**vars(report), "outcomes": report.outcomes[:1]})
    assert warned.exit_code == 0 and verify_report.document(warned)["ok"] is True


def test_what_a_node_said_is_one_escaped_line_each_and_as_it_came_in_the_json(kb: KnowledgeBase) -> None:
    """A node's name, its checks' ids, details and fixes, and what it printed besides its report: on the
    terminal every control character spelled out (a newline too, so no line can pretend to be another); in the
    JSON document as the node said them."""
    cluster = parse(FILE, kb, "cluster.yaml")
    tesla, v100 = cluster.partitions[:2]
    said = f"{HOSTILE}\n  pass lock_driver: fake"
    check = Check(HOSTILE, "fail", said, said)
    error = f"partition v100: the verify on {HOSTILE} printed no report envsolver can read (exit 0: {said}). Run it"
    report = Report(
        cluster,
        "cluster.yaml",
        PREFIX,
        "python",
        "linux-64",
        None,
        {},
        (
            Outcome(tesla, "fail", ("srun",), (NodeOutcome(HOSTILE, "fail", (check,)),), seconds=1.0),
            Outcome(v100, "error", ("srun",), error=error, seconds=1.0),
        ),
    )
    lines = verify_report.lines(report)
    assert_shown("\n".join(lines))
    assert not any(line.startswith("  pass lock_driver") for line in lines), lines
    table = verify_report.table(report)
    assert table[1].index(SHOWN) == table[0].index("tesla"), table  # the node row lines up with the header
    problem = verify_report.error_text(report)
    assert problem is not None and len(problem.splitlines()) == 3, problem
    assert_shown(problem)
    doc = json.loads(json.dumps(verify_report.document(report)))
    fail, err = doc["partitions"]
    assert fail["nodes"][0]["node"] == HOSTILE and fail["nodes"][0]["checks"][0] == {
        "id": HOSTILE,
        "status": "fail",
        "detail": said,
        "fix": said,
        "on": "node",
    }
    assert said in err["error"]["message"] and said in doc["error"]["message"]
