"""envsolver's reading of environment.yml entries and virtual packages equals conda-lock's, entry by entry.

writers/inputhash.py computes conda-lock's content hash without importing conda-lock; it accepts only the
forms whose conda-lock reading it reproduces. Here every such form (generated) is compared with what conda-lock's
own parsers give: its MatchSpec reading of a conda spec, its requirement reading of a pip line, its Channel
model's JSON, and its virtual-package repodata entry.
"""

from __future__ import annotations

import json

import pytest
from conda_lock.models.channel import Channel
from conda_lock.src_parser.conda_common import conda_spec_to_versioned_dep
from conda_lock.src_parser.pyproject_toml import parse_python_requirement
from conda_lock.virtual_package import _parse_virtual_package_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.lock.writers import inputhash

NAME = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,12}[a-z0-9]", fullmatch=True)
NUMBER = st.from_regex(r"(0|[1-9][0-9]{0,3})(\.(0|[1-9][0-9]{0,3})){0,3}", fullmatch=True)
# A project's versions (resolve/project.py) also hold letters: 2024a, 3.0.0a0, 1.0rc1.
RELEASE = NUMBER | st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3}){0,2}[a-z]{1,3}[0-9]{0,2}", fullmatch=True)
OPERATOR = st.sampled_from(["==", ">=", "<=", "<", ">", "!=", ""])
CLAUSE = st.builds(lambda op, n, star: op + n + (".*" if star and not op else ""), OPERATOR, RELEASE, st.booleans())
VERSION = st.one_of(
    st.just("*"),
    NUMBER,
    NUMBER.map(lambda n: n + ".*"),
    st.lists(CLAUSE, min_size=1, max_size=3).map(",".join),
)
BUILD = st.from_regex(r"[A-Za-z0-9_*]{1,16}", fullmatch=True).filter(lambda b: b != "*")


def _dump(spec: str) -> dict[str, object]:
    dep = conda_spec_to_versioned_dep(spec, "main").model_dump()
    dep.pop("markers")  # conda-lock's hash drops a null `markers` (_remove_new_nulls)
    return dep


@settings(max_examples=400, deadline=None)
@given(name=NAME, version=st.none() | VERSION, build=st.none() | BUILD)
def test_conda_specs_read_as_conda_lock_reads_them(name: str, version: str | None, build: str | None) -> None:
    spec = " ".join(p for p in (name, version if version or not build else "*", build) if p)
    assert inputhash.conda_dependency(spec) == _dump(spec), spec


@pytest.mark.parametrize(
    "spec",
    [
        "python 3.13.*",
        "pytorch ==2.10.0 cuda129*",
        "pytorch ==2.3.0 *cuda12*",
        "arm-variant * tegra",
        "cudnn <9.11",
        "pydantic >=2",
        "gxx_linux-64 <15",
        "cuda-nvcc",
        "deepspeed ==0.18.8 cuda129*",
    ],
)
def test_the_forms_plans_write(spec: str) -> None:
    assert inputhash.conda_dependency(spec) == _dump(spec)


@pytest.mark.parametrize(
    "spec", ["python =3.12", "x ==1.2.*", "x >=1.2.* b*", "x 1.2 *_0 extra", "X 1", "x >=1, <2", "c::x", "x[build=1]"]
)
def test_forms_conda_lock_rewrites_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="conda-lock"):
        inputhash.conda_dependency(spec)


PIP_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(name=PIP_NAME, version=NUMBER)
def test_pip_pins_read_as_conda_lock_reads_them(name: str, version: str) -> None:
    line = f"{name}=={version}"
    dep = parse_python_requirement(line, manager="pip", category="main", mapping_url="unused").model_dump()
    dep.pop("markers")
    assert inputhash.pip_dependency(line) == dep, line


EXTRA = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
PIP_OPERATOR = st.sampled_from(["==", ">=", "<=", "<", ">", "!=", "~="])
SPECIFIER = st.builds(lambda op, n: op + n, PIP_OPERATOR, NUMBER.filter(lambda n: "." in n))
MARKER = st.sampled_from(
    [
        "",
        '; python_version < "3.14"',
        "; sys_platform == 'linux'",
        '; platform_machine == "x86_64" and python_version >= "3.10"',
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    name=PIP_NAME,
    extras=st.lists(EXTRA, max_size=3, unique=True),
    specifiers=st.lists(SPECIFIER, max_size=3),
    marker=MARKER,
)
def test_pep508_requirements_read_as_conda_lock_reads_them(
    name: str, extras: list[str], specifiers: list[str], marker: str
) -> None:
    """A project's PyPI requirements as make writes them (packaging's canonical text) read as conda-lock reads
    them: name, version (sorted clauses), extras (conda-lock lists a set: compared sorted) and markers."""
    from packaging.requirements import Requirement

    written = str(Requirement(f"{name}{'[' + ','.join(extras) + ']' if extras else ''}{','.join(specifiers)}{marker}"))
    dep = parse_python_requirement(written, manager="pip", category="main", mapping_url="unused").model_dump()
    if dep["markers"] is None:
        dep.pop("markers")
    dep["extras"] = sorted(dep["extras"])
    assert inputhash.pip_dependency(written) == dep, written


@pytest.mark.parametrize("line", ["x @ https://example.org/x-1.0.tar.gz", "not a requirement!", "-r other.txt"])
def test_other_pip_forms_are_refused(line: str) -> None:
    with pytest.raises(ValueError, match="conda-lock"):
        inputhash.pip_dependency(line)


@pytest.mark.parametrize("channel", ["conda-forge", "pytorch", "nvidia", "nvidia/label/cuda-12.1.0"])
def test_channels_serialise_as_conda_locks_model(channel: str) -> None:
    assert inputhash.channel_json(channel) == Channel.from_string(channel).model_dump_json()


@settings(max_examples=200, deadline=None)
@given(
    name=st.from_regex(r"__[a-z][a-z_]{0,10}", fullmatch=True),
    version=NUMBER,
    build=st.none() | st.from_regex(r"[A-Za-z0-9_]{1,10}", fullmatch=True),
)
def test_virtual_packages_become_conda_locks_repodata_entries(name: str, version: str, build: str | None) -> None:
    value = f"{version} {build}" if build else version
    package = _parse_virtual_package_spec(name, value)
    file_name, entry = package.to_repodata_entry(subdir="linux-64")
    if build:  # conda-lock >= 3.0.3 reinserts the build number v2 wrote (_reinsert_spurious_build_number)
        entry = {**entry, "build": f"{build}_0"}
        file_name = f"{name}-{version}-{build}_0.tar.bz2"
    assert inputhash.virtual_entry(name, value, "linux-64") == (file_name, json.loads(json.dumps(entry)))
