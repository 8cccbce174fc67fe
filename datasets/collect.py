"""Collect an offline dataset in the D4RL HDF5 layout by running a fixed policy in a
Gymnasium MuJoCo env (the D4RL recipe: one long stream of episodes, 1000-step limit).

    python datasets/collect.py --env Hopper-v4 --policy random --steps 1000000
    python datasets/collect.py --env Hopper-v4 --policy runs/hopper/policy.pt --name local/hopper-mine
    python datasets/collect.py --env Hopper-v4 --policy runs/sac-hopper-s0/policy-medium.pt --stochastic \\
        --name local/hopper-medium     # D4RL's medium recipe (datasets/sac.py saves the policy)

The file goes to `<data_dir>/<name>.hdf5` (data_dir: --data-dir, else $D4RL_DATASET_DIR,
else ~/.d4rl/datasets), or to --out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common import (
    behavior_attrs,
    check_box_env,
    check_int,
    check_memory,
    check_output_path,
    check_overwrite,
    collect_rollouts,
    dataset_path,
    env_slug,
    load_torch_file,
    run_cli,
    uniform_policy,
    write_dataset,
)


@dataclass
class Args:
    env: str = "Hopper-v4"
    """Gymnasium env id"""
    policy: str = "random"
    """"random", or the path of a saved policy file (see `load_policy`)"""
    steps: int = 1_000_000
    """number of transitions to collect"""
    seed: int = 0
    """seeds the env resets and the random policy"""
    name: str | None = None
    """dataset name; default local/<env>-<policy tag>, e.g. local/hopper-random"""
    data_dir: str | None = None
    """overrides $D4RL_DATASET_DIR / ~/.d4rl/datasets"""
    out: str | None = None
    """write to this exact path instead of <data_dir>/<name>.hdf5"""
    stochastic: bool = False
    """sample a SAC policy's actions from its tanh-Gaussian (as D4RL's medium data) instead of tanh(mean)"""
    overwrite: bool = False
    """replace an existing dataset at the output path (never the policy file)"""


POLICY_KEYS = ("max_action", "obs_mean", "obs_std", "state_dict")


def load_policy(path: str, obs_dim: int, act_dim: int, device: str = "cpu", stochastic_seed: int | None = None):
    """Load a policy.pt saved by any algorithm here (`export_policy`) and return `policy(obs_batch)`.

    The file is a `torch.save`d dict
        {"kind": "deterministic_mlp" | "tanh_gaussian_mlp", "max_action": float, "obs_mean": tensor,
         "obs_std": tensor, "state_dict": ...}
    whose net is Linear-ReLU-...-Linear on (obs - obs_mean) / obs_std, its sizes those of the state dict's weights
    (older files' obs_dim, act_dim and hidden_dims keys are not read). A TD3+BC actor's output is squashed by
    tanh * max_action; a SAC actor outputs (mean, log_std) and acts deterministically with tanh(mean) * max_action,
    or, given `stochastic_seed`, samples tanh(mean + exp(log_std) * noise) * max_action with log_std clamped to
    [-5, 2] (the algorithm files' and datasets/sac.py's actor), the noise drawn from a generator seeded with it.
    """
    ckpt = load_torch_file(path, "policy file", "pass a policy.pt saved by an algorithm here")
    kinds = ("deterministic_mlp", "tanh_gaussian_mlp")
    if not isinstance(ckpt, dict) or ckpt.get("kind") not in kinds:
        kind = ckpt.get("kind") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"{path}: unsupported policy kind {kind!r}; pass a policy.pt saved by an algorithm here")
    missing = [k for k in POLICY_KEYS if k not in ckpt]
    if missing:
        raise ValueError(
            f"{path}: the policy file lacks {', '.join(missing)}; pass a policy.pt saved by an algorithm here"
        )
    outputs = 2 if ckpt["kind"] == "tanh_gaussian_mlp" else 1  # SAC's net: mean and log-std
    try:  # the Linear layers' weights, in order, each [out, in]
        weights = [v for k, v in ckpt["state_dict"].items() if k.endswith("weight")]
        dims = [weights[0].shape[1], *(w.shape[0] for w in weights)]
    except (AttributeError, IndexError, TypeError) as e:
        raise ValueError(f"{path}: the policy file's state_dict holds no Linear weights ({e}); pass a policy.pt saved "
                         "by an algorithm here") from None  # fmt: skip
    if (dims[0], dims[-1] / outputs) != (obs_dim, act_dim):
        raise ValueError(
            f"{path}: policy is for obs/act dims {dims[0]}/{dims[-1] / outputs:g}, env has {obs_dim}/{act_dim}"
        )
    try:
        layers = []
        for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            layers += [nn.Linear(d_in, d_out)] + ([nn.ReLU()] if i < len(dims) - 2 else [])
        net = nn.Sequential(*layers).to(device)
        net.load_state_dict(ckpt["state_dict"])
        mean, std = ckpt["obs_mean"].float().to(device), ckpt["obs_std"].float().to(device)
        if mean.shape != (obs_dim,) or std.shape != (obs_dim,):
            raise ValueError(f"obs_mean/obs_std have shapes {tuple(mean.shape)}/{tuple(std.shape)}, not ({obs_dim},)")
        max_action = float(ckpt["max_action"])
    except (RuntimeError, ValueError, TypeError, AttributeError) as e:
        raise ValueError(
            f"{path}: the policy file's weights do not match the net it describes "
            f"({' '.join(str(e).split())[:240]}); pass a policy.pt saved by an algorithm here"
        ) from None
    values = {f"state_dict[{k!r}]": v for k, v in net.state_dict().items()}
    values |= {"obs_mean": mean, "obs_std": std, "max_action": torch.tensor(max_action)}
    bad = [k for k, v in values.items() if not torch.isfinite(v).all()]
    if bad:  # its actions would be NaN: a dataset of them is no dataset
        raise ValueError(
            f"{path}: the policy file holds NaN or infinite values ({', '.join(bad)}); pass a finite policy"
        )
    net.eval()
    if stochastic_seed is not None and ckpt["kind"] != "tanh_gaussian_mlp":
        raise ValueError(f"{path}: a {ckpt['kind']} policy has no action distribution; leave out --stochastic")
    generator = torch.Generator(device).manual_seed(stochastic_seed) if stochastic_seed is not None else None

    @torch.no_grad()
    def policy(obs_batch: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(obs_batch, dtype=torch.float32, device=device)
        out = net((obs - mean) / std)
        pre_tanh = out[:, :act_dim]
        if generator is not None:
            log_std = out[:, act_dim:].clamp(-5.0, 2.0)
            pre_tanh = pre_tanh + log_std.exp() * torch.randn(pre_tanh.shape, generator=generator, device=device)
        return (torch.tanh(pre_tanh) * max_action).cpu().numpy()

    return policy


def policy_tag(policy: str) -> str:
    """Short name of the policy for default dataset names. Saved policies are usually all
    called policy.pt, so then the run directory's name is more telling."""
    if policy == "random":
        return "random"
    p = Path(policy)
    if p.stem.startswith("policy-"):  # datasets/sac.py's snapshots: policy-medium.pt -> medium
        return p.stem.removeprefix("policy-")
    return p.parent.name if p.stem == "policy" and p.parent.name else p.stem


def output_path(args: Args) -> tuple[str, Path]:
    name = args.name or f"local/{env_slug(args.env)}-{policy_tag(args.policy)}"
    return name, dataset_path(name, args.data_dir, args.out)


def check_flags(args: Args) -> list[str]:
    """Every problem with the flags, found before any work (one line each)."""
    problems: list[str] = []
    check_int(problems, "--steps", args.steps, 1)
    check_int(problems, "--seed", args.seed, 0)
    flag = "--out" if args.out else "--data-dir/--name"
    check_output_path(problems, output_path(args)[1], flag)
    check_overwrite(problems, output_path(args)[1], flag, args.overwrite, [args.policy] * (args.policy != "random"))
    if args.stochastic and args.policy == "random":
        problems.append("--stochastic needs a saved SAC policy (--policy PATH); the random policy is already random")
    if args.policy != "random" and not Path(args.policy).is_file():
        problems.append(
            f"--policy {args.policy}: no such file; pass 'random' or a policy.pt saved by an algorithm here"
        )
    return problems


def main(args: Args) -> None:
    start = time.perf_counter()
    env = gym.make(args.env)
    obs_dim, act_dim = check_box_env(env, args.env)
    check_memory(args.steps, obs_dim, act_dim)
    if args.policy == "random":
        policy = uniform_policy(env.action_space, args.seed)
    else:
        policy = load_policy(args.policy, obs_dim, act_dim, stochastic_seed=args.seed if args.stochastic else None)

    name, path = output_path(args)
    data = collect_rollouts(env, policy, args.steps, args.seed, desc=name)
    env.close()
    # Was the last episode cut by the end of the collection (then it is left out of the behaviour's mean return)?
    ends = np.flatnonzero(data["terminals"][:-1] | data["timeouts"][:-1])
    last_length = args.steps - (ends[-1] + 1 if len(ends) else 0)
    last_cut = not data["terminals"][-1] and last_length != env.spec.max_episode_steps
    behavior = behavior_attrs(args.env, data, last_cut)

    write_dataset(
        path,
        data,
        env_id=args.env,
        reward_fn="env",
        policy="random" if args.policy == "random" else os.path.abspath(args.policy),
        seed=args.seed,
        created_by=Path(__file__).name,
        extra_attrs=behavior | {"stochastic": args.stochastic},
    )
    wall = time.perf_counter() - start
    score = (
        f", D4RL score {behavior['behavior_normalized_score']:.1f}" if "behavior_normalized_score" in behavior else ""
    )
    print(f"{behavior['behavior_episodes']} whole episodes, mean return {behavior['behavior_mean_return']:.1f}{score}")
    print(f"wall time {wall:.1f} s ({args.steps / wall:.0f} steps/s)")
    print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main, Args, check_flags)
