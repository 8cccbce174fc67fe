"""Learning curves of this repo's algorithms beside the authors' code, on the same data, seeds and protocol.

    python benchmarks/compare.py --env local/hopper-medium --seeds 1 2 3 --epochs 50     # run (resumes), then report
    python benchmarks/compare.py --report-only                      # redraw runs/compare_results/compare.md from there

Rows (--rows picks some; cql, combo and the last seven only when named):
  orpo, orpo_untrained  algorithms/orpo.py, π^o trained (the paper's method) / --rollout-policy untrained (the
                  official code's: π^o never updated); mopo, td3bc: algorithms/mopo.py, td3bc.py
  cql, combo      algorithms/cql.py, combo.py (the paper's two other columns; combo rolls out in the seed's ensemble)
  kit_mopo        OfflineRL-Kit's MOPO, its run_mopo.py settings (benchmarks/peers.py)
  official_orpo   the official ORPO code, its settings for the dataset (benchmarks/peers.py)
  official_orpo_units  the same with its TD3+BC update's actions in one unit (the jump tasks only: a diagnostic of a
                  finding in docs/peers.md, not the official code as written)
  official_orpo_readme  the official code with its README command's batch shares (on the jump tasks 0.05 / 0.05 / 0)
  official_td3bc, official_mopo  the official repository's run_td3bc.py / run_mopo.py, their branches for
                  halfcheetah-jump and halfcheetah-jump-hard (run_mopo.py with the appendix's λp = 1, h = 5; its pair
                  settings are mopo's)
  official_td3bc_units  run_td3bc.py with its TD3+BC update's actions in one unit (the same diagnostic)
  official_cql, official_combo  the official repository's run_cql.py / run_combo.py, their jump branches with their own
                  defaults (run_combo.py's h 5, w 0.5: combo.py's fallback preset), COMBO in the seed's shared
                  ensemble with --peer-ensemble shared; official_combo halfcheetah-jump-hard only (run_combo.py's
                  halfcheetah-jump branch, L75, can never be taken)

Every row gets the same data file, seed, gradient steps, start states, evaluation episodes (same env, same start
states) and reference returns; both sides of a pair get the same dataset settings (λp, u, h; ORPO's λo, h^o and batch
shares), as flags: the peer's own for --task (--settings theirs) or our presets' (--settings ours). Our model-based rows
of a seed share one ensemble through the launchers' cache (--dynamics-cache, benchmarks/toolbox.py); the peers fit
their own, or load it (--peer-ensemble shared). Runs go to --runs-dir/<dataset>/<row>/seed<S>/ (a finished one is never
rerun, ours resume, a peer's goes on from its checkpoint: benchmarks/peers.py); each finished run's config.json, metrics.csv and summary.json are copied to
--results/<dataset>/<row>/seed<S>/, and the report (OUT.md, OUT.png) is drawn from there alone: last-10 score per row
(mean, range over seeds, 95 % Student-t), the provenance caveats, and a verdict per pair (`verdict`, at ±--delta).
The committed results/compare*/ pages, docs/compare*.md, come from `python benchmarks/report.py`.
"""

import csv
import glob
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the peers' settings and sources)
import toolbox  # noqa: E402  (the scripts' one error type, flags and command line)
from toolbox import UsageError, UserError, replace_atomically, unwritable_folder, write_json, write_text  # noqa: E402
import plumbing  # noqa: E402  (on sys.path through toolbox: its flag checks)
import runinfo  # noqa: E402  (the runs' provenance, as budget.py and report.py show them)
import stats  # noqa: E402  (every interval and verdict, on scipy)
import pages  # noqa: E402  (the page's Jinja2 template)

# row: (kind, script or peer name, extra flags, label)
# a diagnostic on the jump tasks, not a row of the comparison: the official code with its TD3+BC update's action units
# made one (peers.py --one-action-unit)
UNITS_ROW = "official_orpo_units"
ROWS = {
    "orpo": ("ours", "orpo", [], "ORPO, π^o trained (ours)"),
    "orpo_untrained": ("ours", "orpo", ["--rollout-policy", "untrained", "--exp-name", "orpo_untrained"],
                       "ORPO, π^o untrained (ours)"),
    "mopo": ("ours", "mopo", [], "MOPO (ours)"),
    "td3bc": ("ours", "td3bc", [], "TD3+BC (ours)"),
    "cql": ("ours", "cql", [], "CQL (ours)"),
    "combo": ("ours", "combo", [], "COMBO (ours)"),
    "kit_mopo": ("peer", "kit-mopo", [], "MOPO (OfflineRL-Kit)"),
    "official_orpo": ("peer", "official-orpo", [], "ORPO (official code)"),
    UNITS_ROW: ("peer", "official-orpo", ["--one-action-unit"], "ORPO (official code, one action unit)"),
    "official_orpo_readme": ("peer", "official-orpo", [], "ORPO (official code, README shares)"),
    "official_td3bc": ("peer", "official-td3bc", [], "TD3+BC (official code)"),
    "official_mopo": ("peer", "official-mopo", [], "MOPO (official code)"),
    "official_td3bc_units": ("peer", "official-td3bc", ["--one-action-unit"], "TD3+BC (official code, one action unit)"),
    "official_cql": ("peer", "official-cql", [], "CQL (official code)"),
    "official_combo": ("peer", "official-combo", [], "COMBO (official code)"),
}  # fmt: skip
# the rows a comparison runs only when --rows names them: the diagnostic and the official repository's other columns
EXTRA_ROWS = ("cql", "combo", UNITS_ROW, "official_orpo_readme", "official_td3bc", "official_mopo",
              "official_td3bc_units", "official_cql", "official_combo")  # fmt: skip
# rows whose code runs on the jump tasks only, and which (peers.py: their run scripts' branches for them; run_combo.py's
# for halfcheetah-jump can never be taken, so official_combo runs halfcheetah-jump-hard only)
JUMP_ROWS = {row: tuple(t for t in peers.JUMP_TASKS if ROWS[row][1] in peers.JUMP_PEERS[t]) for row in (
    UNITS_ROW, "official_td3bc", "official_mopo", "official_td3bc_units", "official_cql", "official_combo")}  # fmt: skip
# model-based peers without pair settings: their script's defaults, our start-state count and (shared) ensemble
OWN_SETTINGS = ("official_combo",)
# official_orpo_readme: the README's own batch shares for the task, whatever --settings gives official_orpo
README_SHARES = ("real_ratio", "output_rollout_ratio", "real_ratio_o")
PAIRS = [("mopo", "kit_mopo"), ("orpo_untrained", "official_orpo")]  # ours vs theirs: should agree
# the paper's claim, stated as it comes out; orpo_untrained − mopo is what the paper's ORPO − MOPO measured (the
# official code never trains π^o)
CONTRASTS = [("orpo", "orpo_untrained"), ("orpo", "mopo"), ("orpo_untrained", "mopo")]
# a verdict needs this many common seeds (the comparison's minimum): at 2, a t interval is 12.7 standard errors wide
MIN_SEEDS = stats.MIN_SEEDS
# The dataset settings both sides of a pair take (--settings), by the pair's peer row: our flag -> the peer's run-script
# flag. u (None) goes through peers.py --uncertainty-mode: neither run script hands one to its ensemble.
MOPO_SETTINGS = {"lambda_p": "--penalty-coef", "uncertainty": None, "rollout_length": "--rollout-length"}
PAIR_SETTINGS = {"kit_mopo": MOPO_SETTINGS, "official_mopo": MOPO_SETTINGS, "official_orpo": {
    "lambda_p": "--penalty-coef", "lambda_o": "--bonus-coef", "uncertainty": None, "rollout_length": "--rollout-length",
    "rollout_length_o": "--rollout-length-rollout-policy", "real_ratio": "--real-ratio-final",
    "output_rollout_ratio": "--final-policy-rollout-ratio-final", "real_ratio_o": "--real-ratio-rollout"}}  # fmt: skip
PEER_OF = {"mopo": "kit_mopo", "kit_mopo": "kit_mopo", "official_mopo": "official_mopo"} | dict.fromkeys(
    ("orpo", "orpo_untrained", "official_orpo", UNITS_ROW, "official_orpo_readme"), "official_orpo"
)  # orpo (π^o trained) takes its pair's settings too, so that its contrast with orpo_untrained is like with like;
# official_td3bc has no pair settings (run_td3bc.py's defaults: α 2.5, as td3bc.py's)
# runs made before --dynamics-cache loaded the seed's `orpo` run's dynamics.pt and logged no fit of their own: their
# dynamics/* diagnostics come from that run
SHARE_FROM = "orpo"
PEER_U = {"max_aleatoric": "aleatoric"}  # our name -> the peers' (the same u: max_i ‖σ_i‖ over s' and r)
# a user's comparison writes under runs/ (not committed); the committed runs are results/compare*/, and their pages
# docs/compare*.md are rewritten by `python benchmarks/report.py` alone
DEFAULT_RESULTS = os.path.join("runs", "compare_results")
MIRROR = os.environ.get("ORPO_PEERS_MIRROR")  # the peers' git snapshots, as the tests read them


def peer_source(name: str, url: str) -> str:
    return os.path.join(MIRROR, name, "repo") if MIRROR else url


@dataclass
class Args:
    env: tuple[str, ...] = ("local/hopper-medium",)
    """datasets (--env of the algorithm files; local/NAME is DATA_DIR/local/NAME.hdf5, made by datasets/)"""
    data_dir: Optional[str] = None
    """where the datasets live (the algorithm files' --data-dir) (default: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""
    rows: tuple[str, ...] = tuple(r for r in ROWS if r not in EXTRA_ROWS)
    """rows to run and report, from: orpo orpo_untrained mopo td3bc cql combo kit_mopo official_orpo
    official_orpo_units official_orpo_readme official_td3bc official_mopo official_td3bc_units official_cql
    official_combo (cql, combo and the last seven only when named)"""
    seeds: tuple[Annotated[int, "[0, 4294967296)"], ...] = (1, 2, 3)
    """seeds; each row runs each seed"""
    epochs: Annotated[int, "[1, inf)"] = 50
    """epochs of every row"""
    steps_per_epoch: Annotated[int, "[1, inf)"] = 1000
    """gradient steps per epoch of every row"""
    rollout_batch_size: Annotated[int, "[1, inf)"] = 5000
    """model-rollout start states per epoch, every model-based row (the paper's 50000, cut for a CPU)"""
    eval_episodes: Annotated[int, "[1, inf)"] = 5
    """evaluation episodes after every epoch, every row (the paper's 10, cut for a CPU)"""
    dynamics_max_epochs: Optional[Annotated[int, "[1, inf)"]] = None
    """cap every row's ensemble fit at this many epochs, ours and the peers' alike (default: early stopping)"""
    order: Literal["seed", "row"] = "seed"
    """the order runs start in: `seed` (every row of a seed, then the next) or `row` (every seed of a row, then the
    next: e.g. the pairs' rows before the long `orpo` ones)"""
    jobs: Annotated[int, "[1, inf)"] = 2
    """runs at once"""
    threads: Annotated[int, "[1, inf)"] = 1
    """torch CPU threads per run (OMP_NUM_THREADS)"""
    cuda: bool = False
    """run on a CUDA GPU where present"""
    settings: Literal["theirs", "ours"] = "theirs"
    """the dataset settings both sides of each pair run with, as flags: `theirs`, the peer's own for --task (u the
    ensembles' aleatoric = our max_aleatoric); `ours`, mopo.py's / orpo.py's presets for --task"""
    task: Optional[str] = None
    """the D4RL name whose settings the pairs take, e.g. halfcheetah-medium-v2 (default: from the dataset's name)"""
    delta: Annotated[float, "(0, inf)"] = 5.0
    """δ, the equivalence margin in D4RL points: a pair agrees when the 95 % interval of ours − theirs is in ±δ"""
    min_relative: Annotated[float, "[0, inf)"] = 0.1
    """a logged quantity separates a pair when its ranges are disjoint and its means differ by this share of the max"""
    algo_flags: str = ""
    """more flags for our rows' new runs, written with '=' (tests: --algo-flags='--hidden-dims 32 32'), but none of
    the pair settings (--settings gives those)"""
    peer_ensemble: Literal["own", "shared"] = "own"
    """the peer rows' ensemble: `own`, each fits its own; `shared`, each waits for and loads the one our rows of its
    (dataset, seed) fitted (peers.py --load-dynamics): every model-based row of a seed rolls out in one model"""
    dynamics_cache: str = os.path.join("runs", "dynamics_cache")
    """the launchers' ensemble cache (benchmarks/toolbox.py): one fit per (dataset, seed), loaded by the other rows
    ('': every run fits its own)"""
    kit_source: str = peer_source("yihaosun1124+OfflineRL-Kit", "https://github.com/yihaosun1124/OfflineRL-Kit")
    """OfflineRL-Kit: a git URL or a local git dir (default: the snapshot in $ORPO_PEERS_MIRROR if set, else GitHub)"""
    orpo_source: str = peer_source("George-Chia+ORPO", "https://github.com/George-Chia/ORPO")
    """the official ORPO code: a git URL or a local git dir (as --kit-source)"""
    runs_dir: str = "runs/compare"
    """where the runs go (checkpoints included; not committed)"""
    results: str = DEFAULT_RESULTS
    """where finished runs' config.json, metrics.csv and summary.json are copied, and the report is drawn from"""
    report_only: bool = False
    """draw the report from --results without running anything"""
    out: str = os.path.join("runs", "compare_results", "compare")
    """the report's stem: OUT.md and OUT.png"""


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
    if dataset.endswith(".hdf5"):  # a file given by its path
        return os.path.splitext(os.path.basename(dataset))[0]
    return dataset.replace("/", "_")


def task_dir(args: Args, t: Task) -> str:
    return os.path.join(args.runs_dir, t.key)


def run_dir_of(args: Args, t: Task) -> Optional[str]:
    """The run directory that holds the task's config.json: ours one level down (the script names it), a peer's is
    the task directory itself."""
    d = task_dir(args, t)
    if ROWS[t.row][0] == "peer":
        return d if os.path.isfile(os.path.join(d, "config.json")) else None
    found = sorted(e.path for e in os.scandir(d) if os.path.isfile(os.path.join(e.path, "config.json"))) if (
        os.path.isdir(d)) else []  # fmt: skip
    return found[-1] if found else None


def finished(run_dir: Optional[str]) -> bool:
    s = runinfo.read_json(os.path.join(run_dir, "summary.json")) if run_dir else None
    return bool(s and s.get("status") == "finished")


def dataset_file(args: Args, dataset: str) -> str:
    if dataset.endswith(".hdf5"):
        return dataset
    base = args.data_dir or os.environ.get("D4RL_DATASET_DIR") or os.path.expanduser("~/.d4rl/datasets")
    return os.path.join(base, f"{dataset}.hdf5")


def domain_of(dataset: str) -> str:
    name = os.path.basename(dataset).removesuffix(".hdf5").split("-")[0].split("_")[0].lower()
    if name not in peers.DOMAINS:
        raise UsageError(f"cannot tell the MuJoCo env of {dataset!r}: name it hopper-*, walker2d-* or halfcheetah-*")
    return name


def eval_env_of(dataset: str) -> str:
    return peers.DOMAINS[domain_of(dataset)][0]


def task_of(args: Args, dataset: str) -> str:
    """The D4RL name whose settings the dataset's pairs take: --task, or the domain and kind in the file's name (a
    jump task's file: the task itself)."""
    domain, jump = domain_of(dataset), ("halfcheetah-jump", "halfcheetah-jump-hard")
    name = os.path.basename(dataset).removesuffix(".hdf5")
    if args.task in jump or (not args.task and name in jump):
        if domain != "halfcheetah":
            raise UsageError(f"--task {args.task} is a halfcheetah task, but {dataset} is a {domain} dataset")
        return args.task or name
    return peers.d4rl_task(args.task, domain, dataset, f"as {dataset} is")


def our_presets(script: str, task: str) -> object:
    """The Args that algorithms/SCRIPT.py fills from its presets for `task` (imported, as the tests do)."""
    module = toolbox.algorithm(script)
    if task not in module.PRESETS:
        raise UsageError(f"{script}.py has no preset for {task} (it has {', '.join(module.PRESETS)}): pass --task")
    return module.apply_presets(module.Args(), types.SimpleNamespace(name=task, domain=task.split("-")[0]))[0]


def pair_settings(args: Args, dataset: str) -> tuple[str, dict[str, dict]]:
    """(task, {peer row: {our flag: value}}): the settings both sides of each pair among --rows run with."""
    task = task_of(args, dataset)
    out = {}
    for row in dict.fromkeys(PEER_OF[r] for r in args.rows if r in PEER_OF):
        peer, keys = ROWS[row][1], PAIR_SETTINGS[row]
        if args.settings == "ours":
            ours = our_presets("orpo" if row == "official_orpo" else "mopo", task)
            out[row] = {k: getattr(ours, k) for k in keys}
            modes = peers.PEERS[peer]["uncertainty_modes"]
            if PEER_U.get(out[row]["uncertainty"], out[row]["uncertainty"]) not in modes:
                raise UsageError(
                    f"--settings ours: u {out[row]['uncertainty']} on {task}, which {peer}'s ensemble does not compute "
                    f"(it has {', '.join(modes)}): use --settings theirs"
                )
            continue
        source = args.kit_source if peer == "kit-mopo" else args.orpo_source
        try:  # the peer's settings as its own run script parses them
            root = peers.extract(peer, source, peers.PEERS[peer]["commit"])["root"]
            parsed = peers.script_args(root, peers.PEERS[peer]["script"], peers.dataset_flags(peer, root, task))
        except UsageError as e:  # peers.py's: their script does not take this dataset
            raise UsageError(f"{e} (--settings theirs: pass --task with one of those, or --settings ours)") from None
        # u: what their ensembles compute (aleatoric)
        out[row] = {k: getattr(parsed, f[2:].replace("-", "_")) if f else "max_aleatoric" for k, f in keys.items()}
    return task, out


def script_flags(script: str) -> frozenset:
    """The flags an algorithm file takes, so a cut it lacks (td3bc: no rollouts) is left out."""
    return toolbox.help_flags(os.path.join(ROOT, "algorithms", f"{script}.py"))


def own_flags(tokens: list[str], known: set) -> list[str]:
    """The --algo-flags groups (a flag and its values) the script takes; td3bc.py has no ensemble flags."""
    groups: list[list[str]] = []
    for tok in tokens:
        if tok.startswith("--") or not groups:
            groups.append([tok])
        else:
            groups[-1].append(tok)
    return [tok for g in groups if g[0].split("=")[0] in known for tok in g]


def model_based(args: Args, t: Task) -> bool:
    """Our row fits or loads an ensemble (td3bc.py has no model)."""
    return ROWS[t.row][0] == "ours" and "--load-dynamics-path" in script_flags(ROWS[t.row][1])


def fitting(args: Args, t: Task, running: list[Task]) -> bool:
    """Another model-based run of the task's (dataset, seed) is running and has no dynamics.pt yet: it is fitting the
    cache entry this task would load, so the task waits instead of holding a core while it blocks on the entry."""
    if not (args.dynamics_cache and model_based(args, t)):
        return False
    for o in running:
        if (o.dataset, o.seed) == (t.dataset, t.seed) and model_based(args, o):
            run = run_dir_of(args, o)
            if not (run and os.path.isfile(os.path.join(run, "dynamics.pt"))):
                return True
    return False


def shared_ensemble(args: Args, t: Task) -> Optional[str]:
    """--peer-ensemble shared: the dynamics.pt of one of our model-based runs of the peer task's (dataset, seed) (with
    the cache, every such run holds the same ensemble), or None while none has one."""
    for row in args.rows:
        if model_based(args, Task(t.dataset, row, t.seed)):
            run = run_dir_of(args, Task(t.dataset, row, t.seed))
            if run and os.path.isfile(os.path.join(run, "dynamics.pt")):
                return os.path.join(run, "dynamics.pt")
    return None


def waits(args: Args, t: Task, running: list[Task]) -> bool:
    """The task must not start yet: its seed's ensemble is being fitted by another of our rows, or it is a peer row
    that loads that ensemble (--peer-ensemble shared) and it does not exist yet."""
    if ROWS[t.row][0] == "peer":  # official_td3bc has no model: it never waits
        model = t.row in PEER_OF or t.row in OWN_SETTINGS
        return args.peer_ensemble == "shared" and model and shared_ensemble(args, t) is None
    return fitting(args, t, running)


def command(args: Args, t: Task, plan: tuple[str, dict]) -> list[str]:
    """The task's command line; plan: the dataset's pair_settings."""
    kind, name, extra, _ = ROWS[t.row]
    cap = [] if args.dynamics_max_epochs is None else ["--dynamics-max-epochs", str(args.dynamics_max_epochs)]
    d = task_dir(args, t)
    cuda = ["--cuda" if args.cuda else "--no-cuda"]
    task, settings = plan[0], plan[1].get(PEER_OF.get(t.row), {})
    if kind == "peer":
        source = args.kit_source if name == "kit-mopo" else args.orpo_source
        if t.row == "official_orpo_readme":  # the README command's shares for the task, the rest official_orpo's
            readme = peers.README_JUMP_FLAGS.get(task, peers.ORPO_SHARES)
            given = dict(zip(readme[::2], readme[1::2]))
            settings = settings | {k: float(given[PAIR_SETTINGS["official_orpo"][k]]) for k in README_SHARES}
        same = ["--task", task]
        if t.row in PEER_OF:  # a model-based peer: its pair's settings, its rollouts' start states, its ensemble
            keys = PAIR_SETTINGS[PEER_OF[t.row]]
            flags = [tok for k, f in keys.items() if f for tok in (f, str(settings[k]))]
            u = PEER_U.get(settings["uncertainty"], settings["uncertainty"])
            same += [f"--peer-flags={shlex.join(flags)}", "--uncertainty-mode", u]
            same += ["--rollout-batch-size", str(args.rollout_batch_size)]
            if args.peer_ensemble == "shared":  # no fit of its own, so no cap either
                cap = ["--load-dynamics", os.path.abspath(shared_ensemble(args, t))]
        elif t.row in OWN_SETTINGS:  # official_combo: its script's own h and w, our start states and ensemble
            same += ["--rollout-batch-size", str(args.rollout_batch_size)]
            if args.peer_ensemble == "shared":
                cap = ["--load-dynamics", os.path.abspath(shared_ensemble(args, t))]
        else:  # official_td3bc, official_cql: no model, so no rollouts, ensemble or cap
            cap = []
        return [sys.executable, os.path.join(ROOT, "benchmarks", "peers.py"), "--peer", name, "--source", source,
                "--dataset-path", dataset_file(args, t.dataset), "--eval-env", eval_env_of(t.dataset), "--seed",
                str(t.seed), "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch),
                "--eval-episodes", str(args.eval_episodes), "--run-dir", d, "--threads", str(args.threads),
                *cuda, *cap, *same, *extra]  # fmt: skip
    script = os.path.join(ROOT, "algorithms", f"{name}.py")
    run = run_dir_of(args, t)
    if run:  # ours resume in place (a run killed before its first checkpoint refits)
        return toolbox.launch_command(script, "--resume", run, *cuda)
    cmd = toolbox.launch_command(script, "--dataset-path" if t.dataset.endswith(".hdf5") else "--env", t.dataset,
                                 "--seed", str(t.seed), "--runs-dir", d, "--epochs", str(args.epochs),
                                 "--steps-per-epoch", str(args.steps_per_epoch), "--eval-every", "1", "--eval-episodes",
                                 str(args.eval_episodes), "--eval-env", eval_env_of(t.dataset), *cuda, *extra)  # fmt: skip
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    cmd += own_flags(shlex.split(args.algo_flags), script_flags(name))
    cmd += [tok for k, v in settings.items() for tok in (f"--{k.replace('_', '-')}", str(v))]
    if "--rollout-batch-size" in script_flags(name):
        cmd += ["--rollout-batch-size", str(args.rollout_batch_size)]
    if "--dynamics-max-epochs" in script_flags(name):
        cmd += cap
    if args.dynamics_cache and model_based(args, t):  # the seed's ensemble, fitted once (toolbox.share_ensemble)
        entry, fitted = toolbox.ensemble_entry(args.dynamics_cache, cmd), shared_ensemble(args, t)
        if entry and toolbox.share_ensemble(entry, fitted and os.path.dirname(fitted)):
            cmd += ["--load-dynamics-path", entry]
    return cmd


# ---------------------------------------------------------------- running
def copy_results(args: Args, t: Task) -> None:
    """A finished run's small files to --results (temp names, then renames)."""
    src, dst = run_dir_of(args, t), os.path.join(args.results, t.key)
    os.makedirs(dst, exist_ok=True)
    for name in ("config.json", "metrics.csv", "summary.json"):
        replace_atomically(os.path.join(dst, name), lambda tmp, n=name: shutil.copyfile(os.path.join(src, n), tmp))


def behaviour_returns(f) -> dict:
    """The data's own complete episodes (split at terminals and timeouts): the behaviour policy's raw return, what an
    offline result on a task without reference returns (the jump tasks) is read against."""
    rewards = np.asarray(f["rewards"][:], dtype=np.float64).reshape(-1)
    done = np.zeros(len(rewards), dtype=bool)
    for key in ("terminals", "timeouts"):
        if key in f:
            done |= np.asarray(f[key][:]).reshape(-1).astype(bool)
    ends = np.flatnonzero(done)
    if not len(ends):
        return {}
    returns = np.add.reduceat(rewards[: ends[-1] + 1], np.r_[0, ends[:-1] + 1])
    out = {"episodes": len(returns), "episode_return_mean": returns.mean(), "episode_return_std": returns.std(),
           "episode_return_min": returns.min(), "episode_return_max": returns.max()}  # fmt: skip
    reward_fn = f.attrs.get("reward_fn", "")
    if str(reward_fn.decode() if isinstance(reward_fn, bytes) else reward_fn).startswith("halfcheetah-jump"):
        nxt = f["next_observations"]  # a jump task's file (datasets/halfcheetah_jump.py): how the cheetah moved
        z, pitch = np.asarray(nxt[:, 0], dtype=np.float64), np.asarray(nxt[:, 1], dtype=np.float64)
        act = np.asarray(f["actions"][:], dtype=np.float64)
        deciles = np.array_split(returns, 10)  # the collection's course, first episodes first
        out["episode_return_by_decile"] = " ".join(f"{d.mean():.1f}" for d in deciles if len(d))
        tipped = np.array_split(pitch > 1, 10)
        out["flip_share_by_decile"] = " ".join(f"{d.mean():.3f}" for d in tipped if len(d))
        out |= {"z_mean": z.mean(), "z_max": z.max(), "z_above_start_share": (z > 0).mean(),
                "z_above_0.2_share": (z > 0.2).mean(), "flip_share": (pitch > 1).mean(),
                "control_cost_mean": 0.1 * (act**2).sum(-1).mean(), "action_abs_max": np.abs(act).max()}  # fmt: skip
        out["speed_mean"] = float(np.mean(nxt[:, 8]))  # HalfCheetah's qvel[0], the root's forward velocity
    return out


def record_dataset(args: Args, dataset: str, task: str) -> None:
    """The behaviour policy's score from the data file's attrs, the pairs' settings and the file's fingerprint, kept
    beside the results for the report; refused when the results (or our runs) there were made from another file."""
    import h5py

    dst = os.path.join(args.results, slug(dataset))
    chosen = {"settings": args.settings, "settings_task": task}
    before = runinfo.read_json(os.path.join(dst, "dataset.json")) or {}
    if "settings" in before and {k: before.get(k) for k in chosen} != chosen:  # its finished runs keep theirs
        raise UsageError(
            f"{dst} holds runs made with --settings {before['settings']} --task {before.get('settings_task')}: "
            "pass those, or another --results and --runs-dir"
        )
    path = dataset_file(args, dataset)
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            attrs["transitions"] = int(f["rewards"].shape[0])
            attrs |= behaviour_returns(f)
    except (OSError, KeyError, AttributeError) as e:  # not HDF5, truncated, no `rewards` dataset
        raise UsageError(
            f"{path} is not a D4RL-layout HDF5 file ({e}); make it with datasets/ (docs/data.md)"
        ) from None
    fingerprint = toolbox.file_fingerprint(path)  # what our runs record in config.json (benchmarks/launch.py)
    recorded = [(dst, before.get("fingerprint"))]
    ours = glob.glob(os.path.join(dst, "*", "seed*", "config.json"))  # our runs record the file they ran on
    ours += glob.glob(os.path.join(args.runs_dir, slug(dataset), "*", "seed*", "*", "config.json"))
    recorded += [
        (os.path.dirname(c), ((runinfo.read_json(c) or {}).get("_dataset") or {}).get("fingerprint")) for c in ours
    ]
    for where, saved in recorded:
        if saved and saved != fingerprint:  # results made from another file under this name: not to be mixed
            raise UsageError(
                f"{where} holds results made from another file than {path} (size:hash {saved}, now {fingerprint}): "
                "pass that file, or another --results and --runs-dir"
            )
    keep = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    keep = {k: v for k, v in keep.items() if isinstance(v, (int, float, str))}
    os.makedirs(dst, exist_ok=True)
    record = keep | {"file": os.path.basename(path), "fingerprint": fingerprint} | chosen
    write_json(record, os.path.join(dst, "dataset.json"))


def tasks_of(args: Args) -> list[Task]:
    """Every run, in the order they start (a task waiting for its seed's ensemble lets the next one go first)."""
    if args.order == "row":
        return [Task(d, r, s) for r in args.rows for d in args.env for s in args.seeds]
    return [Task(d, r, s) for s in args.seeds for d in args.env for r in args.rows]


def run_all(args: Args) -> int:
    tasks = tasks_of(args)
    for d in args.env:
        if not os.path.isfile(dataset_file(args, d)):
            raise UsageError(f"no dataset file {dataset_file(args, d)}: make it with datasets/ (docs/data.md) or pass "
                             "--data-dir")  # fmt: skip
    plans = {d: pair_settings(args, d) for d in args.env}  # every error before any run starts
    for d in args.env:
        record_dataset(args, d, plans[d][0])
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
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "WANDB_MODE": "offline"}  # fmt: skip
    try:
        while todo or running:
            for t in list(todo):
                if len(running) >= args.jobs:
                    break
                if waits(args, t, [r[0] for r in running.values()]):
                    continue  # waits for its seed's ensemble
                d = task_dir(args, t)  # an unfinished peer run: peers.py goes on from its checkpoint
                os.makedirs(d, exist_ok=True)
                cmd = command(args, t, plans[t.dataset])
                log = open(d.rstrip("/") + ".log", "a")
                log.write(f"\n$ {shlex.join(cmd)}\n")
                log.flush()
                p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                running[t.key] = (t, p, time.time(), log)
                todo.remove(t)
                print(f"  start  {t.key}", flush=True)
            if todo and not running:  # every task left waits for an ensemble that no run is making
                failed += [
                    (t, "its seed's ensemble was never fitted (no model-based row of ours has one)") for t in todo
                ]
                todo = []
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
    except KeyboardInterrupt as e:
        for s in (signal.SIGINT, signal.SIGTERM):  # a second one must not cut the wait for the runs' checkpoints
            signal.signal(s, signal.SIG_IGN)
        for _, p, _, _ in running.values():
            p.send_signal(signal.SIGTERM)  # our runs checkpoint on SIGTERM
        for _, p, _, log in running.values():
            p.wait()
            log.close()
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 128 + (e.args[0] if e.args else signal.SIGINT)  # 130, or 143 for SIGTERM
    for t, why in failed:
        print(f"error: {t.key}: {why}", file=sys.stderr)
    return 1 if failed else 0


# ---------------------------------------------------------------- report
class LeftOut(UserError):
    """A finished run whose files disagree with its own record (runinfo.record_damage): named, never in a mean."""


def load_run(seed_dir: str) -> Optional[dict]:
    """A finished run's files in --results ({"config", "summary", "provenance", "curve": [(epoch, score)], "metrics"}),
    None for a run that is not finished; a damaged one raises OSError or ValueError, one whose metrics.csv or scores
    disagree with its summary.json LeftOut."""
    if not re.fullmatch(r"seed\d+", os.path.basename(seed_dir)):
        raise ValueError("not a seed<N> folder")
    if not os.path.isfile(os.path.join(seed_dir, "summary.json")):
        return None  # its copy was cut before the summary (written last): the next run copies it again
    summary = runinfo.read_json(os.path.join(seed_dir, "summary.json"))
    if not summary:
        raise ValueError("summary.json is not a JSON object")
    if summary.get("status") != "finished":
        return None
    with open(os.path.join(seed_dir, "metrics.csv")) as f:
        metrics = list(csv.DictReader(f))
    # the D4RL normalised score, or the raw return on a dataset without reference returns (the jump tasks)
    key = (
        "eval/normalized_score" if summary.get("score_kind", "d4rl_normalized") == "d4rl_normalized" else "eval/return"
    )
    if why := runinfo.record_damage(summary, metrics, key):
        raise LeftOut(why)
    curve = [(int(float(r["epoch"])), float(r[key])) for r in metrics if r.get(key) not in (None, "")]
    if not curve:
        raise ValueError("metrics.csv holds no evaluation")
    config = runinfo.read_json(os.path.join(seed_dir, "config.json")) or {}
    return dict(config=config, summary=summary, provenance=runinfo.load_provenance(seed_dir), curve=curve,
                metrics=metrics, raw=key == "eval/return")  # fmt: skip


def load_results(results: str) -> dict:
    """{dataset: {"dataset": attrs, "rows": {row: {seed: load_run(...)}}}}; a damaged result is one UsageError."""
    out = {}
    if not os.path.isdir(results):
        return out
    for ds in sorted(e.name for e in os.scandir(results) if e.is_dir()):
        entry = {"dataset": runinfo.read_json(os.path.join(results, ds, "dataset.json")) or {}, "rows": {}}
        for row in ROWS:
            row_dir = os.path.join(results, ds, row)
            for seed_dir in sorted(e.path for e in os.scandir(row_dir) if e.is_dir()) if os.path.isdir(row_dir) else []:
                try:
                    run = load_run(seed_dir)
                except LeftOut as e:  # the others' numbers still make a page; this run's would be wrong
                    print(f"warning: {seed_dir}: left out of the report ({e}); delete it (a run of the comparison "
                          "copies the finished run there again)", file=sys.stderr)  # fmt: skip
                    continue
                except (OSError, ValueError, KeyError) as e:
                    why = f"{type(e).__name__}: {e}" if isinstance(e, (OSError, KeyError)) else str(e)
                    raise UsageError(f"{seed_dir}: a damaged result ({why}); delete it (a run of the comparison copies "
                                     "the finished run there again)") from None  # fmt: skip
                if run:
                    entry["rows"].setdefault(row, {})[int(os.path.basename(seed_dir)[4:])] = run
        if entry["rows"]:
            out[ds] = entry
    return out


def last10(curve: list) -> float:
    return float(np.mean([v for _, v in curve[-10:]]))


def interval(lo: float, hi: float, n: int, fmt: str = ".1f") -> str:
    return f"[{lo:{fmt}}, {hi:{fmt}}]" if n >= 2 else "(1 seed: no interval)"


def curves_of(runs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Epochs common to every seed, and the scores [seeds, epochs]."""
    n = min(len(r["curve"]) for r in runs.values())
    epochs = np.array([e for e, _ in next(iter(runs.values()))["curve"][:n]])
    return epochs, np.array([[v for _, v in r["curve"][:n]] for r in runs.values()])


ROW_HEAD = ["row", "seeds", "epochs", "last-10 score, mean", "range over seeds", "95 % Student-t", "per seed", "final",
            "hours per run", "device"]  # fmt: skip
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


def diagnostics(ours: dict, theirs: dict, fitted: dict, min_relative: float) -> str:
    """The quantities both rows log (the same definitions: docs/peers.md), in the pipeline's order, each a mean over
    the run's epochs and then over seeds [range over seeds]; a quantity separates the rows when the ranges are
    disjoint and the means differ by more than `min_relative` of the larger (narrow ranges part over differences too
    small to matter). The first one that does is where to look for the cause."""
    means = {}
    for side, runs in (("ours", ours), ("theirs", theirs)):
        per_seed = [run_means(r["metrics"], fitted.get(seed) if side == "ours" else None) for seed, r in runs.items()]
        keys = set.intersection(*(set(m) for m in per_seed))
        means[side] = {k: np.array([m[k] for m in per_seed]) for k in keys}
    order = lambda k: (next((i for i, p in enumerate(DIAGNOSTIC_ORDER) if k.startswith(p)), 9), k)  # noqa: E731
    keys = sorted(set(means["ours"]) & set(means["theirs"]), key=order)
    n = (min(len(ours), len(theirs)), max(len(ours), len(theirs)))
    seeds = f"{n[0]} seeds" if n[0] == n[1] else f"{n[0]}–{n[1]} seeds"
    table, first = [], None
    for k in keys:
        a, b = means["ours"][k], means["theirs"][k]
        (alo, ahi), (blo, bhi) = runinfo.seed_range(a), runinfo.seed_range(b)
        larger = max(abs(a.mean()), abs(b.mean()))
        relative = (a.mean() - b.mean()) / larger if larger > 0 else 0.0
        apart = min(len(a), len(b)) >= 2 and (ahi < blo or bhi < alo) and abs(relative) > min_relative
        first = first or (k if apart else None)
        cells = [f"{x.mean():.4g} {interval(lo, hi, len(x), '.4g')}" for x, lo, hi in ((a, alo, ahi), (b, blo, bhi))]
        table.append([k, *cells, f"{100 * relative:+.1f} %", "**yes**" if apart else "no"])
    found = f"the first quantity that separates them: **{first}**" if first else "no quantity separates them"
    head = ["quantity (mean over epochs)", f"ours [range over {seeds}]", "theirs", "ours − theirs", "separates"]
    return "\n".join([f"In the pipeline's order ({', '.join(DIAGNOSTIC_ORDER)}), {found}.", "",
                      *runinfo.md_table(head, table)])  # fmt: skip


verdict = stats.verdict  # the equivalence test of a pair (stats.py): agree, differ or undecided at ±δ


def settings_of(peer_row: str, run: dict, side: str) -> dict:
    """A run's pair settings, from its config.json, in our names."""
    config = run["config"]
    if side == "ours":
        return {k: config.get(k) for k in PAIR_SETTINGS[peer_row]}
    # runs made before peers.py recorded it ran the constructor's default: the run scripts pass no u
    u = run["summary"].get("ensemble_uncertainty_mode", "aleatoric")
    parsed = config.get("peer_settings", {})
    ours = {v: k for k, v in PEER_U.items()}.get(u, u)
    return {k: parsed.get(f[2:].replace("-", "_")) if f else ours for k, f in PAIR_SETTINGS[peer_row].items()}


def settings_line(ours: dict, theirs: dict, peer_row: str, chosen: dict) -> tuple[str, bool]:
    """The pair's settings as each run recorded them, and whether every run of both rows has the same."""
    values = {k: [sorted({str(settings_of(peer_row, r, side)[k]) for r in runs.values()})
                  for side, runs in (("ours", ours), ("theirs", theirs))] for k in PAIR_SETTINGS[peer_row]}  # fmt: skip
    differ = [k for k, (a, b) in values.items() if a != b or len(a) > 1]
    how = (f"--settings {chosen['settings']} for {chosen.get('settings_task')}" if "settings" in chosen
           else "each side's own preset for the dataset (runs made before --settings)")  # fmt: skip
    if differ:
        text = "; ".join(f"{k} {'/'.join(values[k][0])} vs {'/'.join(values[k][1])}" for k in differ)
        return f"**Settings differ** (from each run's config.json, ours vs theirs): {text}. Chosen by {how}.", False
    text = ", ".join(f"{k} {values[k][0][0]}" for k in values)
    return f"Settings, the same in every run of both rows (each run's config.json): {text}. Chosen by {how}.", True


def row_stats(runs: dict) -> dict:
    """A row's last-10 score per seed, its mean, range and 95 % Student-t interval over seeds, and its curves."""
    x = np.array([last10(r["curve"]) for r in runs.values()])
    epochs, ys = curves_of(runs)
    return dict(seeds=list(runs), x=x, mean=float(x.mean()), range=tuple(float(v) for v in runinfo.seed_range(x)),
                t=stats.t_interval(x), epochs=epochs, ys=ys,
                final=float(np.mean([r["curve"][-1][1] for r in runs.values()])),
                hours={s: r["summary"].get("wall_seconds", float("nan")) / 3600 for s, r in runs.items()},
                devices=sorted({str(r["summary"].get("device_name") or r["summary"].get("device") or "?")
                                for r in runs.values()}))  # fmt: skip


def paired(s: dict, o: dict, delta: float) -> dict:
    """s − o, the last-10 scores paired by seed: per-seed differences, mean and the verdict's 95 % Student-t
    interval."""
    common = [seed for seed in s["seeds"] if seed in o["seeds"]]
    diff = np.array([s["x"][s["seeds"].index(c)] - o["x"][o["seeds"].index(c)] for c in common])
    v, lo, hi = verdict(diff, delta)
    return {"seeds": common, "diff": diff, "mean": float(diff.mean()) if len(diff) else float("nan"), "lo": lo,
            "hi": hi, "verdict": v}  # fmt: skip


def summarize(results: str, delta: float = 5.0) -> dict:
    """Every number the pages take from a compare.py results folder: {dataset: {"dataset": attrs, "runs": {row:
    {seed: run}}, "rows": {row: row_stats}, "pairs": {(ours, theirs): paired + "same"}, "contrasts": {(a, b):
    paired}}}."""
    out = {}
    for ds, entry in load_results(results).items():
        stats = {row: row_stats(runs) for row, runs in entry["rows"].items()}
        pairs, contrasts = {}, {}
        for ours, theirs in PAIRS + CONTRASTS:
            if ours not in stats or theirs not in stats:
                continue
            p = paired(stats[ours], stats[theirs], delta)
            if (ours, theirs) in PAIRS:
                p["said"], p["same"] = settings_line(
                    entry["rows"][ours], entry["rows"][theirs], theirs, entry["dataset"]
                )
                pairs[(ours, theirs)] = p
            elif len(p["seeds"]):
                contrasts[(ours, theirs)] = p
        out[ds] = {"dataset": entry["dataset"], "runs": entry["rows"], "rows": stats, "pairs": pairs,
                   "contrasts": contrasts}  # fmt: skip
    return out


def row_notes(runs: dict) -> list[str]:
    """The row's provenance caveats, each with the seeds it holds for."""
    by_note: dict[str, list[int]] = {}
    for seed, r in runs.items():
        for note in runinfo.run_notes(r["config"], r["summary"], r["provenance"], r["metrics"]):
            by_note.setdefault(note, []).append(seed)
    n = len(runs)
    which = lambda seeds: "every seed" if len(seeds) == n and n > 1 else (  # noqa: E731
        "seed " if len(seeds) == 1 else "seeds ") + runinfo.seeds_text(seeds)  # fmt: skip
    return [f"{which(seeds)}: {note}" for note, seeds in by_note.items()]


def draw(data: dict, out: str, steps_per_epoch: int) -> None:
    """The comparison's figure: per dataset, each row's mean curve over seeds with its range as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(6.5 * len(data), 4.4), squeeze=False)
    for ax, (ds, entry) in zip(axes[0], data.items()):
        for row, s in entry["rows"].items():
            steps = s["epochs"] * steps_per_epoch
            (line,) = ax.plot(steps, s["ys"].mean(0), label=f"{ROWS[row][3]} ({runinfo.count_word(len(s['x']))})",
                              linestyle="--" if ROWS[row][0] == "peer" else "-")  # fmt: skip
            ax.fill_between(steps, *runinfo.seed_range(s["ys"]), alpha=0.15, color=line.get_color())
        if (behaviour := entry["dataset"].get("behavior_normalized_score")) is not None:
            ax.axhline(behaviour, color="grey", linewidth=0.8, linestyle=":", label="behaviour policy")
        raw = any(r["raw"] for runs in entry["runs"].values() for r in runs.values())
        ax.set(title=ds, xlabel="gradient steps", ylabel="return (raw)" if raw else "D4RL normalised score")
        ax.legend(fontsize=7)
    fig.suptitle("Learning curves: ours (solid) and the authors' code (dashed), same data, seeds and evaluation; "
                 "mean over seeds, band: range over seeds", fontsize=9)  # fmt: skip
    fig.tight_layout()
    replace_atomically(out + ".png", lambda tmp: fig.savefig(tmp, dpi=110), suffix=".tmp.png")


def page_numbers(ds: str, entry: dict, min_relative: float) -> dict:
    """One dataset's section of the page (templates/compare.md.j2): its row table, provenance notes and pairs."""
    a, table, notes = entry["dataset"], [], []
    for row, s in entry["rows"].items():
        seeds = ", ".join(f"{seed}: {v:.1f}" for seed, v in zip(s["seeds"], s["x"]))
        table.append([ROWS[row][3], len(s["x"]), int(s["epochs"][-1]) if len(s["epochs"]) else 0, f"{s['mean']:.1f}",
                      interval(*s["range"], len(s["x"])), interval(*s["t"], len(s["x"])), seeds, f"{s['final']:.1f}",
                      f"{np.mean(list(s['hours'].values())):.2f}", "; ".join(s["devices"])])  # fmt: skip
        notes += [f"{ROWS[row][3]}, {note}" for note in row_notes(entry["runs"][row])]
    configs = [r["config"] for runs in entry["runs"].values() for r in runs.values()]
    revisions = sorted({str(c.get("_git_revision"))[:10] for c in configs} - {"None"})
    unrecorded = sum(not c.get("_git_revision") for c in configs)
    code = [f"code revision {', '.join(revisions)}"] if revisions else []
    code += [f"code revision not recorded by {unrecorded} run{'s' * (unrecorded > 1)} (their provenance.json "
             "names the commit that stored them)"] if unrecorded else []  # fmt: skip
    pairs = {}
    for (ours, theirs), p in entry["pairs"].items():
        p = dict(p)
        tasks = {str(r["config"].get("task")) for r in entry["runs"][theirs].values()}
        if theirs == "official_orpo" and any(not t.startswith(("hopper", "walker2d")) for t in tasks):
            p["said"] += (" Not matched, as no flag sets it: off hopper and walker2d run_orpo.py standardises the "
                          "observations before its ensemble fit, so its model, holdout MSE and u are in standardised "
                          "units (docs/peers.md, item 7).")  # fmt: skip
        fitted = {seed: r["metrics"] for seed, r in entry["runs"].get(SHARE_FROM, {}).items()}
        p["quantities"] = diagnostics(entry["runs"][ours], entry["runs"][theirs], fitted, min_relative)
        pairs[(ours, theirs)] = p
    behaviour = a.get("behavior_normalized_score")
    return dict(file=a.get("file", ds), transitions=a.get("transitions", "?"), rows=entry["rows"], notes=notes,
                behaviour_return=a.get("behavior_mean_return", a.get("episode_return_mean", float("nan"))), code=code,
                pairs=pairs,
                behaviour=behaviour if behaviour is None else round(behaviour, 1), contrasts=entry["contrasts"],
                table="\n".join(runinfo.md_table(ROW_HEAD, table)))  # fmt: skip


def report(args: Args, made_by: Optional[str] = None, figure: bool = True) -> str:
    """The comparison's page (args.out.md, from templates/compare.md.j2) and figure (args.out.png) from args.results
    alone; `made_by`: the sentence that says how the page is made (default: this script's --report-only)."""
    data = summarize(args.results, args.delta)
    if not data:
        raise UsageError(f"no finished run in {args.results}: run the comparison first (without --report-only)")
    made_by = (
        made_by or f"Made by `python benchmarks/compare.py --report-only --results {os.path.relpath(args.results)}`."
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if figure:
        draw(data, args.out, args.steps_per_epoch)
    sets = {ds: page_numbers(ds, entry, args.min_relative) for ds, entry in data.items()}
    devices = sorted({str(r["summary"].get("device_name")) for e in data.values() for runs in e["runs"].values()
                      for r in runs.values()})  # fmt: skip
    md = pages.render("compare.md.j2", None, made_by=made_by, t3=stats.t_half_width(MIN_SEEDS), MIN=MIN_SEEDS,
                      sets=sets, delta=args.delta, min_relative=args.min_relative, devices=devices,
                      label={row: v[3] for row, v in ROWS.items()}, figure=os.path.basename(args.out) + ".png")  # fmt: skip
    write_text(args.out + ".md", md)
    return md


# flags compare.py gives every row of ours itself (the same cuts on every row): --algo-flags must not change them
OWN_FLAGS = {
    "--env", "--dataset-path", "--data-dir", "--seed", "--runs-dir", "--epochs", "--steps-per-epoch", "--eval-every",
    "--eval-episodes", "--eval-env", "--cuda", "--no-cuda", "--rollout-batch-size", "--dynamics-max-epochs",
    "--load-dynamics-path", "--dynamics-cache", "--resume", "--rollout-policy", "--exp-name",
}  # fmt: skip


def check(args: Args) -> None:
    if bad := [r for r in args.rows if r not in ROWS]:
        raise UsageError(f"unknown row {bad[0]!r}: choose from {' '.join(ROWS)}")
    for row in [r for r in JUMP_ROWS if r in args.rows]:
        tasks = {task_of(args, d) for d in args.env}  # the name, or a file named so
        if not tasks <= set(JUMP_ROWS[row]):
            if row == "official_combo" and peers.JUMP_EASY in tasks:
                why = "run_combo.py's branch for halfcheetah-jump, L75, tests a name no task has"
            elif "--one-action-unit" in ROWS[row][2]:
                why = "elsewhere the official code's actions are the env's"
            else:
                why = "its run script's branch for that task is what it runs"
            where = " or ".join(JUMP_ROWS[row])
            raise UsageError(f"--rows {row} runs on --env {where} only ({why}): drop it or the other --env")
    plumbing.check_args(args)  # every number in its field's range, every tuple given
    for name, values in (("--rows", args.rows), ("--seeds", args.seeds), ("--env", args.env)):
        if not values or len(set(values)) < len(values):  # none runs nothing; a task twice runs twice, in one folder
            given = f", not {' '.join(map(str, values))}" if values else ""
            raise UsageError(f"{name} needs at least one value, each once{given}")
    model_peers = [r for r in args.rows if ROWS[r][0] == "peer" and (r in PEER_OF or r in OWN_SETTINGS)]
    if args.peer_ensemble == "shared" and model_peers:
        ours = [r for r in args.rows if model_based(args, Task("", r, 0))]
        if not (args.dynamics_cache and ours):
            raise UsageError("--peer-ensemble shared: the peer rows load the ensemble our model-based rows (orpo, "
                             "orpo_untrained, mopo, combo) fit into --dynamics-cache: add one to --rows and keep a cache")  # fmt: skip
    try:
        tokens = shlex.split(args.algo_flags)
    except ValueError as e:
        raise UsageError(f"--algo-flags: {e}") from None
    paired = {f"--{k.replace('_', '-')}" for keys in PAIR_SETTINGS.values() for k in keys}
    if clash := [tok for tok in tokens if tok.split("=")[0] in paired]:
        raise UsageError(f"--algo-flags sets {clash[0]}, a pair setting: --settings gives it to both sides of a pair")
    if own := [tok for tok in tokens if tok.split("=")[0] in OWN_FLAGS]:
        raise UsageError(
            f"--algo-flags sets {own[0]}, which compare.py gives every row (use its own flag, if it has one)"
        )
    folders = [("--out", os.path.dirname(os.path.abspath(args.out)))]
    folders += [] if args.report_only else [("--runs-dir", args.runs_dir), ("--results", args.results)]
    for flag, folder in folders:  # before any run: a report that cannot be written would lose hours of runs
        if why := unwritable_folder(folder):
            raise UsageError(f"{flag}: cannot write in {folder}: {why}")


def main(args: Args) -> int:
    check(args)
    rc = 0 if args.report_only else run_all(args)
    if rc in (130, 143) or (rc and not load_results(args.results)):
        return rc  # the failed runs are named above; there is nothing to report
    md = report(args)
    print(md)
    print(f"wrote {args.out}.md and {args.out}.png ({platform.node()})")
    return rc


def cli(argv: list[str]) -> int:
    return toolbox.cli(main, Args, argv, sigterm=True)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
