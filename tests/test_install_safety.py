"""envsolver install against hostile caches and hostile (hash-pinned) archives: a tampered, truncated or
replaced archive in any cache is never linked, nothing is written outside the prefix, the prefix is unchanged on
refusal, and conda-meta carries no credentials. Every case runs the real command over real archives."""

from __future__ import annotations

import base64
import functools
import http.server
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from tests import httplab
from tests.conda_packages import build_channel, build_package, explicit_lock
from tests.test_install import snapshot_tree, write_lock

ROOT = Path(__file__).resolve().parent.parent


def _install(lock: Path, prefix: Path, cache: Path, *extra: str, expect: int | None = None) -> tuple[int, str]:
    """`envsolver install LOCK -p PREFIX --no-hook`: its exit code and output; with `expect`, that exit code or a
    failure that shows the output."""
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(prefix), "--no-hook", *extra], env={"ENVSOLVER_CACHE_DIR": str(cache)}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (result.exception, result.output)
    assert expect is None or result.exit_code == expect, (result.exit_code, result.output)
    return result.exit_code, result.output


def _install_process(lock: Path, prefix: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """The real command in its own process: a native abort (SIGABRT) shows as a negative return code."""
    return subprocess.run(
        [sys.executable, "-m", "envsolver", "install", str(lock), "-p", str(prefix), "--no-hook"],
        env={**os.environ, "ENVSOLVER_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def _cached(cache: Path, name: str) -> Path:
    (found,) = [p for p in (cache / "verified").iterdir() if name in p.name and not p.name.endswith(".part")]
    return found


GENUINE = "data " * 100 + "\n"


def test_a_flipped_byte_in_the_cache_is_dropped_and_fetched_again(tmp_path: Path) -> None:
    lock = write_lock(build_channel(tmp_path), tmp_path)
    cache = tmp_path / "cache"
    _install(lock, tmp_path / "first", cache, expect=0)
    cached = _cached(cache, "tiny-data")
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    code, output = _install(lock, tmp_path / "second", cache)
    assert code == 0, output
    assert (tmp_path / "second" / "share" / "tiny" / "data.txt").read_text() == GENUINE
    assert _cached(cache, "tiny-data").read_bytes() != bytes(data)  # the bad entry was replaced by a proven one


def test_a_replaced_archive_in_the_cache_is_never_linked(tmp_path: Path) -> None:
    channel = build_channel(tmp_path)
    lock = write_lock(channel, tmp_path)
    cache = tmp_path / "cache"
    _install(lock, tmp_path / "first", cache, expect=0)
    evil = build_package(tmp_path / "evil", "tiny-data", "2.1", {"share/tiny/data.txt": "EVIL\n"})
    _cached(cache, "tiny-data").write_bytes(evil.read_bytes())
    (channel / "linux-64" / "tiny-data-2.1-h0_0.tar.bz2").unlink()  # the channel cannot serve it again
    prefix = tmp_path / "second"
    code, output = _install(lock, prefix, cache)
    assert code == 2 and "tiny-data 2.1" in output, output
    assert not prefix.exists()


def test_a_tampered_extraction_in_the_cache_is_never_linked(tmp_path: Path) -> None:
    """Whatever the cache holds besides proven archives (rattler's extracted packages, with the old layout), a
    change there never reaches a prefix."""
    lock = write_lock(build_channel(tmp_path), tmp_path)
    cache = tmp_path / "cache"
    _install(lock, tmp_path / "first", cache, expect=0)
    tampered = [p for p in cache.rglob("data.txt") if p.is_file()]
    for path in tampered:
        path.write_text("EVIL\n")
    pkgs = cache / "pkgs" / "tiny-data-2.1-h0_0" / "share" / "tiny"
    pkgs.mkdir(parents=True, exist_ok=True)
    (pkgs / "data.txt").write_text("EVIL\n")
    _install(lock, tmp_path / "second", cache, expect=0)
    assert (tmp_path / "second" / "share" / "tiny" / "data.txt").read_text() == GENUINE


@pytest.mark.parametrize(
    "path",
    ["../escaper-1.0-h0_0/payload.txt", "/tmp/envsolver-escape-test/payload.txt", "lib/../../payload.txt", "lib//x"],
    ids=["dotdot", "absolute", "inner-dotdot", "empty-part"],
)
def test_a_path_out_of_the_prefix_is_refused_before_anything_is_linked(tmp_path: Path, path: str) -> None:
    channel = tmp_path / "channel"
    good = build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "tiny\n"})
    bad = build_package(
        channel,
        "escaper",
        "1.0",
        {"payload.txt": "escaped\n"},
        paths=[{"_path": path, "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 8}],
    )
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", [good, bad])
    prefix = tmp_path / "root" / "env"
    done = _install_process(lock, prefix, tmp_path / "cache")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "panicked" not in done.stderr
    assert repr(path) in done.stderr and "nothing was linked" in done.stderr
    assert not prefix.exists()
    assert not (tmp_path / "root" / "escaper-1.0-h0_0").exists()
    assert not Path("/tmp/envsolver-escape-test").exists()


@pytest.mark.parametrize("fmt", ["tar.bz2", "conda"])
def test_writing_through_a_symbolic_link_is_refused(tmp_path: Path, fmt: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    channel = tmp_path / "channel"
    link = build_package(channel, "linker", "1.0", {}, symlinks={"lib/evil": str(outside)}, fmt=fmt)
    writer = build_package(channel, "writer", "1.0", {"lib/evil/payload.txt": "through\n"}, fmt=fmt)
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", [link, writer])
    prefix = tmp_path / "env"
    code, output = _install(lock, prefix, tmp_path / "cache")
    assert code == 2 and "symbolic link 'lib/evil'" in output, output
    assert list(outside.iterdir()) == [] and not prefix.exists()


def test_an_archive_that_is_not_the_locked_package_is_refused(tmp_path: Path) -> None:
    """The lock (and the file name) say tiny-lib 1.0; the archive's index.json says 1.1. The hash matches,
    because the lock pinned this archive, but it is not the package the lock names."""
    archive = build_package(tmp_path / "channel", "tiny-lib", "1.0", {"lib/tiny.txt": "x\n"}, index={"version": "1.1"})
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", [archive])
    prefix = tmp_path / "env"
    done = _install_process(lock, prefix, tmp_path / "cache")
    assert done.returncode == 2 and "panicked" not in done.stderr, done.stderr
    assert "info/index.json says version '1.1', the lock says '1.0'" in done.stderr
    assert not prefix.exists()


def test_the_conda_format_installs(tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    lib = build_package(channel, "tiny-lib", "1.0", {"lib/tiny.txt": "tiny\n"}, fmt="conda")
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", [lib])
    code, output = _install(lock, tmp_path / "env", tmp_path / "cache")
    assert code == 0, output
    assert (tmp_path / "env" / "lib" / "tiny.txt").read_text() == "tiny\n"


def test_a_refused_install_leaves_an_existing_prefix_as_it_was(tmp_path: Path) -> None:
    lock = write_lock(build_channel(tmp_path), tmp_path)
    prefix = tmp_path / "env"
    _install(lock, prefix, tmp_path / "cache", expect=0)
    before = snapshot_tree(prefix)
    bad = build_package(
        tmp_path / "bad",
        "escaper",
        "1.0",
        {"x": "x\n"},
        paths=[{"_path": "../x", "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 2}],
    )
    lines = lock.read_text()
    other = explicit_lock(tmp_path / "conda-linux-64.lock", [bad])
    _install(other, prefix, tmp_path / "cache", expect=2)
    assert snapshot_tree(prefix) == before and lines == lock.read_text()


class _SlowHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a channel directory slowly, pausing in the middle of each body, so that two installs write the
    same archive at the same time."""

    def do_GET(self) -> None:
        data = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        time.sleep(0.5)
        self.wfile.write(data[len(data) // 2 :])

    def log_message(self, *args: object) -> None:
        return None


def test_two_installs_sharing_a_cache_both_succeed(tmp_path: Path) -> None:
    channel = build_channel(tmp_path)
    handler = functools.partial(_SlowHandler, directory=str(channel))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with httplab.serving(server):
        base = f"http://127.0.0.1:{server.server_address[1]}"
        archives = sorted((channel / "linux-64").glob("*.tar.bz2"))
        lock = explicit_lock(tmp_path / "conda-linux-64.lock", archives)
        lock.write_text(lock.read_text().replace(channel.as_uri(), base))
        cache = tmp_path / "cache"
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda i: _install_process(lock, tmp_path / f"env-{i}", cache), range(2)))
    for done in runs:
        assert done.returncode == 0, done.stderr[-2000:]
    for i in range(2):
        assert (tmp_path / f"env-{i}" / "share" / "tiny" / "data.txt").read_text() == GENUINE


class _PrivateChannel(http.server.SimpleHTTPRequestHandler):
    """A channel directory behind credentials: /t/TOKEN/... (anaconda.org's path token) or Basic auth."""

    token = "SECRET-TOKEN-42"
    basic = "Basic " + base64.b64encode(b"alice:SECRET-PW-43").decode()

    def do_GET(self) -> None:
        prefix = f"/t/{self.token}"
        if self.path.startswith(prefix + "/"):
            self.path = self.path[len(prefix) :]
        elif self.headers.get("Authorization") != self.basic:
            self.send_error(401)
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.parametrize("how", ["path-token", "mirror-with-userinfo"])
def test_credentials_fetch_but_never_reach_the_prefix_or_the_output(tmp_path: Path, how: str) -> None:
    """Both forms of credential work for fetching; neither reaches conda-meta, any file or the output."""
    channel = build_channel(tmp_path)
    handler = functools.partial(_PrivateChannel, directory=str(channel))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    archives = sorted((channel / "linux-64").glob("*.tar.bz2"))
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", archives)
    public = "https://conda.example.org/private"
    if how == "path-token":
        lock.write_text(lock.read_text().replace(channel.as_uri(), f"{base}/t/{_PrivateChannel.token}"))
        extra: tuple[str, ...] = ()
    else:
        lock.write_text(lock.read_text().replace(channel.as_uri(), public))
        extra = ("--mirror", f"{public}=http://alice:SECRET-PW-43@127.0.0.1:{server.server_address[1]}")
    prefix = tmp_path / "env"
    with httplab.serving(server):
        code, output = _install(lock, prefix, tmp_path / "cache", *extra)
    assert code == 0, output
    assert (prefix / "share" / "tiny" / "data.txt").read_text() == GENUINE
    assert "SECRET" not in output
    leaked = [p for p in prefix.rglob("*") if p.is_file() and b"SECRET" in p.read_bytes()]
    assert leaked == []


def test_a_hostile_arch_list_in_the_lock_is_refused_before_install(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    lock = write_lock(
        build_channel(tmp_path), tmp_path, custom={"envsolver_torch_cuda_arch_list": f"9.0+PTX$(touch {canary})"}
    )
    prefix = tmp_path / "env"
    result = CliRunner().invoke(
        main, ["install", str(lock), "-p", str(prefix)], env={"ENVSOLVER_CACHE_DIR": str(tmp_path / "cache")}
    )
    assert result.exit_code == 2 and "envsolver_torch_cuda_arch_list" in result.output, result.output
    assert not prefix.exists() and not canary.exists()


def test_a_rebuilt_archive_with_the_same_name_version_and_build_is_installed(tmp_path: Path) -> None:
    """The prefix holds tiny-data 2.1 h0_0; the new lock pins another archive with the same name, version and
    build (a rebuild, or a different channel's). Its sha256 differs, so it is installed, not skipped."""
    first = build_package(tmp_path / "one", "tiny-data", "2.1", {"share/tiny/data.txt": "first\n"})
    second = build_package(tmp_path / "two", "tiny-data", "2.1", {"share/tiny/data.txt": "second\n"})
    prefix = tmp_path / "env"
    _install(explicit_lock(tmp_path / "a.lock", [first]), prefix, tmp_path / "cache", expect=0)
    code, output = _install(explicit_lock(tmp_path / "b.lock", [second]), prefix, tmp_path / "cache")
    assert code == 0 and "already up to date" not in output, output
    assert (prefix / "share" / "tiny" / "data.txt").read_text() == "second\n"


def test_stale_staging_of_this_host_is_removed_and_other_hosts_are_left(tmp_path: Path) -> None:
    """A killed install leaves its staging directory; the next install on the same host removes it. A cache on
    a shared home directory also holds other hosts' live ones: those stay."""
    import socket

    from envsolver.install import pkgcache

    cache = tmp_path / "cache"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    host = socket.gethostname()
    (cache / "staging" / f"{host}-pid{pid}-abc").mkdir(parents=True)
    (cache / "staging" / f"other-node-pid{pid}-abc").mkdir()
    (cache / "staging" / f"login.{host}-pid{pid}-abc").mkdir()  # another host, whose name ends in this one's
    mine = pkgcache.staging_dir(cache)
    left = sorted(p.name for p in (cache / "staging").iterdir())
    assert left == sorted([f"other-node-pid{pid}-abc", f"login.{host}-pid{pid}-abc", mine.name])
    assert mine.stat().st_mode & 0o777 == 0o700


def test_a_lock_for_another_platform_is_refused_unless_platform_says_so(tmp_path: Path) -> None:
    from envsolver.resolve.detect import host_platform

    here = host_platform()
    other = "linux-aarch64" if here == "linux-64" else "linux-64"
    archive = build_package(tmp_path / "channel", "tiny-lib", "1.0", {"lib/tiny.txt": "x\n"}, subdir=other)
    lock = explicit_lock(tmp_path / f"conda-{other}.lock", [archive], platform=other)
    prefix = tmp_path / "env"
    code, output = _install(lock, prefix, tmp_path / "cache")
    assert code == 2 and f"is for {other}, and this host is {here}" in output and not prefix.exists()
    # The fix the message names works: --platform says so.
    code, output = _install(lock, prefix, tmp_path / "cache", "--platform", other)
    assert code == 0, output
    assert (prefix / "lib" / "tiny.txt").read_text() == "x\n"


def test_an_unreadable_archive_the_lock_pins_is_refused_with_a_fix(tmp_path: Path) -> None:
    """The hash matches (the lock pinned these bytes), but they are not a conda package."""
    import json

    junk = tmp_path / "channel" / "linux-64" / "junk-1.0-h0_0.conda"
    junk.parent.mkdir(parents=True)
    junk.write_bytes(b"not a zip")
    lock = explicit_lock(tmp_path / "conda-linux-64.lock", [junk])
    prefix = tmp_path / "env"
    code, output = _install(lock, prefix, tmp_path / "cache", "--json")
    doc = json.loads(output[output.index("{") :])
    assert code == 2 and doc["error"]["kind"] == "archive" and "junk-1.0-h0_0.conda" in doc["error"]["message"], output
    assert doc["error"]["fix"] == "regenerate it with envsolver make from channels you trust."
    assert not prefix.exists()
