"""envsolver.cluster.slurm against the real Slurm lab: the commands' output parses; a missing command, a
controller that is down, a missing configuration and a refused step each end in a SlurmError with a fix."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from envsolver.cluster import discover, fanout, parse, slurm
from envsolver.core.errors import split_fix
from tests.slurmlab import NODES, PARTITIONS, SlurmLab


def test_sinfo_and_scontrol_of_the_lab(lab: SlurmLab) -> None:
    rows, bad = parse.parse_sinfo(slurm.sinfo())
    assert bad == ()
    assert {(r.partition, r.node) for r in rows} == {(p, n) for p, nodes in PARTITIONS.items() for n in nodes}
    nodes = parse.parse_scontrol_nodes(slurm.nodes())
    assert sorted(nodes) == sorted(n.name for n in NODES)
    assert parse.parse_config(slurm.config())["ClusterName"] == "lab"


def probe(options: Sequence[str], nodes: Sequence[str]) -> str:
    """cluster init's probe step (discover.run_probe's argv) on `nodes`, through slurm.run."""
    argv = fanout.argv(options, nodes, 5, discover.TIME_MIN, discover.NAME, ("sh", "-c", slurm.PROBE_SCRIPT))
    return slurm.run(argv, 60, f"the probe step ({' '.join(options)})", "Check the lab, then run the same test again.")


def test_a_probe_step_on_each_kind_of_node(lab: SlurmLab) -> None:
    (found,), silent = discover.read_step(probe(["--partition=h100", "--gres=gpu:h100:1"], ["gpu03"]), ["gpu03"])
    assert silent == () and found.complete and found.node == "gpu03", found
    assert {g.name for g in found.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert found.glibc is not None and found.machine is not None
    (cpu,), _ = discover.read_step(probe(["--partition=cpu"], ["cpu01"]), ["cpu01"])
    assert cpu.node == "cpu01" and cpu.gpus == () and cpu.smi_exit == 127, cpu


def _fix(exc: slurm.SlurmError) -> str:
    fix = split_fix(str(exc))[1]
    assert fix is not None, str(exc)
    return fix


def test_a_refused_step_names_the_options_and_the_fix(lab: SlurmLab) -> None:
    with pytest.raises(slurm.SlurmError) as info:
        probe(["--partition=nope"], ["gpu01"])
    text = str(info.value)
    assert "Invalid partition name specified" in text and "--partition=nope" in text
    assert "Check the lab" in _fix(info.value)


def test_a_controller_that_is_down(lab: SlurmLab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(lab.dead_conf()))
    for call in (slurm.sinfo, lambda: probe(["--partition=a100"], ["gpu02"])):
        with pytest.raises(slurm.SlurmError) as info:
            call()
        assert "does not answer" in str(info.value) and "connect failure" in str(info.value)
        assert "scontrol ping" in _fix(info.value)


def test_slurm_conf_naming_a_missing_file_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError) as info:
        slurm.sinfo()
    took = time.monotonic() - started
    assert took < 30, f"took {took:.1f} s"  # sinfo itself retries for 60 s
    assert "missing.conf" in str(info.value)
    assert "SLURM_CONF" in _fix(info.value)


def test_a_missing_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(slurm.SlurmError) as info:
        slurm.sinfo()
    assert "'sinfo' is not on PATH" in str(info.value)
    assert "login node" in _fix(info.value)


def test_a_command_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError) as info:
        slurm.run(["sleep", "30"], 0.5, "a test")
    took = time.monotonic() - started
    assert took < 20, f"took {took:.1f} s"  # stopped at 0.5 s, not at the sleep's 30 s
    assert "did not finish within 0 s" in str(info.value) or "within 1 s" in str(info.value)
    assert _fix(info.value)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("sinfo-controller-down.stderr.txt", "does not answer"),
        ("srun-controller-down.stderr.txt", "does not answer"),
        ("sinfo-no-config.stderr.txt", "no usable configuration"),
        ("sinfo-no-config-dns.stderr.txt", "no usable configuration"),
        ("srun-invalid-gres.stderr.txt", "refused"),
        ("srun-immediate-drained.stderr.txt", "refused"),
    ],
)
def test_captured_failures_are_told_apart(name: str, words: str) -> None:
    stderr = (Path(__file__).parent.parent / "data" / "slurm" / name).read_text()
    error = slurm._failure(["srun", "--partition=a100"], "a probe", 1, stderr, None)
    assert words in str(error)
    assert split_fix(str(error))[1]


def test_the_probe_runs_a_constant_script_after_the_checked_options() -> None:
    """The one shell envsolver starts is the probe's `sh -c` on the node, and nothing of the user's reaches its
    script: the partition's options (checked against grammar.py) come before it, each one argv word."""
    argv = fanout.argv(
        ["--partition=a100", "--gres=gpu:a100:1"], ["gpu02"], 5, 2, "envsolver-probe", ("sh", "-c", slurm.PROBE_SCRIPT)
    )
    assert argv[:3] == ("srun", "--partition=a100", "--gres=gpu:a100:1")
    assert argv[-3:] == ("sh", "-c", slurm.PROBE_SCRIPT)
    assert "--immediate=5" in argv
    assert "{" not in slurm.PROBE_SCRIPT.replace("${SLURMD_NODENAME:-$(hostname -s)}", "")
