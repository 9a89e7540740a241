"""Property-based fuzzing of the NCCL check's readers: the report parser returns or raises ReportError, nothing
else; the judge and the JSON summary never raise on any text at all (a report comes from the target env's python,
which envsolver does not control), and the sizes parser returns or raises BadInputError."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

from envsolver.core.errors import BadInputError
from envsolver.verify import nccl
from tests.conftest import DATA
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_function, modes, run_property

REAL: dict[str, Any] = json.loads((DATA / "nccl" / "h200x2" / "verify-nccl-1.json").read_text())["report"]
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    fs.junk,
    st.sampled_from(["done", "failed", "joined", "nccl", "gloo", "float32", "/usr/lib/libnccl.so.2", ""]),
)
json_values = st.recursive(
    _leaf, lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(fs.junk, children, max_size=4))
)
_KEYS = ["rank", "stage", "host", "sums", "times", "nccl_libraries", "nccl_realpaths", "nccl_version", "backend",
         "nccl_file_versions", "world_size", "ranks", "bytes", "seconds", "wrong", "count", "dtype", "got",
         "ld_preload", "ld_library_path", "torch_file", "error", "skipped", "first_wrong", "expected",
         "device"]  # fmt: skip


@st.composite
def mutated_reports(draw: st.DrawFn) -> str:
    """The real 2-H200 report with values replaced at random paths (deep enough to reach every reader)."""
    doc: Any = copy.deepcopy(REAL)
    for _ in range(draw(st.integers(1, 4))):
        target = doc
        for _ in range(draw(st.integers(0, 3))):
            if isinstance(target, dict) and target:
                target = target[draw(st.sampled_from(sorted(target)))]
            elif isinstance(target, list) and target:
                target = target[draw(st.integers(0, len(target) - 1))]
        if isinstance(target, dict):
            target[draw(st.sampled_from(_KEYS))] = draw(json_values)
        elif isinstance(target, list):
            target.append(draw(json_values))
    return json.dumps(doc, allow_nan=True)


report_text = st.one_of(
    mutated_reports(),
    fs.file_junk,
    json_values.map(json.dumps),
    st.just(nccl.MARKER + json.dumps(REAL)),
    st.just("[" * 5000),
)


@modes(100)
def test_the_report_parser_raises_only_report_error(seed_value: int | None, count: int) -> None:
    tally = Tally("nccl parse_document / parse_rank")

    def check(text: str) -> None:
        check_function(tally, ("document", text), lambda: nccl.parse_document(text), (nccl.ReportError,))
        try:
            value: Any = json.loads(text)
        except (ValueError, RecursionError):
            value = text
        check_function(tally, ("rank", text), lambda: nccl.parse_rank(value), (nccl.ReportError,))

    run_property(report_text, check, count, seed_value)
    tally.check()


@modes(100)
def test_the_judge_never_raises(seed_value: int | None, count: int) -> None:
    tally = Tally("nccl judge / summary")

    def check(args: tuple[str, dict[int, str], int]) -> None:
        text, ranks, world = args
        for document in (text, None):
            collected = nccl.Collected(world, document, ranks, "exit 1", "envsolver verify --nccl")
            check_function(tally, ("judge", args), lambda c=collected: nccl.judge(c), ())
            check_function(tally, ("summary", args), lambda c=collected: json.dumps(nccl.summary(c)), ())

    ranks = st.dictionaries(st.integers(-2, 4), report_text, max_size=3)
    run_property(st.tuples(report_text, ranks, st.integers(1, 4)), check, count, seed_value)
    tally.check()


@modes(100)
def test_the_sizes_parser(seed_value: int | None, count: int) -> None:
    tally = Tally("nccl parse_sizes")
    sizes = st.one_of(fs.value(["1M,4M", "1G", "512K", "64", "16G", "17G"]), fs.junk)
    run_property(
        sizes,
        lambda text: check_function(tally, text, lambda: nccl.parse_sizes(text), (BadInputError,)),
        count,
        seed_value,
    )
    tally.check()
