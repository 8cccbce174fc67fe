# TD3+BC: A Minimalist Approach to Offline Reinforcement Learning (Fujimoto & Gu, NeurIPS 2021), a baseline of ORPO
# (Zhai et al., AAAI 2024), model-free, as CORL's td3_bc.py and the authors' code:
#   1. standardise states with D's mean and std + 1e-3;
#   2. train TD3 on the offline dataset D alone, with a behaviour-cloning term in the actor loss:
#      −α/mean|Q|·Q(s, π(s)) + (π(s) − a)², α = 2.5; target policy smoothing, delayed actor and target updates.
# It is also ORPO's output-policy optimiser (orpo.py), which trains it on D ∪ model rollouts instead.
# Usage: python algorithms/td3bc.py --env hopper-medium-v2
# --- shared: imports ---
from __future__ import annotations

import contextlib
import copy
import csv
import fcntl
import io
import json
import os
import platform
import random
import shlex
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import asdict, dataclass
from functools import partial
from typing import Callable, Literal, Optional, get_args, get_origin, get_type_hints

import gymnasium as gym
import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

# --- end ---


@dataclass
class Args:
    # TD3+BC
    hidden_dims: tuple[int, ...] = (256, 256)
    """hidden layer sizes of the actor and critics (the TD3+BC paper, CORL)"""
    actor_lr: float = 3e-4
    """TD3+BC actor learning rate"""
    critic_lr: float = 3e-4
    """TD3+BC critic learning rate"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 0.005
    """target network smoothing coefficient"""
    alpha: float = 2.5
    """TD3+BC's α: the actor loss is −α/mean|Q|·Q + (π(s) − a)²"""
    policy_noise: float = 0.2
    """TD3 target policy smoothing noise"""
    noise_clip: float = 0.5
    """range of the target policy smoothing noise"""
    policy_freq: int = 2
    """TD3 delayed updates: actor and targets every this many critic updates"""
    normalize_obs: bool = True
    """standardise policy inputs with D's mean and std + 1e-3 (on by default, as TD3+BC and CORL)"""

    # Training loop
    epochs: int = 1000
    """number of epochs of `steps_per_epoch` gradient steps"""
    steps_per_epoch: int = 1000
    """gradient steps per epoch"""
    batch_size: int = 256
    """batch size of every policy update"""
    eval_every: int = 1
    """evaluate every this many epochs (and after the last)"""
    eval_episodes: int = 10
    """episodes per evaluation, run as one vectorised environment"""

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
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of this experiment, part of the run directory name"""
    seed: int = 1
    """seed of the experiment (torch, numpy, random, evaluation environments)"""
    torch_deterministic: bool = True
    """make cuDNN deterministic (`torch.backends.cudnn.deterministic`)"""
    cuda: bool = True
    """use a CUDA GPU when one is present (the same code runs on CPU otherwise)"""
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


# TD3+BC uses one setting on every dataset (the TD3+BC paper, CORL): no per-dataset presets
PRESETS: dict[str, tuple] = {}


def apply_presets(args: Args, task: "Task") -> tuple[Args, str]:
    """Nothing to fill: TD3+BC has no preset-controlled field; returns the args and the preset's name."""
    return args, "none"


# --- shared: layers ---
class EnsembleLinear(nn.Module):
    """E independent linear layers applied as one batched matmul: x [E, B, in] -> [E, B, out]."""

    def __init__(self, in_features: int, out_features: int, ensemble_size: int):
        super().__init__()
        bound = 1 / np.sqrt(in_features)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)  # 1.05-1.08x faster than x @ W + b (same forward values)


def adam(params, lr: float) -> torch.optim.Adam:
    """Every network's optimiser. Fused: one kernel for all tensors instead of ~10 per tensor (3-9 % faster updates
    on a CPU)."""
    return torch.optim.Adam(params, lr=lr, fused=True)


def mlp(in_dim: int, hidden_dims: tuple[int, ...], out_dim: int) -> nn.Sequential:
    layers, dims = [], [in_dim, *hidden_dims]
    for i, o in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(dims[-1], out_dim))


# --- end ---


# --- shared: agents ---
class ObsNorm(nn.Module):
    """Standardises observations inside the network, so the env, the model and the buffers stay raw."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


class TwinCritic(nn.Module):
    """Both Q networks as one batched ensemble of 2: Q(s, a) -> [2, B]. On a CPU it is as fast as two separate MLPs
    (measured); it stays, since two MLPs would initialise differently and change every result and checkpoint."""

    def __init__(self, obs_norm: ObsNorm, obs_dim: int, act_dim: int, hidden_dims: tuple[int, ...]):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        dims = [obs_dim + act_dim, *hidden_dims, 1]
        self.layers = nn.ModuleList(EnsembleLinear(i, o, 2) for i, o in zip(dims[:-1], dims[1:]))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.obs_norm(obs), act], dim=-1).expand(2, -1, -1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x).squeeze(-1)


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.lerp_(s, tau)  # t ← t + τ·(s − t)


# --- end ---


# --- shared: td3bc ---
class DeterministicActor(nn.Module):
    kind = "deterministic_mlp"  # the format name of an exported policy.pt

    def __init__(self, obs_norm: ObsNorm, obs_dim: int, act_dim: int, hidden_dims: tuple[int, ...], max_action: float):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        self.net = mlp(obs_dim, hidden_dims, act_dim)
        self.max_action = max_action

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(self.obs_norm(obs))) * self.max_action


class TD3BC(nn.Module):
    """TD3 with a behaviour-cloning term (Fujimoto & Gu 2021): actor loss −λ·Q(s, π(s)) + (π(s) − a)², λ = α/mean|Q|.
    From `args` it takes hidden_dims, actor_lr, critic_lr, gamma, tau, alpha, policy_noise, noise_clip, policy_freq."""

    def __init__(self, obs_norm: ObsNorm, act_dim: int, max_action: float, args: Args):
        super().__init__()
        obs_dim = len(obs_norm.mean)
        self.actor = DeterministicActor(obs_norm, obs_dim, act_dim, args.hidden_dims, max_action)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = TwinCritic(obs_norm, obs_dim, act_dim, args.hidden_dims)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optim = adam(self.actor.parameters(), args.actor_lr)
        self.critic_optim = adam(self.critic.parameters(), args.critic_lr)
        self.max_action = max_action
        self.gamma = args.gamma
        self.tau = args.tau
        self.alpha = args.alpha
        self.policy_noise = args.policy_noise * max_action  # TD3's noise is relative to the action bound
        self.noise_clip = args.noise_clip * max_action
        self.policy_freq = args.policy_freq
        self.total_it = 0

    @torch.no_grad()
    def act(self, obs: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        action = self.actor(obs)
        if noise > 0:
            action = (action + noise * self.max_action * torch.randn_like(action)).clamp(
                -self.max_action, self.max_action
            )
        return action

    def update(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.total_it += 1
        with torch.no_grad():
            noise = (torch.randn_like(b["act"]) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
            next_act = (self.actor_target(b["next_obs"]) + noise).clamp(-self.max_action, self.max_action)
            target_q = (
                b["rew"] + self.gamma * (1 - b["done"]) * self.critic_target(b["next_obs"], next_act).min(0).values
            )
        q = self.critic(b["obs"], b["act"])
        critic_loss = (q - target_q).pow(2).mean(1).sum()
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()
        stats = {"critic_loss": critic_loss.detach(), "q": q.detach().mean()}

        if self.total_it % self.policy_freq == 0:  # delayed actor and target updates
            pi = self.actor(b["obs"])
            q_pi = self.critic(b["obs"], pi)[0]
            lmbda = self.alpha / q_pi.abs().mean().detach()
            bc_loss = F.mse_loss(pi, b["act"])
            actor_loss = -lmbda * q_pi.mean() + bc_loss
            self.actor_optim.zero_grad()
            actor_loss.backward(
                inputs=list(self.actor.parameters())
            )  # no critic weight gradients: 1.09-1.12x faster updates
            self.actor_optim.step()
            soft_update(self.critic_target, self.critic, self.tau)
            soft_update(self.actor_target, self.actor, self.tau)
            stats.update(actor_loss=actor_loss.detach(), bc_loss=bc_loss.detach())
        return stats

    def get_extra_state(self) -> dict:  # optimisers and the delay counter travel with the state dict (checkpoints)
        return {
            "total_it": self.total_it,
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
        }

    def set_extra_state(self, state: dict) -> None:
        self.total_it = state["total_it"]
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])


# --- end ---


# --- shared: buffers ---
class ReplayBuffer:
    """A FIFO ring buffer of preallocated tensors on the device."""

    def __init__(self, capacity: int, fields: dict[str, int], device: torch.device):
        self.data = {k: torch.zeros((capacity, dim), device=device) for k, dim in fields.items()}
        self.capacity = capacity
        self.ptr = 0  # where the next row goes
        self.size = 0  # rows filled so far
        self.device = device

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        n = len(next(iter(batch.values())))
        if n == 0:  # e.g. a rollout whose every row was non-finite
            return
        skip = max(0, n - self.capacity)  # a batch larger than the buffer keeps its newest rows
        idx = (self.ptr + torch.arange(skip, n, device=self.device)) % self.capacity
        for k, v in self.data.items():
            v[idx] = batch[k][skip:].reshape(n - skip, -1).to(v.dtype)
        self.ptr, self.size = (self.ptr + n) % self.capacity, min(self.size + n, self.capacity)

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        if self.size == 0:
            raise UserError(
                "a model buffer is still empty: every rollout row so far was NaN or infinite (the ensemble "
                "diverged); check the dataset for huge values or lower --dynamics-lr"
            )
        idx = torch.randint(self.size, (n,), device=self.device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict:
        return {"ptr": self.ptr, "size": self.size, "data": {k: v[: self.size].cpu() for k, v in self.data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.ptr, self.size = state["ptr"], state["size"]
        for k, v in state["data"].items():
            self.data[k][: self.size] = v.to(self.device)


def mix_counts(batch_size: int, ratios: tuple[float, ...]) -> list[int]:
    """Rows per source: int(B·ratio) for all but the last source, which gets the rest (the official code's rule)."""
    counts = [int(batch_size * r) for r in ratios[:-1]]
    return counts + [batch_size - sum(counts)]


def sample_mix(sources: list[tuple[ReplayBuffer, int, str]]) -> dict[str, torch.Tensor]:
    """One batch from several buffers: (buffer, rows, which stored reward to use as 'rew')."""
    parts = [buf.sample(n) for buf, n, _ in sources if n > 0]
    keys = [key for _, n, key in sources if n > 0]
    batch = {k: torch.cat([p[k] for p in parts]) for k in ("obs", "act", "next_obs", "done")}
    batch["rew"] = torch.cat([p[key] for p, key in zip(parts, keys)])
    batch["done"], batch["rew"] = batch["done"][:, 0], batch["rew"][:, 0]
    return batch


# --- end ---


def main(args: Args) -> dict:
    # plumbing (below the banner): flags and presets, D on the device, the eval envs, the run directory
    args, task, data_path, preset, device = setup(args)
    run = Run(args, task, preset, device, data_path)  # the run directory first: a bad --runs-dir fails before D loads
    data, real, envs, max_action, obs_norm = prepare_data(run)
    obs_dim, act_dim = data["obs"].shape[1], data["act"].shape[1]

    # the policy; no dynamics model, no rollouts
    policy = TD3BC(obs_norm, act_dim, max_action, args).to(device)
    run.start({"policy": policy}, {}, envs, policy.actor)  # resumes from the checkpoint, if any

    for _ in run.epochs():
        # per step one TD3+BC update on a batch of D
        for _ in range(args.steps_per_epoch):
            batch = sample_mix([(real, args.batch_size, "rew")])
            run.add("losses", policy.update(batch))
        run.end_epoch({})
    return run.finish(policy.actor)


# ======================================================================================================================
# The method ends here: a reader can stop. Below is the plumbing every algorithm file shares, unchanged between them:
# reading datasets (D4RL HDF5, Minari, local files), evaluation in Gymnasium, and the `Run` object that owns the run
# directory, flag checks, logging, checkpoints, resume, signals and summary.json.
# ======================================================================================================================


# --- shared: data ---
class UserError(Exception):
    """A problem with the user's input, reported as one line and a non-zero exit."""

    code = 1


# D4RL's reference returns (d4rl/infos.py): random and expert policies, used for the normalised score
DOMAINS = {
    "hopper": ("Hopper-v4", -20.272305, 3234.3),
    "halfcheetah": ("HalfCheetah-v4", -280.178953, 12135.0),
    "walker2d": ("Walker2d-v4", 1.629008, 4592.3),
}
D4RL_NAMES = [f"{d}-{k}-v2" for d in DOMAINS for k in ("random", "medium", "medium-replay", "medium-expert")]
JUMP_TASKS = ("halfcheetah-jump", "halfcheetah-jump-hard")
D4RL_URLS = (  # the original host first, then a public mirror of the same files
    "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{file}",
    "https://huggingface.co/datasets/imone/D4RL/resolve/main/{file}",
)


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


def default_data_dir() -> str:
    return os.environ.get("D4RL_DATASET_DIR", os.path.expanduser("~/.d4rl/datasets"))


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
                        f.write(chunk)
                        bar.update(len(chunk))
            os.replace(tmp, path)
            return
        except (urllib.error.URLError, OSError, ValueError) as e:
            reasons.append(f"{url}: {getattr(e, 'reason', e)}")
            if os.path.exists(tmp):
                os.remove(tmp)
    if made:  # a failed first download leaves no empty folder behind
        with contextlib.suppress(OSError):
            os.removedirs(folder)
    raise UserError(f"could not download the dataset ({'; '.join(reasons)}); download it yourself and put it at {path}")


def read_attr(path: str, key: str):
    try:
        with h5py.File(path, "r") as f:
            value = f.attrs.get(key)
    except OSError as e:
        raise UserError(f"{path} is not a readable HDF5 file ({e}); delete it and download or make it again") from None
    return value.decode() if isinstance(value, bytes) else value


def resolve_task(
    env: str, dataset_path: Optional[str], eval_env: Optional[str], data_dir: Optional[str]
) -> tuple[Task, str]:
    """Map --env / --dataset-path to a Task (eval env, termination, reference scores) and an HDF5 path."""
    data_dir = data_dir or default_data_dir()
    if dataset_path is not None:
        gym_id = eval_env or read_attr(dataset_path, "env_id")
        if gym_id is None:
            raise UserError(f"{dataset_path} names no evaluation env (attr 'env_id'); pass --eval-env, e.g. Hopper-v4")
        reward_fn = read_attr(dataset_path, "reward_fn") or "env"
        name = os.path.splitext(os.path.basename(dataset_path))[0]
        return _task_from_file(name, gym_id, reward_fn, dataset_path), dataset_path
    if env in D4RL_NAMES:
        domain, kind = env.split("-", 1)
        file = f"{domain}_{kind[: -len('-v2')].replace('-', '_')}-v2.hdf5"  # d4rl's own cache name
        path = os.path.join(data_dir, file)
        if not os.path.isfile(path):
            download([u.format(file=file) for u in D4RL_URLS], path)
        gym_id, ref_min, ref_max = DOMAINS[domain]
        return Task(env, eval_env or gym_id, domain, "env", ref_min, ref_max), path
    if env in JUMP_TASKS or env.startswith("local/"):
        path = os.path.join(data_dir, f"{env}.hdf5")
        if not os.path.isfile(path):
            maker = "datasets/halfcheetah_jump.py --task " + env if env in JUMP_TASKS else "datasets/collect.py"
            raise UserError(f"{path} does not exist; make it with `python {maker}` (or set --data-dir)")
        gym_id = eval_env or read_attr(path, "env_id") or "HalfCheetah-v4"
        return _task_from_file(env, gym_id, read_attr(path, "reward_fn") or "env", path), path
    if env.count("/") >= 1:
        return resolve_minari(env, eval_env)
    raise UserError(
        f"unknown dataset '{env}'; use one of {', '.join(D4RL_NAMES + list(JUMP_TASKS))}, local/NAME, "
        "a Minari id like mujoco/hopper/medium-v0, or --dataset-path FILE.hdf5"
    )


def _task_from_file(name: str, gym_id: str, reward_fn: str, path: str) -> Task:
    domain = domain_of(gym_id)
    ref_min, ref_max = read_attr(path, "ref_min_score"), read_attr(path, "ref_max_score")
    if ref_min is None and reward_fn == "env" and domain in DOMAINS:
        ref_min, ref_max = DOMAINS[domain][1:]  # same env and reward as D4RL: D4RL's reference returns apply
    ref = (None, None) if ref_min is None else (float(ref_min), float(ref_max))
    return Task(name, gym_id, domain, reward_fn, *ref)


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
        raise UserError(
            f"could not load Minari dataset '{dataset_id}' ({type(e).__name__}: {e}); check the id "
            f"with `minari list remote` or put it in the local cache{hint}"
        ) from None
    gym_id = eval_env or dataset.spec.env_spec.id
    meta = dataset.storage.metadata
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
    at episode ends); timeout steps are dropped like d4rl's `qlearning_dataset`; `terminals` is the done mask.
    """
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
    n = len(data["observations"])
    for k in keys:
        v = data[k] = np.asarray(data[k])
        if k in ("rewards", "terminals", "timeouts") and v.ndim == 2 and v.shape[1] == 1:
            v = data[k] = v[:, 0]
        ndim = 2 if k in ("observations", "actions", "next_observations") else 1
        if v.ndim != ndim or len(v) != n or v.dtype.kind not in "fiub":
            raise UserError(
                f"{path}: '{k}' has shape {v.shape} and dtype {v.dtype}; expected {ndim}-D numbers, {n} rows"
            )
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
        raise UserError(f"{path} holds no transition that is not a timeout step")
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


# --- end ---


# --- shared: evaluation ---
def make_eval_envs(task: Task, n: int) -> gym.vector.VectorEnv:
    # the *-v4 envs are the closest to D4RL's v2 data; Gymnasium's "out of date" warning is expected
    warnings.filterwarnings("ignore", message=".*is out of date.*")
    try:
        return gym.vector.SyncVectorEnv([lambda: gym.make(task.gym_id) for _ in range(n)])
    except gym.error.Error as e:
        raise UserError(
            f"cannot make evaluation env '{task.gym_id}' ({e}); pass --eval-env with a Gymnasium id"
        ) from None


@torch.no_grad()
def evaluate(
    policy: Callable, envs: gym.vector.VectorEnv, task: Task, seed: int, device
) -> tuple[np.ndarray, np.ndarray]:
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
    normalized = task.normalize(returns)
    if normalized is not None:
        metrics.update(
            {"eval/normalized_score": float(normalized.mean()), "eval/normalized_score_std": float(normalized.std())}
        )
    return metrics


# --- end ---


# --- shared: runs ---
class UsageError(UserError):
    """Bad flags: one line per problem, exit 2, found before any data is read or anything is written."""

    code = 2


class RunEnded(UserError):
    """A run that stops early on purpose (a signal) or because training turned non-finite; `code` is the exit status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


# every numeric flag's interval (a file checks the flags it has); "[" and "]" include the bound, "(" and ")" do not
RANGES = (
    "[1, inf) epochs steps_per_epoch batch_size eval_every eval_episodes checkpoint_every num_ensemble num_elites "
    "dynamics_batch_size dynamics_max_epochs dynamics_patience dynamics_max_holdout rollout_batch_size "
    "model_retain_epochs rollout_length rollout_length_o policy_freq stop_after_epochs",
    "(0, inf) actor_lr critic_lr dynamics_lr sac_actor_lr sac_critic_lr sac_alpha_lr checkpoint_minutes",
    "[0, inf) lambda_p lambda_o exploration_noise policy_noise noise_clip alpha cvae_steps",
    "[0, 4294967296) seed",  # numpy's seed range
    "[0, 1] real_ratio real_ratio_o output_rollout_ratio gamma tau",
    "(0, 1) dynamics_holdout_ratio",
)


def outside(value: float, interval: str) -> bool:
    low, high = (float(b) for b in interval[1:-1].split(","))
    return not (low <= value if interval[0] == "[" else low < value) or not (
        value <= high if interval[-1] == "]" else value < high
    )


# flags that act only together: (a flag only the files with the rule have, broken(args), the problem)
CONFLICTS = (
    ("num_elites", lambda a: a.num_elites > a.num_ensemble, "--num-elites {a.num_elites} exceeds --num-ensemble"),
    ("rollout_policy_path", lambda a: (a.rollout_policy == "fixed") == (a.rollout_policy_path is None), "--rollout-"
     "policy fixed and --rollout-policy-path RUN_DIR (an earlier ORPO run) go together"),
    ("pessimism", lambda a: not a.pessimism and a.lambda_p not in (None, 0), "--no-pessimism labels π^p's data with "
     "λp = 0: drop --lambda-p {a.lambda_p} or --no-pessimism"),
    ("output_rollout_ratio", lambda a: (a.real_ratio or 0) + (a.output_rollout_ratio or 0) > 1 + 1e-9, "--real-ratio "
     "{a.real_ratio} + --output-rollout-ratio {a.output_rollout_ratio} exceed 1 (π^o's rollouts get the rest)"),
)  # fmt: skip
# flags naming a file (or a run directory): (flag, what to pass, a directory will do)
PATHS = (
    ("dataset_path", "a D4RL-layout HDF5 file", False),
    ("load_dynamics_path", "a run's dynamics.pt", False),
    ("rollout_policy_path", "an ORPO run directory or its checkpoint.pt", True),
)


def check_args(args: Args) -> None:
    """Every flag in its range and every combination able to run, before anything is read or written: one line per
    problem, exit 2."""
    problems = []
    for name, value in asdict(args).items():
        flag, values = "--" + name.replace("_", "-"), value if isinstance(value, (tuple, list)) else [value]
        if any(isinstance(v, float) and not np.isfinite(v) for v in values):
            problems.append(f"{flag} {value}: must be a finite number")
        elif name.endswith("hidden_dims") and (not values or min(values) < 1):
            problems.append(f"{flag} {value}: every layer needs at least 1 unit")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            for low, high, *names in map(str.split, RANGES):
                if name in names and outside(value, f"{low} {high}"):
                    problems.append(f"{flag} {value}: must lie in {low} {high}")
    problems += [why.format(a=args) for guard, broken, why in CONFLICTS if hasattr(args, guard) and broken(args)]
    for name, what, dir_ok in PATHS:
        path = getattr(args, name, None)
        if path is not None and not (os.path.isfile(path) or dir_ok and os.path.isdir(path)):
            found = "is a directory" if os.path.isdir(path) else "no such file or directory"
            problems.append(f"--{name.replace('_', '-')} {path}: {found}; pass {what}")
    if os.sep in args.exp_name or args.exp_name in ("", ".", ".."):
        problems.append(f"--exp-name {args.exp_name!r}: must be a plain name (it is part of the run directory's name)")
    if problems:
        raise UsageError("\n".join(problems))


def atomic_save(obj, path: str, save: Optional[Callable] = None) -> None:
    """Save (torch.save by default) to a temporary name, renamed when complete: a crash or a full disk never leaves half
    a file."""
    try:
        (save or torch.save)(obj, path + ".tmp")
        os.replace(path + ".tmp", path)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as a RuntimeError
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        raise OSError(f"could not write {path} ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


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


def write_json(obj, path: str) -> None:
    def dump(obj, tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)

    atomic_save(obj, path, dump)


def read_json(path: str) -> dict:
    """A run's JSON file, or {} where there is none (or it is unreadable)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


RESUME_FLAGS = ("resume", "epochs", "stop_after_epochs", "cuda", "track", "checkpoint_minutes")  # a resume may change


def resumed_args(args: Args) -> Args:
    """The saved config of --resume RUN_DIR, with the flags a resume may change; names every other flag it ignores.
    Refuses another script's run directory, and leaves a finished run untouched when there is nothing left to do."""
    script, config = os.path.basename(__file__), read_json(os.path.join(args.resume, "config.json"))
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
    for k in asdict(args):
        given, kept = getattr(args, k), getattr(resumed, k)
        if k not in RESUME_FLAGS and given != getattr(defaults, k) and given != kept:
            print(f"note: --resume ignores --{k.replace('_', '-')} {given}; the run keeps its saved {kept}")
    for k in RESUME_FLAGS:
        if k != "epochs" or args.epochs != defaults.epochs:
            setattr(resumed, k, getattr(args, k))
    done = read_json(os.path.join(args.resume, "summary.json"))
    if resumed.epochs < done.get("epochs", 0):
        raise UsageError(f"--epochs {resumed.epochs}: {args.resume} has run {done['epochs']} epochs already")
    if done.get("finished") and resumed.epochs == done["epochs"]:
        raise RunEnded(f"{args.resume} finished its {resumed.epochs} epochs: nothing to do (--epochs N extends it)", 0)
    return resumed


def setup(args: Args) -> tuple[Args, Task, str, str, torch.device]:
    """Check the flags, resolve the dataset, fill in presets, seed everything. Nothing is written yet."""
    check_args(args)
    if args.resume is not None:
        args = resumed_args(args)
    try:  # an unwritable --runs-dir (or run directory) fails before any download or data load
        os.makedirs(args.resume or args.runs_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=args.resume or args.runs_dir).close()
    except OSError as e:
        raise UserError(f"cannot write in {args.resume or args.runs_dir} ({e.strerror}); pass a writable --runs-dir")
    task, data_path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)
    args, preset = apply_presets(args, task)
    check_args(args)  # preset values combined with the user's (e.g. the batch shares)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    return args, task, data_path, preset, device


def prepare_data(run: Run):
    """D as tensors on the device (a full ReplayBuffer), the vectorised eval envs, and the action bound; once all of it
    is checked, the run's effective config is printed."""
    task, data_path, args, device = run.task, run.data_path, run.args, run.device
    data = {k: torch.as_tensor(v, device=device) for k, v in load_transitions(data_path).items()}
    obs_dim, act_dim = data["obs"].shape[1], data["act"].shape[1]
    if len(data["obs"]) < 10:
        raise UserError(f"{data_path} holds only {len(data['obs'])} usable transitions; a run needs at least 10")
    real = ReplayBuffer(
        len(data["obs"]), {"obs": obs_dim, "act": act_dim, "rew": 1, "next_obs": obs_dim, "done": 1}, device
    )
    real.add(data)
    envs = make_eval_envs(task, args.eval_episodes)
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
    obs_mean, obs_std = data["obs"].mean(0), data["obs"].std(0) + 1e-3  # TD3+BC's normalisation, std + 1e-3
    if not args.normalize_obs:
        obs_mean, obs_std = torch.zeros_like(obs_mean), torch.ones_like(obs_std)
    print(f"{run.dir}: dataset {task.name} -> eval env {task.gym_id} (reward: {task.reward_fn}), preset {run.preset}")
    print("\n".join(f"  {k:24s} {v}" for k, v in asdict(args).items()))
    return data, real, envs, float(envs.single_action_space.high[0]), ObsNorm(obs_mean, obs_std)


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


class Logger:
    """TensorBoard always, wandb with --track, and metrics.csv rewritten atomically after every epoch."""

    def __init__(self, run_dir: str, args: Args, rows: list[dict]):
        if args.track:
            import wandb

            options = dict(sync_tensorboard=True, save_code=True, dir=run_dir, name=os.path.basename(run_dir))
            wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, config=asdict(args), **options)
        self.writer = SummaryWriter(run_dir, purge_step=rows[-1]["epoch"] + 1 if rows else None)
        self.writer.add_text(
            "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
        )
        self.path, self.rows, self.track = os.path.join(run_dir, "metrics.csv"), rows, args.track

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


class Run:
    """Everything around the epoch loop: the run directory, resume, evaluation, logging, checkpoints, signals, summary.

    The seam between an algorithm and its plumbing: `start` (resume), `epochs()` (the loop, with a progress bar),
    `add` (one update's statistics), `lap` (a timing), `end_epoch` (means, evaluation, log, checkpoint), `finish`.

    Checkpoints are written every --checkpoint-every epochs, every --checkpoint-minutes of wall time, at the end,
    and after the epoch in which SIGINT/SIGTERM arrives (a second signal stops at once). Only a checkpoint whose
    weights and losses are finite is written: a run that turns non-finite stops, keeping the last good one."""

    current: Optional["Run"] = None  # for the one-line messages of a failure or an interrupt before the first epoch

    def __init__(self, args: Args, task: Task, preset: str, device: torch.device, data_path: str):
        self.args, self.task, self.preset, self.device, self.data_path = args, task, preset, device, data_path
        fingerprint = {
            "path": os.path.abspath(data_path) if not data_path.startswith("minari:") else data_path,
            "fingerprint": file_fingerprint(data_path),
        }
        self.created = args.resume is None
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
            name = f"{task.name.replace('/', '_')}__{args.exp_name}__{args.seed}__{int(time.time())}"
            self.dir = os.path.join(args.runs_dir, name)
            os.makedirs(args.runs_dir, exist_ok=True)
            for n in range(2, 1000):  # mkdir is atomic: two runs started in the same second get different dirs
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.dir)
                    break
                self.dir = os.path.join(args.runs_dir, f"{name}_{n}")
        # one writer per run directory: a second process (a resume, a relaunch) is refused while this one lives
        self.lock = open(os.path.join(self.dir, "run.lock"), "a+")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock.seek(0)
            pid = (self.lock.read().split() or ["?"])[-1]
            self.lock.close()
            raise UserError(f"{self.dir} is in use by another process (pid {pid}); stop it first") from None
        self.lock.truncate(0)
        print(os.getpid(), file=self.lock, flush=True)
        if self.created:
            config = {**asdict(args), "_dataset": fingerprint, "_script": os.path.basename(__file__)}
            write_json(config, os.path.join(self.dir, "config.json"))
        Run.current = self
        self.ckpt_path = os.path.join(self.dir, "checkpoint.pt")
        self.signal, self.deferring, self.logger, self.prior_seconds = None, False, None, 0.0
        self.start_time = time.time()
        self.previous_handlers = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def release(self) -> None:
        self.lock.close()  # closing the file releases the flock

    def resume_hint(self) -> str:
        return f"continue with: python {shlex.quote(os.path.relpath(__file__))} --resume {shlex.quote(self.dir)}"

    def on_signal(self, signum, frame) -> None:
        if not self.deferring or self.signal is not None:  # before the loop, or a second signal: stop now
            self.signal = signum
            raise KeyboardInterrupt
        self.signal = signum
        tqdm.write(
            f"{signal.Signals(signum).name}: stopping after this epoch with a checkpoint (signal again to stop now)"
        )

    def start(
        self, parts: dict, first_row: dict, envs: gym.vector.VectorEnv, eval_policy: Callable, extra_eval=None
    ) -> None:
        """Load a resumed run's checkpoint (or start at epoch 0), open the logger; metrics.csv's row 0 is `first_row`.

        `parts` is everything a checkpoint saves; `eval_policy` is evaluated in `envs` every --eval-every epochs, and
        `extra_eval(eval_policy, first_obs, envs)` adds metrics (the model-based files pass the model's own return)."""
        self.parts, self.envs, self.eval_policy, self.extra_eval = parts, envs, eval_policy, extra_eval
        if self.args.resume and os.path.isfile(self.ckpt_path):
            self.start_epoch, rows, self.scores, self.prior_seconds = load_checkpoint(self.ckpt_path, parts)
        else:
            if self.args.resume:
                print(f"{self.dir} has no checkpoint yet: the run starts again from epoch 0 in the same directory")
            self.start_epoch, rows, self.scores = 0, [], []
        self.logger = Logger(self.dir, self.args, rows)
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
        for self.epoch in range(self.start_epoch + 1, self.last_epoch + 1):
            self.epoch_start, self.sums, self.counts, self.laps = time.time(), {}, {}, {}
            yield self.epoch
            self.bar.update(1)  # after the epoch: an interrupted run's bar shows the epochs it finished
            if self.signal is not None:
                break
        self.bar.close()

    def add(self, prefix: str, stats: dict[str, torch.Tensor]) -> None:
        """Sum one update's statistics as tensors: no host sync in the inner loop; `end_epoch` logs their means."""
        for k, v in stats.items():
            key = f"{prefix}/{k}"
            self.sums[key] = self.sums.get(key, 0) + v
            self.counts[key] = self.counts.get(key, 0) + 1

    def lap(self, name: str) -> None:
        """Log `charts/{name}_seconds`, the time since the epoch started."""
        self.laps[f"charts/{name}_seconds"] = time.time() - self.epoch_start

    def end_epoch(self, metrics: dict[str, float | torch.Tensor]) -> None:
        """The epoch's means (its only host syncs), the finiteness check, evaluation when due, the log, a checkpoint.

        Only the updates' statistics and the weights are checked (they can poison training), before evaluating, so a
        non-finite policy never reaches MuJoCo; a non-finite diagnostic (u, model return, ...) is logged as it is."""
        epoch, args = self.epoch, self.args
        losses = {k: float(v) / self.counts[k] for k, v in self.sums.items()}
        bad = next((k for k, v in losses.items() if not np.isfinite(v)), None) or first_nonfinite_weight(self.parts)
        metrics = {**losses, **{k: float(v) for k, v in metrics.items()}}
        if bad is None and (epoch % args.eval_every == 0 or epoch == args.epochs):
            metrics.update(self.evaluation())
        metrics.update(self.laps)
        metrics["charts/epoch_seconds"] = time.time() - self.epoch_start
        metrics["charts/SPS"] = args.steps_per_epoch / (
            metrics["charts/epoch_seconds"] - metrics.get("charts/eval_seconds", 0)
        )
        self.logger.log(epoch, metrics)
        if bad is not None:
            kept = (
                f"the last good checkpoint in {self.dir} is kept" if os.path.isfile(self.ckpt_path) else "no checkpoint"
            )
            why = f"training turned non-finite in epoch {epoch}: {bad} is NaN or infinite; {kept}"
            self.end("failed", why + " (lower the learning rates or λ, or check the data)", 1)
        due = epoch % args.checkpoint_every == 0 or epoch == self.last_epoch or self.signal is not None
        if due or time.time() - self.last_save >= 60 * args.checkpoint_minutes:
            save_checkpoint(self.ckpt_path, epoch, self.parts, self.logger, self.scores, self.wall_seconds())
            self.last_save = time.time()

    def wall_seconds(self) -> float:
        """The run's wall time over every invocation (a resume adds to what its checkpoint recorded)."""
        return self.prior_seconds + time.time() - self.start_time

    def evaluation(self) -> dict[str, float]:
        """The policy's return in the real env (and its return and u in the model MDP); the paper's last-10 mean."""
        t_eval = time.time()
        returns, first_obs = evaluate(
            self.eval_policy, self.envs, self.task, self.args.seed + 1000 * self.epoch, self.device
        )
        metrics = eval_metrics(self.task, returns)
        if self.extra_eval is not None:
            metrics.update(self.extra_eval(self.eval_policy, first_obs, self.envs))
        self.scores.append(metrics.get("eval/normalized_score", metrics["eval/return"]))
        metrics.update(
            {"eval/last10_score": float(np.mean(self.scores[-10:])), "charts/eval_seconds": time.time() - t_eval}
        )
        self.bar.set_postfix(score=f"{self.scores[-1]:.1f}")
        return metrics

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
        """summary.json: the last evaluation and the mean of the last 10 evaluations (the paper's protocol)."""
        for s, handler in self.previous_handlers.items():
            signal.signal(s, handler)
        args, task, scores = self.args, self.task, getattr(self, "scores", [])
        rows = self.logger.rows if self.logger else []
        last = next((r for r in reversed(rows) if "eval/return" in r), {})
        summary = {
            "env": task.name,
            "eval_env": task.gym_id,
            "algorithm": args.exp_name,
            "seed": args.seed,
            "epochs": getattr(self, "epoch", 0),
            "finished": status == "finished",
            "status": status,
            "error": error,
            "device": str(self.device),
            "device_name": device_name(self.device),
            "run_dir": self.dir,
            "preset": self.preset,
            "score_kind": "d4rl_normalized" if task.ref_min is not None else "raw_return",
            **{k: last.get(f"eval/{k}") for k in ("normalized_score", "normalized_score_std", "return", "return_std")},
            "last10_score": float(np.mean(scores[-10:])) if scores else None,
            "wall_seconds": self.wall_seconds(),
            "wall_seconds_this_invocation": time.time() - self.start_time,
        }
        with contextlib.suppress(OSError):  # a full disk: the one-line error still says what happened
            write_json(summary, os.path.join(self.dir, "summary.json"))
        if self.logger:
            self.logger.close()
        if getattr(self, "bar", None) is not None:
            self.bar.close()
        self.release()
        Run.current = None
        if code:
            raise RunEnded(error, code)
        print(json.dumps(summary, indent=2))
        return summary


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


def load_checkpoint(path: str, parts: dict) -> tuple[int, list[dict], list[float], float]:
    # to the CPU: RNG states must stay CPU tensors; networks, optimisers and buffers copy to their own device on load
    ckpt = safe_load(path, "checkpoint")
    try:
        for k, v in parts.items():
            v.load_state_dict(ckpt["parts"][k])
        set_rng_state(ckpt["rng"])
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as e:
        raise UserError(
            f"{path} does not match this run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "it was saved with other sizes or by another script"
        ) from None
    print(f"resumed {os.path.dirname(path)} at epoch {ckpt['epoch']}")
    return ckpt["epoch"], ckpt["rows"], ckpt["scores"], ckpt.get("wall_seconds", 0.0)


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


def help_text(args_class: type) -> str:
    """--help in the file's order of ideas: the file's header, then each comment line of Args heads a section of flags,
    each flag with its docstring and one default."""
    import ast
    import inspect
    import itertools
    import shutil
    import textwrap

    source, module = textwrap.dedent(inspect.getsource(args_class)), inspect.getmodule(args_class)
    body = ast.parse(source).body[0].body
    docs = {a.target.id: b.value.value for a, b in zip(body, body[1:]) if isinstance(a, ast.AnnAssign)}
    lines = source.splitlines()
    items = sorted(
        [(a.lineno, a.target.id) for a in body if isinstance(a, ast.AnnAssign)]
        + [(i + 1, "") for i, line in enumerate(lines) if line.strip().startswith("# ")]
    )
    hints, defaults, width = get_type_hints(args_class), args_class(), min(120, shutil.get_terminal_size().columns)
    wrap = textwrap.TextWrapper(width, subsequent_indent=" " * 30, break_on_hyphens=False)
    top = itertools.takewhile(
        lambda line: line.startswith("# ") and "---" not in line, inspect.getsource(module).split("\n")
    )
    out = [line[2:] for line in top] or (module.__doc__ or "").strip().split("\n")  # the file's header (or docstring)
    for lineno, name in items:
        if not name:  # a section heading
            out += ["", lines[lineno - 1].strip()[2:] + ":"]
            continue
        kinds = [t for t in get_args(hints[name]) if t is not type(None)]
        kind = kinds[0] if type(None) in get_args(hints[name]) else hints[name]  # Optional[X] -> X
        flag, default = "--" + name.replace("_", "-"), getattr(defaults, name)
        text, _, rest = " ".join(docs[name].split()).partition(" (default: ")  # a docstring may name its default
        shown, _, tail = rest.partition(")")
        if kind is bool:
            left, shown = f"  {flag}, --no-{flag[2:]}", shown or (flag if default else f"--no-{flag[2:]}")
        else:
            choices = get_args(kind) if str(kind).startswith("typing.Literal") else None
            item = getattr(get_args(kind)[0] if get_origin(kind) in (tuple, list) else None, "__name__", "").upper()
            metavar = "{" + ",".join(choices) + "}" if choices else f"{item} [{item} ...]" if item else None
            left = f"  {flag} {metavar or getattr(kind, '__name__', 'VALUE').upper()}"
            shown = shown or (" ".join(map(str, default)) if isinstance(default, tuple) else str(default))
        out += [left] if len(left) > 28 else []  # a long flag gets a line of its own
        wrap.initial_indent = ("" if len(left) > 28 else left).ljust(30)
        out.append(wrap.fill(f"{text}{tail} (default: {shown})"))
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
            return tyro.cli(args_class, args=words)
    except SystemExit:  # tyro's message box: a title, a rule of dashes, the message, a rule, a footer
        box = [line.strip() for line in printed.getvalue().splitlines() if line.strip()]
        rules = [i for i, line in enumerate(box) if set(line) == {"-"}] + [len(box)] * 2
        message = " ".join(box[rules[0] + 1 : rules[1]]).replace(" .", ".")
        raise UsageError(f"{message or 'cannot parse the flags'} (see python {sys.argv[0]} --help)") from None


def cli(main: Callable, args_class: type) -> None:
    """The command line: every error as one line and a non-zero exit (2 for bad flags), never a traceback."""
    try:
        main(parse_args(args_class, sys.argv[1:]))
    except (KeyboardInterrupt, OSError) as e:  # a signal before the epoch loop (or a second one); a failed write
        run, signum = Run.current, getattr(Run.current, "signal", None) or signal.SIGINT
        if isinstance(e, KeyboardInterrupt):
            status, code, why = "interrupted", 128 + signum, f"interrupted by {signal.Signals(signum).name}"
        else:
            status, code, why = "failed", 1, f"error: {e}; free disk space or pass a writable --runs-dir"
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


# --- end ---


if __name__ == "__main__":
    cli(main, Args)
