"""The Slurm, nvidia-smi and ldd parsers on real captured output (tests/data/slurm/, see its README)."""

from __future__ import annotations

import re

import pytest

from envsolver.cluster import parse
from envsolver.cluster.parse import Gres
from envsolver.core.versions import MajorMinor, driver
from tests.conftest import DATA

SLURM = DATA / "slurm"


def read(name: str) -> str:
    return (SLURM / name).read_text(encoding="utf-8")


def test_sinfo_rows_of_the_lab() -> None:
    rows, bad = parse.parse_sinfo(read("sinfo-node.txt"))
    assert bad == ()
    table = [(r.partition, r.node, r.available, r.state, r.gres_text) for r in rows]
    assert table == [
        ("cpu", "cpu01", "up", "idle", "(null)"),
        ("v100", "gpu01", "up", "idle", "gpu:v100:2"),
        ("a100", "gpu02", "up", "idle", "gpu:a100:2(S:0)"),
        ("mixed", "gpu02", "up", "idle", "gpu:a100:2(S:0)"),
        ("h100", "gpu03", "up", "idle", "gpu:h100:2"),
        ("mixed", "gpu03", "up", "idle", "gpu:h100:2"),
        ("tesla", "gpu04", "up", "idle", "gpu:tesla:2"),
    ]
    assert rows[0].gpus == ()
    assert rows[2].gpus == (Gres("gpu", "a100", 2, "gpu:a100:2(S:0)"),)


def test_sinfo_rows_with_several_types_untyped_and_autodetected_names() -> None:
    rows, bad = parse.parse_sinfo(read("sinfo-node-variants.txt"))
    assert bad == ()
    by_node = {r.node: [(g.type, g.count) for g in r.gpus] for r in rows}
    assert by_node == {
        "gn01": [("a100", 1), ("h100", 1)],
        "gn02": [(None, 4)],
        "gn03": [("nvidia_h100_80gb_hbm3", 2), ("1g.10gb", 2)],
    }


# Real GRES strings: the lab's captures, and forms that Slurm prints elsewhere (gres.conf(5) and sinfo(1) describe
# the `(S:...)` socket and `(IDX:...)` index details, `no_consume` and K/M/G count suffixes).
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(null)", []),
        ("", []),
        ("gpu:v100:2", [("gpu", "v100", 2)]),
        ("gpu:a100:2(S:0)", [("gpu", "a100", 2)]),
        ("gpu:a100:1(S:0),gpu:h100:1(S:0)", [("gpu", "a100", 1), ("gpu", "h100", 1)]),
        ("gpu:4", [("gpu", None, 4)]),
        ("gpu:8(S:0-1)", [("gpu", None, 8)]),
        ("gpu:a100:2(S:2,5)", [("gpu", "a100", 2)]),
        ("gpu:(null):8(IDX:0-7)", [("gpu", None, 8)]),
        ("gpu:a100:no_consume:4", [("gpu", "a100", 4)]),
        ("gpu:2K(S:0-2023)", [("gpu", None, 2048)]),
        ("gpu:nvidia_h100_80gb_hbm3:2,gpu:1g.10gb:2", [("gpu", "nvidia_h100_80gb_hbm3", 2), ("gpu", "1g.10gb", 2)]),
        ("gpu:a100:4,nvme:1", [("gpu", "a100", 4), ("nvme", None, 1)]),
        ("gpu", []),
        ("gpu:a100", []),
        ("gpu:a100:x", []),
    ],
)
def test_gres(text: str, expected: list[tuple[str, str | None, int]]) -> None:
    assert [(g.name, g.type, g.count) for g in parse.parse_gres(text)] == expected


def test_sinfo_lines_of_another_layout_are_returned_as_bad() -> None:
    rows, bad = parse.parse_sinfo("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\nv100|gpu01|up|idle|gpu:v100:2\n")
    assert [r.node for r in rows] == ["gpu01"]
    assert bad == ("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",)


def test_scontrol_nodes_of_the_lab() -> None:
    nodes = parse.parse_scontrol_nodes(read("scontrol-show-node-oneliner.txt"))
    assert sorted(nodes) == ["cpu01", "gpu01", "gpu02", "gpu03", "gpu04"]
    gpu02 = nodes["gpu02"]
    assert gpu02.arch == "x86_64"
    assert gpu02.partitions == ("a100", "mixed")
    assert gpu02.state == "IDLE"
    assert [(g.type, g.count) for g in gpu02.gres] == [("a100", 2)]
    assert gpu02.os == "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0"  # a value with spaces
    assert nodes["cpu01"].gres == ()


def test_scontrol_nodes_variants() -> None:
    nodes = parse.parse_scontrol_nodes(read("scontrol-show-node-oneliner-variants.txt"))
    assert [(g.type, g.count) for g in nodes["gn01"].gres] == [("a100", 1), ("h100", 1)]
    assert nodes["gn01"].partitions == ("multi", "all")


def test_key_values_need_a_key_first() -> None:
    assert parse.parse_key_values("junk NodeName=x") == {}
    assert parse.parse_key_values("NodeName=x Reason=Not responding [root@2024] Arch=y") == {
        "NodeName": "x",
        "Reason": "Not responding [root@2024]",
        "Arch": "y",
    }


def test_config_cluster_name() -> None:
    assert parse.parse_config(read("scontrol-show-config.txt"))["ClusterName"] == "lab"


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("nvidia-smi-h200-query.txt", [("NVIDIA H200", "580.159.04", MajorMinor(9, 0))]),
        ("nvidia-smi-h200-query-header.txt", [("NVIDIA H200", "580.159.04", MajorMinor(9, 0))]),
        ("nvidia-smi-h200-bad-field.txt", []),
    ],
)
def test_smi_rows(name: str, rows: list[tuple[str, str, MajorMinor]]) -> None:
    got = parse.parse_smi_rows(read(name))
    assert [(r.name, r.driver.text, r.compute_cap) for r in got] == rows


def test_smi_rows_skip_na_and_error_lines() -> None:
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\nNVIDIA H200, [N/A], 9.0\n"
    )
    assert parse.parse_smi_rows(text) == ()


# Issue 24: the probe asks for name,pci.device_id,compute_cap,driver_version with a header (SMI_FIELDS), and asks
# again without a field the driver refuses. The H200's answer (its row as the H200 printed it, the header as
# nvidia-smi-h200-query-header.txt shows nvidia-smi prints one); an R470 refusing compute_cap, then its answer
# without it (the refusal's text as nvidia-smi-h200-bad-field.txt); a driver printing [N/A].
H200_ROW = "NVIDIA H200, 0x233510DE, 9.0, 580.159.04"
REFUSED = 'Field "compute_cap" is not a valid field to query.\n\n'


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        (
            f"name, pci.device_id, compute_cap, driver_version\n{H200_ROW}\n",
            [("NVIDIA H200", "580.159.04", MajorMinor(9, 0), "0x233510DE")],
        ),
        (
            f"{REFUSED}name, pci.device_id, driver_version\nTesla T4, 0x1eb810de, 470.182.03\n",
            [("Tesla T4", "470.182.03", None, "0x1EB810DE")],
        ),
        (
            "name, pci.device_id, compute_cap, driver_version\nNVIDIA Mystery, [N/A], [N/A], 550.54.15\n",
            [("NVIDIA Mystery", "550.54.15", None, None)],
        ),
        (f"{REFUSED}{REFUSED}name, driver_version\nTesla K80, 470.182.03\n", [("Tesla K80", "470.182.03", None, None)]),
        # every query refused: no header, so the refusals are read as the former query's rows, and are none
        (REFUSED * 3, []),
        # a header the probe does not ask with is not one: its rows are not read in another query's order
        ("compute_cap, name, driver_version\n9.0, NVIDIA H200, 580.159.04\n", []),
    ],
    ids=["h200", "refused-compute-cap", "n-a", "refused-two", "refused-all", "other-header"],
)
def test_smi_rows_of_each_query(text: str, rows: list[tuple[str, str, MajorMinor | None, str | None]]) -> None:
    got = parse.parse_smi_rows(text)
    assert [(r.name, r.driver.text, r.compute_cap, r.device_id) for r in got] == rows, got


def test_the_probe_asks_with_detects_field_chain() -> None:
    """One home for the field chain (detect.SMI_FIELDS); its words are plain field names (the script is fixed)."""
    from envsolver.cluster.slurm import PROBE_SCRIPT, SMI_TRIES
    from envsolver.resolve.detect import SMI_FIELDS

    assert SMI_TRIES.split() == [",".join(fields) for fields in SMI_FIELDS]
    assert re.fullmatch(r"[a-z_.,]+( [a-z_.,]+)*", SMI_TRIES), SMI_TRIES
    assert f"for fields in {SMI_TRIES}; do" in PROBE_SCRIPT, PROBE_SCRIPT


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("ldd-version-ubuntu-24.04-h200.txt", MajorMinor(2, 39)),
        ("ldd-version-gnu-libc-2.25.txt", MajorMinor(2, 25)),
        ("ldd-version-gentoo-2.43.txt", MajorMinor(2, 43)),
        ("ldd-version-ubuntu-2.31-first-line.txt", MajorMinor(2, 31)),
        ("ldd-version-musl-1.1.15.txt", None),
    ],
)
def test_ldd_version(name: str, version: MajorMinor | None) -> None:
    assert parse.parse_ldd_version(read(name)) == version


def test_probe_of_a_lab_gpu_node() -> None:
    probe = parse.parse_probe(read("probe-a100-gpu02.txt"))
    assert probe.complete and probe.node == "gpu02"
    assert [(g.name, g.driver, g.compute_cap) for g in probe.gpus] == [
        ("NVIDIA A100-SXM4-80GB", driver("550.54.15"), MajorMinor(8, 0))
    ] * 2
    assert probe.smi_exit == 0 and probe.smi_error is None
    assert probe.glibc == MajorMinor(2, 36)
    assert probe.machine == "x86_64"


def test_probe_of_the_h200_machine() -> None:
    probe = parse.parse_probe(read("probe-h200.txt"))
    assert probe.complete and probe.node == "vm"
    assert [(g.name, str(g.driver), str(g.compute_cap)) for g in probe.gpus] == [("NVIDIA H200", "580.159.04", "9.0")]
    assert probe.glibc == MajorMinor(2, 39) and probe.machine == "x86_64"


def test_probe_of_a_node_without_nvidia_smi() -> None:
    probe = parse.parse_probe(read("probe-cpu-cpu01.txt"))
    assert probe.gpus == () and probe.smi_exit == 127
    assert probe.smi_error == "nvidia-smi is not installed on the node (exit 127)"
    assert probe.glibc == MajorMinor(2, 36)


def test_a_cut_probe_is_incomplete() -> None:
    text = read("probe-a100-gpu02.txt")
    probe = parse.parse_probe(text[: text.index("== envsolver-probe: ldd")])
    assert not probe.complete and probe.glibc is None and probe.machine is None
    assert len(probe.gpus) == 2
