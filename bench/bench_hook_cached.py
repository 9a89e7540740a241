#!/usr/bin/env python3
"""Benchmark: `envsolver hook` of an environment whose ops all come from the op cache, this tree against an older
one, whole fresh processes, alternating, in one run (issue 20: trusted entries are not loaded again).

    git archive 6841528 envsolver | tar -x -C /tmp/old-envsolver
    python bench/bench_hook_cached.py --baseline-src /tmp/old-envsolver [--repeat 7] [--out result.json]

Needs no GPU and no DeepSpeed: the environment is a venv (its site-packages inside the prefix, as a conda env's
is) that sees this python's torch through a .pth, with a stand-in `deepspeed` package (version files, op sources
for the key) and real op libraries compiled here with cc: C extensions named as DeepSpeed's modules for
fused_adam, cpu_adam and fused_lamb (PyInit_fused_adam_op...). The op cache is filled once through opcache.store,
under the keys the hook computes (the same facts, read by `op_runner.py key` in the env's python). Each round
resets the environment's ops (lib/envsolver-ops and the three registry files, as a new environment has none) and
runs `python -m envsolver hook -p ENV --arch-list 9.0 --ops ... --op-cache DIR --json`, with PYTHONPATH set to
each tree in turn; one untimed round of each first (the compiled KB, bytecode). The timer is time.perf_counter
around subprocess.run of the whole process. The older tree proves cached ops by importing each from the registry
in a new process after `import torch` (op_runner.py registered --direct); this tree does not load them.
Reported: medians, minimums, the ratio of the medians, and `import torch` alone in the env's python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envsolver.core.procrun import run  # noqa: E402
from envsolver.hook import buildenv, opcache, opkey, ops  # noqa: E402
from envsolver.hook import run as hook_run  # noqa: E402
from envsolver.kb import default_kb  # noqa: E402
from tests.oplibs import compile_op  # noqa: E402

OPS = {
    "fused_adam": "deepspeed.ops.adam.fused_adam_op",
    "cpu_adam": "deepspeed.ops.adam.cpu_adam_op",
    "fused_lamb": "deepspeed.ops.lamb.fused_lamb_op",
}
ARCH = "9.0"
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def site_of(py: Path) -> Path:
    return Path(subprocess.check_output([str(py), "-c", PURELIB], text=True).strip())


def make_env(prefix: Path) -> Path:
    """A venv at `prefix` that sees this python's site-packages (torch), with a stand-in DeepSpeed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    py = prefix / "bin" / "python"
    site = site_of(py)
    here = sysconfig.get_paths()["purelib"]
    (site / "_bench_torch.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    ds = site / "deepspeed"
    for part in ("ops/csrc/adam", "ops/op_builder"):
        (ds / part).mkdir(parents=True)
    (ds / "__init__.py").write_text("import torch\n__version__ = '0.19.8'\n")
    (ds / "version.txt").write_text("0.19.8\n")
    (ds / "git_version_info_installed.py").write_text("version='0.19.8'\ninstalled_ops={}\n")
    (ds / "ops" / "csrc" / "adam" / "multi_tensor_adam.cu").write_text("// stand-in op source\n")
    (ds / "ops" / "op_builder" / "__init__.py").write_text("# stand-in builders\n")
    return py


def fill_cache(cache: Path, prefix: Path, py: Path, work: Path) -> list[str]:
    """Store a compiled library for every op under the key the hook computes for `prefix`. Returns the keys."""
    kb = default_kb()
    where = hook_run.arch_list_and_platform(prefix, None, ARCH, kb)
    toolkit = hook_run.toolkit_in(prefix, py, where, kb, os.environ)
    env = buildenv.environ_for_build(prefix, where.arch_list, where.target, os.environ, toolkit)
    facts = ops.read_key_facts(py, env, run)
    if facts is None or facts.missing:
        raise SystemExit(f"the key facts are incomplete: {facts and facts.missing}")
    torch_version = subprocess.check_output([str(py), "-c", "import torch; print(torch.__version__)"], text=True)
    meta = {
        "deepspeed": "0.19.8",
        "torch": torch_version.strip(),
        "torch_info": {
            "version": ".".join(torch_version.split(".")[:2]),
            "bf16_support": False,
            "cuda_version": "0.0",
            "nccl_version": "0.0",
            "hip_version": "0.0",
        },
        "accelerator": "cpu",
        "arch_list": where.arch_list,
    }
    keys = []
    for op, module in OPS.items():
        key = opkey.op_key(facts, op, where.arch_list, where.platform)
        assert key is not None
        library = compile_op(work / op, module.rsplit(".", 1)[1])
        opcache.store(cache, key, op, module, library, meta)
        keys.append(key)
    return keys


def reset(prefix: Path, site: Path) -> None:
    shutil.rmtree(prefix / "lib" / "envsolver-ops", ignore_errors=True)
    for suffix in ("pth", "json", "py"):
        (site / f"envsolver_ds_ops.{suffix}").unlink(missing_ok=True)


def hook(tree: Path, prefix: Path, cache: Path) -> tuple[float, dict[str, object], str]:
    """One hook from `tree`, with a compiled-KB cache of its own (a user's, warmed by the first round)."""
    argv = [
        sys.executable,
        "-m",
        "envsolver",
        "hook",
        "-p",
        str(prefix),
        "--arch-list",
        ARCH,
        "--ops",
        ",".join(OPS),
        "--op-cache",
        str(cache),
        "--json",
    ]
    kb_cache = prefix.parent / f"kb-cache-{tree.name}"
    env = {**os.environ, "PYTHONPATH": str(tree), "ENVSOLVER_CACHE_DIR": str(kb_cache)}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=prefix.parent, check=False)
    seconds = time.perf_counter() - started
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"hook from {tree} printed no JSON (exit {done.returncode}): {done.stderr[-2000:]}") from None
    if done.returncode != 0 or not doc.get("ok") or {o["source"] for o in doc["ops"]} != {"cache"}:
        raise SystemExit(f"hook from {tree} did not take every op from the cache: {json.dumps(doc)[:3000]}")
    return seconds, doc, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", type=Path, required=True, help="an older tree (git archive REV envsolver)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = {"baseline": args.baseline_src.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory(prefix="bench-hook-cached-") as tmp:
        work = Path(tmp)
        for tree in trees.values():  # run from `work`: a `-c` or `-m` process puts its cwd first on sys.path
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "envsolver")], check=True)
            where = [sys.executable, "-c", "import envsolver; print(envsolver.__file__)"]
            which = subprocess.check_output(where, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=work, text=True)
            if not which.startswith(str(tree)):
                raise SystemExit(f"PYTHONPATH={tree} imports envsolver from {which}")
        prefix = work / "env"
        py = make_env(prefix)
        site = site_of(py)
        cache = work / "op-cache"
        fill_cache(cache, prefix, py, work / "build")
        times: dict[str, list[float]] = {name: [] for name in trees}
        notes: dict[str, list[str]] = {}
        for round_ in range(args.repeat + 1):
            for name, tree in trees.items():
                reset(prefix, site)
                seconds, doc, _ = hook(tree, prefix, cache)
                notes[name] = [str(n) for n in doc.get("notes", [])]  # type: ignore[union-attr]
                if round_ > 0:  # the first round warms the compiled KB and the bytecode
                    times[name].append(seconds)
        torch_times = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([str(py), "-c", "import torch"], check=True, capture_output=True)
            torch_times.append(time.perf_counter() - started)
    result = {
        "machine": {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load": os.getloadavg(),
        },
        "repeat": args.repeat,
        "seconds": {n: [round(t, 3) for t in ts] for n, ts in times.items()},
        "median": {n: round(statistics.median(ts), 3) for n, ts in times.items()},
        "min": {n: round(min(ts), 3) for n, ts in times.items()},
        "ratio_of_medians": round(statistics.median(times["baseline"]) / statistics.median(times["this"]), 2),
        "import_torch_alone": [round(t, 3) for t in torch_times],
        "notes": notes,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
