"""The harness every method file runs in (as CleanRL keeps its buffer and evaluation in cleanrl_utils): the data (D4RL
HDF5, local files, a download, Minari), evaluation and the D4RL score, the run flags every file shares (`RunArgs`), and
`Run`: run directory, config, seeding, logging, checkpoints, exact resume, signals, summary.json. Copy a method file and
this one to use that method in your own project. A method's `main` reads:

    run = Run(args, apply_presets)        # flags checked, dataset found, presets filled, seeded, run directory made
    data, max_action = run.load_data()     # D as tensors on the device, checked against the evaluation env
    run.start(parts)                       # what a checkpoint saves; resumes from one if there is one
    for epoch in run.epochs():             # stops after the epoch in which SIGINT/SIGTERM arrived
        gradient_steps(step, n, run, ...)  # the method's updates; statistics summed as tensors (no host sync)
        metrics = run.means()              # sets run.nonfinite: such a policy is never evaluated
        ... metrics |= run.evaluate(policy); run.log(metrics); run.checkpoint_due() and run.save_checkpoint()
    return run.finish(actor)               # policy.pt and summary.json

`cli(main, Args)` parses the flags with tyro and makes every error one line and a non-zero exit. No method flag is named
here: a field declares its interval or file beside it (`metadata={"range": "[0, 1]"}`, "[" includes the bound, "(" does
not; `metadata={"path": "a run's dynamics.pt"}`), and its class's `problems()` the rules tying flags together. The
method files import `__all__`: Run, RunArgs, Task, UserError, check_memory, cli, gradient_steps, safe_load.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import errno
import hashlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import filelock
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
    code = 1  # a problem with the user's input or machine: one line and this exit status


class UsageError(UserError):
    code = 2  # bad flags or input, found before any work


class RunEnded(UserError):
    """A run that ends early on purpose (a signal, nothing to do) or because training turned non-finite."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------------------------- data
# D4RL's reference returns (d4rl/infos.py): random and expert policies, used for the normalised score
DOMAINS = {"hopper": ("Hopper-v4", -20.272305, 3234.3), "halfcheetah": ("HalfCheetah-v4", -280.178953, 12135.0),
           "walker2d": ("Walker2d-v4", 1.629008, 4592.3)}  # fmt: skip
D4RL_NAMES = [f"{d}-{k}-v2" for d in DOMAINS for k in ("random", "medium", "medium-replay", "medium-expert")]
JUMP_TASKS = ("halfcheetah-jump", "halfcheetah-jump-hard")
REWARD_FNS = ("env", *JUMP_TASKS)  # a file's `reward_fn` attr: the env's own reward, or a jump task's
D4RL_URLS = ("http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{file}",  # the original host first,
             "https://huggingface.co/datasets/imone/D4RL/resolve/main/{file}")  # then a public mirror  # fmt: skip


@dataclass
class Task:
    name: str
    gym_id: str
    domain: str
    reward_fn: str = "env"
    ref_min: Optional[float] = None
    ref_max: Optional[float] = None


def domain_of(gym_id: str) -> str:
    return next((d for d, (i, _, _) in DOMAINS.items() if gym_id.split("-")[0] == i.split("-")[0]),
                gym_id.split("-")[0].lower())  # fmt: skip


def download(urls: list[str], path: str) -> None:
    """The first URL that answers, by torch.hub (a progress bar, a temporary name renamed when complete)."""
    folder, reasons = os.path.dirname(path) or ".", []
    made = not os.path.isdir(folder) and not os.makedirs(folder)
    for url in urls:
        try:
            return torch.hub.download_url_to_file(url, path)
        except Exception as e:  # URLError, HTTPError, OSError, a timeout
            reasons.append(f"{url}: {getattr(e, 'reason', e)}")
    with contextlib.suppress(OSError):  # a failed first download leaves no empty folder behind
        os.removedirs(folder) if made else None
    raise UserError(f"could not download the dataset ({'; '.join(reasons)}); put the file at {path}, or, offline, make "
                    "a local dataset: python datasets/collect.py --env Hopper-v4 (docs/data.md)")  # fmt: skip


def read_attrs(path: str) -> dict:
    """The file's attrs that matter here, checked: env_id, reward_fn, finite reference returns with ref_min < ref_max."""
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: f.attrs.get(k) for k in ("env_id", "reward_fn", "ref_min_score", "ref_max_score")}
    except OSError as e:
        raise UserError(f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again") from None
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    for k in ("env_id", "reward_fn"):
        if attrs[k] is not None and not isinstance(attrs[k], str):
            raise UserError(f"{path}: attr '{k}' is {attrs[k]!r}, not a string; fix the file's attrs")
    if attrs["reward_fn"] not in (None, *REWARD_FNS):
        raise UserError(f"{path}: attr 'reward_fn' is {attrs['reward_fn']!r}; use one of {', '.join(REWARD_FNS)}")
    refs = [attrs["ref_min_score"], attrs["ref_max_score"]]
    if refs != [None, None]:
        low, high = (float(v) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else math.nan
                     for v in refs)  # fmt: skip
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
    elif "/" in env:  # a Minari dataset from its local cache (downloaded there when the network allows)
        try:
            import minari

            dataset = minari.load_dataset(env, download=True)
        except Exception as e:  # minari raises several types for unknown ids and network failures
            raise UserError(f"could not load Minari dataset '{env}' ({type(e).__name__}: {e}); check the id with "
                            "`minari list remote`, put it in the local cache, or pip install \"minari[hf]\"") from None  # fmt: skip
        gym_id, meta = eval_env or dataset.spec.env_spec.id, dataset.storage.metadata
        refs = [None if r is None else float(r) for r in (meta.get("ref_min_score"), meta.get("ref_max_score"))]
        return Task(env, gym_id, domain_of(gym_id), "env", *refs), "minari:" + env
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


def load_transitions(path: str) -> dict[str, np.ndarray]:
    """(s, a, r, s', done) of a D4RL-layout HDF5 file (or a Minari dataset), checked: s' is `next_observations`, never
    `observations[i+1]` (the next episode's start at episode ends); timeout steps are dropped (d4rl's qlearning_dataset)"""
    keys = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    if path.startswith("minari:"):
        import minari

        eps = list(minari.load_dataset(path[len("minari:") :]).iterate_episodes())
        cols = [(e.observations[:-1], e.actions, e.rewards, e.observations[1:], e.terminations,
                e.truncations) for e in eps]  # fmt: skip
        data = {k: np.concatenate([c[i] for c in cols]) for i, k in enumerate(keys)}
    else:
        try:
            with h5py.File(path, "r") as f:
                missing = [k for k in keys if not isinstance(f.get(k), h5py.Dataset)]
                if missing:
                    raise UserError(f"{path} lacks the dataset(s) {', '.join(missing)}; a D4RL-layout file needs "
                                    f"{', '.join(keys)}")  # fmt: skip
                data = {k: np.asarray(f[k][()]) for k in keys}
        except OSError as e:
            raise UserError(f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again") from None  # fmt: skip
    n = len(data["observations"]) if data["observations"].ndim else 0
    for k in keys:
        ndim = 2 if k in ("observations", "actions", "next_observations") else 1
        v = data[k] = data[k][:, 0] if ndim == 1 and data[k].ndim == 2 and data[k].shape[1] == 1 else data[k]
        if v.ndim != ndim or len(v) != n or v.dtype.kind not in "fiub":
            raise UserError(f"{path}: '{k}' has shape {v.shape} and dtype {v.dtype}; expected {ndim}-D numbers, {n} rows")  # fmt: skip
        if n == 0:
            raise UserError(f"{path} holds 0 rows; a run needs at least 10 transitions")
        checks = [(~np.isfinite(v.reshape(n, -1)).all(1), "has NaN or infinite rows; drop them from the file")]
        checks += [(~np.isin(v, (0, 1)), "must hold only 0/1 (or booleans); fix the file")] if k in keys[4:] else []
        for bad, why in checks:
            if bad.any():
                first = f"row {bad.argmax()}" + (f", {v[bad.argmax()]}" if ndim == 1 else "")
                raise UserError(f"{path}: '{k}' {why} ({bad.sum()} row(s), first: {first})")
    if data["next_observations"].shape != data["observations"].shape:
        raise UserError(f"{path}: next_observations {data['next_observations'].shape} != observations' shape")
    keep = ~data["timeouts"].astype(bool)
    if not keep.any():
        raise UserError(f"{path} holds no transition that is not a timeout step; a run needs at least 10")
    out = {k: data[v][keep].astype(np.float32) for k, v in zip(("obs", "act", "rew", "next_obs", "done"), keys)}
    out["rew"], out["done"] = out["rew"][:, None], out["done"][:, None]
    return out


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
        raise UserError(f"cannot make evaluation env '{task.gym_id}' ({type(e).__name__}: {e}); pass --eval-env with a "
                        "Gymnasium id") from None  # fmt: skip


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
    if task.ref_min is not None:  # D4RL normalised score, per episode: 100·(R − R_random)/(R_expert − R_random)
        score = 100.0 * (returns - task.ref_min) / (task.ref_max - task.ref_min)
        metrics |= {"eval/normalized_score": float(score.mean()), "eval/normalized_score_std": float(score.std())}
    return metrics


# --------------------------------------------------------------------------------------------------------------- flags
@dataclass
class RunArgs:
    """The flags every algorithm file takes; its own `Args` adds the method's flags after these."""

    # Data
    env: str = "hopper-medium-v2"
    """dataset: a D4RL name like hopper-medium-v2, halfcheetah-jump(-hard), local/NAME or a Minari id"""
    dataset_path: Optional[str] = field(default=None, metadata={"path": "a D4RL-layout HDF5 file"})
    """any D4RL-layout HDF5 file to train on instead of --env's file (eval env from --eval-env or its metadata)"""
    eval_env: Optional[str] = None
    """Gymnasium id of the evaluation environment, overriding the dataset's (e.g. Hopper-v4)"""
    data_dir: Optional[str] = None
    """where datasets live (None: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""

    # Run: seeds, devices, logging, checkpoints
    exp_name: Optional[str] = None
    """name of this experiment, part of the run directory name (None: the algorithm's file name, e.g. orpo)"""
    seed: int = field(default=1, metadata={"range": "[0, 4294967296)"})  # numpy's seed range
    """seed of the experiment (torch, numpy, random, evaluation environments)"""
    torch_deterministic: bool = True
    """make cuDNN deterministic (`torch.backends.cudnn.deterministic`)"""
    cuda: bool = True
    """use a CUDA GPU when one is present (the same code runs on CPU otherwise)"""
    cuda_graphs: bool = True
    """on a CUDA GPU, capture each epoch's gradient steps as one CUDA graph and replay it (--no-cuda-graphs: eager)"""
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
    stop_after_epochs: Optional[int] = field(default=None, metadata={"range": "[1, inf)"})
    """stop (with a checkpoint) after this many epochs in this invocation, e.g. for time-limited jobs"""
    checkpoint_every: int = field(default=100, metadata={"range": "[1, inf)"})
    """save a checkpoint every this many epochs (and after the last, and after a SIGINT/SIGTERM)"""
    checkpoint_minutes: float = field(default=10.0, metadata={"range": "(0, inf)"})
    """also save a checkpoint at the end of the first epoch after this many minutes since the last one"""
    threads: Optional[int] = field(default=None, metadata={"range": "[1, inf)"})
    """torch CPU threads (None: $OMP_NUM_THREADS where set, else 1: 2 ran 3x slower on 2 busy cores; docs/speed.md)"""
    epochs: int = field(default=1000, metadata={"range": "[1, inf)"})
    """number of epochs (each: the method's model rollouts and gradient steps, then its evaluation)"""
    eval_episodes: int = field(default=10, metadata={"range": "[1, inf)"})
    """episodes per evaluation, run as one vectorised environment"""

    def problems(self) -> list[str]:  # --exp-name is part of the run directory's name
        name = self.exp_name
        bad = name is not None and (os.sep in name or name in ("", ".", "..") or len(name) > 100)
        return [f"--exp-name {name[:40]!r}: must be a plain name of at most 100 characters"] if bad else []


# a resume takes these from its own command line: always (the machine's and the time's) ...
INVOCATION_FLAGS = ("resume", "stop_after_epochs", "cuda", "track", "checkpoint_minutes", "threads")
# ... and, where typed, the run's length and where its data lives now (the dataset's fingerprint must still match)
RESUME_FLAGS = INVOCATION_FLAGS + ("epochs", "data_dir", "dataset_path")


def check_args(args) -> None:
    """Every flag finite and in its declared interval, every named file there, every class's problems(): exit 2."""
    problems = []
    for f in dataclasses.fields(args):
        value, flag, meta = vars(args)[f.name], "--" + f.name.replace("_", "-"), f.metadata
        values = list(value) if isinstance(value, (tuple, list)) else [value]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        interval = meta.get("range", "[-inf, inf]")  # "[" includes the bound, "(" does not
        low, high = (float(b) for b in interval[1:-1].split(","))
        inside = [(low <= v if interval[0] == "[" else low < v) and (v <= high if interval[-1] == "]" else v < high)
                  for v in numbers]  # fmt: skip
        path = "path" in meta and value is not None and not os.path.isfile(value)
        if isinstance(value, (tuple, list)) and not value:
            problems.append(f"{flag}: give at least one value")
        elif any(not math.isfinite(v) for v in numbers):
            problems.append(f"{flag} {value}: must be a finite number")
        elif not all(inside):
            problems.append(f"{flag} {value}: must lie in {interval}")
        elif path and not (meta.get("directory") and os.path.isdir(value)):
            found = "is not a regular file" if os.path.exists(value) else "no such file or directory"
            found = "is a directory" if os.path.isdir(value) else found
            problems.append(f"{flag} {value}: {found}; pass {meta['path']}")
    for cls in type(args).__mro__:  # each class's own rules, beside its flags
        problems += vars(cls)["problems"](args) if "problems" in vars(cls) else []
    if problems:
        raise UsageError("\n".join(problems))


def parse_args(args_class: type, argv: list[str]):
    """tyro parses the flags (its --help, its error box and exit 2); an Optional[bool] takes --x / --no-x."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else None
    try:
        return tyro.cli(args_class, args=argv, prog=prog, config=(tyro.conf.DisallowNone,))
    except BrokenPipeError:  # `--help | head`: the reader has gone, so has the output
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


# --------------------------------------------------------------------------------------------------------------- files
def atomic_save(obj, path: str) -> None:
    """torch.save (a .json path: JSON) to path + .tmp, then os.replace: never half a file, nor a .tmp left."""
    try:
        with open(path + ".tmp", "wb") as f:  # our own file object: closed on error, its disk space freed
            f.write(json.dumps(obj, indent=2).encode()) if path.endswith(".json") else torch.save(obj, f)
        os.replace(path + ".tmp", path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        cause = e.__context__ if isinstance(e, RuntimeError) else None  # torch wraps the OSError of a full disk
        if isinstance(cause, OSError) or isinstance(e, RuntimeError) and "write" in str(e):
            why = getattr(cause, "strerror", None) or str(e).splitlines()[0]
            raise OSError(getattr(cause, "errno", None) or errno.ENOSPC, f"could not write {path} ({why})") from None
        raise


def read_json(path: str) -> dict:
    """A JSON file, or {} where there is none (or it is unreadable)."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        return json.load(f)
    return {}


def safe_load(path: str, what: str, **kw):
    """torch.load with weights_only=True (a crafted pickle cannot run code); any failure is one line naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **kw)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; pass the path of {what}") from None
    except Exception as e:  # torch raises many types for truncated, corrupt or foreign files
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'}"
        reason = "it holds objects beyond tensors and plain values" if "Weights only load failed" in str(e) else reason
        raise UserError(f"{path} is not a usable {what} ({reason}); delete it or pass another file") from None


def rng_state() -> dict:
    """Every RNG state as tensors and plain values, so checkpoints load with weights_only=True."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    numpy = (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)
    return {"torch": torch.get_rng_state(), "cuda": cuda, "numpy": numpy, "random": random.getstate()}


def set_rng_state(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    kind, keys, pos, has_gauss, gauss = rng["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate((rng["random"][0], tuple(rng["random"][1]), rng["random"][2]))


def check_memory(nbytes: int, what: str, device: torch.device) -> None:
    """Refuse in one line, before any work, an allocation larger than the device's free memory."""
    device, free = torch.device(device), math.inf  # not Linux: nothing to measure against
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
            free = next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), free)
    if nbytes > free:
        raise UserError(f"{what} needs {nbytes / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB free on the "
                        f"{device.type}; lower the flags that size it")  # fmt: skip


def file_fingerprint(path: str) -> str:
    """Size and a hash of the first and last MiB: enough to notice a dataset file replaced under a run."""
    if path.startswith("minari:"):
        return path
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head, _, tail = f.read(1 << 20), f.seek(max(0, size - (1 << 20))), f.read(1 << 20)
    return f"{size}:{hashlib.sha256(head + tail).hexdigest()[:16]}"


def device_name(device: torch.device) -> str:
    """The GPU's or CPU's model name, so every result says what it ran on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    return f"{model} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def git_revision(script: str) -> Optional[str]:
    """The commit of the code that runs (`git describe --always --dirty`), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=os.path.dirname(script),
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def export_policy(actor: nn.Module, path: str) -> None:
    """Save an actor's deterministic policy alone, loadable without this file (datasets/collect.py's load_policy)."""
    linears = [m for m in actor.net if isinstance(m, nn.Linear)]
    outputs = linears[-1].out_features // (1 if actor.kind == "deterministic_mlp" else 2)  # SAC: mean and log-std
    policy = {"kind": actor.kind, "obs_dim": linears[0].in_features, "act_dim": outputs, "max_action": float(actor.max_action),
              "hidden_dims": [m.out_features for m in linears[:-1]], "obs_mean": actor.obs_norm.mean.cpu(),
              "obs_std": actor.obs_norm.std.cpu(), "state_dict": {k: v.cpu() for k, v in actor.net.state_dict().items()}}  # fmt: skip
    atomic_save(policy, path)


def _checked_fit(fit: Callable[..., dict], state_path: str, minutes: float, signalled: Callable[[], bool]) -> dict:
    """fit(resume=, progress=), its state saved to state_path every `minutes` and at a signal or `signalled()` (the
    handler's raise is lost in a finalizer), continued from there, removed when done. A diverged fit is one line."""
    resume, t0, last, latest = None, time.time(), [time.time()], [None]
    if os.path.isfile(state_path):
        saved = safe_load(state_path, "part-way ensemble fit")
        if isinstance(saved, dict) and "state" in saved:
            resume, t0 = saved["state"], t0 - saved.get("seconds", 0.0)
            print(f"dynamics: continuing the ensemble fit saved at epoch {resume['epoch']} ({state_path})")

    def progress(state: Callable[[], dict]) -> None:  # after every epoch
        saved = {"state": state(), "seconds": time.time() - t0}
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
    os.remove(state_path) if os.path.isfile(state_path) else None
    metrics["dynamics/fit_seconds"] = time.time() - t0
    if not np.isfinite(mse := metrics["dynamics/holdout_mse"]):
        raise UserError(f"the ensemble fit diverged (holdout MSE {mse}); lower the dynamics learning rate or check the "
                        "dataset for huge values")  # fmt: skip
    print(f"dynamics: elites' mean holdout MSE {mse:.4g} after {metrics['dynamics/epochs']} epochs")
    return metrics


# ---------------------------------------------------------------------------------------------------------------- runs
class Run:
    """Everything around the epoch loop. A second SIGINT/SIGTERM stops at once, or once the file being written is
    complete. Only a finite checkpoint is written: a run that turns non-finite stops, keeping the last good one."""

    current: Optional[Run] = None  # the run of this process, for cli's one-line messages
    typed: Optional[set] = None  # the flags the command line named (cli sets it; None: those that differ from defaults)

    def __init__(self, args, apply_presets: Optional[Callable] = None):
        """Flags checked, dataset found, presets filled, seeded, run directory made (or reopened): in that order."""
        self.script = sys.modules[type(args).__module__].__file__
        self.algorithm = os.path.splitext(os.path.basename(self.script))[0]
        self.args, self.bar, self.writer, self.envs, self.lock, self.dynamics, self.rows = args, *[None] * 4, {}, []
        self.signal, self.deferring, self.writing, self.stop_now, self.thread_error = None, False, False, False, None
        self.epoch, self.scores, self.prior_seconds, self.start_time, self.created = 0, [], 0.0, time.time(), False
        if Run.current is not None:  # one run per process at a time: a new one means the previous one is over
            Run.current.release()
        check_args(args)
        defaults = asdict(type(args)())
        typed = Run.typed if Run.typed is not None else {k for k, v in asdict(args).items() if v != defaults[k]}
        args.exp_name = args.exp_name or self.algorithm
        for k in ("data_dir", "dataset_path"):  # absolute: a resume from another folder finds the same file
            vars(args)[k] = vars(args)[k] and os.path.abspath(os.path.expanduser(vars(args)[k]))
        self.typed = (self._resumed(typed) if args.resume is not None else typed) & set(defaults)
        try:  # an unwritable folder fails before any download or data load
            os.makedirs(args.resume or args.runs_dir, exist_ok=True)
            tempfile.TemporaryFile(dir=args.resume or args.runs_dir).close()
        except OSError as e:
            raise UserError(f"cannot write in {args.resume or args.runs_dir} ({e.strerror}); pass a writable "
                            "--runs-dir") from None  # fmt: skip
        self.task, self.data_path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)
        unset = {k for k, v in asdict(args).items() if v is None}
        self.preset = apply_presets(args, self.task)[1] if apply_presets else "none"
        self.filled = {k: v for k, v in asdict(args).items() if k in unset and v is not None and k != "threads"}
        check_args(args)  # preset values combined with the user's (e.g. the batch shares)
        self.device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        self.graphs = args.cuda_graphs and self.device.type == "cuda"  # gradient_steps' CUDA graphs
        torch.set_num_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS", "").strip() or 1))
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = args.torch_deterministic
        self.fingerprint = file_fingerprint(self.data_path)
        self._open_dir()
        if args.track:  # before the data load: no login is one line, not hours later
            try:
                import wandb

                options = dict(sync_tensorboard=True, save_code=True, dir=self.dir, name=os.path.basename(self.dir))
                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=asdict(args), **options)
            except Exception as e:  # ImportError, wandb's UsageError (no login), a network failure
                why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UserError(f"--track: wandb did not start ({why}); run `wandb login`, or set WANDB_MODE=offline "
                                "(or drop --track)") from None  # fmt: skip

    def _resumed(self, typed: set) -> set:
        """--resume RUN_DIR's saved config replaces the flags but RESUME_FLAGS; a note names each typed flag it ignores."""
        args, script = self.args, os.path.basename(self.script)
        config, defaults = read_json(os.path.join(args.resume, "config.json")), asdict(type(args)())
        saved = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if not k.startswith("_")}
        other = config.get("_script", script) != script or "_script" not in config and set(saved) != set(defaults)
        if not config or other:
            what = f"is a run of {config.get('_script', 'another script')}" if config else "has no readable config.json"
            raise UserError(f"--resume {args.resume} {what}; pass a run directory made by {script}")
        for k in sorted(set(saved) - set(defaults)):  # a flag this version of the file no longer has
            print(f"note: {args.resume} was saved with --{k.replace('_', '-')} {saved.pop(k)}, which {script} no longer "
                  "has; it resumes without it")  # fmt: skip
        for k in sorted(set(defaults) - set(saved)):  # a flag added since the run was saved
            print(f"note: {args.resume} predates --{k.replace('_', '-')}; it resumes with the default {defaults[k]}")
        old = defaults | saved
        for k in sorted(k for k in typed - set(RESUME_FLAGS) if vars(args)[k] != old[k]):
            print(f"note: --resume ignores --{k.replace('_', '-')} {vars(args)[k]}; the run keeps its saved {old[k]}")
        vars(args).update(old | {k: vars(args)[k] for k in RESUME_FLAGS if k in typed or k in INVOCATION_FLAGS})
        done = read_json(os.path.join(args.resume, "summary.json"))
        if args.epochs < done.get("epochs", 0):
            raise UsageError(f"--epochs {args.epochs}: {args.resume} has run {done['epochs']} epochs already")
        if done.get("finished") and args.epochs == done["epochs"]:
            raise RunEnded(f"{args.resume} finished its {args.epochs} epochs: nothing to do (--epochs N extends it)", 0)
        return (typed & set(RESUME_FLAGS)) | set(config.get("_typed") or [])

    def _open_dir(self) -> None:
        """The run directory made (or --resume's reopened) and locked; config.json and invocations.jsonl written."""
        args, path, minari = self.args, self.data_path, self.data_path.startswith("minari:")
        dataset = {"path": path if minari else os.path.abspath(path), "fingerprint": self.fingerprint}
        if args.resume is not None:
            self.dir, config = args.resume, read_json(os.path.join(args.resume, "config.json"))
            if (config.get("_dataset") or dataset)["fingerprint"] != self.fingerprint:
                raise UserError(f"the dataset {self.data_path} changed since {self.dir} started (size:hash "
                                f"{config['_dataset']['fingerprint']} -> {self.fingerprint}); resume with the original "
                                "file or start a new run")  # fmt: skip
            self.filled = config.get("_filled") or {}
        else:
            name = f"{self.task.name.replace('/', '_')[:100]}__{args.exp_name}__{args.seed}__{int(time.time())}"
            self.dir = os.path.join(args.runs_dir, name)
            for n in range(2, 1000):  # mkdir is atomic: two runs started in the same second get different dirs
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.dir)
                    break
                self.dir = os.path.join(args.runs_dir, f"{name}_{n}")
            self.created = True
        self.lock = filelock.FileLock(os.path.join(self.dir, "run.lock"), timeout=0)
        self.ckpt_path, self.start_epoch = os.path.join(self.dir, "checkpoint.pt"), 0
        try:  # one writer per run directory: a second process (a resume, a relaunch) is refused while this one lives
            self.lock.acquire()
            Run.current = self
            if os.path.isfile(self.ckpt_path):  # its epoch only (mmap): the tensors stay on disk
                peek = safe_load(self.ckpt_path, "checkpoint", mmap=True)
                self.start_epoch = self.epoch = peek.get("epoch", 0) if isinstance(peek, dict) else 0
            revision = git_revision(self.script)
            if self.created:  # the effective config, and how it came about: what was typed, what the preset filled
                config = asdict(args) | {"_dataset": dataset, "_script": os.path.basename(self.script)}
                config |= {"_typed": sorted(self.typed), "_filled": self.filled, "_command": sys.argv}
                atomic_save(config | {"_git_revision": revision}, os.path.join(self.dir, "config.json"))
            record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "start_epoch": self.start_epoch,
                      "torch_threads": torch.get_num_threads(), "device_name": device_name(self.device),
                      "command": sys.argv, "git_revision": revision}  # fmt: skip
            with open(os.path.join(self.dir, "invocations.jsonl"), "a") as f:  # every start and resume, as it begins
                f.write(json.dumps(record) + "\n")
        except filelock.Timeout:
            raise UserError(f"{self.dir} is in use by another process; stop it first") from None
        except OSError:
            self._remove_new_dir()
            raise
        self.previous_handlers = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        self.previous_hook, threading.excepthook = threading.excepthook, self.on_thread_error

    def _remove_new_dir(self) -> None:
        """A run that fails at its start leaves no run directory (unless it holds something a resume would use)."""
        kept = ("checkpoint.pt", "dynamics.pt", "dynamics_fit.pt", "metrics.csv")
        if self.created and not any(os.path.exists(os.path.join(self.dir, f)) for f in kept):
            self.release()
            shutil.rmtree(self.dir, ignore_errors=True)
            self.created, Run.current = False, None if Run.current is self else Run.current

    def load_data(self) -> tuple[dict[str, torch.Tensor], float]:
        """D as tensors on the device and the action bound, checked against the evaluation env; then the config line."""
        task, path, args = self.task, self.data_path, self.args
        data = {k: torch.as_tensor(v, device=self.device) for k, v in load_transitions(path).items()}
        n, obs_dim, act_dim = len(data["obs"]), data["obs"].shape[1], data["act"].shape[1]
        if n < 10:
            raise UserError(f"{path} holds only {n} usable transitions; a run needs at least 10")
        self.envs = make_eval_envs(task, args.eval_episodes)
        space, dims = self.envs.single_action_space, (self.envs.single_observation_space.shape, (act_dim,))
        if dims != ((obs_dim,), space.shape):
            raise UserError(f"the data has obs/action dims {obs_dim}/{act_dim} but {task.gym_id} has {dims[0]}/"
                            f"{space.shape}; pass the matching --eval-env")  # fmt: skip
        low, high = (torch.as_tensor(b, dtype=torch.float32, device=self.device) for b in (space.low, space.high))
        if (outside := ((data["act"] < low - 1e-3) | (data["act"] > high + 1e-3)).any(-1)).any():
            raise UserError(f"{path}: {int(outside.sum())} action(s) lie outside {task.gym_id}'s action space (first: "
                            f"row {int(outside.nonzero()[0])}); clip them to [{low.min():g}, {high.max():g}] or pass "
                            "the right --eval-env")  # fmt: skip
        own = ("env", "dataset_path", "data_dir", "runs_dir", "resume", "seed")
        given = {k: vars(args)[k] for k in sorted(self.typed) if k not in own and k not in self.filled}
        show = lambda d: ", ".join(f"{k} {' '.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in d.items())  # noqa: E731
        print(f"{self.dir}: {task.name} ({n} transitions) -> {task.gym_id} ({task.reward_fn} reward), seed {args.seed}; "
              f"preset {self.preset}: {show(self.filled) or 'none'}; flags: {show(given) or 'defaults'} (every flag: "
              "config.json)")  # fmt: skip
        return data, float(space.high[0])

    def load_or_fit(self, model: nn.Module, fit: Callable[..., dict], path: Optional[str] = None) -> dict:
        """The dynamics ensemble: loaded from `path` (a run's dynamics.pt; one of this seed brings its RNG state),
        else fitted by `fit()`; saved as this run's dynamics.pt with the RNG state after it: a resume continues exactly."""
        run_path, seed = os.path.join(self.dir, "dynamics.pt"), self.args.seed
        resuming = self.args.resume is not None and os.path.isfile(run_path)
        if self.args.resume is not None and not resuming and path is None:
            print(f"{self.dir} has no dynamics.pt (stopped during the ensemble fit): fitting the ensemble from its last "
                  "saved state (every --checkpoint-minutes and at a signal), or again")  # fmt: skip
        path, metrics = run_path if resuming else path, {}
        if path is not None:
            saved = safe_load(path, "ensemble (a run's dynamics.pt)")
            try:
                model.load_state_dict(saved["model"])
            except (KeyError, RuntimeError, TypeError) as e:
                raise UserError(f"cannot load the ensemble from {path} ({type(e).__name__}: {str(e).splitlines()[0]}); "
                                "pass a dynamics.pt saved by a run on the same dataset and ensemble sizes") from None  # fmt: skip
            if resuming or saved.get("seed") == seed and "rng" in saved:
                metrics = saved.get("metrics", {})
                set_rng_state(saved["rng"])
            self.dynamics = {"source": "loaded", "path": os.path.abspath(path)}
        else:
            metrics = _checked_fit(fit, os.path.join(self.dir, "dynamics_fit.pt"), self.args.checkpoint_minutes,
                                   signalled=lambda: self.signal is not None)  # fmt: skip
            self.dynamics = {"source": "fitted"}
        if not resuming:
            self.dynamics["holdout_mse"] = metrics.get("dynamics/holdout_mse")
            config = read_json(os.path.join(self.dir, "config.json")) | {"_dynamics": self.dynamics}
            atomic_save(config, os.path.join(self.dir, "config.json"))
            atomic_save({"model": model.state_dict(), "metrics": metrics, "rng": rng_state(), "seed": seed}, run_path)
        else:
            self.dynamics = {}  # summary.json takes config.json's: where the run got it first
        model.requires_grad_(False)
        return metrics

    def start(self, parts: dict, first_row: Optional[dict] = None) -> None:
        """`parts` (anything with a state_dict) is what a checkpoint saves, loaded from one on --resume; row 0: first_row."""
        self.parts, args = parts, self.args
        if args.resume and not os.path.isfile(self.ckpt_path):
            print(f"{self.dir} has no checkpoint yet: the run starts again from epoch 0 in the same directory")
        elif args.resume:  # to the CPU: RNG states must stay CPU tensors
            ckpt = safe_load(self.ckpt_path, "checkpoint")
            try:
                for k, v in parts.items():
                    v.load_state_dict(ckpt["parts"][k])
                set_rng_state(ckpt["rng"])
                epoch, rows, scores, seconds = ckpt["epoch"], ckpt["rows"], ckpt["scores"], ckpt.get("wall_seconds", 0)
                number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)  # noqa: E731
                if not (isinstance(epoch, int) and 0 <= epoch <= self.args.epochs and number(seconds)):
                    raise ValueError(f"its epoch {epoch!r} or wall time is not one this run can continue from")
                if not all(isinstance(r, dict) for r in rows) or not all(map(number, scores)):
                    raise ValueError("its metrics rows or scores are malformed")
            except (KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError) as e:
                why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                raise UserError(f"{self.ckpt_path} does not match this run ({why}); it was saved with other sizes or by "
                                "another script") from None  # fmt: skip
            print(f"resumed {self.dir} at epoch {epoch}")
            self.start_epoch, self.rows, self.scores, self.prior_seconds = epoch, list(rows), list(scores), seconds
        self.writer = SummaryWriter(self.dir, purge_step=self.rows[-1]["epoch"] + 1 if self.rows else None)
        table = "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
        self.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)
        if not self.rows and first_row:
            self._write_row(0, first_row)
        stop = args.epochs if args.stop_after_epochs is None else self.start_epoch + args.stop_after_epochs
        self.last_epoch, self.epoch, self.last_save = min(args.epochs, stop), self.start_epoch, time.time()

    def epochs(self):
        """The epoch numbers still to run, with a progress bar; stops early after a signal."""
        desc, self.deferring = f"{self.args.exp_name} {self.task.name}", True
        self.bar = tqdm(initial=self.start_epoch, total=self.args.epochs, desc=desc, unit="epoch")
        for epoch in range(self.start_epoch + 1, self.last_epoch + 1):
            self.epoch, self.epoch_start, self.steps = epoch, time.time(), 0
            self.sums, self.counts, self.laps = {}, {}, {}
            yield epoch
            self.bar.update(1)  # after the epoch: an interrupted run's bar shows the epochs it finished
            if self.signal is not None:
                break
        self.bar.close()

    def lap(self, name: str) -> None:
        """Log `charts/{name}_seconds`, the time since the epoch started."""
        self.laps[f"charts/{name}_seconds"] = time.time() - self.epoch_start

    def means(self) -> dict[str, float]:
        """The epoch's means (its one host sync); `nonfinite` names a NaN/infinite loss or weight: `log` ends the run."""
        losses = {k: float(v) / self.counts[k] for k, v in self.sums.items()}
        modules = [(k, m) for k, m in self.parts.items() if isinstance(m, nn.Module)]
        weights = ((f"{k}.{n}", p) for k, m in modules for n, p in m.named_parameters())
        self.nonfinite = next((k for k, v in losses.items() if not np.isfinite(v)), None)
        self.nonfinite = self.nonfinite or next((n for n, p in weights if not torch.isfinite(p).all()), None)
        return losses

    def evaluate(self, policy: Callable, extra_eval: Optional[Callable] = None) -> dict[str, float]:
        """Return, D4RL score and the paper's last-10 mean in the real env; `extra_eval(policy, first_obs, envs)` adds."""
        t_eval = time.time()
        returns, first_obs = evaluate(policy, self.envs, self.task, self.args.seed + 1000 * self.epoch, self.device)
        metrics = eval_metrics(self.task, returns) | (extra_eval(policy, first_obs, self.envs) if extra_eval else {})
        self.scores.append(metrics.get("eval/normalized_score", metrics["eval/return"]))
        metrics["eval/last10_score"] = float(np.mean(self.scores[-10:]))
        metrics["charts/eval_seconds"] = time.time() - t_eval
        self.bar.set_postfix(score=f"{self.scores[-1]:.1f}")
        return metrics

    def _write_row(self, epoch: int, metrics: dict[str, float]) -> None:
        """TensorBoard (and wandb through it), and metrics.csv rewritten whole to a .tmp and renamed."""
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, epoch)
        self.rows.append({"epoch": epoch, **metrics})
        path = os.path.join(self.dir, "metrics.csv")
        with open(path + ".tmp", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in self.rows for k in row)))
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(path + ".tmp", path)

    def log(self, metrics: dict[str, float | torch.Tensor]) -> None:
        """metrics.csv, TensorBoard (and wandb) get the epoch's row with its timings; a non-finite epoch ends the run."""
        metrics = {k: float(v) for k, v in metrics.items()} | self.laps
        metrics["charts/epoch_seconds"] = seconds = time.time() - self.epoch_start
        metrics["charts/SPS"] = self.steps / (seconds - metrics.get("charts/eval_seconds", 0))
        self._write_row(self.epoch, metrics)
        if self.thread_error is not None:
            raise OSError(self.thread_error.errno or errno.EIO, f"TensorBoard could not write ({self.thread_error})")
        if self.nonfinite is not None:
            kept = "the last good checkpoint is kept" if os.path.isfile(self.ckpt_path) else "no checkpoint"
            why = f"training turned non-finite in epoch {self.epoch}: {self.nonfinite} is NaN or infinite; {kept}"
            self.end("failed", why + " (lower the learning rates or λ, or check the data)", 1)

    def checkpoint_due(self) -> bool:
        """Every --checkpoint-every epochs, at the last epoch, after a signal, and --checkpoint-minutes after the last."""
        every = self.epoch % self.args.checkpoint_every == 0 or self.epoch == self.last_epoch or self.signal is not None
        return every or time.time() - self.last_save >= 60 * self.args.checkpoint_minutes

    def save_checkpoint(self) -> None:
        """Everything needed to continue bit for bit: networks, optimisers, schedules, buffers, RNG states, metrics."""
        self.writing = True  # a second signal now stops the run after the checkpoint, not in the middle of it
        try:
            parts = {k: v.state_dict() for k, v in self.parts.items()}
            ckpt = {"epoch": self.epoch, "parts": parts, "rng": rng_state(), "rows": self.rows, "scores": self.scores}
            atomic_save(ckpt | {"wall_seconds": self.prior_seconds + time.time() - self.start_time}, self.ckpt_path)
        finally:
            self.writing = False
        self.last_save = time.time()
        if self.stop_now:
            raise KeyboardInterrupt

    def on_signal(self, signum, frame) -> None:
        urgent = not self.deferring or self.signal is not None  # before the loop, or a second signal: stop now ...
        self.signal = self.signal or signum
        if not urgent:
            return tqdm.write(f"{signal.Signals(signum).name}: stops after this epoch with a checkpoint (again: now)")
        if not self.writing:  # ... or once the checkpoint or summary being written is complete
            raise KeyboardInterrupt
        self.stop_now = True

    def on_thread_error(self, hook) -> None:
        """TensorBoard's thread's OSError (a full disk) is kept for the main thread's one line, not a traceback."""
        if not issubclass(hook.exc_type, OSError):
            return self.previous_hook(hook)
        self.thread_error = self.thread_error or hook.exc_value

    def finish(self, actor: nn.Module) -> dict:
        """After the loop: the exported policy and summary.json (or the interrupt's checkpoint message)."""
        self.envs.close()
        if self.signal is not None:
            why = f"interrupted by {signal.Signals(self.signal).name} after epoch {self.epoch}; checkpoint saved"
            self.end("interrupted", f"{why}; {self.resume_hint()}", 128 + self.signal)
        export_policy(actor, os.path.join(self.dir, "policy.pt"))
        return self.end("finished" if self.epoch == self.args.epochs else "stopped")

    def end(self, status: str, error: Optional[str] = None, code: int = 0) -> dict:
        """summary.json (the last evaluation, the last 10's mean: the paper's protocol); a signal meanwhile waits for it."""
        self.writing, args, task, scores = True, self.args, self.task, self.scores
        seconds = time.time() - self.start_time
        if self.bar is not None:
            self.bar.close()  # a message printed after this starts a line of its own
        last = next((r for r in reversed(self.rows) if "eval/return" in r), {})
        summary = {"env": task.name, "eval_env": task.gym_id, "algorithm": self.algorithm, "exp_name": args.exp_name,
                   "seed": args.seed, "epochs": self.epoch, "finished": status == "finished", "status": status,
                   "error": error, "device": str(self.device), "device_name": device_name(self.device),
                   "run_dir": self.dir, "preset": self.preset,
                   "dynamics": self.dynamics or read_json(os.path.join(self.dir, "config.json")).get("_dynamics"),
                   "score_kind": "d4rl_normalized" if task.ref_min is not None else "raw_return",
                   **{k: last.get(f"eval/{k}") for k in ("normalized_score", "normalized_score_std", "return", "return_std")},
                   "last10_score": float(np.mean(scores[-10:])) if scores else None,
                   "wall_seconds": self.prior_seconds + seconds, "wall_seconds_this_invocation": seconds,
                   "torch_threads": torch.get_num_threads()}  # fmt: skip
        with contextlib.suppress(OSError, ValueError):  # a full disk: the one-line error still says what happened
            with open(os.path.join(self.dir, "invocations.jsonl")) as f:
                summary["invocations"] = [json.loads(line) for line in f if line.strip()]
            atomic_save(summary, os.path.join(self.dir, "summary.json"))
        with contextlib.suppress(OSError):
            self.writer.close() if self.writer is not None else None
            if args.track:
                import wandb

                wandb.finish()
        self.release()
        Run.current, threading.excepthook = None, self.previous_hook
        if code:
            raise RunEnded(error, code)
        for s, handler in self.previous_handlers.items():
            signal.signal(s, handler)
        kind = "D4RL score" if summary["score_kind"] == "d4rl_normalized" else "return"
        final, w = summary["normalized_score" if kind == "D4RL score" else "return"], int(summary["wall_seconds"])
        scores = f"{kind} {final:.1f}, last-10 {summary['last10_score']:.1f}" if final is not None else "no evaluation"
        print(f"{status}: {summary['epochs']} epochs in {w // 3600}:{w % 3600 // 60:02d}:{w % 60:02d}, {scores}; "
              f"{self.dir}/summary.json")  # fmt: skip
        self.writing = False
        return summary

    def release(self) -> None:
        """Let go of the run directory: run.lock is removed while held (filelock then finds it gone), then unlocked."""
        if self.lock is not None and self.lock.is_locked:
            with contextlib.suppress(OSError):
                os.remove(self.lock.lock_file)
            self.lock.release()

    def resume_hint(self) -> str:
        return f"continue with: python {shlex.quote(os.path.relpath(self.script))} --resume {shlex.quote(self.dir)}"


# -------------------------------------------------------------------------------------------------------------- steps
def gradient_steps(step: Callable[[], dict], n: int, run: Run, policies: list[nn.Module], period: int = 1) -> None:
    """n gradient steps: `step()` makes one of every policy and returns {log prefix: statistics}, summed into `run`.
    With run.graphs, `period` steps (TD3+BC's delayed actor) are one CUDA graph, captured anew every epoch, and replayed."""
    run.steps += n  # charts/SPS

    def add(out: dict) -> None:  # summed as tensors: no host sync in the inner loop; run.means() makes them numbers
        for key, v in ((f"{prefix}/{k}", v) for prefix, stats in out.items() for k, v in stats.items()):
            run.sums[key], run.counts[key] = run.sums.get(key, 0) + v, run.counts.get(key, 0) + 1

    def eager(k: int) -> None:
        for _ in range(k):
            add(step())

    warmup = 3  # eager steps on a side stream before the capture, as CUDA graphs ask
    if not run.graphs or n < warmup + period:
        return eager(n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager(warmup)
    torch.cuda.current_stream().wait_stream(side)
    groups = [g for p in policies for o in vars(p).values() if isinstance(o,
              torch.optim.Optimizer) for g in o.param_groups]  # fmt: skip
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
            add(out)
    for p, total_it in counters:
        p.total_it = total_it + replays * period
    eager(tail)


# ----------------------------------------------------------------------------------------------------------------- cli
FIXES = {errno.ENOSPC: "free disk space", errno.EDQUOT: "free disk space (the disk quota is full)",
         errno.ENAMETOOLONG: "a file name is too long: shorten --runs-dir, --exp-name or the dataset's file name",
         errno.EROFS: "pass a writable --runs-dir (this file system is read-only)"}  # fmt: skip


def cli(main: Callable, args_class: type, argv: Optional[list[str]] = None) -> None:
    """tyro parses argv (default: sys.argv[1:]), main runs; every error is one line and a non-zero exit (2: bad flags,
    128 + the signal: a stop), never a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(args_class, argv)
    names = {w[2:].split("=")[0].replace("-", "_") for w in argv if w.startswith("--")}
    Run.typed = {f.name for f in dataclasses.fields(args_class) if f.name in names or "no_" + f.name in names}  # typed
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        main(args)
    except RunEnded as e:  # the run has written its summary.json
        print(f"error: {e}" if e.code == 1 else str(e), file=sys.stderr if e.code else sys.stdout)
        sys.exit(e.code)
    except (KeyboardInterrupt, OSError, UserError) as e:
        run = Run.current
        if run is not None and run.bar is not None:
            run.bar.close()  # the message starts a line of its own, not glued to the bar
        if isinstance(e, KeyboardInterrupt):
            signum = (run.signal if run is not None else None) or signal.SIGINT
            code, why = 128 + signum, f"interrupted by {signal.Signals(signum).name}"
        elif isinstance(e, UserError):
            code, why = e.code, "\n".join(f"error: {line}" for line in str(e).splitlines() or [""])
        else:  # an OSError: a failed write, in words that name the fix
            said = e.strerror if e.filename is None and e.strerror else str(e)  # atomic_save's words, no [Errno N]
            code, why = 1, f"error: {said}; {FIXES.get(e.errno, 'free disk space or pass a writable --runs-dir')}"
            if run is not None and not os.path.isdir(run.dir):
                why = (f"error: the run directory {run.dir} was deleted while the run was writing it ({e}); start "
                       "the run again")  # fmt: skip
        if run is not None and not isinstance(e, KeyboardInterrupt):
            run._remove_new_dir()  # a run that fails at its start leaves no run directory
            run = Run.current
        if run is not None and not isinstance(e, UserError) and os.path.isdir(run.dir):
            with contextlib.suppress(RunEnded, OSError):
                run.end("interrupted" if code > 128 else "failed", f"{why}; {run.resume_hint()}", code)
            why += f"; {run.resume_hint()}"
        print(why, file=sys.stderr)
        sys.exit(code)
    finally:  # a run that ended with an error kept its handlers until now: a late signal is only noted
        Run.typed = None
        for s, handler in handlers.items():
            signal.signal(s, handler)
