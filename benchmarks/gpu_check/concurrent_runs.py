"""K ORPO runs at once on the one device, eager and with --cuda-graphs (gpu_check's concurrent step).

python benchmarks/gpu_check/concurrent_runs.py OUT_PREFIX RUNS_DIR "K1 K2 ..." -- ORPO_FLAGS...: for each K (ascending), eager then
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, from any folder
import runinfo  # noqa: E402  (md_table)
import toolbox  # noqa: E402  (write_json, write_text: nothing written half)

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
    return dict(dir=run_dir, cuda_graphs=graphs, epochs=len(rows), epoch_seconds=epoch, updates_seconds=updates,
                rollout_seconds=rollout, eval_seconds=evaluation,
                projected_epoch_seconds=rollout + evaluation + updates * 1000 / steps)  # fmt: skip


def run_config(k: int, mode: str, stop_at: float) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // k)))
    where = os.path.join(runs_dir, f"{mode}_k{k}")
    procs, logs = [], []
    start = time.time()
    for i in range(k):
        cmd = [sys.executable, "algorithms/orpo.py", *flags, "--seed", str(i + 1)]
        cmd += ["--runs-dir", os.path.join(where, str(i))] + (
            ["--cuda-graphs" if mode == "graphs" else "--no-cuda-graphs"]
        )
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
    table = []
    for c in out["configs"]:
        each = ", ".join(f"{r['epoch_seconds']:.3g}" for r in c["runs"]) or "-"
        proj = ", ".join(f"{r['projected_epoch_seconds']:.3g}" for r in c["runs"]) or "-"
        rate = f"{c['run_epochs_per_hour']:,.0f}" if "run_epochs_per_hour" in c else "-"
        note = "; ".join(c["failed"] + (["cut at the step's time limit"] if c["cut"] else []))
        ignored = c["mode"] == "graphs" and c.get("device") != "cuda"
        mode = c["mode"] + (" (ignored off a GPU: eager)" if ignored else "")
        table.append([c["k"], mode, each, proj, rate, f"{c['seconds']:.0f}", note])
    table += [[k, mode, "", "", "", "", "not run: the step's time ran out"] for k, mode in out["not_run"]]
    head = ["K runs at once", "mode", f"each run's epoch seconds ({steps} steps)", "projected to 1000 steps",
            "aggregate run-epochs per hour (1000 steps)", "wall seconds", "note"]  # fmt: skip
    md = "\n".join(runinfo.md_table(head, table)) + "\n"
    toolbox.write_json(out, f"{prefix}.json")
    toolbox.write_text(f"{prefix}.md", md)
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
