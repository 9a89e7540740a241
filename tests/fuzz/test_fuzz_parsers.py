"""Property-based fuzzing of the parsers as library calls: each returns or raises its documented error,
nothing else, within the time bound."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from envsolver.core import versions
from envsolver.core.errors import BadInputError
from envsolver.lock import lockfile
from envsolver.resolve import detect, profile
from envsolver.resolve.target import torch_specifier
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_function, modes, run_property

version_text = st.one_of(fs.value(fs.DRIVERS + fs.CUDAS + fs.PYTHONS), fs.file_junk)


@modes(100)
def test_version_parsers(seed_value: int | None, count: int) -> None:
    tally = Tally("versions")

    def check(text: str) -> None:
        for parse in (versions.driver, versions.cuda, versions.python, versions.cc):
            check_function(tally, (parse.__name__, text), lambda p=parse: p(text), (BadInputError,))
        check_function(tally, ("leading_major_minor", text), lambda: versions.leading_major_minor(text), ())

    run_property(version_text, check, count, seed_value)
    tally.check()


@modes(100)
def test_torch_specifier(seed_value: int | None, count: int) -> None:
    """A specifier torch_specifier accepts can be used: the resolver's `contains` must not raise either."""
    tally = Tally("torch_specifier")

    def use(text: str) -> None:
        spec = torch_specifier(text)
        for candidate in ("2.5.1", "2.10.0", "1.13.1"):
            spec.contains(candidate)

    run_property(
        st.one_of(fs.value(fs.TORCHES), fs.file_junk),
        lambda text: check_function(tally, text, lambda: use(text), (BadInputError,)),
        count,
        seed_value,
    )
    tally.check()


@modes(100)
def test_detection_parsers_never_raise(seed_value: int | None, count: int) -> None:
    tally = Tally("detect parsers")

    def check(text: str) -> None:
        for parse in (detect.parse_smi_csv, detect.parse_smi_list, detect.parse_proc_version, detect.parse_smi_banner):
            check_function(tally, (parse.__name__, text), lambda p=parse: p(text), ())

    run_property(st.one_of(st.sampled_from(fs.SMI_CSV), fs.file_junk), check, count, seed_value)
    tally.check()


@modes(100)
def test_detect_never_raises(seed_value: int | None, count: int) -> None:
    """Whatever NVML, nvidia-smi, /sys and /proc say, and whatever ENVSOLVER_* hold, detect() returns facts."""
    tally = Tally("detect")
    probes = st.tuples(
        fs.envsolver_env,
        fs.detection_text,
        fs.detection_text,
        st.one_of(st.none(), st.tuples(st.lists(fs.file_junk, max_size=3), fs.file_junk)),
    )

    def check(value: tuple[dict[str, str], str | None, str | None, Any]) -> None:
        environ, smi, proc, nvml = value
        call = lambda: detect.detect(environ, run=lambda argv: smi, read=lambda path: proc, nvml=lambda: nvml)  # noqa: E731
        check_function(tally, value, call, ())

    run_property(probes, check, count, seed_value)
    tally.check()


@modes(60)
def test_profile_load(seed_value: int | None, count: int) -> None:
    tally = Tally("profile.load")

    def check(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "site.yaml"
            path.write_bytes(data)
            check_function(tally, data, lambda: profile.load(str(path)), (BadInputError,))

    run_property(fs.profile_bytes, check, count, seed_value)
    tally.check()


@modes(50)
def test_profile_names(seed_value: int | None, count: int) -> None:
    tally = Tally("profile names")
    names = st.one_of(fs.junk, st.sampled_from(["a100", "../profiles/a100", "/etc/passwd", "a" * 5000, "x.yml"]))
    run_property(
        names, lambda n: check_function(tally, n, lambda: profile.load(n), (BadInputError,)), count, seed_value
    )
    tally.check()


@modes(60)
def test_lockfile_read(seed_value: int | None, count: int) -> None:
    tally = Tally("lockfile.read")

    def check(value: tuple[str, str | None]) -> None:
        text, platform = value
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "lock"
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            check_function(tally, value, lambda: lockfile.read(path, platform), (BadInputError,))

    run_property(
        st.tuples(fs.lock_text, st.sampled_from([None, "linux-64", "linux-aarch64"])), check, count, seed_value
    )
    tally.check()


@modes(40)
def test_lockfile_accepts_every_grammatical_lock(seed_value: int | None, count: int) -> None:
    """The other side of the grammar: a lock whose every field is valid is read, field for field."""

    def check(value: tuple[str, str, list[dict[str, str]]]) -> None:
        text, platform, expected = value
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "lock"
            path.write_text(text)
            lock = lockfile.read(path, None)
        assert lock.platform == platform
        got = sorted((e.name, e.version, e.build, e.subdir, e.url) for e in lock.entries)
        assert got == sorted((e["name"], e["version"], e["build"], e["subdir"], e["url"]) for e in expected)

    run_property(fs.valid_locks(), check, count, seed_value)
