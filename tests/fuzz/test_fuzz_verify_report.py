"""verify's report agrees with itself (issue 22): for every check id and every outcome, the text line's status
word, the summary's count and the JSON's status are the same, in the same order (--help's), and a fix shows in
the text exactly when the JSON's fix is not null. The checks are replaced by ones that say what the test drew; the
real run() (prerequisites skip their dependents), the real streaming of host checks on the probe's first line and
the real CLI render them."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from envsolver.verify import checks
from envsolver.verify import run as verify_run
from envsolver.verify.checks_base import STATUSES, Check, Context, Status
from tests.fuzz.harness import Tally, check_cli, modes, run_property

# What each check says in this example: id -> (status, detail, fix)
SAYS: dict[str, tuple[Status, str, str]] = {}
WORDS = {"pass": "pass", "warn": "warn", "FAIL": "fail", "skip": "skip"}
LINE = re.compile(r"^(pass|warn|FAIL|skip) ([a-z_]+): ")


def _saying(check_id: str) -> Any:
    def check(ctx: Context) -> Check:
        status, detail, fix = SAYS[check_id]
        return Check(check_id, status, detail, fix)

    return check


@pytest.fixture(autouse=True)
def drawn_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    table = tuple((i, _saying(i), needs) for i, _, needs in checks.CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)

    def probe(*args: Any, on_partial: Any = None, **kwargs: Any) -> dict[str, Any]:
        if on_partial is not None:
            on_partial({"glibc": "2.39"})  # the host facts first, as the probe streams them
        return {"glibc": "2.39", "torch": {}}

    monkeypatch.setattr(verify_run, "probe", probe)
    yield
    SAYS.clear()


def expected(only: tuple[str, ...]) -> list[tuple[str, Status, str | None]]:
    """(id, status, shown fix) of each selected check, a blocked prerequisite making its dependents skip."""
    out: dict[str, tuple[Status, str | None]] = {}
    for check_id, _, needs in checks.CHECKS:
        if any(out[n][0] in ("fail", "skip") for n in needs if n in out):
            out[check_id] = ("skip", None)
            continue
        status, _, fix = SAYS[check_id]
        out[check_id] = (status, fix if fix and status in ("fail", "warn") else None)
    return [(i, *out[i]) for i in checks.IDS if not only or i in only]


def agree(only: tuple[str, ...], tally: Tally) -> None:
    args = ["verify", "--python", sys.executable, *(a for i in only for a in ("--check", i))]
    text, doc = check_cli(tally, args), check_cli(tally, [*args, "--json"])
    assert text.problem is None and doc.problem is None, (text.problem, doc.problem, text.output)
    lines = text.output.splitlines()
    assert lines[0].startswith(f"verify {sys.executable} ("), lines[0]
    shown: list[tuple[str, str, str | None]] = []
    for line in lines[1:-1]:
        if line.startswith("     fix: "):
            last = shown.pop()
            shown.append((last[0], last[1], line.removeprefix("     fix: ")))
            continue
        found = LINE.match(line)
        assert found, f"a line that is neither a check nor a fix: {line!r}\n{text.output}"
        shown.append((found.group(2), WORDS[found.group(1)], None))
    listed = json.loads(doc.output)["checks"]
    want = expected(only)
    assert [(i, s) for i, s, _ in shown] == [(c["id"], c["status"]) for c in listed] == [(i, s) for i, s, _ in want]
    assert [f is not None for _, _, f in shown] == [c["fix"] is not None for c in listed], (shown, listed)
    assert [c["fix"] for c in listed] == [f for _, _, f in want]
    counts = {s: sum(1 for c in listed if c["status"] == s) for s in STATUSES}
    assert lines[-1] == ", ".join(f"{n} {s}" for s, n in counts.items()), (lines[-1], counts)
    assert text.exit_code == doc.exit_code == (1 if counts["fail"] else 0), (text.exit_code, doc.exit_code)


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("check_id", checks.IDS)
def test_each_check_alone_says_the_same_in_text_summary_and_json(check_id: str, status: Status) -> None:
    SAYS.update({i: ("pass", f"{i} fine", "") for i in checks.IDS})
    SAYS[check_id] = (status, f"{check_id} said {status}", f"fix {check_id}")
    agree((check_id,), Tally("one check", summary=False))


PLAIN = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20).map(str.strip)


@st.composite
def reports(draw: st.DrawFn) -> tuple[dict[str, tuple[Status, str, str]], tuple[str, ...]]:
    says = {i: (draw(st.sampled_from(STATUSES)), draw(PLAIN) or "x", draw(PLAIN)) for i in checks.IDS}
    only = tuple(draw(st.lists(st.sampled_from(checks.IDS), unique=True, max_size=4)))
    return says, only


@modes(default=40)
def test_every_outcome_says_the_same_in_text_summary_and_json(seed_value: int | None, count: int) -> None:
    tally = Tally("verify report agrees")

    def check(drawn: tuple[dict[str, tuple[Status, str, str]], tuple[str, ...]]) -> None:
        SAYS.clear()
        SAYS.update(drawn[0])
        agree(drawn[1], tally)

    run_property(reports(), check, count, seed_value)
    tally.check()
