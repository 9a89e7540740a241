"""Judge the NCCL check: the reports of every rank (envsolver/verify/nccl_worker.py) -> checks with fixes. Pure.

Input: the document rank 0 gathered (report.json), or, when the job ended before the gather, each rank's own file
(rank-<R>.json), plus what the launcher saw (the expected number of ranks, its error text, the command to rerun).
Checks, in order: nccl-report (the report could be read), nccl-ranks (every rank joined and finished),
nccl-backend (NCCL on GPUs; gloo on CPU only tests the plumbing and is never an NCCL pass), nccl-sum (every
all-reduce result exact), nccl-version and nccl-library (every rank loaded the same NCCL: a known source of hangs),
nccl-bandwidth (shown, judged only when absurd).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envsolver.core.errors import BadInputError
from envsolver.verify.checks_base import Check, Status

CHECK_IDS = (
    "nccl-report",
    "nccl-ranks",
    "nccl-backend",
    "nccl-sum",
    "nccl-version",
    "nccl-library",
    "nccl-bandwidth",
)
SCHEMA = 1
TOOL = "envsolver nccl_worker"
MARKER = "ENVSOLVER_NCCL_REPORT "  # the worker prints its document after this marker (nccl_worker.MARKER)
STAGES = ("started", "joined", "done", "failed")
# A bus bandwidth above this is a timing error, not a fabric: NVLink 5 moves 1.8 TB/s per GPU both ways together.
ABSURD_BUSBW_GBPS = 10_000.0
MAX_SIZE = 16 << 30
# nccl-tests reads sizes with K, M, G as powers of 1024 (src/common.cu parsesize).
_SIZE = re.compile(r"^(\d{1,12})([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class ReportError(ValueError):
    """A report that is not the worker's JSON document (or a rank's file)."""


@dataclass(frozen=True)
class SumRow:
    dtype: str
    count: int
    wrong: int
    first_wrong: int | None = None
    got: float | None = None
    expected: float | None = None
    error: str | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Timing:
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class Rank:
    rank: int
    host: str
    stage: str
    error: str | None
    backend: str | None
    device: str | None
    nccl_version: str | None
    libraries: tuple[str, ...] | None
    realpaths: tuple[str, ...] | None
    file_versions: Mapping[str, str | None]  # each mapped libnccl's own ncclGetVersion
    torch_file: str | None
    sys_prefix: str | None
    conda_prefix: str | None
    ld_library_path: str | None
    ld_preload: str | None
    sums: tuple[SumRow, ...]
    times: tuple[Timing, ...]
    injected: str | None


@dataclass(frozen=True)
class Document:
    backend: str
    world_size: int
    ranks: tuple[Rank, ...]


@dataclass(frozen=True)
class Collected:
    """What the launcher gathered. `document` is report.json's text (or the worker's marker line); `ranks` the
    rank files' texts by rank; `failure` the launcher's own error (exit code, stderr tail), "" when none;
    `rerun` the command a fix tells the user to run again."""

    expected_world: int
    document: str | None = None
    ranks: Mapping[int, str] = field(default_factory=dict)
    failure: str = ""
    rerun: str = "envsolver verify --nccl"


@dataclass(frozen=True)
class Bandwidth:
    nbytes: int
    seconds: float
    algbw: float  # GB/s (1e9 bytes), nccl-tests' algbw
    busbw: float  # GB/s, algbw * 2(n-1)/n


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1M,16M,1G' -> bytes (K, M, G are 1024-based, as nccl-tests reads them). Raises BadInputError."""
    sizes = []
    for token in text.split(","):
        match = _SIZE.match(token.strip())
        value = int(match.group(1)) * _UNITS[match.group(2).upper()] if match else 0
        if not 4 <= value <= MAX_SIZE:
            raise BadInputError(
                f"--sizes {text!r}: {token.strip()!r} is not a size from 4 bytes to 16G. Pass whole sizes in "
                "bytes with an optional K, M or G (1024-based, as nccl-tests reads them), separated by commas, "
                "e.g. --sizes 1M,16M,256M,1G."
            )
        sizes.append(value)
    return tuple(sizes)


def _get(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, optional: bool = True) -> Any:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ReportError(f"{where}: {key!r} is {type(value).__name__}, not {getattr(kind, '__name__', kind)}")
    return value


def _paths(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = _get(obj, key, list, where)
    if value is None:
        return None
    if not all(isinstance(p, str) for p in value):
        raise ReportError(f"{where}: {key!r} must be a list of paths")
    return tuple(value)


def _file_versions(obj: Mapping[str, Any], where: str) -> dict[str, str | None]:
    value = _get(obj, "nccl_file_versions", dict, where) or {}
    if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in value.items()):
        raise ReportError(f"{where}: 'nccl_file_versions' must map paths to versions")
    return dict(value)


def _number(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    value = _get(obj, key, (int, float), where)
    return float(value) if value is not None else None


def _sum_row(obj: Any, where: str) -> SumRow:
    if not isinstance(obj, dict):
        raise ReportError(f"{where}: a sum row is not an object")
    skipped = _get(obj, "skipped", str, where)
    return SumRow(
        dtype=_get(obj, "dtype", str, where, optional=False),
        count=_get(obj, "count", int, where, optional=False),
        wrong=0 if skipped else _get(obj, "wrong", int, where, optional=False),
        first_wrong=_get(obj, "first_wrong", int, where),
        got=_number(obj, "got", where),
        expected=_number(obj, "expected", where),
        error=_get(obj, "error", str, where),
        skipped=skipped,
    )


def _timing(obj: Any, where: str) -> Timing:
    if not isinstance(obj, dict):
        raise ReportError(f"{where}: a timing is not an object")
    seconds = _number(obj, "seconds", where)
    return Timing(_get(obj, "bytes", int, where, optional=False), seconds if seconds is not None else 0.0)


def parse_rank(obj: Any) -> Rank:
    """One rank's report (an element of the document's ranks, or a rank file's object). Raises ReportError."""
    if not isinstance(obj, dict):
        raise ReportError("a rank's report is not a JSON object")
    number = _get(obj, "rank", int, "a rank", optional=False)
    where = f"rank {number}"
    stage = _get(obj, "stage", str, where, optional=False)
    if stage not in STAGES or number < 0:
        raise ReportError(f"{where}: stage {stage!r} is not one of {', '.join(STAGES)}")
    sums = _get(obj, "sums", list, where) or []
    times = _get(obj, "times", list, where) or []
    return Rank(
        rank=number,
        host=_get(obj, "host", str, where) or "?",
        stage=stage,
        error=_get(obj, "error", str, where),
        backend=_get(obj, "backend", str, where),
        device=_get(obj, "device", str, where),
        nccl_version=_get(obj, "nccl_version", str, where),
        libraries=_paths(obj, "nccl_libraries", where),
        realpaths=_paths(obj, "nccl_realpaths", where),
        file_versions=_file_versions(obj, where),
        torch_file=_get(obj, "torch_file", str, where),
        sys_prefix=_get(obj, "sys_prefix", str, where),
        conda_prefix=_get(obj, "conda_prefix", str, where),
        ld_library_path=_get(obj, "ld_library_path", str, where),
        ld_preload=_get(obj, "ld_preload", str, where),
        sums=tuple(_sum_row(s, where) for s in sums),
        times=tuple(_timing(t, where) for t in times),
        injected=_get(obj, "injected", str, where),
    )


def _load(text: str) -> Any:
    text = text.strip()
    if text.startswith(MARKER.strip()):
        text = text[len(MARKER.strip()) :]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ReportError(f"not JSON ({exc})") from None
    except RecursionError:
        raise ReportError("not JSON (nested too deeply)") from None


def parse_document(text: str) -> Document:
    """The gathered report (report.json, or the worker's marker line). Raises ReportError."""
    doc = _load(text)
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or doc.get("schema") != SCHEMA:
        raise ReportError(f"not a report of {TOOL} schema {SCHEMA}")
    backend = _get(doc, "backend", str, "the report", optional=False)
    world = _get(doc, "world_size", int, "the report", optional=False)
    ranks = _get(doc, "ranks", list, "the report", optional=False)
    if backend not in ("nccl", "gloo") or world < 1:
        raise ReportError(f"the report: backend {backend!r} or world_size {world!r} is not valid")
    return Document(backend, world, tuple(parse_rank(r) for r in ranks))


def library_kind(rank: Rank, path: str) -> str:
    """Whose libnccl `path` is: torch's bundled (the nvidia-nccl wheel beside torch, or inside torch), the
    env's ($CONDA_PREFIX/lib or the interpreter's prefix), or the system's."""
    torch_dir = os.path.dirname(rank.torch_file) if rank.torch_file else None
    site = os.path.dirname(torch_dir) if torch_dir else None
    if site and path.startswith(site + "/nvidia/"):
        return "torch's bundled NCCL (the nvidia-nccl wheel)"
    if torch_dir and path.startswith(torch_dir + "/"):
        return "torch's bundled NCCL (inside the torch package)"
    for prefix in (rank.conda_prefix, rank.sys_prefix):
        if prefix and path.startswith(prefix.rstrip("/") + "/lib/"):
            return "the env's NCCL (PREFIX/lib)"
    return "the system's NCCL"


def _library(rank: Rank) -> str | None:
    paths = rank.libraries or ()
    return paths[0] if paths else None


def _describe_library(rank: Rank) -> str:
    if rank.libraries is None:
        return "unknown (the process maps could not be read)"
    if not rank.libraries:
        return "no libnccl file mapped (a CPU torch, or NCCL linked into torch)"
    shown = []
    for path in rank.libraries:
        version = rank.file_versions.get(path)
        shown.append(f"{path} ({version + ', ' if version else ''}{library_kind(rank, path)})")
    return " + ".join(shown)


def _ranks_text(numbers: list[int]) -> str:
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(str(n) for n in numbers)


def _groups(ranks: tuple[Rank, ...], key: Any) -> dict[Any, list[Rank]]:
    groups: dict[Any, list[Rank]] = {}
    for rank in ranks:
        groups.setdefault(key(rank), []).append(rank)
    return groups


def _hosts(ranks: list[Rank]) -> str:
    return ", ".join(sorted({r.host for r in ranks}))


def _blame(ranks: tuple[Rank, ...]) -> str:
    """Why ranks may load different NCCLs, from what each rank's environment says, then the general fix."""
    parts = []
    for rank in ranks:
        path = _library(rank)
        if rank.ld_preload and "libnccl" in rank.ld_preload:
            parts.append(
                f"On {rank.host} (rank {rank.rank}) LD_PRELOAD={rank.ld_preload} forces that library: "
                "unset LD_PRELOAD before launching."
            )
        elif path and rank.ld_library_path:
            folders = {os.path.dirname(path), *(os.path.dirname(p) for p in rank.realpaths or ())}
            found = [d for d in rank.ld_library_path.split(":") if d and d.rstrip("/") in folders]
            if found:
                parts.append(
                    f"On {rank.host} (rank {rank.rank}) LD_LIBRARY_PATH puts {found[0]} ahead of torch's own "
                    f"NCCL: remove {found[0]} from LD_LIBRARY_PATH (a `module load nccl` or a profile line sets it) "
                    "before launching."
                )
    parts.append(
        "Run every rank from the same environment (the same PREFIX/bin/python on the shared filesystem, installed "
        "from one lock with envsolver install), with the same LD_LIBRARY_PATH and no LD_PRELOAD."
    )
    return " ".join(dict.fromkeys(parts))


def _injected(ranks: list[Rank]) -> str:
    faults = sorted({f"{r.injected} on rank {r.rank}" for r in ranks if r.injected})
    return f" [fault injected by --inject-fault: {', '.join(faults)}]" if faults else ""


def _ranks_check(c: Collected, ranks: tuple[Rank, ...], unreadable: list[str]) -> Check:
    present = {r.rank for r in ranks}
    missing = sorted(set(range(c.expected_world)) - present)
    stuck = [r for r in ranks if r.stage != "done"]
    extra = sorted(present - set(range(c.expected_world)))
    problems = []
    if missing:
        problems.append(f"{_ranks_text(missing)} did not report")
    for rank in stuck:
        reason = f": {rank.error}" if rank.error else ""
        problems.append(f"rank {rank.rank} on {rank.host} stopped at stage {rank.stage!r}{reason}")
    if extra:
        problems.append(f"{_ranks_text(extra)} reported but only {c.expected_world} were launched")
    problems += unreadable
    if not problems:
        hosts = _hosts(list(ranks))
        return Check("nccl-ranks", "pass", f"{len(ranks)} ranks joined and finished on {hosts}")
    if c.failure:
        problems.append(f"launcher: {c.failure}")
    hosts = _hosts(list(ranks)) or "each node"
    fix = (
        f"Run `NCCL_DEBUG=INFO {c.rerun}` and read the first NCCL WARN or error line of the failing rank; check "
        f"that `nvidia-smi` on {hosts} lists every GPU"
    )
    if len({r.host for r in ranks}) > 1:
        fix += ", and that the first node's rendezvous port is reachable from every other node"
    return Check("nccl-ranks", "fail", "; ".join(problems), fix + ".")


def _backend_check(backend: str, ranks: tuple[Rank, ...]) -> Check:
    if backend == "nccl":
        if not any(rank.device for rank in ranks):
            return Check("nccl-backend", "skip", "NCCL, but no rank reached its GPU")
        devices: dict[str, int] = {}
        for rank in ranks:
            devices[rank.device or "unknown GPU"] = devices.get(rank.device or "unknown GPU", 0) + 1
        gpus = ", ".join(f"{name} x{count}" for name, count in sorted(devices.items()))
        return Check("nccl-backend", "pass", f"NCCL on {len(ranks)} GPU rank(s): {gpus}")
    return Check(
        "nccl-backend",
        "warn",
        "gloo on CPU: the launch, the rendezvous and the sum checks ran, but NCCL was not tested",
        "Run `envsolver verify --nccl` on a GPU node, without --backend gloo.",
    )


def _sum_check(c: Collected, ranks: tuple[Rank, ...]) -> Check:
    rows = [(r, s) for r in ranks for s in r.sums]
    if not rows:
        return Check("nccl-sum", "skip", "no rank reached the sum check")
    bad = [(r, s) for r, s in rows if s.error or s.wrong]
    if not bad:
        checked = sorted({s.dtype for _, s in rows if not s.skipped})
        skipped = sorted({s.dtype for _, s in rows if s.skipped})
        count = max(s.count for _, s in rows)
        detail = f"all-reduce SUM exact on every rank for {', '.join(checked)} ({count} elements each)"
        if skipped:
            detail += f"; {', '.join(skipped)} not checked (the sums are too large to be exact)"
        return Check("nccl-sum", "pass", detail)
    problems = []
    for rank in ranks:
        mine = [s for r, s in bad if r is rank]
        if not mine:
            continue
        row = mine[0]
        if row.error:
            text = f"rank {rank.rank} on {rank.host}, {row.dtype}: {row.error}"
        else:
            text = (
                f"rank {rank.rank} on {rank.host}, {row.dtype}: got {row.got:g} at element {row.first_wrong}, "
                f"expected {row.expected:g} ({row.wrong} of {row.count} elements wrong)"
            )
        others = [s.dtype for s in mine[1:]]
        problems.append(text + (f"; {', '.join(others)} wrong too" if others else ""))
    hosts = _hosts([r for r, _ in bad])
    return Check(
        "nccl-sum",
        "fail",
        "; ".join(problems) + _injected([r for r, _ in bad]),
        f"Run `NCCL_P2P_DISABLE=1 {c.rerun}`: if it passes, the GPU peer-to-peer path (NVLink or PCIe) on {hosts} "
        f"is at fault; report {hosts} to your cluster admins with this output.",
    )


def _same_check(
    check_id: str, what: str, ranks: tuple[Rank, ...], key: Any, show: Any, known: Any, backend: str
) -> Check:
    """Fail when ranks differ in key(rank), naming each group; skip (gloo) or warn (nccl) when no rank knows."""
    groups = _groups(ranks, key)
    if len(groups) > 1:
        parts = []
        for _, members in sorted(groups.items(), key=lambda kv: min(r.rank for r in kv[1])):
            numbers = [r.rank for r in members]
            parts.append(f"{show(members[0])} on {_ranks_text(numbers)} ({_hosts(members)})")
        detail = f"ranks loaded different {what}s: " + "; ".join(parts) + _injected(list(ranks))
        return Check(check_id, "fail", detail, _blame(ranks))
    if not ranks:
        return Check(check_id, "skip", "no rank reported")
    if not any(known(r) for r in ranks):
        status: Status = "skip" if backend == "gloo" else "warn"
        return Check(check_id, status, f"no rank reports its {what}: {show(ranks[0])}")
    return Check(check_id, "pass", f"every rank loaded {show(ranks[0])}")


def _library_check(ranks: tuple[Rank, ...], backend: str) -> Check:
    """Every rank maps one and the same libnccl. Two in one process (a preloaded one beside torch's) fail too."""
    doubled = [r for r in ranks if len(set(_library_key(r) or ())) > 1]
    if doubled:
        parts = [f"rank {r.rank} ({r.host}) maps {_describe_library(r)}" for r in doubled]
        return Check("nccl-library", "fail", "; ".join(parts) + _injected(list(ranks)), _blame(ranks))
    known = (lambda r: bool(r.libraries)) if backend == "gloo" else (lambda r: r.libraries is not None)
    return _same_check("nccl-library", "libnccl", ranks, _library_key, _describe_library, known, backend)


def bandwidth(doc: Document) -> list[Bandwidth]:
    """Per size: the time per all-reduce averaged over the ranks (all_reduce_perf's default, -a 1), then
    nccl-tests' algbw = bytes / 1e9 / seconds and busbw = algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    ranks = [r for r in doc.ranks if r.times]
    if not ranks:
        return []
    n = doc.world_size
    rows = []
    for timing in ranks[0].times:
        seconds = [t.seconds for r in ranks for t in r.times if t.nbytes == timing.nbytes]
        mean = sum(seconds) / len(seconds)
        algbw = timing.nbytes / 1e9 / mean if mean > 0 else math.inf
        rows.append(Bandwidth(timing.nbytes, mean, algbw, algbw * 2 * (n - 1) / n))
    return rows


def human_bytes(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def _bandwidth_check(doc: Document) -> Check:
    rows = bandwidth(doc)
    if not rows:
        return Check("nccl-bandwidth", "skip", "no rank timed an all-reduce")
    table = ", ".join(f"{human_bytes(r.nbytes)} {r.busbw:.1f}" for r in rows)
    detail = f"busbw in GB/s (nccl-tests' definition), {doc.world_size} ranks: {table}"
    if doc.backend == "gloo":
        return Check("nccl-bandwidth", "skip", f"gloo on CPU, not a GPU figure: {detail}")
    absurd = [r for r in rows if not (r.seconds > 0 and math.isfinite(r.busbw) and r.busbw < ABSURD_BUSBW_GBPS)]
    if absurd:
        return Check(
            "nccl-bandwidth",
            "warn",
            f"implausible timing at {', '.join(human_bytes(r.nbytes) for r in absurd)}: {detail}",
            "Run the check again; if it repeats, time the same GPUs with NCCL's own all_reduce_perf (nccl-tests).",
        )
    return Check("nccl-bandwidth", "pass", detail)


def _gather(c: Collected) -> tuple[Document | None, str | None, tuple[Rank, ...], list[str]]:
    """The document if readable (else why not), the ranks to judge, and the rank files that could not be read."""
    problem = None
    if c.document is not None:
        try:
            doc = parse_document(c.document)
            return doc, None, doc.ranks, []
        except ReportError as exc:
            problem = f"the gathered report is unreadable: {exc}"
    ranks, unreadable = [], []
    for number, text in sorted(c.ranks.items()):
        try:
            ranks.append(parse_rank(_load(text)))
        except ReportError as exc:
            unreadable.append(f"rank {number}'s file is unreadable ({exc})")
    return None, problem, tuple(ranks), unreadable


def judge(c: Collected) -> list[Check]:
    """Every check of CHECK_IDS, in that order."""
    doc, problem, ranks, unreadable = _gather(c)
    if problem is not None or (doc is None and not ranks):
        why = problem or "no rank wrote a report"
        if c.failure:
            why += f" (launcher: {c.failure})"
        fix = f"Run `NCCL_DEBUG=INFO {c.rerun}` and read the first error it prints."
        return [Check("nccl-report", "fail", why, fix)] + [
            Check(i, "skip", "no report to judge") for i in CHECK_IDS[1:]
        ]
    backend = doc.backend if doc else next((r.backend for r in ranks if r.backend), "nccl")
    if doc is None:
        doc = Document(backend, c.expected_world, ranks)
        report = Check(
            "nccl-report",
            "warn",
            f"no gathered report (the job ended before rank 0 gathered); judged from {len(ranks)} rank file(s)",
            f"Run `{c.rerun}` again once the ranks check passes.",
        )
    else:
        report = Check("nccl-report", "pass", f"report of {len(ranks)} rank(s) read")
    return [
        report,
        _ranks_check(c, ranks, unreadable),
        _backend_check(backend, ranks),
        _sum_check(c, ranks),
        _same_check(
            "nccl-version", "NCCL version", ranks, _version_key, _version_text, lambda r: any(_version_key(r)), backend
        ),
        _library_check(ranks, backend),
        _bandwidth_check(doc),
    ]


def _version_key(rank: Rank) -> tuple[str | None, tuple[str, ...]]:
    """torch's word and the mapped files' own versions: the two can differ (a preloaded second libnccl)."""
    return rank.nccl_version, tuple(sorted({v for v in rank.file_versions.values() if v}))


def _version_text(rank: Rank) -> str:
    files = _version_key(rank)[1]
    said = f"NCCL {rank.nccl_version} (torch)" if rank.nccl_version else "torch reports no NCCL version"
    if files and files != (rank.nccl_version,):
        said += f", libnccl file(s) {' + '.join(files)}"
    return said


def _library_key(rank: Rank) -> tuple[str, ...] | None:
    if rank.libraries is None:
        return None
    return rank.realpaths if rank.realpaths is not None else rank.libraries


def passed(checks: list[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def tested(checks: list[Check]) -> bool:
    """True only when NCCL itself ran on GPUs and nothing failed (a gloo run never counts)."""
    return passed(checks) and any(c.id == "nccl-backend" and c.status == "pass" for c in checks)


def _raw(document: str | None) -> Any:
    """The gathered document as the worker wrote it (None when absent or unreadable)."""
    try:
        return _load(document) if document is not None else None
    except ReportError:
        return None


def summary(c: Collected) -> dict[str, Any]:
    """The JSON view of a run: backend, ranks (host, GPU, NCCL and whose library), bandwidth per size, and the
    worker's own report (every rank's facts, sums and timings) under "report"."""
    doc, _, ranks, _ = _gather(c)
    backend = doc.backend if doc else next((r.backend for r in ranks if r.backend), None)
    world = doc.world_size if doc else c.expected_world
    rows = bandwidth(doc or Document(backend or "nccl", world, ranks))

    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {
        "backend": backend,
        "world_size": world,
        "report": _raw(c.document),
        "ranks": [
            {
                "rank": r.rank,
                "host": r.host,
                "stage": r.stage,
                "device": r.device,
                "nccl_version": r.nccl_version,
                "nccl_library": _library(r),
                "library_kind": library_kind(r, _library(r) or "") if _library(r) else None,
                "injected": r.injected,
            }
            for r in ranks
        ],
        "bandwidth": [
            {
                "bytes": r.nbytes,
                "seconds": finite(r.seconds),
                "algbw_gbps": finite(r.algbw),
                "busbw_gbps": finite(r.busbw),
            }
            for r in rows
        ],
    }
