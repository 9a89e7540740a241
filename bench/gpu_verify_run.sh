#!/usr/bin/env bash
# The GPU machine run for `envsolver verify` (tests/data/verify/README.md). From the repository root:
#   bash bench/gpu_verify_run.sh OUTDIR
# a. the image's python as it is (no DeepSpeed);  b. with DeepSpeed and a FusedAdam built by the hook, --gpu-test;
# c. as b with TORCH_CUDA_ARCH_LIST="7.0;9.0" (must fail torch_cuda_arch_list).
set -u
OUT=${1:?usage: bash bench/gpu_verify_run.sh OUTDIR}
mkdir -p "$OUT"
PY=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-core \
  $(ls .whl/*.whl | grep -v -e deepspeed -e hjson -e einops -e pydantic -e annotated -e typing_inspection -e msgpack -e py_cpuinfo)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-ds \
  .whl/deepspeed-*.whl .whl/hjson-*.whl .whl/einops-*.whl .whl/pydantic*.whl .whl/annotated*.whl \
  .whl/typing_inspection*.whl .whl/msgpack-*.whl .whl/py_cpuinfo-*.whl
CORE=/tmp/site-core:$PWD
DS=/tmp/site-ds:/tmp/site-core:$PWD

PYTHONPATH=$CORE "$PY" envsolver/verify/probe.py --deepspeed > "$OUT/facts-image.json" 2> "$OUT/probe-image.err"
PYTHONPATH=$CORE "$PY" -m envsolver verify --python "$PY" --json > "$OUT/verify-image.json" 2> "$OUT/verify-image.err"
echo "image rc=$?" >> "$OUT/rc.txt"

export TORCH_EXTENSIONS_DIR=/tmp/verify_ext
mkdir -p /tmp/env_verify
PYTHONPATH=$DS "$PY" -m envsolver hook -p /tmp/env_verify --python "$PY" --arch-list 9.0 --ops fused_adam --json \
  > "$OUT/hook.json" 2> "$OUT/hook.err"
echo "hook rc=$?" >> "$OUT/rc.txt"
export TORCH_EXTENSIONS_DIR=/tmp/env_verify/var/cache/torch_extensions DS_ACCELERATOR=cuda
PYTHONPATH=$DS "$PY" envsolver/verify/probe.py --deepspeed --gpu-test > "$OUT/facts-deepspeed.json" 2> "$OUT/probe-ds.err"
start=$("$PY" -c 'import time; print(time.time())')
PYTHONPATH=$DS "$PY" -m envsolver verify --python "$PY" --gpu-test --json > "$OUT/verify-deepspeed.json" 2> "$OUT/verify-ds.err"
echo "deepspeed rc=$? wall=$("$PY" -c "import sys,time; print(round(time.time()-float(sys.argv[1]),2))" "$start")" >> "$OUT/rc.txt"
TORCH_CUDA_ARCH_LIST="7.0;9.0" PYTHONPATH=$DS "$PY" envsolver/verify/probe.py --deepspeed > "$OUT/facts-archlist.json" 2> "$OUT/probe-arch.err"
TORCH_CUDA_ARCH_LIST="7.0;9.0" PYTHONPATH=$DS "$PY" -m envsolver verify --python "$PY" --json > "$OUT/verify-archlist.json" 2> "$OUT/verify-arch.err"
echo "archlist rc=$?" >> "$OUT/rc.txt"
# How long importing torch and initialising CUDA takes on its own, for comparison with verify's wall time.
start=$("$PY" -c 'import time; print(time.time())')
"$PY" -c "import torch; torch.zeros(1, device='cuda')"
echo "torch import+init wall=$("$PY" -c "import sys,time; print(round(time.time()-float(sys.argv[1]),2))" "$start")" >> "$OUT/rc.txt"
cat "$OUT/rc.txt"
