"""What a PyPI part may never install: a distribution the conda part provides (held: torch, numpy, ...; or a name it
occupies at no known version), and a CUDA library wheel (the CUDA stack comes from conda, pinned by the plan). A
user requirement that names one, or a resolved file that is one, is refused (exit 1), naming the user's
requirement that pulled it (its Requires-Dist chain) and the fix: take it from conda.

The CUDA wheels are data (kb/cuda_wheels, the one list): every name PyPI's torch pulls in on Linux and not on macOS
(its Requires-Dist marked `platform_system == "Linux"`: nvidia-cublas-cu12, nvidia-cudnn-cu13, cuda-toolkit,
triton, ...), for each torch release the conda snapshot holds; scripts/build_pypi_snapshot.py writes it with uv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from packaging.specifiers import SpecifierSet

from envsolver.core.errors import ConflictError, Kind
from envsolver.kb import condamap as kb_condamap
from envsolver.lock.pypi.requirements import UserRequirement


class PypiRefused(ConflictError):
    """The PyPI part would install what must come from conda, or cannot be resolved beside it (exit 1). Carries
    the user's requirement, the package at stake and the ways out (each one run)."""

    kind: Kind = "conflict"

    def __init__(self, message: str, requirement: str, package: str, ways_out: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.requirement, self.package, self.ways_out = requirement, package, ways_out
        # the requirements on held packages that the user's requirement needs and the lock does not meet
        # (`torch>=2.4`): what a conda solve could be asked for (make tries it; this module cannot)
        self.conda_needs: tuple[str, ...] = ()


def cuda_wheels() -> dict[str, tuple[str, ...]]:
    """CUDA library wheel name -> the torch releases whose Linux wheels pull it in (kb/cuda_wheels: the one list)."""
    from envsolver.kb import cuda_wheels as wheels

    return wheels.names()


def conda_names(pypi: str) -> tuple[str, ...]:
    """The conda-forge packages that install the PyPI distribution `pypi` (torch -> pytorch), one-name entries
    first; () where the mapping knows none."""
    found = [(len(names), conda) for conda, names in kb_condamap.mapping().items() if names and pypi in names]
    return tuple(conda for _, conda in sorted(found))


def conda_spec(requirement: UserRequirement) -> str:
    """The conda spec that asks the conda part for what the requirement asks PyPI: `pytorch>=2.5`."""
    names = conda_names(requirement.name)
    specifier = str(requirement.requirement.specifier)
    return f"{names[0] if names else requirement.name}{specifier}"


def check_direct(
    requirements: Sequence[UserRequirement],
    held: Mapping[str, str],
    occupied: Mapping[str, str],
    by: Mapping[str, str],
) -> None:
    """Refuse a user requirement that names a held or occupied package or a CUDA wheel. Raises PypiRefused."""
    for req in requirements:
        if req.name in held:
            version = held[req.name]
            if SpecifierSet(str(req.requirement.specifier)).contains(version, prereleases=True):
                continue  # the conda part's release meets it: a constraint, nothing comes from PyPI
            refused = PypiRefused(
                f"the PyPI requirement {req.text!r} names {req.name}, which the lock already holds at {version} "
                f"({_holder(req.name, by)}), and {version} does not satisfy it; installing it from PyPI would "
                "replace that one (a PyPI torch replaces conda's CUDA build). The conda part must hold the release "
                f"it asks for. Drop {req.text!r} from the PyPI list to keep {req.name} {version}.",
                req.text,
                req.name,
            )
            refused.conda_needs = (req.text,)  # what a conda solve is asked for (lock/pippart.py tries it)
            raise refused
        if req.name in occupied:
            raise PypiRefused(
                f"the PyPI requirement {req.text!r} names {req.name}, and the conda part holds the conda package "
                f"{occupied[req.name]}, which installs it (at a version the conda -> PyPI mapping does not give): a "
                f"PyPI copy would be a second one. Drop {req.text!r} from the PyPI list: the conda part provides it.",
                req.text,
                req.name,
            )
        if req.name in cuda_wheels():
            raise PypiRefused(
                f"the PyPI requirement {req.text!r} names {req.name}, a CUDA library wheel: the lock's CUDA "
                "libraries come from conda (the plan pins them to its CUDA), and a PyPI copy would load beside "
                "them. Drop it from the PyPI list: the conda part holds the CUDA libraries.",
                req.text,
                req.name,
            )


def forbidden(name: str, held: Mapping[str, str], occupied: Mapping[str, str]) -> bool:
    """Whether a PyPI part may never install `name` (held, occupied, a CUDA wheel or torch)."""
    return name in held or name in occupied or name in cuda_wheels()


def check_resolved(
    names: Sequence[str],
    graph: Mapping[str, Sequence[str]],
    roots: Sequence[UserRequirement],
    held: Mapping[str, str],
    occupied: Mapping[str, str],
    by: Mapping[str, str],
) -> None:
    """Refuse a resolved distribution that the conda part provides or occupies, or a CUDA wheel, naming the
    requirement chain from the user's requirement that pulled it. Raises PypiRefused."""
    refused = []
    for name in names:
        what = None
        if name in held:
            what = f"the lock already holds {name} {held[name]} ({_holder(name, by)})"
        elif name in occupied:
            what = f"the conda part's {occupied[name]} installs {name}, so this would be a second copy"
        elif name in cuda_wheels():
            what = f"{name} is a CUDA library wheel, and the lock's CUDA libraries come from conda"
        if what is not None:
            root, path = chain(graph, roots, name)
            refused.append(("..." in path, len(path), name, what, root, path))
    if not refused:
        return
    # the one nearest the user's requirement (torch before the CUDA wheels it pulls in, whose path goes through it)
    _, _, name, what, root, path = min(refused, key=lambda r: r[:3])
    error = PypiRefused(
        f"the PyPI part would install {name} from PyPI ({' -> '.join(path)}): {what}. Drop {root.text!r} from the "
        "PyPI list (or take it from conda, where the conda solver weighs it with the GPU stack).",
        root.text,
        name,
    )
    error.conda_needs = (root.text,)  # taking it from conda: lock/pippart.py tries `--add` before naming it
    raise error


def chain(
    graph: Mapping[str, Sequence[str]], roots: Sequence[UserRequirement], name: str
) -> tuple[UserRequirement, list[str]]:
    """(the user requirement, the shortest Requires-Dist path from it to `name`, names in order)."""
    for root in roots:
        if root.name == name:
            return root, [name]
    paths = {r.name: [r.name] for r in roots}
    queue = [r.name for r in roots]
    by_name = {r.name: r for r in roots}
    while queue:
        current = queue.pop(0)
        for dep in graph.get(current, ()):
            if dep in paths:
                continue
            paths[dep] = [*paths[current], dep]
            if dep == name:
                return by_name[paths[dep][0]], paths[dep]
            queue.append(dep)
    return roots[0], [roots[0].name, "...", name]


def _holder(name: str, by: Mapping[str, str]) -> str:
    """Who holds a held name: the conda package (`by`, condamap.CondaProvides.by), else the stack's PyPI part."""
    return f"from conda's {by[name]}" if name in by else "held by the lock"
