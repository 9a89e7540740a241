"""What a partition allows (envsolver/cluster/limits.py), without Slurm: Slurm's time forms, the captured
`scontrol show partition` and `sinfo` node lines (tests/data/slurm/), and the judgement of requests against
them: refusals with their fixes, warnings, CPUs per GPU. The same against the live lab is in
test_sbatch_jobs_lab.py."""

from __future__ import annotations

import pytest

from envsolver.cluster import limits
from tests.conftest import DATA

SECONDS = [
    ("30", 1800),
    ("10:30", 630),
    ("04:00:00", 14400),
    ("1-12", 129600),
    ("1-00:30", 88200),
    ("2-01:02:03", 176523),
    ("UNLIMITED", None),
    ("INFINITE", None),
    ("soon", None),
]


@pytest.mark.parametrize(("text", "expected"), SECONDS, ids=[t for t, _ in SECONDS])
def test_slurm_times_as_seconds(text: str, expected: int | None) -> None:
    assert limits.seconds(text) == expected


def captured() -> limits.PartitionFacts:
    nodes = limits.parse_nodes((DATA / "slurm" / "sinfo-node-limits.txt").read_text())
    shown = (DATA / "slurm" / "scontrol-show-partition-oneliner.txt").read_text()
    mixed = [n for n in nodes if n.name in ("gpu02", "gpu03")]
    return limits.parse_partition(shown, "mixed", mixed)


def test_the_captured_partition_and_nodes() -> None:
    nodes = {n.name: n for n in limits.parse_nodes((DATA / "slurm" / "sinfo-node-limits.txt").read_text())}
    assert sorted(nodes) == ["cpu01", "gpu01", "gpu02", "gpu03", "gpu04"]  # gpu02, gpu03: one row per partition
    assert nodes["gpu02"].features == ("ib", "rack1") and nodes["gpu02"].cpus == 2 and nodes["gpu02"].usable
    assert nodes["gpu02"].gpu_count("a100") == 2 and nodes["gpu02"].gpu_count("h100") == 0
    assert not nodes["gpu03"].usable and nodes["gpu03"].state == "down"
    assert not nodes["gpu04"].usable and nodes["gpu04"].state == "drained"
    assert nodes["cpu01"].gpus == () and nodes["cpu01"].features == ()
    facts = captured()
    assert (facts.state, facts.max_time, facts.max_time_s, facts.max_nodes) == ("UP", "00:10:00", 600, None)


def test_states_with_flags() -> None:
    text = "a|idle*|8|(null)|gpu:4\nb|mixed~|8|(null)|gpu:4\nc|allocated|x|f1|gpu:4\nd|drained*|8||gpu:4\n|idle|1||\n"
    nodes = {n.name: n for n in limits.parse_nodes(text)}
    assert sorted(nodes) == ["a", "b", "c", "d"]
    assert not nodes["a"].usable and nodes["a"].shown_state == "idle (not responding)"
    assert nodes["b"].usable and nodes["b"].flags == "~"  # powered off: Slurm powers it up for the job
    assert nodes["c"].usable and nodes["c"].cpus is None and nodes["c"].features == ("f1",)
    assert not nodes["d"].usable


def node(name: str, gpus: str = "gpu:a100:8", state: str = "idle", cpus: int = 64, features: str = "") -> str:
    return f"{name}|{state}|{cpus}|{features or '(null)'}|{gpus}"


def facts(*lines: str, max_time: str = "1-00:00:00", max_nodes: str = "UNLIMITED") -> limits.PartitionFacts:
    shown = f"PartitionName=p MaxNodes={max_nodes} MaxTime={max_time} Nodes=n[1-4] State=UP TotalNodes=4"
    return limits.parse_partition(shown, "p", limits.parse_nodes("\n".join(lines)))


def request(nodes: int = 1, gpus: int = 8, kind: str | None = "a100", **changes: object) -> limits.Request:
    base: dict[str, object] = {"time": None, "constraint": None, "excluded": frozenset()}
    return limits.Request(nodes, gpus, kind, **{**base, **changes})  # type: ignore[arg-type]


FOUR = (
    node("n1", features="ib,rack1"),
    node("n2", features="ib,rack2"),
    node("n3", features="rack2", state="down"),
    node("n4", gpus="gpu:a100:4", cpus=32),
)

JUDGED = [
    ("fits", request(nodes=2), [], []),
    ("16 GPUs on 8-GPU nodes", request(gpus=16), ["no node of p has more than 8 GPUs of type a100"], []),
    ("no such type", request(kind="h100", gpus=1), ["no node of p has GPUs of type h100"], []),
    ("over MaxTime", request(time="2-00:00:00"), ["above the partition's MaxTime=1-00:00:00"], []),
    ("at MaxTime", request(time="1-00:00:00"), [], []),
    ("3 nodes, one down", request(nodes=3), ["p has 2 usable node(s) with 8 GPUs", "n3 (down)"], []),
    ("unknown feature", request(constraint="nvlink"), ["names nvlink, a feature no node of p has"], []),
    ("feature on one up node", request(nodes=2, constraint="ib&rack2"), ["1 usable node(s)"], []),
    ("features, or", request(nodes=2, constraint="rack1|rack2"), [], []),
    ("excluded", request(nodes=2, excluded=frozenset({"n1"})), ["p has 1 usable node(s) not excluded"], []),
    ("a down node, enough others", request(nodes=1, gpus=4), [], ["1 node(s) of p cannot run jobs now: n3"]),
]


@pytest.mark.parametrize(("name", "asked", "refused", "warned"), JUDGED, ids=[j[0] for j in JUDGED])
def test_requests_judged_against_the_partition(
    name: str, asked: limits.Request, refused: list[str], warned: list[str]
) -> None:
    verdict = limits.judge(facts(*FOUR), asked)
    problems = " | ".join(r.problem for r in verdict.refusals)
    assert bool(verdict.refusals) == bool(refused), problems
    assert all(word in problems for word in refused), problems
    assert all(any(word in w for w in verdict.warnings) for word in warned), verdict.warnings
    assert all(r.fix.split()[0] in ("pass", "wait", "check") for r in verdict.refusals), verdict.refusals


def test_max_nodes_and_a_closed_partition() -> None:
    verdict = limits.judge(facts(*FOUR, max_nodes="1"), request(nodes=2))
    assert [r.fix for r in verdict.refusals] == ["pass --nodes 1"], verdict.refusals
    closed = facts(*FOUR)
    closed = limits.PartitionFacts("p", "INACTIVE", None, None, None, closed.nodes)
    assert "takes no new jobs" in limits.judge(closed, request()).refusals[0].problem


def test_every_refusal_is_raised_at_once_with_its_fix() -> None:
    verdict = limits.judge(facts(*FOUR, max_nodes="2"), request(nodes=3, time="2-00:00:00", constraint="ib"))
    with pytest.raises(limits.JobRefused) as info:
        verdict.raise_refusals("p")
    text = str(info.value)
    assert info.value.exit_code == 1 and text.count("\n  - ") == 3, text
    assert text.endswith(
        "Fix: pass --time 1-00:00:00 or less; pass --nodes 2; pass --nodes 2 or less, or wait until the site brings "
        "the nodes back."
    ), text
    unknown = limits.judge(facts(*FOUR), request(nodes=3, constraint="nvlink"))
    assert [r.problem.split()[0] for r in unknown.refusals] == ["--constraint"], unknown  # the cause, not its effect


def test_mixed_untyped_gpus_are_warned_about_unless_constrained() -> None:
    mixed = facts(node("n1", "gpu:a100:4"), node("n2", "gpu:h100:4", features="hopper"))
    warned = limits.judge(mixed, request(gpus=4, kind=None)).warnings
    assert any("different GPUs (a100, h100)" in w for w in warned), warned
    assert not limits.judge(mixed, request(gpus=4, kind=None, constraint="hopper")).warnings
    assert not limits.judge(mixed, request(gpus=4, kind="a100")).warnings


def test_cpus_per_gpu_from_the_smallest_usable_node() -> None:
    """n1, n2: 64 CPUs / 8 GPUs; n4: 32 / 4; n3 is down (not counted): 8 per GPU. A 4-GPU job may land on n4."""
    assert limits.judge(facts(*FOUR), request(gpus=4)).cpus_per_gpu == 8
    small = facts(node("a", cpus=12, gpus="gpu:a100:8"), node("b", cpus=256))
    assert limits.judge(small, request()).cpus_per_gpu == 1
    assert limits.judge(facts(node("a", cpus=0)), request()).cpus_per_gpu is None


def test_features_named_in_a_constraint() -> None:
    assert limits.features_named("[rack1*2&rack2*4]|(ib&a100)") == ["rack1", "rack2", "ib", "a100"]


def test_cpus_the_user_asks_must_fit_a_node() -> None:
    """64 CPUs on the 8-GPU nodes: 16 per GPU x 8 asks 128 per node, refused with the most that fits; a
    partition's MaxCPUsPerNode caps what a node gives (and the CPUs per GPU envsolver fills in)."""
    verdict = limits.judge(facts(*FOUR), request(cpus_per_node=128))
    assert [r.problem for r in verdict.refusals] == [
        "the job asks 128 CPUs per node, but a node of p gives a job at most 64"
    ], verdict.refusals
    assert verdict.refusals[0].fix.startswith("pass --cpus-per-gpu 8 or less"), verdict.refusals
    assert not limits.judge(facts(*FOUR), request(cpus_per_node=64)).refusals
    two = limits.judge(facts(*FOUR), request(nodes=3, gpus=4, cpus_per_node=48))
    assert "p has 2 usable node(s)" in two.refusals[0].problem, two.refusals  # n4 has only 32, n3 is down: n1, n2 fit
    capped = facts(*FOUR)
    capped = limits.PartitionFacts("p", "UP", None, None, None, capped.nodes, max_cpus_per_node=16)
    assert limits.judge(capped, request()).cpus_per_gpu == 2  # 16 CPUs for 8 GPUs
    assert limits.judge(capped, request(cpus_per_node=32)).refusals[0].problem.endswith("at most 16")
