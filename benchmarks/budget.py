"""What the CPU budget cut costs: MOPO and ORPO (π^o trained) on one dataset at the paper's 50,000 rollout start
states instead of 5,000 (starts50k), and with the ensemble fit uncapped (uncapped: early stopping only, one ensemble
per seed through the launchers' cache), beside compare.py's 5,000-start, fit-capped runs (results/compare/).

    python benchmarks/budget.py                    # runs what is missing (resumes an unfinished run), then reports
    python benchmarks/budget.py --only mopo:starts50k mopo:uncapped     # some runs only (e.g. one per core)
    python benchmarks/budget.py --report-only      # redraw the report from --results

Every run: --seed, --epochs × 1000 gradient steps, 5 evaluation episodes, the dataset's presets. Finished runs' small
files go to --results/<cut>/<row>/; the report (OUT.md, OUT.png) reads those and --baseline alone. The committed runs
are results/budget/; docs/budget.md comes from `python benchmarks/report.py`.
"""

import csv
import fcntl
import glob
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import toolbox  # noqa: E402  (the scripts' one error type, flags and command line)
from toolbox import UsageError, UserError, replace_atomically  # noqa: E402
import plumbing  # noqa: E402  (on sys.path through toolbox: its flag checks)
import runinfo  # noqa: E402  (the runs' provenance, as compare.py and report.py show it)
import pages  # noqa: E402  (the page's Jinja2 template)

CUTS = {"baseline": None,  # compare.py's runs: 5,000 start states, fit capped at 20 epochs
        "starts50k": ["--rollout-batch-size", "50000", "--dynamics-max-epochs", "20"],
        "uncapped": ["--rollout-batch-size", "5000"]}  # fmt: skip
ROWS = ("mopo", "orpo")
LABELS = {"mopo": "MOPO (ours)", "orpo": "ORPO, π^o trained (ours)"}
CUT_LABELS = {"baseline": "5,000 starts, fit capped", "starts50k": "50,000 starts", "uncapped": "fit uncapped"}


@dataclass
class Args:
    env: str = "local/hopper-medium"
    """the dataset (--env of the algorithm files)"""
    data_dir: str | None = None
    """where the datasets live (default: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""
    seed: Annotated[int, "[0, 4294967296)"] = 1
    """the seed of every run (the baseline's run of this seed is the comparison)"""
    epochs: Annotated[int, "[1, inf)"] = 50
    """epochs per run, 1000 gradient steps each (the baseline's)"""
    only: tuple[str, ...] = ("mopo:starts50k", "mopo:uncapped", "orpo:starts50k", "orpo:uncapped")
    """the runs to make, as ROW:CUT (e.g. orpo:uncapped; one per core)"""
    runs_dir: str = os.path.join(ROOT, "runs", "budget")
    """where the runs go: --runs-dir/<cut>/<row>/"""
    results: str = os.path.join(ROOT, "runs", "budget_results")
    """where finished runs' small files are copied: --results/<cut>/<row>/ (the committed ones: results/budget/)"""
    baseline: str = os.path.join(ROOT, "results", "compare")
    """compare.py's results folder, holding the 5,000-start runs (read only)"""
    out: str = os.path.join(ROOT, "runs", "budget_results", "budget")
    """the report's stem: OUT.md and OUT.png (docs/budget.md comes from `python benchmarks/report.py`)"""
    report_only: bool = False
    """draw the report from --results without running anything"""
    dynamics_cache: str = os.path.join("runs", "dynamics_cache")
    """the launchers' ensemble cache (benchmarks/toolbox.py): one fitted ensemble per (dataset, dynamics flags, seed),
    shared with compare.py's and scores.py's runs ('': every run fits its own)"""


def tasks(args: Args) -> list[tuple[str, str]]:
    every = [(row, cut) for row in ROWS for cut in CUTS if cut != "baseline"]
    picked = [tuple(t.split(":", 1)) for t in args.only]
    bad = [":".join(t) for t in picked if t not in every]
    if bad:
        raise UsageError(f"--only {bad[0]}: use ROW:CUT with ROW in {', '.join(ROWS)} and CUT in starts50k, uncapped")
    return picked


def summary_of(folder: str) -> dict:
    return runinfo.read_json(os.path.join(folder, "summary.json"))


def run_one(args: Args, row: str, cut: str) -> None:
    """Start, resume or skip one run; a finished one's small files go to --results/<cut>/<row>/."""
    folder = os.path.join(args.runs_dir, cut, row)
    run = next(iter(sorted(glob.glob(os.path.join(folder, "*", "config.json")))), None)
    run = run and os.path.dirname(run)
    if not (run and summary_of(run).get("status") == "finished"):
        script = os.path.join(ROOT, "algorithms", f"{row}.py")
        if run and os.path.isfile(os.path.join(run, "checkpoint.pt")):
            cmd = toolbox.launch_command(script, "--resume", run)
        else:
            if run:  # stopped before its first checkpoint: start it again, unless a live run holds it
                with open(os.path.join(run, "run.lock"), "a+") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise UserError(f"{run} is in use by another process; let it finish or stop it") from None
                shutil.rmtree(run)
            cmd = toolbox.launch_command(
                script, "--env", args.env, "--seed", str(args.seed), "--epochs", str(args.epochs)
            )
            cmd += ["--eval-episodes", "5", "--no-cuda", "--runs-dir", folder, "--exp-name", f"{row}_{cut}"]
            cmd += CUTS[cut] + (["--data-dir", args.data_dir] if args.data_dir else [])
        print(f"budget: {row}:{cut}: {' '.join(cmd)}", flush=True)
        env = os.environ | {"OMP_NUM_THREADS": "1"}
        log = os.path.join(args.runs_dir, f"{cut}_{row}.log")
        with open(log, "a") as log, toolbox.cached_ensemble(args.dynamics_cache, cmd) as cmd:  # one fit per seed
            child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                rc = child.wait()
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run checkpoints on SIGTERM; wait for it to save
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                child.send_signal(signal.SIGTERM)
                child.wait()
                raise
        if rc:
            raise UserError(f"{row}:{cut} exited with {rc}; see {log.name}")
        run = os.path.dirname(sorted(glob.glob(os.path.join(folder, "*", "config.json")))[0])
    dst = os.path.join(args.results, cut, row)
    os.makedirs(dst, exist_ok=True)
    for name in ("config.json", "metrics.csv", "summary.json"):
        replace_atomically(os.path.join(dst, name), lambda tmp, n=name: shutil.copyfile(os.path.join(run, n), tmp))


def load(args: Args, row: str, cut: str) -> dict | None:
    slug = args.env.replace("/", "_")
    folder = os.path.join(args.baseline, slug, row, f"seed{args.seed}") if cut == "baseline" else os.path.join(
        args.results, cut, row)  # fmt: skip
    if summary_of(folder).get("status") != "finished":
        return None
    with open(os.path.join(folder, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    config = runinfo.read_json(os.path.join(folder, "config.json"))
    col = lambda k: np.array([float(r[k]) if r.get(k) not in (None, "") else np.nan for r in rows])  # noqa: E731
    fit = rows[0] if rows and rows[0].get("dynamics/holdout_mse") not in (None, "") else {}
    summary = summary_of(folder)
    return dict(epoch=col("epoch"), score=col("eval/normalized_score"), q=col("losses/q"),
                q_o=col("rollout_policy/q") if "rollout_policy/q" in rows[-1] else None,
                u=col("rollout/u") if "rollout/u" in rows[-1] else col("rollout/u_pessimistic"), summary=summary,
                config=config, starts=config.get("rollout_batch_size"), cap=config.get("dynamics_max_epochs"),
                loaded=config.get("load_dynamics_path") is not None, fit=fit, metrics=rows,
                notes=runinfo.run_notes(config, summary, runinfo.load_provenance(folder), rows))  # fmt: skip


def load_all(args: Args) -> dict:
    """{(row, cut): load(...)} for every row and cut (None where not finished)."""
    return {(row, cut): load(args, row, cut) for row in ROWS for cut in CUTS}


def holdout_mse(runs: dict, row: str, cut: str) -> float | None:
    """The ensemble's holdout MSE: the run's own fit, or the fit of its seed's other row it loaded."""
    r = runs.get((row, cut))
    fit = (r or {}).get("fit") or (runs.get(("orpo" if row == "mopo" else "mopo", cut)) or {}).get("fit")
    return float(fit["dynamics/holdout_mse"]) if fit else None


def draw(runs: dict, args: Args) -> None:
    """Score and Q by epoch, a line per run: colour by row, style by cut."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"baseline": "-", "starts50k": "--", "uncapped": ":"}
    for (row, cut), r in runs.items():
        for ax, key in zip(axes, ("score", "q")) if r is not None else ():
            keep = ~np.isnan(r[key])
            ax.plot(r["epoch"][keep], r[key][keep], styles[cut], color="C0" if row == "mopo" else "C3",
                    label=f"{LABELS[row]}, {cut}")  # fmt: skip
    axes[0].set(
        xlabel="epoch (1000 gradient steps)", ylabel="D4RL normalised score", title=f"{args.env}, seed {args.seed}"
    )
    axes[1].set(xlabel="epoch (1000 gradient steps)", ylabel="mean Q on training batches", yscale="symlog")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    replace_atomically(args.out + ".png", lambda tmp: fig.savefig(tmp, dpi=110), suffix=".tmp.png")


def who(keys: list, finished: list) -> str:
    """The runs a note holds for: every run, every run of a row, or each by name."""
    if len(keys) == len(finished):
        return "every run"
    parts = []
    for row in ROWS:
        mine = [cut for r, cut in keys if r == row]
        if mine and len(mine) == sum(r == row for r, _ in finished):
            parts.append(f"every {LABELS[row]} run")
        else:
            parts += [f"{LABELS[row]} ({CUT_LABELS[cut]})" for cut in mine]
    return "; ".join(parts)


def report(args: Args, made_by: str | None = None, figure: bool = True) -> str:
    """The budget page (args.out.md, from templates/budget.md.j2) and figure (args.out.png); `made_by`: the sentence
    that says how the page is made (default: this script's --report-only)."""
    runs = load_all(args)
    if not any(runs.values()):
        raise UserError(f"no finished run in {args.results} or {args.baseline}; run without --report-only first")
    made_by = made_by or (f"Made by `python benchmarks/budget.py --report-only` from `{os.path.relpath(args.results)}/` "
                          f"and the baseline runs in `{os.path.relpath(args.baseline)}/`.")  # fmt: skip
    table, notes = [], {}
    for (row, cut), r in runs.items():
        if r is None:
            table.append([LABELS[row], cut, "not finished", *[""] * 7])
            continue
        s, fit, mse = r["summary"], r["fit"], holdout_mse(runs, row, cut)
        how = f"capped at {r['cap']} epochs" if r["cap"] else "early stopping only"
        how = f"{how}, {fit['dynamics/epochs']} epochs" if fit else f"{how} (loaded from its seed's other run)"
        q = r["q"][~np.isnan(r["q"])]
        table.append([LABELS[row], f"{r['starts']:,}", how, "(loaded)" if mse is None else f"{mse:.4f}",
                      f"{s['last10_score']:.1f}", f"{s['normalized_score']:.1f}", f"{q[-10:].mean():.1f}",
                      f"{q.max():.1f}", f"{s['wall_seconds'] / 3600:.2f}", s["device_name"]])  # fmt: skip
        for note in r["notes"]:
            notes.setdefault(note, []).append((row, cut))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if figure:
        draw(runs, args)
    finished = [key for key, r in runs.items() if r is not None]
    head = ["row", "start states", "ensemble fit", "holdout MSE", "last-10 score", "final", "Q, last 10", "Q, max",
            "hours", "device"]  # fmt: skip
    md = pages.render("budget.md.j2", None, made_by=made_by, env=args.env, seed=args.seed,
                      table="\n".join(runinfo.md_table(head, table)), figure=os.path.basename(args.out) + ".png",
                      notes={note: who(keys, finished) for note, keys in notes.items()})  # fmt: skip
    toolbox.write_text(args.out + ".md", md)
    return md


def main(args: Args) -> int:
    plumbing.check_args(args)  # before any run starts: a bad flag would fail each run after its start
    picked = tasks(args)
    if not args.report_only:
        os.makedirs(args.runs_dir, exist_ok=True)
        for row, cut in picked:
            run_one(args, row, cut)
    print(report(args))
    return 0


def cli(argv: list[str]) -> int:
    return toolbox.cli(main, Args, argv, "interrupted: the running run saved a checkpoint; run the same command again "
                       "to resume", sigterm=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
