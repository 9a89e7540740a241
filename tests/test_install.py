"""envsolver install against a local channel of tiny synthetic packages built by the tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.install import run as installer
from envsolver.lock import lockfile
from envsolver.lock.solve import ChannelSource, Record, solve
from envsolver.lock.writers import condalock, explicit
from tests.conda_packages import build_channel


def _quiet(_: str) -> None:
    return None


@pytest.fixture
def channel(tmp_path: Path) -> Path:
    return build_channel(tmp_path)


def _records(channel: Path, tmp_path: Path) -> list[Record]:
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    return solve(["tiny-app"], [source], "linux-64", {"__unix": "0"}, tmp_path / "solve-cache")


def write_lock(channel: Path, tmp_path: Path, kind: str = "conda-lock", custom: dict[str, str] | None = None) -> Path:
    records = _records(channel, tmp_path)
    if kind == "explicit":
        path = tmp_path / "conda-linux-64.lock"
        path.write_text(explicit.render(records, "linux-64", "test", "test"))
    else:
        path = tmp_path / "conda-lock.yml"
        path.write_text(
            condalock.render(
                {"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, custom or {}, "test", "test"
            )
        )
    return path


def snapshot_tree(prefix: Path) -> dict[str, bytes]:
    if not prefix.exists():
        return {}
    return {str(p.relative_to(prefix)): p.read_bytes() for p in sorted(prefix.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["conda-lock", "explicit"])
def test_install_then_noop(channel: Path, tmp_path: Path, kind: str) -> None:
    lock = write_lock(channel, tmp_path, kind)
    prefix = tmp_path / "env"
    report = installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet)
    assert report.changed and report.packages == 3 and report.fetched == 3
    assert (prefix / "bin" / "tiny-app").read_text() == "#!/bin/sh\necho tiny\n"
    assert (prefix / "share" / "tiny" / "data.txt").exists()
    assert set(installer.installed(prefix)) == {"tiny-app", "tiny-lib", "tiny-data"}
    before = snapshot_tree(prefix)
    started = time.perf_counter()
    again = installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet)
    elapsed = time.perf_counter() - started
    assert not again.changed and again.fetched == 0
    assert snapshot_tree(prefix) == before
    # Nothing fetched, linked or changed (above); the time only has to be far from a real install's, with a margin
    # that holds on a loaded 2-core machine (quiet: about 0.05 s).
    assert elapsed < 5.0, f"a no-op install took {elapsed:.2f} s"


def test_tampered_archive_is_refused_and_prefix_unchanged(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)  # an environment (install refuses a non-empty directory that is none)
    (prefix / "keep.txt").write_text("mine")
    archive = channel / "linux-64" / "tiny-data-2.1-h0_0.tar.bz2"
    data = bytearray(archive.read_bytes())
    data[-10] ^= 0xFF
    archive.write_bytes(bytes(data))
    before = snapshot_tree(prefix)
    with pytest.raises(installer.IntegrityError) as info:
        installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet)
    assert "tiny-data 2.1" in str(info.value) and "nothing was installed" in str(info.value)
    assert snapshot_tree(prefix) == before


def test_truncated_archive_is_refused(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    archive = channel / "linux-64" / "tiny-lib-1.0-h0_0.tar.bz2"
    archive.write_bytes(archive.read_bytes()[:50])
    with pytest.raises(installer.IntegrityError, match=r"tiny-lib 1\.0"):
        installer.install(lock, tmp_path / "env", None, {}, tmp_path / "cache", _quiet)
    assert not (tmp_path / "env" / "conda-meta").exists()


def test_interrupted_install_converges(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    prefix = tmp_path / "env"
    # An install stopped part-way: one package linked, another half there (files without its record).
    read = lockfile.read(lock, None)
    platform, entries = read.platform, read.entries
    lib = next(e for e in entries if e.name == "tiny-lib")
    from envsolver.lock import solve as solve_module

    solve_module.install_records([(lib, lib.url)], prefix, platform, tmp_path / "other-pkgs")
    (prefix / "share" / "tiny").mkdir(parents=True)
    (prefix / "share" / "tiny" / "data.txt").write_text("partial")
    report = installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet)
    assert report.changed and report.fetched == 2
    assert set(installer.installed(prefix)) == {"tiny-app", "tiny-lib", "tiny-data"}
    assert (prefix / "share" / "tiny" / "data.txt").read_text() == "data " * 100 + "\n"
    assert not installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet).changed


def test_mirror_rewrites_urls(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    moved = tmp_path / "mirror"
    channel.rename(moved)
    prefix = tmp_path / "env"
    with pytest.raises(installer.FetchError, match="--mirror"):
        installer.install(lock, prefix, None, {}, tmp_path / "cache", _quiet)
    report = installer.install(lock, prefix, None, {channel.as_uri(): moved.as_uri()}, tmp_path / "cache", _quiet)
    assert report.changed and (prefix / "bin" / "tiny-app").exists()


def test_cli_install(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    prefix = tmp_path / "env"
    result = CliRunner().invoke(
        main,
        ["install", str(lock), "-p", str(prefix), "--no-hook", "--json"],
        env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["changed"] is True and doc["packages"] == 3 and doc["hook"].startswith("not run")
    again = CliRunner().invoke(
        main,
        ["install", str(lock), "-p", str(prefix), "--no-hook"],
        env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert again.exit_code == 0 and "already up to date" in again.output, again.output


def test_cli_install_refuses_tampering_with_exit_2(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    archive = channel / "linux-64" / "tiny-app-0.3-h0_0.tar.bz2"
    archive.write_bytes(archive.read_bytes() + b"extra")
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(tmp_path / "env")], env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    )
    assert result.exit_code == 2, result.output
    assert "tiny-app 0.3" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("@EXPLICIT\nhttps://x/linux-64/a-1-0.conda#123\n", "names no platform"),
        ("# platform: linux-64\n@EXPLICIT\nnot a url\n", "is not `url#md5`"),
        ("version: 1\npackage: [\n", "not a conda-lock.yml"),
    ],
)
def test_bad_locks(tmp_path: Path, text: str, phrase: str) -> None:
    path = tmp_path / "bad.lock"
    path.write_text(text)
    with pytest.raises(BadInputError, match=phrase):
        lockfile.read(path, None)


def test_explicit_with_sha256_fragment(tmp_path: Path) -> None:
    sha = "a" * 64
    path = tmp_path / "x.lock"
    path.write_text(f"# platform: linux-64\n@EXPLICIT\nhttps://h/c/linux-64/pkg-1.0-h1_0.conda#sha256={sha}\n")
    read = lockfile.read(path, None)
    platform, entries = read.platform, read.entries
    assert platform == "linux-64"
    assert (entries[0].name, entries[0].version, entries[0].build, entries[0].sha256) == ("pkg", "1.0", "h1_0", sha)


def test_cli_install_runs_the_hook(channel: Path, tmp_path: Path) -> None:
    """Without --no-hook the post-install hook runs: activation scripts, then a pre-flight that fails here
    (the synthetic env has no python or torch), so install exits 1 after installing."""
    lock = write_lock(channel, tmp_path, custom={"envsolver_torch_cuda_arch_list": "9.0+PTX"})
    prefix = tmp_path / "env"
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(prefix), "--json"], env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    )
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert doc["changed"] is True and doc["hook"]["ok"] is False
    assert any(c["id"] == "torch_import" and c["status"] == "fail" for c in doc["hook"]["checks"])
    assert (prefix / "etc" / "conda" / "activate.d" / "envsolver.sh").exists()
    assert (prefix / "etc" / "envsolver" / "lock-metadata.json").exists()


def test_cli_install_skips_the_hook_for_foreign_locks(channel: Path, tmp_path: Path) -> None:
    lock = write_lock(channel, tmp_path)
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(tmp_path / "env")], env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    )
    assert result.exit_code == 0 and "no envsolver metadata" in result.output, result.output


def test_hook_no_build_on_an_installed_env_writes_working_activation(channel: Path, tmp_path: Path) -> None:
    """Done-when of the hook: `envsolver hook -p P --no-build` on an env installed by `envsolver install`."""
    import subprocess

    lock = write_lock(channel, tmp_path, custom={"envsolver_torch_cuda_arch_list": "8.0;9.0+PTX"})
    prefix = tmp_path / "env"
    env = {"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    assert CliRunner().invoke(main, ["install", str(lock), "-p", str(prefix), "--no-hook"], env=env).exit_code == 0
    # The test channel's packages hold no python; the hook refuses a prefix without one, so a stand-in (one the
    # probe cannot run: the pre-flight fails, the activation is written) takes its place.
    (prefix / "bin").mkdir(exist_ok=True)
    (prefix / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    (prefix / "bin" / "python").chmod(0o755)
    result = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--no-build", "--json"], env=env)
    doc = json.loads(result.output)
    assert doc["torch_cuda_arch_list"] == "8.0;9.0+PTX"  # from the lock metadata install kept
    activate = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
    out = subprocess.run(
        ["bash", "-c", f". {activate}; echo ${{CUDA_HOME-unset}} $TORCH_CUDA_ARCH_LIST $DS_ACCELERATOR"],
        env={"PATH": "/usr/bin:/bin", "CONDA_PREFIX": str(prefix)},
        capture_output=True,
        text=True,
        check=True,
    )
    # The synthetic env holds no nvcc: the activation leaves CUDA_HOME alone (it follows the probe's facts).
    assert out.stdout.split() == ["unset", "8.0;9.0+PTX", "cuda"]
