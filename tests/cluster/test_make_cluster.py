"""make --cluster: one lock per platform that every partition of that platform runs, the partitions recorded in
conda-lock.yml, a partition that cannot share named with commands that split it out (and those commands work)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from conda_lock.lockfile import parse_conda_lock_file

from envsolver.cli.main import main
from envsolver.cluster import planning
from envsolver.cluster.file import parse
from envsolver.core.versions import DriverVersion, MajorMinor, driver
from envsolver.kb import default_kb
from envsolver.resolve import driver as drivers
from envsolver.resolve.inputs import Options, cluster_make_command
from envsolver.resolve.run import resolve

DATA = Path(__file__).parent.parent / "data" / "cluster"
MIXED = DATA / "mixed.yaml"
SUGGESTION = re.compile(r"`([^`]*)`")
ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}

OLD = """\
cluster: old
partitions:
  - {name: p100, gpus: [p100], driver: '450.80.02', platform: linux-64, glibc: '2.17'}
  - {name: a100, gpus: [a100], driver: '550.54.15', platform: linux-64, glibc: '2.34'}
  - {name: h100, gpus: [h100], driver: '570.86.10', platform: linux-64, glibc: '2.34'}
"""


def _run(args: list[str]) -> Result:
    return CliRunner(env=ENV).invoke(main, args, catch_exceptions=False)


def _metadata(lock_file: Path) -> dict[str, str]:
    doc = yaml.safe_load(lock_file.read_text())
    meta: dict[str, str] = doc["metadata"]["custom_metadata"]
    return meta


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mixed")
    result = _run(["make", "--cluster", str(MIXED), "--offline", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_one_lock_per_platform_both_parse_with_conda_lock(mixed: Path) -> None:
    assert sorted(p.name for p in mixed.iterdir() if p.is_dir()) == ["linux-64", "linux-aarch64"]
    for platform in ("linux-64", "linux-aarch64"):
        lockfile = parse_conda_lock_file(mixed / platform / "conda-lock.yml")
        assert lockfile.metadata.platforms == [platform]
        assert {p.platform for p in lockfile.package} == {platform}
        assert (mixed / platform / f"conda-{platform}.lock").is_file()


def test_the_x86_lock_builds_every_partitions_gpu_and_every_listed_driver_runs_it(mixed: Path) -> None:
    kb = default_kb()
    meta = _metadata(mixed / "linux-64" / "conda-lock.yml")
    assert meta["envsolver_torch_cuda_arch_list"] == "7.0;8.0;9.0+PTX"
    cuda = MajorMinor(*map(int, meta["envsolver_cuda_version"].split(".")))
    solved_for = MajorMinor(*map(int, meta["envsolver_virtual_linux-64_cuda"].split(".")))
    for text in ("535.104.05", "550.54.15", "570.86.10"):
        assert drivers.support(kb, driver(text), cuda) in ("full", "minor"), text
        newest = drivers.newest_full_cuda(kb, driver(text))
        assert newest is not None and newest.version >= solved_for, text  # the solve assumed no newer driver
    assert meta["envsolver_driver"] == "535.104.05"  # the oldest partition's
    assert meta["envsolver_virtual_linux-64_glibc"] == "2.28"  # the oldest glibc


def test_conda_lock_records_every_partition_with_its_gpus_driver_and_what_it_relies_on(mixed: Path) -> None:
    meta = _metadata(mixed / "linux-64" / "conda-lock.yml")
    assert meta["envsolver_cluster"] == "mixed"
    assert meta["envsolver_cluster_partitions"] == "v100;a100;h100"
    v100 = meta["envsolver_partition_v100"]
    assert v100.startswith("GPUs NVIDIA V100 (7.0); driver 535.104.05 (written by hand); glibc 2.28; relies on: ")
    assert "driver 535.104.05 runs CUDA 12.9 through minor-version compatibility" in v100
    assert "envsolver_partition_gh200" not in meta
    arm = _metadata(mixed / "linux-aarch64" / "conda-lock.yml")
    assert arm["envsolver_cluster_partitions"] == "gh200"
    assert arm["envsolver_torch_cuda_arch_list"] == "9.0+PTX"


def test_the_regenerate_line_is_the_cluster_command(mixed: Path) -> None:
    header = (mixed / "linux-64" / "environment.yml").read_text().splitlines()[1]
    assert header == f"#   envsolver make --cluster {shlex.quote(str(MIXED))} --offline --out {shlex.quote(str(mixed))}"


def test_a_partition_that_cannot_share_is_named_and_the_split_commands_work(tmp_path: Path) -> None:
    cluster = tmp_path / "old.yaml"
    cluster.write_text(OLD)
    out = tmp_path / "envs"
    refused = _run(["make", "--cluster", str(cluster), "--offline", "--out", str(out)])
    assert refused.exit_code == 1, refused.output
    assert not out.exists()  # nothing written
    message = refused.stderr
    assert (
        "partition p100 (NVIDIA Tesla P100 6.0; driver 450.80.02) cannot share the linux-64 lock with a100, h100"
        in (message)
    )
    assert "no sm_60" in message
    suggested = SUGGESTION.findall(message)
    assert suggested, message
    rest = suggested[0]
    assert "--skip-partition p100" in rest
    done = _run(shlex.split(rest)[1:])
    assert done.exit_code == 0, done.output
    meta = _metadata(out / "linux-64" / "conda-lock.yml")
    assert meta["envsolver_cluster_partitions"] == "a100;h100"


def test_a_partition_that_plans_alone_gets_its_own_command(tmp_path: Path) -> None:
    # The V100 at driver 470 (CUDA 11.4) cannot share the H100's lock in the snapshot, but plans alone.
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "cluster: c\npartitions:\n"
        "  - {name: v100, gpus: [v100], driver: '470.82.01', platform: linux-64, glibc: '2.28'}\n"
        "  - {name: b200, gpus: [b200], driver: '580.65.06', platform: linux-64, glibc: '2.34'}\n"
    )
    out = tmp_path / "envs"
    refused = _run(["make", "--cluster", str(cluster), "--offline", "--out", str(out)])
    if refused.exit_code == 0:
        pytest.skip("the snapshot plans this pair together; nothing to split")
    assert refused.exit_code == 1, refused.output
    for command in SUGGESTION.findall(refused.stderr):
        done = _run(shlex.split(command)[1:])
        assert done.exit_code == 0, (command, done.output)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gpu", "a100"], "--gpu cannot be given with --cluster"),
        (["--driver", "535.104.05"], "--driver cannot be given with --cluster"),
        (["--partition", "nope"], "has no partition 'nope'; its partitions are v100, a100, h100, gh200"),
        (
            [
                "--skip-partition",
                "v100",
                "--skip-partition",
                "a100",
                "--skip-partition",
                "h100",
                "--skip-partition",
                "gh200",
            ],
            "leave no partition",
        ),
    ],
)
def test_bad_options_exit_2_with_the_fix(args: list[str], expected: str, tmp_path: Path) -> None:
    result = _run(["make", "--cluster", str(MIXED), "--offline", "--out", str(tmp_path), *args, "--json"])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["kind"] == "bad_input"


def test_partition_options_need_a_cluster(tmp_path: Path) -> None:
    result = _run(["make", "--gpu", "a100", "--partition", "a100", "--offline", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "Pass --cluster FILE" in result.stderr


def test_json_names_each_platform_and_how_each_partition_runs_it(tmp_path: Path) -> None:
    result = _run(
        [
            "make",
            "--cluster",
            str(MIXED),
            "--offline",
            "--partition",
            "h100",
            "--partition",
            "v100",
            "--no-lock",
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["cluster"] == "mixed"
    [platform] = doc["platforms"]
    assert platform["platform"] == "linux-64"
    assert [p["name"] for p in platform["partitions"]] == ["v100", "h100"]
    assert platform["plan"]["torch_cuda_arch_list"] == "7.0;9.0+PTX"
    assert (tmp_path / "linux-64" / "environment.yml").is_file()
    assert not (tmp_path / "linux-64" / "conda-lock.yml").exists()


# The planning rules, without solving.


def test_target_is_the_union_of_gpus_the_oldest_driver_and_the_oldest_glibc() -> None:
    kb = default_kb()
    cluster = parse(MIXED.read_text(), kb, "mixed.yaml")
    [x86, arm] = planning.groups(kb, cluster.partitions, Options())
    assert (x86.platform, arm.platform) == ("linux-64", "linux-aarch64")
    assert [g.key for g in x86.target.gpus] == ["v100", "a100", "h100"]
    assert x86.target.driver == driver("535.104.05")
    assert x86.target.glibc == MajorMinor(2, 28)
    assert arm.target.glibc == MajorMinor(2, 34)


def test_unknown_drivers_and_glibcs_add_no_constraint() -> None:
    kb = default_kb()
    cluster = parse(
        "cluster: c\npartitions:\n"
        "  - {name: a, gpus: [a100], driver: null, platform: linux-64, glibc: null}\n"
        "  - {name: b, gpus: [h100], driver: '550.54.15', platform: linux-64, glibc: '2.31'}\n",
        kb,
        "c.yaml",
    )
    [group] = planning.groups(kb, cluster.partitions, Options())
    assert group.target.driver == driver("550.54.15")
    assert group.target.glibc == MajorMinor(2, 31)
    alone = planning.groups(kb, cluster.partitions[:1], Options())[0]
    assert alone.target.driver is None and alone.target.glibc == MajorMinor(2, 28)


def test_fit_kinds_follow_the_driver_table() -> None:
    kb = default_kb()
    cluster = parse(MIXED.read_text(), kb, "mixed.yaml")
    [x86, _] = planning.groups(kb, cluster.partitions, Options())
    plan = resolve(x86.target, kb)
    full = DriverVersion((999, 0), "999.0")
    v100 = cluster.partitions[0]
    expected = drivers.support(kb, driver("535.104.05"), plan.cuda_version)
    assert planning.fit(kb, plan, v100).kind == expected
    newer = planning.fit(kb, plan, replace(v100, driver=full))
    assert newer.kind == "full" and newer.text == f"driver 999.0 fully supports CUDA {plan.cuda_version}"
    unknown = planning.fit(kb, plan, replace(v100, driver=None))
    assert unknown.kind == "assumed"


def test_the_cluster_command_repeats_the_users_options_but_not_the_files() -> None:
    kb = default_kb()
    cluster = parse(MIXED.read_text(), kb, "mixed.yaml")
    options = Options(python="3.11", torch="2.7", deepspeed=False)
    [x86, _] = planning.groups(kb, cluster.partitions, options)
    line = cluster_make_command("my cluster.yaml", x86.target, ["a100"], ["v100"], "envs/a", None, True)
    assert line == (
        "envsolver make --cluster 'my cluster.yaml' --partition a100 --skip-partition v100 --python 3.11 "
        "--torch 2.7 --no-deepspeed --offline --out envs/a"
    )
