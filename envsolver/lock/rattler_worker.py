"""The child process that makes envsolver's rattler calls (solve, install, index), one request at a time: it
answers requests until one is not a solve that succeeded, then exits.

Why a child: py-rattler 0.28 (pyo3 0.29, pyo3-async-runtimes) runs each call on tokio threads through
future_into_py. The Rust side of a call outlives `asyncio.run`: after an error, or after Ctrl-C cancelled the
awaitable, it runs on and then attaches to the interpreter (Python::attach in a blocking task) to hand over
its result. When that happens while the interpreter finalizes, the process dies (`Fatal Python error:
PyGILState_Release: thread state ... must be current when releasing`, exit 134; a segfault, 139) or prints a
Rust panic ("The Python interpreter is not initialized"). This process is never finalized: it writes its answer
and leaves through os._exit, and its parent kills it on an interrupt.

Why it may serve again: each process costs a Python start and rattler's import, about 0.1 s of CPU, which a
process that solves several times (a test run, `cluster make` over several partitions) would pay per solve. After
a solve that succeeded, rattler has handed over its whole result, so the worker reads the next request (of any
op) and answers it as a fresh one would: each request gets its own Gateway, event loop and record of warnings, and
all of its input is in the request. It ends (os._exit) after any other answer: a failure (rattler's Rust side may
still be running, the reason this is a child at all), an install (in a command, its last rattler call, and
minutes long: a start is nothing beside it) or an index (tests only). The parent keeps a worker for the same
Python, working directory and environment only (envsolver/lock/worker_call.py).

Protocol: JSON requests on stdin, one a line; one JSON answer on stdout for each, one line, after which the worker
waits for the next request when the answer says "next": true, else exits 0:
  {"op": "solve", "channels": [URL], "specs": [str], "platforms": [str],
   "virtual_packages": [[name, version, build]], "cache_dir": str, "timeout_s": float,
   "locked": [[name, subdir, file_name, sha256, md5]]}
      -> {"ok": true, "records": [{name, version, build, build_number, subdir, url, md5, sha256, size,
                                   depends, constrains, noarch}], "kept": int, "warnings": [str], "next": true}
  "locked" (optional, absent: none) names the packages of an existing lock the solve prefers (rattler's
  locked_packages: each is chosen where the specs allow it, and only what the specs or another package need
  moves). rattler adds a locked record to the candidates as it is given, with its depends and constrains, so each
  is looked up in the channels (the gateway, by name, then by subdir and file name, and the same archive where
  both the lock and the channel know its sha256 or md5) and the channel's own record is passed; one the channels
  no longer hold is not kept. "kept" counts the records found.
  {"op": "install", "records": [{name, version, build, subdir, depends, sha256, md5, file_name, url,
                                 channel}], "prefix": str, "platform": str, "cache_dir": str,
   "reinstall": [str]}                                        -> {"ok": true, "warnings": [str], "next": false}
  {"op": "index", "path": str}                                -> {"ok": true, "warnings": [str], "next": false}
  any failure -> {"ok": false, "kind": "bad-request" | "channel" | "fetch" | "solver" | "error", "message": str}
SIGINT is ignored (the parent decides what an interrupt stops), and the process leaves (EXIT_ORPHANED) as soon as
its stdin closes, whether it is working on a request or waiting for one, so a parent that is killed takes it
along.

Started by path (envsolver/lock/worker_call.py) with the standard library and rattler only, so that nothing in the
working directory or the envsolver package is imported on the way.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import queue
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

OPS = ("solve", "install", "index")
# The ops after whose successful answer the worker waits for another request (the module docstring says why).
AGAIN_AFTER = frozenset({"solve"})
EXIT_ORPHANED = 3


class BadRequest(Exception):
    """The request is not one this worker understands."""


def _field(request: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = request.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BadRequest(f"{key!r} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _strings(request: dict[str, Any], key: str) -> list[str]:
    value = _field(request, key, list)
    if not all(isinstance(item, str) for item in value):
        raise BadRequest(f"{key!r} must be a list of strings")
    return list(value)


def parse_request(text: str) -> dict[str, Any]:
    """The request as a dict whose fields have the types its op needs. Raises BadRequest."""
    try:
        request = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the request is not JSON: {exc}") from None
    if not isinstance(request, dict) or request.get("op") not in OPS:
        raise BadRequest(f"the request must be an object whose 'op' is one of {', '.join(OPS)}")
    if request["op"] == "solve":
        for key in ("channels", "specs", "platforms"):
            _strings(request, key)
        _field(request, "cache_dir", str)
        _field(request, "timeout_s", (int, float))
        triples = _field(request, "virtual_packages", list)
        if not all(isinstance(t, list) and len(t) == 3 and all(isinstance(v, str) for v in t) for t in triples):
            raise BadRequest("'virtual_packages' must be a list of [name, version, build] strings")
        locked = request.setdefault("locked", [])
        if not isinstance(locked, list) or not all(
            isinstance(e, list) and len(e) == 5 and all(isinstance(v, str) for v in e) and e[0] for e in locked
        ):
            raise BadRequest("'locked' must be a list of [name, subdir, file_name, sha256, md5] strings")
    elif request["op"] == "install":
        for key in ("prefix", "platform", "cache_dir"):
            _field(request, key, str)
        _strings(request, "reinstall")
        records = _field(request, "records", list)
        keys = ("name", "version", "build", "subdir", "sha256", "md5", "file_name", "url", "channel")
        for record in records:
            if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in keys):
                raise BadRequest(f"every install record must be an object with the strings {', '.join(keys)}")
            _strings(record, "depends")
    else:
        _field(request, "path", str)
    return request


def _record_doc(rec: Any) -> dict[str, Any]:
    return {
        "name": rec.name.normalized,
        "version": str(rec.version),
        "build": str(rec.build),
        "build_number": rec.build_number,
        "subdir": rec.subdir,
        "url": rec.url,
        "md5": rec.md5.hex() if rec.md5 else "",
        "sha256": rec.sha256.hex() if rec.sha256 else "",
        "size": rec.size,
        "depends": list(rec.depends),
        "constrains": list(rec.constrains),
        "noarch": "python" if rec.noarch.python else ("generic" if rec.noarch.generic else None),
    }


async def _solve(request: dict[str, Any]) -> dict[str, Any]:
    import rattler
    from rattler.channel import ChannelPriority
    from rattler.package.build_string import BuildString

    virtual = [
        rattler.GenericVirtualPackage(rattler.PackageName(name), rattler.Version(version), BuildString(build))
        for name, version, build in request["virtual_packages"]
    ]
    channels = [rattler.Channel(url) for url in request["channels"]]
    platforms = [rattler.Subdir(p) for p in request["platforms"]]
    gateway = rattler.Gateway(cache_dir=request["cache_dir"])
    locked = await _locked(gateway, channels, platforms, request["locked"])
    solved = await rattler.solve(
        channels,
        request["specs"],
        gateway=gateway,
        platforms=platforms,
        locked_packages=locked,
        virtual_packages=virtual,
        channel_priority=ChannelPriority.Strict,
        timeout=datetime.timedelta(seconds=request["timeout_s"]),
        timestamp_policy="allow-missing",
    )
    return {"records": [_record_doc(rec) for rec in solved], "kept": len(locked)}


def _same_archive(rec: Any, sha256: str, md5: str) -> bool:
    """Whether the channel's record is the lock's archive: the same sha256 where both know it, else the same md5
    where both know that (a lock that knows neither matches by file name alone)."""
    if sha256 and rec.sha256:
        return bool(rec.sha256.hex() == sha256)
    if md5 and rec.md5:
        return bool(rec.md5.hex() == md5)
    return True


async def _locked(gateway: Any, channels: list[Any], platforms: list[Any], locked: list[list[str]]) -> list[Any]:
    """The channels' own records of the LOCKED entries ([name, subdir, file_name, sha256, md5]), the first
    channel that holds one winning (strict priority); entries no channel holds are left out."""
    if not locked:
        return []
    wanted = {(subdir, file_name): (sha256, md5) for _, subdir, file_name, sha256, md5 in locked}
    names = sorted({entry[0] for entry in locked})
    found: dict[tuple[str, str], Any] = {}
    for records in await gateway.query(channels, platforms, names, recursive=False):
        for rec in records:
            key = (rec.subdir, rec.file_name)
            if key in wanted and key not in found and _same_archive(rec, *wanted[key]):
                found[key] = rec
    return [found[key] for key in sorted(found)]


async def _install(request: dict[str, Any]) -> dict[str, Any]:
    import rattler
    from rattler.package.build_string import BuildString

    records = []
    for doc in request["records"]:
        package = rattler.PackageRecord(
            name=doc["name"],
            version=doc["version"],
            build=BuildString(doc["build"]),
            build_number=0,
            subdir=doc["subdir"],
            depends=doc["depends"],
            sha256=bytes.fromhex(doc["sha256"]) if doc["sha256"] else None,
            md5=bytes.fromhex(doc["md5"]) if doc["md5"] else None,
        )
        records.append(rattler.RepoDataRecord(package, doc["file_name"], doc["url"], doc["channel"]))
    await rattler.install(
        records,
        Path(request["prefix"]),
        cache_dir=Path(request["cache_dir"]),
        platform=rattler.Subdir(request["platform"]),
        reinstall_packages=set(request["reinstall"]) or None,
        execute_link_scripts=False,
        show_progress=False,
    )
    return {}


async def _index(request: dict[str, Any]) -> dict[str, Any]:
    from rattler.index import index_fs

    await index_fs(channel_directory=Path(request["path"]), write_zst=False, write_shards=False)
    return {}


RUN: dict[str, Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]] = {
    "solve": _solve,
    "install": _install,
    "index": _index,
}


def _kind(exc: Exception) -> str:
    from rattler.exceptions import FetchRepoDataError, GatewayError, InvalidChannelError, SolverError

    if isinstance(exc, SolverError):
        return "solver"
    if isinstance(exc, (FetchRepoDataError, GatewayError)):
        return "fetch"
    if isinstance(exc, InvalidChannelError):
        return "channel"
    return "error"


def _message(exc: Exception) -> str:
    """rattler's own errors by their text, as they read in-process; anything else with its type."""
    import rattler.exceptions

    if getattr(rattler.exceptions, type(exc).__name__, None) is type(exc) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def answer(text: str) -> dict[str, Any]:
    """Carry out one request; every outcome is an answer (rattler's own errors as kind and message). A successful
    one says whether this worker then waits for another request ("next")."""
    try:
        request = parse_request(text)
    except BadRequest as exc:
        return {"ok": False, "kind": "bad-request", "message": str(exc)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = asyncio.run(RUN[request["op"]](request))
        except Exception as exc:  # rattler raises its own types for IO, fetching, solving, extracting, linking
            return {"ok": False, "kind": _kind(exc), "message": _message(exc)}
    return {"ok": True, **result, "warnings": [str(w.message) for w in caught], "next": request["op"] in AGAIN_AFTER}


def _requests(stdin: Any) -> queue.SimpleQueue[bytes]:
    """The request lines as they come, read by a thread that ends this process (EXIT_ORPHANED) when stdin
    closes: the parent closed it or is gone, whether this process is working on a request or waiting for one. A
    line the end cut short is not a request."""
    lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def read() -> None:
        for line in stdin:
            if not line.endswith(b"\n"):
                break
            lines.put(line)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _warm() -> None:
    """Import rattler before the request is read: a worker started ahead of its request (worker_call.prestart)
    does this while its parent is still working out what to ask. An import that fails here fails again, and is
    answered, where the op imports it."""
    try:
        import rattler
        import rattler.exceptions  # noqa: F401
        from rattler.channel import ChannelPriority  # noqa: F401
        from rattler.package.build_string import BuildString  # noqa: F401
    except Exception:  # answered by the op
        return


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever else writes to stdout lands on stderr; stdout carries the answers alone
    _warm()
    requests = _requests(sys.stdin.buffer)
    while True:
        request = requests.get().decode("utf-8", "replace")
        try:
            doc = answer(request)
        except BaseException as exc:  # a bug here still answers, as an error the parent reports
            doc = {"ok": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}"}
        try:
            out.write(json.dumps(doc) + "\n")
            out.flush()
        except OSError:  # the parent is gone
            os._exit(EXIT_ORPHANED)
        if doc.get("next") is not True:
            # Never finalize: rattler's threads may still be about to attach to this interpreter.
            os._exit(0)


if __name__ == "__main__":
    main()
