"""Read, check and write the cluster file (cluster.yaml). docs/cluster.md documents the format.

    format: 1                      # optional; 1 is the only format
    cluster: hpc                   # the cluster's name
    partitions:                    # one entry per GPU partition, names unique
      - name: a100                 # envsolver's name for it; also the Slurm partition unless slurm.partition
        gpus: [a100]               # any name `--gpu` takes (`envsolver gpus` lists them)
        driver: '550.54.15'        # the oldest driver on its nodes, quoted; null when unknown
        platform: linux-64         # linux-64 or linux-aarch64
        glibc: '2.34'              # the oldest glibc on its nodes, quoted; null when unknown
        slurm:                     # optional: what reaches its GPU nodes
          partition: gpu           #   --partition (default: name)
          gres: gpu:a100:1         #   --gres, or gpus: a100:1 (--gpus); not both
          account: ml              #   --account
          constraint: a100&ib      #   --constraint
        provenance:                # optional: where each value came from (gpus, driver, platform, glibc, slurm)
          driver: nvidia-smi on gpu01 via srun --partition=a100
    skipped:                       # optional: partitions left out, and why
      - {name: cpu, reason: no GPUs}

`parse`/`load` check every key of every partition and raise one BadInputError listing every problem, each with
the partition and the key. `write` writes atomically and leaves a file edited by hand alone unless `force`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from envsolver.cluster import grammar
from envsolver.cluster.model import BY_HAND, FACTS, FORMAT, UNKNOWN, Cluster, Partition, Skipped, SlurmOptions
from envsolver.core import safeyaml, versions
from envsolver.core.errors import BadInputError, UnknownGpuError
from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb import KnowledgeBase
from envsolver.kb.gpus import lookup
from envsolver.kb.model import PLATFORMS, Gpu, Platform
from envsolver.lock.writers import files, yamlemit

T = TypeVar("T")
MAX_BYTES = 256 * 1024  # a cluster of 500 partitions is about 200 KiB
LIMITS = safeyaml.Limits(chars=MAX_BYTES, depth=10, aliases=100, nodes=100_000)
MAX_PARTITIONS = 1000
MAX_TEXT = 1000  # a provenance or a reason
TOP_KEYS = ("format", "cluster", "partitions", "skipped")
PARTITION_KEYS = ("name", "gpus", "driver", "platform", "glibc", "slurm", "provenance")
SLURM_KEYS = ("partition", "gres", "gpus", "account", "constraint")
_SLURM_CHECKS: dict[str, Callable[[str], str]] = {
    "partition": grammar.name,
    "gres": grammar.gres,
    "gpus": grammar.gpus,
    "account": lambda text: grammar.name(text, "Slurm account name"),
    "constraint": grammar.constraint,
}


class _Skip(Exception):
    """A value was invalid; its problem is already recorded."""


@dataclass
class _Problems:
    where: str
    items: list[str] = field(default_factory=list)

    def add(self, at: str, message: str) -> _Skip:
        self.items.append(f"{at}: {message}")
        return _Skip()


def _text(value: Any) -> str:
    """A one-line string (a provenance, a reason)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    if len(value) > MAX_TEXT:
        raise ValueError(f"expected at most {MAX_TEXT} characters")
    if not value.isprintable():
        raise ValueError("expected one line of printable text")
    return value


def _quoted(convert: Callable[[str], T], example: str) -> Callable[[Any], T]:
    def check(value: Any) -> T:
        if not isinstance(value, str):
            raise ValueError(f"expected a quoted string such as '{example}', not {type(value).__name__}")
        try:
            return convert(value)
        except BadInputError:
            raise ValueError(f"expected the form '{example}'") from None

    return check


def _driver(value: Any) -> versions.DriverVersion:
    """versions.driver_given's grammar (a 3-digit branch). The knowledge base's range is not applied: a node's
    driver older than every driver it records is real, and the cluster planner refuses it per partition with
    --skip-partition as the fix (cluster/planning.py)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a quoted string such as '535.104.05', not {type(value).__name__}")
    try:
        return versions.driver_given(value, origin="driver")[0]
    except BadInputError:
        raise ValueError("expected the form '535.104.05' that nvidia-smi prints, with a 3-digit branch") from None


_glibc = _quoted(lambda text: versions.parse_major_minor(text, "glibc version", "2.28", "--glibc"), "2.28")


def _platform(value: Any) -> Platform:
    if value not in PLATFORMS:
        raise ValueError(f"expected one of {', '.join(PLATFORMS)}")
    return cast(Platform, value)


class _Reader:
    """Checks one partition (or skipped entry), recording problems as `where: key: ...`."""

    def __init__(self, raw: dict[Any, Any], at: str, problems: _Problems) -> None:
        self.raw = raw
        self.at = at
        self.problems = problems
        self.failed = False

    def fail(self, message: str) -> _Skip:
        self.failed = True
        return self.problems.add(self.at, message)

    def value(self, key: str, convert: Callable[[Any], T], *, nullable: bool = False) -> T:
        if key not in self.raw:
            hint = " (write null when unknown)" if nullable else ""
            raise self.fail(f"missing key {key!r}{hint}")
        value = self.raw[key]
        if value is None and nullable:
            return cast(T, None)
        try:
            return convert(value)
        except (TypeError, ValueError) as exc:
            raise self.fail(f"bad value for {key!r}: {_shown(value)} ({exc})") from None

    def keys(self, allowed: tuple[str, ...]) -> None:
        extra = sorted((str(k) for k in self.raw if k not in allowed), key=repr)
        if extra:
            self.fail(f"unknown key(s) {extra} (allowed: {', '.join(allowed)})")

    def collect(self, *checks: Callable[[], object]) -> list[object]:
        """Run every check, so each problem is recorded even after an earlier one failed."""
        out: list[object] = []
        for check in checks:
            try:
                out.append(check())
            except _Skip:
                out.append(None)
        return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _gpus(kb: KnowledgeBase, reader: _Reader) -> tuple[tuple[str, ...], tuple[Gpu, ...]]:
    def names(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ValueError("expected a list of GPU names such as [a100]")
        if not value:
            raise ValueError("expected at least one GPU name")
        if not all(isinstance(v, str) and v.strip() and len(v) <= 200 for v in value):
            raise ValueError("expected GPU names as strings")
        return tuple(value)

    written = reader.value("gpus", names)
    rows: list[Gpu] = []
    for name in written:
        try:
            rows.append(lookup(kb, name))
        except UnknownGpuError as exc:
            closest = ", ".join(repr(c) for c in exc.closest) or "none"
            reader.fail(f"'gpus': unknown GPU {name!r} (closest known names: {closest}; `envsolver gpus` lists all)")
    if len(rows) != len(written):
        raise _Skip()
    return written, tuple(rows)


def _slurm(reader: _Reader) -> SlurmOptions:
    raw = reader.raw.get("slurm")
    if raw is None:
        return SlurmOptions()
    if not isinstance(raw, dict):
        raise reader.fail(f"bad value for 'slurm': {_shown(raw)} (expected a mapping of {', '.join(SLURM_KEYS)})")
    extra = sorted((str(k) for k in raw if k not in SLURM_KEYS), key=repr)
    if extra:
        reader.fail(f"unknown key(s) {extra} under 'slurm' (allowed: {', '.join(SLURM_KEYS)})")
    values: dict[str, str] = {}
    for key, check in _SLURM_CHECKS.items():
        value = raw.get(key)
        if value is None:
            continue
        try:
            values[key] = check(value)
        except ValueError as exc:
            reader.fail(f"bad value for 'slurm.{key}': {_shown(value)} ({exc})")
    if "gres" in values and "gpus" in values:
        reader.fail("'slurm' sets both 'gres' and 'gpus' (srun takes one way to ask for GPUs: keep one)")
    if reader.failed:
        raise _Skip()
    return SlurmOptions(**values)


def _provenance(reader: _Reader) -> dict[str, str]:
    raw = reader.raw.get("provenance")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise reader.fail(f"bad value for 'provenance': {_shown(raw)} (expected a mapping of fact to origin)")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if key not in FACTS:
            reader.fail(f"unknown key {_shown(key)} under 'provenance' (allowed: {', '.join(FACTS)})")
            continue
        try:
            out[key] = _text(value)
        except ValueError as exc:
            reader.fail(f"bad value for 'provenance.{key}': {_shown(value)} ({exc})")
    return {key: out[key] for key in FACTS if key in out}


def _filled_by_hand(provenance: dict[str, str], values: dict[str, object]) -> dict[str, str]:
    """A provenance init wrote for a value it could not learn (`unknown: ...`, beside a null) does not describe
    a value filled in since: that value was written by hand, and its provenance says so (make --cluster copies
    it into the lock)."""
    out = dict(provenance)
    for key, value in values.items():
        if value is not None and out.get(key, "").startswith(UNKNOWN):
            out[key] = BY_HAND
    return out


def _partition(kb: KnowledgeBase, raw: Any, index: int, problems: _Problems) -> Partition | None:
    at = f"partitions[{index}]"
    if not isinstance(raw, dict):
        problems.add(at, f"expected a mapping with keys {', '.join(PARTITION_KEYS)}, not {_shown(raw)}")
        return None
    name = raw.get("name")
    if isinstance(name, str) and name:
        at = f"partition {_shown(name)} ({at})"
    reader = _Reader(raw, at, problems)
    reader.keys(PARTITION_KEYS)
    got = reader.collect(
        lambda: reader.value("name", grammar.name),
        lambda: _gpus(kb, reader),
        lambda: reader.value("driver", _driver, nullable=True),
        lambda: reader.value("platform", _platform),
        lambda: reader.value("glibc", _glibc, nullable=True),
        lambda: _slurm(reader),
        lambda: _provenance(reader),
    )
    if reader.failed:
        return None
    checked_name, gpus, driver, platform, glibc, slurm, provenance = got
    provenance = _filled_by_hand(cast(dict[str, str], provenance), {"driver": driver, "glibc": glibc})
    gpu_names, gpu_rows = cast(tuple[tuple[str, ...], tuple[Gpu, ...]], gpus)
    return Partition(
        name=cast(str, checked_name),
        gpu_names=gpu_names,
        gpus=gpu_rows,
        driver=cast(DriverVersion | None, driver),
        platform=cast(Platform, platform),
        glibc=cast(MajorMinor | None, glibc),
        slurm=cast(SlurmOptions, slurm),
        provenance=provenance,
    )


def _skipped(raw: Any, problems: _Problems) -> tuple[Skipped, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.add("skipped", f"expected a list of {{name, reason}}, not {_shown(raw)}")
        return ()
    out = []
    for index, entry in enumerate(raw[:MAX_PARTITIONS]):
        if not isinstance(entry, dict):
            problems.add(f"skipped[{index}]", f"expected a mapping with keys name, reason, not {_shown(entry)}")
            continue
        skipped = _skipped_entry(_Reader(entry, f"skipped[{index}]", problems))
        if skipped is not None:
            out.append(skipped)
    return tuple(out)


def _skipped_entry(reader: _Reader) -> Skipped | None:
    reader.keys(("name", "reason"))
    name, reason = reader.collect(lambda: reader.value("name", _text), lambda: reader.value("reason", _text))
    return None if reader.failed else Skipped(cast(str, name), cast(str, reason))


def from_document(doc: Any, kb: KnowledgeBase, where: str) -> Cluster:
    """The Cluster of a parsed document. Raises BadInputError listing every problem."""
    problems = _Problems(where)
    if not isinstance(doc, dict):
        problems.add(where, f"must be a mapping with keys {', '.join(TOP_KEYS)}, not {_shown(doc)}")
        raise _error(problems)
    top = _Reader(doc, where, problems)
    top.keys(TOP_KEYS)
    if doc.get("format", FORMAT) != FORMAT:
        top.fail(f"bad value for 'format': {_shown(doc['format'])} (this envsolver reads format {FORMAT})")
    name = top.collect(lambda: top.value("cluster", lambda v: grammar.name(v, "cluster name")))[0]
    raw_partitions = doc.get("partitions")
    partitions: list[Partition] = []
    if not isinstance(raw_partitions, list) or not raw_partitions:
        kind = "an empty list" if raw_partitions == [] else _shown(raw_partitions)
        top.fail(f"'partitions' must be a list of at least one GPU partition, not {kind}")
    elif len(raw_partitions) > MAX_PARTITIONS:
        top.fail(f"'partitions' has {len(raw_partitions)} entries; at most {MAX_PARTITIONS} are read")
    else:
        seen: set[str] = set()
        for index, raw in enumerate(raw_partitions):
            partition = _partition(kb, raw, index, problems)
            if partition is None:
                continue
            if partition.name in seen:
                problems.add(
                    f"partition {partition.name!r} (partitions[{index}])", "the name is used twice (names are unique)"
                )
            seen.add(partition.name)
            partitions.append(partition)
    skipped = _skipped(doc.get("skipped"), problems)
    if problems.items:
        raise _error(problems)
    return Cluster(name=cast(str, name), partitions=tuple(partitions), skipped=skipped)


def _error(problems: _Problems) -> BadInputError:
    body = "\n".join(f"  - {p}" for p in problems.items)
    return BadInputError(
        f"cluster file {problems.where!r} has {len(problems.items)} problem(s):\n{body}\n"
        f"Fix them in the file (docs/cluster.md describes every key), or draft it again with "
        f"`envsolver cluster init --out {problems.where} --force`."
    )


def parse(text: str, kb: KnowledgeBase, where: str) -> Cluster:
    """The Cluster in `text` (where: the file's name, for messages). Raises BadInputError."""
    try:
        doc = safeyaml.load(text, LIMITS)
    except safeyaml.SafeYamlError as exc:
        problems = _Problems(where)
        problems.add(where, str(exc))
        raise _error(problems) from None
    return from_document(doc, kb, where)


def load(path: Path, kb: KnowledgeBase) -> Cluster:
    """Read and check a cluster file. Raises BadInputError naming the file and the fix."""
    where = str(path)
    try:
        text = safeyaml.read_text(path, MAX_BYTES)
    except OSError as exc:
        raise BadInputError(
            f"cannot read cluster file {where!r}: {exc.strerror or exc}. Pass an existing file, or draft one "
            f"with `envsolver cluster init --out {where}`."
        ) from None
    except safeyaml.SafeYamlError as exc:
        problems = _Problems(where)
        problems.add(where, str(exc))
        raise _error(problems) from None
    return parse(text, kb, where)


def to_document(cluster: Cluster) -> dict[str, Any]:
    """The file's document: keys in the documented order, unset Slurm options and provenance left out."""
    partitions = []
    for p in cluster.partitions:
        entry: dict[str, Any] = {
            "name": p.name,
            "gpus": list(p.gpu_names),
            "driver": str(p.driver) if p.driver is not None else None,
            "platform": p.platform,
            "glibc": str(p.glibc) if p.glibc is not None else None,
        }
        if p.slurm.to_json():
            entry["slurm"] = p.slurm.to_json()
        if p.provenance:
            entry["provenance"] = {k: p.provenance[k] for k in FACTS if k in p.provenance}
        partitions.append(entry)
    doc: dict[str, Any] = {"format": FORMAT, "cluster": cluster.name, "partitions": partitions}
    if cluster.skipped:
        doc["skipped"] = [{"name": s.name, "reason": s.reason} for s in cluster.skipped]
    return doc


def render(cluster: Cluster, command: str) -> str:
    """The file's text: a header naming the command that drafted it, then the document."""
    header = (
        f"# envsolver cluster file (format {FORMAT}) for cluster {yamlemit.comment(cluster.name)}: each GPU "
        "partition with its GPUs, oldest driver, platform and glibc.\n"
        f"# Drafted with: {yamlemit.comment(command)}\n"
        "# Edit it as you need (docs/cluster.md describes every key); envsolver never overwrites an edited file "
        "without --force.\n"
    )
    return header + yamlemit.dump(to_document(cluster))


def write(cluster: Cluster, path: Path, command: str, force: bool = False) -> files.Outcome:
    """Write the file atomically. Raises BadInputError when it would overwrite a hand edit without `force`."""
    return files.write(path, render(cluster, command), force)
