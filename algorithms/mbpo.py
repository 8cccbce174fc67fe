# Offline MBPO: Model-Based Policy Optimization (Janner et al., NeurIPS 2019) on a fixed dataset, a baseline of ORPO
# (Zhai et al., AAAI 2024): MOPO (OfflineRL-Kit's, as mopo.py) in the plain model MDP, without an uncertainty penalty:
#   1. fit an ensemble of N probabilistic dynamics models T̂ (u(s, a) is computed, but only logged);
#   2. every epoch, roll out the policy (stochastic SAC) in the model for h steps from states of the offline dataset D;
#   3. train it by SAC with the model's own rewards r̂ on D ∪ D_model, 5% of each batch from D.
# Usage: python algorithms/mbpo.py --env hopper-medium-v2
from __future__ import annotations

import contextlib
import copy
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))] if __package__ else []  # python -m algorithms.mbpo
try:
    from plumbing import (Count, Path, Positive, RunArgs, Share, UserError, catch_signals, check_args, check_finite,
                          cli, evaluate, finish, load, load_data, log, make_eval_envs, open_run, resolve_task,
                          restore, rng_state, save, seed_everything)  # fmt: skip
except ImportError as e:  # this file's run plumbing: copy both files
    sys.exit(f"error: {e}; copy this project's algorithms/plumbing.py beside {os.path.basename(__file__)}")


@dataclass
class Args(RunArgs):  # the data and run flags (--env, --seed, --runs-dir, ...) are plumbing.RunArgs'
    # MBPO: the plain model MDP, no penalty (presets fill the fields left unset)
    uncertainty: Optional[Literal["max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std"]] = None
    """uncertainty heuristic u(s, a), only logged: MBPO has no penalty (None: the dataset preset); ensemble_var/std
    are OfflineRL-Kit's spread of the members' next-state means, mixture_var/std the appendix's mixture formula"""
    rollout_length: Optional[Count] = None
    """h, the rollout horizon (None: the dataset preset)"""
    rollout_batch_size: Count = 50000
    """start states drawn from D for each epoch's rollouts (b in Algorithm 2)"""
    model_retain_epochs: Count = 5
    """model buffers keep this many epochs of rollouts (ring buffers)"""
    real_ratio: Share = 0.05
    """fraction of real transitions in each batch (the rest from the model buffer)"""

    # The policy: SAC in the model MDP
    hidden_dims: tuple[Count, ...] = (256, 256)
    """hidden layer sizes of the actor and critics (OfflineRL-Kit's MOPO)"""
    gamma: Share = 0.99
    """discount factor γ"""
    tau: Share = 0.005
    """target network smoothing coefficient"""
    normalize_obs: bool = False
    """standardise policy inputs with D's mean and std + 1e-3 (off by default, as OfflineRL-Kit's MOPO)"""
    sac_actor_lr: Positive = 1e-4
    """SAC actor learning rate, cosine-annealed to 0 over `sac_lr_horizon` epochs"""
    sac_lr_horizon: Count = 1000
    """epochs of the actor LR's cosine schedule, 0 after (the paper's 1000; fixed, not --epochs, so a short run is the
    first epochs of the full run)"""
    sac_critic_lr: Positive = 3e-4
    """SAC critic learning rate"""
    sac_alpha_lr: Positive = 1e-4
    """SAC entropy temperature learning rate"""
    target_entropy: Optional[float] = None
    """SAC target entropy (None: −|A|)"""

    # Dynamics ensemble
    num_ensemble: Count = 7
    """N, the number of probabilistic dynamics models"""
    num_elites: Count = 5
    """models with the lowest holdout error, the ones sampled from in rollouts"""
    dynamics_hidden_dims: tuple[Count, ...] = (200, 200, 200, 200)
    """hidden layer sizes of each dynamics model"""
    dynamics_bf16: bool = False
    """run the ensemble's hidden layers in bfloat16 autocast (weights, optimiser and outputs stay fp32)"""
    dynamics_lr: Positive = 1e-3
    """Adam learning rate of the dynamics ensemble"""
    dynamics_batch_size: Count = 256
    """batch size of dynamics training"""
    dynamics_max_epochs: Optional[Count] = None
    """cap on dynamics epochs (None: train until early stopping)"""
    dynamics_patience: Count = 5
    """stop after this many epochs in which no model's holdout error improved by more than 1%"""
    dynamics_holdout_ratio: Annotated[float, "(0, 1)"] = 0.2
    """fraction of D held out for validation (at most `dynamics_max_holdout` transitions)"""
    dynamics_max_holdout: Count = 1000
    """largest holdout set"""
    load_dynamics_path: Optional[Path] = None
    """reuse a saved ensemble (a run's dynamics.pt) instead of fitting one"""

    # Training loop
    steps_per_epoch: Count = 1000
    """gradient steps per epoch (the rollout frequency)"""
    batch_size: Count = 256
    """batch size of every policy update"""
    eval_every: Count = 1
    """evaluate every this many epochs (and after the last)"""

    def problems(self):  # flags that act only together, checked before any work (plumbing)
        return ensemble_problems(self)


# Per-dataset presets from the paper's "Tuned hyper-parameters" table, which has no MBPO column: the
# uncertainty type (only logged) and h from the MOPO column, so that MBPO differs from mopo.py only in λp = 0
PRESETS = {
    # name: (uncertainty, h)
    "halfcheetah-random-v2": ("ensemble_std", 5),
    "hopper-random-v2": ("max_aleatoric", 5),
    "walker2d-random-v2": ("ensemble_var", 1),
    "halfcheetah-medium-v2": ("ensemble_var", 5),
    "hopper-medium-v2": ("max_aleatoric", 5),
    "walker2d-medium-v2": ("ensemble_std", 1),
    "halfcheetah-medium-replay-v2": ("ensemble_var", 5),
    "hopper-medium-replay-v2": ("max_aleatoric", 5),
    "walker2d-medium-replay-v2": ("ensemble_std", 1),
    "halfcheetah-medium-expert-v2": ("max_aleatoric", 5),
    "hopper-medium-expert-v2": ("max_aleatoric", 5),
    "walker2d-medium-expert-v2": ("max_aleatoric", 1),
    # generalisation tasks: MOPO's h = 5 (appendix "Hyperparameters")
    "halfcheetah-jump": ("max_aleatoric", 5),
    "halfcheetah-jump-hard": ("max_aleatoric", 5),
}
FALLBACK_PRESET = ("max_aleatoric", 5)


def apply_presets(args, task):
    """Fill every preset-controlled field the user left unset; returns the args and the preset's name."""
    # local/hopper-random is made with D4RL's recipe, so it takes hopper-random-v2's preset
    name = task.name if task.name in PRESETS else f"{task.name.removeprefix('local/')}-v2"
    source = name if name in PRESETS else "fallback"
    uncertainty, h = PRESETS.get(name, FALLBACK_PRESET)
    defaults = dict(uncertainty=uncertainty, rollout_length=h)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args, source


UNCERTAINTIES = ("max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std")


def uncertainty(mean, std, kind):
    """u(s, a) from all N Gaussians (not only the elites); mean, std: [N, B, D] over (s', r), the reward last.

    max_aleatoric: max_i ‖σ_i‖₂ over s' and r (MOPO; the only u the official ORPO runner ever computes).
    ensemble_var:  (1/d_s) Σ_d Var_i μ_i[d] over the next-state dims only, no σ: OfflineRL-Kit's formula, which the
                   authors' MOPO runs used and the presets' λp were tuned on.
    ensemble_std:  its square root.
    mixture_var:   Σ_d (Var_i μ_i[d] + E_i σ_i[d]²) over s' and r: the variance of the mixture, the appendix's
                   "Uncertainty Heuristics" as written (41-153x ensemble_var on D: docs/uncertainty_scales.md).
    mixture_std:   its square root.
    Var_i is the population variance over the N members (numpy's default, as Kit).
    """
    if kind not in UNCERTAINTIES:
        raise ValueError(f"unknown uncertainty heuristic {kind}; use one of {', '.join(UNCERTAINTIES)}")
    if kind == "max_aleatoric":
        return std.norm(dim=-1).amax(dim=0)
    # Var_i written out: torch's var over the leading model axis is much slower on a CPU
    spread = (mean - mean.mean(dim=0)).pow(2).mean(dim=0)  # [B, D]
    if kind.startswith("ensemble"):
        var = spread[:, :-1].mean(dim=-1)
    else:  # the mixture's: the law of total variance, computed without cancellation
        var = (spread + std.pow(2).mean(dim=0)).sum(dim=-1)
    return var if kind.endswith("_var") else var.sqrt()


def relabel(rew, mean, std, args):
    """MBPO keeps the model's reward r̂; u is only logged."""
    return {"u": uncertainty(mean, std, args.uncertainty)}


def rollout_metrics(start, ro, b):
    """The epoch's rollouts: u, the model's rewards, mean length, dropped rows, and how far the
    policy's first action lies from D's action in the same state."""
    return {
        "rollout/u": ro["u"].mean(),
        "rollout/reward": ro["rew"].mean(),
        "rollout/length": len(ro["u"]) / b,
        "rollout/nonfinite_rows": ro["nonfinite"],
        "rollout/action_distance": (ro["first_act"] - start["act"]).norm(dim=-1).mean(),
    }


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


# --- shared: model ---
class EnsembleDynamics(nn.Module):
    """N Gaussian models of (Δs, r) given (s, a), with learned soft bounds on the log-variance."""

    def __init__(self, obs_dim, act_dim, hidden_dims, num_ensemble, num_elites, bf16=False):
        super().__init__()
        dims = [obs_dim + act_dim, *hidden_dims, 2 * (obs_dim + 1)]
        self.layers = ensemble_layers(dims, num_ensemble)
        for layer in self.layers:  # MBPO's init: truncated normal, std 1/(2√fan_in), cut at ±2σ
            std = 1 / (2 * np.sqrt(layer.weight.shape[1]))
            nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(layer.bias)
        # L2 per layer (MOPO / OfflineRL-Kit for 4×200); other depths interpolate between the same ends
        self.weight_decays = np.interp(
            np.linspace(0, 1, len(self.layers)), [0, 0.25, 0.5, 0.75, 1], [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4]
        ).tolist()
        self.max_logvar = nn.Parameter(torch.full((1, 1, obs_dim + 1), 0.5))
        self.min_logvar = nn.Parameter(torch.full((1, 1, obs_dim + 1), -10.0))
        self.register_buffer("in_mean", torch.zeros(obs_dim + act_dim))
        self.register_buffer("in_std", torch.ones(obs_dim + act_dim))
        self.register_buffer("elites", torch.arange(num_elites))
        self.num_ensemble, self.bf16 = num_ensemble, bf16

    def forward(self, x):
        """x = [s, a] of shape [B, in] (the same batch for every model) or [E, B, in]; returns the mean and the
        log-variance, each [E, B, out]."""
        x = (x - self.in_mean) / self.in_std
        if x.dim() == 2:
            x = x.expand(self.num_ensemble, *x.shape)
        # --dynamics-bf16: hidden matmuls in bfloat16; the output layer (mean, log-variance) stays fp32
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            for layer in self.layers[:-1]:
                x = F.silu(layer(x))
        mean, logvar = self.layers[-1](x.float()).chunk(2, dim=-1)
        logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        return mean, logvar

    def param_groups(self):
        """Adam's parameter groups. The L2 term Σ 0.5·wd·‖W‖² enters as each layer's coupled `weight_decay`, which adds
        the same gradient wd·W inside the fused step instead of two memory-bound passes over every weight per step."""
        decayed = [{"params": [layer.weight], "weight_decay": wd} for wd, layer in zip(self.weight_decays, self.layers)]
        return decayed + [{"params": [p for name, p in self.named_parameters() if not name.endswith(".weight")]}]

    @torch.no_grad()
    def step(self, obs, act):
        """Sample (ŝ', r̂) from a random elite per row; also every model's Gaussian over (s', r), mean and std
        [N, B, D], the reward last: the method computes its uncertainty u(s, a) from them."""
        mean, logvar = self(torch.cat([obs, act], dim=-1))
        mean = torch.cat([mean[..., :-1] + obs, mean[..., -1:]], dim=-1)  # the models predict Δs
        std = (0.5 * logvar).exp()
        rows = torch.arange(obs.shape[0], device=obs.device)
        model = self.elites[torch.randint(len(self.elites), (obs.shape[0],), device=obs.device)]
        sample = mean[model, rows] + std[model, rows] * torch.randn_like(mean[0])
        return sample[:, :-1], sample[:, -1], mean, std


def dynamics_step(model, optimizer, x, y):
    """One maximum-likelihood step on x [E, B, in] -> y [E, B, out] (each model its own rows; the L2 term is in the
    optimiser, see `param_groups`); returns the NLL."""
    mean, logvar = model(x)
    # Gaussian NLL (up to constants), mean over batch and dims, summed over models
    nll = ((mean - y) ** 2 * (-logvar).exp() + logvar).mean(dim=(1, 2)).sum()
    loss = nll + 0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
    optimize(optimizer, loss)
    return nll.detach()


def fit_dynamics(model, data, lr, batch_size, max_epochs, patience, holdout_ratio, max_holdout):
    """Maximum likelihood on (s, a) -> (Δs, r): a bootstrap resample per model, early stopping on the holdout MSE
    (stop after `patience` epochs in which no model improved by more than 1 %, or at `max_epochs`), each model's best
    weights kept, the `num_elites` best models the elites."""
    if model.bf16 and data["obs"].is_cuda and not torch.cuda.is_bf16_supported():
        raise UserError("--dynamics-bf16: this GPU has no bfloat16 support (compute capability 8.0+); drop the flag")
    inputs = torch.cat([data["obs"], data["act"]], dim=-1)
    targets = torch.cat([data["next_obs"] - data["obs"], data["rew"]], dim=-1)
    n, E, dev = len(inputs), model.num_ensemble, inputs.device
    n_hold = min(int(n * holdout_ratio), max_holdout)
    if n_hold < 1 or n_hold >= n:
        raise UserError(f"--dynamics-holdout-ratio {holdout_ratio} holds out {n_hold} of {n} transitions")
    perm = torch.randperm(n, device=dev)
    hold_x, hold_y = inputs[perm[:n_hold]], targets[perm[:n_hold]]
    train_x, train_y = inputs[perm[n_hold:]], targets[perm[n_hold:]]
    n_train = len(train_x)
    model.in_mean.copy_(train_x.mean(0))
    model.in_std.copy_(torch.where(train_x.std(0) < 1e-12, torch.ones_like(train_x[0]), train_x.std(0)))
    bootstrap = torch.randint(n_train, (E, n_train), device=dev)
    optimizer = adam(model.param_groups(), lr)
    members = [p for layer in model.layers for p in (layer.weight, layer.bias)]  # parameters with a model axis
    best_params = [p.detach().clone() for p in members]
    best = torch.full((E,), float("inf"), device=dev)
    epoch, since_improved, nll, t0 = 0, 0, torch.full((), float("nan")), time.time()
    with tqdm(desc="dynamics", unit="epoch", total=max_epochs, leave=False) as bar:
        while since_improved < patience and epoch < (max_epochs or float("inf")):
            order = bootstrap.gather(1, torch.argsort(torch.rand(E, n_train, device=dev), dim=1))
            for start in range(0, n_train, batch_size):
                idx = order[:, start : start + batch_size]
                nll = dynamics_step(model, optimizer, train_x[idx], train_y[idx])
            with torch.no_grad():
                mse = ((model(hold_x)[0] - hold_y) ** 2).mean(dim=(1, 2))
                improved = torch.isinf(best) | ((best - mse) / best > 0.01)  # > 1% better than its best
                best = torch.where(improved, mse, best)
                for saved, p in zip(best_params, members):
                    saved.copy_(torch.where(improved.view(-1, 1, 1), p, saved))
            since_improved = 0 if bool(improved.any()) else since_improved + 1
            epoch += 1
            bar.update(1)
            bar.set_postfix(best_member_holdout_mse=f"{best.min().item():.4f}")
    with torch.no_grad():
        for saved, p in zip(best_params, members):
            p.copy_(saved)
        model.elites.copy_(torch.argsort(best)[: len(model.elites)])
    mse = best[model.elites].mean().item()
    if not np.isfinite(mse):
        raise UserError(f"the ensemble fit diverged (holdout MSE {mse}); lower --dynamics-lr or check the dataset for "
                        "huge values")  # fmt: skip
    print(f"dynamics: elites' mean holdout MSE {mse:.4g} after {epoch} epochs")
    return {"dynamics/holdout_mse": mse, "dynamics/epochs": epoch, "dynamics/train_nll": nll.item(),
            "dynamics/fit_seconds": time.time() - t0}  # fmt: skip


def load_dynamics(model, path, seed):
    """An ensemble saved by a run (its dynamics.pt) and its fit's metrics; one saved by a run of the same seed brings the
    RNG state right after its fit, so this run continues as that one did."""
    saved = load(path, "ensemble (a run's dynamics.pt)", ("model", "metrics"))
    restore({"model": model}, {k: v for k, v in saved.items() if k != "rng" or saved.get("seed") == seed}, path)
    if not all(isinstance(v, (int, float)) for v in saved["metrics"].values()):
        raise UserError(f"{path} holds no numbers as its fit's metrics; pass a run's dynamics.pt")
    return saved["metrics"]


def termination_fn(domain):
    """done(s') on raw observations, as each Gymnasium env's own termination (v4 and v5 alike); halfcheetah never ends,
    and in every domain a diverged model state ends the rollout."""

    def done(next_obs):
        z, angle, bad = next_obs[:, 0], next_obs[:, 1], ~torch.isfinite(next_obs).all(-1)
        if domain == "hopper":  # healthy: z > 0.7, |angle| < 0.2, every other state entry within ±100
            return bad | ~((next_obs[:, 1:].abs() < 100).all(-1) & (z > 0.7) & (angle.abs() < 0.2))
        if domain == "walker2d":  # healthy: 0.8 < z < 2, |angle| < 1
            return bad | ~((z > 0.8) & (z < 2.0) & (angle.abs() < 1.0))
        return bad

    return done


@torch.no_grad()
def rollout(dynamics, policy, start_obs, horizon, terminal, relabel):
    """h steps of `policy` in the model from a batch of real states; a row stops at its first termination. Each step's
    columns: s, a, r̂, the method's own ones (`relabel(r̂, mean, std)`: u and its rewards), s', done.

    A row with a value that is not finite is dropped, not stored: with done = 1 its target r + γ·0·Q(NaN) is still
    NaN and one such row turns a critic's weights to NaN. `nonfinite` counts the dropped rows."""
    steps, first_act, nonfinite = [], [], 0
    # on a CPU, 1024-row chunks keep the ensemble's activations in cache
    for obs in start_obs.split(1024 if start_obs.device.type == "cpu" else len(start_obs)):
        for t in range(horizon):
            act = policy(obs)
            next_obs, rew, mean, std = dynamics.step(obs, act)
            if t == 0:
                first_act.append(act)
            step = {"obs": obs, "act": act, "rew": rew, **relabel(rew, mean, std), "next_obs": next_obs,
                    "done": terminal(next_obs).float()}  # fmt: skip
            ok = torch.stack([torch.isfinite(v.reshape(len(obs), -1)).all(-1) for v in step.values()]).all(0)
            nonfinite = nonfinite + (~ok).sum()
            steps.append({k: v[ok] for k, v in step.items()})
            obs = steps[-1]["next_obs"][steps[-1]["done"] == 0]
            if len(obs) == 0:
                break
    out = {k: torch.cat([s[k] for s in steps]) for k in steps[0]}
    out["first_act"], out["nonfinite"] = torch.cat(first_act), nonfinite
    return out


@torch.no_grad()
def model_eval(dynamics, terminal, u_of, gamma, actor, first_obs, envs):
    """η_M̂(π) and ε_u(π) (Fig. 6): the deterministic policy's discounted return and mean u (`u_of(mean, std)`) in the
    model MDP, from the real evaluation episodes' first states."""
    obs, horizon = first_obs, envs.envs[0].spec.max_episode_steps or 1000
    alive, ret, u_sum, steps = torch.ones(len(obs), dtype=torch.bool, device=obs.device), 0.0, 0.0, 0
    for t in range(horizon):
        obs, rew, mean, std = dynamics.step(obs, actor(obs))
        ret = ret + torch.where(alive, gamma**t * rew, 0.0)
        u_sum, steps = u_sum + torch.where(alive, u_of(mean, std), 0.0).sum(), steps + alive.sum()
        alive &= ~terminal(obs)
        obs = torch.nan_to_num(obs)  # an ended, diverged row must not poison the batch
    return {"eval/model_return": ret.mean().item(), "eval/model_uncertainty": (u_sum / steps.clamp(min=1)).item()}


def ensemble_problems(a):
    """The ensemble's flags that act only together (every model-based file's Args.problems checks them)."""
    u = getattr(a, "uncertainty", None)  # combo.py has none to choose
    rules = [(a.num_elites > a.num_ensemble, f"--num-elites {a.num_elites} exceeds --num-ensemble {a.num_ensemble}"),
             (a.num_ensemble == 1 and u in ("ensemble_var", "ensemble_std"), f"--uncertainty {u} is the members' "
              "disagreement, 0 with --num-ensemble 1 (λ would do nothing): use 2+ members or max_aleatoric")]  # fmt: skip
    return [why for broken, why in rules if broken]


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


# --- shared: schedule ---
class CosineLR(torch.optim.lr_scheduler.CosineAnnealingLR):
    """OfflineRL-Kit's cosine annealing of SAC's actor LR over T_max epochs, held at 0 after T_max instead of rising
    again (a run extended past its horizon must not see its learning rate climb back)."""

    def get_lr(self):
        if self.last_epoch >= self.T_max:
            return [self.eta_min for _ in self.optimizer.param_groups]
        return super().get_lr()


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


# --- shared: mixing ---
def mix_counts(batch_size, ratios):
    """Rows per source: int(B·ratio) for all but the last source, which gets the rest (the official code's rule)."""
    counts = [int(batch_size * r) for r in ratios[:-1]]
    return counts + [batch_size - sum(counts)]


def sample_mix(sources):
    """One batch from several buffers: (buffer, rows, which stored reward to use as 'rew')."""
    if any(buf.size == 0 for buf, n, _ in sources if n > 0):
        raise UserError("a model buffer is still empty: every rollout row so far was NaN or infinite (the ensemble "
                        "diverged); check the dataset for huge values or lower --dynamics-lr")  # fmt: skip
    parts = [(buf.sample(n), key) for buf, n, key in sources if n > 0]
    batch = {k: torch.cat([p[k] for p, _ in parts]) for k in ("obs", "act", "next_obs")}
    batch["done"] = torch.cat([p["done"] for p, _ in parts])[:, 0]
    batch["rew"] = torch.cat([p[key] for p, key in parts])[:, 0]
    return batch


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
    # the dataset, its preset's flags (those left unset), seeds; D on the device, checked against the evaluation env
    task, path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)
    args, preset = apply_presets(args, task)
    args.exp_name = args.exp_name or "mbpo"
    if not args.resume:  # a resumed run's flags passed when it started
        check_args(args)  # the preset's values with the user's
    device = seed_everything(args)
    envs = make_eval_envs(task, args.eval_episodes)
    data, max_action = load_data(task, path, envs, device)
    widths = {k: v.shape[1] for k, v in data.items()}  # obs, act, rew, next_obs, done
    obs_dim, act_dim = widths["obs"], widths["act"]
    real = ReplayBuffer(len(data["obs"]), widths, device)
    real.add(data)
    obs_norm = ObsNorm.of(data["obs"], args.normalize_obs)
    # each part's settings, named (the model's fit, the SAC policy)
    fit = dict(lr=args.dynamics_lr, batch_size=args.dynamics_batch_size, max_epochs=args.dynamics_max_epochs,
               patience=args.dynamics_patience, holdout_ratio=args.dynamics_holdout_ratio,
               max_holdout=args.dynamics_max_holdout)  # fmt: skip
    sac = dict(hidden_dims=args.hidden_dims, actor_lr=args.sac_actor_lr, critic_lr=args.sac_critic_lr,
               alpha_lr=args.sac_alpha_lr, gamma=args.gamma, tau=args.tau, target_entropy=args.target_entropy)  # fmt: skip

    # the model buffer, allocated before the fit: a size that cannot fit fails now, not hours later
    fields = widths | {"u": 1}
    # D_model, the model's rollouts of the last `model_retain_epochs` epochs
    buf = ReplayBuffer(args.rollout_batch_size * args.rollout_length * args.model_retain_epochs, fields, device)
    with torch.random.fork_rng():  # throwaway agents and a batch: sizes that cannot fit fail now
        SAC(obs_norm, act_dim, max_action, **sac), real.sample(args.batch_size)

    # the ensemble T̂, fitted on D, or loaded (--load-dynamics-path; a resumed run: its own)
    dynamics = EnsembleDynamics(obs_dim, act_dim, args.dynamics_hidden_dims, args.num_ensemble, args.num_elites,
                                args.dynamics_bf16).to(device)  # fmt: skip
    own = args.resume and os.path.join(args.resume, "dynamics.pt")  # a resumed run's own ensemble
    source = own if own and os.path.isfile(own) else args.load_dynamics_path
    dyn_metrics = load_dynamics(dynamics, source, args.seed) if source else fit_dynamics(dynamics, data, **fit)
    run_dir, ckpt, writer = open_run(args, task, preset, len(data["obs"]))  # the run directory; --resume's checkpoint
    if not own or source != own:  # the run's own copy, with the RNG state right after the fit: a resume goes on exactly
        ensemble = {"model": dynamics.state_dict(), "metrics": dyn_metrics, "rng": rng_state(), "seed": args.seed}
        save(ensemble, os.path.join(run_dir, "dynamics.pt"))
    dynamics.requires_grad_(False)
    terminal = termination_fn(task.domain)
    u_of = partial(uncertainty, kind=args.uncertainty)

    # the policy (SAC with a cosine-annealed actor LR)
    policy = SAC(obs_norm, act_dim, max_action, **sac).to(device)
    policy_act, policy_eval = policy.act, lambda s: policy.act(s, deterministic=True)
    actor_schedule = CosineLR(policy.actor_optim, T_max=args.sac_lr_horizon)
    n = mix_counts(args.batch_size, (args.real_ratio, 1 - args.real_ratio))

    def gradient_step(actor_step):
        # one update on D ∪ D_model: D's rows with their real rewards, the model's with r̂ (no penalty)
        batch = sample_mix([(real, n[0], "rew"), (buf, n[1], "rew")])
        return {f"losses/{k}": v for k, v in (policy.update(batch)).items()}

    # what a checkpoint holds besides the epoch, the metrics rows, the wall time and the RNG states
    parts = {"policy": policy, "actor_schedule": actor_schedule, "buf": buf}
    rows, ckpt_path = ckpt["rows"], os.path.join(run_dir, "checkpoint.pt")  # metrics.csv's rows so far
    if ckpt["epoch"]:  # --resume: the parts, RNG states, epoch and metrics rows of the checkpoint
        restore(parts, ckpt, ckpt_path)
    elif not rows:
        log(writer, rows, run_dir, 0, dyn_metrics)  # row 0: the fit
    graphs = args.cuda_graphs and device.type == "cuda"
    done = ckpt["epoch"]  # epochs done
    last = min(args.epochs, done + (args.stop_after_epochs or args.epochs))
    stop = catch_signals(defer=True)  # a signal: the loop ends after its epoch, with a checkpoint
    t_start = time.time()  # the loop's clock, reset at each checkpoint: wall_seconds and --checkpoint-minutes

    for epoch in (bar := tqdm(range(done + 1, last + 1), f"{args.exp_name} {task.name}", args.epochs, initial=done)):
        t0 = time.time()
        # rollouts of the policy (stochastic SAC) from b states of D, with the model's rewards r̂
        start = real.sample(args.rollout_batch_size)
        ro = rollout(dynamics, policy_act, start["obs"], args.rollout_length, terminal, partial(relabel, args=args))
        buf.add(ro)
        t_rollout = time.time() - t0

        first = (epoch - 1) * args.steps_per_epoch
        metrics = gradient_steps(gradient_step, first, args.steps_per_epoch, 1, graphs, [policy])
        actor_schedule.step()
        metrics |= rollout_metrics(start, ro, args.rollout_batch_size)
        metrics["charts/lr_actor"] = actor_schedule.get_last_lr()[0]
        check_finite(metrics, {"policy": policy}, epoch)
        if epoch % args.eval_every == 0 or epoch == args.epochs:  # in the real env (D4RL score) and in the model
            m, first_obs = evaluate(policy_eval, envs, task, args.seed + 1000 * epoch, device, rows)
            metrics |= m | model_eval(dynamics, terminal, u_of, args.gamma, policy_eval, first_obs, envs)
            bar.set_postfix(score=f"{m.get('eval/normalized_score', m['eval/return']):.1f}")
        metrics["charts/rollout_seconds"] = t_rollout
        log(writer, rows, run_dir, epoch, metrics, t0, args.steps_per_epoch)  # metrics.csv, TensorBoard
        if (
            epoch % args.checkpoint_every == 0
            or epoch == last
            or stop
            or time.time() > t_start + 60 * args.checkpoint_minutes
        ):
            seconds = ckpt["seconds"] + time.time() - t_start
            ckpt = {"epoch": epoch, "rows": rows, "seconds": seconds, "rng": rng_state()}
            save(ckpt | {k: v.state_dict() for k, v in parts.items()}, ckpt_path)
            t_start = time.time()
        if stop:
            break
    bar.close()  # the lines after the loop start their own
    envs.close()
    writer.close()
    return finish(run_dir, args, task, rows, stop, ckpt["seconds"] + time.time() - t_start, preset, policy.actor)


if __name__ == "__main__":
    cli(main, Args)
