# TD3+BC: A Minimalist Approach to Offline Reinforcement Learning (Fujimoto & Gu, NeurIPS 2021), a baseline of ORPO
# (Zhai et al., AAAI 2024), model-free, as CORL's td3_bc.py and the authors' code:
#   1. standardise states with D's mean and std + 1e-3;
#   2. train TD3 on the offline dataset D alone, with a behaviour-cloning term in the actor loss:
#      −α/mean|Q|·Q(s, π(s)) + (π(s) − a)², α = 2.5; target policy smoothing, delayed actor and target updates.
# It is also ORPO's output-policy optimiser (orpo.py), which trains it on D ∪ model rollouts instead.
# Usage: python algorithms/td3bc.py --env hopper-medium-v2
from __future__ import annotations

import contextlib
import copy
import os
import sys
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))] if __package__ else []  # python -m algorithms.td3bc
try:
    from plumbing import (Count, NonNegative, Positive, RunArgs, Share, catch_signals, check_finite, cli, evaluate,
                          finish, load_data, log, make_eval_envs, open_run, resolve_task, restore, rng_state, save,
                          seed_everything)  # fmt: skip
except ImportError as e:  # this file's run plumbing: copy both files
    sys.exit(f"error: {e}; copy this project's algorithms/plumbing.py beside {os.path.basename(__file__)}")


@dataclass
class Args(RunArgs):  # the data and run flags (--env, --seed, --runs-dir, ...) are plumbing.RunArgs'
    # TD3+BC
    hidden_dims: tuple[Count, ...] = (256, 256)
    """hidden layer sizes of the actor and critics (the TD3+BC paper, CORL)"""
    actor_lr: Positive = 3e-4
    """TD3+BC actor learning rate"""
    critic_lr: Positive = 3e-4
    """TD3+BC critic learning rate"""
    gamma: Share = 0.99
    """discount factor γ"""
    tau: Share = 0.005
    """target network smoothing coefficient"""
    alpha: NonNegative = 2.5
    """TD3+BC's α: the actor loss is −α/mean|Q|·Q + (π(s) − a)²"""
    policy_noise: NonNegative = 0.2
    """TD3 target policy smoothing noise"""
    noise_clip: NonNegative = 0.5
    """range of the target policy smoothing noise"""
    policy_freq: Count = 2
    """TD3 delayed updates: actor and targets every this many critic updates"""
    normalize_obs: bool = True
    """standardise policy inputs with D's mean and std + 1e-3 (on by default, as TD3+BC and CORL)"""

    # Training loop
    steps_per_epoch: Count = 1000
    """gradient steps per epoch"""
    batch_size: Count = 256
    """batch size of every policy update"""
    eval_every: Count = 1
    """evaluate every this many epochs (and after the last)"""


# --- shared: layers ---
class EnsembleLinear(nn.Module):
    """E independent linear layers applied as one batched matmul: x [E, B, in] -> [E, B, out]."""

    def __init__(self, in_features, out_features, ensemble_size):
        super().__init__()
        bound = 1 / np.sqrt(in_features)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features).uniform_(-bound, bound))

    def forward(self, x):
        return torch.baddbmm(self.bias, x, self.weight)  # x @ W + b in one kernel


def adam(params, lr):
    """Every network's optimiser; fused: one kernel for all tensors instead of ~10 per tensor."""
    return torch.optim.Adam(params, lr=lr, fused=True)


def optimize(optimizer, loss, inputs=None):
    """One gradient step on `loss` (its gradients only into `inputs` where given)."""
    optimizer.zero_grad()
    loss.backward(inputs=inputs)
    optimizer.step()


def ensemble_layers(dims, n):
    """Linear layers dims[0] -> ... -> dims[-1], each of `n` independent members (the caller's activations between)."""
    return nn.ModuleList(EnsembleLinear(i, o, n) for i, o in zip(dims[:-1], dims[1:]))


def mlp(in_dim, hidden_dims, out_dim):
    layers, dims = [], [in_dim, *hidden_dims]
    for i, o in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(dims[-1], out_dim))


# --- end ---


# --- shared: agents ---
class ObsNorm(nn.Module):
    """Standardises observations inside the network, so the env, the model and the buffers stay raw."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())

    @classmethod
    def of(cls, obs, normalize):
        """D's mean and std + 1e-3 (TD3+BC's standardisation), or the identity."""
        if not normalize:
            return cls(torch.zeros_like(obs[0]), torch.ones_like(obs[0]))
        return cls(obs.mean(0), obs.std(0) + 1e-3)

    def forward(self, obs):
        return (obs - self.mean) / self.std


class TwinCritic(nn.Module):
    """Both Q networks as one batched ensemble of 2 (one matmul per layer for both): Q(s, a) -> [2, B]."""

    def __init__(self, obs_norm, obs_dim, act_dim, hidden_dims):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        dims = [obs_dim + act_dim, *hidden_dims, 1]
        self.layers = ensemble_layers(dims, 2)

    def forward(self, obs, act):
        x = torch.cat([self.obs_norm(obs), act], dim=-1).expand(2, -1, -1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x).squeeze(-1)


def soft_update(target, source, tau):
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.lerp_(s, tau)  # t ← t + τ·(s − t)


class Agent(nn.Module):
    """An actor-critic whose optimisers (its attributes of that type) travel with its state dict: checkpoints."""

    def get_extra_state(self):
        return {k: v.state_dict() for k, v in vars(self).items() if isinstance(v, torch.optim.Optimizer)}

    def set_extra_state(self, state):
        for k, v in state.items():
            getattr(self, k).load_state_dict(v)


# --- end ---


# --- shared: td3bc ---
class DeterministicActor(nn.Module):
    kind = "deterministic_mlp"  # the format name of an exported policy.pt

    def __init__(self, obs_norm, obs_dim, act_dim, hidden_dims, max_action):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        self.net = mlp(obs_dim, hidden_dims, act_dim)
        self.max_action = max_action

    def forward(self, obs):
        return torch.tanh(self.net(self.obs_norm(obs))) * self.max_action


class TD3BC(Agent):
    """TD3 with a behaviour-cloning term (Fujimoto & Gu 2021): actor loss −λ·Q(s, π(s)) + (π(s) − a)², λ = α/mean|Q|."""

    def __init__(
        self,
        obs_norm,
        act_dim,
        max_action,
        hidden_dims,
        actor_lr,
        critic_lr,
        gamma,
        tau,
        alpha,
        policy_noise,
        noise_clip,
    ):
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

    @torch.no_grad()
    def act(self, obs, noise=0.0):
        action = self.actor(obs)
        if noise > 0:
            action = action + noise * self.max_action * torch.randn_like(action)
        return action.clamp(-self.max_action, self.max_action)

    def update(self, b, actor_step):
        """A critic step; with `actor_step` (every policy_freq-th step: TD3's delayed updates) the actor's and the
        targets' too."""
        with torch.no_grad():
            noise = (torch.randn_like(b["act"]) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
            next_act = (self.actor_target(b["next_obs"]) + noise).clamp(-self.max_action, self.max_action)
            next_q = self.critic_target(b["next_obs"], next_act).min(0).values
            target_q = b["rew"] + self.gamma * (1 - b["done"]) * next_q
        q = self.critic(b["obs"], b["act"])
        critic_loss = (q - target_q).pow(2).mean(1).sum()
        optimize(self.critic_optim, critic_loss)
        stats = {"critic_loss": critic_loss.detach(), "q": q.detach().mean()}

        if actor_step:
            pi = self.actor(b["obs"])
            q_pi = self.critic(b["obs"], pi)[0]
            lmbda = self.alpha / q_pi.abs().mean().detach()
            bc_loss = F.mse_loss(pi, b["act"])
            actor_loss = -lmbda * q_pi.mean() + bc_loss
            # no gradients for the critic's weights
            optimize(self.actor_optim, actor_loss, list(self.actor.parameters()))
            soft_update(self.critic_target, self.critic, self.tau)
            soft_update(self.actor_target, self.actor, self.tau)
            stats.update(actor_loss=actor_loss.detach(), bc_loss=bc_loss.detach())
        return stats


# --- end ---


# --- shared: buffers ---
class ReplayBuffer:
    """A FIFO ring buffer of preallocated tensors on the device."""

    def __init__(self, capacity, fields, device):
        self.data = {k: torch.zeros((capacity, dim), device=device) for k, dim in fields.items()}
        self.capacity, self.device = capacity, device
        self.ptr, self.size = 0, 0  # where the next row goes, rows filled so far

    def add(self, batch):
        n = len(next(iter(batch.values())))
        if n == 0:  # e.g. a rollout whose every row was non-finite
            return
        skip = max(0, n - self.capacity)  # a batch larger than the buffer keeps its newest rows
        idx = (self.ptr + torch.arange(skip, n, device=self.device)) % self.capacity
        for k, v in self.data.items():
            v[idx] = batch[k][skip:].reshape(n - skip, -1).to(v.dtype)
        self.ptr, self.size = (self.ptr + n) % self.capacity, min(self.size + n, self.capacity)

    def sample(self, n):
        idx = torch.randint(self.size, (n,), device=self.device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self):
        return {"ptr": self.ptr, "size": self.size, "data": {k: v[: self.size].cpu() for k, v in self.data.items()}}

    def load_state_dict(self, state):
        self.ptr, self.size = state["ptr"], state["size"]
        for k, v in state["data"].items():
            self.data[k][: self.size] = v.to(self.device)


# --- end ---


# --- shared: steps ---
def gradient_steps(step, first, n, period, graphs, policies):
    """Gradient steps first+1 .. first+n: `step(actor_step)` updates every policy once, its actor on every `period`-th
    step (TD3's delayed actor), and returns its statistics; their means come back (the epoch's one host sync). With
    `graphs`, after warm-up steps on a side stream, the step with (and, for period > 1, the step without) the actor is
    captured as a CUDA graph and replayed (made anew each call: the buffers' sizes are baked into their sampling)."""
    sums, counts, kinds = {}, {}, {a: partial(step, a) for a in {period == 1, True}}  # period 1: always the actor
    warmup, side = max(3, period), torch.cuda.Stream() if graphs else None
    if graphs:
        side.wait_stream(torch.cuda.current_stream())  # the epoch's rollouts are in the buffers first
    for i in range(n):
        if graphs and i == warmup:
            kinds = {a: cuda_graph(f, policies) for a, f in kinds.items()}
        with torch.cuda.stream(side) if graphs and i < warmup else contextlib.nullcontext():
            out = kinds[(first + i + 1) % period == 0]()
        if graphs and i == min(n, warmup) - 1:
            torch.cuda.current_stream().wait_stream(side)  # the warm-up's updates come before what follows
        for k, v in out.items():  # summed as tensors: no host sync in the loop
            sums[k], counts[k] = sums.get(k, 0) + v, counts.get(k, 0) + 1
    return {k: float(v) / counts[k] for k, v in sums.items()}


def cuda_graph(step, policies):
    """`step` captured as one CUDA graph (recorded, not run): a call replays it and returns its refilled outputs."""
    groups = [g for p in policies for o in vars(p).values() if isinstance(o, torch.optim.Optimizer) for g in o.param_groups]  # fmt: skip
    for g in groups:
        g["capturable"] = True  # Adam's step counts stay on the device
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for g in groups:
        g["capturable"] = False  # checkpoints stay loadable on a CPU
    return lambda: [graph.replay(), out][1]


# --- end ---


def main(args: Args) -> dict:
    # the dataset, seeds; D on the device, checked against the evaluation env
    task, path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)
    args.exp_name = args.exp_name or "td3bc"
    device = seed_everything(args)
    envs = make_eval_envs(task, args.eval_episodes)
    data, max_action = load_data(task, path, envs, device)
    real = ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
    real.add(data)
    td3 = dict(hidden_dims=args.hidden_dims, actor_lr=args.actor_lr, critic_lr=args.critic_lr, gamma=args.gamma,
               tau=args.tau, alpha=args.alpha, policy_noise=args.policy_noise, noise_clip=args.noise_clip)  # fmt: skip
    policy = TD3BC(ObsNorm.of(data["obs"], args.normalize_obs), data["act"].shape[1], max_action, **td3).to(device)
    with torch.random.fork_rng():  # a batch that cannot fit fails now
        real.sample(args.batch_size)
    run_dir, ckpt, writer = open_run(args, task, "none", len(data["obs"]))  # the run directory; --resume's checkpoint

    def gradient_step(actor_step):  # one TD3+BC update on D alone: no model, no rollouts
        b = real.sample(args.batch_size)
        b |= {"rew": b["rew"][:, 0], "done": b["done"][:, 0]}
        return {f"losses/{k}": v for k, v in policy.update(b, actor_step).items()}

    rows, ckpt_path = ckpt["rows"], os.path.join(run_dir, "checkpoint.pt")  # metrics.csv's rows so far
    if ckpt["epoch"]:  # --resume: the policy, RNG states, epoch and metrics rows of the checkpoint
        restore({"policy": policy}, ckpt, ckpt_path)
    graphs = args.cuda_graphs and device.type == "cuda"
    done = ckpt["epoch"]  # epochs done
    last = min(args.epochs, done + (args.stop_after_epochs or args.epochs))
    stop = catch_signals(defer=True)  # a signal: the loop ends after its epoch, with a checkpoint
    t_start = time.time()  # the loop's clock, reset at each checkpoint: wall_seconds and --checkpoint-minutes

    for epoch in (bar := tqdm(range(done + 1, last + 1), f"{args.exp_name} {task.name}", args.epochs, initial=done)):
        t0 = time.time()
        first = (epoch - 1) * args.steps_per_epoch
        metrics = gradient_steps(gradient_step, first, args.steps_per_epoch, args.policy_freq, graphs, [policy])
        check_finite(metrics, {"policy": policy}, epoch)
        if epoch % args.eval_every == 0 or epoch == args.epochs:  # the policy in the real env (D4RL score)
            metrics |= (m := evaluate(policy.actor, envs, task, args.seed + 1000 * epoch, device, rows)[0])
            bar.set_postfix(score=f"{m.get('eval/normalized_score', m['eval/return']):.1f}")
        log(writer, rows, run_dir, epoch, metrics, t0, args.steps_per_epoch)  # metrics.csv, TensorBoard
        if (
            epoch % args.checkpoint_every == 0
            or epoch == last
            or stop
            or time.time() > t_start + 60 * args.checkpoint_minutes
        ):
            seconds = ckpt["seconds"] + time.time() - t_start
            ckpt = {"epoch": epoch, "rows": rows, "seconds": seconds, "rng": rng_state(), "policy": policy.state_dict()}
            save(ckpt, ckpt_path)
            t_start = time.time()
        if stop:
            break
    bar.close()  # the lines after the loop start their own
    envs.close()
    writer.close()
    return finish(run_dir, args, task, rows, stop, ckpt["seconds"] + time.time() - t_start, "none", policy.actor)


if __name__ == "__main__":
    cli(main, Args)
