"""gpu_check's summary step: WORK's steps, runs and tables into OUTDIR/gpu_check.json and gpu_check.md.

python benchmarks/gpu_check/summary.py WORK OUTDIR DEVICE BUDGET EPOCHS (run by benchmarks/gpu_check.sh)."""

import csv, glob, json, math, os, re, statistics, sys, time
import xml.etree.ElementTree as ET

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, from any folder
import runinfo  # noqa: E402  (md_table)
import toolbox  # noqa: E402  (write_json, write_text: nothing written half)

work, outdir, device, budget, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out = {"device": device, "budget_seconds": budget, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
with open(os.path.join(work, "steps.tsv")) as f:
    out["steps"] = [dict(name=r["step"], status=r["status"], rc=r["rc"], seconds=float(r["seconds"]),
                         timeout=r["timeout"]) for r in csv.DictReader(f, delimiter="\t")]  # fmt: skip
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
    out["tests"] = dict(passed=len(cases) - len(bad) - len(skipped), failed=[c.get("name") for c in bad],
                        skipped=[c.get("name") for c in skipped], seconds=float(suite.get("time", "nan")))  # fmt: skip

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
        ("rollouts (π^o and π^p, %s starts, h^o=%s, h^p=%s)" % (b, config.get("rollout_length_o"), config.get(
            "rollout_length")), rollout, 1000 * rollout),
        ("updates (%d SAC + %d TD3+BC steps)" % (steps_per_epoch, steps_per_epoch), without - rollout,
         1000 * (without - rollout)),
        ("evaluation (%s episodes + model_eval)" % config.get("eval_episodes"), evaluation, 1000 * evaluation),
        ("epoch, all phases", epoch, 1000 * epoch),
        ("whole run: fit + 1000 epochs", None, fit_s + 1000 * epoch),
    ]  # fmt: skip
    out["phases"] = [{"phase": p, "seconds": s, "projected_1000_epoch_hours": t / 3600} for p, s, t in phases]
    out["run"] = dict(
        dir=os.path.basename(main), epochs_done=int(ep[-1]["epoch"]), epochs_planned=epochs,
        timed_epochs=[int(r["epoch"]) for r in timed], first_epoch_seconds=ep[0]["charts/epoch_seconds"],
        summary=load(main, "summary.json"), final_score=ep[-1].get("eval/normalized_score"),
        holdout_mse=fit.get("dynamics/holdout_mse"), sizes=f"{config.get('num_ensemble')} × "
        f"{config.get('dynamics_hidden_dims')} ensemble, policies {config.get('hidden_dims')}, batch "
        f"{config.get('batch_size')}", device=load(main, "summary.json").get("device"),
    )  # fmt: skip
# the resume wrote into the same run directory: its epochs are the rows after its checkpoint's
log = os.path.join(work, "logs", "resume.log")
text = open(log).read() if os.path.isfile(log) else ""
after = rows(main)
start = re.search(r"resumed.*? at epoch (\d+)", text)  # "...; resumed at epoch N" (plumbing.open_run)
out["resume"] = dict(from_epoch=int(start.group(1)) if start else None,
                     to_epoch=int(after[-1]["epoch"]) if after else None,
                     summary_status=load(main, "summary.json").get("status"))  # fmt: skip

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
out["paper_column"] = best and dict(k=best["k"], mode=best["mode"], device=best.get("device"),
                                    complete=best["complete"], run_epochs_per_hour=best["run_epochs_per_hour"],
                                    hours=PAPER_RUNS * PAPER_EPOCHS / best["run_epochs_per_hour"])  # fmt: skip

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
why = "not run: GPU_CHECK_SKIP" if status.get("run") == "omitted" else "the run wrote no epoch"
phases = [[p["phase"], "" if p["seconds"] is None else f"{p['seconds']:.3g}", f"{p['projected_1000_epoch_hours']:.3g}"]
          for p in out.get("phases", [])] or [[f"({why})", "", ""]]  # fmt: skip
lines += ["", *runinfo.md_table(["phase", "seconds", "projected 1000-epoch hours"], phases)]
if "run" in out:
    r = out["run"]
    lines += ["", "The run: `algorithms/orpo.py --env local/hopper-random` (datasets/collect.py, Hopper-v4, random "
        f"policy; {r['sizes']}) on {r['device']}, {r['epochs_done']} of {r['epochs_planned']} epochs; seconds are "
        f"medians over epochs {r['timed_epochs'][0]}-{r['timed_epochs'][-1]} (epoch 1, warming up, took "
        f"{r['first_epoch_seconds']:.3g} s); "
        f"ensemble holdout MSE {r['holdout_mse']:.4g}; last normalized score {r['final_score']}."]  # fmt: skip
rs = out["resume"]
if status.get("resume") != "omitted":
    lines.append(f"Resume: from epoch {rs['from_epoch']} to {rs['to_epoch']} (status {rs['summary_status']}).")
steps = [[s["name"], s["status"], f"{s['seconds']:.0f}", s["timeout"]] for s in out["steps"]]
lines += ["", *runinfo.md_table(["step", "status", "seconds", "timeout"], steps)]
t = out.get("tests")
if status.get("tests") == "omitted":
    lines += ["", "Tests: not run (GPU_CHECK_SKIP)."]
if t:
    failed = f" ({', '.join(t['failed'])})" if t["failed"] else ""
    lines += ["", f"Tests (tests/test_device.py on {device}): {t['passed']} passed, {len(t['failed'])} failed{failed}, "
              f"{len(t['skipped'])} skipped, {t['seconds']:.0f} s."]  # fmt: skip
d = out["determinism"]
verdict = (
    f"bit-identical ({d['values']} values over {d['epochs']} epochs: every logged metric"
    + "".join(f", {f}" for f in d["files"])
    + ("" if d["files"] else "; the twins saved no weights to compare")
    + ")"
    if d["identical"]
    else f"NOT identical: {len(d['differences'])} of {d['values']} values differ, first "
    + (json.dumps(d["differences"][0]) if d["differences"] else "(the twins did not both finish)")
)
ops = ", ".join(d["nondeterministic_ops"]) or "none"
if status.get("twins") == "omitted":
    lines += ["", "Determinism: not run (GPU_CHECK_SKIP)."]
else:
    lines += ["", f"Determinism, the same seed twice on {device}: {verdict}. Ops torch flags as non-deterministic "
              f"(use_deterministic_algorithms(warn_only=True), one epoch): {ops}."]  # fmt: skip
gone = lambda step: "not run (GPU_CHECK_SKIP)" if status.get(step) == "omitted" else "the step failed"
c = out["concurrent"] or {}
lines += ["", "Profile (`torch.profiler`, orpo.py's own main() on the collected data, 2 epochs of 40 steps): the 2nd "
    "epoch's 20 update steps (each one SAC and one TD3+BC update), eager and with `--cuda-graphs` (recorded from "
    "the first replay on: the warm-up steps and the capture are left out); device busy: the union of the "
    "kernels' intervals over the recorded window's wall time:"]  # fmt: skip
lines += ["", profile_md or f"(no table: {gone('profile')})"]
lines += ["", f"K ORPO runs at once on {device} (`algorithms/orpo.py` on the collected data, seeds 1..K, 3 epochs of "
    f"{c.get('steps_per_epoch', '?')} steps each, fit capped; epoch seconds: each run's median over epochs 2-3; "
    "projected: rollouts + evaluation + the update steps scaled to 1000; run-epochs per hour: the sum over the K "
    "runs of 3600 / projected seconds):", "", concurrent_md or f"(no table: {gone('concurrent')})"]  # fmt: skip
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
        "not counted"
        + ("" if pc["complete"] else "; from runs cut at the step's time limit")
        + ("; rehearsal sizes on the CPU: not a figure" if device == "cpu" else "")
        + ")"
    )
else:
    column += f"not measured (the concurrent step: {gone('concurrent')})"
lines += ["", column]
md = "\n".join(lines) + "\n"
toolbox.write_text(os.path.join(outdir, "gpu_check.md"), md)
toolbox.write_json(out, os.path.join(outdir, "gpu_check.json"), default=str)
print(md)
ran_on = {out.get("run", {}).get("device")} | {load(x, "summary.json").get("device") for x in (a, b) if x}
ran_on.discard(None)
if ran_on - {device}:  # --cuda falls back to the CPU without a word: a run elsewhere is a failed check
    sys.exit(f"error: the runs report the devices {sorted(map(str, ran_on))}, not {device}")
