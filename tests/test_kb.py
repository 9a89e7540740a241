"""The knowledge base: it loads, every row is sourced, and the tables agree with each other."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from envsolver.errors import KnowledgeBaseError
from envsolver.kb import KnowledgeBase, load_kb
from envsolver.kb.gpus import lookup, loose, normalize
from envsolver.resolve.archs import first_toolkit_for
from envsolver.versions import MajorMinor
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
    ordered = sorted(kb.toolkits, key=lambda t: t.version)
    for older, newer in itertools.pairwise(ordered):
        assert older.driver < newer.driver, (older.version, newer.version)


def test_gcc_limits_never_shrink(kb: KnowledgeBase) -> None:
    known = [t.gcc_max for t in sorted(kb.toolkits, key=lambda t: t.version) if t.gcc_max is not None]
    assert known == sorted(known)


def _copy_kb(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(KB_DATA, target)
    return target


def _edit(path: Path, edit: object) -> None:
    doc = yaml.safe_load(path.read_text())
    edit(doc)  # type: ignore[operator]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


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
