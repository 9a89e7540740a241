"""install/inventory.py and `envsolver diff`: what an installed prefix holds (its conda-meta records, the PyPI
distributions pip put in its site-packages) against a lock, and a hostile prefix read without hanging.

The prefix is real: `envsolver install` links a local channel of tiny conda packages (tests/conda_packages.py)
into it, and pip installs a project built here (pip writes its dist-info and INSTALLER as it does for a PyPI
wheel). The hostile variants are made in such a prefix: a FIFO, a sparse gigabyte, symbolic links."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.install import inventory
from envsolver.install import run as installer
from envsolver.lock.pkgdiff import Package
from envsolver.lock.solve import ChannelSource, index_channel, solve
from envsolver.lock.writers import condalock
from tests.conda_packages import build_package

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = f"lib/{PY}/site-packages"


def _lock(channel: Path, specs: list[str], path: Path, cache: Path) -> Path:
    source = ChannelSource(channel.as_uri(), channel.as_uri())
    records = solve(specs, [source], "linux-64", {"__unix": "0"}, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(condalock.render({"linux-64": records}, [channel.as_uri()], {"linux-64": "0" * 64}, {}, "t", "t"))
    return path


def _pip_install(prefix: Path, project: Path) -> None:
    """pip itself installs PROJECT into PREFIX (its dist-info, RECORD and INSTALLER), from the local tree only."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation", "--prefix",
         str(prefix), "--no-warn-script-location", "--disable-pip-version-check", "-q", str(project)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"pip install failed: {done.stderr[-2000:]}"


def _project(root: Path, name: str, version: str) -> Path:
    project = root / f"src-{name}"
    module = name.replace("-", "_")
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n\n[tool.setuptools]\npackages = ["{module}"]\n'
    )
    return project


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A channel of tiny-app (needs tiny-lib, tiny-data) and tiny-py (a conda Python package whose dist-info has
    no INSTALLER) and tiny-cpy (INSTALLER conda); its full lock, a lock of tiny-data alone, and a prefix
    installed from the full lock, then given pip's tiny-lib 2.0 (over conda's tiny-lib 1.0)."""
    root = tmp_path_factory.mktemp("inventory")
    channel = root / "channel"
    build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "tiny lib\n"})
    build_package(channel, "tiny-data", "2.1", {"share/tiny/data.txt": "data\n"})
    build_package(channel, "tiny-app", "0.3", {"bin/tiny-app": "#!/bin/sh\n"}, depends=("tiny-lib >=1", "tiny-data"))
    metadata = "Metadata-Version: 2.1\nName: {0}\nVersion: 1.0\n\n"
    build_package(channel, "tiny-py", "1.0", {f"{SITE}/tiny_py-1.0.dist-info/METADATA": metadata.format("tiny-py")})
    build_package(channel, "tiny-cpy", "1.0", {
        f"{SITE}/tiny_cpy-1.0.dist-info/METADATA": metadata.format("tiny-cpy"),
        f"{SITE}/tiny_cpy-1.0.dist-info/INSTALLER": "conda\n",
    })  # fmt: skip
    (channel / "noarch").mkdir(exist_ok=True)
    index_channel(channel)
    cache = root / "cache"
    full = _lock(channel, ["tiny-app", "tiny-py", "tiny-cpy"], root / "full" / "conda-lock.yml", cache)
    data = _lock(channel, ["tiny-data"], root / "data" / "conda-lock.yml", cache)
    prefix = root / "env"
    installer.install(full, prefix, None, {}, cache, lambda _: None)
    _pip_install(prefix, _project(root, "tiny-lib", "2.0"))
    return {"root": root, "full": full, "data": data, "prefix": prefix, "cache": cache}


def _copy_prefix(world: dict[str, Path], tmp_path: Path) -> Path:
    prefix = tmp_path / "env"
    subprocess.run(["cp", "-a", str(world["prefix"]), str(prefix)], check=True, timeout=60)
    return prefix


def invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env={"ENVSOLVER_DEBUG": None, **(env or {})})


def test_a_prefix_lists_its_conda_packages_and_what_pip_installed(world: dict[str, Path]) -> None:
    found = inventory.read(world["prefix"])
    conda = {p.name: p for p in found.packages if p.manager == "conda"}
    pip = {p.name: p for p in found.packages if p.manager == "pip"}
    assert sorted(conda) == ["tiny-app", "tiny-cpy", "tiny-data", "tiny-lib", "tiny-py"], conda
    assert conda["tiny-lib"] == Package("tiny-lib", "1.0", "h0_0", "conda"), "version and build from conda-meta"
    assert pip == {"tiny-lib": Package("tiny-lib", "2.0", "", "pip")}, (
        "pip's dist-info (INSTALLER pip) is the one PyPI distribution: tiny-py's has no INSTALLER but its conda "
        f"record owns it, tiny-cpy's says conda; found {pip}"
    )
    assert found.skipped == (), found.skipped


def test_diff_of_the_lock_and_the_prefix_shows_pip_over_conda(world: dict[str, Path]) -> None:
    result = invoke(["diff", str(world["full"]), str(world["prefix"])])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"old: {world['full']} (lock, linux-64, 5 packages)", lines
    assert lines[1] == f"new: {world['prefix']} (installed prefix, 6 packages)", lines
    assert lines[2:] == [
        "  added  tiny-lib  pip  -  -> 2.0  (over conda's tiny-lib 1.0)",
        "1 of 6 packages differ: 1 added.",
    ], result.stdout
    loud = invoke(["diff", "--exit-code", str(world["full"]), str(world["prefix"])])
    assert loud.exit_code == 1, f"--exit-code: 1 when they differ, as git diff --exit-code: {loud.output}"
    same = invoke(["diff", "--exit-code", str(world["full"]), str(world["full"].parent)])
    assert same.exit_code == 0 and "no package differs" in same.stdout, same.output


def test_diff_json_names_both_sides_and_each_change(world: dict[str, Path]) -> None:
    result = invoke(["diff", str(world["full"]), str(world["prefix"]), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["ok", "old", "new", "differ", "counts", "changes"], list(doc)
    assert doc["old"] == {
        "path": str(world["full"]), "kind": "lock", "platform": "linux-64", "packages": 5, "skipped": []
    }, doc["old"]  # fmt: skip
    assert doc["new"]["kind"] == "prefix" and doc["new"]["packages"] == 6, doc["new"]
    assert doc["changes"] == [{
        "kind": "added", "name": "tiny-lib", "old": None,
        "new": {"name": "tiny-lib", "version": "2.0", "build": None, "manager": "pip"},
        "over": {"name": "tiny-lib", "version": "1.0", "build": "h0_0", "manager": "conda"},
    }], doc["changes"]  # fmt: skip


def test_a_package_gone_from_conda_and_come_from_pypi_is_moved(world: dict[str, Path], tmp_path: Path) -> None:
    """The prefix re-installed from a lock without tiny-lib keeps pip's tiny-lib: against the full lock, tiny-lib
    left conda for PyPI (as a pip install of torch replaces conda's pytorch)."""
    prefix = _copy_prefix(world, tmp_path)
    installer.install(world["data"], prefix, None, {}, world["cache"], lambda _: None)
    result = invoke(["diff", str(world["full"]), str(prefix)])
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[2:]
    assert "  moved    tiny-lib  conda -> pip  1.0 h0_0  -> 2.0" in rows, result.stdout
    assert [r.split()[0] for r in rows[:-1]] == ["removed", "removed", "moved", "removed"], result.stdout


def test_a_directory_make_wrote_stands_for_its_lock(world: dict[str, Path]) -> None:
    found = inventory.side(world["full"].parent, None)
    assert found.kind == "lock" and found.path == world["full"], found


def test_neither_a_prefix_nor_a_lock_directory_is_refused(tmp_path: Path) -> None:
    result = invoke(["diff", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "holds neither conda-meta/" in result.stderr and "envsolver diff LOCK" in result.stderr, result.stderr


def test_a_fifo_as_a_side_is_refused_at_once(world: dict[str, Path], tmp_path: Path) -> None:
    fifo = tmp_path / "conda-lock.yml"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = invoke(["diff", str(world["full"]), str(fifo)])
    assert time.monotonic() - started < 30, "a FIFO nobody writes must not be waited on"
    assert result.exit_code == 2 and "is a FIFO" in result.stderr, result.output


def test_an_explicit_locks_pip_part_is_refused_with_the_lock_to_pass(world: dict[str, Path], tmp_path: Path) -> None:
    part = tmp_path / "conda-linux-64.pip.txt"
    part.write_text("# nothing\n")
    result = invoke(["diff", str(world["full"]), str(part)])
    assert result.exit_code == 2 and "Pass the conda-<platform>.lock beside it" in result.stderr, result.output


def test_dash_n_names_the_environment(world: dict[str, Path], tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "train").symlink_to(world["prefix"])
    result = invoke(["diff", str(world["full"]), "-n", "train"], {"CONDA_ENVS_DIRS": str(envs)})
    assert result.exit_code == 0 and "(over conda's tiny-lib 1.0)" in result.stdout, result.output
    both = invoke(["diff", str(world["full"])])
    assert both.exit_code == 2 and "Pass NEW or -n NAME" in both.stderr, both.output


# --- a hostile prefix ----------------------------------------------------------------------------------------


def test_a_symlinked_conda_meta_is_refused(world: dict[str, Path], tmp_path: Path) -> None:
    prefix = tmp_path / "evil"
    prefix.mkdir()
    (prefix / "conda-meta").symlink_to(world["prefix"] / "conda-meta")
    with pytest.raises(BadInputError, match="conda-meta that is a symbolic link"):
        inventory.read(prefix)
    result = invoke(["diff", str(world["full"]), str(prefix)])
    assert result.exit_code == 2 and "symbolic link" in result.stderr, result.output


def test_records_that_cannot_be_read_are_skipped_and_named(world: dict[str, Path], tmp_path: Path) -> None:
    prefix = _copy_prefix(world, tmp_path)
    meta = prefix / "conda-meta"
    os.mkfifo(meta / "fifo-1.0-0.json")
    with (meta / "huge-1.0-0.json").open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB, sparse
    (meta / "link-1.0-0.json").symlink_to("/etc/passwd")
    (meta / "broken-1.0-0.json").write_text("{not json")
    (meta / "evil-1.0-0.json").write_text(json.dumps({"name": "evil\x1b[2J", "version": "1.0", "build": "0"}))
    started = time.monotonic()
    found = inventory.read(prefix)
    assert time.monotonic() - started < 30, "neither the FIFO nor the gigabyte is waited on or read whole"
    said = "\n".join(found.skipped)
    for expected in (
        "conda-meta/fifo-1.0-0.json: a FIFO, skipped",
        f"conda-meta/huge-1.0-0.json: larger than {inventory.MAX_RECORD_BYTES} bytes, skipped",
        "conda-meta/link-1.0-0.json: a symbolic link, skipped",
        "conda-meta/broken-1.0-0.json: not JSON, skipped",
        "conda-meta/evil-1.0-0.json: no well-formed name, version and build, skipped",
    ):
        assert expected in said, f"{expected!r} not among the notes:\n{said}"
    assert len([p for p in found.packages if p.manager == "conda"]) == 5, "the real records are still read"
    result = invoke(["diff", str(world["full"]), str(prefix)])
    assert result.exit_code == 0, result.output
    assert "warning: new " in result.stderr and "a FIFO, skipped" in result.stderr, result.stderr


def test_a_hostile_dist_info_is_skipped_and_its_name_escaped(world: dict[str, Path], tmp_path: Path) -> None:
    prefix = _copy_prefix(world, tmp_path)
    site = prefix / SITE
    evil = site / "evil\x1b]0;owned\x07-1.0.dist-info"
    evil.mkdir()
    (evil / "INSTALLER").write_text("pip\n")
    (evil / "METADATA").write_text("Name: evil\x1b[2J\nVersion: 1.0\n\n")
    fifo = site / "fifo-1.0.dist-info"
    fifo.mkdir()
    (fifo / "INSTALLER").write_text("pip\n")
    os.mkfifo(fifo / "METADATA")
    (site / "linked-1.0.dist-info").symlink_to(site / "tiny_lib-2.0.dist-info")
    started = time.monotonic()
    result = invoke(["diff", str(world["full"]), str(prefix)])
    assert time.monotonic() - started < 30, "a FIFO METADATA is not waited on"
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output, "no escape sequence reaches the terminal"
    assert "evil\\x1b]0;owned\\x07-1.0.dist-info: no PyPI project name, skipped" in result.stderr, result.stderr
    assert f"{SITE}/fifo-1.0.dist-info/METADATA: a FIFO, not read" in result.stderr, result.stderr
    assert f"{SITE}/linked-1.0.dist-info: not a directory of its own, skipped" in result.stderr, result.stderr
    pip = [p for p in inventory.read(prefix).packages if p.manager == "pip"]
    assert [p.name for p in pip] == ["fifo", "tiny-lib"], f"fifo's name and version come from its directory: {pip}"


def test_a_symlinked_lib_is_not_followed(world: dict[str, Path], tmp_path: Path) -> None:
    prefix = _copy_prefix(world, tmp_path)
    (prefix / "lib").rename(prefix / "lib.real")
    (prefix / "lib").symlink_to(prefix / "lib.real")
    found = inventory.read(prefix)
    assert not [p for p in found.packages if p.manager == "pip"], "site-packages behind a symbolic link: not read"
    assert "lib: a symbolic link, so its site-packages were not read" in found.skipped, found.skipped


def test_the_entries_read_are_bounded(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory, "MAX_ENTRIES", 3)
    found = inventory.read(world["prefix"])
    assert len(found.packages) <= 3, found.packages
    assert any("more than 3 entries in all" in note for note in found.skipped), found.skipped


def test_the_notes_are_bounded(world: dict[str, Path], tmp_path: Path) -> None:
    prefix = _copy_prefix(world, tmp_path)
    for number in range(inventory.MAX_SKIPPED + 7):
        (prefix / "conda-meta" / f"bad{number}-1.0-0.json").write_text("[]")
    found = inventory.read(prefix)
    assert len(found.skipped) == inventory.MAX_SKIPPED + 1 and found.skipped[-1] == "and 7 more", found.skipped[-3:]
