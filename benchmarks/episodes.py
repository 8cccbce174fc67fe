"""What a policy does on a task, in numbers and in pictures: a few episodes of each policy with the quantities the
paper's jump tasks turn on, and one episode drawn as a strip of frames from MuJoCo's body positions (no OpenGL).

    python benchmarks/episodes.py --policies random RUN_DIR [RUN_DIR ...] --task halfcheetah-jump-hard \\
        --out results/jump/halfcheetah-jump-hard/episodes.json --figure docs/jump_episodes.png

A policy is a run directory (its policy.pt), a policy.pt, or `random` (the jump data's own policy). Each plays
--episodes deterministic episodes, seeds --seed, --seed + 1, ...: the return under the task's reward, the root height z
(mean, max), the share of steps paying jump-hard's flip penalty (tipped backwards: pitch above 1 rad), the share tipped
forwards (pitch below −1 rad, which the penalty does not charge), the forward speed and the control cost 0.1·‖a‖².
docs/jump.md's "What the policies do" reads the JSON; --add plays more policies into an existing one.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from toolbox import UsageError, UserError, cli, device_name, read_json, replace_atomically, write_json  # noqa: E402
import plumbing  # noqa: E402  (algorithms/, put on the path by toolbox: the tasks' rewards)
import runinfo  # noqa: E402  (a run checked against its own record)

JUMP = plumbing.Task("halfcheetah-jump", "HalfCheetah-v4", "halfcheetah", "halfcheetah-jump")  # no flip penalty


@dataclass
class Args:
    policies: list[str] = field(default_factory=lambda: ["random"])
    """run directories (their policy.pt), policy.pt files, or `random`"""
    labels: list[str] = field(default_factory=list)
    """a name per policy for the table and figure (default: a run's exp_name and seed, or the file's name)"""
    task: str = "halfcheetah-jump-hard"
    """the reward the episodes are scored with: halfcheetah-jump-hard, halfcheetah-jump, or env (the env's own)"""
    eval_env: str = "HalfCheetah-v4"
    """Gymnasium id of the environment"""
    episodes: int = 5
    """episodes per policy"""
    seed: int = 0
    """the first episode's reset seed (and the random policy's)"""
    frames: int = 8
    """frames in each policy's strip, evenly spaced over its first episode"""
    out: str = "runs/episodes.json"
    """the per-episode numbers (JSON)"""
    figure: str = ""
    """where to draw the strips (PNG); none when empty"""
    add: bool = False
    """keep the policies already in --out that are not played now (by label): a run whose policy.pt is gone keeps
    its numbers; the JSON lists every invocation in `made_by`, each policy its own (`made_by`: the index)"""


def load(spec: str, env, seed: int):
    """`policy(obs [B, obs_dim]) -> actions`, its default label and its run's exp_name and seed (a run directory), from
    a run directory, a policy.pt or `random`."""
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    if spec == "random":
        rng = np.random.default_rng(seed)
        low, high = env.action_space.low, env.action_space.high
        return lambda obs: rng.uniform(low, high, (len(obs), act_dim)), "random (the data's policy)", {}
    path, label, run = spec, os.path.basename(spec.rstrip("/")), {}
    if os.path.isdir(spec):
        path, config = os.path.join(spec, "policy.pt"), read_json(os.path.join(spec, "config.json"))
        summary = read_json(os.path.join(spec, "summary.json"))
        # the row (compare.py's exp_name; a peers.py run: its peer's row, official-orpo -> official_orpo, and
        # official_orpo_units with --one-action-unit), the seed, and which run it is (its last-10 score)
        units = "_units" if config.get("cli", {}).get("one_action_unit") else ""
        name = config.get("exp_name") or config.get("peer", "").replace("-", "_") + units or None
        if summary and (why := runinfo.run_damage(spec)):  # its policy still plays; its score is not taken
            print(f"warning: {spec}: its last-10 score is left out ({why})", file=sys.stderr)
            summary = {**summary, "last10_score": None}
        run = {
            "exp_name": name,
            "seed": config.get("seed", summary.get("seed")),
            "last10_score": summary.get("last10_score"),
        }
        label = f"{name or label} seed {run['seed'] if run['seed'] is not None else '?'}" if config else label
        if not os.path.isfile(path):
            raise UserError(
                f"{spec} holds no policy.pt (a run writes it when it finishes); finish the run or pass another"
            )
    from collect import load_policy

    try:
        return load_policy(path, obs_dim, act_dim), label, run
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None


def capsules(env) -> np.ndarray:
    """Every capsule of the model as its two end points in the x–z plane: [n, 2, 2]."""
    import mujoco

    model, data = env.unwrapped.model, env.unwrapped.data
    ends = []
    for g in np.flatnonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_CAPSULE):
        axis = data.geom_xmat[g].reshape(3, 3)[:, 2] * model.geom_size[g, 1]  # the capsule's half-length along its z
        ends.append([(data.geom_xpos[g] - axis)[[0, 2]], (data.geom_xpos[g] + axis)[[0, 2]]])
    return np.array(ends)


def play(policy, env, task, seed: int, frames: int) -> tuple[dict, list[np.ndarray]]:
    """One episode: its numbers, and `frames` drawings spaced evenly over it (none for frames=0; every step's capsules
    are kept until the episode's length is known)."""
    obs, _ = env.reset(seed=seed)
    ret, z, flips, forward, speed, cost, drawn = 0.0, [], 0, 0, [], [], []
    done = False
    while not done:
        action = np.asarray(policy(obs[None]), dtype=np.float64)
        obs, reward, terminated, truncated, info = env.step(action[0])
        info = {k: np.atleast_1d(v) for k, v in info.items()}
        step = plumbing.task_reward(task, obs[None], action, np.atleast_1d(reward), info)[0]
        if task.reward_fn == "halfcheetah-jump-hard":  # a flip: the −3 replaced jump's own reward
            flips += step != plumbing.task_reward(JUMP, obs[None], action, [0], info)[0]
        forward += obs[1] < -1.0  # on its back, head first: jump-hard's −3 is for pitch above +1 only
        ret += step
        z.append(obs[0])
        speed.append(float(info["x_velocity"][0]))
        cost.append(0.1 * float((action**2).sum()))
        drawn += [capsules(env)] if frames else []
        done = terminated or truncated
    keep = np.linspace(0, len(drawn) - 1, frames).round().astype(int) if frames else []
    numbers = {"return": ret, "steps": len(z), "z_mean": float(np.mean(z)), "z_max": float(np.max(z)),
               "flip_share": flips / len(z), "forward_flip_share": forward / len(z), "speed_mean": float(np.mean(speed)),
               "control_cost_mean": float(np.mean(cost))}  # fmt: skip
    return numbers, [(int(i), drawn[i]) for i in keep]


def draw(strips: list[tuple[str, list]], path: str) -> None:
    """One row per policy, one panel per frame, each centred on the body (z fixed, so a jump shows as height)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(frames) for _, frames in strips)
    fig, axes = plt.subplots(len(strips), cols, figsize=(1.6 * cols, 1.5 * len(strips) + 0.3), squeeze=False)
    for r, (label, frames) in enumerate(strips):
        for c, ax in enumerate(axes[r]):
            ax.set_xticks([]), ax.set_yticks([])
            if c >= len(frames):
                ax.axis("off")
                continue
            step, segments = frames[c]
            x0 = segments[:, :, 0].mean()
            ax.axhline(0, color="0.6", lw=1)
            for (xa, za), (xb, zb) in segments:
                ax.plot([xa - x0, xb - x0], [za, zb], color="C0", lw=3, solid_capstyle="round")
            ax.set_xlim(-1.2, 1.2), ax.set_ylim(-0.3, 2.2), ax.set_aspect("equal")
            ax.set_title(f"t = {step}", fontsize=7)
            if c == 0:
                ax.set_ylabel(label, fontsize=7)
    fig.tight_layout()
    replace_atomically(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"), suffix=".tmp.png")
    plt.close(fig)


def main(args: Args) -> int:
    problems = [f"--{k} {getattr(args, k)}: must be at least 1" for k in ("episodes", "frames") if getattr(args, k) < 1]
    problems += [f"--task {args.task}: use one of {', '.join(plumbing.REWARD_FNS)}"] * (
        args.task not in plumbing.REWARD_FNS
    )
    if args.labels and len(args.labels) != len(args.policies):
        problems.append(f"--labels: {len(args.labels)} names for {len(args.policies)} policies; give one per policy")
    if problems:
        raise UsageError("\n".join(problems))
    task = plumbing.Task(args.task, args.eval_env, plumbing.domain_of(args.eval_env), args.task)
    env = plumbing.make_eval_envs(task, 1).envs[0]  # the runs' own evaluation env (and its one-line error)
    torch.set_num_threads(1)
    rows, strips = [], []
    for i, spec in enumerate(args.policies):
        policy, label, run = load(spec, env, args.seed)
        label = args.labels[i] if args.labels else label
        episodes, frames = [], []
        for e in range(args.episodes):
            numbers, drawn = play(policy, env, task, args.seed + e, args.frames if e == 0 else 0)  # the first drawn
            episodes.append(numbers)
            frames = frames or drawn
        means = {k: float(np.mean([ep[k] for ep in episodes])) for k in episodes[0]}
        rows.append({"label": label, "policy": spec, **run, "episodes": episodes, "mean": means})
        strips.append((label, frames))
        print(f"{label}: return {means['return']:.1f}, z mean {means['z_mean']:.2f} max {means['z_max']:.2f}, flip "
              f"share {means['flip_share']:.3f}, tipped forward {means['forward_flip_share']:.3f}, speed {means['speed_mean']:.2f}")  # fmt: skip
    made = {"command": "python benchmarks/episodes.py " + " ".join(sys.argv[1:]), "time": time.strftime("%Y-%m-%d"),
            "device": device_name(torch.device("cpu")), "task": args.task, "eval_env": args.eval_env,
            "seeds": [args.seed + e for e in range(args.episodes)]}  # fmt: skip
    made["figure"] = args.figure or None
    stored = read_json(args.out) if args.add and os.path.isfile(args.out) else {}
    earlier = stored.get("made_by", [])
    earlier = [earlier] if isinstance(earlier, dict) else earlier  # a file written before --add: one invocation
    now = {r["label"] for r in rows}
    kept = [{"made_by": 0, **p} for p in stored.get("policies", []) if p["label"] not in now]
    rows = kept + [{**r, "made_by": len(earlier)} for r in rows]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json({"made_by": [*earlier, made], "policies": rows}, args.out)
    if args.figure:
        os.makedirs(os.path.dirname(os.path.abspath(args.figure)), exist_ok=True)
        draw(strips, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(cli(main, Args, sys.argv[1:]))
