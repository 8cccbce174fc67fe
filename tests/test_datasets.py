"""Tests of the dataset scripts in datasets/: run them as a user would (their own process, tiny
sizes) and check the files against the HDF5 contract and against a replay of the env."""

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import run_script as start_script

pytestmark = pytest.mark.slow  # the slow tier: datasets/'s collection, SAC training and joins end to end

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
KEYS = {"observations", "actions", "rewards", "next_observations", "terminals", "timeouts"}
# D4RL's reference returns, restated here so a typo in common.py cannot hide.
D4RL_REFS = {"Hopper-v4": (-20.272305, 3234.3), "HalfCheetah-v4": (-280.178953, 12135.0)}

common = importlib.import_module("common")  # conftest puts datasets/ on the path


def run_script(script, *args, data_dir, expect_ok=True):
    # one torch thread (conftest's run_script): deterministic SAC (the resume test compares bits) and light on CPU
    proc = start_script(f"datasets/{script}", *map(str, args), data_dir=str(data_dir))
    if expect_ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def check_dataset(path, *, env_id, reward_fn, policy, steps, seed, created_by, max_episode_steps=1000, cuts=()):
    """Assert the file meets the contract; return its arrays. `cuts`: rows where a joined file's part ends (there the
    collection, not the time limit, cut the episode)."""
    assert path.exists()
    assert not list(path.parent.rglob("*.tmp")), "temporary file left behind"
    env = gym.make(env_id)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    with h5py.File(path, "r") as f:
        assert set(f.keys()) == KEYS
        data = {k: f[k][()] for k in f}
        attrs = dict(f.attrs)

    for key, shape, dtype in [
        ("observations", (steps, obs_dim), np.float32),
        ("actions", (steps, act_dim), np.float32),
        ("rewards", (steps,), np.float32),
        ("next_observations", (steps, obs_dim), np.float32),
        ("terminals", (steps,), np.bool_),
        ("timeouts", (steps,), np.bool_),
    ]:
        assert data[key].shape == shape, key
        assert data[key].dtype == dtype, key
        assert np.isfinite(data[key]).all(), key

    expected = dict(env_id=env_id, reward_fn=reward_fn, policy=policy, steps=steps, seed=seed, created_by=created_by)
    for key, value in expected.items():
        assert attrs[key] == value, key
    if reward_fn == "env":
        assert (attrs["ref_min_score"], attrs["ref_max_score"]) == pytest.approx(D4RL_REFS[env_id])
    else:
        assert "ref_min_score" not in attrs and "ref_max_score" not in attrs

    terminals, timeouts = data["terminals"], data["timeouts"]
    ends = terminals | timeouts
    assert not (terminals & timeouts).any()
    assert ends[-1], "the last episode must be closed"
    # Within an episode the next row starts where this one ended; across an end it is a reset.
    jumps = (data["next_observations"][:-1] != data["observations"][1:]).any(axis=1)
    np.testing.assert_array_equal(jumps, ends[:-1])
    end_idx = np.flatnonzero(ends)
    lengths = np.diff(np.r_[-1, end_idx])
    assert lengths.max() <= max_episode_steps
    # A timeout before the final step can only be the time limit (or the end of a joined part).
    short = timeouts[end_idx[:-1]] & (lengths[:-1] != max_episode_steps)
    assert set(end_idx[:-1][short]) <= set(cuts)
    return data


def replay(env_id, data, seed, max_episode_steps=1000):
    """Step a fresh env with the stored actions (same seed, same reset order) and return
    its rewards plus the state facts the jump rewards are defined on."""
    env = gym.make(env_id, max_episode_steps=max_episode_steps)
    sim, dt = env.unwrapped.data, env.unwrapped.dt
    obs, _ = env.reset(seed=seed)
    out = {"reward": [], "x_velocity": [], "z": [], "angle": []}
    for t, action in enumerate(data["actions"]):
        np.testing.assert_array_equal(obs.astype(np.float32), data["observations"][t])
        x_before = sim.qpos[0]
        next_obs, reward, terminated, truncated, _ = env.step(action)
        np.testing.assert_array_equal(next_obs.astype(np.float32), data["next_observations"][t])
        assert terminated == data["terminals"][t]
        if t < len(data["actions"]) - 1:
            assert (truncated and not terminated) == data["timeouts"][t]
        out["reward"].append(reward)
        out["x_velocity"].append((sim.qpos[0] - x_before) / dt)
        out["z"].append(sim.qpos[1])
        out["angle"].append(sim.qpos[2])
        obs = env.reset()[0] if terminated or truncated else next_obs
    return {k: np.array(v) for k, v in out.items()}


def reference_jump_reward(actions, state, hard):
    """The paper's jump rewards written from the simulator state, one step at a time."""
    rewards = []
    for a, vx, z, angle in zip(actions, state["x_velocity"], state["z"], state["angle"]):
        r = min(max(vx, -3.0), 3.0) - 0.1 * float(np.sum(np.square(a))) + 15.0 * z
        rewards.append(-3.0 if hard and angle > 1.0 else r)
    return np.array(rewards)


# ---------------------------------------------------------------------------- collect.py


def test_collect_random_round_trip(tmp_path):
    # No --out / --data-dir: the default name under $D4RL_DATASET_DIR.
    proc = run_script("collect.py", "--env", "Hopper-v4", "--policy", "random", "--steps", 1000, "--seed", 3,
                      data_dir=tmp_path)  # fmt: skip
    path = tmp_path / "local" / "hopper-random.hdf5"
    assert str(path) in proc.stdout
    data = check_dataset(path, env_id="Hopper-v4", reward_fn="env", policy="random", steps=1000, seed=3,
                         created_by="collect.py")  # fmt: skip
    assert data["terminals"].sum() > 10  # random Hopper falls quickly: many episode ends tested
    actions = data["actions"]
    assert actions.min() >= -1 and actions.max() <= 1 and actions.std() > 0.5  # uniform on [-1, 1]
    state = replay("Hopper-v4", data, seed=3)
    np.testing.assert_allclose(data["rewards"], state["reward"], rtol=1e-6, atol=1e-5)


def test_collect_saved_policy(tmp_path):
    obs_dim, act_dim, max_action = 11, 3, 0.5
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(obs_dim, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, act_dim))
    mean, std = torch.randn(obs_dim), torch.rand(obs_dim) + 0.5
    policy_file = tmp_path / "runs" / "tiny-hopper" / "policy.pt"
    policy_file.parent.mkdir(parents=True)
    # a file from before the sizes were read from the state dict: its obs_dim, act_dim, hidden_dims are not read
    torch.save({"kind": "deterministic_mlp", "obs_dim": obs_dim, "act_dim": act_dim, "hidden_dims": [16, 16],
               "max_action": max_action, "obs_mean": mean, "obs_std": std, "state_dict": net.state_dict()},
               policy_file)  # fmt: skip

    data_dir = tmp_path / "data"
    run_script("collect.py", "--env", "Hopper-v4", "--policy", policy_file, "--steps", 1000, "--data-dir", data_dir,
               data_dir=tmp_path / "unused")  # fmt: skip
    assert not (tmp_path / "unused").exists()  # --data-dir wins over $D4RL_DATASET_DIR
    data = check_dataset(data_dir / "local" / "hopper-tiny-hopper.hdf5", env_id="Hopper-v4", reward_fn="env",
                         policy=str(policy_file), steps=1000, seed=0, created_by="collect.py")  # fmt: skip
    with torch.no_grad():
        expected = torch.tanh(net((torch.from_numpy(data["observations"]) - mean) / std)) * max_action
    np.testing.assert_allclose(data["actions"], expected.numpy(), atol=1e-6)
    replay("Hopper-v4", data, seed=0)


# ---------------------------------------------------------------------------- halfcheetah_jump.py


def test_jump_hard_round_trip(tmp_path):
    out = tmp_path / "somewhere" / "jh.hdf5"
    run_script("halfcheetah_jump.py", "--task", "halfcheetah-jump-hard", "--steps", 1000, "--seed", 1, "--out", out,
               data_dir=tmp_path)  # fmt: skip
    data = check_dataset(out, env_id="HalfCheetah-v4", reward_fn="halfcheetah-jump-hard", policy="random", steps=1000,
                         seed=1, created_by="halfcheetah_jump.py")  # fmt: skip
    state = replay("HalfCheetah-v4", data, seed=1)
    np.testing.assert_allclose(data["rewards"], reference_jump_reward(data["actions"], state, hard=True), atol=1e-4)


def test_jump_sac_round_trip_and_resume_matches_uninterrupted_run(tmp_path):
    sac = ["--task", "halfcheetah-jump", "--no-cuda", "--steps", 500, "--max-episode-steps", 100, "--learning-starts",
           100, "--batch-size", 16, "--hidden-dim", 32, "--checkpoint-every", 200]  # fmt: skip
    # No --out: the default name, where the algorithms' `--env halfcheetah-jump` looks.
    proc = run_script("halfcheetah_jump.py", *sac, data_dir=tmp_path)
    assert "500 env steps with 400 gradient updates" in proc.stdout and not list(tmp_path.rglob("*.ckpt.pt"))
    whole = check_dataset(tmp_path / "halfcheetah-jump.hdf5", env_id="HalfCheetah-v4", reward_fn="halfcheetah-jump",
                          policy="sac-online", steps=500, seed=0, created_by="halfcheetah_jump.py",
                          max_episode_steps=100)  # fmt: skip
    state = replay("HalfCheetah-v4", whole, seed=0, max_episode_steps=100)
    np.testing.assert_allclose(whole["rewards"], reference_jump_reward(whole["actions"], state, hard=False), atol=1e-4)

    split, ckpt = tmp_path / "split.hdf5", tmp_path / "split.hdf5.ckpt.pt"
    proc = run_script("halfcheetah_jump.py", *sac, "--out", split, "--stop-at", 250, data_dir=tmp_path)
    assert "stopped at step 300" in proc.stdout  # the first episode end at or after 250
    assert ckpt.exists() and not split.exists()
    # A checkpoint is never silently overwritten, nor continued with other settings.
    proc = run_script("halfcheetah_jump.py", *sac, "--out", split, data_dir=tmp_path, expect_ok=False)
    assert proc.returncode != 0 and "--resume" in proc.stderr
    proc = run_script("halfcheetah_jump.py", *sac, "--out", split, "--resume", "--gamma", 0.9, data_dir=tmp_path,
                      expect_ok=False)  # fmt: skip
    assert proc.returncode != 0 and "gamma" in proc.stderr

    proc = run_script("halfcheetah_jump.py", *sac, "--out", split, "--resume", data_dir=tmp_path)
    assert "at step 300" in proc.stdout and "200 env steps with 200 gradient updates" in proc.stdout
    assert not ckpt.exists()
    data = check_dataset(split, env_id="HalfCheetah-v4", reward_fn="halfcheetah-jump", policy="sac-online", steps=500,
                         seed=0, created_by="halfcheetah_jump.py", max_episode_steps=100)  # fmt: skip
    for key in KEYS:
        np.testing.assert_array_equal(data[key], whole[key], err_msg=key)


# ---------------------------------------------------------------------------- sac.py: D4RL's medium recipe

# Tiny SAC settings: a run takes seconds. Episodes are cut at 100 steps so evaluations stay short.
TINY_SAC = (
    "--env Hopper-v4 --steps 1500 --learning-starts 300 --batch-size 16 --hidden-dim 16 --eval-every 250 "
    "--eval-episodes 2 --max-episode-steps 100 --checkpoint-every 400"
).split()


def progress_rows(run):
    with open(run / "progress.csv") as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, map(float, line.split(",")))) for line in lines[1:]]


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}, dict(f.attrs)


def normalized(ret, env_id="Hopper-v4"):
    low, high = D4RL_REFS[env_id]
    return 100 * (ret - low) / (high - low)


def whole_episode_returns(data, last_is_whole):
    """Episode returns written out with a loop, independently of common.episode_returns."""
    returns, total = [], 0.0
    for r, end in zip(data["rewards"], data["terminals"] | data["timeouts"]):
        total += float(r)
        if end:
            returns.append(total)
            total = 0.0
    return returns if last_is_whole or len(returns) == 1 else returns[:-1]


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory):
    """A pilot run gives the evaluation scores; then a run whose levels lie below, between and above them, and the
    same run stopped part-way and resumed. Same seed and settings: the three see the same evaluations."""
    root = tmp_path_factory.mktemp("sac")
    run_script("sac.py", *TINY_SAC, "--levels", "never=1000", "--run-dir", root / "pilot", data_dir=root / "d0")
    scores = [row["normalized_score"] for row in progress_rows(root / "pilot")]
    # a level the first evaluation misses and a later one reaches (scores in the csv are rounded to 0.01)
    first_above = next(i for i, s in enumerate(scores) if s > scores[0] + 0.02)
    mid = round((scores[0] + scores[first_above]) / 2, 3)
    levels = ["--levels", "low=-50", f"mid={mid}", "never=1000"]
    run_script("sac.py", *TINY_SAC, *levels, "--run-dir", root / "whole", data_dir=root / "d1")
    proc = run_script("sac.py", *TINY_SAC, *levels, "--run-dir", root / "split", "--stop-at", 700, data_dir=root / "d2")
    assert "continue with --resume" in proc.stdout and (root / "split" / "ckpt.pt").exists()
    assert not (root / "split" / "replay.hdf5").exists()
    proc = run_script("sac.py", *TINY_SAC, *levels, "--run-dir", root / "split", "--resume", data_dir=root / "d2")
    assert "resumed from" in proc.stdout
    return root, {"low": -50.0, "mid": mid, "never": 1000.0}


def test_sac_snapshots_at_the_first_evaluation_reaching_each_level(sac_runs):
    root, levels = sac_runs
    run = root / "whole"
    rows = progress_rows(run)
    snapshots = json.loads((run / "snapshots.json").read_text())
    assert sorted(snapshots) == ["low", "mid"]  # never=1000 is never reached
    assert not (run / "policy-never.pt").exists() and not (root / "d1/local/hopper-never-replay.hdf5").exists()
    assert not (run / "ckpt.pt").exists()  # a finished run leaves its whole buffer and final policy instead
    for name in ("low", "mid"):
        snap = snapshots[name]
        # the snapshot rule: the first evaluation whose D4RL score reaches the level
        first = next(row for row in rows if row["normalized_score"] >= levels[name])
        assert snap["step"] == first["step"], name
        assert snap["normalized_score"] == pytest.approx(normalized(snap["eval_return"]))
        assert snap["eval_return"] == pytest.approx(first["eval_return"], abs=0.01)
    assert snapshots["low"]["step"] == rows[0]["step"] < snapshots["mid"]["step"]

    # The saved policy is the one evaluated: collect.py's loader, run deterministically with the evaluation's seeds
    # (seed + 1e6 + step), gives the recorded evaluation return.
    for name in ("low", "mid"):
        snap = snapshots[name]
        policy = collect.load_policy(str(run / f"policy-{name}.pt"), 11, 3)
        env = gym.make("Hopper-v4", max_episode_steps=100)
        obs, _ = env.reset(seed=1_000_000 + snap["step"])
        returns = []
        for _ in range(2):
            total, done = 0.0, False
            while not done:
                obs, r, terminated, truncated, _ = env.step(policy(obs[None].astype(np.float32))[0])
                total, done = total + r, terminated or truncated
            returns.append(total)
            obs, _ = env.reset()
        assert np.mean(returns) == pytest.approx(snap["eval_return"], rel=1e-4), name


def test_sac_replay_datasets_are_the_buffer_up_to_each_snapshot(sac_runs):
    root, _ = sac_runs
    run = root / "whole"
    snapshots = json.loads((run / "snapshots.json").read_text())
    whole = check_dataset(run / "replay.hdf5", env_id="Hopper-v4", reward_fn="env",
                          policy="sac-online replay buffer, all 1500 steps", steps=1500, seed=0, created_by="sac.py",
                          max_episode_steps=100)  # fmt: skip
    replay("Hopper-v4", whole, seed=0, max_episode_steps=100)  # the stored steps are the env's, in order
    for name in ("low", "mid"):
        step = snapshots[name]["step"]
        path = root / "d1" / "local" / f"hopper-{name}-replay.hdf5"
        assert snapshots[name]["replay"] == str(path)
        data = check_dataset(path, env_id="Hopper-v4", reward_fn="env",
                             policy=f"sac-online replay buffer up to step {step}", steps=step, seed=0,
                             created_by="sac.py", max_episode_steps=100)  # fmt: skip
        for key in KEYS:  # a prefix of the whole buffer
            np.testing.assert_array_equal(data[key], whole[key][:step], err_msg=key)
        _, attrs = read_h5(path)
        returns = whole_episode_returns(data, last_is_whole=True)  # the snapshot is taken at an episode end
        assert attrs["behavior_episodes"] == len(returns)
        assert attrs["behavior_mean_return"] == pytest.approx(np.mean(returns), rel=1e-5)
        assert attrs["behavior_normalized_score"] == pytest.approx(normalized(np.mean(returns)), rel=1e-5)
        assert attrs["snapshot_step"] == step and attrs["snapshot_level"] == name
        assert attrs["snapshot_eval_return"] == pytest.approx(snapshots[name]["eval_return"])


def test_sac_resume_matches_uninterrupted_run(sac_runs):
    root, _ = sac_runs
    whole, split = root / "whole", root / "split"
    assert not (split / "ckpt.pt").exists()
    cols = ("step", "eval_return", "eval_return_std", "normalized_score")  # wall time differs, of course
    assert [[r[c] for c in cols] for r in progress_rows(split)] == [[r[c] for c in cols] for r in progress_rows(whole)]
    for name in ("policy-low.pt", "policy-mid.pt", "policy-final.pt"):
        a, b = torch.load(whole / name, weights_only=True), torch.load(split / name, weights_only=True)
        for k in a["state_dict"]:
            torch.testing.assert_close(a["state_dict"][k], b["state_dict"][k], rtol=0, atol=0)
    for a, b in [
        (whole / "replay.hdf5", split / "replay.hdf5"),
        (root / "d1/local/hopper-mid-replay.hdf5", root / "d2/local/hopper-mid-replay.hdf5"),
    ]:
        (da, _), (db, _) = read_h5(a), read_h5(b)
        for key in KEYS:
            np.testing.assert_array_equal(da[key], db[key], err_msg=key)


def test_collect_stochastic_sac_policy(sac_runs, tmp_path):
    """D4RL's medium data: the snapshot's actions sampled from its tanh-Gaussian, the behaviour's return recorded."""
    root, _ = sac_runs
    policy_file = root / "whole" / "policy-mid.pt"
    proc = run_script("collect.py", "--policy", policy_file, "--stochastic", "--steps", 3000, "--seed", 5,
                      data_dir=tmp_path)  # fmt: skip
    path = tmp_path / "local" / "hopper-mid.hdf5"  # policy-mid.pt -> local/hopper-mid
    data = check_dataset(path, env_id="Hopper-v4", reward_fn="env", policy=str(policy_file), steps=3000, seed=5,
                         created_by="collect.py")  # fmt: skip
    replay("Hopper-v4", data, seed=5)
    _, attrs = read_h5(path)
    assert attrs["stochastic"]
    returns = whole_episode_returns(data, last_is_whole=bool(data["terminals"][-1]))
    assert attrs["behavior_episodes"] == len(returns) > 5
    assert attrs["behavior_mean_return"] == pytest.approx(np.mean(returns), rel=1e-5)
    assert attrs["behavior_normalized_score"] == pytest.approx(normalized(np.mean(returns)), rel=1e-5)
    assert f"mean return {np.mean(returns):.1f}" in proc.stdout

    # The actions are tanh(mean + std * N(0, 1)) of the saved net, log-std clamped to [-5, 2].
    ckpt = torch.load(policy_file, weights_only=True)
    net = nn.Sequential(nn.Linear(11, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 6))
    net.load_state_dict(ckpt["state_dict"])
    with torch.no_grad():
        mean, log_std = net(torch.from_numpy(data["observations"])).chunk(2, -1)
    pre_tanh = np.arctanh(np.clip(data["actions"].astype(np.float64), -1 + 1e-7, 1 - 1e-7))
    noise = (pre_tanh - mean.double().numpy()) / log_std.clamp(-5, 2).exp().double().numpy()
    noise = noise[np.abs(data["actions"]) < 1 - 1e-6]  # float32 actions: atanh is exact short of the bounds
    assert abs(noise.mean()) < 0.05 and abs(noise.std() - 1) < 0.05, (noise.mean(), noise.std())


def test_join_is_medium_expert_layout(tmp_path):
    """join.py puts the parts end to end (D4RL's medium-expert) and averages the behaviour over all whole episodes."""
    for seed in (1, 2):
        run_script("collect.py", "--steps", 700, "--seed", seed, "--name", f"local/p{seed}", data_dir=tmp_path)
    run_script("collect.py", "--env", "HalfCheetah-v4", "--steps", 50, "--name", "local/cheetah", data_dir=tmp_path)
    proc = run_script("join.py", "local/p1", "local/p2", "--name", "local/p12", data_dir=tmp_path)
    joined = check_dataset(tmp_path / "local" / "p12.hdf5", env_id="Hopper-v4", reward_fn="env",
                           policy="random + random", steps=1400, seed=1, created_by="join.py", cuts=(699,))  # fmt: skip
    parts = [read_h5(tmp_path / "local" / f"p{seed}.hdf5") for seed in (1, 2)]
    for key in KEYS:
        np.testing.assert_array_equal(joined[key], np.concatenate([data[key] for data, _ in parts]), err_msg=key)
    returns = [r for data, _ in parts for r in whole_episode_returns(data, last_is_whole=bool(data["terminals"][-1]))]
    _, attrs = read_h5(tmp_path / "local" / "p12.hdf5")
    assert attrs["behavior_episodes"] == len(returns)
    assert attrs["behavior_mean_return"] == pytest.approx(np.mean(returns), rel=1e-5)
    assert attrs["behavior_normalized_score"] == pytest.approx(normalized(np.mean(returns)), rel=1e-5)
    assert list(attrs["part_steps"]) == [700, 700] and "wrote" in proc.stdout

    proc = run_script("join.py", "local/p1", "local/cheetah", "--name", "local/x", data_dir=tmp_path, expect_ok=False)
    (line,) = error_lines(proc)
    assert proc.returncode == 1 and "env_id" in line and "HalfCheetah-v4" in line, proc.stderr[-2000:]
    proc = run_script("join.py", "local/p1", "local/nope", data_dir=tmp_path, expect_ok=False)
    lines = error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr[-2000:]
    assert "local/nope: no such dataset" in lines[0] + lines[1] and "--name is required" in lines[0] + lines[1]
    assert not (tmp_path / "local" / "x.hdf5").exists()


def test_snapshot_rule_hand_computed():
    levels = {"medium": 33.3, "expert": 100.0}
    assert sac.levels_reached(levels, {}, 33.29) == []
    assert sac.levels_reached(levels, {}, 33.3) == ["medium"]
    assert sac.levels_reached(levels, {"medium": {}}, 50.0) == []  # only the first time
    assert sac.levels_reached(levels, {}, 100.0) == ["medium", "expert"]
    # D4RL's normalised score: 100 * (R - random) / (expert - random); medium 33.3 on Hopper is a return of 1063.50
    assert common.normalized_score("Hopper-v4", 1063.5003) == pytest.approx(33.3, abs=1e-3)
    assert common.normalized_score("Hopper-v4", D4RL_REFS["Hopper-v4"][1]) == pytest.approx(100)
    assert sac.parse_levels(["medium=33.3", "expert=100"]) == levels
    for bad in ["medium", "medium=x", "=3", "medium=nan", "a b=3"]:
        with pytest.raises(sac.UsageError, match="NAME=SCORE"):
            sac.parse_levels([bad])
    with pytest.raises(sac.UsageError, match="NAME=SCORE"):
        sac.parse_levels(["m=1", "m=2"])


# ---------------------------------------------------------------------------- rewards


def test_jump_rewards_match_halfcheetah_state():
    env = gym.make("HalfCheetah-v4")
    sim, dt = env.unwrapped.data, env.unwrapped.dt
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    rows = {"next_obs": [], "action": [], "x_velocity": [], "vx": [], "z": [], "angle": [], "env_reward": []}
    for t in range(60):
        if t == 30:  # tip the cheetah onto its back so the jump-hard penalty fires on real steps
            qpos = sim.qpos.copy()
            qpos[1:3] = 0.3, 2.0
            env.unwrapped.set_state(qpos, sim.qvel.copy())
        action = rng.uniform(-1, 1, 6).astype(np.float32)
        x_before = sim.qpos[0]
        next_obs, reward, _, _, info = env.step(action)
        for key, value in [
            ("next_obs", next_obs),
            ("action", action),
            ("x_velocity", info["x_velocity"]),
            ("vx", (sim.qpos[0] - x_before) / dt),
            ("z", sim.qpos[1]),
            ("angle", sim.qpos[2]),
            ("env_reward", reward),
        ]:
            rows[key].append(value)
    rows = {k: np.array(v) for k, v in rows.items()}
    flipped = rows["angle"] > 1
    assert 0 < flipped.sum() < len(flipped)  # both branches are exercised

    # The observation columns the rewards read are the root height and angle.
    np.testing.assert_array_equal(rows["next_obs"][:, 0], rows["z"])
    np.testing.assert_array_equal(rows["next_obs"][:, 1], rows["angle"])
    np.testing.assert_allclose(rows["x_velocity"], rows["vx"])

    state = {"x_velocity": rows["vx"], "z": rows["z"], "angle": rows["angle"]}
    for hard in (False, True):
        got = common.halfcheetah_jump_reward(rows["next_obs"], rows["action"], rows["x_velocity"], hard=hard)
        np.testing.assert_allclose(got, reference_jump_reward(rows["action"], state, hard), atol=1e-6)
    # Unclipped, the run part is HalfCheetah-v4's own reward (same control cost).
    slow = np.abs(rows["vx"]) < 3
    assert slow.any()
    run = common.halfcheetah_run_reward(rows["action"], rows["x_velocity"])
    np.testing.assert_allclose(run[slow], rows["env_reward"][slow], rtol=1e-6)


def test_jump_rewards_hand_computed():
    next_obs = np.zeros((3, 17))
    next_obs[:, 0] = [0.5, -0.1, 0.7]  # root height
    next_obs[:, 1] = [0.2, 0.9, 1.5]  # root angle
    action = np.zeros((3, 6))
    action[0, :2] = [1.0, 0.5]  # ||a||^2 = 1.25
    action[1, 0] = -2.0  # ||a||^2 = 4
    x_velocity = np.array([5.0, -4.0, 1.0])
    # clip(5) = 3: 3 - 0.125 + 7.5;  clip(-4) = -3: -3 - 0.4 - 1.5;  1 - 0 + 10.5
    expected = np.array([10.375, -4.9, 11.5])
    np.testing.assert_allclose(common.halfcheetah_jump_reward(next_obs, action, x_velocity), expected)
    expected_hard = np.array([10.375, -4.9, -3.0])  # only the third row is past 1 rad
    np.testing.assert_allclose(common.halfcheetah_jump_reward(next_obs, action, x_velocity, hard=True), expected_hard)


# ---------------------------------------------------------------------------- common.py


def test_dataset_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("D4RL_DATASET_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert common.dataset_path("local/hopper-random") == tmp_path / "home/.d4rl/datasets/local/hopper-random.hdf5"
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    assert common.dataset_path("local/hopper-random") == tmp_path / "d4rl/local/hopper-random.hdf5"
    assert common.dataset_path("x", data_dir_override=str(tmp_path / "dd")) == tmp_path / "dd/x.hdf5"
    assert common.dataset_path("x", out=str(tmp_path / "o.h5")) == tmp_path / "o.h5"
    assert common.env_slug("HalfCheetah-v4") == "halfcheetah"
    assert common.env_slug("Walker2d-v4") == "walker2d"


def test_write_dataset_never_leaves_a_partial_file(tmp_path):
    def data(n):
        return {"observations": np.zeros((n, 2)), "actions": np.zeros((n, 1)), "rewards": np.full(n, float(n)),
                                         "next_observations": np.zeros((n, 2)), "terminals": np.zeros(n),
                                         "timeouts": np.ones(n)}  # fmt: skip

    meta = dict(env_id="Hopper-v4", reward_fn="env", policy="random", seed=0, created_by="test")
    path = tmp_path / "d.hdf5"
    common.write_dataset(path, data(3), **meta)
    # Fails after the arrays are written (an attr h5py cannot store): the old file must survive.
    with pytest.raises(TypeError):
        common.write_dataset(path, data(5), **meta, extra_attrs={"bad": {"not": "storable"}})
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["rewards"][()], [3.0, 3.0, 3.0])
        assert f["timeouts"].dtype == np.bool_
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]

    bad = data(4) | {"rewards": np.zeros(3)}
    with pytest.raises(ValueError, match="inconsistent"):
        common.write_dataset(tmp_path / "e.hdf5", bad, **meta)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]


# ---------------------------------------------------------------------------- bad input: one line each, exit 2, nothing written

collect = importlib.import_module("collect")
jump = importlib.import_module("halfcheetah_jump")
sac = importlib.import_module("sac")


def error_lines(proc):
    """stderr without the v4 envs' deprecation warnings (two lines each)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return [line for line in lines if "DeprecationWarning" not in line and "logger.deprecation" not in line]


@pytest.mark.parametrize("script,flags,expected", [
    ("collect.py", ["--steps", 0, "--seed", -1], ["--steps must be at least 1", "--seed must be at least 0"]),
    ("collect.py", ["--steps", -5, "--policy", "/no/policy.pt"], ["--steps must be", "--policy /no/policy.pt: no such"]),
    # halfcheetah_jump.py's every other flag: test_check_flags_accept_the_defaults_and_find_each_problem
    ("halfcheetah_jump.py", ["--task", "halfcheetah-jump", "--gamma", "nan", "--tau", 0, "--batch-size", 0, "--seed", -2],
     ["--gamma must be a finite number in [0.0, 1.0]", "--tau must be a finite number in (0.0, 1.0]",
      "--batch-size must be at least 1", "--seed must be at least 0"]),
])  # fmt: skip
def test_bad_flags_are_one_line_each_and_exit_2(tmp_path, script, flags, expected):
    out = tmp_path / "out" / "d.hdf5"
    proc = run_script(script, *flags, "--out", out, data_dir=tmp_path, expect_ok=False)
    lines = error_lines(proc)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == len(expected), lines  # one line per problem, nothing else (no traceback, no progress bar)
    assert all(line.startswith("error: ") for line in lines), lines
    for want in expected:
        assert sum(want in line for line in lines) == 1, (want, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made, not even the output folder


@pytest.mark.parametrize("script,flags", [("collect.py", []), ("halfcheetah_jump.py", ["--task",
                         "halfcheetah-jump-hard"])])  # fmt: skip
def test_output_path_that_cannot_be_written_fails_before_collecting(tmp_path, script, flags):
    """With the default 1M steps: a check after the collection would time out here (it takes minutes)."""
    (tmp_path / "a_file").write_text("x")
    for out, needle in [(tmp_path, "is a directory"), (tmp_path / "a_file" / "d.hdf5", "is not a directory")]:
        proc = run_script(script, *flags, "--out", out, data_dir=tmp_path, expect_ok=False)
        lines = error_lines(proc)
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
        assert str(out) in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_check_flags_accept_the_defaults_and_find_each_problem(tmp_path):
    out = str(tmp_path / "d.hdf5")
    assert collect.check_flags(collect.Args(out=out)) == []
    assert jump.check_flags(jump.Args(task="halfcheetah-jump", out=out)) == []
    assert jump.check_flags(jump.Args(task="halfcheetah-jump", out=out, gamma=1.0, tau=1.0, learning_starts=0)) == []
    bad = [("steps", 0), ("seed", -1), ("max_episode_steps", 0), ("learning_rate", 0.0), ("learning_rate", float("inf")),
           ("learning_starts", -1), ("batch_size", 0), ("gamma", -0.1), ("gamma", 1.01), ("tau", 0.0), ("tau", 1.5),
           ("tau", float("nan")), ("hidden_dim", 0), ("checkpoint_every", 0), ("stop_at", 0)]  # fmt: skip
    for field, value in bad:
        problems = jump.check_flags(jump.Args(task="halfcheetah-jump", out=out, **{field: value}))
        assert len(problems) == 1 and problems[0].startswith("--" + field.replace("_", "-")), (field, problems)
    # the SAC checkpoint of an earlier collection is never silently overwritten
    (tmp_path / "d.hdf5.ckpt.pt").write_bytes(b"")
    (problem,) = jump.check_flags(jump.Args(task="halfcheetah-jump", out=out))
    assert "--resume" in problem
    assert jump.check_flags(jump.Args(task="halfcheetah-jump", out=out, resume=True)) == []


def test_sac_bad_flags_are_one_line_each_and_exit_2(tmp_path):
    run = tmp_path / "run"
    flags = ["--levels", "medium", "--eval-every", 0, "--eval-episodes", 0, "--learning-rate", 0, "--steps", 0]
    proc = run_script("sac.py", *flags, "--run-dir", run, data_dir=tmp_path / "d", expect_ok=False)
    lines = error_lines(proc)
    expected = ["--levels 'medium': write NAME=SCORE", "--eval-every must be at least 1",
                "--eval-episodes must be at least 1", "--learning-rate must be a finite number above 0.0",
                "--steps must be at least 1"]  # fmt: skip
    assert proc.returncode == 2 and len(lines) == len(expected), proc.stderr[-2000:]
    for want in expected:
        assert sum(want in line for line in lines) == 1, (want, lines)
    # levels need D4RL's reference returns; a run's checkpoint is never silently overwritten
    assert sac.check_flags(sac.Args(run_dir=str(run))) == []
    (problem,) = sac.check_flags(sac.Args(env="Swimmer-v4", run_dir=str(run)))
    assert problem.startswith("--levels need D4RL's reference returns")
    assert sac.check_flags(sac.Args(env="Swimmer-v4", levels=(), run_dir=str(run))) == []
    run.mkdir()
    (run / "ckpt.pt").write_bytes(b"")
    (problem,) = sac.check_flags(sac.Args(run_dir=str(run)))
    assert "--resume" in problem
    assert sac.check_flags(sac.Args(run_dir=str(run), resume=True)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing else made


def test_discrete_env_is_a_flag_error(tmp_path):
    proc = run_script("collect.py", "--env", "CartPole-v1", "--steps", 10, "--out", tmp_path / "d.hdf5",
                      data_dir=tmp_path, expect_ok=False)  # fmt: skip
    (line,) = error_lines(proc)
    assert proc.returncode == 2 and "CartPole-v1" in line and "Discrete" in line and "Box" in line, proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(common.UsageError, match="observation space"):
        common.check_box_env(_BoxActDiscreteObs(), "X")


class _BoxActDiscreteObs:
    action_space = gym.spaces.Box(-1, 1, (2,))
    observation_space = gym.spaces.Discrete(4)


def test_memory_check_names_the_size():
    with pytest.raises(common.UsageError, match=r"--steps 100000000000 needs \d+\.\d GiB"):
        common.check_memory(10**11, 11, 3)
    common.check_memory(1000, 11, 3)


# ---------------------------------------------------------------------------- torch files: weights only, one line each


class _RunsCode:
    """Unpickling this runs a shell command (what a crafted checkpoint can do without weights_only=True)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def policy_dict(obs_dim=11, act_dim=3):
    net = nn.Sequential(nn.Linear(obs_dim, 16), nn.ReLU(), nn.Linear(16, act_dim))
    return {"kind": "deterministic_mlp", "max_action": 1.0, "obs_mean": torch.zeros(obs_dim),
            "obs_std": torch.ones(obs_dim), "state_dict": net.state_dict()}  # fmt: skip


def bad_torch_files(tmp_path, good: dict) -> dict:
    """name -> (path, what the one line must say)."""
    files = {}
    whole = tmp_path / "whole.pt"
    torch.save(good | {"padding": torch.zeros(10_000)}, whole)
    raw = whole.read_bytes()
    for name, data in [("truncated", raw[: len(raw) // 2]), ("empty", b""), ("garbage", b"not a torch file" * 100)]:
        (tmp_path / f"{name}.pt").write_bytes(data)
        files[name] = (tmp_path / f"{name}.pt", "truncated or corrupt")
    torch.save({"x": _RunsCode(tmp_path / "PWNED")}, tmp_path / "crafted.pt")
    files["crafted"] = (tmp_path / "crafted.pt", "not loaded (unsafe)")
    files["missing"] = (tmp_path / "nonexistent.pt", "No such file")
    return files


def test_policy_files_load_weights_only_and_fail_in_one_line(tmp_path):
    good = policy_dict()
    cases = bad_torch_files(tmp_path, good)
    # layers whose sizes do not chain (16 outputs, then 32 inputs); a state dict without Linear weights
    torch.save(
        good | {"state_dict": good["state_dict"] | {"2.weight": torch.zeros(3, 32)}}, tmp_path / "wrong_sizes.pt"
    )
    torch.save(good | {"state_dict": {"scale": torch.ones(3)}}, tmp_path / "no_weights.pt")
    torch.save({k: v for k, v in good.items() if k != "obs_std"}, tmp_path / "no_std.pt")
    torch.save(good | {"obs_mean": torch.zeros(5)}, tmp_path / "short_mean.pt")
    torch.save([1, 2, 3], tmp_path / "a_list.pt")
    torch.save(policy_dict(5, 4), tmp_path / "other_env.pt")  # a policy of another env
    cases |= {"other_env": (tmp_path / "other_env.pt", "policy is for obs/act dims 5/4, env has 11/3")}
    cases |= {"no_weights": (tmp_path / "no_weights.pt", "holds no Linear weights")}
    cases |= {"wrong_sizes": (tmp_path / "wrong_sizes.pt", "do not match"), "no_std": (tmp_path / "no_std.pt",
                              "lacks obs_std"), "short_mean": (tmp_path / "short_mean.pt",
                              "obs_mean/obs_std have shapes (5,)"), "a_list": (tmp_path / "a_list.pt",
                              "unsupported policy kind 'list'")}  # fmt: skip
    for name, (path, needle) in cases.items():
        with pytest.raises(ValueError) as info:
            collect.load_policy(str(path), 11, 3)
        message = str(info.value)
        assert str(path) in message and needle in message and "\n" not in message, (name, message)
        assert "weights_only" not in message, name  # never the advice to load it unsafely
    assert not (tmp_path / "PWNED").exists()
    torch.save(good, tmp_path / "good.pt")
    assert collect.load_policy(str(tmp_path / "good.pt"), 11, 3)(np.zeros((2, 11), np.float32)).shape == (2, 3)

    # end to end: exit 1, the one line, no dataset
    proc = run_script("collect.py", "--policy", tmp_path / "truncated.pt", "--steps", 10, "--out",
                      tmp_path / "d.hdf5", data_dir=tmp_path, expect_ok=False)  # fmt: skip
    (line,) = error_lines(proc)
    assert proc.returncode == 1 and line.startswith("error: ") and "truncated.pt" in line, proc.stderr[-2000:]
    assert not (tmp_path / "d.hdf5").exists()


def test_sac_checkpoints_load_weights_only_and_fail_in_one_line(tmp_path):
    args = jump.Args(task="halfcheetah-jump", steps=300, hidden_dim=8, cuda=False)
    env = jump.make_env(args)
    sac = jump.SAC(env, args, torch.device("cpu"))
    buf = common.allocate_buffer(args.steps, 17, 6, ("x_velocity",))
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    good = tmp_path / "good.ckpt.pt"
    jump.save_checkpoint(good, 100, sac, buf, env, rng, jump.settings(args))
    state = torch.load(good, weights_only=True)
    cases = bad_torch_files(tmp_path, state)
    broken = {"keys": {"step": 100}, "sac": state | {"sac": {}}, "step": state | {"step": 300},
              "buffer": state | {"buffer": {k: v[:, :3] if v.dim() == 2 else v for k, v in state["buffer"].items()}}}  # fmt: skip
    for name, value in broken.items():
        torch.save(value, tmp_path / f"{name}.pt")
        cases[name] = (tmp_path / f"{name}.pt",
                       "not a checkpoint of this script" if name == "keys" else "does not match")  # fmt: skip
    for name, (path, needle) in cases.items():
        with pytest.raises(ValueError) as info:
            jump.load_checkpoint(path, sac, buf, env, rng, jump.settings(args), args.steps)
        message = str(info.value)
        assert str(path) in message and needle in message and "\n" not in message, (name, message)
        assert "weights_only" not in message, name
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(ValueError, match="other settings.*hidden_dim"):
        other = jump.Args(task="halfcheetah-jump", steps=300, hidden_dim=16)
        jump.load_checkpoint(good, sac, buf, env, rng, jump.settings(other), other.steps)
    assert jump.load_checkpoint(good, sac, buf, env, rng, jump.settings(args), args.steps) == (100, {})

    # end to end: exit 1, one line naming the file and the fix, no dataset
    out = tmp_path / "d.hdf5"
    (tmp_path / "d.hdf5.ckpt.pt").write_bytes((tmp_path / "truncated.pt").read_bytes())
    proc = run_script("halfcheetah_jump.py", "--task", "halfcheetah-jump", "--steps", 300, "--hidden-dim", 8,
                      "--no-cuda", "--out", out, "--resume", data_dir=tmp_path, expect_ok=False)  # fmt: skip
    (line,) = error_lines(proc)
    assert proc.returncode == 1 and "d.hdf5.ckpt.pt" in line and "delete" in line, proc.stderr[-2000:]
    assert not out.exists()


def test_every_torch_load_in_datasets_is_weights_only():
    for path in DATASETS.glob("*.py"):
        for line in path.read_text().splitlines():
            if "torch.load(" in line:
                assert "weights_only=True" in line, (path.name, line)


def test_ctrl_c_is_one_line_and_writes_nothing(tmp_path):
    err = tmp_path / "stderr"
    with open(err, "w") as f:  # as from a terminal: SIGINT at its default, whatever this process inherited or set
        proc = subprocess.Popen([sys.executable, str(DATASETS / "collect.py"), "--out", str(tmp_path / "d.hdf5")],
                                stdout=subprocess.DEVNULL, stderr=f, env=os.environ | {"OMP_NUM_THREADS": "1"},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and "step/s" not in err.read_text():
        time.sleep(0.5)  # until the collection runs (its progress bar is on stderr)
    assert proc.poll() is None, err.read_text()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    text = err.read_text()
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip() and "step" not in line]
    assert proc.returncode == 130 and "Traceback" not in text and "no dataset was written" in lines[-1], text[-2000:]
    assert os.listdir(tmp_path) == ["stderr"]
