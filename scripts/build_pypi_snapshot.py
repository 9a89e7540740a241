#!/usr/bin/env python3
"""Build the bundled snapshot of PyPI (envsolver/lock/pypi/data) from PyPI itself; nothing in it is written by hand.

    python scripts/build_pypi_snapshot.py [--out envsolver/lock/pypi/data] [--conda-data DIR ...] [--since 0.14.0]

What it holds, each page a PEP 691 JSON simple page of PyPI's trimmed to the releases kept (the entries as PyPI
gives them: file name, URL, sha256, size, upload time, Requires-Python, yanked):
  - deepspeed.json: DeepSpeed's releases from --since on (the releases the knowledge base covers; pins.py);
  - the user-project test set, PROJECTS (accelerate, peft): their newest release and the newest of the release
    series before it, and every release of what they require that the conda part does not hold, as `uv pip
    compile` (envsolver.lock.pypi.project.resolve_project, live) picks them for each Python of the conda
    snapshot on linux-64 and linux-aarch64, around three conda parts built from the conda snapshot (--conda-data:
    the GPU stack's Python packages, the stack with transformers/datasets/jupyterlab, every Python package it
    holds), each at its newest versions and, for the stack, at each torch release from 2.0. Each kept wheel is
    downloaded, proven by PyPI's sha256, and its *.dist-info/METADATA stored byte for byte as
    metadata/SHA256.metadata, its sha256 beside the entry as `core-metadata` (PEP 691's field);
  - the pages of the held packages that those files require, at the versions the conda snapshot holds (file lists
    only: uv takes a held package's metadata from envsolver, never from the index);
  - envsolver/kb/data/cuda_wheels.json: the CUDA library wheels PyPI's torch pulls in on Linux (uv's resolve of
    `torch==V` for x86_64 and aarch64 manylinux, less its resolve for macOS), for each torch release the conda
    snapshot holds.

Files kept: the wheels some target takes (CPython 3.10+ of the conda snapshot, Linux x86_64 or aarch64, glibc up
to 2.40; pure wheels) and the sdist. Re-run after the conda snapshot changes (scripts/build_snapshot.py): the held
versions and the Pythons are read from it. Downloads are kept in ~/.cache/envsolver-pypi-snapshot by sha256.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envsolver.core.errors import EnvsolverError  # noqa: E402
from envsolver.core.versions import MajorMinor  # noqa: E402
from envsolver.kb import cuda_wheels as kb_cuda_wheels  # noqa: E402
from envsolver.kb import load_kb  # noqa: E402
from envsolver.lock.pypi import condamap, uvrun  # noqa: E402
from envsolver.lock.pypi.target import Target  # noqa: E402
from envsolver.net import coremeta  # noqa: E402
from envsolver.net.pypi_index import name_version  # noqa: E402

PROJECTS = ("accelerate", "peft")
DEEPSPEED = "deepspeed"
KEEP = ("filename", "url", "hashes", "requires-python", "size", "upload-time", "yanked")
FAMILIES = {  # conda roots whose dependency closure is a conda part (None: every Python package of the snapshot)
    "stack": ("pytorch", "deepspeed"),
    "project": ("pytorch", "deepspeed", "transformers", "datasets", "jupyterlab"),
    "all": None,
}
PLATFORMS = ("linux-64", "linux-aarch64")
# Projects as the tests lock them: make's offline conda part for an a100 with these conda packages (`--add`), and
# these PyPI requirements resolved beside it (with the older release of the first one too, for `make --update`).
PROJECT_SCENARIOS = (
    (
        ("jupyterlab", "scipy", "pandas", "huggingface_hub", "safetensors", "tokenizers"),
        ("accelerate", "transformers", "datasets", "peft"),
    ),
    ((), ("accelerate", "peft")),  # the stack alone and the PyPI part (`make --offline --add-pypi accelerate`)
)
GLIBC = MajorMinor(2, 28)  # the target the scenarios resolve for; files are kept up to KEEP_GLIBC
KEEP_GLIBC = MajorMinor(2, 40)
CACHE = Path.home() / ".cache" / "envsolver-pypi-snapshot"
LINUX = ("x86_64-manylinux_2_28", "aarch64-manylinux_2_28")
MACOS = "aarch64-apple-darwin"  # macOS 15 (MACOSX_DEPLOYMENT_TARGET): PyPI's torch there is CPU only


def page(project: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"https://pypi.org/simple/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        doc: dict[str, Any] = json.loads(response.read(64 << 20))
    return doc


def version_of(filename: str) -> Version | None:
    found = name_version(filename)
    try:
        return Version(found[1]) if found else None
    except InvalidVersion:
        return None


def conda_records(dirs: list[Path]) -> list[dict[str, Any]]:
    out = []
    for data in dirs:
        for path in sorted(data.glob("*/*/repodata.json")):
            doc = json.loads(path.read_text())
            for table in ("packages", "packages.conda"):
                out += list(doc.get(table, {}).values())
    return out


def closure(records: list[dict[str, Any]], roots: tuple[str, ...] | None) -> set[str]:
    """The conda names reachable from `roots` through any record's depends (every name where roots is None)."""
    names = {r["name"] for r in records}
    if roots is None:
        return names
    depends: dict[str, set[str]] = defaultdict(set)
    for r in records:
        depends[r["name"]] |= {d.split()[0] for d in r.get("depends", ())}
    seen, todo = set(), [n for n in roots if n in names]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [d for d in depends[name] if d in names]
    return seen


def held_versions(records: list[dict[str, Any]], names: set[str], subdir: str) -> dict[str, list[str]]:
    """PyPI name -> the versions (newest first) the conda records of `names` hold for `subdir` (and noarch)."""
    kb = load_kb()
    out: dict[str, set[str]] = defaultdict(set)
    for r in records:
        if r["name"] in names and r["subdir"] in (subdir, "noarch"):
            for pypi, version in condamap.held_by_conda([_Rec(r["name"], r["version"])], kb).items():
                out[pypi].add(version)
    return {n: sorted(v, key=Version, reverse=True) for n, v in out.items()}


class _Rec:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


def pythons(records: list[dict[str, Any]]) -> list[MajorMinor]:
    found = {MajorMinor(*Version(r["version"]).release[:2]) for r in records if r["name"] == "python"}
    return sorted(p for p in found if p >= MajorMinor(3, 10))


def releases(project: str) -> tuple[str, str]:
    """(the newest release, the newest of the release series before it) of PROJECT on PyPI (no pre-releases)."""
    doc = page(project)
    versions = sorted({v for f in doc["files"] if (v := version_of(f["filename"])) and not v.is_prerelease})
    newest = versions[-1]
    older = max(v for v in versions if v.release[:2] < newest.release[:2])
    return str(newest), str(older)


def scenarios(records: list[dict[str, Any]], py: list[MajorMinor]) -> list[tuple[list[str], dict[str, str], Target]]:
    new_a, old_a = releases("accelerate")
    new_p, old_p = releases("peft")
    pins = [["accelerate", "peft"], [f"accelerate=={old_a}", f"peft=={old_p}"], ["accelerate", f"peft=={old_p}"]]
    print(f"accelerate {new_a} and {old_a}, peft {new_p} and {old_p}")
    out = []
    for family, roots in FAMILIES.items():
        names = closure(records, roots)
        for platform in PLATFORMS:
            versions = held_versions(records, names, platform)
            newest = {n: v[0] for n, v in versions.items() if n not in PROJECTS}
            for python in py:
                for reqs in pins:
                    out.append((reqs, newest, Target(python, platform, GLIBC)))  # type: ignore[arg-type]
            if family == "stack" and platform == "linux-64":
                for torch in versions.get("torch", []):
                    if Version(torch) >= Version("2.0"):
                        sweep = MajorMinor(3, 11) if MajorMinor(3, 11) in py else py[0]  # every torch from 2.0 has it
                        out.append((["accelerate", "peft"], {**newest, "torch": torch}, Target(sweep, platform, GLIBC)))  # type: ignore[arg-type]
    return out + project_scenarios()


def project_scenarios() -> list[tuple[list[str], dict[str, str], Target]]:
    """PROJECT_SCENARIOS with the held versions of the conda part make locks offline for them (the same records the
    tests' make solves, so the PyPI part uv resolves here is the one they lock)."""
    from envsolver.lock import run
    from envsolver.resolve.inputs import Options, build_target

    kb = load_kb()
    out = []
    for conda, pypi in PROJECT_SCENARIOS:
        target = build_target(Options(gpus=("a100",), add=conda), kb).target
        with tempfile.TemporaryDirectory(prefix="envsolver-snapshot-conda-") as cache:
            locked = run._lock_conda(target, kb, "offline", (), Path(cache), lambda _: None)
        plan = locked.plan
        held = condamap.conda_provides(locked.records[plan.platform], kb).held
        if plan.deepspeed and plan.pip:
            held[DEEPSPEED] = plan.deepspeed
        _, older = releases(pypi[0])
        print(f"project {' '.join(conda)} + {' '.join(pypi)}: torch {plan.torch_version}, py{plan.python_version}")
        glibc = MajorMinor(*map(int, plan.virtual_packages["__glibc"].split(".")[:2]))
        for first in (pypi[0], f"{pypi[0]}=={older}"):
            out.append(([first, *pypi[1:]], held, Target(plan.python_version, plan.platform, glibc)))
    return out


def resolve_all(cases: list[tuple[list[str], dict[str, str], Target]]) -> dict[str, set[str]]:
    """name -> the versions uv locked in some scenario."""
    from envsolver.lock.pypi.project import resolve_project

    kept: dict[str, set[str]] = defaultdict(set)
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("ENVSOLVER_PYPI_INDEX", "PIP_INDEX_URL")}
    for n, (reqs, held, target) in enumerate(cases, 1):
        try:
            part = resolve_project(
                reqs, held, target.python, target.platform, target.glibc, "live", env, CACHE / "envsolver",
                lambda _: None,
            )  # fmt: skip
        except EnvsolverError as exc:
            print(f"  [{n}/{len(cases)}] {reqs} py{target.python} {target.platform}: refused ({str(exc)[:160]})")
            continue
        for record in part.records:
            kept[record.name].add(record.version)
        where = f"py{target.python} {target.platform} torch {held.get('torch')}"
        print(f"  [{n}/{len(cases)}] {reqs} {where}: {len(part.records)} files")
    return kept


def targets(py: list[MajorMinor]) -> list[Target]:
    return [Target(p, platform, KEEP_GLIBC) for p in py for platform in PLATFORMS]  # type: ignore[arg-type]


def kept_files(doc: dict[str, Any], versions: set[str], every: list[Target]) -> list[dict[str, Any]]:
    out = []
    for f in doc["files"]:
        v = version_of(f["filename"])
        if v is None or str(v) not in versions:
            continue
        if f["filename"].endswith(".whl") and not any(t.rank(f["filename"]) is not None for t in every):
            continue
        out.append({k: f[k] for k in KEEP if k in f})
    return sorted(out, key=lambda f: str(f["filename"]))


def download(entry: dict[str, Any]) -> Path:
    sha = entry["hashes"]["sha256"]
    path = CACHE / "files" / sha
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(entry["url"], timeout=300) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha:
        raise SystemExit(f"{entry['filename']}: sha256 differs from PyPI's page")
    path.write_bytes(data)
    return path


def metadata_of(entry: dict[str, Any]) -> bytes:
    with zipfile.ZipFile(download(entry)) as archive:
        found = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(found) != 1:
            raise SystemExit(f"{entry['filename']}: {len(found)} top-level METADATA files")
        data = archive.read(found[0])
    name, version = name_version(entry["filename"]) or ("", "")
    coremeta.parse(data, name=name, version=version)
    return data


def write_page(
    out: Path, project: str, doc: dict[str, Any], files: list[dict[str, Any]], today: str, **extra: Any
) -> None:
    body = {
        "project": project,
        "index": f"https://pypi.org/simple/{project}/",
        "fetched": today,
        "meta": doc.get("meta"),
        **extra,
        "files": files,
    }
    (out / f"{project}.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def cuda_wheels(records: list[dict[str, Any]], py: list[MajorMinor], out: Path, today: str) -> None:
    """kb/data/cuda_wheels.json: the distributions torch==V requires directly on Linux and not on macOS (uv's
    annotations: `# via torch`), and the nvidia-* distributions those require in turn (NVIDIA publishes its CUDA
    libraries on PyPI as nvidia-*: cuda-toolkit's extras pull them in), for each torch release of the snapshot."""
    releases = {r["version"] for r in records if r["name"] == "pytorch" and Version(r["version"]) >= Version("2.0")}
    names: dict[str, set[str]] = defaultdict(set)
    for version in sorted(releases, key=Version):
        for python in reversed(py):
            linux = [_uv_graph(f"torch=={version}", python, p) for p in LINUX]
            mac = _uv_graph(f"torch=={version}", python, MACOS)
            if linux[0] is not None and mac is not None:
                break
        else:
            print(f"  torch {version}: no Python of the snapshot resolves it on PyPI for Linux and macOS; left out")
            continue
        found: set[str] = set()
        for graph in (g for g in linux if g is not None):
            direct = {n for n, via in graph.items() if "torch" in via} - {n for n, via in mac.items() if "torch" in via}
            todo = list(direct)
            while todo:
                name = todo.pop()
                if name not in found:
                    found.add(name)
                    todo += [n for n, via in graph.items() if name in via and n.startswith("nvidia-")]
        for name in found | {"torch"}:  # torch itself: in an envsolver lock it comes from conda, always
            names[name].add(version)
        print(f"  torch {version}: {sorted(found)}")
    doc = {
        "description": "torch, and the distributions PyPI's torch requires on Linux and not on macOS (its "
        "Requires-Dist marked platform_system == 'Linux': the CUDA libraries and triton), and the nvidia-* ones "
        "those require, for each torch release of the conda snapshot",
        "source": "uv pip compile torch==V --python-platform x86_64-manylinux_2_28 and aarch64-manylinux_2_28 (its "
        f"`# via` annotations), less the same for {MACOS}, against https://pypi.org/simple "
        "(scripts/build_pypi_snapshot.py)",
        "fetched": today,
        "names": {n: sorted(v, key=Version) for n, v in sorted(names.items())},
    }
    kb_cuda_wheels.path().write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _uv_graph(requirement: str, python: MajorMinor, platform: str) -> dict[str, set[str]] | None:
    """name -> the names uv says it is required by (`# via`), of uv's resolve of `requirement`; None: no solution."""
    import os

    uv = uvrun.binary()
    with tempfile.TemporaryDirectory(prefix="envsolver-snapshot-uv-") as tmp:
        (Path(tmp) / "req.in").write_text(requirement + "\n")
        request = uvrun.Request((), (), (), (), (), Target(python, "linux-64", GLIBC), "https://pypi.org/simple", None)
        env, flags = uvrun.environment(request, os.environ, Path(tmp))
        env["MACOSX_DEPLOYMENT_TARGET"] = "15.0"  # uv's macOS default is 13.0; torch 2.12+ has 14.0 wheels only
        argv = [str(uv), "pip", "compile", "req.in", "--no-config", "--python", sys.executable, "--no-python-downloads",
                "--python-version", str(python), "--python-platform", platform, "--no-build", "--no-header",
                "--annotation-style", "line", "--quiet", "--cache-dir", str(CACHE / "uv"), *flags]  # fmt: skip
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return None
    graph: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        spec, _, via = line.partition("# via ")
        if "==" in spec:
            parents = [v.strip() for v in via.split(",")]
            graph[str(canonicalize_name(spec.split("==")[0].strip()))] = {
                str(canonicalize_name(v)) for v in parents if v and not v.startswith("-r")
            }
    return graph


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "envsolver" / "lock" / "pypi" / "data")
    parser.add_argument("--conda-data", type=Path, action="append", help="a conda snapshot data directory")
    parser.add_argument("--since", default="0.14.0", help="the oldest DeepSpeed release kept")
    args = parser.parse_args()
    dirs = args.conda_data or [ROOT / "envsolver" / "lock" / "snapshot" / "data"]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    records = conda_records(dirs)
    py = pythons(records)
    print(f"conda snapshot: {len(records)} records from {', '.join(map(str, dirs))}; Pythons {', '.join(map(str, py))}")

    written = {DEEPSPEED}
    doc = page(DEEPSPEED)
    since = Version(args.since)
    files = [{k: f[k] for k in KEEP if k in f} for f in doc["files"] if (v := version_of(f["filename"])) and v >= since]
    write_page(out, DEEPSPEED, doc, sorted(files, key=lambda f: str(f["filename"])), today, since=args.since)

    cuda_wheels(records, py, out, today)  # first: resolve_project refuses what it names
    kb_cuda_wheels.names.cache_clear()
    kept = resolve_all(scenarios(records, py))
    every = targets(py)
    (out / "metadata").mkdir(exist_ok=True)
    used: set[str] = set()
    required: set[str] = set()
    pages: dict[str, dict[str, Any]] = {}
    for name, versions in sorted(kept.items()):  # the resolved releases: their files and metadata
        pages[name] = page(name)
        for entry in kept_files(pages[name], versions, every):
            if entry["filename"].endswith(".whl"):
                data = metadata_of(entry)
                required |= {  # what installs with it (not what an extra adds)
                    str(canonicalize_name(r.name))
                    for r in coremeta.parse(data).requires_dist
                    if r.marker is None or "extra" not in str(r.marker)
                }
    held: dict[str, set[str]] = defaultdict(set)
    for platform in PLATFORMS:
        for name, versions in held_versions(records, closure(records, None), platform).items():
            held[name] |= set(versions)
    for name in sorted(set(kept) | (required & set(held))):
        doc = pages.get(name) or page(name)
        resolved, holds = kept.get(name, set()), held[name] if name in required else set()
        files = kept_files(doc, resolved | holds, every)
        for entry in files:
            # a page with resolved releases has every wheel's metadata: where the project is not held, uv may weigh
            # any of its releases; a held-only page (torch, numpy) is a file list: uv weighs only the held version
            if entry["filename"].endswith(".whl") and resolved:
                data = metadata_of(entry)
                sha = hashlib.sha256(data).hexdigest()
                (out / "metadata" / f"{sha}.metadata").write_bytes(data)
                entry["core-metadata"] = {"sha256": sha}
                used.add(sha)
        on_pypi = {str(v) for f in files if (v := version_of(f["filename"]))}
        kept_doc = {
            "resolved": sorted(resolved, key=Version),  # with their files' metadata
            "held": sorted(holds, key=Version),  # the conda snapshot's versions: file lists only
            "held_missing": sorted(holds - on_pypi, key=Version),  # held versions PyPI has no file of for the targets
        }
        write_page(out, name, doc, files, today, kept=kept_doc)
        written.add(name)
        print(f"{name}: {len(files)} files; resolved {sorted(resolved, key=Version)}, held {len(holds)} versions")

    for path in out.glob("*.json"):
        if path.stem not in written:
            path.unlink()
    for path in (out / "metadata").glob("*.metadata"):
        if path.stem not in used:
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
