"""The shared op cache (envsolver/hook/opcache.py) and the op key (envsolver/hook/opkey.py).

Real files and real processes: concurrent writers are separate Python processes storing the same key at once,
with readers polling; a corrupt entry is made by truncating, editing or half-deleting a stored one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.hook import opcache, opkey

KEY = "a" * 64
MODULE = "deepspeed.ops.adam.fused_adam_op"
META = {"deepspeed": "0.19.8", "torch": "2.11.0+cu130", "torch_info": {"version": "2.11", "cuda_version": "13.0"}}


def library(tmp_path: Path, content: bytes = b"\x7fELF fake shared library" * 1000) -> Path:
    path = tmp_path / "built" / "fused_adam_op.so"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


# --- store and lookup ---------------------------------------------------------------------------------------


def test_a_stored_op_is_found_proven_with_its_manifest(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = library(tmp_path)
    stored = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert stored.library == cache / KEY / "fused_adam_op.so"
    assert stored.library.read_bytes() == built.read_bytes()
    assert stored.sha256 == opcache.sha256_file(built)
    found = opcache.lookup(cache, KEY)
    assert found == stored
    assert found is not None and found.meta == META and found.module == MODULE and found.op == "fused_adam"
    assert entries(cache) == [KEY]  # no temporary directory left behind
    manifest = json.loads((cache / KEY / opcache.MANIFEST).read_text())
    assert manifest["sha256"] == stored.sha256 and manifest["library"] == "fused_adam_op.so"


def test_an_absent_key_is_none(tmp_path: Path) -> None:
    assert opcache.lookup(tmp_path, KEY) is None


def test_entries_are_readable_by_the_group_under_a_shared_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        stored = opcache.store(tmp_path / "cache", KEY, "fused_adam", MODULE, library(tmp_path), META)
    finally:
        os.umask(old)
    assert stat.S_IMODE(stored.library.stat().st_mode) == 0o664
    assert stat.S_IMODE((stored.library.parent / opcache.MANIFEST).stat().st_mode) == 0o664
    assert stat.S_IMODE(stored.library.parent.stat().st_mode) == 0o775


@pytest.mark.parametrize("bad", ["not-a-key", "A" * 64, "a" * 63, "../" + "a" * 61, ""])
def test_keys_outside_their_grammar_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        opcache.lookup(tmp_path, bad)
    with pytest.raises(ValueError):
        opcache.store(tmp_path, bad, "fused_adam", MODULE, library(tmp_path), META)


@pytest.mark.parametrize(("op", "module"), [("fused adam", MODULE), ("fused_adam", "os.system"), ("x", "deepspeed")])
def test_op_and_module_names_outside_their_grammar_are_refused(tmp_path: Path, op: str, module: str) -> None:
    with pytest.raises(ValueError):
        opcache.store(tmp_path, KEY, op, module, library(tmp_path), META)


# --- corrupt entries ----------------------------------------------------------------------------------------


def truncate(entry: Path) -> None:
    lib = entry / "fused_adam_op.so"
    lib.write_bytes(lib.read_bytes()[:100])


def flip_a_byte(entry: Path) -> None:
    lib = entry / "fused_adam_op.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))


def drop_library(entry: Path) -> None:
    (entry / "fused_adam_op.so").unlink()


def drop_manifest(entry: Path) -> None:
    (entry / opcache.MANIFEST).unlink()


def garble_manifest(entry: Path) -> None:
    (entry / opcache.MANIFEST).write_text("{not json")


def manifest_for_another_key(entry: Path) -> None:
    doc = json.loads((entry / opcache.MANIFEST).read_text())
    doc["key"] = "b" * 64
    (entry / opcache.MANIFEST).write_text(json.dumps(doc))


def manifest_points_outside(entry: Path) -> None:
    doc = json.loads((entry / opcache.MANIFEST).read_text())
    doc["library"] = "../../etc/passwd"
    (entry / opcache.MANIFEST).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "damage",
    [
        truncate,
        flip_a_byte,
        drop_library,
        drop_manifest,
        garble_manifest,
        manifest_for_another_key,
        manifest_points_outside,
    ],
)
def test_a_corrupt_entry_is_moved_aside_never_returned_and_stored_again(tmp_path: Path, damage: object) -> None:
    cache = tmp_path / "cache"
    built = library(tmp_path)
    opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    damage(cache / KEY)  # type: ignore[operator]
    assert opcache.lookup(cache, KEY) is None
    assert entries(cache) == []  # moved aside and removed
    again = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert opcache.lookup(cache, KEY) == again
    assert again.library.read_bytes() == built.read_bytes()


def test_storing_over_a_corrupt_entry_replaces_it(tmp_path: Path) -> None:
    """A writer that finds a bad entry where it renames moves it aside and puts its own in place."""
    cache = tmp_path / "cache"
    built = library(tmp_path)
    opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    flip_a_byte(cache / KEY)
    stored = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert stored.library.read_bytes() == built.read_bytes()
    assert opcache.lookup(cache, KEY) == stored
    assert entries(cache) == [KEY]


# --- concurrent writers and readers -------------------------------------------------------------------------


def _writer(cache: str, built: str, rounds: int, out: str) -> None:
    results = []
    for _ in range(rounds):
        entry = opcache.store(Path(cache), KEY, "fused_adam", MODULE, Path(built), META)
        results.append(entry.sha256)
    Path(out).write_text(json.dumps(results))


def _reader(cache: str, rounds: int, out: str) -> None:
    seen = []
    for _ in range(rounds):
        entry = opcache.lookup(Path(cache), KEY)
        if entry is not None:
            seen.append(opcache.sha256_file(entry.library) == entry.sha256)
    Path(out).write_text(json.dumps(seen))


def test_concurrent_writers_and_readers_never_see_a_partial_entry(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = library(tmp_path, os.urandom(3 << 20))
    want = opcache.sha256_file(built)
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_writer, args=(str(cache), str(built), 5, str(tmp_path / f"w{i}.json"))) for i in range(4)
    ]
    procs += [ctx.Process(target=_reader, args=(str(cache), 40, str(tmp_path / f"r{i}.json"))) for i in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    for i in range(4):
        assert json.loads((tmp_path / f"w{i}.json").read_text()) == [want] * 5
    for i in range(2):
        assert all(json.loads((tmp_path / f"r{i}.json").read_text()))
    assert entries(cache) == [KEY]
    found = opcache.lookup(cache, KEY)
    assert found is not None and found.library.read_bytes() == built.read_bytes()


# --- install into a prefix ----------------------------------------------------------------------------------


def test_install_copies_the_library_and_proves_the_copy(tmp_path: Path) -> None:
    entry = opcache.store(tmp_path / "cache", KEY, "fused_adam", MODULE, library(tmp_path), META)
    dest = tmp_path / "prefix" / "lib" / "ops" / "fused_adam_op.so"
    assert opcache.install(entry, dest) == dest
    assert opcache.sha256_file(dest) == entry.sha256
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fused_adam_op.so"]


def test_install_refuses_a_library_that_changed_since_it_was_proven(tmp_path: Path) -> None:
    entry = opcache.store(tmp_path / "cache", KEY, "fused_adam", MODULE, library(tmp_path), META)
    flip_a_byte(entry.library.parent)
    dest = tmp_path / "prefix" / "fused_adam_op.so"
    with pytest.raises(OSError, match="does not match its SHA-256"):
        opcache.install(entry, dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


# --- the key ------------------------------------------------------------------------------------------------

FACTS = {
    "python": "3.12.3 (main) [GCC 13.2.0]",
    "ext_suffix": ".cpython-312-x86_64-linux-gnu.so",
    "torch_version_py": "__version__ = '2.11.0+cu130'\ncuda = '13.0'\n",
    "deepspeed_info": "version='0.19.8'",
    "deepspeed_tree": "f" * 64,
    "cxx": "g++ (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0",
    "nvcc": "Cuda compilation tools, release 13.0, V13.0.88",
    "cpu": {"vendor_id": "GenuineIntel", "flags": "avx512f"},
    "site": "/envs/a/lib/python3.12/site-packages",
}


def key(op: str = "fused_adam", arch: str = "9.0", **changed: object) -> str | None:
    return opkey.op_key(opkey.KeyFacts({**FACTS, **changed}), op, arch, "linux-64")


def test_the_key_is_64_hex_digits_and_stable() -> None:
    assert key() == key()
    assert opcache._KEY.match(key() or "")


@pytest.mark.parametrize("name", [*opkey.REQUIRED, "nvcc"])
def test_every_fact_that_changes_the_binary_changes_the_key(name: str) -> None:
    assert key(**{name: str(FACTS[name]) + " (other)"}) != key()


def test_the_op_and_arch_list_change_the_key_the_prefix_does_not() -> None:
    assert key(op="fused_lamb") != key()
    assert key(arch="8.0;9.0") != key()
    assert key(site="/envs/b/lib/python3.12/site-packages") == key()


def test_the_cpu_counts_for_cpu_ops_only() -> None:
    other_cpu = {"vendor_id": "AuthenticAMD", "flags": "avx2"}
    assert key(op="cpu_adam", cpu=other_cpu) != key(op="cpu_adam")
    assert key(op="fused_adam", cpu=other_cpu) == key(op="fused_adam")


@pytest.mark.parametrize("name", opkey.REQUIRED)
def test_no_key_without_a_required_fact(name: str) -> None:
    assert key(**{name: None}) is None
    assert opkey.KeyFacts({**FACTS, name: ""}).missing == (name,)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from([*opkey.REQUIRED, "nvcc", "cpu", "junk"]), st.text(max_size=20)))
def test_key_of_any_facts_is_none_or_a_valid_key(facts: dict[str, str]) -> None:
    got = opkey.op_key(opkey.KeyFacts(facts), "cpu_adam", "9.0", "linux-64")
    assert got is None or opcache._KEY.match(got)
