"""torch.profiler over 20 update steps of orpo.py's own main(), eager and with --cuda-graphs (gpu_check's profile step).

python benchmarks/gpu_check/profile_steps.py OUT_PREFIX -- ORPO_FLAGS...: each mode runs main() for 2 epochs in this process; the 2nd epoch's
gradient_steps call is profiled from a hook: eager, after each step (profiler warm-up 4 steps, then 20 recorded);
with graphs, after each replay (from the first replay on: the warm-up steps and the capture are not profiled),
20 steps' worth of replays recorded. Writes OUT_PREFIX.json and OUT_PREFIX.md: per mode the 15 ops with the most
device time (kernels; on a CPU the aten ops) and with the most host time (self CPU time), and the share of the
recorded window's wall time in which the device is busy (the union of its kernels' intervals)."""

import json
import os
import sys
import tempfile

import torch

STEPS = 20  # the update steps recorded (each: one SAC and one TD3+BC update)
prefix, flags = sys.argv[1], sys.argv[3:]
assert sys.argv[2] == "--", "usage: profile_steps.py OUT_PREFIX -- ORPO_FLAGS..."
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/, from any folder
import toolbox  # noqa: E402  (the scripts' loader: plumbing.py beside the file, as `python algorithms/orpo.py` has it)
import runinfo  # noqa: E402  (md_table)
import plumbing  # noqa: E402  (put on the path by toolbox)

orpo = toolbox.algorithm("orpo")
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
    on_device = [e for e in events if e.get("cat") in device_cats and (cuda or str(e.get("name")).startswith("aten::"))]
    device = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in on_device)
    busy, reach, by_name = 0.0, start, {}
    for a, b in device:  # the union of the intervals, clipped to the window
        a, b = max(a, reach), min(b, end)
        if b > a:
            busy, reach = busy + b - a, b
    for e in on_device:
        n, t = by_name.get(e["name"], (0, 0.0))
        by_name[e["name"]] = (n + 1, t + float(e["dur"]))
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:15]
    return dict(window_ms=(end - start) / 1e3, device_busy_ms=busy / 1e3,
                device_busy_share=busy / (end - start) if end > start else None, device_events=len(device),
                device_top=[{"name": k, "calls": n, "ms": t / 1e3} for k, (n, t) in top])  # fmt: skip


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

    def hooked_driver(step, first, n, period, graphs, policies):
        calls[0] += 1
        if calls[0] != 2:  # epoch 1 warms up (the allocator, cuBLAS, the first capture)
            return driver(step, first, n, period, graphs, policies)
        need = (max(3, period) if graphs else 0) + 4 + STEPS  # the driver's eager warm-up, the profiler's, recorded
        if n < need:
            sys.exit(f"error: --steps-per-epoch {n}: the profile needs at least {need}")
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        schedule = torch.profiler.schedule(wait=0, warmup=4, active=STEPS, repeat=1)
        prof = torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=on_ready)
        started = [False]

        def tick():
            if not started[0]:
                prof.start()
                started[0] = True
            prof.step()

        class Graph(graph_class):  # a replay (one update step) ticks the profiler; the captures come before it
            def replay(self):
                if not started[0]:
                    prof.start()  # only now: the eager warm-up and the captures stay out of the profile
                    started[0] = True
                super().replay()
                prof.step()

        def eager_step(actor_step):
            out = step(actor_step)
            tick()
            return out

        torch.cuda.CUDAGraph = Graph
        try:
            if not graphs:
                prof.start()
                started[0] = True
            metrics = driver(eager_step if not graphs else step, first, n, period, graphs, policies)
        finally:
            torch.cuda.CUDAGraph = graph_class
            if started[0]:
                prof.stop()
        result.update(graphs=bool(graphs), steps=STEPS, period=period)
        return metrics

    orpo.gradient_steps = hooked_driver
    try:
        argv = [*flags, "--epochs", "2", "--runs-dir", os.path.join(work, mode)]
        summary = orpo.main(
            plumbing.parse_args(orpo.Args, argv + ["--cuda-graphs" if mode == "graphs" else "--no-cuda-graphs"])
        )
    finally:
        orpo.gradient_steps = driver
    if "window_ms" not in result:
        sys.exit(f"error: {mode}: the profiler recorded nothing")
    return {"mode": mode, "device": summary["device"], **result}


out = {"runs": [profiled_run(mode) for mode in ("eager", "graphs")]}
ms = lambda v: f"{v:.3g}"
cell = lambda name: (name if len(name) <= 70 else name[:67] + "...").replace("|", "/")  # an op's name as a table cell
head = ["mode", "device", "update steps recorded", "wall ms per step", "device busy ms per step", "device busy share",
        "device events per step", "host ms per step (self, all ops)"]  # fmt: skip
lines = runinfo.md_table(head, [[
    r["mode"] + ("" if r["graphs"] or r["mode"] == "eager" else " (ignored off a GPU: eager)"), r["device"], r["steps"],
    ms(r["window_ms"] / r["steps"]), ms(r["device_busy_ms"] / r["steps"]), f"{r['device_busy_share']:.0%}",
    f"{r['device_events'] / r['steps']:.0f}", ms(r["host_ms"] / r["steps"])] for r in out["runs"]])  # fmt: skip
for r in out["runs"]:
    for kind, what in (("device_top", "device time (kernels)" if r["device"] == "cuda" else "time in aten ops"),
                       ("host_top", "host time (self CPU)")):  # fmt: skip
        lines += ["", f"{r['mode']}: the 15 ops with the most {what}, over {r['steps']} update steps:", ""]
        lines += runinfo.md_table(["op", "calls", "ms", "µs per step"], [
            [f"`{cell(e['name'])}`", e["calls"], ms(e["ms"]), ms(1e3 * e["ms"] / r["steps"])] for e in r[kind]])  # fmt: skip
md = "\n".join(lines) + "\n"
toolbox.write_json(out, prefix + ".json")
toolbox.write_text(prefix + ".md", md)
print(md)
