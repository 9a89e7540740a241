"""The conda -> PyPI names (envsolver.lock.pypi.condamap): parselmouth's bundled mapping, its provenance, and what a
conda part holds, occupies or leaves unknown; the knowledge base's pypi_conda_names agree with it."""

from __future__ import annotations

import hashlib
import json

from envsolver.kb import KnowledgeBase
from envsolver.kb import condamap as kb_condamap
from envsolver.lock.pypi import condamap
from envsolver.lock.solve import Record


def _record(name: str, version: str) -> Record:
    return Record(name, version, "h0_0", 0, "noarch", "conda-forge", f"https://x/noarch/{name}-{version}-h0_0.conda",
                  "0" * 32, "0" * 64, None, (), ())  # fmt: skip


def test_the_bundled_mapping_is_parselmouths_file_unchanged_with_its_provenance_and_license() -> None:
    folder = kb_condamap.data_dir()
    data = (folder / "compressed_mapping.json").read_bytes()
    doc = kb_condamap.provenance()
    assert hashlib.sha256(data).hexdigest() == doc["sha256"], "the bundled mapping differs from the one recorded"
    assert doc["repository"] == "https://github.com/prefix-dev/parselmouth", doc
    assert doc["path"] == "files/v0/conda-forge/compressed_mapping.json", doc
    assert len(doc["commit"]) == 40 and doc["commit_date"], doc
    assert doc["entries"] == len(json.loads(data)) == len(kb_condamap.mapping()), doc["entries"]
    assert "BSD-3-Clause" in doc["license"], doc["license"]
    assert (folder / "LICENSE").read_text().startswith("BSD 3-Clause License"), "the license travels with the data"


def test_conda_names_map_to_the_pypi_names_they_install() -> None:
    table = kb_condamap.mapping()
    assert table["pytorch"] == ("torch",), table["pytorch"]
    assert table["hjson-py"] == ("hjson",), table["hjson-py"]
    assert table["msgpack-python"] == ("msgpack", "msgpack-python"), table["msgpack-python"]
    assert table["huggingface_hub"] == ("huggingface-hub",), "names come back normalized (PEP 503)"
    assert table["libgcc"] is None and table["ninja"] is None, "a package that installs no distribution maps to None"
    assert "no-such-conda-package" not in table


def test_held_occupied_and_unknown(kb: KnowledgeBase) -> None:
    records = [
        _record("pytorch", "2.9.1"),
        _record("hjson-py", "3.1.0"),
        _record("msgpack-python", "1.1.0"),  # two names: the KB says which one it installs at this version
        _record("pybind11", "2.13.6"),  # two names the KB does not pick between: occupied, at no known version
        _record("ninja", "1.13.0"),  # installs no Python distribution, but PyPI's ninja would be a second copy
        _record("pytorch-mutex", "1.0"),  # unknown to the mapping: never guessed
        _record("numpy", "2.3.5"),
    ]
    found = condamap.conda_provides(records, kb)
    assert found.held == {"torch": "2.9.1", "hjson": "3.1.0", "msgpack": "1.1.0", "numpy": "2.3.5"}, found.held
    assert condamap.held_by_conda(records, kb) == found.held
    assert found.occupied == {
        "msgpack-python": "msgpack-python",
        "pybind11": "pybind11",
        "pybind11-global": "pybind11",
        "ninja": "ninja",
        "pytorch": "pytorch",
        "hjson-py": "hjson-py",
        "pytorch-mutex": "pytorch-mutex",
    }, found.occupied
    assert found.by["torch"] == "pytorch" and found.by["msgpack"] == "msgpack-python", found.by


def test_a_conda_version_that_is_not_pep_440_is_occupied_not_held(kb: KnowledgeBase) -> None:
    found = condamap.conda_provides([_record("pyyaml", "6.0.2_weird")], kb)
    assert found.held == {} and found.occupied == {"pyyaml": "pyyaml"}, found


def test_the_knowledge_bases_pypi_conda_names_agree_with_the_mapping(kb: KnowledgeBase) -> None:
    """One home per fact: the KB's rows (for DeepSpeed's requirements) and parselmouth's mapping say the same."""
    table = kb_condamap.mapping()
    wrong = []
    for row in kb.pypi_conda_names:
        names = table.get(row.conda, "absent")
        installs = isinstance(names, tuple) and row.pypi in names
        if installs != row.provides_dist:
            wrong.append(f"{row.conda} -> {row.pypi}: KB provides_dist={row.provides_dist}, mapping {names}")
    assert not wrong, "\n".join(wrong)


def test_the_mapping_and_uv_are_not_loaded_by_the_commands_that_lock_no_pypi_part() -> None:
    """make's start-up is measured: the 1 MB mapping and the uv machinery load only when a PyPI part is resolved."""
    import subprocess
    import sys

    code = (
        "import sys, envsolver.cli.main, envsolver.lock.run, envsolver.lock.pypi.pins\n"
        "print(sorted(m for m in sys.modules if m.startswith('envsolver.lock.pypi.') and m.rsplit('.', 1)[1] in "
        "('condamap', 'project', 'uvrun', 'loopback', 'clash', 'guards')))"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
