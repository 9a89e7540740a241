"""The KB audit (envsolver/kb/audit.py, scripts/kb_audit.py): the knowledge base against channel records.

The doctored data is the bundled snapshot's own repodata, copied and edited in the test (a version changed, a
Python changed or dropped, a build string or a dependency changed, a record copied under a new name): every
record is a real one, hashes included, never an invented one. Each case compares the audit of the doctored copy
with the audit of the untouched copy, so exactly the lines the change causes are asserted.
"""

from __future__ import annotations

import bz2
import copy
import dataclasses
import importlib.util
import json
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase, audit_deepspeed, audit_torch, load_kb
from envsolver.kb.audit import audit
from envsolver.kb.derive import as_yaml, derive
from envsolver.kb.findings import Report, render
from envsolver.kb.repodata import RepoData, combine, read_channel
from envsolver.lock import snapshot
from envsolver.lock.snapshot import coverage, snapshot_data

ROOT = Path(__file__).resolve().parent.parent
KB_DATA = ROOT / "envsolver" / "kb" / "data"
Docs = dict[str, dict[str, Any]]

# What the audit finds on the shipped KB and the bundled snapshot that is a known KB error awaiting a fix. The
# seven it found when it was written (floors of torch 2.4.0, 2.6.0, 2.7.1 and 2.9.1 below their records') are
# fixed in torch.yaml; CI requires the set to be empty, so that the audit of the snapshot exits 0. The snapshot
# rebuilt with shared/realdata's third round (2026-08-18) brought the eight below, all from
# aqlaboratory__openfold-3/pixi.20260529-cu129-cu132.lock: conda-forge DeepSpeed 0.19.0 builds (torch 2.10, Python
# 3.14), which no deepspeed.yaml row covers, and torch 2.10.0 rebuilds (_304 linux-64, _204 linux-aarch64) whose
# run deps raise the NCCL floor to 2.30 and the CUDA 13.0 builds' cuDNN floor to 9.22. They wait for the KB fix.
KB_ERRORS_AWAITING_FIX: set[tuple[str, str, str]] = {
    (
        "deepspeed 0.19.0 cuda129 on conda-forge/linux-64",
        "no deepspeed.yaml conda_forge_builds row covers this CUDA build",
        "deepspeed-0.19.0-cuda129_py314_h27263a3_0",
    ),
    (
        "deepspeed 0.19.0 cuda130 on conda-forge/linux-64",
        "no deepspeed.yaml conda_forge_builds row covers this CUDA build",
        "deepspeed-0.19.0-cuda130_py314_h2421b91_0",
    ),
    ("torch.yaml builds[16]", "nccl 2.29 for torch 2.10.0", "pytorch-2.10.0-cuda129_mkl_py314_h390a29c_304"),
    ("torch.yaml builds[17]", "cudnn 9.19 for torch 2.10.0", "pytorch-2.10.0-cuda130_mkl_py314_h3fac67c_304"),
    ("torch.yaml builds[17]", "nccl 2.29 for torch 2.10.0", "pytorch-2.10.0-cuda130_mkl_py314_h3fac67c_304"),
    ("torch.yaml builds[24]", "nccl 2.29 for torch 2.10.0", "pytorch-2.10.0-cuda129_generic_py314_h4096cc7_204"),
    ("torch.yaml builds[25]", "cudnn 9.19 for torch 2.10.0", "pytorch-2.10.0-cuda130_generic_py314_h7cb4a1c_204"),
    ("torch.yaml builds[25]", "nccl 2.29 for torch 2.10.0", "pytorch-2.10.0-cuda130_generic_py314_h7cb4a1c_204"),
}


@cache
def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kb_audit", ROOT / "scripts" / "kb_audit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.load_kb = _shipped_once  # type: ignore[attr-defined]
    return module


def _shipped_once(data_dir: Path | None = None) -> KnowledgeBase:
    """The script's load_kb in these tests: the shipped KB is read once for the module (SHIPPED, by the same
    load_kb; the tests never change it), a --kb directory every time. Reading the YAML was most of a run."""
    return SHIPPED if data_dir is None else load_kb(data_dir)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = _script().main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _key(finding: Any) -> tuple[str, str, str]:
    return (finding.subject.split(" (")[0], finding.kb, finding.data.rsplit(" ", 1)[-1].rstrip(")"))


# ---- the doctored copies of the snapshot ----


def copy_snapshot(tmp_path: Path) -> Path:
    root = tmp_path / "channels"
    shutil.copytree(snapshot.data_dir(), root, ignore=shutil.ignore_patterns("provenance.json"))
    return root


def doctor(root: Path, edit: Callable[[Docs], None]) -> Path:
    """Apply `edit` to the copy's conda-forge repodata ({subdir: document}) and write it back."""
    docs = {p.parent.name: json.loads(p.read_text()) for p in (root / "conda-forge").glob("*/repodata.json")}
    edit(docs)
    for subdir, doc in docs.items():
        (root / "conda-forge" / subdir / "repodata.json").write_text(json.dumps(doc))
    return root


def record(docs: Docs, subdir: str, filename: str) -> dict[str, Any]:
    for table in ("packages", "packages.conda"):
        if filename in docs[subdir].get(table, {}):
            rec: dict[str, Any] = docs[subdir][table][filename]
            return rec
    raise AssertionError(f"no {filename} in the snapshot's conda-forge/{subdir}")


def copy_as(docs: Docs, subdir: str, filename: str, new_filename: str, **fields: Any) -> dict[str, Any]:
    """A copy of a real record under a new file name, with `fields` changed (its hashes stay the original's)."""
    rec = copy.deepcopy(record(docs, subdir, filename))
    rec.update(fields)
    docs[subdir]["packages.conda"][new_filename] = rec
    return rec


def replace_dep(rec: dict[str, Any], old: str, new: str) -> None:
    assert old in rec["depends"], (old, rec["depends"])
    rec["depends"] = [new if d == old else d for d in rec["depends"]]


def blocks(out: str, severity: str = "contradiction") -> set[str]:
    return {b for b in out.strip().split("\n\n") if b.startswith(severity + " ")}


def audited(root: Path, *extra: str) -> list[str]:
    return ["--repodata", f"conda-forge={root / 'conda-forge'}", "--repodata", f"pytorch={root / 'pytorch'}", *extra]


def new_blocks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, edit: Callable[[Docs], None]
) -> tuple[int, set[str]]:
    """The exit code on the doctored copy, and the contradictions the untouched copy did not show."""
    root = copy_snapshot(tmp_path)
    _, before, _ = run(capsys, *audited(root, "--partial"))
    code, after, _ = run(capsys, *audited(doctor(root, edit), "--partial"))
    return code, blocks(after) - blocks(before)


F_CUDA130 = "pytorch-2.10.0-cuda130_mkl_py313_haca1682_303.conda"
F_CUDA129 = "pytorch-2.10.0-cuda129_mkl_py313_h623d66f_303.conda"
F_DS = "deepspeed-0.18.8-cuda129_py313_h637229b_0.conda"
SHIPPED = load_kb()


def _torch_row(build: str, version: str = "2.10.0") -> str:
    """The diff heading of the shipped conda-forge linux-64 row that covers this build glob and version."""
    return next(
        audit_torch.row_label(i, r)
        for i, r in enumerate(SHIPPED.torch_builds)
        if (r.channel, r.platform, r.build) == ("conda-forge", "linux-64", build) and Version(version) in r.versions
    )


ROW11 = _torch_row("cuda129*")  # torch.yaml builds[11] (conda-forge linux-64 cuda129*: torch 2.10.0, …, 2.13.0)
ROW12 = _torch_row("cuda130*")
DS13 = next(
    audit_deepspeed.row_label(i, r)
    for i, r in enumerate(SHIPPED.deepspeed_conda_builds)
    if r.cuda == MajorMinor(12, 9) and Version("0.18.8") in r.versions
)
# The newest the KB knows, and one past it (the releases another branch adds move them).
KB_TORCH = max(v for r in SHIPPED.torch_builds if r.channel == "conda-forge" for v in r.versions)
NEXT_TORCH = Version(f"{KB_TORCH.major}.{KB_TORCH.minor + 1}.0")
KB_DS = max(r.latest for r in SHIPPED.deepspeed_releases)
NEXT_DS = Version(f"{KB_DS.major}.{KB_DS.minor}.{KB_DS.micro + 1}")
KB_CUDA = max(t.version for t in SHIPPED.toolkits)
NEXT_CUDA = MajorMinor(KB_CUDA.major, KB_CUDA.minor + 1)
ADD_ROW = "(the audit run again with --derive prints the keys repodata determines)."


# ---- the snapshot: what CI checks ----


def test_snapshot_contradictions_are_the_known_kb_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    report = audit(load_kb(), snapshot_data())
    found = {_key(f) for f in report.contradictions}
    assert not found - KB_ERRORS_AWAITING_FIX, "the KB contradicts the snapshot: `python scripts/kb_audit.py` says how"
    assert not KB_ERRORS_AWAITING_FIX - found, "fixed in torch.yaml: remove these from KB_ERRORS_AWAITING_FIX"
    assert code == (1 if KB_ERRORS_AWAITING_FIX else 0), out
    assert out.splitlines()[0] == (
        f"KB audit: the knowledge base against the bundled snapshot ({snapshot.date()}) "
        "(1246 records of pytorch, deepspeed, cuda-version and CUDA libraries)"
    )
    assert out.splitlines()[-1].startswith(
        f"{len(KB_ERRORS_AWAITING_FIX)} contradiction(s), {len(report.notes)} note(s)"
    )


def test_the_floors_the_audit_found_wrong_are_caught_if_they_come_back() -> None:
    # The shipped KB gave torch 2.6.0 cu126 the cuDNN floor of 2.5.1 (9.3) until this audit found its record.
    kb = load_kb()
    index, row = next(
        (i, r)
        for i, r in enumerate(kb.torch_builds)
        if (r.channel, r.platform, r.build) == ("conda-forge", "linux-64", "cuda126*")
        and Version("2.6.0") in r.versions
    )
    assert row.cudnn == "9.7"
    rows = list(kb.torch_builds)
    rows[index] = dataclasses.replace(row, cudnn="9.3")
    out = "\n".join(render(audit(dataclasses.replace(kb, torch_builds=tuple(rows)), snapshot_data())))
    assert (
        f"contradiction [cudnn] {audit_torch.row_label(index, row)}\n"
        "  - cudnn 9.3 for torch 2.6.0\n"
        "  + depends cudnn >=9.7.1.26,<10.0a0 (conda-forge/linux-64 pytorch-2.6.0-cuda126_mkl_py312_h8bb5dc9_300)\n"
        "  fix: Set the row's cudnn to 9.7 (split the row per version where their floors differ)."
    ) in out


def test_snapshot_is_partial_so_what_it_lacks_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys)
    assert "  complete data: none" in out
    assert (
        f"note [missing] {ROW12}\n"
        "  - torch 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0 for Python 3.10, 3.11, 3.12, 3.13, 3.14\n"
        "  + partial data: no build of 2.11.0, 2.12.0, 2.12.1, 2.13.0; of 2.10.0 none for Python 3.10, 3.11, 3.12"
    ) in out
    assert "note [older] pytorch on pytorch/linux-64\n  - torch.yaml starts at 2.0.0 on pytorch\n" in out
    # The snapshot holds the KB's newest torch (2.13.0 cu129), so no note on that; its newest DeepSpeed (a
    # conda-forge build of 0.19.0) is older than the KB's newest release.
    assert "note [newest] pytorch on conda-forge" not in out, out
    assert (
        f"note [newest] deepspeed\n  - deepspeed.yaml releases: newest {KB_DS}\n  + newest deepspeed 0.19.0 "
        "(conda-forge/linux-64 deepspeed-0.19.0-cuda129_py314_h27263a3_0)"
    ) in out


def test_json_holds_the_same_findings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json")
    doc = json.loads(out)
    report = audit(load_kb(), snapshot_data())
    assert (doc["ok"], doc["exit_code"], code) == (report.ok, code, 1 if KB_ERRORS_AWAITING_FIX else 0)
    assert [c["kb"] for c in doc["contradictions"]] == [f.kb for f in report.contradictions]
    assert len(doc["notes"]) == len(report.notes) > 0
    assert doc["data"]["complete"] == [] and "conda-forge/linux-64" in doc["data"]["partial"]


def test_quiet_leaves_out_the_notes_but_counts_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def raise_cudnn(d: Docs) -> None:
        replace_dep(record(d, "linux-64", F_CUDA129), "libcudnn >=9.10.2.21,<10.0a0", "libcudnn >=9.11.0.98,<10.0a0")

    _, loud, _ = run(capsys, *audited(doctor(copy_snapshot(tmp_path), raise_cudnn), "--partial"))
    _, out, _ = run(capsys, *audited(tmp_path / "channels", "--partial", "--quiet"))
    assert blocks(loud, "note") and not blocks(out, "note")
    assert blocks(out) == blocks(loud) != set()
    assert out.splitlines()[-1] == loud.splitlines()[-1] and " note(s)" in out.splitlines()[-1]


# ---- doctored repodata: each change gives exactly its diff lines ----


def test_a_changed_version_is_a_build_no_row_covers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """conda-forge never built torch 2.2: a record claiming 2.2.0 contradicts torch.yaml."""
    code, new = new_blocks(capsys, tmp_path, lambda d: record(d, "linux-64", F_CUDA130).update(version="2.2.0"))
    assert code == 1, new
    assert new == {
        "contradiction [uncovered] torch 2.2.0 cuda130 on conda-forge/linux-64\n"
        "  - no torch.yaml row covers this CUDA build (conda-forge linux-64)\n"
        "  + a CUDA build (conda-forge/linux-64 pytorch-2.2.0-cuda130_mkl_py313_haca1682_303)\n"
        f"  fix: Add 2.2.0 to the row of its CUDA variant, or a new row {ADD_ROW}"
    }


def test_a_newer_torch_than_the_kb_knows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    v = NEXT_TORCH
    code, new = new_blocks(capsys, tmp_path, lambda d: record(d, "linux-64", F_CUDA130).update(version=str(v)))
    assert code == 1, new
    assert new == {
        "contradiction [newest] pytorch on conda-forge\n"
        f"  - torch.yaml: newest {KB_TORCH}\n"
        f"  + torch {v} (conda-forge/linux-64 pytorch-{v}-cuda130_mkl_py313_haca1682_303)\n"
        f"  fix: Add rows for torch {v} on conda-forge (the audit run again with --derive prints their keys).",
        f"contradiction [uncovered] torch {v} cuda130 on conda-forge/linux-64\n"
        "  - no torch.yaml row covers this CUDA build (conda-forge linux-64)\n"
        f"  + a CUDA build (conda-forge/linux-64 pytorch-{v}-cuda130_mkl_py313_haca1682_303)\n"
        f"  fix: Add {v} to the row of its CUDA variant, or a new row {ADD_ROW}",
    }


def test_a_python_the_row_does_not_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def to_py39(docs: Docs) -> None:
        rec = record(docs, "linux-64", F_CUDA129)
        rec["build"] = rec["build"].replace("py313", "py39")
        replace_dep(rec, "python >=3.13,<3.14.0a0", "python >=3.9,<3.10.0a0")
        replace_dep(rec, "python_abi 3.13.* *_cp313", "python_abi 3.9.* *_cp39")

    code, new = new_blocks(capsys, tmp_path, to_py39)
    assert code == 1, new
    assert new == {
        f"contradiction [python] {ROW11}\n"
        "  - python 3.10, 3.11, 3.12, 3.13, 3.14\n"
        "  + a build for Python 3.9 of torch 2.10.0 "
        "(conda-forge/linux-64 pytorch-2.10.0-cuda129_mkl_py39_h623d66f_303)\n"
        "  fix: Add 3.9 to the row's python (split the row where versions differ), or narrow its build glob."
    }


def test_a_build_of_a_cuda_variant_no_row_has(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def add_cuda128(docs: Docs) -> None:
        rec = copy_as(docs, "linux-64", F_CUDA129, "pytorch-2.10.0-cuda128_mkl_py313_h623d66f_303.conda")
        rec["build"] = "cuda128_mkl_py313_h623d66f_303"
        replace_dep(rec, "cuda-version >=12.9,<13", "cuda-version >=12.8,<13")

    code, new = new_blocks(capsys, tmp_path, add_cuda128)
    assert code == 1, new
    assert new == {
        "contradiction [uncovered] torch 2.10.0 cuda128 on conda-forge/linux-64\n"
        "  - no torch.yaml row covers this CUDA build (conda-forge linux-64)\n"
        "  + a CUDA build (conda-forge/linux-64 pytorch-2.10.0-cuda128_mkl_py313_h623d66f_303)\n"
        f"  fix: Add 2.10.0 to the row of its CUDA variant, or a new row {ADD_ROW}"
    }


def test_a_cudnn_floor_above_the_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    edit: Callable[[Docs], None] = lambda d: replace_dep(  # noqa: E731
        record(d, "linux-64", F_CUDA129), "libcudnn >=9.10.2.21,<10.0a0", "libcudnn >=9.11.0.98,<10.0a0"
    )
    code, new = new_blocks(capsys, tmp_path, edit)
    assert code == 1, new
    assert new == {
        f"contradiction [cudnn] {ROW11}\n"
        "  - cudnn 9.10 for torch 2.10.0\n"
        "  + depends libcudnn >=9.11.0.98,<10.0a0 "
        "(conda-forge/linux-64 pytorch-2.10.0-cuda129_mkl_py313_h623d66f_303)\n"
        "  fix: Set the row's cudnn to 9.11 (split the row per version where their floors differ)."
    }


def test_a_cuda_version_range_other_than_the_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def edit(docs: Docs) -> None:
        replace_dep(record(docs, "linux-64", F_CUDA130), "cuda-version >=13.0,<14", "cuda-version >=13.1,<14")

    code, new = new_blocks(capsys, tmp_path, edit)
    assert code == 1, new
    assert new == {
        f"contradiction [cuda_range] {ROW12}\n"
        "  - cuda_range >=13.0,<14\n"
        "  + depends cuda-version >=13.1,<14 (conda-forge/linux-64 pytorch-2.10.0-cuda130_mkl_py313_haca1682_303)\n"
        "  fix: Set cuda_range to '>=13.1,<14'."
    }


F_AARCH64 = "pytorch-2.10.0-cuda129_generic_py313_h1cb5c9e_203.conda"


def as_tegra(docs: Docs) -> None:
    """The real sbsa record of 2.10.0 cuda129 on linux-aarch64, made to depend `arm-variant * tegra` as
    conda-forge's Jetson builds do (their build strings look like the sbsa builds')."""
    replace_dep(record(docs, "linux-aarch64", F_AARCH64), "arm-variant * sbsa", "arm-variant * tegra")


def test_a_tegra_build_no_row_covers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The sbsa row's build glob matches the tegra build's string too; the arm-variant dependency tells them
    apart, so a tegra build with no tegra row is uncovered."""
    code, new = new_blocks(capsys, tmp_path, as_tegra)
    assert code == 1, new
    assert new == {
        "contradiction [uncovered] torch 2.10.0 cuda129 tegra on conda-forge/linux-aarch64\n"
        "  - no torch.yaml row covers this CUDA build (conda-forge linux-aarch64, arm_variant tegra)\n"
        "  + a CUDA build (conda-forge/linux-aarch64 pytorch-2.10.0-cuda129_generic_py313_h1cb5c9e_203)\n"
        f"  fix: Add 2.10.0 to the row of its CUDA variant, or a new row {ADD_ROW}"
    }


def test_a_tegra_row_beside_the_sbsa_rows(tmp_path: Path, kb: KnowledgeBase) -> None:
    """A tegra row with the sbsa rows' build glob and versions (as the KB lists Jetson builds) takes the tegra
    build alone and leaves the sbsa builds of 2.8.0, 2.9.1 and 2.10.0 (Python 3.14) to their row: no build is
    covered twice, and the tegra row's unknown cuDNN and NCCL (null) are notes, not contradictions."""
    sbsa = next(
        i
        for i, r in enumerate(kb.torch_builds)
        if r.platform == "linux-aarch64" and r.build == "cuda129*" and Version("2.10.0") in r.versions
    )
    tegra = dataclasses.replace(
        kb.torch_builds[sbsa],
        versions=(Version("2.8.0"), Version("2.9.1"), Version("2.10.0")),
        arm_variant="tegra",
        cudnn=None,
        nccl=None,
        glibc=MajorMinor(2, 34),
    )
    with_tegra = dataclasses.replace(kb, torch_builds=(*kb.torch_builds, tegra))
    root = doctor(copy_snapshot(tmp_path), as_tegra)
    data = read_channel("conda-forge", root / "conda-forge", complete=False)
    before, after = audit(kb, data), audit(with_tegra, data)
    tegra_build = "torch 2.10.0 cuda129 tegra on conda-forge/linux-aarch64"
    uncovered = [f.subject for f in before.contradictions if f.check == "uncovered" and f.subject.startswith("torch")]
    assert uncovered == [tegra_build], uncovered  # (the DeepSpeed 0.19.0 builds are of KB_ERRORS_AWAITING_FIX)
    assert after.contradictions == tuple(f for f in before.contradictions if f.subject != tegra_build)
    label = f"torch.yaml builds[{len(kb.torch_builds)}] (conda-forge linux-aarch64 tegra cuda129*"
    assert {(f.check, f.kb, f.data) for f in after.notes if f.subject.startswith(label)} == {
        ("cudnn", "cudnn null for torch 2.10.0", "depends libcudnn >=9.10.2.21,<10.0a0"),
        ("nccl", "nccl null for torch 2.10.0", "depends nccl >=2.29.3.1,<3.0a0"),
        (
            "missing",
            "torch 2.8.0, 2.9.1, 2.10.0 for Python 3.10, 3.11, 3.12, 3.13, 3.14",
            "partial data: no build of 2.8.0, 2.9.1; of 2.10.0 none for Python 3.10, 3.11, 3.12, 3.14",
        ),
    }


def test_a_deepspeed_build_pinning_another_torch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def edit(docs: Docs) -> None:
        replace_dep(record(docs, "linux-64", F_DS), "pytorch >=2.10.0,<2.11.0a0", "pytorch >=2.11.0,<2.12.0a0")

    code, new = new_blocks(capsys, tmp_path, edit)
    assert code == 1, new
    assert new == {
        f"contradiction [torch] {DS13}\n"
        "  - torch 2.10 for deepspeed 0.18.8\n"
        "  + a build pinning torch 2.11 (conda-forge/linux-64 deepspeed-0.18.8-cuda129_py313_h637229b_0)\n"
        "  fix: Set the row's torch to 2.11 (split the row per version where their pins differ)."
    }


def test_newer_deepspeed_and_cuda_version_than_the_kb_knows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ds, cuda = NEXT_DS, NEXT_CUDA

    def edit(docs: Docs) -> None:
        record(docs, "linux-64", F_DS).update(version=str(ds))
        copy_as(
            docs,
            "noarch",
            "cuda-version-13.3-hcbadf70_3.conda",
            f"cuda-version-{cuda}-hcbadf70_3.conda",
            version=str(cuda),
        )

    code, new = new_blocks(capsys, tmp_path, edit)
    assert code == 1, new
    assert new == {
        "contradiction [newest] cuda-version\n"
        f"  - cuda.yaml toolkits: newest {KB_CUDA}\n"
        f"  + cuda-version {cuda} (conda-forge/noarch cuda-version-{cuda}-hcbadf70_3)\n"
        f"  fix: Add a toolkits row for CUDA {cuda} (driver floor, SM list and GCC limit from NVIDIA's release notes).",
        "contradiction [newest] deepspeed\n"
        f"  - deepspeed.yaml releases: newest {KB_DS}\n"
        f"  + deepspeed {ds} (conda-forge/linux-64 deepspeed-{ds}-cuda129_py313_h637229b_0)\n"
        f"  fix: Add a releases row for {ds} (op_builder/builder.py at its tag: the nvcc/torch CUDA allow-list).",
        f"contradiction [uncovered] deepspeed {ds} cuda129 on conda-forge/linux-64\n"
        "  - no deepspeed.yaml conda_forge_builds row covers this CUDA build\n"
        f"  + a CUDA build (conda-forge/linux-64 deepspeed-{ds}-cuda129_py313_h637229b_0)\n"
        f"  fix: Add {ds} to the row of its torch pin and CUDA, or a new row {ADD_ROW}",
    }


# ---- complete data: what the KB lists beyond the data becomes a contradiction ----


def _restricted(kb: KnowledgeBase) -> KnowledgeBase:
    """The KB with only the torch versions and Pythons the snapshot holds (what `make --offline` plans with)."""
    return coverage.restrict(kb, snapshot.records(), "the bundled snapshot")


def _complete(data: RepoData) -> RepoData:
    return dataclasses.replace(data, complete=data.present)


def test_a_dropped_python_is_a_note_in_partial_data_and_a_contradiction_in_complete(tmp_path: Path) -> None:
    """The KB restricted to what the snapshot holds, against the snapshot taken as complete: the builds of
    2.10.0 cuda130 for Python 3.14 (303 and its rebuild 304) removed, the row's Python 3.14 contradicts the data;
    in partial data the builds may merely be absent, a note."""
    kb = _restricted(load_kb())
    root = copy_snapshot(tmp_path)

    def diff(complete: bool) -> tuple[set[str], set[str]]:
        out = "\n".join(render(audit(kb, read_channel("conda-forge", root / "conda-forge", complete=complete))))
        return blocks(out), blocks(out, "note")

    (before, _), (partial_before, notes_before) = diff(True), diff(False)

    def drop_py314(docs: Docs) -> None:
        for build in ("py314_h382c374_303", "py314_h3fac67c_304"):
            docs["linux-64"]["packages.conda"].pop(F_CUDA130.replace("py313_haca1682_303", build))

    doctor(root, drop_py314)
    (after, _), (partial, partial_notes) = diff(True), diff(False)
    label = next(b for b in after - before).split("\n")[0].removeprefix("contradiction [missing] ")
    assert label.startswith("torch.yaml builds[") and "(conda-forge linux-64 cuda130*: torch 2.10.0" in label
    assert after - before == {
        f"contradiction [missing] {label}\n"
        "  - torch 2.10.0 for Python 3.14\n"
        "  + no such build in the complete data\n"
        "  fix: Remove it from the row: a build the channel does not serve (or marked broken) cannot be locked."
    }
    # (the floor contradictions of the removed 304 are of KB_ERRORS_AWAITING_FIX)
    assert partial == {b for b in partial_before if "py314_h3fac67c_304" not in b}, partial ^ partial_before
    assert f"note [missing] {label}\n  - torch 2.10.0 for Python 3.13, 3.14\n" in "\n\n".join(partial_notes)
    assert "  + partial data: of 2.10.0 none for Python 3.14" in "\n\n".join(partial_notes - notes_before)


def test_a_floor_above_every_build_of_a_version(kb: KnowledgeBase) -> None:
    """A row saying 2.8.0 cu129 on linux-aarch64 needs NCCL 2.28 (torch.yaml said so before issue 24; it says 2.27
    now); the snapshot's one build of it needs 2.27: partial data may lack the build that needs 2.28 (linux-64's
    build 302 does), complete data may not."""
    data = snapshot_data()
    index = _index(kb, "linux-aarch64", "cuda129*", "2.8.0")
    rows = list(kb.torch_builds)
    assert rows[index].nccl == "2.27", rows[index]
    rows[index] = dataclasses.replace(rows[index], nccl="2.28")
    kb = dataclasses.replace(kb, torch_builds=tuple(rows))
    subject = f"torch.yaml builds[{index}]"

    def found(report: Report) -> list[tuple[str, str]]:
        return [
            (f.severity, f.data)
            for f in report.findings
            if f.subject.startswith(subject) and f.kb == "nccl 2.28 for torch 2.8.0"
        ]

    why = "every build of 2.8.0 depends nccl below it; the highest: nccl >=2.27.7.1,<3.0a0"
    assert found(audit(kb, data)) == [("note", why)]
    assert found(audit(kb, _complete(data))) == [("contradiction", why)]


def test_deepspeed_cuda_version_floor_through_its_libraries(kb: KnowledgeBase) -> None:
    """deepspeed 0.18.8 cuda130 depends cuda-version >=13.0 but libcublas >=13.3.0.5 and libcurand >=10.4.2.51,
    whose records need cuda-version >=13.2: the row's 13.2 agrees. A row saying 13.3 overstates it on any data
    (the records prove 13.2 is enough); one saying 13.0 understates it, certainly only in complete data."""
    data = snapshot_data()
    row = next(i for i, r in enumerate(kb.deepspeed_conda_builds) if r.cuda == MajorMinor(13, 0))

    def with_min(value: MajorMinor) -> KnowledgeBase:
        rows = list(kb.deepspeed_conda_builds)
        rows[row] = dataclasses.replace(rows[row], cuda_version_min=value)
        return dataclasses.replace(kb, deepspeed_conda_builds=tuple(rows))

    def found(k: KnowledgeBase, d: RepoData) -> list[tuple[str, str]]:
        return [(f.severity, f.kb) for f in audit(k, d).findings if f.check == "cuda_version_min"]

    assert found(kb, data) == [] and found(kb, _complete(data)) == []
    assert found(with_min(MajorMinor(13, 3)), data) == [("contradiction", "cuda_version_min 13.3 for deepspeed 0.18.8")]
    assert found(with_min(MajorMinor(13, 0)), data) == [("note", "cuda_version_min 13.0 for deepspeed 0.18.8")]
    assert found(with_min(MajorMinor(13, 0)), _complete(data)) == [
        ("contradiction", "cuda_version_min 13.0 for deepspeed 0.18.8")
    ]
    text = next(f.data for f in audit(with_min(MajorMinor(13, 3)), data).findings if f.check == "cuda_version_min")
    assert "depends cuda-version >=13.2,<13.3.0a0" in text


def _index(kb: KnowledgeBase, platform: str, build: str, version: str) -> int:
    """The index of the conda-forge torch row for this platform, build glob and version."""
    return next(
        i
        for i, r in enumerate(kb.torch_builds)
        if (r.channel, r.platform, r.build) == ("conda-forge", platform, build) and Version(version) in r.versions
    )


def test_two_rows_covering_one_build(kb: KnowledgeBase) -> None:
    rows = list(kb.torch_builds)
    cu130 = _index(kb, "linux-64", "cuda130*", "2.10.0")
    twin = dataclasses.replace(rows[cu130], versions=(Version("2.10.0"),))
    report = audit(dataclasses.replace(kb, torch_builds=(*rows, twin)), snapshot_data())
    ambiguous = [f for f in report.contradictions if f.check == "ambiguous"]
    assert {f.subject for f in ambiguous} == {"torch 2.10.0 cuda130 on conda-forge/linux-64"}
    assert ambiguous[0].kb == f"rows builds[{cu130}], builds[{len(rows)}] all cover it"


def _with_row(kb: KnowledgeBase, index: int, **changes: Any) -> KnowledgeBase:
    rows = list(kb.torch_builds)
    rows[index] = dataclasses.replace(rows[index], **changes)
    return dataclasses.replace(kb, torch_builds=tuple(rows))


def test_a_pytorch_channel_build_bundles_its_cudnn(kb: KnowledgeBase) -> None:
    """The pytorch channel's build string names the cuDNN it carries: a row saying another is contradicted."""
    index = next(i for i, r in enumerate(kb.torch_builds) if r.channel == "pytorch" and r.build == "*cuda12.1*")
    report = audit(_with_row(kb, index, cudnn="8.8"), snapshot_data())
    assert [(f.kb, f.data.split(" (")[0]) for f in report.contradictions if f.check == "cudnn"][-1:] == [
        ("cudnn 8.8 (bundled)", "a build bundling cuDNN 8.9")
    ]


def test_a_build_glob_that_takes_another_cuda(kb: KnowledgeBase) -> None:
    """The cuda129* row of 2.10.0, widened to cuda*, also takes the cuda130 builds of 2.10.0."""
    cu129 = _index(kb, "linux-64", "cuda129*", "2.10.0")
    report = audit(_with_row(kb, cu129, build="cuda*"), snapshot_data())
    clashes = {
        (f.check, f.kb, f.data.split(" (")[0])
        for f in report.contradictions
        if f.subject.startswith(f"torch.yaml builds[{cu129}]")
    }
    assert ("cuda", "cuda 12.9", "a build string naming CUDA 13.0") in clashes
    assert {f.subject for f in report.contradictions if f.check == "ambiguous"} == {
        "torch 2.10.0 cuda130 on conda-forge/linux-64"
    }


def test_a_channel_no_row_is_for_is_not_checked(tmp_path: Path, kb: KnowledgeBase) -> None:
    report = audit(kb, read_channel("pytorch-nightly", copy_snapshot(tmp_path) / "pytorch", complete=True))
    assert not report.contradictions
    assert [(f.check, f.kb) for f in report.notes if f.check == "channel"] == [
        ("channel", "no torch.yaml row is for the pytorch-nightly channel")
    ]


def test_rows_of_a_channel_with_no_data_are_not_checked(tmp_path: Path, kb: KnowledgeBase) -> None:
    """Only conda-forge given: the pytorch channel's rows are neither contradicted nor noted."""
    report = audit(kb, read_channel("conda-forge", copy_snapshot(tmp_path) / "conda-forge", complete=False))
    assert not [f for f in report.findings if "(pytorch linux-64" in f.subject]
    assert report.partial == ("conda-forge/linux-64", "conda-forge/linux-aarch64", "conda-forge/noarch")


def test_unknown_kb_facts_are_notes_never_contradictions(kb: KnowledgeBase) -> None:
    """Null says "not known": rows whose cuDNN, NCCL and glibc are null (as rows of builds no record was read
    for are written) draw notes that name what the data says, and no contradiction on those keys."""
    rows = tuple(
        dataclasses.replace(r, cudnn=None, nccl=None, glibc=None) if r.channel == "conda-forge" else r
        for r in kb.torch_builds
    )
    report = audit(dataclasses.replace(kb, torch_builds=rows), snapshot_data())
    assert not [f for f in report.contradictions if f.check in ("cudnn", "nccl", "glibc")]
    assert {f.check for f in report.contradictions} <= {f.check for f in audit(kb, snapshot_data()).contradictions}
    label = _torch_row("cuda130*")
    # The highest floors of 2.10.0 cuda130's builds: its rebuild 304's.
    assert {(f.check, f.kb, f.data) for f in report.notes if f.subject == label} >= {
        ("cudnn", "cudnn null for torch 2.10.0", "depends libcudnn >=9.22.0.52,<10.0a0"),
        ("nccl", "nccl null for torch 2.10.0", "depends nccl >=2.30.4.1,<3.0a0"),
        ("glibc", "glibc null for torch 2.10.0", "depends __glibc >=2.28,<3.0.a0"),
    }


def test_a_kb_without_deepspeed_or_toolkit_rows_is_audited(kb: KnowledgeBase) -> None:
    """Empty tables (a KB being written) are audited, not crashed on: the data's newest cuda-version and
    DeepSpeed are then newer than anything the KB knows."""
    bare = dataclasses.replace(kb, toolkits=(), deepspeed_releases=(), deepspeed_conda_builds=())
    report = audit(bare, snapshot_data())
    newest = {(f.subject, f.kb) for f in report.contradictions if f.check == "newest"}
    assert newest == {
        ("cuda-version", "cuda.yaml toolkits: none"),
        ("deepspeed", "deepspeed.yaml releases: none"),
    }


# ---- derive: the keys repodata determines ----


def test_derive_prints_the_row_keys_the_records_determine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--derive")
    assert code == 0, out
    rows = yaml.safe_load(out)
    assert {
        "channel": "conda-forge",
        "versions": ["2.10.0"],
        "cuda": "13.0",
        "cuda_range": ">=13.0,<14",
        "platform": "linux-64",
        "build": "cuda130*",
        "python": ["3.13", "3.14"],
        "cudnn": "9.22",  # the floors of its rebuild 304 (aqlaboratory__openfold-3/pixi.20260529-cu129-cu132.lock)
        "nccl": "2.30",
        "glibc": "2.28",
        "arm_variant": None,
    } in rows
    assert {
        "versions": ["0.18.8"],
        "torch": "2.10",
        "cuda": "13.0",
        "cuda_version_min": "13.2",
        "python": ["3.13"],
        "platform": "linux-64",
    } in rows
    # The pytorch channel's 2.0.1 and 2.1.0 cuda11.8 builds agree on every key, so they share a row.
    assert any(
        r.get("channel") == "pytorch" and r["versions"] == ["2.0.1", "2.1.0"] and r["cudnn"] == "8.7" for r in rows
    )


def test_derive_json_holds_the_same_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--derive", "--json")
    doc = json.loads(out)
    rows = derive(load_kb(), snapshot_data())
    assert (code, doc["ok"], doc["exit_code"]) == (0, True, 0)
    assert doc["rows"] == [{"table": r.table, **r.as_dict()} for r in rows] and len(rows) > 10


def kb_of_derived_rows(tmp_path: Path, data: RepoData) -> KnowledgeBase:
    """The shipped KB with its torch builds and DeepSpeed conda-forge builds replaced by the rows derived from
    `data`, pasted as a maintainer would (`--derive`'s YAML, with the archs and source it asks for added)."""
    kb = load_kb()
    rows = derive(kb, data)
    folder = tmp_path / "kb"
    shutil.copytree(KB_DATA, folder)
    torch_doc = yaml.safe_load((folder / "torch.yaml").read_text())
    ds_doc = yaml.safe_load((folder / "deepspeed.yaml").read_text())
    torch_doc["builds"], ds_doc["conda_forge_builds"] = [], []
    for row in yaml.safe_load("\n".join(as_yaml(rows, "derived"))):
        if "channel" in row:
            torch_doc["builds"].append({**row, "archs": "8.0+PTX", "source": ["CF-PT-MAIN"]})
        else:
            ds_doc["conda_forge_builds"].append({**row, "source": ["CF-DS"]})
    (folder / "torch.yaml").write_text(yaml.safe_dump(torch_doc))
    (folder / "deepspeed.yaml").write_text(yaml.safe_dump(ds_doc))
    loaded = load_kb(folder)
    assert len(loaded.torch_builds) + len(loaded.deepspeed_conda_builds) == len(rows) > 0
    return loaded


@pytest.mark.parametrize("edit", [None, as_tegra], ids=["snapshot", "snapshot-with-a-tegra-build"])
def test_derived_rows_agree_with_the_audit(tmp_path: Path, edit: Callable[[Docs], None] | None) -> None:
    """Derive and audit read the records alike: the rows derived from data, once pasted, are contradicted by
    nothing in that data (where the shipped rows are, the audit's findings are about the rows)."""
    root = copy_snapshot(tmp_path)
    if edit is not None:
        doctor(root, edit)
    data = combine(read_channel(c, root / c, complete=False) for c in ("conda-forge", "pytorch"))
    derived = kb_of_derived_rows(tmp_path, data)
    assert audit(derived, data).contradictions == ()
    if edit is not None:  # the Python 3.14 build of 2.10.0 (204) stays sbsa, a row of its own
        assert sorted(
            str(r.arm_variant)
            for r in derived.torch_builds
            if Version("2.10.0") in r.versions and r.platform == "linux-aarch64" and r.cuda == MajorMinor(12, 9)
        ) == ["sbsa", "tegra"]


# ---- input: every path a user can give ----


def test_a_bz2_file_and_a_subdir_folder_are_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = snapshot.data_dir() / "conda-forge" / "linux-64" / "repodata.json"
    packed = tmp_path / "repodata.json.bz2"
    packed.write_bytes(bz2.compress(source.read_bytes()))
    a = read_channel("conda-forge", packed, complete=True)
    b = read_channel("conda-forge", source.parent, complete=True)
    assert a.records == b.records and a.complete == {("conda-forge", "linux-64")}
    assert len({r.label for r in combine([a, b]).records}) == len(a.records)


def test_current_repodata_is_never_complete(tmp_path: Path) -> None:
    """current_repodata.json holds the newest versions only: what the KB lists beyond it is a note."""
    source = snapshot.data_dir() / "conda-forge" / "linux-64" / "repodata.json"
    current = tmp_path / "current_repodata.json"
    current.write_bytes(source.read_bytes())
    data = read_channel("conda-forge", current, complete=True)
    assert data.present == {("conda-forge", "linux-64")} and data.complete == frozenset()


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--repodata CHANNEL=PATH" in out and "--derive" in out, out


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


BAD_INPUTS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing": (lambda t: t / "nothing-here", "no repodata at"),
    "empty folder": (lambda t: t, "no repodata at"),
    "not json": (lambda t: _write(t, "repodata.json", b"{not json"), "cannot read repodata"),
    "bad bz2": (lambda t: _write(t, "repodata.json.bz2", b"BZh9 not bz2"), "cannot read repodata"),
    "a list": (lambda t: _write(t, "repodata.json", b"[]"), "is not a repodata.json: no 'packages' mapping"),
    "deep": (lambda t: _write(t, "repodata.json", b"[" * 100_000), "cannot read repodata"),
    "bad record": (
        lambda t: _write(t, "repodata.json", b'{"packages": {"a.tar.bz2": {"name": "pytorch", "depends": "x"}}}'),
        "'name' must be a string and 'depends' a list",
    ),
    "bad version": (
        lambda t: _write(t, "repodata.json", b'{"packages": {"a.tar.bz2": {"name": "pytorch", "version": 2}}}'),
        "'version' and 'build' must be strings",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_repodata_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    make, message = BAD_INPUTS[case]
    path = make(tmp_path)
    code, out, err = run(capsys, "--repodata", f"conda-forge={path}", "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["error"]["kind"] == "bad_input", (doc, err)
    assert message in doc["error"]["message"]
    assert doc["error"]["fix"].startswith("Pass a repodata.json as the channel serves it")
    assert err.startswith("error: ")


@pytest.mark.parametrize(
    "argv",
    [["--repodata", "conda-forge"], ["--repodata", "=x"], ["--bogus"], ["--repodata"]],
    ids=["no-path", "no-channel", "unknown-option", "no-value"],
)
def test_usage_errors_exit_2_with_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert (
        code == 2
        and doc["error"]["kind"] == "usage"
        and doc["error"]["fix"].startswith("Run `python scripts/kb_audit.py --help`")
    )
    assert "Traceback" not in err


def test_an_invalid_kb_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--kb", str(tmp_path))
    assert code == 2 and "the knowledge base has" in err, err


# ---- the script's own failures ----


@pytest.mark.parametrize(
    ("raised", "code", "kind"), [(KeyboardInterrupt(), 130, "interrupted"), (RuntimeError("boom"), 2, "internal")]
)
def test_ctrl_c_and_a_bug_end_in_a_message(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, raised: BaseException, code: int, kind: str
) -> None:
    def explode(*_: object) -> None:
        raise raised

    monkeypatch.setattr(_script(), "audit", explode)
    monkeypatch.delenv("ENVSOLVER_DEBUG", raising=False)
    got, out, err = run(capsys, "--json")
    assert (got, json.loads(out)["error"]["kind"]) == (code, kind) and "Traceback" not in err


# ---- the driver table (--driver-table): NVIDIA's "Compatible GPUs" table against pci_devices.yaml ----

DRIVER_TABLE = ROOT / "tests" / "data" / "driver_table" / "compatible-gpus-df1c9a3.md"
# A row the 580 branch's README has (NVIDIA/open-gpu-kernel-modules @ 1a5075f, 580.142) and df1c9a3's lacks.
ROW_580 = "| NVIDIA RTX PRO 4500 Blackwell Server Edition            | 2C3A 10DE 21F4 |"


def test_the_driver_table_audit_agrees_with_the_recorded_copy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--driver-table", str(DRIVER_TABLE))
    assert code == 0, (out, err)
    assert "pci_devices.yaml (825 rows) against the driver table in" in out and "(825 rows)" in out, out
    assert "0 contradiction(s), 0 note(s): the KB agrees with the data." in out, out


def test_the_driver_table_audit_names_each_added_removed_and_renamed_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = DRIVER_TABLE.read_text(encoding="utf-8")
    removed = "| NVIDIA GeForce RTX 2080 Ti                              | 1E04           |\n"
    assert removed in text and "| NVIDIA RTX A5500        " in text
    text = text.replace(removed, "").replace("| NVIDIA RTX A5500        ", "| NVIDIA RTX A5500 Pro    ", 1)
    text = text.replace("| NVIDIA GB300 ", f"{ROW_580}\n| NVIDIA GB300 ", 1)
    changed = tmp_path / "README.md"
    changed.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "--driver-table", str(changed), "--json")
    assert code == 1, (out, err)
    doc = json.loads(out)
    got = [(f["check"], f["kb"], f["data"]) for f in doc["contradictions"]]
    assert got == [
        ("added", "no row", "NVIDIA RTX PRO 4500 Blackwell Server Edition | 2C3A 10DE 21F4"),
        ("removed", "NVIDIA GeForce RTX 2080 Ti | 1E04", "no row"),
        ("renamed", "NVIDIA RTX A5500 | 2233 1028 165A", "NVIDIA RTX A5500 Pro | 2233 1028 165A"),
    ], got
    assert all("scripts/update_pci_devices.py" in f["fix"] for f in doc["contradictions"]), doc
    code, out, _ = run(capsys, "--driver-table", str(changed))
    assert code == 1 and "contradiction [renamed] pci_devices.yaml" in out and "3 contradiction(s)" in out, out


@pytest.mark.parametrize("content", [None, "# README\n\nno table here\n"], ids=["missing", "no-table"])
def test_a_driver_table_file_that_cannot_be_read_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "README.md"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, out, err = run(capsys, "--driver-table", str(path), "--json")
    assert code == 2, (out, err)
    doc = json.loads(out)
    assert doc["error"]["kind"] == "bad_input" and "Pass NVIDIA/open-gpu-kernel-modules' README.md" in (
        doc["error"]["fix"] or doc["error"]["message"]
    ), doc
    assert "Traceback" not in err, err


@pytest.mark.parametrize("extra", [["--live"], ["--derive"]], ids=["live", "derive"])
def test_the_driver_table_audit_takes_no_other_mode(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    code, out, err = run(capsys, "--driver-table", str(DRIVER_TABLE), *extra, "--json")
    assert code == 2 and json.loads(out)["error"]["kind"] == "usage", (out, err)
