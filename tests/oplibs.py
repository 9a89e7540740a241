"""Real op libraries and a real second user, for the op cache's trust tests.

`compile_op` builds a Python extension module with cc, named as DeepSpeed's module for an op (PyInit_fused_adam_op),
optionally with an ELF constructor that appends a line to a canary file whenever the library is loaded (dlopen runs
it before Python sees the module): the audit's attack. `as_user` runs a function in a forked child as another uid
(this machine's tests run as root), with one shared supplementary group, as a member of a group that shares an op
cache would be; `attack` is what such a member did to an entry in the audit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sysconfig
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ATTACKER = 65534  # nobody
GROUP = 4242  # the group that shares the cache (only a number: no /etc/group entry is needed)

SOURCE = """
#include <Python.h>
#include <stdio.h>
#include <unistd.h>
#ifdef CANARY
__attribute__((constructor)) static void canary(void) {
    FILE *f = fopen(CANARY, "a");
    if (f) { fprintf(f, "the attacker's constructor ran as uid %d\\n", (int)getuid()); fclose(f); }
}
#endif
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, NAME, "a stand-in op", -1, NULL};
PyMODINIT_FUNC INIT(void) { return PyModule_Create(&def); }
"""


def compile_op(work: Path, name: str = "fused_adam_op", canary: Path | None = None) -> Path:
    """A real shared library: the Python extension module `name`; with `canary`, a constructor that appends to it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a real library")
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"{name}.c"
    source.write_text(SOURCE)
    out = work / f"{name}{'-canary' if canary else ''}.so"
    defines = [f"-DNAME={json.dumps(name)}", f"-DINIT=PyInit_{name}"]
    if canary is not None:
        defines.append(f"-DCANARY={json.dumps(str(canary))}")
    include = sysconfig.get_paths()["include"]
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", f"-I{include}", *defines, str(source), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"cc failed: {done.stderr}"
    return out


def as_user(uid: int, function: Callable[[], str]) -> tuple[int, str]:
    """Run `function` in a forked child as `uid` with the one supplementary group GROUP. Returns the child's exit
    status (0 when `function` returned, 1 when it raised) and what it returned (or the traceback)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            os.setgroups([GROUP])
            os.setgid(GROUP)
            os.setuid(uid)
            text, code = function(), 0
        except BaseException:
            text = traceback.format_exc()
        finally:
            try:
                os.write(write_end, text.encode()[-4000:])
            finally:
                os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), said


def attack(entry: Path, library: bytes) -> Callable[[], str]:
    """The audit's attack on a stored entry, as a member of the cache's group: put `library` in place of the entry's
    library and its SHA-256 in the manifest, in place when the files are writable (what group-writable entries
    allowed), else by renaming the entry aside and putting a new one under its name (a group-writable cache allows
    that). Returns "rewritten" or "replaced"."""

    def run() -> str:
        doc = json.loads((entry / "manifest.json").read_text())
        doc["sha256"] = hashlib.sha256(library).hexdigest()
        try:
            (entry / doc["library"]).write_bytes(library)
            (entry / "manifest.json").write_text(json.dumps(doc))
            return "rewritten"
        except PermissionError:
            pass
        fake = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".attacker-"))
        (fake / doc["library"]).write_bytes(library)
        (fake / "manifest.json").write_text(json.dumps(doc))
        os.chmod(fake, 0o755)
        os.rename(entry, entry.parent / f".moved-{entry.name}")
        os.rename(fake, entry)
        return "replaced"

    return run


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("acting as another user (uid 65534) needs root")


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory that uid ATTACKER can reach (pytest's tmp_path is 0700, and so may be a checkout's parents):
    under the first of the temporary directories whose path it can walk."""
    need_root()
    for parent in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        if not os.path.isdir(parent):
            continue
        base = Path(tempfile.mkdtemp(prefix="envsolver-shared-", dir=parent))
        os.chmod(base, 0o755)
        if as_user(ATTACKER, lambda b=base: str(os.listdir(b)))[0] == 0:  # type: ignore[misc]
            break
        shutil.rmtree(base)
    else:
        pytest.skip("no temporary directory that uid 65534 can reach")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def group_cache(base: Path) -> Path:
    """A cache shared by GROUP as the issue describes it: root's, setgid, group-writable (2775)."""
    cache = base / "cache"
    cache.mkdir()
    os.chown(cache, 0, GROUP)
    os.chmod(cache, 0o2775)
    return cache


@contextmanager
def sticky_parent(where: str) -> Iterator[Path]:
    """A sticky directory anyone may write, as the audit's: "tmp", /tmp itself (skipped unless it is root's 1777);
    "sticky-scratch", a directory of root's laid out the same way (a /scratch)."""
    if where == "tmp":
        need_root()
        st = os.stat("/tmp")
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o1777:
            pytest.skip(f"/tmp is not root's and 1777 here ({oct(st.st_mode)})")
        yield Path("/tmp")
        return
    with shared_dir() as base:
        os.chmod(base, 0o1777)
        yield base


def remove(path: Path) -> None:
    """Remove a directory tree whatever its owners and modes (root may)."""
    shutil.rmtree(path, ignore_errors=True)
