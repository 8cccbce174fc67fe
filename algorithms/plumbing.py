"""Everything an algorithm file needs that is not its method, once (as CleanRL keeps its buffer and evaluation in
cleanrl_utils): datasets (D4RL HDF5, local files, Minari), evaluation and the D4RL score, the run and data flags,
--help, and `Run`: the run directory, logging, checkpoints, resume, signals and summary.json. Copy a method file and
this one to use that method in your own project. A method's `main` reads:

    run = Run(args, apply_presets)        # flags checked, dataset found, presets filled, seeded, run directory made
    data, max_action = run.load_data()     # D as tensors on the device, checked against the evaluation env
    run.start(parts)                       # what a checkpoint saves; resumes from one if there is one
    for epoch in run.epochs():             # stops after the epoch in which SIGINT/SIGTERM arrived
        ... run.add("losses", stats)       # the method; statistics summed as tensors (no host sync)
        metrics = run.means()              # sets run.nonfinite: such a policy is never evaluated
        ... metrics |= run.evaluate(policy); run.log(metrics); run.checkpoint_due() and run.save_checkpoint()
    return run.finish(actor)               # policy.pt and summary.json
and `cli(main, Args)` turns every error into one line and a non-zero exit. That is the surface the method files use,
`__all__`: Run (and the methods above), RunArgs, Task, UserError, check_memory, cli, gradient_steps and safe_load
(what is method, such as the model's evaluation η_M̂(π), stays in the method files' shared blocks). The scripts beside them (benchmarks/, datasets/, toy/) and the tests reach the parts below by name too: the
data (resolve_task, load_transitions), evaluation, flags (parse_args, check_args, help_text) and files (write_json,
atomic_save).

A new flag is a field of the file's `Args` with a docstring under it (--help shows a field without one too, by its
name, type and default). A numeric flag is range-checked before anything runs when it declares its interval beside
it, `x: float = field(default=0.5, metadata={"range": "[0, 1]"})` ("[" and "]" include the bound, "(" and ")" do
not), or when its name is in RANGES below; any other number is only checked to be finite. A flag naming a file says
what to pass, metadata={"path": "a run's policy.pt"} (and "directory": True where a folder will do), and the rules
that tie a method's flags together are its `Args.problems()`, a list of one-line problems (orpo.py has one).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import errno
import fcntl
import io
import itertools
import json
import math
import os
import platform
import random
import shlex
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import MISSING, asdict, dataclass
from typing import Callable, Optional, get_args, get_origin, get_type_hints

import gymnasium as gym
import h5py
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

__all__ = ["Run", "RunArgs", "Task", "UserError", "check_memory", "cli", "gradient_steps", "safe_load"]


class UserError(Exception):
    """A problem with the user's input, reported as one line and a non-zero exit."""

    code = 1


class UsageError(UserError):
    """Bad flags or input: one line per problem, exit 2 (the method files find them before any data is read or
    anything is written). The scripts beside (benchmarks/, toy/, datasets/) raise it too: one error type."""

    code = 2


class RunEnded(UserError):
    """A run that stops early on purpose (a signal) or because training turned non-finite; `code` is the exit status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------------------------- data
# D4RL's reference returns (d4rl/infos.py): random and expert policies, used for the normalised score
DOMAINS = {
    "hopper": ("Hopper-v4", -20.272305, 3234.3),
    "halfcheetah": ("HalfCheetah-v4", -280.178953, 12135.0),
    "walker2d": ("Walker2d-v4", 1.629008, 4592.3),
}
D4RL_NAMES = [f"{d}-{k}-v2" for d in DOMAINS for k in ("random", "medium", "medium-replay", "medium-expert")]
JUMP_TASKS = ("halfcheetah-jump", "halfcheetah-jump-hard")
REWARD_FNS = ("env", *JUMP_TASKS)  # a file's `reward_fn` attr: the env's own reward, or a jump task's
D4RL_URLS = (  # the original host first, then a public mirror of the same files
    "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{file}",
    "https://huggingface.co/datasets/imone/D4RL/resolve/main/{file}",
)
OFFLINE = "or, offline, make a local dataset: python datasets/collect.py --env Hopper-v4 (docs/data.md)"


@dataclass
class Task:
    name: str
    gym_id: str
    domain: str
    reward_fn: str = "env"
    ref_min: Optional[float] = None
    ref_max: Optional[float] = None

    def normalize(self, returns: np.ndarray) -> Optional[np.ndarray]:
        """D4RL normalised score, per episode: 100·(R − R_random)/(R_expert − R_random)."""
        if self.ref_min is None or self.ref_max is None:
            return None
        return 100.0 * (returns - self.ref_min) / (self.ref_max - self.ref_min)


def domain_of(gym_id: str) -> str:
    for domain, (default_id, _, _) in DOMAINS.items():
        if gym_id.split("-")[0] == default_id.split("-")[0]:
            return domain
    return gym_id.split("-")[0].lower()


def download(urls: list[str], path: str) -> None:
    """Fetch the first URL that answers, with a progress bar, to a temporary name renamed when complete."""
    folder = os.path.dirname(path) or "."
    made, reasons, tmp = not os.path.isdir(folder), [], path + ".part"
    os.makedirs(folder, exist_ok=True)
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=30) as response, open(tmp, "wb") as f:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {os.path.basename(path)}") as bar:
                    while chunk := response.read(1 << 20):
                        bar.update(f.write(chunk))
            return os.replace(tmp, path)
        except (urllib.error.URLError, OSError, ValueError) as e:
            reasons.append(f"{url}: {getattr(e, 'reason', e)}")
            with contextlib.suppress(OSError):
                os.remove(tmp)
    if made:  # a failed first download leaves no empty folder behind
        with contextlib.suppress(OSError):
            os.removedirs(folder)
    raise UserError(f"could not download the dataset ({'; '.join(reasons)}); put the file at {path}, {OFFLINE}")


def read_attrs(path: str) -> dict:
    """The file's metadata attrs that matter here, each checked: env_id and reward_fn strings, finite reference
    returns with ref_min < ref_max (a bad one would turn every score into inf or NaN)."""
    try:
        with h5py.File(path, "r") as f:
            raw = {k: f.attrs.get(k) for k in ("env_id", "reward_fn", "ref_min_score", "ref_max_score")}
    except OSError as e:
        raise UserError(f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again") from None
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in raw.items()}
    for k in ("env_id", "reward_fn"):
        if attrs[k] is not None and not isinstance(attrs[k], str):
            raise UserError(f"{path}: attr '{k}' is {attrs[k]!r}, not a string; fix the file's attrs")
    if attrs["reward_fn"] not in (None, *REWARD_FNS):
        raise UserError(f"{path}: attr 'reward_fn' is {attrs['reward_fn']!r}; use one of {', '.join(REWARD_FNS)}")
    refs = [attrs["ref_min_score"], attrs["ref_max_score"]]
    if refs != [None, None]:
        try:
            low, high = (float(v) for v in refs)
        except (TypeError, ValueError):
            low = high = math.nan
        if not low < high or not math.isfinite(high - low):
            raise UserError(f"{path}: attrs ref_min_score {refs[0]!r}, ref_max_score {refs[1]!r} must be finite numbers, "
                            "min < max (or drop both: raw returns are reported)")  # fmt: skip
        attrs["ref_min_score"], attrs["ref_max_score"] = low, high
    return attrs


def resolve_task(env: str, dataset_path: Optional[str], eval_env: Optional[str], data_dir: Optional[str]):
    """Map --env / --dataset-path to a Task (eval env, termination, reference scores) and an HDF5 path."""
    data_dir = data_dir or os.environ.get("D4RL_DATASET_DIR", os.path.expanduser("~/.d4rl/datasets"))
    if env in D4RL_NAMES and dataset_path is None:
        domain, kind = env.split("-", 1)
        file = f"{domain}_{kind[: -len('-v2')].replace('-', '_')}-v2.hdf5"  # d4rl's own cache name
        path = os.path.join(data_dir, file)
        if not os.path.isfile(path):
            download([u.format(file=file) for u in D4RL_URLS], path)
        gym_id, ref_min, ref_max = DOMAINS[domain]
        return Task(env, eval_env or gym_id, domain, "env", ref_min, ref_max), path
    if dataset_path is not None:
        path, name = dataset_path, os.path.splitext(os.path.basename(dataset_path))[0]
    elif env in JUMP_TASKS or env.startswith("local/"):
        path, name = os.path.join(data_dir, f"{env}.hdf5"), env
        if not os.path.isfile(path):
            maker = "datasets/halfcheetah_jump.py --task " + env if env in JUMP_TASKS else "datasets/collect.py"
            raise UserError(f"{path} does not exist; make it with `python {maker}` (or set --data-dir)")
    elif "/" in env:
        return resolve_minari(env, eval_env)
    else:
        raise UserError(f"unknown dataset '{env}'; use one of {', '.join(D4RL_NAMES + list(JUMP_TASKS))}, local/NAME, "
                        "a Minari id like mujoco/hopper/medium-v0, or --dataset-path FILE.hdf5")  # fmt: skip
    attrs = read_attrs(path)
    gym_id = eval_env or attrs["env_id"] or (None if dataset_path else "HalfCheetah-v4")
    if gym_id is None:
        raise UserError(f"{path} names no evaluation env (attr 'env_id'); pass --eval-env, e.g. Hopper-v4")
    domain, reward_fn = domain_of(gym_id), attrs["reward_fn"] or "env"
    refs = (attrs["ref_min_score"], attrs["ref_max_score"])
    if refs[0] is None and reward_fn == "env" and domain in DOMAINS:
        refs = DOMAINS[domain][1:]  # same env and reward as D4RL: D4RL's reference returns apply
    return Task(name, gym_id, domain, reward_fn, *refs), path


def resolve_minari(dataset_id: str, eval_env: Optional[str]) -> tuple[Task, str]:
    """A Minari dataset from its local cache (downloaded there when the network allows)."""
    try:
        import minari
    except ImportError:
        raise UserError(
            f"'{dataset_id}' looks like a Minari id but minari is not installed; pip install \"minari[hf]\""
        ) from None
    try:
        dataset = minari.load_dataset(dataset_id, download=True)
    except Exception as e:  # minari raises several types for unknown ids and network failures
        import importlib.util

        hint = "" if importlib.util.find_spec("huggingface_hub") else '; downloading needs pip install "minari[hf]"'
        raise UserError(f"could not load Minari dataset '{dataset_id}' ({type(e).__name__}: {e}); check the id with "
                        f"`minari list remote` or put it in the local cache{hint}") from None  # fmt: skip
    gym_id, meta = eval_env or dataset.spec.env_spec.id, dataset.storage.metadata
    ref = (meta.get("ref_min_score"), meta.get("ref_max_score"))
    task = Task(dataset_id, gym_id, domain_of(gym_id), "env", *(None, None) if ref[0] is None else map(float, ref))
    return task, "minari:" + dataset_id


def minari_arrays(dataset_id: str) -> dict[str, np.ndarray]:
    import minari

    episodes = list(minari.load_dataset(dataset_id).iterate_episodes())
    columns = {"observations": lambda e: e.observations[:-1], "next_observations": lambda e: e.observations[1:]}
    columns.update(actions=lambda e: e.actions, rewards=lambda e: e.rewards)
    columns.update(terminals=lambda e: e.terminations, timeouts=lambda e: e.truncations)
    return {k: np.concatenate([column(e) for e in episodes]) for k, column in columns.items()}


def load_transitions(path: str) -> dict[str, np.ndarray]:
    """Read (s, a, r, s', done) from a D4RL-layout HDF5 file, checked, with timeout steps dropped.

    s' is the file's `next_observations`, never `observations[i+1]` (which is the next episode's first state
    at episode ends); timeout steps are dropped like d4rl's `qlearning_dataset`; `terminals` is the done mask."""
    keys = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    if path.startswith("minari:"):
        data = minari_arrays(path[len("minari:") :])
    else:
        try:
            with h5py.File(path, "r") as f:
                missing = [k for k in keys if not isinstance(f.get(k), h5py.Dataset)]
                if missing:
                    raise UserError(
                        f"{path} lacks the dataset(s) {', '.join(missing)}; a D4RL-layout file needs {', '.join(keys)}"
                    )
                data = {k: f[k][()] for k in keys}
        except OSError as e:
            raise UserError(
                f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again"
            ) from None
    data = {k: np.asarray(v) for k, v in data.items()}
    n = len(data["observations"]) if data["observations"].ndim else 0
    for k in keys:
        ndim = 2 if k in ("observations", "actions", "next_observations") else 1
        v = data[k] = data[k][:, 0] if ndim == 1 and data[k].ndim == 2 and data[k].shape[1] == 1 else data[k]
        if v.ndim != ndim or len(v) != n or v.dtype.kind not in "fiub":
            raise UserError(
                f"{path}: '{k}' has shape {v.shape} and dtype {v.dtype}; expected {ndim}-D numbers, {n} rows"
            )
        if n == 0:
            raise UserError(f"{path} holds 0 rows; a run needs at least 10 transitions")
        checks = [(~np.isfinite(v.reshape(n, -1)).all(1), "has NaN or infinite rows; drop them from the file")]
        if k in ("terminals", "timeouts"):
            checks.append((~np.isin(v, (0, 1)), "must hold only 0/1 (or booleans); fix the file"))
        for bad, why in checks:
            if bad.any():
                first = f"row {bad.argmax()}" + (f", {v[bad.argmax()]}" if ndim == 1 else "")
                raise UserError(f"{path}: '{k}' {why} ({bad.sum()} row(s), first: {first})")
    if data["next_observations"].shape != data["observations"].shape:
        raise UserError(f"{path}: next_observations {data['next_observations'].shape} != observations' shape")
    keep = ~data["timeouts"].astype(bool)
    if not keep.any():
        raise UserError(f"{path} holds no transition that is not a timeout step; a run needs at least 10")
    return {
        "obs": data["observations"][keep].astype(np.float32),
        "act": data["actions"][keep].astype(np.float32),
        "rew": data["rewards"][keep].astype(np.float32)[:, None],
        "next_obs": data["next_observations"][keep].astype(np.float32),
        "done": data["terminals"][keep].astype(np.float32)[:, None],
    }


def task_reward(task: Task, next_obs: np.ndarray, action: np.ndarray, env_reward: np.ndarray, info: dict) -> np.ndarray:
    """The task's reward in the evaluation env: the env's own, or the jump tasks' (paper appendix)."""
    if task.reward_fn == "env":
        return env_reward
    # r = clip(v_x, −3, 3) − 0.1·‖a‖² + 15·z, z the root height; jump-hard: −3 when the root angle > 1
    reward = np.clip(info["x_velocity"], -3, 3) - 0.1 * (action**2).sum(-1) + 15 * next_obs[:, 0]
    if task.reward_fn == "halfcheetah-jump-hard":
        reward = np.where(next_obs[:, 1] > 1, -3.0, reward)
    return reward


# ---------------------------------------------------------------------------------------------------------- evaluation
def make_eval_envs(task: Task, n: int) -> gym.vector.VectorEnv:
    # the *-v4 envs are the closest to D4RL's v2 data; Gymnasium's "out of date" warning is expected
    warnings.filterwarnings("ignore", message=".*is out of date.*")
    try:
        return gym.vector.SyncVectorEnv([lambda: gym.make(task.gym_id) for _ in range(n)])
    except Exception as e:  # gym's errors, and an `module:Id` whose module does not import
        raise UserError(
            f"cannot make evaluation env '{task.gym_id}' ({type(e).__name__}: {e}); pass --eval-env with a Gymnasium id"
        ) from None


@torch.no_grad()
def evaluate(policy: Callable, envs, task: Task, seed: int, device) -> tuple[np.ndarray, np.ndarray]:
    """One episode per sub-env with deterministic actions; returns (episode returns, initial observations)."""
    obs, _ = envs.reset(seed=seed)
    first_obs, n = obs.copy(), envs.num_envs
    returns, running = np.zeros(n), np.ones(n, dtype=bool)
    while running.any():
        action = policy(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
        obs, reward, terminated, truncated, info = envs.step(action)
        returns += running * task_reward(task, obs, action, reward, info)
        running &= ~(terminated | truncated)
    return returns, first_obs


def eval_metrics(task: Task, returns: np.ndarray) -> dict[str, float]:
    metrics = {"eval/return": float(returns.mean()), "eval/return_std": float(returns.std())}
    if (score := task.normalize(returns)) is not None:
        metrics |= {"eval/normalized_score": float(score.mean()), "eval/normalized_score_std": float(score.std())}
    return metrics


# --------------------------------------------------------------------------------------------------------------- flags
@dataclass
class RunArgs:
    """The flags every algorithm file takes; its own `Args` adds the method's flags above these."""

    # Data
    env: str = "hopper-medium-v2"
    """dataset: a D4RL name like hopper-medium-v2, halfcheetah-jump(-hard), local/NAME or a Minari id"""
    dataset_path: Optional[str] = None
    """any D4RL-layout HDF5 file to train on instead of --env's file (eval env from --eval-env or its metadata)"""
    eval_env: Optional[str] = None
    """Gymnasium id of the evaluation environment, overriding the dataset's (e.g. Hopper-v4)"""
    data_dir: Optional[str] = None
    """where datasets live; default $D4RL_DATASET_DIR or ~/.d4rl/datasets"""

    # Run: seeds, devices, logging, checkpoints
    exp_name: Optional[str] = None
    """name of this experiment, part of the run directory name (default: the algorithm's file name, e.g. orpo)"""
    seed: int = 1
    """seed of the experiment (torch, numpy, random, evaluation environments)"""
    torch_deterministic: bool = True
    """make cuDNN deterministic (`torch.backends.cudnn.deterministic`)"""
    cuda: bool = True
    """use a CUDA GPU when one is present (the same code runs on CPU otherwise)"""
    cuda_graphs: bool = True
    """on a CUDA GPU, capture each epoch's gradient steps as one CUDA graph and replay it (ignored on a CPU;
    --no-cuda-graphs steps eagerly)"""
    track: bool = False
    """also log to Weights & Biases (set WANDB_MODE=offline to log without network)"""
    wandb_project_name: str = "orpo"
    """the wandb project name"""
    wandb_entity: Optional[str] = None
    """the wandb entity (team)"""
    runs_dir: str = "runs"
    """folder holding the run directories `{env}__{exp_name}__{seed}__{time}`"""
    resume: Optional[str] = None
    """continue a stopped run from its run directory (its saved config is used; --epochs may extend it)"""
    stop_after_epochs: Optional[int] = None
    """stop (with a checkpoint) after this many epochs in this invocation, e.g. for time-limited jobs"""
    checkpoint_every: int = 100
    """save a checkpoint every this many epochs (and after the last, and after a SIGINT/SIGTERM)"""
    checkpoint_minutes: float = 10.0
    """also save a checkpoint at the end of the first epoch after this many minutes since the last one"""
    threads: Optional[int] = None
    """torch CPU threads (default: $OMP_NUM_THREADS where set, else 1: on a 2-core machine with anything else running,
    2 threads ran an ensemble step 3x slower than 1; docs/speed.md)"""


# every numeric flag's interval (a file checks the flags it has); "[" and "]" include the bound, "(" and ")" do not
RANGES = (
    "[1, inf) threads epochs sac_lr_horizon steps_per_epoch batch_size eval_every eval_episodes checkpoint_every num_ensemble num_elites "
    "dynamics_batch_size dynamics_max_epochs dynamics_patience dynamics_max_holdout rollout_batch_size "
    "model_retain_epochs rollout_length policy_freq stop_after_epochs",
    "(0, inf) actor_lr critic_lr dynamics_lr sac_actor_lr sac_critic_lr sac_alpha_lr checkpoint_minutes",
    "[0, inf) lambda_p lambda_o exploration_noise policy_noise noise_clip alpha",
    "[0, 4294967296) seed",  # numpy's seed range
    "[0, 1] real_ratio gamma tau",
    "(0, 1) dynamics_holdout_ratio",
)


def outside(value: float, interval: str) -> bool:
    low, high = (float(b) for b in interval[1:-1].split(","))
    above = low <= value if interval[0] == "[" else low < value
    return not above or not (value <= high if interval[-1] == "]" else value < high)


# flags of the model-based files that act only together: (a flag only those files have, broken(args), the problem)
CONFLICTS = (
    ("num_elites", lambda a: a.num_elites > a.num_ensemble, "--num-elites {a.num_elites} exceeds --num-ensemble"),
    ("uncertainty", lambda a: a.num_ensemble == 1 and a.uncertainty in ("ensemble_var", "ensemble_std"), "--uncertainty "
     "{a.uncertainty} is the members' disagreement, 0 with --num-ensemble 1 (λ would do nothing): use 2+ members or "
     "max_aleatoric"),
    ("dynamics_cache", lambda a: a.dynamics_cache is not None and a.load_dynamics_path is not None, "--load-dynamics-"
     "path and --dynamics-cache both name the ensemble to use: pass one"),
)  # fmt: skip
# flags naming a file: (flag, what to pass); a method's own say so beside them (module docstring)
PATHS = (("dataset_path", "a D4RL-layout HDF5 file"), ("load_dynamics_path", "a run's dynamics.pt"))


def check_args(args) -> None:
    """Every flag in its range and every combination able to run, before anything is read or written: one line per
    problem, exit 2."""
    problems, fields = [], {f.name: f for f in dataclasses.fields(args)}
    for name, value in asdict(args).items():
        flag, values = "--" + name.replace("_", "-"), value if isinstance(value, (tuple, list)) else [value]
        if any(isinstance(v, float) and not np.isfinite(v) for v in values):
            problems.append(f"{flag} {value}: must be a finite number")
        elif name.endswith("hidden_dims") and (not values or min(values) < 1):
            problems.append(f"{flag} {value}: every layer needs at least 1 unit")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            declared = fields[name].metadata.get("range", "").replace(" ", "").replace(",", ", ").split()
            declared = [declared] if declared else []
            for low, high, *names in declared or map(str.split, RANGES):
                if (declared or name in names) and outside(value, f"{low} {high}"):
                    problems.append(f"{flag} {value}: must lie in {low} {high}")
    problems += [why.format(a=args) for guard, broken, why in CONFLICTS if hasattr(args, guard) and broken(args)]
    problems += args.problems() if hasattr(args, "problems") else []  # the method's own rules, beside its flags
    own = [
        (f.name, f.metadata["path"], f.metadata.get("directory", False))
        for f in fields.values()
        if "path" in f.metadata
    ]
    for name, what, dir_ok in [(name, what, False) for name, what in PATHS] + own:
        path = getattr(args, name, None)
        if path is not None and not (os.path.isfile(path) or dir_ok and os.path.isdir(path)):
            found = "is a directory" if os.path.isdir(path) else "no such file or directory"
            found = (
                "is not a regular file (a device, FIFO or socket)"
                if os.path.exists(path) and not os.path.isdir(path)
                else found
            )
            problems.append(f"--{name.replace('_', '-')} {path}: {found}; pass {what}")
    name = args.exp_name
    if name is not None and (os.sep in name or name in ("", ".", "..") or len(name) > 100):
        problems.append(f"--exp-name {name[:40]!r}: must be a plain name of at most 100 characters (a part of the run "
                        "directory's name)")  # fmt: skip
    if problems:
        raise UsageError("\n".join(problems))


def help_text(args_class: type) -> str:
    """--help in the file's order of ideas: the file's header, then each comment line of Args heads a section of flags,
    each flag with its docstring and one default."""
    import ast
    import inspect
    import shutil
    import textwrap

    module, items, docs = inspect.getmodule(args_class), [], {}
    for cls in [c for c in args_class.__mro__ if dataclasses.is_dataclass(c)]:  # Args first, then RunArgs
        lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
        body = ast.parse("\n".join(lines)).body[0].body
        docs.update(  # a field's docstring is the string statement right after it (a field may have none)
            {
                a.target.id: b.value.value
                for a, b in zip(body, body[1:])
                if isinstance(a, ast.AnnAssign)
                and isinstance(b, ast.Expr)
                and isinstance(getattr(b.value, "value", 0), str)
            }
        )
        headings = [(i + 1, line.strip()[2:]) for i, line in enumerate(lines) if line.strip().startswith("# ")]
        items += sorted(
            [(a.lineno, a.target.id, "") for a in body if isinstance(a, ast.AnnAssign)]
            + [(i, "", h) for i, h in headings]
        )
    hints, width = get_type_hints(args_class), min(120, shutil.get_terminal_size().columns)
    # a field without a default is shown as required: --help must not need a value the user has not given
    fields = {f.name: f for f in dataclasses.fields(args_class)}
    defaults = {n: f.default if f.default_factory is MISSING else f.default_factory() for n, f in fields.items()}
    wrap = textwrap.TextWrapper(width, subsequent_indent=" " * 30, break_on_hyphens=False)
    top = itertools.takewhile(
        lambda line: line.startswith("# ") and "---" not in line, inspect.getsource(module).split("\n")
    )
    out = [line[2:] for line in top] or (module.__doc__ or "").strip().split("\n")  # the file's header (or docstring)
    out += [""] if items and items[0][1] else []  # flags without a section heading still start a paragraph
    for _, name, heading in items:
        if name and name not in fields:  # a ClassVar or other non-field annotation
            continue
        if not name:  # a section heading
            out += ["", heading + ":"]
            continue
        kinds = [t for t in get_args(hints[name]) if t is not type(None)]
        kind = kinds[0] if type(None) in get_args(hints[name]) else hints[name]  # Optional[X] -> X
        flag, default = "--" + name.replace("_", "-"), defaults[name]
        text, _, rest = " ".join(docs.get(name, "").split()).partition(" (default: ")  # it may name its default
        shown, _, tail = rest.partition(")")
        if kind is bool:
            left, shown = f"  {flag}, --no-{flag[2:]}", shown or (flag if default else f"--no-{flag[2:]}")
        else:
            choices = get_args(kind) if str(kind).startswith("typing.Literal") else None
            item = getattr(get_args(kind)[0] if get_origin(kind) in (tuple, list) else None, "__name__", "").upper()
            metavar = "{" + ",".join(choices) + "}" if choices else f"{item} [{item} ...]" if item else None
            left = f"  {flag} {metavar or getattr(kind, '__name__', 'VALUE').upper()}"
            shown = shown or (" ".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default))
        out += [left] if len(left) > 28 else []  # a long flag gets a line of its own
        wrap.initial_indent = ("" if len(left) > 28 else left).ljust(30)
        out.append(wrap.fill(f"{text}{tail} " + ("(required)" if default is MISSING else f"(default: {shown})")))
    return "\n".join(out)


def parse_args(args_class: type, argv: list[str]):
    """tyro parses the flags; --help is the file's own (help_text); a parse error is one line, exit 2. Optional
    booleans (None: the preset decides) take --x / --no-x like every other boolean."""
    if "-h" in argv or "--help" in argv:
        with contextlib.suppress(BrokenPipeError):  # `--help | head`
            print(help_text(args_class), flush=True)
        sys.exit(0)
    optional_bools = {f"--{n.replace('_', '-')}" for n, t in get_type_hints(args_class).items() if t == Optional[bool]}
    words = []
    for arg, after in zip(argv, argv[1:] + [""]):
        flag = "--" + arg.removeprefix("--no-") if arg.startswith("--no-") else arg
        words += (
            [flag, str(arg == flag)] if flag in optional_bools and after not in ("True", "False", "None") else [arg]
        )
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(printed):
            args = tyro.cli(args_class, args=words)
    except SystemExit:  # tyro's message box: a title, a rule of dashes, the message, a rule, a footer
        box = [line.strip() for line in printed.getvalue().splitlines() if line.strip()]
        rules = [i for i, line in enumerate(box) if set(line) == {"-"}] + [len(box)] * 2
        message = " ".join(box[rules[0] + 1 : rules[1]]).replace(" .", ".")
        near = [box[i + 1].split()[0] for i, line in enumerate(box[:-1]) if line.startswith("Perhaps you meant")]
        hint = f"did you mean {near[0]}?" if near else f"see python {sys.argv[0]} --help"
        raise UsageError(f"{message or 'cannot parse the flags'} ({hint})") from None
    names = {f.name for f in dataclasses.fields(args_class)}
    typed = {w[2:].split("=")[0].replace("-", "_") for w in words if w.startswith("--")}
    args.typed = {n for n in typed if n in names} | {n[3:] for n in typed if n.startswith("no_") and n[3:] in names}
    return args  # `typed`: the flags the user gave (a resume names those it ignores, whatever their value)


# --------------------------------------------------------------------------------------------------------------- files
def atomic_save(obj, path: str, save: Optional[Callable] = None, tmp: str = "") -> None:
    """Save (torch.save by default) to a temporary name (`tmp`, else path + .tmp), renamed when complete: a crash or a
    full disk never leaves half a file."""
    tmp = tmp or path + ".tmp"
    try:  # our own file object, closed on any error: a half-written file must not keep its disk space after removal
        with open(tmp, "wb" if save is None else "w") as f:
            (save or torch.save)(obj, f)
        os.replace(tmp, path)
    except BaseException as e:  # a signal too: no .tmp is left behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if not isinstance(e, (OSError, RuntimeError)):  # torch.save reports a full disk as a RuntimeError
            raise
        cause = e if isinstance(e, OSError) else e.__context__  # torch's RuntimeError holds the OSError behind it
        why = getattr(cause, "strerror", None) or (str(e).splitlines()[0] if str(e) else type(e).__name__)
        code = getattr(cause, "errno", None) or errno.ENOSPC
    else:
        return
    raise OSError(code, f"could not write {path} ({why})")  # outside `except`: the failed writer is not kept alive


def safe_load(path: str, what: str):
    """torch.load with weights_only=True (a crafted pickle cannot run code); any failure is one line naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; pass the path of {what}") from None
    except Exception as e:  # torch raises many types for truncated, corrupt or foreign files
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'}"
        if "Weights only load failed" in str(e):
            reason = "it holds objects other than tensors and plain values"
        raise UserError(f"{path} is not a usable {what} ({reason}); delete it or pass another file") from None


_TMP_COUNT = itertools.count()


def _tmp_name(path: str, suffix: str = ".tmp") -> str:
    """A temporary name beside path, unique (pid and a count): two writers of one file never move each other's half."""
    return f"{path}.{os.getpid()}.{next(_TMP_COUNT)}{suffix}"


def write_json(obj, path: str, default: Optional[Callable] = None) -> None:
    """Strict JSON, atomically, the one JSON writer of the project (the scripts' too): a NaN or an infinity is written
    as null (json.dump would write NaN, not JSON); `default` turns other objects into JSON (json.dump's). Its temporary
    name is _tmp_name's: a grid's records, written by two jobs at once, never get half a file."""

    def finite(x):
        if isinstance(x, dict):
            return {k: finite(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [finite(v) for v in x]
        return None if isinstance(x, float) and not math.isfinite(x) else x

    def save(obj, f):
        json.dump(finite(obj), f, indent=2, allow_nan=False, default=default)

    atomic_save(obj, path, save, tmp=_tmp_name(path))


def read_json(path: str) -> dict:
    """A run's JSON file, or {} where there is none (or it is unreadable)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def rng_state() -> dict:
    """Every RNG state as tensors and plain values, so checkpoints load with weights_only=True."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "random": random.getstate(),
    }


def set_rng_state(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    kind, keys, pos, has_gauss, gauss = rng["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate((rng["random"][0], tuple(rng["random"][1]), rng["random"][2]))


def check_memory(nbytes: int, what: str, device: torch.device) -> None:
    """Refuse in one line, before any work, an allocation larger than the device's free memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        try:
            with open("/proc/meminfo") as f:
                free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return  # not Linux: nothing to measure against
    if nbytes > free:
        raise UserError(
            f"{what} needs {nbytes / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB free on the {device.type}; "
            "lower the flags that size it (--batch-size; --rollout-batch-size × rollout length × --model-retain-epochs)"
        )


def file_fingerprint(path: str) -> str:
    """Size and a hash of the first and last MiB: enough to notice a dataset file replaced under a run."""
    if path.startswith("minari:"):
        return path
    import hashlib

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(1 << 20)
        f.seek(max(0, size - (1 << 20)))
        tail = f.read(1 << 20)
    return f"{size}:{hashlib.sha256(head + tail).hexdigest()[:16]}"


def export_policy(actor: nn.Module, path: str) -> None:
    """Save an actor's deterministic policy alone, loadable without this file (datasets/collect.py's load_policy)."""
    linears = [m for m in actor.net if isinstance(m, nn.Linear)]
    outputs = linears[-1].out_features // (1 if actor.kind == "deterministic_mlp" else 2)  # SAC: mean and log-std
    atomic_save(
        {
            "kind": actor.kind,
            "obs_dim": linears[0].in_features,
            "act_dim": outputs,
            "hidden_dims": [m.out_features for m in linears[:-1]],
            "max_action": float(actor.max_action),
            "obs_mean": actor.obs_norm.mean.cpu(),
            "obs_std": actor.obs_norm.std.cpu(),
            "state_dict": {k: v.cpu() for k, v in actor.net.state_dict().items()},
        },
        path,
    )


# ---------------------------------------------------------------------------------------------------------------- runs
# the flags a resume takes from its own command line: always this invocation's (the machine's and the time's) ...
INVOCATION_FLAGS = ("resume", "stop_after_epochs", "cuda", "track", "checkpoint_minutes", "threads")
# ... and, where typed, the run's length and where its data lives now (the dataset's fingerprint must still match)
RESUME_FLAGS = INVOCATION_FLAGS + ("epochs", "data_dir", "dataset_path")


def script_of(args_class: type) -> str:
    """The algorithm file that defines this Args class (its name goes into config.json and the resume hint)."""
    return sys.modules[args_class.__module__].__file__


def resumed_args(args):
    """The saved config of --resume RUN_DIR, with the flags a resume may change; names every other flag it ignores.
    Refuses another script's run directory, and leaves a finished run untouched when there is nothing left to do."""
    Args = type(args)
    script = os.path.basename(script_of(Args))
    config = read_json(os.path.join(args.resume, "config.json"))
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if not k.startswith("_")}
    differ = sorted(set(saved) ^ set(asdict(Args())))
    newer = [k for k in differ if k not in saved and "_script" in config]  # flags added since the run was saved
    if config.get("_script") == script and len(differ) > len(newer):
        unknown = ", ".join(k for k in differ if k in saved)
        why = f"was saved by a {script} with flags this one lacks ({unknown})"
        raise UserError(f"--resume {args.resume} {why}; resume it with that version of {script}")
    if not config or config.get("_script", script) != script or differ and not newer:
        made_by = config.get("_script", f"another script (its flags differ: {', '.join(differ[:3])})")
        what = f"is a run of {made_by}" if config else "holds no readable config.json"
        raise UserError(f"--resume {args.resume} {what}; pass a run directory made by {script}")
    resumed, defaults = Args(**saved), Args()
    for k in newer:
        print(
            f"note: {args.resume} predates --{k.replace('_', '-')}; it resumes with the default {getattr(defaults, k)}"
        )
    # what the user typed (parse_args); Args made in code: the flags that differ from their defaults
    typed = getattr(args, "typed", None)
    typed = {k for k in asdict(args) if getattr(args, k) != getattr(defaults, k)} if typed is None else typed
    for k in sorted(typed - set(RESUME_FLAGS)):
        given, kept = getattr(args, k), getattr(resumed, k)
        if given != kept:
            print(f"note: --resume ignores --{k.replace('_', '-')} {given}; the run keeps its saved {kept}")
    for k in RESUME_FLAGS:
        if k in typed or k in INVOCATION_FLAGS:
            setattr(resumed, k, getattr(args, k))
    resumed.typed = typed & set(RESUME_FLAGS)
    done = read_json(os.path.join(args.resume, "summary.json"))
    if resumed.epochs < done.get("epochs", 0):
        raise UsageError(f"--epochs {resumed.epochs}: {args.resume} has run {done['epochs']} epochs already")
    if done.get("finished") and resumed.epochs == done["epochs"]:
        raise RunEnded(f"{args.resume} finished its {resumed.epochs} epochs: nothing to do (--epochs N extends it)", 0)
    return resumed


class Logger:
    """TensorBoard always, wandb with --track (started by Run), and metrics.csv rewritten atomically every epoch."""

    def __init__(self, run_dir: str, config: dict, track: bool, rows: list[dict]):
        self.writer = SummaryWriter(run_dir, purge_step=rows[-1]["epoch"] + 1 if rows else None)
        self.writer.add_text(
            "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config.items())
        )
        self.path, self.rows, self.track = os.path.join(run_dir, "metrics.csv"), rows, track

    def log(self, epoch: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, epoch)
        self.rows.append({"epoch": epoch, **metrics})
        fields = list(dict.fromkeys(k for row in self.rows for k in row))
        with open(self.path + ".tmp", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(self.path + ".tmp", self.path)

    def close(self) -> None:
        self.writer.close()
        if self.track:
            import wandb

            wandb.finish()


def device_name(device: torch.device) -> str:
    """The GPU's or CPU's model name, so every result says what it ran on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


# the flags that decide an ensemble fit, with the data's fingerprint: the key of a --dynamics-cache entry
DYNAMICS_KEY = (
    "num_ensemble", "num_elites", "dynamics_hidden_dims", "dynamics_bf16", "dynamics_lr", "dynamics_batch_size",
    "dynamics_max_epochs", "dynamics_patience", "dynamics_holdout_ratio", "dynamics_max_holdout", "seed",
)  # fmt: skip


def _checked_fit(fit: Callable[..., dict], state_path: str, minutes: float, key=None, signalled=lambda: False) -> dict:
    """fit(resume=..., progress=...), saving the fit's state to state_path every `minutes` and when a signal stops it
    (the last finished epoch's), continuing from it when it is there and was saved for the same `key`, then removing
    it; a diverged fit is one line. `signalled()` is checked after every epoch: the handler's KeyboardInterrupt is
    lost when it lands in a finalizer (CPython prints "Exception ignored" and goes on), the flag it set is not."""
    resume, t0, last, latest = None, time.time(), [time.time()], [None]
    if os.path.isfile(state_path):
        saved = safe_load(state_path, "part-way ensemble fit")
        if isinstance(saved, dict) and saved.get("key") == key and "state" in saved:
            resume = saved["state"]
            print(f"dynamics: continuing the ensemble fit saved at epoch {resume['epoch']} ({state_path})")
            t0 -= saved.get("seconds", 0.0)

    def progress(state: Callable[[], dict]) -> None:  # after every epoch
        saved = {"state": state(), "key": key, "seconds": time.time() - t0}
        if time.time() - last[0] >= 60 * minutes:
            atomic_save(saved, state_path)
            last[0], latest[0] = time.time(), None
        else:  # a copy: the next epoch trains the same tensors in place (1M rows: ~80 MB, 0.075 s an epoch)
            latest[0] = copy.deepcopy(saved)
        if signalled():
            raise KeyboardInterrupt

    try:
        metrics = fit(resume=resume, progress=progress)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: keep the epochs since the last timed save
        if latest[0] is not None:
            atomic_save(latest[0], state_path)
            print(f"dynamics: the fit's state after epoch {latest[0]['state']['epoch']} saved to {state_path}")
        raise
    with contextlib.suppress(OSError):
        os.remove(state_path)
    metrics["dynamics/fit_seconds"] = time.time() - t0
    mse = metrics["dynamics/holdout_mse"]
    if not np.isfinite(mse):
        raise UserError(
            f"the ensemble fit diverged (holdout MSE {mse}); lower --dynamics-lr or check the dataset for huge values"
        )
    print(f"dynamics: elites' mean holdout MSE {mse:.4g} after {metrics['dynamics/epochs']} epochs")
    return metrics


def _load_ensemble(model: nn.Module, path: str, what: str, whole: bool = False) -> dict:
    """Load `path`'s ensemble into `model`; `whole`: the RNG state and fit metrics must be there too (a resume, a cache
    entry)."""
    saved = safe_load(path, what)
    try:
        model.load_state_dict(saved["model"])
        if whole:
            saved["rng"], saved["metrics"]  # noqa: B018 - a resume or cache entry without them is damaged
    except (KeyError, RuntimeError, TypeError) as e:
        raise UserError(
            f"cannot load the ensemble from {path} ({type(e).__name__}: {str(e).splitlines()[0]}); pass a "
            "dynamics.pt saved by a run on the same dataset and ensemble sizes, or delete a damaged cache entry"
        ) from None
    return saved


def git_revision(script: str) -> Optional[str]:
    """The commit of the code that runs (`git describe --always --dirty`), or None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=os.path.dirname(script),
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _take_lock(path: str):
    """An exclusive flock on `path` holding this process's id; one line naming the holder's pid while another process
    holds it. A lock file removed by its holder between our open and our flock is opened again."""
    while True:
        lock = open(path, "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            pid = (lock.read().split() or ["?"])[-1]
            lock.close()
            raise UserError(
                f"{os.path.dirname(path)} is in use by another process (pid {pid}); stop it first"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            lock.truncate(0)
            print(os.getpid(), file=lock, flush=True)
            return lock
        lock.close()


class _RunData:
    """Run's data part: the dataset as tensors checked against the evaluation env, and the dynamics ensemble (fitted,
    loaded, or shared through --dynamics-cache)."""

    def load_data(self) -> tuple[dict[str, torch.Tensor], float]:
        """D as tensors on the device and the action bound, checked against the evaluation env (made here, one
        sub-env per --eval-episodes); once all of it is checked, the run's effective config is printed."""
        task, data_path, args, device = self.task, self.data_path, self.args, self.device
        data = {k: torch.as_tensor(v, device=device) for k, v in load_transitions(data_path).items()}
        n, obs_dim, act_dim = len(data["obs"]), data["obs"].shape[1], data["act"].shape[1]
        if n < 10:
            raise UserError(f"{data_path} holds only {n} usable transitions; a run needs at least 10")
        ratio = getattr(args, "dynamics_holdout_ratio", None)  # fit_dynamics' holdout, checked before any output
        if ratio is not None and not 1 <= min(int(n * ratio), args.dynamics_max_holdout) < n:
            raise UserError(
                f"--dynamics-holdout-ratio {ratio} holds out {min(int(n * ratio), args.dynamics_max_holdout)} of {n} transitions"
            )
        # a batch and its copies (indices, gathered rows, concatenated parts): checked before any work
        check_memory(8 * 4 * args.batch_size * (2 * obs_dim + act_dim + 6), f"--batch-size {args.batch_size}", device)
        self.envs = envs = make_eval_envs(task, args.eval_episodes)
        if envs.single_observation_space.shape != (obs_dim,) or envs.single_action_space.shape != (act_dim,):
            raise UserError(
                f"the data has obs/action dims {obs_dim}/{act_dim} but {task.gym_id} has "
                f"{envs.single_observation_space.shape}/{envs.single_action_space.shape}; pass the matching --eval-env"
            )
        low, high = (
            torch.as_tensor(b, dtype=torch.float32, device=device)
            for b in (envs.single_action_space.low, envs.single_action_space.high)
        )
        outside = ((data["act"] < low - 1e-3) | (data["act"] > high + 1e-3)).any(-1)
        if outside.any():
            raise UserError(
                f"{data_path}: {int(outside.sum())} action(s) lie outside {task.gym_id}'s action space "
                f"(first: row {int(outside.nonzero()[0])}); clip them to [{low.min():g}, {high.max():g}] "
                "or pass the right --eval-env"
            )
        typed = getattr(args, "typed", None) or {k for k, v in asdict(args).items() if v != getattr(type(args)(), k)}
        own = ("env", "dataset_path", "data_dir", "runs_dir", "resume", "seed", "typed")
        given = {k: getattr(args, k) for k in sorted(typed) if k not in own and k not in self.filled}
        show = lambda d: ", ".join(f"{k} {' '.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in d.items())  # noqa: E731
        print(f"{self.dir}: {task.name} ({n} transitions) -> {task.gym_id} ({task.reward_fn} reward), seed {args.seed}; "
              f"preset {self.preset}: {show(self.filled) or 'none'}; flags: {show(given) or 'defaults'} (every "
              "flag: config.json)")  # fmt: skip
        return data, float(envs.single_action_space.high[0])

    def load_or_fit(self, model: nn.Module, fit: Callable[..., dict]) -> dict:
        """The dynamics ensemble: fitted once per run by `fit()`, loaded from --load-dynamics-path, or taken from
        (or fitted into) --dynamics-cache; saved as dynamics.pt with the RNG state after the fit, so a resume before
        the first checkpoint continues exactly. Where it came from goes into config.json and summary.json."""
        args, run_path = self.args, os.path.join(self.dir, "dynamics.pt")
        if getattr(model, "bf16", False) and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise UserError(
                "--dynamics-bf16: this GPU has no bfloat16 support (it needs compute capability 8.0+); drop the flag"
            )
        resuming = args.resume is not None and os.path.isfile(run_path)
        if args.resume is not None and not resuming and args.load_dynamics_path is None:
            print(f"{self.dir} has no dynamics.pt (stopped during the ensemble fit): fitting the ensemble from its last "
                  "saved state (every --checkpoint-minutes and at a signal), or again")  # fmt: skip
        load_path = args.load_dynamics_path or (run_path if resuming else None)
        metrics: dict[str, float] = {}
        if load_path is not None:
            saved = _load_ensemble(model, load_path, "ensemble (a run's dynamics.pt)", whole=resuming)
            if resuming:  # the RNG right after the fit: a resume without a checkpoint continues as if never stopped
                metrics = saved.get("metrics", {})
                set_rng_state(saved["rng"])
            else:
                self.dynamics = {"source": "loaded", "path": os.path.abspath(load_path)}
        elif getattr(args, "dynamics_cache", None) is not None:
            metrics = self._cached_fit(model, fit)
        else:
            metrics = _checked_fit(fit, os.path.join(self.dir, "dynamics_fit.pt"), args.checkpoint_minutes,
                                   signalled=lambda: self.signal is not None)  # fmt: skip
            self.dynamics = {"source": "fitted"}
        if load_path != run_path:
            self.dynamics["holdout_mse"] = metrics.get("dynamics/holdout_mse")
            config = read_json(os.path.join(self.dir, "config.json"))
            write_json({**config, "_dynamics": self.dynamics}, os.path.join(self.dir, "config.json"))
            atomic_save({"model": model.state_dict(), "metrics": metrics, "rng": rng_state()}, run_path)
        model.requires_grad_(False)
        return metrics

    def _cached_fit(self, model: nn.Module, fit: Callable[..., dict]) -> dict:
        """--dynamics-cache DIR: one ensemble per (data fingerprint, dynamics flags, seed), fitted by the first run that
        needs it and loaded, with the RNG state after its fit, by every later one (so a run that loads it continues as
        the run that fitted it did). A second run asking for an entry being fitted waits for it; a crashed fitter
        leaves no entry (atomic rename), and the waiter fits it itself."""
        args = self.args
        key = {"data": self.fingerprint, **{k: getattr(args, k) for k in DYNAMICS_KEY}, "format": 1}
        key = json.loads(json.dumps(key))  # tuples as lists: the form it has when read back
        import hashlib

        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        path = os.path.join(args.dynamics_cache, f"{digest}.pt")
        with open(path + ".lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"waiting for another run fitting this ensemble into {path}", flush=True)
                fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.isfile(path):
                saved = _load_ensemble(model, path, "ensemble cache entry", whole=True)
                if saved.get("key") != key:
                    raise UserError(
                        f"{path} holds an ensemble of other data or settings than this run's (its key: "
                        f"{json.dumps(saved.get('key'))[:200]}); delete it and the run fits a new one"
                    )
                set_rng_state(saved["rng"])
                metrics = saved["metrics"]
                self.dynamics = {"source": "cache", "path": os.path.abspath(path), "fitted_by": saved.get("fitted_by")}
                print(f"dynamics: loaded from the cache {path} (fitted by {saved.get('fitted_by')})")
                return metrics
            metrics = _checked_fit(fit, path[: -len(".pt")] + ".fit.pt", args.checkpoint_minutes, key,
                                   signalled=lambda: self.signal is not None)  # fmt: skip
            made = {"run_dir": os.path.abspath(self.dir), "device": device_name(self.device)}
            entry = {"model": model.state_dict(), "metrics": metrics, "rng": rng_state(), "key": key, "fitted_by": made}
            atomic_save(entry, path)
            write_json({"key": key, "metrics": metrics, "fitted_by": made}, path[: -len(".pt")] + ".json")
        self.dynamics = {"source": "fitted into the cache", "path": os.path.abspath(path)}
        return metrics


class _RunLoop:
    """Run's epoch-loop part: resume from the checkpoint, the epochs and their progress bar, the update statistics,
    evaluation, metrics.csv and the checkpoints."""

    def start(self, parts: dict, first_row: Optional[dict] = None) -> None:
        """Load a resumed run's checkpoint (or start at epoch 0) and open the logger. `parts` is everything a
        checkpoint saves (modules, schedules, buffers: anything with state_dict); metrics.csv's row 0 is `first_row`."""
        self.parts = parts
        if self.args.resume and os.path.isfile(self.ckpt_path):
            self.start_epoch, rows, self.scores, self.prior_seconds = load_checkpoint(
                self.ckpt_path, parts, self.args.epochs
            )
        else:
            if self.args.resume:
                print(f"{self.dir} has no checkpoint yet: the run starts again from epoch 0 in the same directory")
            self.start_epoch, rows, self.scores = 0, [], []
        invocation = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "start_epoch": self.start_epoch,
                      "torch_threads": torch.get_num_threads(), "device_name": device_name(self.device),
                      "command": sys.argv, "git_revision": git_revision(self.script)}  # fmt: skip
        with open(os.path.join(self.dir, "invocations.jsonl"), "a") as f:  # every start and resume of the run
            f.write(json.dumps(invocation) + "\n")
        self.logger = Logger(self.dir, asdict(self.args), self.args.track, rows)
        if not rows and first_row:
            self.logger.log(0, first_row)
        args = self.args
        self.last_epoch = (
            args.epochs
            if args.stop_after_epochs is None
            else min(args.epochs, self.start_epoch + args.stop_after_epochs)
        )
        self.epoch, self.last_save = self.start_epoch, time.time()

    def epochs(self):
        """The epoch numbers still to run, with a progress bar; stops early after a signal."""
        self.bar = tqdm(
            initial=self.start_epoch,
            total=self.args.epochs,
            desc=f"{self.args.exp_name} {self.task.name}",
            unit="epoch",
        )
        self.deferring = True
        for epoch in range(self.start_epoch + 1, self.last_epoch + 1):
            self.epoch = epoch
            self.epoch_start, self.sums, self.counts, self.laps = time.time(), {}, {}, {}
            yield self.epoch
            self.bar.update(1)  # after the epoch: an interrupted run's bar shows the epochs it finished
            if self.signal is not None:
                break
        self.bar.close()

    def add(self, prefix: str, stats: dict[str, torch.Tensor]) -> None:
        """Sum one update's statistics as tensors: no host sync in the inner loop; `means` turns them into numbers."""
        for k, v in stats.items():
            key = f"{prefix}/{k}"
            self.sums[key] = self.sums.get(key, 0) + v
            self.counts[key] = self.counts.get(key, 0) + 1

    def lap(self, name: str) -> None:
        """Log `charts/{name}_seconds`, the time since the epoch started."""
        self.laps[f"charts/{name}_seconds"] = time.time() - self.epoch_start

    def means(self) -> dict[str, float]:
        """The epoch's mean statistics (the epoch's one host sync). Sets `nonfinite` to the first loss or weight that
        is NaN or infinite (or None): such a policy is not evaluated, and `log` then ends the run."""
        losses = {k: float(v) / self.counts[k] for k, v in self.sums.items()}
        self.nonfinite = next((k for k, v in losses.items() if not np.isfinite(v)), None)
        self.nonfinite = self.nonfinite or first_nonfinite_weight(self.parts)
        return losses

    def evaluate(self, policy: Callable, extra_eval: Optional[Callable] = None) -> dict[str, float]:
        """The policy's return in the real env (and D4RL score, and the paper's last-10 mean); `extra_eval(policy,
        first_obs, envs)` adds metrics (the model-based files pass the model's own return)."""
        t_eval = time.time()
        seed = self.args.seed + 1000 * self.epoch
        returns, first_obs = evaluate(policy, self.envs, self.task, seed, self.device)
        metrics = eval_metrics(self.task, returns)
        if extra_eval is not None:
            metrics.update(extra_eval(policy, first_obs, self.envs))
        self.scores.append(metrics.get("eval/normalized_score", metrics["eval/return"]))
        metrics.update(
            {"eval/last10_score": float(np.mean(self.scores[-10:])), "charts/eval_seconds": time.time() - t_eval}
        )
        self.bar.set_postfix(score=f"{self.scores[-1]:.1f}")
        return metrics

    def log(self, metrics: dict[str, float | torch.Tensor]) -> None:
        """metrics.csv, TensorBoard (and wandb) get the epoch's row with its timings; a non-finite epoch ends the run."""
        args, epoch = self.args, self.epoch
        metrics = {k: float(v) for k, v in metrics.items()} | self.laps
        metrics["charts/epoch_seconds"] = time.time() - self.epoch_start
        metrics["charts/SPS"] = args.steps_per_epoch / (
            metrics["charts/epoch_seconds"] - metrics.get("charts/eval_seconds", 0)
        )
        self.logger.log(epoch, metrics)
        if self.thread_error is not None:
            raise OSError(self.thread_error.errno or errno.EIO, f"TensorBoard could not write ({self.thread_error})")
        if self.nonfinite is not None:
            kept = (
                f"the last good checkpoint in {self.dir} is kept" if os.path.isfile(self.ckpt_path) else "no checkpoint"
            )
            why = f"training turned non-finite in epoch {epoch}: {self.nonfinite} is NaN or infinite; {kept}"
            self.end("failed", why + " (lower the learning rates or λ, or check the data)", 1)

    def checkpoint_due(self) -> bool:
        """Every --checkpoint-every epochs, at the last epoch, after a signal, and --checkpoint-minutes after the last."""
        every = self.epoch % self.args.checkpoint_every == 0 or self.epoch == self.last_epoch or self.signal is not None
        return every or time.time() - self.last_save >= 60 * self.args.checkpoint_minutes

    def save_checkpoint(self) -> None:
        self.writing = True  # a second signal now stops the run after the checkpoint, not in the middle of it
        try:
            save_checkpoint(self.ckpt_path, self.epoch, self.parts, self.logger, self.scores, self.wall_seconds())
        finally:
            self.writing = False
        self.last_save = time.time()
        if self.stop_now:
            raise KeyboardInterrupt

    def wall_seconds(self) -> float:
        """The run's wall time over every invocation (a resume adds to what its checkpoint recorded)."""
        return self.prior_seconds + time.time() - self.start_time


class _RunEnd:
    """Run's ending part: signals (a checkpoint after the epoch, a second signal stops at once), a background thread's
    error, summary.json, and letting go of the run directory."""

    def on_signal(self, signum, frame) -> None:
        urgent = not self.deferring or self.signal is not None  # before the loop, or a second signal: stop now ...
        self.signal = signum
        if urgent and self.writing:  # ... once the checkpoint or summary being written is complete
            self.stop_now = True
            return
        if urgent:
            raise KeyboardInterrupt
        tqdm.write(
            f"{signal.Signals(signum).name}: stopping after this epoch with a checkpoint (signal again to stop now)"
        )

    def on_thread_error(self, hook) -> None:
        """A background thread's error (TensorBoard's writer on a full disk) is kept for the main thread to report in
        one line, not printed as a traceback over it."""
        if issubclass(hook.exc_type, OSError):
            self.thread_error = self.thread_error or hook.exc_value
        else:
            self.previous_hook(hook)

    def finish(self, actor: nn.Module) -> dict:
        """After the loop: the exported policy and summary.json (or the interrupt's checkpoint message)."""
        self.envs.close()
        if self.signal is not None:
            self.end(
                "interrupted",
                f"interrupted by {signal.Signals(self.signal).name} after epoch {self.epoch}; checkpoint "
                f"saved; {self.resume_hint()}",
                128 + self.signal,
            )
        export_policy(actor, os.path.join(self.dir, "policy.pt"))
        return self.end("finished" if self.epoch == self.args.epochs else "stopped")

    def end(self, status: str, error: Optional[str] = None, code: int = 0) -> dict:
        """summary.json: the last evaluation and the mean of the last 10 evaluations (the paper's protocol). Signals
        arriving meanwhile wait until summary.json and TensorBoard are closed."""
        self.writing = True
        args, task, scores = self.args, self.task, getattr(self, "scores", [])
        rows = self.logger.rows if self.logger else []
        last = next((r for r in reversed(rows) if "eval/return" in r), {})
        summary = {
            "env": task.name,
            "eval_env": task.gym_id,
            "algorithm": self.algorithm,
            "exp_name": args.exp_name,
            "seed": args.seed,
            "epochs": getattr(self, "epoch", 0),
            "finished": status == "finished",
            "status": status,
            "error": error,
            "device": str(self.device),
            "device_name": device_name(self.device),
            "run_dir": self.dir,
            "preset": self.preset,
            "dynamics": self.dynamics or read_json(os.path.join(self.dir, "config.json")).get("_dynamics"),
            "score_kind": "d4rl_normalized" if task.ref_min is not None else "raw_return",
            **{k: last.get(f"eval/{k}") for k in ("normalized_score", "normalized_score_std", "return", "return_std")},
            "last10_score": float(np.mean(scores[-10:])) if scores else None,
            "wall_seconds": self.wall_seconds(),
            "wall_seconds_this_invocation": time.time() - self.start_time,
            "torch_threads": torch.get_num_threads(),
            "invocations": _invocations(self.dir),
        }
        with contextlib.suppress(OSError):  # a full disk: the one-line error still says what happened
            write_json(summary, os.path.join(self.dir, "summary.json"))
        if self.logger:
            self.logger.close()
        if getattr(self, "bar", None) is not None:
            self.bar.close()
        self.release()
        Run.current = None
        for s, handler in self.previous_handlers.items():
            signal.signal(s, handler)
        threading.excepthook = self.previous_hook
        if code:
            raise RunEnded(error, code)
        kind = "D4RL score" if summary["score_kind"] == "d4rl_normalized" else "return"
        final = summary["normalized_score"] if kind == "D4RL score" else summary["return"]
        scores = f"{kind} {final:.1f}, last-10 {summary['last10_score']:.1f}" if final is not None else "no evaluation"
        w = int(summary["wall_seconds"])
        wall = f"{w // 3600}:{w % 3600 // 60:02d}:{w % 60:02d}"
        print(f"{status}: {summary['epochs']} epochs in {wall}, {scores}; {self.dir}/summary.json")
        return summary

    def release(self) -> None:
        """Let go of the run directory: run.lock is removed while still held (a process that opened it meanwhile finds
        it gone and takes a new one), then closing the file releases the flock."""
        if not self.lock.closed:
            with contextlib.suppress(OSError):
                os.remove(self.lock.name)
            self.lock.close()

    def resume_hint(self) -> str:
        return f"continue with: python {shlex.quote(os.path.relpath(self.script))} --resume {shlex.quote(self.dir)}"


class Run(_RunData, _RunLoop, _RunEnd):
    """Everything around the epoch loop: the run directory, data, resume, evaluation, logging, checkpoints, signals.
    This class makes (or reopens) the run directory; its parts above hold the rest, each what changes together:
    _RunData (the dataset, the ensemble), _RunLoop (the epochs, statistics, evaluation, checkpoints), _RunEnd
    (signals, summary.json, the lock). They share the run's state through `self`.

    Checkpoints are written every --checkpoint-every epochs, every --checkpoint-minutes of wall time, at the end,
    and after the epoch in which SIGINT/SIGTERM arrives (a second signal stops at once). Only a checkpoint whose
    weights and losses are finite is written: a run that turns non-finite stops, keeping the last good one."""

    current: Optional["Run"] = None  # for the one-line messages of a failure or an interrupt before the first epoch

    def __init__(self, args, apply_presets: Optional[Callable] = None):
        """Check the flags, resolve the dataset, fill in presets, seed everything, then make (or reopen) the run
        directory: a bad flag, a bad --runs-dir or a missing dataset fails before anything is written."""
        self.script = script_of(type(args))
        self.algorithm = os.path.splitext(os.path.basename(self.script))[0]
        check_args(args)
        args.exp_name = args.exp_name or self.algorithm
        for k in ("data_dir", "dataset_path"):  # absolute: a resume from another folder finds the same file
            if getattr(args, k) is not None:
                setattr(args, k, os.path.abspath(os.path.expanduser(getattr(args, k))))
        if args.resume is not None:
            args = resumed_args(args)
        folders = [(args.resume or args.runs_dir, "--runs-dir")]
        folders += [(args.dynamics_cache, "--dynamics-cache")] if getattr(args, "dynamics_cache", None) else []
        for folder, flag in folders:  # an unwritable folder fails before any download or data load
            try:
                os.makedirs(folder, exist_ok=True)
                tempfile.TemporaryFile(dir=folder).close()
            except OSError as e:
                raise UserError(f"cannot write in {folder} ({e.strerror}); pass a writable {flag}") from None
        task, data_path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)
        unset = {k for k, v in asdict(args).items() if v is None}
        args, preset = apply_presets(args, task) if apply_presets else (args, "none")
        self.filled = {k: v for k, v in asdict(args).items() if k in unset and v is not None and k != "threads"}
        check_args(args)  # preset values combined with the user's (e.g. the batch shares)
        self.device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        self.graphs = args.cuda_graphs and self.device.type == "cuda"  # gradient_steps' CUDA graphs
        torch.set_num_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS", "").strip() or 1))
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = args.torch_deterministic
        self.args, self.task, self.preset, self.data_path = args, task, preset, data_path
        self.dynamics: dict = {}  # where the ensemble came from (load_or_fit), for config.json and summary.json
        fingerprint = {
            "path": os.path.abspath(data_path) if not data_path.startswith("minari:") else data_path,
            "fingerprint": file_fingerprint(data_path),
        }
        self.fingerprint, self.created = fingerprint["fingerprint"], args.resume is None
        if Run.current is not None:  # one run per process at a time: a new one means the previous one is over
            Run.current.release()
        if args.resume is not None:
            self.dir = args.resume
            saved = read_json(os.path.join(self.dir, "config.json")).get("_dataset")
            if saved is not None and saved["fingerprint"] != fingerprint["fingerprint"]:
                raise UserError(
                    f"the dataset {data_path} changed since {self.dir} started (size:hash {saved['fingerprint']} -> "
                    f"{fingerprint['fingerprint']}); resume with the original file or start a new run"
                )
        else:
            name = f"{task.name.replace('/', '_')[:100]}__{args.exp_name}__{args.seed}__{int(time.time())}"
            self.dir = os.path.join(args.runs_dir, name)
            for n in range(2, 1000):  # mkdir is atomic: two runs started in the same second get different dirs
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.dir)
                    break
                self.dir = os.path.join(args.runs_dir, f"{name}_{n}")
        # one writer per run directory: a second process (a resume, a relaunch) is refused while this one lives
        self.lock = _take_lock(os.path.join(self.dir, "run.lock"))
        typed = getattr(args, "typed", None)
        if self.created:  # the effective config, and how it came about: what was typed, what the preset filled
            config = {**asdict(args), "_dataset": fingerprint, "_script": os.path.basename(self.script)}
            config |= {"_typed": sorted(typed) if typed is not None else None, "_filled": self.filled}
            config |= {"_command": sys.argv, "_git_revision": git_revision(self.script)}
            write_json(config, os.path.join(self.dir, "config.json"))
        else:
            saved = read_json(os.path.join(self.dir, "config.json"))
            self.filled = saved.get("_filled") or {}
            args.typed = set(saved.get("_typed") or []) | (typed or set())
        Run.current = self
        self.ckpt_path = os.path.join(self.dir, "checkpoint.pt")
        self.signal, self.deferring, self.logger, self.prior_seconds = None, False, None, 0.0
        self.writing, self.stop_now, self.thread_error = False, False, None
        self.start_time = time.time()
        self.previous_handlers = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        self.previous_hook, threading.excepthook = threading.excepthook, self.on_thread_error
        if args.track:  # before the data load: no login is one line, not hours later
            try:
                import wandb

                options = dict(sync_tensorboard=True, save_code=True, dir=self.dir, name=os.path.basename(self.dir))
                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=asdict(args), **options)
            except Exception as e:  # ImportError, wandb's UsageError (no login), a network failure
                why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UserError(f"--track: wandb did not start ({why}); run `wandb login`, or set WANDB_MODE=offline "
                                "(or drop --track)") from None  # fmt: skip


def _invocations(run_dir: str) -> list[dict]:
    """invocations.jsonl: one line per start or resume (its first epoch, command, code revision, machine, threads)."""
    try:
        with open(os.path.join(run_dir, "invocations.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def first_nonfinite_weight(parts: dict) -> Optional[str]:
    """The name of the first parameter with a NaN or infinite entry, or None (once per epoch)."""
    for k, part in parts.items():
        if isinstance(part, nn.Module):
            for n, p in part.named_parameters():
                if not torch.isfinite(p).all():
                    return f"{k}.{n}"
    return None


def save_checkpoint(path: str, epoch: int, parts: dict, logger: Logger, scores: list[float], seconds: float) -> None:
    """Everything needed to continue bit for bit: networks, optimisers, schedules, buffers, RNG states, metrics."""
    atomic_save(
        {
            "epoch": epoch,
            "parts": {k: v.state_dict() for k, v in parts.items()},
            "rng": rng_state(),
            "rows": logger.rows,
            "scores": scores,
            "wall_seconds": seconds,
        },
        path,
    )


def load_checkpoint(path: str, parts: dict, epochs: int) -> tuple[int, list[dict], list[float], float]:
    # to the CPU: RNG states must stay CPU tensors; networks, optimisers and buffers copy to their own device on load
    ckpt = safe_load(path, "checkpoint")
    try:
        for k, v in parts.items():
            v.load_state_dict(ckpt["parts"][k])
        set_rng_state(ckpt["rng"])
        epoch, rows, scores, seconds = ckpt["epoch"], ckpt["rows"], ckpt["scores"], ckpt.get("wall_seconds", 0.0)
        number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)  # noqa: E731
        if not (isinstance(epoch, int) and 0 <= epoch <= epochs and number(seconds) and isinstance(rows, list)):
            raise ValueError(f"its epoch {epoch!r} or wall time is not one this run can continue from")
        if not all(isinstance(r, dict) for r in rows) or not (isinstance(scores, list) and all(map(number, scores))):
            raise ValueError("its metrics rows or scores are malformed")
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError) as e:
        raise UserError(
            f"{path} does not match this run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "it was saved with other sizes or by another script"
        ) from None
    print(f"resumed {os.path.dirname(path)} at epoch {epoch}")
    return epoch, rows, scores, seconds


# -------------------------------------------------------------------------------------------------------------- steps
def gradient_steps(step: Callable[[], dict], n: int, run: Run, policies: list[nn.Module], period: int = 1) -> None:
    """n gradient steps: `step()` makes one of every policy and returns {log prefix: statistics}, summed into `run`.

    With run.graphs (--cuda-graphs on a CUDA device) `period` steps are captured as one CUDA graph and replayed, one
    launch where eager PyTorch launches the steps' hundreds of small kernels one by one from Python. The graph is
    captured anew every epoch, so what changes between epochs (buffer sizes, learning rates) is baked in fresh; `period`
    steps make one Python-side cycle (TD3+BC's delayed actor: policy_freq)."""

    def eager(k: int) -> None:
        for _ in range(k):
            for prefix, stats in step().items():
                run.add(prefix, stats)

    warmup = 3  # eager steps on a side stream before the capture, as CUDA graphs ask
    if not run.graphs or n < warmup + period:
        return eager(n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager(warmup)
    torch.cuda.current_stream().wait_stream(side)
    groups = [
        g for p in policies for o in vars(p).values() if isinstance(o, torch.optim.Optimizer) for g in o.param_groups
    ]
    counters = [(p, p.total_it) for p in policies if hasattr(p, "total_it")]
    for g in groups:
        g["capturable"] = True  # Adam's step counts stay on the device
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records `period` steps (and advances Python-side counters); computes nothing
        outs = [step() for _ in range(period)]
    for g in groups:
        g["capturable"] = False  # checkpoints stay loadable on a CPU
    replays, tail = divmod(n - warmup, period)
    for _ in range(replays):
        graph.replay()
        for out in outs:
            for prefix, stats in out.items():
                run.add(prefix, stats)
    for p, total_it in counters:
        p.total_it = total_it + replays * period
    eager(tail)


# ----------------------------------------------------------------------------------------------------------------- cli
def _write_failure(e: OSError, run: Optional[Run]) -> str:
    """What a failed write means, in words that name the fix."""
    if run is not None and not os.path.isdir(run.dir):
        return f"the run directory {run.dir} was deleted while the run was writing it ({e}); start the run again"
    fix = {
        errno.ENOSPC: "free disk space",
        errno.EDQUOT: "free disk space (the disk quota is full)",
        errno.ENAMETOOLONG: "a file name is too long: shorten --runs-dir, --exp-name or the dataset's file name",
        errno.EACCES: "pass a writable --runs-dir",
        errno.EROFS: "pass a writable --runs-dir (this file system is read-only)",
        errno.EPERM: "pass a writable --runs-dir",
    }.get(e.errno, "free disk space or pass a writable --runs-dir")
    said = e.strerror if e.filename is None and e.strerror else str(e)  # atomic_save's own words, without [Errno N]
    return f"{said}; {fix}"


def cli(main: Callable, args_class: type) -> None:
    """The command line: every error as one line and a non-zero exit (2 for bad flags), never a traceback."""
    try:
        main(parse_args(args_class, sys.argv[1:]))
    except (KeyboardInterrupt, OSError) as e:  # a signal before the epoch loop (or a second one); a failed write
        run, signum = Run.current, getattr(Run.current, "signal", None) or signal.SIGINT
        if isinstance(e, KeyboardInterrupt):
            status, code, why = "interrupted", 128 + signum, f"interrupted by {signal.Signals(signum).name}"
        else:
            status, code, why = "failed", 1, "error: " + _write_failure(e, run)
        kept = ("checkpoint.pt", "dynamics.pt", "metrics.csv")
        empty = run is not None and not any(os.path.exists(os.path.join(run.dir, f)) for f in kept)
        if isinstance(e, OSError) and run is not None and run.created and empty and os.path.isdir(run.dir):
            run.release()  # a start that failed to write leaves no run directory
            import shutil

            shutil.rmtree(run.dir, ignore_errors=True)
            run = Run.current = None
        if run is not None:
            with contextlib.suppress(RunEnded, OSError):
                run.end(status, why + f"; {run.resume_hint()}", code)
        print(why + (f"; {run.resume_hint()}" if run is not None else ""), file=sys.stderr)
        sys.exit(code)
    except RunEnded as e:
        print(f"error: {e}" if e.code == 1 else str(e), file=sys.stderr if e.code else sys.stdout)
        sys.exit(e.code)
    except UserError as e:
        run = Run.current
        if run is not None and run.created and not os.path.isfile(run.ckpt_path):  # a failed start leaves no run dir
            import shutil

            run.release()
            shutil.rmtree(run.dir, ignore_errors=True)
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        sys.exit(e.code)
