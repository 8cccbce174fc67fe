"""Per-phase speed benchmark of algorithms/orpo.py on the current device, with references measured in the same run.

Every figure is the median of several repeats after a warm-up, taken with the module's own classes and functions
(the file is imported by path), on a synthetic dataset of HalfCheetah-v4 sizes (obs 17, act 6); nothing is downloaded.

    python benchmarks/speed.py                                   # ~3 minutes on a 2-core CPU, 1 thread
    python benchmarks/speed.py --compare /tmp/orpo_before.py     # a second module file, interleaved in the same run
    python benchmarks/speed.py --cuda --threads 4 --out /tmp/speed  # on a GPU; writes /tmp/speed.md and /tmp/speed.json

On a CPU use one thread (the default) when other processes run: with 2 threads OpenMP spin-waits make batched
matmuls 8-60x slower whenever the other core is busy. The 1-minute load average is reported next to the table.
"""
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.flop_counter import FlopCounterMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("matmul", "ensemble", "rollout", "updates", "epoch")


@dataclass
class Args:
    module: str = os.path.join(ROOT, "algorithms", "orpo.py")
    """the algorithm file to measure"""
    compare: Optional[str] = None
    """a second algorithm file (e.g. a copy from before a change), measured interleaved with --module in this run"""
    cuda: bool = False
    """run on a CUDA GPU when one is present"""
    threads: int = 1
    """torch CPU threads (1: immune to a busy second core)"""
    repeats: int = 5
    """repeats of the short measurements (median reported)"""
    heavy_repeats: int = 3
    """repeats of the 50k-row measurements (rollouts, bare forwards)"""
    epoch_repeats: int = 1
    """repeats of each full ORPO epoch (each one ~30-50 s on one CPU core)"""
    horizons: tuple[int, ...] = (1, 5)
    """rollout horizons h of the full epochs (h^o = h^p = h)"""
    rollout_horizon: int = 1
    """h of the rollout-throughput measurement"""
    rollout_batch_size: int = 50000
    """start states per rollout"""
    dataset_size: int = 100000
    """rows of the synthetic dataset D"""
    steps_per_epoch: int = 1000
    """SAC + TD3+BC update pairs per epoch"""
    update_steps: int = 50
    """update steps per timed repeat of the bare SAC / TD3+BC measurements"""
    bare_steps: int = 200
    """bare SAC and TD3+BC updates timed after each epoch (scaled to --steps-per-epoch) for its overhead ratio"""
    ensemble_steps: int = 20
    """training steps per timed repeat of the ensemble measurements"""
    eval_episodes: int = 10
    """evaluation episodes (one vectorised HalfCheetah-v4 env each)"""
    uncertainty: str = "ensemble_var"
    """uncertainty heuristic of the rollouts (halfcheetah-medium-v2's table type, OfflineRL-Kit's formula)"""
    clock: Literal["wall", "cpu"] = "wall"
    """wall: elapsed time; cpu: this process's CPU time (time.process_time), which a busy machine's time-slicing does not
    inflate; use it for before/after comparisons on a shared CPU with --threads 1 (never on a GPU)"""
    only: tuple[str, ...] = PHASES
    """phases to run: matmul ensemble rollout updates epoch"""
    labels: tuple[str, str] = ("module", "compare")
    """column names of --module and --compare (e.g. after before)"""
    dynamics_bf16: tuple[str, ...] = ()
    """columns (by label) whose ensembles run with the algorithms' --dynamics-bf16, e.g. `--compare algorithms/orpo.py
    --labels bf16 fp32 --dynamics-bf16 bf16` for the same file with and without it; the references stay fp32"""
    out: Optional[str] = None
    """write OUT.md and OUT.json"""
    seed: int = 0


# ---------------------------------------------------------------- helpers
def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Timer:
    """Interleaved timing: each repeat runs every variant once, so a load change hits all variants alike."""

    def __init__(self, device: torch.device, clock: str = "wall"):
        self.device, self.loads = device, []
        self.now = time.process_time if clock == "cpu" else time.perf_counter

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def once(self, fn: Callable) -> float:
        self.sync()
        t0 = self.now()
        fn()
        self.sync()
        return self.now() - t0

    def run(self, fns: dict[str, Callable], repeats: int, warmup: int = 1) -> dict[str, float]:
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(repeats):
            for k, fn in fns.items():
                times[k].append(self.once(fn))
            self.loads.append(os.getloadavg()[0])
        return {k: statistics.median(v) for k, v in times.items()}


def gflop(fn: Callable) -> float:
    """Matmul GFLOP of one call of fn (torch's flop counter: mm, bmm, addmm, baddbmm)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def adam(mod, params, lr: float) -> torch.optim.Optimizer:
    """The module's Adam (its `adam` helper when it has one)."""
    return mod.adam(params, lr) if hasattr(mod, "adam") else torch.optim.Adam(params, lr=lr)


def ensemble_params(model: nn.Module):
    """What fit_dynamics gives Adam: the parameter groups that carry the L2 term, or (older files) all parameters."""
    return model.param_groups() if hasattr(model, "param_groups") else model.parameters()


def synthetic_data(n: int, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """Random transitions of HalfCheetah-v4 sizes (D4RL-like scales: obs ~ N(0, 1), actions in [-1, 1])."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 17, generator=g)
    act = torch.rand(n, 6, generator=g) * 2 - 1
    next_obs = obs + 0.1 * torch.randn(n, 17, generator=g)
    rew = torch.randn(n, 1, generator=g)
    return {k: v.to(device) for k, v in dict(obs=obs, act=act, rew=rew, next_obs=next_obs, done=torch.zeros(n, 1)).items()}


def new_ensemble(mod, bf16: bool, device) -> nn.Module:
    """The module's ensemble at ORPO's sizes (7 × 4×200); bf16 only where asked, so older module files still load."""
    return mod.EnsembleDynamics(17, 6, (200, 200, 200, 200), 7, 5, **({"bf16": True} if bf16 else {})).to(device)


def make_dynamics(mod, data: dict, device, bf16: bool = False) -> nn.Module:
    dynamics = new_ensemble(mod, bf16, device)
    x = torch.cat([data["obs"], data["act"]], -1)
    dynamics.in_mean.copy_(x.mean(0))
    dynamics.in_std.copy_(x.std(0))
    return dynamics.requires_grad_(False)


def make_agents(mod, device):
    norm = mod.ObsNorm(torch.zeros(17), torch.ones(17))
    sac = mod.SAC(norm, 17, 6, (256, 256, 256), 1.0, 1e-4, 3e-4, 1e-4, 0.99, 0.005).to(device)
    td3 = mod.TD3BC(norm, 17, 6, (256, 256, 256), 1.0, 3e-4, 3e-4, 0.99, 0.005, 2.5, 0.2, 0.5, 2).to(device)
    return sac, td3


# ---------------------------------------------------------------- ensemble training
def module_dynamics_step(mod, model, optimizer, x, y):
    """One step of fit_dynamics' inner loop (the module's `dynamics_step` when it has one)."""
    if hasattr(mod, "dynamics_step"):
        return mod.dynamics_step(model, optimizer, x, y)
    mean, logvar = model(x)  # fit_dynamics' inline step in the original file (the L2 term in the loss)
    nll = ((mean - y) ** 2 * (-logvar).exp() + logvar).mean(dim=(1, 2)).sum()
    loss = nll + model.decay_loss() + 0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return nll


class LoopEnsemble(nn.Module):
    """Reference: 7 separate nn.Sequential models of the same sizes, called one after the other. The same math as
    `dynamics_step`, L2 term included: as Adam's per-layer weight decay (see `param_groups`)."""

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...], n: int):
        super().__init__()
        dims = [in_dim, *hidden]
        self.members = nn.ModuleList(
            nn.Sequential(*[m for i, o in zip(dims[:-1], dims[1:]) for m in (nn.Linear(i, o), nn.SiLU())], nn.Linear(dims[-1], 2 * out_dim))
            for _ in range(n))
        self.max_logvar = nn.Parameter(torch.full((1, out_dim), 0.5))
        self.min_logvar = nn.Parameter(torch.full((1, out_dim), -10.0))
        self.decays = [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4]

    def param_groups(self) -> list[dict]:
        linears = [[m for m in member if isinstance(m, nn.Linear)] for member in self.members]
        decayed = [{"params": [m.weight for m in layer], "weight_decay": wd} for wd, layer in zip(self.decays, zip(*linears))]
        return decayed + [{"params": [p for name, p in self.named_parameters() if not name.endswith(".weight")]}]

    def step(self, optimizer, x, y):
        nll = 0.0
        for member, xi, yi in zip(self.members, x, y):
            mean, logvar = member(xi).chunk(2, dim=-1)
            logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
            logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
            nll = nll + ((mean - yi) ** 2 * (-logvar).exp() + logvar).mean()
        loss = nll + 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return nll


def bench_ensemble(mods: dict, data: dict, timer: Timer, a: Args, rows: list, device) -> None:
    x_all = torch.cat([data["obs"], data["act"]], -1)
    y_all = torch.cat([data["next_obs"] - data["obs"], data["rew"]], -1)
    n = len(x_all)
    fns, flops = {}, None
    for name, mod in mods.items():
        model = new_ensemble(mod, name in a.dynamics_bf16, device)
        opt = adam(mod, ensemble_params(model), 1e-3)

        def steps(mod=mod, model=model, opt=opt):
            for _ in range(a.ensemble_steps):
                idx = torch.randint(n, (7, 256), device=device)  # a bootstrap row per member, as fit_dynamics
                module_dynamics_step(mod, model, opt, x_all[idx], y_all[idx])
        fns[name] = steps
        if flops is None:
            idx = torch.randint(n, (7, 256), device=device)
            flops = gflop(lambda: module_dynamics_step(mod, model, opt, x_all[idx], y_all[idx]))
    loop = LoopEnsemble(23, 18, (200, 200, 200, 200), 7).to(device)
    loop_opt = adam(next(iter(mods.values())), loop.param_groups(), 1e-3)

    def loop_steps():
        for _ in range(a.ensemble_steps):
            idx = torch.randint(n, (7, 256), device=device)
            loop.step(loop_opt, x_all[idx], y_all[idx])
    t = timer.run({**fns, "reference": loop_steps}, a.repeats)
    ref = a.ensemble_steps / t["reference"]
    rows.append(row("ensemble training (7 × 4×200, batch 256)", "steps/s", {k: a.ensemble_steps / t[k] for k in mods}, flops,
                    ref=ref, higher=True, note="fit_dynamics' step: forward, NLL + decay, backward, Adam"))
    rows.append(row("  reference: loop over 7 nn.Sequential", "steps/s", {k: ref for k in mods}, flops, higher=True))


# ---------------------------------------------------------------- rollouts
def naive_rollout(dynamics, actor: Callable, start: np.ndarray, horizon: int, uncertainty: str, device,
                  buffer: dict[str, np.ndarray], elites: np.ndarray) -> int:
    """Reference (OfflineRL-Kit style): the model in torch on the whole batch; actions, sampling, termination,
    uncertainty and the buffer in numpy, with a host round trip every step."""
    obs, ptr = start, 0
    for _ in range(horizon):
        act = actor(torch.as_tensor(obs, device=device)).cpu().numpy()
        with torch.no_grad():
            mean, logvar = dynamics(torch.as_tensor(np.concatenate([obs, act], -1), device=device))
        mean, logvar = mean.cpu().numpy(), logvar.cpu().numpy()
        mean[..., :-1] += obs
        std = np.sqrt(np.exp(logvar))
        samples = (mean + np.random.normal(size=mean.shape) * std).astype(np.float32)
        pick = np.random.choice(elites, size=len(obs))
        samples = samples[pick, np.arange(len(obs))]
        next_obs, rew = samples[:, :-1], samples[:, -1:]
        done = ~np.isfinite(next_obs).all(-1, keepdims=True)  # halfcheetah: only a diverged state ends a row
        if uncertainty == "max_aleatoric":
            u = np.amax(np.linalg.norm(std, axis=2), axis=0)[:, None]
        elif uncertainty.startswith("ensemble"):  # OfflineRL-Kit: the members' next-state means only
            u = mean[..., :-1].var(0).mean(-1, keepdims=True)
            u = np.sqrt(u) if uncertainty == "ensemble_std" else u
        else:  # the appendix's mixture variance over s' and r
            u = (mean.var(0) + (std**2).mean(0)).sum(-1, keepdims=True)
            u = np.sqrt(u) if uncertainty == "mixture_std" else u
        m = len(obs)
        for k, v in dict(obs=obs, act=act, rew=rew, u=u, rew_o=rew + 0.015 * u, rew_p=rew - 5.0 * u, next_obs=next_obs, done=done).items():
            buffer[k][ptr : ptr + m] = v
        ptr += m
        obs = next_obs[~done[:, 0]]
        if len(obs) == 0:
            break
    return ptr


def fields():
    return {"obs": 17, "act": 6, "rew": 1, "u": 1, "rew_o": 1, "rew_p": 1, "next_obs": 17, "done": 1}


def bench_rollout(mods: dict, data: dict, timer: Timer, a: Args, rows: list, device) -> None:
    h, b = a.rollout_horizon, a.rollout_batch_size
    fns, counts, flops = {}, {}, None
    for name, mod in mods.items():
        dynamics, (sac, _) = make_dynamics(mod, data, device, name in a.dynamics_bf16), make_agents(mod, device)
        real = mod.ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
        real.add(data)
        buf = mod.ReplayBuffer(b * h, fields(), device)
        terminal = mod.termination_fn("halfcheetah")

        def one(b=b, mod=mod, dynamics=dynamics, sac=sac, real=real, buf=buf, terminal=terminal, name=name):
            out = mod.rollout(dynamics, sac.act, real.sample(b)["obs"], h, terminal, a.uncertainty)
            out["rew_o"], out["rew_p"] = mod.relabel(out["rew"], out["u"], 0.015, 5.0)
            buf.add(out)
            counts[name] = len(out["obs"])
        fns[name] = one
        if flops is None:  # matmul GFLOP per transition, counted on 1000 start states
            small = real.sample(1000)["obs"]
            flops = gflop(lambda: mod.rollout(dynamics, sac.act, small, 1, terminal, a.uncertainty)) / 1000
    mod = next(iter(mods.values()))
    dynamics, (sac, _) = make_dynamics(mod, data, device), make_agents(mod, device)
    buffer = {k: np.zeros((b * h, d), np.float32) for k, d in fields().items()}
    obs_np = data["obs"].cpu().numpy()
    elites = dynamics.elites.cpu().numpy()
    rng = np.random.default_rng(a.seed)

    def reference(b=b):
        start = obs_np[rng.integers(len(obs_np), size=b)]  # OfflineRL-Kit samples start states in numpy too
        counts["reference"] = naive_rollout(dynamics, sac.act, start, h, a.uncertainty, device, buffer, elites)
    fns["reference"] = reference
    for fn in fns.values():  # warm-up on 2048 start states
        fn(b=min(2048, b))
    t = timer.run(fns, a.heavy_repeats, warmup=0)
    ref = counts["reference"] / t["reference"]
    rate = {k: counts[k] / t[k] for k in mods}  # counts: the last (full-size) repeat
    rows.append(row(f"model rollout, {b // 1000}k starts × h={h}", "transitions/s", rate, flops, ref=ref, higher=True,
                    note="rollout + relabel + buffer add, with uncertainty"))
    rows.append(row("  reference: one call, numpy every step", "transitions/s", {k: ref for k in mods}, flops, higher=True))


# ---------------------------------------------------------------- updates and bare forwards
def batches(data: dict, n: int, k: int, device) -> list[dict]:
    out = []
    for _ in range(k):
        idx = torch.randint(len(data["obs"]), (n,), device=device)
        out.append({"obs": data["obs"][idx], "act": data["act"][idx], "next_obs": data["next_obs"][idx],
                    "rew": data["rew"][idx, 0], "done": data["done"][idx, 0]})
    return out


def update_flops(mods: dict, pre: list) -> dict[str, float]:
    """Matmul GFLOP per SAC and per TD3+BC update (TD3+BC: the mean of a critic-only and a critic + actor step); the
    smallest count over the variants, i.e. the gradient math that is needed."""
    flops = {}
    for algo in ("sac", "td3"):
        counts = []
        for mod in mods.values():
            agent = dict(zip(("sac", "td3"), make_agents(mod, pre[0]["obs"].device)))[algo]
            counts.append(gflop(lambda: [agent.update(pre[i]) for i in range(2)]) / 2)
        flops[algo] = min(counts)
    return flops


def bare_forward(dynamics, x: torch.Tensor, chunked: bool) -> None:
    with torch.no_grad():
        for c in x.split(1024 if chunked else len(x)):
            dynamics(c)


def bench_updates(mods: dict, data: dict, timer: Timer, a: Args, rows: list, device) -> None:
    """Bare SAC and TD3+BC updates on pre-sampled batches, and the bare ensemble forward on b rows."""
    pre = batches(data, 256, 16, device)
    fns = {}
    for name, mod in mods.items():
        for algo, agent in zip(("sac", "td3"), make_agents(mod, device)):
            def steps(agent=agent):
                for i in range(a.update_steps):
                    agent.update(pre[i % len(pre)])
            fns[(name, algo)] = steps
    t = timer.run(fns, a.repeats)
    flops = update_flops(mods, pre)
    for algo, label in (("sac", "SAC"), ("td3", "TD3+BC")):
        rows.append(row(f"{label} update (3×256, batch 256)", "steps/s", {name: a.update_steps / t[(name, algo)] for name in mods},
                        flops[algo], higher=True, note="pre-sampled batches"))
    # the ensemble forward alone on b rows (network only: no sampling, no uncertainty), in one call and in 1024-row chunks
    dynamics = make_dynamics(next(iter(mods.values())), data, device)
    x = torch.cat([data["obs"], data["act"]], -1)[: a.rollout_batch_size]
    bare_forward(dynamics, x[:2048], True)
    tf = timer.run({c: (lambda c=c: bare_forward(dynamics, x, c == "chunks")) for c in ("one call", "chunks")}, a.heavy_repeats, warmup=0)
    fflops = gflop(lambda: dynamics(x[:1000])) / 1000 * len(x)
    for c, label in (("one call", "one call"), ("chunks", "1024-row chunks")):
        rows.append(row(f"bare ensemble forward, {len(x) // 1000}k rows, {label}", "s", {k: tf[c] for k in mods}, fflops, higher=False,
                        note="the network alone: no sampling, uncertainty or policy"))


# ---------------------------------------------------------------- the ORPO epoch, as main() runs it
class EpochState:
    """Everything main() builds before its epoch loop, on the synthetic dataset (λ and mix: halfcheetah-medium-v2)."""

    def __init__(self, mod, data: dict, h: int, a: Args, device, envs, task, bf16: bool):
        self.mod, self.h, self.a, self.device, self.envs, self.task = mod, h, a, device, envs, task
        self.args = mod.Args(uncertainty=a.uncertainty, gamma=0.99)  # what model_eval reads
        self.dynamics = make_dynamics(mod, data, device, bf16)
        self.terminal = mod.termination_fn("halfcheetah")
        self.real = mod.ReplayBuffer(len(data["obs"]), {k: v.shape[1] for k, v in data.items()}, device)
        self.real.add(data)
        self.sac, self.td3 = make_agents(mod, device)
        self.schedule = torch.optim.lr_scheduler.CosineAnnealingLR(self.sac.actor_optim, T_max=1000)
        b = a.rollout_batch_size
        self.buf_o = mod.ReplayBuffer(b * h * 5, fields(), device)
        self.buf_p = mod.ReplayBuffer(b * h * 5, fields(), device)
        self.n_o = mod.mix_counts(256, (0.05, 0.95))
        self.n_p = mod.mix_counts(256, (0.05, 0.45, 0.5))  # D, π^p's own D^p_πp, π^o's D^p_πo (the official order)
        self.lambda_o, self.lambda_p, self.epoch = 0.015, 5.92, 0

    def run(self, steps: int, b: int, evaluate: bool, timer: Timer) -> dict[str, float]:
        """One epoch of main()'s loop (without the logger's file writes and the checkpoint every 100 epochs)."""
        mod, s, real, buf_o, buf_p, n_o, n_p = self.mod, self, self.real, self.buf_o, self.buf_p, self.n_o, self.n_p
        self.epoch += 1
        timer.sync()
        t_epoch = timer.now()
        start = real.sample(b)
        ro = mod.rollout(s.dynamics, s.sac.act, start["obs"], s.h, s.terminal, s.a.uncertainty)
        ro["rew_o"], ro["rew_p"] = mod.relabel(ro["rew"], ro["u"], s.lambda_o, s.lambda_p)
        buf_o.add(ro)
        rp = mod.rollout(s.dynamics, lambda x: s.td3.act(x, 0.1), start["obs"], s.h, s.terminal, s.a.uncertainty)
        rp["rew_o"], rp["rew_p"] = mod.relabel(rp["rew"], rp["u"], s.lambda_o, s.lambda_p)
        buf_p.add(rp)
        timer.sync()
        t_rollout = timer.now() - t_epoch
        sums, counts = {}, {}
        for _ in range(steps):
            stats_o = s.sac.update(mod.sample_mix([(real, n_o[0], "rew"), (buf_o, n_o[1], "rew_o")]))
            stats_p = s.td3.update(mod.sample_mix([(real, n_p[0], "rew"), (buf_p, n_p[1], "rew_p"), (buf_o, n_p[2], "rew_p")]))
            for k, v in [*((f"rollout_policy/{k}", v) for k, v in stats_o.items()), *((f"losses/{k}", v) for k, v in stats_p.items())]:
                sums[k], counts[k] = sums.get(k, 0) + v, counts.get(k, 0) + 1
        s.schedule.step()
        metrics = {
            "rollout/u_optimistic": ro["u"].mean(), "rollout/u_pessimistic": rp["u"].mean(),
            "rollout/reward_optimistic": ro["rew"].mean(), "rollout/reward_pessimistic": rp["rew"].mean(),
            "rollout/reward_o_optimistic": ro["rew_o"].mean(), "rollout/reward_p_optimistic": ro["rew_p"].mean(),
            "rollout/reward_p_pessimistic": rp["rew_p"].mean(),
            "rollout/length_optimistic": len(ro["u"]) / b, "rollout/length_pessimistic": len(rp["u"]) / b,
            "rollout/action_distance_optimistic": (ro["first_act"] - start["act"]).norm(dim=-1).mean(),
            "rollout/action_distance_pessimistic": (rp["first_act"] - start["act"]).norm(dim=-1).mean(),
        }
        metrics = {**{k: float(v) / counts[k] for k, v in sums.items()}, **{k: float(v) for k, v in metrics.items()}}
        t_train = timer.now() - t_epoch
        out = {"rollout": t_rollout, "epoch": t_train, "rows": len(ro["u"]) + len(rp["u"])}
        if evaluate:
            t_eval = timer.now()
            returns, first_obs = mod.evaluate(s.td3.actor, s.envs, s.task, 1000 * self.epoch, self.device)
            metrics.update(mod.eval_metrics(s.task, returns))
            t_env = timer.now() - t_eval
            metrics.update(mod.model_eval(s.dynamics, s.td3.actor, first_obs, s.envs, s.terminal, s.args, self.device))
            out.update(eval=timer.now() - t_eval, eval_env=t_env)
        return out


def bench_epoch(mods: dict, data: dict, timer: Timer, a: Args, rows: list, device) -> None:
    """Full epochs, each followed by its bare work (the same gradient math without the epoch's plumbing), so that the
    overhead ratio compares two measurements taken under the same machine load."""
    mod0 = next(iter(mods.values()))
    task = mod0.Task("synthetic", "HalfCheetah-v4", "halfcheetah", "env", -280.178953, 12135.0)
    envs = mod0.make_eval_envs(task, a.eval_episodes)
    pre = batches(data, 256, 16, device)
    flops = update_flops(mods, pre)
    x = torch.cat([data["obs"], data["act"]], -1)[: a.rollout_batch_size]
    forward_flops = gflop(lambda: make_dynamics(mod0, data, device)(x[:1000])) / 1000
    chunked = device.type == "cpu"  # the faster bare forward on this device (see the bare forward rows)
    scale = a.steps_per_epoch / a.bare_steps
    for h in a.horizons:
        states = {name: EpochState(mod, data, h, a, device, envs, task, name in a.dynamics_bf16) for name, mod in mods.items()}
        bare_agents = {name: make_agents(mod, device) for name, mod in mods.items()}  # bare updates leave the epoch's agents alone
        for s in states.values():  # warm-up: a short epoch with evaluation
            s.run(20, 2048, True, timer)
        runs: dict[str, list[dict]] = {name: [] for name in mods}
        for _ in range(a.epoch_repeats):
            for name, s in states.items():
                r = s.run(a.steps_per_epoch, a.rollout_batch_size, True, timer)
                sac, td3 = bare_agents[name]
                r["sac"] = timer.once(lambda: [sac.update(pre[i % len(pre)]) for i in range(a.bare_steps)]) * scale
                r["td3"] = timer.once(lambda: [td3.update(pre[i % len(pre)]) for i in range(a.bare_steps)]) * scale
                r["forward"] = timer.once(lambda: bare_forward(s.dynamics, x, chunked)) * r["rows"] / len(x)
                r["bare"] = r["sac"] + r["td3"] + r["forward"]
                runs[name].append(r)
            timer.loads.append(os.getloadavg()[0])
        med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
        epoch_flops = med[next(iter(mods))]["rows"] * forward_flops + a.steps_per_epoch * (flops["sac"] + flops["td3"])
        n = a.steps_per_epoch
        rows.append(row(f"ORPO epoch h={h}, without evaluation", "s", {k: v["epoch"] for k, v in med.items()}, epoch_flops, higher=False,
                        note=f"{n} SAC + {n} TD3+BC updates with batch mixing, 2 rollouts of {a.rollout_batch_size // 1000}k starts"))
        rows.append(row("  of which rollouts", "s", {k: v["rollout"] for k, v in med.items()}, None, higher=False))
        rows.append(row(f"  evaluation ({a.eval_episodes} episodes + model_eval)", "s", {k: v["eval"] for k, v in med.items()}, None,
                        higher=False, note="of which env episodes: " + ", ".join(f"{v['eval_env']:.2f} s" for v in med.values())))
        rows.append(row(f"ORPO epoch h={h}, with evaluation", "s", {k: v["epoch"] + v["eval"] for k, v in med.items()}, None, higher=False))
        rows.append(row(f"  bare work h={h}", "s", {k: v["bare"] for k, v in med.items()}, epoch_flops, higher=False,
                        note=f"{n} bare SAC + {n} bare TD3+BC updates (timed as {a.bare_steps} each) + the rollouts' "
                             f"{'chunked ' if chunked else ''}ensemble forwards, right after each epoch"))
        rows.append(row(f"overhead ratio h={h} (epoch ÷ bare work)", "×", {k: med[k]["epoch"] / med[k]["bare"] for k in mods}, None,
                        higher=False, note="target ≤ 1.2"))
        del states
    envs.close()


# ---------------------------------------------------------------- table
def row(name: str, unit: str, values: dict, gflop_per_unit: Optional[float], ref: Optional[float] = None, higher: bool = True,
        note: str = "") -> dict:
    """values in `unit`; gflop_per_unit: matmul GFLOP per step/transition (rates) or per run (seconds)."""
    return {"name": name, "unit": unit, "values": values, "gflop": gflop_per_unit, "ref": ref, "higher": higher, "note": note}


def gflops(r: dict, v: float) -> Optional[float]:
    if r["gflop"] is None:
        return None
    return r["gflop"] * v if r["higher"] else r["gflop"] / v


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def render(rows: list, names: list[str], peak: Optional[float]) -> str:
    head = ["measurement", "unit", *names]
    if len(names) == 2:
        head.append(f"{names[0]} vs {names[1]}")
    head += ["vs reference", "GFLOP/s", "% of matmul peak", "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        vals = [r["values"].get(n) for n in names]
        cells = [r["name"], r["unit"], *[fmt(v) if v is not None else "" for v in vals]]
        if len(names) == 2:
            a, b = vals
            cells.append(f"{(a / b if r['higher'] else b / a):.2f}× faster" if a and b and a != b and r["unit"] != "×" else "")
        g = [gflops(r, v) for v in vals]
        cells.append(" / ".join(f"{v / r['ref']:.2f}×" for v in vals) if r["ref"] else "")
        cells.append(" / ".join(f"{x:.1f}" for x in g) if g[0] is not None else "")
        cells.append(" / ".join(f"{100 * x / peak:.0f} %" for x in g) if g[0] is not None and peak else "")
        cells.append(r["note"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check(a: Args) -> None:
    """Every count at least 1, the files and the heuristic known: one line per problem, exit 2, before any work."""
    problems = [f"--{k.replace('_', '-')} {v}: must be at least 1" for k, v in vars(a).items()
                if k != "seed" and ((isinstance(v, int) and not isinstance(v, bool) and v < 1)
                                    or (k == "horizons" and (not v or min(v) < 1)))]
    problems += [f"--{k} {path}: no such file" for k, path in (("module", a.module), ("compare", a.compare)) if path and not os.path.isfile(path)]
    if a.uncertainty not in ("max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std"):
        problems.append(f"--uncertainty {a.uncertainty}: use max_aleatoric, ensemble_var, ensemble_std, mixture_var or mixture_std")
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        sys.exit(2)


def main(a: Args) -> dict:
    check(a)
    torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.cuda and torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and a.clock == "cpu":
        sys.exit("error: --clock cpu measures host CPU time, not GPU work; use the default wall clock with --cuda")
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    mods = {a.labels[0]: load_module(a.module, "orpo_bench_module")}
    if a.compare:
        mods[a.labels[1]] = load_module(a.compare, "orpo_bench_compare")
    names = list(mods)
    if set(a.dynamics_bf16) - set(names):
        sys.exit(f"error: --dynamics-bf16 names columns; this run's columns are {', '.join(names)} (see --labels)")
    timer, rows, t_start = Timer(device), [], time.time()
    load_start = os.getloadavg()[0]
    data = synthetic_data(a.dataset_size, device, a.seed)
    peak = None
    if "matmul" in a.only:
        m = torch.randn(2048, 2048, device=device)
        t = timer.run({"mm": lambda: m @ m}, a.repeats)["mm"]
        peak = 2 * 2048**3 / t / 1e9
        rows.append(row("fp32 matmul 2048×2048 (machine limit)", "GFLOP/s", {k: peak for k in names}, None, note="median, this device and thread count"))
        if a.dynamics_bf16:  # the limit --dynamics-bf16 works against ("% of matmul peak" stays relative to fp32)
            m16 = m.bfloat16()
            t16 = timer.run({"mm": lambda: m16 @ m16}, a.repeats)["mm"]
            rows.append(row("bf16 matmul 2048×2048", "GFLOP/s", {k: 2 * 2048**3 / t16 / 1e9 for k in names}, None, note="median"))
    if "ensemble" in a.only:
        bench_ensemble(mods, data, timer, a, rows, device)
    if "rollout" in a.only:
        bench_rollout(mods, data, timer, a, rows, device)
    if "updates" in a.only:
        bench_updates(mods, data, timer, a, rows, device)
    if "epoch" in a.only:
        bench_epoch(mods, data, timer, a, rows, device)
    labels = {a.labels[0]: a.module, a.labels[1]: a.compare or ""}
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(), "cpu": cpu_model(),
        "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
        "load_1min": {"start": load_start, "min": min(timer.loads, default=load_start), "max": max(timer.loads, default=load_start),
                      "end": os.getloadavg()[0]},
        "seconds": time.time() - t_start, "columns": labels, "args": asdict(a),
    }
    load = meta["load_1min"]
    header = (f"device: {meta['device']} ({device.type}), {meta['cores']} cores, torch {meta['torch']}, {meta['threads']} thread(s); "
              f"1-min load average {load['start']:.2f} at start, {load['min']:.2f}–{load['max']:.2f} during, {load['end']:.2f} at end; "
              f"{meta['seconds']:.0f} s\ncolumns: " + ", ".join(f"{k} = {v}{' --dynamics-bf16' * (k in a.dynamics_bf16)}"
                                                              for k, v in labels.items() if v)
              + f"\nmedians of {a.repeats} (short), {a.heavy_repeats} (50k rows) and {a.epoch_repeats} (epochs) repeats after a warm-up")
    table = render(rows, names, peak)
    print(header + "\n\n" + table)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out + ".md", "w") as f:
            f.write(header + "\n\n" + table + "\n")
        with open(a.out + ".json", "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=2)
    return {"meta": meta, "rows": rows}


if __name__ == "__main__":
    main(tyro.cli(Args))
