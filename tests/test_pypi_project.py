"""The user's PyPI requirements resolved by uv around the conda part (envsolver.lock.pypi.project.resolve_project):
offline from the bundled snapshot of PyPI (real pages and metadata, served on loopback), the held packages never in
the result, the files and sha256 PyPI's own, an existing lock's versions kept and freed by --update, a held version
PyPI lacks, the refusals with their ways out (each run), and uv kept from the user's UV_* and PIP_* settings. One
test reads real PyPI and skips without it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from envsolver.core.errors import BadInputError, ConflictError
from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase
from envsolver.lock.pypi import condamap, guards, snapshot
from envsolver.lock.pypi.project import ProjectPart, UvFailed, resolve_project
from envsolver.lock.solve import Record
from envsolver.net import coremeta
from envsolver.net import pypi_index as index
from tests import httplab

PY = MajorMinor(3, 12)
GLIBC = MajorMinor(2, 28)
NEVER = ("torch", "triton", "numpy", "transformers", "huggingface-hub", "safetensors", "tokenizers", "pyyaml")


@cache
def held_pages() -> dict[str, str]:
    """name -> the newest version the conda snapshot holds that PyPI has (the bundled pages' `kept.held`): the
    conda part of a project with transformers, datasets and jupyterlab beside the GPU stack."""
    out = {}
    for path in sorted(snapshot.data_dir().glob("*.json")):
        found = snapshot.page(path.stem)
        assert found is not None, path
        import json

        kept = json.loads(path.read_text()).get("kept", {})
        versions = [v for v in kept.get("held", []) if v not in kept.get("held_missing", [])]
        if versions and path.stem not in ("accelerate", "peft"):  # what the tests ask PyPI for
            out[path.stem] = max(versions, key=Version)
    return out


HELD = {**held_pages(), "torch": "2.9.1"}  # torch 2.9.1: the GPU stack's (a conda build PyPI also has)


def _resolve(
    requirements: list[str],
    held: Mapping[str, str] = HELD,
    *,
    mode: str = "offline",
    environ: Mapping[str, str] | None = None,
    python: MajorMinor = PY,
    platform: str = "linux-64",
    progress: list[str] | None = None,
    tmp: Path | None = None,
    **kw: object,
) -> ProjectPart:
    seen = progress if progress is not None else []
    return resolve_project(
        requirements, held, python, platform, GLIBC, mode, environ if environ is not None else dict(os.environ),  # type: ignore[arg-type]
        tmp or Path("/nonexistent-cache"), seen.append, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_offline_accelerate_and_peft_resolve_beside_the_held_conda_part() -> None:
    seen: list[str] = []
    part = _resolve(["accelerate", "peft"], progress=seen)
    names = {r.name for r in part.records}
    assert {"accelerate", "peft"} <= names, names
    assert not names & set(HELD), f"held packages in the PyPI part: {sorted(names & set(HELD))}"
    assert not [n for n in names if n in NEVER or n.startswith(("nvidia-", "cuda-"))], names
    assert part.snapshot_date == snapshot.date() and "bundled PyPI snapshot" in part.index, part
    assert part.warnings == () and part.sdists == (), part
    for record in part.records:
        real = snapshot.by_sha256(record.name, record.sha256)
        assert real is not None and real.filename == record.filename, f"{record.filename}: not PyPI's file"
        assert record.url == real.url and record.url.startswith("https://files.pythonhosted.org/"), record.url
    accelerate = next(r for r in part.records if r.name == "accelerate")
    entry = snapshot.by_sha256("accelerate", accelerate.sha256)
    assert entry is not None and entry.core_metadata
    meta = coremeta.parse(snapshot.metadata(entry.core_metadata) or b"")
    wanted = {  # its METADATA's Requires-Dist that apply with no extra: exactly what the record says
        str(canonicalize_name(r.name)): str(r.specifier) or "*"
        for r in meta.requires_dist
        if r.marker is None or r.marker.evaluate({"extra": "", "python_version": "3.12"})
    }
    assert dict(accelerate.dependencies) == wanted, (accelerate.dependencies, wanted)
    assert ("torch", str(Requirement(next(str(r) for r in meta.requires_dist if r.name == "torch")).specifier)) in (
        accelerate.dependencies
    ), "torch stays a requirement, met by the conda part"
    assert _resolve(["accelerate", "peft"]).records == part.records, "the same inputs lock the same files"


@pytest.mark.parametrize(
    ("python", "platform"), [(MajorMinor(3, 10), "linux-aarch64"), (MajorMinor(3, 13), "linux-64")]
)
def test_the_files_are_the_targets_not_this_hosts(python: MajorMinor, platform: str) -> None:
    from envsolver.lock.pypi.target import Target

    part = _resolve(["accelerate", "peft"], python=python, platform=platform)
    target = Target(python, platform, GLIBC)  # type: ignore[arg-type]
    for record in part.records:
        assert target.rank(record.filename) is not None, f"{record.filename} does not install on {target}"
    machine = "aarch64" if platform == "linux-aarch64" else "x86_64"
    assert all(machine in r.filename or "-none-any" in r.filename or "abi3" in r.filename for r in part.records)


def test_an_existing_locks_versions_are_kept_and_update_frees_one() -> None:
    pages = {name: snapshot.page(name) for name in ("accelerate", "peft")}
    older = {n: str(min(Version(f.version) for f in p[1])) for n, p in pages.items() if p}  # type: ignore[misc]
    newest = {n: str(max(Version(f.version) for f in p[1])) for n, p in pages.items() if p}  # type: ignore[misc]
    assert older != newest, (older, newest)
    first = _resolve([f"{n}=={v}" for n, v in older.items()])
    locked = {r.name: r.version for r in first.records}
    kept = _resolve(["accelerate", "peft"], preferences=locked)
    assert {r.name: r.version for r in kept.records} == locked, "an existing lock's versions are kept"
    moved = _resolve(["accelerate", "peft"], preferences=locked, upgrade=frozenset({"accelerate"}))
    versions = {r.name: r.version for r in moved.records}
    assert versions["accelerate"] == newest["accelerate"] and versions["peft"] == older["peft"], versions
    changed = {n for n in versions if locked.get(n) != versions[n]}
    assert "accelerate" in changed and "peft" not in changed, changed


def test_a_held_version_pypi_lacks_is_left_out_of_uvs_resolution_and_checked_after() -> None:
    seen: list[str] = []
    # numpy 1.18.5: a version the conda snapshot holds and PyPI has no wheel of for Python 3.12
    part = _resolve(["accelerate"], {**HELD, "numpy": "1.18.5"}, progress=seen)
    assert "numpy" not in {r.name for r in part.records}, part.records
    assert any("has no wheel of numpy 1.18.5" in line for line in seen), seen
    # and where the held version does not meet a locked file's requirement: refused, naming both
    with pytest.raises(guards.PypiRefused) as caught:
        _resolve(["accelerate"], {**HELD, "numpy": "1.16.0"})
    message = str(caught.value)
    assert "requires numpy>=" in message and "the lock holds numpy 1.16.0" in message, message
    assert "the index has no wheel for Python 3.12" in message and "'accelerate'" in message, message


@pytest.mark.parametrize(
    ("requirement", "words", "needs"),
    [
        ("torch<2.4", ["names torch", "holds at 2.9.1", "from conda's pytorch", "does not satisfy it"], "torch<2.4"),
        ("numpy<2", ["names numpy", "does not satisfy it", "Drop 'numpy<2' from the PyPI list"], "numpy<2"),
        ("nvidia-cublas-cu12", ["a CUDA library wheel", "come from conda", "Drop it from the PyPI list:"], None),
        ("triton", ["a CUDA library wheel"], None),
    ],
)
def test_a_requirement_naming_what_conda_provides_is_refused_with_the_fix(
    requirement: str, words: list[str], needs: str | None
) -> None:
    """Refused (exit 1) with a fix that always works (drop it); what a conda solve could be asked for instead is
    carried for make, which locks it before naming it (lock/pippart.py), never named here unproven."""
    conda = condamap.CondaProvides(dict(HELD), {}, {"torch": "pytorch", "numpy": "numpy"})
    with pytest.raises(guards.PypiRefused) as caught:
        _resolve(["accelerate", requirement], conda=conda)
    message = str(caught.value)
    for word in words:
        assert word in message, (word, message)
    assert "--add" not in message, f"an unproven conda way out: {message}"
    assert caught.value.exit_code == 1 and caught.value.requirement == requirement, caught.value
    assert caught.value.conda_needs == ((needs,) if needs else ()), caught.value.conda_needs


def test_a_requirement_the_conda_part_meets_is_a_constraint_and_nothing_comes_from_pypi() -> None:
    conda = condamap.CondaProvides(dict(HELD), {}, {"torch": "pytorch", "numpy": "numpy"})
    part = _resolve(["accelerate", "torch>=2.0", "numpy"], conda=conda)
    names = {r.name for r in part.records}
    assert "accelerate" in names and not names & {"torch", "numpy"}, names


def test_a_second_copy_of_a_conda_package_the_mapping_cannot_version_is_refused(kb: KnowledgeBase) -> None:
    record = Record("ninja", "1.13.0", "h0", 0, "linux-64", "conda-forge", "https://x/ninja-1.13.0-h0.conda",
                    "0" * 32, "0" * 64, None, (), ())  # fmt: skip
    conda = condamap.conda_provides([record], kb)
    with pytest.raises(guards.PypiRefused) as caught:
        _resolve(["ninja"], conda=conda)
    assert "conda package ninja" in str(caught.value) and "second one" in str(caught.value), str(caught.value)


def test_the_requirement_chain_that_pulls_a_cuda_wheel_is_named() -> None:
    from envsolver.lock.pypi.requirements import parse
    from envsolver.lock.pypi.target import Target

    roots, _ = parse(["peft"], Target(PY, "linux-64", GLIBC))
    graph = {"peft": ["accelerate", "torch"], "accelerate": ["torch"], "torch": ["nvidia-cudnn-cu12"]}
    with pytest.raises(guards.PypiRefused) as caught:
        guards.check_resolved(["peft", "accelerate", "nvidia-cudnn-cu12"], graph, roots, {}, {}, {})
    message = str(caught.value)
    assert "(peft -> torch -> nvidia-cudnn-cu12)" in message and "CUDA library wheel" in message, message
    assert "Drop 'peft' from the PyPI list" in message and "--add" not in message, message
    assert caught.value.conda_needs == ("peft",), "make tries peft from conda before naming it"


def test_no_solution_names_the_requirement_and_the_held_package_and_ways_out_that_resolve() -> None:
    seen: list[str] = []
    with pytest.raises(guards.PypiRefused) as caught:
        _resolve(["accelerate>=1.16", "peft"], {**HELD, "torch": "2.5.1"}, progress=seen)
    message = str(caught.value)
    assert "'accelerate>=1.16'" in message and "torch 2.5.1" in message, message
    assert "accelerate 1.16.0 requires torch>=" in message, message
    assert caught.value.conda_needs and caught.value.conda_needs[0].startswith("torch>="), caught.value.conda_needs
    for way in caught.value.ways_out:  # each was run: check it does resolve
        if way.startswith("drop "):
            dropped = way.split("'")[1]
            _resolve([r for r in ["accelerate>=1.16", "peft"] if r != dropped], {**HELD, "torch": "2.5.1"})
        elif way.startswith("ask for "):
            pin = way.split()[2]
            _resolve([pin, "peft"], {**HELD, "torch": "2.5.1"})
    assert caught.value.ways_out, message
    assert any("No solution found" in line for line in seen), "uv's own words go to progress (-v)"


@pytest.mark.parametrize(
    "requirement",
    ["accelerate; rm -rf ~", "accelerate$(touch /tmp/x)", "accelerate @ https://evil.example/a-1.0-py3-none-any.whl"],
)
def test_a_hostile_requirement_never_reaches_uv(requirement: str) -> None:
    with pytest.raises(BadInputError):
        _resolve([requirement], mode="live", environ={"ENVSOLVER_PYPI_INDEX": "http://127.0.0.1:9/simple"})


def test_the_users_uv_and_pip_settings_never_reach_uv(tmp_path: Path) -> None:
    (tmp_path / "uv.toml").write_text('index-url = "http://127.0.0.1:9/evil"\n')
    hostile = {
        **os.environ,
        "HOME": str(tmp_path),
        "UV_INDEX_URL": "http://127.0.0.1:9/evil",
        "UV_DEFAULT_INDEX": "http://127.0.0.1:9/evil",
        "UV_EXCLUDE_NEWER": "1990-01-01T00:00:00Z",
        "UV_CONFIG_FILE": str(tmp_path / "uv.toml"),
        "UV_CONSTRAINT": str(tmp_path / "nothing.txt"),
        "UV_OFFLINE": "1",
        "PIP_INDEX_URL": "http://127.0.0.1:9/evil",
        "PYTHONPATH": str(tmp_path),
    }
    assert _resolve(["accelerate"], environ=hostile).records == _resolve(["accelerate"]).records


def test_an_unreadable_index_falls_back_to_the_snapshot_with_one_warning() -> None:
    part = _resolve(["accelerate"], mode="live", environ={"ENVSOLVER_PYPI_INDEX": "http://127.0.0.1:9/simple"})
    assert len(part.warnings) == 1 and "could not be read" in part.warnings[0], part.warnings
    assert part.snapshot_date == snapshot.date() and part.records == _resolve(["accelerate"]).records


def test_a_trickling_index_falls_back_to_the_snapshot_within_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    with httplab.serve(tmp_path / "index", httplab.Faults(trickle_s=0.5, trickle_headers=True)) as lab:
        started = time.monotonic()
        environ = {"ENVSOLVER_PYPI_INDEX": f"{lab.url}/simple", index.DEADLINE_ENV: "1"}
        part = _resolve(["accelerate"], mode="live", environ=environ)
        took = time.monotonic() - started
    assert len(part.warnings) == 1 and "not done within 1 s" in part.warnings[0], part.warnings
    assert part.records == _resolve(["accelerate"]).records and took < 30, f"{took:.1f} s"


def test_offline_a_package_the_snapshot_holds_no_metadata_of_is_named() -> None:
    held = {k: v for k, v in HELD.items() if k != "psutil"}  # psutil's page is a held one (conda's): no metadata
    with pytest.raises(UvFailed) as caught:
        _resolve(["accelerate"], held)
    assert "does not hold the metadata of psutil" in str(caught.value), str(caught.value)


def test_a_project_the_index_does_not_have_is_named() -> None:
    with pytest.raises(ConflictError) as caught:
        _resolve(["accelerate", "no-such-project-here"])
    assert "holds no page for no-such-project-here" in str(caught.value), str(caught.value)


def test_no_requirements_no_part() -> None:
    part = _resolve([])
    assert part.records == () and part.index == "", part


@cache
def _pypi_reachable() -> bool:
    try:
        index.fetch("accelerate", index.PYPI, {k: v for k, v in os.environ.items() if k != "ENVSOLVER_PYPI_INDEX"})
    except index.IndexUnreadable:
        return False
    return True


@pytest.mark.network
def test_live_pypi_locks_accelerate_with_pypis_own_files_and_hashes(tmp_path: Path) -> None:
    if not _pypi_reachable():
        pytest.skip("PyPI (https://pypi.org/simple) cannot be reached from here")
    env = {k: v for k, v in os.environ.items() if k not in ("ENVSOLVER_PYPI_INDEX", "PIP_INDEX_URL")}
    start = time.monotonic()
    part = _resolve(["accelerate", "peft"], mode="live", environ=env, tmp=tmp_path)
    took = time.monotonic() - start
    assert part.snapshot_date is None and part.index == index.PYPI and part.warnings == (), part
    names = {r.name for r in part.records}
    assert {"accelerate", "peft"} <= names and not names & set(NEVER), names
    for record in part.records[:5]:
        page = index.fetch(record.name, index.PYPI, env)
        assert any(f.filename == record.filename and f.sha256 == record.sha256 for f in page), record
    # torch held out: the resolution that would pull PyPI's torch and its CUDA wheels is refused, naming the chain
    with pytest.raises(guards.PypiRefused) as caught:
        _resolve(
            ["accelerate"], {k: v for k, v in HELD.items() if k != "torch"}, mode="live", environ=env, tmp=tmp_path
        )
    assert "accelerate -> torch" in str(caught.value), str(caught.value)
    with pytest.raises(ConflictError) as missing:
        _resolve(["no-such-project-envsolver-test"], mode="live", environ=env, tmp=tmp_path)
    assert "has no project named 'no-such-project-envsolver-test'" in str(missing.value), str(missing.value)
    print(f"live resolve of accelerate + peft: {took:.1f} s")
