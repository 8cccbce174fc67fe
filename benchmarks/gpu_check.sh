#!/usr/bin/env bash
# The GPU check of this repo: every step a GPU session needs, in one command, within 8 minutes on an H100,
# everything written to one folder: $OUT where set (the device machine's), else runs/gpu_check/.
#
#   bash benchmarks/gpu_check.sh              # on a machine with a CUDA GPU (stops at step 1 without one)
#   bash benchmarks/gpu_check.sh --rehearse   # the same steps at tiny sizes on the CPU (tests/test_benchmarks.py)
#   GPU_CHECK_SKIP="run resume twins speed_orpo speed_mopo" bash benchmarks/gpu_check.sh  # those omitted (given before)
#
#   1 install  the wheels carried in .whl/ (pip --target, then PYTHONPATH); print torch, CUDA, driver and the GPU
#   2 tests    tests/test_device.py on the GPU (ORPO_TEST_DEVICE=cuda): no host round trip in the update steps, every
#              tensor on the device, ensemble fit/forward fp32 and bf16, rollouts, one epoch of each model-based
#              file, an exact resume, and --cuda-graphs keeping the eager numbers in every file
#   3 collect  datasets/collect.py (Hopper-v4, random policy, 50k steps) as local/hopper-random, for steps 4-8
#   4 profile  torch.profiler over 20 update steps of orpo.py's own main(), eager and with --cuda-graphs: the 15 ops
#              with the most device time and with the most host time, and the share of wall time the GPU is busy
#   5 concurrent  K = 1, 4, 8 ORPO runs at once on the one GPU (3 epochs of 200 steps, fit capped), eager and with
#              --cuda-graphs: each run's epoch seconds (and projected to 1000 steps), the aggregate run-epochs per
#              hour, and from the best K the paper's 60-run ORPO column (60 runs x 1000 epochs) in hours
#   6 run      a 4-epoch algorithms/orpo.py at default sizes but a 30-epoch ensemble fit on the collected data
#              (per-phase seconds from its metrics.csv), then --resume for 1 more
#   7 graphs   benchmarks/speed.py --cuda: orpo.py's whole epoch eager vs --cuda-graphs, in the same run
#   8 twins    the same seed twice (2 epochs, run side by side): bit-identical or not, and the ops that torch's
#              use_deterministic_algorithms(warn_only=True) names in a third run
#   9 speed    benchmarks/speed.py --cuda for orpo.py, fp32 vs --dynamics-bf16, references in the same run, then for
#              mopo.py with what the budget leaves
#  10 summary  one table (phase, seconds, projected 1000-epoch hours), the steps, the tests, the profile, the
#              concurrent runs, the speed tables and the determinism verdict: $OUT/gpu_check.md (ready to paste into
#              docs/speed.md; its last line is the paper's 60-run ORPO column on this device) and $OUT/gpu_check.json
# $OUT ends with 4 files (the device tool returns at most 8): gpu_check.md, gpu_check.json, log.txt (every step's
# output) and artifacts.tar.gz (each run's config/metrics/summary, the speed tables, the test report). Each step runs
# under its own timeout, cut to what the budget leaves after the later steps' needs; a failed or timed-out step is
# reported and the next one runs; the exit status is 1 if any step failed (an omitted one is not a failure). A
# timed-out run gets SIGTERM first, so it checkpoints and its finished epochs still count. The caps and needs are from
# the first H100 run (2026-11-26, docs/speed.md), where the 470-s plan written from estimates timed out in 5 steps;
# the steps added after it (graphs; profile and concurrent) are planned from that run's epoch time, within
# the same 470 s, in the order of what a GPU session has not measured yet: when time runs short the budget cuts the
# last steps (speed_mopo, speed_orpo, twins: measured on 2026-11-26) first. A session after the first one runs
# GPU_CHECK_SKIP="run resume twins speed_orpo speed_mopo" (docs/speed.md): the new steps then get their caps.
#
# The device image has torch, numpy, h5py, tqdm, tensorboard and pytest but not gymnasium, mujoco or tyro
# (/work/.library/device/KINDS.md). Carry them as wheels (11.6 MB): once, in the repo's root, on a machine with pip
# and network (docs/speed.md), then `carry: [".whl"]` in the device call:
#   echo /.whl/ >> .git/info/exclude
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
cat >"$WORK/versions.py" <<'EOF'
import importlib, json, platform, subprocess, sys
import torch
device, path = sys.argv[1:]
v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
for name in ("numpy", "gymnasium", "mujoco", "tyro", "h5py", "tqdm", "tensorboard"):
    v[name] = getattr(importlib.import_module(name), "__version__", "?")
import gymnasium as gym
env = gym.make("Hopper-v4")  # MuJoCo works
env.reset(seed=0)
env.step(env.action_space.sample())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    v |= {"device": p.name, "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1)}
    v |= {"multiprocessors": p.multi_processor_count, "bf16": torch.cuda.is_bf16_supported()}
    v["cudnn"] = torch.backends.cudnn.version()
    try:
        smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        v["driver"] = subprocess.run(smi, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        v["driver"] = f"unknown ({e})"
else:
    v["device"] = platform.processor() or platform.machine()
print(json.dumps(v, indent=1))
with open(path, "w") as f:
    json.dump(v, f)
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("error: torch sees no CUDA device; every later step would run on the CPU (run with --rehearse for that)")
EOF
if ! step versions 60 5 "$PY" "$WORK/versions.py" "$DEVICE" "$WORK/versions.json"; then
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
cat >"$WORK/profile_steps.py" <<'EOF'
"""torch.profiler over 20 update steps of orpo.py's own main(), eager and with --cuda-graphs (gpu_check's profile step).

python profile.py OUT_PREFIX -- ORPO_FLAGS...: each mode runs main() for 2 epochs in this process; the 2nd epoch's
gradient_steps call is profiled from a hook: eager, after each step (profiler warm-up 4 steps, then 20 recorded);
with graphs, after each replay (from the first replay on: the warm-up steps and the capture are not profiled),
20 steps' worth of replays recorded. Writes OUT_PREFIX.json and OUT_PREFIX.md: per mode the 15 ops with the most
device time (kernels; on a CPU the aten ops) and with the most host time (self CPU time), and the share of the
recorded window's wall time in which the device is busy (the union of its kernels' intervals)."""

import importlib.util
import json
import os
import sys
import tempfile

import torch

STEPS = 20  # the update steps recorded (each: one SAC and one TD3+BC update)
prefix, flags = sys.argv[1], sys.argv[3:]
assert sys.argv[2] == "--", "usage: profile.py OUT_PREFIX -- ORPO_FLAGS..."
sys.path.insert(0, "algorithms")  # as `python algorithms/orpo.py` does: plumbing.py sits beside the file
spec = importlib.util.spec_from_file_location("orpo", "algorithms/orpo.py")
orpo = importlib.util.module_from_spec(spec)
sys.modules["orpo"] = orpo
spec.loader.exec_module(orpo)
plumbing = sys.modules["plumbing"]
driver, graph_class = orpo.gradient_steps, torch.cuda.CUDAGraph
work = tempfile.mkdtemp(prefix="profile_")


def busy_share(trace_path: str, cuda: bool) -> dict:
    """From the chrome trace: the recorded window (first ProfilerStep's start to the last event's end) and the union
    of the device's intervals in it (kernels, copies and sets; on a CPU the aten ops, which run on the host)."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    device_cats = ("kernel", "gpu_memcpy", "gpu_memset") if cuda else ("cpu_op",)
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    start = min(float(e["ts"]) for e in (steps or events))
    end = max(float(e["ts"]) + float(e["dur"]) for e in events)
    device = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("cat") in device_cats and (cuda or str(e.get("name", "")).startswith("aten::"))
    )
    busy, reach, by_name = 0.0, start, {}
    for a, b in device:  # the union of the intervals, clipped to the window
        a, b = max(a, reach), min(b, end)
        if b > a:
            busy, reach = busy + b - a, b
    for e in events:
        if e.get("cat") in device_cats and (cuda or str(e.get("name", "")).startswith("aten::")):
            n, t = by_name.get(e["name"], (0, 0.0))
            by_name[e["name"]] = (n + 1, t + float(e["dur"]))
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:15]
    return {
        "window_ms": (end - start) / 1e3,
        "device_busy_ms": busy / 1e3,
        "device_busy_share": busy / (end - start) if end > start else None,
        "device_events": len(device),
        "device_top": [{"name": k, "calls": n, "ms": t / 1e3} for k, (n, t) in top],
    }


def profiled_run(mode: str) -> dict:
    calls, result = [0], {}
    cuda = torch.cuda.is_available() and "--no-cuda" not in flags

    def on_ready(prof):
        trace = os.path.join(work, f"{mode}.json")
        prof.export_chrome_trace(trace)
        result.update(busy_share(trace, cuda))
        host = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")]
        host.sort(key=lambda e: -e.self_cpu_time_total)
        result["host_top"] = [{"name": e.key, "calls": e.count, "ms": e.self_cpu_time_total / 1e3} for e in host[:15]]
        result["host_ms"] = sum(e.self_cpu_time_total for e in host) / 1e3

    def hooked_driver(step, n, run, policies, graphs, period=1):
        calls[0] += 1
        if calls[0] != 2:  # epoch 1 warms up (the allocator, cuBLAS, the first capture)
            return driver(step, n, run, policies, graphs, period)
        per = period if graphs else 1  # update steps per profiler step
        need = (3 + period if graphs else 0) + per * (-(-4 // per) + STEPS // per)
        if n < need:
            sys.exit(f"error: --steps-per-epoch {n}: the profile needs at least {need}")
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        schedule = torch.profiler.schedule(wait=0, warmup=-(-4 // per), active=STEPS // per, repeat=1)
        prof = torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=on_ready)
        started = [False]

        def tick():
            if not started[0]:
                prof.start()
                started[0] = True
            prof.step()

        class Graph(graph_class):  # a replay ticks the profiler; the capture happens before the first replay
            def replay(self):
                if not started[0]:
                    prof.start()  # only now: the eager warm-up and the capture stay out of the profile
                    started[0] = True
                super().replay()
                prof.step()

        def eager_step():
            out = step()
            tick()
            return out

        torch.cuda.CUDAGraph = Graph
        try:
            if not graphs:
                prof.start()
                started[0] = True
            driver(eager_step if not graphs else step, n, run, policies, graphs, period)
        finally:
            torch.cuda.CUDAGraph = graph_class
            if started[0]:
                prof.stop()
        result.update(graphs=bool(graphs), steps=per * (STEPS // per), period=period)

    orpo.gradient_steps = hooked_driver
    try:
        argv = [*flags, "--epochs", "2", "--runs-dir", os.path.join(work, mode)]
        summary = orpo.main(plumbing.parse_args(orpo.Args, argv + (["--cuda-graphs"] if mode == "graphs" else [])))
    finally:
        orpo.gradient_steps = driver
    if "window_ms" not in result:
        sys.exit(f"error: {mode}: the profiler recorded nothing")
    return {"mode": mode, "device": summary["device"], **result}


out = {"runs": [profiled_run(mode) for mode in ("eager", "graphs")]}
ms = lambda v: f"{v:.3g}"
lines = [
    "| mode | device | update steps recorded | wall ms per step | device busy ms per step | device busy share | "
    "device events per step | host ms per step (self, all ops) |",
    "|---|---|---|---|---|---|---|---|",
]
for r in out["runs"]:
    s = r["steps"]
    mode = r["mode"] + ("" if r["graphs"] or r["mode"] == "eager" else " (ignored off a GPU: eager)")
    lines.append(
        f"| {mode} | {r['device']} | {s} | {ms(r['window_ms'] / s)} | {ms(r['device_busy_ms'] / s)} | "
        f"{r['device_busy_share']:.0%} | {r['device_events'] / s:.0f} | {ms(r['host_ms'] / s)} |"
    )
for r in out["runs"]:
    for kind, what in (("device_top", "device time (kernels)" if r["device"] == "cuda" else "time in aten ops"),
                       ("host_top", "host time (self CPU)")):  # fmt: skip
        lines += ["", f"{r['mode']}: the 15 ops with the most {what}, over {r['steps']} update steps:", ""]
        lines += ["| op | calls | ms | µs per step |", "|---|---|---|---|"]
        for e in r[kind]:
            name = (e["name"] if len(e["name"]) <= 70 else e["name"][:67] + "...").replace("|", "/")  # a table cell
            lines.append(f"| `{name}` | {e['calls']} | {ms(e['ms'])} | {ms(1e3 * e['ms'] / r['steps'])} |")
md = "\n".join(lines) + "\n"
with open(prefix + ".json", "w") as f:
    json.dump(out, f, indent=1)
with open(prefix + ".md", "w") as f:
    f.write(md)
print(md)
EOF
step profile 80 10 "$PY" "$WORK/profile_steps.py" "$WORK/out/profile" -- "${DATA[@]}" "$CUDA" "${PROFILE_SIZES[@]}"

# ---------------------------------------------------------------- 5 K runs at once on the one device
cat >"$WORK/concurrent_runs.py" <<'EOF'
"""K ORPO runs at once on the one device, eager and with --cuda-graphs (gpu_check's concurrent step).

python concurrent_runs.py OUT_PREFIX RUNS_DIR "K1 K2 ..." -- ORPO_FLAGS...: for each K (ascending), eager then
graphs, start K runs of algorithms/orpo.py (seeds 1..K) together and wait for them; from each run's metrics.csv its
epoch seconds (median over the epochs after the first) and that epoch projected to 1000 update steps (rollouts and
evaluation as measured, the update steps scaled: --steps-per-epoch may be cut to fit the check's time); the aggregate
run-epochs per hour is the sum over the K runs of 3600 / projected epoch seconds. $STEP_LIMIT (seconds, from
gpu_check's step) with $STEP_GRACE: a configuration that would not end in time is not started, and one still running
at the limit gets SIGTERM (its runs save and stop). Each run gets OMP_NUM_THREADS = host cores // K unless it is set.
Writes OUT_PREFIX.json and OUT_PREFIX.md after each configuration."""

import contextlib
import csv
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

prefix, runs_dir, ks, flags = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3].split()], sys.argv[5:]
assert sys.argv[4] == "--", 'usage: concurrent_runs.py OUT_PREFIX RUNS_DIR "K ..." -- ORPO_FLAGS...'
t0, limit, grace = time.time(), float(os.environ.get("STEP_LIMIT", "1e9")), float(os.environ.get("STEP_GRACE", "20"))
steps = int(flags[flags.index("--steps-per-epoch") + 1]) if "--steps-per-epoch" in flags else 1000
out = {"ks": ks, "steps_per_epoch": steps, "flags": flags, "configs": [], "not_run": []}


def read_rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def one_run(run_dir: str) -> dict:
    """A run's epoch seconds: as measured (median over epochs 2..), and projected to a 1000-step epoch."""
    with open(os.path.join(run_dir, "config.json")) as f:
        graphs = json.load(f).get("cuda_graphs")
    rows = [r for r in read_rows(run_dir) if r["epoch"] >= 1 and "charts/epoch_seconds" in r]
    timed = [r for r in rows if r["epoch"] >= 2] or rows
    med = lambda f: statistics.median(f(r) for r in timed)
    keys = ("charts/epoch_seconds", "charts/rollout_seconds", "charts/eval_seconds")
    epoch, rollout, evaluation = (med(lambda r, k=k: r.get(k, 0.0)) for k in keys)
    updates = med(lambda r: steps / r["charts/SPS"] - r["charts/rollout_seconds"])  # SPS leaves evaluation out
    return {
        "dir": run_dir,
        "cuda_graphs": graphs,
        "epochs": len(rows),
        "epoch_seconds": epoch,
        "updates_seconds": updates,
        "rollout_seconds": rollout,
        "eval_seconds": evaluation,
        "projected_epoch_seconds": rollout + evaluation + updates * 1000 / steps,
    }


def run_config(k: int, mode: str, stop_at: float) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // k)))
    where = os.path.join(runs_dir, f"{mode}_k{k}")
    procs, logs = [], []
    start = time.time()
    for i in range(k):
        cmd = [sys.executable, "algorithms/orpo.py", *flags, "--seed", str(i + 1)]
        cmd += ["--runs-dir", os.path.join(where, str(i))] + (["--cuda-graphs"] if mode == "graphs" else [])
        logs.append(open(os.path.join(runs_dir, f"{mode}_k{k}_{i}.log"), "w"))
        procs.append(subprocess.Popen(cmd, stdout=logs[-1], stderr=subprocess.STDOUT, env=env))
    cut = False
    while any(p.poll() is None for p in procs):
        if time.time() > stop_at and not cut:  # the step's time is up: the runs save after their epoch and stop
            cut = True
            for p in procs:
                p.poll() is None and p.send_signal(signal.SIGTERM)
        if cut and time.time() > stop_at + grace - 2:
            for p in procs:
                p.poll() is None and p.kill()
        time.sleep(0.2)
    for f in logs:
        f.close()
    result = {"k": k, "mode": mode, "seconds": time.time() - start, "cut": cut, "runs": [], "failed": []}
    for i, p in enumerate(procs):
        found = glob.glob(os.path.join(where, str(i), "*", "metrics.csv"))
        try:
            result["runs"].append(one_run(os.path.dirname(found[0])))
        except (IndexError, KeyError, ValueError, OSError, statistics.StatisticsError):
            with open(os.path.join(runs_dir, f"{mode}_k{k}_{i}.log")) as f:
                tail = [ln for ln in f.read().replace("\r", "\n").splitlines() if ln.strip()][-1:] or ["(no output)"]
            result["failed"].append(f"seed {i + 1}: exit {p.returncode}: {tail[0].strip()[:200]}")
    result["complete"] = not cut and not result["failed"] and all(p.returncode == 0 for p in procs)
    with contextlib.suppress(IndexError, OSError, ValueError):  # the device the runs report (--cuda falls back)
        with open(glob.glob(os.path.join(where, "0", "*", "summary.json"))[0]) as f:
            result["device"] = json.load(f).get("device")
    if result["runs"]:
        result["mean_epoch_seconds"] = statistics.mean(r["epoch_seconds"] for r in result["runs"])
        result["mean_projected_epoch_seconds"] = statistics.mean(r["projected_epoch_seconds"] for r in result["runs"])
        result["run_epochs_per_hour"] = sum(3600 / r["projected_epoch_seconds"] for r in result["runs"])
    return result


def write() -> str:
    lines = [
        f"| K runs at once | mode | each run's epoch seconds ({steps} steps) | projected to 1000 steps | "
        "aggregate run-epochs per hour (1000 steps) | wall seconds | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in out["configs"]:
        each = ", ".join(f"{r['epoch_seconds']:.3g}" for r in c["runs"]) or "-"
        proj = ", ".join(f"{r['projected_epoch_seconds']:.3g}" for r in c["runs"]) or "-"
        rate = f"{c['run_epochs_per_hour']:,.0f}" if "run_epochs_per_hour" in c else "-"
        note = "; ".join(c["failed"] + (["cut at the step's time limit"] if c["cut"] else []))
        ignored = c["mode"] == "graphs" and c.get("device") != "cuda"
        mode = c["mode"] + (" (ignored off a GPU: eager)" if ignored else "")
        lines.append(f"| {c['k']} | {mode} | {each} | {proj} | {rate} | {c['seconds']:.0f} | {note} |")
    for k, mode in out["not_run"]:
        lines.append(f"| {k} | {mode} | | | | | not run: the step's time ran out |")
    md = "\n".join(lines) + "\n"
    for ext, text in (("json", json.dumps(out, indent=1)), ("md", md)):
        with open(f"{prefix}.{ext}", "w") as f:
            f.write(text)
    return md


os.makedirs(runs_dir, exist_ok=True)
plan = [(k, mode) for k in ks for mode in ("eager", "graphs")]
last = None
for i, (k, mode) in enumerate(plan):
    elapsed = time.time() - t0
    # a configuration's time: the last one's, half as much again when K grows (a guess until it is measured)
    guess = 0 if last is None else last["seconds"] * (1.5 if k > last["k"] else 1.0)
    if elapsed + guess > limit - grace:
        out["not_run"] = plan[i:]
        break
    last = run_config(k, mode, t0 + limit - grace)
    out["configs"].append(last)
    print(write(), flush=True)
print(write())
bad = [c for c in out["configs"] if c["failed"]]
if bad or not out["configs"]:
    sys.exit(f"error: {bad[0]['k']} {bad[0]['mode']}: {bad[0]['failed'][0]}" if bad else "error: no configuration ran")
EOF
step concurrent 240 20 "$PY" "$WORK/concurrent_runs.py" "$WORK/out/concurrent" "$WORK/runs/concurrent" \
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
cat >"$WORK/summary.py" <<'EOF'
import csv, glob, json, math, os, re, statistics, sys, time
import xml.etree.ElementTree as ET

import torch

work, outdir, device, budget, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out = {"device": device, "budget_seconds": budget, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
with open(os.path.join(work, "steps.tsv")) as f:
    out["steps"] = [
        {"name": r["step"], "status": r["status"], "rc": r["rc"], "seconds": float(r["seconds"]), "timeout": r["timeout"]}
        for r in csv.DictReader(f, delimiter="\t")
    ]
versions_path = os.path.join(work, "versions.json")
out["versions"] = json.load(open(versions_path)) if os.path.isfile(versions_path) else {}


def run_dir(name):
    found = sorted(glob.glob(os.path.join(work, "runs", name, "*", "config.json")))
    return os.path.dirname(found[0]) if found else None


def rows(path):
    """A metrics.csv's rows (a run directory's, or the file itself)."""
    path = path if path is None or path.endswith(".csv") else os.path.join(path, "metrics.csv")
    if path is None or not os.path.isfile(path):
        return []
    with open(path) as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def load(path, name):
    p = os.path.join(path or "", name)
    return json.load(open(p)) if path and os.path.isfile(p) else {}


# ---- tests
report = os.path.join(work, "out", "pytest.xml")
if os.path.isfile(report):
    suite = ET.parse(report).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    cases = suite.findall("testcase")
    bad = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    out["tests"] = {
        "passed": len(cases) - len(bad) - len(skipped),
        "failed": [c.get("name") for c in bad],
        "skipped": [c.get("name") for c in skipped],
        "seconds": float(suite.get("time", "nan")),
    }

status = {s["name"]: s["status"] for s in out["steps"]}
# ---- the run: per-phase seconds (medians over the epochs after the first, which warms up)
main = run_dir("main")
m_rows = rows(os.path.join(work, "main_metrics.csv"))  # as the run left it, before the resume appended its epochs
fit = next((r for r in m_rows if r["epoch"] == 0), {})
ep = [r for r in m_rows if r["epoch"] >= 1 and "charts/epoch_seconds" in r]
timed = [r for r in ep if r["epoch"] >= 2] or ep
config = load(main, "config.json")
steps_per_epoch = config.get("steps_per_epoch", 1000)
phases = []
if timed:
    def med(f):
        return statistics.median(f(r) for r in timed)

    without = med(lambda r: steps_per_epoch / r["charts/SPS"])  # SPS leaves evaluation out
    rollout = med(lambda r: r["charts/rollout_seconds"])
    evaluation = med(lambda r: r.get("charts/eval_seconds", 0.0))
    epoch = med(lambda r: r["charts/epoch_seconds"])
    fit_s = fit.get("dynamics/fit_seconds", float("nan"))
    b = config.get("rollout_batch_size")
    phases = [
        ("ensemble fit, once (%d epochs)" % fit.get("dynamics/epochs", 0), fit_s, fit_s),
        ("rollouts (π^o and π^p, %s starts, h^o=%s, h^p=%s)" % (b, config.get("rollout_length_o"),
                                                           config.get("rollout_length")), rollout, 1000 * rollout),
        ("updates (%d SAC + %d TD3+BC steps)" % (steps_per_epoch, steps_per_epoch), without - rollout,
         1000 * (without - rollout)),
        ("evaluation (%s episodes + model_eval)" % config.get("eval_episodes"), evaluation, 1000 * evaluation),
        ("epoch, all phases", epoch, 1000 * epoch),
        ("whole run: fit + 1000 epochs", None, fit_s + 1000 * epoch),
    ]
    out["phases"] = [{"phase": p, "seconds": s, "projected_1000_epoch_hours": t / 3600} for p, s, t in phases]
    out["run"] = {
        "dir": os.path.basename(main), "epochs_done": int(ep[-1]["epoch"]), "epochs_planned": epochs,
        "timed_epochs": [int(r["epoch"]) for r in timed], "first_epoch_seconds": ep[0]["charts/epoch_seconds"],
        "summary": load(main, "summary.json"), "final_score": ep[-1].get("eval/normalized_score"),
        "holdout_mse": fit.get("dynamics/holdout_mse"),
        "sizes": f"{config.get('num_ensemble')} × {config.get('dynamics_hidden_dims')} ensemble, policies "
        f"{config.get('hidden_dims')}, batch {config.get('batch_size')}",
        "device": load(main, "summary.json").get("device"),
    }
# the resume wrote into the same run directory: its epochs are the rows after its checkpoint's
log = os.path.join(work, "logs", "resume.log")
text = open(log).read() if os.path.isfile(log) else ""
after = rows(main)
start = re.search(r"resumed .* at epoch (\d+)", text)
out["resume"] = {
    "from_epoch": int(start.group(1)) if start else None,
    "to_epoch": int(after[-1]["epoch"]) if after else None,
    "summary_status": load(main, "summary.json").get("status"),
}

# ---- determinism: twin_a vs twin_b, every logged value but times, and the saved ensemble and policy, bit for bit
a, b = run_dir("twin_a"), run_dir("twin_b")
ra, rb = rows(a), rows(b)
det = {"epochs": len(ra) - 1, "values": 0, "differences": [], "files": []}
for x, y in zip(ra, rb):
    for k in sorted(set(x) | set(y)):
        if k.endswith("_seconds") or k in ("charts/SPS",):
            continue
        det["values"] += 1
        if x.get(k) != y.get(k) and not (math.isnan(x.get(k, 0)) and math.isnan(y.get(k, 0))):
            det["differences"].append({"epoch": int(x["epoch"]), "metric": k, "a": x.get(k), "b": y.get(k)})
for name in ("dynamics.pt", "policy.pt"):
    pa, pb = os.path.join(a or "", name), os.path.join(b or "", name)
    if a and b and os.path.isfile(pa) and os.path.isfile(pb):
        sa, sb = torch.load(pa, weights_only=True), torch.load(pb, weights_only=True)
        sa, sb = sa.get("model", sa.get("state_dict")), sb.get("model", sb.get("state_dict"))
        det["files"].append(name)
        for k in sa:
            det["values"] += 1
            if not torch.equal(sa[k], sb[k]):
                diff = (sa[k].float() - sb[k].float()).abs().max().item()
                det["differences"].append({"epoch": None, "metric": f"{name}:{k}", "a": None, "b": diff})
det["compared"] = bool(ra and rb and len(ra) == len(rb))
det["identical"] = det["compared"] and not det["differences"]
warn_log = os.path.join(work, "logs", "twin_warn.log")
warned = open(warn_log).read() if os.path.isfile(warn_log) else ""
det["nondeterministic_ops"] = sorted(set(re.findall(r"(\S+) does not have a deterministic implementation", warned)))
det["warn_run_finished"] = load(run_dir("twin_warn"), "summary.json").get("finished")
out["determinism"] = det

# ---- speed tables
out["speed"] = {}
for algo in ("graphs", "orpo", "mopo"):
    p = os.path.join(work, "out", f"speed_{algo}.md")
    out["speed"][algo] = open(p).read().strip() if os.path.isfile(p) else None


# ---- the profile, K runs at once, and from the best K the paper's 60-run ORPO column on this device
def outputs(name):
    """The step's $WORK/out/NAME.json and its markdown table (None, None where the step wrote none)."""
    paths = [os.path.join(work, "out", f"{name}.{ext}") for ext in ("json", "md")]
    if not all(os.path.isfile(p) for p in paths):
        return None, None
    return json.load(open(paths[0])), open(paths[1]).read().strip()


(out["profile"], profile_md), (out["concurrent"], concurrent_md) = outputs("profile"), outputs("concurrent")
PAPER_RUNS, PAPER_EPOCHS = 60, 1000  # Table 4's ORPO column: 12 datasets x 5 seeds, 1000 epochs of 1000 steps
configs = (out["concurrent"] or {}).get("configs", [])
measured = [c for c in configs if c.get("run_epochs_per_hour") and len(c["runs"]) == c["k"]]  # every run has epochs
best = max([c for c in measured if c["complete"]] or measured, key=lambda c: c["run_epochs_per_hour"], default=None)
out["paper_column"] = best and {
    "k": best["k"],
    "mode": best["mode"],
    "device": best.get("device"),
    "complete": best["complete"],
    "run_epochs_per_hour": best["run_epochs_per_hour"],
    "hours": PAPER_RUNS * PAPER_EPOCHS / best["run_epochs_per_hour"],
}

# ---- the markdown
v = out["versions"]
lines = [f"## GPU check ({out['date']})", ""]
lines.append(
    f"Device: {v.get('device', '?')} (compute capability {v.get('capability', '-')}, {v.get('memory_gib', '-')} GiB, "
    f"driver {v.get('driver', '-')}); torch {v.get('torch')} (CUDA {v.get('cuda')}, cuDNN {v.get('cudnn', '-')}), "
    f"Python {v.get('python')}, gymnasium {v.get('gymnasium')}, mujoco {v.get('mujoco')}. Made by "
    f"`bash benchmarks/gpu_check.sh{' --rehearse' if device == 'cpu' else ''}` in "
    f"{sum(s['seconds'] for s in out['steps']):.0f} s of its {budget} s budget."
)
lines += ["", "| phase | seconds | projected 1000-epoch hours |", "|---|---|---|"]
for p in out.get("phases", []):
    s = "" if p["seconds"] is None else f"{p['seconds']:.3g}"
    lines.append(f"| {p['phase']} | {s} | {p['projected_1000_epoch_hours']:.3g} |")
if not out.get("phases"):
    why = "not run: GPU_CHECK_SKIP" if status.get("run") == "omitted" else "the run wrote no epoch"
    lines.append(f"| ({why}) | | |")
if "run" in out:
    r = out["run"]
    lines += [
        "",
        f"The run: `algorithms/orpo.py --env local/hopper-random` (datasets/collect.py, Hopper-v4, random policy; "
        f"{r['sizes']}) on {r['device']}, {r['epochs_done']} of {r['epochs_planned']} epochs; seconds are medians over epochs "
        f"{r['timed_epochs'][0]}-{r['timed_epochs'][-1]} (epoch 1, warming up, took {r['first_epoch_seconds']:.3g} s); "
        f"ensemble holdout MSE {r['holdout_mse']:.4g}; last normalized score {r['final_score']}.",
    ]
rs = out["resume"]
if status.get("resume") != "omitted":
    lines.append(f"Resume: from epoch {rs['from_epoch']} to {rs['to_epoch']} (status {rs['summary_status']}).")
lines += ["", "| step | status | seconds | timeout |", "|---|---|---|---|"]
lines += [f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {s['timeout']} |" for s in out["steps"]]
t = out.get("tests")
if status.get("tests") == "omitted":
    lines += ["", "Tests: not run (GPU_CHECK_SKIP)."]
if t:
    lines += ["", f"Tests (tests/test_device.py on {device}): {t['passed']} passed, {len(t['failed'])} failed"
              + (f" ({', '.join(t['failed'])})" if t["failed"] else "") + f", {len(t['skipped'])} skipped, "
              f"{t['seconds']:.0f} s."]
d = out["determinism"]
verdict = (
    f"bit-identical ({d['values']} values over {d['epochs']} epochs: every logged metric"
    + "".join(f", {f}" for f in d["files"]) + ("" if d["files"] else "; the twins saved no weights to compare") + ")"
    if d["identical"]
    else f"NOT identical: {len(d['differences'])} of {d['values']} values differ, first "
    + (json.dumps(d["differences"][0]) if d["differences"] else "(the twins did not both finish)")
)
ops = ", ".join(d["nondeterministic_ops"]) or "none"
if status.get("twins") == "omitted":
    lines += ["", "Determinism: not run (GPU_CHECK_SKIP)."]
else:
    lines += ["", f"Determinism, the same seed twice on {device}: {verdict}. Ops torch flags as non-deterministic "
              f"(use_deterministic_algorithms(warn_only=True), one epoch): {ops}."]
gone = lambda step: "not run (GPU_CHECK_SKIP)" if status.get(step) == "omitted" else "the step failed"
c = out["concurrent"] or {}
lines += ["", "Profile (`torch.profiler`, orpo.py's own main() on the collected data, 2 epochs of 40 steps): the 2nd "
          "epoch's 20 update steps (each one SAC and one TD3+BC update), eager and with `--cuda-graphs` (recorded from "
          "the first replay on: the warm-up steps and the capture are left out); device busy: the union of the "
          "kernels' intervals over the recorded window's wall time:"]
lines += ["", profile_md or f"(no table: {gone('profile')})"]
lines += ["", f"K ORPO runs at once on {device} (`algorithms/orpo.py` on the collected data, seeds 1..K, 3 epochs of "
          f"{c.get('steps_per_epoch', '?')} steps each, fit capped; epoch seconds: each run's median over epochs 2-3; "
          "projected: rollouts + evaluation + the update steps scaled to 1000; run-epochs per hour: the sum over the K "
          "runs of 3600 / projected seconds):", "", concurrent_md or f"(no table: {gone('concurrent')})"]
for algo, table in out["speed"].items():
    flag = "--cuda" if device == "cuda" else "--no-cuda"
    what = "eager vs --cuda-graphs" if algo == "graphs" else "fp32 vs --dynamics-bf16"
    module = "orpo" if algo == "graphs" else algo
    lines += ["", f"`benchmarks/speed.py {flag} --module algorithms/{module}.py` ({what}):", ""]
    lines.append(table or f"(no table: {gone(f'speed_{algo}')})")
pc = out["paper_column"]
column = "the paper's 60-run ORPO column on this device: "
if pc:
    column += (
        f"{pc['hours']:.3g} h (from the best K: K = {pc['k']}, {pc['mode']}"
        + (" (ignored off a GPU: eager)" if pc["mode"] == "graphs" and pc["device"] != "cuda" else "")
        + f", {pc['run_epochs_per_hour']:,.0f} "
        f"run-epochs of 1000 steps per hour; {PAPER_RUNS} runs x {PAPER_EPOCHS} epochs at that rate, the ensemble fits "
        "not counted" + ("" if pc["complete"] else "; from runs cut at the step's time limit")
        + ("; rehearsal sizes on the CPU: not a figure" if device == "cpu" else "") + ")"
    )
else:
    column += f"not measured (the concurrent step: {gone('concurrent')})"
lines += ["", column]
md = "\n".join(lines) + "\n"
for name, text in (("gpu_check.md", md), ("gpu_check.json", json.dumps(out, indent=1, default=str))):
    with open(os.path.join(outdir, name + ".tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(outdir, name + ".tmp"), os.path.join(outdir, name))
print(md)
ran_on = {out.get("run", {}).get("device")} | {load(x, "summary.json").get("device") for x in (a, b) if x}
ran_on.discard(None)
if ran_on - {device}:  # --cuda falls back to the CPU without a word: a run elsewhere is a failed check
    sys.exit(f"error: the runs report the devices {sorted(map(str, ran_on))}, not {device}")
EOF
step summary 60 5 "$PY" "$WORK/summary.py" "$WORK" "$OUTDIR" "$DEVICE" "$BUDGET" "$EPOCHS"
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
