"""`envsolver cluster init` against the real Slurm lab: the file it writes loads, with the nodes' facts and where
each came from; --no-probe, --map, --partition, --json; refusals whose fixes work; Slurm failures exit 2."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.core.versions import MajorMinor, driver
from envsolver.kb import KnowledgeBase
from tests.hostile import HOSTILE, assert_shown
from tests.slurmlab import V100, Gpu, SlurmLab

SUGGESTION = re.compile(r"`(envsolver cluster [^`]*)`")


def init(tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["cluster", "init", "--out", str(tmp_path / "cluster.yaml"), *args])


def host_glibc() -> MajorMinor:
    """The lab's nodes run on this host: their glibc is this machine's."""
    first = subprocess.run(["ldd", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    major, minor = first.rsplit(" ", 1)[1].split(".")[:2]
    return MajorMinor(int(major), int(minor))


def test_init_probes_every_gpu_partition(lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase) -> None:
    result = init(tmp_path)
    assert result.exit_code == 0, result.output
    cluster = cluster_file.load(tmp_path / "cluster.yaml", kb)
    assert cluster.name == "lab"
    table = {p.name: ([g.key for g in p.gpus], str(p.driver), p.platform) for p in cluster.partitions}
    assert table == {
        "v100": (["v100"], "535.104.05", "linux-64"),
        "a100": (["a100"], "550.54.15", "linux-64"),
        "mixed": (["a100", "h100"], "550.54.15", "linux-64"),
        "h100": (["h100"], "570.133.20", "linux-64"),
        "pair": (["a100"], "550.54.15", "linux-64"),
        "tesla": (["v100"], "535.104.05", "linux-64"),  # the GRES type says 'tesla'; nvidia-smi names the V100
    }, result.output
    assert {p.glibc for p in cluster.partitions} == {host_glibc()}
    a100 = cluster.partition("a100")
    assert a100 is not None
    assert a100.origin("driver") == "nvidia-smi on gpu02 via srun --partition=a100 --gres=gpu:a100:1"
    assert [s.name for s in cluster.skipped] == ["cpu"]
    pair = cluster.partition("pair")
    assert pair is not None and pair.origin("driver").startswith("nvidia-smi on gpu05, gpu06 via"), pair.provenance
    for name in ("v100", "a100", "mixed", "h100", "tesla"):
        assert f"probing {name}" in result.stderr, result.stderr
    assert "probing pair (a100) on 2 node(s)" in result.stderr and "--nodelist=gpu05,gpu06" in result.stderr
    assert "mixed" in result.stderr and "differ" in result.stderr
    assert "cluster.yaml" in result.stdout


def test_no_probe_asks_for_a_map_and_the_fixes_work(lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase) -> None:
    result = init(tmp_path, "--no-probe")
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "cluster.yaml").exists()
    suggestions = SUGGESTION.findall(result.stderr)
    assert len(suggestions) == 3, result.stderr
    with_map, probing, others = suggestions
    assert "--map tesla=GPU" in with_map
    fixed = CliRunner().invoke(main, shlex.split(with_map.replace("=GPU", "=v100"))[1:])
    assert fixed.exit_code == 0, fixed.output
    cluster = cluster_file.load(tmp_path / "cluster.yaml", kb)
    tesla = cluster.partition("tesla")
    assert tesla is not None and [g.key for g in tesla.gpus] == ["v100"]
    assert tesla.driver is None and "not probed (--no-probe)" in tesla.origin("driver")
    assert "--map tesla=v100" in tesla.origin("gpus")
    for suggestion in (probing, others):
        again = CliRunner().invoke(main, [*shlex.split(suggestion)[1:], "--force"])
        assert again.exit_code == 0, (suggestion, again.output)


def test_partition_filter(lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase) -> None:
    result = init(tmp_path, "--partition", "h100", "--partition", "a100")
    assert result.exit_code == 0, result.output
    cluster = cluster_file.load(tmp_path / "cluster.yaml", kb)
    assert [p.name for p in cluster.partitions] == ["a100", "h100"]  # by name, whatever the order asked
    assert {s.name for s in cluster.skipped} == {"cpu", "v100", "mixed", "pair", "tesla"}
    assert "probing v100" not in result.stderr


def test_an_unknown_partition_is_refused_with_a_fix_that_works(lab: SlurmLab, tmp_path: Path) -> None:
    result = init(tmp_path, "--partition", "b200", "--no-probe")
    assert result.exit_code == 2, result.output
    assert "'b200'" in result.stderr and "Pass one of them to --partition" in result.stderr
    again = init(tmp_path, "--partition", "v100", "--no-probe")
    assert again.exit_code == 0, again.output


def test_json_output(lab: SlurmLab, tmp_path: Path) -> None:
    result = init(tmp_path, "--partition", "v100", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["outcome"] == "written"
    assert doc["file"] == str(tmp_path / "cluster.yaml")
    (v100,) = doc["cluster"]["partitions"]
    assert v100["gpus"] == ["v100"] and v100["driver"] == "535.104.05"
    (probe,) = doc["probes"]
    assert probe["partition"] == "v100" and probe["error"] is None and probe["left_out"] == [], probe
    assert [n["node"] for n in probe["nodes"]] == ["gpu01"], probe
    again = json.loads(init(tmp_path, "--partition", "v100", "--json").stdout)
    assert again["outcome"] == "unchanged"


def test_json_errors(lab: SlurmLab, tmp_path: Path) -> None:
    result = init(tmp_path, "--partition", "b200", "--json")
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["kind"] == "bad_input", result.output
    assert "--partition" in doc["error"]["fix"]
    unknown = json.loads(init(tmp_path, "--map", "tesla=v1000", "--json").stdout)
    assert unknown["error"]["kind"] == "unknown_gpu"


def test_a_controller_that_is_down_exits_2_with_a_fix(
    lab: SlurmLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(lab.dead_conf()))
    result = init(tmp_path, "--json")
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["error"]["kind"] == "failed"
    assert "does not answer" in doc["error"]["message"] and "scontrol ping" in doc["error"]["fix"]
    assert "Traceback" not in result.output


def test_a_drained_node_is_left_out_with_a_note_and_its_mates_probed(lab: SlurmLab, tmp_path: Path) -> None:
    lab.run(["scontrol", "update", "NodeName=gpu06", "State=DRAIN", "Reason=envsolver-test"])
    try:
        result = init(tmp_path, "--partition", "pair", "--json")
    finally:
        lab.run(["scontrol", "update", "NodeName=gpu06", "State=RESUME"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (probe,) = doc["probes"]
    assert [n["node"] for n in probe["nodes"]] == ["gpu05"], probe
    assert probe["left_out"][0]["node"] == "gpu06" and probe["left_out"][0]["state"] == "IDLE+DRAIN", probe
    (pair,) = doc["cluster"]["partitions"]
    assert "not probed, left out by their state: gpu06 (IDLE+DRAIN: envsolver-test" in pair["provenance"]["driver"]
    assert any("left out 1 node(s)" in n and "gpu06" in n for n in doc["notes"]), doc["notes"]
    assert "pair: left out gpu06 (IDLE+DRAIN" in result.stderr, result.stderr


def test_a_probe_that_cannot_run_is_an_error_with_ways_out_that_work(
    lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase
) -> None:
    """Issue 21 item 6: a probe that cannot run (here the only node of v100 drained, as a busy node would time
    out) used to leave the driver null and exit 0, and `make` then planned for a current driver. Now: exit 2,
    nothing written, and each way out runs."""
    lab.run(["scontrol", "update", "NodeName=gpu01", "State=DRAIN", "Reason=envsolver-test"])
    try:
        result = init(tmp_path, "--partition", "v100", "--partition", "a100", "--wait", "1")
        written = (tmp_path / "cluster.yaml").exists()
        suggestions = SUGGESTION.findall(result.stderr)
        outcomes = [CliRunner().invoke(main, shlex.split(s)[1:]) for s in suggestions]
    finally:
        lab.run(["scontrol", "update", "NodeName=gpu01", "State=RESUME"])
    assert result.exit_code == 2, result.output
    assert not written, result.output
    assert "partition v100 (v100): no node of it can run a step: gpu01 (IDLE+DRAIN: envsolver-test" in result.stderr
    assert len(suggestions) == 2, result.stderr  # leave v100 out; --no-probe (no --wait: waiting would not help)
    assert "--partition a100" in suggestions[0] and "v100" not in suggestions[0].split("--out")[1], suggestions
    assert suggestions[1].endswith("--no-probe"), suggestions
    for suggestion, done in zip(suggestions, outcomes, strict=True):
        assert done.exit_code == 0, (suggestion, done.output)
    (v100,) = [p for p in cluster_file.load(tmp_path / "cluster.yaml", kb).partitions if p.name == "v100"]
    assert v100.driver is None and "not probed (--no-probe)" in v100.origin("driver")


def test_a_probe_that_times_out_is_an_error_that_suggests_waiting(lab: SlurmLab, tmp_path: Path) -> None:
    """Both GPUs of gpu01 held by another job: the probe step waits --wait 1 s for them and gives up; the
    error names the partition and suggests a longer --wait (which works once the job ends)."""
    with lab.holding(["--partition=v100", "--gres=gpu:v100:2", "--nodes=1"]):
        result = init(tmp_path, "--partition", "v100", "--wait", "1")
    assert result.exit_code == 2, result.output
    assert "partition v100 (v100):" in result.stderr, result.stderr
    suggestions = SUGGESTION.findall(result.stderr)
    assert any("--wait 120" in s for s in suggestions), result.stderr
    again = CliRunner().invoke(main, shlex.split(next(s for s in suggestions if "--wait 120" in s))[1:])
    assert again.exit_code == 0, again.output


def test_a_hand_edited_file_is_kept_unless_forced(lab: SlurmLab, tmp_path: Path) -> None:
    assert init(tmp_path, "--partition", "v100").exit_code == 0
    path = tmp_path / "cluster.yaml"
    path.write_text(path.read_text().replace("535.104.05", "535.129.03"))
    refused = init(tmp_path, "--partition", "v100")
    assert refused.exit_code == 2 and "--force" in refused.stderr, refused.output
    assert "535.129.03" in path.read_text()
    assert init(tmp_path, "--partition", "v100", "--force").exit_code == 0
    assert str(driver("535.104.05")) in path.read_text()


def test_a_bad_map_is_refused_before_slurm_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo: the map is checked first
    result = init(tmp_path, "--map", "tesla")
    assert result.exit_code == 2 and "--map TYPE=GPU" in result.stderr, result.output


def test_help_has_examples() -> None:
    result = CliRunner().invoke(main, ["cluster", "init", "--help"])
    assert result.exit_code == 0, result.output
    assert "envsolver cluster init --no-probe --map tesla=v100" in result.stdout


def test_what_nvidia_smi_says_on_a_node_is_shown_escaped(lab: SlurmLab, tmp_path: Path) -> None:
    """gpu01's nvidia-smi names a GPU with a title set, a clear screen, an 8-bit CSI, rich markup and an emoji
    code in it: the progress line and the note show it spelled out; --json holds it as it came."""
    hostile = Gpu(HOSTILE, V100.driver, V100.compute_cap)
    with lab.node_gpus("gpu01", (hostile, hostile)):
        result = init(tmp_path, "--partition", "v100", "--partition", "a100")
        as_json = init(tmp_path, "--partition", "v100", "--partition", "a100", "--json", "--force")
    assert result.exit_code == 0, result.output  # the GRES type says v100; the note names what nvidia-smi said
    assert_shown(result.stdout + result.stderr, result.output)
    assert as_json.exit_code == 0, as_json.output
    probes = {p["partition"]: p for p in json.loads(as_json.stdout)["probes"]}
    assert probes["v100"]["nodes"][0]["gpus"][0]["name"] == HOSTILE, probes["v100"]


# Issue 24: a node's GPU is identified as `--gpu auto` identifies one: by the name nvidia-smi prints, else by the
# PCI device ID, else by the compute capability it reports. gpu04's GRES type ('tesla') names no GPU, so what the
# file records for it comes from the probe alone.
@pytest.mark.parametrize(
    ("gpu", "key", "cc", "how"),
    [
        # a name the KB lacks, an ID the driver's table gives the A100 SXM4 80GB, [N/A] for compute_cap
        (Gpu("NVIDIA A100 Mystery Edition", "550.54.15", "[N/A]", device_id="0x20B210DE"), "a100", "8.0", "0x20B2"),
        # ... and on a driver too old to know compute_cap (R470: it refuses the field)
        (
            Gpu("NVIDIA A100 Mystery Edition", "470.182.03", "8.0", device_id="0x20B210DE", refuses=("compute_cap",)),
            "a100",
            "8.0",
            "0x20B2",
        ),
        # a name and an ID nobody knows, and the compute capability the driver reports
        (Gpu("NVIDIA Mystery 9000", "550.54.15", "8.9", device_id="0x000110DE"), "sm_89", "8.9", "8.9"),
    ],
    ids=["device-id", "device-id-old-driver", "reported-cc"],
)
def test_a_gpu_the_kb_does_not_name_is_planned_by_what_its_driver_reports(
    lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase, gpu: Gpu, key: str, cc: str, how: str
) -> None:
    with lab.node_gpus("gpu04", (gpu, gpu)):
        result = init(tmp_path, "--partition", "tesla")
    assert result.exit_code == 0, result.output
    tesla = cluster_file.load(tmp_path / "cluster.yaml", kb).partition("tesla")
    assert tesla is not None, result.output
    assert [(g.key, str(g.compute_capability)) for g in tesla.gpus] == [(key, cc)], (tesla.gpus, result.output)
    assert str(tesla.driver) == gpu.driver, (tesla.provenance, result.output)
    assert gpu.name in tesla.origin("gpus") and how in tesla.origin("gpus"), tesla.provenance


def test_an_old_driver_without_compute_cap_still_gives_the_gpu_and_driver(
    lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase
) -> None:
    """R470 refuses compute_cap (and so the whole query): the probe asks again without it, as `--gpu auto` does."""
    old = Gpu(V100.name, "470.182.03", V100.compute_cap, V100.memory, refuses=("compute_cap",))
    with lab.node_gpus("gpu04", (old, old)):
        result = init(tmp_path, "--partition", "tesla", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (tesla,) = doc["cluster"]["partitions"]
    assert tesla["gpus"] == ["v100"] and tesla["driver"] == "470.182.03", tesla
    (probe,) = doc["probes"]
    (node,) = probe["nodes"]
    assert node["gpus"][0] == {"name": V100.name, "driver": "470.182.03", "compute_cap": None, "device_id": None}, node
