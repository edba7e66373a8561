#!/bin/bash
# One device call: the referee (issue 14: GPU tests, wall per evaluation, the pool's throughput, A/A), the
# offline compiler on KernelBench beside torch.compile and its GPU coverage (issue 17), optimize on whole models
# (issue 18). Each step has its own time limit, logs under $OUT, and runs whatever the previous one did.
# Usage (on the device, repo root; `.dev` (bubblewrap) and `.whl` (pydantic, sqlalchemy, openai) carried, `.kb`
# (KernelBench's level1-3 files) for the KernelBench steps; `bash benchmarks/device_prepare.sh` here makes all three):
#   bash benchmarks/device_session.sh TAG "tests speed pool"    ... TAG "aa"    ... TAG "ovc"    ... TAG "sweep optimize"
# ovc: OVC_ITEMS="FILE ..." runs those files instead of the sample of $KB; OVC_ARGS="--resume EARLIER.json" keeps
# an earlier call's finished rows (the results file must be in the repo to travel). Keep $OUT to a few files:
# the device returns about eight.
set -u
# The wheels go into the interpreter's own site-packages (root there): the sandboxes bind the interpreter's
# library dirs and set their own PYTHONPATH, so a --target dir under /tmp is invisible to a sandboxed worker
# (optimize's check of optimized.py imports pydantic). Elsewhere, --target /tmp/site as before.
if [ -d .whl ] && [ -z "${KS_WHEELS_DONE:-}" ]; then
  if [ -w "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl || exit 1
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit 1
  fi
  export KS_WHEELS_DONE=1
fi
kb=${KB:-.kb/KernelBench}
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
    tests) timeout ${TESTS_S:-200} $py -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -n 40 > "$out/${tag}_gpu_tests.log" ;;
    speed) timeout 200 $py benchmarks/referee_speed.py --device cuda --n 5 --small --kb --out "$out/${tag}_speed.json" > "$out/${tag}_speed.log" 2>&1 ;;
    pool)  timeout -k 5 150 $py benchmarks/pool_throughput.py --n 60 --slots ${SLOTS:-8} --no-serial --timeout 30 --out "$out/${tag}_pool60.json" > "$out/${tag}_pool60.log" 2>&1 ;;
    aa)    timeout -k 5 110 $py benchmarks/referee_aa.py --repeats 3 --baseline-repeats 3 --out "$out/${tag}_aa.json" > "$out/${tag}_aa.log" 2>&1 ;;
    ovc)   # Inductor compiles with a pool as wide as the machine in every worker: 8 workers x 16 on 16 cores
           TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2} \
           timeout -k 5 ${OVC_S:-540} $py benchmarks/offline_vs_compile.py ${OVC_ITEMS:-"$kb"} --sample ${SAMPLE:-12 12 8} \
             --include 40_LayerNorm --workers ${WORKERS:-6} --variants ${VARIANTS:-6} --neighbours 3 --deadline-s ${DEADLINE:-270} \
             --hard-deadline-s ${HARD:-380} --task-timeout-s ${TASK_S:-200} ${OVC_ARGS:-} --out "$out/${tag}_ovc.json" > "$out/${tag}_ovc.log" 2>&1 ;;
    sweep) timeout -k 5 ${SWEEP_S:-240} $py benchmarks/kernelbench_sweep.py "$kb" --policy ${POLICY:-lenient} --check \
             --device cuda --no-set-check --shrink-above 16 --timeout-s 90 --jobs ${JOBS:-12} \
             ${ONLY:+--only $ONLY} --out "$out/${tag}_sweep.json" > "$out/${tag}_sweep.log" 2>&1 ;;
    optimize) [ -n "${OPT_FRESH:-}" ] && rm -rf /tmp/om  # else a cut-off step resumes where it stopped
             timeout -k 5 ${OPT_S:-420} $py benchmarks/optimize_models.py --kb "$kb" --device cuda --deadline-s $(( ${OPT_S:-420} - 30 )) \
             ${OPT_ARGS:-} --work /tmp/om --out "$out/${tag}_optimize.json" > "$out/${tag}_optimize.log" 2>&1 ;;
  esac
  echo "step $s rc=$? ${SECONDS} s"
  tail -n ${TAIL:-12} "$out/${tag}_"*"${s/tests/gpu_tests}"*.log 2>/dev/null
done
