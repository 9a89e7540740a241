"""Runs inside the TARGET environment's python (not envsolver's): build, load or test one DeepSpeed op.

Standard library plus torch and deepspeed only; prints one JSON line. Usage:
    python op_runner.py build OP        # JIT-build OP for TORCH_CUDA_ARCH_LIST into TORCH_EXTENSIONS_DIR
                                        # (an op DeepSpeed was installed with, e.g. conda-forge's, is loaded)
    python op_runner.py jit OP          # JIT-build OP even when DeepSpeed has it prebuilt
    python op_runner.py load OP         # time OP's load() after `import torch` (a prebuilt op loads at once)
    python op_runner.py adam-check      # 5 FusedAdam steps against torch.optim.AdamW on the GPU
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any

BUILDERS = {
    "fused_adam": "FusedAdamBuilder",
    "cpu_adam": "CPUAdamBuilder",
    "fused_lamb": "FusedLambBuilder",
    "fused_lion": "FusedLionBuilder",
    "cpu_lion": "CPULionBuilder",
    "cpu_adagrad": "CPUAdagradBuilder",
    "quantizer": "QuantizerBuilder",
    "transformer_inference": "InferenceBuilder",
}


def builder(op: str) -> Any:
    import deepspeed.ops.op_builder as op_builder  # type: ignore[import-not-found]

    return getattr(op_builder, BUILDERS[op])()


def build(op: str, jit: bool = False) -> dict[str, Any]:
    """Build (or, for an op DeepSpeed was installed with, load) OP. With jit, always JIT-build it."""
    from deepspeed.git_version_info import installed_ops  # type: ignore[import-not-found]

    op_builder = builder(op)
    prebuilt = bool(installed_ops.get(op)) and not jit
    started = time.perf_counter()
    module = op_builder.jit_load(verbose=False) if jit else op_builder.load(verbose=False)
    return {
        "op": op,
        "seconds": time.perf_counter() - started,
        "file": getattr(module, "__file__", None),
        "prebuilt": prebuilt,
    }


def load(op: str) -> dict[str, Any]:
    """Time only the load() call: torch and DeepSpeed's op_builder are imported before the clock starts."""
    import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

    op_builder = builder(op)
    started = time.perf_counter()
    module = op_builder.load(verbose=False)
    return {"op": op, "load_seconds": time.perf_counter() - started, "file": getattr(module, "__file__", None)}


def adam_check() -> dict[str, Any]:
    import torch
    from deepspeed.ops.adam import FusedAdam  # type: ignore[import-not-found]

    torch.manual_seed(0)
    params = [torch.randn(1024, 257, device="cuda"), torch.randn(4099, device="cuda")]
    ours = [p.clone().requires_grad_(True) for p in params]
    ref = [p.clone().requires_grad_(True) for p in params]
    opt = FusedAdam(ours, lr=1e-3, weight_decay=0.01, adam_w_mode=True)
    ref_opt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.01)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(ours, grads):
            p.grad = g.clone()
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        opt.step()
        ref_opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(ours, ref))
    return {
        "check": "fused_adam_vs_adamw",
        "steps": 5,
        "max_abs_diff": diff,
        "ok": diff <= 1e-5,
        "device": torch.cuda.get_device_name(0),
    }


def main(argv: list[str]) -> int:
    try:
        if argv[0] == "build":
            result = build(argv[1])
        elif argv[0] == "jit":
            result = build(argv[1], jit=True)
        elif argv[0] == "load":
            result = load(argv[1])
        elif argv[0] == "adam-check":
            result = adam_check()
        else:
            raise SystemExit(f"unknown mode {argv[0]!r}")
        result["ok"] = result.get("ok", True)
    except Exception as exc:  # report, never crash without JSON
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:]}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
