#!/bin/bash
# One device call that re-measures the referee (issue 14): GPU tests, wall per evaluation, the pool's
# throughput on a mixed batch, optionally A/A. Each step has its own time limit, logs under $OUT, and runs
# whatever the previous one did. Usage (on the device, repo root, `.dev` carried):
#   bash benchmarks/device_session.sh TAG "tests speed pool"      or      ... TAG "aa"
set -u
tag=${1:?tag}; steps=${2:-"tests speed pool"}
export KERNELSMITH_BWRAP=$PWD/.dev/bwrap.sh PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
py=python3
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $py -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__)"
  id -u; nproc; } 2>&1 | tee "$out/${tag}_env.txt"
for s in $steps; do
  SECONDS=0
  case $s in
    tests) timeout 80 $py -m pytest -q -x -p no:cacheprovider tests/gpu 2>&1 | tail -n 40 > "$out/${tag}_gpu_tests.log" ;;
    speed) timeout 200 $py benchmarks/referee_speed.py --device cuda --n 5 --small --kb --out "$out/${tag}_speed.json" > "$out/${tag}_speed.log" 2>&1 ;;
    pool)  timeout -k 5 150 $py benchmarks/pool_throughput.py --n 60 --slots ${SLOTS:-8} --no-serial --timeout 30 --out "$out/${tag}_pool60.json" > "$out/${tag}_pool60.log" 2>&1 ;;
    aa)    timeout -k 5 110 $py benchmarks/referee_aa.py --repeats 3 --baseline-repeats 3 --out "$out/${tag}_aa.json" > "$out/${tag}_aa.log" 2>&1 ;;
  esac
  echo "step $s rc=$? ${SECONDS} s"
  tail -n 12 "$out/${tag}_"*"${s/tests/gpu_tests}"*.log 2>/dev/null
done
