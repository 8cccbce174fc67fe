# RiskWorld: the toy task of ORPO (Zhai et al., AAAI 2024), Figure 2 and appendix "Toy Example" / Figure 9.
# A point in the square [-3, 3]² moves by its action a ∈ [-1, 1]² (clipped at the border) for 10 steps; the reward
# is the SIGNED distance of the new state to the line y = -x, (x + y)/√2 (the paper prints |x + y|/√2 in both
# cases, a typo: its text and the authors' public toy code use the sign). The offline dataset holds only states
# in the band |x + y| < 0.25 with uniform random actions, so the high-reward upper-right corner is out of
# distribution. The paper's claim: MOPO (SAC in the P-MDP) stays near the data (average return 7.3), ORPO's
# optimistic rollouts let its output policy reach the corner (35.3). Importing this file registers RiskWorld-v0.
# Running it trains ORPO and MOPO with the algorithm files' own `main` on the toy dataset (MOPO reuses the same
# seed's ensemble), evaluates the exported policies in the real env and writes docs/toy_figure2.png,
# docs/toy_figure9.png and docs/toy_results.json (with `reproduced`: whether the claim held on every seed).
# Usage: python toy/riskworld.py                  (3 seeds; measured 4 minutes on 2 shared CPU cores)
#        python toy/riskworld.py --lambda-p 1 --out-dir docs/toy_lambda_p1
#        python toy/riskworld.py --quick          (1 seed, 1 tiny epoch: a smoke test)
import dataclasses
import importlib.util
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import h5py
import numpy as np
from gymnasium import spaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_ID = "RiskWorld-v0"
BOUND = 3.0  # the state space is [-BOUND, BOUND]²
HALF_WIDTH = 0.25  # start states and data lie between y = -x - 0.25 and y = -x + 0.25
EPISODE_STEPS = 10


def reward_fn(next_obs: np.ndarray) -> np.ndarray:
    """r = (x + y)/√2 of the new state: the signed distance to y = -x, positive on the upper-right side."""
    next_obs = np.asarray(next_obs, dtype=np.float64)
    return (next_obs[..., 0] + next_obs[..., 1]) / np.sqrt(2.0)


def sample_band(rng: np.random.Generator, n: int) -> np.ndarray:
    """n states uniform in the part of the band |x + y| < 0.25 that lies inside the square (rejection sampling)."""
    out = np.empty((0, 2))
    while len(out) < n:
        xy = rng.uniform(-BOUND, BOUND, size=(max(16, 16 * (n - len(out))), 2))
        out = np.concatenate([out, xy[np.abs(xy.sum(1)) < HALF_WIDTH]])
    return out[:n].astype(np.float32)


class RiskWorldEnv(gym.Env):
    """s = (x, y) ∈ [-3, 3]², a ∈ [-1, 1]², s' = clip(s + a, -3, 3), r = (x' + y')/√2; never terminates."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(-BOUND, BOUND, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.state = np.zeros(2, dtype=np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.state = sample_band(self.np_random, 1)[0]
        return self.state.copy(), {}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        self.state = np.clip(self.state + action, -BOUND, BOUND).astype(np.float32)
        return self.state.copy(), float(reward_fn(self.state)), False, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=RiskWorldEnv, max_episode_steps=EPISODE_STEPS)


def make_dataset(n: int = 10_000, seed: int = 0) -> dict[str, np.ndarray]:
    """The paper's recipe: reset to a random band state, take one uniform random action, reset again.

    Every row is a one-step episode: s in the band, s' = clip(s + a), r = r(s'); terminals and timeouts are
    False (the algorithms' loader drops timeout rows, and these single transitions are not timeouts).
    """
    rng = np.random.default_rng(seed)
    obs = sample_band(rng, n)
    act = rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32)
    next_obs = np.clip(obs + act, -BOUND, BOUND).astype(np.float32)
    return {"observations": obs, "actions": act, "rewards": reward_fn(next_obs).astype(np.float32),
            "next_observations": next_obs, "terminals": np.zeros(n, dtype=bool), "timeouts": np.zeros(n, dtype=bool)}


def write_dataset(path: str, data: dict[str, np.ndarray]) -> str:
    """D4RL's HDF5 layout, readable by the algorithms' --dataset-path (eval env and reward from the attrs)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f.create_dataset(k, data=v)
        f.attrs["env_id"] = ENV_ID
        f.attrs["reward_fn"] = "env"
    return path


# ----------------------------------------------------------------------------------------------- experiment
@dataclass
class ToyArgs:
    seeds: tuple[int, ...] = (1, 2, 3)
    """training seeds; every seed fits its own ensemble (in the ORPO run) and MOPO reuses it"""
    epochs: int = 10
    """epochs of each algorithm (the paper: 10)"""
    steps_per_epoch: int = 1000
    """gradient steps per epoch (the paper: "10 epochs containing 10000 gradient steps", read as 10 × 1000; the
    authors' public toy script: 100 epochs × 1000)"""
    rollout_batch_size: int = 2000
    """model rollouts started per epoch from dataset states"""
    rollout_length: int = 5
    """h^p = h^o: model rollout horizon (5: the authors' toy scripts and the paper's other tasks)"""
    lambda_p: float = 100.0
    """λp, the P-MDP penalty of both methods (the paper: 100)"""
    lambda_o: float = 1.0
    """λo, ORPO's O-MDP bonus (the paper: 1; it prints "λp = 1 for ORPO")"""
    uncertainty: Literal["ensemble_std", "ensemble_var", "max_aleatoric"] = "ensemble_std"
    """u(s, a) of both methods: ensemble_std (the paper's toy), ensemble_var or max_aleatoric"""
    hidden_dims: tuple[int, ...] = (64, 64)
    """hidden sizes of the actors and critics"""
    dynamics_hidden_dims: tuple[int, ...] = (64, 64, 64)
    """hidden sizes of each dynamics model"""
    num_ensemble: int = 7
    """dynamics models N"""
    num_elites: int = 5
    """elite models used in rollouts"""
    dynamics_max_epochs: Optional[int] = 50
    """cap on the ensemble's training epochs (early stopping may end it sooner)"""
    batch_size: int = 256
    """batch size of every policy update"""
    dataset_size: int = 10_000
    """transitions in the offline dataset (the paper: 10,000)"""
    dataset_seed: int = 0
    """seed of the offline dataset (one dataset for all training seeds)"""
    eval_steps: int = 5000
    """steps of each trained policy in the real env (the paper: 5000), for the return and Figure 9"""
    trajectories: int = 5
    """episodes drawn in Figure 2 (the paper: 5)"""
    out_dir: str = os.path.join(ROOT, "docs")
    """where toy_figure2.png, toy_figure9.png and toy_results.json go"""
    runs_dir: Optional[str] = None
    """run directories of the algorithms (default: a temporary folder, deleted at the end)"""
    quick: bool = False
    """a smoke test: 1 seed, 1 epoch of 50 steps, tiny networks and rollouts, 1000 transitions"""


QUICK = dict(seeds=(1,), epochs=1, steps_per_epoch=50, rollout_batch_size=100, hidden_dims=(16, 16),
             dynamics_hidden_dims=(16, 16), num_ensemble=3, num_elites=2, dynamics_max_epochs=2, batch_size=64,
             dataset_size=1000, eval_steps=200)


def load_module(name: str):
    """An algorithm file imported by path, as tests/conftest.py does (the files have no import side effects)."""
    spec = importlib.util.spec_from_file_location(f"toy_{name}", os.path.join(ROOT, "algorithms", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def algo_args(module, args: ToyArgs, dataset_path: str, runs_dir: str, seed: int, **extra):
    """The module's own Args with the toy settings; every name must be a field of that Args."""
    settings = dict(
        seed=seed, cuda=False, runs_dir=runs_dir, dataset_path=dataset_path, eval_env=ENV_ID, epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch, batch_size=args.batch_size, eval_episodes=5, checkpoint_every=10**9,
        num_ensemble=args.num_ensemble, num_elites=args.num_elites, dynamics_hidden_dims=args.dynamics_hidden_dims,
        dynamics_max_epochs=args.dynamics_max_epochs, uncertainty=args.uncertainty, rollout_batch_size=args.rollout_batch_size,
        lambda_p=args.lambda_p, rollout_length=args.rollout_length, hidden_dims=args.hidden_dims, normalize_obs=False,
        **extra)
    fields = {f.name for f in dataclasses.fields(module.Args)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise SystemExit(f"{module.__name__}.Args has no field(s) {unknown}; update toy/riskworld.py")
    return module.Args(**settings)


def code_versions() -> dict[str, str]:
    """The git commit and the sha256 of the algorithm files the numbers came from (they may differ from the commit)."""
    import hashlib
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        head = ""
    out = {"git_head": head or "unknown"}
    for name in ("orpo", "mopo"):
        with open(os.path.join(ROOT, "algorithms", f"{name}.py"), "rb") as f:
            out[f"{name}.py_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return out


def roll(policy, n_steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The policy's deterministic actions in the real env for n_steps (whole episodes of 10 steps).

    Returns the visited states [episodes, 11, 2] (start state included) and each episode's return.
    """
    import torch

    env = gym.make(ENV_ID)
    n_episodes = max(1, n_steps // EPISODE_STEPS)
    states, returns = np.zeros((n_episodes, EPISODE_STEPS + 1, 2), dtype=np.float32), np.zeros(n_episodes)
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed + ep)
        states[ep, 0] = obs
        for t in range(EPISODE_STEPS):
            action = policy(torch.as_tensor(obs[None], dtype=torch.float32))[0].numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            states[ep, t + 1], returns[ep] = obs, returns[ep] + reward
            if terminated or truncated:
                break
    assert truncated and not terminated, "RiskWorld episodes end by the 10-step time limit only"
    env.close()
    return states, returns


def uncertainty_grid(module, dynamics_path: str, args: ToyArgs, n: int = 61, k: int = 5):
    """u(s, a) of a run's saved ensemble (the module's own EnsembleDynamics.step) on an n×n grid of states,
    averaged over a k×k grid of actions covering [-1, 1]²."""
    import torch

    model = module.EnsembleDynamics(2, 2, args.dynamics_hidden_dims, args.num_ensemble, args.num_elites)
    model.load_state_dict(torch.load(dynamics_path, map_location="cpu")["model"])
    xs, acts = np.linspace(-BOUND, BOUND, n), np.linspace(-1, 1, k)
    gx, gy = np.meshgrid(xs, xs)  # row i: y = xs[i]; column j: x = xs[j]
    ax, ay = np.meshgrid(acts, acts)
    obs = torch.as_tensor(np.stack([gx.ravel(), gy.ravel()], 1), dtype=torch.float32).repeat_interleave(k * k, 0)
    act = torch.as_tensor(np.tile(np.stack([ax.ravel(), ay.ravel()], 1), (n * n, 1)), dtype=torch.float32)
    u = model.step(obs, act, args.uncertainty)[2]
    return xs, u.reshape(n * n, k * k).mean(1).reshape(n, n).numpy()


def u_summary(u_grid) -> dict[str, float]:
    """u of the first seed's ensemble (averaged over actions) at a few places: the data band vs the corners."""
    xs, u = u_grid
    gx, gy = np.meshgrid(xs, xs)
    at = lambda x, y: float(u[np.abs(xs - y).argmin(), np.abs(xs - x).argmin()])  # noqa: E731
    return {"band_mean": float(u[np.abs(gx + gy) < HALF_WIDTH].mean()), "at_0_0": at(0, 0), "at_1.5_1.5": at(1.5, 1.5),
            "at_3_3": at(3, 3), "at_-3_-3": at(-3, -3), "max": float(u.max())}


def draw_scene(ax, title: str, band_color: str = "darkblue"):
    import matplotlib.patches as patches

    line = np.linspace(-BOUND, BOUND, 2)
    for c in (-HALF_WIDTH, HALF_WIDTH):
        ax.plot(line, -line + c, color=band_color, lw=1)
    ax.add_patch(patches.Rectangle((-BOUND, -BOUND), 2 * BOUND, 2 * BOUND, lw=1.5, edgecolor="black", facecolor="none"))
    ax.set_xlim(-BOUND - 0.1, BOUND + 0.1)
    ax.set_ylim(-BOUND - 0.1, BOUND + 0.1)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)


def plot_figures(args: ToyArgs, data: dict, u_grid, trajectories: dict, visited: dict, returns: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = args.seeds[0]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.6))
    xs = np.linspace(-BOUND, BOUND, 121)
    gx, gy = np.meshgrid(xs, xs)
    im = axes[0].imshow(reward_fn(np.stack([gx, gy], -1)), origin="lower", extent=[-BOUND, BOUND] * 2, cmap="RdYlGn")
    fig.colorbar(im, ax=axes[0], fraction=0.046, label="reward (x + y)/√2")
    obs = data["observations"]
    axes[0].scatter(obs[:, 0], obs[:, 1], s=1, color="tab:blue", alpha=0.3, label=f"dataset states ({len(obs)})")
    axes[0].legend(loc="lower left", fontsize=8)
    draw_scene(axes[0], "(a) RiskWorld: reward and dataset states")
    u_xs, u = u_grid
    im = axes[1].imshow(u, origin="lower", extent=[u_xs[0], u_xs[-1]] * 2, cmap="hot")
    fig.colorbar(im, ax=axes[1], fraction=0.046, label=f"u ({args.uncertainty})")
    draw_scene(axes[1], f"(b) uncertainty of the learned model (seed {seed})", band_color="cyan")
    for ax, algo, tag in ((axes[2], "mopo", "(c) MOPO (SAC in the P-MDP)"), (axes[3], "orpo", "(d) ORPO")):
        for i, traj in enumerate(trajectories[algo]):
            ax.plot(traj[:, 0], traj[:, 1], "-o", ms=3, lw=1.2, color=f"C{i}")
            ax.plot(traj[0, 0], traj[0, 1], "s", ms=6, color=f"C{i}", mec="black")
        draw_scene(ax, f"{tag}: {len(trajectories[algo])} episodes, seed {seed}\n"
                       f"average return over {args.eval_steps // EPISODE_STEPS} episodes: {returns[algo][0]:.1f}")
    fig.suptitle(f"RiskWorld: λp = {args.lambda_p:g} (both), λo = {args.lambda_o:g} (ORPO), h = {args.rollout_length}, "
                 f"{args.epochs} epochs × {args.steps_per_epoch} steps", fontsize=11)
    fig.tight_layout()
    path2 = os.path.join(args.out_dir, "toy_figure2.png")
    fig.savefig(path2, dpi=110)
    plt.close(fig)

    n = len(args.seeds)
    fig, axes = plt.subplots(n, 2, figsize=(9, 4.4 * n), squeeze=False)
    for row, seed in enumerate(args.seeds):
        for col, algo in enumerate(("mopo", "orpo")):
            ax, s = axes[row, col], visited[algo][row].reshape(-1, 2)
            ax.scatter(s[:, 0], s[:, 1], s=8, alpha=0.4, marker="x", color="tab:blue")
            draw_scene(ax, f"{algo.upper()}, seed {seed}: {len(s)} visited states\n"
                           f"average return {returns[algo][row]:.1f}")
    fig.suptitle(f"Visited states, {args.eval_steps} real-env steps per policy (λp = {args.lambda_p:g}, λo = {args.lambda_o:g})", fontsize=11)
    fig.tight_layout()
    path9 = os.path.join(args.out_dir, "toy_figure9.png")
    fig.savefig(path9, dpi=90)
    plt.close(fig)
    return path2, path9


def run(args: ToyArgs, command: Optional[str] = None) -> dict:
    import torch

    torch.set_num_threads(1)  # 2 shared cores: a busy second core makes 2-thread OpenMP matmuls very slow
    if args.quick:
        args = dataclasses.replace(args, **QUICK)
    t_start = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    tmp = tempfile.TemporaryDirectory(prefix="riskworld_") if args.runs_dir is None else None
    runs_dir = args.runs_dir or tmp.name
    data = make_dataset(args.dataset_size, args.dataset_seed)
    dataset_path = write_dataset(os.path.join(runs_dir, "riskworld.hdf5"), data)
    versions = code_versions()  # of the files imported next
    modules = {"orpo": load_module("orpo"), "mopo": load_module("mopo")}

    per_seed, trajectories, visited, returns, u_grid = [], {}, {"mopo": [], "orpo": []}, {"mopo": [], "orpo": []}, None
    for seed in args.seeds:
        row = {"seed": seed}
        # ORPO fits the ensemble; MOPO reuses that same-seed ensemble, so both face the same model and u
        orpo_args = algo_args(modules["orpo"], args, dataset_path, runs_dir, seed, lambda_o=args.lambda_o,
                              rollout_length_o=args.rollout_length)
        summaries = {"orpo": modules["orpo"].main(orpo_args)}
        dynamics_path = os.path.join(summaries["orpo"]["run_dir"], "dynamics.pt")
        mopo_args = algo_args(modules["mopo"], args, dataset_path, runs_dir, seed, policy="sac", load_dynamics_path=dynamics_path)
        summaries["mopo"] = modules["mopo"].main(mopo_args)
        if u_grid is None:
            u_grid = uncertainty_grid(modules["orpo"], dynamics_path, args)
        for algo, summary in summaries.items():
            policy = modules[algo].load_policy(os.path.join(summary["run_dir"], "policy.pt"))
            states, rets = roll(policy, args.eval_steps, seed=10_000 * seed)
            visited[algo].append(states[:, 1:])  # the 5000 states the policy's steps reached
            returns[algo].append(float(rets.mean()))
            if algo not in trajectories:
                trajectories[algo] = roll(policy, args.trajectories * EPISODE_STEPS, seed=123)[0]
            reached = states[:, 1:].reshape(-1, 2)
            row[algo] = {"avg_return": float(rets.mean()), "return_std_over_episodes": float(rets.std()),
                         "episodes": len(rets), "train_last_eval_return": summary["return"],
                         "share_of_states_in_upper_right": float(((reached[:, 0] > 1.5) & (reached[:, 1] > 1.5)).mean()),
                         "train_seconds": summary["wall_seconds"]}
        per_seed.append(row)
        print(f"seed {seed}: MOPO {row['mopo']['avg_return']:.1f}  ORPO {row['orpo']['avg_return']:.1f}")

    path2, path9 = plot_figures(args, data, u_grid, trajectories, visited, returns)
    wall = time.time() - t_start
    settings = {k: v for k, v in dataclasses.asdict(args).items() if k not in ("out_dir", "runs_dir")}
    settings.update(normalize_obs=False, eval_episodes_during_training=5,
                    rollout_length_o=args.rollout_length, mopo_dynamics="the same seed's ORPO ensemble (--load-dynamics-path)")
    results = {
        "claim": "ORPO reaches the high-reward, high-uncertainty upper-right region and MOPO does not",
        "paper": {"mopo": 7.3, "orpo": 35.3},
        "metric": f"average cumulative reward per 10-step episode over {args.eval_steps} real-env steps of the "
                  "deterministic policy; mean ± std over seeds (population std)",
        "mopo": {"mean": float(np.mean(returns["mopo"])), "std": float(np.std(returns["mopo"])), "per_seed": returns["mopo"]},
        "orpo": {"mean": float(np.mean(returns["orpo"])), "std": float(np.std(returns["orpo"])), "per_seed": returns["orpo"]},
        "per_seed": per_seed, "wall_seconds": wall, "torch_threads": torch.get_num_threads(), "settings": settings,
        "uncertainty_seed1": u_summary(u_grid), "command": command, "algorithm_files": versions,
        "figures": [os.path.relpath(p, ROOT) if p.startswith(ROOT) else p for p in (path2, path9)],
    }
    # the claim, per seed: ORPO spends most of its steps in the upper-right region, MOPO (almost) none
    share = {a: [row[a]["share_of_states_in_upper_right"] for row in per_seed] for a in ("mopo", "orpo")}
    results["reproduced"] = bool(all(o > 0.5 and m < 0.1 for o, m in zip(share["orpo"], share["mopo"])))
    results["reproduced_criterion"] = ("every seed: > 50% of ORPO's and < 10% of MOPO's visited states lie in the "
                                       "upper-right region x > 1.5, y > 1.5")
    with open(os.path.join(args.out_dir, "toy_results.json"), "w") as f:
        json.dump(results, f, indent=2)
    if tmp is not None:
        tmp.cleanup()

    print(f"\nRiskWorld, {len(args.seeds)} seed(s), {args.epochs} epochs x {args.steps_per_epoch} steps, wall {wall:.0f} s")
    print(f"λp = {args.lambda_p:g}, λo = {args.lambda_o:g}, h = {args.rollout_length}; average cumulative reward per episode")
    print(f"{'method':8s} {'ours (mean ± std)':>18s} {'per seed':>24s} {'paper':>6s}   share of steps in upper right")
    for algo in ("mopo", "orpo"):
        r = results[algo]
        per = ", ".join(f"{v:.1f}" for v in r["per_seed"])
        shares = ", ".join(f"{row[algo]['share_of_states_in_upper_right']:.2f}" for row in per_seed)
        print(f"{algo.upper():8s} {r['mean']:>10.1f} ± {r['std']:<5.1f} {per:>24s} {results['paper'][algo]:>6.1f}   {shares}")
    print(f"claim reproduced ({results['reproduced_criterion']}): {results['reproduced']}")
    print(f"figures: {path2}, {path9}")
    return results


if __name__ == "__main__":
    import tyro

    run(tyro.cli(ToyArgs), command=" ".join(["python toy/riskworld.py", *sys.argv[1:]]))
