#!/usr/bin/env bash
# The GPU machine run for the post-install hook (see bench/README.md). Run from the repository root on a
# machine whose python3 has a CUDA torch and whose /usr/local/cuda has nvcc, with wheels in .whl/:
#   bash bench/gpu_hook_run.sh OUTDIR
# 1. DeepSpeed's own JIT for FusedAdam, CPUAdam, FusedLamb in sequence, arch 9.0 (the baseline);
# 2. envsolver hook for arch 9.0, then for the guides' list 7.0;7.5;8.0;8.6;8.9;9.0 (corrected, not fatal).
set -u
OUT=${1:?usage: bash bench/gpu_hook_run.sh OUTDIR}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
PY=$(command -v python3)
JOBS=$(nproc)
now() { "$PY" -c 'import time; print(time.time())'; }
since() { "$PY" -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 2))" "$1"; }
{ date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nvcc --version | tail -2;
  g++ --version | head -1; nproc; "$PY" -c "import torch, deepspeed; print(torch.__version__, torch.version.cuda, deepspeed.__version__)"; } > "$OUT/machine.txt" 2>&1

# 1. Baseline: DeepSpeed's JIT, one op per fresh process, in sequence, fresh extensions dir.
if [ -z "${SKIP_BASELINE:-}" ]; then
export TORCH_EXTENSIONS_DIR=/tmp/baseline_ext
rm -rf "$TORCH_EXTENSIONS_DIR"
start=$(now)
for op in fused_adam cpu_adam fused_lamb; do
  TORCH_CUDA_ARCH_LIST=9.0 "$PY" envsolver/hook/op_runner.py build $op >> "$OUT/baseline.jsonl" 2>> "$OUT/baseline.log"
done
echo "{\"baseline_total_seconds\": $(since "$start")}" >> "$OUT/baseline.jsonl"
for op in fused_adam cpu_adam fused_lamb; do
  TORCH_CUDA_ARCH_LIST=9.0 "$PY" envsolver/hook/op_runner.py load $op >> "$OUT/baseline-load.jsonl" 2>> "$OUT/baseline.log"
done
unset TORCH_EXTENSIONS_DIR
fi

# 2. The hook, arch 9.0 then the guides' list, each into a fresh prefix.
for case in ${CASES:-"9.0" "7.0;7.5;8.0;8.6;8.9;9.0"}; do
  name=$(echo "$case" | tr ';' '_')
  prefix=/tmp/env_$name
  rm -rf "$prefix"; mkdir -p "$prefix"
  start=$(now)
  "$PY" -m envsolver hook -p "$prefix" --python "$PY" --arch-list "$case" --jobs "$JOBS" --json \
    > "$OUT/hook-$name.json" 2> "$OUT/hook-$name.log"
  echo "rc=$? wall=$(since "$start")" >> "$OUT/hook-$name.log"
  # Re-running with nothing changed must not rebuild.
  start=$(now)
  "$PY" -m envsolver hook -p "$prefix" --python "$PY" --arch-list "$case" --jobs "$JOBS" --json \
    > "$OUT/hook-$name-rerun.json" 2>> "$OUT/hook-$name.log"
  echo "rerun rc=$? wall=$(since "$start")" >> "$OUT/hook-$name.log"
done
"$PY" -m pytest -q -m gpu tests/test_detect.py > "$OUT/pytest-gpu.txt" 2>&1 || true
ls -la "$OUT"
