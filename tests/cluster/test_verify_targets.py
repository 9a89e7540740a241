"""verify.targets: the GPU nodes a partition's step reaches, from sinfo and scontrol (pure): the partition Slurm
knows it by, the GRES type its options ask for, its constraint's features, the nodes left out by their state."""

from __future__ import annotations

from envsolver.cluster.model import Partition, SlurmOptions
from envsolver.cluster.parse import parse_scontrol_nodes, parse_sinfo
from envsolver.cluster.verify import targets

SINFO = """\
gpu|g1|up|idle|gpu:a100:2
gpu|g2|up|mixed|gpu:a100:2
gpu|g3|up|drained|gpu:h100:2
gpu|g4|up|idle|gpu:h100:2
gpu|c1|up|idle|(null)
other|g1|up|idle|gpu:a100:2
"""
SCONTROL = """\
NodeName=g1 Arch=x86_64 AvailableFeatures=ib,rack1 Gres=gpu:a100:2 State=IDLE Partitions=gpu,other
NodeName=g2 Arch=x86_64 AvailableFeatures=rack2 Gres=gpu:a100:2 State=MIXED Partitions=gpu
NodeName=g3 Arch=x86_64 AvailableFeatures=ib Gres=gpu:h100:2 State=IDLE+DRAIN Reason=bad fan [root@2026-12-01T18:00:00]
NodeName=g4 Arch=x86_64 AvailableFeatures=ib Gres=gpu:h100:2 State=IDLE Partitions=gpu
NodeName=c1 Arch=x86_64 AvailableFeatures=(null) Gres=(null) State=IDLE Partitions=gpu
"""
ROWS = parse_sinfo(SINFO)[0]
INFOS = parse_scontrol_nodes(SCONTROL)


def partition(name: str = "gpu", **slurm: str) -> Partition:
    return Partition(name, ("a100",), (), None, "linux-64", None, SlurmOptions(**slurm))  # type: ignore[arg-type]


def test_every_gpu_node_of_the_partition_less_the_drained_one() -> None:
    reach = targets(partition(), ROWS, INFOS)
    assert reach.usable == ("g1", "g2", "g4") and reach.none is None, reach
    (drained,) = reach.left_out
    assert drained.describe() == "g3 (IDLE+DRAIN: bad fan [root@2026-12-01T18:00:00])", drained


def test_the_gres_type_and_the_constraint_select_nodes() -> None:
    assert targets(partition(gres="gpu:a100:1"), ROWS, INFOS).usable == ("g1", "g2")
    assert targets(partition(gres="gpu:a100:1", constraint="ib"), ROWS, INFOS).usable == ("g1",)
    reach = targets(partition(gres="gpu:h100:1", constraint="rack2"), ROWS, INFOS)
    assert reach.usable == () and reach.none is not None and "--constraint=rack2" in reach.none, reach


def test_the_name_slurm_knows_and_partitions_it_does_not() -> None:
    assert targets(partition("renamed", partition="other"), ROWS, INFOS).usable == ("g1",)
    reach = targets(partition("ghost"), ROWS, INFOS)
    assert reach.none == "sinfo lists no partition 'ghost' (its partitions: gpu, other)", reach


def test_a_partition_whose_gpu_nodes_are_all_left_out() -> None:
    reach = targets(partition(gres="gpu:h100:1", constraint="ib"), ROWS, {**INFOS, "g4": INFOS["g3"]})
    assert reach.usable == () and reach.none is not None and "no node of it can run a step" in reach.none, reach
