"""The hook's ops stage (envsolver/hook/ops.py): keys, the shared op cache, the prefix's libraries, registration,
the proof through DeepSpeed's load(), and the no-op decision from recorded state.

The env's python is answered by a stand-in runner that speaks op_runner.py's protocol (key, install, registered)
and writes real library files; what DeepSpeed's load() would import is read back from the real registry that
register.write put in the prefix's site-packages. The real DeepSpeed runs on the GPU machine
(bench/gpu_hook_ops.sh).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from envsolver.core import pystart
from envsolver.hook import opcache, opkey, ops, register
from tests import oplibs

MODULES = {
    "fused_adam": "deepspeed.ops.adam.fused_adam_op",
    "cpu_adam": "deepspeed.ops.adam.cpu_adam_op",
    "fused_lamb": "deepspeed.ops.lamb.fused_lamb_op",
}
META = {
    "deepspeed": "0.19.8",
    "torch": "2.11.0+cu130",
    "torch_info": {
        "version": "2.11",
        "bf16_support": False,
        "cuda_version": "13.0",
        "nccl_version": "0.0",
        "hip_version": "0.0",
    },
}


class FakePython:
    """op_runner.py in the env's python, answered here. Records every command."""

    def __init__(self, prefix: Path, ext: Path, fail: tuple[str, ...] = (), nvcc: str = "release 13.0") -> None:
        self.prefix, self.ext, self.fail, self.nvcc = prefix, ext, fail, nvcc
        self.site = prefix / "lib" / "python3.12" / "site-packages"
        self.site.mkdir(parents=True, exist_ok=True)
        self.calls: list[list[str]] = []
        self.loaded_from: dict[str, str] = {}  # op -> a file DeepSpeed should claim to load instead

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
        if not argv[0].endswith("cuobjdump"):  # the env's python: isolated (core/pystart), the flag left out here
            assert argv[1:2] == list(pystart.FLAGS), f"op_runner.py started without -I: {argv}"
            argv = [argv[0], *argv[2:]]
        self.calls.append(argv)
        if argv[0].endswith("cuobjdump"):
            return 0, f"ELF file    1: {Path(argv[-1]).stem}.1.sm_90.cubin\n"
        mode = argv[2]
        if mode == "key":
            facts = {
                "python": "3.12.3",
                "ext_suffix": ".cpython-312-x86_64-linux-gnu.so",
                "site": str(self.site),
                "torch_version_py": "__version__ = '2.11.0+cu130'",
                "deepspeed_info": "version='0.19.8'",
                "deepspeed_tree": "d" * 64,
                "nvcc": self.nvcc,
                "cxx": "g++ 13.3.0",
                "cpu": {"flags": "avx2"},
            }
            return 0, json.dumps(facts)
        if mode == "install":
            op = argv[3]
            if op in self.fail:
                return 1, "csrc/adam/x.cu:1:10: fatal error: cusparse.h: No such file or directory\n" + json.dumps(
                    {"ok": False, "error": "RuntimeError: Error building extension"}
                )
            name = MODULES[op].rsplit(".", 1)[1]
            lib = self.ext / name / f"{name}.so"
            lib.parent.mkdir(parents=True, exist_ok=True)
            lib.write_bytes(f"library of {op} for {self.nvcc}".encode() * 100)
            return 0, json.dumps(
                {"op": op, "ok": True, "seconds": 30.5, "file": str(lib), "module": MODULES[op], **META}
            )
        if mode == "registered":
            doc = register.read(self.site) or {"ops": {}}
            rows = []
            for op in [a for a in argv[3:] if not a.startswith("--")]:
                entry = doc["ops"].get(op)
                file = self.loaded_from.get(op) or (entry["file"] if entry else f"/jit/{op}.so")
                rows.append({"op": op, "ok": True, "file": file, "load_seconds": 0.002})
            return 0, json.dumps({"ops": rows})
        raise AssertionError(f"unexpected command {argv}")

    def modes(self) -> list[str]:
        return [" ".join(c[2:]) for c in self.calls if not c[0].endswith("cuobjdump")]


OPS = ("fused_adam", "cpu_adam", "fused_lamb")


def provide(
    prefix: Path, python: FakePython, cache: Path | None, arch: str = "9.0", env: dict[str, str] | None = None
) -> ops.Provided:
    facts = ops.read_key_facts(prefix / "bin" / "python", {}, python)
    cuda = python.ext.parent / "cuda"  # a toolkit whose cuobjdump the stand-in runner answers
    (cuda / "bin").mkdir(parents=True, exist_ok=True)
    (cuda / "bin" / "cuobjdump").touch()
    return ops.provide(
        prefix,
        prefix / "bin" / "python",
        OPS,
        arch,
        arch,
        "linux-64",
        facts,
        env or {},
        16,
        cache,
        cuda,
        (90,),
        lambda _: None,
        python,
    )


@pytest.fixture
def env_a(tmp_path: Path) -> tuple[Path, FakePython]:
    prefix = tmp_path / "env-a"
    return prefix, FakePython(prefix, tmp_path / "ext-a")


def test_a_cold_run_builds_registers_proves_and_fills_the_cache(tmp_path: Path, env_a: tuple[Path, FakePython]) -> None:
    prefix, python = env_a
    got = provide(prefix, python, tmp_path / "cache")
    assert [(r.op, r.ok, r.source) for r in got.results] == [(op, True, "built") for op in OPS]
    assert sorted(python.modes()) == sorted(
        ["key", *(f"install {op}" for op in OPS), "registered fused_adam cpu_adam fused_lamb"]
    )
    doc = register.read(python.site)
    assert doc is not None and sorted(doc["ops"]) == sorted(OPS)
    for result in got.results:
        assert Path(str(result.file)).is_relative_to(prefix / "lib" / "envsolver-ops")
        assert doc["ops"][result.op]["file"] == result.file
    assert [r.sass for r in got.results] == [(90,), None, (90,)]  # cpu_adam has no GPU code to list
    assert len([p for p in (tmp_path / "cache").iterdir()]) == 3
    assert got.registered and got.notes == []


def test_a_second_env_with_the_same_key_takes_the_cache_and_builds_nothing(
    tmp_path: Path, env_a: tuple[Path, FakePython]
) -> None:
    cache = tmp_path / "cache"
    provide(*env_a, cache)
    prefix_b = tmp_path / "env-b"
    python_b = FakePython(prefix_b, tmp_path / "ext-b")
    got = provide(prefix_b, python_b, cache)
    assert [(r.op, r.ok, r.source) for r in got.results] == [(op, True, "cache") for op in OPS]
    assert not any(m.startswith("install") for m in python_b.modes())
    assert all(Path(str(r.file)).is_relative_to(prefix_b) for r in got.results)
    # every entry trusted (written by this user, immutable): copied with its SHA-256, no process loads it again
    assert python_b.modes() == ["key"], python_b.calls
    me = f"uid {os.geteuid()} ({pwd.getpwuid(os.geteuid()).pw_name}), you"
    assert got.notes == [
        *(
            f"{r.op}: taken from op cache entry {cache / Path(str(r.file)).parent.name}, written by {me}"
            for r in got.results
        ),
        "the ops came from the op cache entries named above (each proven through DeepSpeed's load() when it was "
        "stored) and were copied with their SHA-256; they were not loaded again",
    ], got.notes
    doc = register.read(python_b.site)
    assert doc is not None and {op: e["file"] for op, e in doc["ops"].items()} == {r.op: r.file for r in got.results}


def test_a_partly_cached_run_proves_every_op_through_deepspeed(tmp_path: Path, env_a: tuple[Path, FakePython]) -> None:
    provide(*env_a, tmp_path / "cache")
    entries = sorted((tmp_path / "cache").iterdir())
    lamb = [e for e in entries if "fused_lamb" in (e / "manifest.json").read_text()]
    assert len(lamb) == 1
    os.chmod(lamb[0], 0o755)  # entries are 0555
    shutil.rmtree(lamb[0])
    python_b = FakePython(tmp_path / "env-b", tmp_path / "ext-b")
    got = provide(tmp_path / "env-b", python_b, tmp_path / "cache")
    assert [(r.op, r.source) for r in got.results] == [
        ("fused_adam", "cache"),
        ("cpu_adam", "cache"),
        ("fused_lamb", "built"),
    ]
    assert python_b.modes()[-1] == "registered fused_adam cpu_adam fused_lamb"
    taken = [n.split(":")[0] for n in got.notes if n.split(":")[0] in OPS and ": taken from op cache entry " in n]
    assert taken == ["fused_adam", "cpu_adam"] and len(got.notes) == 2, got.notes  # each taken entry, its writer


LOAD_ALL = """
import ctypes, sys
for path in sys.argv[1:]:
    try:
        ctypes.CDLL(path)  # dlopen, as DeepSpeed's import of a registered op does first: constructors run
    except OSError:
        pass  # the stand-in builds are no ELF files
"""


def test_a_group_members_rewritten_entry_is_built_instead_and_its_code_never_runs(
    tmp_path: Path,
) -> None:
    """Issue 20, finding 1, end to end: env A's hook fills a group's cache under the group umask; a member of the
    group (uid 65534, a forked child) puts a library with a constructor in place of fused_adam's and fixes the
    manifest's SHA-256. Env B's hook refuses that entry with one line, builds fused_adam instead and takes the
    others from the cache; loading every library env B registered (what DeepSpeed does) runs no foreign code."""
    with oplibs.shared_dir() as base:
        cache = oplibs.group_cache(base)
        old = os.umask(0o002)
        try:
            provide(tmp_path / "env-a", FakePython(tmp_path / "env-a", tmp_path / "ext-a"), cache)
        finally:
            os.umask(old)
        (entry,) = [e for e in cache.iterdir() if "fused_adam_op" in (e / "manifest.json").read_text()]
        canary = base / "canary"
        evil = oplibs.compile_op(tmp_path / "evil", canary=canary).read_bytes()
        code, said = oplibs.as_user(oplibs.ATTACKER, oplibs.attack(entry, evil))
        assert code == 0 and said in ("rewritten", "replaced"), f"the attack did not take place: {said}"
        python_b = FakePython(tmp_path / "env-b", tmp_path / "ext-b")
        got = provide(tmp_path / "env-b", python_b, cache)
        doc = register.read(python_b.site)
        assert doc is not None
        done = subprocess.run(
            [sys.executable, "-S", "-c", LOAD_ALL, *(e["file"] for e in doc["ops"].values())],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert not canary.exists(), f"foreign code ran: {canary.read_text()} (hook notes: {got.notes})"
        assert [(r.op, r.ok, r.source) for r in got.results] == [
            ("fused_adam", True, "built"),
            ("cpu_adam", True, "cache"),
            ("fused_lamb", True, "cache"),
        ], got.notes
        refusals = [n for n in got.notes if n.startswith(f"op cache entry {entry}: ")]
        assert len(refusals) == 1 and "uid 65534 (nobody)" in refusals[0], got.notes
        assert refusals[0].endswith("fused_adam is built instead"), refusals
        assert "install fused_adam" in python_b.modes() and "install cpu_adam" not in python_b.modes()


def _squat(cache: Path, canary: Path, work: Path, shared: Path, facts: object) -> None:
    """The audit's squatter, uid 65534: makes `cache` first, then stores for every op, under the key the victim's
    hook will look up, a real library whose ELF constructor appends to `canary`, each with a manifest that matches
    its bytes (opcache.store writes it). The libraries are compiled in `work` and handed over in `shared`."""
    libraries = {}
    for op in OPS:
        name = MODULES[op].rsplit(".", 1)[1]
        libraries[op] = shared / f"{name}.so"
        libraries[op].write_bytes(oplibs.compile_op(work, name, canary=canary).read_bytes())
        os.chmod(libraries[op], 0o644)

    def squat() -> str:
        cache.mkdir()
        for op, library in libraries.items():
            key = opkey.op_key(facts, op, "9.0", "linux-64")  # type: ignore[arg-type]
            assert key is not None
            meta = {**META, "arch_list": "9.0", "sass": [90]}
            opcache.store(cache, key, op, MODULES[op], library, meta)
        return "stored"

    code, said = oplibs.as_user(oplibs.ATTACKER, squat)
    assert code == 0 and said == "stored", f"the squat did not take place: {said}"


def _load_all(site: Path) -> None:
    doc = register.read(site)
    assert doc is not None, f"nothing registered in {site}"
    done = subprocess.run(
        [sys.executable, "-S", "-c", LOAD_ALL, *(e["file"] for e in doc["ops"].values())],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("where", ["tmp", "sticky-scratch"])
def test_a_cache_another_user_made_first_under_a_sticky_tmp_is_refused_until_trusted(
    tmp_path: Path, where: str
) -> None:
    """Issue 32, finding 2, end to end: uid 65534 makes /tmp/NAME first (or NAME in a /scratch laid out as /tmp),
    fills it with an entry for every op whose manifest matches a library with an ELF constructor. The victim's hook
    refuses the cache in one note naming uid 65534 and --op-cache-trust nobody, builds every op and stores none
    there; loading every library it registered runs no foreign code. With --op-cache-trust nobody the ops are
    taken from it, and a note per op names uid 65534 as the writer."""
    with oplibs.shared_dir() as shared, oplibs.sticky_parent(where) as parent:
        cache = parent / f"envsolver-ops-{os.urandom(4).hex()}"
        canary = shared / "canary"
        os.chmod(shared, 0o777)  # the constructor, run by whoever loads the library, may write the canary there
        python_a = FakePython(tmp_path / "env-a", tmp_path / "ext-a")
        facts = ops.read_key_facts(tmp_path / "env-a" / "bin" / "python", {}, python_a)
        try:
            _squat(cache, canary, tmp_path / "evil", shared, facts)
            squatted = sorted(p.name for p in cache.iterdir())
            got = provide(tmp_path / "env-a", python_a, cache)
            _load_all(python_a.site)
            assert not canary.exists(), f"foreign code ran: {canary.read_text()} (hook notes: {got.notes})"
            assert [(r.op, r.ok, r.source) for r in got.results] == [(op, True, "built") for op in OPS], got.notes
            assert len(got.notes) == 1, got.notes
            note = got.notes[0]
            assert note.startswith(f"op cache {cache}: refused: the cache directory belongs to uid 65534 (nobody)"), (
                note
            )
            assert "pass --op-cache-trust nobody to use it" in note and note.endswith("none is stored there"), note
            assert sorted(p.name for p in cache.iterdir()) == squatted, "the hook stored into the refused cache"
            python_b = FakePython(tmp_path / "env-b", tmp_path / "ext-b")
            trusted = ops.provide(
                tmp_path / "env-b", tmp_path / "env-b" / "bin" / "python", OPS, "9.0", "9.0", "linux-64",
                ops.read_key_facts(tmp_path / "env-b" / "bin" / "python", {}, python_b), {}, 16, cache,
                tmp_path / "cuda", (90,), lambda _: None, python_b, trusted=frozenset({oplibs.ATTACKER}),
            )  # fmt: skip
            assert [(r.op, r.source) for r in trusted.results] == [(op, "cache") for op in OPS], trusted.notes
            writer = "written by uid 65534 (nobody), trusted with --op-cache-trust nobody"
            named = [n for n in trusted.notes if n.endswith(writer)]
            assert [n.split(":")[0] for n in named] == list(OPS), trusted.notes
            assert not canary.exists(), "the hook loaded a cached entry (it copies and registers them only)"
            _load_all(python_b.site)  # what DeepSpeed does next: the squatter's code is live, as the audit found
            assert canary.exists(), "the squatter's constructor did not run when its library was loaded"
        finally:
            oplibs.remove(cache)


def test_another_nvcc_is_another_key_and_is_built(tmp_path: Path, env_a: tuple[Path, FakePython]) -> None:
    provide(*env_a, tmp_path / "cache")
    prefix_b = tmp_path / "env-b"
    python_b = FakePython(prefix_b, tmp_path / "ext-b", nvcc="release 13.1")
    got = provide(prefix_b, python_b, tmp_path / "cache")
    assert [r.source for r in got.results] == ["built"] * 3
    assert len(list((tmp_path / "cache").iterdir())) == 6


def test_a_rerun_with_nothing_changed_is_decided_from_the_state(tmp_path: Path, env_a: tuple[Path, FakePython]) -> None:
    prefix, python = env_a
    got = provide(prefix, python, None)
    state = ops.load_state(prefix)
    assert state == got.state
    facts = ops.read_key_facts(prefix / "bin" / "python", {}, python)
    assert ops.unchanged(prefix, state, facts, OPS, "9.0", "linux-64")
    assert not ops.unchanged(prefix, state, facts, OPS, "8.0;9.0", "linux-64")  # another request
    assert not ops.unchanged(prefix, state, facts, (*OPS, "fused_lion"), "9.0", "linux-64")  # an op not built
    other = FakePython(prefix, tmp_path / "ext-x", nvcc="release 13.1")
    assert not ops.unchanged(prefix, state, ops.read_key_facts(prefix, {}, other), OPS, "9.0", "linux-64")


@pytest.mark.parametrize("damage", ["library", "registry", "state", "pth", "module"])
def test_a_rerun_after_damage_is_not_a_no_op(tmp_path: Path, env_a: tuple[Path, FakePython], damage: str) -> None:
    prefix, python = env_a
    got = provide(prefix, python, None)
    if damage == "library":
        Path(str(got.results[0].file)).write_bytes(b"edited")
    elif damage == "registry":
        (python.site / "envsolver_ds_ops.json").unlink()
    elif damage == "pth":
        (python.site / "envsolver_ds_ops.pth").unlink()
    elif damage == "module":
        (python.site / "envsolver_ds_ops.py").write_text("# an older envsolver's module\n")
    else:
        ops.state_path(prefix).write_text("{")
    facts = ops.read_key_facts(prefix / "bin" / "python", {}, python)
    assert not ops.unchanged(prefix, ops.load_state(prefix), facts, OPS, "9.0", "linux-64")


def test_a_failed_build_is_reported_with_the_compilers_line_and_the_rest_registered(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    python = FakePython(prefix, tmp_path / "ext", fail=("fused_lamb",))
    got = provide(prefix, python, tmp_path / "cache")
    lamb = got.results[2]
    assert not lamb.ok and lamb.error == "csrc/adam/x.cu:1:10: fatal error: cusparse.h: No such file or directory"
    doc = register.read(python.site)
    assert doc is not None and sorted(doc["ops"]) == ["cpu_adam", "fused_adam"]
    assert len(list((tmp_path / "cache").iterdir())) == 2  # only proven builds are cached


def test_a_failed_build_leaves_no_half_built_op_nor_torchs_build_lock(tmp_path: Path) -> None:
    """A killed build leaves torch's `lock` in the op's build directory, and the next build would wait on it for
    ever: a failed build's directory is removed."""
    prefix = tmp_path / "env"
    python = FakePython(prefix, tmp_path / "ext", fail=("fused_lamb",))
    ext = tmp_path / "torch_extensions"
    (ext / "fused_lamb_op").mkdir(parents=True)
    (ext / "fused_lamb_op" / "lock").touch()
    (ext / "fused_adam_op").mkdir()
    provide(prefix, python, None, env={"TORCH_EXTENSIONS_DIR": str(ext)})
    assert sorted(p.name for p in ext.iterdir()) == ["fused_adam_op"]


def test_an_op_deepspeed_does_not_load_from_the_prefix_fails_and_is_unregistered(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    python = FakePython(prefix, tmp_path / "ext")
    python.loaded_from["cpu_adam"] = "/home/u/.cache/torch_extensions/cpu_adam/cpu_adam.so"
    got = provide(prefix, python, tmp_path / "cache")
    cpu = got.results[1]
    assert not cpu.ok
    assert (
        cpu.error
        == f"DeepSpeed loaded /home/u/.cache/torch_extensions/cpu_adam/cpu_adam.so, not the registered {cpu.file}"
    )
    doc = register.read(python.site)
    assert doc is not None and sorted(doc["ops"]) == ["fused_adam", "fused_lamb"]
    assert not (tmp_path / "cache").exists() or len(list((tmp_path / "cache").iterdir())) == 2


def test_a_site_packages_outside_the_prefix_is_never_written(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    prefix.mkdir()
    python = FakePython(tmp_path / "system", tmp_path / "ext")  # its site-packages is outside the prefix
    got = provide(prefix, python, None)
    assert not got.registered
    assert got.notes == ["the env's site-packages is not inside the prefix: ops are not registered with DeepSpeed"]
    assert register.read(python.site) is None
    assert ops.load_state(prefix) is None


def test_libraries_of_an_earlier_key_are_removed(tmp_path: Path, env_a: tuple[Path, FakePython]) -> None:
    prefix, python = env_a
    first = provide(prefix, python, None)
    python.nvcc = "release 13.1"
    second = provide(prefix, python, None)
    assert {Path(str(r.file)).parent for r in first.results}.isdisjoint(
        {Path(str(r.file)).parent for r in second.results}
    )
    assert sorted(p.name for p in (prefix / "lib" / "envsolver-ops").iterdir()) == sorted(
        [Path(str(r.file)).parent.name for r in second.results] + ["state.json"]
    )


def test_cached_ops_show_the_sass_they_were_proven_with_when_stored(
    tmp_path: Path, env_a: tuple[Path, FakePython]
) -> None:
    """A cached op is not loaded again: the report says where it came from and the SASS its proof listed when it
    was stored (kept in the manifest), not a load time it did not measure."""
    from rich.console import Console

    from envsolver.hook import render
    from envsolver.hook.run import HookReport

    provide(*env_a, tmp_path / "cache")
    python_b = FakePython(tmp_path / "env-b", tmp_path / "ext-b")
    got = provide(tmp_path / "env-b", python_b, tmp_path / "cache")
    assert [(r.op, r.sass, r.load_seconds) for r in got.results] == [
        ("fused_adam", (90,), None),
        ("cpu_adam", None, None),
        ("fused_lamb", (90,), None),
    ]
    report = HookReport(tmp_path / "env-b", "9.0", ops=got.results, notes=got.notes)
    console = Console(record=True, width=300)
    render.show(console, report)
    text = console.export_text()
    assert (
        "op fused_adam: from the op cache, copied with its SHA-256; SASS sm_90 and DeepSpeed's load() proven when "
        "it was stored" in text
    ), text
    assert "in a new process" not in text, text
    assert [(o["source"], o["sass"]) for o in render.as_json(report)["ops"]] == [
        ("cache", [90]),
        ("cache", None),
        ("cache", [90]),
    ]


@pytest.mark.parametrize("setting", ["nvcc on PATH", "CUDA_PATH", "CUDA_HOME over CUDA_PATH"])
def test_the_hook_its_op_runner_and_verify_find_one_toolkit(tmp_path: Path, setting: str) -> None:
    """One rule for the toolkit torch's cpp_extension uses (verify/probe.find_cuda_home): the hook's ops.cuda_home,
    op_runner.py's key (in the env's python) and verify's probe give the same directory for the same environment."""
    from envsolver.hook.build import RUNNER
    from envsolver.verify import probe

    homes = {name: tmp_path / name for name in ("onpath", "viapath", "viahome")}
    for name, home in homes.items():
        (home / "bin").mkdir(parents=True)
        nvcc = home / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'nvcc from {name}'\n")
        nvcc.chmod(0o755)
    env = {"PATH": f"{homes['onpath'] / 'bin'}:/usr/bin:/bin"}
    if setting != "nvcc on PATH":
        env["CUDA_PATH"] = str(homes["viapath"])
    if setting == "CUDA_HOME over CUDA_PATH":
        env["CUDA_HOME"] = str(homes["viahome"])
    expected = {"nvcc on PATH": "onpath", "CUDA_PATH": "viapath", "CUDA_HOME over CUDA_PATH": "viahome"}[setting]
    assert ops.cuda_home(env) == homes[expected]
    assert probe.find_cuda_home(env)["path"] == str(homes[expected])
    done = subprocess.run([sys.executable, str(RUNNER), "key"], env=env, capture_output=True, text=True, timeout=60)
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts.get("nvcc") == f"nvcc from {expected}", f"op_runner.py key: {done.stdout} {done.stderr}"
