"""Activation scripts and --print-env under hostile input: nothing a lock, an option or a prefix path carries
may run when the scripts are sourced. Each case sources the real script in bash and checks a canary file."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.core import archlist
from envsolver.core.errors import BadInputError
from envsolver.hook import activation
from envsolver.install import prefixmeta
from envsolver.kb import default_kb
from envsolver.verify import run as verify_run

# Each carries a command that creates {canary} if the shell ever runs it.
HOSTILE = [
    "9.0+PTX$(touch {canary})",
    "9.0;`touch {canary}`",
    "9.0\ntouch {canary}",
    "9.0'; touch {canary}; '",
    '9.0"; touch {canary}; "',
    "9.0;$(touch${{IFS}}{canary})",
    "9.0 && touch {canary}",
    '9.0\\"$(touch {canary})',
]


def _source(script: str, prefix: Path) -> dict[str, str]:
    """Source `script` (shell text) in bash and return the environment it leaves."""
    out = subprocess.run(
        ["bash", "-c", f"{script}\nenv -0"],
        env={"PATH": "/usr/bin:/bin", "CONDA_PREFIX": str(prefix)},
        capture_output=True,
        check=True,
    )
    pairs = [item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item]
    return dict(pairs)


@pytest.mark.parametrize("template", HOSTILE)
def test_hook_refuses_a_hostile_arch_list_and_writes_nothing(tmp_path: Path, template: str) -> None:
    canary = tmp_path / "PWNED"
    prefix = tmp_path / "env"
    prefix.mkdir()
    value = template.format(canary=canary)
    result = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", value, "--no-build"])
    assert result.exit_code == 2, result.output
    assert "--arch-list" in result.output and "malformed" in result.output
    assert not (prefix / "etc").exists()
    printed = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", value, "--print-env"])
    assert printed.exit_code == 2 and "export" not in printed.output, printed.output
    assert not canary.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_arch_list_in_the_kept_lock_metadata_is_refused(tmp_path: Path, template: str) -> None:
    canary = tmp_path / "PWNED"
    prefix = tmp_path / "env"
    meta = prefix / prefixmeta.METADATA
    meta.parent.mkdir(parents=True)
    doc = {"platform": "linux-64", "custom_metadata": {prefixmeta.ARCH_KEY: template.format(canary=canary)}}
    meta.write_text(json.dumps(doc))
    for args in (["--no-build"], ["--print-env"]):
        result = CliRunner().invoke(main, ["hook", "-p", str(prefix), *args])
        assert result.exit_code == 2, result.output
        assert prefixmeta.ARCH_KEY in result.output and "export" not in result.output
    assert not (prefix / "etc" / "conda").exists()
    assert not canary.exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"platform": "linux-64", "custom_metadata": {"envsolver_torch_cuda_arch_list": "9.0"', "not the metadata"),
        ('{"platform": "win-64", "custom_metadata": {"envsolver_torch_cuda_arch_list": "9.0"}}', "'win-64'"),
        ("[]", "not the metadata"),
        ('{"platform": "linux-64", "custom_metadata": {"a": 1}}', "not the metadata"),
        ("\udcff", "not the metadata"),
    ],
    ids=["truncated", "win-64", "list", "non-string", "not-utf8"],
)
def test_bad_kept_metadata_is_an_error_with_a_fix(tmp_path: Path, text: str, problem: str) -> None:
    meta = tmp_path / prefixmeta.METADATA
    meta.parent.mkdir(parents=True)
    meta.write_bytes(text.encode("utf-8", "surrogateescape"))
    for args in (["--no-build"], ["--print-env"]):
        result = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), *args])
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit)
        assert problem in result.output and "envsolver install" in result.output
    with pytest.raises(BadInputError, match=problem):
        verify_run.context({}, default_kb(), tmp_path, None, gpu_test=False)


def test_the_fix_for_a_bad_metadata_file_works(tmp_path: Path) -> None:
    """The message says: delete the file and pass --arch-list. Doing exactly that succeeds."""
    meta = tmp_path / prefixmeta.METADATA
    meta.parent.mkdir(parents=True)
    meta.write_text("{")
    first = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--print-env"])
    assert first.exit_code == 2 and f"delete {meta}" in first.output, first.output
    meta.unlink()
    again = CliRunner().invoke(main, ["hook", "-p", str(tmp_path), "--print-env", "--arch-list", "8.0;9.0+PTX"])
    assert again.exit_code == 0 and "TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'" in again.output, again.output


# Valid arch lists, generated from the grammar; written back in canonical form.
ARCH = st.builds(
    lambda major, minor, suffix, ptx: f"{major}.{minor}{suffix}{'+PTX' if ptx else ''}",
    st.integers(0, 999),
    st.integers(0, 999),
    st.sampled_from(["", "a", "f"]),
    st.booleans(),
)
ARCH_LISTS = st.lists(ARCH, min_size=1, max_size=6).flatmap(
    lambda items: st.sampled_from([";".join(items), " ".join(items), ";".join(items) + ";"])
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=ARCH_LISTS)
def test_a_valid_arch_list_reaches_the_shell_exactly(tmp_path: Path, arch: str) -> None:
    activation.write(tmp_path, arch, "x86_64-linux", force=True)
    env = _source(f". {shlex.quote(str(tmp_path / 'etc/conda/activate.d/envsolver.sh'))}", tmp_path)
    assert env["TORCH_CUDA_ARCH_LIST"] == archlist.canonical(arch)
    assert env["TORCH_CUDA_ARCH_LIST"] == ";".join(a for a in arch.replace(" ", ";").split(";") if a)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=40), ARCH_LISTS, ARCH_LISTS.map(lambda a: a + "$(x)")))
def test_any_text_is_either_refused_or_rendered_from_its_parse(text: str) -> None:
    try:
        value = archlist.canonical(text)
    except ValueError:
        with pytest.raises(ValueError):
            activation.activate(text, "x86_64-linux")
        return
    lines = activation.activate(text, "x86_64-linux").splitlines()
    line = next(x for x in lines if x.startswith("export TORCH_CUDA_ARCH_LIST="))
    assert line == f"export TORCH_CUDA_ARCH_LIST={shlex.quote(value)}"
    assert all(ch.isdigit() or ch in ".;+PTXaf" for ch in value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(blacklist_characters="\0/", blacklist_categories=("Cs",)), min_size=1, max_size=20))
def test_print_env_quotes_any_prefix_path(tmp_path: Path, name: str) -> None:
    """`eval "$(envsolver hook --print-env)"` with a prefix whose name holds $, `, quotes or newlines runs
    nothing and sets CONDA_PREFIX to exactly that path."""
    canary = tmp_path / "PWNED"
    prefix = tmp_path / f"$(touch {canary}){name}"
    text = activation.exports(prefix, "9.0", "x86_64-linux")
    env = _source(f"eval {shlex.quote(text)}", tmp_path)
    assert env["CONDA_PREFIX"] == str(prefix)
    assert env["CUDA_HOME"] == str(prefix)
    assert env["TORCH_EXTENSIONS_DIR"] == f"{prefix}/var/cache/torch_extensions"
    assert not canary.exists()


def test_the_fix_names_a_prefix_with_spaces_so_that_it_runs(tmp_path: Path) -> None:
    prefix = tmp_path / "my env; rm -rf x"
    meta = prefix / prefixmeta.METADATA
    meta.parent.mkdir(parents=True)
    meta.write_text("{")
    result = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--print-env"])
    assert result.exit_code == 2, result.output
    command = result.output.split("or delete ", 1)[1].split(" and pass", 1)[0]
    subprocess.run(["bash", "-c", f"rm {command}"], check=True)
    assert not meta.exists() and prefix.is_dir()


@pytest.mark.parametrize("toolkit", [True, False], ids=["toolkit-in-prefix", "no-nvcc-in-prefix"])
def test_activation_follows_the_probe(tmp_path: Path, toolkit: bool) -> None:
    """CUDA_HOME and CPATH point into the prefix only when the probe found nvcc and the headers there; otherwise
    activation leaves them as they were, deactivation restores everything, and the report says what to install."""
    from tests.test_hook import fake_prefix

    prefix = fake_prefix(tmp_path, nvcc="13.0" if toolkit else None)
    result = CliRunner().invoke(
        main, ["hook", "-p", str(prefix), "--arch-list", "9.0", "--no-build", "--json"], env={"CUDA_HOME": None}
    )
    doc = json.loads(result.stdout)
    finding = next(c for c in doc["checks"] if c["id"] == "prefix_toolkit")
    before = {"CUDA_HOME": "/opt/cuda", "CPATH": "/opt/include"}
    on = shlex.quote(str(prefix / "etc/conda/activate.d/envsolver.sh"))
    off = shlex.quote(str(prefix / "etc/conda/deactivate.d/envsolver.sh"))
    exported = "".join(f"export {k}={v}\n" for k, v in before.items())
    active = _source(f"{exported}. {on}", prefix)
    restored = _source(f"{exported}. {on}; . {off}", prefix)
    printed = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--arch-list", "9.0", "--print-env"])
    if toolkit:
        assert finding["status"] == "pass"
        assert active["CUDA_HOME"] == str(prefix)
        assert active["CPATH"] == f"{prefix}/targets/x86_64-linux/include:/opt/include"
        assert f"export CUDA_HOME={shlex.quote(str(prefix))}\n" in printed.stdout
    else:
        assert finding["status"] == "warn" and "no nvcc in" in finding["detail"]
        fix = f"conda install -p {prefix} -c conda-forge cuda-nvcc cuda-version=13.0, then envsolver hook -p {prefix}"
        assert finding["fix"] == fix  # the pin is torch's CUDA: the fake prefix has no cuda-version package
        assert (active["CUDA_HOME"], active["CPATH"]) == ("/opt/cuda", "/opt/include")
        assert "CUDA_HOME" not in printed.stdout and "CPATH" not in printed.stdout
    assert active["TORCH_CUDA_ARCH_LIST"] == "9.0+PTX" and active["DS_ACCELERATOR"] == "cuda"
    assert {k: restored.get(k) for k in (*before, "TORCH_CUDA_ARCH_LIST")} == {**before, "TORCH_CUDA_ARCH_LIST": None}


def _saved(name: str) -> str:
    return f'export _ENVSOLVER_SAVED_{name}="${{{name}-__envsolver_unset__}}"'


def _restore(name: str) -> list[str]:
    saved = f"_ENVSOLVER_SAVED_{name}"
    return [
        f'if [ "${{{saved}-__envsolver_unset__}}" = "__envsolver_unset__" ]; then unset {name}; '
        f'else export {name}="${{{saved}}}"; fi',
        f"unset {saved}",
    ]


HEADER = [
    "# Written by envsolver hook: the build environment for CUDA extensions (DeepSpeed ops).",
    "# deactivate.d/envsolver.sh restores every variable to what it was before.",
]
BUILD = [
    _saved("TORCH_CUDA_ARCH_LIST"),
    "export TORCH_CUDA_ARCH_LIST='8.0;9.0'",
    _saved("DS_ACCELERATOR"),
    "export DS_ACCELERATOR=cuda",
    _saved("TORCH_EXTENSIONS_DIR"),
    'export TORCH_EXTENSIONS_DIR="${CONDA_PREFIX}"/var/cache/torch_extensions',
]


def test_the_scripts_word_for_word_with_and_without_the_prefixs_toolkit() -> None:
    """With the toolkit in the prefix, CUDA_HOME and CPATH point into it; without, the scripts say why they leave
    both alone, and deactivate restores only what activate set (issue 14: the note and the filter were unchecked)."""
    toolkit = [
        _saved("CUDA_HOME"),
        'export CUDA_HOME="${CONDA_PREFIX}"',
        _saved("CPATH"),
        'export CPATH="${CONDA_PREFIX}"/targets/x86_64-linux/include"${CPATH:+:${CPATH}}"',
    ]
    assert activation.activate("8.0;9.0", "x86_64-linux").splitlines() == [*HEADER, *toolkit, *BUILD]
    note = (
        "# The prefix held no CUDA toolkit (nvcc and the headers) when the hook ran: CUDA_HOME and CPATH are left "
        "as they are."
    )
    assert activation.activate("8.0;9.0", "x86_64-linux", toolkit=False).splitlines() == [*HEADER, note, *BUILD]
    undo = "# Written by envsolver hook: undo activate.d/envsolver.sh."
    build_vars = ("TORCH_CUDA_ARCH_LIST", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR")
    assert activation.deactivate(toolkit=False).splitlines() == [undo, *(x for v in build_vars for x in _restore(v))]
    every = ("CUDA_HOME", "CPATH", *build_vars)
    assert activation.deactivate().splitlines() == [undo, *(x for v in every for x in _restore(v))]
    assert activation.exports(Path("/p q"), "9.0", "sbsa-linux", toolkit=False).splitlines() == [
        "export CONDA_PREFIX='/p q'",
        "export TORCH_CUDA_ARCH_LIST=9.0",
        "export DS_ACCELERATOR=cuda",
        "export TORCH_EXTENSIONS_DIR='/p q'/var/cache/torch_extensions",
    ]
