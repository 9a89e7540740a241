"""`envsolver diff` between two locks (cli/diff.py): real locks of the bundled snapshot, written by make's writers.
The prefix side is in tests/test_inventory.py; the changes themselves in tests/test_pkgdiff.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.kb import default_kb
from envsolver.lock import lockfile
from envsolver.lock import run as lock
from envsolver.lock.writers import condalock
from envsolver.resolve.inputs import Options, build_target

DRIVER = "580.65.06"


def invoke(args: list[str], cache: Path) -> Result:
    env = {"ENVSOLVER_CACHE_DIR": str(cache), "ENVSOLVER_DEBUG": None}
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


@pytest.fixture(scope="module")
def locks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """a100 locks whose DeepSpeed comes from conda-forge and from PyPI (make --offline), and a conda-lock.yml
    holding an a100 (linux-64) and a gh200 (linux-aarch64) solve."""
    root = tmp_path_factory.mktemp("diff")
    cache = root / "cache"
    out = {"cache": cache}
    for source in ("conda-forge", "pypi"):
        made = invoke(
            ["make", "--gpu", "a100", "--driver", DRIVER, "--offline", "--deepspeed-from", source, "-o", root / source],
            cache,
        )
        assert made.exit_code == 0, made.output
        out[source] = root / source
    kb = default_kb()
    records = {}
    for gpu in ("a100", "gh200"):
        target = build_target(Options(gpus=(gpu,), driver=DRIVER, deepspeed_from="conda-forge"), kb).target
        result = lock.lock(target, kb, "offline", (), cache, lambda _: None)
        records.update(result.records)
    assert sorted(records) == ["linux-64", "linux-aarch64"], sorted(records)
    both = root / "both" / "conda-lock.yml"
    both.parent.mkdir()
    hashes = {p: "0" * 64 for p in records}
    both.write_text(condalock.render(records, ["conda-forge"], hashes, {}, "test", "test"))
    out["both"] = both
    return out


def test_deepspeed_from_conda_then_from_pypi_is_moved(locks: dict[str, Path]) -> None:
    result = invoke(["diff", locks["conda-forge"], locks["pypi"]], locks["cache"])
    assert result.exit_code == 0, result.output
    conda = lockfile.read(locks["conda-forge"] / "conda-lock.yml", None)
    pypi = lockfile.read(locks["pypi"] / "conda-lock.yml", None)
    (old,) = [e for e in conda.entries if e.name == "deepspeed"]
    (new,) = [r for r in pypi.pip if r.name == "deepspeed"]
    rows = [line.split() for line in result.stdout.splitlines()[2:-1]]
    assert ["moved", "deepspeed", "conda", "->", "pip", old.version, old.build, "->", new.version] in rows, rows
    assert "moved between conda and PyPI" in result.stdout.splitlines()[-1], result.stdout


def test_the_explicit_lock_and_its_conda_lock_yml_hold_the_same_packages(locks: dict[str, Path]) -> None:
    """The explicit lock's `# pip` lines are its PyPI part: it differs from the conda-lock.yml beside it in
    nothing, DeepSpeed's sdist from PyPI included."""
    out = locks["pypi"]
    result = invoke(
        ["diff", "--exit-code", out / "conda-linux-64.lock", out / "conda-lock.yml", "--json"], locks["cache"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["differ"] is False and doc["changes"] == [], doc["changes"]
    assert doc["old"]["packages"] == doc["new"]["packages"] == doc["counts"]["unchanged"], doc


def test_a_lock_of_several_platforms_needs_platform(locks: dict[str, Path]) -> None:
    refused = invoke(["diff", locks["both"], locks["conda-forge"]], locks["cache"])
    assert refused.exit_code == 2, refused.output
    assert "locks linux-64, linux-aarch64. Pass --platform with one of them." in refused.stderr, refused.stderr
    same = invoke(
        ["diff", "--exit-code", "--platform", "linux-64", locks["both"], locks["conda-forge"]], locks["cache"]
    )
    assert same.exit_code == 0, f"the a100 solve in both locks is the same: {same.output}"
    other = invoke(["diff", "--platform", "linux-aarch64", locks["both"], locks["both"], "--json"], locks["cache"])
    assert other.exit_code == 0, other.output
    assert json.loads(other.stdout)["old"]["platform"] == "linux-aarch64", other.stdout


def test_a_missing_path_is_bad_input_with_json(locks: dict[str, Path], tmp_path: Path) -> None:
    result = invoke(["diff", "--json", locks["pypi"], tmp_path / "missing.yml"], locks["cache"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["kind"] == "bad_input", doc
    assert "cannot read lock" in doc["error"]["message"], doc["error"]
