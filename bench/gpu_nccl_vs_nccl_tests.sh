#!/bin/bash
# `envsolver verify --nccl` against NVIDIA/nccl-tests' all_reduce_perf on this machine's GPUs (issue 21: busbw
# >= 0.9x all_reduce_perf from 16 MiB up). One call, from the checkout root, on a GPU node with python3 + a CUDA
# torch (its nvidia-nccl wheel gives libnccl.so.2 and nccl.h), nvcc and no network:
#
#   bash bench/gpu_nccl_vs_nccl_tests.sh [OUT_DIR]        (default: $OUT, else bench/out/gpu-nccl)
#
# Builds all_reduce_perf from bench/vendor/nccl-tests-a0b82b2.tar.gz (NVIDIA/nccl-tests at a0b82b2, `git archive`;
# MPI=0, NCCL_HOME = the wheel's include/ and libnccl.so.2, sm_XY of the GPUs) into bench/out/ (kept: a second
# call on a warm machine skips the build), runs `all_reduce_perf -b 16M -e 1G -f 2 -g N` and `python3 -m envsolver
# verify --nccl --gpus N --sizes 16M,...,1G --json` alternately (--repeat 2), then the multi-node launch path
# (two "nodes" of one GPU each, not judged), and prints the busbw tables side by side with the ratio per size:
# OUT_DIR/compare.txt and compare.json, with every raw output beside them. Exit 0 pass, 1 a size below 0.9x,
# 2 a step could not run. Environment: PYTHON (default python3), GPUS (default 2), REPEAT (default 2).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$here/bench/out/gpu-nccl}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-$(command -v python3)}
cd "$here"
{
  date -u
  hostname
  echo "python: $py"
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|LD_LIBRARY_PATH|CUDA_HOME|CUDA_VISIBLE)' | sort
  nvidia-smi -L 2>&1 | head -16
} > "$out/facts.txt" 2>&1
cat "$out/facts.txt"
# envsolver runs from this checkout (python -m envsolver, cwd = the checkout); its CLI needs these.
if ! "$py" -c 'import torch, click, rich, yaml, packaging' > "$out/imports.txt" 2>&1; then
  echo "stopped: $py lacks a module envsolver's CLI or the check needs:"
  cat "$out/imports.txt"
  exit 2
fi
# 570 s: under a 600 s call, with room to print; a second call reuses the build.
timeout 570 "$py" "$here/bench/gpu_nccl_vs_nccl_tests.py" --out "$out" --python "$py" --gpus "${GPUS:-2}" \
  --repeat "${REPEAT:-2}" > "$out/result.txt" 2> "$out/run.log"
code=$?
tail -n 30 "$out/run.log"
cat "$out/result.txt"
if [ "$code" = 124 ]; then
  echo "stopped: the bench passed 570 s (see $out/run.log); call it again: the build is kept in bench/out/"
fi
exit "$code"
