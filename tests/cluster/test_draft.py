"""draft.py: Slurm's facts, probe results and --map values -> a Cluster with provenance. Pure; fed with the
outputs captured from the lab (tests/data/slurm/)."""

from __future__ import annotations

import pytest

from envsolver.cluster import draft, parse
from envsolver.cluster.draft import Facts, Survey
from envsolver.cluster.model import ASSUMED
from envsolver.core.errors import BadInputError, UnknownGpuError, split_fix
from envsolver.core.versions import MajorMinor, driver
from envsolver.kb import KnowledgeBase
from tests.conftest import DATA

SLURM = DATA / "slurm"
COMMAND = ("envsolver", "cluster", "init", "--no-probe")


def read(name: str) -> str:
    return (SLURM / name).read_text(encoding="utf-8")


def lab_facts(nodes: str = "scontrol-show-node-oneliner.txt", sinfo: str = "sinfo-node.txt") -> Facts:
    return draft.facts(read(sinfo), read(nodes), read("scontrol-show-config.txt"))


def lab_probes() -> dict[tuple[str, str | None], parse.Probe | str]:
    probes: dict[tuple[str, str | None], parse.Probe | str] = {
        ("v100", "v100"): parse.parse_probe(read("probe-v100-gpu01.txt")),
        ("a100", "a100"): parse.parse_probe(read("probe-a100-gpu02.txt")),
        ("h100", "h100"): parse.parse_probe(read("probe-h100-gpu03.txt")),
        ("tesla", "tesla"): parse.parse_probe(read("probe-tesla-gpu04.txt")),
        ("mixed", "a100"): parse.parse_probe(read("probe-a100-gpu02.txt")),
        ("mixed", "h100"): parse.parse_probe(read("probe-mixed-h100-gpu03.txt")),
    }
    return probes


def test_survey_of_the_lab() -> None:
    survey = draft.survey(lab_facts())
    assert survey.cluster == "lab"
    assert [p.name for p in survey.partitions] == ["a100", "h100", "mixed", "tesla", "v100"]
    mixed = survey.partition("mixed")
    assert [(g.gres_type, g.nodes) for g in mixed.groups] == [("a100", ("gpu02",)), ("h100", ("gpu03",))]
    assert [g.options.argv("mixed") for g in mixed.groups] == [
        ("--partition=mixed", "--gres=gpu:a100:1"),
        ("--partition=mixed", "--gres=gpu:h100:1"),
    ]
    assert [(s.name, s.reason) for s in survey.skipped] == [("cpu", "no GPUs: sinfo GRES (null) on cpu01")]


def test_survey_keeps_only_the_partitions_asked_for() -> None:
    survey = draft.survey(lab_facts(), only=("tesla", "a100"))
    assert [p.name for p in survey.partitions] == ["a100", "tesla"]
    assert [s.name for s in survey.skipped] == ["cpu", "h100", "mixed", "v100"]
    assert all("--partition" in s.reason for s in survey.skipped[1:])


def test_the_draft_does_not_depend_on_sinfo_s_order(kb: KnowledgeBase) -> None:
    """sinfo orders its rows differently as nodes change state (seen in the lab: `mixed` before `a100` while
    gpu02 finished a step); the same cluster must give the same file."""
    from envsolver.cluster import file as cluster_file

    lines = read("sinfo-node.txt").splitlines()
    texts = []
    for order in (lines, lines[::-1], lines[3:] + lines[:3]):
        found = draft.facts("\n".join(order), read("scontrol-show-node-oneliner.txt"), read("scontrol-show-config.txt"))
        cluster = draft.build(draft.survey(found, only=("v100",)), lab_probes(), {}, kb, COMMAND).cluster
        texts.append(cluster_file.render(cluster, "envsolver cluster init"))
    assert texts[0] == texts[1] == texts[2]


def test_survey_refuses_an_unknown_partition_with_the_known_ones() -> None:
    with pytest.raises(BadInputError) as info:
        draft.survey(lab_facts(), only=("a100", "b200"))
    message, fix = split_fix(str(info.value))
    assert "'b200'" in message and "a100, cpu, h100, mixed, tesla, v100" in message
    assert fix is not None and "--partition" in fix


def test_survey_with_no_gpu_partition_is_refused() -> None:
    with pytest.raises(BadInputError, match="no partition with GPUs"):
        draft.survey(lab_facts(), only=("cpu",))


def test_build_from_every_probe(kb: KnowledgeBase) -> None:
    result = draft.build(draft.survey(lab_facts()), lab_probes(), {}, kb, COMMAND)
    cluster = result.cluster
    table = {p.name: ([g.key for g in p.gpus], str(p.driver), p.platform, str(p.glibc)) for p in cluster.partitions}
    assert table == {
        "v100": (["v100"], "535.104.05", "linux-64", "2.36"),
        "a100": (["a100"], "550.54.15", "linux-64", "2.36"),
        "mixed": (["a100", "h100"], "550.54.15", "linux-64", "2.36"),
        "h100": (["h100"], "570.133.20", "linux-64", "2.36"),
        "tesla": (["v100"], "535.104.05", "linux-64", "2.36"),
    }
    a100 = cluster.partition("a100")
    assert a100 is not None
    assert a100.slurm.gres == "gpu:a100:1" and a100.slurm.partition is None
    assert "sinfo GRES gpu:a100:2(S:0) on gpu02" in a100.origin("gpus")
    assert "nvidia-smi on gpu02 via srun --partition=a100 --gres=gpu:a100:1" in a100.origin("driver")
    assert "ldd --version on gpu02" in a100.origin("glibc")
    assert "uname -m on gpu02: x86_64" in a100.origin("platform")
    tesla = cluster.partition("tesla")
    assert tesla is not None and "Tesla V100-SXM2-32GB" in tesla.origin("gpus")
    mixed = cluster.partition("mixed")
    assert mixed is not None and mixed.slurm.gres == "gpu:1"
    assert "570.133.20" in mixed.origin("driver") and "oldest" in mixed.origin("driver")
    assert any("mixed" in n and "differ" in n and "gpu03" in n for n in result.notes), result.notes


def test_build_without_probes_needs_a_map_for_a_site_type(kb: KnowledgeBase) -> None:
    with pytest.raises(BadInputError) as info:
        draft.build(draft.survey(lab_facts()), None, {}, kb, COMMAND)
    message, fix = split_fix(str(info.value))
    assert "'tesla'" in message and "gpu04" in message
    assert fix is not None and "`envsolver cluster init --no-probe --map tesla=GPU`" in fix


def test_build_without_probes_with_a_map(kb: KnowledgeBase) -> None:
    maps = draft.parse_maps(["tesla=v100"], kb)
    result = draft.build(draft.survey(lab_facts()), None, maps, kb, COMMAND)
    tesla = result.cluster.partition("tesla")
    assert tesla is not None and [g.key for g in tesla.gpus] == ["v100"]
    assert "--map tesla=v100" in tesla.origin("gpus")
    assert tesla.driver is None and tesla.glibc is None
    assert "not probed (--no-probe)" in tesla.origin("driver") and ASSUMED["driver"] in tesla.origin("driver")
    assert ASSUMED["glibc"] in tesla.origin("glibc")
    assert tesla.platform == "linux-64" and "scontrol show node gpu04: Arch=x86_64" in tesla.origin("platform")


def test_a_map_names_a_gpu_the_kb_knows(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError):
        draft.parse_maps(["tesla=v1000"], kb)
    for bad in ("tesla", "=v100", "te sla=v100", "tesla=v100=x"):
        with pytest.raises(BadInputError) as info:
            draft.parse_maps([bad], kb)
        assert "--map TYPE=GPU" in str(info.value)


def test_a_map_for_a_type_no_node_has_is_refused(kb: KnowledgeBase) -> None:
    maps = draft.parse_maps(["tesla=v100", "tesl=v100"], kb)
    with pytest.raises(BadInputError) as info:
        draft.build(draft.survey(lab_facts()), None, maps, kb, COMMAND)
    assert "'tesl'" in str(info.value) and "tesla" in str(info.value)


def test_a_map_wins_over_the_type_name_and_the_probe_wins_over_both(kb: KnowledgeBase) -> None:
    maps = draft.parse_maps(["a100=h100"], kb)
    survey = draft.survey(lab_facts(), only=("a100",))
    no_probe = draft.build(survey, None, maps, kb, COMMAND).cluster.partitions[0]
    assert [g.key for g in no_probe.gpus] == ["h100"]
    probed = draft.build(survey, lab_probes(), maps, kb, COMMAND)
    assert [g.key for g in probed.cluster.partitions[0].gpus] == ["a100"]
    assert any("--map a100=h100" in n and "NVIDIA A100-SXM4-80GB" in n for n in probed.notes), probed.notes


def test_a_failed_probe_leaves_the_facts_unknown_and_says_why(kb: KnowledgeBase) -> None:
    probes = lab_probes()
    probes[("h100", "h100")] = "srun refused the probe step (Requested nodes are busy)"
    result = draft.build(draft.survey(lab_facts()), probes, {}, kb, COMMAND)
    h100 = result.cluster.partition("h100")
    assert h100 is not None and h100.driver is None and h100.glibc is None
    assert "Requested nodes are busy" in h100.origin("driver") and ASSUMED["driver"] in h100.origin("driver")
    assert [g.key for g in h100.gpus] == ["h100"]  # from the GRES type
    assert any("h100" in n and "probe" in n for n in result.notes)


def test_a_probe_of_a_node_without_nvidia_smi(kb: KnowledgeBase) -> None:
    probes = lab_probes()
    probes[("v100", "v100")] = parse.parse_probe(read("probe-cpu-cpu01.txt"))
    result = draft.build(draft.survey(lab_facts()), probes, {}, kb, COMMAND)
    v100 = result.cluster.partition("v100")
    assert v100 is not None and v100.driver is None
    assert "nvidia-smi is not installed" in v100.origin("driver")
    assert v100.glibc == MajorMinor(2, 36)


def test_untyped_gres_without_a_probe_is_refused_with_a_fix(kb: KnowledgeBase) -> None:
    facts = lab_facts("scontrol-show-node-oneliner-variants.txt", "sinfo-node-variants.txt")
    survey = draft.survey(facts, only=("untyped",))
    with pytest.raises(BadInputError) as info:
        draft.build(survey, None, {}, kb, ("envsolver", "cluster", "init", "--partition", "untyped", "--no-probe"))
    message, fix = split_fix(str(info.value))
    assert "gpu:4" in message and "without a type" in message
    assert fix is not None and "`envsolver cluster init --partition untyped`" in fix


def test_autodetected_type_names_resolve_and_mig_profiles_need_a_probe(kb: KnowledgeBase) -> None:
    facts = lab_facts("scontrol-show-node-oneliner-variants.txt", "sinfo-node-variants.txt")
    survey = draft.survey(facts, only=("site",))
    with pytest.raises(BadInputError) as info:
        draft.build(survey, None, {}, kb, COMMAND)
    assert "type '1g.10gb'" in str(info.value) and "type 'nvidia_h100_80gb_hbm3'" not in str(info.value)
    maps = draft.parse_maps(["1g.10gb=h100"], kb)
    site = draft.build(survey, None, maps, kb, COMMAND).cluster.partitions[0]
    assert [g.key for g in site.gpus] == ["h100"]


def test_a_partition_mixing_platforms_is_refused(kb: KnowledgeBase) -> None:
    text = read("scontrol-show-node-oneliner.txt").replace(
        "NodeName=gpu03 Arch=x86_64", "NodeName=gpu03 Arch=aarch64"
    )  # the lab has one host; the second architecture is written in
    facts = draft.facts(read("sinfo-node.txt"), text, read("scontrol-show-config.txt"))
    with pytest.raises(BadInputError) as info:
        draft.build(draft.survey(facts), None, draft.parse_maps(["tesla=v100"], kb), kb, COMMAND)
    message, fix = split_fix(str(info.value))
    assert "'mixed'" in message and "aarch64" in message and "x86_64" in message
    assert fix is not None


def test_every_drafted_cluster_survives_the_file_round_trip(kb: KnowledgeBase) -> None:
    from envsolver.cluster import file as cluster_file

    for probes in (lab_probes(), None):
        maps = draft.parse_maps(["tesla=v100"], kb)
        cluster = draft.build(draft.survey(lab_facts()), probes, maps, kb, COMMAND).cluster
        assert cluster_file.parse(cluster_file.render(cluster, "envsolver cluster init"), kb, "c.yaml") == cluster


def test_driver_of_a_partition_is_the_oldest(kb: KnowledgeBase) -> None:
    result = draft.build(draft.survey(lab_facts(), only=("mixed",)), lab_probes(), {}, kb, COMMAND)
    assert result.cluster.partitions[0].driver == driver("550.54.15")


def test_survey_type() -> None:
    assert isinstance(draft.survey(lab_facts()), Survey)


def test_every_nodes_probe_counts_and_the_oldest_driver_names_its_node(kb: KnowledgeBase) -> None:
    """A group's step reaches every usable node: a second A100 node (gpu02's capture, renamed gpu09, its driver
    470.182.03) makes the partition's driver 470.182.03, its provenance naming gpu09 and gpu02."""
    probes: dict[tuple[str, str | None], draft.ProbeResult] = dict(lab_probes())
    older = read("probe-a100-gpu02.txt").replace("gpu02", "gpu09").replace("550.54.15", "470.182.03")
    probes[("a100", "a100")] = (parse.parse_probe(read("probe-a100-gpu02.txt")), parse.parse_probe(older))
    result = draft.build(draft.survey(lab_facts(), only=("a100",)), probes, {}, kb, COMMAND)
    (a100,) = result.cluster.partitions
    assert a100.driver == driver("470.182.03"), a100.provenance
    assert "470.182.03 on gpu09; 550.54.15 on gpu02" in a100.origin("driver"), a100.provenance
    assert any("drivers 550.54.15 on gpu02, 470.182.03 on gpu09" in n for n in result.notes), result.notes


def test_a_node_whose_nvidia_smi_fails_is_named_in_a_note(kb: KnowledgeBase) -> None:
    probes: dict[tuple[str, str | None], draft.ProbeResult] = dict(lab_probes())
    no_smi = parse.parse_probe(read("probe-cpu-cpu01.txt"))
    probes[("a100", "a100")] = (parse.parse_probe(read("probe-a100-gpu02.txt")), no_smi)
    result = draft.build(draft.survey(lab_facts(), only=("a100",)), probes, {}, kb, COMMAND)
    (a100,) = result.cluster.partitions
    assert a100.driver == driver("550.54.15"), a100.provenance
    assert any("on cpu01" in n and "the oldest of the other nodes only" in n for n in result.notes), result.notes


@pytest.mark.parametrize(
    ("name", "cc", "key"),
    [
        # issue 24: a name the KB lacks but the driver's table names (device 0x2233): its chip's CC
        ("NVIDIA RTX A5500", "8.6", "0x2233"),
        # a name nobody knows: the GRES type's GPU (a100) where its CC is the one the node reports
        ("NVIDIA A100 Mystery Edition", "8.0", "a100"),
        # ... and the CC the node reports where the GRES type's GPU has another
        ("NVIDIA Mystery 9000", "8.9", "sm_89"),
    ],
)
def test_a_probed_gpu_the_kb_lacks_is_planned_by_what_the_node_reports(
    kb: KnowledgeBase, name: str, cc: str, key: str
) -> None:
    probes: dict[tuple[str, str | None], draft.ProbeResult] = dict(lab_probes())
    text = read("probe-a100-gpu02.txt").replace("NVIDIA A100-SXM4-80GB, 550.54.15, 8.0", f"{name}, 550.54.15, {cc}")
    probes[("a100", "a100")] = parse.parse_probe(text)
    result = draft.build(draft.survey(lab_facts(), only=("a100",)), probes, {}, kb, COMMAND)
    (a100,) = result.cluster.partitions
    assert [(g.key, str(g.compute_capability)) for g in a100.gpus] == [(key, cc)], (a100.gpus, result.notes)
    assert name in a100.origin("gpus"), a100.provenance


def test_a_probed_gpu_known_by_nothing_is_named_with_what_it_reported(kb: KnowledgeBase) -> None:
    probes: dict[tuple[str, str | None], draft.ProbeResult] = dict(lab_probes())
    text = read("probe-a100-gpu02.txt").replace(
        "NVIDIA A100-SXM4-80GB, 550.54.15, 8.0",
        "name, pci.device_id, compute_cap, driver_version\nNVIDIA Mystery 9000, 0x000110DE, [N/A], 550.54.15",
    )
    probes[("a100", "a100")] = parse.parse_probe(text)
    result = draft.build(draft.survey(lab_facts(), only=("a100",)), probes, {}, kb, COMMAND)
    (a100,) = result.cluster.partitions  # the GRES type's a100: nothing the node reported says otherwise
    assert [g.key for g in a100.gpus] == ["a100"], (a100.gpus, result.notes)
    said = "'NVIDIA Mystery 9000' (PCI device ID 0x000110DE; no compute capability reported)"
    assert any(said in n and "which envsolver lacks" in n for n in result.notes), result.notes


def test_a_cluster_of_gpus_known_by_id_or_cc_survives_the_file_round_trip(kb: KnowledgeBase) -> None:
    from envsolver.cluster import file as cluster_file

    for name, cc in (("NVIDIA RTX A5500", "8.6"), ("NVIDIA Mystery 9000", "8.9")):
        probes: dict[tuple[str, str | None], draft.ProbeResult] = dict(lab_probes())
        text = read("probe-a100-gpu02.txt").replace("NVIDIA A100-SXM4-80GB, 550.54.15, 8.0", f"{name}, 550.54.15, {cc}")
        probes[("a100", "a100")] = parse.parse_probe(text)
        cluster = draft.build(draft.survey(lab_facts()), probes, {}, kb, COMMAND).cluster
        assert cluster_file.parse(cluster_file.render(cluster, "envsolver cluster init"), kb, "c.yaml") == cluster
