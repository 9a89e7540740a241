"""Making the op cache's directory (envsolver/hook/opcachedir.py): private, never where another user could make it
first, and given to a group only when the user names one (--op-cache-group).

Real directories, real modes and owners: a second user is uid 65534 in a forked child (tests/oplibs.py), a
directory anyone may write is a root-owned 1777 one laid out as /tmp.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.hook import opcache, opcachedir
from tests import oplibs

KEY = "c" * 64
MODULE = "deepspeed.ops.adam.fused_adam_op"
ME = opcachedir.own_names()[0]


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def suggested(message: str) -> Path:
    """The --op-cache a refusal suggests."""
    found = re.search(r"Pass --op-cache (\S+):", message)
    assert found, f"no --op-cache suggested: {message}"
    return Path(found.group(1))


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_missing_cache_and_its_missing_parents_are_made_0700_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    cache = tmp_path / "a" / "b" / "ops"
    old = os.umask(umask)
    try:
        made = opcachedir.ensure(cache)
    finally:
        os.umask(old)
    assert made == (tmp_path / "a", tmp_path / "a" / "b", cache), made
    assert [mode(p) for p in made] == ["0o700"] * 3, [mode(p) for p in made]
    assert {p.stat().st_uid for p in made} == {os.geteuid()}
    assert opcachedir.ensure(cache) == () and opcachedir.plan(cache) is None  # an existing cache: nothing to do


def test_with_a_group_it_is_made_0750_and_given_to_the_group(tmp_path: Path) -> None:
    oplibs.need_root()  # root may give a directory to any group; a user only to one of theirs (parse_group)
    gid = opcachedir.parse_group(str(oplibs.GROUP))
    made = opcachedir.ensure(tmp_path / "shared" / "ops", group=gid)
    assert [(mode(p), p.stat().st_gid) for p in made] == [("0o750", oplibs.GROUP)] * 2, made


def test_a_group_is_named_or_numbered_and_must_be_the_users() -> None:
    assert opcachedir.parse_group("0") == 0 and opcachedir.parse_group(" 4242 ") == 4242
    assert opcachedir.parse_group("root") == 0
    with pytest.raises(ValueError, match=r"'no-such-group-xq' is no group .* numeric gid"):
        opcachedir.parse_group("no-such-group-xq")
    oplibs.need_root()
    # uid 65534's only group is oplibs.GROUP: root's group 0 is not theirs to give a cache to
    code, said = oplibs.as_user(oplibs.ATTACKER, lambda: str(opcachedir.parse_group(str(oplibs.GROUP))))
    assert code == 0 and said == str(oplibs.GROUP), said

    def not_a_member() -> str:
        try:
            opcachedir.parse_group("0")
        except ValueError as exc:
            return str(exc)
        return "accepted"

    code, said = oplibs.as_user(oplibs.ATTACKER, not_a_member)
    assert "not a member of group 0 (root)" in said and "id -Gn" in said, said


@pytest.mark.parametrize("given", ["ops", ME, "deep/ops"], ids=["a-cache", "named-after-the-user", "a-tree"])
def test_a_cache_directly_in_a_directory_anyone_may_write_is_not_made_and_the_fix_works(
    tmp_path: Path, given: str
) -> None:
    """--op-cache /tmp/ops is refused with the fix --op-cache /tmp/$USER/ops (nothing made), and the fix works:
    the user's own directory and the cache are made 0700, and an op stored there is found."""
    with oplibs.sticky_parent("sticky-scratch") as shared:
        with pytest.raises(opcachedir.NotMade) as refused:
            opcachedir.ensure(shared / given)
        message = str(refused.value)
        assert f"it would be made directly in {shared}, which anyone may write" in message, message
        fix = suggested(message)
        want = shared / ME / ("ops" if given == ME else given)
        assert fix == want, message
        assert tree(shared) == [], f"something was made: {tree(shared)}"
        made = opcachedir.ensure(fix)
        assert made[0] == shared / ME and made[-1] == fix and {mode(p) for p in made} == {"0o700"}, made
        library = tmp_path / "fused_adam_op.so"
        library.write_bytes(b"\x7fELF a library" * 100)
        stored = opcache.store(fix, KEY, "fused_adam", MODULE, library, {})
        assert opcache.lookup(fix, KEY) == stored


def test_the_users_own_directory_made_first_by_another_user_is_named(tmp_path: Path) -> None:
    """A squatter made /tmp/$USER first: the suggestion would not work, so the refusal says whose it is."""
    with oplibs.sticky_parent("sticky-scratch") as shared:
        code, said = oplibs.as_user(oplibs.ATTACKER, lambda: str((shared / ME).mkdir()))
        assert code == 0, said
        with pytest.raises(opcachedir.NotMade, match=r"belongs to uid 65534 \(nobody\)\. Pass an --op-cache outside"):
            opcachedir.ensure(shared / "ops")
        with pytest.raises(opcachedir.NotMade, match=r"on the way to the cache, belongs to uid 65534 \(nobody\)"):
            opcachedir.ensure(shared / ME / "ops")


def test_a_cache_below_another_users_directory_is_not_made_unless_trusted(tmp_path: Path) -> None:
    with oplibs.shared_dir() as base:
        theirs = base / "theirs"
        theirs.mkdir()
        os.chown(theirs, oplibs.ATTACKER, oplibs.GROUP)
        with pytest.raises(opcachedir.NotMade) as refused:
            opcachedir.plan(theirs / "ops")
        message = str(refused.value)
        assert f"{theirs}, on the way to the cache, belongs to uid 65534 (nobody)" in message, message
        assert "pass --op-cache-trust nobody to use it" in message, message
        made = opcachedir.ensure(theirs / "ops", {oplibs.ATTACKER})  # root may write in 65534's 0755 directory
        assert made == (theirs / "ops",), made


def test_a_path_that_is_no_directory_is_not_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(opcachedir.NotMade, match=r"file is not a directory"):
        opcachedir.ensure(tmp_path / "file")
    with pytest.raises(opcachedir.NotMade, match=r"file is not a directory"):
        opcachedir.ensure(tmp_path / "file" / "ops")
    with pytest.raises(opcachedir.NotMade, match=r"dangling is a symbolic link to no directory"):
        opcachedir.ensure(tmp_path / "dangling")
    with pytest.raises(opcachedir.NotMade, match=r"'\.\.' after a directory that does not exist"):
        opcachedir.ensure(tmp_path / "missing" / ".." / "ops")
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "missing").exists()


def test_an_existing_cache_is_left_as_it_is_whoever_owns_it(tmp_path: Path) -> None:
    """Reading decides about an existing cache (opcache.lookup refuses one it does not trust); making leaves it."""
    with oplibs.shared_dir() as base:
        cache = base / "theirs"
        cache.mkdir(mode=0o777)
        os.chown(cache, oplibs.ATTACKER, oplibs.GROUP)
        os.chmod(cache, 0o777)
        assert opcachedir.ensure(cache) == ()
        assert (mode(cache), cache.stat().st_uid) == ("0o777", oplibs.ATTACKER)


def test_a_directory_the_user_may_not_make_is_refused_with_the_reason(tmp_path: Path) -> None:
    with oplibs.shared_dir() as base:  # root's, 0755: uid 65534 may not write there

        def make() -> str:
            try:
                opcachedir.ensure(base / "ops")
            except opcachedir.NotMade as exc:
                return str(exc)
            return "made"

        code, said = oplibs.as_user(oplibs.ATTACKER, make)
        assert code == 0 and f"cannot make {base / 'ops'} (Permission denied)" in said, said
        assert not (base / "ops").exists()


def test_hooks_making_the_same_cache_at_once_all_succeed(tmp_path: Path) -> None:
    """Several hooks (one per node) making the same cache: each mkdir that finds it made enters it."""
    for round_ in range(10):
        cache = tmp_path / f"r{round_}" / "a" / "ops"
        barrier, errors = threading.Barrier(6), []

        def make(c: Path = cache, b: threading.Barrier = barrier, e: list[BaseException] = errors) -> None:
            b.wait()
            try:
                opcachedir.ensure(c)
            except BaseException as exc:  # collected, asserted below
                e.append(exc)

        threads = [threading.Thread(target=make) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == [] and mode(cache) == "0o700", errors


# --- the commands -------------------------------------------------------------------------------------------


def test_hook_refuses_to_make_a_cache_in_tmp_with_the_fix_and_the_fix_works(tmp_path: Path) -> None:
    """`envsolver hook --op-cache SHARED/ops` exits 2 naming the fix and makes nothing; the fix is made 0700 (the
    hook then stops, exit 2, at the prefix that has no python)."""
    prefix = tmp_path / "env"
    prefix.mkdir()
    with oplibs.sticky_parent("sticky-scratch") as shared:
        args = ["hook", "-p", str(prefix), "--arch-list", "9.0", "--op-cache"]
        out = CliRunner().invoke(main, [*args, str(shared / "ops")])
        assert out.exit_code == 2, out.output
        fix = suggested(out.output.replace("\n", " "))
        assert fix == shared / ME / "ops" and tree(shared) == [], (out.output, tree(shared))
        out = CliRunner().invoke(main, [*args, str(fix)])
        assert out.exit_code == 2 and "no python at" in out.output, out.output
        assert mode(fix) == mode(shared / ME) == "0o700"


def test_hook_makes_a_cache_for_the_group_it_is_given(tmp_path: Path) -> None:
    oplibs.need_root()
    prefix = tmp_path / "env"
    prefix.mkdir()
    cache = tmp_path / "ops"
    args = ["hook", "-p", str(prefix), "--arch-list", "9.0", "--op-cache", str(cache)]
    out = CliRunner().invoke(main, [*args, "--op-cache-group", str(oplibs.GROUP)])
    assert out.exit_code == 2 and "no python at" in out.output, out.output
    assert (mode(cache), cache.stat().st_gid) == ("0o750", oplibs.GROUP)
    out = CliRunner().invoke(main, [*args, "--op-cache-group", "no-such-group-xq"])
    assert out.exit_code == 2 and "'no-such-group-xq' is no group" in out.output, out.output


def test_install_refuses_a_cache_it_would_not_make_before_installing(tmp_path: Path) -> None:
    from tests.conda_packages import build_channel
    from tests.test_install import write_lock

    lock = write_lock(build_channel(tmp_path), tmp_path)
    prefix = tmp_path / "env"
    with oplibs.sticky_parent("sticky-scratch") as shared:
        out = CliRunner().invoke(main, ["install", str(lock), "-p", str(prefix), "--op-cache", str(shared / "ops")])
        assert out.exit_code == 2, out.output
        assert "which anyone may write" in out.output and f"--op-cache {shared / ME / 'ops'}" in out.output, out.output
        assert not prefix.exists(), "the prefix was installed before the op cache was refused"
        assert tree(shared) == []
