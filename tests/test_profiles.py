from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase
from envsolver.resolve import profile
from tests.conftest import plan_for

REQUIRED = {
    "a100",
    "h100",
    "h200",
    "gh200",
    "b200",
    "l40s",
    "l4",
    "t4",
    "v100",
    "rtx3090",
    "rtx4090",
    "rtx5090",
    "cluster-v100-a100-h100",
}


def test_required_profiles_exist() -> None:
    assert set(profile.available()) >= REQUIRED


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_profile_resolves(kb: KnowledgeBase, name: str) -> None:
    plan = plan_for(kb, profile=name)
    assert plan.torch_cuda_arch_list


def test_gh200_profile_is_aarch64(kb: KnowledgeBase) -> None:
    assert plan_for(kb, profile="gh200").platform == "linux-aarch64"


def test_mixed_cluster_covers_all_three(kb: KnowledgeBase) -> None:
    assert plan_for(kb, profile="cluster-v100-a100-h100").torch_cuda_arch_list == "7.0;8.0;9.0+PTX"


def test_command_line_overrides_profile(kb: KnowledgeBase) -> None:
    assert plan_for(kb, profile="a100", torch="2.7").torch_version == "2.7.1"
    assert [g.key for g in plan_for(kb, profile="a100", gpus=("h100",)).gpus] == ["h100"]


def test_profile_from_a_file(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("description: our cluster\ngpus: [a100, h100]\ndriver: '550.54.14'\n")
    plan = plan_for(kb, profile=str(path))
    assert str(plan.driver) == "550.54.14" and plan.torch_cuda_arch_list == "8.0;9.0+PTX"


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("gpus: a100\n", "needs 'gpus:'"),
        ("gpus: [a100]\ncolour: red\n", "unknown key(s) ['colour']"),
        ("gpus: [a100\n", "not valid YAML"),
        ("- a100\n", "must be a mapping"),
    ],
)
def test_bad_profile_files(tmp_path: Path, content: str, phrase: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(BadInputError) as info:
        profile.load(str(path))
    assert phrase in str(info.value)
    assert str(info.value).endswith("Fix the file.")


@pytest.mark.parametrize(
    ("line", "written", "read"),
    [("python: 3.10", "3.10", "3.1"), ("torch: 2.10", "2.10", "2.1"), ("glibc: 2.28", "2.28", None)],
)
def test_an_unquoted_version_is_quoted_back_as_written(
    tmp_path: Path, line: str, written: str, read: str | None
) -> None:
    """Issue 22: `python: 3.10` (YAML's float 3.1) was answered "write python: '3.11'"; the fix quotes the text as
    written, and the file with the fix applied loads and plans (exit 0)."""
    path = tmp_path / "p.yaml"
    path.write_text(f"gpus: [a100]\ndriver: '580.65.06'\n{line}\n")
    with pytest.raises(BadInputError) as info:
        profile.load(str(path))
    key = line.split(":")[0]
    message = str(info.value)
    fix = f"write {key}: '{written}'. Fix the file."
    assert message.endswith(fix), message
    if read is not None:
        assert f"not {written} (which YAML reads as the number {read})" in message, message
    path.write_text(path.read_text().replace(line, fix.removeprefix("write ").removesuffix(". Fix the file.")))
    result = CliRunner().invoke(main, ["explain", "--profile", str(path)], env={"ENVSOLVER_DRIVER": None})
    assert result.exit_code == 0, (path.read_text(), result.output)


def test_unreadable_profile(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read profile"):
        profile.load(str(tmp_path / "missing.yaml"))


def test_a_directory_named_like_a_profile_does_not_hide_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--profile gh200` in a directory that holds a folder called gh200 (an --out from an earlier run)."""
    from envsolver.resolve import profile

    monkeypatch.chdir(tmp_path)
    (tmp_path / "gh200").mkdir()
    assert profile.load("gh200").values["gpus"] == ["gh200"]


# The arch list each profile's plan sets: its GPUs' compute capabilities (NVIDIA's CUDA GPUs table, the KB's
# gpus.yaml), ascending, +PTX on the highest.
ARCH_LISTS = {
    "a100": "8.0+PTX",
    "h100": "9.0+PTX",
    "h200": "9.0+PTX",
    "gh200": "9.0+PTX",
    "b200": "10.0+PTX",
    "l40s": "8.9+PTX",
    "l4": "8.9+PTX",
    "t4": "7.5+PTX",
    "v100": "7.0+PTX",
    "rtx3090": "8.6+PTX",
    "rtx4090": "8.9+PTX",
    "rtx5090": "12.0+PTX",
    "cluster-v100-a100-h100": "7.0;8.0;9.0+PTX",
}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_profile_resolves_to_its_gpus_arch_list(kb: KnowledgeBase, name: str) -> None:
    plan = plan_for(kb, profile=name)
    assert plan.torch_cuda_arch_list == ARCH_LISTS[name]
    assert plan.env["TORCH_CUDA_ARCH_LIST"] == ARCH_LISTS[name]
