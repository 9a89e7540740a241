#!/bin/bash
# The NCCL bench as it was run on nvidia-h200-x2 (tests/data/nccl/README.md): envsolver verify --nccl against
# NVIDIA/nccl-tests' all_reduce_perf on the same GPUs and the same libnccl, twice each, alternating; the launcher with
# an injected fault; and, where the machine has a second libnccl, a real mixed-NCCL job.
#
# Usage, on a GPU node, from the checkout (envsolver importable from it):
#   bench/bench_nccl.sh OUT_DIR ALL_REDUCE_PERF_OR_NCCL_TESTS_SOURCE [SECOND_LIBNCCL]
# The second argument is an all_reduce_perf binary, or an NVIDIA/nccl-tests source tree to build (nvcc, sm_90,
# against the headers of the nvidia-nccl wheel torch loads). NVLink multicast stays off (bench_nccl.py sets
# NCCL_NVLS_ENABLE=0 and the others where unset and refuses to run with it on).
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
tests=$2
second=${3:-}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$(command -v python3)}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nccl_lib=$("$py" -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))')
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
if [ -d "$tests" ]; then
  home=$(mktemp -d)
  mkdir -p "$home/lib"
  ln -sf "$nccl_lib/libnccl.so.2" "$home/lib/libnccl.so"
  ln -sfn "$(dirname "$nccl_lib")/include" "$home/include"
  make -C "$tests/src" -j"$(nproc)" BUILDDIR="$out/nccl-tests-build" NCCL_HOME="$home" CUDA_HOME="$cuda_home" \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" "$out/nccl-tests-build/all_reduce_perf"
  tests=$out/nccl-tests-build/all_reduce_perf
fi
cd "$out"
"$py" "$here/bench/bench_nccl.py" --all-reduce-perf "$tests" --nccl-lib "$nccl_lib" --out "$out" --repeat 2 \
  --extra-lib "$cuda_home/lib64" --extra-lib "$cuda_home/lib" ${second:+--mixed-nccl "$second"}
