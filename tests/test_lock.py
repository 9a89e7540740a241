"""Locking against local file:// channels: the bundled snapshot (real records from shared/realdata)."""

from __future__ import annotations

import json
from pathlib import Path

import conda_lock.lockfile.v1 as conda_lock_v1
import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from conda_lock.lockfile import parse_conda_lock_file

from envsolver.cli.main import main
from envsolver.core.errors import ConflictError
from envsolver.core.redact import redact
from envsolver.kb import KnowledgeBase
from envsolver.lock import lockcheck, outputs, snapshot
from envsolver.lock import run as lock
from envsolver.lock.pypi import pins
from envsolver.lock.solve import ChannelSource, SolveFailed, solve
from envsolver.lock.writers import condalock
from envsolver.resolve.inputs import Options, build_target
from envsolver.resolve.run import resolve

SCHEMA_PATH = Path(conda_lock_v1.__file__).parent / "conda-lock-v1.schema.json"


def _no_progress(_: str) -> None:
    return None


def snapshot_index() -> dict[str, dict[str, object]]:
    """filename -> record, for every record in the bundled snapshot."""
    out: dict[str, dict[str, object]] = {}
    for path in snapshot.data_dir().rglob("repodata.json"):
        doc = json.loads(path.read_text())
        for table in ("packages", "packages.conda"):
            out.update(doc[table])
    return out


@pytest.fixture(scope="module")
def a100_offline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("a100")
    result = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_offline_make_writes_five_files(a100_offline: Path) -> None:
    """The a100's offline plan (torch 2.12.0 cu129, for which conda-forge builds no DeepSpeed) takes DeepSpeed from
    PyPI, so the explicit lock has its pip companion."""
    names = sorted(p.name for p in a100_offline.iterdir())
    assert names == [
        "conda-linux-64.lock",
        "conda-linux-64.pip.txt",
        "conda-lock.yml",
        "environment.yml",
        "virtual-packages.yml",
    ]


def test_lock_urls_and_hashes_are_real_snapshot_records(a100_offline: Path) -> None:
    """Every conda package is a record of the bundled snapshot; the PyPI one (DeepSpeed) a file of the bundled
    snapshot of PyPI's page, with its URL and sha256."""
    index = snapshot_index()
    lockfile = parse_conda_lock_file(a100_offline / "conda-lock.yml")
    conda = [p for p in lockfile.package if p.manager == "conda"]
    assert len(conda) > 100
    for package in conda:
        record = index[package.url.rsplit("/", 1)[-1]]
        assert package.hash.sha256 == record["sha256"] and package.hash.md5 == record["md5"]
        assert package.url.startswith("https://conda.anaconda.org/conda-forge/")
    (deepspeed,) = [p for p in lockfile.package if p.manager == "pip"]
    _, files = pins.bundled("deepspeed")
    assert (deepspeed.url, deepspeed.hash.sha256) in {(f.url, f.sha256) for f in files}, deepspeed
    explicit = (a100_offline / "conda-linux-64.lock").read_text().splitlines()
    urls = [line for line in explicit if line.startswith("https://")]
    assert len(urls) == len(conda)
    for line in urls:
        url, md5 = line.split("#")
        assert index[url.rsplit("/", 1)[-1]]["md5"] == md5


def test_conda_lock_parses_and_validates(a100_offline: Path) -> None:
    lockfile = parse_conda_lock_file(a100_offline / "conda-lock.yml")
    assert lockfile.metadata.platforms == ["linux-64"]
    meta = lockfile.metadata.custom_metadata
    assert meta["envsolver_torch_cuda_arch_list"] == "8.0+PTX"
    assert meta["envsolver_channels_used"] == "snapshot"
    assert meta["envsolver_snapshot_date"] == snapshot.date()
    assert meta["envsolver_virtual_linux-64_cuda_arch"] == "8.0"
    doc = yaml.safe_load((a100_offline / "conda-lock.yml").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    torch = next(p for p in lockfile.package if p.name == "pytorch")
    assert torch.version == "2.12.0" and torch.build.startswith("cuda129")  # the snapshot's newest for the A100


def test_no_driver_lock_records_the_plans_own_floor(a100_offline: Path, kb: KnowledgeBase) -> None:
    """Without --driver the lock assumes a driver that fully supports the plan's CUDA (12.9 here), not the newest
    CUDA the knowledge base knows, and its metadata says which driver that is."""
    meta = parse_conda_lock_file(a100_offline / "conda-lock.yml").metadata.custom_metadata
    assert meta["envsolver_virtual_linux-64_cuda"] == "12.9"
    assert meta["envsolver_driver"] == "not given: the plan needs driver >= 575.51.03 (fully supports CUDA 12.9)"
    plan = resolve(build_target(Options(gpus=("gh200",)), kb).target, kb)
    assert lock.virtual_packages(kb, plan)["__cuda"] == str(plan.cuda_version) == "13.0"


def test_no_driver_lock_of_a_toolkit_without_a_published_floor_says_so(kb: KnowledgeBase) -> None:
    plan = resolve(build_target(Options(gpus=("h100",), cuda="13.4", deepspeed=False), kb).target, kb)
    result = lock.LockResult(plan, {}, (), "live", None, {plan.platform: lock.virtual_packages(kb, plan)})
    meta = outputs.custom_metadata(result, kb)
    assert meta["envsolver_virtual_linux-64_cuda"] == "13.4"
    assert meta["envsolver_driver_min_full"] == "unknown"
    assert meta["envsolver_driver"] == (
        "not given: the plan needs a driver that fully supports CUDA 13.4 (the knowledge base does not know its "
        "version; >= 580 runs it through minor-version compatibility)"
    )


def test_explicit_lock_parses_with_rattler(a100_offline: Path) -> None:
    from rattler.explicit_environment import ExplicitEnvironmentSpec

    spec = ExplicitEnvironmentSpec.from_path(a100_offline / "conda-linux-64.lock")
    assert str(spec.platform) == "linux-64"
    assert len(spec.packages) > 100


def test_reruns_are_byte_identical_and_not_rewritten(a100_offline: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    names = (
        "environment.yml",
        "conda-lock.yml",
        "virtual-packages.yml",
        "conda-linux-64.lock",
        "conda-linux-64.pip.txt",
    )
    for name in names:
        assert (tmp_path / name).read_bytes() == (a100_offline / name).read_bytes()
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    again = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(tmp_path)])
    assert again.exit_code == 0 and again.output.count("unchanged") == len(names), again.output
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


def test_gh200_offline_locks_linux_aarch64(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["make", "--profile", "gh200", "--offline", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["plan"]["platform"] == "linux-aarch64"
    assert list(doc["lock"]["packages"]) == ["linux-aarch64"]
    lockfile = parse_conda_lock_file(tmp_path / "conda-lock.yml")
    assert {p.platform for p in lockfile.package} == {"linux-aarch64"}
    conda = [p for p in lockfile.package if p.manager == "conda"]
    assert all("/linux-aarch64/" in p.url or "/noarch/" in p.url for p in conda)
    # DeepSpeed has no conda-forge aarch64 build: it is locked from PyPI, PyPI's own URL and sha256.
    (deepspeed,) = [p for p in lockfile.package if p.manager == "pip"]
    assert (deepspeed.name, deepspeed.version, deepspeed.hash.sha256) == (
        "deepspeed", "0.19.8", "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"
    )  # fmt: skip
    assert deepspeed.url == (
        "https://files.pythonhosted.org/packages/bc/d8/3162fc810870df1183e686ec70b57028b464a5940b148a90767c727f113c/"
        "deepspeed-0.19.8.tar.gz"
    )
    assert {"pip", "setuptools", "hjson-py", "msgpack-python"} <= {p.name for p in conda}
    assert doc["lock"]["pip"]["linux-aarch64"][0]["sha256"] == deepspeed.hash.sha256


def test_offline_rejects_candidates_the_snapshot_cannot_solve(kb: KnowledgeBase, tmp_path: Path) -> None:
    target = build_target(Options(gpus=("gh200",)), kb).target
    result = lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    rejected = {r.candidate: r.because for r in result.plan.rejected}
    # In plain words, before any solve: the snapshot's linux-aarch64 copy holds CUDA 13.0 for none of these.
    assert rejected["torch 2.10.0 cu130"] == (
        f"the bundled snapshot ({snapshot.date()}) holds no conda-forge-channel libcusparse-dev, libcublas-dev, "
        "libcusolver-dev, libcurand-dev, cuda-profiler-api and cudnn for CUDA 13.0 on linux-aarch64 (its "
        "libcusparse-dev, libcublas-dev, libcusolver-dev and libcurand-dev: CUDA 12.9, 13.2; its cuda-profiler-api: "
        "CUDA 12.9, 13.1, 13.2; its cudnn: CUDA 12.0, 12.2, 12.4, 12.5, 12.6, 12.8, 12.9)"
    )
    assert result.plan.torch_version == "2.10.0" and str(result.plan.torch_cuda) == "12.9"


@pytest.mark.parametrize("gpu", ["a100", "t4", "a10", "rtx3090", "h200", "a6000", "h100", "l40s", "gh200", "v100"])
def test_offline_solves_once_where_the_snapshot_lacks_a_companion(kb: KnowledgeBase, tmp_path: Path, gpu: str) -> None:
    """torch 2.10.0 cu130 needs a cudnn for CUDA 13.0, which the snapshot does not hold: the restriction says so
    and the resolver passes over it, so make solves once (it solved cu130, failed, then solved cu129).
    `--deepspeed-from conda-forge` makes torch 2.10 the newest candidate on linux-64 (conda-forge's DeepSpeed
    stops there), so cu130 is ahead of cu129; the newer 2.13.0 cu129 would be solved and rejected (no
    msgpack-python for its Python 3.12 in the snapshot) before it."""
    lines: list[str] = []
    target = build_target(Options(gpus=(gpu,), deepspeed_from="conda-forge"), kb).target
    result = lock.lock(target, kb, "offline", (), tmp_path / "cache", lines.append)
    solving = [line for line in lines if line.startswith("solving ")]
    assert len(solving) == 1, lines
    assert str(result.plan.torch_cuda) == "12.9", result.plan.rejected


def test_the_a100_lock_is_the_one_in_locks(a100_offline: Path) -> None:
    """Solving once locks what solving twice locked: locks/a100 (`--profile a100`, the same target)."""
    committed = Path(__file__).resolve().parent.parent / "locks" / "a100"
    for name in ("conda-lock.yml", "conda-linux-64.lock"):
        assert (a100_offline / name).read_bytes() == (committed / name).read_bytes(), name


def test_offline_names_the_companion_the_snapshot_lacks(tmp_path: Path) -> None:
    """--cuda 13.0 leaves only torch 2.10.0 cu130, whose cudnn the snapshot does not hold for CUDA 13.0."""
    made = CliRunner().invoke(main, ["make", "--gpu", "a100", "--offline", "--cuda", "13.0", "--out", str(tmp_path)])
    assert made.exit_code == 1, made.output
    assert (
        f"  - torch 2.10.0 cu130: the bundled snapshot ({snapshot.date()}) holds no conda-forge-channel cudnn for "
        "CUDA 13.0 on linux-64 (its cudnn: CUDA 11.8, 12.0, 12.2, 12.4, 12.5, 12.6, 12.8, 12.9)\n"
    ) in made.stderr, made.stderr
    assert "Ways out: `--cuda 12.9` gives torch 2.12.0 cu129 with CUDA 12.9." in made.stderr, made.stderr
    assert not list(tmp_path.iterdir())


def test_offline_says_plainly_when_the_target_is_outside_the_snapshot(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The snapshot holds no torch 2.11 at all (shared/realdata/SOURCES.md: no lock found has one)."""
    target = build_target(Options(gpus=("a100",), torch="2.11"), kb).target
    with pytest.raises(ConflictError) as info:
        lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    assert str(info.value) == (
        f"the bundled snapshot ({snapshot.date()}) has no conda-forge torch 2.11 CUDA build for linux-64. "
        "Ways out: `--torch 2.12.0` gives torch 2.12.0 cu129 with CUDA 12.9."
    )


def test_offline_says_which_companion_a_torch_in_the_snapshot_lacks(kb: KnowledgeBase, tmp_path: Path) -> None:
    """torch 2.13.0 cu129 is in the snapshot for Python 3.12 only, and the snapshot holds no msgpack-python (a
    DeepSpeed requirement the conda part provides) for 3.12: the solve fails, the refusal says why, and each way
    out locks."""
    target = build_target(Options(gpus=("a100",), torch="2.13"), kb).target
    with pytest.raises(ConflictError) as info:
        lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    assert str(info.value) == (
        f"the bundled snapshot ({snapshot.date()}) could not lock torch 2.13.0 cu129 (the snapshot holds no "
        "msgpack-python for Python 3.12). Ways out: `--torch 2.12.0` gives torch 2.12.0 cu129 with CUDA 12.9; "
        "`--no-deepspeed` gives torch 2.13.0 cu129 with CUDA 12.9."
    )
    ways_out = [
        (Options(gpus=("a100",), torch="2.12.0"), "2.12.0"),
        (Options(gpus=("a100",), torch="2.13", deepspeed=False), "2.13.0"),
    ]
    for options, version in ways_out:
        result = lock.lock(build_target(options, kb).target, kb, "offline", (), tmp_path / "cache", _no_progress)
        assert (result.plan.torch_version, str(result.plan.torch_cuda)) == (version, "12.9"), options


def test_live_unreachable_falls_back_to_the_snapshot(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9
    messages: list[str] = []
    target = build_target(Options(gpus=("a100",)), kb).target
    result = lock.lock(target, kb, "live", (), tmp_path / "cache", messages.append)
    assert result.used == "snapshot" and result.snapshot_date == snapshot.date()
    assert any("could not be reached" in w and snapshot.date() in w for w in result.warnings)


def test_custom_channel_is_used_and_named(kb: KnowledgeBase, tmp_path: Path) -> None:
    local = snapshot.channels()["https://conda.anaconda.org/conda-forge"]
    target = build_target(Options(gpus=("a100",), deepspeed_from="conda-forge"), kb).target
    result = lock.lock(target, kb, "custom", (local,), tmp_path / "cache", _no_progress)
    assert result.used == "custom" and result.channels == (local,)
    torch = next(r for r in result.records["linux-64"] if r.name == "pytorch")
    assert torch.url.startswith(local)


def _snapshot_sources() -> list[ChannelSource]:
    return [ChannelSource(p, loc) for p, loc in snapshot.channels().items() if p.endswith("/conda-forge")]


def test_unsatisfiable_exits_1_with_the_solver_explanation(tmp_path: Path) -> None:
    with pytest.raises(SolveFailed) as info:
        solve(
            ["pytorch ==2.10.0 cuda129*", "cuda-version 12.6.*"],
            _snapshot_sources(),
            "linux-64",
            {"__cuda": "12.9", "__glibc": "2.28", "__unix": "0", "__linux": "5.10"},
            tmp_path,
        )
    assert info.value.exit_code == 1
    assert "cuda-version" in str(info.value)


def test_solve_uses_the_given_virtual_packages_not_the_hosts(tmp_path: Path) -> None:
    # This machine has no GPU; with __cuda given, a CUDA torch build still solves.
    records = solve(
        ["pytorch ==2.10.0 cuda129*", "python 3.13.*"],
        _snapshot_sources(),
        "linux-64",
        {"__cuda": "12.9", "__glibc": "2.28", "__unix": "0", "__linux": "5.10"},
        tmp_path,
    )
    assert any(r.name == "pytorch" and r.build.startswith("cuda129") for r in records)
    with pytest.raises(SolveFailed):  # without __cuda, pytorch's `__cuda` dependency cannot be met
        solve(
            ["pytorch ==2.10.0 cuda129*"],
            _snapshot_sources(),
            "linux-64",
            {"__glibc": "2.28", "__unix": "0", "__linux": "5.10"},
            tmp_path,
        )


def test_lockcheck_catches_a_solution_that_contradicts_the_plan(kb: KnowledgeBase, tmp_path: Path) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    result = lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    records = list(result.records["linux-64"])
    assert lockcheck.problems(result.plan, kb, records) == []
    without_headers = [r for r in records if r.name != "libcusparse-dev"]
    assert lockcheck.problems(result.plan, kb, without_headers) == [
        "libcusparse-dev (cusparse.h) is missing from the solution"
    ]
    other_plan = resolve(build_target(Options(gpus=("a100",), torch="2.7"), kb).target, kb)
    wrong = lockcheck.problems(other_plan, kb, records)
    assert any("pytorch 2.12.0 was solved, the plan chose 2.7.1" in w for w in wrong), wrong
    assert any("cuda-version 12.9 was solved" in w for w in wrong) is False  # 2.7.1 also pins 12.9


def test_two_platform_conda_lock(kb: KnowledgeBase, tmp_path: Path) -> None:
    results = [
        lock.lock(
            build_target(Options(gpus=("h100",), platform=p), kb).target,
            kb,
            "offline",
            (),
            tmp_path / "cache",
            _no_progress,
        )
        for p in ("linux-64", "linux-aarch64")
    ]
    records = {p: r for res in results for p, r in res.records.items()}
    text = condalock.render(records, results[0].channels, {p: "0" * 64 for p in records}, {"k": "v"}, "cmd", "d")
    path = tmp_path / "conda-lock.yml"
    path.write_text(text)
    lockfile = parse_conda_lock_file(path)
    assert lockfile.metadata.platforms == ["linux-64", "linux-aarch64"]
    assert {p.platform for p in lockfile.package} == {"linux-64", "linux-aarch64"}
    jsonschema.validate(yaml.safe_load(text), json.loads(SCHEMA_PATH.read_text()))


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("https://user:s3cret@mirror.example.org/conda-forge", "https://mirror.example.org/conda-forge"),
        (
            "https://conda.anaconda.org/t/ab-12cd34/private/linux-64/x-1-0.conda",
            "https://conda.anaconda.org/private/linux-64/x-1-0.conda",
        ),
        ("file:///srv/channels/conda-forge", "file:///srv/channels/conda-forge"),
    ],
)
def test_redact(url: str, clean: str) -> None:
    assert redact(url) == clean


def test_credentials_never_reach_a_written_file(kb: KnowledgeBase, tmp_path: Path) -> None:
    target = build_target(Options(gpus=("a100",)), kb).target
    result = lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    secret = [
        r.__class__(**{**r.__dict__, "url": r.url.replace("https://", "https://alice:hunter2@")})
        for r in result.records["linux-64"]
    ]
    text = condalock.render(
        {"linux-64": secret},
        ["https://bob:pw@mirror.example.org/t/tok-123/conda-forge"],
        {"linux-64": "0" * 64},
        {},
        "envsolver make --gpu a100",
        "d",
    )
    for leaked in ("hunter2", "alice", "bob:pw", "tok-123"):
        assert leaked not in text
    from envsolver.resolve.inputs import make_command

    command = make_command(target, channels=("https://u:p@mirror.example.org/t/tok-9/conda-forge",))
    assert "u:p@" not in command and "tok-9" not in command


# --- the legacy pytorch channel, and planning within the snapshot ---------------------------------------------


TWO_RUNTIMES = (
    "cuda-cudart 12.1.105 (required through pytorch-cuda 12.1) and cuda-cudart_linux-64 12.6.77 (required through "
    "cuda-nvcc 12.6.20) would be two CUDA runtimes, 12.1 and 12.6, in one prefix"
)


def test_seed_recipe_is_refused_offline_saying_why(tmp_path: Path) -> None:
    """The seeds' recipe (pytorch + pytorch-cuda from the pytorch channel, CUDA from nvidia): the snapshot's
    nvidia channel holds nvcc 12.6 only, whose runtime (cuda-cudart_linux-64 12.6.77) would sit beside
    pytorch-cuda 12.1's cuda-cudart 12.1.105, so nothing is written and the refusal says so."""
    args = ["make", "--gpu", "a100", "--torch", "2.3", "--source", "pytorch", "--python", "3.10", "--offline"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(
        f"error: the bundled snapshot ({snapshot.date()}) could not lock torch 2.3.0 cu121 (pytorch channel) "
        f"({TWO_RUNTIMES})"
    ), result.stderr
    assert "`--source conda-forge --torch 2.12.0 --python 3.11`" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("torch", "python", "deepspeed"), [("2.3.0", "3.10", True), ("2.1.0", "3.11", True), ("2.3.0", "3.9", False)]
)
def test_offline_refuses_the_legacy_cuda12_plans_for_two_runtimes(
    kb: KnowledgeBase, tmp_path: Path, torch: str, python: str, deepspeed: bool
) -> None:
    """Each CUDA 12 build of the pytorch channel in the snapshot (pytorch-cuda 12.1) solves only beside the
    nvidia channel's nvcc 12.6: two runtimes, so each is rejected and the plan refused."""
    options = Options(gpus=("a100",), torch=torch, python=python, source="pytorch", deepspeed=deepspeed)
    target = build_target(options, kb).target
    with pytest.raises(ConflictError) as info:
        lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    assert f"torch {torch} cu121 (pytorch channel) ({TWO_RUNTIMES})" in str(info.value)


def test_offline_names_why_a_cuda11_legacy_build_cannot_lock(kb: KnowledgeBase, tmp_path: Path) -> None:
    """2.3.1 is on the pytorch channel only for CUDA 11.8 in the snapshot, and no real record of an nvidia-
    channel nvcc 11.x for linux-64 exists: the refusal says so and offers what does lock."""
    target = build_target(Options(gpus=("a100",), torch="2.3.1", source="pytorch"), kb).target
    with pytest.raises(ConflictError) as info:
        lock.lock(target, kb, "offline", (), tmp_path / "cache", _no_progress)
    text = str(info.value)
    assert "nvcc" in text and "11.8" in text
    assert "`--source conda-forge --torch 2.12.0`" in text, text
    assert len(text) < 900


def _closed_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9


def test_without_network_gh200_plans_within_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live plan (torch 2.13) is not in the snapshot: without network, make plans within it and says so."""
    _closed_live(monkeypatch)
    result = CliRunner().invoke(main, ["make", "--profile", "gh200", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["lock"]["used"] == "snapshot" and doc["plan"]["torch_version"] == "2.10.0"
    warning, pypi = doc["lock"]["warnings"]  # the conda channels', then PyPI's index (a closed port in tests)
    assert "\n" not in warning and "could not be reached" in warning and snapshot.date() in warning
    assert "torch 2.13.0" in warning  # what the live channels would have given
    assert "\n" not in pypi and pypi.startswith("the Python package index could not be read (")
    parse_conda_lock_file(tmp_path / "conda-lock.yml")


# Targets on which `explain --offline` and `make --offline` must agree: the plan, or the refusal word for word.
AGREE = [
    ["--gpu", "a100"],
    ["--gpu", "a100", "--torch", "2.3.1"],
    ["--gpu", "a100", "--torch", "2.3", "--source", "pytorch", "--python", "3.10"],
    ["--gpu", "a100", "--torch", "2.3.1", "--source", "pytorch"],
    ["--profile", "gh200"],
    ["--gpu", "h100", "--torch", "2.13"],
    ["--gpu", "v100", "--driver", "535.104.05", "--driver-compat", "full"],
    ["--gpu", "rtx5090", "--driver", "550.54.14"],
]


@pytest.mark.parametrize("args", AGREE, ids=[" ".join(a) for a in AGREE])
def test_explain_offline_and_make_offline_agree(args: list[str], tmp_path: Path) -> None:
    runner = CliRunner()
    explained = runner.invoke(main, ["explain", *args, "--offline", "--json"])
    made = runner.invoke(main, ["make", *args, "--offline", "--out", str(tmp_path), "--json"])
    assert explained.exit_code == made.exit_code, (explained.output, made.output)
    if made.exit_code == 0:
        plan = json.loads(made.stdout)["plan"]
        assert json.loads(explained.stdout) == {"ok": True, **plan, "detected": {}}
        assert plan["snapshot_date"] == snapshot.date()
    else:
        assert made.exit_code == 1, made.output
        # The refusal, word for word (without --json, so only the message is compared).
        explained = runner.invoke(main, ["explain", *args, "--offline"])
        made = runner.invoke(main, ["make", *args, "--offline", "--out", str(tmp_path)])
        assert (explained.exit_code, explained.output) == (made.exit_code, made.output)


def test_a_mirror_that_lags_behind_the_knowledge_base_is_refused_plainly_with_a_way_out_that_locks(
    tmp_path: Path,
) -> None:
    """--channel with a mirror holding the bundled snapshot's conda-forge (torch up to 2.10): the plan's torch 2.13
    is not there. One plain sentence, then the newest build the mirror does lock, as options that were run."""
    local = snapshot.channels()["https://conda.anaconda.org/conda-forge"]
    args = ["make", "--gpu", "a100", "--channel", local]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a")])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        "error: the --channel URLs cannot lock torch 2.13.0 cu130 with CUDA 13.0: their repodata holds no torch "
        "2.13.0 cu130 build. Ways out: `--torch 2.10.0 --cuda 12.9` gives torch 2.10.0 cu129 with CUDA 12.9."
    ), result.stderr
    again = CliRunner().invoke(main, [*args, "--torch", "2.10.0", "--cuda", "12.9", "--out", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert "torch 2.10.0 (CUDA 12.9 build)" in again.stdout, again.stdout
