"""Property-based fuzzing of the knowledge base loader: any change to the KB files gives a loaded KB or one
KnowledgeBaseError that names every bad row, never another exception."""

from __future__ import annotations

import copy
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st

from envsolver.core.errors import KnowledgeBaseError
from envsolver.kb.load import FILES, load_kb
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_function, modes, run_property

KB_DATA = Path(__file__).resolve().parents[2] / "envsolver" / "kb" / "data"
# A value no KB key accepts: every key wants a scalar, a list or a mapping of a particular shape.
NEVER_VALID = {"x": 1}


@cache
def originals() -> dict[str, Any]:
    """The KB files as the loader reads them (libyaml's safe loader where PyYAML has it, as core/safeyaml.py)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {name: yaml.load((KB_DATA / name).read_text(encoding="utf-8"), Loader=loader) for name in FILES}


def _tables(doc: Any) -> list[str]:
    return sorted(k for k, v in doc.items() if isinstance(v, list) and v and isinstance(v[0], dict))


def _dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True)


def write_kb(root: Path, docs: dict[str, Any], texts: dict[str, str] | None = None) -> Path:
    """The KB files: `texts` where given, else the original file where `docs` kept it, else `docs` dumped."""
    for name in FILES:
        text = (texts or {}).get(name)
        if text is None:
            text = (KB_DATA / name).read_text() if docs[name] == originals()[name] else _dump(docs[name])
        (root / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    return root


@st.composite
def mutated_kb(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """The KB with 1-3 changes: a row's key set to any value, removed or added; a row or table replaced; a
    version list entry replaced; or a file's text truncated or replaced."""
    docs = copy.deepcopy(originals())
    texts: dict[str, str] = {}
    changed: set[str] = set()
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(FILES))
        doc = docs[name]
        action = draw(st.sampled_from(["set", "set", "delete", "add", "row", "table", "versions", "text"]))
        tables = _tables(doc)
        if not tables:  # an earlier change replaced this file's tables
            continue
        table = draw(st.sampled_from(tables))
        rows = [r for r in doc[table] if isinstance(r, dict) and r]
        if not rows:
            continue
        row = draw(st.sampled_from(rows))
        key = draw(st.sampled_from(sorted(row)))
        changed.add(name)
        if action == "set":
            row[key] = draw(st.one_of(fs.yaml_values, fs.value(["12.4", "535.104.05", "2.5.1"])))
        elif action == "delete":
            del row[key]
        elif action == "add":
            row[draw(fs.junk)] = draw(fs.yaml_values)
        elif action == "row":
            doc[table][doc[table].index(row)] = draw(fs.yaml_values)
        elif action == "table":
            doc[table] = draw(fs.yaml_values)
        elif action == "versions" and isinstance(row.get("versions"), list):
            row["versions"] = [*row["versions"], draw(fs.value(["2.5.1", "2.x", "..", ""]))]
        elif action == "text":
            text = _dump(doc)
            texts[name] = draw(st.one_of(st.integers(0, len(text)).map(lambda n, t=text: t[:n]), fs.file_junk))
    texts.update({name: _dump(docs[name]) for name in changed - set(texts)})
    return docs, texts


@modes(6)
def test_kb_loader(seed_value: int | None, count: int) -> None:
    tally = Tally("load_kb")

    def check(value: tuple[dict[str, Any], dict[str, str]]) -> None:
        docs, texts = value
        with tempfile.TemporaryDirectory() as tmp:
            root = write_kb(Path(tmp), docs, texts)
            check_function(tally, texts, lambda: load_kb(root), (KnowledgeBaseError,))

    run_property(mutated_kb(), check, count, seed_value)
    tally.check()


@st.composite
def bad_rows(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    """Two or three rows in different files, each given a value no key accepts."""
    names = draw(st.lists(st.sampled_from(FILES), min_size=2, max_size=3, unique=True))
    picked = []
    for name in names:
        table = draw(st.sampled_from(_tables(originals()[name])))
        index = draw(st.integers(0, len(originals()[name][table]) - 1))
        picked.append((name, table, index))
    return picked


@modes(4)
def test_every_bad_row_is_reported_at_once(seed_value: int | None, count: int) -> None:
    def check(rows: list[tuple[str, str, int]]) -> None:
        docs = copy.deepcopy(originals())
        for name, table, index in rows:
            row = docs[name][table][index]
            key = sorted(k for k in row if k != "source")[0]
            row[key] = NEVER_VALID
        with tempfile.TemporaryDirectory() as tmp, pytest.raises(KnowledgeBaseError) as info:
            load_kb(write_kb(Path(tmp), docs))
        for name, table, index in rows:
            assert any(p.startswith(f"{name}: {table}[{index}]") for p in info.value.problems), (rows, info.value)

    run_property(bad_rows(), check, count, seed_value)


def test_torch_versions_are_validated_with_the_other_rows(tmp_path: Path) -> None:
    """torch.yaml `versions: ["2.x"]` is reported by the row reader, together with a bad row elsewhere."""
    docs = copy.deepcopy(originals())
    docs["torch.yaml"]["builds"][0]["versions"] = ["2.x"]
    docs["gpus.yaml"]["gpus"][0]["compute_capability"] = "eight"
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(write_kb(tmp_path, docs))
    problems = info.value.problems
    assert any(p.startswith("torch.yaml: builds[0]") and "'2.x'" in p for p in problems), problems
    assert any(p.startswith("gpus.yaml: gpus[0]") and "'eight'" in p for p in problems), problems


def test_unreadable_kb_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    for name in FILES:
        shutil.copy(KB_DATA / name, tmp_path / name)
    (tmp_path / "cuda.yaml").write_bytes(b"majors: \xff\xfe\n")
    (tmp_path / "deepspeed.yaml").unlink()
    with pytest.raises(KnowledgeBaseError) as info:
        load_kb(tmp_path)
    assert any(p.startswith("cuda.yaml:") for p in info.value.problems)
    assert any(p.startswith("deepspeed.yaml:") for p in info.value.problems)
