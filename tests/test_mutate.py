"""scripts/mutate.py, the mutation-testing command: its operators, its exclusion list, and a whole run over the
tiny project in tests/data/mutate (known mutants killed, missed, timed out and excluded as equivalent)."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = Path(__file__).parent / "data" / "mutate"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


mutate = _load()

SAMPLE = '''"""A module docstring is never mutated."""
from typing import Literal

N = 3


def f(a: int, b: Literal[1]) -> int:
    """Nor is a function's."""
    if a < b and b != 0:
        a += 1
    log(a)
    return a


def _g(items: list[int]) -> list[int]:
    return [i for i in items if i]
'''


def test_each_operator_yields_its_mutants_in_source_order() -> None:
    found = [(m.line, m.qualname, m.kind, m.text) for m in mutate.mutants(SAMPLE, "sample.py")]
    assert found == [
        (4, "<module>", "constant", "`3` -> `4` in `N = 3`"),
        (4, "<module>", "constant", "`3` -> `2` in `N = 3`"),
        (9, "f", "negate", "negated condition `a < b and b != 0`"),
        (9, "f", "boolop", "`and` -> `or` in `a < b and b != 0`"),
        (9, "f", "boundary", "`<` -> `<=` in `a < b`"),
        (9, "f", "compare", "`<` -> `>=` in `a < b`"),
        (9, "f", "compare", "`!=` -> `==` in `b != 0`"),
        (9, "f", "constant", "`0` -> `1` in `b != 0`"),
        (9, "f", "constant", "`0` -> `-1` in `b != 0`"),
        (10, "f", "delete", "deleted `a += 1`"),
        (10, "f", "constant", "`1` -> `2` in `a += 1`"),
        (10, "f", "constant", "`1` -> `0` in `a += 1`"),
        (11, "f", "delete", "deleted `log(a)`"),
        (12, "f", "return-none", "`return a` -> `return None`"),
        (16, "_g", "return-none", "`return [i for i in items if i]` -> `return None`"),
        (16, "_g", "negate", "negated condition `i`"),
    ]


@pytest.mark.parametrize(
    ("text", "changed"),
    [
        ("`<` -> `<=` in `a < b`", "if a <= b and b != 0:"),
        ("`and` -> `or` in `a < b and b != 0`", "if a < b or b != 0:"),
        ("negated condition `a < b and b != 0`", "if not (a < b and b != 0):"),
        ("deleted `a += 1`", "        pass"),
        ("`return a` -> `return None`", "    return None"),
        ("negated condition `i`", "return [i for i in items if not i]"),
    ],
)
def test_a_mutant_changes_its_node_and_nothing_else(text: str, changed: str) -> None:
    mutant = next(m for m in mutate.mutants(SAMPLE, "sample.py") if m.text == text)
    baseline = mutate.unparsed(SAMPLE).splitlines()
    mutated = mutate.mutated_source(SAMPLE, mutant).splitlines()
    compile("\n".join(mutated), "sample.py", "exec")
    differing = [(a, b) for a, b in zip(baseline, mutated, strict=True) if a != b]
    assert len(differing) == 1 and changed in differing[0][1], differing


def test_a_nodes_text_is_what_ast_gives_from_lines_split_once() -> None:
    """source_segment, which splits a module into lines once, gives each node the text ast.get_source_segment
    gives (which splits the whole module again for each node): \r\n, a lone \r, a form feed inside a line,
    characters of several bytes, nodes over several lines."""
    odd = "x = 1\r\ny = (2 +\r\n  3)\rz = 'é中' + 'a'\x0c\nif z:\n    w = [\n 1,\n 2]\n    v = w"
    for source in (SAMPLE, odd, (TINY / "tiny.py").read_text("utf-8")):
        for node in ast.walk(ast.parse(source)):
            assert mutate.source_segment(source, node) == ast.get_source_segment(source, node), ast.dump(node)


def test_comparisons_flip_and_move_their_boundary() -> None:
    source = "def f(a, b):\n    return (a <= b, a > b, a >= b, a == b, a in b, a not in b, a is b, a is not b)\n"
    texts = [m.text.split(" in `")[0] for m in mutate.mutants(source, "s.py") if m.kind in ("compare", "boundary")]
    assert texts == [
        "`<=` -> `<`",
        "`<=` -> `>`",
        "`>` -> `>=`",
        "`>` -> `<=`",
        "`>=` -> `>`",
        "`>=` -> `<`",
        "`==` -> `!=`",
        "`in` -> `not in`",
        "`not in` -> `in`",
        "`is` -> `is not`",
        "`is not` -> `is`",
    ]


def test_keys_survive_a_line_shift_and_tell_twins_apart() -> None:
    source = "def f(a):\n    x = a < 1\n    y = a < 1\n    return x, y\n"
    keys = [m.key for m in mutate.mutants(source, "s.py")]
    assert len(keys) == len(set(keys))
    assert "s.py::f::`<` -> `<=` in `a < 1`" in keys and "s.py::f::`<` -> `<=` in `a < 1`#2" in keys
    assert keys == [m.key for m in mutate.mutants("\n\n" + source, "s.py")]


def test_a_public_return_none_is_told_from_a_private_one() -> None:
    source = (
        "class C:\n    def m(self):\n        return 1\n"
        "    def __lt__(self, o):\n        return 2\n    def _p(self):\n        return 3\n"
    )
    flags = {m.qualname: m.public_return_none for m in mutate.mutants(source, "s.py") if m.kind == "return-none"}
    assert flags == {"C.m": True, "C.__lt__": True, "C._p": False}


def test_an_exclusion_without_a_reason_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "eq.txt"
    path.write_text("# comment\n\nsample.py::f::deleted `log(a)`\n")
    with pytest.raises(ValueError, match=r"eq\.txt:3: .*because:"):
        mutate.read_exclusions(path)
    path.write_text("sample.py::f::deleted `log(a)`\n    because:   \n")
    with pytest.raises(ValueError, match=r"eq\.txt:2: "):
        mutate.read_exclusions(path)


def test_exclusions_read_with_their_reasons() -> None:
    assert mutate.read_exclusions(TINY / "equivalent.txt") == {
        "tiny.py::clamp::`>=` -> `>` in `value >= high`": "at value == high both branches return the same number",
        "tiny.py::halve_until::deleted `time.sleep(0.01)`": (
            "the pause changes how long a turn takes, not what the function returns"
        ),
    }


def test_the_projects_groups_name_files_and_tests_that_exist() -> None:
    assert set(mutate.GROUPS) == {"resolve", "writers", "checks", "versions"}
    for group in mutate.GROUPS.values():
        assert mutate.group_files(ROOT, group), group.name
        for test in group.tests:
            assert (ROOT / test.split("::")[0]).is_file(), test


def test_every_listed_equivalent_mutant_exists_in_todays_code() -> None:
    """An exclusion that matches no mutant is stale: the code under it changed, and it must be looked at again."""
    exclusions = mutate.read_exclusions(ROOT / "scripts" / "mutate-equivalent.txt")
    keys = {m.key for g in mutate.GROUPS.values() for m in mutate.group_mutants(ROOT, g)}
    assert sorted(set(exclusions) - keys) == []


def test_a_run_over_the_tiny_project_kills_misses_times_out_and_excludes(tmp_path: Path) -> None:
    root = tmp_path / "tiny"
    shutil.copytree(TINY, root)
    group = mutate.Group("tiny", files=("tiny.py",), tests=("tiny_checks.py",))
    result = mutate.run_group(root, group, mutate.read_exclusions(root / "equivalent.txt"), jobs=2, timeout_s=4.0)
    outcome = {(r.mutant.qualname, r.mutant.text): r.outcome for r in result.results}
    assert outcome == {
        ("<module>", "`18` -> `19` in `LIMIT = 18`"): "survived",
        ("<module>", "`18` -> `17` in `LIMIT = 18`"): "survived",
        ("is_adult", "`>=` -> `>` in `age >= LIMIT`"): "survived",
        ("is_adult", "`>=` -> `<` in `age >= LIMIT`"): "killed",
        ("is_adult", "`return age >= LIMIT` -> `return None`"): "killed",
        ("clamp", "`return high if value >= high else value` -> `return None`"): "killed",
        ("clamp", "`>=` -> `>` in `value >= high`"): "equivalent",
        ("clamp", "`>=` -> `<` in `value >= high`"): "killed",
        ("halve_until", "`>` -> `>=` in `value > limit`"): "killed",
        ("halve_until", "`>` -> `<=` in `value > limit`"): "killed",
        ("halve_until", "deleted `value = value // 2`"): "timeout",
        ("halve_until", "`2` -> `3` in `value // 2`"): "killed",
        ("halve_until", "`2` -> `1` in `value // 2`"): "timeout",
        ("halve_until", "deleted `time.sleep(0.01)`"): "equivalent",
        ("halve_until", "`return value` -> `return None`"): "killed",
        ("describe", '`return "adult" if is_adult(age) else "minor"` -> `return None`'): "survived",
        ("describe", "negated condition `is_adult(age)`"): "survived",
    }
    assert (result.killed, result.considered) == (10, 15)
    selected = {r.mutant.text: r.selected for r in result.results}
    assert selected["`>=` -> `<` in `age >= LIMIT`"] == ("tiny_checks.py::test_is_adult",)  # the tests on its line
    assert selected["`return value` -> `return None`"] == ("tiny_checks.py::test_halve_until",)
    assert selected["negated condition `is_adult(age)`"] == ()  # no test runs it: the group's tests
    assert selected["`18` -> `19` in `LIMIT = 18`"] == ()  # run at import, before any test
    assert result.score == pytest.approx(100 * 10 / 15)
    assert [r.mutant.qualname for r in result.public_return_none] == ["describe"]
    assert result.wrongly_excluded == [] and result.stale_exclusions == []
    report = mutate.report_json([result], min_score=90.0)
    assert json.loads(json.dumps(report))["ok"] is False
    assert report["groups"][0]["survivors"][0] == {
        "where": "tiny.py:3",
        "function": "<module>",
        "mutation": "`18` -> `19` in `LIMIT = 18`",
        "key": "tiny.py::<module>::`18` -> `19` in `LIMIT = 18`",
    }
    assert "tiny.py:8  is_adult: `>=` -> `>` in `age >= LIMIT`" in mutate.report_text([result], min_score=90.0)
    assert (root / "tiny.py").read_text() == (TINY / "tiny.py").read_text()  # the run mutated copies only


def test_an_exclusion_that_a_test_kills_is_reported_as_wrong(tmp_path: Path) -> None:
    root = tmp_path / "tiny"
    shutil.copytree(TINY, root)
    group = mutate.Group("tiny", files=("tiny.py",), tests=("tiny_checks.py",))
    wrong = {
        "tiny.py::clamp::`>=` -> `<` in `value >= high`": "claimed equivalent, but clamp(3, 10) tells it apart",
        "tiny.py::nothing::deleted `x`": "matches no mutant",
    }
    result = mutate.run_group(root, group, wrong, jobs=1, timeout_s=4.0, only=("clamp",))
    assert [r.mutant.text for r in result.wrongly_excluded] == ["`>=` -> `<` in `value >= high`"]
    assert result.stale_exclusions == ["tiny.py::nothing::deleted `x`"]


def test_a_baseline_that_fails_stops_the_run_before_any_mutant(tmp_path: Path) -> None:
    root = tmp_path / "tiny"
    shutil.copytree(TINY, root)
    (root / "tiny_checks.py").write_text("def test_broken() -> None:\n    assert False\n")
    group = mutate.Group("tiny", files=("tiny.py",), tests=("tiny_checks.py",))
    with pytest.raises(mutate.BaselineError, match="tiny: the tests fail on the unmutated code"):
        mutate.run_group(root, group, {}, jobs=1, timeout_s=4.0)


def test_list_prints_the_mutants_of_a_group_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main(["versions", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed and all(m["key"].startswith("envsolver/core/versions.py::") for m in listed)
    assert {"where", "function", "mutation", "key", "kind"} <= set(listed[0])


def test_progress_names_each_survivor_as_it_is_found_and_the_report_has_the_wall_time(tmp_path: Path) -> None:
    root = tmp_path / "tiny"
    shutil.copytree(TINY, root)
    group = mutate.Group("tiny", files=("tiny.py",), tests=("tiny_checks.py",))
    said: list[str] = []
    result = mutate.run_group(root, group, {}, jobs=1, timeout_s=4.0, only=("tiny.py:8",), progress=said.append)
    assert [s for s in said if "survived" in s] == ["tiny: survived tiny.py:8 is_adult: `>=` -> `>` in `age >= LIMIT`"]
    assert said[-1] == "tiny: 3/3 mutants run"
    report = mutate.report_json([result], min_score=90.0)["groups"][0]
    assert report["wall_s"] > 0 and report["wall_s"] >= report["baseline_s"]
    assert f"wall {result.wall_s:.0f} s)" in mutate.report_text([result], min_score=90.0)
