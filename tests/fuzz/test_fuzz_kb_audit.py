"""Property-based fuzzing of the KB audit's input: any repodata.json gives an audit (findings) or one
BadInputError with the fix, never another exception; the script ends in exit 0, 1 or 2 with one JSON document.

The documents are the bundled snapshot's real conda-forge records (pytorch, deepspeed and the CUDA libraries
whose floors a DeepSpeed build inherits) with fields, dependencies, records and tables replaced by any JSON.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import os
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from envsolver.core.errors import BadInputError
from envsolver.kb import load_kb
from envsolver.kb.audit import audit
from envsolver.kb.derive import as_yaml, derive
from envsolver.kb.findings import render
from envsolver.kb.repodata import read_channel
from envsolver.lock import snapshot
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, cause, check_function, hard_limit, modes, run_property

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kb_audit.py"


@cache
def _seed_doc() -> dict[str, Any]:
    """The snapshot's conda-forge linux-64 records of pytorch 2.4 and 2.10, deepspeed, libcublas 13 and
    libcudnn 9.1x."""
    doc = json.loads((snapshot.data_dir() / "conda-forge" / "linux-64" / "repodata.json").read_text())
    keep = ("pytorch-2.10", "pytorch-2.4", "deepspeed-", "libcublas-13", "libcudnn-9.1")
    return {
        "info": doc["info"],
        "packages": {},
        "packages.conda": {k: v for k, v in doc["packages.conda"].items() if k.startswith(keep)},
    }


_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), fs.junk, fs.version_like, fs.huge_number)
_json_value = st.recursive(
    _json_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(fs.junk, c, max_size=3), max_leaves=8
)
_dep_like = st.one_of(
    fs.version_like,
    fs.junk,
    st.tuples(
        st.sampled_from(
            ["cuda-version", "python_abi", "python", "pytorch", "libcublas", "arm-variant", "nccl", "__glibc"]
        ),
        fs.version_like,
        fs.junk,
    ).map(" ".join),
)


@st.composite
def mutated_repodata(draw: st.DrawFn) -> bytes:
    """The seed document with 1-4 changes (a field, a dependency, a record, a table or info replaced, a key
    dropped), sometimes cut short; or any text."""
    if draw(st.integers(0, 19)) == 0:
        return draw(fs.file_junk).encode("utf-8", "surrogatepass")
    doc = copy.deepcopy(_seed_doc())
    table = doc["packages.conda"]
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(sorted(table))) if table else None
        action = draw(st.sampled_from(["field", "field", "dep", "dep", "drop", "record", "table", "info"]))
        if name is None or not isinstance(table.get(name), dict):
            continue
        rec = table[name]
        if action == "field":
            key = draw(st.sampled_from(["name", "version", "build", "build_number", "depends", "subdir", "timestamp"]))
            rec[key] = draw(st.one_of(_json_value, fs.version_like))
        elif action == "dep" and isinstance(rec.get("depends"), list):
            deps = rec["depends"]
            deps.insert(draw(st.integers(0, len(deps))), draw(_dep_like))
        elif action == "drop" and rec:
            rec.pop(draw(st.sampled_from(sorted(rec))))
        elif action == "record":
            table[name] = draw(_json_value)
        elif action == "table":
            doc[draw(st.sampled_from(["packages", "packages.conda"]))] = draw(_json_value)
            table = doc["packages.conda"] if isinstance(doc["packages.conda"], dict) else {}
        elif action == "info":
            doc["info"] = draw(_json_value)
    text = json.dumps(doc).encode()
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


@contextlib.contextmanager
def _channel(text: bytes) -> Iterator[Path]:
    """A channel folder holding `text` as linux-64/repodata.json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "linux-64" / "repodata.json"
        path.parent.mkdir()
        path.write_bytes(text)
        yield Path(tmp)


@modes(25)
def test_any_repodata_gives_findings_or_bad_input(seed_value: int | None, count: int) -> None:
    tally = Tally("kb_audit repodata")
    kb = load_kb()

    def check(text: bytes) -> None:
        with _channel(text) as channel:

            def call() -> None:
                data = read_channel("conda-forge", channel, complete=True)
                render(audit(kb, data))
                as_yaml(derive(kb, data), "fuzz")

            check_function(tally, text[:300], call, (BadInputError,))

    run_property(mutated_repodata(), check, count, seed_value)
    tally.check()


@cache
def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kb_audit_fuzz", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = load_kb()  # read once: the script's runs here never pass --kb, and nothing changes the shipped KB
    module.load_kb = lambda data_dir=None: shipped if data_dir is None else load_kb(data_dir)
    return module


def _outcome(argv: list[str]) -> str | None:
    """What is wrong with the script's run on argv: None when it exits 0, 1 or 2 with one JSON document whose
    exit_code is the exit code, and a failure (2) names the fix."""
    out, err = io.StringIO(), io.StringIO()
    previous = os.environ.get("ENVSOLVER_DEBUG")
    os.environ["ENVSOLVER_DEBUG"] = "1"  # a bug raises, so its cause is recorded with its line
    try:
        with hard_limit(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _script().main(argv)
    except Exception as exc:
        return cause(exc)
    finally:
        if previous is None:
            os.environ.pop("ENVSOLVER_DEBUG", None)
        else:
            os.environ["ENVSOLVER_DEBUG"] = previous
    if code not in (0, 1, 2):
        return f"exit code {code}"
    try:
        doc = json.loads(out.getvalue())
    except ValueError:
        return f"exit {code}: stdout is not one JSON document"
    if doc.get("exit_code") != code:
        return f"exit {code}: the JSON says exit_code {doc.get('exit_code')!r}"
    if code == 2 and not (doc.get("error", {}).get("fix") and err.getvalue().startswith("error: ")):
        return "exit 2 without a fix or an error line"
    return None


@modes(15)
def test_the_script_on_any_repodata_exits_0_1_or_2_with_json(seed_value: int | None, count: int) -> None:
    tally = Tally("kb_audit.py --json")

    def check(case: tuple[bytes, list[str]]) -> None:
        text, options = case
        with _channel(text) as channel:
            tally.record(text[:300], _outcome(["--repodata", f"conda-forge={channel}", "--json", *options]))

    options = st.lists(st.sampled_from(["--partial", "--derive", "--quiet"]), unique=True)
    run_property(st.tuples(mutated_repodata(), options), check, count, seed_value)
    tally.check()
