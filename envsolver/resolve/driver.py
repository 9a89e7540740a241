"""Driver facts: which CUDA a driver runs, fully or through minor-version compatibility. Pure."""

from __future__ import annotations

from typing import Literal

from envsolver.core.versions import DriverVersion, MajorMinor
from envsolver.kb.model import KnowledgeBase, Toolkit

Support = Literal["full", "minor", "none"]


def newest_full_cuda(kb: KnowledgeBase, driver: DriverVersion) -> Toolkit | None:
    """The newest toolkit whose every feature this driver supports (what nvidia-smi calls 'CUDA Version')."""
    fitting = [t for t in kb.toolkits if t.driver is not None and t.driver <= driver]
    return max(fitting, key=lambda t: t.version) if fitting else None


def floors(kb: KnowledgeBase, cuda: MajorMinor) -> tuple[DriverVersion | None, DriverVersion | None]:
    """(full, minor): the oldest driver that fully supports this CUDA release (None where NVIDIA publishes none,
    or the KB lacks the release), and its major's minor-version-compatibility floor (None: the KB lacks it)."""
    toolkit = kb.toolkit(cuda)
    major = kb.cuda_major(cuda.major)
    return (toolkit.driver if toolkit is not None else None, major.mvc_driver if major is not None else None)


def support(kb: KnowledgeBase, driver: DriverVersion, cuda: MajorMinor) -> Support:
    """'full' when the driver meets the release's own minimum, 'minor' when only the major's
    minor-version-compatibility floor, 'none' otherwise (or when the KB lacks the release)."""
    full, minor = floors(kb, cuda)
    if full is not None and driver >= full:
        return "full"
    if minor is not None and driver >= minor:
        return "minor"
    return "none"


def supports_text(kb: KnowledgeBase, driver: DriverVersion) -> str:
    """'supports CUDA <= 12.4' (or 'supports no CUDA toolkit in the knowledge base')."""
    newest = newest_full_cuda(kb, driver)
    return f"supports CUDA <= {newest.version}" if newest else "supports no CUDA 11+ toolkit"


def requirement_text(kb: KnowledgeBase, cuda: MajorMinor) -> str:
    """'CUDA 12.9 needs driver >= 575.51.03 (>= 525.60.13 through minor-version compatibility)'."""
    major = kb.cuda_major(cuda.major)
    mvc = f" (>= {major.mvc_driver} through minor-version compatibility)" if major else ""
    return f"CUDA {cuda} needs {full_driver_text(kb, cuda)}{mvc}"


def full_driver_text(kb: KnowledgeBase, cuda: MajorMinor) -> str:
    """'driver >= 575.51.03', or what is said where NVIDIA publishes no full-support minimum."""
    toolkit = kb.toolkit(cuda)
    if toolkit is None:
        return "a driver the knowledge base does not list"
    if toolkit.driver is None:
        return f"a driver that fully supports CUDA {cuda}, whose version the knowledge base does not know"
    return f"driver >= {toolkit.driver}"


def floor_text(kb: KnowledgeBase, cuda: MajorMinor) -> str:
    """What a plan of this CUDA needs of a driver nobody named: 'driver >= 575.51.03 (fully supports CUDA
    12.9)', or for a release without a published minimum 'a driver that fully supports CUDA 13.4 (...)'."""
    toolkit = kb.toolkit(cuda)
    if toolkit is not None and toolkit.driver is not None:
        return f"driver >= {toolkit.driver} (fully supports CUDA {cuda})"
    major = kb.cuda_major(cuda.major)
    mvc = f"; >= {major.mvc_driver} runs it through minor-version compatibility" if major else ""
    return f"a driver that fully supports CUDA {cuda} (the knowledge base does not know its version{mvc})"
