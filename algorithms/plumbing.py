"""The harness a method file needs, as small free functions its `main` calls (as CleanRL keeps its
buffer and evaluation in cleanrl_utils): the data (D4RL HDF5 with the download on first use, local files, Minari, the
jump tasks), evaluation and the D4RL score, the flags every file shares, the run directory, logging, checkpoints and
signals. Copy a method file and this one to use that method in your own project. orpo.py's `main` reads (td3bc.py and
cql.py have no presets and no ensemble):

    task, path = resolve_task(...); args, preset = apply_presets(args, task); check_args(args)  # a new run's
    device = seed_everything(args); envs = make_eval_envs(task, n); data, max_action = load_data(task, path, envs, ...)
    ... the ensemble: fitted, or read back (load, restore)
    run_dir, ckpt, writer = open_run(args, task, preset, len(D))  # new (config.json) or --resume's, its checkpoint
    ... the agents; restore(parts, ckpt, path) on --resume; stop = catch_signals(defer=True)
    for epoch in ...: ...; check_finite(...); evaluate(...); log(writer, rows, run_dir, epoch, metrics, t0, steps)
                      save({... rng_state()}, checkpoint_path) when due; if stop: break
    finish(run_dir, args, task, rows, stop, seconds, preset, actor)  # summary.json, and policy.pt (export_policy)

`cli(main, Args)` parses the flags with tyro (--resume takes the run's saved ones) and makes a refusal or a signal one
line and a non-zero exit. A field declares its interval or a path in its type (`Share = Annotated[float, "[0, 1]"]`: "["
includes the bound, "(" does not; `Path`, an existing file or folder), its class's `problems()` the rules tying flags.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import random
import signal
import sys
import time
import typing
import warnings
from dataclasses import asdict, dataclass
from typing import Annotated, Optional

import gymnasium as gym
import h5py
import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter


class UserError(Exception):
    code = 1  # a problem with the user's input or machine: one line and this exit status


class UsageError(UserError):
    code = 2  # bad flags, found before any work


class Stop(KeyboardInterrupt):
    """SIGINT/SIGTERM: the exit status is 128 + the signal's number; `message` says what was kept."""

    def __init__(self, signum, message=""):
        super().__init__(message)
        self.signum, self.message = signum, message


# ---------------------------------------------------------------------------------------------------------------- data
# D4RL's reference returns (d4rl/infos.py): random and expert policies, used for the normalised score
DOMAINS = {"hopper": ("Hopper-v4", -20.272305, 3234.3), "halfcheetah": ("HalfCheetah-v4", -280.178953, 12135.0),
           "walker2d": ("Walker2d-v4", 1.629008, 4592.3)}  # fmt: skip
D4RL_NAMES = [f"{d}-{k}-v2" for d in DOMAINS for k in ("random", "medium", "medium-replay", "medium-expert")]
JUMP_TASKS = ("halfcheetah-jump", "halfcheetah-jump-hard")
REWARD_FNS = ("env", *JUMP_TASKS)  # a file's `reward_fn` attr: the env's own reward, or a jump task's
D4RL_URL = "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/"  # d4rl's own host


@dataclass
class Task:
    name: str
    gym_id: str
    domain: str
    reward_fn: str = "env"
    ref_min: Optional[float] = None
    ref_max: Optional[float] = None


def domain_of(gym_id):
    return gym_id.split("-")[0].lower()  # Hopper-v4 -> hopper, HalfCheetah-v5 -> halfcheetah: DOMAINS' names


def download(env, url, path):
    """D4RL's file on first use, as d4rl does (to a temporary name, renamed when complete); datasets/fetch_d4rl.py adds
    a mirror and timeouts."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.hub.download_url_to_file(url, path)
    except Exception as e:  # URLError, HTTPError, a full disk
        raise UserError(f"could not download {url} ({getattr(e, 'reason', e)}); fetch it with `python datasets/fetch_d4rl.py "
                        f"--env {env}` (a mirror, timeouts) or put the file at {path}") from None  # fmt: skip


def read_attrs(path):
    """The file's attrs that matter here, checked: env_id and reward_fn (strings), finite reference returns min < max."""
    try:
        with h5py.File(path, "r") as f:
            a = {k: f.attrs.get(k) for k in ("env_id", "reward_fn", "ref_min_score", "ref_max_score")}
    except OSError as e:
        raise UserError(f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again") from None
    a = {k: v.decode() if isinstance(v, bytes) else v for k, v in a.items()}
    refs = [a["ref_min_score"], a["ref_max_score"]]
    try:  # a string env_id, a known reward_fn, and no reference returns or finite ones with min < max
        ok = all(isinstance(a[k] or "", str) for k in ("env_id", "reward_fn")) and a["reward_fn"] in (None, *REWARD_FNS)
        ok = ok and (refs == [None, None] or refs[0] < refs[1] and math.isfinite(refs[1] - refs[0]))
    except (TypeError, ValueError):  # a string compared with a number, an array
        ok = False
    if not ok:
        raise UserError(f"{path}: attrs env_id {a['env_id']!r}, reward_fn {a['reward_fn']!r}, ref_min_score {refs[0]}, "
                        f"ref_max_score {refs[1]}: env_id must be a string, reward_fn one of {', '.join(REWARD_FNS)}, "
                        "the reference returns finite with min < max (or drop both); fix the file's attrs")  # fmt: skip
    return a


def resolve_task(env, dataset_path, eval_env, data_dir):
    """Map --env / --dataset-path to a Task (eval env, termination, reference scores) and an HDF5 path."""
    data_dir = data_dir or os.environ.get("D4RL_DATASET_DIR", os.path.expanduser("~/.d4rl/datasets"))
    if env in D4RL_NAMES and dataset_path is None:
        domain, kind = env.split("-", 1)
        file = f"{domain}_{kind.removesuffix('-v2').replace('-', '_')}-v2.hdf5"  # d4rl's own cache name
        path = os.path.join(data_dir, file)
        if not os.path.isfile(path):
            download(env, D4RL_URL + file, path)
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


def load_transitions(path):
    """(s, a, r, s', done) of a D4RL-layout HDF5 file (or a Minari dataset), checked: s' is `next_observations`, never
    `observations[i+1]` (the next episode's start at episode ends); timeout steps are dropped (d4rl's qlearning_dataset)"""
    keys = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    if path.startswith("minari:"):
        import minari

        eps = list(minari.load_dataset(path[len("minari:") :]).iterate_episodes())
        cols = zip(*[(e.observations[:-1], e.actions, e.rewards, e.observations[1:], e.terminations, e.truncations)
                     for e in eps])  # fmt: skip
        data = dict(zip(keys, map(np.concatenate, cols)))
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
    for i, k in enumerate(keys):  # a 1-D reward or flag column is read as (n, 1)
        v = data[k] = data[k].reshape(n, 1) if i > 1 and data[k].shape == (n,) else data[k]
        width = data["observations"].shape[1:] if i == 3 else (1,) if i > 1 else v.shape[1:]
        if v.ndim != 2 or len(v) != n or not n or v.shape[1:] != width or v.dtype.kind not in "fiub":
            raise UserError(f"{path}: '{k}' has shape {v.shape} and dtype {v.dtype}; expected 2-D numbers, {n} > 0 rows "
                            "(rewards, terminals, timeouts: one column; next_observations: as observations)")  # fmt: skip
        if (bad := ~(np.isfinite(v) if i < 4 else np.isin(v, (0, 1))).all(1)).any():
            why = "has NaN or infinite rows; drop them from the file" if i < 4 else "must hold only 0/1; fix the file"
            raise UserError(f"{path}: '{k}' {why} ({bad.sum()} row(s), first: row {bad.argmax()})")
    keep = data["timeouts"][:, 0] == 0
    return {k: data[v][keep].astype(np.float32) for k, v in zip(("obs", "act", "rew", "next_obs", "done"), keys)}


def load_data(task, path, envs, device):
    """D as tensors on the device and the action bound, checked against the evaluation env."""
    data, space = load_transitions(path), envs.single_action_space
    if len(data["obs"]) < 10:
        raise UserError(
            f"{path} holds only {len(data['obs'])} usable transitions (timeouts dropped); a run needs at least 10"
        )
    dims = (data["obs"].shape[1:], data["act"].shape[1:])
    if dims != (envs.single_observation_space.shape, space.shape):
        raise UserError(f"the data has obs/action shapes {dims[0]}/{dims[1]} but {task.gym_id} has "
                        f"{envs.single_observation_space.shape}/{space.shape}; pass the matching --eval-env")  # fmt: skip
    if (outside := ((data["act"] < space.low - 1e-3) | (data["act"] > space.high + 1e-3)).any(-1)).any():
        raise UserError(f"{path}: {outside.sum()} action(s) lie outside {task.gym_id}'s action space (first: row "
                        f"{outside.argmax()}); clip them to [{space.low.min():g}, {space.high.max():g}] or pass the "
                        "right --eval-env")  # fmt: skip
    data = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
    return data, float(space.high[0])


def task_reward(task, next_obs, action, env_reward, info):
    """The task's reward in the evaluation env: the env's own, or the jump tasks' (paper appendix)."""
    if task.reward_fn == "env":
        return env_reward
    # r = clip(v_x, −3, 3) − 0.1·‖a‖² + 15·z, z the root height; jump-hard: −3 when the root angle > 1
    reward = np.clip(info["x_velocity"], -3, 3) - 0.1 * (action**2).sum(-1) + 15 * next_obs[:, 0]
    if task.reward_fn == "halfcheetah-jump-hard":
        reward = np.where(next_obs[:, 1] > 1, -3.0, reward)
    return reward


# ---------------------------------------------------------------------------------------------------------- evaluation
def make_eval_envs(task, n):
    # the *-v4 envs are the closest to D4RL's v2 data; Gymnasium's "out of date" warning is expected
    warnings.filterwarnings("ignore", message=".*is out of date.*")
    try:
        return gym.vector.SyncVectorEnv([lambda: gym.make(task.gym_id) for _ in range(n)])
    except Exception as e:  # gym's errors, and an `module:Id` whose module does not import
        raise UserError(f"cannot make evaluation env '{task.gym_id}' ({type(e).__name__}: {e}); pass --eval-env with a "
                        "Gymnasium id") from None  # fmt: skip


@torch.no_grad()
def evaluate(policy, envs, task, seed, device, rows):
    """One episode per sub-env with deterministic actions: the return, the D4RL normalised score
    100·(R − R_random)/(R_expert − R_random) per episode, the last 10 evaluations' mean (the paper's protocol, with the
    earlier ones in `rows`); and the episodes' first observations."""
    t0, (obs, _) = time.time(), envs.reset(seed=seed)
    first_obs, returns, running = obs.copy(), np.zeros(envs.num_envs), np.ones(envs.num_envs, dtype=bool)
    while running.any():
        action = policy(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
        obs, reward, terminated, truncated, info = envs.step(action)
        returns += running * task_reward(task, obs, action, reward, info)
        running &= ~(terminated | truncated)
    metrics, key = {"eval/return": float(returns.mean()), "eval/return_std": float(returns.std())}, "eval/return"
    if task.ref_min is not None:
        score, key = 100.0 * (returns - task.ref_min) / (task.ref_max - task.ref_min), "eval/normalized_score"
        metrics |= {key: float(score.mean()), "eval/normalized_score_std": float(score.std())}
    metrics["eval/last10_score"] = float(np.mean(([r[key] for r in rows if key in r] + [metrics[key]])[-10:]))
    metrics["charts/eval_seconds"] = time.time() - t0
    return metrics, torch.as_tensor(first_obs, dtype=torch.float32, device=device)


# --------------------------------------------------------------------------------------------------------------- flags
# a flag's interval, declared in its type and checked by check_args: "[" includes the bound, "(" does not
Positive, NonNegative, Share = Annotated[float, "(0, inf)"], Annotated[float, "[0, inf)"], Annotated[float, "[0, 1]"]
Count, Natural = Annotated[int, "[1, inf)"], Annotated[int, "[0, inf)"]
Path = Annotated[str, "path"]  # an existing file or folder, stored absolute (a resume from elsewhere finds it)


@dataclass
class RunArgs:
    """The flags every algorithm file takes; its own `Args` adds the method's flags after these."""

    # Data
    env: str = "hopper-medium-v2"
    """dataset: a D4RL name like hopper-medium-v2, halfcheetah-jump(-hard), local/NAME or a Minari id"""
    dataset_path: Optional[Path] = None
    """any D4RL-layout HDF5 file to train on instead of --env's file (eval env from --eval-env or its metadata)"""
    eval_env: Optional[str] = None
    """Gymnasium id of the evaluation environment, overriding the dataset's (e.g. Hopper-v4)"""
    data_dir: Optional[Path] = None
    """where datasets live (None: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""

    # Run: seeds, devices, logging, checkpoints
    exp_name: Optional[str] = None
    """name of this experiment, part of the run directory name (None or empty: the algorithm's file name, e.g. orpo)"""
    seed: Annotated[int, "[0, 4294967296)"] = 1  # numpy's seed range
    """seed of the experiment (torch, numpy, random, evaluation environments)"""
    torch_deterministic: bool = True
    """make cuDNN deterministic (`torch.backends.cudnn.deterministic`)"""
    cuda: bool = True
    """use a CUDA GPU when one is present (the same code runs on CPU otherwise)"""
    cuda_graphs: bool = True
    """on a CUDA GPU, capture the gradient steps as CUDA graphs and replay them (--no-cuda-graphs: eager)"""
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
    stop_after_epochs: Optional[Count] = None
    """stop (with a checkpoint) after this many epochs in this invocation, e.g. for time-limited jobs"""
    checkpoint_every: Count = 100
    """save a checkpoint every this many epochs (and after the last, and after a SIGINT/SIGTERM)"""
    checkpoint_minutes: Positive = 10.0
    """also save a checkpoint at the end of the first epoch this many minutes after the last (or the loop's start)"""
    threads: Optional[Count] = None
    """torch CPU threads (None: $OMP_NUM_THREADS where set, else 1: 2 ran 3x slower on 2 busy cores; docs/speed.md)"""
    epochs: Count = 1000
    """number of epochs (each: the method's model rollouts and gradient steps, then its evaluation)"""
    eval_episodes: Count = 10
    """episodes per evaluation, run as one vectorised environment"""

    def problems(self):  # --exp-name is part of the run directory's name
        name = self.exp_name or ""
        return [f"--exp-name {name[:40]!r}: must be a plain name of at most 100 characters"] * (
            os.sep in name or len(name) > 100
        )


def declared(args_class):
    """Each field's declared interval or "path", from its type (Positive, Optional[Share], tuple[Count, ...], ...)."""

    def find(t):
        if typing.get_origin(t) is Annotated:
            return t.__metadata__[0]
        return next(filter(None, map(find, typing.get_args(t))), None)

    return {k: find(t) for k, t in typing.get_type_hints(args_class, include_extras=True).items() if find(t)}


def check_args(args):
    """Every flag in its declared interval (NaN lies in none), every path there, every class's problems(): exit 2."""
    problems = []
    for name, interval in declared(type(args)).items():
        value, flag = vars(args)[name], "--" + name.replace("_", "-")
        values = [v for v in (value if isinstance(value, tuple) else [value]) if v is not None]
        if interval == "path":
            problems += [f"{flag} {value}: not an existing file or folder"] * (
                value is not None and not os.path.isfile(value) and not os.path.isdir(value)
            )
        elif value == ():
            problems.append(f"{flag}: give at least one value")
        else:  # "[" includes the bound, "(" does not
            low, high = (float(b) for b in interval[1:-1].split(","))
            inside = [(low <= v if interval[0] == "[" else low < v) and (v <= high if interval[-1] == "]" else v < high)
                      for v in values]  # fmt: skip
            problems += [f"{flag} {value}: must lie in {interval}"] * (not all(inside))
    for cls in type(args).__mro__:  # each class's own rules, beside its flags
        problems += vars(cls)["problems"](args) if "problems" in vars(cls) else []
    if problems:
        raise UsageError("\n".join(problems))


def unused(args, names, why):
    """A refusal for each flag of `names` (space-separated) set away from its default: the chosen variant ignores it."""
    defaults = asdict(type(args)())
    return [f"--{k.replace('_', '-')} {vars(args)[k]}: {why}; drop it" for k in names.split()
            if vars(args)[k] != defaults[k]]  # fmt: skip


# a resume takes these from its own command line: always (the machine's and the time's) ...
INVOCATION_FLAGS = ("resume", "stop_after_epochs", "cuda", "cuda_graphs", "track", "checkpoint_minutes", "threads")
# ... and, where typed, the run's length and where its data lives now
RESUME_FLAGS = INVOCATION_FLAGS + ("epochs", "data_dir", "dataset_path")


def resumed(args, argv):
    """--resume RUN_DIR: argv parsed again over the run's saved flags, with this invocation's INVOCATION_FLAGS and the
    RESUME_FLAGS typed; any other flag typed is ignored, with a note."""
    config, script = read_json(os.path.join(args.resume, "config.json")), script_name(type(args))
    if config.get("_script") != script:
        raise UserError(f"--resume {args.resume} is not a run of {script} (its config.json: {config.get('_script')}); "
                        f"pass a run directory made by {script}")  # fmt: skip
    defaults = asdict(type(args)())
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in defaults}  # JSON: lists
    saved = defaults | saved | {k: defaults[k] for k in INVOCATION_FLAGS}
    with warnings.catch_warnings():  # tyro warns of a saved value its flag's type no longer takes (an older version's)
        warnings.simplefilter("error", UserWarning)
        try:
            args = parse_args(type(args), argv, type(args)(**saved))
        except UserWarning as e:
            raise UserError(f"--resume {args.resume}: a saved flag's value is not one {script} takes now (tyro: "
                            f"{str(e).split('. ')[0]}); start a new run (or resume it with the code that made it)") from None  # fmt: skip
    for k in sorted(k for k in saved if k not in RESUME_FLAGS and vars(args)[k] != saved[k]):  # typed: ignored
        print(f"note: --resume ignores --{k.replace('_', '-')} {vars(args)[k]}; the run keeps its {saved[k]}")
        setattr(args, k, saved[k])
    done = read_json(os.path.join(args.resume, "summary.json"))
    if args.epochs < done.get("epochs", 0):
        raise UsageError(f"--epochs {args.epochs}: {args.resume} has run {done['epochs']} epochs already")
    if done.get("finished") and args.epochs == done["epochs"]:
        raise Stop(0, f"{args.resume} finished its {args.epochs} epochs: nothing to do (--epochs N extends it)")
    return args


def parse_args(args_class, argv, default=None):
    """tyro parses the flags (its --help, its error box and exit 2) over `default`'s values; paths are made absolute (a
    resume from another folder finds them)."""
    try:
        args = tyro.cli(args_class, args=argv, default=default, config=(tyro.conf.DisallowNone,))
    except BrokenPipeError:  # `--help | head`: the reader has gone, so has the output
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    for name in (k for k, kind in declared(args_class).items() if kind == "path" and vars(args)[k]):
        vars(args)[name] = os.path.abspath(os.path.expanduser(vars(args)[name]))
    return args


def script_name(args_class):
    """The method file's name without .py (orpo), the default --exp-name and summary.json's algorithm."""
    return os.path.splitext(os.path.basename(sys.modules[args_class.__module__].__file__))[0]


def seed_everything(args):
    """Seeds, threads, cuDNN; the device."""
    torch.set_num_threads(args.threads or int(os.environ.get("OMP_NUM_THREADS") or 1))
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    return torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")


# ---------------------------------------------------------------------------------------------------------------- runs
def open_run(args, task, preset, n):
    """The run directory runs/{env}__{exp_name}__{seed}__{time} with config.json (the effective flags), or --resume's
    own; its checkpoint (a dict; epoch 0 and no rows where there is none); TensorBoard, and wandb through it with
    --track, continued after the checkpoint's epoch. One line says what runs."""
    run_dir, name = (
        args.resume,
        f"{task.name.replace('/', '_')[:100]}__{args.exp_name}__{args.seed}__{int(time.time())}",
    )
    path, fresh = os.path.join(run_dir or "", "checkpoint.pt"), {"epoch": 0, "rows": [], "seconds": 0.0}
    ckpt = load(path, "checkpoint", fresh) if run_dir and os.path.isfile(path) else fresh  # a new run reads none
    if not isinstance(ckpt["rows"], list) or type(ckpt["epoch"]) is not int or not 0 <= ckpt["epoch"] <= args.epochs:
        raise UserError(f"{path} does not fit this run (its epoch {ckpt['epoch']!r} or its rows); pass another run")
    try:
        os.makedirs(args.runs_dir, exist_ok=True)
        for k in [] if run_dir else range(1, 999):
            with contextlib.suppress(FileExistsError):  # atomic: two runs started in the same second get two folders
                os.mkdir(folder := os.path.join(args.runs_dir, name + f"_{k}" * (k > 1)))
                run_dir = folder
                save(asdict(args) | {"_script": script_name(type(args))}, os.path.join(run_dir, "config.json"))
                break
    except OSError as e:
        raise UserError(f"cannot write in {args.runs_dir} ({e.strerror}); pass a writable --runs-dir") from None
    if args.track:  # started by cli; now it knows the run's name and its effective flags
        import wandb

        wandb.run.name = os.path.basename(run_dir)
        wandb.config.update(asdict(args), allow_val_change=True)
    writer = SummaryWriter(run_dir, purge_step=ckpt["epoch"] + 1 if ckpt["epoch"] else None)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()))  # fmt: skip
    print(f"{run_dir}: {task.name} ({n} transitions) -> {task.gym_id} ({task.reward_fn} reward), seed {args.seed}, "
          f"preset {preset}" + f"; resumed at epoch {ckpt['epoch']}" * bool(ckpt["epoch"]))  # fmt: skip
    return run_dir, ckpt, writer


def log(writer, rows, run_dir, epoch, metrics, t0=None, steps=0):
    """The epoch's row, with its wall time and its gradient steps per second (the wall time since t0 less the
    evaluation's), to TensorBoard (and wandb) and to metrics.csv, rewritten whole and renamed into place."""
    metrics = {k: float(v) for k, v in metrics.items()}
    if t0 is not None:
        metrics["charts/epoch_seconds"] = seconds = time.time() - t0
        metrics["charts/SPS"] = steps / (seconds - metrics.get("charts/eval_seconds", 0))
    for k, v in metrics.items():
        writer.add_scalar(k, v, epoch)
    rows.append({"epoch": epoch, **metrics})
    path = os.path.join(run_dir, "metrics.csv")
    with open(path + ".tmp", "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        out.writeheader()
        out.writerows(rows)
    os.replace(path + ".tmp", path)


def check_finite(metrics, modules, epoch):
    """A NaN or infinite loss or weight ends the run before its evaluation and checkpoint: the last one is kept."""
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    bad += [f"{k}.{n}" for k, m in modules.items() for n, p in m.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise UserError(f"training turned non-finite in epoch {epoch}: {bad[0]} is NaN or infinite; the last checkpoint "
                        "is kept (lower the learning rates or λ, or check the data)")  # fmt: skip


# --------------------------------------------------------------------------------------------------------------- files
def save(obj, path):
    """torch.save (a .json path: JSON) to path + .tmp, then os.replace: never half a file."""
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(json.dumps(obj, indent=2).encode()) if path.endswith(".json") else torch.save(obj, f)
        os.replace(path + ".tmp", path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")


def read_json(path):
    """A JSON file, or {} where there is none (or it is unreadable)."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        return json.load(f)
    return {}


def load(path, what, keys=()):
    """torch.load with weights_only=True (a crafted pickle cannot run code) of a dict holding `keys`; any failure is
    one line naming the file."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(obj, dict) or not set(keys) <= set(obj):
            raise ValueError(f"not a dict with {', '.join(keys)}")
        return obj
    except Exception as e:  # torch raises many types for missing, truncated, corrupt or foreign files
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        reason = "it holds objects beyond tensors and plain values" if "Weights only" in reason else reason
        raise UserError(f"{path} is not a usable {what} ({reason}); pass another file") from None


def restore(parts, saved, path):
    """Each part's (a module, buffer or schedule) state from `saved`, and the RNG states where saved: a file of other
    sizes or another script is one line."""
    try:
        for k, part in parts.items():
            part.load_state_dict(saved[k])
        if "rng" in saved:
            set_rng_state(saved["rng"])
    except Exception as e:  # a missing key, other sizes, another layout
        raise UserError(f"{path} does not fit this run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''});"
                        " it was saved with other sizes or by another script") from None  # fmt: skip


def rng_state():
    """torch's RNG states (CPU and CUDA): a run draws from no other (evaluate seeds the envs), so checkpoints hold
    tensors only and load with weights_only=True."""
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}  # no CUDA: []


def set_rng_state(rng):
    torch.set_rng_state(rng["torch"])
    torch.cuda.set_rng_state_all(rng["cuda"])  # without CUDA: kept for a CUDA start that never comes


def export_policy(actor, path):
    """Save an actor's net alone (a SAC actor's with its log-std head), loadable without this file:
    datasets/collect.py's load_policy reads the layers' sizes from the state dict."""
    save({"kind": actor.kind, "max_action": float(actor.max_action), "obs_mean": actor.obs_norm.mean.cpu(),
          "obs_std": actor.obs_norm.std.cpu(), "state_dict": {k: v.cpu() for k, v in actor.net.state_dict().items()}}, path)  # fmt: skip


def finish(run_dir, args, task, rows, stop, seconds, preset, actor):
    """After the loop: summary.json (the last evaluation, the last 10's mean: the paper's protocol) and one line of it;
    after a signal, Stop with the command that continues the run; else policy.pt, the policy alone."""
    last = next((r for r in reversed(rows) if "eval/return" in r), {})
    score = "normalized_score" if task.ref_min is not None else "return"
    status = "interrupted" if stop else "finished" if rows[-1]["epoch"] == args.epochs else "stopped"
    summary = {"env": task.name, "algorithm": script_name(type(args)), "exp_name": args.exp_name, "seed": args.seed,
               "epochs": rows[-1]["epoch"], "status": status, "finished": status == "finished",
               "score_kind": "d4rl_normalized" if score == "normalized_score" else "raw_return", "preset": preset,
               **{k: last.get(f"eval/{k}") for k in ("normalized_score", "return", "last10_score")}, "run_dir": run_dir,
               "device": "cuda" if torch.cuda.is_available() and args.cuda else "cpu",
               "torch_threads": torch.get_num_threads(), "wall_seconds": seconds}  # fmt: skip
    save(summary, os.path.join(run_dir, "summary.json"))
    if args.track:
        import wandb

        wandb.finish()
    label = "D4RL score" if score == "normalized_score" else "return"
    scores = f"{label} {summary[score]:.1f}, last-10 {summary['last10_score']:.1f}" if last else "no evaluation"
    print(f"{status}: {summary['epochs']} epochs in {seconds / 60:.1f} min, {scores}; {run_dir}/summary.json")
    if stop:
        script = os.path.relpath(sys.modules[type(args).__module__].__file__)
        raise Stop(stop[0], f"checkpoint saved; continue with: python {script} --resume {run_dir}")
    export_policy(actor, os.path.join(run_dir, "policy.pt"))
    return summary


# -------------------------------------------------------------------------------------------------------------- signals
def catch_signals(defer=False):
    """SIGINT/SIGTERM raise Stop at once; with defer, the first is only recorded in the returned list (the loop then
    ends after its epoch with a checkpoint) and a second raises Stop (a file being written is dropped, the last one
    kept: every write is atomic)."""
    received = []

    def handler(signum, frame):
        received.append(signum)
        if not defer or len(received) > 1:
            raise Stop(signum)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, handler)
    return received


def cli(main, args_class, argv=None):
    """tyro parses argv (default: sys.argv[1:]), --resume takes the run's saved flags, main runs. A refusal is one line
    and exit 1 or 2, running out of memory one line, a signal one line and 128 + its number (a finished run's resume:
    exit 0); any other error is a bug's and keeps its traceback."""
    catch_signals()
    try:
        args = parse_args(args_class, argv)
        check_args(args)
        args = args if args.resume is None else resumed(args, argv)
        if args.track:  # before any work: a missing login is one line, not one after an hours-long ensemble fit
            try:
                import wandb

                wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=asdict(args),
                           sync_tensorboard=True, save_code=True)  # fmt: skip
            except Exception as e:  # no login, no network, not installed
                raise UserError(
                    f"--track: wandb did not start ({e}); run `wandb login` or set WANDB_MODE=offline"
                ) from None
        main(args)
    except (UserError, KeyboardInterrupt, MemoryError, RuntimeError) as e:
        stop = e  # a signal, also one that a library turned into an error of its own
        while stop is not None and not isinstance(stop, KeyboardInterrupt):
            stop = stop.__context__
        if stop is not None:
            signum, message = getattr(stop, "signum", signal.SIGINT), getattr(stop, "message", "")
            if signum:
                message = f"interrupted by {signal.Signals(signum).name}" + f"; {message}" * bool(message)
            print(message, file=sys.stderr if signum else sys.stdout)
            sys.exit(128 + signum if signum else 0)
        if not isinstance(e, UserError):  # torch's out-of-memory errors say "allocate"; any other is a bug's traceback
            if isinstance(e, RuntimeError) and "alloc" not in str(e):
                raise
            e = UserError(f"out of memory ({(str(e).splitlines() or [repr(e)])[0]}); lower the flags that size the "
                          "networks, the ensemble or the buffers")  # fmt: skip
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        sys.exit(e.code)
