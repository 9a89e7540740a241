"""Torch is never replaced: verify's pip_conda_mix over facts (each state, the message, the fix), the rule it shares
with install (install/shadowing), the hook's pre-flight refusing the same finding, and the probe's reading of a real
prefix's *.dist-info directories. The real pip, a real torch wheel and `envsolver install` undoing it:
tests/test_pypi_over_conda_install.py.

The conda records are real: the H200 lock's entries (locks/h200/conda-lock.yml, made from the bundled snapshot) and
conda-forge's pytorch-2.12.0-cuda129_mkl_py311_h49b8cc7_300 (data-apis/array-api-extra pixi.lock in shared/realdata);
the PyPI metadata is the real METADATA of peft 0.13.2, torch 2.8.0 and torch 2.13.0+cpu."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from envsolver.hook import run as hook_run
from envsolver.install import shadowing
from envsolver.kb import KnowledgeBase
from envsolver.kb.pypi_names import Provided, provided_by
from envsolver.lock import lockfile
from envsolver.verify import checks, checks_pypi
from envsolver.verify import run as verify_run
from tests.dist import python_without_torch

ROOT = Path(__file__).resolve().parent.parent
H200 = lockfile.read(ROOT / "locks" / "h200" / "conda-lock.yml", None)
ENTRIES = {e.name: e for e in H200.entries}
PYTORCH_212 = {"name": "pytorch", "version": "2.12.0", "build": "cuda129_mkl_py311_h49b8cc7_300"}
SITE = "/env/lib/python3.11/site-packages"
ENVSOLVER_META = {"envsolver_version": "0.1.0", "envsolver_torch_cuda_arch_list": "9.0+PTX"}
H200_META = [{"name": e.name, "version": e.version, "build": e.build} for e in H200.entries]


def meta_of(*names: str) -> list[dict[str, Any]]:
    """conda-meta records (as the probe reports them) of the H200 lock's packages NAMES."""
    return [{"name": n, "version": ENTRIES[n].version, "build": ENTRIES[n].build} for n in names]


def dist(name: str, version: str, where: str = "prefix", **more: Any) -> dict[str, Any]:
    """A foreign distribution as the probe reports it."""
    site = {"prefix": SITE, "user": "/home/u/.local/lib/python3.11/site-packages", "pythonpath": "/opt/py"}[where]
    doc = {"name": name, "version": version, "installer": "pip", "path": f"{site}/{name}-{version}.dist-info"}
    return {**doc, "where": where, "requested": False, "requires": [], **more}


TORCH = dist("torch", "2.13.0+cpu", requested=True, requires=["filelock", "typing-extensions>=4.10.0"])
PEFT = dist("peft", "0.13.2", requires=["numpy >=1.17", "torch >=1.13.0", "transformers"])  # peft 0.13.2 METADATA


def facts(meta: list[dict[str, Any]], dists: list[dict[str, Any]] | None, conda: bool = True) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "python": {"prefix": "/env", "executable": "/env/bin/python", "conda_meta": conda, "pyvenv_cfg": False},
        "conda_meta": meta,
    }
    if dists is not None:
        doc["foreign_dists"] = dists
    return doc


def check(kb: KnowledgeBase, doc: dict[str, Any], **ctx: Any) -> checks.Check:
    (found,) = checks.run(checks.Context(doc, kb, **ctx), ("pip_conda_mix",))
    return found


def test_the_kb_knows_what_the_stack_installs_from_conda(kb: KnowledgeBase) -> None:
    """The one mapping (kb/pypi_names): torch, triton and numpy are conda's own distributions; NVIDIA's CUDA wheels
    of both majors sit beside the conda package that holds the same library."""
    assert provided_by(kb, "pytorch") == (Provided("torch", True),)
    assert provided_by(kb, "triton") == (Provided("triton", True),)
    assert provided_by(kb, "numpy") == (Provided("numpy", True),)
    assert provided_by(kb, "libcublas") == (Provided("nvidia-cublas-cu12", False), Provided("nvidia-cublas", False))
    assert provided_by(kb, "nccl") == (Provided("nvidia-nccl-cu12", False), Provided("nvidia-nccl-cu13", False))
    assert provided_by(kb, "libcudnn-dev") == ()  # unknown: no row, no guess
    # every CUDA library of the H200 lock's torch has its PyPI wheels named
    libraries = ["cuda-cudart", "cuda-cupti", "cuda-nvrtc", "cuda-nvtx", "libcublas", "libcufft", "libcufile"]
    libraries += ["libcurand", "libcusolver", "libcusparse", "libnvjitlink", "libcudnn", "nccl"]
    assert all(name in ENTRIES and provided_by(kb, name) for name in libraries)


@pytest.mark.parametrize(
    ("meta", "dists", "conda", "status", "detail"),
    [
        pytest.param(
            [], None, False, "pass", "not a conda environment (no conda-meta records): nothing of conda's to replace",
            id="a-plain-python",
        ),
        pytest.param(
            [PYTORCH_212], None, True, "skip",
            "the probe did not list the distributions no conda package installed (an older probe)", id="older-probe",
        ),
        pytest.param(
            meta_of("pytorch", "triton", "numpy", "libcublas"), [PEFT], True, "pass",
            "no PyPI copy of what the conda part provides (its 3 Python distributions: torch, triton, numpy); 1 from "
            "PyPI beside it",
            id="peft-beside-conda-torch",
        ),
        pytest.param(
            [PYTORCH_212], [TORCH, PEFT], True, "fail",
            "torch 2.13.0+cpu from PyPI (installed by pip, asked for by name) over conda's pytorch 2.12.0 "
            "cuda129_mkl_py311_h49b8cc7_300, required by peft 0.13.2 (torch>=1.13.0, which pytorch 2.12.0 meets)",
            id="pypi-torch-over-conda-pytorch",
        ),
        pytest.param(
            meta_of("numpy"), [dist("numpy", "1.26.4", installer="uv")], True, "fail",
            f"numpy 1.26.4 from PyPI (installed by uv) over conda's numpy {ENTRIES['numpy'].version} "
            f"{ENTRIES['numpy'].build}", id="a-second-numpy",
        ),
        pytest.param(
            meta_of("libcublas"),
            [dist("nvidia-cublas-cu12", "12.8.4.1")], True, "fail",
            "nvidia-cublas-cu12 12.8.4.1 from PyPI (installed by pip): a second copy of what conda's libcublas "
            f"{ENTRIES['libcublas'].version} {ENTRIES['libcublas'].build} holds",
            id="a-cuda-wheel-beside-conda-cublas",
        ),
        pytest.param(
            [PYTORCH_212], [dist("torch", "2.9.1", "user")], True, "fail",
            "torch 2.9.1 in /home/u/.local/lib/python3.11/site-packages (the user site-packages) from PyPI (installed "
            "by pip) comes first on sys.path: it shadows conda's pytorch 2.12.0 cuda129_mkl_py311_h49b8cc7_300",
            id="torch-in-the-user-site",
        ),
        pytest.param(
            [PYTORCH_212], [dist("torch", "2.9.1", installer=None)], True, "fail",
            "torch 2.9.1 (listed by no conda record) over conda's pytorch 2.12.0 cuda129_mkl_py311_h49b8cc7_300",
            id="no-installer-no-record",
        ),
    ],
)  # fmt: skip
def test_each_state(
    kb: KnowledgeBase, meta: list[dict[str, Any]], dists: Any, conda: bool, status: str, detail: str
) -> None:
    found = check(kb, facts(meta, dists, conda))
    assert (found.status, found.detail) == (status, detail), found


@pytest.mark.parametrize(
    ("meta", "dists", "lock", "fix"),
    [
        pytest.param(
            [PYTORCH_212], [TORCH], {},
            "/env/bin/python -m pip uninstall -y torch, then conda install -p /env --force-reinstall "
            "pytorch=2.12.0=cuda129_mkl_py311_h49b8cc7_300",
            id="a-conda-environment",
        ),
        pytest.param(
            [PYTORCH_212], [TORCH], ENVSOLVER_META,
            "envsolver install conda-lock.yml -p /env (the lock it was installed from: it removes PyPI's torch with "
            "the environment's pip and links pytorch again)",
            id="installed-by-envsolver",
        ),
        pytest.param(
            meta_of("libcublas", "nccl"), [dist("nvidia-cublas-cu12", "12.8.4.1"), dist("nvidia-nccl-cu12", "2.27.3")],
            ENVSOLVER_META,
            "envsolver install conda-lock.yml -p /env (the lock it was installed from: it removes PyPI's "
            "nvidia-cublas-cu12 nvidia-nccl-cu12 with the environment's pip)",
            id="cuda-wheels-nothing-to-link-again",
        ),
        pytest.param(
            [PYTORCH_212], [dist("torch", "2.9.1", installer="uv")], {},
            "uv pip uninstall --python /env/bin/python torch, then conda install -p /env --force-reinstall "
            "pytorch=2.12.0=cuda129_mkl_py311_h49b8cc7_300",
            id="uv-put-it-there",
        ),
        pytest.param(
            [PYTORCH_212], [dist("torch", "2.9.1", "user")], ENVSOLVER_META,
            "export PYTHONNOUSERSITE=1 before running the environment's python", id="the-user-site",
        ),
        pytest.param(
            [PYTORCH_212], [dist("torch", "2.9.1", "pythonpath")], ENVSOLVER_META,
            "unset PYTHONPATH (or take /opt/py out of it)", id="pythonpath",
        ),
        pytest.param(
            [PYTORCH_212], [TORCH, dist("sglang", "0.5", requires=["torch==2.13.0"])], ENVSOLVER_META,
            "envsolver install conda-lock.yml -p /env (the lock it was installed from: it removes PyPI's torch with "
            "the environment's pip and links pytorch again); sglang 0.5 needs torch==2.13.0, which conda's pytorch "
            "2.12.0 does not meet: remake the lock with one that meets it (envsolver make --torch '==2.13.0' with "
            "your other options)",
            id="a-requirement-conda-does-not-meet",
        ),
    ],
)  # fmt: skip
def test_each_fix(
    kb: KnowledgeBase, meta: list[dict[str, Any]], dists: list[dict[str, Any]], lock: dict[str, str], fix: str
) -> None:
    found = check(kb, facts(meta, dists), lock_meta=lock)
    assert (found.status, found.fix) == ("fail", fix), found


def test_with_the_lock_it_names_the_locks_conda_build(kb: KnowledgeBase) -> None:
    """verify --lock: the lock's pytorch is the one replaced, named with its build; the installed record's listing of
    its own dist-info counts too (torch-VERSION.dist-info), and a PyPI file written over that very directory is
    seen by its INSTALLER (the probe reports it foreign)."""
    torch, python = ENTRIES["pytorch"], ENTRIES["python"].version.rsplit(".", 1)[0]
    listed = {
        **meta_of("pytorch")[0],
        "dist_infos": [f"lib/python{python}/site-packages/torch-{torch.version}.dist-info"],
    }
    doc = facts([listed], [dist("torch", torch.version, installer="pip")])
    found = check(kb, doc, lock_entries=tuple(H200.entries), lock_meta=H200.metadata)
    assert found.status == "fail"
    assert found.detail == (
        f"torch {torch.version} from PyPI (installed by pip) over the lock's conda pytorch {torch.version} "
        f"{torch.build}"
    )
    assert found.fix.startswith("envsolver install conda-lock.yml -p /env (the lock it was installed from")


def test_many_cuda_wheels_are_counted_not_listed(kb: KnowledgeBase) -> None:
    """PyPI's torch 2.8.0 brings 14 CUDA wheels: the detail names the first few, the fix all."""
    wheels = ["nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cupti-cu12", "nvidia-cudnn-cu12"]
    wheels += ["nvidia-cublas-cu12", "nvidia-cufft-cu12", "nvidia-curand-cu12", "nvidia-cusolver-cu12"]
    wheels += ["nvidia-cusparse-cu12", "nvidia-nccl-cu12", "nvidia-nvtx-cu12", "nvidia-nvjitlink-cu12"]
    wheels += ["nvidia-cufile-cu12"]
    torch = dist("torch", "2.8.0", requested=True, requires=[f"{w}==1; platform_system == 'Linux'" for w in wheels])
    doc = facts(H200_META, [torch, *(dist(w, "1") for w in wheels)])
    found = check(kb, doc, lock_meta=ENVSOLVER_META)
    assert found.status == "fail"
    assert found.detail.endswith(f"… and {len(wheels) + 1 - checks_pypi.SHOWN} more"), found.detail
    assert "required by torch 2.8.0 (nvidia-cuda-nvrtc-cu12==1)" in found.detail, found.detail
    assert all(w in found.fix for w in wheels), found.fix


def test_the_hook_refuses_with_verifys_finding(kb: KnowledgeBase) -> None:
    """The hook's pre-flight (verify's build checks) holds pip_conda_mix: PyPI's torch over conda's stops it before
    any compiler runs, with the same detail and fix as verify's."""
    assert "pip_conda_mix" in checks.BUILD
    doc = facts([PYTORCH_212], [TORCH, PEFT])
    verified = check(kb, doc, lock_meta=ENVSOLVER_META)
    findings = {c.id: c for c in hook_run.preflight(doc, kb, ENVSOLVER_META)}
    assert findings["pip_conda_mix"] == verified and verified.status == "fail"
    report = hook_run.HookReport(Path("/env"), "9.0", findings=list(findings.values()))
    assert not report.ok
    # with --lock, the lock's pytorch is the one named
    locked = {c.id: c for c in hook_run.preflight(doc, kb, H200.metadata, tuple(H200.entries))}
    torch = ENTRIES["pytorch"]
    assert f"over the lock's conda pytorch {torch.version} {torch.build}" in locked["pip_conda_mix"].detail


def test_the_h200_lock_installed_as_conda_meta_and_nothing_from_pypi_passes(kb: KnowledgeBase) -> None:
    found = check(kb, facts(H200_META, []), lock_entries=tuple(H200.entries))
    assert found.status == "pass", found
    names = shadowing.provides(kb, [shadowing.Package(e.name, e.version, e.build) for e in H200.entries])
    assert {"torch", "triton", "numpy"} <= set(names)
    assert found.detail.startswith(f"no PyPI copy of what the conda part provides (its {len(names)} Python distrib")


# The probe, in a real prefix: a venv of this interpreter with conda-meta/ beside hand-made *.dist-info directories.


def _info(site: Path, name: str, version: str, installer: str | None, requires: tuple[str, ...] = ()) -> str:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n\nThe description, which the probe does not read.\n")
    if installer:
        (info / "INSTALLER").write_text(installer + "\n")
    return str(info)


def test_the_probe_lists_what_no_conda_package_installed(tmp_path: Path) -> None:
    python = python_without_torch(tmp_path / "env")
    prefix = tmp_path / "env"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = prefix / "lib" / version / "site-packages"
    rel = f"lib/{version}/site-packages"
    _info(site, "numpy", "2.3.5", "conda")  # conda's, listed by its record
    pip_over_listed = _info(site, "triton", "3.6.0", "pip")  # listed, but pip wrote it
    _info(site, "torch", "2.13.0+cpu", "pip", ("filelock", "sympy>=1.13.3", 'optree>=0.13.0; extra == "optree"'))
    (prefix / "conda-meta").mkdir()
    for name, version_, info in (("numpy", "2.3.5", "numpy-2.3.5"), ("triton", "3.6.0", "triton-3.6.0")):
        files = [f"{rel}/{info}.dist-info/METADATA", f"{rel}/{name}/__init__.py"]
        files += [f"{rel}/{name}/_vendor/six-1.16.0.dist-info/METADATA"]  # vendored: not numpy's own distribution
        record = {"name": name, "version": version_, "build": "h0", "files": files}
        (prefix / "conda-meta" / f"{name}-{version_}-h0.json").write_text(json.dumps(record))
    before = tmp_path / "pythonpath"
    shadow = _info(before, "torch", "2.9.1", "pip")
    after = tmp_path / "after"  # on sys.path after the environment's site-packages (a .pth file): it shadows nothing
    _info(after, "torch", "2.5.0", "pip")
    (site / "after.pth").write_text(f"{after}\n")
    doc = verify_run.probe(python, False, False, 60, {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(before)}, torch=False)
    assert {m["name"]: m.get("dist_infos") for m in doc["conda_meta"]} == {
        "numpy": [f"{rel}/numpy-2.3.5.dist-info"],
        "triton": [f"{rel}/triton-3.6.0.dist-info"],
    }
    got = {(d["name"], d["version"], d["where"]): d for d in doc["foreign_dists"]}
    want = {("torch", "2.9.1", "pythonpath"), ("triton", "3.6.0", "prefix"), ("torch", "2.13.0+cpu", "prefix")}
    assert set(got) == want, doc["foreign_dists"]
    assert got[("torch", "2.9.1", "pythonpath")]["path"] == shadow
    assert got[("triton", "3.6.0", "prefix")]["path"] == pip_over_listed
    assert got[("torch", "2.13.0+cpu", "prefix")]["requires"] == ["filelock", "sympy>=1.13.3"]  # no extra's


def test_the_probe_lists_nothing_outside_a_conda_environment(tmp_path: Path) -> None:
    python = python_without_torch(tmp_path / "env")
    doc = verify_run.probe(python, False, False, 60, {"PATH": "/usr/bin:/bin"}, torch=False)
    assert doc["foreign_dists"] == [] and doc["conda_meta"] == []


def test_unsetting_pythonpath_as_the_fix_says_brings_condas_torch_back(kb: KnowledgeBase, tmp_path: Path) -> None:
    """A torch on PYTHONPATH comes before the environment's site-packages: verify fails naming the directory, and the
    fix it prints (unset PYTHONPATH), applied to the environment verify runs in, makes it pass."""
    python_without_torch(tmp_path / "env")
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "pytorch-2.12.0-h0.json").write_text(json.dumps({**PYTORCH_212, "files": []}))
    elsewhere = tmp_path / "py"
    _info(elsewhere, "torch", "2.9.1", "pip")
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(elsewhere)}
    _, _, (found,) = verify_run.verify(kb, prefix, None, None, False, ("pip_conda_mix",), environ)
    assert found.status == "fail" and f"torch 2.9.1 in {elsewhere} (on PYTHONPATH)" in found.detail, found
    assert found.fix == f"unset PYTHONPATH (or take {elsewhere} out of it)", found
    del environ["PYTHONPATH"]
    _, _, (found,) = verify_run.verify(kb, prefix, None, None, False, ("pip_conda_mix",), environ)
    assert found.status == "pass", found


def test_a_record_lists_its_own_distributions_not_those_it_vendors() -> None:
    """conda-forge's setuptools carries setuptools/_vendor/packaging-24.2.dist-info: that is setuptools' file, not a
    `packaging` distribution it installs (a PyPI packaging is no copy of it); a top-level module is no dist-info."""
    site = "lib/python3.13/site-packages"
    files = [
        f"{site}/setuptools-80.9.0.dist-info/METADATA",
        f"{site}/setuptools/_vendor/packaging-24.2.dist-info/RECORD",
    ]
    files += [f"{site}/distutils-precedence.pth", f"{site}/_distutils_hack/__init__.py", f"{site}/six.py"]
    assert shadowing.listed_infos({"files": files}) == {f"{site}/setuptools-80.9.0.dist-info"}
    assert shadowing.listed_infos({"files": "not a list"}) == set()
    assert shadowing.dist_name("nvidia_cublas_cu12-12.8.4.1.dist-info") == "nvidia-cublas-cu12"


@pytest.mark.parametrize(
    ("listed", "installer", "foreign"),
    [(True, "conda", False), (True, None, False), (True, "pip", True), (True, "UV\n", True), (False, "conda", True)],
)
def test_what_is_foreign(listed: bool, installer: str | None, foreign: bool) -> None:
    assert shadowing.foreign(listed, installer) is foreign
