"""nodes.py: which nodes a step can run on (scontrol's State=, else sinfo's), which GPU nodes a partition's
options select (GRES type, --constraint). Pure; states as Slurm 22.05 prints them (the lab's scontrol shows
IDLE, IDLE+DRAIN, DOWN, DOWN+NOT_RESPONDING; the others follow node_state_string())."""

from __future__ import annotations

import pytest

from envsolver.cluster import nodes
from envsolver.cluster.parse import NodeInfo, parse_sinfo


def info(state: str | None, reason: str | None = None, features: tuple[str, ...] = ()) -> NodeInfo:
    return NodeInfo("gpu01", "x86_64", (), state, ("p",), None, reason, features)


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("IDLE", True),
        ("MIXED", True),
        ("ALLOCATED", True),
        ("COMPLETING", True),
        ("IDLE+COMPLETING", True),
        ("IDLE+CLOUD", True),
        ("IDLE+DRAIN", False),  # drained
        ("MIXED+DRAIN", False),  # draining
        ("ALLOCATED+DRAIN", False),  # draining
        ("DOWN", False),
        ("DOWN+NOT_RESPONDING", False),
        ("IDLE+NOT_RESPONDING", False),
        ("IDLE+RESERVED", False),
        ("IDLE+MAINTENANCE", False),
        ("IDLE+POWERED_DOWN", False),
        ("IDLE+POWERING_UP", False),
        ("FUTURE", False),
        ("UNKNOWN", False),
        ("IDLE+SOMETHING_NEW", False),  # a flag this list does not know: left out, its state shown
    ],
)
def test_a_nodes_state_says_whether_a_step_can_run_on_it(state: str, usable: bool) -> None:
    found = nodes.left_out("gpu01", info(state, "bad fan [root@2026-12-01T18:00:00]"), None)
    assert (found is None) == usable, found
    if found is not None:
        assert found.describe() == f"gpu01 ({state}: bad fan [root@2026-12-01T18:00:00])"


@pytest.mark.parametrize(
    ("sinfo_state", "usable"),
    [
        ("idle", True),
        ("mixed", True),
        ("allocated", True),
        ("drained", False),
        ("draining", False),
        ("down*", False),
        ("idle*", False),
        ("idle~", False),
        ("reserved", False),
        ("maint", False),
    ],
)
def test_without_scontrol_sinfos_state_decides(sinfo_state: str, usable: bool) -> None:
    found = nodes.left_out("gpu01", None, sinfo_state)
    assert (found is None) == usable, found


def test_a_node_name_srun_cannot_take_is_left_out() -> None:
    found = nodes.left_out("gpu01,gpu02", info("IDLE"), "idle")
    assert found is not None and "cannot be passed to srun safely" in str(found.reason), found


def test_split_keeps_the_order_given() -> None:
    infos = {"a": info("IDLE"), "b": info("DOWN", "dead"), "c": info("MIXED")}
    usable, out = nodes.split(["c", "b", "a"], infos, {})
    assert usable == ("c", "a") and [n.node for n in out] == ["b"], (usable, out)


def test_gpu_nodes_of_a_partition_by_gres_type() -> None:
    rows, bad = parse_sinfo(
        "mixed|gpu02|up|idle|gpu:a100:2(S:0)\nmixed|gpu03|up|idle|gpu:h100:2\nmixed|cpu01|up|idle|(null)\n"
        "a100|gpu02|up|idle|gpu:a100:2(S:0)\n"
    )
    assert bad == ()
    assert nodes.gpu_nodes(rows, "mixed", None) == ("gpu02", "gpu03")
    assert nodes.gpu_nodes(rows, "mixed", "h100") == ("gpu03",)
    assert nodes.gpu_nodes(rows, "a100", "h100") == ()
    assert (nodes.gres_type("gpu:a100:1"), nodes.gres_type("gpu:1"), nodes.gres_type(None)) == ("a100", None, None)


@pytest.mark.parametrize(
    ("constraint", "features", "expected"),
    [
        ("ib", ("ib", "a100"), True),
        ("ib", ("a100",), False),
        ("a100&ib", ("ib", "a100"), True),
        ("a100&ib", ("a100",), False),
        ("a100|h100", ("h100",), True),
        ("[rack1|rack2]", ("rack2",), True),
        ("(a100|h100)&ib", ("h100",), False),
        ("(a100|h100)&ib", ("h100", "ib"), True),
        ("ib*2", ("ib",), True),
        ("(a100", ("a100",), None),  # unbalanced: not read here, Slurm decides
        ("a100&", ("a100",), None),
    ],
)
def test_constraint_matching(constraint: str, features: tuple[str, ...], expected: bool | None) -> None:
    assert nodes.matches(constraint, features) is expected
