#!/usr/bin/env python3
"""Build envsolver's bundled offline snapshot from the real records in shared/realdata.

    python scripts/build_snapshot.py [--realdata ../shared/realdata] [--out envsolver/lock/snapshot/data]

Reads every lock file and repodata.json under shared/realdata with the normaliser that ships beside them
(extract_records.py), keeps the records of the GPU stack and of the packages ML projects add beside it (ROOTS)
and their dependency closure for linux-64, linux-aarch64 and noarch, and writes one repodata.json per channel
and subdir plus provenance.json.
Records are copied as they are (never invented or edited). Where an artefact appears in several files, the
record from a repodata.json or pixi.lock is preferred over a conda-lock v1 one (conda-lock v1 drops build
strings from depends and has no constrains). Output is deterministic: same inputs, same bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The channels envsolver's plans name. Every real legacy CUDA record (pytorch-cuda's dependencies, nvcc, the
# headers) comes from the plain nvidia channel; the one record of the nvidia/label/cuda-12.1.0 label (the
# `cuda` metapackage, md5 only) is of no plan's, so no plan names a label channel.
CHANNELS = ("conda-forge", "pytorch", "nvidia")
SUBDIRS = ("linux-64", "linux-aarch64", "noarch")
# What envsolver plans ask for; the snapshot keeps these (and PROJECT_ROOTS) and everything they depend on.
STACK_ROOTS = (
    "python",
    "pip",
    "pytorch",
    "pytorch-cuda",
    "cuda-version",
    "cuda-nvcc",
    "cuda-cudart-dev",
    "libcusparse-dev",
    "libcublas-dev",
    "libcusolver-dev",
    "libcurand-dev",
    "cuda-profiler-api",
    "gxx",
    "gxx_linux-64",
    "gxx_linux-aarch64",
    "ninja",
    "cudnn",
    "nccl",
    "deepspeed",
    "einops",
    "hjson-py",
    "msgpack-python",
    "numpy",
    "packaging",
    "psutil",
    "py-cpuinfo",
    "pydantic",
    "tqdm",
    "nvidia-ml-py",
)
# What ML projects add beside the stack (issue 31, item 6), so the tests lock such a project offline. peft has no
# conda record in shared/realdata; huggingface_hub is conda-forge's name (PyPI's huggingface-hub).
PROJECT_ROOTS = (
    "transformers",
    "datasets",
    "accelerate",
    "safetensors",
    "tokenizers",
    "huggingface_hub",
    "wandb",
    "tensorboard",
    "scipy",
    "pandas",
    "matplotlib",
    "matplotlib-base",
    "jupyterlab",
)
ROOTS = STACK_ROOTS + PROJECT_ROOTS
FORMAT_RANK = {"repodata": 0, "pixi": 1, "conda-lock": 2}
FIELDS = (
    "name",
    "version",
    "build",
    "build_number",
    "depends",
    "constrains",
    "md5",
    "sha256",
    "size",
    "timestamp",
    "subdir",
)


def load_normaliser(realdata: Path) -> Any:
    spec = importlib.util.spec_from_file_location("extract_records", realdata / "extract_records.py")
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load {realdata / 'extract_records.py'}: pass --realdata with the shared/realdata folder")
    module = importlib.util.module_from_spec(spec)
    writing, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # nothing written into the shared data folder
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writing
    return module


def format_kind(label: str | None) -> str | None:
    if not label:
        return None
    if label.startswith("repodata"):
        return "repodata"
    if label.startswith("pixi"):
        return "pixi"
    if label.startswith("conda-lock"):
        return "conda-lock"
    return None


def read_records(realdata: Path) -> list[dict[str, Any]]:
    norm = load_normaliser(realdata)
    out = []
    for path in sorted(p for p in realdata.rglob("*") if p.is_file()):
        rel = path.relative_to(realdata).as_posix()
        if path.suffix in (".md", ".py", ".txt") or "__pycache__" in path.parts:
            continue  # notes, the normaliser, and its bytecode where importing it wrote any
        label, records, _ = norm.load_file(str(path), norm.CHANNEL_HINTS.get(rel))
        kind = format_kind(label)
        if kind is None:
            continue
        for rec in records:
            rec = dict(rec)
            rec["format"] = kind
            rec["source"] = rel
            if rec.get("url") and not rec.get("channel"):
                rec["channel"] = norm.channel_of(rec["url"])
            out.append(rec)
    return out


def filename(rec: dict[str, Any]) -> str | None:
    url = rec.get("url")
    return url.rsplit("/", 1)[-1] if url else None


def usable(rec: dict[str, Any]) -> bool:
    return (
        rec.get("channel") in CHANNELS
        and rec.get("subdir") in SUBDIRS
        and bool(rec.get("sha256"))
        and bool(rec.get("md5"))
        and rec.get("depends_known") is True
        and filename(rec) is not None
    )


def choose(records: list[dict[str, Any]]) -> tuple[dict[tuple[str, str, str], dict[str, Any]], list[str]]:
    """One record per (channel, subdir, filename): the best format; conflicting hashes are dropped."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        if usable(rec):
            groups[(rec["channel"], rec["subdir"], filename(rec))].append(rec)  # type: ignore[arg-type]
    chosen = {}
    problems = []
    for key, recs in sorted(groups.items()):
        hashes = {r["sha256"] for r in recs}
        if len(hashes) > 1:
            problems.append(f"{'/'.join(key)}: sources disagree on sha256 ({sorted(hashes)}); left out")
            continue
        recs.sort(key=lambda r: (FORMAT_RANK[r["format"]], r["source"]))
        best = dict(recs[0])
        best["all_sources"] = sorted({r["source"] for r in recs})
        chosen[key] = best
    return chosen, problems


def closure(chosen: dict[tuple[str, str, str], dict[str, Any]]) -> set[str]:
    """Names reachable from ROOTS through depends (any version, any channel)."""
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in chosen.values():
        by_name[rec["name"]].append(rec)
    names: set[str] = set()
    todo = [n for n in ROOTS if n in by_name]
    while todo:
        name = todo.pop()
        if name in names:
            continue
        names.add(name)
        for rec in by_name[name]:
            for dep in rec.get("depends") or []:
                dep_name = dep.split()[0]
                if dep_name in by_name and dep_name not in names:
                    todo.append(dep_name)
    return names


def repodata_record(rec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in FIELDS:
        value = rec.get(field)
        if field == "depends":
            out[field] = list(value or [])
        elif field == "constrains":
            if value:
                out[field] = list(value)
        elif field == "build_number":
            out[field] = int(value) if value is not None else 0
        elif value is not None:
            out[field] = value
    return out


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--realdata", type=Path, default=ROOT.parent / "shared" / "realdata")
    parser.add_argument("--out", type=Path, default=ROOT / "envsolver" / "lock" / "snapshot" / "data")
    args = parser.parse_args(argv)
    if not (args.realdata / "SOURCES.md").exists():
        sys.exit(f"{args.realdata} has no SOURCES.md: pass --realdata with the shared/realdata folder")

    records = read_records(args.realdata)
    chosen, problems = choose(records)
    names = closure(chosen)
    kept = {k: r for k, r in chosen.items() if r["name"] in names}

    per_channel: dict[tuple[str, str], dict[str, Any]] = {}
    for (channel, subdir, fn), rec in kept.items():
        doc = per_channel.setdefault(
            (channel, subdir), {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}, "repodata_version": 1}
        )
        table = "packages.conda" if fn.endswith(".conda") else "packages"
        doc[table][fn] = repodata_record(rec)
    # Every channel gets every subdir (an empty noarch too) so a solver can read the channel whole.
    for channel in sorted({c for c, _ in per_channel}):
        for subdir in SUBDIRS:
            per_channel.setdefault(
                (channel, subdir),
                {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}, "repodata_version": 1},
            )

    if args.out.exists():
        for old in sorted(args.out.rglob("repodata.json")):
            old.unlink()
    for (channel, subdir), doc in sorted(per_channel.items()):
        write_json(args.out / channel / subdir / "repodata.json", doc)

    newest = max((r["timestamp"] for r in kept.values() if r.get("timestamp")), default=0)
    provenance = {
        "description": "Real conda package records copied unchanged from the files under shared/realdata "
        "(see shared/realdata/SOURCES.md for where each file came from), reduced to the GPU "
        "stack, the packages ML projects add beside it, and their dependency closure by scripts/build_snapshot.py.",
        "newest_record_timestamp_ms": newest,
        "channels": {c: f"https://conda.anaconda.org/{c}" for c in sorted({c for c, _ in per_channel})},
        "counts": {
            f"{c}/{s}": len(d["packages"]) + len(d["packages.conda"]) for (c, s), d in sorted(per_channel.items())
        },
        "sources": {f"{c}/{s}/{fn}": r["all_sources"] for (c, s, fn), r in sorted(kept.items())},
        "left_out": problems,
    }
    write_json(args.out / "provenance.json", provenance)
    total = sum(provenance["counts"].values())
    print(f"{total} records in {len(per_channel)} channel/subdir pairs written to {args.out}")
    for problem in problems:
        print(f"left out: {problem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
