"""The lab itself: a start that fails says why with the logs' tail, and leaves no daemon running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurmlab import JOB_ID_BLOCK, JOB_ID_BLOCKS, LabError, Node, SlurmLab, first_job_id, missing_binaries

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


def test_the_labs_of_one_xdist_run_never_share_job_ids() -> None:
    """Each worker's lab runs the launcher's rendezvous on a port that follows its job ids: two workers' blocks of
    job ids must differ, whatever the run's id, and stay within the blocks (ports below 49500)."""
    for count in (1, 2, 3, 8, 90):
        for run in ("", "0", "5f2c0a7e9b1d4c3a8e6f", "ffffffffffffffffffffffffffffffff"):
            firsts = [
                first_job_id(
                    {
                        "PYTEST_XDIST_WORKER": f"gw{n}",
                        "PYTEST_XDIST_WORKER_COUNT": str(count),
                        "PYTEST_XDIST_TESTRUNUID": run,
                    }
                )
                for n in range(count)
            ]
            assert len(set(firsts)) == count, f"{count} workers, run {run!r}: job ids {firsts}"
            assert all(1000 <= f <= 1000 + (JOB_ID_BLOCKS - 1) * JOB_ID_BLOCK for f in firsts), firsts


def test_a_lab_outside_xdist_takes_its_block_from_its_pid() -> None:
    assert first_job_id({}, pid=91) == first_job_id({}, pid=1) == 1000 + JOB_ID_BLOCK
    assert first_job_id({"PYTEST_XDIST_WORKER": "gwX", "PYTEST_XDIST_WORKER_COUNT": "2"}, pid=0) == 1000
