"""Learning curves of this repo's algorithms beside the authors' code, on the same data, seeds and protocol (issue 19).

    python benchmarks/compare.py --env local/hopper-medium --seeds 1 2 3 --epochs 50     # run (resumes), then report
    python benchmarks/compare.py --report-only                                          # redraw from docs/compare/

Rows (--rows picks some):
  orpo            algorithms/orpo.py, π^o trained (the paper's method)
  orpo_untrained  algorithms/orpo.py --rollout-policy untrained (what the official code runs: π^o never updated)
  mopo            algorithms/mopo.py
  td3bc           algorithms/td3bc.py
  kit_mopo        OfflineRL-Kit's MOPO, its run_mopo.py settings (benchmarks/peers.py)
  official_orpo   the official ORPO code, its hopper-medium settings (benchmarks/peers.py)

Every row gets the same data file, seed, --epochs × --steps-per-epoch gradient steps, --rollout-batch-size start
states, --eval-episodes episodes after every epoch (in the same Gymnasium env, from the same start states) and the
same D4RL reference returns. The peers' code is fetched from --kit-source / --orpo-source at run time into a
temporary folder (benchmarks/peers.py), never copied here. Our model-based rows of one seed share the ensemble that
the `orpo` run of that seed fits (--load-dynamics-path its dynamics.pt; --no-share-ensemble: each fits its own); the
peers fit their own.

Runs go to --runs-dir/<dataset>/<row>/seed<S>/; a finished one is never run again, an unfinished one of ours continues
with its script's --resume, an unfinished peer run starts over (the peers cannot resume). --jobs runs at once, each
with --threads torch threads. Each finished run's config.json, metrics.csv and summary.json are copied to
--results/<dataset>/<row>/seed<S>/ (small files, committed), and the report is drawn from there alone: a figure
(normalised score vs gradient steps, mean over seeds with a 95 % bootstrap band, one panel per dataset) and a
markdown table (last-10 score, mean [95 % bootstrap interval] per row, the behaviour policy's score, the CPU) with a
verdict per pair of rows (ours vs theirs).
"""

import csv
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from scores import one_line_tyro_error  # noqa: E402  (the same one-line parse errors as scores.py)

# row: (kind, script or peer name, extra flags, label)
ROWS = {
    "orpo": ("ours", "orpo", [], "ORPO, π^o trained (ours)"),
    "orpo_untrained": (
        "ours",
        "orpo",
        ["--rollout-policy", "untrained", "--exp-name", "orpo_untrained"],
        "ORPO, π^o untrained (ours)",
    ),
    "mopo": ("ours", "mopo", [], "MOPO (ours)"),
    "td3bc": ("ours", "td3bc", [], "TD3+BC (ours)"),
    "kit_mopo": ("peer", "kit-mopo", [], "MOPO (OfflineRL-Kit)"),
    "official_orpo": ("peer", "official-orpo", [], "ORPO (official code)"),
}
PAIRS = [("mopo", "kit_mopo"), ("orpo_untrained", "official_orpo")]  # ours vs theirs: should agree
CONTRASTS = [("orpo", "orpo_untrained"), ("orpo", "mopo")]  # the paper's claim, stated as it comes out
# a pair's verdict needs this many seeds in each row (issue 19's minimum): a percentile bootstrap over 2 is their range
MIN_SEEDS = 3
SHARE_FROM = "orpo"  # the row whose fitted ensemble the other model-based rows of its seed load
DEFAULT_RESULTS = os.path.join(ROOT, "docs", "compare")


class UserError(Exception):
    pass


@dataclass
class Args:
    env: tuple[str, ...] = ("local/hopper-medium",)
    """datasets (--env of the algorithm files; local/NAME is DATA_DIR/local/NAME.hdf5, made by datasets/)"""
    data_dir: Optional[str] = None
    """where the datasets live (the algorithm files' --data-dir) (default: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""
    rows: tuple[str, ...] = tuple(ROWS)
    """rows to run and report, from: orpo orpo_untrained mopo td3bc kit_mopo official_orpo"""
    seeds: tuple[int, ...] = (1, 2, 3)
    """seeds; each row runs each seed"""
    epochs: int = 50
    """epochs of every row"""
    steps_per_epoch: int = 1000
    """gradient steps per epoch of every row"""
    rollout_batch_size: int = 5000
    """model-rollout start states per epoch, every model-based row (the paper's 50000, cut for a CPU)"""
    eval_episodes: int = 5
    """evaluation episodes after every epoch, every row (the paper's 10, cut for a CPU)"""
    dynamics_max_epochs: Optional[int] = None
    """cap every row's ensemble fit at this many epochs, ours and the peers' alike (default: each fits until its own
    early stopping, 5 epochs without a 1 % holdout gain)"""
    order: Literal["seed", "row"] = "seed"
    """the order runs start in: `seed` (every row of the first seed, then the next seed) or `row` (every seed of
    the first of --rows, then the next row; e.g. the pairs' rows before the long `orpo` ones)"""
    jobs: int = 2
    """runs at once"""
    threads: int = 1
    """torch CPU threads per run (OMP_NUM_THREADS)"""
    cuda: bool = False
    """run on a CUDA GPU where present"""
    algo_flags: str = ""
    """more flags for our rows' new runs, written with '=' (tests: --algo-flags='--hidden-dims 32 32')"""
    share_ensemble: bool = True
    """our model-based rows load the dynamics.pt that the seed's `orpo` run fitted (--no-share-ensemble: each fits)"""
    kit_source: str = "https://github.com/yihaosun1124/OfflineRL-Kit"
    """OfflineRL-Kit: a git URL or a local git dir (benchmarks/peers.py --source)"""
    orpo_source: str = "https://github.com/George-Chia/ORPO"
    """the official ORPO code: a git URL or a local git dir (benchmarks/peers.py --source)"""
    runs_dir: str = "runs/compare"
    """where the runs go (checkpoints included; not committed)"""
    results: str = DEFAULT_RESULTS
    """where finished runs' config.json, metrics.csv and summary.json are copied, and the report is drawn from"""
    report_only: bool = False
    """draw the report from --results without running anything"""
    out: str = os.path.join(ROOT, "docs", "compare")
    """the report's stem: OUT.md and OUT.png"""
    reps: int = 10000
    """bootstrap resamples"""


# ---------------------------------------------------------------- tasks
@dataclass
class Task:
    dataset: str
    row: str
    seed: int

    @property
    def key(self) -> str:
        return f"{slug(self.dataset)}/{self.row}/seed{self.seed}"


def slug(dataset: str) -> str:
    return dataset.replace("/", "_")


def task_dir(args: Args, t: Task) -> str:
    return os.path.join(args.runs_dir, t.key)


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_dir_of(args: Args, t: Task) -> Optional[str]:
    """The run directory that holds the task's config.json: ours one level down (the script names it), a peer's is
    the task directory itself."""
    d = task_dir(args, t)
    if ROWS[t.row][0] == "peer":
        return d if os.path.isfile(os.path.join(d, "config.json")) else None
    found = (
        sorted(e.path for e in os.scandir(d) if os.path.isfile(os.path.join(e.path, "config.json")))
        if (os.path.isdir(d))
        else []
    )
    return found[-1] if found else None


def finished(run_dir: Optional[str]) -> bool:
    s = read_json(os.path.join(run_dir, "summary.json")) if run_dir else None
    return bool(s and s.get("status") == "finished")


def dataset_file(args: Args, dataset: str) -> str:
    if dataset.endswith(".hdf5"):
        return dataset
    base = args.data_dir or os.environ.get("D4RL_DATASET_DIR") or os.path.expanduser("~/.d4rl/datasets")
    return os.path.join(base, f"{dataset}.hdf5")


def eval_env_of(dataset: str) -> str:
    name = os.path.basename(dataset).split("-")[0].split("_")[0].lower()
    envs = {"hopper": "Hopper-v4", "walker2d": "Walker2d-v4", "halfcheetah": "HalfCheetah-v4"}
    if name not in envs:
        raise UserError(f"cannot tell the MuJoCo env of {dataset!r}: name it hopper-*, walker2d-* or halfcheetah-*")
    return envs[name]


_FLAGS: dict[str, set] = {}


def script_flags(script: str) -> set:
    """The flags an algorithm file takes (from its --help), so a cut it lacks (td3bc: no rollouts) is left out."""
    if script not in _FLAGS:
        out = subprocess.run(
            [sys.executable, os.path.join(ROOT, "algorithms", f"{script}.py"), "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        ).stdout
        _FLAGS[script] = {w.split("=")[0].rstrip(",") for w in out.split() if w.startswith("--")}
    return _FLAGS[script]


def own_flags(tokens: list[str], known: set) -> list[str]:
    """The --algo-flags groups (a flag and its values) the script takes; td3bc.py has no ensemble flags."""
    groups: list[list[str]] = []
    for tok in tokens:
        if tok.startswith("--") or not groups:
            groups.append([tok])
        else:
            groups[-1].append(tok)
    return [tok for g in groups if g[0].split("=")[0] in known for tok in g]


def shared_dynamics(args: Args, t: Task) -> Optional[str]:
    """The dynamics.pt this task loads, '' while it is not there yet, None when the task fits its own."""
    if not (args.share_ensemble and ROWS[t.row][0] == "ours" and t.row != SHARE_FROM and SHARE_FROM in args.rows):
        return None
    if "--load-dynamics-path" not in script_flags(ROWS[t.row][1]):
        return None  # td3bc: no model
    src = run_dir_of(args, Task(t.dataset, SHARE_FROM, t.seed))
    path = os.path.join(src, "dynamics.pt") if src else ""
    return path if path and os.path.isfile(path) else ""


def command(args: Args, t: Task) -> list[str]:
    kind, name, extra, _ = ROWS[t.row]
    cap = [] if args.dynamics_max_epochs is None else ["--dynamics-max-epochs", str(args.dynamics_max_epochs)]
    d = task_dir(args, t)
    cuda = ["--cuda" if args.cuda else "--no-cuda"]
    if kind == "peer":
        source = args.kit_source if name == "kit-mopo" else args.orpo_source
        return (
            [
                sys.executable,
                os.path.join(ROOT, "benchmarks", "peers.py"),
                "--peer",
                name,
                "--source",
                source,
                "--dataset-path",
                dataset_file(args, t.dataset),
                "--eval-env",
                eval_env_of(t.dataset),
                "--seed",
                str(t.seed),
                "--epochs",
                str(args.epochs),
                "--steps-per-epoch",
                str(args.steps_per_epoch),
                "--rollout-batch-size",
                str(args.rollout_batch_size),
                "--eval-episodes",
                str(args.eval_episodes),
                "--run-dir",
                d,
                "--threads",
                str(args.threads),
            ]
            + cuda
            + cap
        )
    script = os.path.join(ROOT, "algorithms", f"{name}.py")
    run = run_dir_of(args, t)
    if run:  # ours resume in place (a run killed before its first checkpoint refits)
        return [sys.executable, script, "--resume", run] + cuda
    cmd = (
        [
            sys.executable,
            script,
            "--env",
            t.dataset,
            "--seed",
            str(t.seed),
            "--runs-dir",
            d,
            "--epochs",
            str(args.epochs),
            "--steps-per-epoch",
            str(args.steps_per_epoch),
            "--eval-every",
            "1",
            "--eval-episodes",
            str(args.eval_episodes),
            "--eval-env",
            eval_env_of(t.dataset),
        ]
        + cuda
        + extra
    )
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    cmd += own_flags(shlex.split(args.algo_flags), script_flags(name))
    if "--rollout-batch-size" in script_flags(name):
        cmd += ["--rollout-batch-size", str(args.rollout_batch_size)]
    if "--dynamics-max-epochs" in script_flags(name):
        cmd += cap
    dyn = shared_dynamics(args, t)
    if dyn:
        cmd += ["--load-dynamics-path", dyn]
    return cmd


# ---------------------------------------------------------------- running
def copy_results(args: Args, t: Task) -> None:
    """A finished run's small files to --results (temp names, then renames)."""
    src, dst = run_dir_of(args, t), os.path.join(args.results, t.key)
    os.makedirs(dst, exist_ok=True)
    for name in ("config.json", "metrics.csv", "summary.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name + ".tmp"))
        os.replace(os.path.join(dst, name + ".tmp"), os.path.join(dst, name))


def record_dataset(args: Args, dataset: str) -> None:
    """The behaviour policy's score from the data file's attrs, kept beside the results for the report."""
    import h5py

    path = dataset_file(args, dataset)
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        attrs["transitions"] = int(f["rewards"].shape[0])
    keep = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    keep = {k: v for k, v in keep.items() if isinstance(v, (int, float, str))}
    dst = os.path.join(args.results, slug(dataset))
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "dataset.json.tmp"), "w") as f:
        json.dump(keep | {"file": os.path.basename(path)}, f, indent=1)
    os.replace(os.path.join(dst, "dataset.json.tmp"), os.path.join(dst, "dataset.json"))


def tasks_of(args: Args) -> list[Task]:
    """Every run, in the order they start (a task waiting for its seed's ensemble lets the next one go first)."""
    if args.order == "row":
        return [Task(d, r, s) for r in args.rows for d in args.env for s in args.seeds]
    return [Task(d, r, s) for s in args.seeds for d in args.env for r in args.rows]


def run_all(args: Args) -> int:
    tasks = tasks_of(args)
    for d in args.env:
        if not os.path.isfile(dataset_file(args, d)):
            raise UserError(
                f"no dataset file {dataset_file(args, d)}: make it with datasets/ (docs/data.md) or pass --data-dir"
            )
        record_dataset(args, d)
    todo, done = [], 0
    for t in tasks:
        if finished(run_dir_of(args, t)):
            copy_results(args, t)
            done += 1
        else:
            todo.append(t)
    print(f"compare: {len(tasks)} runs, {done} finished, {len(todo)} to run, {args.jobs} at a time", flush=True)
    running: dict[str, tuple[Task, subprocess.Popen, float, object]] = {}
    failed = []
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "WANDB_MODE": "offline",
    }
    try:
        while todo or running:
            for t in list(todo):
                if len(running) >= args.jobs:
                    break
                if shared_dynamics(args, t) == "":
                    continue  # waits for its seed's orpo run to save the ensemble
                d = task_dir(args, t)
                if ROWS[t.row][0] == "peer" and os.path.isdir(d):
                    shutil.rmtree(d)  # an unfinished peer run starts over
                os.makedirs(d, exist_ok=True)
                cmd = command(args, t)
                log = open(d.rstrip("/") + ".log", "a")
                log.write(f"\n$ {shlex.join(cmd)}\n")
                log.flush()
                running[t.key] = (
                    t,
                    subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT),
                    time.time(),
                    log,
                )
                todo.remove(t)
                print(f"  start  {t.key}", flush=True)
            if todo and not running:  # every waiting task waits for an orpo run that is not coming
                for t in todo:
                    failed.append((t, f"its seed's {SHARE_FROM} run saved no dynamics.pt"))
                break
            time.sleep(2)
            for key, (t, p, t0, log) in list(running.items()):
                if p.poll() is None:
                    continue
                log.close()
                del running[key]
                minutes = (time.time() - t0) / 60
                if p.returncode == 0 and finished(run_dir_of(args, t)):
                    copy_results(args, t)
                    print(f"  done   {t.key} in {minutes:.1f} min", flush=True)
                else:
                    failed.append((t, f"exit {p.returncode}, see {task_dir(args, t)}.log"))
                    print(f"  FAILED {t.key} (exit {p.returncode}, {task_dir(args, t)}.log)", flush=True)
    except KeyboardInterrupt:
        for t, p, _, log in running.values():
            p.send_signal(signal.SIGTERM)  # our runs checkpoint on SIGTERM
        for t, p, _, log in running.values():
            p.wait()
            log.close()
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    for t, why in failed:
        print(f"error: {t.key}: {why}", file=sys.stderr)
    return 1 if failed else 0


# ---------------------------------------------------------------- report
def load_results(results: str) -> dict:
    """{dataset: {"dataset": attrs, "rows": {row: {seed: {"config", "summary", "curve": [(epoch, score)]}}}}}"""
    out = {}
    if not os.path.isdir(results):
        return out
    for ds in sorted(e.name for e in os.scandir(results) if e.is_dir()):
        entry = {"dataset": read_json(os.path.join(results, ds, "dataset.json")) or {}, "rows": {}}
        for row in ROWS:
            for seed_dir in sorted(
                os.scandir(os.path.join(results, ds, row)) if os.path.isdir(os.path.join(results, ds, row)) else [],
                key=lambda e: e.name,
            ):
                summary = read_json(os.path.join(seed_dir.path, "summary.json"))
                if not summary or summary.get("status") != "finished":
                    continue
                with open(os.path.join(seed_dir.path, "metrics.csv")) as f:
                    metrics = list(csv.DictReader(f))
                curve = [
                    (int(float(r["epoch"])), float(r["eval/normalized_score"]))
                    for r in metrics
                    if r.get("eval/normalized_score") not in (None, "")
                ]
                entry["rows"].setdefault(row, {})[int(seed_dir.name[4:])] = {
                    "config": read_json(os.path.join(seed_dir.path, "config.json")) or {},
                    "summary": summary,
                    "curve": curve,
                    "metrics": metrics,
                }
        if entry["rows"]:
            out[ds] = entry
    return out


def last10(curve: list) -> float:
    return float(np.mean([v for _, v in curve[-10:]]))


def boot_mean(x: np.ndarray, reps: int, rng: np.random.Generator) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean over seeds (x: [seeds] or [seeds, epochs])."""
    idx = rng.integers(0, len(x), size=(reps, len(x)))
    means = x[idx].mean(1)
    return np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0)


def interval(lo: float, hi: float, n: int, fmt: str = ".1f") -> str:
    return f"[{lo:{fmt}}, {hi:{fmt}}]" if n >= 2 else "(1 seed: no interval)"


def curves_of(runs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Epochs common to every seed, and the scores [seeds, epochs]."""
    n = min(len(r["curve"]) for r in runs.values())
    epochs = np.array([e for e, _ in next(iter(runs.values()))["curve"][:n]])
    return epochs, np.array([[v for _, v in r["curve"][:n]] for r in runs.values()])


# the pipeline's order: the model first, the score last
DIAGNOSTIC_ORDER = ("dynamics/", "rollout/", "losses/", "eval/")


def run_means(metrics: list[dict], shared: Optional[list[dict]]) -> dict[str, float]:
    """A run's mean of every logged quantity over its epochs; dynamics/* of a run that loaded its seed's ensemble come
    from the run that fitted it (`shared`)."""
    out = {}
    for rows in (shared or [], metrics):
        for key in {k for r in rows for k in r}:
            values = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
            skip = key.startswith(("charts/", "peer/")) or key in ("epoch", "dynamics/epochs", "eval/last10_score")
            if values and not skip and not key.endswith(("_std", "_seconds")):
                out[key] = float(np.mean(values))
    return out


def diagnostics(ours: dict, theirs: dict, fitted: dict, reps: int, rng: np.random.Generator) -> list[str]:
    """The quantities both rows log (the same definitions: docs/peers.md), in the pipeline's order, each a mean over
    the run's epochs and then over seeds [95 % bootstrap]; a quantity separates the rows when the intervals are
    disjoint. The first one that does is where to look for the cause."""
    means = {}
    for side, runs in (("ours", ours), ("theirs", theirs)):
        per_seed = [run_means(r["metrics"], fitted.get(seed) if side == "ours" else None) for seed, r in runs.items()]
        keys = set.intersection(*(set(m) for m in per_seed))
        means[side] = {k: np.array([m[k] for m in per_seed]) for k in keys}
    keys = sorted(
        set(means["ours"]) & set(means["theirs"]),
        key=lambda k: (next((i for i, p in enumerate(DIAGNOSTIC_ORDER) if k.startswith(p)), 9), k),
    )
    lines = ["| quantity (mean over epochs) | ours | theirs | separates |", "|---|---|---|---|"]
    first = None
    for k in keys:
        a, b = means["ours"][k], means["theirs"][k]
        (alo, ahi), (blo, bhi) = boot_mean(a, reps, rng), boot_mean(b, reps, rng)
        apart = min(len(a), len(b)) >= 2 and (ahi < blo or bhi < alo)
        first = first or (k if apart else None)
        cells = [f"{x.mean():.4g} {interval(lo, hi, len(x), '.4g')}" for x, lo, hi in ((a, alo, ahi), (b, blo, bhi))]
        lines.append(f"| {k} | {cells[0]} | {cells[1]} | {'**yes**' if apart else 'no'} |")
    verdict = f"the first quantity that separates them: **{first}**" if first else "no quantity separates them"
    return [f"In the pipeline's order ({', '.join(DIAGNOSTIC_ORDER)}), {verdict}.", "", *lines, ""]


def report(args: Args) -> str:
    data = load_results(args.results)
    if not data:
        raise UserError(f"no finished run in {args.results}: run the comparison first (without --report-only)")
    rng = np.random.default_rng(0)
    lines = [
        "# Learning curves beside the authors' code (issue 19)",
        "",
        f"Made by `python benchmarks/compare.py --report-only` from `{os.path.relpath(args.results, ROOT)}/`. "
        "Score: D4RL normalised score of the evaluation after each epoch; last-10: mean of the last 10 "
        "evaluations of a run; intervals: 95 % percentile bootstrap over seeds "
        f"({args.reps} resamples).",
        "",
    ]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(6.5 * len(data), 4.4), squeeze=False)
    for ax, (ds, entry) in zip(axes[0], data.items()):
        a = entry["dataset"]
        behaviour = a.get("behavior_normalized_score")
        lines += [
            f"## {ds}",
            "",
            f"Data: `{a.get('file', ds)}`, {a.get('transitions', '?')} transitions, behaviour policy's mean "
            f"return {a.get('behavior_mean_return', float('nan')):.1f} (normalised "
            f"{behaviour if behaviour is None else round(behaviour, 1)}).",
            "",
            "| row | seeds | epochs | last-10 score, mean [95 % CI] | per seed | final | hours per run | device |",
            "|---|---|---|---|---|---|---|---|",
        ]
        stats = {}
        for row, runs in entry["rows"].items():
            x = np.array([last10(r["curve"]) for r in runs.values()])
            lo, hi = boot_mean(x, args.reps, rng)
            epochs, ys = curves_of(runs)
            stats[row] = {"x": x, "lo": lo, "hi": hi, "epochs": epochs, "ys": ys, "seeds": list(runs)}
            devices = sorted(
                {str(r["summary"].get("device_name") or r["summary"].get("device") or "?") for r in runs.values()}
            )
            hours = np.mean([r["summary"].get("wall_seconds", float("nan")) for r in runs.values()]) / 3600
            final = np.mean([r["curve"][-1][1] for r in runs.values()])
            seeds = ", ".join(f"{s}: {v:.1f}" for s, v in zip(runs, x))
            lines.append(
                f"| {ROWS[row][3]} | {len(runs)} | {int(epochs[-1]) if len(epochs) else 0} | "
                f"{x.mean():.1f} {interval(lo, hi, len(x))} | {seeds} | {final:.1f} | {hours:.2f} | "
                f"{'; '.join(devices)} |"
            )
            steps = epochs * args.steps_per_epoch
            blo, bhi = boot_mean(ys, args.reps, rng)
            (line,) = ax.plot(
                steps,
                ys.mean(0),
                label=f"{ROWS[row][3]} ({len(runs)} seeds)",
                linestyle="--" if ROWS[row][0] == "peer" else "-",
            )
            ax.fill_between(steps, blo, bhi, alpha=0.15, color=line.get_color())
        if behaviour is not None:
            ax.axhline(behaviour, color="grey", linewidth=0.8, linestyle=":", label="behaviour policy")
        ax.set(title=ds, xlabel="gradient steps", ylabel="D4RL normalised score")
        ax.legend(fontsize=7)
        lines += [
            "",
            "Verdicts (ours vs theirs): **agree** when the last-10 intervals overlap and the per-epoch 95 % "
            "bands overlap at ≥ 80 % of the epochs; otherwise **differ** (then the first quantity that "
            "separates them is looked for; docs/peers.md lists where the settings differ); **undecided** with "
            f"fewer than {MIN_SEEDS} seeds in either row.",
            "",
        ]
        pair_tables = []
        for ours, theirs in PAIRS + CONTRASTS:
            if ours not in stats or theirs not in stats:
                continue
            s, o = stats[ours], stats[theirs]
            n = min(len(s["epochs"]), len(o["epochs"]))
            slo, shi = boot_mean(s["ys"][:, :n], args.reps, rng)
            olo, ohi = boot_mean(o["ys"][:, :n], args.reps, rng)
            overlap = float(np.mean((slo <= ohi) & (olo <= shi)))
            last_overlap = s["lo"] <= o["hi"] and o["lo"] <= s["hi"]
            common = [seed for seed in s["seeds"] if seed in o["seeds"]]
            diff = np.array([s["x"][s["seeds"].index(c)] - o["x"][o["seeds"].index(c)] for c in common])
            if (ours, theirs) in PAIRS:
                verdict = "agree" if last_overlap and overlap >= 0.8 else "differ"
                detail = (
                    f"intervals {'overlap' if last_overlap else 'do not overlap'}; bands overlap at "
                    f"{100 * overlap:.0f} % of {n} epochs"
                )
                few = min(len(s["x"]), len(o["x"])) < MIN_SEEDS
                if few:  # a percentile bootstrap over 1 or 2 seeds is their range: no test of anything
                    verdict, detail = "undecided", f"fewer than {MIN_SEEDS} seeds per row: {detail}"
                lines.append(
                    f"- {ROWS[ours][3]} vs {ROWS[theirs][3]}: **{verdict}** (last-10 "
                    f"{s['x'].mean():.1f} vs {o['x'].mean():.1f}; {detail})"
                )
                fitted = {seed: r["metrics"] for seed, r in entry["rows"].get(SHARE_FROM, {}).items()}
                pair_tables += [f"### {ROWS[ours][3]} vs {ROWS[theirs][3]}", ""]
                if few:
                    pair_tables += [
                        f"Fewer than {MIN_SEEDS} seeds per row: each interval is the seeds' range, so 'separates' "
                        "below is a description, not a test.",
                        "",
                    ]
                pair_tables += diagnostics(entry["rows"][ours], entry["rows"][theirs], fitted, args.reps, rng)
            elif len(common):
                dlo, dhi = boot_mean(diff, args.reps, rng)
                lines.append(
                    f"- {ROWS[ours][3]} − {ROWS[theirs][3]}, last-10, paired by seed: "
                    f"{np.mean(diff):+.1f} {interval(dlo, dhi, len(diff), '+.1f')} ({len(diff)} seeds)"
                )
        lines.append("")
        if pair_tables:
            lines += ["Each pair quantity by quantity, ours vs theirs:", "", *pair_tables]
    cpus = sorted(
        {
            str(r["summary"].get("device_name"))
            for e in data.values()
            for runs in e["rows"].values()
            for r in runs.values()
        }
    )
    lines.append(f"Devices: {'; '.join(cpus)}.")
    fig.suptitle(
        "Learning curves: ours (solid) and the authors' code (dashed), same data, seeds and evaluation", fontsize=9
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out + ".png.tmp.png", dpi=110)
    os.replace(args.out + ".png.tmp.png", args.out + ".png")
    md = "\n".join(lines) + "\n" + f"\n![learning curves]({os.path.basename(args.out)}.png)\n"
    with open(args.out + ".md.tmp", "w") as f:
        f.write(md)
    os.replace(args.out + ".md.tmp", args.out + ".md")
    return md


def check(args: Args) -> None:
    bad = [r for r in args.rows if r not in ROWS]
    if bad:
        raise UserError(f"unknown row {bad[0]!r}: choose from {' '.join(ROWS)}")
    for name, v, lo in (
        ("--epochs", args.epochs, 1),
        ("--steps-per-epoch", args.steps_per_epoch, 1),
        ("--rollout-batch-size", args.rollout_batch_size, 1),
        ("--eval-episodes", args.eval_episodes, 1),
        ("--jobs", args.jobs, 1),
        ("--threads", args.threads, 1),
        ("--reps", args.reps, 100),
    ):
        if v < lo:
            raise UserError(f"{name} must be at least {lo}, not {v}")
    if not args.seeds:
        raise UserError("--seeds needs at least one seed")


def stop(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (and SIGINT where a shell ignored it) stops the runs as Ctrl-C does


def main(args: Args) -> int:
    check(args)
    signal.signal(signal.SIGTERM, stop)
    rc = 0 if args.report_only else run_all(args)
    if rc == 130:
        return rc
    md = report(args)
    print(md)
    print(f"wrote {args.out}.md and {args.out}.png ({platform.node()})")
    return rc


def cli(argv: list[str]) -> int:
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = tyro.cli(Args, args=argv, description=__doc__)
    except SystemExit as e:
        if e.code not in (0, None):
            print(f"error: {one_line_tyro_error(err.getvalue())}", file=sys.stderr)
            return 2
        sys.stderr.write(err.getvalue())
        return 0
    try:
        return main(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
