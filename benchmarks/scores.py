"""Score harness: run the paper's grid (algorithms × datasets × seeds) here or on Slurm, then aggregate it.

    python benchmarks/scores.py --algos orpo mopo --envs hopper-medium-v2 --seeds 1 2 3          # one machine
    python benchmarks/scores.py --paper-table 1 --per-gpu 4                                     # 4 runs at once per GPU
    python benchmarks/scores.py --paper-table 4 --launcher slurm --partition gpu --dry-run      # what Slurm would get
    python benchmarks/scores.py --paper-table 4 --launcher slurm --partition gpu               # submit (job array)
    python benchmarks/scores.py --status                                                       # queued/running/...
    python benchmarks/scores.py --table-only                                # aggregate finished runs: runs/scores/scores.md

Each cell (dataset, --exp-name, seed) is its algorithm's script in a subprocess of a submitit job, on Slurm (a time
limit checkpoints and requeues it) or here (LocalExecutor); a finished cell is never run again, a stopped one resumes,
a failed one waits for --retry-failed. docs/grid.md has the details and the aggregate (rliable). Exit status: 0 when
every run is finished, 1 when one failed or is unfinished, 2 for bad input, 130 on Ctrl-C, 143 on SIGTERM.
"""

import contextlib
import copy
import csv
import ctypes
import dataclasses
import fcntl
import functools
import glob
import io
import json
import math
import os
import platform
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Literal, Optional
from unittest import mock

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import pages  # noqa: E402  (the table's page from its template)
import runinfo  # noqa: E402  (each finished run checked against its own record)
import stats  # noqa: E402  (the bootstrap interval of a cell's mean)
import toolbox  # noqa: E402  (the scripts' one error type, flags and command line)
from toolbox import UsageError, UserError, read_json, replace_atomically, unwritable_folder, write_json, write_text  # noqa: E402

PAPER_SCORES = os.path.join(ROOT, "benchmarks", "paper_scores.csv")  # the paper's numbers, from its LaTeX
PAPER_ORDER = ("lambda", "1", "4", "jump")  # which table's number a cell is shown with, first match
PAPER_EPOCHS = 1000  # the scripts' default, from ORPO's official runner: 1000 epochs × 1000 gradient steps
# a variant is (script in algorithms/, the flags that make it); paper_scores.csv names the paper's column of each
VARIANTS = {
    "orpo": ("orpo", []),
    "orpo_sac": ("orpo", ["--output-algo", "sac", "--exp-name", "orpo_sac"]),
    "mopo": ("mopo", []),
    "mopo_td3bc": ("mopo", ["--policy", "td3bc", "--exp-name", "mopo_td3bc"]),
    "oroo": ("oroo", []),
    "mbpo": ("mbpo", []),
    "td3bc": ("td3bc", []),
    "cql": ("cql", []),
    "combo": ("combo", []),
}
D4RL_12 = [f"{d}-{k}-v2" for k in ("random", "medium", "medium-replay", "medium-expert") for d in ("halfcheetah", "hopper", "walker2d")]  # fmt: skip
# what each paper table needs from this repo (its other columns are other papers' methods)
PRESETS = {
    "1": (["cql", "td3bc", "mopo", "combo", "orpo"], D4RL_12),
    "4": (["cql", "td3bc", "mbpo", "mopo", "orpo", "orpo_sac", "oroo", "mopo_td3bc"], D4RL_12),
    "jump": (["cql", "td3bc", "mopo", "combo", "orpo"], ["halfcheetah-jump", "halfcheetah-jump-hard"]),
}
INTERRUPTED = {130, 143, -signal.SIGINT, -signal.SIGTERM}
# config.json keys that say where and how a run ran, not what it computes: runs that differ only in these are one
# configuration (a table row, and a launch's check of a cell's flags, leave them out). cuda_graphs replays the same
# kernels (off before 2026-11-27); load_dynamics_path is the launchers' cache entry; _command ... _dynamics are what a
# run records of how it came about.
RUN_ONLY = set(
    "env exp_name seed runs_dir resume data_dir dataset_path cuda cuda_graphs track wandb_project_name wandb_entity "
    "stop_after_epochs checkpoint_every checkpoint_minutes threads dynamics_cache load_dynamics_path _command _typed "
    "_filled _git_revision _dynamics".split()
)
PR_SET_PDEATHSIG = 1  # prctl's option: the signal a process gets when its parent ends (Linux)


@dataclass
class Args:
    algos: list[str] = field(default_factory=lambda: ["orpo"])
    """what to run: orpo orpo_sac mopo mopo_td3bc oroo mbpo td3bc (a variant is a script plus its flags)"""
    envs: list[str] = field(default_factory=lambda: ["hopper-medium-v2"])
    """datasets (any --env value the scripts take)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """seeds per algorithm and dataset"""
    paper_table: Optional[Literal["1", "4", "jump"]] = None
    """the grid of one paper table (its algorithms, datasets and 5 seeds); --algos/--envs/--seeds given override it"""
    runs_dir: str = "runs/scores"
    """where the runs are written (the launcher's own state goes to RUNS_DIR/_grid)"""
    dynamics_cache: str = os.path.join("runs", "dynamics_cache")
    """the launchers' ensemble cache: each (dataset, dynamics flags, seed) is fitted once and loaded by every other
    run, compare.py's and budget.py's too ('': every run fits its own)"""
    out: str = "runs/scores/scores.md"
    """the markdown table, and beside it a .json, the learning curves (.png) and a performance profile (_profile.png)"""
    extra: str = ""
    """extra flags passed to every script, as one string: --extra="--epochs 100 --no-cuda" """
    extra_for: list[str] = field(default_factory=list)
    """extra flags for one algorithm only, as ALGO=FLAGS: --extra-for "orpo=--dynamics-max-epochs 30" """
    launcher: Literal["local", "slurm"] = "local"
    """local: submitit jobs on this machine, one after another (or --per-gpu); slurm: one job per run (a job array)"""
    per_gpu: Optional[int] = None
    """local: K runs at once on each GPU (without a GPU, K at once on the CPU); docs/grid.md says how to choose K"""
    table_only: bool = False
    """run nothing: aggregate the finished runs in --runs-dir (only the grid's, when a grid is given)"""
    status: bool = False
    """run nothing: count the grid's runs by state (queued, running, finished, failed, ...) and show failures"""
    dry_run: bool = False
    """print what would be run (and for slurm the sbatch script) and exit"""
    retry_failed: bool = False
    """run failed cells again (resumed from their last checkpoint when they have one)"""
    wait: bool = False
    """slurm: wait for the jobs to end, then aggregate"""
    partition: Optional[str] = None
    """slurm partition"""
    time: int = 1440
    """slurm: minutes per job; a job that reaches it is requeued and resumes"""
    gpus: int = 1
    """slurm: GPUs per job"""
    cpus: int = 4
    """slurm: CPUs per job"""
    mem: int = 32
    """slurm: memory per job, GB"""
    account: Optional[str] = None
    """slurm account"""
    qos: Optional[str] = None
    """slurm quality of service"""
    slurm_param: list[str] = field(default_factory=list)
    """more sbatch parameters as KEY=VALUE, e.g. constraint=a100"""
    array_parallelism: int = 64
    """slurm: most jobs of the array running at once"""
    max_requeues: int = 20
    """slurm: most times a job is requeued after a time limit or preemption"""
    signal_delay_s: int = 180
    """slurm: seconds before the time limit at which the job stops its run (the run finishes its epoch and saves)"""
    reps: int = 2000
    """bootstrap resamples for every interval"""
    bootstrap_seed: int = 0
    """numpy seed of the bootstrap (the same seed gives the same intervals)"""


# ----------------------------------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class Cell:
    algo: str  # the variant's name
    script: str  # algorithms/{script}.py
    flags: tuple  # the variant's flags, then --extra
    exp_name: str
    env: str
    seed: int
    cache: Optional[str] = None  # the launchers' ensemble cache (toolbox.cached_ensemble): one fit per dataset and seed

    key = property(lambda self: (self.env, self.exp_name, self.seed))
    id = property(lambda self: f"{self.env.replace('/', '_')}__{self.exp_name}__{self.seed}")  # its record's name
    label = property(lambda self: f"{self.exp_name} {self.env} seed {self.seed}")


def make_grid(args: Args) -> list[Cell]:
    def split(name: str, text: str) -> list[str]:
        try:
            flags = shlex.split(text)
        except ValueError as e:
            raise UsageError(f"{name}: {e}") from None
        for flag in ("--env", "--seed", "--runs-dir", "--resume"):
            if any(x == flag or x.startswith(flag + "=") for x in flags):
                raise UsageError(f"{name} may not hold {flag}: the harness sets it for each run")
        if "-h" in flags or "--help" in flags:
            raise UsageError(f"{name} may not hold --help: see python algorithms/SCRIPT.py --help for a script's flags")
        return flags

    extra = split("--extra", args.extra)
    extra_for = {}
    for item in args.extra_for:
        algo, _, flags = item.partition("=")
        if not _ or algo not in args.algos:
            raise UsageError(f"--extra-for {item!r}: use ALGO=FLAGS with ALGO one of --algos ({', '.join(args.algos)})")
        extra_for[algo] = extra_for.get(algo, []) + split(f"--extra-for {algo}", flags)
    cells, owner = [], {}
    cache = os.path.abspath(args.dynamics_cache) if args.dynamics_cache else None  # one fit per (dataset, seed)
    for algo in args.algos:
        if algo not in VARIANTS and not os.path.isfile(os.path.join(ROOT, "algorithms", f"{algo}.py")):
            raise UsageError(f"unknown algorithm '{algo}'; use one of {', '.join(VARIANTS)}")
        script, flags = VARIANTS.get(algo, (algo, []))
        flags = [*flags, *extra, *extra_for.get(algo, [])]
        exp_name = script
        for i, flag in enumerate(flags):  # the last --exp-name given wins, as in the script's parser
            if flag == "--exp-name" and i + 1 < len(flags) or flag.startswith("--exp-name="):
                exp_name = flag.split("=", 1)[1] if "=" in flag else flags[i + 1]
        if owner.setdefault(exp_name, algo) != algo:
            raise UsageError(
                f"--algos {owner[exp_name]} and {algo} would both run as --exp-name {exp_name}; give each its own"
            )
        cells += [
            Cell(algo, script, tuple(flags), exp_name, env, seed, cache) for env in args.envs for seed in args.seeds
        ]
    return cells


def flag_values(flags) -> dict[str, list[str]]:
    """Flags as {config key: values}: `--name V ...` and `--name=V`, `--no-name` as False and a bare `--name` as True,
    numbers written one way (1e-3 = 0.001); the RUN_ONLY keys are left out."""
    out: dict[str, list[str]] = {}
    key = None
    for token in flags:
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            name = name.replace("-", "_")
            key = name[3:] if name.startswith("no_") and not eq else name
            out[key] = ["False"] if key != name else [value] if eq else []
        elif key is not None:
            out[key].append(token)

    def number(v: str) -> str:
        with contextlib.suppress(ValueError):
            v = repr(float(v))
            return v[:-2] if v.endswith(".0") else v
        return v

    return {k: [number(v) for v in (vs or ["True"])] for k, vs in out.items() if k not in RUN_ONLY}


def changed_flags(cells: list[Cell], states: dict[tuple, dict]) -> Optional[str]:
    """A launch must not take a cell's run made with other flags for its own (a changed --extra or --extra-for would
    otherwise skip it as finished, or resume it): the first such cell, and what differs, as one line."""
    changed = [(cell, states[cell.key], flag_values(states[cell.key]["record"]["flags"]), flag_values(cell.flags))
               for cell in cells if states[cell.key]["run"] and "flags" in states[cell.key]["record"]]  # fmt: skip
    changed = [c for c in changed if c[2] != c[3]]
    if not changed:
        return None
    cell, st, before, now = changed[0]
    shown = lambda values, k: " ".join(values.get(k, ["(not given)"]))
    diff = "; ".join(
        f"--{k.replace('_', '-')} {shown(before, k)} there, {shown(now, k)} now"
        for k in sorted(set(before) | set(now))
        if before.get(k) != now.get(k)
    )
    more = f" (and {len(changed) - 1} more cells)" if len(changed) > 1 else ""
    return (
        f"{cell.label} ran with other flags in {st['run_dir']} ({diff}){more}: a cell holds one configuration; give "
        f'the new one its own --exp-name (--extra-for "{cell.algo}=... --exp-name {cell.exp_name}_2") or --runs-dir'
    )


def validate(args: Args, argv: list[str]) -> None:
    flags = [a.split("=", 1)[0] for a in argv if a.startswith("--")]
    twice = sorted({f for f in flags if flags.count(f) > 1})
    if twice:  # tyro keeps only the last one: `--extra-for A --extra-for B` would silently drop A
        raise UsageError(
            f"{', '.join(twice)} given more than once; give it once with all its values "
            '(e.g. --extra-for "orpo=..." "mopo=...")'
        )
    if args.paper_table:
        algos, envs = PRESETS[args.paper_table]
        args.algos = args.algos if "--algos" in flags else list(algos)
        args.envs = args.envs if "--envs" in flags else list(envs)
        args.seeds = args.seeds if "--seeds" in flags else [1, 2, 3, 4, 5]
    problems = []
    for name in ("algos", "envs", "seeds"):
        values = getattr(args, name)
        if not values or len(set(values)) != len(values):
            problems.append(f"--{name} needs at least one value" if not values else f"--{name} lists a value twice")
    lows = {"time": (1, "minutes"), "gpus": (0, "GPUs"), "cpus": (1, "CPUs"), "mem": (1, "GB"),
            "array_parallelism": (1, "jobs"), "max_requeues": (0, "requeues"), "signal_delay_s": (10, "seconds"),
            "reps": (100, "resamples"), "per_gpu": (1, "runs at once per GPU")}  # fmt: skip
    for name, (low, unit) in lows.items():
        if getattr(args, name) is not None and getattr(args, name) < low:
            problems.append(f"--{name.replace('_', '-')} {getattr(args, name)}: needs at least {low} ({unit})")
    if args.launcher == "slurm" and args.signal_delay_s + 30 >= args.time * 60:
        # slurmctld checks time limits every 30 s and sends the warning at the first check that finds the job within
        # --signal-delay-s + 30 s of its limit: at the job's start here, so each requeued job would stop at once
        problems.append(
            f"--signal-delay-s {args.signal_delay_s} with --time {args.time}: Slurm would tell each job to stop as it "
            f"starts (it sends the warning up to 30 s early); give --time of at least "
            f"{(args.signal_delay_s + 30) // 60 + 1} or a smaller --signal-delay-s"
        )
    problems += [
        f"--slurm-param {p!r}: use KEY=VALUE" for p in args.slurm_param if not p.split("=", 1)[0] or "=" not in p
    ]
    slurm_only = (
        "partition time gpus cpus mem account qos slurm_param array_parallelism max_requeues signal_delay_s wait"
    )
    only = ["per_gpu"] if args.launcher == "slurm" else slurm_only.split()
    for name in (n for n in only if f"--{n.replace('_', '-')}" in flags):
        where = "local" if name == "per_gpu" else "slurm"
        problems.append(
            f"--{name.replace('_', '-')} only applies to --launcher {where} (this is --launcher {args.launcher})"
        )
    modes = [m for m in ("table_only", "status", "dry_run") if getattr(args, m)]
    if len(modes) > 1:
        problems.append(f"--{modes[0].replace('_', '-')} and --{modes[1].replace('_', '-')} exclude each other")
    if problems:
        raise UsageError("; ".join(problems))


def check_writable(args: Args) -> None:
    """Before anything runs: every path the mode writes (--status and --dry-run write nothing)."""
    paths = [] if args.status or args.dry_run else [("--out", args.out, "file")]
    paths += [] if args.status or args.dry_run or args.table_only else [("--runs-dir", args.runs_dir, "folder")]
    problems = []
    for flag, path, kind in paths:
        if os.path.exists(path) and os.path.isdir(path) != (kind == "folder"):
            problems.append(f"{flag} {path}: is a {'folder' if kind == 'file' else 'file'}, not a {kind}")
        elif why := unwritable_folder(path if kind == "folder" else os.path.dirname(path) or "."):
            problems.append(f"{flag} {path}: {why}")
    if problems:
        raise UsageError("; ".join(problems) + " (give a path you can write to)")


def check_cells(cells: list[Cell]) -> None:
    """Before anything runs or is written: each cell's command line as its script will take it (the script's own
    parser and flag checks, again after its presets), and its dataset as the run finds it (plumbing.resolve_task) with
    nothing downloaded: a missing D4RL file is fetched by the run, a Minari id left to it. The first problem, one line."""
    parsed, tasks, problems = {}, {}, []
    for cell in cells:
        module = toolbox.algorithm(cell.script)
        plumbing = sys.modules[module.RunArgs.__module__]  # the plumbing.py the script imports
        try:
            if (cell.script, cell.flags) not in parsed:  # the same flags parse the same for every dataset and seed
                argv = ["--env", cell.env, "--seed", str(cell.seed), *cell.flags]
                try:
                    parsed[(cell.script, cell.flags)] = plumbing.parse_args(module.Args, argv)
                except SystemExit:  # tyro's error box (above) names the flag; this line names the cell
                    raise plumbing.UserError(f"algorithms/{cell.script}.py refuses its flags (above)") from None
            args = dataclasses.replace(parsed[(cell.script, cell.flags)], env=cell.env, seed=cell.seed)
            plumbing.check_args(args)
            where = (args.env, args.dataset_path, args.eval_env, args.data_dir)
            minari = args.dataset_path is None and args.env not in plumbing.D4RL_NAMES and "/" in args.env
            if where not in tasks:
                with mock.patch.object(plumbing, "download", lambda *a: None):
                    tasks[where] = None if minari and not args.env.startswith("local/") else plumbing.resolve_task(*where)[0]  # fmt: skip
            if tasks[where] is not None and hasattr(module, "apply_presets"):
                plumbing.check_args(module.apply_presets(copy.deepcopy(args), tasks[where])[0])
        except plumbing.UserError as e:
            problems.append(f"{cell.label}: {'; '.join(str(e).splitlines())}")
    if problems:
        more = f" (and {len(problems) - 1} more of the {len(cells)} runs)" if len(problems) > 1 else ""
        raise UsageError(f"{problems[0]}{more}; nothing was started")


# ----------------------------------------------------------------------------------------------- run state
def grid_dir(runs_dir: str) -> str:
    return os.path.join(runs_dir, "_grid")


def record_path(runs_dir: str, cell_id: str) -> str:
    return os.path.join(grid_dir(runs_dir), f"{cell_id}.json")


def update_record(runs_dir: str, cell: Cell, **fields) -> dict:
    """The cell's record (RUNS_DIR/_grid/CELL.json: the launcher's state, job, host, pids, requeues, flags)."""
    path = record_path(runs_dir, cell.id)
    rec = read_json(path) or {"env": cell.env, "exp_name": cell.exp_name, "seed": cell.seed, "algo": cell.algo}
    rec.update(fields, updated=time.strftime("%Y-%m-%d %H:%M:%S"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(rec, path)
    return rec


def summary_state(summary: dict) -> str:
    """finished / failed / stopped from a summary.json ({} where there is none); a non-finite score is a failure."""
    status = summary.get("status") or ("finished" if summary.get("finished") else "stopped")
    if status == "finished":
        score = summary.get("last10_score")
        return "finished" if isinstance(score, (int, float)) and math.isfinite(score) else "failed"
    return "failed" if status == "failed" else "stopped"


def summary_error(summary: dict) -> str:
    if summary.get("error"):
        return str(summary["error"]).strip().splitlines()[-1]
    return f"non-finite score (last10_score = {summary.get('last10_score')}) although the run finished"


def lock_holder(run_dir: str) -> Optional[str]:
    """The pid in RUN_DIR/run.lock while a live run holds its exclusive flock, else None (probed with a shared
    non-blocking flock, let go at once)."""
    try:
        fd = os.open(os.path.join(run_dir, "run.lock"), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 32).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)
    return None


def scan_runs(runs_dir: str) -> dict[tuple, list[dict]]:
    """Every run directory under runs_dir, by (env, exp_name, seed) from its config.json."""
    runs: dict[tuple, list[dict]] = {}
    for config_path in glob.glob(os.path.join(runs_dir, "*", "config.json")):
        config, run_dir = read_json(config_path), os.path.dirname(config_path)
        if all(k in config for k in ("env", "exp_name", "seed")):
            summary = read_json(os.path.join(run_dir, "summary.json"))
            state = summary_state(summary)
            error = summary_error(summary) if state == "failed" else None
            if state == "finished" and (why := runinfo.run_damage(run_dir)):  # never a number of the table
                state, error = "failed", f"{why}; delete {run_dir} and the same command runs it again"
            run = {"run_dir": run_dir, "config": config, "summary": summary, "state": state, "error": error,
                   "has_checkpoint": os.path.isfile(os.path.join(run_dir, "checkpoint.pt")),
                   "locked_by": lock_holder(run_dir), "mtime": os.path.getmtime(config_path)}  # fmt: skip
            runs.setdefault((config["env"], config["exp_name"], int(config["seed"])), []).append(run)
    return runs


def best_run(runs: list[dict]) -> Optional[dict]:
    """The run directory that stands for a cell: a finished one, else one with a checkpoint, else the newest."""
    order = {"finished": 0, "failed": 1, "stopped": 2}
    return min(runs, key=lambda r: (order[r["state"]], not r["has_checkpoint"], -r["mtime"]), default=None)


def pid_alive(pid: Optional[int]) -> bool:
    try:
        return bool(pid) and os.kill(pid, 0) is None
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def slurm_live_jobs(job_ids: list[str]) -> Optional[set]:
    """The job ids (an array's task as ARRAYID_TASK) that squeue still lists: pending (a requeued job too), running or
    completing. None where nobody can tell (no squeue, or the controller does not answer): then a launch trusts the
    records and starts nothing that a record says is queued or running."""
    if not job_ids or not shutil.which("squeue"):
        return None
    try:
        cmd = ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sorted(set(job_ids)))]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:  # squeue -j of one id the controller has forgotten fails; any other failure is unknown
        return set() if "Invalid job id" in proc.stderr else None
    return set(proc.stdout.split())


def cell_state(key: tuple, runs: list[dict], record: Optional[dict], live_jobs: Optional[set] = None) -> dict:
    """One of finished, failed, running, queued, stopped (resumable), not started; with the run dir and error line."""
    run, record = best_run(runs), record or {}
    out = {"state": "not started", "run_dir": run and run["run_dir"], "error": None, "run": run, "record": record}
    if run and run["state"] == "finished":
        return {**out, "state": "finished"}
    live = next((r for r in runs if r["locked_by"]), None)
    if live:  # a run holds its run.lock, whoever started it: nothing may start a second writer there
        return {**out, "state": "running", "run_dir": live["run_dir"], "run": live, "locked_by": live["locked_by"]}
    if run and run["state"] == "failed":
        return {**out, "state": "failed", "error": run["error"]}
    state = record.get("state")
    if state == "failed":
        return {**out, "state": "failed", "error": record.get("error")}
    if state in ("running", "queued"):
        if record.get("host") == socket.gethostname() and record.get("launcher") != "slurm":  # a local job: its pid
            alive = state == "running" and pid_alive(record.get("pid"))
        else:
            alive = not record.get("job_id") or live_jobs is None or str(record["job_id"]) in live_jobs
        if alive:
            return {**out, "state": state}
    return {**out, "state": "stopped"} if run else out


def collect(runs_dir: str, cells: Optional[list[Cell]] = None) -> dict[tuple, dict]:
    """The state of each cell: the given ones, or every cell found in runs_dir (run dirs and launcher records)."""
    runs, records = scan_runs(runs_dir), {}
    for rec in map(read_json, glob.glob(os.path.join(grid_dir(runs_dir), "*.json"))):
        if all(k in rec for k in ("env", "exp_name", "seed")):
            records[(rec["env"], rec["exp_name"], int(rec["seed"]))] = rec
    keys = [c.key for c in cells] if cells is not None else sorted(set(runs) | set(records))
    live = slurm_live_jobs([str(r["job_id"]) for r in records.values() if r.get("job_id")
                            and r.get("launcher") == "slurm" and r.get("state") in ("running", "queued")])  # fmt: skip
    return {k: cell_state(k, runs.get(k, []), records.get(k), live) for k in keys}


def run_epochs(run_dir: str) -> int:
    """Epochs done so far (metrics.csv rows after the dynamics-fit row 0)."""
    try:
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            return max((int(r["epoch"]) for r in csv.DictReader(f) if r.get("epoch")), default=0)
    except (OSError, ValueError, KeyError):
        return 0


def whereabouts(st: dict) -> str:
    """Where a cell stands when it is neither finished nor failed (a skip line, the list under a table)."""
    rec, run = st.get("record") or {}, st.get("run")
    job = f"{rec.get('launcher')} job {rec['job_id']}" if rec.get("job_id") else None
    if st.get("locked_by"):
        return f"{st['state']} ({st['run_dir']}/run.lock is held by pid {st['locked_by']})"
    if st["state"] in ("running", "queued"):
        host = f" on {rec['host']}" if rec.get("host") else ""
        return f"{st['state']} ({job or str(rec.get('launcher')) + ' launcher'}{host})"
    if st["state"] == "stopped":
        where = f"stopped at epoch {run_epochs(run['run_dir'])}/{run['config'].get('epochs')} in {run['run_dir']}"
        if job and rec.get("state") in ("running", "queued"):
            return f"{where} (its {job} left the queue while the run was {rec['state']}: lost or killed)"
        return where + (f" ({job}: {rec['error']})" if job and rec.get("error") else f" ({job})" if job else "")
    return "not started" + (f" (its {job} left the queue before the run began)" if job else "")


# ----------------------------------------------------------------------------------------------- one cell
def child_setup(parent: int) -> None:
    """In a run's process before it starts: it ignores Slurm's warning signal (USR2, sent to every process of the job)
    and dies with its job (PR_SET_PDEATHSIG, Linux; the run keeps its last checkpoint, its run.lock goes with it)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the job died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)


class GridJob:
    """One cell run to its end as a submitit job, on Slurm or here (LocalExecutor): a stopped run is resumed, a
    failed one skipped unless retry_failed. Locally the run has its own session (Ctrl-C reaches the launcher alone);
    `env` sets the run's CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS (None: unset), `watch` is the launcher's pid (the
    run is killed once it is gone), `echo` copies the run's output to the job's stdout besides its log."""

    _child, _log, _stopping, _term_seen, _tail = None, None, False, False, b""  # this process's, never pickled

    def __init__(self, cell: Cell, runs_dir: str, launcher: str, retry_failed: bool = False,
                 grace_s: int = 150, env: Optional[dict] = None, echo: bool = True, watch: Optional[int] = None):  # fmt: skip
        self.cell, self.runs_dir, self.launcher = cell, os.path.abspath(runs_dir), launcher
        self.retry_failed, self.grace_s = retry_failed, grace_s
        self.local, self.env, self.echo, self.watch = launcher == "local", env or {}, echo, watch

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def _pump(self, deadline: Optional[float] = None) -> bool:
        """Copy the run's output to its log (and with `echo` to stdout) until it closes (True) or the deadline passes
        (False); a run whose launcher (`watch`) is gone is killed, as one of a killed launcher."""
        fd = self._child.stdout.fileno()
        while deadline is None or time.time() < deadline:
            if select.select([fd], [], [], 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.time())))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return True
                for out in [self._log] + [sys.stdout.buffer] * self.echo:
                    out.write(chunk)
                    out.flush()
                self._tail = (self._tail + chunk)[-65536:]  # for the error line of a failed run
            elif self.watch and not pid_alive(self.watch) and self._child.poll() is None:
                self._stopping = True
                self._child.kill()
        return False

    def _command(self, run: Optional[dict]) -> list[str]:
        script = os.path.join(ROOT, "algorithms", f"{self.cell.script}.py")
        if run is not None:  # from its last checkpoint; one killed before its first (in the ensemble fit) refits
            return toolbox.launch_command(script, "--resume", run["run_dir"], *["--no-cuda"] * (run["config"].get("cuda") is False))  # fmt: skip
        cell = self.cell
        return toolbox.launch_command(script, "--env", cell.env, "--seed", str(cell.seed), "--runs-dir", self.runs_dir, *cell.flags)  # fmt: skip

    def _run_child(self, cmd: list[str]) -> int:
        env = {k: str(v) for k, v in {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}.items() if v is not None}
        print("$", *[f"{k}={v}" for k, v in self.env.items() if v is not None], shlex.join(cmd), flush=True)
        os.makedirs(os.path.join(grid_dir(self.runs_dir), "logs"), exist_ok=True)
        with open(os.path.join(grid_dir(self.runs_dir), "logs", f"{self.cell.id}.log"), "ab") as self._log:
            when = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {socket.gethostname()}"
            self._log.write(f"\n=== {when} $ {shlex.join(cmd)}\n".encode())
            self._tail, setup = b"", functools.partial(child_setup, os.getpid())
            self._child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=self.local, preexec_fn=setup)  # fmt: skip
            update_record(self.runs_dir, self.cell, child_pid=self._child.pid)
            self._pump()
            rc, self._child = self._child.wait(), None
        return rc

    def checkpoint(self, *args, **kwargs):
        """submitit calls this on a time limit or preemption: stop the run so it saves, then requeue this job."""
        import submitit

        self._stopping, child = True, self._child
        if child is not None and child.poll() is None:
            if not self._term_seen:
                child.send_signal(signal.SIGTERM)
            if not self._pump(deadline=time.time() + self.grace_s):
                child.kill()  # it is past the grace time: the last checkpoint is what is kept
            child.wait()
        print(f"{self.cell.label}: stopped for a requeue; the requeued job resumes it", flush=True)
        requeues = read_json(record_path(self.runs_dir, self.cell.id)).get("requeues", 0) + 1
        update_record(self.runs_dir, self.cell, state="queued", requeues=requeues, child_pid=None)
        return submitit.helpers.DelayedSubmission(copy.copy(self))

    def __call__(self) -> dict:
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            self._term_seen = not self.local  # under Slurm the run got it too: do not send a second one
            if self.local and not self._stopping and self._child is not None:
                self._child.send_signal(signal.SIGTERM)  # locally the run has its own session: forward it once
            self._stopping = True
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return self._run()
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _finish(self, state: str, run_dir: Optional[str], error: Optional[str] = None) -> dict:
        if state != "running":
            update_record(self.runs_dir, self.cell, state=state, run_dir=run_dir, error=error, child_pid=None)
        print(f"{self.cell.label}: {state}" + (f": {error}" if error else "") + (f" ({run_dir})" if run_dir else ""), flush=True)  # fmt: skip
        return {"cell": self.cell.label, "state": state, "run_dir": run_dir, "error": error}

    def _run(self) -> dict:
        cell, job_id = self.cell, None
        live = [r for r in scan_runs(self.runs_dir).get(cell.key, []) if r["locked_by"]]
        if live:  # started elsewhere since this launch looked: the run would refuse a second writer anyway
            return self._finish("running", live[0]["run_dir"], f"run.lock is held by pid {live[0]['locked_by']}")
        with contextlib.suppress(RuntimeError, ImportError):
            import submitit

            job_id = submitit.JobEnvironment().job_id
        rec = read_json(record_path(self.runs_dir, cell.id))
        update_record(self.runs_dir, cell, state="running", launcher=self.launcher, host=socket.gethostname(),
                      pid=os.getpid(), job_id=job_id or rec.get("job_id"), error=None)  # fmt: skip
        last_epochs, rc = -1, None
        while True:  # an exit 0 without finishing (e.g. --stop-after-epochs in --extra) resumes while it progresses
            run = best_run(scan_runs(self.runs_dir).get(cell.key, []))
            run_dir = run and run["run_dir"]
            if run and run["state"] == "finished":
                return self._finish("finished", run_dir)
            if run and run["state"] == "failed" and not (self.retry_failed and rc is None):
                return self._finish("failed", run_dir, run["error"])
            if self._stopping or rc in INTERRUPTED:  # a signal, during a run or between two: start none
                return self._finish("stopped", run_dir, f"interrupted{f' (exit {rc})' * (rc is not None)}; it resumes on the next launch")  # fmt: skip
            if rc:
                lines = [ln for ln in (ln.rsplit("\r", 1)[-1].strip() for ln in self._tail.decode(errors="replace").splitlines()) if ln]  # fmt: skip
                errors = [ln for ln in lines if ln.startswith("error:") or re.match(r"^\w*(Error|Exception)\b", ln)]
                error = (errors or lines or ["(no output)"])[-1]  # the run's last error line
                if rc < 0:  # killed from outside, e.g. by the kernel's out-of-memory killer
                    error = f"killed by {signal.Signals(-rc).name}" + " (out of memory?)" * (rc == -signal.SIGKILL)
                return self._finish("failed", run_dir, f"exit {rc}: {error}")
            epochs = run_epochs(run_dir) if run else 0
            if rc is not None and epochs <= last_epochs:
                return self._finish("failed", run_dir, "the run exited 0 without finishing or progressing")
            last_epochs = epochs
            if run is None:  # what the next launch compares its flags with (changed_flags)
                update_record(self.runs_dir, cell, flags=list(cell.flags))
            print(f"{cell.label}: " + (f"resume {run_dir} at epoch {epochs}" if run else "start"), flush=True)
            try:
                with toolbox.cached_ensemble(cell.cache, self._command(run)) as cmd:
                    rc = self._run_child(cmd)
            except UserError as e:  # a damaged cache entry: a failed cell, its line says what to do
                return self._finish("failed", run_dir, str(e))


# ----------------------------------------------------------------------------------------------- the paper's tables
def paper_scores(path: str = PAPER_SCORES) -> list[dict]:
    """The paper's numbers, one row each: benchmarks/paper_scores.csv (table, LaTeX label, dataset, the paper's
    column, our variant, the config a run needs to match it, mean, std); a test checks it against the LaTeX."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["mean"], r["std"] = float(r["mean"]), float(r["std"]) if r["std"] else None
        r["config"] = {k: float(v) for k, v in (kv.split("=", 1) for kv in r["config"].split())}
    return rows


def paper_number(rows: Optional[list], env: str, algo: str, config: Optional[dict] = None) -> Optional[tuple]:
    """(text, table, dataset) of the paper's number for a cell: the λo table where the run has its λo and λp, else
    Table 1, Table 4, the jump table. `local/NAME` is compared with the D4RL dataset NAME-v2."""
    dataset = env[len("local/") :] + "-v2" if env.startswith("local/") else env
    config = config or {}
    for table in PAPER_ORDER:
        for r in rows or []:
            if (r["table"], r["dataset"], r["algorithm"]) == (table, dataset, algo) and all(
                isinstance(config.get(k), (int, float)) and float(config[k]) == v for k, v in r["config"].items()
            ):
                std = f" ± {r['std']:.1f}" if r["std"] is not None else ""
                return (f"{r['mean']:.1f}{std}", table, dataset)
    return None


# ----------------------------------------------------------------------------------------------- aggregation
@contextlib.contextmanager
def numpy_seed(seed: int):
    """rliable draws from numpy's global RNG: seeded for its call, the caller's state put back after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def bootstrap(score_dict: dict, func, reps: int, seed: int) -> tuple[dict, dict]:
    """rliable's stratified bootstrap (runs resampled within each task)."""
    from rliable import library as rly

    with numpy_seed(seed):
        return rly.get_interval_estimates(score_dict, func, reps=reps, confidence_interval_size=0.95)


def run_config(config: dict) -> dict:
    """What a run computes: its config.json without the keys that only say where and how it ran (RUN_ONLY), and its
    dataset by content, not by path."""
    out = {k: v for k, v in config.items() if k not in RUN_ONLY}
    if isinstance(out.get("_dataset"), dict):
        out["_dataset"] = out["_dataset"].get("fingerprint")
    return out


def row_names(states: dict[tuple, dict]) -> tuple[dict, list[str]]:
    """The table row of each cell's run: its exp_name, and where one dataset and exp_name ran in several configurations
    (a changed --extra or --extra-for, say) the config.json values that tell them apart, so that a row never averages
    runs of different configurations. Also a note for each such split."""
    text = lambda st: json.dumps(run_config(st["run"]["config"]), sort_keys=True) if st["run"] else None
    configs: dict[tuple, dict] = {}
    for (env, exp, _), st in states.items():
        if st["run"]:
            configs.setdefault((env, exp), {})[text(st)] = run_config(st["run"]["config"])
    names, notes = {}, []
    for (env, exp), by_text in sorted(configs.items()):
        differ = lambda k, by_text=by_text: len({json.dumps(d.get(k)) for d in by_text.values()}) > 1
        keys = sorted({k for c in by_text.values() for k in c if differ(k)})
        for t, c in by_text.items():
            shown = ", ".join(f"{k}={json.dumps(c.get(k))}" for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
            names[(env, exp, t)] = exp if len(by_text) == 1 else f"{exp} [{shown}]"
        if len(by_text) > 1:
            notes.append(f"{env} {exp}: runs of {len(by_text)} configurations (their config.json differs in "
                         f"{', '.join(keys)}); one row each, never averaged together")  # fmt: skip
    return {key: names.get((key[0], key[1], text(st)), key[1]) for key, st in states.items()}, notes


def finished_summaries(states: dict[tuple, dict]) -> list[dict]:
    """The finished runs' summary.json, each with its cell's dataset ("env") and table row ("algorithm")."""
    rows, _ = row_names(states)
    return [{**st["run"]["summary"], "env": k[0], "algorithm": rows[k], "exp_name": k[1], "config": st["run"]["config"]}
            for k, st in sorted(states.items()) if st["state"] == "finished"]  # fmt: skip


def aggregate(states: dict[tuple, dict], reps: int = 2000, seed: int = 0, paper: Optional[list] = None) -> dict:
    """Every number of the report, from the finished cells' summary.json files (one row per dataset, exp_name and
    configuration)."""
    rows, notes = row_names(states)
    finished, groups, cells = finished_summaries(states), {}, {}
    failed = [{"env": k[0], "algorithm": rows[k], "seed": k[2], "run_dir": st["run_dir"], "error": st["error"]}
              for k, st in sorted(states.items()) if st["state"] == "failed"]  # fmt: skip
    for s in finished:
        groups.setdefault((s["env"], s["algorithm"]), []).append(s)
    for (env, algo), runs in sorted(groups.items()):
        runs = sorted(runs, key=lambda r: r["seed"])
        scores = np.array([float(r["last10_score"]) for r in runs])
        cells[f"{env}/{algo}"] = {
            "env": env, "algorithm": algo, "seeds": [r["seed"] for r in runs], "last10": scores.tolist(),
            "final": [next((float(r[k]) for k in ("normalized_score", "return") if r.get(k) is not None), None) for r in runs],
            "mean": float(scores.mean()), "std": float(scores.std()),
            "ci95": list(stats.bootstrap(scores, reps, seed)),  # scipy's percentile bootstrap (benchmarks/stats.py)
            "epochs": sorted({int(r["epochs"]) for r in runs}), "score_kind": runs[0].get("score_kind"),
            "devices": sorted({str(r.get("device_name", r.get("device"))) for r in runs}),
            "hours_per_run": float(np.mean([r.get("wall_seconds", 0.0) for r in runs]) / 3600),
            "failed": sum(1 for f in failed if (f["env"], f["algorithm"]) == (env, algo)),
            "paper": paper_number(paper, env, runs[0]["exp_name"], runs[0]["config"]),
        }  # fmt: skip
    for (env, exp, s), st in sorted(states.items()):  # cells with failed runs only still get a row
        if st["state"] == "failed":
            config = st["run"]["config"] if st["run"] else None
            cell = cells.setdefault(f"{env}/{rows[(env, exp, s)]}", {"env": env, "algorithm": rows[(env, exp, s)],
                                    "seeds": [], "failed": 0, "paper": paper_number(paper, env, exp, config)})  # fmt: skip
            cell["failed"] += not cell["seeds"]
    # across datasets: D4RL-normalised ones only, those every algorithm has, and per algorithm the seeds it
    # finished on all of them (rliable's score matrices are runs × tasks)
    normalised = {k: v for k, v in groups.items() if v[0].get("score_kind") == "d4rl_normalized"}
    algos = sorted({a for _, a in normalised})
    tasks = sorted(e for e in {e for e, _ in normalised} if all((e, a) in normalised for a in algos))
    matrices, agg, poi = {}, {}, {}
    for algo in algos:
        seeds = sorted(set.intersection(*[{r["seed"] for r in normalised[(e, algo)]} for e in tasks])) if tasks else []
        if not seeds:
            notes.append(f"{algo}: no seed finished on every dataset")
            continue
        by_seed = {(e, r["seed"]): float(r["last10_score"]) for e in tasks for r in normalised[(e, algo)]}
        matrices[algo] = np.array([[by_seed[(e, s)] for e in tasks] for s in seeds])
    dropped = sorted({e for e, _ in normalised} - set(tasks))
    if dropped:
        notes.append(f"left out of the aggregate (not every algorithm has them): {', '.join(dropped)}")
    if matrices:
        from rliable import metrics  # imported only when there is something to estimate (it takes seconds)

        iqm_mean = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])
        point, ci = bootstrap(matrices, iqm_mean, reps, seed)
        for algo, m in matrices.items():
            agg[algo] = {
                "runs": int(m.shape[0]), "tasks": int(m.shape[1]),
                "iqm": float(point[algo][0]), "iqm_ci95": [float(ci[algo][0][0]), float(ci[algo][1][0])],
                "mean": float(point[algo][1]), "mean_ci95": [float(ci[algo][0][1]), float(ci[algo][1][1])],
                "epochs": sorted({int(r["epochs"]) for e in tasks for r in normalised[(e, algo)]}),
            }  # fmt: skip
        pairs = {b: (matrices["orpo"], matrices[b]) for b in matrices if b != "orpo" and "orpo" in matrices}
        if pairs:
            point, ci = bootstrap(pairs, metrics.probability_of_improvement, reps, seed)
            poi = {b: {"p": float(point[b]), "ci95": [float(ci[b][0][0]), float(ci[b][1][0])]} for b in pairs}
    epochs = sorted({int(s["epochs"]) for s in finished})
    return {
        "cells": cells, "aggregate": agg, "tasks": tasks, "probability_of_improvement": poi, "failed": failed,
        "notes": notes, "epochs": epochs, "short": bool(epochs) and min(epochs) < PAPER_EPOCHS,
        "seeds": sorted({int(s["seed"]) for s in finished}), "matrices": {a: m.tolist() for a, m in matrices.items()},
        "devices": sorted({str(s.get("device_name", s.get("device"))) for s in finished}),
    }  # fmt: skip


def short_mark(epochs: list[int]) -> str:
    return " †" if epochs and min(epochs) < PAPER_EPOCHS else ""


def markdown(report: dict, meta: dict) -> str:
    """The table's page, from benchmarks/templates/scores.md.j2 (each cell's row is made here)."""
    cells = []
    for _, c in sorted(report["cells"].items()):
        paper = f"{c['paper'][0]} ({c['paper'][1]})" if c.get("paper") else "-"
        env = c["env"] + (" ‡" if c["env"].startswith("local/") else "")
        if not c["seeds"]:
            cells.append([env, c["algorithm"], "no finished run", "-", paper, "-", 0, "-", c["failed"], "-", "-"])
            continue
        finals, mark, h = [f for f in c["final"] if f is not None], short_mark(c["epochs"]), c["hours_per_run"]
        cells.append([env, c["algorithm"], f"{c['mean']:.1f} ± {c['std']:.1f}{mark}",
                      "[{:.1f}, {:.1f}]".format(*c["ci95"]), paper,
                      f"{np.mean(finals):.1f} ± {np.std(finals):.1f}" if finals else "-",
                      f"{len(c['seeds'])} ({', '.join(map(str, c['seeds']))})", f"{'/'.join(map(str, c['epochs']))}{mark}",
                      c["failed"], ", ".join(c["devices"]), f"{h:.2f} h" if h >= 1 else f"{h * 60:.1f} min"])  # fmt: skip
    local = any(c["env"].startswith("local/") for c in report["cells"].values())
    return pages.render("scores.md.j2", None, {}, report=report, meta=meta, cells=cells, local=local,
                        mark=short_mark, PAPER_EPOCHS=PAPER_EPOCHS)  # fmt: skip


def figure_title(report: dict, what: str) -> str:
    title = f"{what} ({'/'.join(map(str, report['epochs']))} epochs, seeds {', '.join(map(str, report['seeds']))})"
    return title + (
        f"\n† fewer epochs than the paper's {PAPER_EPOCHS}: not comparable with the paper" * report["short"]
    )


def plot_profile(report: dict, reps: int, seed: int):
    """Performance profile (rliable): the fraction of runs × datasets whose score is above τ, per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library as rly, plot_utils

    matrices = {a: np.array(m) for a, m in report["matrices"].items()}
    values = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(min(0.0, values.min()), max(values.max(), 1.0), 101)
    with numpy_seed(seed):
        profiles, cis = rly.create_performance_profile(matrices, taus, reps=reps)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, ax=ax,
                                         xlabel=r"D4RL-normalised last-10 score $\tau$",
                                         ylabel=r"fraction of runs with score $> \tau$")  # fmt: skip
    ax.legend([plt.Line2D([], [], color=ln.get_color()) for ln in ax.get_lines()], list(profiles), loc="upper right")
    fig.suptitle(figure_title(report, f"Performance profile over {len(report['tasks'])} dataset(s)"), fontsize=9)
    fig.tight_layout()
    return fig


def plot_curves(summaries: list[dict], report: dict):
    """Evaluation score per epoch, mean over seeds, one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({s["env"] for s in summaries})
    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 3.9), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for algo in sorted({s["algorithm"] for s in summaries if s["env"] == env}):
            curves = []
            for s in (s for s in summaries if s["env"] == env and s["algorithm"] == algo):
                with open(os.path.join(s["run_dir"], "metrics.csv")) as f:
                    rows = [r for r in csv.DictReader(f) if r.get("eval/return")]
                key = "eval/normalized_score" if s["score_kind"] == "d4rl_normalized" else "eval/return"
                curves.append([(int(r["epoch"]), float(r[key])) for r in rows])
            n = min(len(c) for c in curves)
            mean = np.mean([[v for _, v in c[:n]] for c in curves], axis=0)
            ax.plot([e for e, _ in curves[0][:n]], mean, label=f"{algo} ({len(curves)} seeds)")
        ax.set(title=env, xlabel="epoch (1000 gradient steps at the paper's size)", ylabel="score")
        ax.legend()
    fig.suptitle(figure_title(report, "Learning curves"), fontsize=9)
    fig.tight_layout()
    return fig


def cpu_name() -> str:
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    return platform.processor() or platform.machine()


def run_commits(run_dir: str) -> list[str]:
    """The code's commit at each start and resume of a run, as the run recorded it (RUN_DIR/invocations.jsonl)."""
    with contextlib.suppress(OSError, ValueError), open(os.path.join(run_dir, "invocations.jsonl")) as f:
        return [json.loads(line).get("git_revision") or "unknown" for line in f if line.strip()]
    return []


def write_report(args: Args, states: dict[tuple, dict]) -> dict:
    report, stem = aggregate(states, args.reps, args.bootstrap_seed, paper_scores()), os.path.splitext(args.out)[0]
    done = [run_commits(st["run_dir"]) for st in states.values() if st["state"] == "finished"]
    commits = sorted({c for cs in done for c in cs}) + ["unrecorded"] * (not all(done))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host_cpu": cpu_name(), "commits": commits,
            "reps": args.reps, "bootstrap_seed": args.bootstrap_seed, "paper_epochs": PAPER_EPOCHS,
            "runs_dir": args.runs_dir}  # fmt: skip
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    summaries = finished_summaries(states)
    for name, fig in (("curves", summaries and plot_curves(summaries, report)),
                      ("profile", report["matrices"] and plot_profile(report, args.reps, args.bootstrap_seed))):  # fmt: skip
        if fig:
            path = f"{stem}{'' if name == 'curves' else '_profile'}.png"
            replace_atomically(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=120), suffix=".tmp.png")
            meta[name], meta[f"{name}_title"] = os.path.basename(path), fig._suptitle.get_text()
    text = markdown(report, meta)
    write_text(args.out, text)
    write_json({"meta": meta, **report}, f"{stem}.json")
    print(text)
    return report


# ----------------------------------------------------------------------------------------------- launchers
def status_view(runs_dir: str, states: dict[tuple, dict]) -> int:
    order = ["queued", "running", "finished", "failed", "stopped", "not started"]
    counts = [f"{sum(st['state'] == s for st in states.values())} {s}" for s in order]
    print(f"{runs_dir}: {len(states)} runs: {', '.join(counts)}")
    for key, st in sorted(states.items()):
        if st["state"] in ("running", "stopped", "failed"):
            rec = st["record"]
            job = f" on {rec.get('host')} {rec.get('launcher')} job {rec['job_id']}" if rec.get("job_id") else ""
            line = whereabouts(st) if st["state"] != "failed" else f"failed: {st['error']}"
            print(f"  {key[1]} {key[0]} seed {key[2]}{job}: {line}")
    return 0


def slurm_parameters(args: Args) -> dict:
    params = {"job_name": "orpo-grid", "time": args.time, "cpus_per_task": args.cpus, "mem": f"{args.mem}GB",
              "array_parallelism": args.array_parallelism, "signal_delay_s": args.signal_delay_s,
              "stderr_to_stdout": True, "gpus_per_node": args.gpus or None, "partition": args.partition,
              "account": args.account, "qos": args.qos,
              "additional_parameters": dict(p.split("=", 1) for p in args.slurm_param) or None}  # fmt: skip
    return {k: v for k, v in params.items() if v is not None}


def submitit_folder(runs_dir: str) -> str:
    """submitit's folder for each job: RUNS_DIR/_grid/submitit/JOBID (an array's task: ARRAYID_TASK)."""
    return os.path.join(os.path.abspath(grid_dir(runs_dir)), "submitit", "%j")


def sbatch_script(args: Args, n: int) -> str:
    """The sbatch script that submitit writes for an array of n jobs (one job when n is 1) with these flags."""
    from submitit.slurm.slurm import _make_sbatch_string

    folder = submitit_folder(args.runs_dir)
    command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(folder)}"
    return _make_sbatch_string(command=command, folder=folder, map_count=n if n > 1 else None, **slurm_parameters(args))


# what sbatch says when it cannot reach a controller (no slurm.conf and no DNS record, a controller down or restarting)
SBATCH_UNREACHABLE = re.compile(
    "Could not establish a configuration source|s_p_parse_file|resolve_ctls_from_dns_srv|Unable to contact slurm "
    "controller|Unable to establish controller machine|Connection refused|Socket timed out|Zero Bytes were transmitted"
)


def sbatch_problem(text: str, args: Args) -> str:
    """sbatch's refusal (its stderr, several lines) as one line: what it said and what the jobs asked for."""
    lines = (re.sub(r"^(sbatch: (error|fatal): |allocation failure: )", "", ln.strip()).strip() for ln in str(text).splitlines())  # fmt: skip
    said = list(dict.fromkeys(ln for ln in lines if ln and not ln.startswith("Traceback"))) or ["(no message)"]
    if any(SBATCH_UNREACHABLE.search(line) for line in said):
        gist = said[0] + (f" ... {said[-1]}" if len(said) > 1 else "")
        return (
            f"--launcher slurm needs Slurm's sbatch to reach a controller, and it could not: {gist} (is this a "
            f"cluster's login node, or SLURM_CONF set? `sinfo` should answer); nothing was submitted"
        )
    asked = [f"--partition {args.partition or '(the default)'}", f"--time {args.time}", f"--cpus {args.cpus}",
             f"--mem {args.mem}", f"--gpus {args.gpus}", *[f"--{k} {v}" for k, v in (("account", args.account),
             ("qos", args.qos)) if v], *[f"--slurm-param {p}" for p in args.slurm_param]]  # fmt: skip
    return (
        f"sbatch refused the jobs: {'; '.join(said)} (each job asks for {', '.join(asked)}; `sinfo -o '%P %c %m %G "
        f"%l'` lists what the partitions offer); nothing was submitted"
    )


def check_sbatch(args: Args, n: int) -> None:
    """Before anything is written, `sbatch --test-only` of the array's own script: what sbatch would refuse, and what
    a cluster that does not enforce its limits would leave pending for ever (more than any node has)."""
    with tempfile.NamedTemporaryFile("w", prefix="orpo-grid-", suffix=".sh") as f:
        f.write(sbatch_script(args, n))
        f.flush()
        try:
            proc = subprocess.run(["sbatch", "--test-only", f.name], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise UsageError("sbatch --test-only did not answer within 120 s (is the controller up? `sinfo`)") from None
    if proc.returncode != 0:
        raise UsageError(sbatch_problem(proc.stderr + proc.stdout, args))


def submit(args: Args, todo: list[tuple[Cell, dict]]) -> list:
    """--launcher slurm: one job array through submitit's SlurmExecutor, each cell's record "queued" with its job. A
    refused submission puts the records back (none left "queued") and removes what it made."""
    import submitit

    if not shutil.which("sbatch"):
        raise UsageError("--launcher slurm needs Slurm's sbatch on PATH (none here); --dry-run prints what it would submit")  # fmt: skip
    try:
        executor = submitit.SlurmExecutor(folder=submitit_folder(args.runs_dir), max_num_timeout=args.max_requeues)
        executor.update_parameters(**slurm_parameters(args))
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"slurm: {str(e).splitlines()[0]}") from None
    check_sbatch(args, len(todo))  # a refusal is one line, before any record is written
    jobs = [GridJob(cell, args.runs_dir, "slurm", args.retry_failed, max(10, args.signal_delay_s - 30))
            for cell, _ in todo]  # fmt: skip
    root = os.path.dirname(submitit_folder(args.runs_dir))
    made = next((d for d in (args.runs_dir, grid_dir(args.runs_dir)) if not os.path.isdir(d)), None)
    records = {job.cell.id: read_json(record_path(args.runs_dir, job.cell.id)) for job in jobs}
    files = set(os.listdir(root)) if os.path.isdir(root) else None
    for job in jobs:
        update_record(args.runs_dir, job.cell, state="queued", launcher="slurm", job_id=None, error=None, host=None, pid=None)  # fmt: skip
    try:  # submitit prints a refusing sbatch's stderr before raising it: it is said once, below, in one line
        with contextlib.redirect_stderr(io.StringIO()), executor.batch():
            handles = [executor.submit(job) for job in jobs]
    except Exception as e:  # submitit's FailedJobError (sbatch's stderr), or sbatch that did not run
        for cell_id, rec in records.items() if not made else ():
            write_json(rec, record_path(args.runs_dir, cell_id)) if rec else os.remove(record_path(args.runs_dir, cell_id))  # fmt: skip
        new = [root] if files is None else [os.path.join(root, n) for n in set(os.listdir(root)) - files]
        for path in [made] if made else new:
            with contextlib.suppress(OSError):
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
        raise UsageError(sbatch_problem(str(e) or type(e).__name__, args)) from None
    for job, handle in zip(jobs, handles):
        rec = read_json(record_path(args.runs_dir, job.cell.id))
        if rec.get("state") == "queued" and not rec.get("job_id"):  # not started yet (a started job writes its own)
            update_record(args.runs_dir, job.cell, job_id=str(handle.job_id))
        print(f"submitted {job.cell.label}: job {handle.job_id}", flush=True)
    return list(zip(jobs, handles))


def local_gpus() -> list[Optional[str]]:
    """The GPUs a --per-gpu launch spreads its runs over, as CUDA_VISIBLE_DEVICES values: the ones it lists (up to the
    first negative one, as CUDA reads it), else each GPU torch sees; [None] where there is none (the CPU's)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] or [None]
    ids = [d.strip() for d in visible.split(",")]
    ids = ids[: next((i for i, d in enumerate(ids) if not d or d.startswith("-")), len(ids))]
    return ids or [None]


def run_local(args: Args, cells: list[Cell], executor=None) -> Optional[int]:
    """--launcher local: the cells as submitit jobs here (LocalExecutor), one after another, or K at once on each GPU
    (--per-gpu K; OMP_NUM_THREADS = cores / runs at once unless set). Ctrl-C or SIGTERM stops every job (its run
    saves) and starts no more, a second Ctrl-C stops the runs at once. The signal's number when interrupted."""
    import submitit

    if executor is None:
        executor = submitit.LocalExecutor(folder=submitit_folder(args.runs_dir), max_num_timeout=args.max_requeues)
        executor.update_parameters(timeout_min=args.time, signal_delay_s=args.signal_delay_s)
    gpus = local_gpus() if args.per_gpu else [os.environ.get("CUDA_VISIBLE_DEVICES")]
    slots = [gpu for _ in range(args.per_gpu or 1) for gpu in gpus]  # the first K × GPUs cells go to each GPU in turn
    threads = os.environ.get("OMP_NUM_THREADS") or (max(1, (os.cpu_count() or 1) // len(slots)) if args.per_gpu else None)  # fmt: skip
    if args.per_gpu:
        where = ", ".join(f"GPU {g}" if g is not None else "the CPU" for g in gpus)
        print(f"--per-gpu {args.per_gpu}: up to {len(slots)} runs at once on {where}", flush=True)
    queue, running, stopped = list(cells), {}, None  # running: slot -> [job, handle, t0, bytes of its stdout shown]
    while running or (queue and stopped is None):
        try:
            for slot in [i for i in range(len(slots)) if i not in running][: len(queue) if stopped is None else 0]:
                job = GridJob(queue.pop(0), args.runs_dir, "local", args.retry_failed, max(10, args.signal_delay_s - 5),
                              {"CUDA_VISIBLE_DEVICES": slots[slot], "OMP_NUM_THREADS": threads}, len(slots) == 1, os.getpid())  # fmt: skip
                sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: a terminal's Ctrl-C is ours alone
                try:
                    running[slot] = [job, executor.submit(job), time.time(), 0]
                finally:
                    signal.signal(signal.SIGINT, sigint)
            for slot, entry in list(running.items()):
                job, handle, t0, shown = entry
                with contextlib.suppress(OSError), open(handle.paths.stdout, "rb") as f:  # the job's output, shown here
                    f.seek(shown)
                    entry[3] += sys.stdout.buffer.write(f.read())
                    sys.stdout.flush()
                if handle.done():
                    del running[slot]
                    try:
                        state = handle.result()["state"]
                    except Exception as e:  # the job's own record holds its state; say what submitit saw
                        state = f"ended with an error: {([ln for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__])[-1]}"  # fmt: skip
                    where = f"GPU {slots[slot]}" if args.per_gpu and slots[slot] else "this machine"
                    print(f"  {job.cell.label}: {state} after {time.time() - t0:.0f} s on {where}", flush=True)
            time.sleep(0.2)
        except KeyboardInterrupt as e:  # the first: SIGTERM to each job's controller (submitit forwards it to the job,
            # the job to its run once: the run saves); a second Ctrl-C: SIGINT to the runs themselves (they stop at once)
            if stopped is None:
                print("\ninterrupted: waiting for the runs to save (Ctrl-C again stops them at once)", file=sys.stderr)
            for job, handle, *_ in running.values():
                with contextlib.suppress(OSError, AttributeError, TypeError):
                    pid = read_json(record_path(job.runs_dir, job.cell.id)).get("child_pid")
                    handle._process.send_signal(signal.SIGTERM) if stopped is None else os.kill(pid, signal.SIGINT)
            stopped = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
    return stopped


def wait_slurm_jobs(pairs: list, poll_s: float = 10.0) -> None:
    """--wait on Slurm: until squeue lists no job of this launch (a requeued one is listed again) or its result is
    written. Not submitit's own wait: it asks sacct, which a cluster without accounting does not answer."""
    pending = {str(handle.job_id): (job, handle) for job, handle in pairs}
    since, last_check, silent = time.time(), 0.0, False
    written = lambda handle: os.path.exists(handle.paths.result_pickle) and os.path.getmtime(handle.paths.result_pickle) >= since  # fmt: skip
    while pending:
        done = [jid for jid, (job, handle) in pending.items() if written(handle)]
        if time.time() - last_check >= min(poll_s, 1 + (time.time() - since) / 4):  # soon at first, then every poll_s
            live, last_check = slurm_live_jobs(list(pending)), time.time()
            if live is None and not silent:
                print("squeue does not answer (the controller down?): still waiting for the jobs", flush=True)
            silent = live is None
            done += [jid for jid in pending if live is not None and jid not in live]
        for jid in dict.fromkeys(done):
            job, handle = pending.pop(jid)
            end = time.time() + 90  # a job that left the queue unfinished (lost, cancelled): Slurm ends its run soon
            while not written(handle) and time.time() < end and any(r["locked_by"] for r in scan_runs(job.runs_dir).get(job.cell.key, [])):  # fmt: skip
                time.sleep(1.0)
            state = read_json(record_path(job.runs_dir, job.cell.id)).get("state", "unknown")
            print(f"{job.cell.label}: job {jid} ended (the cell's record says: {state})", flush=True)
        if pending:
            time.sleep(1.0)


def main(args: Args, argv: list[str]) -> int:
    validate(args, argv)
    check_writable(args)
    grid_given = any(a.split("=", 1)[0] in ("--algos", "--envs", "--seeds", "--paper-table") for a in argv)
    cells = make_grid(args)
    if args.status or args.table_only:  # the grid's cells when it is given (--paper-table 1 of Table 4's runs, say)
        states = collect(args.runs_dir, cells if grid_given else None)
        if args.status:
            return status_view(args.runs_dir, states)
        report = write_report(args, states)
        if grid_given:
            print_unfinished(cells, states)
        return 1 if report["failed"] else 0
    check_cells(cells)
    states = collect(args.runs_dir, cells)
    changed = changed_flags(cells, states)
    if changed:
        raise UsageError(changed)
    todo, skipped_failed = [], 0
    for cell, st in ((cell, states[cell.key]) for cell in cells):
        skip = {"finished": f"finished ({st['run_dir']})", "running": whereabouts(st), "queued": whereabouts(st),
                "failed": f"failed earlier: {st['error']} (--retry-failed runs it again)" * (not args.retry_failed)}  # fmt: skip
        if skip.get(st["state"]):
            print(f"skip {cell.label}: {skip[st['state']]}")
            skipped_failed += st["state"] == "failed"
        else:
            todo.append((cell, st))
    if args.dry_run:
        for cell, st in todo:
            job = GridJob(cell, args.runs_dir, args.launcher)
            print(f"{cell.label}: {'resume' if st['run'] else 'start'}: {shlex.join(job._command(st['run']))}")
        if args.launcher == "slurm":
            print(f"\nwould submit {len(todo)} job(s) as one array, with this sbatch script:\n{sbatch_script(args, len(todo))}")  # fmt: skip
        print(f"dry run: {len(todo)} of {len(cells)} runs to do; nothing was started")
        return 0
    here = [os.path.join(ROOT, "benchmarks"), os.environ.get("PYTHONPATH")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in here if p)  # a job unpickles GridJob (its toolbox: plumbing)
    interrupted = None
    if args.launcher == "local":
        interrupted = run_local(args, [cell for cell, _ in todo]) if todo else None
    else:
        submitted = submit(args, todo) if todo else []
        if not args.wait:
            print(f"submitted {len(submitted)} job(s); `python benchmarks/scores.py --status --runs-dir {args.runs_dir}` "
                  f"follows them, `--table-only` aggregates")  # fmt: skip
            if skipped_failed:
                print(f"{skipped_failed} of {len(cells)} runs failed earlier and were not submitted (--retry-failed)", file=sys.stderr)  # fmt: skip
            return 1 if skipped_failed else 0
        wait_slurm_jobs(submitted)
    states = collect(args.runs_dir, cells)  # the grid's cells only, as --table-only of the same grid
    write_report(args, states)
    failed, unfinished = print_unfinished(cells, states, failed=True), print_unfinished(cells, states)
    if interrupted:  # toolbox.cli says how to continue and exits 128 + the signal (130 Ctrl-C, 143 SIGTERM)
        raise KeyboardInterrupt(interrupted)
    return 1 if failed or unfinished else 0


def print_unfinished(cells: list[Cell], states: dict[tuple, dict], failed: bool = False) -> list[Cell]:
    """Name each cell of the grid that is neither finished nor failed (or each failed one) to stderr."""
    listed = [c for c in cells if (states[c.key]["state"] == "failed") == failed and states[c.key]["state"] != "finished"]  # fmt: skip
    if listed:
        print(f"{len(listed)} of {len(cells)} runs " + ("failed (left out of the table):" if failed else
              "are not finished (not in the table; the same command again resumes them):"), file=sys.stderr)  # fmt: skip
        for c in listed:
            print(f"  {c.label}: {states[c.key]['error'] if failed else whereabouts(states[c.key])}", file=sys.stderr)
    return listed


def cli(argv: list[str]) -> int:
    return toolbox.cli(lambda args: main(args, argv), Args, argv, sigterm=True)


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
