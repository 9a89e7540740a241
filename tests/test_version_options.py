"""Issue 13: every version option follows versions.py's one rule. A partial value is accepted where it has a
meaning (--cuda 13, --python 3, --driver 535) with a warning that names what was planned, on stderr and in
--json's warnings; where it has none (--glibc 2) it is refused with a fix that works."""

from __future__ import annotations

import json
import pathlib
import shlex

import pytest
from click.testing import CliRunner

from envsolver.cli.main import main
from envsolver.cluster import file as cluster_file
from envsolver.cluster import planning
from envsolver.core import versions
from envsolver.core.errors import BadInputError
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.resolve.detect import detect
from envsolver.resolve.inputs import Options, build_target

ENV = {"ENVSOLVER_GPUS": None, "ENVSOLVER_DRIVER": None}


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return default_kb()


def _cudas(kb: KnowledgeBase, major: int) -> list[versions.MajorMinor]:
    return sorted({b.cuda for b in kb.torch_builds if b.cuda.major == major})


def test_cuda_major_alone_is_its_newest_known_release(kb: KnowledgeBase) -> None:
    for major in (12, 13):
        inputs = build_target(Options(gpus=("a100",), cuda=str(major)), kb)
        newest = _cudas(kb, major)[-1]
        assert inputs.target.cuda == newest
        assert any(f"--cuda {major} names a major version only: planned for {newest}" in w for w in inputs.warnings)
        assert f"--cuda {newest}" in inputs.command  # the files' regenerate line says what was planned


def test_python_major_covering_every_known_python_narrows_nothing(kb: KnowledgeBase) -> None:
    inputs = build_target(Options(gpus=("a100",), python="3"), kb)
    assert inputs.target.python is None
    assert any("--python 3 covers every Python" in w and "planned as without --python" in w for w in inputs.warnings)


def test_driver_branch_alone_is_its_oldest_release_with_a_warning(kb: KnowledgeBase) -> None:
    inputs = build_target(Options(gpus=("a100",), driver="535"), kb)
    assert inputs.target.driver == versions.driver("535.0.0")
    assert inputs.target.driver is not None and inputs.target.driver < versions.driver("535.54.03")
    assert any("--driver 535 names a driver branch" in w for w in inputs.warnings)
    full = build_target(Options(gpus=("a100",), driver="535.104.05"), kb)
    assert full.warnings == ()


@pytest.mark.parametrize(
    ("options", "dropped"),
    [(Options(gpus=("a100",), cuda="12.4.1"), "12.4"), (Options(gpus=("a100",), python="3.11.9"), "3.11")],
)
def test_a_patch_is_dropped_with_a_warning(kb: KnowledgeBase, options: Options, dropped: str) -> None:
    inputs = build_target(options, kb)
    assert any(f"so the plan is for {dropped}" in w for w in inputs.warnings)


def test_full_values_warn_nothing(kb: KnowledgeBase) -> None:
    inputs = build_target(Options(gpus=("a100",), cuda="12.4", python="3.11", glibc="2.28", driver="570.26"), kb)
    assert inputs.warnings == ()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--glibc", "2"], "--glibc 2 names a major version only"),
        (["--cuda", "10"], "the knowledge base knows no CUDA 10.x"),
        (["--python", "2"], "the knowledge base knows no Python 2.x"),
        (["--cuda", "12.x"], "malformed CUDA version"),
        (["--python", "3.11.2.1"], "malformed Python version"),
        (["--driver", "535.1.2.3"], "malformed driver version"),
        (["--glibc", "two"], "malformed glibc version"),
        # Issue 22: values that cannot be an NVIDIA driver; the fix names the branch the digits spell when known.
        (["--driver", "5.50"], "--driver '5.50' is not an NVIDIA driver version: its branch '5' is not 3 digits"),
        (["--driver", "55.0"], "Pass --driver 550 (if branch 550 was meant)"),
        (["--driver", "5.5.0"], "Pass --driver 550 (if branch 550 was meant)"),
        (["--driver", "0535.104.05"], "its branch '0535' is not 3 digits"),
        (["--driver", "300.1"], "branch 300 is older than every driver the knowledge base records (the oldest is "),
        (["--driver", "300.1"], "Pass --driver 535.104.05, or the version nvidia-smi prints"),
        # Issue 22: a malformed torch value's fix names the release it still spells, not 2.5.
        (["--torch", "2.4.*"], "malformed torch version '2.4.*'"),
        (["--torch", "2.4.*"], "Pass --torch 2.4 (any 2.4.x release)."),
        (["--torch", "2.4.x"], "Pass --torch 2.4 (any 2.4.x release)."),
        (["--torch", "=2.4"], "Pass --torch 2.4 (any 2.4.x release)."),
        (["--torch", "2.3.1.*"], "Pass --torch 2.3.1."),
    ],
)
def test_refusals_name_a_fix_that_works(args: list[str], fragment: str) -> None:
    """Each refusal exits 2 and ends with `Pass FLAG VALUE`; that command, run, plans the target."""
    base = ["explain", "--gpu", "a100", "--driver", "580.65.06"]
    result = CliRunner().invoke(main, [*base, *args], env=ENV)
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    fix = result.output.split(" Pass ", 1)[1].split(",")[0].split(" (")[0].rstrip(".\n")
    words = shlex.split(fix)
    assert words[0] == args[0], fix
    fixed = [*base, *words]
    again = CliRunner().invoke(main, fixed, env=ENV)
    assert again.exit_code == 0, (fixed, again.output)


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (["--cuda", "13"], "--cuda 13 names a major version only"),
        (["--python", "3"], "--python 3 covers every Python"),
        (["--driver", "580"], "--driver 580 names a driver branch"),
        # Issue 22: a branch beyond the newest the KB records may be a driver released since: planned, with a note.
        (["--driver", "999.1"], "--driver 999.1: branch 999 is newer than every driver the knowledge base records"),
    ],
)
def test_warnings_reach_stderr_and_json(args: list[str], warning: str) -> None:
    runner = CliRunner()
    text = runner.invoke(main, ["explain", "--gpu", "a100", *args], env=ENV)
    assert text.exit_code == 0, text.output
    assert warning in text.stderr and warning not in text.stdout
    doc = runner.invoke(main, ["explain", "--gpu", "a100", *args, "--json"], env=ENV)
    assert doc.exit_code == 0, doc.output
    assert any(warning in w for w in json.loads(doc.stdout)["warnings"])


def test_the_rule_holds_for_every_component_count(kb: KnowledgeBase) -> None:
    """The same text means the same components in every option: 1 to 3 parts parse, 4 never do."""
    for text in ("7", "7.1", "7.1.2"):
        assert versions.components(text, "x", "1.2", "--x", "form") == tuple(int(p) for p in text.split("."))
    with pytest.raises(BadInputError):
        versions.components("7.1.2.3", "x", "1.2", "--x", "form")


def test_glibc_given_keeps_major_and_minor_and_drops_a_patch_with_a_warning() -> None:
    assert versions.glibc_given("2.28") == (versions.MajorMinor(2, 28), None)
    assert versions.glibc_given(" 2.31.4 ") == (
        versions.MajorMinor(2, 31),
        "--glibc 2.31.4: glibc is compared by MAJOR.MINOR, so the plan is for glibc 2.31.",
    )


def test_wish_with_nothing_known_names_no_majors_and_suggests_the_example() -> None:
    with pytest.raises(BadInputError) as info:
        versions.wish("13", "CUDA", "12.4", "--cuda", ())
    assert str(info.value) == (
        "--cuda 13: the knowledge base knows no CUDA 13.x (it knows majors none). Pass --cuda 12.4, or leave "
        "--cuda out to let envsolver choose."
    )


def test_wish_of_a_major_that_covers_everything_names_the_range() -> None:
    known = (versions.MajorMinor(3, 10), versions.MajorMinor(3, 9), versions.MajorMinor(3, 11))
    assert versions.wish("3", "Python", "3.11", "--python", known) == (
        None,
        "--python 3 covers every Python the knowledge base knows (3.9 to 3.11), so it narrows nothing: planned as "
        "without --python. Pass --python 3.11 (or another MAJOR.MINOR) to choose one.",
    )


def test_wish_of_a_major_plans_its_newest_and_lists_them() -> None:
    known = (versions.MajorMinor(12, 6), versions.MajorMinor(11, 8), versions.MajorMinor(12, 4))
    assert versions.wish("12", "CUDA", "12.4", "--cuda", known) == (
        versions.MajorMinor(12, 6),
        "--cuda 12 names a major version only: planned for 12.6, the newest CUDA 12.x the knowledge base knows "
        "(12.4, 12.6). Pass --cuda 12.6 to say so.",
    )


def test_the_5_50_fix_names_550_and_plans_for_it() -> None:
    """Issue 22: `--driver 5.50` (a typo for 550) was planned as a real driver; now it is refused, and the fix it
    names, run, plans for branch 550."""
    first = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--driver", "5.50"], env=ENV)
    assert first.exit_code == 2, first.output
    assert "Pass --driver 550 (if branch 550 was meant)" in first.stderr, first.stderr
    doc = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--driver", "5.50", "--json"], env=ENV)
    assert doc.exit_code == 2, doc.output
    fix = json.loads(doc.stdout)["error"]["fix"]
    assert fix is not None and fix.startswith("Pass --driver 550 "), doc.stdout
    again = CliRunner().invoke(main, ["explain", "--gpu", "a100", "--driver", "550", "--json"], env=ENV)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["driver"] == "550", again.stdout


@pytest.mark.parametrize("bad", ["5.50", "300.1", "42"])
def test_a_profile_and_envsolver_driver_go_through_the_same_grammar(
    kb: KnowledgeBase, tmp_path: pathlib.Path, bad: str
) -> None:
    """Issue 22: a profile's `driver:` and ENVSOLVER_DRIVER (read by --gpu auto) are refused as --driver is, each
    message naming where the value came from; --driver on the command line, as the fix says, overrides both."""
    profile = tmp_path / "p.yaml"
    profile.write_text(f"gpus: [a100]\ndriver: '{bad}'\n")
    with pytest.raises(BadInputError) as info:
        build_target(Options(profile=str(profile)), kb)
    assert f"the profile's driver: {bad!r}" in str(info.value) and "Pass --driver " in str(info.value), info.value
    assert build_target(Options(profile=str(profile), driver="550.54.14"), kb).target.driver == versions.driver(
        "550.54.14"
    )
    environ = {"ENVSOLVER_GPUS": "a100", "ENVSOLVER_DRIVER": bad}
    with pytest.raises(BadInputError) as info:
        build_target(Options(gpus=("auto",)), kb, detect=detect, environ=environ)
    assert f"ENVSOLVER_DRIVER {bad!r}" in str(info.value), info.value
    fixed = build_target(Options(gpus=("auto",), driver="550.54.14"), kb, detect=detect, environ=environ)
    assert fixed.target.driver == versions.driver("550.54.14")


def test_a_cluster_files_old_driver_reaches_the_planner(kb: KnowledgeBase) -> None:
    """A cluster file's driver is a node's real value: the shape is checked when the file is read, but a branch
    older than the knowledge base's drivers (418) goes on to the cluster planner, which refuses that partition
    with --skip-partition as the fix, not with `--driver` (which `make --cluster` does not take from the user)."""
    doc = (
        "format: 1\ncluster: lab\npartitions:\n"
        "  - {name: old, gpus: [v100], driver: '418.67', platform: linux-64, glibc: '2.28'}\n"
    )
    partitions = cluster_file.parse(doc, kb, "cluster.yaml").partitions
    target = planning.target_for(kb, partitions, "linux-64", Options())
    assert target.driver == versions.driver("418.67"), target
    with pytest.raises(BadInputError, match="branch 418 is older than every driver"):
        build_target(Options(gpus=("v100",), driver="418.67"), kb)
