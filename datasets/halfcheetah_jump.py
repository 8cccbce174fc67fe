"""Make the HalfCheetah jump datasets of the ORPO paper (D4RL HDF5 layout).

halfcheetah-jump-hard: 1M steps of a uniform random policy in HalfCheetah-v4, rewards
    relabelled with the jump-hard reward.
halfcheetah-jump: the whole replay buffer of an online SAC (lr 1e-5) trained for 1M steps
    on the clipped-velocity reward clip(v_x, -3, 3) - 0.1 ||a||^2, rewards relabelled
    with the jump reward. The SAC collection checkpoints every --checkpoint-every steps
    and continues from there with --resume.

    python datasets/halfcheetah_jump.py --task halfcheetah-jump-hard
    python datasets/halfcheetah_jump.py --task halfcheetah-jump --resume

The files go to `<data_dir>/<task>.hdf5` (data_dir: --data-dir, else $D4RL_DATASET_DIR, else
~/.d4rl/datasets), which is where the algorithms look for `--env halfcheetah-jump(-hard)`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from common import (
    allocate_buffer,
    check_box_env,
    check_float,
    check_int,
    check_memory,
    check_output_path,
    close_last_episode,
    collect_rollouts,
    dataset_path,
    halfcheetah_jump_reward,
    halfcheetah_run_reward,
    load_torch_file,
    record,
    run_cli,
    uniform_policy,
    write_dataset,
)

ENV_ID = "HalfCheetah-v4"


@dataclass
class Args:
    task: Literal["halfcheetah-jump", "halfcheetah-jump-hard"]
    """which dataset to make"""
    steps: int = 1_000_000
    """env steps = transitions in the dataset"""
    seed: int = 0
    """seeds the env, the random policy and SAC"""
    name: str | None = None
    """dataset name; default the task's name, where the algorithms' --env <task> looks"""
    data_dir: str | None = None
    """overrides $D4RL_DATASET_DIR / ~/.d4rl/datasets"""
    out: str | None = None
    """write to this exact path instead of <data_dir>/<name>.hdf5"""
    max_episode_steps: int = 1000
    """episode time limit (the datasets use Gymnasium's default, 1000)"""

    # SAC (halfcheetah-jump only)
    learning_rate: float = 1e-5
    """actor, critic and entropy-temperature learning rate (the paper's 1e-5)"""
    learning_starts: int = 5000
    """random-action warm-up steps before SAC acts and updates"""
    batch_size: int = 256
    """SAC batch size"""
    gamma: float = 0.99
    """SAC discount factor"""
    tau: float = 0.005
    """SAC target network smoothing coefficient"""
    hidden_dim: int = 256
    """width of SAC's two hidden layers"""
    cuda: bool = True
    """train SAC on the GPU if one is available"""
    checkpoint_every: int = 50_000
    """checkpoint to <out>.ckpt.pt at the first episode end after every this many steps"""
    resume: bool = False
    """continue from <out>.ckpt.pt if it exists"""
    stop_at: int | None = None
    """checkpoint and exit at the first episode end at or after this many steps; rerun with --resume to go on"""


# Settings that shape the collected data; a resumed run must not change them.
DATA_SETTINGS = (
    "task",
    "steps",
    "seed",
    "max_episode_steps",
    "learning_rate",
    "learning_starts",
    "batch_size",
    "gamma",
    "tau",
    "hidden_dim",
)


# ---------------------------------------------------------------------------- SAC (CleanRL-style)

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, d_out)
    )


class SoftQ(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, 1, hidden)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1)).squeeze(-1)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim, 2 * action_space.shape[0], hidden)
        high, low = torch.as_tensor(action_space.high), torch.as_tensor(action_space.low)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def forward(self, obs):
        """Reparameterised tanh-Gaussian sample and its log-probability."""
        mean, log_std = self.net(obs).chunk(2, -1)
        # Soft-bound log_std (CleanRL / SpinningUp) so early updates cannot blow it up.
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        normal = torch.distributions.Normal(mean, log_std.exp())
        u = normal.rsample()
        squashed = torch.tanh(u)
        log_prob = normal.log_prob(u) - torch.log(self.action_scale * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.action_scale + self.action_bias, log_prob.sum(-1)


class SAC:
    def __init__(self, env: gym.Env, args: Args, device: torch.device):
        obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
        self.args, self.device = args, device
        self.actor = Actor(obs_dim, env.action_space, args.hidden_dim).to(device)
        self.qf1, self.qf2 = (SoftQ(obs_dim, act_dim, args.hidden_dim).to(device) for _ in range(2))
        self.qf1_target, self.qf2_target = (SoftQ(obs_dim, act_dim, args.hidden_dim).to(device) for _ in range(2))
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.target_entropy = -float(act_dim)
        self.q_opt = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=args.learning_rate)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=args.learning_rate)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=args.learning_rate)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        action, _ = self.actor(torch.as_tensor(obs, dtype=torch.float32, device=self.device)[None])
        return action[0].cpu().numpy()

    def update(self, batch: dict[str, torch.Tensor]) -> None:
        args, alpha = self.args, self.log_alpha.exp().detach()
        obs, act, rew = batch["observations"], batch["actions"], batch["rewards"]
        next_obs, done = batch["next_observations"], batch["terminals"].float()

        # Only true terminations stop bootstrapping; time-limit cuts do not.
        with torch.no_grad():
            next_act, next_log_prob = self.actor(next_obs)
            next_q = torch.min(self.qf1_target(next_obs, next_act), self.qf2_target(next_obs, next_act))
            target = rew + args.gamma * (1 - done) * (next_q - alpha * next_log_prob)
        q_loss = F.mse_loss(self.qf1(obs, act), target) + F.mse_loss(self.qf2(obs, act), target)
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()

        new_act, log_prob = self.actor(obs)
        q_new = torch.min(self.qf1(obs, new_act), self.qf2(obs, new_act))
        actor_loss = (alpha * log_prob - q_new).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()

        with torch.no_grad():
            for net, target_net in ((self.qf1, self.qf1_target), (self.qf2, self.qf2_target)):
                for p, tp in zip(net.parameters(), target_net.parameters()):
                    tp.lerp_(p, args.tau)

    # Nets and optimisers, all saved through their own state_dict.
    PARTS = ("actor", "qf1", "qf2", "qf1_target", "qf2_target", "q_opt", "actor_opt", "alpha_opt")

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.PARTS} | {"log_alpha": self.log_alpha.detach()}

    def load_state_dict(self, state: dict) -> None:
        for name in self.PARTS:
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])


# ---------------------------------------------------------------------------- collections


def make_env(args: Args) -> gym.Env:
    return gym.make(ENV_ID, max_episode_steps=args.max_episode_steps)


def collect_random(args: Args) -> dict[str, np.ndarray]:
    clock = time.perf_counter()
    env = make_env(args)
    data = collect_rollouts(
        env,
        uniform_policy(env.action_space, args.seed),
        args.steps,
        args.seed,
        info_keys=("x_velocity",),
        desc=args.task,
    )
    env.close()
    seconds = time.perf_counter() - clock
    print(f"{args.steps} env steps in {seconds:.1f} s ({args.steps / seconds:.0f} env steps/s)")
    return data


def save_checkpoint(path: Path, step: int, sac: SAC, buf, env: gym.Env, rng: np.random.Generator, args: Args) -> None:
    """Everything needed to continue exactly where we are. Taken between episodes, so the
    env's physics need not be saved: only its RNG, which draws the next reset."""
    state = {
        "step": step,
        "settings": {k: getattr(args, k) for k in DATA_SETTINGS},
        "sac": sac.state_dict(),
        "buffer": {k: torch.from_numpy(v[:step]) for k, v in buf.items()},
        "rng": {
            "numpy": rng.bit_generator.state,
            "env": env.unwrapped.np_random.bit_generator.state,
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, sac: SAC, buf, env: gym.Env, rng: np.random.Generator, args: Args) -> int:
    fix = f"delete {path} to start the collection over"
    state = load_torch_file(path, "checkpoint", fix)
    if (
        not isinstance(state, dict)
        or not {"step", "settings", "sac", "buffer", "rng"} <= state.keys()
        or not isinstance(state["settings"], dict)
    ):
        raise ValueError(f"{path} is not a checkpoint of this script (keys missing); {fix}")
    changed = {k: (v, getattr(args, k, None)) for k, v in state["settings"].items() if getattr(args, k, None) != v}
    if changed:
        raise ValueError(f"{path} was made with other settings (checkpoint, now): {changed}")
    step = state["step"]
    try:
        if not isinstance(step, int) or not 0 < step < args.steps:
            raise ValueError(f"step {step!r} is not within (0, {args.steps})")
        sac.load_state_dict(state["sac"])
        for k in buf:
            buf[k][:step] = state["buffer"][k].numpy()
        rng.bit_generator.state = state["rng"]["numpy"]
        env.unwrapped.np_random.bit_generator.state = state["rng"]["env"]
        torch.set_rng_state(state["rng"]["torch"].cpu())
        if torch.cuda.is_available() and state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
    except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ValueError(f"{path} does not match this collection ({type(e).__name__}: {detail}); {fix}") from None
    return step


def collect_sac(args: Args, ckpt_path: Path) -> dict[str, np.ndarray] | None:
    """Train SAC online on the clipped-velocity reward and return its whole replay buffer
    (None if stopped early by --stop-at)."""
    if ckpt_path.exists() and not args.resume:
        raise FileExistsError(f"{ckpt_path} exists: pass --resume to continue it, or delete it")
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)  # warm-up actions and minibatch indices
    env = make_env(args)
    sac = SAC(env, args, device)
    # The whole buffer is the dataset, so it holds every step (and x_velocity for relabelling).
    buf = allocate_buffer(args.steps, env.observation_space.shape[0], env.action_space.shape[0], ("x_velocity",))

    obs, _ = env.reset(seed=args.seed)
    start = 0
    if ckpt_path.exists():
        start = load_checkpoint(ckpt_path, sac, buf, env, rng, args)
        obs, _ = env.reset()  # the reset the checkpointed run was about to do
        print(f"resumed from {ckpt_path} at step {start}")

    low, high = env.action_space.low, env.action_space.high
    next_checkpoint = (start // args.checkpoint_every + 1) * args.checkpoint_every
    updates, clock = 0, time.perf_counter()
    for t in tqdm(
        range(start, args.steps), initial=start, total=args.steps, desc=args.task, unit="step", mininterval=1.0
    ):
        if t < args.learning_starts:
            action = rng.uniform(low, high).astype(np.float32)
        else:
            action = sac.act(obs)
        next_obs, _, terminated, truncated, info = env.step(action)
        reward = halfcheetah_run_reward(action, info["x_velocity"])
        record(buf, t, obs, action, reward, next_obs, terminated, truncated, info)

        if t >= args.learning_starts:
            idx = rng.integers(0, t + 1, size=args.batch_size)
            sac.update(
                {
                    k: torch.as_tensor(buf[k][idx], device=device)
                    for k in ("observations", "actions", "rewards", "next_observations", "terminals")
                }
            )
            updates += 1

        if not (terminated or truncated):
            obs = next_obs
            continue
        done = t + 1
        stop = args.stop_at is not None and done >= args.stop_at
        if done < args.steps and (done >= next_checkpoint or stop):
            save_checkpoint(ckpt_path, done, sac, buf, env, rng, args)
            next_checkpoint = (done // args.checkpoint_every + 1) * args.checkpoint_every
            if stop:
                print(f"stopped at step {done} after {updates} gradient updates; continue with --resume")
                return None
        obs, _ = env.reset()

    env.close()
    seconds = time.perf_counter() - clock
    print(
        f"{args.steps - start} env steps with {updates} gradient updates in {seconds:.1f} s "
        f"({(args.steps - start) / seconds:.0f} env steps/s)"
    )
    close_last_episode(buf)
    return buf


def check_flags(args: Args) -> list[str]:
    """Every problem with the flags, found before any work (one line each)."""
    problems: list[str] = []
    for flag, value, minimum in [
        ("--steps", args.steps, 1),
        ("--seed", args.seed, 0),
        ("--max-episode-steps", args.max_episode_steps, 1),
        ("--learning-starts", args.learning_starts, 0),
        ("--batch-size", args.batch_size, 1),
        ("--hidden-dim", args.hidden_dim, 1),
        ("--checkpoint-every", args.checkpoint_every, 1),
        ("--stop-at", args.stop_at, 1),
    ]:
        check_int(problems, flag, value, minimum)
    check_float(problems, "--learning-rate", args.learning_rate, 0.0, low_open=True)
    check_float(problems, "--gamma", args.gamma, 0.0, 1.0)
    check_float(problems, "--tau", args.tau, 0.0, 1.0, low_open=True)
    path = output_path(args)
    check_output_path(problems, path, "--out" if args.out else "--data-dir/--name")
    ckpt_path = path.with_name(path.name + ".ckpt.pt")
    if args.task == "halfcheetah-jump" and ckpt_path.exists() and not args.resume:
        problems.append(f"{ckpt_path} exists: pass --resume to continue it, or delete it")
    return problems


def output_path(args: Args) -> Path:
    return dataset_path(args.name or args.task, args.data_dir, args.out)


def main(args: Args) -> None:
    start = time.perf_counter()
    path = output_path(args)
    ckpt_path = path.with_name(path.name + ".ckpt.pt")
    env = make_env(args)
    check_memory(args.steps, *check_box_env(env, ENV_ID), info_columns=1)
    env.close()
    if args.task == "halfcheetah-jump-hard":
        data, policy = collect_random(args), "random"
    else:
        data, policy = collect_sac(args, ckpt_path), "sac-online"
        if data is None:
            return

    data["rewards"] = halfcheetah_jump_reward(
        data["next_observations"], data["actions"], data["x_velocity"], hard=args.task == "halfcheetah-jump-hard"
    )
    write_dataset(
        path,
        data,
        env_id=ENV_ID,
        reward_fn=args.task,
        policy=policy,
        seed=args.seed,
        created_by=Path(__file__).name,
        extra_attrs={"max_episode_steps": args.max_episode_steps},
    )
    ckpt_path.unlink(missing_ok=True)  # the dataset supersedes it
    print(f"wall time {time.perf_counter() - start:.1f} s")
    print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(
        main,
        Args,
        check_flags,
        on_interrupt="interrupted; no dataset was written (halfcheetah-jump: rerun with "
        "--resume to continue from the last checkpoint, if one was taken)",
    )
