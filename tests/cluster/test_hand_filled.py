"""Issue 21 item 6: a value init could not learn is drafted as null with an `unknown: ...` provenance; a user
who fills the value in by hand gets it recorded as written by hand (in the loaded file and in the lock
make --cluster writes), not as the draft's "unknown"."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.cluster.model import BY_HAND, UNKNOWN
from envsolver.kb import KnowledgeBase
from tests.slurmlab import SlurmLab


def _draft(lab: SlurmLab, path: Path) -> str:
    done = CliRunner().invoke(main, ["cluster", "init", "--no-probe", "--map", "tesla=v100", "--out", str(path)])
    assert done.exit_code == 0, done.output
    return path.read_text()


def _fill_a100(text: str, driver: str | None, glibc: str | None) -> str:
    """The user's edit: partition a100's null driver and glibc replaced in the text, the rest as drafted."""
    head, a100, rest = text.partition("- name: a100\n")
    entry, sep, tail = rest.partition("\n- name: ")
    if driver is not None:
        entry = entry.replace("driver: null", f"driver: '{driver}'", 1)
    if glibc is not None:
        entry = entry.replace("glibc: null", f"glibc: '{glibc}'", 1)
    return head + a100 + entry + sep + tail


def test_a_value_filled_by_hand_is_recorded_as_written_by_hand(
    lab: SlurmLab, tmp_path: Path, kb: KnowledgeBase
) -> None:
    drafted = _draft(lab, tmp_path / "cluster.yaml")
    draft = cluster_file.parse(drafted, kb, "cluster.yaml").partition("a100")
    assert draft is not None and draft.driver is None, drafted
    assert draft.origin("driver").startswith(UNKNOWN) and draft.origin("glibc").startswith(UNKNOWN), drafted
    path = tmp_path / "cluster.yaml"
    path.write_text(_fill_a100(drafted, "550.54.15", None))
    a100 = cluster_file.load(path, kb).partition("a100")
    assert a100 is not None and str(a100.driver) == "550.54.15", path.read_text()
    assert a100.origin("driver") == BY_HAND, a100.provenance
    assert a100.origin("glibc").startswith(UNKNOWN), a100.provenance  # still null: still unknown
    env = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}
    made = CliRunner(env=env).invoke(
        main, ["make", "--cluster", str(path), "--offline", "--partition", "a100", "--out", str(tmp_path / "out")]
    )
    assert made.exit_code == 0, made.output
    lock = yaml.safe_load((tmp_path / "out" / "linux-64" / "conda-lock.yml").read_text())
    recorded = lock["metadata"]["custom_metadata"]["envsolver_partition_a100"]
    assert "driver 550.54.15 (written by hand)" in recorded, recorded
    assert "not probed" not in recorded.split("; glibc")[0], recorded
