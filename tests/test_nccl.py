"""The NCCL judge (envsolver/verify/nccl.py) on reports: a pass, each failure it must name, reports it cannot read,
the bandwidth formula of nccl-tests, and the sizes parser. The reports are real captures (tests/data/nccl: the
2-rank gloo run on this CPU machine, the 2-H200 NCCL run) edited one fact at a time."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from envsolver.core.errors import BadInputError
from envsolver.verify import nccl
from tests.conftest import DATA

NCCL_DATA = DATA / "nccl"
RERUN = "envsolver verify --nccl -p /envs/train"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((NCCL_DATA / name).read_text())
    return doc


def gpu_doc() -> dict[str, Any]:
    doc: dict[str, Any] = load("h200x2/verify-nccl-1.json")["report"]
    return doc


def collected(doc: dict[str, Any] | None, world: int = 2, **extra: Any) -> nccl.Collected:
    text = json.dumps(doc) if doc is not None else None
    return nccl.Collected(expected_world=world, document=text, rerun=RERUN, **extra)


def by_id(checks: list[Any]) -> dict[str, Any]:
    return {c.id: c for c in checks}


def edit_rank(rank: int, **changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(doc: dict[str, Any]) -> dict[str, Any]:
        doc = copy.deepcopy(doc)
        doc["ranks"][rank].update(changes)
        return doc

    return apply


def wrong_sum(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    row = doc["ranks"][1]["sums"][0]
    row.update(wrong=5, first_wrong=0, got=4.0, expected=3.0)
    return doc


def drop_rank(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["ranks"] = doc["ranks"][:1]
    return doc


def other_library(doc: dict[str, Any], **env: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["ranks"][1].update(
        nccl_libraries=["/opt/nccl/lib/libnccl.so.2"], nccl_realpaths=["/opt/nccl/lib/libnccl.so.2.21.5"]
    )
    doc["ranks"][1].update(env)
    return doc


# (id, edit of the real 2-H200 report, the check that must fail, words its detail and fix must hold)
FAILURES = [
    ("wrong-sum", wrong_sum, "nccl-sum", ["rank 1", "float32", "got 4", "expected 3", "NCCL_P2P_DISABLE=1", RERUN]),
    (
        "other-version",
        edit_rank(1, nccl_version="2.21.5"),
        "nccl-version",
        ["NCCL 2.21.5 (torch) on rank 1", "on rank 0", "same environment"],
    ),
    (
        "other-library",
        other_library,
        "nccl-library",
        ["/opt/nccl/lib/libnccl.so.2 (the system's NCCL) on rank 1", "same environment"],
    ),
    (
        "other-library-by-ld-library-path",
        lambda d: other_library(d, ld_library_path="/opt/nccl/lib:/usr/local/cuda/lib64"),
        "nccl-library",
        ["LD_LIBRARY_PATH", "/opt/nccl/lib", "remove"],
    ),
    (
        "other-library-by-ld-preload",
        lambda d: other_library(d, ld_preload="/opt/nccl/lib/libnccl.so.2"),
        "nccl-library",
        ["LD_PRELOAD", "unset LD_PRELOAD"],
    ),
    ("missing-rank", drop_rank, "nccl-ranks", ["rank 1", "did not report", "NCCL_DEBUG=INFO " + RERUN]),
    (
        "rank-failed",
        edit_rank(1, stage="failed", error="join: DistStoreError: timed out"),
        "nccl-ranks",
        ["rank 1", "timed out", "NCCL_DEBUG=INFO"],
    ),
    (
        "collective-error",
        lambda d: edit_rank(1, sums=[{**d["ranks"][1]["sums"][0], "error": "RuntimeError: NCCL error"}])(d),
        "nccl-sum",
        ["rank 1", "NCCL error"],
    ),
]


@pytest.mark.parametrize(("change", "check_id", "words"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_each_failure_is_named_with_its_fix(change: Any, check_id: str, words: list[str]) -> None:
    checks = by_id(nccl.judge(collected(change(gpu_doc()))))
    failed = [c.id for c in checks.values() if c.status == "fail"]
    assert failed == [check_id]
    text = checks[check_id].detail + " | " + checks[check_id].fix
    for word in words:
        assert word in text
    assert not nccl.passed(list(checks.values()))


SYSTEM_NCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"


def two_libraries(doc: dict[str, Any]) -> dict[str, Any]:
    """What rank 1 mapped on the 2-H200 machine with LD_PRELOAD of the image's system NCCL (mixed-preload.json):
    the preloaded 2.28.3 beside torch's own 2.28.9, while torch.cuda.nccl.version() still said 2.28.9 and NCCL's
    init failed with 'Mismatched NCCL version detected : rank 1 version 22803 rank 0 version 22809'."""
    doc = copy.deepcopy(doc)
    rank = doc["ranks"][1]
    wheel = rank["nccl_libraries"][0]
    rank.update(
        nccl_libraries=[wheel, SYSTEM_NCCL],
        nccl_realpaths=[wheel, SYSTEM_NCCL],
        nccl_file_versions={wheel: "2.28.9", SYSTEM_NCCL: "2.28.3"},
        ld_preload="/usr/lib/x86_64-linux-gnu/libnccl.so.2",
    )
    return doc


def test_a_rank_that_maps_two_libnccl_files_fails_with_both_named() -> None:
    checks = by_id(nccl.judge(collected(two_libraries(gpu_doc()))))
    library = checks["nccl-library"]
    assert library.status == "fail"
    assert f"{SYSTEM_NCCL} (2.28.3, the system's NCCL)" in library.detail
    assert "(2.28.9, torch's bundled NCCL (the nvidia-nccl wheel))" in library.detail
    assert "unset LD_PRELOAD" in library.fix
    assert checks["nccl-version"].status == "fail"
    assert "2.28.3" in checks["nccl-version"].detail


def test_the_real_h200_run_passes() -> None:
    checks = nccl.judge(collected(gpu_doc()))
    assert {c.id: c.status for c in checks} == {i: "pass" for i in nccl.CHECK_IDS}
    assert nccl.passed(checks) and nccl.tested(checks)
    detail = by_id(checks)
    assert "NVIDIA H200" in detail["nccl-backend"].detail
    assert "torch's bundled NCCL" in detail["nccl-library"].detail


def test_gloo_is_never_an_nccl_pass() -> None:
    checks = by_id(nccl.judge(collected(load("gloo-2ranks-cpu.json"))))
    assert checks["nccl-backend"].status == "warn"
    assert "NCCL was not tested" in checks["nccl-backend"].detail
    assert checks["nccl-bandwidth"].status == "skip"
    assert checks["nccl-sum"].status == "pass"
    assert not nccl.tested(list(checks.values()))


def test_an_injected_fault_says_so() -> None:
    doc = wrong_sum(gpu_doc())
    doc["ranks"][1]["injected"] = "sum"
    detail = by_id(nccl.judge(collected(doc)))["nccl-sum"].detail
    assert "injected" in detail


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[1, 2]", '{"schema": 99}', '{"tool": "envsolver nccl_worker", "schema": 1, "ranks": "x"}'],
    ids=["empty", "not-json", "a-list", "unknown-schema", "ranks-not-a-list"],
)
def test_a_report_that_cannot_be_read_fails_the_report_check(text: str) -> None:
    checks = by_id(nccl.judge(nccl.Collected(expected_world=2, document=text, rerun=RERUN)))
    assert checks["nccl-report"].status == "fail"
    assert RERUN in checks["nccl-report"].fix
    assert {c.status for i, c in checks.items() if i != "nccl-report"} == {"skip"}


def test_no_document_falls_back_to_the_rank_files() -> None:
    """When the job died before the gather, each rank's own file says how far it got."""
    doc = gpu_doc()
    ranks = {0: json.dumps(doc["ranks"][0]), 1: json.dumps({**doc["ranks"][1], "stage": "joined"})}
    checks = by_id(nccl.judge(nccl.Collected(2, None, ranks, "torchrun exited 1", RERUN)))
    assert checks["nccl-ranks"].status == "fail"
    assert "rank 1" in checks["nccl-ranks"].detail and "joined" in checks["nccl-ranks"].detail
    assert "torchrun exited 1" in checks["nccl-ranks"].detail


def test_nothing_at_all_fails_with_the_launcher_error() -> None:
    checks = by_id(nccl.judge(nccl.Collected(2, None, {}, "torchrun exited 1: No module named torch", RERUN)))
    assert checks["nccl-report"].status == "fail"
    assert "No module named torch" in checks["nccl-report"].detail


def test_a_world_smaller_than_expected_fails() -> None:
    checks = by_id(nccl.judge(collected(gpu_doc(), world=4)))
    assert checks["nccl-ranks"].status == "fail"
    assert "ranks 2, 3" in checks["nccl-ranks"].detail


def test_absurd_bandwidth_is_a_warning() -> None:
    doc = gpu_doc()
    for rank in doc["ranks"]:
        rank["times"][0]["seconds"] = 0.0
    checks = by_id(nccl.judge(collected(doc)))
    assert checks["nccl-bandwidth"].status == "warn"


# nccl-tests src/all_reduce.cu AllReduceGetBw: algbw = bytes / 1e9 / seconds; busbw = algbw * 2(n-1)/n
# (doc/PERFORMANCE.md, "AllReduce"). Time: the mean over ranks (all_reduce_perf's default -a 1).
@pytest.mark.parametrize(
    ("world", "nbytes", "seconds", "algbw", "busbw"),
    [(2, 10**9, 0.01, 100.0, 100.0), (8, 10**9, 0.01, 100.0, 175.0), (4, 2 * 10**9, 0.02, 100.0, 150.0)],
)
def test_bandwidth_is_nccl_tests_formula(world: int, nbytes: int, seconds: float, algbw: float, busbw: float) -> None:
    doc = gpu_doc()
    template = doc["ranks"][0]
    doc["world_size"] = world
    doc["ranks"] = [
        {**copy.deepcopy(template), "rank": r, "times": [{"bytes": nbytes, "seconds": seconds * (0.5 + r % 2)}]}
        for r in range(world)
    ]
    rows = nccl.bandwidth(nccl.parse_document(json.dumps(doc)))
    mean = sum(seconds * (0.5 + r % 2) for r in range(world)) / world
    assert rows[0].seconds == pytest.approx(mean)
    assert rows[0].algbw == pytest.approx(algbw * seconds / mean)
    assert rows[0].busbw == pytest.approx(busbw * seconds / mean)


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("1M,4M", (1 << 20, 4 << 20)), ("1G", (1 << 30,)), ("512K, 64", (512 << 10, 64)), ("1m,2g", (1 << 20, 2 << 30))],
)
def test_sizes_parse_like_nccl_tests(text: str, sizes: tuple[int, ...]) -> None:
    assert nccl.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "1X", "-4", "0", "1M;4M", "2", "9999G", "1.5M"])
def test_bad_sizes_are_refused_with_the_fix(text: str) -> None:
    with pytest.raises(BadInputError, match="--sizes"):
        nccl.parse_sizes(text)


def test_summary_json_names_each_rank_and_the_bandwidth() -> None:
    doc = nccl.summary(collected(gpu_doc()))
    assert doc["backend"] == "nccl" and doc["world_size"] == 2
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][0]["library_kind"].startswith("torch's bundled")
    assert [row["bytes"] for row in doc["bandwidth"]] == [1 << (20 + 2 * i) for i in range(6)]
    assert all(row["busbw_gbps"] > 0 for row in doc["bandwidth"])
    assert doc["report"] == gpu_doc()
