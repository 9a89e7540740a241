"""The lab itself: a start that fails says why with the logs' tail, and leaves no daemon running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurmlab import LabError, Node, SlurmLab, missing_binaries

pytestmark = pytest.mark.skipif(bool(missing_binaries()), reason="Slurm is not installed here")


class _BrokenLab(SlurmLab):
    def _write(self) -> None:
        super()._write()
        with self.conf.open("a") as conf:
            conf.write("NoSuchOption=1\n")


def test_a_lab_that_cannot_start_reports_the_logs_and_stops_everything(tmp_path: Path) -> None:
    lab = _BrokenLab(tmp_path, nodes=(Node("n1"),), partitions={"p": ("n1",)})
    started = []
    original = lab._spawn

    def spawn(name: str, argv: list[str]) -> None:
        original(name, argv)
        started.append(lab.processes[name])

    lab._spawn = spawn  # type: ignore[method-assign]
    with pytest.raises(LabError) as info:
        lab.start()
    exited = str(info.value).split(" exited while waiting")[0]  # slurmctld, slurmd or both, as polled
    assert exited and set(exited.split(", ")) <= {"slurmctld", "slurmd-n1"}
    assert "NoSuchOption" in str(info.value)  # from the log's tail
    assert started and all(proc.poll() is not None for proc in started)
    assert lab.processes == {}
