"""The shared op cache (envsolver/hook/opcache.py) and the op key (envsolver/hook/opkey.py).

Real files and real processes: concurrent writers are separate Python processes storing the same key at once,
with readers polling; a corrupt entry is made by truncating, editing or half-deleting a stored one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.hook import opcache, opkey, optrust
from tests import oplibs

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
    assert found == stored, found
    assert found is not None and found.meta == META and found.module == MODULE and found.op == "fused_adam"
    assert found.writers == (os.geteuid(),), found.writers
    assert entries(cache) == [KEY]  # no temporary directory left behind
    manifest = json.loads((cache / KEY / opcache.MANIFEST).read_text())
    assert manifest["sha256"] == stored.sha256 and manifest["library"] == "fused_adam_op.so"


def test_an_absent_key_is_none(tmp_path: Path) -> None:
    assert opcache.lookup(tmp_path, KEY) is None


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077], ids=["group-umask", "default-umask", "private-umask"])
def test_entries_are_written_immutable_and_owned_by_their_writer_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """Files 0444 and the directory 0555 once complete: under a shared cache's group umask (002) nobody but the
    writer could change them (the audit's 0664/0775 let every group member), and every user can read them."""
    old = os.umask(umask)
    try:
        stored = opcache.store(tmp_path / "cache", KEY, "fused_adam", MODULE, library(tmp_path), META)
    finally:
        os.umask(old)
    modes = {
        name: oct(stat.S_IMODE(path.stat().st_mode))
        for name, path in (
            ("library", stored.library),
            ("manifest", stored.library.parent / opcache.MANIFEST),
            ("entry", stored.library.parent),
        )
    }
    assert modes == {"library": "0o444", "manifest": "0o444", "entry": "0o555"}, modes
    assert {p.stat().st_uid for p in (stored.library, stored.library.parent)} == {os.geteuid()}


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


def writable(entry: Path) -> None:
    """Let the entry's writer change its own immutable entry (root may anyway): 0755, files 0644."""
    os.chmod(entry, 0o755)
    for path in entry.iterdir():
        os.chmod(path, 0o644)


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
def test_a_corrupt_entry_is_refused_and_replaced_by_the_next_store(tmp_path: Path, damage: object) -> None:
    """The writer's own entry, damaged (root may write its 0444 files): refused by a reader, which only reads;
    the next store moves it aside, removes it and puts its own in place."""
    cache = tmp_path / "cache"
    built = library(tmp_path)
    opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    writable(cache / KEY)
    damage(cache / KEY)  # type: ignore[operator]
    line = refused(opcache.lookup(cache, KEY))
    assert line.startswith(f"op cache entry {cache / KEY}: "), line
    assert entries(cache) == [KEY]  # a reader changes nothing
    again = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert opcache.lookup(cache, KEY) == again
    assert again.library.read_bytes() == built.read_bytes()
    assert entries(cache) == [KEY]  # moved aside and removed


def test_storing_over_a_corrupt_entry_replaces_it(tmp_path: Path) -> None:
    """A writer that finds a bad entry where it renames moves it aside and puts its own in place."""
    cache = tmp_path / "cache"
    built = library(tmp_path)
    opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    writable(cache / KEY)
    flip_a_byte(cache / KEY)
    stored = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert stored.library.read_bytes() == built.read_bytes()
    assert opcache.lookup(cache, KEY) == stored
    assert entries(cache) == [KEY]


# --- who may have written an entry (the trust model, SECURITY.md) ------------------------------------------


def refused(got: object) -> str:
    """The refusal's line; fails, saying what was returned, when the entry was not refused."""
    assert not isinstance(got, opcache.Entry), f"the entry was accepted: {got}"
    assert isinstance(got, opcache.Refused), f"expected a refusal, got {got!r}"
    return got.line


def test_a_group_members_rewritten_entry_is_refused_naming_the_entry_and_the_member(tmp_path: Path) -> None:
    """Issue 20, finding 1: a member of the cache's group (uid 65534, in a forked child) replaces a stored
    library and the SHA-256 in its manifest. The reader refuses the entry, in one line that names it and who could
    have changed it."""
    with oplibs.shared_dir() as base:
        cache = oplibs.group_cache(base)
        old = os.umask(0o002)  # the umask a shared cache implies
        try:
            opcache.store(cache, KEY, "fused_adam", MODULE, library(tmp_path), META)
        finally:
            os.umask(old)
        evil = oplibs.compile_op(tmp_path / "evil", canary=base / "canary").read_bytes()
        code, said = oplibs.as_user(oplibs.ATTACKER, oplibs.attack(cache / KEY, evil))
        assert code == 0 and said in ("rewritten", "replaced"), f"the attack did not take place: {said}"
        assert (cache / KEY / "fused_adam_op.so").read_bytes() == evil, "the attacker's library is not in place"
        line = refused(opcache.lookup(cache, KEY))
        assert line.startswith(f"op cache entry {cache / KEY}: "), line
        assert "uid 65534 (nobody)" in line and "--op-cache-trust" in line, line
        assert "\n" not in line, line
        assert (cache / KEY / "fused_adam_op.so").read_bytes() == evil  # left for its owner: the reader only refuses


def test_an_entry_by_a_user_the_reader_trusts_is_used(tmp_path: Path) -> None:
    """An entry is owned by its writer (here uid 65534, through opcache.store in a forked child); another user's
    reader uses it only when it trusts that uid (--op-cache-trust)."""
    with oplibs.shared_dir() as base:
        cache = oplibs.group_cache(base)
        built = base / "fused_adam_op.so"
        built.write_bytes(library(tmp_path).read_bytes())
        os.chmod(built, 0o644)
        code, said = oplibs.as_user(
            oplibs.ATTACKER, lambda: opcache.store(cache, KEY, "fused_adam", MODULE, built, META).sha256
        )
        assert code == 0, said
        assert os.stat(cache / KEY).st_uid == oplibs.ATTACKER
        line = refused(opcache.lookup(cache, KEY))
        assert "uid 65534 (nobody)" in line and "--op-cache-trust nobody" in line, line
        found = opcache.lookup(cache, KEY, trusted=frozenset({oplibs.ATTACKER}))
        assert isinstance(found, opcache.Entry) and found.sha256 == said, found


def stored_as(uid: int, cache: Path, content: bytes) -> str:
    """opcache.store run as `uid` (a forked child) from a library file it can read; the entry's SHA-256."""
    built = cache.parent / f".built-{os.urandom(4).hex()}.so"
    built.write_bytes(content)
    os.chmod(built, 0o644)
    try:
        code, said = oplibs.as_user(uid, lambda: opcache.store(cache, KEY, "fused_adam", MODULE, built, META).sha256)
    finally:
        built.unlink()
    assert code == 0, f"the store as uid {uid} failed: {said}"
    return said


@pytest.mark.parametrize("where", ["tmp", "sticky-scratch"])
def test_a_cache_directory_another_user_made_first_is_refused_naming_its_owner(tmp_path: Path, where: str) -> None:
    """Issue 32, finding 2: under a sticky world-writable parent (/tmp itself, or a /scratch laid out the same way)
    uid 65534 makes the cache directory first and fills it with an entry whose manifest matches its bytes. Its
    owner is not trusted for owning it: the cache is refused as a whole, in one line naming uid 65534 and the
    option that trusts it, and nothing is stored there; with --op-cache-trust nobody it is used, and the entry
    names its writer."""
    with oplibs.sticky_parent(where) as parent:
        cache = parent / f"envsolver-ops-{os.urandom(4).hex()}"
        code, said = oplibs.as_user(oplibs.ATTACKER, lambda: str(cache.mkdir()))
        assert code == 0, said
        try:
            digest = stored_as(oplibs.ATTACKER, cache, library(tmp_path).read_bytes())
            line = refused(opcache.lookup(cache, KEY))
            want = f"op cache {cache}: refused: the cache directory belongs to uid 65534 (nobody), whom this user"
            assert line.startswith(want), line
            assert "pass --op-cache-trust nobody to use it" in line and "\n" not in line, line
            assert opcache.refusal(cache) == line
            with pytest.raises(OSError, match=r"uid 65534 \(nobody\).*nothing is stored there"):
                opcache.store(cache, "b" * 64, "fused_adam", MODULE, library(tmp_path / "mine"), META)
            assert entries(cache) == [KEY], "the refused cache was written"
            found = opcache.lookup(cache, KEY, trusted=frozenset({oplibs.ATTACKER}))
            assert isinstance(found, opcache.Entry) and found.sha256 == digest, found
            assert found.writers == (oplibs.ATTACKER,), found.writers
            assert opcache.refusal(cache, {oplibs.ATTACKER}) is None
            note = opcache.taken(found, {oplibs.ATTACKER})
            assert note == (
                f"fused_adam: taken from op cache entry {cache / KEY}, written by uid 65534 (nobody), trusted "
                "with --op-cache-trust nobody"
            ), note
        finally:
            oplibs.remove(cache)


def test_a_directory_on_the_way_that_another_user_owns_is_refused(tmp_path: Path) -> None:
    """ssh's StrictModes, for the owners: root's cache inside uid 65534's directory (or reached through a link into
    it) is refused, naming that directory and its owner: 65534 could put a directory of their own in its place."""
    with oplibs.shared_dir() as base:
        theirs = base / "theirs"
        cache = theirs / "cache"
        opcache.store(cache, KEY, "fused_adam", MODULE, library(tmp_path), META)
        os.chown(theirs, oplibs.ATTACKER, oplibs.GROUP)  # root's entry in root's cache, now in 65534's directory
        link = base / "link"
        link.symlink_to(cache)
        for path in (cache, link):
            line = refused(opcache.lookup(path, KEY))
            assert f"{theirs}, on the way to the cache, belongs to uid 65534 (nobody)" in line, line
            assert "pass --op-cache-trust nobody to use it" in line, line
            assert isinstance(opcache.lookup(path, KEY, frozenset({oplibs.ATTACKER})), opcache.Entry)


def test_what_another_user_can_put_in_place_of_a_cache_in_a_writable_directory_is_refused(tmp_path: Path) -> None:
    """A directory on the way may be writable by others (a group's project directory, 2770; here 0777, not
    sticky): root's cache there is used. Whatever uid 65534 can put in its place there is refused naming 65534:
    a directory of their own with an entry whose manifest matches its bytes, or a link to one."""
    with oplibs.shared_dir() as base:
        cache = base / "cache"
        opcache.store(cache, KEY, "fused_adam", MODULE, library(tmp_path), META)
        os.chmod(base, 0o777)
        assert isinstance(opcache.lookup(cache, KEY), opcache.Entry), "a writable directory on the way refused"
        evil = base / "evil"
        code, said = oplibs.as_user(oplibs.ATTACKER, lambda: str(evil.mkdir()))
        assert code == 0, said
        stored_as(oplibs.ATTACKER, evil, b"\x7fELF another library" * 100)

        def swap_in_a_directory() -> str:
            os.rename(cache, base / "aside")
            os.rename(evil, cache)
            return "swapped"

        def swap_in_a_link() -> str:
            os.rename(cache, evil)
            cache.symlink_to(evil)
            return "linked"

        for swap in (swap_in_a_directory, swap_in_a_link):
            code, said = oplibs.as_user(oplibs.ATTACKER, swap)
            assert code == 0, said
            line = refused(opcache.lookup(cache, KEY))
            assert "belongs to uid 65534 (nobody)" in line and "--op-cache-trust nobody" in line, (said, line)


def group_writable(path: Path) -> None:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o020)


def other_writable(path: Path) -> None:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o002)


@pytest.mark.parametrize("how", [group_writable, other_writable])
@pytest.mark.parametrize("part", ["entry", "fused_adam_op.so", opcache.MANIFEST])
def test_an_entry_that_others_could_change_is_refused_and_replaced_by_the_next_store(
    tmp_path: Path, part: str, how: Callable[[Path], None]
) -> None:
    """What the old store wrote under a group umask (0664, 0775): any member of the group could have changed it."""
    cache = tmp_path / "cache"
    built = library(tmp_path)
    stored = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    changed = cache / KEY if part == "entry" else cache / KEY / part
    how(changed)
    line = refused(opcache.lookup(cache, KEY))
    who = optrust.group(changed.stat().st_gid) if how is group_writable else "others"
    assert f"is writable by {who}" in line, line
    again = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    assert again == stored and opcache.lookup(cache, KEY) == again
    assert entries(cache) == [KEY]


def test_a_store_never_removes_an_entry_it_does_not_trust(tmp_path: Path) -> None:
    """Another user's entry may be one that a third user trusts: the reader builds its own op and leaves it."""
    with oplibs.shared_dir() as base:
        cache = oplibs.group_cache(base)
        built = base / "fused_adam_op.so"
        built.write_bytes(library(tmp_path).read_bytes())
        os.chmod(built, 0o644)
        code, said = oplibs.as_user(
            oplibs.ATTACKER, lambda: opcache.store(cache, KEY, "fused_adam", MODULE, built, META).sha256
        )
        assert code == 0, said
        with pytest.raises(OSError, match=r"uid 65534 \(nobody\)"):
            opcache.store(cache, KEY, "fused_adam", MODULE, library(tmp_path / "mine"), META)
        assert os.stat(cache / KEY).st_uid == oplibs.ATTACKER and entries(cache) == [KEY]


# --- entries that would hang or escape a reader (finding 2): refused at once ----------------------------------


def dev_zero_library(entry: Path) -> None:
    (entry / "fused_adam_op.so").unlink()
    (entry / "fused_adam_op.so").symlink_to("/dev/zero")


def fifo_library(entry: Path) -> None:
    (entry / "fused_adam_op.so").unlink()
    os.mkfifo(entry / "fused_adam_op.so")


def library_links_outside(entry: Path) -> None:
    """A link to a copy outside the cache, with the same bytes: the digest alone would accept it."""
    outside = entry.parent.parent / "outside.so"
    outside.write_bytes((entry / "fused_adam_op.so").read_bytes())
    (entry / "fused_adam_op.so").unlink()
    (entry / "fused_adam_op.so").symlink_to(outside)


def entry_links_outside(entry: Path) -> None:
    outside = entry.parent.parent / "outside-entry"
    os.rename(entry, outside)
    entry.symlink_to(outside)


def library_is_a_directory(entry: Path) -> None:
    (entry / "fused_adam_op.so").unlink()
    (entry / "fused_adam_op.so").mkdir()


def dev_zero_manifest(entry: Path) -> None:
    (entry / opcache.MANIFEST).unlink()
    (entry / opcache.MANIFEST).symlink_to("/dev/zero")


def fifo_manifest(entry: Path) -> None:
    (entry / opcache.MANIFEST).unlink()
    os.mkfifo(entry / opcache.MANIFEST)


def endless_manifest(entry: Path) -> None:
    """A manifest of 1 GiB (sparse: made at once), far past the bound on what a reader reads of one."""
    with (entry / opcache.MANIFEST).open("r+b") as handle:
        handle.truncate(1 << 30)


def oversized_library(entry: Path) -> None:
    with (entry / "fused_adam_op.so").open("r+b") as handle:
        handle.truncate(opcache.LIBRARY_MAX + 1)


def within(seconds: float, function: Callable[[], object]) -> tuple[object, float]:
    """function's result and how long it took, run in a thread; fails, saying so, when it has not ended after
    `seconds` plus a margin for a loaded machine (an endless read never ends: the thread is left as a daemon)."""
    box: dict[str, object] = {}

    def run() -> None:
        started = time.perf_counter()
        try:
            box["value"] = function()
        except Exception as exc:  # the caller looks at it
            box["value"] = exc
        box["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds + 10)
    assert "seconds" in box, f"still running after {seconds + 10} s (an endless read)"
    return box["value"], float(box["seconds"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "damage",
    [
        dev_zero_library,
        fifo_library,
        library_links_outside,
        entry_links_outside,
        library_is_a_directory,
        dev_zero_manifest,
        fifo_manifest,
        endless_manifest,
        oversized_library,
    ],
)
def test_an_entry_that_is_no_regular_file_is_refused_in_under_a_second(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    """Issue 20, finding 2: only regular files, opened without following links, read up to a bound. The audit's
    /dev/zero link and FIFO were hashed for ever; a link to a file outside the cache was followed."""
    cache = tmp_path / "cache"
    built = library(tmp_path)
    opcache.store(cache, KEY, "fused_adam", MODULE, built, META)
    writable(cache / KEY)
    damage(cache / KEY)
    got, seconds = within(1.0, lambda: opcache.lookup(cache, KEY))
    line = refused(got)
    assert seconds < 1.0, f"refused after {seconds:.2f} s: {line}"
    assert line.startswith(f"op cache entry {cache / KEY}: "), line
    again = opcache.store(cache, KEY, "fused_adam", MODULE, built, META)  # the next build takes its place
    assert opcache.lookup(cache, KEY) == again


@pytest.mark.parametrize("damage", [dev_zero_library, fifo_library, library_is_a_directory])
def test_install_refuses_a_library_swapped_after_its_lookup_in_under_a_second(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    cache = tmp_path / "cache"
    entry = opcache.store(cache, KEY, "fused_adam", MODULE, library(tmp_path), META)
    writable(cache / KEY)
    damage(cache / KEY)
    dest = tmp_path / "prefix" / "fused_adam_op.so"
    got, seconds = within(1.0, lambda: opcache.install(entry, dest))
    assert isinstance(got, OSError), f"installed: {got}"
    assert seconds < 1.0, f"refused after {seconds:.2f} s: {got}"
    assert not dest.exists() and list(dest.parent.iterdir()) == []


# --- --op-cache-trust -----------------------------------------------------------------------------------------


def test_trusted_users_are_named_or_numbered() -> None:
    assert opcache.parse_trust(["nobody", "1234", " 0 "]) == frozenset({65534, 1234, 0})
    with pytest.raises(ValueError, match=r"'no-such-user-xq' .*user name or a numeric uid"):
        opcache.parse_trust(["no-such-user-xq"])
    with pytest.raises(ValueError, match=r"'-3'"):
        opcache.parse_trust(["-3"])


@pytest.mark.parametrize("command", ["hook", "install"])
def test_an_unknown_trusted_user_is_bad_input(tmp_path: Path, command: str) -> None:
    from click.testing import CliRunner

    from envsolver.cli.main import main

    where = ["-p", str(tmp_path), "--arch-list", "9.0"] if command == "hook" else ["-p", str(tmp_path), "x.yml"]
    out = CliRunner().invoke(main, [command, *where, "--op-cache-trust", "no-such-user-xq"])
    assert out.exit_code == 2, out.output
    assert "no-such-user-xq" in out.output and "numeric uid" in out.output, out.output


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
        if entry is not None:  # a refusal is recorded as False
            seen.append(isinstance(entry, opcache.Entry) and opcache.sha256_file(entry.library) == entry.sha256)
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
    writable(entry.library.parent)
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
    assert opcache._KEY.fullmatch(key() or "")


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
    assert got is None or opcache._KEY.fullmatch(got)


# --- SECURITY.md names these tests --------------------------------------------------------------------------


def test_every_test_security_md_names_for_the_op_cache_exists() -> None:
    """The op cache's, the registry's and the compiled KB's promises name their tests; each name is a test
    function in tests/, and each bracketed case of the bounds table a damage function of this file."""
    import re

    root = Path(__file__).parent
    text = (root.parent / "SECURITY.md").read_text()
    part = text[text.index("## DeepSpeed's ops") : text.index("## No input reaches a shell")]
    defined = {m for f in root.glob("test_*.py") for m in re.findall(r"^def (test_\w+)\(", f.read_text(), re.M)}
    named = set(re.findall(r"\b(test_\w+)(?!\w*\.py)", part)) - {f.stem for f in root.glob("test_*.py")}
    assert len(named) >= 20 and named <= defined, sorted(named - defined)
    cases = set(re.findall(r"`\[(\w+)\]`", part))
    assert cases and all(callable(globals().get(c)) for c in cases), sorted(c for c in cases if c not in globals())
