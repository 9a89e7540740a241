"""The identity of a built DeepSpeed op: everything that changes its binary, hashed.

Two builds with the same key produce interchangeable libraries, so a library built once (on any node, for any
environment) serves every environment whose key is the same: the shared op cache (opcache.py) is keyed by it,
and the hook decides that nothing changed by comparing keys, before it starts torch.

The facts come from `op_runner.py key`, run in the target python: read from files and tool banners, without
importing torch or DeepSpeed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from envsolver import __version__

# How the hook builds (op_runner.py install: DeepSpeed's jit_load, its flags less -g, the library named after
# DeepSpeed's module). Bump it when that changes, so that no library built the old way is reused.
RECIPE = "deepspeed-jit-less-g/1"
# Ops built with -march=native (DeepSpeed's CPU builders): their binaries depend on the build host's CPU.
CPU_OPS = frozenset({"cpu_adam", "cpu_adagrad", "cpu_lion"})
# Facts every key includes; a build without one of them has no key (it is built, never cached).
REQUIRED = ("python", "ext_suffix", "torch_version_py", "deepspeed_info", "deepspeed_tree", "cxx")


@dataclass(frozen=True)
class KeyFacts:
    """op_runner.py key's document, as read."""

    facts: Mapping[str, object]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name in REQUIRED if not self.facts.get(name))


def op_key(facts: KeyFacts, op: str, requested: str, platform: str) -> str | None:
    """The op's key (64 hex digits), or None when a fact it needs is unknown. nvcc counts for every op (CPU ops
    too: torch's cpp_extension adds CUDA's include paths and defines when it finds one).

    The arch list is the one asked for: the list actually built follows from it, nvcc's archs (its banner is in
    the key) and envsolver's rules (its version is in the key), and is recorded in the entry. So a new environment
    finds its ops by what it asks for, without first asking nvcc and torch."""
    if facts.missing:
        return None
    doc: dict[str, object] = {
        "recipe": RECIPE,
        "envsolver": __version__,
        "op": op,
        "arch_list": requested,
        "platform": platform,
        **{name: facts.facts.get(name) for name in (*REQUIRED, "nvcc")},
    }
    if op in CPU_OPS:
        doc["cpu"] = facts.facts.get("cpu")
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
