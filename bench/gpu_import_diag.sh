#!/usr/bin/env bash
# Where a fresh process's `import torch, deepspeed` goes on the GPU machine (bench/README.md, issue 12):
#   bash bench/gpu_import_diag.sh OUTDIR
# Whether the image's site-packages takes bytecode, import times before and after compileall, and the
# slowest imports (-X importtime) in a venv laid out as bench/gpu_hook_ops.sh lays out its prefixes.
set -u
OUT=${1:?usage: bash bench/gpu_import_diag.sh OUTDIR}
mkdir -p "$OUT"
PY=$(command -v python3)
t() { "$PY" -c 'import subprocess, sys, time; s = time.perf_counter(); r = subprocess.run(sys.argv[1:]); print(round(time.perf_counter() - s, 3), "rc", r.returncode)' "$@"; }
{
  echo "## environment"; env | grep -E '^PYTHON' ; id -u
  SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "site=$SITE"; ls -ld "$SITE" "$SITE/torch" "$SITE/torch/__pycache__" 2>&1
  echo "pyc under torch before: $(find "$SITE/torch" -name '*.pyc' | wc -l)"
  echo "## import torch, before compileall (3 runs)"; for i in 1 2 3; do t "$PY" -c 'import torch'; done
  echo "## compileall"; "$PY" -m compileall -q -j 16 "$SITE" > "$OUT/compileall.log" 2>&1; echo "rc=$?"
  tail -3 "$OUT/compileall.log"
  echo "pyc under torch after: $(find "$SITE/torch" -name '*.pyc' | wc -l)"
  echo "## import torch, after (3 runs)"; for i in 1 2 3; do t "$PY" -c 'import torch'; done
  rm -rf /tmp/envD && "$PY" -m venv --without-pip /tmp/envD
  ESITE=$(/tmp/envD/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$SITE')" > "$ESITE/_image_torch.pth"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$ESITE" $(ls .whl/*.whl | grep -v platformdirs)
  "$PY" -m compileall -q -j 16 "$ESITE" > /dev/null 2>&1; echo "env compileall rc=$?"
  echo "## venv: import torch (3)"; for i in 1 2 3; do t /tmp/envD/bin/python -c 'import torch'; done
  echo "## venv: import torch, deepspeed (3)"; for i in 1 2 3; do t /tmp/envD/bin/python -c 'import torch, deepspeed'; done
  echo "## image python: import torch, deepspeed via PYTHONPATH (3)"
  for i in 1 2 3; do PYTHONPATH="$ESITE" t "$PY" -c 'import torch, deepspeed'; done
} > "$OUT/diag.txt" 2>&1
/tmp/envD/bin/python -X importtime -c 'import torch, deepspeed' 2> "$OUT/importtime.txt"
sort -t'|' -k2 -n -r "$OUT/importtime.txt" | head -40 > "$OUT/importtime-top.txt"
/tmp/envD/bin/python -c 'import cProfile, pstats; cProfile.run("import torch, deepspeed", "/tmp/imp.prof"); pstats.Stats("/tmp/imp.prof").sort_stats("cumulative").print_stats(40)' > "$OUT/import-profile.txt" 2>&1
cat "$OUT/diag.txt"; cat "$OUT/importtime-top.txt" | head -25
