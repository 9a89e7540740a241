"""locks/ is exactly what scripts/regen_locks.py writes: regenerated into a temporary folder, byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("regen_locks", ROOT / "scripts" / "regen_locks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }


def test_locks_are_reproducible(tmp_path: Path) -> None:
    _script().regenerate(tmp_path / "locks", tmp_path / "cache")
    committed = _files(ROOT / "locks")
    assert committed, "locks/ is empty: run python scripts/regen_locks.py"
    assert _files(tmp_path / "locks") == committed


def test_every_profile_is_locked_or_explained() -> None:
    from envsolver.resolve import profile

    locked = {p.name for p in (ROOT / "locks").iterdir() if p.is_dir()}
    skipped = (ROOT / "locks" / "SKIPPED.md").read_text()
    for name in profile.available():
        assert name in locked or f"`{name}`" in skipped


def test_every_profile_locks_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make --profile NAME` with the live channels out of reach plans within the snapshot, as --offline does,
    and writes a lock that conda-lock's parser accepts."""
    from conda_lock.lockfile import parse_conda_lock_file

    from envsolver.kb import default_kb
    from envsolver.lock import outputs
    from envsolver.lock import run as lock
    from envsolver.resolve import profile
    from envsolver.resolve.inputs import Options, build_target, make_command

    monkeypatch.setattr(lock, "LIVE_LOCATION", "https://127.0.0.1:9")  # nothing listens on loopback port 9
    kb = default_kb()
    for name in profile.available():
        target = build_target(Options(profile=name), kb).target
        live = lock.lock(target, kb, "live", (), tmp_path / "cache", lambda _: None)
        offline = lock.lock(target, kb, "offline", (), tmp_path / "cache", lambda _: None)
        assert live.used == "snapshot" and live.records == offline.records, name
        assert "could not be reached" in live.warnings[0], (name, live.warnings)
        # A PyPI part adds the index's fallback line (a closed port stands for PyPI in tests: conftest.py).
        assert len(live.warnings) == 1 + bool(live.pip), (name, live.warnings)
        outputs.write_all(live, kb, tmp_path / name, make_command(target), None, force=True)
        locked = parse_conda_lock_file(tmp_path / name / "conda-lock.yml")
        torch = next(p for p in locked.package if p.name == "pytorch")
        assert torch.version == offline.plan.torch_version, name
