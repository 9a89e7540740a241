"""The hook's ops: keyed, taken from the shared op cache (trusted entries only: opcache.py) or built, copied into
the prefix, registered with DeepSpeed, proven (a fresh build through DeepSpeed's load(); a trusted entry was proven
so when it was stored, and is not loaded again), and recorded, so that a re-run with nothing changed is decided
without starting torch.

In the prefix: lib/envsolver-ops/<key>/<module>.so (one directory per op key) and lib/envsolver-ops/state.json
(the requested and built arch lists, each op's key, library and SHA-256). The registry that DeepSpeed's load()
reads is in site-packages (register.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from envsolver.core import atomic, boundedread, pystart
from envsolver.core.procrun import Runner
from envsolver.hook import opcache, opkey, register
from envsolver.hook.build import RUNNER, OpResult, _json_line, list_sass
from envsolver.resolve.toolchain import compiler_line
from envsolver.verify import probe

OPS_DIR = Path("lib") / "envsolver-ops"
STATE = "state.json"
CPU_OPS = opkey.CPU_OPS


@dataclass(frozen=True)
class Library:
    op: str
    key: str | None
    module: str
    file: Path  # in the prefix
    sha256: str


@dataclass(frozen=True)
class State:
    requested: str
    arch_list: str
    platform: str
    libraries: tuple[Library, ...]
    meta: Mapping[str, object] = field(default_factory=dict)  # deepspeed, torch, torch_info
    toolkit: bool = False  # the prefix held the CUDA toolkit (the activation set CUDA_HOME and CPATH)


def read_key_facts(python: Path, env: Mapping[str, str], runner: Runner) -> opkey.KeyFacts | None:
    """op_runner.py key in the env's python (no torch import), or None when it cannot run."""
    code, out = runner(pystart.command(python, str(RUNNER), "key"), env)
    doc = _json_line(out)
    return opkey.KeyFacts(doc) if code == 0 and doc.get("ok") is not False else None


def prebuilt(facts: opkey.KeyFacts | None) -> set[str]:
    """The ops DeepSpeed was installed with (its own installed_ops), as op_runner.py key read them."""
    listed = facts.facts.get("deepspeed_installed_ops") if facts else None
    return {str(op) for op in listed} if isinstance(listed, list) else set()


def cached_arch_list(
    facts: opkey.KeyFacts,
    ops: Sequence[str],
    requested: str,
    platform: str,
    cache: Path,
    trusted: frozenset[int] = frozenset(),
) -> str | None:
    """When every op has a trusted entry in the cache for this request, the arch list they were built for (the
    same for all); else None. `trusted`: uids trusted besides root and this user (--op-cache-trust)."""
    built: set[str] = set()
    for op in ops:
        key = opkey.op_key(facts, op, requested, platform)
        entry = opcache.lookup(cache, key, trusted) if key is not None else None
        if not isinstance(entry, opcache.Entry) or not isinstance(entry.meta.get("arch_list"), str):
            return None
        built.add(str(entry.meta["arch_list"]))
    return built.pop() if len(built) == 1 else None


def cuda_home(env: Mapping[str, str]) -> Path:
    """The toolkit torch's cpp_extension uses in `env` (verify/probe.find_cuda_home, the one rule); /usr/local/cuda
    when there is none."""
    return Path(probe.find_cuda_home(env)["path"] or "/usr/local/cuda")


def state_path(prefix: Path) -> Path:
    return prefix / OPS_DIR / STATE


MAX_STATE_BYTES = 1 << 20  # the state lists a few ops; a few kB


def load_state(prefix: Path) -> State | None:
    try:
        doc = json.loads(boundedread.read_regular(state_path(prefix), MAX_STATE_BYTES))  # a FIFO: refused at once
        libraries = tuple(
            Library(str(d["op"]), d.get("key"), str(d["module"]), Path(str(d["file"])), str(d["sha256"]))
            for d in doc["libraries"]
        )
        return State(
            str(doc["requested"]),
            str(doc["arch_list"]),
            str(doc["platform"]),
            libraries,
            doc["meta"],
            doc["toolkit"] is True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_state(prefix: Path, state: State) -> None:
    doc = {
        "requested": state.requested,
        "arch_list": state.arch_list,
        "platform": state.platform,
        "meta": dict(state.meta),
        "toolkit": state.toolkit,
        "libraries": [
            {"op": lib.op, "key": lib.key, "module": lib.module, "file": str(lib.file), "sha256": lib.sha256}
            for lib in sorted(state.libraries, key=lambda lib: lib.op)
        ],
    }
    atomic.replace(state_path(prefix), (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def site_in_prefix(prefix: Path, facts: opkey.KeyFacts) -> Path | None:
    """The env's site-packages when it lies inside the prefix (nothing is written outside it), else None."""
    site = facts.facts.get("site")
    if not isinstance(site, str) or not site:
        return None
    resolved = Path(site).resolve()
    return resolved if resolved.is_relative_to(prefix.resolve()) else None


def unchanged(
    prefix: Path, state: State | None, facts: opkey.KeyFacts | None, ops: Sequence[str], requested: str, platform: str
) -> bool:
    """Nothing to do: the same request, every op's key unchanged (so the same DeepSpeed, torch, nvcc, compiler and
    arch list), every library in place with its SHA-256, and the registry as it was written."""
    if state is None or facts is None or state.requested != requested or state.platform != platform:
        return False
    libraries = {lib.op: lib for lib in state.libraries}
    if not set(ops) <= set(libraries):
        return False
    for op in ops:
        lib = libraries[op]
        key = opkey.op_key(facts, op, state.requested, platform)
        if key is None or key != lib.key:
            return False
        try:
            if opcache.sha256_file(lib.file) != lib.sha256:
                return False
        except OSError:
            return False
    site = site_in_prefix(prefix, facts)
    if site is None:
        return False
    expected = register.registry(_registered(state.libraries), _built(state.meta))
    return register.in_place(site) and register.read(site) == expected


def _registered(libraries: Iterable[Library]) -> list[register.Registered]:
    return [register.Registered(lib.op, lib.module, lib.file) for lib in libraries]


def _register(site: Path, libraries: Iterable[Library], meta: Mapping[str, object]) -> None:
    register.write(site, _registered(libraries), _built(meta))


def _built(meta: Mapping[str, object]) -> register.Built:
    info = meta.get("torch_info")
    return register.Built(
        str(meta.get("deepspeed")),
        str(meta.get("torch")),
        info if isinstance(info, dict) else {},
        str(meta.get("accelerator") or "cuda"),
    )


@dataclass
class Provided:
    results: list[OpResult]
    state: State | None
    registered: bool
    notes: list[str]
    gpu_check: dict[str, object] | None = None  # FusedAdam against torch's AdamW, in the proof's process


def _build(
    python: Path, ops: Sequence[str], env: Mapping[str, str], jobs: int, progress: Callable[[str], None], runner: Runner
) -> dict[str, dict[str, object]]:
    """op_runner.py install for each op, side by side (MAX_JOBS shared out). Returns each op's document."""
    per_op = max(1, jobs // max(1, len(ops)))
    build_env = {**env, "MAX_JOBS": str(per_op)}

    def one(op: str) -> tuple[str, dict[str, object]]:
        progress(f"building {op}")
        code, out = runner(pystart.command(python, str(RUNNER), "install", op), build_env)
        doc = _json_line(out)
        if code != 0 or not doc.get("ok"):
            detail = str(doc.get("trace", "")) + "\n" + str(doc.get("error", "")) + "\n" + out
            doc = {"ok": False, "error": compiler_line(detail)}
        elif not (isinstance(doc.get("file"), str) and isinstance(doc.get("module"), str)):
            doc = {"ok": False, "error": f"the build reported no library or module: {out.strip()[-300:]}"}
        if not doc.get("ok") and env.get("TORCH_EXTENSIONS_DIR"):
            # Leave no half-built op behind, nor torch's build lock (a killed build leaves it, and the next build
            # would wait on it for ever). DeepSpeed names every op's module {op}_op (its absolute_name()).
            shutil.rmtree(Path(env["TORCH_EXTENSIONS_DIR"]) / f"{op}_op", ignore_errors=True)
        progress(f"{op}: {'built' if doc.get('ok') else 'failed'}")
        return op, doc

    with ThreadPoolExecutor(max_workers=max(1, min(len(ops), jobs))) as pool:
        return dict(pool.map(one, ops))


def provide(
    prefix: Path,
    python: Path,
    ops: Sequence[str],
    requested: str,
    arch_list: str,
    platform: str,
    facts: opkey.KeyFacts | None,
    env: Mapping[str, str],
    jobs: int,
    cache: Path | None,
    cuda_home: Path,
    archs: tuple[int, ...],
    progress: Callable[[str], None],
    runner: Runner,
    toolkit: bool = False,
    build_runner: Runner | None = None,
    gpu_check: bool = False,
    trusted: frozenset[int] = frozenset(),
) -> Provided:
    """The ops for the prefix. `runner` runs probes and proofs; `build_runner` (default: runner) the builds;
    `trusted`: the uids whose op cache and entries are used besides root and this user (--op-cache-trust)."""
    notes: list[str] = []
    keys = {op: (opkey.op_key(facts, op, requested, platform) if facts else None) for op in ops}
    if facts is None or facts.missing:
        notes.append("no op key (the key facts are incomplete): built without the shared op cache")
    # 1. the cache: a directory and entries only trusted users could have written
    hits: dict[str, opcache.Entry] = {}
    refused = opcache.refusal(cache, trusted) if cache is not None and ops else None
    if refused is not None:
        notes.append(f"{refused}; every op is built instead, and none is stored there")
        cache = None
    if cache is not None:
        for op in ops:
            key = keys[op]
            found = opcache.lookup(cache, key, trusted) if key is not None else None
            if isinstance(found, opcache.Entry) and found.op == op:
                hits[op] = found
                notes.append(opcache.taken(found, trusted))
            elif isinstance(found, opcache.Refused):
                notes.append(f"{found.line}; {op} is built instead")
        if hits:
            progress(f"from the op cache: {', '.join(sorted(hits))}")
    # 2. the rest is built
    todo = [op for op in ops if op not in hits]
    built = _build(python, todo, env, jobs, progress, build_runner or runner) if todo else {}
    # 3. into the prefix
    libraries: dict[str, Library] = {}
    results: dict[str, OpResult] = {}
    meta: dict[str, object] = {}
    fresh: dict[str, opcache.Entry] = {}
    for op in ops:
        key = keys[op]
        if op in hits:
            entry, source = hits[op], "cache"
        else:
            doc = built[op]
            if not doc.get("ok"):
                results[op] = OpResult(op, False, None, None, str(doc.get("error") or "build failed"))
                continue
            source_file = Path(str(doc["file"]))
            entry = opcache.Entry(
                key or "",
                op,
                str(doc["module"]),
                source_file,
                opcache.sha256_file(source_file),
                {
                    **{k: doc[k] for k in ("deepspeed", "torch", "torch_info", "accelerator") if k in doc},
                    "arch_list": arch_list,
                },
            )
            fresh[op], source = entry, "built"
        meta = meta or dict(entry.meta)
        name = entry.module.rsplit(".", 1)[1] + ".so"
        destination = prefix / OPS_DIR / (key or f"unkeyed-{op}") / name
        opcache.install(entry, destination)
        libraries[op] = Library(op, key, entry.module, destination, entry.sha256)
        seconds = built.get(op, {}).get("seconds")
        results[op] = OpResult(
            op,
            True,
            float(seconds) if isinstance(seconds, (int, float)) else None,
            str(destination),
            None,
            sass=_recorded_sass(entry) if source == "cache" else None,
            source=source,
        )
    # 4. registered with DeepSpeed, then proven through DeepSpeed's own load()
    site = site_in_prefix(prefix, facts) if facts else None
    registered = bool(libraries) and site is not None
    check: dict[str, object] | None = None
    if site is None:
        notes.append("the env's site-packages is not inside the prefix: ops are not registered with DeepSpeed")
    if registered and site is not None:
        _register(site, libraries.values(), meta)
        if fresh:
            progress("proving the ops (cuobjdump, DeepSpeed's load() in a new process)")
            results, check = _prove(results, libraries, python, cuda_home, archs, env, runner, gpu_check)
        else:
            # Every op came from an entry that only a trusted user could have written (each note above names
            # its writer), proven (SASS for every arch, DeepSpeed's load()) when it was stored under this same
            # key, and copied here against its SHA-256: nothing is loaded again. What is left to prove is that
            # the registry reads back as written.
            results = _registry_read_back(site, results, libraries, meta)
            notes.append(
                "the ops came from the op cache entries named above (each proven through DeepSpeed's load() when "
                "it was stored) and were copied with their SHA-256; they were not loaded again"
            )
        bad = [op for op, r in results.items() if op in libraries and not r.ok]
        for op in bad:
            del libraries[op]
        if bad:
            _register(site, libraries.values(), meta)
    # 5. proven fresh builds go to the cache, with the SASS the proof listed
    if cache is not None:
        for op, entry in fresh.items():
            if op in libraries and entry.key:
                sass = results[op].sass
                stored = {**entry.meta, "sass": list(sass) if sass is not None else None}
                try:
                    opcache.store(cache, entry.key, op, entry.module, entry.library, stored, trusted)
                except OSError as exc:
                    notes.append(f"could not store {op} in the op cache {cache}: {exc.strerror or exc}")
    kept = tuple(sorted(libraries.values(), key=lambda lib: lib.op))
    state = State(requested, arch_list, platform, kept, meta, toolkit) if registered else None
    if state is not None:
        save_state(prefix, state)
        _remove_stale(prefix, {lib.file.parent for lib in libraries.values()})
    check_doc = check if registered and gpu_check and "fused_adam" in libraries else None
    return Provided([results[op] for op in ops], state, registered, notes, check_doc)


def _prove(
    results: dict[str, OpResult],
    libraries: Mapping[str, Library],
    python: Path,
    cuda_home: Path,
    archs: tuple[int, ...],
    env: Mapping[str, str],
    runner: Runner,
    gpu_check: bool = False,
) -> tuple[dict[str, OpResult], dict[str, object] | None]:
    """SASS for every target arch (cuobjdump, CUDA ops) and DeepSpeed's load() importing the prefix's library;
    with gpu_check, FusedAdam's steps against torch's AdamW in the same process (one torch start for both)."""
    flags = ["--adam-check"] if gpu_check and "fused_adam" in libraries else []
    _, out = runner(pystart.command(python, str(RUNNER), "registered", *flags, *libraries), env)
    doc = _json_line(out)
    check = doc.get("adam_check")
    rows = doc.get("ops")
    loaded = {str(row.get("op")): row for row in (rows if isinstance(rows, list) else []) if isinstance(row, dict)}
    proven = dict(results)
    for op, lib in libraries.items():
        result = results[op]
        sass = None if op in CPU_OPS else list_sass(lib.file, cuda_home, env, runner)
        missing = tuple(a for a in archs if sass is not None and a not in sass)
        row = loaded.get(op, {})
        error = None
        if not row.get("ok"):
            error = str(row.get("error") or f"DeepSpeed's load() did not run: {out.strip()[-300:]}")
        elif Path(str(row.get("file"))).resolve() != lib.file.resolve():
            error = f"DeepSpeed loaded {row.get('file')}, not the registered {lib.file}"
        elif missing:
            error = f"no SASS for sm_{', sm_'.join(map(str, missing))} in {lib.file}"
        load = row.get("load_seconds")
        proven[op] = OpResult(
            op,
            error is None,
            result.seconds,
            result.file,
            error,
            sass,
            missing,
            float(load) if isinstance(load, (int, float)) else None,
            source=result.source,
        )
    return proven, check if isinstance(check, dict) else None


def _recorded_sass(entry: opcache.Entry) -> tuple[int, ...] | None:
    """The SASS the proof listed when the entry was stored (None for a CPU op, or an entry without it)."""
    sass = entry.meta.get("sass")
    if isinstance(sass, list) and all(isinstance(a, int) and not isinstance(a, bool) for a in sass):
        return tuple(sass)
    return None


def _registry_read_back(
    site: Path, results: dict[str, OpResult], libraries: Mapping[str, Library], meta: Mapping[str, object]
) -> dict[str, OpResult]:
    """Each op fails when the registry in `site` does not read back as written (what the .pth finder will read)."""
    expected = register.registry(_registered(libraries.values()), _built(meta))
    if register.in_place(site) and register.read(site) == expected:
        return results
    error = f"the registry in {site} does not read back as it was written"
    return {op: dataclasses.replace(r, ok=False, error=error) if op in libraries else r for op, r in results.items()}


def _remove_stale(prefix: Path, keep: set[Path]) -> None:
    base = prefix / OPS_DIR
    for child in base.iterdir():
        if child.is_dir() and child not in keep:
            shutil.rmtree(child, ignore_errors=True)
