"""The KB against upstream facts (facts.py): compare(kb, facts) -> Report. Pure.

What is compared, per source, and what counts as a contradiction (each finding names the KB row and the fact,
and its data line ends with the source it was read from):
  torch (PyPI): a final release newer than every version torch.yaml knows; an upstream_releases row whose version
    PyPI lacks; its python_min against the default wheel's Requires-Python floor and against the lowest CPython
    tag of its manylinux x86_64 wheels; its pypi_default_cuda, cudnn and nccl against the default wheel's
    Requires-Dist pins (cuda-toolkit or nvidia-cuda-runtime, nvidia-cudnn, nvidia-nccl; major.minor).
  DeepSpeed (PyPI's sdists, from the oldest pypi_sdists row on): every sdist has a pypi_sdists row with its URL
    and sha256, and every row an sdist; every release has a releases row whose cuda_minor_mismatch_ok and
    min_torch are what its builder.py and README.md say, and a pypi_requirements row whose requires and
    cuda_build_adds are its requirements.txt and setup.py's appends.
  CUDA (NVIDIA's wheels): every CUDA minor of nvidia-cuda-runtime* and nvidia-cuda-nvcc* has a toolkits row; each
    nvcc wheel's `--list-gpu-code` is its row's sm, and its host_config.h GCC limit its row's gcc_max.
A KB null where the source gives a value is a note (null says "not known"); everything else above is a
contradiction. Not compared here: torch's pypi_cuda (download.pytorch.org's variants), DeepSpeed's default_ccs
and op_libraries, driver floors (release notes), conda builds (envsolver/kb/audit.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Protocol, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb.findings import Collector, Report
from envsolver.kb.model import KnowledgeBase
from envsolver.kb.records import major_minor
from envsolver.kb.upstream import wheels
from envsolver.kb.upstream.facts import Facts, TorchRelease


def compare(kb: KnowledgeBase, facts: Facts) -> Report:
    found = Collector()
    _torch(kb, facts, found)
    _deepspeed(kb, facts, found)
    _cuda(kb, facts, found)
    order = {"contradiction": 0, "note": 1}
    findings = sorted(found.findings(), key=lambda f: (order[f.severity], f.subject, f.check, f.kb, f.data))
    read = len(facts.torch) + len(facts.deepspeed) + len(facts.nvcc)
    return Report(f"PyPI and NVIDIA's wheels, read {facts.read}", (), (), tuple(findings), read)


def _mm(text: str | None) -> MajorMinor | None:
    return major_minor(text) if text else None


def _listed(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items) or "none"


# ---- torch ----


def _torch(kb: KnowledgeBase, facts: Facts, found: Collector) -> None:
    known = {v for row in kb.torch_builds for v in row.versions} | {r.version for r in kb.torch_releases}
    top = max(known)
    on_pypi = {Version(v) for v in facts.torch_versions}
    newer = sorted(v for v in on_pypi if v > top)
    if newer:
        read = facts.torch.get(str(newer[-1]))
        what = _torch_summary(read) if read else "not read"
        found.add(
            "contradiction",
            "newest",
            "torch on PyPI",
            f"torch.yaml: newest {top}",
            f"torch {_listed(newer)} ({newer[-1]}: {what})",
            f"Add an upstream_releases row for each (version, pypi_default_cuda, cudnn, nccl, python_min from the "
            f"wheel named; cite {facts.sources.get('torch', 'PyPI')}).",
            f"PyPI, {facts.read}",
        )
    for i, row in enumerate(kb.torch_releases):
        label = f"torch.yaml upstream_releases[{i}] (torch {row.version})"
        if row.version not in on_pypi:
            found.add(
                "contradiction",
                "missing",
                label,
                f"torch {row.version}",
                "no such final release on PyPI",
                "Remove the row, or correct its version.",
                f"PyPI, {facts.read}",
            )
            continue
        release = facts.torch.get(str(row.version))
        if release is None:
            found.add("note", "unread", label, f"torch {row.version}", "its wheel metadata was not read", None)
            continue
        src = release.wheel

        value = partial(_value, found, label, src)
        floor = _python_floor(release.requires_python)
        value("python_min", row.python_min, floor, f"Requires-Python {release.requires_python}")
        tags = [m for t in release.python_tags if (m := _mm(t))]
        value(
            "python_min",
            row.python_min,
            min(tags) if tags else None,
            f"lowest CPython wheel cp{min(tags).nodot}" if tags else "",
        )
        try:
            pins = wheels.pins(release.cuda_requires)
        except ValueError as exc:
            found.add("contradiction", "pins", label, "exact CUDA, cuDNN and NCCL pins", str(exc), None, src)
            continue
        for check, key, kb_value in (
            ("pypi_default_cuda", "cuda", row.pypi_default_cuda),
            ("cudnn", "cudnn", _mm(row.cudnn)),
            ("nccl", "nccl", _mm(row.nccl)),
        ):
            pin = pins.get(key)
            shown = next((r for r in release.cuda_requires if wheels.pin_key(r) == key), "")
            value(check, kb_value, _mm(pin), f"Requires-Dist {shown}")


def _value(found: Collector, label: str, src: str, check: str, kb_value: object, data_value: object, data: str) -> None:
    """One fact of a row against its source's: a contradiction when they differ, a note when the row says null."""
    if data_value is None or kb_value == data_value:
        return
    if kb_value is None:
        found.add("note", check, label, f"{check} null", data, None, src)
        return
    found.add(
        "contradiction",
        check,
        label,
        f"{check} {kb_value}",
        data,
        f"Set the row's {check} to {data_value!s} (cite {src}).",
        src,
    )


def _python_floor(spec: str | None) -> MajorMinor | None:
    if not spec:
        return None
    try:
        lows = [s.version for s in SpecifierSet(spec) if s.operator == ">="]
    except InvalidSpecifier:
        return None
    return _mm(lows[0]) if len(lows) == 1 else None


def _torch_summary(release: TorchRelease) -> str:
    return f"Requires-Python {release.requires_python}; {'; '.join(release.cuda_requires)} ({release.wheel})"


# ---- DeepSpeed ----


class _Ranged(Protocol):
    @property
    def since(self) -> Version: ...
    @property
    def latest(self) -> Version: ...


R = TypeVar("R", bound=_Ranged)


def _covering(rows: Iterable[R], version: Version) -> list[tuple[int, R]]:
    return [(i, r) for i, r in enumerate(rows) if r.since <= version <= r.latest]


def _deepspeed(kb: KnowledgeBase, facts: Facts, found: Collector) -> None:
    rows = {s.version: (i, s) for i, s in enumerate(kb.deepspeed_sdists)}
    oldest = min(rows, default=Version("0"))
    on_pypi = {Version(v) for v in facts.deepspeed_versions if Version(v) >= oldest}
    source = f"PyPI, {facts.read}"
    for version in sorted(on_pypi - set(rows)):
        sdist = facts.deepspeed.get(str(version))
        found.add(
            "contradiction",
            "pypi_sdists",
            f"deepspeed {version} on PyPI",
            "deepspeed.yaml pypi_sdists: no row",
            f"an sdist{f' (sha256 {sdist.sha256})' if sdist else ''}",
            f"Add {{version: {str(version)!r}, sha256, url}} to pypi_sdists"
            + (f" (url {sdist.url})" if sdist else "")
            + ", and extend releases and pypi_requirements (the findings below).",
            source,
        )
    for version, (i, row) in sorted(rows.items()):
        label = f"deepspeed.yaml pypi_sdists[{i}] (deepspeed {version})"
        sdist = facts.deepspeed.get(str(version))
        if version not in on_pypi or sdist is None:
            found.add(
                "contradiction",
                "missing",
                label,
                f"deepspeed {version}",
                "no such sdist on PyPI (or yanked)",
                "Remove the row.",
                source,
            )
            continue
        for check, kb_value, data_value in (("sha256", row.sha256, sdist.sha256), ("url", row.url, sdist.url)):
            if kb_value != data_value:
                found.add(
                    "contradiction",
                    check,
                    label,
                    f"{check} {kb_value}",
                    f"{check} {data_value}",
                    f"Set the row's {check} to PyPI's.",
                    source,
                )
    for text, sdist in sorted(facts.deepspeed.items(), key=lambda kv: Version(kv[0])):
        version = Version(text)
        src = f"deepspeed-{version}.tar.gz"
        _ds_release(kb, version, sdist.cuda_minor_mismatch_ok, sdist.min_torch, src, found)
        _ds_requirements(kb, version, sdist.requires, sdist.cuda_build_adds, src, found)


def _ds_release(
    kb: KnowledgeBase,
    version: Version,
    mismatch: dict[str, tuple[str, ...]],
    min_torch: str | None,
    src: str,
    found: Collector,
) -> None:
    where = _covering(kb.deepspeed_releases, version)
    if len(where) != 1:
        found.add(
            "contradiction",
            "releases",
            f"deepspeed {version}",
            f"deepspeed.yaml releases: {len(where)} rows cover it",
            "a release on PyPI",
            f"Extend the last row's latest to {version} if its builder.py says the same, or add a row.",
            src,
        )
        return
    i, row = where[0]
    label = f"deepspeed.yaml releases[{i}] ({row.since}-{row.latest})"
    said = {int(k): frozenset(m for x in v if (m := _mm(x))) for k, v in mismatch.items()}
    if said != row.cuda_minor_mismatch_ok:

        def show(value: dict[int, frozenset[MajorMinor]]) -> str:
            return "; ".join(f"{k}: {_listed(sorted(v))}" for k, v in sorted(value.items()))

        found.add(
            "contradiction",
            "cuda_minor_mismatch_ok",
            label,
            f"cuda_minor_mismatch_ok {show(row.cuda_minor_mismatch_ok)}",
            f"op_builder/builder.py: {show(said)}",
            "Split the row where builder.py changes (the sdists named) and set its cuda_minor_mismatch_ok to "
            "builder.py's.",
            src,
        )
    if min_torch is None:
        found.add(
            "note", "min_torch", label, f"min_torch {row.min_torch}", "README.md names no PyTorch floor", None, src
        )
    elif Version(min_torch) != row.min_torch:
        found.add(
            "contradiction",
            "min_torch",
            label,
            f"min_torch {row.min_torch}",
            f"README.md: PyTorch >= {min_torch}",
            f"Split the row where README.md changes (the sdists named) and set its min_torch to {min_torch}.",
            src,
        )


def _ds_requirements(
    kb: KnowledgeBase, version: Version, requires: tuple[str, ...], adds: tuple[str, ...], src: str, found: Collector
) -> None:
    where = _covering(kb.deepspeed_requirements, version)
    if len(where) != 1:
        found.add(
            "contradiction",
            "pypi_requirements",
            f"deepspeed {version}",
            f"deepspeed.yaml pypi_requirements: {len(where)} rows cover it",
            f"requirements.txt: {_listed(requires)}; setup.py appends on CUDA: {_listed(adds)}",
            f"Extend the last row's latest to {version} if it requires the same, or add a row.",
            src,
        )
        return
    i, row = where[0]
    label = f"deepspeed.yaml pypi_requirements[{i}] ({row.since}-{row.latest})"
    for check, kb_value, data_value, file in (
        ("requires", row.requires, requires, "requirements/requirements.txt"),
        ("cuda_build_adds", row.cuda_build_adds, adds, "setup.py's CUDA appends"),
    ):
        if sorted(kb_value) != sorted(data_value):
            only_kb = sorted(set(kb_value) - set(data_value))
            only_data = sorted(set(data_value) - set(kb_value))
            found.add(
                "contradiction",
                check,
                label,
                f"{check} holds {_listed(only_kb)} beyond the sdist's",
                f"{file} holds {_listed(only_data)} beyond the row's",
                f"Split the row where the file changes (the sdists named) and set its {check} to the file's.",
                src,
            )


# ---- CUDA ----


def _cuda(kb: KnowledgeBase, facts: Facts, found: Collector) -> None:
    by_minor: dict[MajorMinor, list[str]] = {}
    for project, versions in sorted(facts.cuda_versions.items()):
        for text in versions:
            mm = _mm(text)
            if mm is not None:
                by_minor.setdefault(mm, []).append(f"{project} {text}")
    source = f"PyPI, {facts.read}"
    for mm, seen in sorted(by_minor.items()):
        if kb.toolkit(mm) is None:
            found.add(
                "contradiction",
                "toolkits",
                f"CUDA {mm}",
                f"cuda.yaml toolkits: no row for {mm}",
                f"released: {seen[0]}{f' and {len(seen) - 1} more' if len(seen) > 1 else ''}",
                f"Add a toolkits row for CUDA {mm} (driver floor from NVIDIA's release notes; sm and gcc_max: the "
                "nvcc findings for it).",
                source,
            )
    unread = [t.version for t in kb.toolkits if t.version not in by_minor]
    if unread:
        found.add(
            "note",
            "toolkits",
            "cuda.yaml toolkits",
            f"CUDA {_listed(unread)}",
            "no NVIDIA CUDA wheel on PyPI: not checked here",
            None,
        )
    for text, nvcc in sorted(facts.nvcc.items(), key=lambda kv: Version(kv[0])):
        mm = _mm(text)
        row = kb.toolkit(mm) if mm else None
        src = nvcc.wheel
        if row is None or mm is None:
            found.add(
                "note",
                "nvcc",
                f"CUDA {mm}",
                "no toolkits row",
                f"sm {_listed(nvcc.sm)}; gcc_max {nvcc.gcc_max}",
                None,
                src,
            )
            continue
        i = kb.toolkits.index(row)
        label = f"cuda.yaml toolkits[{i}] (CUDA {row.version})"
        if row.sm is None:
            found.add("note", "sm", label, "sm null", f"{nvcc.sm_from}: sm {_listed(nvcc.sm)}", None, src)
        elif set(nvcc.sm) != row.sm:
            found.add(
                "contradiction",
                "sm",
                label,
                f"sm {_listed(sorted(row.sm))}",
                f"{nvcc.sm_from}: sm {_listed(nvcc.sm)}",
                f"Set the row's sm to [{_listed(nvcc.sm)}] (cite the nvcc wheel).",
                src,
            )
        where = f"{nvcc.host_config_from} include/crt/host_config.h"
        if nvcc.gcc_max is None:
            found.add("note", "gcc_max", label, f"gcc_max {row.gcc_max}", f"{where}: no GCC limit", None, src)
        elif row.gcc_max is None:
            found.add("note", "gcc_max", label, "gcc_max null", f"{where}: __GNUC__ > {nvcc.gcc_max}", None, src)
        elif row.gcc_max != nvcc.gcc_max:
            found.add(
                "contradiction",
                "gcc_max",
                label,
                f"gcc_max {row.gcc_max}",
                f"{where}: __GNUC__ > {nvcc.gcc_max}",
                f"Set the row's gcc_max to {nvcc.gcc_max} (cite the wheel).",
                src,
            )
