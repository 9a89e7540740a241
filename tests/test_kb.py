"""The knowledge base: it loads, every row is sourced, and the tables agree with each other."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from envsolver.core import versions
from envsolver.core.errors import KnowledgeBaseError
from envsolver.core.versions import MajorMinor
from envsolver.kb import KnowledgeBase, load_kb
from envsolver.kb.gpus import lookup, loose, normalize
from envsolver.resolve import deepspeed as ds_rules
from envsolver.resolve.archs import first_toolkit_for
from tests.conftest import KB_DATA


def test_loads(kb: KnowledgeBase) -> None:
    assert len(kb.gpus) >= 150
    assert {str(t.version) for t in kb.toolkits} >= {"11.8", "12.0", "12.4", "12.8", "12.9", "13.0"}
    assert kb.torch_builds and kb.deepspeed_releases and kb.op_headers


def test_every_source_id_resolves(kb: KnowledgeBase) -> None:
    rows: list[tuple[str, ...]] = [g.source for g in kb.gpus] + [t.source for t in kb.toolkits]
    rows += [b.source for b in kb.torch_builds] + [r.source for r in kb.deepspeed_releases]
    rows += [c.source for c in kb.deepspeed_conda_builds] + [h.source for h in kb.op_headers]
    for ids in rows:
        assert ids
        assert all(kb.sources.get(i) for i in ids)


@pytest.mark.parametrize("form", [normalize, loose], ids=["normalized", "without-rtx-gtx"])
def test_no_two_gpus_share_a_normalised_name(kb: KnowledgeBase, form: Callable[[str], str]) -> None:
    """Each name, however it is normalised, belongs to one row: a name never stands for two GPUs (of the same
    compute capability or not)."""
    seen: dict[str, str] = {}
    for gpu in kb.gpus:
        for name in gpu.all_names:
            key = form(name)
            assert key, f"{name!r} of {gpu.key} normalises to nothing"
            assert key not in seen or seen[key] == gpu.key, f"{name!r} is both {seen.get(key)} and {gpu.key}"
            seen[key] = gpu.key


def test_every_gpu_name_resolves_to_its_own_row(kb: KnowledgeBase) -> None:
    """Every key, name, alias and nvidia-smi name of every row resolves to that row."""
    wrong = [(name, gpu.key) for gpu in kb.gpus for name in gpu.all_names if lookup(kb, name).key != gpu.key]
    assert wrong == []
    assert all(gpu.key in gpu.all_names and gpu.name in gpu.all_names for gpu in kb.gpus)


def test_gpu_keys_are_unique_and_sources_cited_once(kb: KnowledgeBase) -> None:
    keys = [gpu.key for gpu in kb.gpus]
    assert len(keys) == len(set(keys))
    for gpu in kb.gpus:
        assert len(gpu.source) == len(set(gpu.source)), gpu.key


def test_every_gpu_cc_is_buildable_by_some_toolkit(kb: KnowledgeBase) -> None:
    for gpu in kb.gpus:
        assert first_toolkit_for(kb, gpu.compute_capability) is not None, gpu.key


@pytest.mark.parametrize("rule", ["bf16", "fp8"])
def test_precision_columns_follow_the_cc_rule(kb: KnowledgeBase, rule: str) -> None:
    # BF16 needs CC >= 8.0 and FP8 CC >= 8.9 (TransformerEngine matrix); 8.7, 11.0, 12.1 are unconfirmed.
    floor = MajorMinor(8, 0) if rule == "bf16" else MajorMinor(8, 9)
    unknown = {MajorMinor(8, 7), MajorMinor(11, 0), MajorMinor(12, 1)}
    for gpu in kb.gpus:
        value = getattr(gpu, rule)
        if gpu.compute_capability in unknown:
            assert value is None, gpu.key
        else:
            assert value == (gpu.compute_capability >= floor), gpu.key


def test_blackwell_needs_r570(kb: KnowledgeBase) -> None:
    for key in ("b200", "gb200", "rtx5090", "rtx-pro-6000-blackwell"):
        gpu = next(g for g in kb.gpus if g.key == key)
        assert gpu.min_driver == 570


def test_arm_hosted_gpus_are_aarch64(kb: KnowledgeBase) -> None:
    # Grace (GH200, GB200, GB300, GB10) and AWS Graviton2 (the T4G of G5g instances) hosts are linux-aarch64.
    for key in ("gh200", "gb200", "gb300", "gb10", "t4g"):
        assert next(g for g in kb.gpus if g.key == key).platform == "linux-aarch64"


def test_every_torch_cuda_variant_has_a_toolkit_row(kb: KnowledgeBase) -> None:
    for build in kb.torch_builds:
        assert kb.toolkit(build.cuda) is not None, (build.channel, build.cuda)


def test_torch_arch_lists_are_buildable_by_their_toolkit(kb: KnowledgeBase) -> None:
    # A build's own arch list must be one its CUDA could compile (sm_35/37 exist up to 11.8).
    for build in kb.torch_builds:
        toolkit = kb.toolkit(build.cuda)
        assert toolkit is not None and toolkit.sm is not None
        assert all(a.cc.sm in toolkit.sm for a in build.archs), (build.versions, build.cuda)


def test_pytorch_channel_stops_at_2_5_1_and_is_linux_64(kb: KnowledgeBase) -> None:
    legacy = [b for b in kb.torch_builds if b.channel == "pytorch"]
    assert max(v for b in legacy for v in b.versions).public == "2.5.1"
    assert {b.platform for b in legacy} == {"linux-64"}


def test_conda_forge_never_had_torch_2_2(kb: KnowledgeBase) -> None:
    versions = {str(v) for b in kb.torch_builds if b.channel == "conda-forge" for v in b.versions}
    assert not any(v.startswith("2.2.") for v in versions)
    assert {"2.3.1", "2.5.1", "2.10.0", "2.13.0"} <= versions


def test_conda_forge_cuda13_builds_need_glibc_2_28(kb: KnowledgeBase) -> None:
    for build in kb.torch_builds:
        if build.channel == "conda-forge" and build.cuda.major == 13:
            assert build.glibc == MajorMinor(2, 28)


def test_deepspeed_conda_builds_match_a_torch_build(kb: KnowledgeBase) -> None:
    for ds in kb.deepspeed_conda_builds:
        for cuda in (ds.cuda,):
            assert any(
                b.channel == "conda-forge"
                and b.cuda == cuda
                and b.platform == ds.platform
                and any(MajorMinor(v.major, v.minor) == ds.torch for v in b.versions)
                for b in kb.torch_builds
            ), (ds.versions, ds.torch, cuda)


def test_deepspeed_releases_are_contiguous_and_13_has_no_allow_list(kb: KnowledgeBase) -> None:
    rows = sorted(kb.deepspeed_releases, key=lambda r: r.since)
    for row in rows:
        assert row.since <= row.latest
        assert 13 not in row.cuda_minor_mismatch_ok
    assert rows[-1].min_torch.public == "2.0"
    blackwell_ok = [r for r in rows if r.cc_below is None]
    assert min(r.since for r in blackwell_ok).public == "0.16.4"


def test_toolkit_sm_lists_follow_the_release_notes(kb: KnowledgeBase) -> None:
    def sm(version: str) -> frozenset[int]:
        toolkit = kb.toolkit(MajorMinor(*map(int, version.split("."))))
        assert toolkit is not None and toolkit.sm is not None
        return toolkit.sm

    assert 90 not in sm("11.7") and 90 in sm("11.8")
    assert 37 in sm("11.8") and 37 not in sm("12.0")
    assert 120 not in sm("12.6") and {100, 120} <= sm("12.8")
    assert 70 in sm("12.9") and not ({50, 52, 53, 60, 61, 62, 70, 72} & sm("13.0"))
    assert 101 in sm("12.9") and 101 not in sm("13.0") and 110 in sm("13.0")


def test_toolkit_drivers_increase(kb: KnowledgeBase) -> None:
    known = [t for t in sorted(kb.toolkits, key=lambda t: t.version) if t.driver is not None]
    for older, newer in itertools.pairwise(known):
        assert older.driver is not None and newer.driver is not None
        assert older.driver < newer.driver, (older.version, newer.version)


def _toolkit(kb: KnowledgeBase, version: str) -> Any:
    toolkit = kb.toolkit(MajorMinor(*map(int, version.split("."))))
    assert toolkit is not None, version
    return toolkit


def test_cuda_13_through_13_5_with_their_sm_lists(kb: KnowledgeBase) -> None:
    """nvcc --list-gpu-code of NVIDIA's 13.1-13.5 wheels: 13.1-13.3 build what 13.0 builds, 13.4 adds sm_107."""
    base = _toolkit(kb, "13.0").sm
    for version in ("13.1", "13.2", "13.3"):
        assert _toolkit(kb, version).sm == base
    for version in ("13.4", "13.5"):
        toolkit = _toolkit(kb, version)
        assert base is not None and toolkit.sm == base | {107}
        assert toolkit.gcc_max == 16
    assert first_toolkit_for(kb, MajorMinor(10, 7)) == _toolkit(kb, "13.4")


def test_driver_floors_nvidia_does_not_publish_are_unknown(kb: KnowledgeBase) -> None:
    """From 13.4 the Linux driver is not bundled and no full-support minimum is published: null, not a guess."""
    assert _toolkit(kb, "13.4").driver is None and _toolkit(kb, "13.5").driver is None
    assert _toolkit(kb, "13.3").driver is not None
    assert kb.cuda_global_pin.value == "13.4"


def test_deepspeed_allow_list_grew_in_0_14_3_and_0_15_3(kb: KnowledgeBase) -> None:
    """builder.py at the tags: 12.4 and 12.5 arrive in v0.14.3 (not 0.14.5), 12.6 in v0.15.3 (not 0.15.4)."""

    def accepts(ds: str, nvcc: str, built: str) -> bool:
        row = ds_rules.release_of(kb, Version(ds))
        assert row is not None, ds
        return row.accepts_mismatch(versions.cuda(nvcc), versions.cuda(built))

    assert not accepts("0.14.2", "12.4", "12.1") and accepts("0.14.3", "12.4", "12.1")
    assert accepts("0.14.3", "12.5", "12.4") and not accepts("0.14.3", "12.6", "12.4")
    assert not accepts("0.15.2", "12.6", "12.4") and accepts("0.15.3", "12.6", "12.4")


def test_deepspeed_through_the_newest_on_pypi(kb: KnowledgeBase) -> None:
    newest = max(kb.deepspeed_releases, key=lambda r: r.since)
    assert newest.latest == Version("0.19.8") and 13 not in newest.cuda_minor_mismatch_ok


def test_cuda_h_comes_from_cuda_cudart_dev(kb: KnowledgeBase) -> None:
    """cuda-cudart-dev ships targets/<arch>/include/cuda.h; cuda-driver-dev only the stub libcuda.so."""
    packages = {h.header: h.package for h in (*kb.extra_headers, *kb.op_headers)}
    assert packages["cuda.h"] == "cuda-cudart-dev"


def test_deepspeed_default_ccs_on_cuda_13_cannot_be_built_by_nvcc_13(kb: KnowledgeBase) -> None:
    """Every release's CUDA 13 default (TORCH_CUDA_ARCH_LIST unset, ahead-of-time build) has CCs below sm_75."""
    nvcc13 = _toolkit(kb, "13.0").sm
    assert nvcc13 is not None
    for version in ("0.14.0", "0.15.4", "0.16.4", "0.19.5", "0.19.8"):
        row = ds_rules.default_ccs(kb, Version(version), 13)
        assert row is not None, version
        assert [a.cc.sm for a in row.ccs if a.cc.sm not in nvcc13] == [60, 61, 70], version
    assert ds_rules.default_ccs(kb, Version("0.19.9"), 13) is None  # not known beyond the newest release read
    newest = ds_rules.default_ccs(kb, Version("0.19.8"), 13)
    assert newest is not None and ";".join(str(a) for a in newest.ccs) == "6.0;6.1;7.0"


def test_cpu_adam_links_curand_cublas_cudart_until_0_19_8(kb: KnowledgeBase) -> None:
    linked = {(lib.op, lib.library): lib.package for lib in ds_rules.op_libraries(kb, Version("0.19.5"))}
    assert linked == {
        ("cpu_adam", "curand"): "libcurand-dev",
        ("cpu_adam", "cublas"): "libcublas-dev",
        ("cpu_adam", "cudart"): "cuda-cudart-dev",
    }
    assert ds_rules.op_libraries(kb, Version("0.19.8")) == ()


# --- DeepSpeed from PyPI: each release's requirements, its sdist, and the conda-forge names (issue 19) ---


def test_every_deepspeed_release_on_pypi_has_its_requirements_row(kb: KnowledgeBase) -> None:
    """Every sdist the KB records (PyPI's releases 0.14.0-0.19.8) falls in exactly one pypi_requirements row, and
    every row starts and ends at a recorded release: no release is left without its requirements, none guessed."""
    sdists = sorted(s.version for s in kb.deepspeed_sdists)
    assert [str(v) for v in sdists[:1] + sdists[-1:]] == ["0.14.0", "0.19.8"] and len(sdists) == 47
    for version in sdists:
        rows = [r for r in kb.deepspeed_requirements if r.since <= version <= r.latest]
        assert len(rows) == 1, (str(version), rows)
    assert {r.since for r in kb.deepspeed_requirements} <= set(sdists)
    assert {r.latest for r in kb.deepspeed_requirements} <= set(sdists)


def _names(found: tuple[Requirement, ...] | None) -> list[str]:
    assert found is not None
    return [str(r) for r in found]


def test_deepspeed_requirements_as_each_release_group_declares_them(kb: KnowledgeBase) -> None:
    """requirements/requirements.txt of the sdists: pynvml until 0.14.2, nvidia-ml-py in the file for 0.14.3-0.14.5,
    then appended by setup.py for a CUDA build only; pydantic>=2.0.0 from 0.15.0, msgpack from 0.15.2, einops from
    0.16.1, torch>=2.0.0 from 0.19.1."""
    base = ["hjson", "ninja", "numpy", "packaging>=20.0", "psutil", "py-cpuinfo"]
    assert _names(ds_rules.requirements_of(kb, Version("0.14.2"))) == [*base, "pydantic", "pynvml", "torch", "tqdm"]
    assert "nvidia-ml-py" in _names(ds_rules.requirements_of(kb, Version("0.14.3"), cuda_build=False))
    assert "nvidia-ml-py" not in _names(ds_rules.requirements_of(kb, Version("0.15.0"), cuda_build=False))
    assert _names(ds_rules.requirements_of(kb, Version("0.15.0")))[-1] == "nvidia-ml-py"
    assert "msgpack" not in _names(ds_rules.requirements_of(kb, Version("0.15.1")))
    assert "msgpack" in _names(ds_rules.requirements_of(kb, Version("0.15.2")))
    assert "einops" not in _names(ds_rules.requirements_of(kb, Version("0.16.0")))
    assert _names(ds_rules.requirements_of(kb, Version("0.19.8"), cuda_build=False)) == [
        "einops",
        *base[:1],
        "msgpack",
        *base[1:],
        "pydantic>=2.0.0",
        "torch>=2.0.0",
        "tqdm",
    ]
    assert ds_rules.requirements_of(kb, Version("0.19.9")) is None  # not read: unknown, not the newest row's
    assert ds_rules.requirements_of(kb, Version("0.13.0")) is None


def test_no_deepspeed_release_bounds_torch_from_above(kb: KnowledgeBase) -> None:
    """No release's requirements cap torch (requirements.txt says `torch` or `torch>=2.0.0`), and pip's floor is
    never above the release row's min_torch (README's recommendation)."""
    for row in kb.deepspeed_requirements:
        torch = [Requirement(r) for r in row.requires if Requirement(r).name == "torch"]
        assert len(torch) == 1, row
        assert all(s.operator in (">=", ">") for s in torch[0].specifier), row
        for version in (row.since, row.latest):
            release = ds_rules.release_of(kb, version)
            assert release is not None, version
            floor = ds_rules.torch_floor(kb, version)
            assert floor is None or floor <= release.min_torch, (version, floor, release.min_torch)
    assert ds_rules.torch_floor(kb, Version("0.19.0")) is None
    assert ds_rules.torch_floor(kb, Version("0.19.1")) == Version("2.0.0")


def test_every_deepspeed_requirement_has_a_conda_forge_name(kb: KnowledgeBase) -> None:
    names = {Requirement(r).name for row in kb.deepspeed_requirements for r in (*row.requires, *row.cuda_build_adds)}
    assert {n: ds_rules.conda_name(kb, n) for n in sorted(names)} == {
        "einops": "einops",
        "hjson": "hjson-py",
        "msgpack": "msgpack-python",
        "ninja": "ninja",
        "numpy": "numpy",
        "nvidia-ml-py": "nvidia-ml-py",
        "packaging": "packaging",
        "psutil": "psutil",
        "py-cpuinfo": "py-cpuinfo",
        "pydantic": "pydantic",
        "pynvml": "pynvml",
        "torch": "pytorch",
        "tqdm": "tqdm",
    }
    # conda-forge's ninja is the build tool alone: pip does not see the PyPI project `ninja` in it; the other rows
    # without a distribution are NVIDIA's CUDA library wheels, beside the conda package holding the same library
    others = [r.pypi for r in kb.pypi_conda_names if not r.provides_dist and r.pypi != "ninja"]
    assert [r.pypi for r in kb.pypi_conda_names if r.pypi == "ninja" and not r.provides_dist] == ["ninja"]
    assert others and all(name.startswith("nvidia-") for name in others), others


def test_conda_name_normalises_and_never_guesses(kb: KnowledgeBase) -> None:
    assert ds_rules.conda_name(kb, "Py_CPUInfo") == "py-cpuinfo"
    assert ds_rules.conda_name(kb, "MsgPack") == "msgpack-python"
    assert ds_rules.conda_name(kb, "leftpad") is None


def test_deepspeed_sdists_are_pypis_files(kb: KnowledgeBase) -> None:
    for sdist in kb.deepspeed_sdists:
        assert sdist.url.startswith("https://files.pythonhosted.org/packages/")
        assert sdist.url.endswith(f"/deepspeed-{sdist.version}.tar.gz") and len(sdist.sha256) == 64
    found = ds_rules.sdist_of(kb, Version("0.19.8"))
    assert found is not None and found.sha256.startswith("9e491abd")
    assert ds_rules.sdist_of(kb, Version("0.19.9")) is None


def test_deepspeed_mismatch_lists_hold_cuda_10_as_builder_py_does(kb: KnowledgeBase) -> None:
    """op_builder/builder.py of every sdist 0.14.0-0.19.8 lists 10: 10.0-10.2 beside 11 and 12."""
    for row in kb.deepspeed_releases:
        assert sorted(str(v) for v in row.cuda_minor_mismatch_ok[10]) == ["10.0", "10.1", "10.2"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        pytest.param(
            lambda d: d["pypi_requirements"][0]["requires"].append("torch>=>2"),
            "deepspeed.yaml: pypi_requirements[0] (0.14.0): bad value for 'requires'",
            id="not-pep508",
        ),
        pytest.param(
            lambda d: d["pypi_requirements"][0]["requires"].append("einops[extra]"),
            "extras or markers",
            id="extras",
        ),
        pytest.param(
            lambda d: d["pypi_requirements"][0]["cuda_build_adds"].append('einops; python_version < "3.9"'),
            "extras or markers",
            id="marker",
        ),
        pytest.param(
            lambda d: d["pypi_requirements"][1].update(since="0.14.2"),
            "pypi_requirements rows overlap: 0.14.0-0.14.2 and 0.14.2-0.14.5",
            id="overlap",
        ),
        pytest.param(
            lambda d: d["pypi_requirements"][1].update(since="0.14.6", latest="0.14.4"),
            "pypi_requirements[1] (0.14.6): since 0.14.6 is after latest 0.14.4",
            id="backwards",
        ),
        pytest.param(
            lambda d: d["pypi_requirements"][2].update(source=["DS-NOWHERE"]),
            "unknown source id(s) ['DS-NOWHERE']",
            id="source",
        ),
        pytest.param(
            lambda d: d["pypi_sdists"][0].update(sha256="8A140B"),
            "deepspeed.yaml: pypi_sdists[0] (0.14.0): bad value for 'sha256'",
            id="sha256",
        ),
        pytest.param(
            lambda d: d["pypi_sdists"][1].update(url=d["pypi_sdists"][0]["url"]),
            "is not PyPI's file deepspeed-0.14.1.tar.gz",
            id="url",
        ),
        pytest.param(
            lambda d: d["pypi_sdists"].append(dict(d["pypi_sdists"][0])),
            "pypi_sdists: 0.14.0 listed twice",
            id="twice",
        ),
    ],
)
def test_loader_refuses_bad_deepspeed_pypi_rows(tmp_path: Path, edit: Any, problem: str) -> None:
    data = _copy_kb(tmp_path)
    _edit(data / "deepspeed.yaml", edit)
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(data)
    assert problem in "\n".join(info.value.problems)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        pytest.param(
            lambda d: d["pypi_conda_names"][0].update(pypi="Py_CPUInfo"),
            "is not a normalised PyPI name",
            id="normalised",
        ),
        pytest.param(
            lambda d: d["pypi_conda_names"].append(dict(d["pypi_conda_names"][0])),
            "listed twice",
            id="twice",
        ),
        pytest.param(
            lambda d: d["pypi_conda_names"][0].update(conda="Bad Name"),
            "bad value for 'conda'",
            id="conda-name",
        ),
        pytest.param(
            lambda d: d["pypi_conda_names"][0].pop("provides_dist"),
            "missing key 'provides_dist'",
            id="dist",
        ),
    ],
)
def test_loader_refuses_bad_conda_name_rows(tmp_path: Path, edit: Any, problem: str) -> None:
    data = _copy_kb(tmp_path)
    _edit(data / "conda.yaml", edit)
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(data)
    assert problem in "\n".join(info.value.problems)


def test_conda_forge_tegra_builds_for_jetson_orin(kb: KnowledgeBase) -> None:
    tegra = [b for b in kb.torch_builds if b.arm_variant == "tegra"]
    assert [str(v) for b in tegra for v in b.versions] == ["2.11.0", "2.12.0", "2.12.1", "2.13.0"]
    for build in tegra:
        assert build.channel == "conda-forge" and build.platform == "linux-aarch64"
        assert str(build.cuda) == "12.9" and build.arch_list == "8.7+PTX" and build.glibc == MajorMinor(2, 34)
    assert kb.include_target("linux-aarch64", "tegra").value == "aarch64-linux"
    assert kb.include_target("linux-aarch64", "sbsa").value == "sbsa-linux"


def test_upstream_releases_newer_than_any_conda_build_are_recorded_as_unknown(kb: KnowledgeBase) -> None:
    newest_conda = max(v for b in kb.torch_builds for v in b.versions)
    versions = [str(r.version) for r in kb.torch_releases]
    assert versions == ["2.14.0", "2.14.1", "2.15.0"]
    for release in kb.torch_releases:
        assert release.version > newest_conda and release.conda_forge is None
    assert kb.torch_releases[-1].pypi_cuda is None and kb.torch_releases[-1].note


def test_pypi_default_wheels_of_the_upstream_releases(kb: KnowledgeBase) -> None:
    """Read from the wheels' metadata: 2.14.x requires cuda-toolkit 13.0.3, cuDNN 9.24.0.43, NCCL 2.30.7 and
    Python >= 3.10; 2.15.0 cuda-toolkit 13.2.2, cuDNN 9.26.0.51, NCCL 2.30.7 and Python >= 3.11."""
    seen = {str(r.version): (str(r.pypi_default_cuda), r.cudnn, r.nccl, str(r.python_min)) for r in kb.torch_releases}
    assert seen == {
        "2.14.0": ("13.0", "9.24", "2.30", "3.10"),
        "2.14.1": ("13.0", "9.24", "2.30", "3.10"),
        "2.15.0": ("13.2", "9.26", "2.30", "3.11"),
    }


def test_gcc_limits_never_shrink(kb: KnowledgeBase) -> None:
    known = [t.gcc_max for t in sorted(kb.toolkits, key=lambda t: t.version) if t.gcc_max is not None]
    assert known == sorted(known)


def _copy_kb(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(KB_DATA, target)
    return target


def _edit(path: Path, edit: object) -> None:
    """EDIT the file's data and write it back (libyaml's safe loader and dumper: the same data as PyYAML's pure
    Python ones, several times faster)."""
    doc = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    edit(doc)  # type: ignore[operator]
    path.write_text(yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False))


def test_loader_reports_every_problem_with_file_and_row(tmp_path: Path) -> None:
    data = _copy_kb(tmp_path)

    def break_gpus(doc: dict) -> None:  # type: ignore[type-arg]
        doc["gpus"][0]["colour"] = "green"  # unknown key
        doc["gpus"][1]["compute_capability"] = "eight"  # bad value
        del doc["gpus"][2]["source"]  # missing key

    def break_cuda(doc: dict) -> None:  # type: ignore[type-arg]
        doc["toolkits"][0]["source"] = ["NO-SUCH-SOURCE"]
        del doc["toolkits"][1]["gcc_max"]  # nullable keys must still be present

    _edit(data / "gpus.yaml", break_gpus)
    _edit(data / "cuda.yaml", break_cuda)
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(data)
    problems = info.value.problems
    assert len(problems) == 5
    text = "\n".join(problems)
    assert "gpus.yaml: gpus[0] (p100): unknown key(s) ['colour']" in text
    assert "gpus.yaml: gpus[1]" in text and "'compute_capability'" in text
    assert "gpus.yaml: gpus[2]" in text and "missing key 'source'" in text
    assert "cuda.yaml: toolkits[0] (11.0): unknown source id(s) ['NO-SUCH-SOURCE']" in text
    assert "cuda.yaml: toolkits[1] (11.1): missing key 'gcc_max' (write null when unknown)" in text
    assert info.value.exit_code == 2


def test_loader_rejects_invalid_yaml(tmp_path: Path) -> None:
    data = _copy_kb(tmp_path)
    (data / "torch.yaml").write_text("builds: [unclosed\n")
    with pytest.raises(KnowledgeBaseError, match=r"torch\.yaml: not valid YAML"):
        load_kb(data)


# --- the compiled KB cache (issue 13) ---


@pytest.fixture
def kb_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ENVSOLVER_CACHE_DIR and a default_kb that has not loaded yet (and is reset afterwards)."""
    from envsolver.kb import load

    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(tmp_path))
    load.packaged.cache_clear()
    yield tmp_path
    load.packaged.cache_clear()


@pytest.fixture(scope="module")
def yaml_kb() -> KnowledgeBase:
    """The packaged KB loaded from its YAML files, once for the module's tests that compare with such a load."""
    return load_kb()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory as a first run leaves it (the YAML loaded, the compiled KB written), made once: the tests
    of what becomes of a compiled KB that is there start from a copy of it."""
    from envsolver.kb import load

    root = tmp_path_factory.mktemp("first-run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVSOLVER_CACHE_DIR", str(root))
        load.packaged.cache_clear()
        try:
            load.default_kb()
        finally:
            load.packaged.cache_clear()
    assert len(cached_files(root)) == 1, "a first run wrote no compiled KB"
    return root


@pytest.fixture
def kb_written(kb_cache: Path, first_run: Path) -> Path:
    """kb_cache holding the compiled KB a first run wrote (a copy of first_run's: this user's, its mode kept)."""
    shutil.copytree(first_run / "kb", kb_cache / "kb", copy_function=shutil.copy2)
    return kb_cache


def canonical(value: Any) -> Any:
    """`value` as nested tuples of type names and reprs; a set's members sorted (its order is no fact)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple((f.name, canonical(getattr(value, f.name))) for f in dataclasses.fields(value))
        return (type(value).__name__, fields)
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted((canonical(v) for v in value), key=repr)))
    if isinstance(value, dict):
        return ("dict", tuple((canonical(k), canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(canonical(v) for v in value))
    return (type(value).__name__, repr(value))


def test_a_kbs_lookup_tables_stay_out_of_its_pickle_and_answer_as_its_rows(yaml_kb: KnowledgeBase) -> None:
    """toolkit(), cuda_major() and deepspeed_conda_builds_for() answer from tables built on first use (the
    resolver asks hundreds of thousands of times): each answers as a scan of the rows would, and the compiled KB
    pickles to the same bytes before and after they are built."""
    import pickle

    from envsolver.kb.model import KnowledgeBase as Model

    fresh = Model(**{f: getattr(yaml_kb, f) for f in yaml_kb.__dataclass_fields__})  # no table built yet
    before = pickle.dumps(fresh, protocol=pickle.HIGHEST_PROTOCOL)
    for version in [t.version for t in fresh.toolkits] + [MajorMinor(9, 9)]:
        assert fresh.toolkit(version) is next((t for t in fresh.toolkits if t.version == version), None), version
    for major in [m.major for m in fresh.cuda_majors] + [99]:
        assert fresh.cuda_major(major) is next((m for m in fresh.cuda_majors if m.major == major), None), major
    rows = fresh.deepspeed_conda_builds
    for torch, cuda, platform in {(r.torch, r.cuda, r.platform) for r in rows} | {
        (MajorMinor(1, 0), MajorMinor(9, 9), "x")
    }:
        wanted = tuple(r for r in rows if (r.torch, r.cuda, r.platform) == (torch, cuda, platform))
        assert fresh.deepspeed_conda_builds_for(torch, cuda, platform) == wanted, (torch, cuda, platform)
    assert pickle.dumps(fresh, protocol=pickle.HIGHEST_PROTOCOL) == before
    assert pickle.loads(before) == fresh


def cached_files(root: Path) -> list[Path]:
    return sorted((root / "kb").glob("kb-*.pickle")) if (root / "kb").is_dir() else []


def test_the_cached_kb_equals_the_yaml_load_exactly(
    kb_cache: Path, yaml_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envsolver.kb import load

    fresh = yaml_kb
    first = load.default_kb()  # loads the YAML and writes the cache
    assert len(cached_files(kb_cache)) == 1
    load.packaged.cache_clear()

    def no_yaml(*_: object, **__: object) -> KnowledgeBase:
        raise AssertionError("the YAML was loaded although the cache holds these files")

    monkeypatch.setattr(load, "load_kb", no_yaml)
    again = load.default_kb()
    assert again is not first and again == fresh and first == fresh
    assert canonical(again) == canonical(fresh)  # every value of the same type and text ('2.5' stays '2.5')
    assert [str(v) for b in again.torch_builds for v in b.versions] == [
        str(v) for b in fresh.torch_builds for v in b.versions
    ]
    assert load.packaged()[1] == load._read_date()


def test_any_change_to_a_data_file_names_another_cache_file() -> None:
    from envsolver.kb import cache, load

    texts = load._packaged_bytes()
    assert texts is not None
    base = cache.key(texts)
    for name in load.FILES:
        changed = {**texts, name: texts[name] + b"\n"}
        assert cache.key(changed) != base, name
    assert cache.key(dict(texts)) == base


def _break(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"not a cache at all\n" * 10)


@pytest.mark.parametrize("how", ["truncated", "flipped", "empty", "garbage"])
def test_a_corrupt_cache_is_ignored_and_replaced(kb_written: Path, how: str) -> None:
    from envsolver.kb import load

    good = load.default_kb()
    (path,) = cached_files(kb_written)
    written = path.read_bytes()
    _break(path, how)
    load.packaged.cache_clear()
    assert load.default_kb() == good
    assert load.default_kb() is not good  # loaded from the YAML again
    assert cached_files(kb_written) == [path] and path.read_bytes() == written  # and written anew


def test_a_payload_naming_a_foreign_global_is_refused_unrun(kb_written: Path, tmp_path: Path) -> None:
    """A file with a valid digest whose pickle calls a function is refused before anything runs."""
    import hashlib
    import pickle

    from envsolver.kb import cache, load

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (Path.touch, (str(marker),))

    kb = load.default_kb()  # read from the file, before it is replaced
    (path,) = cached_files(kb_written)
    payload = pickle.dumps(Evil())
    path.write_bytes(cache.FORMAT + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    assert cache.read(path) is None
    assert not marker.exists()
    # a valid file whose payload is not a KnowledgeBase and its date is refused too
    for doc in (MajorMinor(12, 4), {"kb": MajorMinor(12, 4), "date": "2026-11-30"}, {"kb": kb}):
        other = pickle.dumps(doc)
        path.write_bytes(cache.FORMAT + hashlib.sha256(other).hexdigest().encode() + b"\n" + other)
        assert cache.read(path) is None


def test_a_kb_with_problems_is_never_cached(kb_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envsolver.kb import load

    texts = load._packaged_bytes()
    assert texts is not None
    broken = {**texts, "gpus.yaml": texts["gpus.yaml"].replace(b"compute_capability:", b"compute_capabilty:", 1)}
    monkeypatch.setattr(load, "_packaged_bytes", lambda: broken)
    with pytest.raises(KnowledgeBaseError, match="missing key 'compute_capability'"):
        load.default_kb()
    assert cached_files(kb_cache) == []


def test_an_unwritable_cache_directory_only_skips_the_cache(
    tmp_path: Path, yaml_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envsolver.kb import load

    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("ENVSOLVER_CACHE_DIR", str(blocker))
    load.packaged.cache_clear()
    try:
        assert load.default_kb() == yaml_kb
    finally:
        load.packaged.cache_clear()


def test_an_old_compiled_kb_is_removed_when_a_new_one_is_written(kb_cache: Path) -> None:
    from envsolver.kb import load

    stale = kb_cache / "kb" / "kb-0000.pickle"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    load.default_kb()
    assert [p.name for p in cached_files(kb_cache)] != ["kb-0000.pickle"] and not stale.exists()


def _forge_date(path: Path, date: str) -> None:
    """Rewrite a compiled KB with another date: a well-formed file with a valid digest and only the KB's own
    classes, as anyone who can write the cache directory could make one (issue 20, finding 8)."""
    import hashlib
    import pickle

    from envsolver.kb import cache

    payload = path.read_bytes()[len(cache.FORMAT) + 65 :]
    doc = pickle.loads(payload)
    doc["date"] = date
    forged = pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL)
    path.write_bytes(cache.FORMAT + hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged)


def _another_owner(path: Path) -> None:
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o644)


def _group_writable(path: Path) -> None:
    os.chmod(path, 0o660)


def _other_writable(path: Path) -> None:
    os.chmod(path, 0o602)


def _link_elsewhere(path: Path) -> None:
    elsewhere = path.parent.parent / "elsewhere.pickle"
    os.rename(path, elsewhere)
    path.symlink_to(elsewhere)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(
    "how",
    [_another_owner, _group_writable, _other_writable, _link_elsewhere, _fifo],
    ids=["another-owner", "group-writable", "other-writable", "symlink", "fifo"],
)
def test_a_compiled_kb_anyone_else_could_have_written_is_ignored_quietly_and_rebuilt(
    kb_written: Path, capfd: pytest.CaptureFixture[str], how: Callable[[Path], None]
) -> None:
    """The compiled KB is trusted only from a regular file that this user owns and nobody else can write (checked
    on the opened file, without following a link); anything else is ignored without a word, the YAML is loaded,
    and the file is written anew."""
    import stat
    import threading

    from envsolver.kb import load

    if how is _another_owner and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    (path,) = cached_files(kb_written)
    _forge_date(path, "1999-01-01")
    how(path)
    load.packaged.cache_clear()
    capfd.readouterr()
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.update(got=load.packaged()), daemon=True)
    thread.start()
    thread.join(30)
    assert "got" in box, "still reading the compiled KB after 30 s"
    _, date = box["got"]  # type: ignore[misc]
    assert date == load._read_date(), f"the forged compiled KB ({how.__name__}) was used"
    assert capfd.readouterr() == ("", ""), "something was printed"
    mode = path.lstat()
    assert stat.S_ISREG(mode.st_mode) and mode.st_uid == os.geteuid() and stat.S_IMODE(mode.st_mode) == 0o600
    load.packaged.cache_clear()
    assert load.packaged()[1] == load._read_date()  # and the new file is the one read


def test_the_users_own_compiled_kb_is_still_read(kb_written: Path) -> None:
    """The checks refuse nothing that this user wrote: a forged date in a file the user owns is read (what the
    user writes is the user's own business), so the tests above fail for the reason they name."""
    from envsolver.kb import load

    (path,) = cached_files(kb_written)
    _forge_date(path, "1999-01-01")
    load.packaged.cache_clear()
    assert load.packaged()[1] == "1999-01-01"


def test_a_compiled_kb_past_its_bound_is_not_read(kb_written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing past cache.MAX_BYTES is read: a valid file of this user's, larger than the bound, is ignored (the
    bound lowered below the real file's size)."""
    from envsolver.kb import cache

    (path,) = cached_files(kb_written)
    assert cache.read(path) is not None
    monkeypatch.setattr(cache, "MAX_BYTES", path.stat().st_size - 1)
    assert cache.read(path) is None


def test_multi_gpu_rows_name_known_gpus_and_carry_sources(kb: KnowledgeBase) -> None:
    keys = {g.key for g in kb.gpus}
    assert kb.multi_gpu, "gpus.yaml has no multi_gpu rows"
    for row in kb.multi_gpu:
        assert set(row.gpus) <= keys, row
        assert row.source and all(s in kb.sources for s in row.source), row


def test_a_multi_gpu_row_naming_an_unknown_gpu_is_refused() -> None:
    text = (resources.files("envsolver.kb") / "data" / "gpus.yaml").read_text(encoding="utf-8")
    bad = text.replace("  - gpus: [rtx4090]\n", "  - gpus: [rtx4090, rtx9999]\n", 1)
    assert bad != text, "the rtx4090 multi_gpu row is not where this test expects it"
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(texts={"gpus.yaml": bad.encode()})
    assert "rtx9999" in str(info.value), str(info.value)
