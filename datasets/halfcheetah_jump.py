"""Make the HalfCheetah jump datasets of the ORPO paper (D4RL HDF5 layout).

halfcheetah-jump-hard: 1M steps of a uniform random policy in HalfCheetah-v4, rewards
    relabelled with the jump-hard reward.
halfcheetah-jump: the whole replay buffer of an online SAC (lr 1e-5) trained for 1M steps
    on the clipped-velocity reward clip(v_x, -3, 3) - 0.1 ||a||^2, rewards relabelled
    with the jump reward (the SAC of datasets/sac.py). The SAC collection checkpoints every --checkpoint-every steps
    and continues from there with --resume.

    python datasets/halfcheetah_jump.py --task halfcheetah-jump-hard
    python datasets/halfcheetah_jump.py --task halfcheetah-jump --resume

The files go to `<data_dir>/<task>.hdf5` (data_dir: --data-dir, else $D4RL_DATASET_DIR, else
~/.d4rl/datasets), which is where the algorithms look for `--env halfcheetah-jump(-hard)`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np
import torch

from common import (
    allocate_buffer,
    check_box_env,
    check_float,
    check_int,
    check_memory,
    check_output_path,
    check_overwrite,
    close_last_episode,
    collect_rollouts,
    dataset_path,
    halfcheetah_jump_reward,
    halfcheetah_run_reward,
    run_cli,
    uniform_policy,
    write_dataset,
)
from sac import SAC, load_checkpoint, save_checkpoint, train_online  # the SAC shared with sac.py

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
    overwrite: bool = False
    """replace an existing dataset at the output path"""

    # SAC (halfcheetah-jump only)
    learning_rate: float = 1e-5
    """actor, critic and entropy-temperature learning rate (the paper's 1e-5)"""
    learning_starts: int = 0
    """random-action warm-up steps before SAC acts and updates (the authors' collect_halfcheetah-jump.py has none: d3rlpy's
    SAC acts from the first step and updates once its buffer holds a batch; docs/data.md)"""
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


def settings(args: Args) -> dict:
    return {k: getattr(args, k) for k in DATA_SETTINGS}


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
        start, _ = load_checkpoint(ckpt_path, sac, buf, env, rng, settings(args), args.steps)
        obs, _ = env.reset()  # the reset the checkpointed run was about to do
        print(f"resumed from {ckpt_path} at step {start}")

    next_checkpoint, stopped_at = (start // args.checkpoint_every + 1) * args.checkpoint_every, None

    def at_episode_end(done: int, pbar) -> bool:
        nonlocal next_checkpoint, stopped_at
        stop = args.stop_at is not None and args.stop_at <= done < args.steps
        stopped_at = done
        if done < args.steps and (done >= next_checkpoint or stop):
            save_checkpoint(ckpt_path, done, sac, buf, env, rng, settings(args))
            next_checkpoint = (done // args.checkpoint_every + 1) * args.checkpoint_every
        return stop

    clock = time.perf_counter()
    updates, stopped = train_online(
        env,
        obs,
        sac,
        buf,
        rng,
        start=start,
        steps=args.steps,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        at_episode_end=at_episode_end,
        reward_fn=lambda action, _, info: halfcheetah_run_reward(action, info["x_velocity"]),
        desc=args.task,
    )
    if stopped:
        print(f"stopped at step {stopped_at} after {updates} gradient updates; continue with --resume")
        return None
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
        ("--max-episode-steps", args.max_episode_steps, 1),
        ("--learning-starts", args.learning_starts, 0),
        ("--batch-size", args.batch_size, 1),
        ("--hidden-dim", args.hidden_dim, 1),
        ("--checkpoint-every", args.checkpoint_every, 1),
        ("--stop-at", args.stop_at, 1),
    ]:
        check_int(problems, flag, value, minimum)
    check_int(problems, "--seed", args.seed, 0, below=2**32)  # torch.manual_seed's range
    check_float(problems, "--learning-rate", args.learning_rate, 0.0, low_open=True)
    check_float(problems, "--gamma", args.gamma, 0.0, 1.0)
    check_float(problems, "--tau", args.tau, 0.0, 1.0, low_open=True)
    path = output_path(args)
    check_output_path(problems, path, "--out" if args.out else "--data-dir/--name")
    check_overwrite(problems, path, "--out" if args.out else "--data-dir/--name", args.overwrite)
    ckpt_path = path.with_name(path.name + ".ckpt.pt")
    if args.task == "halfcheetah-jump" and ckpt_path.exists() and not args.resume:
        problems.append(f"{ckpt_path} exists: pass --resume to continue it, or delete it")
    if args.task == "halfcheetah-jump-hard" and args.stop_at is not None:  # it would be ignored: no checkpoints
        problems.append("--stop-at stops the SAC of --task halfcheetah-jump; the random collection runs to the end")
    return problems


def output_path(args: Args) -> Path:
    return dataset_path(args.name or args.task, args.data_dir, args.out)


def main(args: Args) -> None:
    start = time.perf_counter()
    path = output_path(args)
    ckpt_path = path.with_name(path.name + ".ckpt.pt")
    path.parent.mkdir(parents=True, exist_ok=True)  # the first checkpoint is written long before the dataset
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
