"""locks/ is exactly what scripts/regen_locks.py writes: regenerated into a temporary folder, byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
    from envsolver import profile

    locked = {p.name for p in (ROOT / "locks").iterdir() if p.is_dir()}
    skipped = (ROOT / "locks" / "SKIPPED.md").read_text()
    for name in profile.available():
        assert name in locked or f"`{name}`" in skipped
