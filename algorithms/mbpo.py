# Offline MBPO: Model-Based Policy Optimization (Janner et al., NeurIPS 2019) on a fixed dataset, a baseline of ORPO
# (Zhai et al., AAAI 2024): MOPO (OfflineRL-Kit's, as mopo.py) in the plain model MDP, without an uncertainty penalty:
#   1. fit an ensemble of N probabilistic dynamics models T̂ (u(s, a) is computed, but only logged);
#   2. every epoch, roll out the policy (stochastic SAC) in the model for h steps from states of the offline dataset D;
#   3. train it by SAC with the model's own rewards r̂ on D ∪ D_model, 5% of each batch from D.
# Usage: python algorithms/mbpo.py --env hopper-medium-v2
from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))] if __package__ else []  # python -m algorithms.mbpo
try:
    from plumbing import Run, RunArgs, Task, UserError, check_memory, cli, gradient_steps
except ImportError as e:  # this file's run plumbing: copy both files
    sys.exit(f"error: {e}; copy this project's algorithms/plumbing.py beside {os.path.basename(__file__)}")


@dataclass
class Args(RunArgs):  # the data and run flags (--env, --seed, --runs-dir, ...) are plumbing.RunArgs'
    # MBPO: the plain model MDP, no penalty (presets fill the fields left unset)
    uncertainty: Optional[Literal["max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std"]] = None
    """uncertainty heuristic u(s, a), only logged: MBPO has no penalty (None: the dataset preset); ensemble_var/std
    are OfflineRL-Kit's spread of the members' next-state means, mixture_var/std the appendix's mixture formula"""
    rollout_length: Optional[int] = field(default=None, metadata={"range": "[1, inf)"})
    """h, the rollout horizon (None: the dataset preset)"""
    rollout_batch_size: int = field(default=50000, metadata={"range": "[1, inf)"})
    """start states drawn from D for each epoch's rollouts (b in Algorithm 2)"""
    model_retain_epochs: int = field(default=5, metadata={"range": "[1, inf)"})
    """model buffers keep this many epochs of rollouts (ring buffers)"""
    real_ratio: float = field(default=0.05, metadata={"range": "[0, 1]"})
    """fraction of real transitions in each batch (the rest from the model buffer)"""

    # The policy: SAC in the model MDP
    hidden_dims: tuple[int, ...] = field(default=(256, 256), metadata={"range": "[1, inf)"})
    """hidden layer sizes of the actor and critics (OfflineRL-Kit's MOPO)"""
    gamma: float = field(default=0.99, metadata={"range": "[0, 1]"})
    """discount factor γ"""
    tau: float = field(default=0.005, metadata={"range": "[0, 1]"})
    """target network smoothing coefficient"""
    normalize_obs: bool = False
    """standardise policy inputs with D's mean and std + 1e-3 (off by default, as OfflineRL-Kit's MOPO)"""
    sac_actor_lr: float = field(default=1e-4, metadata={"range": "(0, inf)"})
    """SAC actor learning rate, cosine-annealed to 0 over `sac_lr_horizon` epochs"""
    sac_lr_horizon: int = field(default=1000, metadata={"range": "[1, inf)"})
    """epochs of the actor LR's cosine schedule, 0 after (the paper's 1000; fixed, not --epochs, so a short run is the
    first epochs of the full run)"""
    sac_critic_lr: float = field(default=3e-4, metadata={"range": "(0, inf)"})
    """SAC critic learning rate"""
    sac_alpha_lr: float = field(default=1e-4, metadata={"range": "(0, inf)"})
    """SAC entropy temperature learning rate"""
    target_entropy: Optional[float] = None
    """SAC target entropy (None: −|A|)"""

    # Dynamics ensemble
    num_ensemble: int = field(default=7, metadata={"range": "[1, inf)"})
    """N, the number of probabilistic dynamics models"""
    num_elites: int = field(default=5, metadata={"range": "[1, inf)"})
    """models with the lowest holdout error, the ones sampled from in rollouts"""
    dynamics_hidden_dims: tuple[int, ...] = field(default=(200, 200, 200, 200), metadata={"range": "[1, inf)"})
    """hidden layer sizes of each dynamics model"""
    dynamics_bf16: bool = False
    """run the ensemble's hidden layers in bfloat16 autocast (weights, optimiser and outputs stay fp32)"""
    dynamics_lr: float = field(default=1e-3, metadata={"range": "(0, inf)"})
    """Adam learning rate of the dynamics ensemble"""
    dynamics_batch_size: int = field(default=256, metadata={"range": "[1, inf)"})
    """batch size of dynamics training"""
    dynamics_max_epochs: Optional[int] = field(default=None, metadata={"range": "[1, inf)"})
    """cap on dynamics epochs (None: train until early stopping)"""
    dynamics_patience: int = field(default=5, metadata={"range": "[1, inf)"})
    """stop after this many epochs in which no model's holdout error improved by more than 1%"""
    dynamics_holdout_ratio: float = field(default=0.2, metadata={"range": "(0, 1)"})
    """fraction of D held out for validation (at most `dynamics_max_holdout` transitions)"""
    dynamics_max_holdout: int = field(default=1000, metadata={"range": "[1, inf)"})
    """largest holdout set"""
    load_dynamics_path: Optional[str] = field(default=None, metadata={"path": "a run's dynamics.pt"})
    """reuse a saved ensemble (a run's dynamics.pt) instead of fitting one"""

    # Training loop
    steps_per_epoch: int = field(default=1000, metadata={"range": "[1, inf)"})
    """gradient steps per epoch (the rollout frequency)"""
    batch_size: int = field(default=256, metadata={"range": "[1, inf)"})
    """batch size of every policy update"""
    eval_every: int = field(default=1, metadata={"range": "[1, inf)"})
    """evaluate every this many epochs (and after the last)"""

    def problems(self) -> list[str]:  # flags that act only together, checked before any work (plumbing)
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


def apply_presets(args: Args, task: "Task") -> tuple[Args, str]:
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


# --- shared: model ---
class EnsembleDynamics(nn.Module):
    """N Gaussian models of (Δs, r) given (s, a), with learned soft bounds on the log-variance."""

    def __init__(self, obs_dim, act_dim, hidden_dims: tuple[int, ...], num_ensemble, num_elites, bf16=False):
        super().__init__()
        dims = [obs_dim + act_dim, *hidden_dims, 2 * (obs_dim + 1)]
        self.layers = nn.ModuleList(EnsembleLinear(i, o, num_ensemble) for i, o in zip(dims[:-1], dims[1:]))
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

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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

    def param_groups(self) -> list[dict]:
        """Adam's parameter groups. The L2 term Σ 0.5·wd·‖W‖² enters as each layer's coupled `weight_decay`, which adds
        the same gradient wd·W inside the fused step instead of two memory-bound passes over every weight per step."""
        decayed = [{"params": [layer.weight], "weight_decay": wd} for wd, layer in zip(self.weight_decays, self.layers)]
        return decayed + [{"params": [p for name, p in self.named_parameters() if not name.endswith(".weight")]}]

    @torch.no_grad()
    def step(self, obs: torch.Tensor, act: torch.Tensor, uncertainty: str):
        """Sample (ŝ', r̂) from a random elite per row; u(s, a) from all N models."""
        mean, logvar = self(torch.cat([obs, act], dim=-1))
        mean = torch.cat([mean[..., :-1] + obs, mean[..., -1:]], dim=-1)  # the models predict Δs
        std = (0.5 * logvar).exp()
        u = uncertainty_fn(mean, std, uncertainty)
        rows = torch.arange(obs.shape[0], device=obs.device)
        model = self.elites[torch.randint(len(self.elites), (obs.shape[0],), device=obs.device)]
        sample = mean[model, rows] + std[model, rows] * torch.randn_like(mean[0])
        return sample[:, :-1], sample[:, -1], u


def dynamics_step(model: EnsembleDynamics, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
    """One maximum-likelihood step on x [E, B, in] -> y [E, B, out] (each model its own rows; the L2 term is in the
    optimiser, see `param_groups`); returns the NLL."""
    mean, logvar = model(x)
    # Gaussian NLL (up to constants), mean over batch and dims, summed over models
    nll = ((mean - y) ** 2 * (-logvar).exp() + logvar).mean(dim=(1, 2)).sum()
    loss = nll + 0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return nll.detach()


def fit_dynamics(model: EnsembleDynamics, data: dict, lr: float, batch_size: int, max_epochs, patience: int,
                 holdout_ratio: float, max_holdout: int, resume: Optional[dict] = None,
                 progress: Optional[Callable] = None) -> dict[str, float]:  # fmt: skip
    """Maximum likelihood on (s, a) -> (Δs, r): a bootstrap resample per model, early stopping on the holdout MSE
    (stop after `patience` epochs in which no model improved by more than 1 %, or at `max_epochs`), each model's best
    weights kept. After every epoch `progress(state)` may save `state()`; `resume` (such a state) continues that fit
    exactly where it stopped (hours of a 1M-row fit on a CPU survive a kill)."""
    if model.bf16 and data["obs"].is_cuda and not torch.cuda.is_bf16_supported():
        raise UserError("--dynamics-bf16: this GPU has no bfloat16 support (compute capability 8.0+); drop the flag")
    inputs = torch.cat([data["obs"], data["act"]], dim=-1)
    targets = torch.cat([data["next_obs"] - data["obs"], data["rew"]], dim=-1)
    n, E, dev = len(inputs), model.num_ensemble, inputs.device
    n_hold = min(int(n * holdout_ratio), max_holdout)
    if n_hold < 1 or n_hold >= n:
        raise UserError(f"--dynamics-holdout-ratio {holdout_ratio} holds out {n_hold} of {n} transitions")
    perm = torch.randperm(n, device=dev) if resume is None else resume["perm"].to(dev)
    hold_x, hold_y = inputs[perm[:n_hold]], targets[perm[:n_hold]]
    train_x, train_y = inputs[perm[n_hold:]], targets[perm[n_hold:]]
    n_train = len(train_x)
    model.in_mean.copy_(train_x.mean(0))
    model.in_std.copy_(torch.where(train_x.std(0) < 1e-12, torch.ones_like(train_x[0]), train_x.std(0)))
    bootstrap = torch.randint(n_train, (E, n_train), device=dev) if resume is None else resume["bootstrap"].to(dev)
    optimizer = adam(model.param_groups(), lr)
    members = [p for layer in model.layers for p in (layer.weight, layer.bias)]  # parameters with a model axis
    best_params = [p.detach().clone() for p in members]
    best = torch.full((E,), float("inf"), device=dev)
    epoch, since_improved, nll = 0, 0, torch.full((), float("nan"))
    if resume is not None:  # the fit's whole state, its RNG included: the rest of the fit is the one it would have been
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        best = resume["best"].to(dev)
        for saved, p in zip(best_params, resume["best_params"]):
            saved.copy_(p)
        epoch, since_improved, nll = resume["epoch"], resume["since_improved"], resume["nll"]
        torch.set_rng_state(resume["rng"])
        if dev.type == "cuda":
            torch.cuda.set_rng_state(resume["cuda_rng"], dev)
    state = lambda: {  # noqa: E731
        "perm": perm, "bootstrap": bootstrap, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "best": best, "best_params": best_params, "epoch": epoch, "since_improved": since_improved, "nll": nll,
        "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
    }  # fmt: skip
    with tqdm(desc="dynamics", unit="epoch", initial=epoch, total=max_epochs, leave=False) as bar:
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
            if progress is not None:
                progress(state)
    with torch.no_grad():
        for saved, p in zip(best_params, members):
            p.copy_(saved)
        model.elites.copy_(torch.argsort(best)[: len(model.elites)])
    return {"dynamics/holdout_mse": best[model.elites].mean().item(), "dynamics/epochs": epoch, "dynamics/train_nll": nll.item()}  # fmt: skip


UNCERTAINTIES = ("max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std")


def uncertainty_fn(mean: torch.Tensor, std: torch.Tensor, kind: str) -> torch.Tensor:
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
    if kind == "max_aleatoric":
        return std.norm(dim=-1).amax(dim=0)
    # Var_i written out: torch's var over the leading model axis is much slower on a CPU
    spread = (mean - mean.mean(dim=0)).pow(2).mean(dim=0)  # [B, D]
    if kind in ("ensemble_var", "ensemble_std"):
        var = spread[:, :-1].mean(dim=-1)
        return var if kind == "ensemble_var" else var.sqrt()
    if kind in ("mixture_var", "mixture_std"):  # law of total variance, computed without cancellation
        var = (spread + std.pow(2).mean(dim=0)).sum(dim=-1)
        return var if kind == "mixture_var" else var.sqrt()
    raise ValueError(f"unknown uncertainty heuristic {kind}; use one of {', '.join(UNCERTAINTIES)}")


def termination_fn(domain: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """done(s') on raw observations, as each Gymnasium env's own termination (v4 and v5 alike)."""

    def hopper(next_obs):  # healthy: z > 0.7, |angle| < 0.2, every other state entry within ±100
        z, angle = next_obs[:, 0], next_obs[:, 1]
        healthy = (next_obs[:, 1:].abs() < 100).all(-1) & (z > 0.7) & (angle.abs() < 0.2)
        return ~healthy | ~torch.isfinite(next_obs).all(-1)

    def walker2d(next_obs):  # healthy: 0.8 < z < 2, |angle| < 1
        z, angle = next_obs[:, 0], next_obs[:, 1]
        healthy = (z > 0.8) & (z < 2.0) & (angle.abs() < 1.0)
        return ~healthy | ~torch.isfinite(next_obs).all(-1)

    def never(next_obs):  # halfcheetah never terminates; a diverged model state ends the rollout
        return ~torch.isfinite(next_obs).all(-1)

    return {"hopper": hopper, "walker2d": walker2d}.get(domain, never)


@torch.no_grad()
def rollout(dynamics, policy: Callable, start_obs: torch.Tensor, horizon: int, terminal: Callable, uncertainty: str):
    """h steps of `policy` in the model from a batch of real states; a row stops at its first termination.

    A row whose predicted s', r̂ or u is not finite is dropped, not stored: with done = 1 its target r + γ·0·Q(NaN) is
    still NaN and one such row turns a critic's weights to NaN. `nonfinite` counts the dropped rows."""
    steps, first_act = [], []
    nonfinite = torch.zeros((), device=start_obs.device)
    # on a CPU, 1024-row chunks keep the ensemble's activations in cache
    for obs in start_obs.split(1024 if start_obs.device.type == "cpu" else len(start_obs)):
        for t in range(horizon):
            act = policy(obs)
            next_obs, rew, u = dynamics.step(obs, act, uncertainty)
            if t == 0:
                first_act.append(act)
            ok = (
                torch.isfinite(next_obs).all(-1) & torch.isfinite(rew) & torch.isfinite(u) & torch.isfinite(act).all(-1)
            )
            nonfinite = nonfinite + (~ok).sum()
            step = {
                "obs": obs,
                "act": act,
                "rew": rew,
                "u": u,
                "next_obs": next_obs,
                "done": terminal(next_obs).float(),
            }
            steps.append({k: v[ok] for k, v in step.items()})
            obs = steps[-1]["next_obs"][steps[-1]["done"] == 0]
            if len(obs) == 0:
                break
    out = {k: torch.cat([s[k] for s in steps]) for k in steps[0]}
    out["first_act"], out["nonfinite"] = torch.cat(first_act), nonfinite
    return out


@torch.no_grad()
def model_eval(dynamics, terminal: Callable, uncertainty: str, gamma: float, device, actor: Callable,
               first_obs: np.ndarray, envs) -> dict:  # fmt: skip
    """η_M̂(π) and ε_u(π) (Fig. 6): the deterministic policy's discounted return and mean u in the model MDP, from the
    real evaluation episodes' first states (main binds its model with partial)."""
    horizon = envs.envs[0].spec.max_episode_steps or 1000
    obs = torch.as_tensor(first_obs, dtype=torch.float32, device=device)
    alive = torch.ones(len(obs), dtype=torch.bool, device=device)
    ret = torch.zeros(len(obs), device=device)
    u_sum, steps = torch.zeros((), device=device), torch.zeros((), device=device)
    for t in range(horizon):
        obs, rew, u = dynamics.step(obs, actor(obs), uncertainty)
        ret += torch.where(alive, gamma**t * rew, 0.0)
        u_sum, steps = u_sum + torch.where(alive, u, 0.0).sum(), steps + alive.sum()
        alive &= ~terminal(obs)
        obs = torch.nan_to_num(obs)  # an ended, diverged row must not poison the batch
    return {"eval/model_return": ret.mean().item(), "eval/model_uncertainty": (u_sum / steps.clamp(min=1)).item()}


def ensemble_problems(a) -> list[str]:
    """The ensemble's flags that act only together (every model-based file's Args.problems checks them)."""
    rules = [(a.num_elites > a.num_ensemble, f"--num-elites {a.num_elites} exceeds --num-ensemble {a.num_ensemble}"),
             (a.num_ensemble == 1 and a.uncertainty in ("ensemble_var", "ensemble_std"), f"--uncertainty {a.uncertainty}"
              " is the members' disagreement, 0 with --num-ensemble 1 (λ would do nothing): use 2+ members or "
              "max_aleatoric")]  # fmt: skip
    return [why for broken, why in rules if broken]


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


# --- shared: sac ---
class TanhGaussianActor(nn.Module):
    kind = "tanh_gaussian_mlp"  # the format name of an exported policy.pt

    def __init__(self, obs_norm: ObsNorm, obs_dim: int, act_dim: int, hidden_dims: tuple[int, ...], max_action: float):
        super().__init__()
        self.obs_norm = copy.deepcopy(obs_norm)
        self.net = mlp(obs_dim, hidden_dims, 2 * act_dim)
        self.max_action = max_action

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self.net(self.obs_norm(obs)).chunk(2, dim=-1)
        log_std = log_std.clamp(-5.0, 2.0)
        eps = torch.zeros_like(mu) if deterministic else torch.randn_like(mu)
        pre_tanh = mu + log_std.exp() * eps
        action = torch.tanh(pre_tanh)
        # log N(pre_tanh; mu, std) minus the log-det of a = max_action·tanh(pre_tanh)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        log_prob = log_prob - torch.log(self.max_action * (1 - action.pow(2)) + 1e-6).sum(-1)
        return action * self.max_action, log_prob


class SAC(nn.Module):
    """Soft actor-critic with twin critics and a learned temperature (OfflineRL-Kit's update order); target_entropy
    None is −|A|."""

    def __init__(self, obs_norm: ObsNorm, act_dim: int, max_action: float, hidden_dims: tuple[int, ...],
                 actor_lr: float, critic_lr: float, alpha_lr: float, gamma: float, tau: float,
                 target_entropy: Optional[float] = None):  # fmt: skip
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
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        return self.actor(obs, deterministic)[0]

    def get_extra_state(self) -> dict:  # optimisers travel with the state dict (checkpoints)
        return {k: getattr(self, k).state_dict() for k in ("actor_optim", "critic_optim", "alpha_optim")}

    def set_extra_state(self, state: dict) -> None:
        for k, v in state.items():
            getattr(self, k).load_state_dict(v)

    def update(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        alpha = self.log_alpha.exp().clamp(max=1.0).detach()  # OfflineRL-Kit keeps α ≤ 1
        with torch.no_grad():
            next_act, next_log_prob = self.actor(b["next_obs"])
            next_q = self.critic_target(b["next_obs"], next_act).min(0).values - alpha * next_log_prob
            target_q = b["rew"] + self.gamma * (1 - b["done"]) * next_q
        q = self.critic(b["obs"], b["act"])
        critic_loss = (q - target_q).pow(2).mean(1).sum()
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()

        act, log_prob = self.actor(b["obs"])
        actor_loss = (alpha * log_prob - self.critic(b["obs"], act).min(0).values).mean()
        self.actor_optim.zero_grad()
        actor_loss.backward(inputs=list(self.actor.parameters()))  # no gradients for the critic's weights
        self.actor_optim.step()

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optim.zero_grad()
        alpha_loss.backward()
        self.alpha_optim.step()
        soft_update(self.critic_target, self.critic, self.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "alpha": alpha[0],
                "alpha_loss": alpha_loss.detach(), "q": q.detach().mean(), "entropy": -log_prob.detach().mean()}  # fmt: skip


class CosineLR(torch.optim.lr_scheduler.CosineAnnealingLR):
    """OfflineRL-Kit's cosine annealing of SAC's actor LR over T_max epochs, held at 0 after T_max instead of rising
    again (a run extended past its horizon must not see its learning rate climb back)."""

    def get_lr(self) -> list[float]:
        if self.last_epoch >= self.T_max:
            return [self.eta_min for _ in self.optimizer.param_groups]
        return super().get_lr()


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


# --- shared: mixing ---
def mix_counts(batch_size: int, ratios: tuple[float, ...]) -> list[int]:
    """Rows per source: int(B·ratio) for all but the last source, which gets the rest (the official code's rule)."""
    counts = [int(batch_size * r) for r in ratios[:-1]]
    return counts + [batch_size - sum(counts)]


def sample_mix(sources: list[tuple[ReplayBuffer, int, str]]) -> dict[str, torch.Tensor]:
    """One batch from several buffers: (buffer, rows, which stored reward to use as 'rew')."""
    if any(buf.size == 0 for buf, n, _ in sources if n > 0):
        raise UserError("a model buffer is still empty: every rollout row so far was NaN or infinite (the ensemble "
                        "diverged); check the dataset for huge values or lower --dynamics-lr")  # fmt: skip
    parts = [buf.sample(n) for buf, n, _ in sources if n > 0]
    keys = [key for _, n, key in sources if n > 0]
    batch = {k: torch.cat([p[k] for p in parts]) for k in ("obs", "act", "next_obs", "done")}
    batch["rew"] = torch.cat([p[key] for p, key in zip(parts, keys)])
    batch["done"], batch["rew"] = batch["done"][:, 0], batch["rew"][:, 0]
    return batch


# --- end ---


def rollout_metrics(start: dict, ro: dict, b: int) -> dict[str, torch.Tensor]:
    """The epoch's rollouts: u, the model's rewards, mean length, dropped rows, and how far the
    policy's first action lies from D's action in the same state."""
    return {
        "rollout/u": ro["u"].mean(),
        "rollout/reward": ro["rew"].mean(),
        "rollout/length": len(ro["u"]) / b,
        "rollout/nonfinite_rows": ro["nonfinite"],
        "rollout/action_distance": (ro["first_act"] - start["act"]).norm(dim=-1).mean(),
    }


def main(args: Args) -> dict:
    run = Run(args, apply_presets)  # flags checked, dataset resolved, presets filled, seeded; the run directory
    device = run.device  # run.args is args, resumed or filled in by the presets
    data, max_action = run.load_data()  # D as tensors on the device, checked against the evaluation env
    check_memory(128 * args.batch_size * data["obs"].shape[1], f"--batch-size {args.batch_size}", device)  # a batch
    obs_dim, act_dim = data["obs"].shape[1], data["act"].shape[1]
    real = ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
    real.add(data)
    obs_norm = ObsNorm.of(data["obs"], args.normalize_obs)
    # each part's settings, named (the model's fit, the SAC policy)
    fit = dict(lr=args.dynamics_lr, batch_size=args.dynamics_batch_size, max_epochs=args.dynamics_max_epochs,
               patience=args.dynamics_patience, holdout_ratio=args.dynamics_holdout_ratio,
               max_holdout=args.dynamics_max_holdout)  # fmt: skip
    sac = dict(hidden_dims=args.hidden_dims, actor_lr=args.sac_actor_lr, critic_lr=args.sac_critic_lr,
               alpha_lr=args.sac_alpha_lr, gamma=args.gamma, tau=args.tau, target_entropy=args.target_entropy)  # fmt: skip

    # the model buffers, allocated before the fit: a size that cannot fit fails now, not hours later
    fields = {"obs": obs_dim, "act": act_dim, "rew": 1, "u": 1, "next_obs": obs_dim, "done": 1}
    # D_model, the model's rollouts of the last `model_retain_epochs` epochs
    buf = ReplayBuffer(args.rollout_batch_size * args.rollout_length * args.model_retain_epochs, fields, device)

    # the ensemble T̂ and its uncertainty u, fitted once on D
    dims = (obs_dim, act_dim, args.dynamics_hidden_dims, args.num_ensemble, args.num_elites, args.dynamics_bf16)
    dynamics = EnsembleDynamics(*dims).to(device)
    dyn_metrics = run.load_or_fit(dynamics, partial(fit_dynamics, dynamics, data, **fit), args.load_dynamics_path)
    terminal = termination_fn(run.task.domain)

    # the policy (SAC with a cosine-annealed actor LR)
    policy = SAC(obs_norm, act_dim, max_action, **sac).to(device)
    policy_act, policy_eval = policy.act, lambda s: policy.act(s, deterministic=True)
    actor_schedule = CosineLR(policy.actor_optim, T_max=args.sac_lr_horizon)
    n = mix_counts(args.batch_size, (args.real_ratio, 1 - args.real_ratio))
    parts = {"policy": policy, "actor_schedule": actor_schedule, "buf": buf}
    model_return = partial(model_eval, dynamics, terminal, args.uncertainty, args.gamma, device)  # eval/model_*

    def gradient_step() -> dict[str, dict[str, torch.Tensor]]:
        # one update on D ∪ D_model: D's rows with their real rewards, the model's with r̂ (no penalty)
        return {"losses": policy.update(sample_mix([(real, n[0], "rew"), (buf, n[1], "rew")]))}

    run.start(parts, dyn_metrics)  # resumes from the checkpoint, if any

    for epoch in run.epochs():
        # rollouts of the policy (stochastic SAC) from b states of D, with the model's rewards r̂
        start = real.sample(args.rollout_batch_size)
        ro = rollout(dynamics, policy_act, start["obs"], args.rollout_length, terminal, args.uncertainty)
        buf.add(ro)
        run.lap("rollout")

        gradient_steps(gradient_step, args.steps_per_epoch, run, [policy])
        actor_schedule.step()

        metrics = run.means() | rollout_metrics(start, ro, args.rollout_batch_size)
        metrics["charts/lr_actor"] = actor_schedule.get_last_lr()[0]
        if run.nonfinite is None and (epoch % args.eval_every == 0 or epoch == args.epochs):
            metrics |= run.evaluate(policy_eval, model_return)  # in the real env (D4RL score) and in the model
        run.log(metrics)  # metrics.csv, TensorBoard; a NaN loss or weight ends the run here, before a checkpoint
        if run.checkpoint_due():  # every --checkpoint-every epochs, every --checkpoint-minutes, at the end, on a signal
            run.save_checkpoint()
    return run.finish(policy.actor)


if __name__ == "__main__":
    cli(main, Args)
