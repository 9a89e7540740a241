"""How a project's packages (resolve/project.py) join the stack, the one home of these rules:

- A conda spec of a package the planner chooses (python, pytorch, cuda-version) is a constraint on the plan, read
  as the matching option (`pytorch>=2.5` as `--torch '>=2.5'`, `python=3.11` as `--python 3.11`), so it is seen
  by the planner and by `explain`, never a second pin fighting the plan's. A command-line option replaces it (with
  a warning), as it replaces a profile's value.
- A conda spec of another package the stack lists (numpy, cudnn, nccl, gxx, ...) is merged into the stack's spec:
  both constraints hold (`,` is and).
- Any other conda spec is added to the same solve, after the stack's.
- A PyPI requirement of a package the stack takes from conda (torch, triton) or owns (deepspeed) is refused: it
  would replace the stack's.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from envsolver.core.errors import BadInputError
from envsolver.resolve.plan import CondaSpec, Reason
from envsolver.resolve.project import CondaWant, Project
from envsolver.resolve.target import torch_specifier

# The packages the planner chooses, by the option that chooses them.
PLANNED = {"pytorch": "--torch", "python": "--python", "cuda-version": "--cuda"}
# Conda names users write for the stack's packages under another name, and the one to write.
CONDA_ALIASES = {"torch": "pytorch"}
# PyPI projects the stack provides from conda or owns; a PyPI requirement of one would install a second copy.
PIP_STACK = {
    "torch": "conda's pytorch (constrain it with `pytorch >=X` under dependencies:, or --torch)",
    "triton": "conda's triton, which the conda pytorch depends on",
    "deepspeed": "the stack's DeepSpeed (--deepspeed-from chooses where it comes from; --no-deepspeed leaves it out)",
}
_XY = re.compile(r"(?:==)?(?P<xy>[0-9]+(?:\.[0-9]+)?)(?:\.\*|\.(?P<patch>[0-9]+))?")
_NUMBERS = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}(?:\.\*)?")


@dataclass(frozen=True)
class StackValues:
    """The option values a project's conda specs give (`torch`, `python`, `cuda`: the option's text), with where
    each came from ('pytorch >=2.5 from env.yml')."""

    values: dict[str, str]
    origins: dict[str, str]


def check(project: Project) -> None:
    """Refuse what cannot join the stack at all: a conda name the stack writes otherwise (`torch`), a PyPI
    requirement of a package the stack takes from conda or owns, or of a CUDA library wheel (kb/cuda_wheels: the
    one list). Raises BadInputError (exit 2)."""
    from envsolver.kb import cuda_wheels as wheels

    cuda_wheels = wheels.names() if project.pip else {}
    for want in project.conda:
        if want.name in CONDA_ALIASES:
            better = CONDA_ALIASES[want.name]
            shown = want.spec.replace(want.name, better, 1)
            raise BadInputError(
                f"{want.origin}: the conda package {want.name!r} does not exist on conda-forge; its conda name is "
                f"{better!r}, which the plan pins to a CUDA build. Write {shown!r}."
            )
        if want.name == "pytorch" and want.build:
            raise BadInputError(
                f"{want.origin}: {want.spec!r} pins pytorch's build; the plan pins it to the CUDA build that fits the "
                f"GPUs and driver. Write only a version, e.g. 'pytorch {want.version or '>=2.5'}'."
            )
    for req in project.pip:
        if req.name in PIP_STACK or req.name in cuda_wheels:
            held = PIP_STACK.get(req.name, "conda's CUDA libraries, which the conda pytorch and nvcc run on")
            fix = (
                "Remove it from the pip: list"
                + (f" and write 'pytorch {_pytorch_hint(req.text)}' under dependencies:" if req.name == "torch" else "")
                + "."
            )
            raise BadInputError(
                f"{req.origin}: the PyPI requirement {req.text!r} would install {req.name} from PyPI beside {held}, "
                f"replacing the stack's build (the CPU or another CUDA build of torch is the commonest way a GPU "
                f"environment breaks). {fix}"
            )


def _pytorch_hint(text: str) -> str:
    found = re.search(r"(==|>=|<=|>|<|!=)\s*[0-9][0-9.]*", text)
    return found.group(0).replace(" ", "") if found else ">=2.5"


def stack_values(project: Project) -> StackValues:
    """The option values of the project's specs on planned packages. Raises BadInputError for a constraint no
    option can express (a Python range, a CUDA range), with the spelling that is read."""
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    for want in project.conda:
        option = PLANNED.get(want.name)
        if option is None or want.version is None:
            continue
        if want.name == "pytorch":
            values["torch"] = _torch_text(want)
            origins["torch"] = f"pytorch {want.version} from {want.origin}"
        else:
            key = "python" if want.name == "python" else "cuda"
            values[key] = _major_minor(want, option)
            origins[key] = f"{want.name} {want.version} from {want.origin}"
    return StackValues(values, origins)


def _torch_text(want: CondaWant) -> str:
    """A conda version constraint of pytorch as --torch's text: `2.5.*` -> `2.5`, a bare `2.5.1` (conda: exactly)
    -> `==2.5.1`, a clause list as PEP 440 clauses."""
    version = want.version or ""
    if re.fullmatch(r"[0-9]+\.[0-9]+\.\*", version):
        return version[:-2]
    clauses = []
    for clause in version.split(","):
        if _NUMBERS.fullmatch(clause):
            clause = f"=={clause}"
        clauses.append(clause)
    text = ",".join(clauses)
    try:
        torch_specifier(text)  # the one grammar of --torch
    except BadInputError:
        raise BadInputError(
            f"{want.origin}: 'pytorch {version}' is not a torch version envsolver plans: versions are release "
            "numbers (2.5, 2.5.1) with ==, !=, >=, <=, >, <. Write e.g. 'pytorch >=2.5,<2.8'."
        ) from None
    return text


def _major_minor(want: CondaWant, option: str) -> str:
    """`3.12.*`, `3.12`, `==3.12` or `3.12.4` -> '3.12': the one release the planner plans for. Raises
    BadInputError for a range."""
    found = _XY.fullmatch(want.version or "")
    if found is None:
        example = "python=3.12" if want.name == "python" else "cuda-version=12.9"
        raise BadInputError(
            f"{want.origin}: '{want.spec}' is a range; envsolver plans one {want.name} (as {option} does). Write "
            f"e.g. '{example}'."
        )
    return found["xy"]


def merge(
    specs: Sequence[CondaSpec], project: Project, channels: Sequence[str]
) -> tuple[tuple[CondaSpec, ...], tuple[str, ...], tuple[Reason, ...]]:
    """The stack's specs with the project's merged in (its constraints on a stack package and'ed with the stack's,
    its other packages after the stack's, each with its origin), the channels (the project's after the stack's)
    and the reasons that say so."""
    if not project:
        return tuple(specs), tuple(channels), ()
    merged: list[CondaSpec] = []
    for spec in specs:
        want = project.conda_named(spec.name)
        if want is None or spec.name in ("pytorch", "cuda-version") or (spec.name == "python" and not _patch(want)):
            merged.append(spec)
            continue
        version = ",".join(v for v in (spec.version, want.version) if v) or None
        merged.append(CondaSpec(spec.name, version, spec.build or want.build, origin=want.origin))
    listed = {s.name for s in specs}
    added = [CondaSpec(w.name, w.version, w.build, origin=w.origin) for w in project.conda if w.name not in listed]
    added = [s for s in added if s.name not in PLANNED]  # a planned package the stack leaves out: the planner's
    kept_channels = tuple(dict.fromkeys([*channels, *project.channels]))
    reasons: list[Reason] = []
    by_origin: dict[str, list[str]] = {}
    for spec in [*[s for s in merged if s.origin], *added]:
        by_origin.setdefault(spec.origin, []).append(str(spec))
    for origin, texts in by_origin.items():
        reasons.append(
            Reason(
                f"{', '.join(texts)}: from {origin}",
                "the project's own conda packages, solved with the stack in the same solve (a constraint on a package "
                "the stack lists holds together with the stack's)",
                _source_ids(origin),
            )
        )
    if project.channels:
        reasons.append(
            Reason(
                f"channels {', '.join(project.channels)} after {', '.join(channels)}",
                "the project's channels, after the stack's in conda's strict priority order: a package the stack's "
                "channels hold comes from them",
                _source_ids(", ".join(project.files) or "--add"),
            )
        )
    return (*merged, *added), kept_channels, tuple(reasons)


def _patch(want: CondaWant) -> bool:
    """Whether a python spec says more than its major.minor (`3.12.4`), which the solve must then hold too."""
    found = _XY.fullmatch(want.version or "")
    return found is None or found["patch"] is not None


def _source_ids(origin: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in origin.split(","))
