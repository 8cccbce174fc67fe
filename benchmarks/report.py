"""Every results page and figure from the stored runs in results/: `python benchmarks/report.py [--check]` (--check:
regenerate into a temporary folder, exit 1 naming the pages that differ). The numbers are computed here, once; the prose
and the relations each sentence states (holds()) live in benchmarks/templates/. Never edited by hand.
"""

import csv
import filecmp
import glob
import os
import re
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import budget  # noqa: E402
import compare  # noqa: E402
import pages  # noqa: E402  (the Jinja2 templates, their filters and checks)
import runinfo  # noqa: E402
import stats  # noqa: E402
import toolbox  # noqa: E402  (the scripts' one error type, flags and command line)
from pages import ReportError, holds, rng  # noqa: E402
from runinfo import minus  # noqa: E402

COMMAND = "python benchmarks/report.py"
MED, REP = "local_hopper-medium", "local_hopper-medium-replay"
D4RL_SIZES = {MED: ("hopper-medium-v2", 1_000_000), REP: ("hopper-medium-replay-v2", 402_000)}
GPU_CHECK = os.path.join("gpu", "2026-11-26-h100", "call2", "gpu_check.json")
GPU_CONCURRENT = os.path.join("gpu", "2026-11-27-h100", "gpu_check.json")
BLOCKS = (("README.md", "results", "readme.md.j2"), ("docs/toy.md", "toy results", "toy.md.j2"),
          ("docs/data.md", "jump data", "data.md.j2"))  # fmt: skip
PAGES = ["README.md", "docs/results.md", "docs/claim.md", "docs/compare.md", "docs/compare_shares.md",
         "docs/budget.md", "docs/toy.md", "docs/jump.md", "docs/jump_curves.md", "docs/data.md"]  # fmt: skip
FIGURES = ["docs/compare.png", "docs/compare_shares.png", "docs/budget.png", "docs/jump_curves.png"]
JUMP = "halfcheetah-jump-hard"
JUMP_OTHER = "halfcheetah-jump"  # the generalisation table's other row: its own section of docs/jump.md
# each jump task's data, as the README and docs/results.md name it (datasets/halfcheetah_jump.py makes both)
JUMP_DATA = {JUMP: "jump-hard data made here with the authors' recipe",
             JUMP_OTHER: "an online SAC's whole replay buffer made here with the authors' recipe"}  # fmt: skip
JUMP_DELTA = 500.0  # the equivalence margin of the jump contrasts, in raw return (the data's episodes: sd 440)
# the jump table's rows: (compare.py's row, its label, the paper's column); one without stored runs is left out
JUMP_ROWS = (
    ("td3bc", "TD3+BC (ours)", "TD3+BC"),
    ("official_td3bc", "TD3+BC, the authors' code (run_td3bc.py's jump-hard branch, as written)", "TD3+BC"),
    ("mopo", "MOPO (ours)", "MOPO"),
    ("official_mopo", "MOPO, the authors' code (run_mopo.py's jump-hard branch, λp 1, h 5)", "MOPO"),
    ("orpo", "ORPO, π^o trained (ours: the paper's method)", "ORPO"),
    ("orpo_untrained", "ORPO, π^o untrained (ours: run_orpo.py's rollout policy)", "ORPO"),
    ("official_orpo", "ORPO, the official code (run_orpo.py)", "ORPO"),
    ("official_orpo_readme", "ORPO, the official code with the README's shares (run_orpo.py)", "ORPO"),
    ("cql", "CQL (ours)", "CQL"),
    ("official_cql", "CQL, the authors' code (run_cql.py's jump-hard branch, its defaults)", "CQL"),
    ("combo", "COMBO (ours)", "COMBO"),
    ("official_combo", "COMBO, the authors' code (run_combo.py's jump-hard branch, its defaults)", "COMBO"),
)
JUMP_CORE = ("td3bc", "mopo", "orpo", "orpo_untrained", "official_orpo")
# the official scripts' defaults: --epoch (run_orpo.py L31, run_mopo.py L57, run_td3bc.py L43), --rollout-batch-size
# (run_orpo.py L66, run_mopo.py L47)
OFFICIAL_BUDGET = dict(epochs=1000, starts=50_000)
# π^p's own batch share in the README's jump-hard command (README L76, peers.JUMP_FLAGS)
README_SHARE = float(dict(zip(compare.peers.JUMP_FLAGS[::2], compare.peers.JUMP_FLAGS[1::2]))[
    "--final-policy-rollout-ratio-final"])  # fmt: skip
# the method's contrasts, then each of our files beside the authors' script for the same column of the paper
JUMP_CONTRASTS = (("orpo", "mopo"), ("orpo_untrained", "mopo"), ("orpo", "orpo_untrained"),
                  ("orpo_untrained", "official_orpo"), ("mopo", "official_mopo"), ("td3bc", "official_td3bc"),
                  ("orpo", "combo"), ("orpo_untrained", "combo"), ("cql", "official_cql"),
                  ("combo", "official_combo"))  # fmt: skip
# the short names of "ours − the authors' script" on the README and results.md (one table, so no pair goes unnamed)
AUTHORS_PAIR = {"orpo_untrained": "ORPO π^o untrained", "mopo": "MOPO", "td3bc": "TD3+BC", "cql": "CQL", "combo": "COMBO",
                "official_orpo": "run_orpo.py", "official_mopo": "run_mopo.py", "official_td3bc": "run_td3bc.py",
                "official_cql": "run_cql.py", "official_combo": "run_combo.py"}  # fmt: skip


@dataclass
class Args:
    results: str = os.path.join(ROOT, "results")
    """the stored runs (results/compare, results/compare_shares, results/budget, results/jump, results/toy_*)"""
    out_root: str = ROOT
    """where the pages go: OUT_ROOT/README.md and OUT_ROOT/docs/*.md (the repository itself by default)"""
    figures: bool = True
    """draw the figures too (docs/compare.png, docs/compare_shares.png, docs/budget.png, docs/jump_curves.png)"""
    check: bool = False
    """regenerate into a temporary folder and compare with the pages in --out-root; exit 1 naming those that differ"""


def render(template: str, width: int | None = 120, **context) -> str:
    return pages.render(template, width, COMMAND=COMMAND, MED=MED, REP=REP, **context)


# ---------------------------------------------------------------- numbers: the hopper comparison, the budget, the toy
def paper_scores(table: str = "1") -> dict:
    """{(dataset, column): (mean, std)} of one of the paper's tables (benchmarks/paper_scores.csv, from its LaTeX)."""
    with open(os.path.join(ROOT, "benchmarks", "paper_scores.csv")) as f:
        return {(r["dataset"], r["column"]): (float(r["mean"]), float(r["std"]) if r["std"] else None)
                for r in csv.DictReader(f) if r["table"] == table}  # fmt: skip


def uniform(values, what: str):
    holds(len(values := set(values)) == 1, f"every run has the same {what}")
    return values.pop()


def jump_files(results: str) -> list[dict]:
    """The jump datasets as compare.py recorded them beside their runs (results/jump/<task>/dataset.json)."""
    paths = sorted(glob.glob(os.path.join(results, "jump", "*", "dataset.json")))
    return [dict(runinfo.read_json(p), task=os.path.basename(os.path.dirname(p))) for p in paths]


def numbers(results: str) -> dict:
    """Everything the claim page, docs/results.md and the README's block say, from the stored runs."""
    C, S = (compare.summarize(os.path.join(results, name)) for name in ("compare", "compare_shares"))
    holds(MED in C and REP in C and REP in S, "results/compare holds both datasets, compare_shares medium-replay")
    orpo = [r for e in C.values() for r in e["runs"]["orpo"].values()]
    lrs = {tuple(runinfo.lr_at(r["metrics"], int(r["config"]["epochs"]) - k) for k in (10, 0)) for r in orpo}
    holds(len(lrs) == 1, "every π^o-trained run has the same LR schedule")
    # the cuts every run of results/compare shares, from their config.json files
    runs = [
        (compare.ROWS[row][0], r["config"]) for e in C.values() for row, rs in e["runs"].items() for r in rs.values()
    ]
    ours, peers = [c for side, c in runs if side == "ours"], [c.get("cli", {}) for side, c in runs if side == "peer"]
    model = [c for c in ours if c.get("rollout_batch_size") is not None] + peers
    bud = dict(epochs=uniform([c["epochs"] for c in ours + peers], "--epochs"),
               steps=uniform([c["steps_per_epoch"] for c in ours + peers], "steps/epoch"),
               starts=uniform([c["rollout_batch_size"] for c in model], "--rollout-batch-size"),
               cap=uniform([c["dynamics_max_epochs"] for c in model], "--dynamics-max-epochs"),
               episodes=uniform([c["eval_episodes"] for c in ours + peers], "--eval-episodes"),
               lr_annealed_over_run=all("sac_lr_horizon" not in c for c in ours),
               seeds=sorted({s for e in C.values() for runs in e["runs"].values() for s in runs}))  # fmt: skip
    c, paper = {ds: C[ds]["contrasts"] for ds in (MED, REP)}, paper_scores()
    n = dict(C=C, S=S, bud=bud, epochs=bud["epochs"], nseeds=len(bud["seeds"]), results=results, seed1=budget.Args.seed)
    for k, pair in (("tu", ("orpo", "orpo_untrained")), ("tm", ("orpo", "mopo")), ("um", ("orpo_untrained", "mopo"))):
        n[k] = {ds: c[ds][pair] for ds in (MED, REP)}
    (n["lr40"], n["lr50"]), n["lr0"] = lrs.pop(), uniform([r["config"]["sac_actor_lr"] for r in orpo], "π^o LR")
    n["beh"] = {ds: C[ds]["dataset"]["behavior_normalized_score"] for ds in (MED, REP)}
    n["q_o"] = {ds: {s: {int(float(r["epoch"])): float(r["rollout_policy/q"]) for r in run["metrics"] if r.get(
        "rollout_policy/q") not in (None, "")} for s, run in C[ds]["runs"]["orpo"].items()} for ds in (MED, REP)}  # fmt: skip
    n["dataset_line"] = " and ".join(f"{ds.replace('_', '/')} {int(C[ds]['dataset']['transitions']):,} transitions "
                                     f"(D4RL's {D4RL_SIZES[ds][0]}: {D4RL_SIZES[ds][1]:,})" for ds in (MED, REP))  # fmt: skip
    # the shares: ORPO untrained with the appendix's shares (results/compare) − the official command's (compare_shares)
    n["shares"] = compare.paired(C[REP]["rows"]["orpo_untrained"], S[REP]["rows"]["orpo_untrained"], 5.0)
    n["p"], n["pr"] = ({k: v for (d, k), v in paper.items() if d == ds} for ds in ("hopper-medium-v2",
                                                                                  "hopper-medium-replay-v2"))  # fmt: skip
    n["p_med"], n["p_rep"] = (n[k]["ORPO"][0] - n[k]["MOPO"][0] for k in ("p", "pr"))
    n["kit"], n["off"] = ({ds: C[ds]["pairs"][pair] for ds in (MED, REP)} for pair in (("mopo", "kit_mopo"),
                                                                                   ("orpo_untrained", "official_orpo")))  # fmt: skip
    n["like"] = S[REP]["pairs"][("orpo_untrained", "official_orpo")]
    n["pairs"] = [n["kit"][MED], n["kit"][REP], n["off"][MED], n["like"]]
    n["halves"] = [(p["hi"] - p["lo"]) / 2 for p in n["pairs"]]
    n["B"], n["toy_page"] = budget_numbers(n), toy_numbers(results)
    n["toy"] = n["toy_page"]["T"]["paper"]
    n["t_es"], n["t_ma"], n["t_o"] = (n["toy"]["table"][f"{k}|100"] for k in ("mopo|ensemble_std", "mopo|max_aleatoric",
                                                                             "orpo|max_aleatoric"))  # fmt: skip
    gpu = runinfo.read_json(os.path.join(results, GPU_CHECK)).get("phases", [])
    n["gpu"] = next((ph["seconds"] for ph in gpu if ph["phase"] == "epoch, all phases"), None)
    configs = runinfo.read_json(os.path.join(results, GPU_CONCURRENT)).get("concurrent", {}).get("configs", [])
    n["k"] = {f"{c['k']}{c['mode']}": c for c in configs if c.get("complete")}
    n["best"] = max(n["k"].values(), key=lambda c: c["run_epochs_per_hour"], default=None)
    J = jump_numbers(results)
    jumps = [J["summary"]] + [J["other"]["summary"]] * bool(J["other"]["summary"]["done"])  # a task once it has runs
    return dict(
        n, GPU_CHECK=GPU_CHECK, GPU_CONCURRENT=GPU_CONCURRENT, jump=J["summary"], jumps=jumps, J=J, DELTA=JUMP_DELTA
    )


def budget_numbers(n: dict) -> dict:
    """The budget cut (benchmarks/budget.py's runs, seed 1): MOPO and ORPO at 5,000 and 50,000 starts and uncapped."""
    folder, cuts = os.path.join(n["results"], "budget"), ("baseline", "starts50k", "uncapped")
    runs = budget.load_all(budget.Args(results=folder, baseline=os.path.join(n["results"], "compare")))
    holds(all(runs.get((r, c)) is not None for r in ("mopo", "orpo") for c in cuts), "every budget run is finished")
    last = lambda r, key: float(np.nanmean(np.asarray(r[key])[~np.isnan(r[key])][-10:]))
    col = lambda r, key: [float(m[key]) for m in r["metrics"] if m.get(key) not in (None, "")]
    B = {row: {cut: dict(l10=r["summary"]["last10_score"], best=float(np.nanmax(r["score"])), u10=last(r, "u"),
                         q10=last(r, "q"), model10=float(np.mean(col(r, "eval/model_return")[-10:])),
                         ret10=float(np.mean(col(r, "eval/return")[-10:])), q_o=col(r, "rollout_policy/q"),
                         q_at=[float(r["q"][list(r["epoch"]).index(e)]) for e in (10, 20, n["epochs"])])
                     for cut in cuts for r in [runs[(row, cut)]]} for row in ("mopo", "orpo")}  # fmt: skip
    fit, ounc = runs[("mopo", "uncapped")]["fit"], runs[("orpo", "uncapped")]
    with open(os.path.join(folder, "uncapped", "fit_progress.csv")) as f:
        progress = {int(r["epoch"]): float(r["best_member_holdout_mse"]) for r in csv.DictReader(f)}
    inv = runinfo.invocations(ounc["config"], ounc["summary"], runinfo.load_provenance(os.path.join(folder, "uncapped",
                                                                                                    "orpo")))  # fmt: skip
    ret = [r["ret10"] for r in B["mopo"].values()]
    return dict(B, capped=budget.holdout_mse(runs, "mopo", "baseline"), converged=budget.holdout_mse(runs, "mopo",
                "uncapped"), fit_epochs=int(float(fit["dynamics/epochs"])), fit_min=float(fit["dynamics/fit_seconds"])
                / 60, progress=progress, inv=inv or [], ret=[min(ret), max(ret)], finished=ounc["summary"].get("status")
                == "finished", qbar=float(np.mean([r["q10"] for r in B["mopo"].values()])),
                best=max(r["best"] for r in B["mopo"].values()))  # fmt: skip


def toy_numbers(results: str) -> dict:
    """docs/toy.md's tables, from results/toy_*/results.json, and how their cells read."""
    T = {s: runinfo.read_json(os.path.join(results, f"toy_{s}", "results.json")) for s in ("paper", "reduced", "phase")}
    for s, r in T.items():
        holds(bool(r.get("table")), f"results/toy_{s}/results.json holds a table")
    get = lambda s, algo, u, lp=100: T[s]["table"].get(f"{algo}|{u}|{lp:g}")
    lps = sorted({t["lambda_p"] for t in T["phase"]["table"].values()})
    above = lambda a, b: min(a["per_seed"]) > max(b["per_seed"])

    def cell(t, per_seed: bool = True) -> str:  # mean [range] (per seed)
        if t is None:
            return "not run"
        v = t["per_seed"]
        text = f"{t['mean']:.1f} {rng(min(v), max(v))}" if len(v) > 1 else f"{t['mean']:.1f} (1 seed)"
        return text + (f" ({', '.join(f'{x:.1f}' for x in v)})" if per_seed else "")

    def corner(t) -> str:  # the share of states in the corner, over the seeds
        lo, hi = (min(t["share_upper_right"]), max(t["share_upper_right"])) if t else (None, None)
        return "–" if t is None else f"{100 * lo:.0f} %" if round(100 * lo) == round(100 * hi) else (
            f"{100 * lo:.0f}–{100 * hi:.0f} %")  # fmt: skip

    def seconds(s, algo, key):
        v = [x for k, t in T[s]["table"].items() if k.startswith(algo) for x in t[key] if x is not None]
        return f"{min(v):.0f}–{max(v):.0f} s"

    def phase_row(lp):
        cells = [get("phase", algo, u, lp) for u in ("max_aleatoric", "ensemble_std") for algo in ("mopo", "orpo")]
        return " | ".join(f"{cell(t, False)}, {corner(t)}" if t else "not run" for t in cells)

    return dict(T=T, get=get, seconds=seconds, phase_row=phase_row, lps=lps, cell=cell, corner=corner,
                apart=lambda o, m: "" if o is None or m is None else "every ORPO seed above every MOPO seed" if above(
                    o, m) else "every MOPO seed above every ORPO seed" if above(m, o) else "ranges overlap",
                runs=sum(len(t["seeds"]) for t in T["phase"]["table"].values()),
                seeds={s: sorted({x for t in T[s]["table"].values() for x in t["seeds"]}) for s in T},
                reach=lambda t: t is not None and min(t["share_upper_right"]) > 0.5,
                in_band=lambda t: t is not None and max(t["share_upper_right"]) == 0,
                missing=sorted(set(T["phase"]["setting"]["lambda_ps"]) - set(lps)))  # fmt: skip


# ---------------------------------------------------------------- numbers: the generalisation task (docs/jump.md)
def short(row: str) -> str:
    """A jump row's label without its parenthesis ('ORPO, π^o trained')."""
    return {r: label.split(" (")[0] for r, label, _ in JUMP_ROWS}.get(row, row)


def jump_runs(results: str | dict, task: str = JUMP) -> tuple[dict, dict, dict]:
    """compare.py's runs of a jump task ({row: {seed: run}}), their last-10 returns, the dataset's attributes; results:
    the results folder, or compare.load_results of its jump/ folder (read once: a damaged run is named once)."""
    loaded = compare.load_results(os.path.join(results, "jump")) if isinstance(results, str) else results
    data = loaded.get(task, {"rows": {}, "dataset": {}})
    x = {r: {k: compare.last10(v["curve"]) for k, v in runs.items()} for r, runs in data["rows"].items()}
    return data["rows"], x, data["dataset"]


def contrast(last10: dict, a: str, b: str) -> dict:
    """Row a − row b paired by seed over their common seeds, with compare.py's verdict at ±JUMP_DELTA."""
    common = sorted(set(last10.get(a, {})) & set(last10.get(b, {})))
    diff, mean, lo, hi = stats.paired([last10[a][k] for k in common], [last10[b][k] for k in common])
    verdict = stats.verdict(diff, JUMP_DELTA)[0]
    return dict(a=a, b=b, n=len(diff), mean=mean, lo=lo, hi=hi, verdict=verdict, note=short_of(verdict, mean, lo, hi))


def short_of(verdict: str, mean: float, lo: float, hi: float) -> str:
    """What a "differ" leaves open: the rule asks the interval to exclude 0 and |mean| to exceed δ, so the interval's end
    nearest 0 may lie inside ±δ (then a gap smaller than δ is not ruled out); '' otherwise."""
    end = lo if mean > 0 else hi
    if verdict != "differ" or abs(end) >= JUMP_DELTA:
        return ""
    side = "lower" if mean > 0 else "upper"
    return (f" (the interval's {side} end, {runinfo.signed(end)}, lies within ±{JUMP_DELTA:.0f}: a gap smaller than "
            f"{JUMP_DELTA:.0f} is not ruled out)")  # fmt: skip


def against_paper(mean: float, lo: float, hi: float) -> str:
    """A row against the paper's, by the contrasts' rule at ±JUMP_DELTA on the Welch interval of ours − the paper's:
    agree inside ±δ, differ when it excludes 0 and |mean| > δ, undecided otherwise (0 not rejected is not agreement)."""
    if -JUMP_DELTA <= lo and hi <= JUMP_DELTA:
        return "agree"
    return "differ" if (lo > 0 or hi < 0) and abs(mean) > JUMP_DELTA else "undecided"


def share_text(runs: dict) -> str | None:
    """π^p's own batch share an official ORPO row's runs parsed (config.json's peer_settings); None if none or mixed."""
    v = {r["config"].get("peer_settings", {}).get("final_policy_rollout_ratio_final") for r in runs.values()}
    if len(v) != 1 or None in v:
        return None
    said = "the README command's" if (share := float(v.pop())) == README_SHARE else "not the README command's"
    return f"π^p's own batch share {share:g}, {said}" + ("" if share == README_SHARE else f" {README_SHARE:g}")


def jump_budget(runs: dict) -> str:
    """'100 epochs, 5,000 rollout start states' from a row's config.json (the official code's: peers.py's `cli`)."""
    cfg = [r["config"].get("cli", r["config"]) for r in runs.values()]
    epochs = sorted({int(c["epochs"]) for c in cfg if c.get("epochs") is not None})
    starts = sorted({int(c["rollout_batch_size"]) for c in cfg if c.get("rollout_batch_size") is not None})
    text = f"{' / '.join(map(str, epochs)) or '?'} epochs"
    return text + (f", {' / '.join(f'{n:,}' for n in starts)} rollout start states" if starts else "")


def run_machine(summary: dict) -> str:
    """A run's machine and torch threads, invocation by invocation (a resumed run may have changed threads), and the
    environment variables that set its CPU's arithmetic path where any invocation had one (e.g. the oneMKL shim)."""
    invocations, threads = summary.get("invocations") or [summary], []
    for n in (str(runinfo.threads_of(inv, {})) for inv in invocations):
        threads += [n] if not threads or threads[-1] != n else []
    machine = re.sub(r",? \d+ torch threads", "", invocations[-1].get("device_name") or summary.get("device_name", "?"))
    env = sorted({f"{k}={v}" for inv in invocations for k, v in (inv.get("numerics_env") or {}).items()})
    return f"{machine}, {'→'.join(threads)} thread{'s' if threads != ['1'] else ''}" + "".join(f", {e}" for e in env)


def run_hours(runs: dict) -> str:
    """Each seed's wall hours with its machine and threads: summary.json's wall_seconds (the epoch loop's, over every
    invocation), and "+ N fit" where the run fitted its ensemble itself (metrics.csv's row 0, dynamics/fit_seconds)."""

    def fit(r):
        fitted = str((r["config"].get("_dynamics") or {}).get("source", "")).startswith("fitted")
        seconds = (r.get("metrics") or [{}])[0].get("dynamics/fit_seconds")
        return f" + {float(seconds) / 3600:.2f} fit" if fitted and seconds not in (None, "") else ""

    return "; ".join(f"{seed}: {r['summary'].get('wall_seconds', np.nan) / 3600:.2f}{fit(r)} "
                     f"({run_machine(r['summary'])})" for seed, r in runs.items())  # fmt: skip


def run_span(rows: dict) -> dict | None:
    """The shortest and the longest stored run (summary.json's wall_seconds, its policy epochs, not a fit it made), each
    with its row's short name."""
    runs = [(r["summary"]["wall_seconds"] / 3600, short(row)) for row, by in rows.items() for r in by.values()
            if r["summary"].get("wall_seconds") is not None]  # fmt: skip
    return dict(lo=min(runs), hi=max(runs)) if runs else None


def jump_ensemble(rows: dict, seed: int) -> dict:
    """The ensemble files the seed's model-based runs rolled out in ({(file, MSE): [rows]}: our config.json's `_dynamics`,
    the official code's `dynamics`), the fit from metrics.csv's row 0, and the fits themselves: a refit under the same
    cache key that repeats the first bit for bit has the same path and MSE, but its own fit time (metrics.csv's row 0,
    dynamics/fit_seconds), so `fits` lists each with the rows that rolled out in it and the stored run that made it."""
    files, made = {}, {}
    for row, _, _ in JUMP_ROWS:
        run = rows.get(row, {}).get(seed)
        d = run and (run["config"].get("_dynamics") or run["config"].get("dynamics"))
        if d and not str(d.get("source", "")).startswith("none"):  # official_td3bc: "none (no model)"
            f = d.get("run_dynamics") or d  # a refit under the same cache key on another CPU: same path, other MSE
            files.setdefault((f.get("path") or f"{short(row)}'s own fit", f.get("holdout_mse")), []).append(short(row))
            m = run["metrics"][0]
            if not m.get("dynamics/epochs"):
                continue
            fit = dict(cap=run["config"].get("dynamics_max_epochs"), epochs=float(m["dynamics/epochs"]),
                       hours=float(m["dynamics/fit_seconds"]) / 3600, mse=float(m["dynamics/holdout_mse"]))  # fmt: skip
            one = made.setdefault(round(float(m["dynamics/fit_seconds"]), 3), dict(fit, rows=[], by=None))
            one["rows"].append(short(row))
            if str(d.get("source", "")).startswith("fitted"):  # this stored run fitted it (ours: into the cache)
                one["by"] = short(row)
    made = sorted(made.values(), key=lambda g: g["by"] is None)  # the fit a stored run made first, then refits
    return dict(files=files, fit=made[0] if made else None, fits=made)


def jump_refits(e: dict, first: dict | None) -> list:
    """The seed's converged refits (ensembles.json): epochs, machine, and whether each repeats the fit its stored runs
    made (the same elites' mean holdout MSE to the last digit) or, fitted on another CPU's arithmetic, is another
    ensemble under the same recipe and cache key."""
    return [dict(epochs=max(map(int, p["best_member_holdout_mse"])), device=p["device"].split(" (")[0],
                 mse=p.get("elites_mean_holdout_mse"), same=bool(first) and p.get("elites_mean_holdout_mse") == first["mse"])
            for p in e.get("fit", []) if "refit" in p["epochs"] and p.get("status", "").startswith("converged")]  # fmt: skip


def apart(ens: list, a: str, b: str, last10: dict) -> list:
    """The seeds of the pair a − b whose two runs rolled out in different ensembles (jump_ensemble's files: a refit
    under the same cache key on another CPU is another one), which a pairing by seed assumes they share."""
    said = []
    for seed, _, used in ens:
        where = {row: k for k, rows in used["files"].items() for row in rows}
        if seed in last10.get(a, {}) and seed in last10.get(b, {}) and where.get(short(a), 0) != where.get(short(b), 0):
            said.append(seed)
    return said


def jump_dips(rows: dict, attrs: dict, after: int = 10) -> dict:
    """Our runs whose evaluation fell below the data's mean episode return after epoch `after` (the official row
    stays below it throughout): a last-10 score hides a collapse and a comeback."""
    floor, said = attrs.get("episode_return_mean"), []
    for row, seed, run in ((r, s, run) for r, _, _ in JUMP_ROWS for s, run in sorted(rows.get(r, {}).items())
                           if floor is not None and not r.startswith("official")):  # fmt: skip
        low = [(e, v) for e, v in run["curve"] if e > after and v < floor]
        said += [dict(row=short(row), seed=seed, n=len(low), first=low[0][0], last=low[-1][0], last10=compare.last10(
            run["curve"]), low=min(low, key=lambda x: x[1]))] if low else []  # fmt: skip
    return dict(floor=floor, after=after, said=said)


def jump_numbers(results: str) -> dict:
    """Everything docs/jump.md says, from results/jump/ (and benchmarks/paper_scores.csv's jump column)."""
    loaded = compare.load_results(os.path.join(results, "jump"))
    rows, x, attrs = jump_runs(loaded)
    paper = {col: v for (ds, col), v in paper_scores("jump").items() if ds == JUMP}
    made = runinfo.read_json(os.path.join(results, "jump", JUMP, "episodes.json"))
    policies = made.get("policies", [])
    ensembles = runinfo.read_json(os.path.join(results, "jump", JUMP, "ensembles.json"))
    seeds = sorted((int(k[4:]), v) for k, v in ensembles.items() if k.startswith("seed"))
    configs = [r["config"] for runs in rows.values() for r in runs.values() if r["config"].get("lambda_p") is not None]
    shown = [(row, label, col) for row, label, col in JUMP_ROWS if x.get(row)]  # a row with no stored run is left out
    findings = []  # a row of ≥ 3 seeds against the paper's: reproduced or a finding, at the row's budget
    for row, label, col in shown:
        if len(v := np.array(list(x[row].values()))) >= 3 and col in paper:
            welch = stats.welch(v, *paper[col], 5)
            findings.append(dict(row=row, label=label, x=v, t=stats.t_interval(v), paper=paper[col], welch=welch,
                                 inside=welch[0] <= 0 <= welch[1], verdict=(said := against_paper(v.mean() - paper[col][0], *welch)),
                                 note=short_of(said, v.mean() - paper[col][0], *welch),
                                 checked=reading_checked(x[row], row, made, rows.get(row, {})),
                                 played=played(row, made)))  # fmt: skip
    official = rows.get("official_orpo", {}).values()
    ens = [(s, e, dict(u := jump_ensemble(rows, s), refits=jump_refits(e, u["fit"]))) for s, e in seeds]
    shares = {r: share_text(runs) for r, runs in rows.items()}
    return dict(
        rows=rows, attrs=attrs, paper=paper, x=x, seeds=seeds, c=configs[0] if configs else None, findings=findings,
        shown=[(r, f"{label[:-1]}; {shares[r]})" if shares[r] else label, col) for r, label, col in shown],
        paper_cell={r: minus("%.1f ± %.1f" % paper.get(col, (np.nan, np.nan))) for r, _, col in JUMP_ROWS},
        t_cell={r: rng(*stats.t_interval(v)) if len(v := list(x[r].values())) >= 2 else "one seed" for r, _, _ in shown},
        hours={r: run_hours(rows.get(r, {})) for r, _, _ in JUMP_ROWS}, ep=jump_episodes(made),
        sources=sorted({r["config"].get("dynamics", {}).get("source", "?") for r in official}),
        folded=any("folded" in r["summary"].get("dynamics_observations", "") for r in official),
        contrasts=[dict(c, a=short(a) + " (ours)" * short(b).startswith(short(a)), b=short(b), apart=apart(ens, a, b, x))
                   for a, b in JUMP_CONTRASTS if (c := contrast(x, a, b))["n"]],
        dips=jump_dips(rows, attrs), budget={r: jump_budget(rows[r]) for r, _, _ in shown},
        missing=[(label, len(rows.get(r, {}))) for r, label, _ in JUMP_ROWS if len(rows.get(r, {})) < 3],
        span=run_span(rows),
        converged=[max(map(int, p["best_member_holdout_mse"])) for s, e in seeds for p in e.get("fit", [])
                   if p.get("status", "").startswith("converged")],  # every converged fit, a refit under way or not
        gone=[s for s, e in seeds if e.get("gone")],
        under_way=[(s, max(map(int, p["best_member_holdout_mse"]))) for s, e in seeds for p in e.get("fit", [])[-1:]
                   if p.get("best_member_holdout_mse") and "not converged" in p.get("status", "")],
        lost=[(s, gone["at"]) for s, e in seeds for gone in e.get("lost", [])],
        units=jump_units(rows, policies, x), ensembles=ens,
        other_refits=[s for s, _, u in ens if any(not r["same"] for r in u["refits"])],  # another CPU, another ensemble
        td3bc_units=jump_td3bc_units(rows, x), mopo_lr=mopo_schedules(rows), authors_td3bc=played("official_td3bc", made),
        data=jump_data(rows, attrs),
        # learned policies lying head first (pitch below −1 rad, uncharged) on at least half of their steps
        forward_tipped=[p for p in policies if p["policy"] != "random" and p["mean"].get("forward_flip_share", 0) >= 0.5],
        # learned policies that never tipped over yet pay ≥ 90 % of the most control cost there is (0.1·6 a step)
        saturated=[p for p in policies if p["policy"] != "random" and p["mean"].get("flip_share", 1) < 5e-4
                   and p["mean"].get("control_cost_mean", 0) >= 0.54],
        summary=jump_summary(JUMP, rows, x, paper, seeds, findings),
        other=jump_other(loaded, results), README_SHARE=README_SHARE, OFFICIAL_BUDGET=OFFICIAL_BUDGET, JUMP=JUMP,
        JUMP_ROWS=JUMP_ROWS, DELTA=JUMP_DELTA,
        MIN_SEEDS=compare.MIN_SEEDS,
    )  # fmt: skip


def jump_other(loaded: dict, results: str, task: str = JUMP_OTHER) -> dict:
    """The other jump task's rows so far: each row's last-10 returns beside the paper's cell, the contrasts of
    JUMP_CONTRASTS whose two rows have common seeds, and each row of ≥ 3 seeds against the paper's (Welch, ±δ);
    loaded: compare.load_results of results/jump."""
    rows, x, attrs = jump_runs(loaded, task)
    paper = {col: v for (ds, col), v in paper_scores("jump").items() if ds == task}
    ensembles = runinfo.read_json(os.path.join(results, "jump", task, "ensembles.json"))
    seeds = sorted((int(k[4:]), v) for k, v in ensembles.items() if k.startswith("seed"))
    shown = [
        (row, short(row) + " (ours)" * (not row.startswith("official")), col) for row, _, col in JUMP_ROWS if x.get(row)
    ]
    findings = []
    for row, label, col in shown:
        if len(v := np.array(list(x[row].values()))) >= 3 and col in paper:
            welch = stats.welch(v, *paper[col], 5)
            said = against_paper(v.mean() - paper[col][0], *welch)
            findings.append(dict(row=row, x=v, label=label, mean=v.mean(), n=len(v), paper=paper[col], welch=welch, verdict=said,
                                 note=short_of(said, v.mean() - paper[col][0], *welch)))  # fmt: skip
    return dict(task=task, attrs=attrs, x=x, shown=shown, findings=findings, budget={r: jump_budget(rows[r]) for r, _, _ in shown},
                paper_cell={r: minus("%.1f ± %.1f" % paper.get(col, (np.nan, np.nan))) for r, _, col in shown},
                t_cell={r: rng(*stats.t_interval(v)) if len(v := list(x[r].values())) >= 2 else "one seed" for r, _, _ in shown},
                hours={r: run_hours(rows[r]) for r, _, _ in shown},
                contrasts=[dict(c, a=short(a) + " (ours)" * short(b).startswith(short(a)), b=short(b))
                           for a, b in JUMP_CONTRASTS if (c := contrast(x, a, b))["n"]],
                missing=[short(r) for r, _, _ in JUMP_ROWS if not x.get(r)],
                summary=jump_summary(task, rows, x, paper, seeds, findings))  # fmt: skip


def jump_summary(task: str, rows: dict, x: dict, paper: dict, seeds: list, findings: list) -> dict:
    """A jump task's line on the README and docs/results.md: the finished rows, the method's contrasts once every row of
    JUMP_CORE has 3 seeds, ORPO against the paper's cell (its page's finding: Welch, ±δ), ours − the authors' script, the
    diagnostics of the official code's units, and the settings its runs share."""
    shares = {r: share_text(runs) for r, runs in rows.items()}
    named = lambda r: short(r) + (f" ({shares[r]})" if shares[r] else "")  # noqa: E731
    complete = all(len(rows.get(row, {})) >= compare.MIN_SEEDS for row in JUMP_CORE)  # the contrasts wait
    f = next((f for f in findings if f["row"] == "orpo"), None)
    return dict(task=task, data=JUMP_DATA[task], done=[(named(r), list(x[r].values())) for r, _, _ in JUMP_ROWS
                if rows.get(r)], complete=complete, columns=list(dict.fromkeys(col for r, _, col in JUMP_ROWS
                if rows.get(r))), pairs=[contrast(x, "orpo", b) for b in ("mopo", "orpo_untrained")] if complete else [],
                orpo_paper=f and dict(mean=f["x"].mean() - f["paper"][0], lo=f["welch"][0], hi=f["welch"][1],
                                      verdict=f["verdict"], note=f["note"]),
                units=list(x.get(compare.UNITS_ROW, {}).values()),
                td3bc_units=list(x.get("official_td3bc_units", {}).values()), official=[(named(r), list(x[r].values()))
                for r in ("official_orpo", "official_orpo_readme") if rows.get(r)], settings=jump_settings(rows),
                authors=[dict(c, label=f"{AUTHORS_PAIR[a]} − {AUTHORS_PAIR[b]}") for a, b in JUMP_CONTRASTS
                         if b.startswith("official") and (c := contrast(x, a, b))["n"]],
                paper=paper, mopo_lr=mopo_schedules(rows), x=x,
                refit=any(len(jump_ensemble(rows, s)["fits"]) > 1 for s, _ in seeds))  # fmt: skip


def jump_settings(rows: dict) -> dict:
    """What every jump run shares and what varies (docs/results.md's jump line names its own settings): epochs, steps,
    start states and fit caps of the model-based runs, our SAC's LR horizon, evaluation episodes, threads, machines."""
    runs = [r for by in rows.values() for r in by.values()]
    cfg = [(r["config"].get("cli", r["config"]), r["config"]) for r in runs]
    model = [c for c, _ in cfg if c.get("rollout_batch_size") is not None]
    values = lambda key, among: sorted({int(c[key]) for c in among if c.get(key) is not None})  # noqa: E731
    threads, machines = set(), set()
    for r in runs:
        for inv in r["summary"].get("invocations") or [r["summary"]]:
            threads.add(runinfo.threads_of(inv, {}))
        machines.add(re.sub(r",? \d+ torch threads", "", r["summary"].get("device_name", "?")))
    return dict(epochs=values("epochs", [c for c, _ in cfg]), steps=values("steps_per_epoch", [c for c, _ in cfg]),
                starts=values("rollout_batch_size", model), capped=values("dynamics_max_epochs", model),
                horizons=values("sac_lr_horizon", [own for _, own in cfg]), episodes=values("eval_episodes", [c for c, _
                in cfg]), threads=sorted(t for t in threads if t), machines=sorted(machines),
                seeds=sorted({s for by in rows.values() for s in by}),
                per_row=sorted({len(by) for by in rows.values() if by}))  # fmt: skip


def mopo_schedules(rows: dict) -> dict | None:
    """The two MOPO rows' actor learning-rate schedules: run_mopo.py's CosineAnnealingLR over its own --epoch (L127,
    stepped once an epoch), ours over --sac-lr-horizon (config.json; metrics.csv's charts/lr_actor at the last epoch)."""
    theirs, ours = rows.get("official_mopo", {}), rows.get("mopo", {})
    if not theirs or not ours:
        return None
    T = {r["config"].get("peer_settings", {}).get("epoch") for r in theirs.values()}
    H = {r["config"].get("sac_lr_horizon") for r in ours.values()}
    last = [float(r["metrics"][-1]["charts/lr_actor"]) / float(r["config"]["sac_actor_lr"]) for r in ours.values()
            if r["metrics"][-1].get("charts/lr_actor") and r["config"].get("sac_actor_lr")]  # fmt: skip
    if len(T) != 1 or len(H) != 1 or None in T | H:
        return None
    T, H = int(T.pop()), int(H.pop())
    at = lambda e: (1 + np.cos(np.pi * e / T)) / 2  # noqa: E731  the share of its start run_mopo.py's LR has in epoch e+1
    return dict(T=T, H=H, theirs90=at(T - 10), ours_last=min(last) if last else None, differ=H != T)


def jump_data(rows: dict, attrs: dict) -> dict:
    """Which data each side's runs record: ours the file's fingerprint (config.json's _dataset), the authors' code its
    path and rows (peers.py's config.json; dataset_fingerprint where a newer peers.py recorded it)."""
    ours = {r["config"].get("_dataset", {}).get("fingerprint") for row, runs in rows.items() if not row.startswith(
        "official") for r in runs.values()}  # fmt: skip
    theirs = [r["config"] for row, runs in rows.items() if row.startswith("official") for r in runs.values()]
    return dict(ours=sorted(map(str, ours)), paths=sorted({c.get("dataset_path", "?") for c in theirs}),
                rows=sorted({c.get("dataset_rows") for c in theirs if c.get("dataset_rows")}),
                prints=sorted({c["dataset_fingerprint"] for c in theirs if c.get("dataset_fingerprint")}),
                unrecorded=sum(not c.get("dataset_fingerprint") for c in theirs), runs=len(theirs),
                file=attrs.get("fingerprint"))  # fmt: skip


def jump_td3bc_units(rows: dict, x: dict) -> dict | None:
    """run_td3bc.py's one-unit diagnostic (compare.py's official_td3bc_units) beside it as written and beside ours."""
    row = "official_td3bc_units"
    names = {row: "run_td3bc.py, one action unit (the diagnostic)", "official_td3bc": "run_td3bc.py, as written",
             "td3bc": "TD3+BC (ours)"}  # fmt: skip
    if not rows.get(row):
        return None
    pairs = [dict(c, a=names[a], b=names[b]) for a, b in ((row, "official_td3bc"), ("td3bc", row))
             if (c := contrast(x, a, b))["n"]]  # fmt: skip
    return dict(x=x[row], budget=jump_budget(rows[row]), hours=run_hours(rows[row]), pairs=pairs)  # fmt: skip


def jump_units(rows: dict, made: list, x: dict) -> dict | None:
    """The official row beside compare.py's official_orpo_units diagnostic (its TD3+BC update's actions ÷3) and our
    untrained ORPO, paired by seed, with the final policies' control cost a step (episodes.json); None without runs."""
    units, cost = compare.UNITS_ROW, {}
    if not rows.get(units):
        return None
    for p in made:
        row, _, seed = p["label"].rpartition(" seed ")
        if seed.isdigit() and int(seed) in rows.get(row, {}):
            cost.setdefault(row, {})[int(seed)] = p["mean"]["control_cost_mean"]
    names = {"official_orpo": "the official code, as written", units: "the official code, one action unit (the "
             "diagnostic)", "orpo_untrained": "ours, π^o untrained (run_orpo.py's rollout policy)"}  # fmt: skip
    named = lambda a, b: dict(contrast(x, a, b), a=names[a], b=names[b])
    pairs = [named(units, "official_orpo"), named("orpo_untrained", units)]
    gap = named("orpo_untrained", "official_orpo")
    return dict(row=units, names=names, cost=cost, x=x, seeds=sorted(rows[units]), pairs=[p for p in pairs if p["n"]],
                gap=gap if gap["n"] else None,
                cells={r: ", ".join(f"{s}: {c:.3f}" for s, c in sorted(by.items())) for r, by in cost.items()},
                hours={r: run_hours(rows.get(r, {})) for r in names})  # fmt: skip


def policy_row(p: dict) -> tuple[str, int | None]:
    """The stored row and seed an episodes.json policy stands for, from its label ('td3bc seed 1'; exp_name would name
    the README-shares row 'official_orpo', its script's name)."""
    row, _, seed = p.get("label", "").rpartition(" seed ")
    return (row, int(seed)) if seed.isdigit() else (p.get("label", ""), None)


def played(row: str, made: dict) -> dict | None:
    """The row's final policies in episodes.json ({key: [per policy]}), and whether every one barely acts (control cost
    < 0.01 a step), stands still (|speed| < 0.05) and never tips over: the page says so of such a row."""
    ours = [p for p in made.get("policies", []) if p.get("policy") != "random" and policy_row(p)[0] == row]
    keys = ("return", "z_mean", "flip_share", "speed_mean", "control_cost_mean", "steps")
    m = lambda p, k: p["mean"].get(k, np.inf)
    return dict({k: [m(p, k) for p in ours] for k in keys}, seeds=[policy_row(p)[1] for p in ours],
                last10=[p.get("last10_score", np.inf) for p in ours], dirs=[p.get("policy", "") for p in ours],
                notes=[p.get("note") for p in ours], still=all(
        m(p, "control_cost_mean") < 0.01 and abs(m(p, "speed_mean")) < 0.05 and m(p, "flip_share") < 5e-4
        for p in ours)) if ours else None  # fmt: skip


def reading_checked(stored: dict, row: str, made: dict, runs: dict | None = None) -> dict | None:
    """What the policies' episodes (benchmarks/episodes.py) say of TD3+BC's reading: tipped over less often than the
    random policy, less control cost; whether each policy played is the stored run's: its last-10 return is the stored
    seed's ({seed: last-10}) and its run directory the stored run's (summary.json's run_dir, from `runs`)."""
    ours = played(row, made)
    random = next((p["mean"] for p in made.get("policies", []) if p["policy"] == "random"), None)
    if row != "td3bc" or ours is None or random is None:
        return None
    flips, cost, runs = ours["flip_share"], ours["control_cost_mean"], runs or {}
    where = lambda s: runs[s]["summary"].get("run_dir", "") if s in runs else ""  # noqa: E731
    other = [dict(seed=s, policy=d.rstrip("/"), stored=where(s).rstrip("/"), note=note)
             for s, d, note in zip(ours["seeds"], ours["dirs"], ours["notes"])
             if d.rstrip("/") != where(s).rstrip("/")]  # fmt: skip
    return dict(seeds=ours["seeds"], flips=flips, cost=cost, random=random, other=other,
                both=max(flips) < random["flip_share"] and max(cost) < random["control_cost_mean"],
                same=all(s in stored and abs(x - stored[s]) < 1e-6 for s, x in zip(ours["seeds"], ours["last10"])))  # fmt: skip


def jump_episodes(made: dict) -> dict | None:
    """docs/jump.md's "What the policies do": benchmarks/episodes.py's numbers and figure, where they exist."""
    if not made.get("policies"):
        return None
    runs = made["made_by"] if isinstance(made["made_by"], list) else [made["made_by"]]  # episodes.py --add: several
    drew = [i for i, m in enumerate(runs) if m.get("figure") or "--figure" in m["command"]]
    drawn = [p["label"] for p in made["policies"] if drew and p.get("made_by", 0) == drew[-1]]  # the last drawing
    return dict(runs=runs, policies=made["policies"], drawn=drawn,
                base=next((p["mean"] for p in made["policies"] if p["policy"] == "random"), None),
                learned=[p for p in made["policies"] if p["policy"] != "random"],
                figure=os.path.isfile(os.path.join(ROOT, "docs", "jump_episodes.png")) and bool(drawn),
                seeds=" or ".join(", ".join(map(str, x)) for x in sorted({tuple(m["seeds"]) for m in runs})))  # fmt: skip


# ---------------------------------------------------------------- the pages
def jump_page(results: str, width: int | None = 120) -> str:
    """docs/jump.md (width None: each paragraph one line)."""
    return render("jump.md.j2", width, **jump_numbers(results))


def generate(args: Args, out_root: str) -> list[str]:
    """Write every page (and with args.figures the figures) under out_root; the pages' paths."""
    results = os.path.abspath(args.results)
    os.makedirs(os.path.join(out_root, "docs"), exist_ok=True)
    made_by = f"Made by `{COMMAND}` from the stored runs in `results/{{}}/` (benchmarks/compare.py's report)."
    folders = (
        ("compare", "compare", 5.0),
        ("compare_shares", "compare_shares", 5.0),
        ("jump_curves", "jump", JUMP_DELTA),
    )
    for name, folder, delta in folders:  # the jump tasks' verdicts in raw return, at docs/jump.md's margin
        compare.report(compare.Args(results=os.path.join(results, folder), out=os.path.join(out_root, "docs", name),
                                    delta=delta), made_by=made_by.format(folder), figure=args.figures)  # fmt: skip
    budget.report(budget.Args(results=os.path.join(results, "budget"), baseline=os.path.join(results, "compare"),
                              out=os.path.join(out_root, "docs", "budget")),
                  made_by=f"Made by `{COMMAND}` from the stored runs in `results/budget/` and the baseline runs in "
                  "`results/compare/` (benchmarks/budget.py's report).", figure=args.figures)  # fmt: skip
    n = numbers(results)
    pages = {"docs/claim.md": render("claim.md.j2", **n), "docs/results.md": render("results.md.j2", **n),
             "docs/jump.md": render("jump.md.j2", **n["J"])}  # fmt: skip
    sections = {"readme.md.j2": n, "toy.md.j2": n["toy_page"], "data.md.j2": {"data": jump_files(results)}}
    for page, words, template in BLOCKS:  # a generated block between a hand-written page's markers
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        begin, end = re.findall(rf"<!-- BEGIN {words}:[^\n]*-->", text), f"<!-- END {words} -->"
        if len(begin) != 1 or text.count(end) != 1:
            raise ReportError(f"{page} must hold the line '<!-- BEGIN {words}: ... -->' once and {end!r} once (the "
                              "generated section)")  # fmt: skip
        section = render(template, **sections[template]).strip()
        pages[page] = f"{text.split(begin[0], 1)[0]}{begin[0]}\n\n{section}\n\n{end}{text.split(end, 1)[1]}"
    for page, text in pages.items():
        toolbox.write_text(os.path.join(out_root, page), text)
    return PAGES


def differences(args: Args) -> list[str]:
    """The pages (and, with args.figures, figures) that regenerate differently from those in args.out_root."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(args, tmp)
        names = PAGES + (FIGURES if args.figures else [])
        return [p for p in names if not filecmp.cmp(os.path.join(tmp, p), os.path.join(args.out_root, p), False)]


def main(args: Args) -> int:
    if not args.check:
        for page in generate(args, args.out_root):
            print(f"wrote {os.path.join(args.out_root, page)}")
    elif differ := differences(args):
        print(f"error: these pages differ from what {COMMAND} makes of the stored runs: {', '.join(differ)}",
              file=sys.stderr)  # fmt: skip
        return 1
    else:
        figures = f" and figures ({', '.join(FIGURES)})" if args.figures else ""
        print(f"every results page ({', '.join(PAGES)}){figures} matches the stored runs")
    return 0


def cli(argv: list[str]) -> int:
    return toolbox.cli(main, Args, argv)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
