#!/usr/bin/env bash
# Issue 12's measurements on the GPU machine, baseline and envsolver in the same run (see bench/README.md):
#   bash bench/gpu_hook_ops.sh OUTDIR
# Run from the repository root where python3 has a CUDA torch and nvcc is on PATH, with .whl/ holding the
# DeepSpeed wheel and its missing dependencies, and .dstests/tests holding DeepSpeed's tests at the same tag.
# Three prefixes (venvs whose site-packages is inside the prefix, seeing the image's torch):
#   envJ  DeepSpeed's JIT, as users get it without envsolver (the baseline);
#   envA  `envsolver hook` cold into an empty op cache, then re-run with nothing changed;
#   envB, envC  `envsolver hook` with the op cache envA filled (other environments, the same key).
# With BASELINE_SRC=DIR (an older tree: `git archive REV envsolver | tar -x -C DIR`), envD and envE take the op
# cache too, alternating an older envsolver (which loads every cached op again in a new process) with this one:
#   hook_cached_old1, hook_cached_new1, hook_cached_old2, hook_cached_new2 (issue 20), after an untimed-in-effect
#   warm round (hook_cached_oldwarm, hook_cached_newwarm) that compiles each tree's KB into a cache of its own.
set -u
OUT=${1:?usage: bash bench/gpu_hook_ops.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=$(command -v python3)
TIMES="$OUT/times.txt"
TORCH_SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
now() { "$PY" -c 'import time; print(time.time())'; }
since() { "$PY" -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 2))" "$1"; }
make_env() {
  rm -rf "$1" && "$PY" -m venv --without-pip "$1"
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # the image's site-packages as a site dir (its own .pth files too: setuptools' distutils shim, which
  # DeepSpeed's op_builder imports on Python 3.12)
  echo "import site; site.addsitedir('$TORCH_SITE')" > "$site/_image_torch.pth"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" $(ls .whl/*.whl | grep -v platformdirs)
  "$PY" -m compileall -q -j 16 "$site" > /dev/null 2>&1
}
{ date -u; nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; nvcc --version | tail -2
  g++ --version | head -1; nproc; } > "$OUT/machine.txt" 2>&1
"$PY" -m compileall -q -j 16 "$TORCH_SITE" > /dev/null 2>&1   # the image keeps no bytecode
for e in envJ envA envB envC ${BASELINE_SRC:+envD envE}; do make_env "/tmp/$e"; done
/tmp/envJ/bin/python -c 'import torch, deepspeed; print(torch.__version__, torch.version.cuda, deepspeed.__version__)' >> "$OUT/machine.txt" 2>&1
# envsolver itself runs under the image's python, with what it lacks from .whl/ (platformdirs)
"$PY" -m pip install -q --no-index --no-deps --target /tmp/esdeps .whl/platformdirs-*.whl
export PYTHONPATH=$PWD:/tmp/esdeps TORCH_CUDA_ARCH_LIST=9.0

# SKIP_BASELINE=1, SKIP_CONSTRUCT=1, SKIP_TESTS=1 leave steps 1, 5, 6 out (a short run of the hook alone).
# 1. Baseline: DeepSpeed's JIT builds the three ops side by side (as the hook does), cold.
if [ -z "${SKIP_BASELINE:-}" ]; then
start=$(now)
for op in fused_adam cpu_adam fused_lamb; do
  TORCH_EXTENSIONS_DIR=/tmp/jit_ext MAX_JOBS=5 /tmp/envJ/bin/python envsolver/hook/op_runner.py jit $op \
    >> "$OUT/baseline-jit.jsonl" 2>> "$OUT/baseline-jit.log" &
done
wait
echo "baseline_jit_three_ops wall=$(since "$start")" >> "$TIMES"
fi

OPCACHE=/tmp/$(id -un)/opcache  # never directly in /tmp (issue 32): the hook makes it 0700, in a directory of yours
hook() {  # NAME PREFIX [extra options]
  local name=$1 prefix=$2; shift 2
  start=$(now)
  "$PY" -m envsolver hook -p "$prefix" --arch-list 9.0 --jobs 16 --op-cache "$OPCACHE" --json "$@" \
    > "$OUT/hook-$name.json" 2> "$OUT/hook-$name.log"
  echo "hook_$name rc=$? wall=$(since "$start")" >> "$TIMES"
}
# 2.-4. The hook: cold; re-run with nothing changed; another env with the same key (from the op cache).
hook cold /tmp/envA
hook rerun /tmp/envA
hook cached /tmp/envB
hook cached2 /tmp/envC
if [ -n "${BASELINE_SRC:-}" ]; then  # both from /tmp: a `-m` process puts its cwd (the repository) first on sys.path
  reset_ops() { rm -rf "$1/lib/envsolver-ops" "$1"/lib/python3*/site-packages/envsolver_ds_ops.*; }
  for round in warm 1 2; do
    for which in old new; do
      src=$PWD; [ "$which" = old ] && src=$(cd "$BASELINE_SRC" && pwd)
      env=/tmp/envD; [ "$which" = new ] && env=/tmp/envE
      reset_ops "$env"
      (cd /tmp && PYTHONPATH=$src:/tmp/esdeps ENVSOLVER_CACHE_DIR=/tmp/kbc-$which hook "cached_$which$round" "$env")
    done
  done
fi
# 4b. The cached env's ops through DeepSpeed's own API (constructing the optimizers), nothing compiled.
mkdir -p /tmp/empty_b
TORCH_EXTENSIONS_DIR=/tmp/empty_b /tmp/envB/bin/python bench/gpu_construct.py >> "$OUT/construct-cached.jsonl" 2>> "$OUT/construct.log"
echo "empty_b files after construct: $(find /tmp/empty_b -type f | wc -l)" >> "$TIMES"

# 5. Constructing the optimizers in fresh processes, alternating: DeepSpeed's JIT path against the hook's
#    registered ops (whose extensions dir must stay empty: nothing compiled).
if [ -z "${SKIP_CONSTRUCT:-}" ]; then
mkdir -p /tmp/empty_a
for i in 1 2 3; do
  TORCH_EXTENSIONS_DIR=/tmp/jit_ext /tmp/envJ/bin/python bench/gpu_construct.py >> "$OUT/construct-jit.jsonl" 2>> "$OUT/construct.log"
  TORCH_EXTENSIONS_DIR=/tmp/empty_a /tmp/envA/bin/python bench/gpu_construct.py >> "$OUT/construct-hook.jsonl" 2>> "$OUT/construct.log"
done
echo "empty_a files after constructs: $(find /tmp/empty_a -type f | wc -l)" >> "$TIMES"
fi

# 6. DeepSpeed's own op tests against the hook's ops (the lion ops added; adam ops from the op cache), with an
#    empty extensions dir that must stay empty.
if [ -z "${SKIP_TESTS:-}" ]; then
hook lion /tmp/envA --ops fused_adam,cpu_adam,fused_lamb,fused_lion,cpu_lion
mkdir -p /tmp/empty_t
start=$(now)
(cd .dstests/tests && TORCH_EXTENSIONS_DIR=/tmp/empty_t timeout 240 /tmp/envA/bin/python -m pytest -q -p no:cacheprovider \
  unit/ops/adam/test_cpu_adam.py unit/ops/adam/test_adamw.py unit/ops/lion/test_lion.py unit/ops/lion/test_cpu_lion.py) \
  > "$OUT/deepspeed-tests.txt" 2>&1
echo "deepspeed_tests rc=$? wall=$(since "$start") empty_t files after: $(find /tmp/empty_t -type f | wc -l)" >> "$TIMES"
fi
cat "$TIMES"
