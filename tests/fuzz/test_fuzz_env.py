"""Property-based fuzzing of the environment commands: install (fuzzed locks of both formats, and real locks
of a tiny local channel with one field changed), hook (--print-env, --lock, a fuzzed lock-metadata.json in the
prefix) and verify (--lock, a fake interpreter). Nothing reaches the network: urlopen is replaced by a refusal."""

from __future__ import annotations

import json
import stat
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st

from tests.conda_packages import build_channel
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, modes, run_property


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise urllib.error.URLError("the fuzz tests have no network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


install_options = st.lists(
    st.one_of(
        st.tuples(st.just("--platform"), st.sampled_from(["linux-64", "linux-aarch64", "win-64"])).map(list),
        st.tuples(
            st.just("--mirror"),
            st.one_of(
                st.sampled_from(["https://conda.anaconda.org=file:///nowhere", "a=b", "=", "http://[::1=x://y"]),
                fs.junk,
            ),
        ).map(list),
        st.just(["--json"]),
    ),
    max_size=2,
).map(lambda parts: [x for p in parts for x in p])


@modes(40)
def test_install_fuzzed_locks(seed_value: int | None, count: int) -> None:
    tally = Tally("install LOCK")

    def check(value: tuple[str, list[str]]) -> None:
        text, options = value
        with tempfile.TemporaryDirectory() as tmp:
            lock = _write(Path(tmp) / "conda-lock.yml", text)
            args = ["install", str(lock), "-p", str(Path(tmp) / "env"), "--no-hook", *options]
            check_cli(tally, args, example=value)

    run_property(st.tuples(fs.lock_text, install_options), check, count, seed_value)
    tally.check()


@pytest.fixture(scope="module")
def tiny_lock() -> Iterator[dict[str, Any]]:
    """A real conda-lock.yml of three tiny packages in a local file:// channel, as a dict to change."""
    from tests.test_install import write_lock

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        channel = build_channel(root)
        lock = write_lock(channel, root, custom={"envsolver_torch_cuda_arch_list": "8.0+PTX"})
        yield yaml.safe_load(lock.read_text())


_FIELDS = ["name", "version", "build", "url", "platform", "manager", "dependencies", "hash"]


@st.composite
def changed_locks(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """The tiny lock with one package field, a hash, the platforms or the arch list replaced."""
    doc = json.loads(json.dumps(doc))
    package = draw(st.sampled_from(doc["package"]))
    where = draw(st.sampled_from([*_FIELDS, "md5", "sha256", "platforms", "arch_list"]))
    if where == "platforms":
        doc["metadata"]["platforms"] = draw(st.lists(fs.platforms, max_size=2))
    elif where == "arch_list":
        doc["metadata"]["custom_metadata"]["envsolver_torch_cuda_arch_list"] = draw(
            st.one_of(st.sampled_from(fs.ARCH_LISTS), fs.junk)
        )
    elif where in ("md5", "sha256"):
        package["hash"][where] = draw(fs.md5s if where == "md5" else fs.sha256s)
    else:
        strategies = {"name": fs.names, "version": fs.versions, "build": fs.builds, "platform": fs.platforms}
        package[where] = draw(strategies.get(where, fs.yaml_values))
    return doc


@modes(8)
def test_install_changed_real_lock(seed_value: int | None, count: int, tiny_lock: dict[str, Any]) -> None:
    """One field of a real, installable lock changed: install refuses it (2) or installs it (0, or 1 when the
    post-install hook's pre-flight fails in this env without python)."""
    tally = Tally("install changed real lock")

    def check(changed: dict[str, Any]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            lock = _write(Path(tmp) / "conda-lock.yml", yaml.safe_dump(changed))
            check_cli(tally, ["install", str(lock), "-p", str(Path(tmp) / "env"), "--json"], example=changed)

    run_property(changed_locks(tiny_lock), check, count, seed_value)
    tally.check()


hook_tail = st.one_of(
    st.just([]),
    st.one_of(st.sampled_from(fs.ARCH_LISTS), fs.junk).map(lambda a: ["--arch-list", a]),
)


@modes(40)
def test_hook_print_env_with_fuzzed_lock_metadata(seed_value: int | None, count: int) -> None:
    tally = Tally("hook --print-env with lock-metadata.json")

    def check(value: tuple[str | None, list[str]]) -> None:
        metadata, tail = value
        with tempfile.TemporaryDirectory() as prefix:
            if metadata is not None:
                _write(Path(prefix) / "etc" / "envsolver" / "lock-metadata.json", metadata)
            check_cli(tally, ["hook", "-p", prefix, "--print-env", *tail], example=value)

    run_property(st.tuples(st.one_of(st.none(), fs.lock_metadata_text), hook_tail), check, count, seed_value)
    tally.check()


@modes(40)
def test_hook_with_fuzzed_lock(seed_value: int | None, count: int) -> None:
    """`hook --lock LOCK`: the lock is read by lockfile.read, which must refuse what the hook cannot use."""
    tally = Tally("hook --lock LOCK --print-env")

    def check(value: tuple[str, list[str]]) -> None:
        text, tail = value
        with tempfile.TemporaryDirectory() as prefix:
            lock = _write(Path(prefix) / "conda-lock.yml", text)
            check_cli(tally, ["hook", "-p", prefix, "--lock", str(lock), "--print-env", *tail], example=value)

    run_property(st.tuples(fs.lock_text, hook_tail), check, count, seed_value)
    tally.check()


@modes(10)
def test_verify_with_fuzzed_lock(seed_value: int | None, count: int) -> None:
    """`verify -p PREFIX --lock LOCK` where PREFIX/bin/python prints nothing: the lock is read first, then
    verify reports that the probe could not run (exit 2)."""
    tally = Tally("verify --lock LOCK")

    def check(text: str) -> None:
        with tempfile.TemporaryDirectory() as prefix:
            python = _write(Path(prefix) / "bin" / "python", "#!/bin/sh\nexit 3\n")
            python.chmod(python.stat().st_mode | stat.S_IXUSR)
            lock = _write(Path(prefix) / "conda-lock.yml", text)
            check_cli(tally, ["verify", "-p", prefix, "--lock", str(lock)], example=text)

    run_property(fs.lock_text, check, count, seed_value)
    tally.check()


@pytest.fixture(scope="module")
def installed_tiny() -> Iterator[tuple[Path, Path]]:
    """The tiny channel's lock (conda-lock.yml) installed into a prefix, whose record the no-op answers from."""
    from click.testing import CliRunner

    from envsolver.cli.main import main
    from tests.test_install import write_lock

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lock = write_lock(build_channel(root), root)
        done = CliRunner().invoke(main, ["install", str(lock), "-p", str(root / "env"), "--no-hook"],
                                  env={"ENVSOLVER_CACHE_DIR": str(root / "cache")})  # fmt: skip
        assert done.exit_code == 0, done.output
        yield lock, root / "env"


_NOOP_WORDS = ["--json", "--no-hook", "-q", "--quiet", "--", "-n", "-v", "x"]


@modes(20)
def test_install_argv_through_the_no_op(
    seed_value: int | None, count: int, installed_tiny: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """install's words as the `envsolver` program takes them, the no-op first (cli/fast.py; `install --mirror
    $'\\xff'` ended in its traceback), around an up-to-date prefix and its lock in the working directory: junk
    words hold undecodable bytes (fs.UNDECODABLE). A command the no-op leaves goes to the CLI with --dry-run."""
    lock, prefix = installed_tiny
    monkeypatch.chdir(lock.parent)
    tally = Tally("install argv through the no-op")
    value = st.one_of(
        st.sampled_from([str(prefix), lock.name, "linux-64", "https://conda.anaconda.org=https://m.example/c"]),
        fs.junk,
        st.text(fs.UNDECODABLE, min_size=1, max_size=3),
        st.builds("{}={}".format, st.sampled_from(["https://a", "\udcff"]), fs.junk),
    )
    pair = st.tuples(st.sampled_from(["--mirror", "--mirror", "--platform"]), value).map(list)
    alone = st.one_of(st.sampled_from([*_NOOP_WORDS, lock.name]), value).map(lambda w: [w])
    word = st.one_of(pair, pair, alone)

    def check(words: list[str]) -> None:
        from envsolver.cli import fast

        left = fast.parse(words, {}) is None
        check_cli(tally, ["install", *words, *(["--dry-run"] if left else [])])

    where = st.one_of(st.just(str(prefix)), st.just(str(prefix)), value)
    lines = st.tuples(where, st.lists(word, max_size=4)).map(
        lambda drawn: ["-p", drawn[0], *(w for part in drawn[1] for w in part)]
    )
    run_property(lines, check, count, seed_value)
    tally.check()


@modes(10)
def test_install_with_odd_cache_dir_and_prefix(seed_value: int | None, count: int) -> None:
    """A grammatical lock, with ENVSOLVER_CACHE_DIR and -p PREFIX pointing at files, devices or missing parents."""
    tally = Tally("install with odd ENVSOLVER_CACHE_DIR / prefix")
    places = st.sampled_from(["dir", "file", "/dev/null/x", "missing/deep/dir", "/proc/version"])

    def place(root: Path, kind: str) -> str:
        if kind == "dir":
            return str(root / "d")
        if kind == "file":
            return str(_write(root / "f", "x"))
        return kind if kind.startswith("/") else str(root / kind)

    def check(value: tuple[tuple[str, str, Any], str, str]) -> None:
        (text, _, _), cache, prefix = value
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            lock = _write(root / "lock", text)
            env = {"ENVSOLVER_CACHE_DIR": place(root, cache)}
            check_cli(tally, ["install", str(lock), "-p", place(root, prefix), "--no-hook"], env, example=value[1:])

    run_property(st.tuples(fs.valid_locks(), places, places), check, count, seed_value)
    tally.check()
