#!/usr/bin/env bash
# The DeepSpeed release matrix on the GPU machine (issue 19, item 6): the newest three releases of the matrix,
# as wheels built here from PyPI's sdists without ops (bench/ds_matrix.py --gpu-wheels DIR), each in its own
# prefix beside the image's torch. For each: `envsolver hook` builds fused_adam, cpu_adam and fused_lamb for the
# H200 (9.0), registers and proves them (cuobjdump, DeepSpeed's own load()); the probe then reads the release's
# facts; `envsolver verify --check deepspeed_ops --gpu-test` must pass (FusedAdam loads from the registry, 5 steps
# match torch's AdamW); and the sdist built on DeepSpeed's CUDA accelerator (a CUDA torch here) must declare the
# requirements the KB says (pypi_requirements with cuda_build_adds). No network: everything comes from WHEELDIR.
#
#   bash bench/gpu_ds_matrix.sh WHEELDIR OUTDIR        (from the repository root; python3 holds the CUDA torch)
#
# WHEELDIR holds SHA256SUMS, deepspeed-X-py3-none-any.whl and deepspeed-X.tar.gz for each release, and the wheels
# the image lacks (hjson, pydantic, pydantic-core, annotated-types, typing-extensions, typing-inspection,
# platformdirs). OUTDIR gets summary.txt (the table), results.json (every document) and log.txt.
# Exit 0 when every cell passed, 1 otherwise. RELEASES="0.19.8" runs fewer; SKIP_COMPILEALL=1 skips byte-compiling
# (for a dry run of the script's plumbing on a machine without a GPU, where every cell fails).
set -u
WHEELS=${1:?usage: bash bench/gpu_ds_matrix.sh WHEELDIR OUTDIR}
WHEELS=$(cd "$WHEELS" && pwd)  # absolute: the CUDA-build step runs pip from another directory
OUT=${2:?usage: bash bench/gpu_ds_matrix.sh WHEELDIR OUTDIR}
RELEASES=${RELEASES:-"0.17.6 0.18.9 0.19.8"}
mkdir -p "$OUT"
WORK=/tmp/dsm
rm -rf "$WORK" && mkdir -p "$WORK"
LOG="$OUT/log.txt"
PY=$(command -v python3)
exec 3>&1 >>"$LOG" 2>&1
say() { echo "$*" >&3; echo "== $*"; }
now() { "$PY" -c 'import time; print(time.time())'; }
since() { "$PY" -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"; }

say "checking $WHEELS/SHA256SUMS"
(cd "$WHEELS" && sha256sum -c SHA256SUMS) || { say "the wheels are not the ones built for this run"; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nvcc --version | tail -2
  g++ --version | head -1; nproc
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'; } > "$WORK/machine.txt" 2>&1
cat "$WORK/machine.txt" >&3
TORCH_SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
[ -n "${SKIP_COMPILEALL:-}" ] || "$PY" -m compileall -q -j 16 "$TORCH_SITE" > /dev/null 2>&1  # the image keeps no bytecode
# What DeepSpeed and envsolver need beyond the image's packages, in a directory of their own.
EXTRA=/tmp/dsm-extra
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$EXTRA" \
  $(ls "$WHEELS"/*.whl | grep -v '/deepspeed-') || { say "could not install the extra wheels"; exit 1; }
export PYTHONPATH=$PWD:$EXTRA
# What the hook's activation sets (a venv runs no activation scripts): DeepSpeed on CUDA, the H200's arch list
# (the image sets 9.0a, which DeepSpeed's op builder cannot parse).
export DS_ACCELERATOR=cuda TORCH_CUDA_ARCH_LIST=9.0

for V in $RELEASES; do
  say "DeepSpeed $V"
  P=/tmp/ds-$V
  rm -rf "$P" && "$PY" -m venv --without-pip "$P"
  SITE=$("$P/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # after the prefix's own: the extra wheels (first, as in envsolver's PYTHONPATH: their typing-extensions is the
  # one pydantic needs), then the image's site-packages with its .pth files
  printf "import site; site.addsitedir('%s'); site.addsitedir('%s')\n" "$EXTRA" "$TORCH_SITE" > "$SITE/_image.pth"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS/deepspeed-$V-py3-none-any.whl"
  [ -n "${SKIP_COMPILEALL:-}" ] || "$PY" -m compileall -q -j 16 "$SITE" > /dev/null 2>&1
  export TORCH_EXTENSIONS_DIR=$P/var/cache/torch_extensions
  start=$(now)
  timeout 300 "$PY" -m envsolver hook -p "$P" --arch-list 9.0 --jobs 16 --json > "$WORK/hook-$V.json"
  echo "$? $(since "$start")" > "$WORK/hook-$V.rc"
  timeout 300 "$P/bin/python" envsolver/verify/probe.py --deepspeed --no-devices > "$WORK/probe-$V.json"
  start=$(now)
  timeout 300 "$PY" -m envsolver verify -p "$P" --check deepspeed_ops --gpu-test --json > "$WORK/verify-$V.json"
  echo "$? $(since "$start")" > "$WORK/verify-$V.rc"
  # The sdist on DeepSpeed's CUDA accelerator, with this CUDA torch: the requirements it declares.
  if [ -f "$WHEELS/deepspeed-$V.tar.gz" ]; then
    mkdir -p "$WORK/cuda-wheel-$V"
    (cd "$WORK" && DS_BUILD_OPS=0 timeout 300 "$PY" -m pip wheel -q --no-index --no-deps --no-build-isolation \
      -w "$WORK/cuda-wheel-$V" "$WHEELS/deepspeed-$V.tar.gz")
  fi
done

"$PY" bench/gpu_ds_matrix_report.py "$WORK" "$OUT" $RELEASES >&3
