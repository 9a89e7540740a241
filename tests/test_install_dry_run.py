"""`envsolver install --dry-run`: what would be linked (name, version, build, size, cached or to download, the
prefix), with --json too, and nothing written: not the cache, not the prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.install import run as installer
from tests.httplab import channel_with_big, serve, write_lock


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _dry(lock: Path, prefix: Path, cache: Path, *more: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(prefix), "--dry-run", *more], env={"ENVSOLVER_CACHE_DIR": str(cache)}
    )
    return result.exit_code, result.output


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return write_lock(channel_with_big(tmp_path), tmp_path)


def test_dry_run_writes_nothing_and_lists_every_package(lock: Path, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "env", tmp_path / "cache"
    code, out = _dry(lock, prefix, cache)
    assert code == 0, out
    assert not prefix.exists() and not cache.exists()
    for name, version in (("tiny-app", "0.3"), ("tiny-lib", "1.0"), ("tiny-data", "2.1")):
        line = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert line.split()[1:4] == [version, "h0_0", "download"]
    assert str(prefix) in out and "nothing was written" in out


def test_dry_run_json_tells_cached_from_to_download(lock: Path, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "env", tmp_path / "cache"
    installer.install(lock, tmp_path / "other", None, {}, cache, lambda _: None, {})  # fills the cache
    before = _tree(cache)
    code, out = _dry(lock, prefix, cache, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["prefix"] == str(prefix) and doc["changes"] is True
    assert {p["name"]: p["state"] for p in doc["packages"]} == dict.fromkeys(
        ("tiny-app", "tiny-lib", "tiny-data"), "cached"
    )
    assert all(isinstance(p["size"], int) and p["size"] > 0 for p in doc["packages"])
    assert _tree(cache) == before and not prefix.exists()


def test_dry_run_of_an_installed_prefix_says_nothing_would_change(lock: Path, tmp_path: Path) -> None:
    prefix, cache = tmp_path / "env", tmp_path / "cache"
    installer.install(lock, prefix, None, {}, cache, lambda _: None, {})
    before, cached = _tree(prefix), _tree(cache)
    code, out = _dry(lock, prefix, cache, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["changes"] is False, out
    assert {p["state"] for p in doc["packages"]} == {"installed"}
    assert _tree(prefix) == before and _tree(cache) == cached


def test_dry_run_shows_mirrored_urls_without_credentials(lock: Path, tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    with serve(channel) as lab:
        mirror = lab.url.replace("http://", "http://alice:pw-S3CRET@")
        code, out = _dry(
            lock, tmp_path / "env", tmp_path / "cache", "--json", "--mirror", f"{channel.as_uri()}={mirror}"
        )
    assert code == 0 and "S3CRET" not in out, out
    assert all(p["url"].startswith(lab.url + "/linux-64/") for p in json.loads(out)["packages"])
    assert lab.requests == []  # a dry run fetches nothing


def test_dry_run_refuses_a_bad_lock_like_install(tmp_path: Path) -> None:
    bad = tmp_path / "conda-lock.yml"
    bad.write_text("version: 1\npackage: 3\n")
    code, out = _dry(bad, tmp_path / "env", tmp_path / "cache")
    assert code == 2 and "Traceback" not in out, out
    assert not (tmp_path / "cache").exists()
