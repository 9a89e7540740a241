"""Build a Target from a profile, command-line values and (for --gpu auto) host detection.

Precedence: command line over profile over defaults. Every bad value raises BadInputError (exit 2).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from envsolver.core import names, versions
from envsolver.core.errors import BadInputError, DetectionError
from envsolver.core.redact import redact
from envsolver.kb.gpus import identify, lookup
from envsolver.kb.model import CHANNELS, PLATFORMS, Gpu, KnowledgeBase
from envsolver.resolve import projectmerge
from envsolver.resolve.detect import Found, HostFacts
from envsolver.resolve.profile import load as load_profile
from envsolver.resolve.project import read as read_project
from envsolver.resolve.target import DEEPSPEED_FROM, DEFAULT_GLIBC, Target, torch_specifier


@dataclass(frozen=True)
class Options:
    """Raw target options as given on the command line (None = not given)."""

    gpus: tuple[str, ...] = ()
    profile: str | None = None
    driver: str | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    source: str | None = None
    platform: str | None = None
    deepspeed: bool | None = None
    driver_compat: str | None = None
    glibc: str | None = None
    deepspeed_from: str | None = None
    # The driver is a fact a cluster file holds for its nodes: its shape is checked (versions.driver_given), not
    # the knowledge base's range; the cluster planner says per partition what an old driver means.
    driver_from_cluster_file: bool = False
    # The user's project: environment or requirements files (-f), conda specs (--add), PyPI requirements
    # (--add-pypi).
    files: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    add_pypi: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inputs:
    target: Target
    detected: dict[str, str] = field(default_factory=dict)  # value -> where it came from
    command: str = ""
    warnings: tuple[str, ...] = ()  # about the values as given: a partial version, a dropped patch


def build_target(
    options: Options, kb: KnowledgeBase, detect: Any = None, environ: Mapping[str, str] | None = None
) -> Inputs:
    """Merge profile, project, options and detection into a validated Target (the command line over the project's
    files over the profile).

    `detect` is a callable(environ) -> HostFacts, used only for --gpu auto.
    """
    values: dict[str, Any] = {}
    if options.profile:
        values.update(load_profile(options.profile).values)
    project = read_project(options.files, options.add, options.add_pypi)
    projectmerge.check(project)
    stack = projectmerge.stack_values(project)
    values.update(stack.values)
    skip = ("profile", "gpus", "driver_from_cluster_file", "files", "add", "add_pypi")
    given = {k: v for k, v in vars(options).items() if v not in (None, ()) and k not in skip}
    values.update(given)
    replaced = [f"--{key} {given[key]} replaces {stack.origins[key]}" for key in stack.values if given.get(key)]
    origins = tuple(sorted((k, o) for k, o in stack.origins.items() if k not in given))
    gpu_names: list[str] = list(options.gpus) or list(values.get("gpus", []))
    if not gpu_names:
        raise BadInputError(
            "no target GPU: pass --gpu NAME (repeatable), --profile NAME, or --gpu auto on a GPU "
            "node. Example: envsolver make --gpu a100."
        )
    detected: dict[str, str] = {}
    found: tuple[Gpu, ...] = ()
    host: Found | None = None
    driver_origin = "--driver" if "driver" in given else "the profile's driver:"
    if any(n.strip().lower() == "auto" for n in gpu_names):
        facts = cast(HostFacts, detect(environ or {}) if detect else HostFacts((), None))
        if not facts.gpus:
            raise DetectionError(
                "--gpu auto found no NVIDIA GPU on this host (NVML, nvidia-smi and "
                "ENVSOLVER_GPUS all gave nothing); login nodes usually have none. Name the "
                "compute nodes' GPU instead, e.g. --gpu a100, or set ENVSOLVER_GPUS=a100."
            )
        gpu_names = [n for n in gpu_names if n.strip().lower() != "auto"]
        found = tuple(identify(kb, f.value, f.device_id, f.compute_cap) for f in facts.gpus)
        for f in facts.gpus:
            detected[f"gpu {f.value}"] = f.origin
        if facts.driver is not None and "driver" not in given:
            values["driver"] = facts.driver.value
            detected[f"driver {facts.driver.value}"] = facts.driver.origin
            driver_origin = facts.driver.origin
        # the host's platform serves the GPUs whose row records none (known only by PCI ID or reported CC)
        if facts.platform is not None and "platform" not in values and any(g.platform is None for g in found):
            host = facts.platform
            detected[f"platform {host.value}"] = host.origin
    gpus = tuple(dict.fromkeys([*(lookup(kb, n) for n in gpu_names), *found]))
    known = () if options.driver_from_cluster_file else kb.known_drivers()
    parsed = _versions(values, kb, driver_origin, known)
    target = Target(
        gpus=gpus,
        driver=parsed.driver,
        python=parsed.python,
        torch=torch_specifier(str(values["torch"])) if "torch" in values else None,
        torch_text=str(values["torch"]) if "torch" in values else None,
        cuda=parsed.cuda,
        source=cast(Any, _choice(values.get("source", "conda-forge"), CHANNELS, "--source")),
        platform=cast(Any, _choice(values["platform"], PLATFORMS, "--platform")) if "platform" in values else None,
        deepspeed=bool(values.get("deepspeed", True)),
        glibc=parsed.glibc,
        driver_compat=cast(Any, _choice(values.get("driver_compat", "minor"), ("full", "minor"), "--driver-compat")),
        deepspeed_from=cast(Any, _choice(values.get("deepspeed_from", "auto"), DEEPSPEED_FROM, "--deepspeed-from")),
        host_platform=cast(Any, _choice(host.value, PLATFORMS, "the detected platform")) if host else None,
        host_origin=host.origin if host else "",
        project=project,
        origins=origins,
    )
    warnings = (*parsed.warnings, *replaced, *project.notes)
    return Inputs(target, detected, canonical_command("make", target), warnings)


@dataclass(frozen=True)
class _Versions:
    driver: versions.DriverVersion | None
    python: versions.MajorMinor | None
    cuda: versions.MajorMinor | None
    glibc: versions.MajorMinor
    warnings: tuple[str, ...]


def _versions(
    values: Mapping[str, Any],
    kb: KnowledgeBase,
    driver_origin: str = "--driver",
    known_drivers: tuple[versions.DriverVersion, ...] = (),
) -> _Versions:
    """The version options by versions.py's one rule; MAJOR alone for --cuda and --python is narrowed against the
    releases the knowledge base's torch builds are made for. Raises BadInputError."""
    found: list[str] = []

    def keep(pair: tuple[Any, str | None]) -> Any:
        if pair[1] is not None:
            found.append(pair[1])
        return pair[0]

    cudas = tuple(sorted({b.cuda for b in kb.torch_builds}))
    pythons = tuple(sorted({p for b in kb.torch_builds for p in b.python}))
    driver = (
        keep(versions.driver_given(str(values["driver"]), known_drivers, driver_origin)) if "driver" in values else None
    )
    python = (
        None
        if "python" not in values
        else keep(versions.wish(str(values["python"]), "Python", "3.11", "--python", pythons))
    )
    cuda = None if "cuda" not in values else keep(versions.wish(str(values["cuda"]), "CUDA", "12.4", "--cuda", cudas))
    glibc = keep(versions.glibc_given(str(values["glibc"]))) if "glibc" in values else DEFAULT_GLIBC
    return _Versions(driver, python, cuda, glibc, tuple(found))


def _choice(value: Any, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise BadInputError(f"{flag} {value!r} is not one of {', '.join(allowed)}. Pass {flag} {allowed[0]}.")
    return str(value)


def _option(flag: str, value: object, example: str, public: str | None = None) -> str:
    """`flag value` with the value quoted for a POSIX shell (shlex.quote), so that pasting the command passes
    exactly this value; `public` is the form to show instead (a channel without its credentials).

    Raises BadInputError for a value with a line break or another non-printable character (str.isprintable),
    which no `#` header line and no pasted command line can hold; the message shows only the public form.
    """
    text = str(value)
    shown = text if public is None else public
    bad = sorted({ch for ch in text + shown if not ch.isprintable()})
    if bad:
        kept = "".join(ch for ch in shown if ch.isprintable()).strip() or example
        raise BadInputError(
            f"{flag} {shown!r} holds {', '.join(repr(ch) for ch in bad)}: a line break or other non-printable "
            f"character cannot go into a command line or a file header. Pass {flag} {shlex.quote(kept)}."
        )
    return f"{flag} {shlex.quote(shown)}"


def canonical_command(verb: str, target: Target) -> str:
    """The command line that regenerates this target, in a fixed option order, every value shell-quoted.

    Raises BadInputError for a value that cannot go on one command line (see _option).
    """
    parts = [f"envsolver {verb}"]
    parts += [_option("--gpu", g.key, "a100") for g in target.gpus]
    if target.driver is not None:
        parts.append(_option("--driver", target.driver, "535.104.05"))
    parts += _choices(target, with_host=True)
    parts += project_options(target)
    return " ".join(parts)


def project_options(target: Target) -> list[str]:
    """-f for each project file (as given), --add and --add-pypi for the specs given on the command line."""
    project = target.project
    parts = [_option("-f", f, "environment.yml") for f in project.files]
    parts += [_option("--add", spec, "jupyterlab") for spec in project.added]
    parts += [_option("--add-pypi", text, "accelerate") for text in project.added_pypi]
    return parts


def _choices(target: Target, with_host: bool) -> list[str]:
    """The options besides the GPUs and the driver, in canonical order; `with_host`: also --platform and --glibc
    (a cluster file gives those)."""
    parts = []
    if target.python is not None:
        parts.append(_option("--python", target.python, "3.11"))
    if target.torch_text is not None:
        parts.append(_option("--torch", target.torch_text, "2.5"))
    if target.cuda is not None:
        parts.append(_option("--cuda", target.cuda, "12.4"))
    if target.source != "conda-forge":
        parts.append(_option("--source", target.source, "pytorch"))
    # the detected platform a GPU without a recorded one was planned for is written out, so the command replans it
    unrecorded = any(g.platform is None for g in target.gpus)
    platform = target.platform or (target.host_platform if unrecorded else None)
    if with_host and platform is not None:
        parts.append(_option("--platform", platform, "linux-64"))
    if not target.deepspeed:
        parts.append("--no-deepspeed")
    elif target.deepspeed_from != "auto":
        parts.append(_option("--deepspeed-from", target.deepspeed_from, "conda-forge"))
    if target.driver_compat != "minor":
        parts.append(_option("--driver-compat", target.driver_compat, "full"))
    if with_host and target.glibc != DEFAULT_GLIBC:
        parts.append(_option("--glibc", target.glibc, "2.28"))
    return parts


def make_command(
    target: Target,
    name: str | None = None,
    offline: bool = False,
    channels: tuple[str, ...] = (),
    no_lock: bool = False,
) -> str:
    """The `envsolver make` line that regenerates these files (channel credentials left out), every value
    shell-quoted. Raises BadInputError for an invalid environment name (names.validate) or a value that
    cannot go on one command line."""
    parts = [canonical_command("make", target), *_output_options(name, offline, channels, no_lock)]
    return " ".join(parts)


def _output_options(name: str | None, offline: bool, channels: tuple[str, ...], no_lock: bool) -> list[str]:
    """--name, --offline, --channel (credentials left out) and --no-lock, as given."""
    parts = []
    if name is not None:
        parts.append(_option("--name", names.validate(name), names.FALLBACK))
    if offline:
        parts.append("--offline")
    parts += [_option("--channel", c, "https://conda.anaconda.org/conda-forge", public=redact(c)) for c in channels]
    if no_lock:
        parts.append("--no-lock")
    return parts


def cluster_make_command(
    cluster_file: str,
    target: Target,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    out: str | None = None,
    name: str | None = None,
    offline: bool = False,
    channels: tuple[str, ...] = (),
    no_lock: bool = False,
) -> str:
    """The `envsolver make --cluster` line for a selection of partitions, every value shell-quoted. `target`
    carries the options the user gave besides the file (Python, torch, CUDA, source, DeepSpeed, driver
    compatibility); its GPUs, driver, platform and glibc come from the file and are not repeated."""
    parts = ["envsolver make", _option("--cluster", cluster_file, "cluster.yaml")]
    parts += [_option("--partition", p, "a100") for p in only]
    parts += [_option("--skip-partition", p, "v100") for p in skip]
    parts += _choices(target, with_host=False)
    parts += project_options(target)
    parts += _output_options(name, offline, channels, no_lock)
    if out is not None:
        parts.append(_option("--out", out, "envs/cluster"))
    return " ".join(parts)
