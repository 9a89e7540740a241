"""The upstream KB audit (envsolver/kb/upstream/, scripts/kb_audit.py --upstream/--live): the KB against PyPI's
torch, DeepSpeed and NVIDIA CUDA facts.

The offline part runs on the recording tests/data/kb_audit/upstream.json (read 2026-12-01 by
`python scripts/kb_audit.py --live --record tests/data/kb_audit/upstream.json`; its `read` and `sources` say when
and where). Doctored cases edit a copy of the KB's YAML (or of the recording) and assert exactly the contradiction
the edit causes, naming the row and the fact. The parsers are checked on real output captured from NVIDIA's
wheels and DeepSpeed's sdists (each sample names its file). No network: --live is not run here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase, load_kb
from envsolver.kb.upstream import collect, compare, facts, render, sdists, wheels
from envsolver.net import pypi_index as index
from tests.test_kb_audit import run  # scripts/kb_audit.py, loaded once

ROOT = Path(__file__).resolve().parent.parent
KB_DATA = ROOT / "envsolver" / "kb" / "data"
RECORDING = ROOT / "tests" / "data" / "kb_audit" / "upstream.json"


# ---- the recording against the shipped KB ----


def test_recorded_sources_agree_with_the_kb(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--upstream", str(RECORDING))
    assert code == 0, f"exit {code}\n{out}\n{err}"
    assert "0 contradiction(s), 1 note(s): the KB agrees with the data." in out, out
    # What the recording covers: every upstream torch release, every DeepSpeed sdist from 0.14.0, every nvcc wheel.
    assert "(3 torch releases, 47 DeepSpeed sdists, 36 nvcc wheels read)" in out, out
    # The one note: the toolkits NVIDIA has no wheel of on PyPI (CUDA 11.7 is the first).
    assert "  - CUDA 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6\n  + no NVIDIA CUDA wheel on PyPI" in out, out


def test_recording_names_its_date_and_sources_and_round_trips(tmp_path: Path) -> None:
    doc = json.loads(RECORDING.read_text())
    assert re.fullmatch(r"2026-12-01", doc["read"]), doc["read"]
    assert "--live --record" in doc["header"], doc["header"]
    pages = {k: v for k, v in doc["sources"].items() if k != "torch metadata"}
    assert set(pages) == {
        "torch",
        "deepspeed",
        "nvidia-cuda-crt",
        *(f"nvidia-cuda-{kind}{suffix}" for kind in ("nvcc", "runtime") for suffix in ("-cu11", "-cu12", "")),
    }, pages
    assert all(url == f"https://pypi.org/simple/{name}/" for name, url in pages.items()), pages
    copy = tmp_path / "again.json"
    facts.dump(facts.load(RECORDING), copy)
    assert copy.read_bytes() == RECORDING.read_bytes(), "load + dump of the recording is not byte-identical"


# ---- a doctored KB: each edit gives exactly its contradiction ----


def _kb_copy(tmp_path: Path, file: str, old: str, new: str) -> Path:
    data = tmp_path / "kb"
    shutil.copytree(KB_DATA, data)
    text = (data / file).read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {file}"
    (data / file).write_text(text.replace(old, new))
    return data


CASES: list[tuple[str, str, str, str, list[tuple[str, str, str, str]]]] = [
    # (id, file, old, new, [(check, subject, kb, data prefix)])
    (
        "gcc_max",
        "cuda.yaml",
        "107, 110, 120, 121], gcc_max: 16, source: [PT-196560",
        "107, 110, 120, 121], gcc_max: 15, source: [PT-196560",
        [
            ("gcc_max", "cuda.yaml toolkits[22] (CUDA 13.4)", "gcc_max 15", "nvidia_cuda_crt-13.4.59-"),
            ("gcc_max", "cuda.yaml toolkits[22] (CUDA 13.4)", "gcc_max 15", "nvidia_cuda_crt-13.4.92-"),
        ],
    ),
    (
        "sm",
        "cuda.yaml",
        "100, 101, 103, 120, 121], gcc_max: 14",
        "100, 101, 103, 120], gcc_max: 14",
        [
            (
                "sm",
                "cuda.yaml toolkits[17] (CUDA 12.9)",
                "sm 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120",
                "ptxas --help: sm 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121 "
                "(nvidia_cuda_nvcc_cu12-12.9.41-",
            )
        ],
    ),
    (
        "python_min",
        "torch.yaml",
        'pypi_default_cuda: "13.2", cudnn: "9.26", nccl: "2.30", python_min: "3.11"',
        'pypi_default_cuda: "13.2", cudnn: "9.26", nccl: "2.30", python_min: "3.10"',
        [
            (
                "python_min",
                "torch.yaml upstream_releases[2] (torch 2.15.0)",
                "python_min 3.10",
                "Requires-Python >=3.11",
            ),
            (
                "python_min",
                "torch.yaml upstream_releases[2] (torch 2.15.0)",
                "python_min 3.10",
                "lowest CPython wheel cp311",
            ),
        ],
    ),
    (
        "default_cuda",
        "torch.yaml",
        'pypi_default_cuda: "13.2", cudnn: "9.26"',
        'pypi_default_cuda: "13.0", cudnn: "9.26"',
        [
            (
                "pypi_default_cuda",
                "torch.yaml upstream_releases[2] (torch 2.15.0)",
                "pypi_default_cuda 13.0",
                "Requires-Dist cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]"
                '==13.2.2; platform_system == "Linux" (torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl)',
            )
        ],
    ),
    (
        "nccl",
        "torch.yaml",
        'pypi_default_cuda: "13.2", cudnn: "9.26", nccl: "2.30"',
        'pypi_default_cuda: "13.2", cudnn: "9.26", nccl: "2.29"',
        [
            (
                "nccl",
                "torch.yaml upstream_releases[2] (torch 2.15.0)",
                "nccl 2.29",
                "Requires-Dist nvidia-nccl-cu13==2.30.7",
            )
        ],
    ),
    (
        "mismatch",
        "deepspeed.yaml",
        '"12.6", "12.8", "12.9"]},\n     source: [DS-v0.19.1',
        '"12.6", "12.8"]},\n     source: [DS-v0.19.1',
        [
            (
                "cuda_minor_mismatch_ok",
                "deepspeed.yaml releases[5] (0.19.1-0.19.8)",
                "cuda_minor_mismatch_ok 10: 10.0, 10.1, 10.2; 11: 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6, 11.7, "
                "11.8; 12: 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.8",
                "op_builder/builder.py: 10: 10.0, 10.1, 10.2; 11: 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6, 11.7, "
                "11.8; 12: 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.8, 12.9 (deepspeed-0.19.1.tar.gz and 7 more)",
            )
        ],
    ),
    (
        "min_torch",
        "deepspeed.yaml",
        '{since: "0.19.1", latest: "0.19.8", min_torch: "2.0"',
        '{since: "0.19.1", latest: "0.19.8", min_torch: "1.9"',
        [
            (
                "min_torch",
                "deepspeed.yaml releases[5] (0.19.1-0.19.8)",
                "min_torch 1.9",
                "README.md: PyTorch >= 2.0 (deepspeed-0.19.1.tar.gz and 7 more)",
            )
        ],
    ),
    (
        "requires",
        "deepspeed.yaml",
        '"pydantic>=2.0.0",\n                "torch>=2.0.0", tqdm]',
        '"pydantic>=2.0.0",\n                "torch>=2.1.0", tqdm]',
        [
            (
                "requires",
                "deepspeed.yaml pypi_requirements[5] (0.19.1-0.19.8)",
                "requires holds torch>=2.1.0 beyond the sdist's",
                "requirements/requirements.txt holds torch>=2.0.0 beyond the row's "
                "(deepspeed-0.19.1.tar.gz and 7 more)",
            )
        ],
    ),
    (
        "sha256",
        "deepspeed.yaml",
        'sha256: "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"',
        'sha256: "0e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af"',
        [
            (
                "sha256",
                "deepspeed.yaml pypi_sdists[46] (deepspeed 0.19.8)",
                "sha256 0e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af",
                "sha256 9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af (PyPI, 2026-12-01)",
            )
        ],
    ),
]


def _contradictions(doc: dict[str, Any], expected: list[Any]) -> None:
    seen = [(c["check"], c["subject"], c["kb"], c["data"]) for c in doc["contradictions"]]
    assert len(seen) == len(expected), f"expected {len(expected)} contradiction(s), got:\n" + "\n".join(map(str, seen))
    for (check, subject, kb, data_prefix), got in zip(expected, sorted(seen), strict=True):
        assert got[:3] == (check, subject, kb), f"expected {(check, subject, kb)}, got {got[:3]}"
        assert got[3].startswith(data_prefix), f"expected data starting {data_prefix!r}, got {got[3]!r}"
    assert doc["ok"] is False and doc["exit_code"] == 1, doc


# Two cases end to end (the YAML edited, the script run on it); every case in process on the loaded KB with the
# same row changed (dataclasses.replace), which keeps the suite fast (a KB load is about 0.3 s here).
END_TO_END = ("gcc_max", "requires")


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"), [c[1:] for c in CASES if c[0] in END_TO_END], ids=list(END_TO_END)
)
def test_a_doctored_kb_file_is_named_with_its_fact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str, old: str, new: str, expected: list[Any]
) -> None:
    data = _kb_copy(tmp_path, file, old, new)
    code, out, err = run(capsys, "--kb", str(data), "--upstream", str(RECORDING), "--json")
    assert code == 1, f"exit {code}: the edit was not seen\n{out}\n{err}"
    _contradictions(json.loads(out), expected)


@cache
def _shipped() -> tuple[KnowledgeBase, facts.Facts]:
    return load_kb(KB_DATA), facts.load(RECORDING)


def _replace(kb: KnowledgeBase, table: str, index: int, **changes: Any) -> KnowledgeBase:
    rows = list(getattr(kb, table))
    rows[index] = dataclasses.replace(rows[index], **changes)
    return dataclasses.replace(kb, **{table: tuple(rows)})


def _without_129(kb: KnowledgeBase) -> dict[int, frozenset[MajorMinor]]:
    lists = dict(kb.deepspeed_releases[5].cuda_minor_mismatch_ok)
    lists[12] = lists[12] - {MajorMinor(12, 9)}
    return lists


EDITS: dict[str, Callable[[KnowledgeBase], KnowledgeBase]] = {
    "gcc_max": lambda kb: _replace(kb, "toolkits", 22, gcc_max=15),
    "sm": lambda kb: _replace(kb, "toolkits", 17, sm=(kb.toolkits[17].sm or frozenset()) - {121}),
    "python_min": lambda kb: _replace(kb, "torch_releases", 2, python_min=MajorMinor(3, 10)),
    "default_cuda": lambda kb: _replace(kb, "torch_releases", 2, pypi_default_cuda=MajorMinor(13, 0)),
    "nccl": lambda kb: _replace(kb, "torch_releases", 2, nccl="2.29"),
    "mismatch": lambda kb: _replace(kb, "deepspeed_releases", 5, cuda_minor_mismatch_ok=_without_129(kb)),
    "min_torch": lambda kb: _replace(kb, "deepspeed_releases", 5, min_torch=Version("1.9")),
    "requires": lambda kb: _replace(
        kb,
        "deepspeed_requirements",
        5,
        requires=tuple("torch>=2.1.0" if r == "torch>=2.0.0" else r for r in kb.deepspeed_requirements[5].requires),
    ),
    "sha256": lambda kb: _replace(kb, "deepspeed_sdists", 46, sha256="0" + kb.deepspeed_sdists[46].sha256[1:]),
}


@pytest.mark.parametrize(("edit", "expected"), [(EDITS[c[0]], c[4]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_changed_kb_row_is_named_with_its_fact(
    edit: Callable[[KnowledgeBase], KnowledgeBase], expected: list[Any]
) -> None:
    kb, recorded = _shipped()
    report = compare.compare(edit(kb), recorded)
    _contradictions(render.as_json(report, recorded), expected)


def test_a_release_the_kb_lacks_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch 2.15.0's row removed: PyPI's newest release is then one the KB does not know."""
    text = (KB_DATA / "torch.yaml").read_text()
    start = text.index('  - {version: "2.15.0"')
    data = _kb_copy(tmp_path, "torch.yaml", text[start:], "")
    code, out, err = run(capsys, "--kb", str(data), "--upstream", str(RECORDING))
    assert code == 1, f"exit {code}\n{out}\n{err}"
    assert (
        "contradiction [newest] torch on PyPI\n  - torch.yaml: newest 2.14.1\n  + torch 2.15.0 (2.15.0: "
        "Requires-Python >=3.11; cuda-toolkit[" in out
    ), out
    assert "fix: Add an upstream_releases row for each" in out, out


def test_a_cuda_minor_the_kb_lacks_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new CUDA minor on PyPI (the recording with nvidia-cuda-runtime 13.6.20 added) has no toolkits row."""
    doc = json.loads(RECORDING.read_text())
    doc["cuda_versions"]["nvidia-cuda-runtime"].append("13.6.20")
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "--upstream", str(path))
    assert code == 1, f"exit {code}\n{out}\n{err}"
    assert (
        "contradiction [toolkits] CUDA 13.6\n  - cuda.yaml toolkits: no row for 13.6\n"
        "  + released: nvidia-cuda-runtime 13.6.20 (PyPI, 2026-12-01)\n  fix: Add a toolkits row for CUDA 13.6" in out
    ), out


def test_text_from_a_source_reaches_the_terminal_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(RECORDING.read_text())
    doc["deepspeed"]["0.19.8"]["requires"].append("evil\x1b]0;owned\x07")
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "--upstream", str(path))
    assert code == 1, f"exit {code}\n{out}\n{err}"
    assert "\x1b" not in out and "\x07" not in out, "a control character reached stdout raw"
    assert "requirements/requirements.txt holds evil\\x1b]0;owned\\x07 beyond the row's" in out, out


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["deepspeed"]["0.19.8"].update(sha256="XYZ"), "deepspeed.0.19.8.sha256"),
        (lambda d: d["nvcc"]["13.5.37"].update(sm=["sm_75"]), "nvcc.13.5.37.sm"),
        (lambda d: d.pop("torch"), "torch: expected an object"),
        (lambda d: d["torch_versions"].append("v2.16"), "torch_versions: 'v2.16' is not a canonical version"),
    ],
    ids=["sha256", "sm", "no-torch", "version"],
)
def test_a_broken_recording_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, said: str
) -> None:
    doc = json.loads(RECORDING.read_text())
    edit(doc)
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "--upstream", str(path), "--json")
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert said in err and f"python scripts/kb_audit.py --live --record {path}" in err, err
    assert json.loads(out)["error"]["kind"] == "bad_input", out


@pytest.mark.parametrize(
    "argv",
    [
        ["--record", "x.json"],
        ["--cache", "dir"],
        ["--upstream", str(RECORDING), "--repodata", "conda-forge=x"],
        ["--upstream", str(RECORDING), "--live"],
        ["--upstream", str(RECORDING), "--record", "x.json"],
    ],
    ids=["record-alone", "cache-alone", "with-repodata", "live-and-recording", "record-without-live"],
)
def test_options_that_do_not_go_together_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert err.startswith("error: ") and "kb_audit.py --help" in err, err


# ---- the readers, on real output ----

# nvidia-cuda-crt 13.5.37 (manylinux2014_x86_64), nvidia/cu13/include/crt/host_config.h lines 133-139
HOST_CONFIG = """#if defined(__GNUC__)

#if __GNUC__ > 16

#error -- unsupported GNU version! gcc versions later than 16 are not supported! The nvcc flag \
'-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host \
compiler may cause compilation failure or incorrect run time execution. Use at your own risk.

#endif /* __GNUC__ > 16 */
"""
# nvidia-cuda-nvcc 13.5.37 (manylinux2014_x86_64): nvidia/cu13/bin/nvcc --list-gpu-code
LIST_GPU_CODE = "sm_75\nsm_80\nsm_86\nsm_87\nsm_88\nsm_89\nsm_90\nsm_100\nsm_110\nsm_103\nsm_120\nsm_121\nsm_107\n"
# nvidia-cuda-nvcc-cu12 12.4.131 (manylinux2014_x86_64): nvidia/cuda_nvcc/bin/ptxas --help, the --gpu-name entry
PTXAS_HELP = """--gpu-name <gpu name>                               (-arch)
        Specify name of NVIDIA GPU to generate code for. This option also takes virtual
        compute architectures, in which case code generation is suppressed. This
        can be used for parsing only.
        Allowed values for this option:  'compute_50','compute_52','compute_53',
        'compute_60','compute_61','compute_62','compute_70','compute_72','compute_75',
        'compute_80','compute_86','compute_87','compute_89','compute_90','compute_90a',
        'lto_50','lto_52','lto_53','lto_60','lto_61','lto_62','lto_70','lto_72',
        'lto_75','lto_80','lto_86','lto_87','lto_89','lto_90','lto_90a','sm_50',
        'sm_52','sm_53','sm_60','sm_61','sm_62','sm_70','sm_72','sm_75','sm_80',
        'sm_86','sm_87','sm_89','sm_90','sm_90a'.
        Default value:  'sm_52'.
"""
# torch 2.15.0 METADATA (https://pypi.org/pypi/torch/json info.requires_dist, 2026-12-01), the CUDA lines
TORCH_215 = (
    "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2; "
    'platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
    'nvidia-cusparselt-cu13==0.8.1; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
    'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"',
)


def test_host_config_gcc_limit() -> None:
    assert wheels.gcc_limit(HOST_CONFIG) == 16
    assert wheels.gcc_limit("#if defined(__GNUC__)\n#endif\n") is None
    with pytest.raises(ValueError, match=r"more than one GCC limit: \[15, 16\]"):
        wheels.gcc_limit(HOST_CONFIG + HOST_CONFIG.replace("16", "15"))


def test_gpu_targets_from_nvcc_and_ptxas() -> None:
    assert sorted(wheels.gpu_codes(LIST_GPU_CODE)) == [75, 80, 86, 87, 88, 89, 90, 100, 103, 107, 110, 120, 121]
    assert sorted(wheels.ptxas_targets(PTXAS_HELP)) == [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90]
    with pytest.raises(ValueError, match='printed "nvcc fatal'):
        wheels.gpu_codes("nvcc fatal   : Unknown option '--list-gpu-code'\n")
    with pytest.raises(ValueError, match="no --gpu-name"):
        wheels.ptxas_targets("Usage  : ptxas [options] <ptx file>\n")


def test_torch_pins_and_python_tags() -> None:
    metadata = "Metadata-Version: 2.4\nName: torch\n" + "".join(f"Requires-Dist: {r}\n" for r in TORCH_215)
    metadata += "\nRequires-Dist: in-the-description\n"
    requires = wheels.requires_dist(metadata)
    assert requires == TORCH_215, requires
    assert wheels.pins(wheels.cuda_requirements(requires)) == {"cuda": "13.2.2", "cudnn": "9.26.0.51", "nccl": "2.30.7"}
    assert wheels.pins(("nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'",)) == {"cuda": "12.8.90"}
    with pytest.raises(ValueError, match="not pinned to one version"):
        wheels.pins(("nvidia-nccl-cu13>=2.30",))
    assert wheels.python_tag("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl") == MajorMinor(3, 11)
    assert wheels.python_tag("torch-2.15.0-cp314-cp314t-manylinux_2_28_x86_64.whl") == MajorMinor(3, 14)
    assert wheels.python_tag("nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.whl") is None


def test_a_zip_member_is_read_within_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("nvidia/cu13/include/crt/host_config.h", HOST_CONFIG)
        archive.writestr("big/bin/nvcc", b"\0" * 4096)
    assert wheels.host_config(path) == 16
    with zipfile.ZipFile(path) as archive:
        info = wheels.member(archive, "/bin/nvcc")
        assert info is not None
        with pytest.raises(wheels.WheelUnreadable, match="4096 bytes, more than the 1024 allowed"):
            wheels.read_member(archive, info, 1024)


# deepspeed 0.19.8 sdist: requirements/requirements.txt (whole), setup.py lines 79 and 92-94, op_builder/builder.py
# lines 100-104, README.md line 135
DS_FILES = {
    "requirements/requirements.txt": "einops\nhjson\nmsgpack\nninja\nnumpy\npackaging>=20.0\npsutil\npy-cpuinfo\n"
    "pydantic>=2.0.0\ntorch>=2.0.0\ntqdm\n",
    "setup.py": "install_requires = fetch_requirements('requirements/requirements.txt')\n\n"
    "# Only install pynvml on nvidia gpus.\n"
    "if torch_available and get_accelerator().device_name() == 'cuda' and not is_rocm_pytorch:\n"
    "    install_requires.append('nvidia-ml-py')\n",
    "op_builder/builder.py": "cuda_minor_mismatch_ok = {\n"
    '    10: ["10.0", "10.1", "10.2"],\n'
    '    11: ["11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"],\n'
    '    12: ["12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"],  # There is no CUDATk 12.7\n'
    "}\n",
    "README.md": "* For full feature support we recommend a version of PyTorch that is >= 2.0 and ideally the latest "
    "PyTorch stable release.\n",
}


def _sdist(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"deepspeed-0.19.8/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_deepspeed_sdist_facts(tmp_path: Path) -> None:
    found = sdists.read(_sdist(tmp_path / "deepspeed-0.19.8.tar.gz", DS_FILES), "0.19.8")
    row = next(r for r in load_kb(KB_DATA).deepspeed_requirements if str(r.latest) == "0.19.8")
    assert found.requires == row.requires and found.cuda_build_adds == ("nvidia-ml-py",), found
    assert found.cuda_minor_mismatch_ok["12"][-2:] == ("12.8", "12.9") and set(found.cuda_minor_mismatch_ok) == {
        "10",
        "11",
        "12",
    }, found
    assert found.min_torch == "2.0", found
    bad = dict(DS_FILES, **{"setup.py": DS_FILES["setup.py"].replace("== 'cuda'", "== 'xpu'")})
    with pytest.raises(sdists.WheelUnreadable, match="not the file plus CUDA appends"):
        sdists.read(_sdist(tmp_path / "bad.tar.gz", bad), "0.19.8")
    lacking = {k: v for k, v in DS_FILES.items() if k != "README.md"}
    with pytest.raises(sdists.WheelUnreadable, match=r"lacks README\.md"):
        sdists.read(_sdist(tmp_path / "lacking.tar.gz", lacking), "0.19.8")


def test_compare_reads_the_shipped_kb_quickly() -> None:
    """The offline part is the compare of the recording: pure, and the same report twice."""
    kb = load_kb(KB_DATA)
    recorded = facts.load(RECORDING)
    assert compare.compare(kb, recorded) == compare.compare(kb, recorded)


def test_the_collectors_choice_of_deepspeed_files_on_pypis_page() -> None:
    """collect.py's picks on PyPI's real page (tests/data/pypi/deepspeed-simple.html, 2026-12-01): the final
    releases with an sdist, and each one's sdist, are what pypi_sdists holds from 0.14.0."""
    page = ROOT / "tests" / "data" / "pypi" / "deepspeed-simple.html"
    files = index.parse_html(page.read_text(), "deepspeed", "https://pypi.org/simple/deepspeed/")
    versions = [v for v in collect._finals(files) if Version(v) >= Version("0.14.0")]
    picked = {v: collect._sdist(files, v) for v in versions}
    got = {v: (f.url, f.sha256) for v, f in picked.items() if f is not None}
    kb = load_kb(KB_DATA)
    assert got == {str(s.version): (s.url, s.sha256) for s in kb.deepspeed_sdists}, sorted(got)
    assert versions == sorted(versions, key=Version) and len(versions) == 47, versions
