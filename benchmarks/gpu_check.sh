#!/usr/bin/env bash
# The GPU check of this repo (issue 20): every step a GPU session needs, in one command, within 8 minutes on an H100,
# everything written to one folder: $OUT where set (the device machine's), else runs/gpu_check/.
#
#   bash benchmarks/gpu_check.sh              # on a machine with a CUDA GPU (stops at step 1 without one)
#   bash benchmarks/gpu_check.sh --rehearse   # the same steps at tiny sizes on the CPU (tests/test_benchmarks.py)
#   GPU_CHECK_SKIP="tests twins" GPU_CHECK_BUDGET=330 bash benchmarks/gpu_check.sh   # a second call: those steps omitted
#
#   1 install  the wheels carried in .whl/ (pip --target, then PYTHONPATH); print torch, CUDA, driver and the GPU
#   2 tests    tests/test_device.py on the GPU (ORPO_TEST_DEVICE=cuda): no host round trip in the update steps, every
#              tensor on the device, ensemble fit/forward fp32 and bf16, rollouts, one epoch of each model-based
#              file, an exact resume
#   3 graphs   benchmarks/speed.py --cuda: orpo.py's epoch eager vs --cuda-graphs, in the same run (the update steps
#              are launch-bound on an H100; tests/test_device.py checks in step 2 that graphs keep the numbers)
#   4 speed    benchmarks/speed.py --cuda for orpo.py, fp32 vs --dynamics-bf16, references in the same run
#   5 run      datasets/collect.py (Hopper-v4, random policy, 50k steps), a 6-epoch algorithms/orpo.py at default sizes
#              but a 30-epoch ensemble fit on it (per-phase seconds from its metrics.csv), then --resume for 1 more
#   6 twins    the same seed twice (2 epochs, run side by side): bit-identical or not, and the ops that torch's
#              use_deterministic_algorithms(warn_only=True) names in a third run
#   7 speed    benchmarks/speed.py --cuda for mopo.py, with what the budget leaves
#   8 summary  one table (phase, seconds, projected 1000-epoch hours), the steps, the tests, the speed tables and the
#              determinism verdict: $OUT/gpu_check.md (ready to paste into docs/speed.md) and $OUT/gpu_check.json
# $OUT ends with 4 files (the device tool returns at most 8): gpu_check.md, gpu_check.json, log.txt (every step's
# output) and artifacts.tar.gz (each run's config/metrics/summary, the speed tables, the test report). Each step runs
# under its own timeout, cut to what the budget leaves after the later steps' needs; a failed or timed-out step is
# reported and the next one runs; the exit status is 1 if any step failed (an omitted one is not a failure). A
# timed-out run gets SIGTERM first, so it checkpoints and its finished epochs still count. The caps and needs are from
# the first H100 run (2026-11-26, docs/speed.md), where the 470-s plan written from estimates timed out in 5 steps;
# the graphs step (added after it) is planned from that run's epoch time, within the same 470 s: when time runs short
# the budget cuts the last step (speed_mopo) first.
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
  # --only: no 2048² matmuls (a bf16 one takes minutes on a CPU without bf16 units)
  SPEED=(--only ensemble epoch --repeats 1 --heavy-repeats 1 --rollout-batch-size 512 --dataset-size 3000 --steps-per-epoch 5
    --dynamics-epochs 1 --ensemble-steps 2 --eval-episodes 1 --epoch-repeats 1 --warmup-epochs 0 --horizons 1
    "--algo-flags=--dynamics-hidden-dims 32 32 --hidden-dims 32 32 --num-ensemble 3 --num-elites 2")
  COLLECT_STEPS=2000 EPOCHS=3 RESUME_EPOCHS=2 TWIN_EPOCHS=2
  SIZES=(--steps-per-epoch 10 --batch-size 32 --rollout-batch-size 64 --dynamics-max-epochs 2 --dynamics-hidden-dims
    32 32 --hidden-dims 32 32 --eval-episodes 1 --num-ensemble 3 --num-elites 2)
  TWIN_SIZES=("${SIZES[@]}")
  WARN_SIZES=("${SIZES[@]}")
else
  BUDGET=${GPU_CHECK_BUDGET:-470} DEVICE=cuda CUDA=--cuda SCALE=100
  TESTS=()
  # h = 5 only, one epoch per run with no warm-up epoch: the per-phase times come from step 4's run, this step gives
  # fp32 vs bf16 and the references
  SPEED=(--horizons 5 --warmup-epochs 0)
  # the first H100 run (docs/speed.md): a 1000-step epoch takes ~10 s, and the ensemble fit on 50k random transitions
  # had not early-stopped after 100 s, so the run caps the fit at 30 epochs and does 6 epochs, the resume 1 more
  COLLECT_STEPS=50000 EPOCHS=6 RESUME_EPOCHS=1 TWIN_EPOCHS=2
  SIZES=(--dynamics-max-epochs 30)  # otherwise the defaults: 7 × 4×200 ensemble, 3×256 policies, 50k starts, 10 episodes
  TWIN_SIZES=(--dynamics-max-epochs 5)
  WARN_SIZES=(--dynamics-max-epochs 2 --steps-per-epoch 50 --eval-episodes 2 --rollout-batch-size 5000)
fi
# GPU_CHECK_SKIP="tests twins": steps not to run (status "omitted", not a failure), for a second call of a session
# whose first call already gave those steps' results
SKIP=" ${GPU_CHECK_SKIP:-} "
# The steps in order, with the least seconds each needs for a result on an H100 (from the first run): a step's timeout
# keeps these for the later steps that are not skipped
ORDER=(install versions tests graphs speed_orpo collect run resume twins speed_mopo summary)
declare -A NEED=([install]=5 [versions]=10 [tests]=40 [graphs]=50 [speed_orpo]=60 [collect]=20 [run]=60 [resume]=30
  [twins]=45 [speed_mopo]=60 [summary]=10)
T0=$(date +%s)
LOG="$WORK/out/log.txt"
: >"$LOG"
printf 'step\tstatus\trc\tseconds\ttimeout\n' >"$WORK/steps.tsv"

# step NAME CAP GRACE CMD...: run CMD with timeout min(CAP, budget left - reserve - GRACE), its output in
# logs/NAME.log; never stops the script. reserve: the NEED of the later steps not skipped; GRACE: the seconds between
# SIGTERM and SIGKILL. CAP: about twice the step's H100 time (docs/speed.md), so a hung step costs its cap and the later
# ones still run. A rehearsal scales CAP and the reserve to its budget.
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
  timeout -k "$grace" "$limit" "$@" >"$WORK/logs/$name.log" 2>&1
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
ORPO_TEST_DEVICE=$DEVICE step tests 90 5 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_device.py \
  --junitxml="$WORK/out/pytest.xml" "${TESTS[@]}"

# ---------------------------------------------------------------- 3 speed.py --cuda: eager vs --cuda-graphs
# two columns of one orpo.py epoch each (fit + epoch ~25 s per column on an H100 by the first run's times)
step graphs 120 5 "$PY" benchmarks/speed.py "$CUDA" --module algorithms/orpo.py --compare algorithms/orpo.py \
  --labels eager graphs --cuda-graphs graphs --out "$WORK/out/speed_graphs" "${SPEED[@]}" --only epoch

# ---------------------------------------------------------------- 4 speed.py --cuda: fp32 and bf16 (mopo.py: step 7)
speed() {
  step "speed_$1" "$2" 5 "$PY" benchmarks/speed.py "$CUDA" --module "algorithms/$1.py" --compare "algorithms/$1.py" \
    --labels fp32 bf16 --dynamics-bf16 bf16 --out "$WORK/out/speed_$1" "${SPEED[@]}"
}
speed orpo 140

# ---------------------------------------------------------------- 5 an ORPO run on a collected dataset, resumed
DATA=(--env local/hopper-random --data-dir "$WORK/data")  # local/hopper-random takes hopper-random-v2's preset
step collect 60 5 "$PY" datasets/collect.py --env Hopper-v4 --policy random --steps "$COLLECT_STEPS" \
  --data-dir "$WORK/data" --name local/hopper-random
step run 130 30 "$PY" algorithms/orpo.py "${DATA[@]}" "$CUDA" --epochs "$EPOCHS" --checkpoint-every 5 \
  --runs-dir "$WORK/runs/main" --seed 1 "${SIZES[@]}"
MAIN=$(dirname "$(ls "$WORK"/runs/main/*/config.json 2>/dev/null | head -n 1)")
cp "$MAIN/metrics.csv" "$WORK/main_metrics.csv" 2>/dev/null  # before the resume appends to it
step resume 50 20 "$PY" algorithms/orpo.py --resume "$MAIN" "$CUDA" --epochs $((EPOCHS + RESUME_EPOCHS)) \
  --stop-after-epochs "$RESUME_EPOCHS"

# ---------------------------------------------------------------- 6 determinism: the same seed twice, side by side
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

# ---------------------------------------------------------------- 7 speed.py for mopo.py, with what the budget leaves
speed mopo 120

# ---------------------------------------------------------------- 8 summary
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
    lines.append("| (the run wrote no epoch) | | |")
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
for algo, table in out["speed"].items():
    flag = "--cuda" if device == "cuda" else "--no-cuda"
    what = "eager vs --cuda-graphs" if algo == "graphs" else "fp32 vs --dynamics-bf16"
    module = "orpo" if algo == "graphs" else algo
    lines += ["", f"`benchmarks/speed.py {flag} --module algorithms/{module}.py` ({what}):", ""]
    gone = "not run (GPU_CHECK_SKIP)" if status.get(f"speed_{algo}") == "omitted" else "the step failed"
    lines.append(table or f"(no table: {gone})")
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
  ls out/speed_* out/pytest.xml versions.json steps.tsv main_metrics.csv 2>/dev/null >>files.txt
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
