"""Plan: what the resolver decided, with a reason and a source for each decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb.model import Gpu, Platform
from envsolver.resolve.project import Project

Compatibility = Literal["full", "minor"]


@dataclass(frozen=True)
class Reason:
    decision: str
    because: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class Rejected:
    candidate: str
    because: str


@dataclass(frozen=True)
class CondaSpec:
    """A conda match spec: a name, an optional version constraint and an optional build-string glob.

    `version` uses match-spec syntax: `2.10.0` (exactly), `3.13.*`, `<15`, `>=2`. `origin`: where a spec of the
    user's project came from (`env.yml`, `--add`); empty for the stack's own.
    """

    name: str
    version: str | None = None
    build: str | None = None
    origin: str = field(default="", compare=False)

    def __str__(self) -> str:
        """The canonical match-spec form, `name version build`, which conda, mamba and rattler all read."""
        if self.build:
            return f"{self.name} {self.version or '*'} {self.build}"
        if self.version:
            return f"{self.name} {self.version}"
        return self.name


@dataclass(frozen=True)
class Plan:
    gpus: tuple[Gpu, ...]
    platform: Platform
    driver: DriverVersion | None
    cuda_version: MajorMinor
    torch_cuda: MajorMinor
    torch_version: str
    torch_build: str
    python_version: MajorMinor
    source: str
    channels: tuple[str, ...]
    specs: tuple[CondaSpec, ...]
    pip: tuple[str, ...]
    virtual_packages: dict[str, str]
    torch_cuda_arch_list: str
    env: dict[str, str]
    compatibility: Compatibility
    deepspeed: str | None
    reasons: tuple[Reason, ...]
    rejected: tuple[Rejected, ...]
    warnings: tuple[str, ...]
    sources: dict[str, str] = field(default_factory=dict)
    snapshot_date: str | None = None  # set when planned within the bundled snapshot (--offline, no network)
    project: Project = field(default_factory=Project)  # the user's own packages (-f, --add, --add-pypi)

    def to_json(self) -> dict[str, Any]:
        """The stable `explain --json` document."""
        return {
            "gpus": [{"name": g.name, "compute_capability": str(g.compute_capability)} for g in self.gpus],
            "driver": str(self.driver) if self.driver else None,
            "cuda_version": str(self.cuda_version),
            "torch_version": self.torch_version,
            "python_version": str(self.python_version),
            "source": self.source,
            "platform": self.platform,
            "channels": list(self.channels),
            "specs": [str(s) for s in self.specs],
            "pip": list(self.pip),
            "virtual_packages": dict(self.virtual_packages),
            "torch_cuda_arch_list": self.torch_cuda_arch_list,
            "env": dict(self.env),
            "compatibility": self.compatibility,
            "reasons": [
                {"decision": r.decision, "because": r.because, "source": [self.sources.get(i, i) for i in r.source]}
                for r in self.reasons
            ],
            "rejected": [{"candidate": r.candidate, "because": r.because} for r in self.rejected],
            "warnings": list(self.warnings),
            "snapshot_date": self.snapshot_date,
            "project": {
                "files": list(self.project.files),
                "conda": [{"spec": w.spec, "from": w.origin} for w in self.project.conda],
                "pip": [{"requirement": w.text, "from": w.origin} for w in self.project.pip],
                "channels": list(self.project.channels),
            },
        }
