"""Property-based fuzzing of `envsolver module`: fuzzed lock metadata, activation scripts (a real one, one changed,
junk), module, family and conflict names, and paths. Every run ends in exit 0 or 2 with a message; a file written
is one Lua reads (luac -p), holds no raw control character, and is plain ASCII outside its header comment."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from envsolver.hook import activation
from envsolver.lock.writers import files
from tests.fuzz import strategies as fs
from tests.fuzz.harness import Tally, check_cli, modes, run_property

LUAC = shutil.which("luac5.3") or shutil.which("luac")

_real = files.stamp(activation.activate("8.0;9.0+PTX", "x86_64-linux"))
_valid = st.sampled_from([_real, files.stamp(activation.activate("9.0", "sbsa-linux", toolkit=False))])


def mostly(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` three times in four, so that a run of several fuzzed inputs still reaches the writing often."""
    return st.integers(0, 3).flatmap(lambda i: valid if i else other)


activate_text = mostly(
    _valid,
    st.one_of(
        st.tuples(st.integers(0, len(_real)), fs.file_junk).map(lambda v: _real[: v[0]] + v[1] + _real[v[0] :]),
        fs.file_junk,
        st.none(),
    ),
)
_meta = {"envsolver_torch": "2.10.0 (CUDA 12.9)", "envsolver_gpus": "NVIDIA A100 (8.0)"}
metadata_text = mostly(
    st.just(json.dumps({"platform": "linux-64", "custom_metadata": _meta})),
    st.one_of(
        fs.lock_metadata_text,
        st.dictionaries(fs.junk, fs.junk, max_size=3).map(
            lambda custom: json.dumps({"platform": "linux-64", "custom_metadata": custom})
        ),
        st.none(),
    ),
)
_names = st.sampled_from(["train/2026.12", "a", "a/b/c/d", "x+y/1.0-rc1"])
names = mostly(_names, st.one_of(fs.junk, fs.terminal_junk))
options = st.lists(
    st.one_of(
        st.tuples(st.just("--family"), st.one_of(st.just("conda_env"), fs.junk)).map(list),
        st.tuples(st.just("--conflict"), names).map(list),
        st.just(["--no-family"]),
        st.just(["--force"]),
        st.just(["--json"]),
    ),
    max_size=2,
).map(lambda parts: [x for p in parts for x in p])
directory = st.one_of(
    st.just("env"),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="/\x00"), min_size=1, max_size=12),
)


@modes(30)
def test_module_with_fuzzed_inputs(seed_value: int | None, count: int) -> None:
    tally = Tally("module")

    def check(value: tuple[Any, ...]) -> None:
        script, metadata, name, tail, where = value
        with tempfile.TemporaryDirectory() as tmp:
            try:
                prefix = Path(tmp) / where
                prefix.mkdir(exist_ok=True)
            except OSError:  # a name the file system refuses ('.', too long): not what is tested
                return
            if script is not None:
                path = prefix / "etc" / "conda" / "activate.d" / "envsolver.sh"
                path.parent.mkdir(parents=True)
                path.write_text(script, encoding="utf-8")
            if metadata is not None:
                meta = prefix / "etc" / "envsolver" / "lock-metadata.json"
                meta.parent.mkdir(parents=True)
                meta.write_text(metadata, encoding="utf-8")
            out = Path(tmp) / "modules"
            outcome = check_cli(tally, ["module", name, "-p", str(prefix), "--out", str(out), *tail], example=value)
            written = list(out.rglob("*.lua")) if out.exists() else []
            if outcome.exit_code != 0 or not written:
                assert outcome.exit_code != 0 or "unchanged" in outcome.output, outcome.output
                return
            text = written[0].read_text(encoding="utf-8")
            assert all(ch == "\n" or ch.isprintable() for ch in text), text
            # values are Lua literals in plain ASCII; only the header comment shows a path as it is
            assert all(line.isascii() for line in text.splitlines() if not line.startswith("-- ")), text
            if LUAC is not None:
                parsed = subprocess.run([LUAC, "-p", str(written[0])], capture_output=True, text=True, timeout=30)
                assert parsed.returncode == 0, parsed.stderr + text

    strategy = st.tuples(activate_text, metadata_text, names, options, directory)
    run_property(strategy, check, count, seed_value)
    tally.check()
