#!/bin/bash
# envsolver cl-nccl, call 2: a real mixed-NCCL job (rank 1 loads the system's libnccl) on nvidia-h200-x2.
set -u
C=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
exec > >(tee $OUT/run2.log) 2>&1
date -u
export PYTHONPATH=$C/src PYTHONUNBUFFERED=1
cd /tmp
T=/opt/torch/.venv/lib/python3.12/site-packages/torch/lib
for f in $T/libtorch_cuda.so $T/libtorch_cuda_linalg.so $T/libc10_cuda.so; do echo "== $f"; readelf -d $f 2>&1 | grep -iE 'rpath|runpath|nccl'; done
ls -la /usr/lib/x86_64-linux-gnu/libnccl*
timeout 400 python3 $C/src/bench/bench_nccl.py --all-reduce-perf /bin/true --out $OUT/mixed --mixed-nccl /usr/lib/x86_64-linux-gnu/libnccl.so.2 --mixed-only
echo "bench exit $?"
python3 - <<'PY'
import json, os
for how in ("preload", "ld-library-path"):
    p = os.path.join(os.environ["OUT"], "mixed", f"mixed-{how}.json")
    if not os.path.exists(p): print(how, "missing"); continue
    d = json.load(open(p))
    print("==", d["case"], "ok:", d["ok"])
    for r in d["ranks"]: print("  rank", r["rank"], r["stage"], r["nccl_version"], r["nccl_library"])
    for c in d["checks"]: print("  ", c["status"], c["id"], c["detail"][:300], "| fix:", c["fix"][:300])
PY
date -u
