# TD3+BC: A Minimalist Approach to Offline Reinforcement Learning (Fujimoto & Gu, NeurIPS 2021), a baseline of ORPO
# (Zhai et al., AAAI 2024), model-free, as CORL's td3_bc.py and the authors' code:
#   1. standardise states with D's mean and std + 1e-3;
#   2. train TD3 on the offline dataset D alone, with a behaviour-cloning term in the actor loss:
#      −α/mean|Q|·Q(s, π(s)) + (π(s) − a)², α = 2.5; target policy smoothing, delayed actor and target updates.
# It is also ORPO's output-policy optimiser (orpo.py), which trains it on D ∪ model rollouts instead.
# Usage: python algorithms/td3bc.py --env hopper-medium-v2
from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))] if __package__ else []  # python -m algorithms.td3bc
try:
    from plumbing import Run, RunArgs, check_memory, cli, gradient_steps
except ImportError as e:  # this file's run plumbing: copy both files
    sys.exit(f"error: {e}; copy this project's algorithms/plumbing.py beside {os.path.basename(__file__)}")


@dataclass
class Args(RunArgs):  # the data and run flags (--env, --seed, --runs-dir, ...) are plumbing.RunArgs'
    # TD3+BC
    hidden_dims: tuple[int, ...] = field(default=(256, 256), metadata={"range": "[1, inf)"})
    """hidden layer sizes of the actor and critics (the TD3+BC paper, CORL)"""
    actor_lr: float = field(default=3e-4, metadata={"range": "(0, inf)"})
    """TD3+BC actor learning rate"""
    critic_lr: float = field(default=3e-4, metadata={"range": "(0, inf)"})
    """TD3+BC critic learning rate"""
    gamma: float = field(default=0.99, metadata={"range": "[0, 1]"})
    """discount factor γ"""
    tau: float = field(default=0.005, metadata={"range": "[0, 1]"})
    """target network smoothing coefficient"""
    alpha: float = field(default=2.5, metadata={"range": "[0, inf)"})
    """TD3+BC's α: the actor loss is −α/mean|Q|·Q + (π(s) − a)²"""
    policy_noise: float = field(default=0.2, metadata={"range": "[0, inf)"})
    """TD3 target policy smoothing noise"""
    noise_clip: float = field(default=0.5, metadata={"range": "[0, inf)"})
    """range of the target policy smoothing noise"""
    policy_freq: int = field(default=2, metadata={"range": "[1, inf)"})
    """TD3 delayed updates: actor and targets every this many critic updates"""
    normalize_obs: bool = True
    """standardise policy inputs with D's mean and std + 1e-3 (on by default, as TD3+BC and CORL)"""

    # Training loop
    steps_per_epoch: int = field(default=1000, metadata={"range": "[1, inf)"})
    """gradient steps per epoch"""
    batch_size: int = field(default=256, metadata={"range": "[1, inf)"})
    """batch size of every policy update"""
    eval_every: int = field(default=1, metadata={"range": "[1, inf)"})
    """evaluate every this many epochs (and after the last)"""


# --- shared: layers ---
class EnsembleLinear(nn.Module):
    """E independent linear layers applied as one batched matmul: x [E, B, in] -> [E, B, out]."""

    def __init__(self, in_features: int, out_features: int, ensemble_size: int):
        super().__init__()
        bound = 1 / np.sqrt(in_features)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)  # x @ W + b in one kernel


def adam(params, lr: float) -> torch.optim.Adam:
    """Every network's optimiser; fused: one kernel for all tensors instead of ~10 per tensor."""
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

    @classmethod
    def of(cls, obs: torch.Tensor, normalize: bool) -> ObsNorm:
        """D's mean and std + 1e-3 (TD3+BC's standardisation), or the identity."""
        if not normalize:
            return cls(torch.zeros_like(obs[0]), torch.ones_like(obs[0]))
        return cls(obs.mean(0), obs.std(0) + 1e-3)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


class TwinCritic(nn.Module):
    """Both Q networks as one batched ensemble of 2 (one matmul per layer for both): Q(s, a) -> [2, B]."""

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
    """TD3 with a behaviour-cloning term (Fujimoto & Gu 2021): actor loss −λ·Q(s, π(s)) + (π(s) − a)², λ = α/mean|Q|."""

    def __init__(self, obs_norm: ObsNorm, act_dim: int, max_action: float, hidden_dims: tuple[int, ...],
                 actor_lr: float, critic_lr: float, gamma: float, tau: float, alpha: float, policy_noise: float,
                 noise_clip: float, policy_freq: int):  # fmt: skip
        super().__init__()
        obs_dim = len(obs_norm.mean)
        self.actor = DeterministicActor(obs_norm, obs_dim, act_dim, hidden_dims, max_action)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = TwinCritic(obs_norm, obs_dim, act_dim, hidden_dims)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optim = adam(self.actor.parameters(), actor_lr)
        self.critic_optim = adam(self.critic.parameters(), critic_lr)
        self.max_action, self.gamma, self.tau, self.alpha = max_action, gamma, tau, alpha
        self.policy_noise = policy_noise * max_action  # TD3's noise is relative to the action bound
        self.noise_clip = noise_clip * max_action
        self.policy_freq, self.total_it = policy_freq, 0

    @torch.no_grad()
    def act(self, obs: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        action = self.actor(obs)
        if noise > 0:
            action = action + noise * self.max_action * torch.randn_like(action)
        return action.clamp(-self.max_action, self.max_action)

    def update(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.total_it += 1
        with torch.no_grad():
            noise = (torch.randn_like(b["act"]) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
            next_act = (self.actor_target(b["next_obs"]) + noise).clamp(-self.max_action, self.max_action)
            next_q = self.critic_target(b["next_obs"], next_act).min(0).values
            target_q = b["rew"] + self.gamma * (1 - b["done"]) * next_q
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
            actor_loss.backward(inputs=list(self.actor.parameters()))  # no gradients for the critic's weights
            self.actor_optim.step()
            soft_update(self.critic_target, self.critic, self.tau)
            soft_update(self.actor_target, self.actor, self.tau)
            stats.update(actor_loss=actor_loss.detach(), bc_loss=bc_loss.detach())
        return stats

    def get_extra_state(self) -> dict:  # optimisers and the delay counter travel with the state dict (checkpoints)
        return {"total_it": self.total_it, "actor_optim": self.actor_optim.state_dict(),
                "critic_optim": self.critic_optim.state_dict()}  # fmt: skip

    def set_extra_state(self, state: dict) -> None:
        self.total_it = state["total_it"]
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])


# --- end ---


# --- shared: buffers ---
class ReplayBuffer:
    """A FIFO ring buffer of preallocated tensors on the device."""

    def __init__(self, capacity: int, fields: dict[str, int], device: torch.device):
        check_memory(4 * capacity * sum(fields.values()), f"a buffer of {capacity:,} rows", device)
        self.data = {k: torch.zeros((capacity, dim), device=device) for k, dim in fields.items()}
        self.capacity, self.device = capacity, device
        self.ptr, self.size = 0, 0  # where the next row goes, rows filled so far

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
        idx = torch.randint(self.size, (n,), device=self.device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict:
        return {"ptr": self.ptr, "size": self.size, "data": {k: v[: self.size].cpu() for k, v in self.data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.ptr, self.size = state["ptr"], state["size"]
        for k, v in state["data"].items():
            self.data[k][: self.size] = v.to(self.device)


# --- end ---


def main(args: Args) -> dict:
    run = Run(args)  # flags checked, dataset resolved, seeded; the run directory
    device = run.device  # run.args is args, resumed or filled in by the presets
    data, max_action = run.load_data()  # D as tensors on the device, checked against the evaluation env
    check_memory(128 * args.batch_size * data["obs"].shape[1], f"--batch-size {args.batch_size}", device)  # a batch
    real = ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
    real.add(data)

    td3 = dict(hidden_dims=args.hidden_dims, actor_lr=args.actor_lr, critic_lr=args.critic_lr, gamma=args.gamma,
               tau=args.tau, alpha=args.alpha, policy_noise=args.policy_noise, noise_clip=args.noise_clip,
               policy_freq=args.policy_freq)  # fmt: skip
    policy = TD3BC(ObsNorm.of(data["obs"], args.normalize_obs), data["act"].shape[1], max_action, **td3).to(device)

    def gradient_step() -> dict[str, dict[str, torch.Tensor]]:  # one TD3+BC update on D alone: no model, no rollouts
        b = real.sample(args.batch_size)
        return {"losses": policy.update(b | {"rew": b["rew"][:, 0], "done": b["done"][:, 0]})}

    run.start({"policy": policy})  # resumes from the checkpoint, if any

    for epoch in run.epochs():
        gradient_steps(gradient_step, args.steps_per_epoch, run, [policy], args.policy_freq)

        metrics = run.means()
        if run.nonfinite is None and (epoch % args.eval_every == 0 or epoch == args.epochs):
            metrics |= run.evaluate(policy.actor)  # the policy in the real env (D4RL score)
        run.log(metrics)  # metrics.csv, TensorBoard; a NaN loss or weight ends the run here, before a checkpoint
        if run.checkpoint_due():  # every --checkpoint-every epochs, every --checkpoint-minutes, at the end, on a signal
            run.save_checkpoint()
    return run.finish(policy.actor)


if __name__ == "__main__":
    cli(main, Args)
