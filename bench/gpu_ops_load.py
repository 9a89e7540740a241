"""Build and load of DeepSpeed's ops: DeepSpeed's JIT (baseline) against the hook's registered ops (GPU machine).

Run from the repository root with a python whose torch has CUDA, DeepSpeed importable from VENV (a venv made with
--system-site-packages, so that .pth files in its site-packages run, as in a conda prefix):
    VENV/bin/python bench/gpu_ops_load.py OUTDIR [--arch 9.0] [--reps 3]

1. baseline build: DeepSpeed's own JIT of fused_adam, cpu_adam, fused_lamb side by side (op_runner.py jit);
2. the hook's build: op_runner.py install (DeepSpeed's flags less -g, named as DS_BUILD_OPS names them), side by
   side, then the registration (envsolver.hook.register.write into the venv's site-packages);
3. in fresh processes, alternating: `import torch, deepspeed`, then constructing FusedAdam, DeepSpeedCPUAdam and
   FusedLamb, timed, once through DeepSpeed's JIT path (baseline's extensions dir, no registry) and once through the
   registered ops (an empty extensions dir, which must stay empty: nothing was compiled);
4. a numeric check of the registered ops: 5 steps of FusedAdam (GPU) and DeepSpeedCPUAdam (CPU) against
   torch.optim.AdamW.
Writes OUTDIR/ops-load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envsolver.hook import register  # noqa: E402

OPS = ("fused_adam", "cpu_adam", "fused_lamb")
RUNNER = ROOT / "envsolver" / "hook" / "op_runner.py"

CONSTRUCT = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, deepspeed
t1 = time.perf_counter()
from deepspeed.ops.adam import FusedAdam, DeepSpeedCPUAdam
from deepspeed.ops.lamb import FusedLamb
t2 = time.perf_counter()
row = {"import_torch_deepspeed": round(t1 - t0, 3), "import_optimizers": round(t2 - t1, 3)}
for name, cls, device in (("fused_adam", FusedAdam, "cuda"), ("cpu_adam", DeepSpeedCPUAdam, "cpu"),
                          ("fused_lamb", FusedLamb, "cuda")):
    p = [torch.nn.Parameter(torch.zeros(1024, device=device))]
    if device == "cuda":
        torch.cuda.synchronize()
    s = time.perf_counter()
    cls(p)
    row[name] = round(time.perf_counter() - s, 4)
from deepspeed.git_version_info import installed_ops
row["installed"] = sorted(k for k, v in installed_ops.items() if v)
print(json.dumps(row))
"""

CHECK = r"""
import json, torch
from deepspeed.ops.adam import FusedAdam, DeepSpeedCPUAdam
out = {}
for name, cls, device in (("fused_adam", FusedAdam, "cuda"), ("cpu_adam", DeepSpeedCPUAdam, "cpu")):
    torch.manual_seed(0)
    params = [torch.randn(1024, 257, device=device), torch.randn(4099, device=device)]
    ours = [p.clone().requires_grad_(True) for p in params]
    ref = [p.clone().requires_grad_(True) for p in params]
    opt = cls(ours, lr=1e-3, weight_decay=0.01, adamw_mode=True) if name == "cpu_adam" else cls(ours, lr=1e-3, weight_decay=0.01, adam_w_mode=True)
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.01)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(ours, grads): p.grad = g.clone()
        for p, g in zip(ref, grads): p.grad = g.clone()
        opt.step(); ref_opt.step()
    out[name] = max((a - b).abs().max().item() for a, b in zip(ours, ref))
print(json.dumps(out))
"""


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def last_json(text: str) -> dict[str, object]:
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {"error": text[-2000:]}


def build_all(mode: str, env: dict[str, str]) -> dict[str, object]:
    def one(op: str) -> dict[str, object]:
        code, out, secs = run([sys.executable, str(RUNNER), mode, op], env)
        return {**last_json(out), "rc": code, "process": round(secs, 2)}

    started = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        rows = list(pool.map(one, OPS))
    return {"ops": rows, "wall": round(time.perf_counter() - started, 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--arch", default="9.0")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    site = Path(sysconfig.get_paths()["purelib"])
    work = Path("/tmp/ops-load")
    shutil.rmtree(work, ignore_errors=True)
    base = {**os.environ, "TORCH_CUDA_ARCH_LIST": args.arch, "MAX_JOBS": "5"}
    jit_env = {**base, "TORCH_EXTENSIONS_DIR": str(work / "ext-jit")}
    inst_env = {**base, "TORCH_EXTENSIONS_DIR": str(work / "ext-install")}
    empty = work / "ext-empty"
    empty.mkdir(parents=True)
    reg_env = {**base, "TORCH_EXTENSIONS_DIR": str(empty)}
    doc: dict[str, object] = {"site": str(site)}

    def save() -> None:
        (out / "ops-load.json").write_text(json.dumps(doc, indent=1))

    register.write(site, [], register.Built("0", "0", {}))  # start unregistered
    doc["build_jit"] = build_all("jit", jit_env)
    save()
    doc["build_install"] = build_all("install", inst_env)
    save()
    rows = doc["build_install"]["ops"]  # type: ignore[index]
    first = rows[0]
    built = register.Built(str(first["deepspeed"]), str(first["torch"]), dict(first["torch_info"]))
    entries = [register.Registered(str(r["op"]), str(r["module"]), Path(str(r["file"]))) for r in rows]
    jit_rows, reg_rows = [], []
    for _ in range(args.reps):
        register.write(site, [], built)
        code, text, secs = run([sys.executable, "-c", CONSTRUCT], jit_env)
        jit_rows.append({**last_json(text), "rc": code, "process": round(secs, 2)})
        register.write(site, entries, built)
        code, text, secs = run([sys.executable, "-c", CONSTRUCT], reg_env)
        reg_rows.append({**last_json(text), "rc": code, "process": round(secs, 2)})
    doc["construct_jit"], doc["construct_registered"] = jit_rows, reg_rows
    doc["empty_ext_after_registered"] = sorted(str(p.relative_to(empty)) for p in empty.rglob("*"))
    summary = {}
    for key, rows_ in (("jit", jit_rows), ("registered", reg_rows)):
        summary[key] = {
            name: statistics.median(float(r[name]) for r in rows_ if name in r)
            for name in ("import_torch_deepspeed", *OPS)
            if any(name in r for r in rows_)
        }
    doc["median"] = summary
    code, text, _ = run([sys.executable, "-c", CHECK], reg_env)
    doc["check_registered"] = {**last_json(text), "rc": code}
    save()
    print(
        json.dumps(
            {
                "median": summary,
                "check": doc["check_registered"],
                "builds": [doc["build_jit"]["wall"], doc["build_install"]["wall"]],
            }
        )
    )  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
