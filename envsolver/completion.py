"""Shell completion values for click's completion (`_ENVSOLVER_COMPLETE=bash_source envsolver`): GPU keys and
aliases for --gpu, profile names for --profile, partition names from the cluster file given on the same line.

Completion runs on every Tab, so it reads only what it needs: gpus.yaml (not the whole knowledge base), the
profile directory's listing, the cluster file's partition names. It never raises: anything that cannot be read
completes to nothing. Check ids complete through click.Choice, which needs nothing here.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

MAX_BYTES = 1 << 20  # a cluster file larger than this completes to nothing


def _starting(words: list[str], incomplete: str) -> list[CompletionItem]:
    low = incomplete.lower()
    return [CompletionItem(w) for w in dict.fromkeys(words) if w.lower().startswith(low)]


def gpu_names() -> list[str]:
    """'auto', then every GPU key and alias in the knowledge base's gpus.yaml, in its order."""
    from envsolver import safeyaml

    text = files("envsolver.kb").joinpath("data/gpus.yaml").read_text(encoding="utf-8")
    doc = safeyaml.load(text, safeyaml.Limits(chars=len(text) + 1))
    names = ["auto"]
    for row in doc.get("gpus", []) if isinstance(doc, dict) else []:
        if isinstance(row, dict):
            names += [str(row.get("key", ""))] + [str(a) for a in row.get("aliases") or []]
    return [n for n in names if n]


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
        from envsolver import profile

        return _starting(profile.available(), incomplete)
    except Exception:
        return []


def partition_names(path: Path) -> list[str]:
    """The partition names of a cluster file, read without the knowledge base."""
    from envsolver import safeyaml

    doc: Any = safeyaml.load(safeyaml.read_text(path, MAX_BYTES))
    rows = doc.get("partitions", []) if isinstance(doc, dict) else []
    return [str(r["name"]) for r in rows if isinstance(r, dict) and isinstance(r.get("name"), str)]


def complete_partition(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Partitions of the cluster file on the line so far (make's --cluster, sbatch's -c/--cluster)."""
    given = ctx.params.get("cluster_file") or ctx.params.get("cluster_path")
    if not given:
        return []
    try:
        return _starting(partition_names(Path(str(given))), incomplete)
    except Exception:
        return []
