# RiskWorld: the toy task of ORPO (Zhai et al., AAAI 2024), Figure 2 and appendix "Toy Example" / Figure 9.
# A point in the square [-3, 3]² moves by its action a ∈ [-1, 1]² (clipped at the border) for 10 steps; the reward
# is the SIGNED distance of the new state to the line y = -x, (x + y)/√2 (the paper prints |x + y|/√2 in both
# cases, a typo: its text and the authors' public toy code use the sign). The offline dataset holds only states
# in the band |x + y| < 0.25 with uniform random actions, so the high-reward upper-right corner is out of
# distribution. The paper's claim: MOPO (SAC in the P-MDP) stays near the data (average return 7.3), ORPO's
# optimistic rollouts let its output policy reach the corner (35.3). Importing this file registers RiskWorld-v0.
#
# Running it trains ORPO and MOPO through the algorithm files' own `main` on the toy dataset. Each seed's ensemble
# (4×200, 7 models / 5 elites) is fitted once with the algorithms' own fit_dynamics and reused by every run of that
# seed (--load-dynamics-path): it depends on the data and the seed, not on the algorithm, u or λp. Every finished
# run is a file in <out>/cells/, so an interrupted invocation resumes where it stopped.
# Usage (docs/toy.md has the results and wall times):
#   python toy/riskworld.py                               # demo: λp = 100 both ways, 1 seed, reduced size (~7 min, 2 idle cores)
#   python toy/riskworld.py --setting reduced             # the same, 5 seeds
#   python toy/riskworld.py --setting paper               # the paper's setting, 5 seeds (~3 core-hours in all)
#   python toy/riskworld.py --setting phase               # return vs λp for both u, 3 seeds, reduced size (~1.7 core-hours)
#   python toy/riskworld.py --setting paper --write-docs  # resume/regenerate docs/toy_paper/ (without it: runs/toy/<setting>)
#   python toy/riskworld.py --setting phase --write-docs --report-only   # redraw from the finished runs only
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
    return {
        "observations": obs,
        "actions": act,
        "rewards": reward_fn(next_obs).astype(np.float32),
        "next_observations": next_obs,
        "terminals": np.zeros(n, dtype=bool),
        "timeouts": np.zeros(n, dtype=bool),
    }


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
# u(s, a) choices, as the algorithm files name them: max_aleatoric = max_i ‖σ_i‖ (what the official ORPO runner always
# computed); ensemble_std = OfflineRL-Kit's std of the members' next-state means (what the authors' MOPO toy command
# passed); mixture_std = the appendix's formula (the mixture's std over s' and r, σ included).
U_CHOICES = ("max_aleatoric", "ensemble_std", "mixture_std")
# The authors' toy commands: MOPO with --uncertainty_mode ensemble_std, ORPO with its runner's max_aleatoric.
AUTHORS_U = {"mopo": "ensemble_std", "orpo": "max_aleatoric"}
PAPER = {"mopo": 7.3, "orpo": 35.3}  # the appendix's average returns at λp = 100
UPPER_RIGHT = 1.5  # "reached the corner": x > 1.5 and y > 1.5


@dataclass(frozen=True)
class Setting:
    """One experiment: which cells (algorithm, u, λp, seed) it trains and at what size."""

    seeds: tuple[int, ...]
    lambda_ps: tuple[float, ...]
    cells: Literal["two_ways", "grid"]
    """two_ways: MOPO and ORPO each with ensemble_std and max_aleatoric (the authors' pair and both matched pairs);
    grid: every algorithm × every u in `uncertainties` × every λp"""
    uncertainties: tuple[str, ...] = ("max_aleatoric", "ensemble_std")
    rollout_batch_size: int = 50_000
    hidden_dims: Optional[tuple[int, ...]] = None
    """actor/critic sizes; None: each algorithm's own (ORPO 3×256, MOPO's SAC 2×256)"""
    epochs: int = 10
    steps_per_epoch: int = 1000
    dynamics_hidden_dims: tuple[int, ...] = (200, 200, 200, 200)
    num_ensemble: int = 7
    num_elites: int = 5
    dataset_size: int = 10_000
    eval_steps: int = 5000


SETTINGS = {
    # the paper's setting (appendix "Toy Example" + the authors' commands), λp = 100, 5 seeds
    "paper": Setting(seeds=(1, 2, 3, 4, 5), lambda_ps=(100.0,), cells="two_ways"),
    # phase diagram: λp sweep for every u, reduced (5,000 rollout starts, 2×64 nets) to fit 2 shared CPU cores
    # (max_aleatoric and ensemble_std: the two u of the authors' commands; mixture_std's map is in uncertainty.png)
    # (λp coarse to fine, so a stopped run leaves a usable sweep; the figure sorts them)
    "phase": Setting(
        seeds=(1, 2, 3),
        lambda_ps=(100.0, 10.0, 1.0, 50.0, 5.0, 20.0, 2.0),
        cells="grid",
        rollout_batch_size=5000,
        hidden_dims=(64, 64),
    ),
    # the paper's question at the phase diagram's reduced size (λp = 100, both ways), 5 seeds
    "reduced": Setting(
        seeds=(1, 2, 3, 4, 5), lambda_ps=(100.0,), cells="two_ways", rollout_batch_size=5000, hidden_dims=(64, 64)
    ),
    # the default command: `reduced` with 1 seed
    "demo": Setting(seeds=(1,), lambda_ps=(100.0,), cells="two_ways", rollout_batch_size=5000, hidden_dims=(64, 64)),
    # a smoke test of the whole pipeline (tests)
    "quick": Setting(
        seeds=(1,),
        lambda_ps=(100.0,),
        cells="two_ways",
        rollout_batch_size=100,
        hidden_dims=(16, 16),
        epochs=1,
        steps_per_epoch=50,
        dynamics_hidden_dims=(16, 16),
        num_ensemble=3,
        num_elites=2,
        dataset_size=1000,
        eval_steps=200,
    ),
}


@dataclass
class ToyArgs:
    setting: Literal["demo", "reduced", "paper", "phase", "quick"] = "demo"
    """demo: λp = 100 both ways, 1 seed, reduced size; reduced: the same with 5 seeds; paper: the paper's setting, 5 seeds;
    phase: average return vs λp for both u, 3 seeds, reduced size; quick: a smoke test (docs/toy.md has the costs)"""
    seeds: Optional[tuple[int, ...]] = None
    """override the setting's training seeds"""
    lambda_ps: Optional[tuple[float, ...]] = None
    """override the setting's λp values (the P-MDP penalty of both methods)"""
    lambda_o: float = 1.0
    """λo, ORPO's O-MDP bonus (the paper: 1)"""
    rollout_length: int = 5
    """h^p = h^o (the authors' toy commands and the paper's other tasks: 5)"""
    dynamics_batch_size: int = 32
    """the fit rule for 10,000 rows: minibatches of 32 (281 steps per epoch instead of 35 at 256), so the algorithms'
    5-epoch patience waits ~1,400 steps before stopping; docs/toy.md has the measured holdout MSE and time"""
    dynamics_patience: int = 5
    """epochs without a >1 % holdout improvement of any member before the fit stops (the algorithms' rule)"""
    dynamics_max_epochs: Optional[int] = None
    """cap on the fit's epochs (None: until early stopping)"""
    dataset_seed: int = 0
    """seed of the offline dataset (one dataset for all training seeds)"""
    workers: int = 2
    """processes training cells in parallel (1 torch thread each)"""
    out_dir: Optional[str] = None
    """results, figures and per-cell files (default runs/toy/<setting>; --write-docs: docs/toy_<setting>)"""
    write_docs: bool = False
    """write into docs/toy_<setting>/ (the committed results); without it nothing under docs/ is touched"""
    report_only: bool = False
    """train nothing: tables and figures from the cells already finished in the output folder (missing ones listed)"""
    ensembles_dir: str = os.path.join("runs", "toy", "ensembles")
    """fitted ensembles, one per seed and fit rule, shared by every setting, algorithm, u and λp"""


def resolve(args: ToyArgs) -> tuple[Setting, str]:
    """The setting with the overrides applied, and the output folder."""
    setting = SETTINGS[args.setting]
    if args.seeds is not None:
        setting = dataclasses.replace(setting, seeds=tuple(args.seeds))
    if args.lambda_ps is not None:
        setting = dataclasses.replace(setting, lambda_ps=tuple(float(x) for x in args.lambda_ps))
    if not setting.seeds or not setting.lambda_ps:
        raise UserError("--seeds and --lambda-ps need at least one value each")
    if any(x < 0 for x in setting.lambda_ps) or args.lambda_o < 0:
        raise UserError("λp and λo must be >= 0")
    if args.workers < 1 or args.dynamics_batch_size < 1 or args.dynamics_patience < 1:
        raise UserError("--workers, --dynamics-batch-size and --dynamics-patience must be >= 1")
    if args.write_docs and args.out_dir is not None:
        raise UserError("pass either --write-docs or --out-dir, not both")
    out = (
        os.path.join(ROOT, "docs", f"toy_{args.setting}")
        if args.write_docs
        else (args.out_dir or os.path.join("runs", "toy", args.setting))
    )
    return setting, os.path.abspath(out)


class UserError(Exception):
    """Bad input: printed as one line, exit status 2."""


def cell_list(setting: Setting) -> list[tuple[str, str, float, int]]:
    """(algorithm, u, λp, seed) of every training run of a setting, in the order they are trained.
    two_ways: per seed the authors' pair (ORPO max_aleatoric, MOPO ensemble_std) and MOPO max_aleatoric (the matched
    max_aleatoric pair), then ORPO ensemble_std for every seed (the matched ensemble_std pair)."""
    if setting.cells == "two_ways":
        first = [("orpo", "max_aleatoric"), ("mopo", "ensemble_std"), ("mopo", "max_aleatoric")]
        return [(algo, u, lp, seed) for seed in setting.seeds for lp in setting.lambda_ps for algo, u in first] + [
            ("orpo", "ensemble_std", lp, seed) for seed in setting.seeds for lp in setting.lambda_ps
        ]
    # grid: λp by λp (coarse to fine in the setting), every seed of a λp before the next one
    pairs = [(algo, u) for algo in ("orpo", "mopo") for u in setting.uncertainties]
    return [(algo, u, lp, seed) for lp in setting.lambda_ps for seed in setting.seeds for algo, u in pairs]


def cell_key(algo: str, u: str, lambda_p: float, seed: int) -> str:
    return f"{algo}__{u}__lp{lambda_p:g}__s{seed}"


def load_module(name: str, folder: str = "algorithms"):
    """An algorithm file imported by path, as tests/conftest.py does (the files have no import side effects)."""
    key = f"toy_{name}"
    if key in sys.modules:
        return sys.modules[key]
    if folder == "datasets":  # collect.py imports its neighbour common.py
        sys.path.insert(0, os.path.join(ROOT, "datasets"))
    spec = importlib.util.spec_from_file_location(key, os.path.join(ROOT, folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def algo_args(
    module,
    setting: Setting,
    args: ToyArgs,
    u: str,
    lambda_p: float,
    seed: int,
    dataset_path: str,
    runs_dir: str,
    **extra,
):
    """The module's own Args with the toy settings; every name must be a field of that Args."""
    settings = dict(
        seed=seed,
        cuda=False,
        runs_dir=runs_dir,
        dataset_path=dataset_path,
        eval_env=ENV_ID,
        epochs=setting.epochs,
        steps_per_epoch=setting.steps_per_epoch,
        eval_every=setting.epochs,
        eval_episodes=5,
        checkpoint_every=10**9,
        num_ensemble=setting.num_ensemble,
        num_elites=setting.num_elites,
        dynamics_hidden_dims=setting.dynamics_hidden_dims,
        dynamics_batch_size=args.dynamics_batch_size,
        dynamics_patience=args.dynamics_patience,
        dynamics_max_epochs=args.dynamics_max_epochs,
        uncertainty=u,
        rollout_batch_size=setting.rollout_batch_size,
        lambda_p=lambda_p,
        rollout_length=args.rollout_length,
        **extra,
    )
    if setting.hidden_dims is not None:
        settings["hidden_dims"] = setting.hidden_dims
    fields = {f.name for f in dataclasses.fields(module.Args)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise SystemExit(f"error: {module.__name__}.Args has no field(s) {unknown}; update toy/riskworld.py")
    return module.Args(**settings)


def orpo_extra(args: ToyArgs) -> dict:
    """ORPO's own flags: λo, h^o, and π^p's batch shares 0.05 D / 0.45 D^p_πp / rest D^p_πo (the authors' toy command
    --real-ratio-final 0.05 --final-policy-rollout-ratio-final 0.45)."""
    return dict(
        lambda_o=args.lambda_o, rollout_length_o=args.rollout_length, real_ratio=0.05, output_rollout_ratio=0.45
    )


def code_versions() -> dict[str, str]:
    """The git commit and the sha256 of the algorithm files the numbers came from (they may differ from the commit)."""
    import hashlib
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        head = ""
    out = {"git_head": head or "unknown"}
    for name in ("orpo", "mopo"):
        with open(os.path.join(ROOT, "algorithms", f"{name}.py"), "rb") as f:
            out[f"{name}.py_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return f"{names[0]} ({len(names)} logical CPUs)"
    except (OSError, IndexError):
        import platform

        return platform.processor() or "unknown CPU"


# ---------------------------------------------------------------------------------------------- the ensemble
def fit_config(setting: Setting, args: ToyArgs) -> dict:
    return dict(
        dataset_size=setting.dataset_size,
        dataset_seed=args.dataset_seed,
        hidden=list(setting.dynamics_hidden_dims),
        num_ensemble=setting.num_ensemble,
        num_elites=setting.num_elites,
        batch_size=args.dynamics_batch_size,
        patience=args.dynamics_patience,
        max_epochs=args.dynamics_max_epochs,
    )


def ensemble_path(ensembles_dir: str, config: dict, seed: int) -> str:
    import hashlib

    tag = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return os.path.join(ensembles_dir, f"riskworld_{tag}_seed{seed}.pt")


def fit_ensemble(job: tuple) -> dict:
    """Fit one seed's ensemble with the algorithms' own fit_dynamics and save it as a run's dynamics.pt (loadable with
    --load-dynamics-path). The ensemble depends on the data and the seed only, never on the algorithm, u or λp."""
    import torch

    setting, args, dataset_path, path, seed = job
    if os.path.isfile(path):
        return torch.load(path, map_location="cpu", weights_only=True)["metrics"]
    torch.set_num_threads(1)
    orpo = load_module("orpo")
    fit_args = algo_args(orpo, setting, args, "max_aleatoric", 0.0, seed, dataset_path, "unused")
    data = {k: torch.as_tensor(v) for k, v in orpo.load_transitions(dataset_path).items()}
    torch.manual_seed(seed)
    model = orpo.EnsembleDynamics(2, 2, setting.dynamics_hidden_dims, setting.num_ensemble, setting.num_elites)
    t0, c0 = time.time(), time.process_time()
    metrics = orpo.fit_dynamics(model, data, fit_args)
    metrics = {
        "seed": seed,
        **{k.split("/")[-1]: float(v) for k, v in metrics.items()},
        "fit_seconds": time.time() - t0,
        "fit_cpu_seconds": time.process_time() - c0,
    }
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"model": model.state_dict(), "metrics": metrics}, path + ".tmp")
    os.replace(path + ".tmp", path)
    print(
        f"ensemble seed {seed}: holdout MSE {metrics['holdout_mse']:.2e} after {metrics['epochs']:.0f} epochs, "
        f"{metrics['fit_seconds']:.0f} s",
        flush=True,
    )
    return metrics


def load_ensemble(module, setting: Setting, path: str):
    import torch

    model = module.EnsembleDynamics(2, 2, setting.dynamics_hidden_dims, setting.num_ensemble, setting.num_elites)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["model"])
    return model


def uncertainty_grid(model, u: str, n: int = 61, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """u(s, a) of an ensemble (the algorithms' own EnsembleDynamics.step) on an n×n grid of states, averaged over a k×k
    grid of actions covering [-1, 1]²; row i is y = xs[i], column j is x = xs[j]."""
    import torch

    xs, acts = np.linspace(-BOUND, BOUND, n), np.linspace(-1, 1, k)
    gx, gy = np.meshgrid(xs, xs)
    ax, ay = np.meshgrid(acts, acts)
    obs = torch.as_tensor(np.stack([gx.ravel(), gy.ravel()], 1), dtype=torch.float32).repeat_interleave(k * k, 0)
    act = torch.as_tensor(np.tile(np.stack([ax.ravel(), ay.ravel()], 1), (n * n, 1)), dtype=torch.float32)
    values = model.step(obs, act, u)[2]
    return xs, values.reshape(n * n, k * k).mean(1).reshape(n, n).numpy()


def u_summary(grid: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """u (averaged over actions) on the data band vs off it: the numbers the penalty λp·u is made of."""
    xs, u = grid
    gx, gy = np.meshgrid(xs, xs)
    at = lambda x, y: float(u[np.abs(xs - y).argmin(), np.abs(xs - x).argmin()])  # noqa: E731
    return {
        "band_mean": float(u[np.abs(gx + gy) < HALF_WIDTH].mean()),
        "at_0_0": at(0, 0),
        "at_1.5_1.5": at(1.5, 1.5),
        "at_2.5_2.5": at(2.5, 2.5),
        "at_-2.5_-2.5": at(-2.5, -2.5),
        "max": float(u.max()),
    }


# ---------------------------------------------------------------------------------------------- one cell
def roll(policy, n_steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The policy's deterministic actions (numpy in, numpy out) in the real env for n_steps (whole episodes of 10 steps).

    Returns the visited states [episodes, 11, 2] (start state included) and each episode's return.
    """
    env = gym.make(ENV_ID)
    n_episodes = max(1, n_steps // EPISODE_STEPS)
    states, returns = np.zeros((n_episodes, EPISODE_STEPS + 1, 2), dtype=np.float32), np.zeros(n_episodes)
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed + ep)
        states[ep, 0] = obs
        for t in range(EPISODE_STEPS):
            action = policy(obs[None].astype(np.float32))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            states[ep, t + 1], returns[ep] = obs, returns[ep] + reward
            if terminated or truncated:
                break
    assert truncated and not terminated, "RiskWorld episodes end by the 10-step time limit only"
    env.close()
    return states, returns


def upper_right_share(states: np.ndarray) -> float:
    s = states.reshape(-1, 2)
    return float(((s[:, 0] > UPPER_RIGHT) & (s[:, 1] > UPPER_RIGHT)).mean())


def cell_size(setting: Setting, args: ToyArgs) -> dict:
    """Everything but (algorithm, u, λp, seed) that a cell's result depends on: a finished cell is reused only when
    this matches (so a resumed run never mixes sizes)."""
    keep = ("rollout_batch_size", "hidden_dims", "epochs", "steps_per_epoch", "eval_steps")
    return json.loads(
        json.dumps(
            {
                **{k: getattr(setting, k) for k in keep},
                "lambda_o": args.lambda_o,
                "rollout_length": args.rollout_length,
                "fit": fit_config(setting, args),
            }
        )
    )


def run_cell(job: tuple) -> dict:
    """Train one (algorithm, u, λp, seed) with the algorithm's own main on the seed's saved ensemble, roll the exported
    policy for eval_steps real-env steps, and save the numbers (JSON) and the visited states (npz) in cells/."""
    import shutil

    import torch

    setting, args, dataset_path, dynamics_path, cells_dir, (algo, u, lambda_p, seed) = job
    key = cell_key(algo, u, lambda_p, seed)
    path = os.path.join(cells_dir, key + ".json")
    size = cell_size(setting, args)
    if os.path.isfile(path):
        with open(path) as f:
            row = json.load(f)
        if row.get("size") != size:
            raise UserError(f"{path} was trained with other settings ({row.get('size')}); use another --out-dir")
        return row
    torch.set_num_threads(1)
    module = load_module(algo)
    runs_dir = tempfile.mkdtemp(prefix=f"riskworld_{key}_")
    try:
        extra = orpo_extra(args) if algo == "orpo" else dict(policy="sac")
        algo_arg = algo_args(
            module, setting, args, u, lambda_p, seed, dataset_path, runs_dir, load_dynamics_path=dynamics_path, **extra
        )
        t0, c0 = time.time(), time.process_time()
        summary = module.main(algo_arg)
        train_seconds, cpu_seconds = time.time() - t0, time.process_time() - c0
        policy = load_module("collect", "datasets").load_policy(os.path.join(summary["run_dir"], "policy.pt"), 2, 2)
        states, returns = roll(policy, setting.eval_steps, seed=10_000 * seed)
        trajectories = roll(policy, 5 * EPISODE_STEPS, seed=123)[0]
        with open(os.path.join(summary["run_dir"], "config.json")) as f:
            config = json.load(f)
        os.makedirs(cells_dir, exist_ok=True)  # the run's per-epoch metrics (rollout u, rewards, losses) are kept
        shutil.copyfile(os.path.join(summary["run_dir"], "metrics.csv"), os.path.join(cells_dir, key + ".metrics.csv"))
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    row = {
        "algo": algo,
        "u": u,
        "lambda_p": lambda_p,
        "seed": seed,
        "avg_return": float(returns.mean()),
        "return_std_over_episodes": float(returns.std()),
        "episodes": len(returns),
        "share_upper_right": upper_right_share(states[:, 1:]),
        "train_seconds": train_seconds,
        "train_cpu_seconds": cpu_seconds,
        "train_last_eval_return": summary["return"],
        "config_uncertainty": config["uncertainty"],
        "config_lambda_p": config["lambda_p"],
        "config_load_dynamics_path": config["load_dynamics_path"],
        "size": size,
        "algorithm_files": code_versions(),
    }
    os.makedirs(cells_dir, exist_ok=True)
    np.savez_compressed(
        os.path.join(cells_dir, key + ".npz"),
        visited=states[:, 1:].astype(np.float16),
        trajectories=trajectories.astype(np.float16),
    )
    with open(path + ".tmp", "w") as f:
        json.dump(row, f, indent=1)
    os.replace(path + ".tmp", path)
    print(
        f"{key}: average return {row['avg_return']:.1f}, {100 * row['share_upper_right']:.0f} % of steps in the upper "
        f"right, {train_seconds:.0f} s",
        flush=True,
    )
    return row


def parallel_map(fn, jobs: list, workers: int) -> list:
    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(min(workers, len(jobs)), maxtasksperchild=1) as pool:
        return pool.map(fn, jobs, chunksize=1)


# ---------------------------------------------------------------------------------------------- statistics
def bootstrap_ci(values, n_boot: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean over seeds (resampling seeds with replacement)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return float(v.mean()), float(v.mean())
    means = v[np.random.default_rng(seed).integers(len(v), size=(n_boot, len(v)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def aggregate(rows: list[dict]) -> dict:
    """Per (algorithm, u, λp): mean return over seeds, its 95 % bootstrap interval, per-seed values, corner shares."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["algo"], r["u"], r["lambda_p"]), []).append(r)
    out = {}
    for (algo, u, lp), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["seed"])
        returns = [r["avg_return"] for r in rs]
        lo, hi = bootstrap_ci(returns)
        out[f"{algo}|{u}|{lp:g}"] = {
            "algo": algo,
            "u": u,
            "lambda_p": lp,
            "mean": float(np.mean(returns)),
            "ci95": [lo, hi],
            "seeds": [r["seed"] for r in rs],
            "per_seed": returns,
            "share_upper_right": [r["share_upper_right"] for r in rs],
            "train_seconds": [r["train_seconds"] for r in rs],
            "train_cpu_seconds": [r.get("train_cpu_seconds") for r in rs],
        }
    return out


def comparisons(table: dict, lambda_ps) -> list[dict]:
    """ORPO vs MOPO at each λp: with the same u (matched) and as the authors ran it (MOPO ensemble_std, ORPO
    max_aleatoric); `orpo_better` only when ORPO's interval lies wholly above MOPO's."""
    pairs = [(u, u, f"matched {u}") for u in U_CHOICES] + [
        (AUTHORS_U["mopo"], AUTHORS_U["orpo"], "as the authors ran it")
    ]
    out = []
    for lp in lambda_ps:
        for u_m, u_o, name in pairs:
            m, o = table.get(f"mopo|{u_m}|{lp:g}"), table.get(f"orpo|{u_o}|{lp:g}")
            if m is None or o is None:
                continue
            n = min(len(m.get("per_seed", [0, 0])), len(o.get("per_seed", [0, 0])))
            out.append(
                {
                    "lambda_p": lp,
                    "comparison": name,
                    "mopo": m["mean"],
                    "mopo_ci95": m["ci95"],
                    "orpo": o["mean"],
                    "orpo_ci95": o["ci95"],
                    "seeds": n,  # one seed has no interval: no verdict
                    "orpo_better": n >= 2 and o["ci95"][0] > m["ci95"][1],
                    "mopo_better": n >= 2 and m["ci95"][0] > o["ci95"][1],
                }
            )
    return out


# ---------------------------------------------------------------------------------------------- figures
def draw_scene(ax, title: str, band_color: str = "darkblue"):
    import matplotlib.patches as patches

    line = np.linspace(-BOUND, BOUND, 2)
    for c in (-HALF_WIDTH, HALF_WIDTH):
        ax.plot(line, -line + c, color=band_color, lw=1)
    ax.add_patch(patches.Rectangle((-BOUND, -BOUND), 2 * BOUND, 2 * BOUND, lw=1.5, edgecolor="black", facecolor="none"))
    ax.set_xlim(-BOUND - 0.1, BOUND + 0.1)
    ax.set_ylim(-BOUND - 0.1, BOUND + 0.1)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)


def plot_uncertainty(path: str, grids: dict, lambda_p: float, seed: int, mse: float):
    """Per u, top: the map of u (log colour scale); bottom: the P-MDP reward of arriving there, r(s) − λp·u(s, a)
    (averaged over actions), which is what the pessimistic policies maximise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    fig, axes = plt.subplots(2, len(grids), figsize=(5.2 * len(grids), 9.2), squeeze=False)
    for col, (u, (xs, grid)) in enumerate(grids.items()):
        ax = axes[0, col]
        im = ax.imshow(np.maximum(grid, 1e-6), origin="lower", extent=[xs[0], xs[-1]] * 2, cmap="hot", norm=LogNorm())
        fig.colorbar(im, ax=ax, fraction=0.046, label=f"u = {u}")
        s = u_summary((xs, grid))
        draw_scene(
            ax,
            f"u = {u}: band mean {s['band_mean']:.3g}, at (2.5, 2.5) {s['at_2.5_2.5']:.3g}",
            band_color="deepskyblue",
        )
        ax = axes[1, col]
        gx, gy = np.meshgrid(xs, xs)
        p_reward = reward_fn(np.stack([gx, gy], -1)) - lambda_p * grid
        im = ax.imshow(p_reward, origin="lower", extent=[xs[0], xs[-1]] * 2, cmap="RdYlGn")
        fig.colorbar(im, ax=ax, fraction=0.046, label=f"r(s) − {lambda_p:g}·u")
        band = p_reward[np.abs(gx + gy) < HALF_WIDTH].mean()
        corner = p_reward[np.abs(xs - 2.5).argmin(), np.abs(xs - 2.5).argmin()]
        draw_scene(
            ax,
            f"P-MDP reward, λp = {lambda_p:g}: band mean {band:.2f}, at (2.5, 2.5) {corner:.2f}",
            band_color="deepskyblue",
        )
    fig.suptitle(f"Seed {seed}'s ensemble (4×200, holdout MSE {mse:.1e}); u averaged over actions", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_visited(path: str, table: dict, cells_dir: str, lambda_p: float, title: str):
    """2×2: MOPO / ORPO × ensemble_std / max_aleatoric, the states visited in eval_steps real steps, every seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9.5, 9.5))
    for row, u in enumerate(("ensemble_std", "max_aleatoric")):
        for col, algo in enumerate(("mopo", "orpo")):
            ax, entry = axes[row, col], table.get(f"{algo}|{u}|{lambda_p:g}")
            if entry is None:
                ax.set_visible(False)
                continue
            for i, seed in enumerate(entry["seeds"]):
                s = np.load(os.path.join(cells_dir, cell_key(algo, u, lambda_p, seed) + ".npz"))["visited"].reshape(
                    -1, 2
                )
                ax.scatter(s[:, 0], s[:, 1], s=4, alpha=0.25, marker="x", color=f"C{i}", label=f"seed {seed}")
            tag = " (as the authors ran it)" if AUTHORS_U[algo] == u else ""
            draw_scene(
                ax,
                f"{algo.upper()}, u = {u}{tag}\naverage return {entry['mean']:.1f} "
                f"[{entry['ci95'][0]:.1f}, {entry['ci95'][1]:.1f}], per seed "
                + ", ".join(f"{v:.1f}" for v in entry["per_seed"]),
            )
            ax.legend(loc="lower left", fontsize=7, markerscale=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_phase(path: str, table: dict, setting: Setting, title: str):
    """Average return vs λp, one panel per u: MOPO and ORPO with the same u, 95 % bootstrap intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    us = [u for u in U_CHOICES if any(e["u"] == u for e in table.values())]
    fig, axes = plt.subplots(1, len(us), figsize=(5.2 * len(us), 4.2), squeeze=False, sharey=True)
    for ax, u in zip(axes[0], us):
        for algo, color, shift in (("mopo", "tab:blue", 0.96), ("orpo", "tab:red", 1.04)):
            es = [table[k] for k in table if table[k]["algo"] == algo and table[k]["u"] == u]
            es.sort(key=lambda e: e["lambda_p"])
            if not es:
                continue
            n = sorted({len(e["seeds"]) for e in es})
            x = np.array([e["lambda_p"] for e in es]) * shift
            y = np.array([e["mean"] for e in es])
            err = np.array([[e["mean"] - e["ci95"][0], e["ci95"][1] - e["mean"]] for e in es]).T
            ax.errorbar(
                x,
                y,
                yerr=err,
                marker="o",
                ms=4,
                capsize=3,
                color=color,
                label=f"{algo.upper()} ({'–'.join(map(str, sorted({n[0], n[-1]})))} seeds per point)",
            )
        ax.scatter(
            [100, 100],
            [PAPER["mopo"], PAPER["orpo"]],
            marker="*",
            s=90,
            color=["tab:blue", "tab:red"],
            edgecolor="black",
            zorder=5,
            label="paper (λp = 100)",
        )
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("λp (both methods)")
        ax.set_title(f"u = {u} (both methods)", fontsize=10)
        ax.legend(fontsize=8, loc="best")
    axes[0, 0].set_ylabel("average return per 10-step episode")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- the experiment
def run(args: ToyArgs, command: Optional[str] = None) -> dict:
    import torch

    torch.set_num_threads(1)  # 2 shared cores: a busy second core makes 2-thread OpenMP matmuls very slow
    setting, out_dir = resolve(args)
    t_start = time.time()
    cells_dir = os.path.join(out_dir, "cells")
    os.makedirs(cells_dir, exist_ok=True)
    # the dataset is rebuilt (deterministically) each time; only the ensembles and the finished cells are cached
    data = make_dataset(setting.dataset_size, args.dataset_seed)
    tmp = tempfile.TemporaryDirectory(prefix="riskworld_data_")
    dataset_path = write_dataset(os.path.join(tmp.name, "riskworld.hdf5"), data)
    config = fit_config(setting, args)
    ens_paths = {seed: ensemble_path(os.path.abspath(args.ensembles_dir), config, seed) for seed in setting.seeds}
    print(
        f"RiskWorld '{args.setting}': {len(setting.seeds)} seed(s), λp {setting.lambda_ps}, out {out_dir}; "
        f"ensembles {os.path.abspath(args.ensembles_dir)}",
        flush=True,
    )
    cells = cell_list(setting)
    jobs = [(setting, args, dataset_path, ens_paths[c[3]], cells_dir, c) for c in cells]
    if args.report_only:
        done = [j for j in jobs if os.path.isfile(os.path.join(cells_dir, cell_key(*j[-1]) + ".json"))]
        missing = [cell_key(*j[-1]) for j in jobs if j not in done]
        if not done:
            raise UserError(f"--report-only: no finished cells in {cells_dir}")
        fits = [
            torch.load(ens_paths[s], map_location="cpu", weights_only=True)["metrics"]
            for s in setting.seeds
            if os.path.isfile(ens_paths[s])
        ]
        rows = [run_cell(j) for j in done]
    else:
        fits = parallel_map(
            fit_ensemble, [(setting, args, dataset_path, ens_paths[s], s) for s in setting.seeds], args.workers
        )
        rows, missing = parallel_map(run_cell, jobs, args.workers), []
    table = aggregate(rows)

    orpo = load_module("orpo")
    if not fits:
        raise UserError(f"no fitted ensemble for seeds {setting.seeds} in {args.ensembles_dir}")
    first = int(fits[0]["seed"])
    model = load_ensemble(orpo, setting, ens_paths[first])
    grids = {u: uncertainty_grid(model, u) for u in U_CHOICES}
    u_per_seed = {}  # u on and off the band for every seed's ensemble: where λp·u crosses the reward decides the corner
    for f in fits:
        m = load_ensemble(orpo, setting, ens_paths[int(f["seed"])])
        u_per_seed[int(f["seed"])] = {u: u_summary(uncertainty_grid(m, u)) for u in U_CHOICES}
    figures = []
    lp_top = max(setting.lambda_ps)
    path = os.path.join(out_dir, "uncertainty.png")
    plot_uncertainty(path, grids, lp_top, first, fits[0]["holdout_mse"])
    figures.append(path)
    size = (
        f"{setting.rollout_batch_size} rollout starts, "
        + (
            "the algorithms' own nets"
            if setting.hidden_dims is None
            else f"{'×'.join(map(str, setting.hidden_dims))} nets"
        )
        + f", {setting.epochs}×{setting.steps_per_epoch} steps"
    )
    for lp in setting.lambda_ps if setting.cells == "two_ways" else (lp_top,):
        path = os.path.join(out_dir, f"visited_lp{lp:g}.png")
        plot_visited(
            path,
            table,
            cells_dir,
            lp,
            f"RiskWorld '{args.setting}', λp = {lp:g}, λo = {args.lambda_o:g}, h = "
            f"{args.rollout_length}, {size}: states visited in {setting.eval_steps} real steps per policy",
        )
        figures.append(path)
    if len(setting.lambda_ps) > 1:
        path = os.path.join(out_dir, "phase.png")
        plot_phase(
            path,
            table,
            setting,
            f"RiskWorld '{args.setting}': average return vs λp ({size}; 95 % bootstrap "
            f"intervals over seeds; λo = {args.lambda_o:g})",
        )
        figures.append(path)

    wall = time.time() - t_start
    rel = lambda p: os.path.relpath(p, ROOT) if p.startswith(ROOT) else p  # noqa: E731
    results = {
        "claim": "ORPO reaches the high-reward upper-right region and MOPO does not (paper: MOPO 7.3, ORPO 35.3 at λp = 100)",
        "paper": PAPER,
        "setting_name": args.setting,
        "setting": dataclasses.asdict(setting),
        "toy_args": {k: v for k, v in dataclasses.asdict(args).items() if k not in ("out_dir", "ensembles_dir")},
        "metric": f"average cumulative reward per 10-step episode over {setting.eval_steps} real-env steps of the "
        "deterministic policy; mean over seeds with a 95 % percentile bootstrap interval (10,000 resamples)",
        "table": table,
        "comparisons": comparisons(table, setting.lambda_ps),
        "missing_cells": missing,
        "ensembles": {"fit_rule": config, "per_seed": fits},
        "uncertainty_per_seed": u_per_seed,
        "wall_seconds_this_invocation": wall,
        "cpu": cpu_name(),
        "workers": args.workers,
        "torch_threads_per_worker": 1,
        "command": command,
        "algorithm_files": code_versions(),
        "figures": [rel(p) for p in figures],
    }
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    tmp.cleanup()
    print_summary(results, setting)
    print(f"wall {wall:.0f} s this invocation ({cpu_name()}, {args.workers} workers); results and figures in {out_dir}")
    return results


def print_summary(results: dict, setting: Setting):
    print(
        f"\nensembles: "
        + ", ".join(
            f"seed {f['seed']} MSE {f['holdout_mse']:.1e} ({f['epochs']:.0f} ep, {f['fit_seconds']:.0f} s)"
            for f in results["ensembles"]["per_seed"]
        )
    )
    print(
        f"{'algorithm':9s} {'u':14s} {'λp':>5s} {'mean':>6s} {'95% interval':>16s}  per seed (share of steps in the upper right)"
    )
    for e in results["table"].values():
        per = ", ".join(f"{v:.1f} ({100 * s:.0f}%)" for v, s in zip(e["per_seed"], e["share_upper_right"]))
        print(
            f"{e['algo'].upper():9s} {e['u']:14s} {e['lambda_p']:>5g} {e['mean']:>6.1f} [{e['ci95'][0]:>6.1f}, {e['ci95'][1]:>6.1f}]  {per}"
        )
    print(f"paper (λp = 100): MOPO {PAPER['mopo']}, ORPO {PAPER['orpo']}")
    if results["missing_cells"]:
        print(f"not trained yet ({len(results['missing_cells'])}): {', '.join(results['missing_cells'])}")
    for c in results["comparisons"]:
        verdict = (
            "1 seed: no interval"
            if c["seeds"] < 2
            else "ORPO > MOPO"
            if c["orpo_better"]
            else "MOPO > ORPO"
            if c["mopo_better"]
            else "intervals overlap"
        )
        print(
            f"λp {c['lambda_p']:>5g}, {c['comparison']:28s}: MOPO {c['mopo']:6.1f}  ORPO {c['orpo']:6.1f}  ({verdict})"
        )


def cli(argv=None) -> int:
    import tyro

    args = tyro.cli(ToyArgs, args=argv)
    try:
        run(args, command=" ".join(["python toy/riskworld.py", *(sys.argv[1:] if argv is None else argv)]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
