"""lock/pkgdiff.py: two package sets -> added, removed, changed and moved (between conda and PyPI), with the text
and JSON `envsolver diff` and `make --dry-run` print. Names, versions and builds are real ones: conda-forge's
records in the bundled snapshot (locks/a100) and PyPI's releases."""

from __future__ import annotations

import json

import pytest

from envsolver.kb import default_kb
from envsolver.lock import pkgdiff
from envsolver.lock.pkgdiff import Change, Package

PYTORCH = Package("pytorch", "2.10.0", "cuda129_mkl_py313_h623d66f_303", "conda")
TQDM_OLD = Package("tqdm", "4.67.1", "pyhd8ed1ab_1", "conda")
TQDM_NEW = Package("tqdm", "4.67.3", "pyh8f84b5b_0", "conda")
COLORAMA = Package("colorama", "0.4.6", "pyhd8ed1ab_1", "conda")
FILELOCK = Package("filelock", "3.25.2", "pyhd8ed1ab_0", "conda")
MSGPACK = Package("msgpack-python", "1.1.2", "py313h7037e92_1", "conda")
TORCH_PIP = Package("torch", "2.10.0", "", "pip")
MSGPACK_PIP = Package("msgpack", "1.1.2", "", "pip")
PEFT = Package("peft", "0.17.1", "", "pip")
REBUILT = Package("filelock", "3.25.2", "pyhd8ed1ab_1", "conda")  # the same version, another build
TQDM_PIP = Package("tqdm", "4.67.1", "", "pip")
PROJECTS = pkgdiff.pypi_of_conda(default_kb())

CASES = [
    pytest.param([FILELOCK], [FILELOCK], [], id="the-same"),
    pytest.param([TQDM_OLD, FILELOCK], [TQDM_NEW, FILELOCK], [Change("changed", TQDM_OLD, TQDM_NEW)], id="changed"),
    pytest.param([FILELOCK], [REBUILT], [Change("changed", FILELOCK, REBUILT)], id="a-rebuild-is-a-change"),
    pytest.param(
        [TQDM_OLD, COLORAMA],
        [TQDM_NEW],
        [Change("removed", COLORAMA, None), Change("changed", TQDM_OLD, TQDM_NEW)],
        id="removed",
    ),
    pytest.param([FILELOCK], [FILELOCK, PEFT], [Change("added", None, PEFT)], id="added-pypi"),
    pytest.param([PYTORCH], [TORCH_PIP], [Change("moved", PYTORCH, TORCH_PIP)], id="pytorch-to-pypi-torch"),
    pytest.param([TORCH_PIP], [PYTORCH], [Change("moved", TORCH_PIP, PYTORCH)], id="back-to-conda"),
    pytest.param([MSGPACK], [MSGPACK_PIP], [Change("moved", MSGPACK, MSGPACK_PIP)], id="kb-name-map"),
    pytest.param([PYTORCH], [PYTORCH, TORCH_PIP], [Change("added", None, TORCH_PIP, PYTORCH)], id="pip-over-conda"),
    pytest.param([TQDM_OLD], [TQDM_PIP], [Change("moved", TQDM_OLD, TQDM_PIP)], id="same-name-moved"),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_the_changes(old: list[Package], new: list[Package], expected: list[Change]) -> None:
    found = pkgdiff.diff(old, new, PROJECTS)
    assert list(found.changes) == expected, f"{old} -> {new}: {found.changes}"
    both = {(p.manager, p.name) for p in old} & {(p.manager, p.name) for p in new}
    changed_in_both = sum(1 for c in expected if c.kind == "changed")
    assert found.unchanged == len(both) - changed_in_both, "unchanged counts the entries in both that did not change"


def test_the_kb_maps_conda_names_to_pypi_projects() -> None:
    assert PROJECTS["pytorch"] == "torch", "the KB's pypi_conda_names row for torch names conda's pytorch"
    assert pkgdiff.project(PYTORCH, PROJECTS) == pkgdiff.project(TORCH_PIP, PROJECTS) == "torch"
    assert pkgdiff.project(Package("typing_extensions", "4.16.0", "pyhcf101f3_0", "conda"), {}) == "typing-extensions"


def test_the_order_does_not_depend_on_the_input_order() -> None:
    old = [TQDM_OLD, COLORAMA, PYTORCH, FILELOCK]
    new = [TQDM_NEW, TORCH_PIP, PEFT, FILELOCK]
    forward, backward = pkgdiff.diff(old, new, PROJECTS), pkgdiff.diff(old[::-1], new[::-1], PROJECTS)
    assert forward == backward, "the same sets in another order give the same diff"
    assert [c.name for c in forward.changes] == sorted(c.name for c in forward.changes), "sorted by name"


def test_the_text_is_aligned_and_ends_with_the_summary() -> None:
    found = pkgdiff.diff([TQDM_OLD, COLORAMA, PYTORCH, FILELOCK], [TQDM_NEW, TORCH_PIP, PEFT, FILELOCK], PROJECTS)
    lines = pkgdiff.lines(found)
    assert lines == [
        "  removed  colorama  conda         0.4.6 pyhd8ed1ab_1                             -> -",
        "  added    peft      pip           -                                              -> 0.17.1",
        "  moved    torch     conda -> pip  pytorch 2.10.0 cuda129_mkl_py313_h623d66f_303  -> 2.10.0",
        "  changed  tqdm      conda         4.67.1 pyhd8ed1ab_1                            -> 4.67.3 pyh8f84b5b_0",
        "4 of 5 packages differ: 1 changed, 1 added, 1 removed, 1 moved between conda and PyPI.",
    ], "\n".join(lines)
    arrows = {line.index("  -> ") for line in lines[:-1]}
    assert len(arrows) == 1, "every row's arrow in one column:\n" + "\n".join(lines)


def test_the_same_sets_say_so() -> None:
    assert pkgdiff.lines(pkgdiff.diff([FILELOCK, PYTORCH], [PYTORCH, FILELOCK], PROJECTS)) == [
        "no package differs (2 packages, each the same version and build)."
    ]


def test_pip_over_conda_names_the_conda_package() -> None:
    found = pkgdiff.diff([PYTORCH], [PYTORCH, TORCH_PIP], PROJECTS)
    (line, _) = pkgdiff.lines(found)
    assert line.endswith("-> 2.10.0  (over conda's pytorch 2.10.0)"), line


def test_json_has_stable_keys() -> None:
    doc = pkgdiff.diff([TQDM_OLD, PYTORCH], [TQDM_NEW, TORCH_PIP], PROJECTS).to_json()
    assert list(doc) == ["differ", "counts", "changes"], doc
    assert doc["counts"] == {"changed": 1, "added": 0, "removed": 0, "moved": 1, "unchanged": 0}, doc["counts"]
    moved = doc["changes"][0]
    assert moved == {
        "kind": "moved",
        "name": "torch",
        "old": {"name": "pytorch", "version": "2.10.0", "build": "cuda129_mkl_py313_h623d66f_303", "manager": "conda"},
        "new": {"name": "torch", "version": "2.10.0", "build": None, "manager": "pip"},
        "over": None,
    }, moved
    assert json.loads(json.dumps(doc)) == doc, "plain JSON values only"


def test_a_control_character_in_a_value_is_spelled_out() -> None:
    """The readers hold names to their grammars; the text escapes every cell anyway (core/printable)."""
    evil = Package("tqdm", "4.67.3\x1b[2J", "pyh8f84b5b_0", "conda")
    lines = pkgdiff.lines(pkgdiff.diff([TQDM_OLD], [evil], PROJECTS))
    assert "\x1b" not in "".join(lines) and "\\x1b[2J" in lines[0], lines
