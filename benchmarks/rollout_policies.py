"""RQ2's rollout policies (the paper's rollout figure, on halfcheetah-random-v2 and walker2d-medium-replay-v2): ORPO
with π^o taking uniform random actions, sampling a conditional VAE of D's actions (BCQ's), or the trained π^o of an
earlier ORPO run kept fixed; none of them is updated during the run.

algorithms/orpo.py holds ORPO itself (π^o trained, or `untrained` as the authors' code ran it); this runs orpo.py's
`main` through the lab's launcher (benchmarks/launch.py: its records, run.lock and resumable fit) with
`orpo.make_rollout_policy` extended to these kinds. Every other flag is orpo.py's, with its presets.

    python benchmarks/rollout_policies.py --env halfcheetah-random-v2 --rollout-policy cvae --seed 1
    python benchmarks/rollout_policies.py --resume RUN_DIR
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass
from functools import partial
from typing import Literal, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

import launch  # noqa: E402  (toolbox, which it imports first, puts algorithms/ on the path: plumbing)
import toolbox  # noqa: E402
from plumbing import Natural, Path, load, restore, unused  # noqa: E402

orpo = toolbox.algorithm("orpo")


@dataclass
class Args(orpo.Args):
    rollout_policy: Literal["random", "cvae", "fixed"] = "random"
    """π^o, never updated: uniform random actions, a conditional VAE of D's actions fitted at the start
    (--cvae-steps), or the trained π^o of an earlier ORPO run (--rollout-policy-path)"""
    rollout_policy_path: Optional[Path] = None
    """for `--rollout-policy fixed`: an earlier ORPO run directory (or its checkpoint.pt) whose π^o is used"""
    cvae_steps: Natural = 20000
    """for `--rollout-policy cvae`: gradient steps of the conditional VAE, trained on D at the start"""

    def problems(self):  # orpo.Args' rules are checked too
        rules = unused(self, "cvae_steps", "only --rollout-policy cvae fits a CVAE") * (self.rollout_policy != "cvae")
        if (self.rollout_policy == "fixed") == (self.rollout_policy_path is None):
            rules.append("--rollout-policy fixed and --rollout-policy-path RUN_DIR (an earlier ORPO run) go together")
        return rules


class CVAE(nn.Module):
    """A conditional VAE of D's actions (BCQ / CABI): a rollout policy that stays within the data's support."""

    def __init__(self, obs_norm, act_dim, hidden_dims, max_action):
        super().__init__()
        obs_dim = len(obs_norm.mean)
        self.obs_norm = copy.deepcopy(obs_norm)
        self.latent_dim = 2 * act_dim
        self.max_action = max_action
        self.encoder = orpo.mlp(obs_dim + act_dim, hidden_dims, 2 * self.latent_dim)
        self.decoder = orpo.mlp(obs_dim + self.latent_dim, hidden_dims, act_dim)

    def decode(self, obs, z):
        return torch.tanh(self.decoder(torch.cat([self.obs_norm(obs), z], dim=-1))) * self.max_action

    def loss(self, obs, act):
        mu, log_std = self.encoder(torch.cat([self.obs_norm(obs), act], dim=-1)).chunk(2, dim=-1)
        log_std = log_std.clamp(-4, 15)
        recon = self.decode(obs, mu + log_std.exp() * torch.randn_like(mu))
        kl = -0.5 * (1 + 2 * log_std - mu.pow(2) - (2 * log_std).exp()).mean()
        return F.mse_loss(recon, act) + 0.5 * kl  # BCQ's weighting

    @torch.no_grad()
    def act(self, obs):  # BCQ's clipped prior keeps samples near the data
        return self.decode(obs, torch.randn(len(obs), self.latent_dim, device=obs.device).clamp(-0.5, 0.5))


def checkpoint_of(path):
    return os.path.join(path, "checkpoint.pt") if os.path.isdir(path) else path


def load_fixed(args, rollout_policy):
    """--rollout-policy-path's π^o (an earlier ORPO run's checkpoint's rollout_policy) into `rollout_policy`; a file of
    other sizes or another script is one line."""
    path = checkpoint_of(args.rollout_policy_path)
    saved = load(path, "ORPO checkpoint (--rollout-policy-path)", ("rollout_policy",))["rollout_policy"]
    restore({"rollout_policy": rollout_policy}, {"rollout_policy": saved}, path)


def make_rollout_policy(args, rollout_policy, real):
    """π^o's action function for --rollout-policy (orpo.py's hook, called once its SAC π^o exists): random actions in
    the action box, a CVAE fitted on D for --cvae-steps batches, or the SAC π^o loaded from --rollout-policy-path."""
    act_dim, max_action, device = real.data["act"].shape[1], rollout_policy.actor.max_action, real.device
    if args.rollout_policy == "random":
        return lambda obs: (torch.rand(len(obs), act_dim, device=device) * 2 - 1) * max_action
    if args.rollout_policy == "cvae":
        cvae = CVAE(rollout_policy.actor.obs_norm, act_dim, args.hidden_dims, max_action).to(device)
        optimizer = torch.optim.Adam(cvae.parameters(), lr=1e-3)
        for _ in tqdm(range(args.cvae_steps), desc="cvae", leave=False):
            batch = real.sample(args.batch_size)
            loss = cvae.loss(batch["obs"], batch["act"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return cvae.act
    load_fixed(args, rollout_policy)
    return rollout_policy.act


def main(args: Args) -> dict:
    args.exp_name = args.exp_name or f"orpo_{args.rollout_policy}"
    hooks = {"make_rollout_policy": make_rollout_policy, "load_data": partial(checked_load_data, orpo.load_data, args)}
    saved = {k: getattr(orpo, k) for k in hooks}
    vars(orpo).update(hooks)
    try:
        return orpo.main(args)
    finally:
        vars(orpo).update(saved)


def checked_load_data(real, args, task, path, envs, device):
    """orpo.py's data, then (--rollout-policy fixed) the earlier π^o loaded into a throwaway SAC of this data's sizes on a
    forked RNG: a file that is not an ORPO checkpoint, or one of other sizes, is refused before the fit."""
    data, max_action = real(task, path, envs, device)
    if args.rollout_policy == "fixed":
        sac = dict(hidden_dims=args.hidden_dims, actor_lr=args.sac_actor_lr, critic_lr=args.sac_critic_lr,
                   alpha_lr=args.sac_alpha_lr, gamma=args.gamma, tau=args.tau, target_entropy=args.target_entropy)  # fmt: skip
        with torch.random.fork_rng():
            norm = orpo.ObsNorm.of(data["obs"], args.normalize_obs)
            load_fixed(args, orpo.SAC(norm, data["act"].shape[1], max_action, **sac))
    return data, max_action


if __name__ == "__main__":
    launch.launch(orpo, main, Args, sys.argv, [os.path.relpath(__file__)])
