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
# run is a file in <out>/cells/, so an interrupted invocation resumes where it stopped. Fits and runs are worker
# processes: the terminal shows a line per fit and run and the table, each run's own output is in <out>/logs/.
# Usage (docs/toy.md has the results and wall times):
#   python toy/riskworld.py                               # demo: λp = 100 both ways, 1 seed, reduced size
#                                                         # (5.5 min on the 2-core AMD EPYC at load 0.8–1.9: docs/toy.md)
#   python toy/riskworld.py --setting reduced             # the same, 5 seeds
#   python toy/riskworld.py --setting paper               # the paper's setting, 5 seeds
#   python toy/riskworld.py --setting phase               # return vs λp for both u, 3 seeds, reduced size
#   python toy/riskworld.py --setting paper --write-docs  # resume/regenerate results/toy_paper/ (without it: runs/toy/<setting>)
#   python toy/riskworld.py --setting phase --write-docs --report-only   # redraw from the finished runs only
import contextlib
import ctypes
import dataclasses
import glob
import hashlib
import io
import itertools
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import threading
import traceback
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import gymnasium as gym
import tqdm.std as tqdm_std
import h5py
import numpy as np
from gymnasium import spaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))  # the scripts' toolbox; it puts algorithms/ on the path
import toolbox  # noqa: E402
import plumbing  # noqa: E402
import stats  # noqa: E402  (benchmarks/stats.py: the bootstrap interval)

ENV_ID = "RiskWorld-v0"
BOUND = 3.0  # the state space is [-BOUND, BOUND]²
HALF_WIDTH = 0.25  # start states and data lie between y = -x - 0.25 and y = -x + 0.25
EPISODE_STEPS = 10
DATASET_NAME = "riskworld"  # the dataset file is riskworld.hdf5; the algorithms' runs are named after it


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
    """The paper's recipe: reset to a random band state, take one uniform random action, reset again. Every row is a
    one-step episode: s in the band, s' = clip(s + a), r = r(s'); terminals and timeouts are False (the algorithms'
    loader drops timeout rows, and these single transitions are not timeouts)."""
    rng = np.random.default_rng(seed)
    obs = sample_band(rng, n)
    act = rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32)
    next_obs = np.clip(obs + act, -BOUND, BOUND).astype(np.float32)
    none = np.zeros(n, dtype=bool)
    return dict(observations=obs, actions=act, rewards=reward_fn(next_obs).astype(np.float32),
                next_observations=next_obs, terminals=none, timeouts=none.copy())  # fmt: skip


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


REDUCED = dict(rollout_batch_size=5000, hidden_dims=(64, 64))  # 5,000 rollout starts, 2×64 nets: fits 2 shared cores
SETTINGS = {
    # the paper's setting (appendix "Toy Example" + the authors' commands), λp = 100, 5 seeds
    "paper": Setting(seeds=(1, 2, 3, 4, 5), lambda_ps=(100.0,), cells="two_ways"),
    # phase diagram: λp sweep for max_aleatoric and ensemble_std (the two u of the authors' commands; mixture_std's map
    # is in uncertainty.png), reduced; λp coarse to fine, so a stopped run leaves a usable sweep (the figure sorts them)
    "phase": Setting(seeds=(1, 2, 3), lambda_ps=(100.0, 10.0, 1.0, 50.0, 5.0, 20.0, 2.0), cells="grid", **REDUCED),
    # the paper's question at the phase diagram's reduced size (λp = 100, both ways), 5 seeds
    "reduced": Setting(seeds=(1, 2, 3, 4, 5), lambda_ps=(100.0,), cells="two_ways", **REDUCED),
    # the default command: `reduced` with 1 seed
    "demo": Setting(seeds=(1,), lambda_ps=(100.0,), cells="two_ways", **REDUCED),
}
# a smoke test of the whole pipeline (tests)
SETTINGS["quick"] = Setting(seeds=(1,), lambda_ps=(100.0,), cells="two_ways", rollout_batch_size=100, epochs=1,
                            hidden_dims=(16, 16), steps_per_epoch=50, dynamics_hidden_dims=(16, 16), num_ensemble=3,
                            num_elites=2, dataset_size=1000, eval_steps=200)  # fmt: skip


@dataclass
class ToyArgs:
    setting: Literal["demo", "reduced", "paper", "phase", "quick"] = "demo"
    """demo: λp = 100 both ways, 1 seed, reduced size; reduced: the same with 5 seeds; paper: the paper's setting, 5 seeds;
    phase: average return vs λp for both u, 3 seeds, reduced size; quick: a smoke test (docs/toy.md has the costs)"""
    seeds: Optional[tuple[Annotated[int, f"[0, {2**32 - 1}]"], ...]] = None  # numpy's, torch's
    """override the setting's training seeds"""
    lambda_ps: Optional[tuple[Annotated[float, "[0, inf)"], ...]] = None
    """override the setting's λp values (the P-MDP penalty of both methods)"""
    lambda_o: Annotated[float, "[0, inf)"] = 1.0
    """λo, ORPO's O-MDP bonus (the paper: 1)"""
    rollout_length: Annotated[int, "[1, 100]"] = 5
    """h^p = h^o (the authors' toy commands and the paper's other tasks: 5)"""
    dynamics_batch_size: Annotated[int, "[1, 4096]"] = 32
    """the fit rule for 10,000 rows: minibatches of 32 (281 steps per epoch instead of 35 at 256), so the algorithms'
    5-epoch patience waits ~1,400 steps before stopping; docs/toy.md has the measured holdout MSE and time"""
    dynamics_patience: Annotated[int, "[1, 1000]"] = 5
    """epochs without a >1 % holdout improvement of any member before the fit stops (the algorithms' rule)"""
    dynamics_max_epochs: Optional[Annotated[int, "[1, 100000]"]] = None
    """cap on the fit's epochs (None: until early stopping)"""
    dataset_seed: Annotated[int, f"[0, {2**32 - 1}]"] = 0
    """seed of the offline dataset (one dataset for all training seeds)"""
    workers: Annotated[int, "[1, 64]"] = 2
    """processes training cells in parallel (1 torch thread each)"""
    out_dir: Optional[str] = None
    """results, figures and per-cell files (default runs/toy/<setting>; --write-docs: results/toy_<setting>)"""
    write_docs: bool = False
    """write into results/toy_<setting>/ (the committed runs; docs/toy.md's tables come from them through
    `python benchmarks/report.py`); without it nothing under results/ is touched"""
    report_only: bool = False
    """train nothing: tables and figures from the cells already finished in the output folder (missing ones listed)"""
    ensembles_dir: str = os.path.join("runs", "toy", "ensembles")
    """fitted ensembles, one per seed and fit rule, shared by every setting, algorithm, u and λp"""

    def problems(self) -> list[str]:  # with plumbing.check_args' ranges: every flag checked before any work
        out = [f"--{n.replace('_', '-')} {' '.join(map(str, v))}: give each value once"
               for n in ("seeds", "lambda_ps") if (v := getattr(self, n)) and len(set(v)) < len(v)]  # fmt: skip
        if self.write_docs and self.out_dir is not None:
            out.append("pass either --write-docs or --out-dir, not both")
        for flag, path in (("--out-dir", self.out_dir), ("--ensembles-dir", self.ensembles_dir)):
            if path is not None and (why := toolbox.unwritable_folder(path)):
                out.append(f"{flag} {path}: {why}; pass a writable folder (it is created if missing)")
        return out


def resolve(args: ToyArgs) -> tuple[Setting, str]:
    """The flags checked, the setting with the overrides applied, and the output folder."""
    plumbing.check_args(args)
    setting = SETTINGS[args.setting]
    if args.seeds is not None:
        setting = dataclasses.replace(setting, seeds=tuple(args.seeds))
    if args.lambda_ps is not None:
        setting = dataclasses.replace(setting, lambda_ps=tuple(float(x) for x in args.lambda_ps))
    default = os.path.join(ROOT, "results", f"toy_{args.setting}") if args.write_docs else None
    return setting, os.path.abspath(default or args.out_dir or os.path.join("runs", "toy", args.setting))


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: the workers are stopped, the finished runs kept; exit status 128 + the signal (its number the
    first argument, as toolbox.cli reads it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum, self.detail = signum, ""


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


def algo_args(algo: str, setting: Setting, args: ToyArgs, u: str, lambda_p: float, seed: int, dataset_path, runs_dir,
              **extra):  # fmt: skip
    """algorithms/<algo>.py's own Args with the toy settings. ORPO's own flags: λo, h^o, and π^p's batch shares 0.05 D
    / 0.45 D^p_πp / rest D^p_πo (the authors' toy command --real-ratio-final 0.05 --final-policy-rollout-ratio-final
    0.45); MOPO: SAC in the P-MDP."""
    own = dict(lambda_o=args.lambda_o, rollout_length_o=args.rollout_length, real_ratio=0.05, output_rollout_ratio=0.45)
    own = own if algo == "orpo" else dict(policy="sac")
    sizes = {} if setting.hidden_dims is None else dict(hidden_dims=setting.hidden_dims)
    # env: the name the run records (its config, summary and directory), the dataset file's
    return toolbox.algorithm(algo).Args(
        seed=seed, cuda=False, runs_dir=runs_dir, env=DATASET_NAME, dataset_path=dataset_path, eval_env=ENV_ID,
        epochs=setting.epochs, steps_per_epoch=setting.steps_per_epoch, eval_every=setting.epochs, eval_episodes=5,
        checkpoint_every=10**9, num_ensemble=setting.num_ensemble, num_elites=setting.num_elites,
        dynamics_hidden_dims=setting.dynamics_hidden_dims, dynamics_batch_size=args.dynamics_batch_size,
        dynamics_patience=args.dynamics_patience, dynamics_max_epochs=args.dynamics_max_epochs, uncertainty=u,
        rollout_batch_size=setting.rollout_batch_size, lambda_p=lambda_p, rollout_length=args.rollout_length,
        **own, **sizes, **extra,
    )  # fmt: skip


def code_versions() -> dict[str, str]:
    """The git commit and the sha256 of the algorithm files the numbers came from (they may differ from the commit)."""
    out = {"git_head": toolbox.git_revision(__file__) or "unknown"}
    for name in ("orpo", "mopo"):
        with open(os.path.join(ROOT, "algorithms", f"{name}.py"), "rb") as f:
            out[f"{name}.py_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return out


# ---------------------------------------------------------------------------------------------- the ensemble
def fit_config(setting: Setting, args: ToyArgs) -> dict:
    return dict(dataset_size=setting.dataset_size, dataset_seed=args.dataset_seed,
                hidden=list(setting.dynamics_hidden_dims), num_ensemble=setting.num_ensemble,
                num_elites=setting.num_elites, batch_size=args.dynamics_batch_size, patience=args.dynamics_patience,
                max_epochs=args.dynamics_max_epochs)  # fmt: skip


def ensemble_path(ensembles_dir: str, config: dict, seed: int) -> str:
    tag = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return os.path.join(ensembles_dir, f"riskworld_{tag}_seed{seed}.pt")


def new_ensemble(setting: Setting):
    orpo = toolbox.algorithm("orpo")
    return orpo.EnsembleDynamics(2, 2, setting.dynamics_hidden_dims, setting.num_ensemble, setting.num_elites)


def fit_ensemble(setting: Setting, args: ToyArgs, dataset_path: str, path: str, seed: int) -> None:
    """Fit one seed's ensemble with the algorithms' own fit_dynamics and save it as a run's dynamics.pt (loadable with
    --load-dynamics-path). The ensemble depends on the data and the seed only, never on the algorithm, u or λp."""
    import torch

    a = algo_args("orpo", setting, args, "max_aleatoric", 0.0, seed, dataset_path, "unused")  # the fit's settings
    data = {k: torch.as_tensor(v) for k, v in plumbing.load_transitions(dataset_path).items()}
    torch.manual_seed(seed)
    model = new_ensemble(setting)
    t0, c0 = time.time(), time.process_time()
    metrics = toolbox.algorithm("orpo").fit_dynamics(model, data, a.dynamics_lr, a.dynamics_batch_size,
                                                     a.dynamics_max_epochs, a.dynamics_patience,
                                                     a.dynamics_holdout_ratio, a.dynamics_max_holdout)  # fmt: skip
    metrics = {"seed": seed, **{k.split("/")[-1]: float(v) for k, v in metrics.items()},
               "fit_seconds": time.time() - t0, "fit_cpu_seconds": time.process_time() - c0}  # fmt: skip
    os.makedirs(os.path.dirname(path), exist_ok=True)
    toolbox.atomic_save({"model": model.state_dict(), "metrics": metrics}, path)
    print(f"ensemble seed {seed}: holdout MSE {metrics['holdout_mse']:.2e} after {metrics['epochs']:.0f} epochs")


def read_ensemble(path: str, setting: Setting, seed: int):
    """(model, metrics) of a saved ensemble. Loaded with weights_only=True, so a crafted file cannot run code; a file
    that is not an ensemble of this fit rule and seed is one line naming it (delete it: the fit is redone)."""
    import torch

    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        metrics = {**saved["metrics"], **{k: float(saved["metrics"][k]) for k in ("seed", "holdout_mse", "epochs",
                                                                                  "fit_seconds")}}  # fmt: skip
        if metrics["seed"] != seed:
            raise ValueError(f"it is seed {metrics['seed']:g}'s ensemble, not seed {seed}'s")
        model = new_ensemble(setting)
        model.load_state_dict(saved["model"])
    except Exception as e:  # torch raises many types for truncated, corrupt, crafted or foreign files
        why = f"{type(e).__name__}: {(str(e).strip() or 'unreadable').splitlines()[0].split('. ')[0]}"
        refused = re.search(r"(Trying to load unsupported|Unsupported) .*", str(e))
        if str(e).startswith("Weights only load failed") and refused:
            why = f"weights_only loading refused it: {refused[0].split('. ')[0]}"  # the refused global or opcode
        raise plumbing.UsageError(f"{path} is not an ensemble fitted by this script ({why}); delete it and run again "
                                  "(it is refitted)") from None  # fmt: skip
    metrics["seed"] = int(metrics["seed"])
    return model, metrics


def uncertainty_grid(model, u: str, n: int = 61, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """u(s, a) of an ensemble (the algorithms' own EnsembleDynamics.step) on an n×n grid of states, averaged over a k×k
    grid of actions covering [-1, 1]²; row i is y = xs[i], column j is x = xs[j]."""
    import torch

    xs, acts = np.linspace(-BOUND, BOUND, n), np.linspace(-1, 1, k)
    gx, gy = np.meshgrid(xs, xs)
    ax, ay = np.meshgrid(acts, acts)
    obs = torch.as_tensor(np.stack([gx.ravel(), gy.ravel()], 1), dtype=torch.float32).repeat_interleave(k * k, 0)
    act = torch.as_tensor(np.tile(np.stack([ax.ravel(), ay.ravel()], 1), (n * n, 1)), dtype=torch.float32)
    mean, std = model.step(obs, act)[2:]  # every member's Gaussian; u is the method's own function of them
    values = toolbox.algorithm("orpo").uncertainty(mean, std, u)
    return xs, values.reshape(n * n, k * k).mean(1).reshape(n, n).numpy()


def u_summary(grid: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """u (averaged over actions) on the data band vs off it: the numbers the penalty λp·u is made of."""
    xs, u = grid
    gx, gy = np.meshgrid(xs, xs)
    at = {f"at_{x:g}_{x:g}": float(u[np.abs(xs - x).argmin(), np.abs(xs - x).argmin()]) for x in (0, 1.5, 2.5, -2.5)}
    return {"band_mean": float(u[np.abs(gx + gy) < HALF_WIDTH].mean()), **at, "max": float(u.max())}


# ---------------------------------------------------------------------------------------------- one cell
def roll(policy, n_steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The policy's deterministic actions (numpy in, numpy out) in the real env for n_steps (whole episodes of 10
    steps): the visited states [episodes, 11, 2] (start state included) and each episode's return."""
    env = gym.make(ENV_ID)
    n_episodes = max(1, n_steps // EPISODE_STEPS)
    states, returns = np.zeros((n_episodes, EPISODE_STEPS + 1, 2), dtype=np.float32), np.zeros(n_episodes)
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed + ep)
        states[ep, 0] = obs
        for t in range(EPISODE_STEPS):
            obs, reward, terminated, truncated, _ = env.step(policy(obs[None].astype(np.float32))[0])
            states[ep, t + 1], returns[ep] = obs, returns[ep] + reward
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
    size = {**{k: getattr(setting, k) for k in keep}, "lambda_o": args.lambda_o, "rollout_length": args.rollout_length}
    return json.loads(json.dumps({**size, "fit": fit_config(setting, args)}))  # tuples as lists, as read back


def train_cell(setting: Setting, args: ToyArgs, dataset_path: str, dynamics_path: str, cells_dir: str, cell, run_root):
    """Train one (algorithm, u, λp, seed) with the algorithm's own main on the seed's saved ensemble, roll the exported
    policy for eval_steps real-env steps, and save the numbers (JSON), the visited states (npz) and the run's
    metrics.csv in cells/, each renamed when complete, the JSON last: a cell is finished when its JSON exists."""
    algo, u, lambda_p, seed = cell
    key = cell_key(*cell)
    runs_dir = os.path.join(run_root, key)  # the algorithm's run directory, removed with run_root
    a = algo_args(algo, setting, args, u, lambda_p, seed, dataset_path, runs_dir, load_dynamics_path=dynamics_path)
    t0, c0 = time.time(), time.process_time()
    summary = toolbox.algorithm(algo).main(a)
    train_seconds, cpu_seconds = time.time() - t0, time.process_time() - c0
    policy = toolbox.algorithm("collect", "datasets").load_policy(os.path.join(summary["run_dir"], "policy.pt"), 2, 2)
    states, returns = roll(policy, setting.eval_steps, seed=10_000 * seed)
    trajectories = roll(policy, 5 * EPISODE_STEPS, seed=123)[0]
    config = plumbing.read_json(os.path.join(summary["run_dir"], "config.json"))
    row = dict(algo=algo, u=u, lambda_p=lambda_p, seed=seed, avg_return=float(returns.mean()),
               return_std_over_episodes=float(returns.std()), episodes=len(returns),
               share_upper_right=upper_right_share(states[:, 1:]), train_seconds=train_seconds,
               train_cpu_seconds=cpu_seconds,
               train_last_eval_return=summary["return"],  # the run's own last evaluation (5 episodes), not the result
               **{f"config_{k}": config[k] for k in ("env", "uncertainty", "lambda_p", "load_dynamics_path")},
               size=cell_size(setting, args), algorithm_files=code_versions())  # fmt: skip
    base = os.path.join(cells_dir, key)
    shutil.copyfile(os.path.join(summary["run_dir"], "metrics.csv"), base + ".metrics.csv.tmp")
    with open(base + ".npz.tmp", "wb") as f:
        np.savez_compressed(f, visited=states[:, 1:].astype(np.float16), trajectories=trajectories.astype(np.float16))
    for ext in (".metrics.csv", ".npz"):
        os.replace(base + ext + ".tmp", base + ext)
    toolbox.write_json(row, base + ".json")  # the JSON last: it marks the cell finished
    print(f"{key}: average return {row['avg_return']:.2f} over {len(returns)} episodes, {train_seconds:.0f} s")


CELL_KEYS = ("algo", "u", "lambda_p", "seed", "avg_return", "share_upper_right", "train_seconds", "size")


def read_cell(cells_dir: str, cell, size: dict) -> Optional[dict]:
    """A finished cell's numbers (None if it is not finished); a damaged or foreign file, or one trained with other
    settings, is one line naming it."""
    base = os.path.join(cells_dir, cell_key(*cell))
    if not os.path.isfile(base + ".json"):
        return None
    try:
        with open(base + ".json") as f:
            row = json.load(f)
        if not isinstance(row, dict) or any(k not in row for k in CELL_KEYS):
            raise ValueError(f"not a cell's JSON object with {', '.join(CELL_KEYS)}")
        if [row["algo"], row["u"], row["lambda_p"], row["seed"]] != list(cell):
            raise ValueError(f"it holds {row['algo']} {row['u']} λp {row['lambda_p']} seed {row['seed']}")
        with np.load(base + ".npz", allow_pickle=False) as z:
            if z["visited"].ndim != 3:
                raise ValueError(f"{base}.npz holds no visited states")
    except Exception as e:
        why = f"{type(e).__name__}: {(str(e).strip() or 'unreadable').splitlines()[0]}"
        raise plumbing.UsageError(f"{base}.json is not a finished run of this script ({why}); delete it and run again "
                                  "(the run is retrained)") from None  # fmt: skip
    if row["size"] != size:
        raise plumbing.UsageError(f"{base}.json was trained with other settings ({row['size']}); use another --out-dir "
                                  "(or delete it)")  # fmt: skip
    return row


# ---------------------------------------------------------------------------------------------- workers
# Each fit and each training run is a process of its own (spawned, one per job; the toy starts, waits for and stops
# them itself: a process pool's shared call queue, whose lock a killed idle process can hold for good, once hung the
# toy after its last run), in its own session: a Ctrl-C in the terminal reaches only this process, which stops the
# workers and removes what they were writing. A worker's stdout and stderr (the algorithm's config, progress, summary)
# go to its log file (which starts with its pid); its progress bar's position comes back through a queue, its outcome
# through a pipe. A worker dies with its parent.
# A worker starts with SIGINT and SIGTERM blocked (run_jobs blocks them around its start; a mask survives exec): a
# Ctrl-C while it starts, still in the terminal's process group, would kill it with a traceback on the screen.
PROGRESS, STOP = None, {signal.SIGINT, signal.SIGTERM}  # in a worker: the queue its progress bars report to


@dataclass
class Job:
    label: str  # what the progress bar and the finish line call it
    call: tuple  # (fit_ensemble or train_cell, its arguments), run in a worker
    log: str
    outputs: tuple[str, ...]  # the finished files; their .tmp names are removed when the job is stopped
    key: object  # the seed a fit is for, the cell a run trains
    needs: tuple[str, ...] = ()  # files that must exist before it starts (a cell needs its seed's ensemble)
    total: Optional[int] = None  # progress bar length (None: unknown, e.g. a fit's epochs)


def worker_init(progress, parent: int) -> None:
    """In each worker: its own session, death with the toy (PR_SET_PDEATHSIG), the progress queue."""
    global PROGRESS
    os.setsid()
    for s in STOP:  # one that reached it while it started is dropped; the toy stops it with SIGKILL
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
    PROGRESS = progress


def worker(job: Job, progress, parent: int, outcome) -> None:
    """One job in a worker process, its output to its log; its outcome (None, or the error in one line: the log has
    the trace) goes back through the pipe `outcome`."""
    worker_init(progress, parent)
    with open(job.log, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        print(f"worker pid {os.getpid()}", flush=True)
        import torch

        torch.set_num_threads(1)  # 2 shared cores: a busy second core makes 2-thread OpenMP matmuls very slow
        # tqdm's default lock is a multiprocessing lock, a semaphore the resource tracker counts: a worker killed at a
        # signal would leave it "leaked" (a warning on the toy's stderr); one process needs a thread lock only
        tqdm_std.tqdm.set_lock(threading.RLock())

        class Bar(toolbox.algorithm("orpo").tqdm):  # the algorithms' bars (epochs, fits) report to the parent
            def __init__(self, *a, **kw):
                super().__init__(*a, **{**kw, "file": io.StringIO(), "disable": False, "mininterval": 0, "miniters": 1})

            def display(self, msg=None, pos=None):
                PROGRESS.put((job.label, self.n, self.total, self.postfix))

        for module in (toolbox.algorithm("orpo"), toolbox.algorithm("mopo")):
            module.tqdm = Bar
        try:
            job.call[0](*job.call[1:])
            outcome.send(None)
        except BaseException as e:
            traceback.print_exc()  # into the log
            outcome.send(str(e).splitlines()[0] if str(e) else type(e).__name__)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


def run_jobs(jobs: list[Job], workers: int, on_done) -> None:
    """Run the jobs, at most `workers` at a time, each in a process of its own as soon as its inputs exist, with a
    progress bar per running job (on a terminal); `on_done(job)` prints its line. A failed job stops all others (a
    plumbing.UserError, exit 1); so does a signal (Interrupted, raised by the handler `cli` installs). Only then are
    workers killed; stopped jobs leave no .tmp file. Every worker has ended when it returns."""
    from multiprocessing.connection import wait

    from tqdm import tqdm

    # no monitor thread: the signal mask around a worker's start must hold for the whole process (a signal taken by
    # another thread still ran the handler in the main thread, mid-start, and the half-fed worker printed a traceback)
    tqdm.monitor_interval = 0
    context = multiprocessing.get_context("spawn")
    progress, todo, active = context.Queue(), list(jobs), {}  # active: process -> (job, bar, its outcome's pipe)
    for job in jobs:
        os.makedirs(os.path.dirname(job.log), exist_ok=True)
    try:
        while todo or active:
            for job in [j for j in todo if all(map(os.path.isfile, j.needs))][: workers - len(active)]:
                todo.remove(job)
                bar = tqdm(total=job.total, desc=job.label, unit="epoch", leave=False, dynamic_ncols=True, disable=None)
                outcome, sent = context.Pipe(duplex=False)
                process = context.Process(target=worker, args=(job, progress, os.getpid(), sent))
                signal.pthread_sigmask(signal.SIG_BLOCK, STOP)  # the process starts with them blocked; a signal that
                try:  # came meanwhile is handled once it is in `active`, so the finally below stops it
                    process.start()
                    active[process] = (job, bar, outcome)
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
                sent.close()  # the worker's end: the pipe reads EOF once the worker is gone
            if not active:
                raise plumbing.UserError(f"{todo[0].label} needs {todo[0].needs}, which no job makes")
            wait([p.sentinel for p in active], timeout=0.5)
            bars = {job.label: bar for job, bar, _ in active.values()}
            while not progress.empty():
                label, n, total, postfix = progress.get()
                if label in bars:
                    bars[label].total, bars[label].n = bars[label].total if total is None else total, n
                    bars[label].set_postfix_str(postfix or "", refresh=True)
            for process in [p for p in active if p.exitcode is not None]:
                job, bar, outcome = active.pop(process)
                bar.close()
                try:
                    error = outcome.recv()
                except EOFError:  # killed, or died before it could say
                    error = f"its process ended with exit status {process.exitcode}"
                outcome.close()
                if error is not None:
                    raise plumbing.UserError(f"{job.label} failed ({error}); its log: {job.log}")
                on_done(job)
    finally:  # a failure or a signal: stop the running workers, remove what they were writing
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
        for process in active:
            process.kill()
        for process, (job, bar, outcome) in active.items():
            process.join()  # none outlives the toy: a worker still starting once failed on the queue the exit removed
            bar.close()
            outcome.close()
            for tmp in (t for path in job.outputs for t in glob.glob(glob.escape(path) + "*.tmp")):
                os.remove(tmp)


# ---------------------------------------------------------------------------------------------- statistics
def aggregate(rows: list[dict]) -> dict:
    """Per (algorithm, u, λp): mean return over seeds, its 95 % bootstrap interval, per-seed values, corner shares."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        groups.setdefault((r["algo"], r["u"], r["lambda_p"]), []).append(r)
    out = {}
    for (algo, u, lp), rs in sorted(groups.items()):
        returns = [r["avg_return"] for r in rs]
        out[f"{algo}|{u}|{lp:g}"] = dict(
            algo=algo, u=u, lambda_p=lp, mean=float(np.mean(returns)),
            ci95=list(stats.bootstrap(returns)),  # benchmarks/stats.py: scipy's percentile bootstrap
            seeds=[r["seed"] for r in rs], per_seed=returns, share_upper_right=[r["share_upper_right"] for r in rs],
            train_seconds=[r["train_seconds"] for r in rs], train_cpu_seconds=[r.get("train_cpu_seconds") for r in rs],
        )  # fmt: skip
    return out


def comparisons(table: dict, lambda_ps) -> list[dict]:
    """ORPO vs MOPO at each λp: with the same u (matched) and as the authors ran it (MOPO ensemble_std, ORPO
    max_aleatoric); `orpo_better` only when ORPO's interval lies wholly above MOPO's (one seed has no interval)."""
    pairs = [(u, u, f"matched {u}") for u in U_CHOICES] + [(*AUTHORS_U.values(), "as the authors ran it")]
    out = []
    for lp, (u_m, u_o, name) in ((lp, p) for lp in lambda_ps for p in pairs):
        m, o = table.get(f"mopo|{u_m}|{lp:g}"), table.get(f"orpo|{u_o}|{lp:g}")
        if m is not None and o is not None:
            n = min(len(m.get("per_seed", [0, 0])), len(o.get("per_seed", [0, 0])))
            out.append(dict(lambda_p=lp, comparison=name, mopo=m["mean"], mopo_ci95=m["ci95"], orpo=o["mean"],
                            orpo_ci95=o["ci95"], seeds=n, orpo_better=n >= 2 and o["ci95"][0] > m["ci95"][1],
                            mopo_better=n >= 2 and m["ci95"][0] > o["ci95"][1]))  # fmt: skip
    return out


def mean_text(entry: dict) -> str:
    """An aggregate entry's mean return, with its 95 % interval only over 2+ seeds (one seed has none)."""
    lo, hi = entry["ci95"]
    return f"{entry['mean']:.1f}" + (f" [{lo:.1f}, {hi:.1f}]" if len(entry["seeds"]) > 1 else "")


# ---------------------------------------------------------------------------------------------- figures
def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path + ".tmp", format="png", dpi=dpi)  # renamed when complete
    os.replace(path + ".tmp", path)
    pyplot().close(fig)


def draw_scene(ax, title: str, band_color: str = "darkblue"):
    line = np.linspace(-BOUND, BOUND, 2)
    for c in (-HALF_WIDTH, HALF_WIDTH):
        ax.plot(line, -line + c, color=band_color, lw=1)
    ax.add_patch(pyplot().Rectangle((-BOUND, -BOUND), 2 * BOUND, 2 * BOUND, lw=1.5, ec="black", fc="none"))
    ax.set(xlim=(-BOUND - 0.1, BOUND + 0.1), ylim=(-BOUND - 0.1, BOUND + 0.1), aspect="equal")
    ax.set_title(title, fontsize=9)


def plot_uncertainty(path: str, grids: dict, lambda_p: float, seed: int, mse: float):
    """Per u, top: the map of u (log colour scale); bottom: the P-MDP reward of arriving there, r(s) − λp·u(s, a)
    (averaged over actions), which is what the pessimistic policies maximise."""
    from matplotlib.colors import LogNorm

    fig, axes = pyplot().subplots(2, len(grids), figsize=(5.2 * len(grids), 9.2), squeeze=False)
    for col, (u, (xs, grid)) in enumerate(grids.items()):
        gx, gy = np.meshgrid(xs, xs)
        p_reward = reward_fn(np.stack([gx, gy], -1)) - lambda_p * grid
        s, i = u_summary((xs, grid)), np.abs(xs - 2.5).argmin()
        band, corner = p_reward[np.abs(gx + gy) < HALF_WIDTH].mean(), p_reward[i, i]
        for ax, image, kw, label, title in (
            (axes[0, col], np.maximum(grid, 1e-6), dict(cmap="hot", norm=LogNorm()), f"u = {u}",
             f"u = {u}: band mean {s['band_mean']:.3g}, at (2.5, 2.5) {s['at_2.5_2.5']:.3g}"),
            (axes[1, col], p_reward, dict(cmap="RdYlGn"), f"r(s) − {lambda_p:g}·u",
             f"P-MDP reward, λp = {lambda_p:g}: band mean {band:.2f}, at (2.5, 2.5) {corner:.2f}"),
        ):  # fmt: skip
            fig.colorbar(ax.imshow(image, origin="lower", extent=[xs[0], xs[-1]] * 2, **kw), ax=ax, fraction=0.046,
                         label=label)  # fmt: skip
            draw_scene(ax, title, band_color="deepskyblue")
    fig.suptitle(f"Seed {seed}'s ensemble (4×200, holdout MSE {mse:.1e}); u averaged over actions", fontsize=10)
    save(fig, path, dpi=80)


def plot_visited(path: str, table: dict, cells_dir: str, lambda_p: float, title: str):
    """2×2: MOPO / ORPO × ensemble_std / max_aleatoric, the states visited in eval_steps real steps, every seed."""
    fig, axes = pyplot().subplots(2, 2, figsize=(9.5, 9.5))
    for ax, (u, algo) in zip(axes.flat, itertools.product(("ensemble_std", "max_aleatoric"), ("mopo", "orpo"))):
        entry = table.get(f"{algo}|{u}|{lambda_p:g}")
        if entry is None:
            ax.set_visible(False)
            continue
        for i, seed in enumerate(entry["seeds"]):
            s = np.load(os.path.join(cells_dir, cell_key(algo, u, lambda_p, seed) + ".npz"))["visited"].reshape(-1, 2)
            ax.scatter(s[:, 0], s[:, 1], s=4, alpha=0.25, marker="x", color=f"C{i}", label=f"seed {seed}")
        per_seed = ", ".join(f"{v:.1f}" for v in entry["per_seed"])
        tag = " (as the authors ran it)" if AUTHORS_U[algo] == u else ""
        draw_scene(ax, f"{algo.upper()}, u = {u}{tag}\naverage return {mean_text(entry)}, per seed {per_seed}")
        ax.legend(loc="lower left", fontsize=7, markerscale=2)
    fig.suptitle(title, fontsize=10)
    save(fig, path, dpi=80)


def plot_phase(path: str, table: dict, setting: Setting, title: str):
    """Average return vs λp, one panel per u: MOPO and ORPO with the same u, 95 % bootstrap intervals."""
    us = [u for u in U_CHOICES if any(e["u"] == u for e in table.values())]
    fig, axes = pyplot().subplots(1, len(us), figsize=(5.2 * len(us), 4.2), squeeze=False, sharey=True)
    for ax, u in zip(axes[0], us):
        for algo, color, shift in (("mopo", "tab:blue", 0.96), ("orpo", "tab:red", 1.04)):
            es = sorted((e for e in table.values() if e["algo"] == algo and e["u"] == u), key=lambda e: e["lambda_p"])
            if not es:
                continue
            n = sorted({len(e["seeds"]) for e in es})
            err = np.array([[e["mean"] - e["ci95"][0], e["ci95"][1] - e["mean"]] for e in es]).T
            err[:, [len(e["seeds"]) < 2 for e in es]] = np.nan  # one seed has no interval: no bar, not one of length 0
            ax.errorbar(np.array([e["lambda_p"] for e in es]) * shift, [e["mean"] for e in es],
                        yerr=err if np.isfinite(err).any() else None, marker="o", ms=4, capsize=3, color=color,
                        label=f"{algo.upper()} ({'–'.join(map(str, sorted({n[0], n[-1]})))} seed{'s' * (n[-1] > 1)} "
                        "per point)")  # fmt: skip
        ax.scatter([100, 100], [PAPER["mopo"], PAPER["orpo"]], marker="*", s=90, color=["tab:blue", "tab:red"],
                   edgecolor="black", zorder=5, label="paper (λp = 100)")  # fmt: skip
        ax.axhline(0, color="grey", lw=0.5)
        ax.set(xscale="log", xlabel="λp (both methods)")
        ax.set_title(f"u = {u} (both methods)", fontsize=10)
        ax.legend(fontsize=8, loc="best")
    axes[0, 0].set_ylabel("average return per 10-step episode")
    fig.suptitle(title, fontsize=10)
    save(fig, path, dpi=90)


# ---------------------------------------------------------------------------------------------- the experiment
def train(args: ToyArgs, setting: Setting, todo: list, fits: dict, rows: dict, paths: dict) -> None:
    """Fit the missing ensembles and train the missing cells in worker processes, each line printed as it finishes."""
    from tqdm import tqdm

    cells_dir, logs_dir, ens_paths, size = paths["cells"], paths["logs"], paths["ensembles"], cell_size(setting, args)
    os.makedirs(cells_dir, exist_ok=True)
    # the dataset is rebuilt (deterministically) each time; only the ensembles and the finished cells are kept
    with tempfile.TemporaryDirectory(prefix="riskworld_") as tmp:
        data = write_dataset(f"{tmp}/{DATASET_NAME}.hdf5", make_dataset(setting.dataset_size, args.dataset_seed))
        jobs = [Job(f"ensemble seed {s}", (fit_ensemble, setting, args, data, ens_paths[s], s),
                    os.path.join(logs_dir, f"ensemble_s{s}.log"), (ens_paths[s],), s)
                for s in setting.seeds if s not in fits and any(c[3] == s for c in todo)]  # fmt: skip
        jobs += [Job(f"{c[0].upper()} {c[1]} λp {c[2]:g} seed {c[3]}",
                     (train_cell, setting, args, data, ens_paths[c[3]], cells_dir, c, tmp),
                     os.path.join(logs_dir, f"{cell_key(*c)}.log"),
                     tuple(os.path.join(cells_dir, cell_key(*c)) + e for e in (".json", ".npz", ".metrics.csv")), c,
                     needs=(ens_paths[c[3]],), total=setting.epochs) for c in todo]  # fmt: skip

        def on_done(job: Job):
            if job.call[0] is fit_ensemble:
                f = fits[job.key] = read_ensemble(ens_paths[job.key], setting, job.key)[1]
                line, secs = f"holdout MSE {f['holdout_mse']:.2e} after {f['epochs']:.0f} epochs", f["fit_seconds"]
            else:
                r = rows[job.key] = read_cell(cells_dir, job.key, size)
                line = f"return {r['avg_return']:.1f}, {100 * r['share_upper_right']:.0f} % of steps in the upper right"
                secs = r["train_seconds"]
            tqdm.write(f"{job.label}: {line} ({secs:.0f} s)")
            sys.stdout.flush()

        run_jobs(jobs, args.workers, on_done)


def run(args: ToyArgs, command: Optional[str] = None) -> dict:
    import torch

    torch.set_num_threads(1)  # 2 shared cores: a busy second core makes 2-thread OpenMP matmuls very slow
    setting, out_dir = resolve(args)  # every flag checked: nothing is read or written before
    t_start = time.time()
    cells_dir, logs_dir = os.path.join(out_dir, "cells"), os.path.join(out_dir, "logs")
    ensembles_dir = os.path.abspath(args.ensembles_dir)
    config = fit_config(setting, args)
    ens_paths = {seed: ensemble_path(ensembles_dir, config, seed) for seed in setting.seeds}
    cells, size = cell_list(setting), cell_size(setting, args)
    for algo, lp in itertools.product(("orpo", "mopo"), setting.lambda_ps):  # the algorithms' own flag checks
        try:
            plumbing.check_args(algo_args(algo, setting, args, "max_aleatoric", lp, 1, None, "unused"))
        except plumbing.UserError as e:
            raise plumbing.UsageError(f"{algo}.py refuses the toy's settings: {str(e).splitlines()[0]}") from None
    # what earlier invocations left: every ensemble and finished cell is read (and checked) before any work
    fits = {s: read_ensemble(p, setting, s)[1] for s, p in ens_paths.items() if os.path.isfile(p)}
    rows = {c: r for c in cells if (r := read_cell(cells_dir, c, size)) is not None}
    shown = lambda p: os.path.relpath(p) if os.path.abspath(p).startswith(os.getcwd() + os.sep) else p  # noqa: E731
    what = (f"RiskWorld '{args.setting}': {len(cells)} runs (MOPO and ORPO; λp "
            f"{', '.join(f'{x:g}' for x in setting.lambda_ps)}; seed{'s' if len(setting.seeds) > 1 else ''} "
            f"{', '.join(map(str, setting.seeds))})")  # fmt: skip
    if args.report_only and not rows:
        raise plumbing.UsageError(f"--report-only: no finished runs in {cells_dir}")
    if args.report_only:
        print(f"{what}, {len(rows)} finished; report only", flush=True)
    else:
        print(what + (f", {len(rows)} already finished" if rows else "") + f", {args.workers} at a time; logs in "
              f"{shown(logs_dir)}", flush=True)  # fmt: skip
        try:
            todo = [c for c in cells if c not in rows]
            train(args, setting, todo, fits, rows, dict(cells=cells_dir, logs=logs_dir, ensembles=ens_paths))
        except Interrupted as e:
            done = sum(os.path.isfile(os.path.join(cells_dir, cell_key(*c) + ".json")) for c in cells)
            e.detail = f"{done} of {len(cells)} runs finished and kept in {shown(cells_dir)}"
            raise
    missing = [cell_key(*c) for c in cells if c not in rows]
    table = aggregate([rows[c] for c in cells if c in rows])
    fits = [fits[s] for s in setting.seeds if s in fits]
    if not fits:
        raise plumbing.UsageError(f"no fitted ensemble for seeds {setting.seeds} in {ensembles_dir}")
    # u on and off the band for every seed's ensemble: where λp·u crosses the reward decides the corner
    grids = {f["seed"]: {u: uncertainty_grid(read_ensemble(ens_paths[f["seed"]], setting, f["seed"])[0], u)
                         for u in U_CHOICES} for f in fits}  # fmt: skip
    first, lp_top = fits[0]["seed"], max(setting.lambda_ps)
    figures = [os.path.join(out_dir, "uncertainty.png")]
    plot_uncertainty(figures[0], grids[first], lp_top, first, fits[0]["holdout_mse"])
    nets = f"{'×'.join(map(str, setting.hidden_dims))} nets" if setting.hidden_dims else "the algorithms' own nets"
    size = f"{setting.rollout_batch_size} rollout starts, {nets}, {setting.epochs}×{setting.steps_per_epoch} steps"
    for lp in setting.lambda_ps if setting.cells == "two_ways" else (lp_top,):
        figures.append(os.path.join(out_dir, f"visited_lp{lp:g}.png"))
        plot_visited(figures[-1], table, cells_dir, lp, f"RiskWorld '{args.setting}', λp = {lp:g}, λo = "
                     f"{args.lambda_o:g}, h = {args.rollout_length}, {size}: states visited in {setting.eval_steps} "
                     "real steps per policy")  # fmt: skip
    if len(setting.lambda_ps) > 1:
        figures.append(os.path.join(out_dir, "phase.png"))
        several = any(len(e["seeds"]) > 1 for e in table.values())
        intervals = "95 % bootstrap intervals over seeds" if several else "1 seed"
        plot_phase(figures[-1], table, setting, f"RiskWorld '{args.setting}': average return vs λp ({size}; "
                   f"{intervals}; λo = {args.lambda_o:g})")  # fmt: skip
    wall, cpu = time.time() - t_start, toolbox.device_name(torch.device("cpu"))
    metric = (
        f"average cumulative reward per 10-step episode over {setting.eval_steps} real-env steps of the "
        "deterministic policy; mean over seeds with a 95 % percentile bootstrap interval (10,000 resamples)"
    )
    results = dict(
        claim="ORPO reaches the high-reward upper-right region and MOPO does not (paper: MOPO 7.3, ORPO 35.3 at λp = 100)",
        paper=PAPER, setting_name=args.setting, setting=dataclasses.asdict(setting),
        toy_args={k: v for k, v in dataclasses.asdict(args).items() if k not in ("out_dir", "ensembles_dir")},
        metric=metric, table=table, comparisons=comparisons(table, setting.lambda_ps), missing_cells=missing,
        ensembles={"fit_rule": config, "per_seed": fits},
        uncertainty_per_seed={s: {u: u_summary(g) for u, g in gs.items()} for s, gs in grids.items()},
        wall_seconds_this_invocation=wall, cpu=cpu, workers=args.workers, torch_threads_per_worker=1, command=command,
        algorithm_files=code_versions(),
        figures=[os.path.relpath(p, ROOT) if p.startswith(ROOT) else p for p in figures],
    )  # fmt: skip
    toolbox.write_json(results, os.path.join(out_dir, "results.json"))
    print_summary(results)
    print(f"results.json, figures and logs in {shown(out_dir)} ({wall / 60:.1f} min this invocation on {cpu}, "
          f"{args.workers} worker{'s' if args.workers > 1 else ''})")  # fmt: skip
    return results


def print_summary(results: dict):
    """The table a reader wants: one row per (algorithm, u, λp); an interval and a verdict only with 2+ seeds."""
    print()
    for f in results["ensembles"]["per_seed"]:
        print(f"ensemble seed {f['seed']}: holdout MSE {f['holdout_mse']:.2e} after {f['epochs']:.0f} epochs")
    table = list(results["table"].values())
    several = any(len(e["seeds"]) > 1 for e in table)
    print(f"average return per 10-step episode of each policy, {results['setting']['eval_steps'] // EPISODE_STEPS} "
          "episodes in the real env" + (", mean over seeds [95 % bootstrap interval]" if several else "")
          + "; corner: share of steps with x > 1.5 and y > 1.5")  # fmt: skip
    rows = [["algorithm", "u", "λp", "return", "corner", "seeds" if several else ""]]
    for e in table:
        shares = sorted({round(100 * s) for s in e["share_upper_right"]})
        note = "as the authors ran it" if AUTHORS_U[e["algo"]] == e["u"] else ""
        if several:
            note = ", ".join(f"{v:.1f}" for v in e["per_seed"]) + (f" ({note})" if note else "")
        corner = f"{shares[0]}–{shares[-1]} %" if len(shares) > 1 else f"{shares[0]} %"
        rows.append([e["algo"].upper(), e["u"], f"{e['lambda_p']:g}", mean_text(e), corner, note])
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        cols = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r[:5], widths))]
        print(("  ".join(cols) + "  " + r[5]).rstrip())
    print(f"paper, λp = 100: MOPO {PAPER['mopo']}, ORPO {PAPER['orpo']} (ORPO's policy reaches the corner, MOPO's not)")
    if results["missing_cells"]:
        print(f"not trained yet ({len(results['missing_cells'])}): {', '.join(results['missing_cells'])}")
    if not several:
        print("1 seed: no intervals and no verdict (--setting reduced runs 5 seeds)")
        return
    for c in results["comparisons"]:
        verdict = ("too few seeds" if c["seeds"] < 2 else "ORPO > MOPO" if c["orpo_better"] else "MOPO > ORPO"
                   if c["mopo_better"] else "intervals overlap")  # fmt: skip
        print(f"λp {c['lambda_p']:g}, {c['comparison']}: MOPO {c['mopo']:.1f}, ORPO {c['orpo']:.1f} ({verdict})")


def on_signal(signum, frame):
    """SIGINT/SIGTERM: a second one is ignored while the workers are stopped and their files removed, and until the
    toy has exited (a default handler back in place made a second Ctrl-C end it by the signal: exit -2, not 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def cli(argv=None) -> int:
    """The command line (benchmarks/toolbox.py's): bad input is one line and exit 2, a failed run one line and exit 1,
    Ctrl-C/SIGTERM one line and exit 130/143 (the workers stopped, finished runs kept: the same command resumes)."""
    argv = sys.argv[1:] if argv is None else argv

    def main(args: ToyArgs) -> int:
        try:
            run(args, command=" ".join(["python toy/riskworld.py", *argv]))
        except BrokenPipeError:
            raise
        except OSError as e:  # a folder that became unwritable or full during the run
            why = f"{e}; free disk space or pass a writable --out-dir (the same command resumes)"
            raise plumbing.UserError(why) from None
        return 0

    def said(e: KeyboardInterrupt) -> str:
        name, detail = signal.Signals(getattr(e, "signum", signal.SIGINT)).name, getattr(e, "detail", "")
        return f"interrupted by {name}: workers stopped; {detail or 'finished runs are kept'}; the same command resumes"

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return toolbox.cli(main, ToyArgs, argv, said)
    finally:
        for s, handler in previous.items():
            if signal.getsignal(s) is on_signal:  # no signal came; after one, on_signal's SIG_IGN stays
                signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(cli())
