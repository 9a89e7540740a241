"""Property-based fuzzing of issue 13's grammars: the version options' one rule (versions.components, wish,
driver_given, glibc_given), conda's envs directory and -n NAME (envsdir.py), and the CLI's version options
and -n/-q/-v/--dry-run on the command line. Each returns or raises its documented error, nothing else; the
rule's promises (what each component count means) hold for every accepted value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from envsolver.core import versions
from envsolver.core.errors import BadInputError
from envsolver.install import envsdir
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, check_function, modes, run_property

KNOWN = (versions.MajorMinor(11, 8), versions.MajorMinor(12, 4), versions.MajorMinor(12, 9), versions.MajorMinor(13, 0))
version_text = st.one_of(fs.value(fs.DRIVERS + fs.CUDAS + fs.PYTHONS + fs.GLIBCS + ["13", "3", "2", "535"]))


def _rule(text: str) -> None:
    """What each component count means, for every option, on every value the grammar accepts."""
    try:
        parts = versions.components(text, "v", "1.2", "--v", "form")
    except BadInputError:
        for parse in (lambda: versions.driver_given(text), lambda: versions.glibc_given(text)):
            try:
                parse()
            except BadInputError:
                continue
            raise AssertionError(f"{text!r}: refused by components, accepted by an option") from None
        return
    assert 1 <= len(parts) <= 3
    branch = text.strip().split(".")[0]
    try:
        value, warning = versions.driver_given(text)
    except BadInputError as error:
        assert len(branch) != 3 or branch.startswith("0"), f"{text!r}: a 3-digit branch refused: {error}"
    else:
        assert len(branch) == 3 and not branch.startswith("0"), f"{text!r}: branch {branch!r} accepted"
        assert (warning is None) == (len(parts) > 1) and value.parts == parts
    try:
        wished, said = versions.wish(text, "CUDA", "12.4", "--cuda", KNOWN)
    except BadInputError:
        assert len(parts) == 1 and parts[0] not in {k.major for k in KNOWN}
    else:
        assert (said is None) == (len(parts) == 2)
        if len(parts) == 1:
            assert wished == max(k for k in KNOWN if k.major == parts[0])
        else:
            assert wished == versions.MajorMinor(parts[0], parts[1])
    try:
        versions.glibc_given(text)
    except BadInputError:
        assert len(parts) == 1


@modes(150)
def test_the_version_rule(seed_value: int | None, count: int) -> None:
    tally = Tally("version options")
    run_property(version_text, lambda t: check_function(tally, t, lambda: _rule(t), ()), count, seed_value)
    tally.check()


def _names(name: str, home: str, dirs: str) -> None:
    environ = {"HOME": home, "CONDA_ENVS_DIRS": dirs}
    try:
        prefix = envsdir.prefix_for(name, environ)
    except BadInputError as exc:
        fixed = str(exc).split("Pass -n ", 1)[1].split(", or -p")[0] if "Pass -n " in str(exc) else None
        if fixed is not None:  # the name it suggests is one it takes
            import shlex

            envsdir.prefix_for(shlex.split(fixed)[0], environ)
        return
    assert prefix.name == name and prefix.parent == envsdir.envs_dir(environ)[0] and prefix.is_absolute()


@modes(150)
def test_env_names_and_envs_dirs(seed_value: int | None, count: int) -> None:
    tally = Tally("install -n")
    names = st.one_of(st.sampled_from(["train", "base", "a/b", "-x", "", "..", "é", "a b"]), fs.junk)
    dirs = st.one_of(st.just(""), st.sampled_from(["/opt/envs", "~/e:/x", ":$HOME/envs", "${X}"]), fs.junk)
    homes = st.sampled_from(["/home/u", "/"])

    def check(args: tuple[str, str, str]) -> None:
        check_function(tally, args, lambda: _names(*args), (BadInputError,))

    run_property(st.tuples(names, homes, dirs), check, count, seed_value)
    tally.check()


OPTIONS = ["--cuda", "--python", "--driver", "--glibc"]


@modes(40)
def test_version_options_on_the_command_line(seed_value: int | None, count: int) -> None:
    tally = Tally("explain version options")
    words = st.lists(st.tuples(st.sampled_from(OPTIONS), version_text), min_size=1, max_size=3)
    extra = st.lists(st.sampled_from(["-q", "-v", "--json", "-h"]), max_size=2)

    def check(draw: tuple[list[tuple[str, str]], list[str]]) -> None:
        given, flags = draw
        args: list[Any] = ["explain", "--gpu", "a100", *[w for pair in given for w in pair], *flags]
        check_cli(tally, args)

    run_property(st.tuples(words, extra), check, count, seed_value)
    tally.check()


@modes(20)
def test_install_name_and_prefix_on_the_command_line(seed_value: int | None, count: int) -> None:
    tally = Tally("install -n/-p")
    values = st.one_of(st.sampled_from(["train", "base", "a/b", "-x", ""]), fs.junk)

    def check(draw: tuple[str, bool]) -> None:
        name, with_prefix = draw
        args = ["install", str(Path("/nonexistent/lock.yml")), "-n", name, *(["-p", "/tmp/x"] if with_prefix else [])]
        check_cli(tally, args, {"CONDA_ENVS_DIRS": "/nonexistent/envs"})

    run_property(st.tuples(values, st.booleans()), check, count, seed_value)
    tally.check()
