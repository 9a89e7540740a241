"""make's outputs as one set: real runs killed mid-write and run in pairs, signals held over the commit,
hand edits checked before anything is written, and a --out that cannot be written (exit 2, a fix that works).

"Consistent" is defined in scripts/race_make.py: the directory holds, byte for byte, the complete set one
run writes on its own, and no temporary or journal file."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase
from envsolver.lock import outputs
from envsolver.lock import run as lock
from envsolver.lock.run import LockResult
from envsolver.resolve.inputs import Options, build_target, make_command

ROOT = Path(__file__).resolve().parent.parent
# What `make --gpu a100 --offline` writes: its plan (torch 2.12.0 cu129) takes DeepSpeed from PyPI, so the set holds
# the pip companion too.
SET = ("environment.yml", "conda-lock.yml", "virtual-packages.yml", "conda-linux-64.lock", "conda-linux-64.pip.txt")


def _race() -> ModuleType:
    spec = importlib.util.spec_from_file_location("race_make", ROOT / "scripts" / "race_make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["race_make"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


race = _race()


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, bytes]]]:
    root = tmp_path_factory.mktemp("race")
    return root, race.references(root)


@pytest.fixture(scope="module")
def locked(kb: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LockResult, str]]:
    cache = tmp_path_factory.mktemp("cache")
    results = {}
    for gpu in ("a100", "h100"):
        target = build_target(Options(gpus=(gpu,)), kb).target
        result = lock.lock(target, kb, "offline", (), cache, lambda _: None)
        results[gpu] = (result, make_command(target, offline=True))
    return results


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    for name in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where the suggested --out goes
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # ... or else
    return CliRunner()


# --- real runs: killed mid-write, and pairs at once --------------------------------------------------------


@pytest.mark.parametrize("delay_ms", [2, 10, 20])
def test_a_make_killed_mid_write_leaves_one_complete_set_as_it_is_and_after_repair(
    refs: tuple[Path, dict[str, dict[str, bytes]]], delay_ms: int
) -> None:
    """As the killed run left it (what cat, conda-lock or conda read, with no envsolver run first) and after the
    next run's repair; the user's own file in --out is kept."""
    root, sets = refs
    trial = race.kill_trial(root, sets, signal.SIGKILL, delay_ms / 1000, delay_ms)
    assert not trial.as_left.startswith("mixed"), trial
    assert not trial.repaired.startswith("mixed"), trial
    assert trial.leftovers == [] and trial.user_file_kept, trial


@pytest.mark.slow
def test_fifty_makes_killed_at_random_moments_leave_no_mixed_set(tmp_path: Path) -> None:
    """Issue 32's figure: 50 SIGKILLs spread over the write phase (scripts/race_make.py --kills 50)."""
    trials = race.run(50, 0, 0, 0, 32, tmp_path)
    bad = [t for t in trials if not t.consistent]
    assert bad == [], race.summary(trials) + "\n" + "\n".join(map(str, bad))
    assert sum(t.mid_commit for t in trials) >= 10, race.summary(trials)  # the kills hit the commit itself


@pytest.mark.parametrize("delay_ms", [2, 20])
def test_a_make_terminated_mid_write_leaves_one_complete_set_as_it_is(
    refs: tuple[Path, dict[str, dict[str, bytes]]], delay_ms: int
) -> None:
    """SIGTERM is held over the write: the run dies before it or after it, with nothing to repair."""
    root, sets = refs
    trial = race.kill_trial(root, sets, signal.SIGTERM, delay_ms / 1000, 100 + delay_ms)
    assert trial.as_left in sets, trial
    assert trial.leftovers == [], trial


def test_a_make_started_while_another_writes_waits_for_it(refs: tuple[Path, dict[str, dict[str, bytes]]]) -> None:
    """The first run is stopped mid-write while the second runs; both succeed and one complete set is left."""
    root, sets = refs
    trial = race.stopped_pair_trial(root, sets, 0.01, 0)
    assert trial.status == 0, trial
    assert trial.as_left in sets, trial
    assert trial.leftovers == [], trial


# --- in process: signals and hand edits ---------------------------------------------------------------------


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record renames and SIGTERM deliveries in order; the first rename sends this process a SIGTERM."""
    log: list[str] = []
    replace = os.replace

    def recording_replace(src: object, dst: object) -> None:
        log.append(f"rename {Path(str(dst)).name}")
        if len(log) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        replace(src, dst)  # type: ignore[arg-type]

    def handler(signum: int, frame: FrameType | None) -> None:
        log.append("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    monkeypatch.setattr(os, "replace", recording_replace)
    try:
        yield log
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_held_until_the_whole_set_is_written(
    kb: KnowledgeBase, locked: dict[str, tuple[LockResult, str]], tmp_path: Path, events: list[str]
) -> None:
    result, command = locked["a100"]
    outputs.write_all(result, kb, tmp_path, command, None, force=False)
    assert events[-1] == "SIGTERM", events
    assert {f"rename {name}" for name in SET} <= set(events)


def test_a_hand_edit_anywhere_in_the_set_writes_nothing(
    kb: KnowledgeBase, locked: dict[str, tuple[LockResult, str]], tmp_path: Path
) -> None:
    a100, a100_command = locked["a100"]
    outputs.write_all(a100, kb, tmp_path, a100_command, None, force=False)
    lockfile = tmp_path / "conda-lock.yml"
    lockfile.write_text(lockfile.read_text() + "# my note\n")
    before = {name: (tmp_path / name).read_bytes() for name in SET}
    h100, h100_command = locked["h100"]
    with pytest.raises(BadInputError, match=r"conda-lock\.yml.*edited by hand.*--force"):
        outputs.write_all(h100, kb, tmp_path, h100_command, None, force=False)
    assert {name: (tmp_path / name).read_bytes() for name in SET} == before
    written = outputs.write_all(h100, kb, tmp_path, h100_command, None, force=True)
    assert set(written.values()) == {outputs.files.Outcome.WRITTEN}


def test_files_keep_mode_0666_less_the_umask(
    kb: KnowledgeBase, locked: dict[str, tuple[LockResult, str]], tmp_path: Path
) -> None:
    result, command = locked["a100"]
    old = os.umask(0o027)
    try:
        outputs.write_all(result, kb, tmp_path, command, None, force=False)
    finally:
        os.umask(old)
    assert {name: (tmp_path / name).stat().st_mode & 0o777 for name in SET} == dict.fromkeys(SET, 0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SET)


# --- a --out that cannot be written ------------------------------------------------------------------------


def _suggested(result: Result) -> list[str]:
    """The command the error suggests, as argv for the runner (without the leading `envsolver`)."""
    found = re.search(r"e\.g\.: (envsolver make .*)$", result.output.strip(), re.S)
    assert found, result.output
    argv = shlex.split(found.group(1).replace("\n", " "))
    return argv[1:]


def _assert_clean_refusal(result: Result, path: str) -> None:
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.output.startswith("error: ") and repr(path) in result.output, result.output


@pytest.mark.parametrize("mode", ["--no-lock", "--offline"])
def test_out_under_a_regular_file_exits_2_with_a_fix_that_works(runner: CliRunner, tmp_path: Path, mode: str) -> None:
    blocker = tmp_path / "some-file"
    blocker.write_text("not a directory\n")
    result = runner.invoke(main, ["make", "--gpu", "a100", mode, "--out", str(blocker / "sub")])
    _assert_clean_refusal(result, str(blocker))
    assert "is a file, not a directory" in result.output
    fixed = runner.invoke(main, _suggested(result))
    assert fixed.exit_code == 0, fixed.output
    assert blocker.read_text() == "not a directory\n"


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a read-only tmpfs needs root")
    point = tmp_path / "ro"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)]).returncode != 0:
        pytest.skip("this host does not allow mounting a tmpfs")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _remount(point: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(point)], check=True)


def test_out_on_a_read_only_mount_exits_2_with_a_fix_that_works(runner: CliRunner, read_only_mount: Path) -> None:
    _remount(read_only_mount, "ro")
    out = read_only_mount / "envs" / "a100"
    result = runner.invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(out)])
    _assert_clean_refusal(result, str(out))
    assert "read-only file system" in result.output
    fixed = runner.invoke(main, _suggested(result))
    assert fixed.exit_code == 0, fixed.output


def test_an_up_to_date_set_on_a_read_only_mount_is_left_unchanged(runner: CliRunner, read_only_mount: Path) -> None:
    args = ["make", "--gpu", "a100", "--no-lock", "--out", str(read_only_mount)]
    assert runner.invoke(main, args).exit_code == 0
    _remount(read_only_mount, "ro")
    again = runner.invoke(main, args)
    assert again.exit_code == 0, again.output
    assert "unchanged" in again.output
    changed = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(read_only_mount)])
    _assert_clean_refusal(changed, str(read_only_mount))


def _unprivileged() -> list[str]:
    """A prefix that makes root obey permission bits (root ignores them): drop the capabilities that bypass them."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("as root, this needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def test_out_in_a_directory_without_write_permission_exits_2_with_a_fix_that_works(tmp_path: Path) -> None:
    prefix = _unprivileged()
    read_only = tmp_path / "locked"
    read_only.mkdir(mode=0o555)
    env = {k: v for k, v in os.environ.items() if k not in ("ENVSOLVER_GPUS", "ENVSOLVER_DRIVER")}
    env["HOME"] = str(tmp_path / "home")

    def envsolver(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [*prefix, sys.executable, "-m", "envsolver", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)

    try:
        refused = envsolver("make", "--gpu", "a100", "--no-lock", "--out", str(read_only))
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr and repr(str(read_only)) in refused.stderr
        assert "permission denied" in refused.stderr
        assert list(read_only.iterdir()) == []
        found = re.search(r"e\.g\.: (envsolver make .*)$", refused.stderr.strip(), re.S)
        assert found, refused.stderr
        fixed = envsolver(*shlex.split(found.group(1).replace("\n", " "))[1:])
        assert fixed.returncode == 0, fixed.stderr
    finally:
        read_only.chmod(0o755)


NAME = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]), min_size=1, max_size=300)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(NAME.filter(lambda n: n not in (".", "..")), min_size=1, max_size=3), through_file=st.booleans())
@example(parts=["a" * 300], through_file=False)  # a name over NAME_MAX: the suggested --out must not reuse it
@example(parts=["sub"], through_file=True)
def test_any_out_path_exits_0_or_2_without_a_traceback(
    runner: CliRunner, tmp_path: Path, parts: list[str], through_file: bool
) -> None:
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    if through_file:
        (base / "a-file").write_text("x\n")
        parts = ["a-file", *parts]
    out = base.joinpath(*parts)
    result = runner.invoke(main, ["make", "--gpu", "a100", "--no-lock", "--out", str(out)])
    assert result.exit_code in (0, 2), (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if result.exit_code == 0:
        assert (out / "environment.yml").is_file()
        return
    assert result.output.startswith("error: ") and "Traceback" not in result.output
    fixed = runner.invoke(main, _suggested(result))
    assert fixed.exit_code == 0, fixed.output


# --- a set replaces the set before it -------------------------------------------------------------------------

REMOVED_TOO = [
    ("conda-lock.yml", "removed"),
    ("conda-linux-64.lock", "removed"),
    ("conda-linux-64.pip.txt", "removed"),
    ("virtual-packages.yml", "removed"),
]


def test_a_run_removes_the_files_an_earlier_run_wrote_and_this_one_did_not(runner: CliRunner, tmp_path: Path) -> None:
    """`make --no-lock` after a full make: the old conda-lock.yml, conda-linux-64.lock and its pip companion belonged
    to another plan, so they go; make says so. (The same holds for the lock of another platform.)"""
    out = tmp_path / "out"
    assert runner.invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(out)]).exit_code == 0
    assert {p.name for p in out.iterdir()} == set(SET)
    result = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == {"environment.yml"}
    files = json.loads(result.stdout)["files"]
    assert files == {str(out / n): o for n, o in [("environment.yml", "written"), *REMOVED_TOO]}


def test_a_hand_edited_file_of_an_earlier_run_is_kept_without_force(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert runner.invoke(main, ["make", "--gpu", "a100", "--offline", "--out", str(out)]).exit_code == 0
    edited = out / "conda-linux-64.lock"
    edited.write_text(edited.read_text() + "# mine\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(out)])
    assert refused.exit_code == 2 and "edited by hand" in refused.output and "--force" in refused.output, refused.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    forced = runner.invoke(main, ["make", "--gpu", "h100", "--no-lock", "--out", str(out), "--force"])
    assert forced.exit_code == 0 and {p.name for p in out.iterdir()} == {"environment.yml"}, forced.output
