"""The bundled snapshot: rebuilt from shared/realdata byte for byte, every record traced to its source file."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from envsolver.kb import KnowledgeBase
from envsolver.lock import snapshot
from envsolver.lock.snapshot import coverage

ROOT = Path(__file__).resolve().parent.parent
REALDATA = ROOT.parent / "shared" / "realdata"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cache_dir() -> Path:
    """Where parsed realdata files are kept between runs (as tests/test_pip_part.py keeps PyPI's sdist)."""
    return Path(os.environ.get("ENVSOLVER_TEST_CACHE") or Path.home() / ".cache" / "envsolver-tests") / "realdata"


class _KeptNormaliser:
    """shared/realdata's normaliser (extract_records.py, not ours), whose answer for a file is kept on disk under
    everything it depends on: the file's path and bytes, the channel hint, the normaliser's own source, PyYAML's
    version and C loader, and Python's version. Parsing the lock files' YAML is most of a rebuild (about 6 of 7 s
    of CPU); build_snapshot.py's own work (choosing, the closure, writing) runs every time. An answer that JSON
    does not give back equal is never kept."""

    def __init__(self, module: Any, cache: Path) -> None:
        self._module = module
        self._cache = cache
        source = Path(module.__file__).read_bytes()
        self._salt = repr((hashlib.sha256(source).hexdigest(), yaml.__version__, yaml.__with_libyaml__, sys.version))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def load_file(self, path: str, hint: str | None) -> tuple[Any, ...]:
        key = hashlib.sha256(repr((self._salt, path, hint)).encode() + Path(path).read_bytes()).hexdigest()
        kept = self._cache / f"{key}.json"
        with contextlib.suppress(OSError, ValueError):
            label, records, n = json.loads(kept.read_text(encoding="utf-8"))
            return label, records, n
        answer = self._module.load_file(path, hint)
        text = json.dumps(list(answer))
        if json.loads(text) == list(answer) and all(isinstance(r, dict) for r in answer[1]):
            with contextlib.suppress(OSError):  # a cache that cannot be written is only not kept
                self._cache.mkdir(parents=True, exist_ok=True)
                part = kept.with_suffix(f".{os.getpid()}.part")
                part.write_text(text, encoding="utf-8")
                part.replace(kept)
        return tuple(answer)


@pytest.mark.skipif(not (REALDATA / "SOURCES.md").exists(), reason="needs ../shared/realdata beside the checkout")
def test_snapshot_rebuilds_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("build_snapshot", ROOT / "scripts" / "build_snapshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    load = module.load_normaliser
    monkeypatch.setattr(module, "load_normaliser", lambda realdata: _KeptNormaliser(load(realdata), _cache_dir()))
    assert module.main(["--realdata", str(REALDATA), "--out", str(tmp_path / "data")]) == 0
    assert _files(tmp_path / "data") == _files(snapshot.data_dir())


def test_every_record_names_its_source_files() -> None:
    provenance = snapshot.provenance()
    for path in snapshot.data_dir().rglob("repodata.json"):
        channel_subdir = path.parent.relative_to(snapshot.data_dir()).as_posix()
        doc = json.loads(path.read_text())
        for table in ("packages", "packages.conda"):
            for file_name, record in doc[table].items():
                sources = provenance["sources"][f"{channel_subdir}/{file_name}"]
                assert sources and all(s.count("/") >= 1 for s in sources)
                assert len(record["sha256"]) == 64 and len(record["md5"]) == 32


def test_snapshot_date_is_its_newest_record() -> None:
    assert snapshot.date() == "2026-08-18"


def test_coverage_holds_the_default_stacks(kb: KnowledgeBase) -> None:
    restricted = coverage.restrict(kb, snapshot.records(), "the bundled snapshot")
    lines = "\n".join(coverage.summary(restricted))
    assert "conda-forge linux-64 CUDA 12.9: torch 2.10.0 (Python 3.13, 3.14)" in lines
    assert "conda-forge linux-64 CUDA 12.9: torch 2.12.0 (Python 3.11, 3.14)" in lines
    assert "conda-forge linux-64 CUDA 12.9: torch 2.13.0 (Python 3.12)" in lines
    assert "conda-forge linux-aarch64 CUDA 12.9: torch 2.10.0" in lines
    assert "pytorch linux-64 CUDA 12.1: torch 2.1.0" in lines
    versions = {str(v) for b in restricted.deepspeed_conda_builds for v in b.versions}
    assert versions == {"0.18.0", "0.18.8"}
    # The nvidia channel (where every real legacy CUDA record comes from) holds one nvcc: 12.6.
    assert restricted.holding is not None
    assert [str(v) for v in restricted.holding.nvcc[("nvidia", "linux-64")]] == ["12.6"]
    assert "12.9" in [str(v) for v in restricted.holding.nvcc[("conda-forge", "linux-aarch64")]]


def _minors(served: tuple[object, ...]) -> list[str]:
    return [str(v) for v in served]


def test_cuda_bound_packages_serve_the_cuda_minors_their_records_allow() -> None:
    """From the records' real depends/constrains: every cudnn on conda-forge needs cuda-version 12.x or older
    (cudnn 9.x `cuda-version >=12,<13.0a0`), nccl 2.29.3.1 has a CUDA 13 build, libcublas-dev's records each
    serve one minor (12.9's `>=12.9,<12.10.0a0`), and nvcc (no cuda-version tie of its own) is not listed."""
    bound = coverage.cuda_bound(snapshot.records())
    cudnn = _minors(bound[("conda-forge", "linux-64", "cudnn")])
    assert "12.9" in cudnn and not [v for v in cudnn if v.startswith("13.")], cudnn
    assert "13.0" in _minors(bound[("conda-forge", "linux-64", "nccl")])
    assert _minors(bound[("conda-forge", "linux-64", "libcublas-dev")]) == [
        "12.6",
        "12.8",
        "12.9",
        "13.0",
        "13.2",
        "13.3",
    ]
    assert ("conda-forge", "linux-64", "cuda-nvcc") not in bound
    assert ("conda-forge", "linux-64", "gxx") not in bound  # tied to no CUDA
    # The nvidia channel's CUDA 12.6 packages name cuda-version too.
    assert _minors(bound[("nvidia", "linux-64", "libcurand-dev")]) == ["12.6"]


def test_a_tie_through_cudatoolkit_is_followed() -> None:
    """cudnn 7.6.5.32 names no cuda-version, only `cudatoolkit 10.1|10.1.*`; most cuda-version records constrain
    cudatoolkit to their own minor (`cudatoolkit 13.0|13.0.*`), so that cudnn serves none of those. Three minors
    also have a cuda-version record that constrains nothing (11.8 h70ddcb2_2, 12.5 hd4f0392_3, and 12.8
    h5d125a7_3 as one of its two copies lists it): beside those the solver could take it, so they are served.
    The real records, taken from the snapshot."""
    records = snapshot.records()
    old = [r for r in records if r.name == "cudnn" and r.version == "7.6.5.32" and r.subdir == "linux-64"]
    assert old and all("cudatoolkit 10.1|10.1.*" in r.depends for r in old), old
    rest = [r for r in records if r.channel == "conda-forge" and r.name in ("cuda-version", "cudatoolkit")]
    served = coverage.cuda_bound([*old, *rest])[("conda-forge", "linux-64", "cudnn")]
    assert _minors(served) == ["11.8", "12.5", "12.8"]


def test_the_restriction_holds_what_cuda_bound_says(kb: KnowledgeBase) -> None:
    restricted = coverage.restrict(kb, snapshot.records(), "the bundled snapshot")
    assert restricted.holding is not None
    assert restricted.holding.cuda_bound == coverage.cuda_bound(snapshot.records())


def test_every_channel_a_plan_names_is_in_the_snapshot(kb: KnowledgeBase) -> None:
    """The legacy plans name pytorch, nvidia and conda-forge, the channels the real records came from."""
    from envsolver.resolve.candidates import pick
    from envsolver.resolve.specs import channels
    from envsolver.resolve.target import Target

    held = set(snapshot.channels())
    for source in ("conda-forge", "pytorch"):
        target = Target(gpus=(next(g for g in kb.gpus if g.key == "a100"),), source=source)  # type: ignore[arg-type]
        chosen, _, _ = pick(kb, target, "linux-64")
        assert chosen is not None
        assert {f"https://conda.anaconda.org/{c}" for c in channels(chosen)} <= held
    assert set(snapshot.provenance()["channels"]) == {"conda-forge", "nvidia", "pytorch"}


def test_the_snapshot_holds_what_ml_projects_add() -> None:
    """Each of the script's PROJECT_ROOTS (what ML projects add) has conda-forge records in the snapshot."""
    spec = importlib.util.spec_from_file_location("build_snapshot", ROOT / "scripts" / "build_snapshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    held = {r.name for r in snapshot.records() if r.channel == "conda-forge"}
    assert module.PROJECT_ROOTS and [name for name in module.PROJECT_ROOTS if name not in held] == []
    assert "peft" not in held


def test_project_packages_beside_the_offline_stack(kb: KnowledgeBase, tmp_path: Path) -> None:
    """The a100's offline stack (torch 2.12.0 cu129, Python 3.11) solves beside conda-forge's jupyterlab, accelerate
    and huggingface_hub; not beside its transformers: that depends on datasets, datasets on pyarrow, and every
    pyarrow record in the snapshot is built against a libabseil older than the torch's (README: the snapshot)."""
    from envsolver.lock import run
    from envsolver.lock.solve import ChannelSource, SolveFailed, solve
    from envsolver.resolve.inputs import Options, build_target

    plan, _ = run.plan_offline(build_target(Options(gpus=("a100",)), kb).target, kb, tmp_path)
    specs = [str(s) for s in plan.specs]
    public = {f"https://conda.anaconda.org/{c}" for c in plan.channels}
    sources = [ChannelSource(p, loc) for p, loc in snapshot.channels().items() if p in public]
    virtual = run.virtual_packages(kb, plan)
    solved = {
        r.name: r.version
        for r in solve(
            [*specs, "jupyterlab", "accelerate", "huggingface_hub"], sources, plan.platform, virtual, tmp_path
        )
    }
    assert (solved["pytorch"], solved["python"][:5]) == ("2.12.0", "3.11."), solved
    assert {n: solved[n] for n in ("jupyterlab", "accelerate", "huggingface_hub")} == {
        "jupyterlab": "4.6.1",
        "accelerate": "1.3.0",
        "huggingface_hub": "0.28.0",
    }
    with pytest.raises(SolveFailed) as info:
        solve([*specs, "transformers"], sources, plan.platform, virtual, tmp_path)
    assert "pyarrow" in str(info.value) and "libabseil" in str(info.value), info.value
