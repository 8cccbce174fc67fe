"""Score harness: run algorithms × datasets × seeds, then tabulate last-10 scores (mean ± std over seeds).

    python benchmarks/scores.py --algos orpo mopo --envs hopper-medium-v2 walker2d-medium-replay-v2 --seeds 1 2 3
    python benchmarks/scores.py --table-only --out docs/scores.md      # rebuild the table from finished runs

Each run is the algorithm's own script in a subprocess (its run directory under --runs-dir); finished runs
are skipped, so the harness can be stopped and started again. `--extra="..."` flags go to every script.
The table names the device the runs used (from each summary.json) and the date.
"""
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Args:
    algos: list[str] = field(default_factory=lambda: ["orpo"])
    """scripts in algorithms/ to run"""
    envs: list[str] = field(default_factory=lambda: ["hopper-medium-v2"])
    """datasets (any --env value the scripts take)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """seeds per algorithm and dataset"""
    runs_dir: str = "runs/scores"
    """where the runs are written"""
    out: str = "docs/scores.md"
    """markdown table written here (and a .json and a .png of the learning curves beside it)"""
    table_only: bool = False
    """only rebuild the table from the runs already in --runs-dir"""
    extra: str = ""
    """extra flags passed to every script, as one string: --extra="--epochs 100 --no-cuda" """


def plot_curves(summaries: list[dict], path: str) -> None:
    """Evaluation score per epoch, mean over seeds, one panel per dataset."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({s["env"] for s in summaries})
    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 3.6), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for algo in sorted({s["algorithm"] for s in summaries if s["env"] == env}):
            curves = []
            for s in (s for s in summaries if s["env"] == env and s["algorithm"] == algo):
                with open(os.path.join(s["run_dir"], "metrics.csv")) as f:
                    rows = [r for r in csv.DictReader(f) if r.get("eval/return")]
                key = "eval/normalized_score" if s["score_kind"] == "d4rl_normalized" else "eval/return"
                curves.append([(int(r["epoch"]), float(r[key])) for r in rows])
            n = min(len(c) for c in curves)
            epochs = [e for e, _ in curves[0][:n]]
            ax.plot(epochs, np.mean([[v for _, v in c[:n]] for c in curves], axis=0), label=f"{algo} ({len(curves)} seeds)")
        ax.set(title=env, xlabel="epoch (1000 gradient steps)", ylabel="score")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def finished_runs(runs_dir: str) -> list[dict]:
    out = []
    for path in glob.glob(os.path.join(runs_dir, "*", "summary.json")):
        with open(path) as f:
            summary = json.load(f)
        if summary.get("finished"):
            out.append(summary)
    return out


def table(summaries: list[dict]) -> tuple[str, dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["env"], s["algorithm"]), []).append(s)
    rows, data = [], {}
    for (env, algo), runs in sorted(groups.items()):
        last10 = np.array([r["last10_score"] for r in runs])
        final = np.array([r["normalized_score"] if r["normalized_score"] is not None else r["return"] for r in runs])
        devices = sorted({r.get("device_name", r["device"]) for r in runs})
        epochs = sorted({r["epochs"] for r in runs})
        hours = np.mean([r["wall_seconds"] for r in runs]) / 3600
        kind = runs[0]["score_kind"]
        rows.append(f"| {env} | {algo} | {last10.mean():.1f} ± {last10.std():.1f} | {final.mean():.1f} ± {final.std():.1f} | "
                    f"{len(runs)} | {'/'.join(map(str, epochs))} | {kind} | {', '.join(devices)} | {hours:.2f} |")
        data[f"{env}/{algo}"] = {"last10": last10.tolist(), "final": final.tolist(), "seeds": [r["seed"] for r in runs],
                                 "epochs": epochs, "devices": devices, "score_kind": kind}
    header = ("| dataset | algorithm | last-10 score | final score | seeds | epochs | score | device | hours/run |\n"
              "|---|---|---|---|---|---|---|---|---|")
    return header + "\n" + "\n".join(rows), data


def main(args: Args) -> None:
    if not args.table_only:
        done = {(s["env"], s["algorithm"], s["seed"]) for s in finished_runs(args.runs_dir)}
        for env in args.envs:
            for algo in args.algos:
                for seed in args.seeds:
                    if (env, algo, seed) in done:
                        print(f"skip {algo} {env} seed {seed}: finished")
                        continue
                    cmd = [sys.executable, os.path.join(ROOT, "algorithms", f"{algo}.py"), "--env", env, "--seed", str(seed),
                           "--runs-dir", args.runs_dir, *shlex.split(args.extra)]
                    print("$", " ".join(cmd), flush=True)
                    t0 = time.time()
                    result = subprocess.run(cmd)
                    print(f"  exit {result.returncode} after {time.time() - t0:.0f} s", flush=True)
    text, data = table(finished_runs(args.runs_dir))
    stamp = f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}"
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"# Scores\n\nMade by `python benchmarks/scores.py` ({stamp}). last-10 score: the mean of the last 10 "
                "evaluations of each run (the paper's protocol), then mean ± std over seeds.\n\n" + text + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(data, f, indent=2)
    plot_curves(finished_runs(args.runs_dir), os.path.splitext(args.out)[0] + ".png")
    print(text)


if __name__ == "__main__":
    main(tyro.cli(Args))
