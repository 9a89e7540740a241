"""The cluster file: the loader accepts a valid file and reports every problem of a bad one at once, each naming
the partition and the key; the writer is deterministic, round-trips and never overwrites a hand edit."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from envsolver.cluster import file as cluster_file
from envsolver.cluster.model import BY_HAND, Cluster, SlurmOptions
from envsolver.core.errors import BadInputError, split_fix
from envsolver.core.versions import MajorMinor, driver
from envsolver.kb import KnowledgeBase

VALID: dict[str, Any] = {
    "format": 1,
    "cluster": "lab",
    "partitions": [
        {
            "name": "v100",
            "gpus": ["v100"],
            "driver": "535.104.05",
            "platform": "linux-64",
            "glibc": "2.28",
            "slurm": {"gres": "gpu:v100:1", "account": "ml-team"},
            "provenance": {"gpus": "sinfo GRES gpu:v100:4 on node gpu01", "driver": "nvidia-smi on gpu01"},
        },
        {
            "name": "a100",
            "gpus": ["NVIDIA A100-SXM4-80GB"],
            "driver": "550.54.15",
            "platform": "linux-64",
            "glibc": "2.34",
            "slurm": {"partition": "gpu", "gpus": "a100:1", "constraint": "a100&[ib1|ib2]"},
        },
        {"name": "h100", "gpus": ["h100"], "driver": None, "platform": "linux-64", "glibc": None},
        {"name": "gh200", "gpus": ["gh200"], "driver": "570.133.20", "platform": "linux-aarch64", "glibc": "2.34"},
    ],
    "skipped": [{"name": "cpu", "reason": "no GPUs (sinfo GRES (null) on cpu01)"}],
}


def load_doc(doc: Any, kb: KnowledgeBase) -> Cluster:
    return cluster_file.parse(yaml.safe_dump(doc, sort_keys=False), kb, "cluster.yaml")


def test_a_valid_file_loads(kb: KnowledgeBase) -> None:
    cluster = load_doc(VALID, kb)
    assert cluster.name == "lab"
    assert [p.name for p in cluster.partitions] == ["v100", "a100", "h100", "gh200"]
    v100, a100, h100, gh200 = cluster.partitions
    assert [g.key for g in a100.gpus] == ["a100"] and a100.gpu_names == ("NVIDIA A100-SXM4-80GB",)
    assert v100.driver == driver("535.104.05") and v100.glibc == MajorMinor(2, 28)
    assert h100.driver is None and h100.glibc is None
    assert gh200.platform == "linux-aarch64"
    assert v100.slurm == SlurmOptions(gres="gpu:v100:1", account="ml-team")
    assert v100.srun_argv() == ("--partition=v100", "--gres=gpu:v100:1", "--account=ml-team")
    assert a100.srun_argv() == ("--partition=gpu", "--gpus=a100:1", "--constraint=a100&[ib1|ib2]")
    assert v100.origin("driver") == "nvidia-smi on gpu01" and v100.origin("glibc") == BY_HAND
    assert [s.name for s in cluster.skipped] == ["cpu"]
    assert list(cluster.by_platform()) == ["linux-64", "linux-aarch64"]


def _edit(path: tuple[Any, ...], value: Any, delete: bool = False) -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    target: Any = doc
    for step in path[:-1]:
        target = target[step]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


P = "partitions"
# (id, document, the words the one problem must hold)
BAD: list[tuple[str, Any, list[str]]] = [
    ("not-a-mapping", ["a"], ["must be a mapping"]),
    ("unknown-top-key", {**VALID, "nodes": 3}, ["unknown key(s) ['nodes']"]),
    ("format-2", {**VALID, "format": 2}, ["'format'", "1"]),
    ("no-cluster", _edit(("cluster",), None, delete=True), ["missing key 'cluster'"]),
    ("bad-cluster-name", {**VALID, "cluster": "my cluster"}, ["'cluster'", "'my cluster'"]),
    ("no-partitions", {**VALID, "partitions": []}, ["'partitions'", "at least one"]),
    ("partitions-not-list", {**VALID, "partitions": {"a": 1}}, ["'partitions'", "a list"]),
    ("partition-not-mapping", _edit((P, 1), "a100"), ["partitions[1]", "a mapping"]),
    ("missing-name", _edit((P, 1, "name"), None, delete=True), ["partitions[1]", "missing key 'name'"]),
    ("bad-name", _edit((P, 1, "name"), "a100;rm -rf"), ["partitions[1]", "'name'"]),
    ("duplicate-name", _edit((P, 1, "name"), "v100"), ["partition 'v100' (partitions[1])", "twice"]),
    ("unknown-gpu", _edit((P, 1, "gpus"), ["a100", "tesla"]), ["partition 'a100'", "'gpus'", "'tesla'", "closest"]),
    ("gpus-empty", _edit((P, 1, "gpus"), []), ["partition 'a100'", "'gpus'", "at least one"]),
    ("gpus-string", _edit((P, 1, "gpus"), "a100"), ["partition 'a100'", "'gpus'", "a list"]),
    ("driver-unquoted", _edit((P, 1, "driver"), 550.54), ["partition 'a100'", "'driver'", "quoted"]),
    ("driver-bad", _edit((P, 1, "driver"), "five"), ["partition 'a100'", "'driver'", "'five'"]),
    # Issue 22: the one driver grammar: a 3-digit branch (5.50 is a typo for 550, not a driver).
    ("driver-typo", _edit((P, 1, "driver"), "5.50"), ["partition 'a100'", "'driver'", "'5.50'", "3-digit branch"]),
    ("driver-missing", _edit((P, 1, "driver"), None, delete=True), ["partition 'a100'", "'driver'", "null"]),
    ("glibc-bad", _edit((P, 1, "glibc"), "2"), ["partition 'a100'", "'glibc'", "'2'"]),
    ("glibc-float", _edit((P, 1, "glibc"), 2.28), ["partition 'a100'", "'glibc'", "quoted"]),
    ("platform-bad", _edit((P, 1, "platform"), "win-64"), ["partition 'a100'", "'platform'", "linux-aarch64"]),
    ("platform-missing", _edit((P, 1, "platform"), None, delete=True), ["partition 'a100'", "'platform'"]),
    ("unknown-partition-key", _edit((P, 1, "nodes"), ["gpu01"]), ["partition 'a100'", "unknown key(s) ['nodes']"]),
    ("slurm-not-mapping", _edit((P, 1, "slurm"), "gpu"), ["partition 'a100'", "'slurm'", "a mapping"]),
    ("slurm-unknown-key", _edit((P, 1, "slurm", "qos"), "high"), ["partition 'a100'", "slurm", "['qos']"]),
    ("gres-and-gpus", _edit((P, 1, "slurm", "gres"), "gpu:1"), ["partition 'a100'", "'gres'", "'gpus'"]),
    ("gres-shell", _edit((P, 0, "slurm", "gres"), "gpu:1;id"), ["partition 'v100'", "slurm.gres", "'gpu:1;id'"]),
    ("gpus-bad", _edit((P, 1, "slurm", "gpus"), "0"), ["partition 'a100'", "slurm.gpus", "'0'"]),
    ("account-bad", _edit((P, 0, "slurm", "account"), "$(id)"), ["partition 'v100'", "slurm.account", "'$(id)'"]),
    ("constraint-bad", _edit((P, 1, "slurm", "constraint"), "a100&"), ["slurm.constraint", "'a100&'"]),
    ("constraint-open", _edit((P, 1, "slurm", "constraint"), "[a|b"), ["slurm.constraint", "'[a|b'"]),
    ("partition-bad", _edit((P, 1, "slurm", "partition"), "a,b"), ["slurm.partition", "'a,b'"]),
    ("provenance-key", _edit((P, 0, "provenance", "nodes"), "x"), ["partition 'v100'", "provenance", "'nodes'"]),
    ("provenance-value", _edit((P, 0, "provenance", "gpus"), 3), ["partition 'v100'", "provenance.gpus"]),
    ("provenance-newline", _edit((P, 0, "provenance", "gpus"), "a\nb"), ["provenance.gpus", "one line"]),
    ("skipped-bad", {**VALID, "skipped": [{"name": "cpu"}]}, ["skipped[0]", "missing key 'reason'"]),
]


@pytest.mark.parametrize(("doc", "words"), [(d, w) for _, d, w in BAD], ids=[i for i, _, _ in BAD])
def test_each_problem_is_named_with_its_partition_and_key(doc: Any, words: list[str], kb: KnowledgeBase) -> None:
    with pytest.raises(BadInputError) as info:
        load_doc(doc, kb)
    text = str(info.value)
    for word in words:
        assert word in text, text
    message, fix = split_fix(text)
    assert fix is not None and "envsolver cluster init" in fix, text
    for word in words:
        assert word in message, f"{word!r} was taken into the fix: {fix}"


def test_every_problem_is_reported_at_once(kb: KnowledgeBase) -> None:
    doc = copy.deepcopy(VALID)
    doc["partitions"][0]["driver"] = "x"
    doc["partitions"][1]["gpus"] = ["nope"]
    doc["partitions"][2]["slurm"] = {"gres": "gpu:1", "gpus": "1"}
    doc["partitions"][3]["glibc"] = "two"
    with pytest.raises(BadInputError) as info:
        load_doc(doc, kb)
    text = str(info.value)
    assert "has 4 problem(s)" in text
    for where in ("partition 'v100'", "partition 'a100'", "partition 'h100'", "partition 'gh200'"):
        assert where in text


@pytest.mark.parametrize(
    "text",
    ["", "a: [", "\xff", "a: &x [*x]", "- 1\n- 2\n"],
    ids=["empty", "bad-yaml", "not-yaml-mapping-char", "self-alias", "a-list"],
)
def test_unreadable_documents_are_refused_with_a_fix(text: str, kb: KnowledgeBase) -> None:
    with pytest.raises(BadInputError) as info:
        cluster_file.parse(text, kb, "cluster.yaml")
    assert split_fix(str(info.value))[1] is not None


def test_load_reports_a_missing_file_with_a_fix(tmp_path: Path, kb: KnowledgeBase) -> None:
    with pytest.raises(BadInputError) as info:
        cluster_file.load(tmp_path / "nope.yaml", kb)
    assert "nope.yaml" in str(info.value)
    assert "envsolver cluster init" in (split_fix(str(info.value))[1] or "")


def test_load_refuses_a_huge_file(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("#" * (cluster_file.MAX_BYTES + 10))
    with pytest.raises(BadInputError, match="larger than"):
        cluster_file.load(path, kb)


def test_render_round_trips_and_is_deterministic(kb: KnowledgeBase) -> None:
    cluster = load_doc(VALID, kb)
    text = cluster_file.render(cluster, "envsolver cluster init --out cluster.yaml")
    assert text == cluster_file.render(load_doc(VALID, kb), "envsolver cluster init --out cluster.yaml")
    assert text.startswith("# envsolver cluster file")
    again = cluster_file.parse(text, kb, "again.yaml")
    assert again == cluster
    assert yaml.safe_load(text)["partitions"][0]["driver"] == "535.104.05"


def test_write_never_overwrites_a_hand_edit(tmp_path: Path, kb: KnowledgeBase) -> None:
    cluster = load_doc(VALID, kb)
    path = tmp_path / "cluster.yaml"
    assert cluster_file.write(cluster, path, "envsolver cluster init").value == "written"
    assert cluster_file.write(cluster, path, "envsolver cluster init").value == "unchanged"
    assert cluster_file.load(path, kb) == cluster
    path.write_text(path.read_text().replace("535.104.05", "535.129.03"))
    with pytest.raises(BadInputError, match="--force"):
        cluster_file.write(cluster, path, "envsolver cluster init")
    assert "535.129.03" in path.read_text()
    assert cluster_file.write(cluster, path, "envsolver cluster init", force=True).value == "written"
    assert "535.104.05" in path.read_text()


def test_a_hand_written_file_without_header_loads(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster: hpc\npartitions:\n  - name: gpu\n    gpus: [a100, 'NVIDIA H100 80GB HBM3']\n"
        "    driver: '550.54.15'\n    platform: linux-64\n    glibc: null\n"
    )
    cluster = cluster_file.load(path, kb)
    (gpu,) = cluster.partitions
    assert [g.key for g in gpu.gpus] == ["a100", "h100"]
    assert gpu.ccs == (MajorMinor(8, 0), MajorMinor(9, 0))
    assert gpu.origin("gpus") == BY_HAND and gpu.srun_argv() == ("--partition=gpu",)


def test_the_documented_example_loads(kb: KnowledgeBase) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text(encoding="utf-8")
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    cluster = cluster_file.parse(example, kb, "docs/cluster.md")
    assert [(p.name, p.platform) for p in cluster.partitions] == [
        ("v100", "linux-64"),
        ("a100", "linux-64"),
        ("h100", "linux-64"),
        ("gh200", "linux-aarch64"),
    ]
    assert sorted({str(cc) for p in cluster.partitions for cc in p.ccs}) == ["7.0", "8.0", "9.0"]
