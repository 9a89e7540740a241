"""One fresh process's view of DeepSpeed's optimizers (GPU machine; run by bench/gpu_hook_ops.sh):
`import torch, deepspeed`, then torch.optim.AdamW (torch's own one-time lazy imports land here, so that the
DeepSpeed optimizers after it are measured alone), then FusedAdam, DeepSpeedCPUAdam and FusedLamb, each timed.
Prints one JSON line. Which library each op came from is read back from DeepSpeed's loaded-ops table."""

import json
import time

t0 = time.perf_counter()
import torch  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam  # noqa: E402
from deepspeed.ops.lamb import FusedLamb  # noqa: E402

row = {"import_torch_deepspeed": round(time.perf_counter() - t0, 3)}
cuda = [torch.nn.Parameter(torch.zeros(1024, device="cuda"))]
cpu = [torch.nn.Parameter(torch.zeros(1024))]
torch.cuda.synchronize()
for name, make in (
    ("torch_adamw_first", lambda: torch.optim.AdamW(cpu)),
    ("fused_adam", lambda: FusedAdam(cuda)),
    ("cpu_adam", lambda: DeepSpeedCPUAdam(cpu)),
    ("fused_lamb", lambda: FusedLamb(cuda)),
):
    started = time.perf_counter()
    make()
    row[name] = round(time.perf_counter() - started, 4)
from deepspeed.ops.op_builder.builder import OpBuilder  # noqa: E402

row["libraries"] = {k: getattr(v, "__file__", None) for k, v in OpBuilder._loaded_ops.items()}
print(json.dumps(row))
