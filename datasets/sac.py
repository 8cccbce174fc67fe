"""Online SAC for the Gymnasium MuJoCo envs, and D4RL's medium / medium-replay recipe built on it.

D4RL made its "medium" data with a SAC policy trained online until it reached about a third of the expert's
return, and its "medium-replay" data from that SAC's replay buffer up to that moment. This script trains the SAC
(rlkit's settings: lr 3e-4, batch 256, two 256-unit layers, gamma 0.99, tau 0.005), evaluates its deterministic
policy every --eval-every steps, and the first time the evaluation return reaches a level of D4RL's reference
returns (--levels, normalised score 100 * (R - random) / (expert - random)) it
  - saves the policy as <run-dir>/policy-<level>.pt (datasets/collect.py's policy format), and
  - writes the replay buffer up to that step as the dataset local/<env>-<level>-replay (e.g. local/hopper-medium-replay).
The whole replay buffer is kept (in the checkpoint) until the end. Then

    python datasets/sac.py --env Hopper-v4 --run-dir runs/sac-hopper-s0 --resume
    python datasets/collect.py --env Hopper-v4 --policy runs/sac-hopper-s0/policy-medium.pt --stochastic \
        --name local/hopper-medium

The SAC pieces (networks, update, checkpoint, the online loop) are also what datasets/halfcheetah_jump.py uses.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from common import (
    REF_SCORES,
    UsageError,
    allocate_buffer,
    behavior_attrs,
    check_box_env,
    check_float,
    check_int,
    check_memory,
    check_output_path,
    check_overwrite,
    close_last_episode,
    dataset_path,
    env_slug,
    load_torch_file,
    normalized_score,
    record,
    run_cli,
    write_dataset,
)
from toolbox import atomic_save, read_json, write_json, write_text  # the scripts' checkpoint, JSON and text writers

# ---------------------------------------------------------------------------- SAC

# log-std clamped as in the algorithm files' TanhGaussianActor (and rlkit): the exported policy.pt format's meaning.
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(d_in: int, d_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, d_out)
    )


class SoftQ(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, 1, hidden)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1)).squeeze(-1)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_space: gym.spaces.Box, hidden: int):
        super().__init__()
        self.net = mlp(obs_dim, 2 * action_space.shape[0], hidden)
        high, low = torch.as_tensor(action_space.high), torch.as_tensor(action_space.low)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def forward(self, obs, deterministic: bool = False):
        """tanh-Gaussian action (reparameterised sample, or tanh(mean) if deterministic) and its log-probability."""
        mean, log_std = self.net(obs).chunk(2, -1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        normal = torch.distributions.Normal(mean, log_std.exp())
        u = mean if deterministic else normal.rsample()
        squashed = torch.tanh(u)
        log_prob = normal.log_prob(u) - torch.log(self.action_scale * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.action_scale + self.action_bias, log_prob.sum(-1)


class SAC:
    """Twin soft Q-functions, a tanh-Gaussian actor and a learned temperature. `hp` holds learning_rate, gamma, tau
    and hidden_dim (both scripts' Args do)."""

    def __init__(self, env: gym.Env, hp, device: torch.device):
        obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
        self.hp, self.device = hp, device
        self.actor = Actor(obs_dim, env.action_space, hp.hidden_dim).to(device)
        self.qf1, self.qf2 = (SoftQ(obs_dim, act_dim, hp.hidden_dim).to(device) for _ in range(2))
        self.qf1_target, self.qf2_target = (SoftQ(obs_dim, act_dim, hp.hidden_dim).to(device) for _ in range(2))
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.target_entropy = -float(act_dim)
        self.q_opt = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=hp.learning_rate)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=hp.learning_rate)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=hp.learning_rate)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)[None]
        return self.actor(obs, deterministic)[0][0].cpu().numpy()

    def update(self, batch: dict[str, torch.Tensor]) -> None:
        hp, alpha = self.hp, self.log_alpha.exp().detach()
        obs, act, rew = batch["observations"], batch["actions"], batch["rewards"]
        next_obs, done = batch["next_observations"], batch["terminals"].float()

        # Only true terminations stop bootstrapping; time-limit cuts do not.
        with torch.no_grad():
            next_act, next_log_prob = self.actor(next_obs)
            next_q = torch.min(self.qf1_target(next_obs, next_act), self.qf2_target(next_obs, next_act))
            target = rew + hp.gamma * (1 - done) * (next_q - alpha * next_log_prob)
        q_loss = F.mse_loss(self.qf1(obs, act), target) + F.mse_loss(self.qf2(obs, act), target)
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()

        new_act, log_prob = self.actor(obs)
        q_new = torch.min(self.qf1(obs, new_act), self.qf2(obs, new_act))
        actor_loss = (alpha * log_prob - q_new).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(self.log_alpha.exp() * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()

        with torch.no_grad():
            for net, target_net in ((self.qf1, self.qf1_target), (self.qf2, self.qf2_target)):
                for p, tp in zip(net.parameters(), target_net.parameters()):
                    tp.lerp_(p, hp.tau)

    # Nets and optimisers, all saved through their own state_dict.
    PARTS = ("actor", "qf1", "qf2", "qf1_target", "qf2_target", "q_opt", "actor_opt", "alpha_opt")

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.PARTS} | {"log_alpha": self.log_alpha.detach()}

    def load_state_dict(self, state: dict) -> None:
        for name in self.PARTS:
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    def export_policy(self, path: Path) -> None:
        """The actor as a policy.pt that datasets/collect.py's load_policy reads ("tanh_gaussian_mlp": the net maps
        (obs - obs_mean) / obs_std to mean and log-std, log-std clamped to [-5, 2], action = max_action * tanh(.))."""
        scale, bias = self.actor.action_scale.cpu(), self.actor.action_bias.cpu()
        if not (torch.all(scale == scale[0]) and torch.all(bias == 0)):
            raise ValueError("the policy format needs a symmetric action box with one bound for every dimension")
        obs_dim = self.actor.net[0].in_features
        atomic_save(
            {
                "kind": "tanh_gaussian_mlp",
                "max_action": float(scale[0]),
                "obs_mean": torch.zeros(obs_dim),
                "obs_std": torch.ones(obs_dim),
                "state_dict": {k: v.cpu().clone() for k, v in self.actor.net.state_dict().items()},
            },
            str(path),
        )


# ---------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: Path, step: int, sac: SAC, buf, env: gym.Env, rng: np.random.Generator, settings, extra=None):
    """Everything needed to continue exactly where we are. Taken between episodes, so the env's physics need not be
    saved: only its RNG, which draws the next reset. `settings` (those that shape the data) are checked on resume;
    `extra` is the caller's own state (plain values)."""
    state = {
        "step": step,
        "settings": dict(settings),
        "sac": sac.state_dict(),
        "buffer": {k: torch.from_numpy(v[:step]) for k, v in buf.items()},
        "rng": {
            "numpy": rng.bit_generator.state,
            "env": env.unwrapped.np_random.bit_generator.state,
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
        "extra": extra or {},
    }
    try:
        atomic_save(state, str(path))  # the algorithms' checkpoint writer (a .tmp, renamed when complete)
    except OSError as e:
        raise OSError(f"{e.strerror or e}; the last checkpoint is kept: free space, then rerun with --resume") from None


def load_checkpoint(path: Path, sac: SAC, buf, env: gym.Env, rng: np.random.Generator, settings, steps: int):
    """Restore a save_checkpoint state; returns (step, extra). Every problem is a one-line ValueError."""
    fix = f"delete {path} to start over"
    state = load_torch_file(path, "checkpoint", fix)
    if (
        not isinstance(state, dict)
        or not {"step", "settings", "sac", "buffer", "rng"} <= state.keys()
        or not isinstance(state["settings"], dict)
    ):
        raise ValueError(f"{path} is not a checkpoint of this script (keys missing); {fix}")
    settings, saved = dict(settings), state["settings"]
    # every key of both: a checkpoint without a setting (another script's, an older version's) is not this run's
    changed = {k: (saved.get(k), settings.get(k)) for k in {**saved, **settings} if saved.get(k) != settings.get(k)}
    if changed:
        raise ValueError(f"{path} was made with other settings (checkpoint, now): {changed}")
    step = state["step"]
    try:
        if not isinstance(step, int) or not 0 < step < steps:
            raise ValueError(f"step {step!r} is not within (0, {steps})")
        sac.load_state_dict(state["sac"])
        for k in buf:
            buf[k][:step] = state["buffer"][k].numpy()
        rng.bit_generator.state = state["rng"]["numpy"]
        env.unwrapped.np_random.bit_generator.state = state["rng"]["env"]
        torch.set_rng_state(state["rng"]["torch"].cpu())
        if torch.cuda.is_available() and state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
    except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ValueError(f"{path} does not match this run ({type(e).__name__}: {detail}); {fix}") from None
    # a NaN weight would reach the env as a NaN action, and the dataset as NaN rows
    nets = {name: getattr(sac, name) for name in ("actor", "qf1", "qf2", "qf1_target", "qf2_target")}
    weights = [(f"{n}.{k}", v) for n, net in nets.items() for k, v in net.state_dict().items()]
    bad = next((name for name, v in [*weights, ("log_alpha", sac.log_alpha)] if not torch.isfinite(v).all()), None)
    if bad:
        raise ValueError(f"{path} holds NaN or infinite weights ({bad}); {fix}")
    extra = state.get("extra", {})
    return step, extra if isinstance(extra, dict) else {}  # the caller checks what it needs of it


# ---------------------------------------------------------------------------- the online loop

TRAIN_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals")


def train_online(
    env: gym.Env,
    obs: np.ndarray,
    sac: SAC,
    buf,
    rng: np.random.Generator,
    *,
    start: int,
    steps: int,
    learning_starts: int,
    batch_size: int,
    at_episode_end: Callable[[int, tqdm], bool],
    reward_fn: Callable | None = None,
    desc: str = "sac",
) -> tuple[int, bool]:
    """Run SAC online from step `start` (`obs`: the env's current observation) to `steps`, every transition stored in
    `buf` (the replay buffer is the whole buffer: nothing is dropped). Uniform random actions before
    `learning_starts`, then one update per step on a uniform minibatch of all steps so far. `reward_fn(action,
    env_reward, info)` replaces the env's reward. `at_episode_end(steps_done, progress_bar)` runs at each episode end
    before the reset (where checkpoints are taken); returning True stops there. Returns (gradient updates, stopped)."""
    low, high = env.action_space.low, env.action_space.high
    updates = 0
    pbar = tqdm(range(start, steps), initial=start, total=steps, desc=desc, unit="step", mininterval=1.0)
    for t in pbar:
        if t < learning_starts:
            action = rng.uniform(low, high).astype(np.float32)
        else:
            action = sac.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        if reward_fn is not None:
            reward = reward_fn(action, reward, info)
        record(buf, t, obs, action, reward, next_obs, terminated, truncated, info)

        if t >= learning_starts:
            idx = rng.integers(0, t + 1, size=batch_size)
            sac.update({k: torch.as_tensor(buf[k][idx], device=sac.device) for k in TRAIN_KEYS})
            updates += 1

        if not (terminated or truncated):
            obs = next_obs
            continue
        if at_episode_end(t + 1, pbar):
            pbar.close()
            return updates, True
        obs, _ = env.reset()
    pbar.close()
    return updates, False


# ---------------------------------------------------------------------------- D4RL's medium recipe


@dataclass
class Args:
    env: str = "Hopper-v4"
    """Gymnasium env id (D4RL's reference returns exist for Hopper-v4, Walker2d-v4, HalfCheetah-v4)"""
    steps: int = 1_000_000
    """env steps of online training (= the whole replay buffer's size)"""
    seed: int = 0
    """seeds the env, the warm-up actions, the minibatches and the networks"""
    run_dir: str | None = None
    """where the checkpoint, progress.csv, snapshots.json and policy-<level>.pt go; default runs/sac-<env>-s<seed>"""
    levels: tuple[str, ...] = ("medium=33.3", "expert=100")
    """NAME=SCORE: save policy-NAME.pt and the dataset local/<env>-NAME-replay the first time the deterministic
    evaluation reaches this D4RL-normalised score (100 = D4RL's expert return; D4RL's medium is about a third)"""
    eval_every: int = 5000
    """evaluate at the first episode end after every this many steps"""
    eval_episodes: int = 10
    """deterministic episodes per evaluation"""
    data_dir: str | None = None
    """where the replay datasets go (overrides $D4RL_DATASET_DIR / ~/.d4rl/datasets)"""
    overwrite: bool = False
    """replace existing datasets at the replay datasets' paths and <run-dir>/replay.hdf5"""
    max_episode_steps: int = 1000
    """episode time limit (Gymnasium's default for these envs, and D4RL's)"""
    learning_rate: float = 3e-4
    """actor, critic and entropy-temperature learning rate (rlkit's, which D4RL used)"""
    learning_starts: int = 5000
    """random-action warm-up steps before SAC acts and updates"""
    batch_size: int = 256
    """SAC batch size"""
    gamma: float = 0.99
    """SAC discount factor"""
    tau: float = 0.005
    """SAC target network smoothing coefficient"""
    hidden_dim: int = 256
    """width of SAC's two hidden layers"""
    cuda: bool = False
    """train SAC on the GPU if one is available"""
    checkpoint_every: int = 10_000
    """checkpoint to <run-dir>/ckpt.pt at the first episode end after every this many steps"""
    resume: bool = False
    """continue from <run-dir>/ckpt.pt if it exists"""
    stop_at: int | None = None
    """checkpoint and exit at the first episode end at or after this many steps; rerun with --resume to go on"""


# Settings that shape the training; a resumed run must not change them.
SETTINGS = (
    "env",
    "steps",
    "seed",
    "levels",
    "eval_every",
    "eval_episodes",
    "max_episode_steps",
    "learning_rate",
    "learning_starts",
    "batch_size",
    "gamma",
    "tau",
    "hidden_dim",
)


def parse_levels(levels) -> dict[str, float]:
    """("medium=33.3", ...) -> {"medium": 33.3}; raises UsageError naming the bad entry."""
    out = {}
    for item in levels:
        name, sep, value = item.partition("=")
        try:
            score = float(value)
        except ValueError:
            score = float("nan")
        if not sep or not name.replace("-", "").isalnum() or not np.isfinite(score) or name in out:
            raise UsageError(f"--levels {item!r}: write NAME=SCORE with a new name, e.g. medium=33.3")
        out[name] = score
    return out


def levels_reached(levels: dict[str, float], reached, score: float) -> list[str]:
    """The levels this evaluation reaches for the first time: the snapshot rule."""
    return [name for name, level in levels.items() if name not in reached and score >= level]


def evaluate(sac: SAC, env: gym.Env, episodes: int, seed: int) -> np.ndarray:
    """Returns of `episodes` deterministic episodes (tanh of the mean action); the env's own RNG, reset with `seed`,
    so training's random state is untouched."""
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(sac.act(obs, deterministic=True))
            total += reward
            done = terminated or truncated
        returns.append(total)
        obs, _ = env.reset()
    return np.array(returns)


def run_dir(args: Args) -> Path:
    return Path(args.run_dir or f"runs/sac-{env_slug(args.env)}-s{args.seed}").expanduser()


def replay_name(args: Args, level: str) -> str:
    return f"local/{env_slug(args.env)}-{level}-replay"


def check_flags(args: Args) -> list[str]:
    """Every problem with the flags, found before any work (one line each)."""
    problems: list[str] = []
    for flag, value, minimum in [
        ("--steps", args.steps, 1),
        ("--eval-every", args.eval_every, 1),
        ("--eval-episodes", args.eval_episodes, 1),
        ("--max-episode-steps", args.max_episode_steps, 1),
        ("--learning-starts", args.learning_starts, 0),
        ("--batch-size", args.batch_size, 1),
        ("--hidden-dim", args.hidden_dim, 1),
        ("--checkpoint-every", args.checkpoint_every, 1),
        ("--stop-at", args.stop_at, 1),
    ]:
        check_int(problems, flag, value, minimum)
    check_int(problems, "--seed", args.seed, 0, below=2**32)  # torch.manual_seed's range
    check_float(problems, "--learning-rate", args.learning_rate, 0.0, low_open=True)
    check_float(problems, "--gamma", args.gamma, 0.0, 1.0)
    check_float(problems, "--tau", args.tau, 0.0, 1.0, low_open=True)
    try:
        gym.spec(args.env)
        known_env = True
    except gym.error.Error as e:
        problems.append(f"--env {args.env}: {e} (e.g. --env Hopper-v4)")
        known_env = False
    try:
        levels = parse_levels(args.levels)
    except UsageError as e:
        problems.append(str(e))
        levels = {}
    if levels and known_env and args.env not in REF_SCORES:
        problems.append(f"--levels need D4RL's reference returns, known for {', '.join(REF_SCORES)}; pass --levels")
    out = run_dir(args)
    if out.exists() and not out.is_dir():
        problems.append(f"--run-dir: {out} is not a directory")
    elif (out / "ckpt.pt").exists() and not args.resume:
        problems.append(f"{out / 'ckpt.pt'} exists: pass --resume to continue it, or delete it")
    else:
        check_output_path(problems, out / "ckpt.pt", "--run-dir")
    for name in levels:
        check_output_path(problems, dataset_path(replay_name(args, name), args.data_dir), "--data-dir")
    if args.resume and not (out / "ckpt.pt").exists() and (out / "replay.hdf5").exists():
        return problems  # a finished run: nothing is written
    # a resumed run may write again the replay datasets it wrote itself (a level reached after its last checkpoint)
    reached = read_json(str(out / "snapshots.json")) if args.resume else {}
    own = [str(s.get("replay")) for s in reached.values() if isinstance(s, dict)] if isinstance(reached, dict) else []
    check_overwrite(problems, out / "replay.hdf5", "--run-dir", args.overwrite)
    for name in levels:
        path = dataset_path(replay_name(args, name), args.data_dir)
        if not any(Path(p).is_file() and path.is_file() and path.samefile(p) for p in own):
            check_overwrite(problems, path, "--data-dir", args.overwrite)
    return problems


def write_rows_csv(path: Path, rows: list[dict]) -> None:
    text = io.StringIO()
    if rows:
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    write_text(str(path), text.getvalue())


def main(args: Args) -> None:
    levels = parse_levels(args.levels)
    out = run_dir(args)
    ckpt_path = out / "ckpt.pt"
    if ckpt_path.exists() and not args.resume:
        raise UsageError(f"{ckpt_path} exists: pass --resume to continue it, or delete it")
    if args.resume and not ckpt_path.exists() and (out / "replay.hdf5").exists():  # not a new run over a finished one
        print(f"{out} is finished ({out / 'replay.hdf5'} holds its whole buffer): nothing left to do")
        return
    settings = {k: getattr(args, k) for k in SETTINGS}
    settings["levels"] = list(settings["levels"])
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)  # warm-up actions and minibatch indices
    env = gym.make(args.env, max_episode_steps=args.max_episode_steps)
    eval_env = gym.make(args.env, max_episode_steps=args.max_episode_steps)
    obs_dim, act_dim = check_box_env(env, args.env)
    check_memory(args.steps, obs_dim, act_dim)
    sac = SAC(env, args, device)
    buf = allocate_buffer(args.steps, obs_dim, act_dim)

    obs, _ = env.reset(seed=args.seed)
    start, state = 0, {"rows": [], "snapshots": {}, "wall_s": 0.0}
    if ckpt_path.exists():
        start, state = load_checkpoint(ckpt_path, sac, buf, env, rng, settings, args.steps)
        rows, snapshots, wall = (state.get(k) for k in ("rows", "snapshots", "wall_s"))  # the `extra` saved below
        rows_ok = isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
        if not (rows_ok and isinstance(snapshots, dict) and isinstance(wall, (int, float))):
            raise ValueError(
                f"{ckpt_path} lacks this script's progress (rows, snapshots, wall_s); delete it to start over"
            )
        obs, _ = env.reset()  # the reset the checkpointed run was about to do
        print(f"resumed from {ckpt_path} at step {start}")
    out.mkdir(parents=True, exist_ok=True)
    rows, snapshots = state["rows"], state["snapshots"]
    next_eval = (start // args.eval_every + 1) * args.eval_every
    next_checkpoint = (start // args.checkpoint_every + 1) * args.checkpoint_every
    clock = {"start": time.perf_counter(), "wall_s": state["wall_s"]}

    def wall_s() -> float:
        return clock["wall_s"] + time.perf_counter() - clock["start"]

    def evaluate_and_snapshot(done: int, pbar) -> None:
        returns = evaluate(sac, eval_env, args.eval_episodes, seed=args.seed + 1_000_000 + done)
        mean = float(returns.mean())
        score = normalized_score(args.env, mean) if args.env in REF_SCORES else float("nan")
        now = wall_s()
        last_step, last_wall = (rows[-1]["step"], rows[-1]["wall_s"]) if rows else (0, 0.0)
        rows.append(
            {
                "step": done,
                "wall_s": round(now, 1),
                "steps_per_s": round((done - last_step) / max(now - last_wall, 1e-9), 1),
                "eval_return": round(mean, 2),
                "eval_return_std": round(float(returns.std()), 2),
                "normalized_score": round(score, 2),
            }
        )
        write_rows_csv(out / "progress.csv", rows)
        pbar.set_postfix(eval_return=f"{mean:.0f}", score=f"{score:.1f}", refresh=False)
        for name in levels_reached(levels, snapshots, score):
            sac.export_policy(out / f"policy-{name}.pt")
            data = {k: v[:done] for k, v in buf.items()}
            path = write_dataset(
                dataset_path(replay_name(args, name), args.data_dir),
                data,
                env_id=args.env,
                reward_fn="env",
                policy=f"sac-online replay buffer up to step {done}",
                seed=args.seed,
                created_by=Path(__file__).name,
                extra_attrs=behavior_attrs(args.env, data, last_cut=False)
                | {"snapshot_level": name, "snapshot_step": done, "snapshot_eval_return": mean}
                | {"snapshot_normalized_score": score, "max_episode_steps": args.max_episode_steps},
            )
            snapshots[name] = {"step": done, "eval_return": mean, "normalized_score": score, "replay": str(path)}
            write_json(snapshots, str(out / "snapshots.json"))
            tqdm.write(f"step {done}: eval return {mean:.1f} (score {score:.1f}) reached {name}={levels[name]}")

    def at_episode_end(done: int, pbar) -> bool:
        nonlocal next_eval, next_checkpoint
        if done >= next_eval:
            evaluate_and_snapshot(done, pbar)
            next_eval = (done // args.eval_every + 1) * args.eval_every
        stop = args.stop_at is not None and args.stop_at <= done < args.steps
        if done < args.steps and (done >= next_checkpoint or stop):
            extra = {"rows": rows, "snapshots": snapshots, "wall_s": wall_s()}
            save_checkpoint(ckpt_path, done, sac, buf, env, rng, settings, extra)
            next_checkpoint = (done // args.checkpoint_every + 1) * args.checkpoint_every
        return stop

    updates, stopped = train_online(
        env,
        obs,
        sac,
        buf,
        rng,
        start=start,
        steps=args.steps,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        at_episode_end=at_episode_end,
        desc=f"sac {args.env}",
    )
    seconds = time.perf_counter() - clock["start"]
    reached = ", ".join(f"{k} at step {v['step']} (return {v['eval_return']:.1f})" for k, v in snapshots.items())
    print(
        f"{updates} gradient updates in {seconds:.1f} s ({(updates or 1) / seconds:.1f}/s); "
        f"levels reached: {reached or 'none'}"
    )
    if stopped:
        print(f"stopped; continue with --resume (run dir {out})")
        return
    last_cut = not (buf["terminals"][-1] or buf["timeouts"][-1])
    close_last_episode(buf)
    write_dataset(
        out / "replay.hdf5",
        buf,
        env_id=args.env,
        reward_fn="env",
        policy=f"sac-online replay buffer, all {args.steps} steps",
        seed=args.seed,
        created_by=Path(__file__).name,
        extra_attrs=behavior_attrs(args.env, buf, last_cut) | {"max_episode_steps": args.max_episode_steps},
    )
    sac.export_policy(out / "policy-final.pt")
    ckpt_path.unlink(missing_ok=True)  # the whole buffer and the final policy supersede it
    print(f"wrote {out / 'replay.hdf5'} and {out / 'policy-final.pt'}")


if __name__ == "__main__":
    run_cli(
        main,
        Args,
        check_flags,
        on_interrupt="interrupted; rerun with --resume to continue from the last checkpoint, if one was taken",
    )
