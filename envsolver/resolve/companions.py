"""The CUDA-bound packages a plan takes beside torch: nvcc, the headers and libraries DeepSpeed's ops need, and on
conda-forge cuDNN and NCCL. One list for what specs.assemble asks for and what a snapshot is checked to hold
(candidates: a plan whose companions the snapshot cannot supply for its CUDA is not chosen there). Pure."""

from __future__ import annotations

from envsolver.kb.model import KnowledgeBase, TorchBuild

# conda-forge's torch builds take cuDNN and NCCL as packages of their own; pytorch-channel builds bundle them.
RUNTIME_LIBRARIES = ("cudnn", "nccl")


def header_packages(kb: KnowledgeBase) -> list[str]:
    """The packages with DeepSpeed's op headers, then those with the libraries its ops link (libX.so)."""
    return list(dict.fromkeys([*(h.package for h in kb.op_headers), *(lib.package for lib in kb.op_libraries)]))


def names(kb: KnowledgeBase, build: TorchBuild) -> tuple[str, ...]:
    """Every CUDA-bound package a plan for `build` names in its specs besides pytorch and cuda-version."""
    runtime = RUNTIME_LIBRARIES if build.channel == "conda-forge" else ()
    return (kb.nvcc_package.value, *header_packages(kb), *runtime)
