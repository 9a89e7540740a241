"""Load and validate the knowledge base YAML files into frozen rows.

Every row is checked (types, required and unknown keys, source ids, every value of every list) and every
problem is collected; `load_kb` raises one KnowledgeBaseError listing them all with file and row. The files
are read with size, nesting and alias limits (envsolver.core.safeyaml).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

from packaging.version import InvalidVersion, Version

from envsolver.core import versions
from envsolver.core.archlist import parse_arch_list
from envsolver.core.errors import BadInputError, KnowledgeBaseError
from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb import cache, pypi_rows
from envsolver.kb.model import (
    CHANNELS,
    PLATFORMS,
    ArchRename,
    Chip,
    CudaMajor,
    DeepSpeedCondaBuild,
    DeepSpeedDefaultCcs,
    DeepSpeedRelease,
    DeepSpeedRequirements,
    DeepSpeedSdist,
    Fact,
    Gpu,
    KnowledgeBase,
    MultiGpu,
    OpHeader,
    OpLibrary,
    PciDevice,
    PypiCondaName,
    Toolkit,
    TorchBuild,
    TorchRelease,
)

T = TypeVar("T")
FILES = ("gpus.yaml", "cuda.yaml", "torch.yaml", "deepspeed.yaml", "conda.yaml", "chips.yaml", "pci_devices.yaml")
META = "meta.yaml"  # the KB's date
MAX_BYTES = 1 << 20  # per file; the largest (gpus.yaml) is about 42 KiB
MAX_INT = 10**9  # no count, CUDA major or gcc version of ours comes near


class _Skip(Exception):
    """A value was invalid; its problem is already recorded."""


@dataclass
class _Row:
    """One mapping being read, with the place it came from for error messages."""

    where: str
    raw: dict[str, Any]
    problems: list[str]
    sources: dict[str, str]
    seen: set[str] = field(default_factory=set)

    def fail(self, message: str) -> _Skip:
        self.problems.append(f"{self.where}: {message}")
        return _Skip()

    def get(self, key: str, convert: Callable[[Any], T], *, optional: bool = False) -> T:
        self.seen.add(key)
        if key not in self.raw:
            if optional:
                return cast(T, None)
            raise self.fail(f"missing key {key!r}")
        value = self.raw[key]
        if value is None and optional:
            return cast(T, None)
        try:
            return convert(value)
        except (TypeError, ValueError, InvalidVersion, BadInputError) as exc:
            raise self.fail(f"bad value for {key!r}: {value!r} ({exc})") from None

    def nullable(self, key: str, convert: Callable[[Any], T]) -> T | None:
        """A key that must be present but may be null (null = unknown)."""
        self.seen.add(key)
        if key not in self.raw:
            raise self.fail(f"missing key {key!r} (write null when unknown)")
        value = self.raw[key]
        if value is None:
            return None
        try:
            return convert(value)
        except (TypeError, ValueError, InvalidVersion, BadInputError) as exc:
            raise self.fail(f"bad value for {key!r}: {value!r} ({exc})") from None

    def source(self) -> tuple[str, ...]:
        ids = self.get("source", _str_list)
        if not ids:
            raise self.fail("empty 'source': every row needs at least one source id")
        unknown = [i for i in ids if i not in self.sources]
        if unknown:
            raise self.fail(f"unknown source id(s) {unknown} (add them to the file's 'sources:' map)")
        return ids

    def finish(self) -> None:
        extra = sorted(set(self.raw) - self.seen)
        if extra:
            raise self.fail(f"unknown key(s) {extra}")


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return tuple(_str(v) for v in value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INT:
        raise ValueError(f"expected an integer from 0 to {MAX_INT - 1}")
    return value


def _int_list(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list of integers")
    return tuple(_int(v) for v in value)


def _mm(value: Any) -> MajorMinor:
    if not isinstance(value, str):
        raise ValueError("expected a quoted 'major.minor' string")
    return versions.parse_major_minor(value, "version", "12.4", "the knowledge base")


def _mm_list(value: Any) -> tuple[MajorMinor, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list of 'major.minor' strings")
    return tuple(_mm(v) for v in value)


def _driver(value: Any) -> DriverVersion:
    if not isinstance(value, str):
        raise ValueError("expected a quoted driver version")
    return versions.driver(value)


def _version(value: Any) -> Version:
    if not isinstance(value, str) or not _RELEASE.fullmatch(value):
        raise ValueError("expected a quoted release version such as '2.5.1'")
    return Version(value)


_RELEASE = re.compile(rf"[0-9]{{1,{versions.MAX_DIGITS}}}(?:\.[0-9]{{1,{versions.MAX_DIGITS}}}){{0,3}}")


def _version_list(value: Any) -> tuple[Version, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("expected a non-empty list of quoted versions")
    return tuple(_version(v) for v in value)


def _driver_branch(value: Any) -> int:
    """A quoted number such as a driver branch '525'."""
    if not isinstance(value, str) or not re.fullmatch(rf"[0-9]{{1,{versions.MAX_DIGITS}}}", value):
        raise ValueError("expected a quoted number such as '525'")
    return int(value)


def _choice(options: Iterable[str]) -> Callable[[Any], str]:
    allowed = tuple(options)

    def convert(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"expected one of {list(allowed)}")
        return str(value)

    return convert


class _Reader:
    """Reads the tables of one file; collects problems instead of stopping at the first."""

    def __init__(self, name: str, doc: Any, problems: list[str], all_sources: dict[str, str]) -> None:
        self.name = name
        self.problems = problems
        self.doc: dict[str, Any] = doc if isinstance(doc, dict) else {}
        if not isinstance(doc, dict):
            problems.append(f"{name}: expected a mapping at the top level")
        raw_sources = self.doc.get("sources")
        if not isinstance(raw_sources, dict) or not raw_sources:
            problems.append(f"{name}: missing 'sources:' map of id -> citation")
            raw_sources = {}
        self.sources: dict[str, str] = {}
        for raw_key, text in raw_sources.items():
            key = str(raw_key)
            if not isinstance(text, str) or not text.strip():
                problems.append(f"{name}: sources.{key}: expected a citation string")
                continue
            if key in all_sources and all_sources[key] != text:
                problems.append(f"{name}: sources.{key}: id used elsewhere with another citation")
            self.sources[key] = text
            all_sources[key] = text

    def rows(self, table: str, build: Callable[[_Row], T]) -> tuple[T, ...]:
        raw_rows = self.doc.get(table)
        if not isinstance(raw_rows, list) or not raw_rows:
            self.problems.append(f"{self.name}: missing or empty table {table!r}")
            return ()
        out: list[T] = []
        for index, raw in enumerate(raw_rows):
            label = (raw.get("key") or raw.get("version") or raw.get("since")) if isinstance(raw, dict) else None
            where = f"{self.name}: {table}[{index}]" + (f" ({label})" if label else "")
            if not isinstance(raw, dict):
                self.problems.append(f"{where}: expected a mapping")
                continue
            row = _Row(where, raw, self.problems, self.sources)
            try:
                value = build(row)
                row.finish()
            except _Skip:
                continue
            out.append(value)
        return tuple(out)

    def one(self, key: str, build: Callable[[_Row], T]) -> T | None:
        raw = self.doc.get(key)
        if not isinstance(raw, dict):
            self.problems.append(f"{self.name}: missing mapping {key!r}")
            return None
        row = _Row(f"{self.name}: {key}", raw, self.problems, self.sources)
        try:
            value = build(row)
            row.finish()
        except _Skip:
            return None
        return value


def _gpu(r: _Row) -> Gpu:
    return Gpu(
        key=r.get("key", _str),
        name=r.get("name", _str),
        aliases=r.get("aliases", _str_list),
        smi_names=r.get("smi_names", _str_list),
        compute_capability=r.get("compute_capability", _mm),
        architecture=r.get("architecture", _str),
        segment=r.get("segment", _choice(["datacenter", "workstation", "consumer", "embedded"])),
        memory_gb=r.nullable("memory_gb", _int_list),
        bf16=r.nullable("bf16", _bool),
        fp8=r.nullable("fp8", _bool),
        min_driver=r.nullable("min_driver", _driver_branch),
        platform=cast(Any, r.get("platform", _choice(PLATFORMS))),
        source=r.source(),
        note=r.get("note", _str, optional=True),
    )


def _multi_gpu(r: _Row) -> MultiGpu:
    return MultiGpu(
        gpus=r.get("gpus", _str_list),
        nvlink=r.nullable("nvlink", _bool),
        peer_to_peer=r.nullable("peer_to_peer", _bool),
        source=r.source(),
    )


_HEX4 = re.compile(r"[0-9A-F]{4}")
_SUBSYSTEM = re.compile(r"[0-9A-F]{4} [0-9A-F]{4}")


def _pattern(pattern: re.Pattern[str], shape: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        text = _str(value)
        if not pattern.fullmatch(text):
            raise ValueError(f"expected {shape}")
        return text

    return convert


def _chip(r: _Row) -> Chip:
    return Chip(
        chip=r.get("chip", _str),
        compute_capability=r.nullable("compute_capability", _mm),
        architecture=r.get("architecture", _str),
        source=r.source(),
        note=r.get("note", _str, optional=True),
    )


def _pci_device(r: _Row) -> PciDevice:
    return PciDevice(
        device_id=r.get("id", _pattern(_HEX4, "four upper-case hex digits")),
        subsystem=r.nullable("subsystem", _pattern(_SUBSYSTEM, "two groups of four upper-case hex digits")),
        name=r.get("name", _str),
        chip=r.get("chip", _str),
        source=r.source(),
    )


def _unknown_chips(chips: tuple[Chip, ...], devices: tuple[PciDevice, ...]) -> list[str]:
    known = {c.chip for c in chips}
    missing = sorted({d.chip for d in devices} - known)
    return [f"pci_devices.yaml: chip(s) {missing} have no row in chips.yaml"] if missing else []


def _cuda_major(r: _Row) -> CudaMajor:
    return CudaMajor(r.get("major", _int), r.get("mvc_driver", _driver), r.source(), r.get("note", _str, optional=True))


def _toolkit(r: _Row) -> Toolkit:
    sm = r.nullable("sm", _int_list)
    return Toolkit(
        version=r.get("version", _mm),
        driver=r.nullable("driver", _driver),
        sm=frozenset(sm) if sm is not None else None,
        gcc_max=r.nullable("gcc_max", _int),
        source=r.source(),
        note=r.get("note", _str, optional=True),
    )


def _rename(r: _Row) -> ArchRename:
    return ArchRename(r.get("old", _mm), r.get("new", _mm), r.get("from_cuda", _mm), r.source())


def _torch_build(r: _Row) -> TorchBuild:
    return TorchBuild(
        channel=cast(Any, r.get("channel", _choice(CHANNELS))),
        versions=r.get("versions", _version_list),
        cuda=r.get("cuda", _mm),
        cuda_range=r.nullable("cuda_range", _str),
        platform=cast(Any, r.get("platform", _choice(PLATFORMS))),
        build=r.get("build", _str),
        archs=r.get("archs", lambda v: parse_arch_list(_str(v))),
        python=r.get("python", _mm_list),
        cudnn=r.nullable("cudnn", _str),
        nccl=r.nullable("nccl", _str),
        glibc=r.nullable("glibc", _mm),
        arm_variant=r.nullable("arm_variant", _choice(["sbsa", "tegra"])),
        source=r.source(),
        note=r.get("note", _str, optional=True),
    )


def _mismatch_map(value: Any) -> dict[int, frozenset[MajorMinor]]:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of CUDA major -> list of 'major.minor'")
    return {_major_key(k): frozenset(_mm_list(v)) for k, v in value.items()}


def _major_key(key: Any) -> int:
    """A CUDA major as a mapping key: 12 or '12'."""
    return _int(key) if not isinstance(key, str) else _driver_branch(key)


def _ds_release(r: _Row) -> DeepSpeedRelease:
    return DeepSpeedRelease(
        since=r.get("since", _version),
        latest=r.get("latest", _version),
        min_torch=r.get("min_torch", _version),
        cc_below=r.nullable("cc_below", _mm),
        cuda_minor_mismatch_ok=r.get("cuda_minor_mismatch_ok", _mismatch_map),
        source=r.source(),
    )


def _ds_conda(r: _Row) -> DeepSpeedCondaBuild:
    return DeepSpeedCondaBuild(
        versions=r.get("versions", _version_list),
        torch=r.get("torch", _mm),
        cuda=r.get("cuda", _mm),
        cuda_version_min=r.nullable("cuda_version_min", _mm),
        python=r.get("python", _mm_list),
        platform=cast(Any, r.get("platform", _choice(PLATFORMS))),
        source=r.source(),
    )


def _ds_default_ccs(r: _Row) -> DeepSpeedDefaultCcs:
    return DeepSpeedDefaultCcs(
        since=r.get("since", _version),
        latest=r.get("latest", _version),
        cuda_major=r.get("cuda_major", _int),
        ccs=r.get("ccs", lambda v: parse_arch_list(_str(v))),
        source=r.source(),
    )


def _op_library(r: _Row) -> OpLibrary:
    return OpLibrary(
        op=r.get("op", _str),
        library=r.get("library", _str),
        since=r.get("since", _version),
        latest=r.get("latest", _version),
        package=r.get("package", _str),
        source=r.source(),
    )


def _release_range(r: _Row) -> tuple[Version, Version]:
    since, latest = r.get("since", _version), r.get("latest", _version)
    if since > latest:
        raise r.fail(f"since {since} is after latest {latest}")
    return since, latest


def _ds_requirements(r: _Row) -> DeepSpeedRequirements:
    since, latest = _release_range(r)
    return DeepSpeedRequirements(
        since=since,
        latest=latest,
        requires=r.get("requires", pypi_rows.requirements),
        cuda_build_adds=r.get("cuda_build_adds", pypi_rows.requirements),
        source=r.source(),
    )


def _ds_sdist(r: _Row) -> DeepSpeedSdist:
    version, url = r.get("version", _version), r.get("url", _str)
    problem = pypi_rows.sdist_url_problem(version, url)
    if problem:
        raise r.fail(problem)
    return DeepSpeedSdist(version, r.get("sha256", pypi_rows.sha256), url, r.source())


def _pypi_conda_name(r: _Row) -> PypiCondaName:
    return PypiCondaName(
        pypi=r.get("pypi", pypi_rows.pypi_name),
        conda=r.get("conda", pypi_rows.conda_name),
        provides_dist=r.get("provides_dist", _bool),
        source=r.source(),
    )


def _torch_release(r: _Row) -> TorchRelease:
    return TorchRelease(
        version=r.get("version", _version),
        pypi_cuda=r.nullable("pypi_cuda", _mm_list),
        pypi_default_cuda=r.nullable("pypi_default_cuda", _mm),
        cudnn=r.nullable("cudnn", _str),
        nccl=r.nullable("nccl", _str),
        python_min=r.nullable("python_min", _mm),
        conda_forge=r.nullable("conda_forge", _bool),
        source=r.source(),
        note=r.get("note", _str, optional=True),
    )


def _target_include(r: _Row) -> tuple[str, Fact]:
    """(platform, or platform:arm_variant where the variant has its own directory) -> targets/<name>."""
    platform = r.get("platform", _choice(PLATFORMS))
    variant = r.get("arm_variant", _choice(["sbsa", "tegra"]), optional=True)
    key = f"{platform}:{variant}" if variant else platform
    return key, Fact(r.get("target", _str), r.source())


def _op_header(r: _Row) -> OpHeader:
    return OpHeader(r.get("header", _str), r.get("package", _str), r.source())


def _fact(key: str) -> Callable[[_Row], Fact]:
    def build(r: _Row) -> Fact:
        return Fact(str(r.get(key, _str)), r.source())

    return build


def _read_doc(data_dir: Path | None, name: str, problems: list[str], given: Mapping[str, bytes]) -> Any:
    """The parsed file (from `given` when it holds the file's bytes), or {} with its problem recorded
    (unreadable, too large, not UTF-8, not valid YAML)."""
    from envsolver.core import safeyaml  # only when the YAML is read: a compiled KB needs no YAML parser

    limits = safeyaml.Limits(chars=MAX_BYTES, depth=16, aliases=1000, nodes=200_000)
    try:
        if name in given:
            text = given[name].decode("utf-8")
        elif data_dir is None:
            text = resources.files("envsolver.kb").joinpath("data").joinpath(name).read_text(encoding="utf-8")
        else:
            text = safeyaml.read_text(data_dir / name, MAX_BYTES)
        return safeyaml.load(text, limits)
    except OSError as exc:
        problems.append(f"{name}: cannot read it ({exc.strerror})")
    except (safeyaml.SafeYamlError, UnicodeDecodeError) as exc:
        problems.append(f"{name}: {exc}")
    return {}


def load_kb(data_dir: Path | None = None, *, texts: Mapping[str, bytes] | None = None) -> KnowledgeBase:
    """Load the KB shipped in the package (or from `data_dir`); `texts` (file name -> bytes) stands in for
    the files it names. Raises KnowledgeBaseError."""
    problems: list[str] = []
    sources: dict[str, str] = {}
    given = texts or {}
    docs = {name: _Reader(name, _read_doc(data_dir, name, problems, given), problems, sources) for name in FILES}

    gpus = docs["gpus.yaml"].rows("gpus", _gpu)
    multi_gpu = docs["gpus.yaml"].rows("multi_gpu", _multi_gpu)
    keys = {g.key for g in gpus}
    problems += [f"gpus.yaml: multi_gpu: unknown GPU key {k!r}" for row in multi_gpu for k in row.gpus if k not in keys]
    cuda = docs["cuda.yaml"]
    torch = docs["torch.yaml"]
    ds = docs["deepspeed.yaml"]
    conda = docs["conda.yaml"]
    pip_build = ds.one("pip_build", lambda r: (r.get("names", _str_list), r.source()))
    no_mixing = conda.one("no_mixing", lambda r: (r.get("first", _mm), r.get("last", _mm), r.source()))
    cxx = conda.one("toolchain", lambda r: _toolchain(r))
    ds_requirements = ds.rows("pypi_requirements", _ds_requirements)
    sdists = ds.rows("pypi_sdists", _ds_sdist)
    conda_names = conda.rows("pypi_conda_names", _pypi_conda_name)
    problems += pypi_rows.overlaps("deepspeed.yaml: pypi_requirements", ((r.since, r.latest) for r in ds_requirements))
    problems += pypi_rows.duplicates("deepspeed.yaml: pypi_sdists", (str(s.version) for s in sdists))
    problems += pypi_rows.duplicates("conda.yaml: pypi_conda_names", (n.pypi for n in conda_names))
    chips = docs["chips.yaml"].rows("chips", _chip)
    pci_devices = docs["pci_devices.yaml"].rows("devices", _pci_device)
    problems += _unknown_chips(chips, pci_devices)
    targets = conda.rows("targets_include", _target_include)
    platform_vpkgs = conda.rows("platform_virtual_packages", _platform_vpkgs)
    kb = KnowledgeBase(
        gpus=gpus,
        cuda_majors=cuda.rows("majors", _cuda_major),
        toolkits=cuda.rows("toolkits", _toolkit),
        arch_renames=cuda.rows("arch_renames", _rename),
        torch_builds=torch.rows("builds", _torch_build),
        deepspeed_releases=ds.rows("releases", _ds_release),
        deepspeed_conda_builds=ds.rows("conda_forge_builds", _ds_conda),
        pip_build=pip_build or ((), ()),
        deepspeed_requirements=ds_requirements,
        deepspeed_sdists=sdists,
        pypi_conda_names=conda_names,
        op_headers=ds.rows("op_headers", _op_header),
        targets_include=dict(targets),
        split_packages_since=conda.one("split_packages_since", _fact("cuda")) or Fact("", ()),
        cudatoolkit_dev_last=conda.one("cudatoolkit_dev", _fact("last")) or Fact("", ()),
        no_mixing=no_mixing or (MajorMinor(0, 0), MajorMinor(0, 0), ()),
        nvcc_package=cxx[0] if cxx else Fact("", ()),
        cxx_packages=cxx[1] if cxx else ((), ()),
        cxx_packages_nvidia=cxx[2] if cxx else ((), ()),
        platform_virtual_packages=dict(platform_vpkgs),
        deepspeed_arch_suffixes=ds.one("arch_suffixes", _fact("breaks_versions")) or Fact("", ()),
        extra_headers=conda.rows("extra_headers", _op_header),
        cudnn_cuda12_below=conda.one("cudnn_cuda12_below", _fact("version")) or Fact("", ()),
        deepspeed_default_ccs=ds.rows("default_ccs", _ds_default_ccs),
        op_libraries=ds.rows("op_libraries", _op_library),
        torch_releases=torch.rows("upstream_releases", _torch_release),
        cuda_global_pin=cuda.one("conda_forge_cuda_pin", _fact("version")) or Fact("", ()),
        multi_gpu=multi_gpu,
        sources=sources,
        chips=chips,
        pci_devices=pci_devices,
    )
    if problems:
        raise KnowledgeBaseError(problems)
    return kb


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("expected a mapping of name -> quoted string")
    return {str(k): v for k, v in value.items()}


def _platform_vpkgs(r: _Row) -> tuple[str, tuple[dict[str, str], tuple[str, ...]]]:
    return r.get("platform", _choice(PLATFORMS)), (r.get("packages", _str_map), r.source())


Packages = tuple[tuple[str, ...], tuple[str, ...]]  # (package names, source ids)


def _toolchain(r: _Row) -> tuple[Fact, Packages, Packages]:
    def nvcc(value: Any) -> Fact:
        sub = _Row(f"{r.where}.nvcc", value if isinstance(value, dict) else {}, r.problems, r.sources)
        fact = Fact(sub.get("package", _str), sub.source())
        sub.finish()
        return fact

    def cxx(value: Any) -> Packages:
        sub = _Row(f"{r.where}.cxx", value if isinstance(value, dict) else {}, r.problems, r.sources)
        result = (sub.get("packages", _str_list), sub.source())
        sub.finish()
        return result

    return r.get("nvcc", nvcc), r.get("cxx", cxx), r.get("cxx_nvidia", cxx)


def _packaged_bytes() -> dict[str, bytes] | None:
    """The packaged data files' bytes (meta.yaml too), or None when one cannot be read (load_kb then
    reports it)."""
    data = resources.files("envsolver.kb").joinpath("data")
    try:
        return {name: data.joinpath(name).read_bytes() for name in (*FILES, META)}
    except OSError:
        return None


def _date_of(text: str) -> str:
    from envsolver.core import safeyaml

    doc = safeyaml.load(text)
    return str(doc["kb_date"]) if isinstance(doc, dict) and "kb_date" in doc else "unknown"


def _read_date() -> str:
    return _date_of(resources.files("envsolver.kb").joinpath("data").joinpath(META).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def packaged() -> tuple[KnowledgeBase, str]:
    """The packaged knowledge base and its date, loaded once per process: from the compiled cache
    (envsolver.kb.cache) when it holds these very files, else from the YAML, and then cached. Raises
    KnowledgeBaseError."""
    texts = _packaged_bytes()
    name = cache.key(texts) if texts is not None else None
    root = cache.cache_root() if name else None
    where = cache.path_for(root, name) if root and name else None
    if where is not None:
        kept = cache.read(where)
        if kept is not None:
            return kept
    kb = load_kb(texts=texts)  # raises KnowledgeBaseError: only a KB without a problem is cached
    date = _date_of(texts[META].decode("utf-8")) if texts is not None else _read_date()
    if where is not None:
        cache.write(where, kb, date)
    return kb, date


def default_kb() -> KnowledgeBase:
    """The packaged knowledge base (see `packaged`)."""
    return packaged()[0]


@lru_cache(maxsize=1)
def kb_date() -> str:
    """The knowledge base's date (data/meta.yaml)."""
    try:
        return packaged()[1]
    except KnowledgeBaseError:  # the date does not depend on the rows
        return _read_date()
