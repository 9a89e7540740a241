"""lock/keep.py and `make --update NAME`: a re-solve into a directory with a lock keeps the lock's packages; --update
NAME moves NAME alone (and what its new version needs); a name the lock does not hold, or --update without a lock,
is refused with a fix that works.

The channels are the bundled snapshot's real conda-forge records (tests/snapshot_channels.py): "then" lacks the
newest release of two packages X and Y, "now" has it. X and Y are found in the snapshot (noarch packages whose only
dependency is python, with an older release in it), so no test depends on which versions the snapshot holds."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from envsolver.cli.main import main
from envsolver.core.errors import BadInputError
from envsolver.lock import keep
from envsolver.lock.lockfile import Lock
from tests import snapshot_channels as channels

MAX_PAIRS = 6


def invoke(args: list[str], cache: Path) -> Result:
    env = {"ENVSOLVER_CACHE_DIR": str(cache), "ENVSOLVER_DEBUG": None, "ENVSOLVER_GPUS": None}
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def _packages(lock: Lock) -> dict[str, tuple[str, str]]:
    return {e.name: (e.version, e.build) for e in lock.entries}


@dataclass(frozen=True)
class Aging:
    """A lock made against `then`, and the channel `now` in which X and Y have a newer release."""

    make: list[str]  # make's target options, the same for every run
    now: str  # the --channel URL of the channel as it is now
    out: Path  # the directory of the lock made then
    old: Lock
    fresh: Lock  # what a solve against `now` without a lock gives
    x: str
    y: str
    cache: Path


def _plan_options(cache: Path) -> list[str]:
    """The a100 plan the snapshot locks (explain --offline), as options, so a solve against a copy of the
    snapshot's channel plans the same build."""
    shown = invoke(["explain", "--gpu", "a100", "--driver", "580.65.06", "--offline", "--json"], cache)
    assert shown.exit_code == 0, shown.output
    plan = json.loads(shown.stdout)
    return [
        "--gpu", "a100", "--driver", "580.65.06", "--torch", plan["torch_version"], "--cuda", plan["cuda_version"],
        "--python", plan["python_version"],
    ]  # fmt: skip


@pytest.fixture(scope="module")
def aging(tmp_path_factory: pytest.TempPathFactory) -> Aging:
    root = tmp_path_factory.mktemp("aging")
    cache = root / "cache"
    make = ["make", *_plan_options(cache)]
    now = channels.channel_without(root / "now").as_uri()
    made = invoke([*make, "--channel", now, "-o", root / "fresh"], cache)
    assert made.exit_code == 0, made.output
    fresh = channels.read(root / "fresh" / "conda-lock.yml")
    noarch = {e.name for e in fresh.entries if e.subdir == "noarch"}
    pure = [
        e.name
        for e in fresh.entries
        if e.name in channels.with_older(fresh, ()) and {d.split()[0] for d in e.depends} == {"python"}
    ]
    assert len(pure) >= 2, f"the snapshot holds older releases of two pure-python noarch packages: {sorted(noarch)}"
    for x, y in itertools.islice(itertools.combinations(sorted(pure), 2), MAX_PAIRS):
        dropped = {(x, channels.entry(fresh, x)[0]), (y, channels.entry(fresh, y)[0])}
        then = channels.channel_without(root / f"then-{x}-{y}", dropped).as_uri()
        out = root / f"out-{x}-{y}"
        if invoke([*make, "--channel", then, "-o", out], cache).exit_code != 0:
            continue
        old = channels.read(out / "conda-lock.yml")
        if all(channels.entry(old, n) != channels.entry(fresh, n) for n in (x, y)):
            return Aging(make, now, out, old, fresh, x, y, cache)
    raise AssertionError(f"no pair of {pure} locks at older releases against a channel without their newest")


def _copy(aging: Aging, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(aging.out, out)
    return out


def test_the_lock_made_then_holds_older_releases_than_a_fresh_solve(aging: Aging) -> None:
    for name in (aging.x, aging.y):
        then, now = channels.entry(aging.old, name), channels.entry(aging.fresh, name)
        assert then != now, f"{name}: the channel without its newest release locked {then}, the full one {now}"


def test_a_re_make_with_the_lock_in_place_keeps_every_package(aging: Aging, tmp_path: Path) -> None:
    out = _copy(aging, tmp_path)
    result = invoke([*aging.make, "--channel", aging.now, "-o", out], aging.cache)
    assert result.exit_code == 0, result.output
    again = channels.read(out / "conda-lock.yml")
    assert _packages(again) == _packages(aging.old), (
        f"without --update the lock in OUT is kept: {aging.x} and {aging.y} stay at their locked builds though "
        "`now` has newer ones"
    )


def test_update_moves_the_named_package_and_keeps_every_other(aging: Aging, tmp_path: Path) -> None:
    out = _copy(aging, tmp_path)
    result = invoke([*aging.make, "--channel", aging.now, "-o", out, "--update", aging.x], aging.cache)
    assert result.exit_code == 0, result.output
    new = _packages(channels.read(out / "conda-lock.yml"))
    old = _packages(aging.old)
    assert new[aging.x] == channels.entry(aging.fresh, aging.x), f"{aging.x} moves to the newest that fits"
    assert new[aging.y] == old[aging.y], f"{aging.y}, not named, stays at its locked build though a newer one exists"
    moved = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
    assert moved == [aging.x], f"only {aging.x} changed (its only dependency is python): {moved}"
    shown = invoke(["diff", aging.out / "conda-lock.yml", out / "conda-lock.yml", "--json"], aging.cache)
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert [(c["kind"], c["name"]) for c in doc["changes"]] == [("changed", aging.x)], doc["changes"]
    assert doc["changes"][0]["old"]["version"] == old[aging.x][0], "diff names the locked version it moved from"


def test_dry_run_shows_the_update_package_by_package_and_writes_nothing(aging: Aging, tmp_path: Path) -> None:
    out = _copy(aging, tmp_path)
    before = (out / "conda-lock.yml").read_bytes()
    args = [*aging.make, "--channel", aging.now, "-o", out, "--update", aging.x, "--dry-run"]
    text, as_json = invoke(args, aging.cache), invoke([*args, "--json"], aging.cache)
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    assert (out / "conda-lock.yml").read_bytes() == before, "a dry run writes nothing"
    lines = text.stdout.splitlines()
    start = lines.index(f"packages against {out / 'conda-lock.yml'}:")
    (row,) = lines[start + 1 : -1]
    old, new = channels.entry(aging.old, aging.x), channels.entry(aging.fresh, aging.x)
    assert row.split() == ["changed", aging.x, "conda", *old, "->", *new], row
    assert lines[-1].startswith("1 of ") and lines[-1].endswith(" packages differ: 1 changed."), lines[-1]
    doc = json.loads(as_json.stdout)["packages"]
    assert doc["against"] == str(out / "conda-lock.yml") and doc["differ"] is True, doc
    assert [(c["kind"], c["name"]) for c in doc["changes"]] == [("changed", aging.x)], doc["changes"]


def test_a_name_the_lock_does_not_hold_is_refused_with_the_closest(aging: Aging) -> None:
    misspelled = aging.x[:-1] + ("z" if aging.x[-1] != "z" else "y")
    result = invoke([*aging.make, "--channel", aging.now, "-o", aging.out, "--update", misspelled], aging.cache)
    assert result.exit_code == 2, result.output
    assert f"holds no package of that name (the closest it holds: {aging.x}" in result.stderr, result.stderr
    assert f"e.g. --update {aging.x}." in result.stderr, result.stderr
    assert channels.read(aging.out / "conda-lock.yml") == aging.old, "nothing was written"


def test_update_without_a_lock_is_refused_and_the_fix_works(aging: Aging, tmp_path: Path) -> None:
    out = tmp_path / "new"
    base = [*aging.make, "--channel", aging.now, "-o", out]
    refused = invoke([*base, "--update", aging.x], aging.cache)
    assert refused.exit_code == 2, refused.output
    assert "holds none (conda-lock.yml does not exist)" in refused.stderr, refused.stderr
    assert "Run the same command without --update to write the lock" in refused.stderr, refused.stderr
    assert not out.exists() or not (out / "conda-lock.yml").exists(), "nothing was written"
    assert invoke(base, aging.cache).exit_code == 0, "the fix: the same command without --update writes the lock"
    assert invoke([*base, "--update", aging.x], aging.cache).exit_code == 0, "then --update runs"


@pytest.mark.parametrize("other", ["--no-lock", "--cluster"])
def test_update_with_no_lock_or_cluster_is_refused(other: str, tmp_path: Path) -> None:
    words = [other] if other == "--no-lock" else [other, str(tmp_path / "cluster.yaml")]
    result = invoke(["make", "--gpu", "a100", "-o", tmp_path, "--update", "tqdm", *words], tmp_path / "cache")
    assert result.exit_code == 2 and f"it does not apply to {other}" in result.stderr, result.output


# --- keep.existing ------------------------------------------------------------------------------------------------


def test_existing_keeps_every_package_but_the_updated(aging: Aging) -> None:
    kept, warning = keep.existing(aging.out, [aging.x.upper()])
    assert kept is not None and warning is None, warning
    assert kept.updates == (aging.x,), "a name is matched as conda matches it: case does not matter"
    names = {p.name for p in kept.conda}
    assert names == {e.name for e in aging.old.entries} - {aging.x}, "every conda package but X is preferred"
    record = next(p for p in kept.conda if p.name == aging.y)
    entry = next(e for e in aging.old.entries if e.name == aging.y)
    assert (record.subdir, record.file_name, record.sha256) == (entry.subdir, entry.file_name, entry.sha256)
    assert kept.locked_for(aging.old.platform) == kept.conda, "for the lock's own platform: its packages"


def test_another_platform_keeps_nothing_and_refuses_an_update(aging: Aging) -> None:
    kept, _ = keep.existing(aging.out, [])
    assert kept is not None and kept.locked_for("linux-aarch64") == (), "a linux-64 lock says nothing for aarch64"
    updating, _ = keep.existing(aging.out, [aging.x])
    assert updating is not None
    with pytest.raises(BadInputError, match="Pass --platform linux-64 to update that lock"):
        updating.locked_for("linux-aarch64")


def test_an_unreadable_lock_is_a_warning_without_update_and_an_error_with_it(tmp_path: Path) -> None:
    (tmp_path / "conda-lock.yml").write_text("version: 7\n")
    kept, warning = keep.existing(tmp_path, [])
    assert kept is None and warning is not None and "none of its packages were kept" in warning, warning
    with pytest.raises(BadInputError, match="--update tqdm needs the lock it updates"):
        keep.existing(tmp_path, ["tqdm"])


def test_a_pypi_package_is_kept_as_a_preference_and_updated_as_an_upgrade(tmp_path: Path) -> None:
    """The PyPI part: a lock whose DeepSpeed comes from PyPI (the bundled PyPI snapshot's real sdist)."""
    out = tmp_path / "out"
    made = invoke(
        ["make", "--gpu", "a100", "--driver", "580.65.06", "--offline", "--deepspeed-from", "pypi", "-o", out],
        tmp_path / "cache",
    )
    assert made.exit_code == 0, made.output
    lock = channels.read(out / "conda-lock.yml")
    (deepspeed,) = [r for r in lock.pip if r.name == "deepspeed"]
    kept, _ = keep.existing(out, [])
    assert kept is not None and kept.preferences() == {"deepspeed": deepspeed.version}, kept
    assert kept.pip_upgrade == frozenset(), "nothing to upgrade without --update"
    updating, _ = keep.existing(out, ["DeepSpeed"])
    assert updating is not None and updating.pip_upgrade == {"deepspeed"}, "a PyPI name matched as PEP 503 does"
    assert updating.preferences() == {}, "an updated PyPI package is no preference"
    assert {p.name for p in updating.conda} == {e.name for e in lock.entries}, "every conda package is kept"
