#!/bin/bash
# envsolver cl-nccl: one device call on nvidia-h200-x2. Runs bench/bench_nccl.py (verify --nccl vs all_reduce_perf,
# alternating, twice; then two injected faults) and packs the results into $OUT.
set -u
C=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
B=/tmp/nccl-bench; mkdir -p $B
exec > >(tee $OUT/run.log) 2>&1
date -u; hostname
export PYTHONPATH=$C/src PYTHONUNBUFFERED=1
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM|LD_LIBRARY_PATH|CUDA)' | sort
PY=$(command -v python3); echo "python3: $PY"
$PY -c 'import torch,click,rich,yaml; print("torch", torch.__version__, torch.version.cuda, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version(), "click", click.__version__)'
NLIB=$($PY -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))')
echo "torch's nccl dir: $NLIB"; ls -la $NLIB
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); echo "CUDA_HOME=$CUDA_HOME"
CRT=$($PY -c 'import nvidia.cuda_runtime as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
LIBS="$CUDA_HOME/lib64:$CUDA_HOME/lib${CRT:+:$CRT}"
echo "other libnccl on the image:"; find /usr /opt -name 'libnccl.so*' 2>/dev/null | head -20
ARP=$C/all_reduce_perf
if ! LD_LIBRARY_PATH=$NLIB:$LIBS $ARP -b 8 -e 8 -g 1 -n 1 -w 0 > $B/arp-try.txt 2>&1; then
  cat $B/arp-try.txt; echo "carried all_reduce_perf does not run here: building nccl-tests"
  NH=/tmp/ncclhome; mkdir -p $NH/lib /tmp/nt; ln -sf $NLIB/libnccl.so.2 $NH/lib/libnccl.so; ln -sf $NLIB/libnccl.so.2 $NH/lib/libnccl.so.2
  ln -sfn "$(dirname $NLIB)/include" $NH/include
  tar xzf $C/nccl-tests.tgz -C /tmp/nt
  time make -C /tmp/nt/src -j32 BUILDDIR=/tmp/ntb NCCL_HOME=$NH CUDA_HOME=$CUDA_HOME NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" /tmp/ntb/all_reduce_perf > $B/build.log 2>&1 || tail -30 $B/build.log
  ARP=/tmp/ntb/all_reduce_perf
fi
head -3 $B/arp-try.txt
cd $B  # not the checkout root: its envsolver/ would shadow PYTHONPATH for python -m
timeout 420 $PY $C/src/bench/bench_nccl.py --all-reduce-perf $ARP --nccl-lib $NLIB --out $B --repeat 2 --extra-lib "$CUDA_HOME/lib64" --extra-lib "$CUDA_HOME/lib" ${CRT:+--extra-lib $CRT}
echo "bench exit $?"
cp $B/compare.md $OUT/ 2>/dev/null
cp $B/verify-nccl-1.json $OUT/ 2>/dev/null
cp $B/all_reduce_perf-1.txt $OUT/ 2>/dev/null
cp $B/fault-nccl-version.json $OUT/ 2>/dev/null
tar czf $OUT/nccl-bench.tgz -C $B .
ls -la $B
cat $B/compare.md
date -u
