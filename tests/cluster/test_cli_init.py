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

from envsolver.cli import main
from envsolver.cluster import file as cluster_file
from envsolver.kb import KnowledgeBase
from envsolver.versions import MajorMinor, driver
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
        "tesla": (["v100"], "535.104.05", "linux-64"),  # the GRES type says 'tesla'; nvidia-smi names the V100
    }
    assert {p.glibc for p in cluster.partitions} == {host_glibc()}
    a100 = cluster.partition("a100")
    assert a100 is not None
    assert a100.origin("driver") == "nvidia-smi on gpu02 via srun --partition=a100 --gres=gpu:a100:1"
    assert [s.name for s in cluster.skipped] == ["cpu"]
    for name in ("v100", "a100", "mixed", "h100", "tesla"):
        assert f"probing {name}" in result.stderr
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
    assert {s.name for s in cluster.skipped} == {"cpu", "v100", "mixed", "tesla"}
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
    assert probe["partition"] == "v100" and probe["node"] == "gpu01" and probe["error"] is None
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


def test_a_probe_that_cannot_run_leaves_the_facts_unknown(lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase) -> None:
    lab.run(["scontrol", "update", "NodeName=gpu01", "State=DRAIN", "Reason=envsolver-test"])
    try:
        result = init(tmp_path, "--partition", "v100", "--wait", "1")
    finally:
        lab.run(["scontrol", "update", "NodeName=gpu01", "State=RESUME"])
    assert result.exit_code == 0, result.output
    (v100,) = cluster_file.load(tmp_path / "cluster.yaml", kb).partitions
    assert v100.driver is None and "Required node not available (down, drained" in v100.origin("driver")
    assert [g.key for g in v100.gpus] == ["v100"]
    assert "probe failed" in result.stderr


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
    assert probes["v100"]["gpus"][0]["name"] == HOSTILE, probes["v100"]
