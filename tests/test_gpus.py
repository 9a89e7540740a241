"""GPU names: matching as users type them, the table of real device names, suggestions, the `gpus` listing."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import strategies as st

from envsolver.cli import render
from envsolver.cli.main import main
from envsolver.core.errors import UnknownGpuError
from envsolver.kb import KnowledgeBase, default_kb
from envsolver.kb.gpus import closest, lookup, loose, normalize
from tests.conftest import DATA
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_function, modes, run_property

NAMES = DATA / "gpu_names.tsv"
NVIDIA_TABLES = DATA / "nvidia_cc_tables.tsv"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t"))


def _names() -> list[dict[str, str]]:
    return _rows(NAMES)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("a100", "a100"),
        ("A100", "a100"),
        ("a100-80gb", "a100"),
        ("A100 80GB", "a100"),
        ("a100_80gb", "a100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("GeForce RTX 4090", "rtx4090"),
        ("RTX 4090", "rtx4090"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10G", "a10g"),
        ("gh200", "gh200"),
        ("rtx-pro-6000", "rtx-pro-6000-blackwell"),
    ],
)
def test_lookup_ignores_case_spaces_dashes(kb: KnowledgeBase, name: str, key: str) -> None:
    assert lookup(kb, name).key == key


@pytest.mark.parametrize(
    ("name", "key"),
    [
        # without the vendor words nvidia-smi puts in front
        ("A100-SXM4-80GB", "a100"),
        ("H100 80GB HBM3", "h100"),
        ("V100-PCIE-32GB", "v100"),
        # memory and form-factor suffixes
        ("H100 SXM5", "h100"),
        ("h100-nvl", "h100"),
        ("H200 NVL", "h200"),
        ("A100 PCIe 40GB", "a100"),
        ("A800 80GB PCIe", "a800"),
        ("GH200 144G HBM3e", "gh200"),
        ("T400 4GB", "t400"),
        ("GTX 1060 6GB", "gtx1060"),
        ("A100 80 GB", "a100"),  # a memory size typed with a space
        ("NVIDIA H100 80 GB HBM3", "h100"),
        ("RTX 3060 12 GB", "rtx3060"),
        # as users type: no RTX/GTX, SUPER/Ti spelled any way, laptop parts named in several ways
        ("RTX 3080", "rtx3080"),
        ("3080 ti", "rtx3080-ti"),
        ("rtx3080ti", "rtx3080-ti"),
        ("GTX 1660 Ti", "gtx1660-ti"),
        ("rtx 4070 super", "rtx4070-super"),
        ("RTX 2070 Super", "rtx2070-super"),
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "rtx4070-laptop"),
        ("RTX 4070 Laptop", "rtx4070-laptop"),
        ("rtx 4070 mobile", "rtx4070-laptop"),
        ("NVIDIA GeForce RTX 3050Ti Laptop GPU", "rtx3050-ti-laptop"),
        ("NVIDIA GeForce RTX 3050 4GB Laptop GPU", "rtx3050-laptop"),
        ("NVIDIA GeForce RTX 2080 with Max-Q Design", "rtx2080"),
        ("A6000", "rtx-a6000"),
        ("RTX 6000 Ada", "rtx-6000-ada"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("TITAN X (Pascal)", "titan-x-pascal"),
    ],
)
def test_lookup_matches_as_users_type(kb: KnowledgeBase, name: str, key: str) -> None:
    assert lookup(kb, name).key == key


@pytest.mark.parametrize(
    ("name", "not_key"),
    [
        ("RTX 4070 Ti", "rtx4070"),  # Ti is another product
        ("RTX 4070 SUPER", "rtx4070"),
        ("RTX 4090 D", "rtx4090"),  # the China-market part is its own row
        ("RTX 5090 D v2", "rtx5090-d"),
        ("H20", "h200"),
        ("A10G", "a10"),
        ("RTX 3050 Ti Laptop GPU", "rtx3050-laptop"),
        ("RTX 4070 Laptop GPU", "rtx4070"),  # a laptop GPU is a different chip
        ("V100S", "v100"),
    ],
)
def test_product_suffixes_are_never_stripped_into_another_product(kb: KnowledgeBase, name: str, not_key: str) -> None:
    assert lookup(kb, name).key != not_key


@pytest.mark.parametrize(
    "name",
    [
        "A100X",  # a converged accelerator: not the A100 row
        "TITAN X",  # Pascal (6.1) or the Maxwell GeForce GTX TITAN X (5.2): the name alone does not say
        "RTX 6000",  # Quadro RTX 6000 (7.5), RTX 6000 Ada (8.9) or RTX PRO 6000 Blackwell (12.0)
        "NVIDIA GeForce RTX 4080 ...",  # a name nvidia-smi's table cut short
        "",
    ],
)
def test_names_that_do_not_say_which_gpu_are_unknown(kb: KnowledgeBase, name: str) -> None:
    with pytest.raises(UnknownGpuError):
        lookup(kb, name)


def test_unknown_name_lists_three_closest(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError) as info:
        lookup(kb, "a1000")
    assert info.value.closest == ["a100", "a6000", "a5000"]
    assert info.value.exit_code == 2
    assert str(info.value).endswith("pass one of its names or aliases to --gpu.")


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("RTX 3080 Super", ["rtx3080", "rtx3080-ti"]),  # the same card family first, not rtx5080 or rtx4080
        ("H300", ["h100", "h200"]),  # Hopper data center parts, not an A100
        ("GTX 1080 Super", ["gtx1080"]),
        ("RTX 4070 Ultra", ["rtx4070"]),
    ],
)
def test_suggestions_rank_the_same_family_and_generation_first(kb: KnowledgeBase, name: str, first: list[str]) -> None:
    assert closest(kb, name)[: len(first)] == first


def test_closest_always_gives_three(kb: KnowledgeBase) -> None:
    assert len(closest(kb, "zzzz")) == 3
    assert len(closest(kb, "")) == 3


def test_names_table_is_sourced() -> None:
    rows = _names()
    assert len(rows) >= 150
    assert all(row["name"].strip() and row["key"].strip() and row["source"].strip() for row in rows)
    assert len({row["name"] for row in rows}) == len(rows), "a name is listed twice"


@pytest.mark.parametrize("row", _names(), ids=lambda row: row["name"])
def test_every_collected_device_name_resolves_to_its_gpu(kb: KnowledgeBase, row: dict[str, str]) -> None:
    """Every device name seen in real output (or in the driver's own name table) resolves to the right row,
    and that row cites the source the name was seen in."""
    gpu = lookup(kb, row["name"])
    assert gpu.key == row["key"]
    assert row["source"] in gpu.source, f"{gpu.key} does not cite {row['source']}"
    assert kb.sources.get(row["source"])


@pytest.mark.parametrize("row", _rows(NVIDIA_TABLES), ids=lambda row: row["name"])
def test_every_gpu_on_nvidias_tables_resolves_with_its_compute_capability(
    kb: KnowledgeBase, row: dict[str, str]
) -> None:
    """Every GPU NVIDIA's CC tables list with CC >= 6.0, written as the table writes it, resolves to a row with
    the table's compute capability, and that row cites the table."""
    gpu = lookup(kb, row["name"])
    assert str(gpu.compute_capability) == row["compute_capability"]
    assert row["source"] in gpu.source, f"{gpu.key} does not cite {row['source']}"


def test_nvidias_table_name_titan_x_is_unknown_and_suggests_the_pascal_titan_x(kb: KnowledgeBase) -> None:
    with pytest.raises(UnknownGpuError) as info:
        lookup(kb, "NVIDIA TITAN X")
    assert "titan-x-pascal" in info.value.closest


def test_gpus_json_has_every_column_of_the_table(kb: KnowledgeBase) -> None:
    rows = render.gpu_rows(kb.gpus)
    columns = {"key", "name", "aliases", "compute_capability", "architecture", "memory_gb", "bf16", "fp8", "platform"}
    assert all(columns <= set(row) for row in rows)
    gh200 = next(row for row in rows if row["key"] == "gh200")
    assert gh200["platform"] == "linux-aarch64" and "grace-hopper" in gh200["aliases"]


def test_gpus_table_shows_aliases() -> None:
    result = CliRunner().invoke(main, ["gpus"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "architecture" in line)
    assert "aliases" in header
    line = next(line for line in result.output.splitlines() if " gh200 " in line)
    assert "grace-hopper" in line and "NVIDIA GH200 480GB" in line


def test_gpus_json_lists_the_table_rows() -> None:
    result = CliRunner().invoke(main, ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    keys = [row["key"] for row in json.loads(result.output)]
    assert "rtx3080" in keys and "h800" in keys and len(keys) == len(set(keys))


def _every_name() -> list[str]:
    return sorted({name for gpu in default_kb().gpus for name in gpu.all_names})


# A real name, then the ways users and nvidia-smi dress it: vendor words, memory and form-factor words, case,
# separators; or junk.
_DRESS = st.tuples(
    st.sampled_from(["", "NVIDIA ", "nvidia geforce ", "Tesla ", "GeForce "]),
    st.sampled_from(_every_name()),
    st.sampled_from(["", " 80GB", "-PCIE-32GB", " SXM5", " HBM3", " NVL", " 16 GB"]),
    st.sampled_from([str, str.upper, str.lower]),
    st.sampled_from([" ", "-", "_", "  "]),
)
_NAMES = st.one_of(_DRESS, fs.file_junk, fs.value(_every_name()))


@modes(150)
def test_lookup_and_closest_answer_any_name(seed_value: int | None, count: int) -> None:
    """Any string: `lookup` returns a known row or raises UnknownGpuError whose three suggestions are names of
    three different rows; a known name dressed in vendor, memory and form-factor words, case and separators
    resolves to the row of the bare name (nothing else is ever raised)."""
    kb = default_kb()
    tally = Tally("gpu names")

    def check(value: object) -> None:
        if isinstance(value, tuple):
            vendor, bare, suffix, case, space = value
            typed = case(vendor + bare + suffix).replace(" ", space)
            want = lookup(kb, bare).key
            check_function(tally, typed, lambda: _expect(lookup(kb, typed).key == want, typed), ())
            return
        text = str(value)

        def one() -> None:
            try:
                _expect(lookup(kb, text) in kb.gpus, text)
            except UnknownGpuError as exc:
                suggested = {lookup(kb, c).key for c in exc.closest}
                _expect(len(exc.closest) == 3 and len(suggested) == 3, text)

        check_function(tally, text, one, ())

    run_property(_NAMES, check, count, seed_value)
    tally.check()


def _expect(holds: bool, example: str) -> None:
    if not holds:
        raise AssertionError(f"wrong answer for {example!r}")


def test_every_known_name_with_an_unknown_word_suggests_its_gpu(kb: KnowledgeBase) -> None:
    """Every name of every row, followed by a word no product has, is unknown and suggests its own row among
    the three: the nvidia-smi names count for the ranking too ("Tesla PG500-216 Ultra" suggests v100)."""
    missed = []
    for gpu in kb.gpus:
        for name in gpu.all_names:
            with pytest.raises(UnknownGpuError) as info:
                lookup(kb, f"{name} Ultra")
            if all(lookup(kb, c) != gpu for c in info.value.closest):
                missed.append((name, info.value.closest))
    assert missed == []


_CASES = st.sampled_from([str, str.upper, str.lower])
_SEPARATORS = st.sampled_from([" ", "-", "_"])
# Words that make another product of the same number: Ti, SUPER and D cards, laptop and Ada parts, a v2 board.
_PRODUCT_WORDS = ["Ti", "SUPER", "D", "v2", "A", "X", "Ada", "Laptop GPU", "Mobile", "Blackwell", "Embedded"]


@modes(150)
def test_a_word_that_makes_another_product_is_never_dropped(seed_value: int | None, count: int) -> None:
    """A known name followed by a word that names another product ("RTX 4070" + "Ti", "RTX 4090" + "D",
    "RTX 4070" + "Laptop GPU") never normalises to the bare name, so it can never resolve to the bare name's
    GPU by dropping the word."""
    tally = Tally("gpu product words")

    def check(value: tuple[str, str, Callable[[str], str], str]) -> None:
        bare, word, case, space = value
        typed = case(f"{bare} {word}").replace(" ", space)
        kept = normalize(typed) != normalize(bare) and loose(typed) != loose(bare)
        check_function(tally, typed, lambda: _expect(kept, typed), ())

    names = st.tuples(st.sampled_from(_every_name()), st.sampled_from(_PRODUCT_WORDS), _CASES, _SEPARATORS)
    run_property(names, check, count, seed_value)
    tally.check()


@modes(150)
def test_a_known_name_with_an_unknown_word_suggests_its_gpu(seed_value: int | None, count: int) -> None:
    """A known name with a word no product has ("RTX 4070 Ultra", "Tesla PG500-216 Prime") is unknown, and its
    GPU is among the three suggestions: the ranking puts the same model first, whatever the spelling."""
    kb = default_kb()
    tally = Tally("gpu suggestions")

    def check(value: tuple[str, str, Callable[[str], str], str]) -> None:
        bare, word, case, space = value
        typed = case(f"{bare} {word}").replace(" ", space)
        gpu = lookup(kb, bare)

        def one() -> None:
            with pytest.raises(UnknownGpuError) as info:
                lookup(kb, typed)
            _expect(any(lookup(kb, c) == gpu for c in info.value.closest), typed)

        check_function(tally, typed, one, ())

    words = ["Ultra", "Prime", "Neo", "XL", "Pro", "2"]
    names = st.tuples(st.sampled_from(_every_name()), st.sampled_from(words), _CASES, _SEPARATORS)
    run_property(names, check, count, seed_value)
    tally.check()
