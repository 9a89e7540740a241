"""Shell completion values for click's completion (`_ENVSOLVER_COMPLETE=bash_source envsolver`): GPU keys and
aliases for --gpu, profile names for --profile, partition names from the cluster file given on the same line.

Completion runs on every Tab, so it reads only what it needs: the knowledge base's compiled cache (for --gpu
only), the profile directory's listing, the cluster file's partition names (without the knowledge base). It
never raises: anything that cannot be read completes to nothing. Check ids complete through click.Choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

MAX_BYTES = 1 << 20  # a cluster file larger than this completes to nothing


def _starting(words: list[str], incomplete: str) -> list[CompletionItem]:
    low = incomplete.lower()
    return [CompletionItem(w) for w in dict.fromkeys(words) if w.lower().startswith(low)]


def gpu_names() -> list[str]:
    """'auto', then every GPU key and alias in the knowledge base, in its order. default_kb() reads the KB's
    compiled cache (kb/cache.py), which is faster than parsing gpus.yaml alone."""
    from envsolver.kb import default_kb

    names = ["auto"]
    for gpu in default_kb().gpus:
        names += [gpu.key, *gpu.aliases]
    return names


def complete_gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    try:
        return _starting(gpu_names(), incomplete)
    except Exception:  # completion must never print a traceback into the shell
        return []


def complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Profile names; a value that looks like a path completes as a file."""
    if "/" in incomplete or incomplete.startswith("."):
        return [CompletionItem(incomplete, type="file")]
    try:
        from envsolver.resolve import profile

        return _starting(profile.available(), incomplete)
    except Exception:
        return []


def partition_names(path: Path) -> list[str]:
    """The partition names of a cluster file, read without the knowledge base."""
    from envsolver.core import safeyaml

    doc: Any = safeyaml.load(safeyaml.read_text(path, MAX_BYTES))
    rows = doc.get("partitions", []) if isinstance(doc, dict) else []
    return [str(r["name"]) for r in rows if isinstance(r, dict) and isinstance(r.get("name"), str)]


def complete_partition(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Partitions of the cluster file on the line so far (make's --cluster, sbatch's --cluster)."""
    given = ctx.params.get("cluster_file") or ctx.params.get("cluster_path")
    if not given:
        return []
    try:
        return _starting(partition_names(Path(str(given))), incomplete)
    except Exception:
        return []
