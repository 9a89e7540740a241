"""The cluster file's types: a Cluster of Partitions, each with its GPUs, driver, platform, glibc, the Slurm
options that reach it, and where each value came from. Frozen, built from validated values only (file.py
reads and checks them; draft.py builds them from Slurm's facts).

A value that is not known is None, and its provenance says why and what `make --cluster` does without it:
a partition with no driver is planned for a current driver (as `make` without --driver), one with no glibc
for 2.28 (as `make` without --glibc).

The Slurm options reach argv lists (srun) and sbatch scripts, so each has an exact grammar (grammar.py)
checked before a SlurmOptions exists; `argv()` gives them as single `--option=value` words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb.model import Gpu, Platform

FORMAT = 1
# The keys a partition's provenance may describe, in the order files list them.
FACTS = ("gpus", "driver", "platform", "glibc", "slurm")
Fact = Literal["gpus", "driver", "platform", "glibc", "slurm"]
BY_HAND = "written by hand"
UNKNOWN = "unknown:"  # how the provenance of a value init could not learn starts (decide.py, draft.py)
# What make --cluster does with an unknown value (the sentence init writes into the provenance).
ASSUMED = {
    "driver": "make --cluster assumes a current driver, as make does without --driver",
    "glibc": "make --cluster assumes glibc 2.28, as make does without --glibc",
}


@dataclass(frozen=True)
class SlurmOptions:
    """The srun/sbatch options that reach a partition's GPU nodes. `partition` None means the partition's
    own name; `gres` and `gpus` exclude each other; every value already matched its grammar."""

    partition: str | None = None
    gres: str | None = None
    gpus: str | None = None
    account: str | None = None
    constraint: str | None = None

    def argv(self, default_partition: str) -> tuple[str, ...]:
        """`--partition=P` and the other options that are set, each one argv word, in a fixed order."""
        words = [f"--partition={self.partition or default_partition}"]
        for flag, value in (
            ("--gres", self.gres),
            ("--gpus", self.gpus),
            ("--account", self.account),
            ("--constraint", self.constraint),
        ):
            if value is not None:
                words.append(f"{flag}={value}")
        return tuple(words)

    def to_json(self) -> dict[str, str]:
        """The options that are set, by key (the file's `slurm:` mapping)."""
        pairs = (
            ("partition", self.partition),
            ("gres", self.gres),
            ("gpus", self.gpus),
            ("account", self.account),
            ("constraint", self.constraint),
        )
        return {key: value for key, value in pairs if value is not None}


@dataclass(frozen=True)
class Partition:
    """One partition: `gpu_names` as the file writes them (any name `--gpu` takes), `gpus` the knowledge
    base's rows for them. `driver` is the oldest driver on its nodes, `glibc` the oldest glibc; None: unknown.
    `provenance` maps a fact (FACTS) to where its value came from."""

    name: str
    gpu_names: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    driver: DriverVersion | None
    platform: Platform
    glibc: MajorMinor | None
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    provenance: Mapping[str, str] = field(default_factory=dict)

    def origin(self, fact: Fact) -> str:
        """Where a value came from; a fact the file gives no provenance for was written by hand."""
        return self.provenance.get(fact, BY_HAND)

    @property
    def ccs(self) -> tuple[MajorMinor, ...]:
        """The distinct compute capabilities of its GPUs, ascending."""
        return tuple(sorted({g.compute_capability for g in self.gpus}))

    def srun_argv(self) -> tuple[str, ...]:
        """The options that put a step on one of its GPU nodes (the Slurm options; the partition by name)."""
        return self.slurm.argv(self.name)


@dataclass(frozen=True)
class Skipped:
    """A partition the draft left out, and why (no GPUs, a name that cannot be used, left out by --partition)."""

    name: str
    reason: str


@dataclass(frozen=True)
class Cluster:
    """A cluster: its name, its GPU partitions (names unique) and the partitions left out."""

    name: str
    partitions: tuple[Partition, ...]
    skipped: tuple[Skipped, ...] = ()

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    def by_platform(self) -> dict[Platform, tuple[Partition, ...]]:
        """The partitions of each platform, platforms in sorted order, partitions in file order."""
        platforms = sorted({p.platform for p in self.partitions})
        return {pl: tuple(p for p in self.partitions if p.platform == pl) for pl in platforms}
