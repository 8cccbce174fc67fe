#!/usr/bin/env bash
# The GPU check of this repo: every step a GPU session needs, in one command, within 8 minutes on an H100, written to
# $OUT where set (the device machine's), else runs/gpu_check/. Its Python steps are in benchmarks/gpu_check/.
#
#   bash benchmarks/gpu_check.sh              # on a machine with a CUDA GPU (stops at step 1 without one)
#   bash benchmarks/gpu_check.sh --rehearse   # the same steps at tiny sizes on the CPU (tests/test_benchmarks.py)
#   GPU_CHECK_SKIP="profile concurrent graphs" bash benchmarks/gpu_check.sh  # those omitted (given on 2026-11-27)
#
# Steps: install (the wheels in .whl/, then versions), tests (tests/test_device.py on the GPU), collect (50k random
# Hopper-v4 steps), profile (torch.profiler over 20 update steps, eager and --cuda-graphs), concurrent (K = 1, 4, 8 ORPO
# runs at once: run-epochs per hour, the paper's 60-run column in hours), run and resume (a 4-epoch orpo.py, then 1
# more), graphs (speed.py: eager vs --cuda-graphs), twins (the same seed twice: bit-identical or not), speed_orpo and
# speed_mopo (speed.py --cuda), summary ($OUT/gpu_check.md and gpu_check.json; with log.txt and artifacts.tar.gz, the
# 4 files $OUT ends with). Each step runs under its own timeout, cut to what the budget leaves after the later steps'
# needs (NEED, from the first H100 run, 2026-11-26, docs/speed.md); a failed or timed-out step is reported and the next
# runs; exit 1 if any failed. A timed-out run gets SIGTERM first, so its finished epochs still count.
#
# The device image lacks gymnasium, mujoco and tyro: carry them as wheels (`carry: [".whl"]`), downloaded once:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
#     gymnasium==1.2.2 mujoco==3.3.7 tyro==1.0.17 farama-notifications==0.0.6 glfw==2.11.0 pyopengl==3.1.10 \
#     docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.15.0
set -u
cd "$(dirname "$0")/.."
REHEARSE=0
case "${1:-}" in
  --rehearse) REHEARSE=1 ;;
  "") ;;
  *) echo "error: unknown argument '$1'; use --rehearse or nothing" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
OUTDIR=${OUT:-runs/gpu_check}
mkdir -p "$OUTDIR" || { echo "error: cannot create $OUTDIR" >&2; exit 2; }
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
[ -n "${GPU_CHECK_KEEP:-}" ] && echo "GPU_CHECK_KEEP: the work folder $WORK is kept" || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs" "$WORK/data" "$WORK/runs" "$WORK/out"
export PYTHONUNBUFFERED=1 WANDB_MODE=offline MUJOCO_GL=${MUJOCO_GL:-disable}
unset ORPO_TEST_DEVICE

if [ "$REHEARSE" = 1 ]; then
  BUDGET=${GPU_CHECK_BUDGET:-900} DEVICE=cpu CUDA=--no-cuda
  SCALE=$((100 * BUDGET / 470))  # the caps below are seconds of the GPU plan: a rehearsal scales them to its budget
  export OMP_NUM_THREADS=1  # a shared CPU: one thread each
  TESTS=(-k "test_epoch_loop_makes_no_host_round_trip and mopo and not td3bc")
  # the profile and concurrent steps at tiny sizes: a 2-epoch profile of 40-step epochs, K = 1 and 2 runs at once
  TINY_NETS=(--batch-size 32 --rollout-batch-size 64 --dynamics-max-epochs 2 --dynamics-hidden-dims 32 32 --hidden-dims
    32 32 --eval-episodes 1 --num-ensemble 3 --num-elites 2)
  PROFILE_SIZES=(--steps-per-epoch 40 "${TINY_NETS[@]}")
  CONCURRENT_KS="1 2" CONCURRENT_SIZES=(--steps-per-epoch 10 "${TINY_NETS[@]}")
  # --only: no 2048² matmuls (a bf16 one takes minutes on a CPU without bf16 units)
  SPEED=(--only ensemble epoch --repeats 1 --heavy-repeats 1 --rollout-batch-size 512 --dataset-size 3000 --steps-per-epoch 5
    --dynamics-epochs 1 --ensemble-steps 2 --eval-episodes 1 --epoch-repeats 1 --warmup-epochs 0 --horizons 1
    "--algo-flags=--dynamics-hidden-dims 32 32 --hidden-dims 32 32 --num-ensemble 3 --num-elites 2")
  COLLECT_STEPS=2000 EPOCHS=3 RESUME_EPOCHS=2 TWIN_EPOCHS=2
  SIZES=(--steps-per-epoch 10 "${TINY_NETS[@]}")
  TWIN_SIZES=("${SIZES[@]}")
  WARN_SIZES=("${SIZES[@]}")
else
  BUDGET=${GPU_CHECK_BUDGET:-470} DEVICE=cuda CUDA=--cuda SCALE=100
  TESTS=()
  # h = 5 only, one epoch per run with no warm-up epoch: the per-phase times come from step 4's run, this step gives
  # fp32 vs bf16 and the references
  SPEED=(--horizons 5 --warmup-epochs 0)
  # the first H100 run (docs/speed.md): a 1000-step epoch takes ~10 s, and the ensemble fit on 50k random transitions
  # had not early-stopped after 100 s, so the run caps the fit at 30 epochs and does 4 epochs, the resume 1 more
  COLLECT_STEPS=50000 EPOCHS=4 RESUME_EPOCHS=1 TWIN_EPOCHS=2
  # the profile: default sizes, 2 epochs of 40 steps (20 recorded in the 2nd), one evaluation episode
  PROFILE_SIZES=(--steps-per-epoch 40 --dynamics-max-epochs 2 --eval-episodes 1)
  # K runs at once: default sizes but 200-step epochs (an epoch is ~10 ms per step + ~1.5 s, so 3 epochs of 1000 steps
  # at K = 1, 4, 8, eager and graphs, would not fit the budget; each run's epoch is also projected to 1000 steps) and a
  # 5-epoch fit
  CONCURRENT_KS="1 4 8" CONCURRENT_SIZES=(--steps-per-epoch 200 --dynamics-max-epochs 5)
  SIZES=(--dynamics-max-epochs 30)  # otherwise the defaults: 7 × 4×200 ensemble, 3×256 policies, 50k starts, 10 episodes
  TWIN_SIZES=(--dynamics-max-epochs 5)
  WARN_SIZES=(--dynamics-max-epochs 2 --steps-per-epoch 50 --eval-episodes 2 --rollout-batch-size 5000)
fi
# GPU_CHECK_SKIP="tests twins": steps not to run (status "omitted", not a failure), for a second call of a session
# whose first call already gave those steps' results
SKIP=" ${GPU_CHECK_SKIP:-} "
# The steps in order, with the least seconds each needs for a result on an H100 (from the first run): a step's timeout
# keeps these for the later steps that are not skipped
ORDER=(install versions tests collect profile concurrent run resume graphs twins speed_orpo speed_mopo summary)
declare -A NEED=([install]=5 [versions]=10 [tests]=55 [collect]=15 [profile]=25 [concurrent]=120 [run]=40 [resume]=20
  [graphs]=35 [twins]=35 [speed_orpo]=35 [speed_mopo]=25 [summary]=10)
T0=$(date +%s)
LOG="$WORK/out/log.txt"
: >"$LOG"
printf 'step\tstatus\trc\tseconds\ttimeout\n' >"$WORK/steps.tsv"

# step NAME CAP GRACE CMD...: run CMD with timeout min(CAP, budget left - reserve - GRACE), its output in
# logs/NAME.log; never stops the script. reserve: the NEED of the later steps not skipped; GRACE: the seconds between
# SIGTERM and SIGKILL; CMD sees them as $STEP_LIMIT and $STEP_GRACE (the concurrent step plans by them). CAP: about
# twice the step's H100 time (docs/speed.md), so a hung step costs its cap and the later ones still run. A rehearsal
# scales CAP and the reserve to its budget.
step() {
  local name=$1 cap=$((${2} * SCALE / 100)) grace=$3 reserve=0 later=0 s
  shift 3
  if [[ "$SKIP" == *" $name "* ]]; then
    printf '%s\tomitted\t-\t0\t-\n' "$name" >>"$WORK/steps.tsv"
    echo "=== $name: omitted (GPU_CHECK_SKIP)" | tee -a "$LOG"
    return 3
  fi
  for s in "${ORDER[@]}"; do
    [ "$later" = 1 ] && [[ "$SKIP" != *" $s "* ]] && reserve=$((reserve + NEED[$s] * SCALE / 100))
    [ "$s" = "$name" ] && later=1
  done
  local left=$((BUDGET - ($(date +%s) - T0) - reserve - grace))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 5 ]; then
    printf '%s\tskipped\t-\t0\t%s\n' "$name" "$limit" >>"$WORK/steps.tsv"
    echo "=== $name: skipped, the budget is spent" | tee -a "$LOG"
    return 1
  fi
  echo "=== $name (timeout ${limit} s): $*" | tee -a "$LOG"
  local t0 rc status
  t0=$(date +%s.%N)
  STEP_LIMIT=$limit STEP_GRACE=$grace timeout -k "$grace" "$limit" "$@" >"$WORK/logs/$name.log" 2>&1
  rc=$?
  local seconds
  seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$seconds" "$limit" >>"$WORK/steps.tsv"
  sed 's/.*\r//' "$WORK/logs/$name.log" >>"$LOG"  # progress bars: keep each line's last state
  echo "--- $name: $status (exit $rc) in $seconds s" | tee -a "$LOG"
  [ "$status" != ok ] && tail -n 5 "$WORK/logs/$name.log" | sed 's/.*\r//'
  return "$rc"
}

# ---------------------------------------------------------------- 1 install and versions
if ls .whl/*.whl >/dev/null 2>&1; then
  if [ "$REHEARSE" = 1 ]; then  # another Python here: check that the wheels resolve for the device's cp312, x86-64
    step install 90 5 "$PY" -m pip install --dry-run --no-index --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --target "$WORK/site" .whl/*.whl
  elif step install 90 5 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" .whl/*.whl; then
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
else
  echo "=== install: no .whl/ here, the installed packages are used (the device image lacks gymnasium, mujoco and tyro:" \
    "carry .whl, docs/speed.md)" | tee -a "$LOG"
fi
if ! step versions 60 5 "$PY" benchmarks/gpu_check/versions.py "$DEVICE" "$WORK/versions.json"; then
  echo "error: step 1 failed (see above): nothing else can run" | tee -a "$LOG"
  [ "$REHEARSE" = 0 ] && { cp "$LOG" "$OUTDIR/log.txt"; exit 1; }
fi

# ---------------------------------------------------------------- 2 tests on the device
# ~34 s for the first 25 tests on the H100, plus 7 graphs-vs-eager pairs of tiny 2-epoch runs
ORPO_TEST_DEVICE=$DEVICE step tests 150 5 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_device.py \
  --junitxml="$WORK/out/pytest.xml" "${TESTS[@]}"

# ---------------------------------------------------------------- 3 the dataset of steps 4-8
DATA=(--env local/hopper-random --data-dir "$WORK/data")  # local/hopper-random takes hopper-random-v2's preset
step collect 60 5 "$PY" datasets/collect.py --env Hopper-v4 --policy random --steps "$COLLECT_STEPS" \
  --data-dir "$WORK/data" --name local/hopper-random

# ---------------------------------------------------------------- 4 torch.profiler: 20 update steps, eager and graphs
step profile 80 10 "$PY" benchmarks/gpu_check/profile_steps.py "$WORK/out/profile" -- "${DATA[@]}" "$CUDA" "${PROFILE_SIZES[@]}"

# ---------------------------------------------------------------- 5 K runs at once on the one device
step concurrent 240 20 "$PY" benchmarks/gpu_check/concurrent_runs.py "$WORK/out/concurrent" "$WORK/runs/concurrent" \
  "$CONCURRENT_KS" -- "${DATA[@]}" "$CUDA" --epochs 3 --checkpoint-every 1000 "${CONCURRENT_SIZES[@]}"

# ---------------------------------------------------------------- 6 an ORPO run on the collected dataset, resumed
step run 110 30 "$PY" algorithms/orpo.py "${DATA[@]}" "$CUDA" --epochs "$EPOCHS" --checkpoint-every 5 \
  --runs-dir "$WORK/runs/main" --seed 1 "${SIZES[@]}"
MAIN=$(dirname "$(ls "$WORK"/runs/main/*/config.json 2>/dev/null | head -n 1)")
cp "$MAIN/metrics.csv" "$WORK/main_metrics.csv" 2>/dev/null  # before the resume appends to it
step resume 50 20 "$PY" algorithms/orpo.py --resume "$MAIN" "$CUDA" --epochs $((EPOCHS + RESUME_EPOCHS)) \
  --stop-after-epochs "$RESUME_EPOCHS"

# ---------------------------------------------------------------- 7 speed.py --cuda: eager vs --cuda-graphs
# two columns of one orpo.py epoch each (fit + epoch ~25 s per column on an H100 by the first run's times)
step graphs 120 5 "$PY" benchmarks/speed.py "$CUDA" --module algorithms/orpo.py --compare algorithms/orpo.py \
  --labels eager graphs --cuda-graphs graphs --out "$WORK/out/speed_graphs" "${SPEED[@]}" --only epoch

# ---------------------------------------------------------------- 8 determinism: the same seed twice, side by side
twins() {
  local common=("${DATA[@]}" "$CUDA" --seed 2 --epochs "$TWIN_EPOCHS" --checkpoint-every 1000)
  "$PY" algorithms/orpo.py "${common[@]}" "${TWIN_SIZES[@]}" --runs-dir "$WORK/runs/twin_a" >"$WORK/logs/twin_a.log" 2>&1 &
  local a=$!
  "$PY" algorithms/orpo.py "${common[@]}" "${TWIN_SIZES[@]}" --runs-dir "$WORK/runs/twin_b" >"$WORK/logs/twin_b.log" 2>&1 &
  local b=$!
  # a third run under torch.use_deterministic_algorithms(True, warn_only=True): torch warns at each op it knows to be
  # non-deterministic on this device (cuBLAS needs the workspace setting to count as deterministic)
  CUBLAS_WORKSPACE_CONFIG=:4096:8 "$PY" -W always -c 'import runpy, sys, torch
torch.use_deterministic_algorithms(True, warn_only=True)
sys.argv = sys.argv[1:]
sys.path.insert(0, "algorithms")  # as `python algorithms/orpo.py` does: plumbing.py sits beside the file
runpy.run_path(sys.argv[0], run_name="__main__")' algorithms/orpo.py "${common[@]}" --epochs 1 "${WARN_SIZES[@]}" \
    --runs-dir "$WORK/runs/twin_warn" >"$WORK/logs/twin_warn.log" 2>&1 &
  local c=$! rc=0
  wait $a || rc=$?
  wait $b || rc=$?
  wait $c || rc=$?
  for f in twin_a twin_b twin_warn; do echo "--- $f"; sed 's/.*\r//' "$WORK/logs/$f.log" | tail -n 30; done
  return $rc
}
step twins 70 10 bash -c "$(declare -p PY WORK DATA CUDA TWIN_EPOCHS TWIN_SIZES WARN_SIZES; declare -f twins); twins"

# ---------------------------------------------------------------- 9 speed.py --cuda: fp32 and bf16, orpo.py, mopo.py
speed() {
  step "speed_$1" "$2" 5 "$PY" benchmarks/speed.py "$CUDA" --module "algorithms/$1.py" --compare "algorithms/$1.py" \
    --labels fp32 bf16 --dynamics-bf16 bf16 --out "$WORK/out/speed_$1" "${SPEED[@]}"
}
speed orpo 140
speed mopo 120  # with what the budget leaves

# ---------------------------------------------------------------- 10 summary
step summary 60 5 "$PY" benchmarks/gpu_check/summary.py "$WORK" "$OUTDIR" "$DEVICE" "$BUDGET" "$EPOCHS"
SUMMARY_RC=$?

# ---------------------------------------------------------------- what comes back: 4 files in $OUT
(
  cd "$WORK" && find runs -name config.json -o -name metrics.csv -o -name summary.json >files.txt
  ls out/speed_* out/profile.* out/concurrent.* out/pytest.xml versions.json steps.tsv 2>/dev/null >>files.txt
  ls main_metrics.csv runs/concurrent/*.log 2>/dev/null >>files.txt
  tar czf "$OUTDIR/artifacts.tar.gz.tmp" -T files.txt && mv "$OUTDIR/artifacts.tar.gz.tmp" "$OUTDIR/artifacts.tar.gz"
)
cp "$LOG" "$OUTDIR/log.txt"
[ "$SUMMARY_RC" = 0 ] && cat "$OUTDIR/gpu_check.md"
echo
column -t -s $'\t' "$WORK/steps.tsv" 2>/dev/null || cat "$WORK/steps.tsv"
echo "wrote $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' ')in $(($(date +%s) - T0)) s"
if awk -F '\t' 'NR > 1 && $2 != "ok" && $2 != "omitted" { bad = 1 } END { exit !bad }' "$WORK/steps.tsv"; then
  echo "error: a step did not pass (see the table above and $OUTDIR/log.txt)" >&2
  exit 1
fi
