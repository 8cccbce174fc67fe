# CQL: Conservative Q-Learning for Offline Reinforcement Learning (Kumar et al., NeurIPS 2020), CQL(H) on SAC, a
# baseline of ORPO (Zhai et al., AAAI 2024), model-free, as the authors ran it (OfflineRL-Kit's CQLPolicy through their
# run_cql.py), laid out as CORL's single-file cql.py; the update runs in the Kit's order (CORL computes every loss
# with the actor before its step, the Kit samples the critics' actions from the actor after it):
#   1. sample a batch from the offline dataset D; update the SAC actor and its temperature α first;
#   2. update the twin critics on the TD error (deterministic backup: no entropy term in the target) plus the
#      conservative term w·(T·log Σ_a exp(Q(s, a)/T) − Q(s, a_D)): push Q down on actions the policy and a uniform
#      distribution propose (R of each, importance-weighted by their densities), up on D's actions;
#   3. soft-update the target critics.
# Usage: python algorithms/cql.py --env hopper-medium-v2
from __future__ import annotations

import contextlib
import copy
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))] if __package__ else []  # python -m algorithms.cql
try:
    from plumbing import (Count, NonNegative, Positive, RunArgs, Share, catch_signals, check_finite, cli, evaluate,
                          finish, load_data, log, make_eval_envs, open_run, resolve_task, restore, rng_state, save,
                          seed_everything, unused)  # fmt: skip
except ImportError as e:  # this file's run plumbing: copy both files
    sys.exit(f"error: {e}; copy this project's algorithms/plumbing.py beside {os.path.basename(__file__)}")


@dataclass
class Args(RunArgs):  # the data and run flags (--env, --seed, --runs-dir, ...) are plumbing.RunArgs'
    # CQL(H): the critics' conservative term. The authors' run_cql.py suggests cql_weight 5, temperature 1 for every
    # D4RL Gym task and sets nothing else for the jump tasks, so these defaults are every dataset's preset.
    cql_weight: NonNegative = 5.0
    """w, the conservative term's weight (β in the CQL paper)"""
    temperature: Positive = 1.0
    """T of the log-sum-exp, T·log Σ_a exp(Q(s, a)/T)"""
    num_repeat: Count = 10
    """R, actions sampled per state from each of π(·|s), π(·|s') and the uniform distribution"""
    deterministic_backup: bool = True
    """TD targets without SAC's entropy term (OfflineRL-Kit's default)"""
    lagrange_threshold: Optional[float] = None
    """τ of CQL's Lagrange form: the weight becomes w·α', α' ≥ 0 learned so that the term stays near τ (None: off,
    as the authors' runs)"""
    cql_alpha_lr: Positive = 3e-4
    """learning rate of α' (with --lagrange-threshold)"""
    paper_literal: bool = False
    """the CQL paper's estimator (CORL's): one log-sum-exp over all 3R sampled actions of a state; default
    OfflineRL-Kit's, which the authors ran: over the 3 values of each of the R rows (docs/cql.md)"""

    # SAC (OfflineRL-Kit's run_cql.py)
    hidden_dims: tuple[Count, ...] = (256, 256, 256)
    """hidden layer sizes of the actor and critics"""
    actor_lr: Positive = 1e-4
    """actor learning rate"""
    critic_lr: Positive = 3e-4
    """critic learning rate"""
    alpha_lr: Positive = 1e-4
    """entropy temperature learning rate"""
    gamma: Share = 0.99
    """discount factor γ"""
    tau: Share = 0.005
    """target network smoothing coefficient"""
    normalize_obs: bool = False
    """standardise policy inputs with D's mean and std + 1e-3 (off, as OfflineRL-Kit)"""
    target_entropy: Optional[float] = None
    """SAC target entropy (None: −|A|)"""

    # Training loop
    steps_per_epoch: Count = 1000
    """gradient steps per epoch"""
    batch_size: Count = 256
    """batch size of every policy update"""
    eval_every: Count = 1
    """evaluate every this many epochs (and after the last)"""

    def problems(self):  # flags that act only together, checked before any work (plumbing)
        lagrange = self.lagrange_threshold is None and unused(self, "cql_alpha_lr", "it acts with --lagrange-threshold")
        return lagrange or []


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


# --- shared: sac ---
class TanhGaussianActor(nn.Module):
    kind = "tanh_gaussian_mlp"  # the format name of an exported policy.pt

    def __init__(self, obs_norm, obs_dim, act_dim, hidden_dims, max_action):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        self.net = mlp(obs_dim, hidden_dims, 2 * act_dim)
        self.max_action = max_action

    def forward(self, obs, deterministic=False):
        mu, log_std = self.net(self.obs_norm(obs)).chunk(2, dim=-1)
        log_std = log_std.clamp(-5.0, 2.0)
        eps = torch.zeros_like(mu) if deterministic else torch.randn_like(mu)
        pre_tanh = mu + log_std.exp() * eps
        action = torch.tanh(pre_tanh)
        # log N(pre_tanh; mu, std) minus the log-det of a = max_action·tanh(pre_tanh)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        log_prob = log_prob - torch.log(self.max_action * (1 - action.pow(2)) + 1e-6).sum(-1)
        return action * self.max_action, log_prob


class SAC(Agent):
    """Soft actor-critic with twin critics and a learned temperature (OfflineRL-Kit's update order); target_entropy
    None is −|A|."""

    def __init__(
        self, obs_norm, act_dim, max_action, hidden_dims, actor_lr, critic_lr, alpha_lr, gamma, tau, target_entropy=None
    ):
        super().__init__()
        obs_dim = len(obs_norm.mean)
        self.actor = TanhGaussianActor(obs_norm, obs_dim, act_dim, hidden_dims, max_action)
        self.critic = TwinCritic(obs_norm, obs_dim, act_dim, hidden_dims)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.zeros(1))
        self.gamma, self.tau = gamma, tau
        self.target_entropy = -float(act_dim) if target_entropy is None else target_entropy
        self.actor_optim = adam(self.actor.parameters(), actor_lr)
        self.critic_optim = adam(self.critic.parameters(), critic_lr)
        self.alpha_optim = adam([self.log_alpha], alpha_lr)

    @torch.no_grad()
    def act(self, obs, deterministic=False):
        return self.actor(obs, deterministic)[0]

    def update(self, b):
        alpha = self.log_alpha.exp().clamp(max=1.0).detach()  # OfflineRL-Kit keeps α ≤ 1
        with torch.no_grad():
            next_act, next_log_prob = self.actor(b["next_obs"])
            next_q = self.critic_target(b["next_obs"], next_act).min(0).values - alpha * next_log_prob
            target_q = b["rew"] + self.gamma * (1 - b["done"]) * next_q
        q = self.critic(b["obs"], b["act"])
        critic_loss = (q - target_q).pow(2).mean(1).sum()
        optimize(self.critic_optim, critic_loss)

        act, log_prob = self.actor(b["obs"])
        actor_loss = (alpha * log_prob - self.critic(b["obs"], act).min(0).values).mean()
        optimize(self.actor_optim, actor_loss, list(self.actor.parameters()))  # no gradients for the critic's weights

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        optimize(self.alpha_optim, alpha_loss)
        soft_update(self.critic_target, self.critic, self.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "alpha": alpha[0],
                "alpha_loss": alpha_loss.detach(), "q": q.detach().mean(), "entropy": -log_prob.detach().mean()}  # fmt: skip


# --- end ---


# --- shared: cql ---
class CQL(SAC):
    """SAC whose critics also minimise CQL(H)'s conservative term, in OfflineRL-Kit's CQLPolicy order (actor, α, then
    the critics; α not clamped)."""

    def __init__(self, obs_norm, act_dim, max_action, cql_weight, temperature, num_repeat, deterministic_backup,
                 lagrange_threshold, cql_alpha_lr, paper_literal, **sac):  # fmt: skip
        super().__init__(obs_norm, act_dim, max_action, **sac)
        self.cql_log_alpha = nn.Parameter(torch.zeros(1))  # log α', the Lagrange form's weight
        self.cql_alpha_optim = adam([self.cql_log_alpha], cql_alpha_lr)
        self.cql_weight, self.temperature, self.num_repeat = cql_weight, temperature, num_repeat
        self.deterministic_backup, self.threshold = deterministic_backup, lagrange_threshold
        self.paper_literal = paper_literal

    def update(self, b, n_real=None):
        """One step on batch b. COMBO passes `n_real`: b's first n_real rows are D's, the rest the model's; Q is pushed
        down at every row's state (ρ = mix) and up on every row's own action (OfflineRL-Kit's COMBOPolicy) or, with
        paper_literal, on D's rows only (COMBO's Eq. 2)."""
        obs, B, R = b["obs"], len(b["obs"]), self.num_repeat
        alpha = self.log_alpha.exp().detach()
        act, log_prob = self.actor(obs)
        actor_loss = (alpha * log_prob - self.critic(obs, act).min(0).values).mean()
        optimize(self.actor_optim, actor_loss, list(self.actor.parameters()))  # no gradients for the critic's weights
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        optimize(self.alpha_optim, alpha_loss)

        with torch.no_grad():
            next_act, next_log_prob = self.actor(b["next_obs"])
            next_q = self.critic_target(b["next_obs"], next_act).min(0).values
            if not self.deterministic_backup:
                next_q = next_q - self.log_alpha.exp() * next_log_prob
            target_q = b["rew"] + self.gamma * (1 - b["done"]) * next_q
            # R actions per state from π(·|s), π(·|s') and U(−max, max)^|A|, each with its log-density
            s, next_s = obs.repeat_interleave(R, 0), b["next_obs"].repeat_interleave(R, 0)
            (a_pi, logp_pi), (a_next, logp_next) = self.actor(s), self.actor(next_s)
            a_unif = (2 * torch.rand_like(a_pi) - 1) * self.actor.max_action
            logp_unif = -a_pi.shape[1] * np.log(2 * self.actor.max_action)  # the box's density, as π's is in its units
        q = self.critic(obs, b["act"])
        td_loss = (q - target_q).pow(2).mean(1).sum()
        # Q(s, a) − log p(a) of the 3R sampled actions at each state s (a' ~ π(·|s') too is scored at s)
        sampled = torch.stack([self.critic(s, a_pi) - logp_pi, self.critic(s, a_next) - logp_next,
                               self.critic(s, a_unif) - logp_unif], dim=-1).view(2, B, R, 3)  # fmt: skip
        # OfflineRL-Kit's log-sum-exp runs over the 3 values of each row (its reshape's result is discarded)
        per = sampled.flatten(2) if self.paper_literal else sampled  # [2, B, 3R] or [2, B, R, 3]
        lse = self.temperature * (per / self.temperature).logsumexp(-1)
        up = q[:, :n_real] if self.paper_literal and n_real else q
        gap = lse.flatten(1).mean(1) - up.mean(1)  # per critic: [2]
        conservative = self.cql_weight * gap
        stats = {}
        if self.threshold is not None:  # the Lagrange form: α' rises while the term exceeds τ
            cql_alpha = self.cql_log_alpha.exp().clamp(0.0, 1e6)
            conservative = cql_alpha * (conservative - self.threshold)
            cql_alpha_loss = -conservative.mean()
            self.cql_alpha_optim.zero_grad()
            cql_alpha_loss.backward(inputs=[self.cql_log_alpha], retain_graph=True)
            self.cql_alpha_optim.step()
            stats = {"cql_alpha": cql_alpha[0].detach(), "cql_alpha_loss": cql_alpha_loss.detach()}
        critic_loss = td_loss + conservative.sum()
        optimize(self.critic_optim, critic_loss, list(self.critic.parameters()))
        soft_update(self.critic_target, self.critic, self.tau)
        return stats | {"critic_loss": critic_loss.detach(), "td_loss": td_loss.detach(), "cql_gap": gap.detach().mean(),
                        "actor_loss": actor_loss.detach(), "alpha": alpha[0], "alpha_loss": alpha_loss.detach(),
                        "q": q.detach().mean(), "entropy": -log_prob.detach().mean()}  # fmt: skip


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
    args.exp_name = args.exp_name or "cql"
    device = seed_everything(args)
    envs = make_eval_envs(task, args.eval_episodes)
    data, max_action = load_data(task, path, envs, device)
    real = ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
    real.add(data)
    sac = dict(hidden_dims=args.hidden_dims, actor_lr=args.actor_lr, critic_lr=args.critic_lr, alpha_lr=args.alpha_lr,
               gamma=args.gamma, tau=args.tau, target_entropy=args.target_entropy)  # fmt: skip
    cql = dict(cql_weight=args.cql_weight, temperature=args.temperature, num_repeat=args.num_repeat,
               deterministic_backup=args.deterministic_backup, lagrange_threshold=args.lagrange_threshold,
               cql_alpha_lr=args.cql_alpha_lr, paper_literal=args.paper_literal)  # fmt: skip
    obs_norm = ObsNorm.of(data["obs"], args.normalize_obs)
    policy = CQL(obs_norm, data["act"].shape[1], max_action, **cql, **sac).to(device)
    with torch.random.fork_rng():  # a batch that cannot fit fails now
        real.sample(args.batch_size)
    run_dir, ckpt, writer = open_run(args, task, "none", len(data["obs"]))  # the run directory; --resume's checkpoint

    def gradient_step(actor_step):  # one CQL update on D alone (the actor updates on every step)
        b = real.sample(args.batch_size)
        b |= {"rew": b["rew"][:, 0], "done": b["done"][:, 0]}
        return {f"losses/{k}": v for k, v in policy.update(b).items()}

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
        metrics = gradient_steps(gradient_step, first, args.steps_per_epoch, 1, graphs, [policy])
        check_finite(metrics, {"policy": policy}, epoch)
        if epoch % args.eval_every == 0 or epoch == args.epochs:  # the real env, deterministic policy (D4RL score)
            m = evaluate(partial(policy.act, deterministic=True), envs, task, args.seed + 1000 * epoch, device, rows)[0]
            metrics |= m
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
