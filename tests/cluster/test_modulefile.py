"""`envsolver module`: the Lmod modulefile of a prefix the hook set up, loaded and unloaded by real Lmod (Debian's
lmod package; scripts/install_system_deps.sh installs it), against what sourcing the hook's activate.d script
sets; hostile prefix paths and metadata; a hand edit kept; every error's fix run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from envsolver.cli.main import main
from envsolver.cluster import lua, modulefile
from envsolver.core.errors import BadInputError
from envsolver.hook import activation
from envsolver.hook import run as hook_run
from envsolver.install import prefixmeta
from envsolver.kb import default_kb
from envsolver.lock import lockfile
from envsolver.lock.writers import files
from tests.test_hook import BASE, fake_prefix

ROOT = Path(__file__).resolve().parent.parent.parent
LOCK = ROOT / "locks" / "a100" / "conda-lock.yml"
WATCHED = ("CONDA_PREFIX", "PATH", *activation.VARIABLES)
# Lmod's own bookkeeping, which a load and unload may leave changed: not what the module sets.
LMOD_KEYS = ("_ModuleTable", "__LMOD", "LMOD_", "_LMFILES_", "LOADEDMODULES", "MODULEPATH", "__ModuleTable")


def lmod_init() -> Path | None:
    """Lmod's bash init: LMOD_PKG/init/bash (as Lmod's own init sets LMOD_PKG), or Debian's package's."""
    for base in (os.environ.get("LMOD_PKG"), "/usr/share/lmod/lmod"):
        if base and (Path(base) / "init" / "bash").is_file():
            return Path(base) / "init" / "bash"
    return None


needs_lmod = pytest.mark.skipif(
    lmod_init() is None,
    reason="Lmod is not installed: no LMOD_PKG/init/bash or /usr/share/lmod/lmod/init/bash (Debian package lmod; "
    "scripts/install_system_deps.sh installs it)",
)


def hooked(parent: Path, metadata: bool = True) -> Path:
    """A prefix under `parent` set up as `envsolver install` leaves it: the lock's metadata kept (the a100 lock's),
    then the hook (--no-build: activation scripts and pre-flight) on a fake conda prefix with the CUDA toolkit."""
    prefix = fake_prefix(parent)
    if metadata:
        read = lockfile.read(LOCK, None)
        prefixmeta.save(prefix, read.platform, read.metadata)
    arch = None if metadata else "8.0;9.0+PTX"
    report = hook_run.hook(prefix, default_kb(), None, arch, ("fused_adam",), 1, True, None, BASE, lambda _: None)
    assert (prefix / modulefile.ACTIVATE).is_file(), report
    return prefix


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["module", *args])


def written(*args: str) -> Result:
    """`envsolver module ARGS`, which must succeed."""
    done = cli(*args)
    assert done.exit_code == 0, done.output
    return done


def bash(script: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`script` in a bash that sourced Lmod's init (no profile, no rc files), with exactly `env`."""
    init = lmod_init()
    assert init is not None, "Lmod's init/bash: see lmod_init()"
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f". {init}\n{script}"],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def environ(path: Path) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in path.read_text().split("\0") if "=" in item]
    return {k: v for k, v in pairs if k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def own(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without Lmod's bookkeeping."""
    return {k: v for k, v in env.items() if not k.startswith(LMOD_KEYS)}


def load_unload(tmp_path: Path, out: Path, module: str, before: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The environment after `module use OUT` (baseline), after `module load MODULE`, after `module unload`."""
    script = (
        f"module use {out} || exit 3\nenv -0 > baseline\nmodule load {module} || exit 4\nenv -0 > loaded\n"
        f"module unload {module} || exit 5\nenv -0 > unloaded\n"
    )
    done = bash(script, {"HOME": str(tmp_path), **before}, tmp_path)
    assert done.returncode == 0 and "Lmod has detected" not in done.stderr, f"rc {done.returncode}: {done.stderr}"
    return {name: environ(tmp_path / name) for name in ("baseline", "loaded", "unloaded")}


def activated(prefix: Path, before: Mapping[str, str]) -> dict[str, str]:
    """What `conda activate` leaves: CONDA_PREFIX set, PREFIX/bin first on PATH, activate.d sourced."""
    env = {**before, "CONDA_PREFIX": str(prefix), "PATH": f"{prefix}/bin:{before['PATH']}"}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", '. "$CONDA_PREFIX/etc/conda/activate.d/envsolver.sh"; env -0'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)


BEFORE = [
    {"PATH": "/usr/bin:/bin", "CUDA_HOME": "/usr/local/cuda", "CPATH": "/opt/include"},
    {"PATH": "/usr/bin:/bin", "CONDA_PREFIX": "/opt/conda", "TORCH_CUDA_ARCH_LIST": "7.0", "DS_ACCELERATOR": "cpu"},
]


@needs_lmod
@pytest.mark.parametrize("before", BEFORE, ids=["cuda-home-set", "another-env-active"])
def test_load_sets_what_activation_sets_and_unload_restores(tmp_path: Path, before: dict[str, str]) -> None:
    prefix = hooked(tmp_path / "p")
    out = tmp_path / "modules"
    made = cli("train/2026.12", "-p", str(prefix), "--out", str(out))
    assert made.exit_code == 0, made.output
    seen = load_unload(tmp_path, out, "train/2026.12", before)
    expected = activated(prefix, before)
    for name in WATCHED:
        assert seen["loaded"].get(name) == expected.get(name), f"{name}: module {seen['loaded'].get(name)!r}, " + (
            f"activation {expected.get(name)!r}"
        )
    # the hook found the toolkit in the fake prefix: CUDA_HOME and CPATH are the prefix's
    assert seen["loaded"]["CUDA_HOME"] == str(prefix) and seen["loaded"]["TORCH_CUDA_ARCH_LIST"] == "8.0+PTX", seen
    for name in WATCHED:
        assert seen["unloaded"].get(name) == before.get(name), f"{name} after unload: {seen['unloaded'].get(name)!r}"
    assert own(seen["unloaded"]) == own(seen["baseline"]), (own(seen["baseline"]), own(seen["unloaded"]))


# Each prefix path carries something that breaks out of a naive Lua or shell literal; `{canary}` is a file a
# command would create if anything ever ran it.
HOSTILE = [
    'dq"uote',
    "back\\slash",
    "trailing\\",
    "long]]bracket",
    "--[[comment",
    "$(touch {canary})",
    "`touch {canary}`",
    "sq'uote; touch {canary}",
    "sp ace",
    "caf\u00e9",
]


@needs_lmod
@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_prefix_path_is_carried_exactly(tmp_path: Path, name: str) -> None:
    canary = tmp_path / "PWNED"
    prefix = hooked(tmp_path / name.format(canary=canary))
    out = tmp_path / "modules"
    made = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert made.exit_code == 0, made.output
    seen = load_unload(tmp_path, out, "train/1", {"PATH": "/usr/bin:/bin"})
    loaded = seen["loaded"]
    assert loaded.get("CONDA_PREFIX") == str(prefix), loaded.get("CONDA_PREFIX")
    assert loaded.get("TORCH_EXTENSIONS_DIR") == f"{prefix}/var/cache/torch_extensions", loaded
    assert loaded.get("CUDA_HOME") == str(prefix) and loaded["PATH"] == f"{prefix}/bin:/usr/bin:/bin", loaded
    assert "CONDA_PREFIX" not in seen["unloaded"] and seen["unloaded"]["PATH"] == "/usr/bin:/bin", seen["unloaded"]
    assert not canary.exists(), f"{canary} was created: a command in the prefix path ran"


@pytest.mark.parametrize(
    ("name", "problem"),
    [("new\nline", "'\\n'"), ("co:lon", "':'"), ("tab\there", "'\\t'"), ("esc\x1b[31m", "'\\x1b'")],
    ids=["newline", "colon", "tab", "escape"],
)
def test_a_prefix_path_a_modulefile_cannot_carry_is_refused(tmp_path: Path, name: str, problem: str) -> None:
    prefix = tmp_path / name / "env"
    activation.write(prefix, "9.0", "x86_64-linux")
    out = tmp_path / "modules"
    refused = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert refused.exit_code == 2, refused.output
    assert "the prefix" in refused.output and problem in refused.output, refused.output
    assert not out.exists(), sorted(out.rglob("*"))


def test_a_non_utf8_prefix_path_is_refused(tmp_path: Path) -> None:
    prefix = tmp_path / os.fsdecode(b"latin1-\xe9") / "env"
    activation.write(prefix, "9.0", "x86_64-linux")
    with pytest.raises(BadInputError, match="which a modulefile does not carry"):
        modulefile.write(modulefile.Request(prefix, "train/1", tmp_path / "modules"), {"linux-64": "x86_64-linux"})
    assert not (tmp_path / "modules").exists(), "a refused prefix still wrote a module"


@pytest.mark.parametrize(
    "args",
    [
        ["../up"],
        ["train/"],
        ["train//1"],
        ["train/1;rm"],
        ["a/b/c/d/e"],
        ["train/1", "--family", "x y"],
        ["train/1", "--family", "a.b"],
        ["train/1", "--conflict", "x\ny"],
    ],
    ids=["dot-dot", "trailing-slash", "empty-part", "semicolon", "five-parts", "family", "family-dot", "conflict"],
)
def test_a_malformed_module_name_is_refused(tmp_path: Path, args: list[str]) -> None:
    prefix = tmp_path / "env"
    activation.write(prefix, "9.0", "x86_64-linux")
    refused = cli(*args, "-p", str(prefix), "--out", str(tmp_path / "m"))
    assert refused.exit_code == 2 and "is not" in refused.output, refused.output
    assert not (tmp_path / "m").exists(), "a refused request still wrote a module"


@needs_lmod
def test_whatis_and_help_name_the_lock(tmp_path: Path) -> None:
    prefix = hooked(tmp_path / "p")
    out = tmp_path / "modules"
    written("train/2026.12", "-p", str(prefix), "--out", str(out))
    done = bash(f"module use {out}\nmodule whatis train/2026.12\nmodule help train/2026.12", BASE, tmp_path)
    assert done.returncode == 0, done.stderr
    meta = lockfile.read(LOCK, None).metadata
    for key in ("envsolver_torch", "envsolver_gpus", "envsolver_kb_date"):
        assert f"{key}: {meta[key]}" in done.stderr, done.stderr  # Lmod prints whatis and help on stderr
    assert "Lock (platform linux-64):" in done.stderr and "TORCH_CUDA_ARCH_LIST=8.0+PTX" in done.stderr, done.stderr
    assert f"envsolver module train/2026.12 -p {prefix}" in done.stderr, done.stderr


@needs_lmod
def test_a_prefix_without_lock_metadata_says_the_lock_is_unknown(tmp_path: Path) -> None:
    prefix = hooked(tmp_path / "p", metadata=False)
    out = tmp_path / "modules"
    written("train/1", "-p", str(prefix), "--out", str(out))
    done = bash(f"module use {out}\nmodule help train/1", BASE, tmp_path)
    assert "Lock: unknown" in done.stderr, done.stderr


@needs_lmod
def test_hostile_lock_metadata_values_are_quoted_or_refused(tmp_path: Path) -> None:
    prefix = hooked(tmp_path / "p")
    meta = prefix / prefixmeta.METADATA
    doc = json.loads("\n".join(x for x in meta.read_text().splitlines() if not x.startswith("#")))
    doc["custom_metadata"]["envsolver_torch"] = 'x"]] ..os.execute("touch PWNED")--'
    meta.write_text(json.dumps(doc))
    out = tmp_path / "modules"
    written("train/1", "-p", str(prefix), "--out", str(out))
    done = bash(f"module use {out}\nmodule whatis train/1", BASE, tmp_path)
    assert 'envsolver_torch: x"]] ..os.execute("touch PWNED")--' in done.stderr, done.stderr
    assert not (tmp_path / "PWNED").exists(), "the metadata value ran as Lua"
    doc["custom_metadata"]["envsolver_torch"] = "2.10\nhelp('x')"
    meta.write_text(json.dumps(doc))
    refused = cli("train/2", "-p", str(prefix), "--out", str(out))
    assert refused.exit_code == 2 and "'envsolver_torch'" in refused.output, refused.output
    assert not (out / "train" / "2.lua").exists(), "refused metadata still wrote a module"
    assert f"delete {meta}" in refused.output, refused.output
    meta.unlink()  # the fix that needs no lock at hand
    fixed = cli("train/2", "-p", str(prefix), "--out", str(out))
    assert fixed.exit_code == 0, fixed.output
    assert "Lock: unknown" in (out / "train" / "2.lua").read_text(), (out / "train" / "2.lua").read_text()


@needs_lmod
def test_a_hand_edit_is_kept_unless_force(tmp_path: Path) -> None:
    prefix = hooked(tmp_path / "p")
    out = tmp_path / "modules"
    first = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert first.exit_code == 0 and "wrote" in first.output, first.output
    again = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert again.exit_code == 0 and "unchanged" in again.output, again.output
    path = out / "train" / "1.lua"
    edited = path.read_text() + 'setenv("SITE_VAR", "1")\n'
    path.write_text(edited)
    kept = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert kept.exit_code == 2 and "edited by hand" in kept.output and "--force" in kept.output, kept.output
    assert path.read_text() == edited, "the hand edit was overwritten without --force"
    forced = cli("train/1", "-p", str(prefix), "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    assert "SITE_VAR" not in path.read_text(), path.read_text()
    seen = load_unload(tmp_path, out, "train/1", BASE)
    assert seen["loaded"].get("CONDA_PREFIX") == str(prefix), seen["loaded"]


def test_no_activation_scripts_names_the_hook_and_the_fix_works(tmp_path: Path) -> None:
    prefix = fake_prefix(tmp_path)
    read = lockfile.read(LOCK, None)
    prefixmeta.save(prefix, read.platform, read.metadata)
    out = tmp_path / "modules"
    refused = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert refused.exit_code == 2, refused.output
    assert f"envsolver hook -p {prefix}" in refused.output and "--no-build" in refused.output, refused.output
    fix = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--no-build"])
    assert fix.exit_code == 0, fix.output
    done = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert done.exit_code == 0, done.output


def test_an_edited_activation_script_is_refused_and_the_hook_rewrites_it(tmp_path: Path) -> None:
    prefix = hooked(tmp_path)
    script = prefix / modulefile.ACTIVATE
    script.write_text(script.read_text() + "export EXTRA=1\n")
    out = tmp_path / "modules"
    refused = cli("train/1", "-p", str(prefix), "--out", str(out))
    assert refused.exit_code == 2 and "edited by hand" in refused.output, refused.output
    assert f"envsolver hook -p {prefix}" in refused.output, refused.output
    fix = CliRunner().invoke(main, ["hook", "-p", str(prefix), "--no-build"])
    assert fix.exit_code == 0, fix.output
    written("train/1", "-p", str(prefix), "--out", str(out))


@needs_lmod
def test_a_prefix_that_is_gone_fails_the_load_and_changes_nothing(tmp_path: Path) -> None:
    prefix = hooked(tmp_path / "p")
    out = tmp_path / "modules"
    written("train/1", "-p", str(prefix), "--out", str(out))
    prefix.rename(tmp_path / "moved")
    done = bash(f"module use {out}\nmodule load train/1\necho CONDA_PREFIX=${{CONDA_PREFIX-unset}}", BASE, tmp_path)
    said = " ".join(done.stderr.split())  # Lmod folds its message at the terminal's width, between any two words
    assert "is gone" in said and str(prefix) in said, done.stderr
    assert "CONDA_PREFIX=unset" in done.stdout, done.stdout


@needs_lmod
def test_the_family_swaps_one_env_for_another_and_conflict_refuses(tmp_path: Path) -> None:
    one, two = hooked(tmp_path / "one"), hooked(tmp_path / "two")
    out = tmp_path / "modules"
    for args in (["train/1", "-p", str(one)], ["infer/1", "-p", str(two), "--conflict", "site/1"]):
        made = cli(*args, "--out", str(out))
        assert made.exit_code == 0, made.output
    (out / "site").mkdir()
    (out / "site" / "1.lua").write_text('setenv("SITE", "1")\n')
    swapped = bash(
        f'module use {out}\nmodule load train/1 infer/1\necho "$CONDA_PREFIX $LOADEDMODULES"', BASE, tmp_path
    )
    assert swapped.stdout.split() == [str(two), "infer/1"], swapped.stdout + swapped.stderr
    refused = bash(f'module use {out}\nmodule load site/1\nmodule load infer/1\necho "$LOADEDMODULES"', BASE, tmp_path)
    assert refused.stdout.split() == ["site/1"], refused.stdout + refused.stderr
    assert 'Cannot load module "infer/1" because' in refused.stderr, refused.stderr


def test_json(tmp_path: Path) -> None:
    prefix = hooked(tmp_path)
    out = tmp_path / "modules"
    done = cli("train/2026.12", "-p", str(prefix), "--out", str(out), "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["ok"] is True and doc["file"] == str(out / "train" / "2026.12.lua") and doc["outcome"] == "written", doc
    settings = {s["name"]: (s["how"], s["value"]) for s in doc["settings"]}
    assert settings["PATH"] == ("prepend_path", f"{prefix}/bin"), settings
    assert settings["TORCH_CUDA_ARCH_LIST"] == ("pushenv", "8.0+PTX"), settings
    assert doc["use"] == f"module use {out}" and doc["load"] == "module load train/2026.12", doc
    failed = cli("bad name", "-p", str(prefix), "--out", str(out), "--json")
    assert failed.exit_code == 2, failed.output
    error = json.loads(failed.stdout)
    assert error["ok"] is False and "not NAME/VERSION" in error["error"]["message"], failed.output


def test_every_activation_setting_has_a_statement() -> None:
    """A new variable in hook/activation.py reaches the module without a change here, or fails loudly."""
    for toolkit in (True, False):
        found = modulefile.Activation("8.0;9.0+PTX", "sbsa-linux", toolkit)
        names = [s.name for s in modulefile.settings(found)]
        assert names == ["CONDA_PREFIX", "PATH", *activation.settings("8.0", "sbsa-linux", toolkit)], names


def test_help_shows_examples() -> None:
    done = CliRunner().invoke(main, ["module", "--help"])
    assert done.exit_code == 0 and "module use /shared/modulefiles && module load train/2026.12" in done.output, (
        done.output
    )


LUA = shutil.which("lua5.3") or shutil.which("lua")


@pytest.mark.skipif(LUA is None, reason="no lua interpreter (lua5.3 comes with Debian's lmod package)")
@settings(max_examples=20, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=30), min_size=1, max_size=20))
def test_lua_literals_read_back_exactly(texts: list[str]) -> None:
    """Any text (every character but lone surrogates, which are refused before quoting) reads back byte for byte."""
    # each literal as Lua holds it, its bytes in hex, one line each
    hexed = 'io.write((({}):gsub(".", function(c) return string.format("%02x", c:byte()) end)), "\\n")\n'
    program = "".join(hexed.replace("{}", lua.string(t)) for t in texts)
    done = subprocess.run([LUA or "lua", "-e", program], capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == [t.encode().hex() for t in texts], program


def test_n_name_finds_the_environment_as_conda_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = hooked(tmp_path)  # tmp_path/env
    monkeypatch.setenv("CONDA_ENVS_DIRS", str(tmp_path))
    done = cli("train/1", "-n", "env", "--out", str(tmp_path / "m"), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["prefix"] == str(prefix), done.output
    both = cli("train/1", "-n", "env", "-p", str(prefix), "--out", str(tmp_path / "m"))
    assert both.exit_code == 2 and "exclude each other" in both.output, both.output


@needs_lmod
def test_a_variable_set_empty_before_load_is_unset_after_unload(tmp_path: Path) -> None:
    """Lmod keeps no empty values: where deactivate.d gives back CUDA_HOME='' (set, empty), unload leaves it
    unset. Pinned here so that the difference stays known (the module's docstring says so)."""
    prefix = hooked(tmp_path / "p")
    out = tmp_path / "modules"
    written("train/1", "-p", str(prefix), "--out", str(out))
    before = {"PATH": "/usr/bin:/bin", "CUDA_HOME": "", "TORCH_CUDA_ARCH_LIST": ""}
    seen = load_unload(tmp_path, out, "train/1", before)
    assert seen["loaded"]["CUDA_HOME"] == str(prefix) and seen["loaded"]["TORCH_CUDA_ARCH_LIST"] == "8.0+PTX", seen
    assert "CUDA_HOME" not in seen["unloaded"] and "TORCH_CUDA_ARCH_LIST" not in seen["unloaded"], seen["unloaded"]


def test_a_missing_prefix_is_named(tmp_path: Path) -> None:
    missing = cli("train/1", "-p", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m"))
    assert missing.exit_code == 2 and "does not exist" in missing.output, missing.output
    assert f"envsolver install conda-lock.yml -p {tmp_path / 'nowhere'}" in missing.output, missing.output
    assert not (tmp_path / "m").exists(), "a refused request still wrote a module"


def test_the_hash_line_is_a_lua_comment(tmp_path: Path) -> None:
    """files.write(comment='--'): the stamp is `-- envsolver-sha256:` (a `#` line is no Lua), and a hand edit
    shows against it as it does in the `#` files."""
    prefix = hooked(tmp_path)
    written("train/1", "-p", str(prefix), "--out", str(tmp_path / "m"))
    text = (tmp_path / "m" / "train" / "1.lua").read_text()
    assert text.splitlines()[2].startswith("-- envsolver-sha256: ") and "\n#" not in text, text
    assert not files.edited_by_hand(text, "--"), "the file as written reads as edited by hand"
    assert files.edited_by_hand(text.replace("cuda", "cpu"), "--"), "an edit does not show against the hash line"
    assert files.edited_by_hand(text), "as a `#` file it has no hash line"


@pytest.mark.parametrize("toolkit", [True, False], ids=["toolkit", "no-toolkit"])
def test_an_aarch64_prefix_gets_its_own_include_target(tmp_path: Path, toolkit: bool) -> None:
    """The target is the one the activation script was written with (sbsa-linux on linux-aarch64), not this host's;
    without the toolkit neither CUDA_HOME nor CPATH is set, as activation leaves them."""
    prefix = tmp_path / "gh200"
    activation.write(prefix, "9.0", "sbsa-linux", toolkit=toolkit)
    done = cli("train/gh200", "-p", str(prefix), "--out", str(tmp_path / "m"), "--json")
    assert done.exit_code == 0, done.output
    settings = {s["name"]: s["value"] for s in json.loads(done.output)["settings"]}
    if toolkit:
        assert settings["CPATH"] == f"{prefix}/targets/sbsa-linux/include", settings
        assert settings["CUDA_HOME"] == str(prefix), settings
    else:
        assert "CPATH" not in settings and "CUDA_HOME" not in settings, settings
    assert settings["TORCH_CUDA_ARCH_LIST"] == "9.0", settings


def test_the_other_activate_d_scripts_are_named_not_run(tmp_path: Path) -> None:
    """conda packages' own activate.d scripts (the compilers') are not run by the module: the output says so, by
    name, the first 20 and how many more; an unprintable name is shown spelled out."""
    prefix = hooked(tmp_path)
    scripts = prefix / modulefile.ACTIVATE.parent
    for i in range(22):
        (scripts / f"activate-gcc_{i:02d}.sh").write_text("export CC=gcc\n")
    (scripts / "a\x1b[2J.sh").write_text("")  # sorts first
    done = written("train/1", "-p", str(prefix), "--out", str(tmp_path / "m"), "--json")
    shown = json.loads(done.output)["not_run"]
    assert shown[:2] == [ascii("a\x1b[2J.sh"), "activate-gcc_00.sh"] and shown[-1] == "and 3 more", shown
    text = (tmp_path / "m" / "train" / "1.lua").read_text()
    assert "activate-gcc_18.sh" in text and "activate-gcc_19.sh" not in text and "\x1b" not in text, text
    plain = written("train/1", "-p", str(prefix), "--out", str(tmp_path / "m"))
    assert "does not run the prefix's other activate.d scripts" in plain.output, plain.output
