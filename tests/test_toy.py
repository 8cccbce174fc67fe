"""The RiskWorld toy (toy/riskworld.py): env dynamics and reward, the offline dataset, evaluation, and a tiny run."""
import json
import os

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from conftest import ROOT, load_module

rw = load_module("toy/riskworld.py", "riskworld")
SQRT2 = np.sqrt(2.0)


def env_at(state):
    env = gym.make("RiskWorld-v0")
    env.reset(seed=0)
    env.unwrapped.state = np.asarray(state, dtype=np.float32)
    return env


# ---------------------------------------------------------------- env
@pytest.mark.parametrize("state, action, next_state", [
    ((0.5, -0.2), (0.3, 0.1), (0.8, -0.1)),  # inside: s + a
    ((2.5, 2.8), (1.0, 1.0), (3.0, 3.0)),  # clipped at the upper-right corner
    ((-2.5, -2.9), (-1.0, -0.5), (-3.0, -3.0)),  # clipped at the lower-left corner
    ((2.9, -2.9), (0.6, -0.6), (3.0, -3.0)),  # clipped at the end of the band
    ((0.0, 0.0), (5.0, -7.0), (1.0, -1.0)),  # actions beyond [-1, 1] are clipped to it
])
def test_step_moves_by_the_action_and_clips_at_the_border(state, action, next_state):
    env = env_at(state)
    obs, reward, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.float32))
    np.testing.assert_allclose(obs, next_state, atol=1e-6)
    assert reward == pytest.approx((next_state[0] + next_state[1]) / SQRT2, abs=1e-6)
    assert not terminated and not truncated


def test_reward_is_the_signed_distance_to_the_line():
    assert rw.reward_fn(np.array([3.0, 3.0])) == pytest.approx(6 / SQRT2)  # upper right: high reward
    assert rw.reward_fn(np.array([-3.0, -3.0])) == pytest.approx(-6 / SQRT2)  # lower left: negative, not |x + y|
    assert rw.reward_fn(np.array([2.0, -2.0])) == pytest.approx(0.0)  # on the line y = -x
    env = env_at((-1.0, -1.0))
    assert env.step(np.array([-1.0, -1.0], dtype=np.float32))[1] == pytest.approx(-4 / SQRT2)


def test_episodes_start_in_the_band_and_end_by_time_limit_only():
    env = gym.make("RiskWorld-v0")
    starts = np.array([env.reset(seed=i)[0] for i in range(1000)])
    assert (np.abs(starts.sum(1)) < 0.25).all() and (np.abs(starts) <= 3).all()
    assert starts[:, 0].min() < -2.5 and starts[:, 0].max() > 2.5  # the whole band, not a piece of it
    env.reset(seed=0)
    for t in range(10):
        _, _, terminated, truncated, _ = env.step(np.array([1.0, 1.0], dtype=np.float32))
        assert not terminated and truncated == (t == 9)


# ---------------------------------------------------------------- dataset
def test_dataset_lies_in_the_band_and_follows_the_env(tmp_path):
    data = rw.make_dataset()
    assert len(data["observations"]) == 10_000
    obs, act, nxt = data["observations"], data["actions"], data["next_observations"]
    assert (np.abs(obs.sum(1)) < 0.25).all() and (np.abs(obs) <= 3).all()
    assert (np.abs(act) <= 1).all() and act.min() < -0.99 and act.max() > 0.99
    np.testing.assert_allclose(nxt, np.clip(obs + act, -3, 3), atol=1e-6)
    np.testing.assert_allclose(data["rewards"], (nxt[:, 0] + nxt[:, 1]) / SQRT2, atol=1e-5)
    assert not data["terminals"].any() and not data["timeouts"].any()

    small = rw.make_dataset(500, seed=3)
    path = rw.write_dataset(str(tmp_path / "riskworld.hdf5"), small)
    with h5py.File(path, "r") as f:
        assert f.attrs["env_id"] == "RiskWorld-v0" and f.attrs["reward_fn"] == "env"
        assert f["observations"].dtype == np.float32 and f["terminals"].dtype == bool and f["timeouts"].dtype == bool
    orpo = load_module("algorithms/orpo.py", "orpo")
    task, _ = orpo.resolve_task("ignored", path, None, None)
    assert task.gym_id == "RiskWorld-v0"
    loaded = orpo.load_transitions(path)  # every row kept: none is a timeout
    np.testing.assert_array_equal(loaded["next_obs"], small["next_observations"])
    assert loaded["done"].sum() == 0


# ---------------------------------------------------------------- evaluation
def test_roll_returns_the_real_envs_episode_returns():
    def up_right(obs):
        return torch.ones_like(obs)

    states, returns = rw.roll(up_right, 30, seed=7)
    assert states.shape == (3, 11, 2) and returns.shape == (3,)
    for ep in range(3):
        s, expected = gym.make("RiskWorld-v0").reset(seed=7 + ep)[0].astype(np.float64), 0.0
        np.testing.assert_allclose(states[ep, 0], s, atol=1e-6)
        for _ in range(10):
            s = np.clip(s + 1.0, -3, 3)
            expected += (s[0] + s[1]) / SQRT2
        assert returns[ep] == pytest.approx(expected, abs=1e-4)
        np.testing.assert_allclose(states[ep, -1], (3.0, 3.0))


# ---------------------------------------------------------------- a tiny run of the whole pipeline
@pytest.mark.skipif(not os.path.isfile(os.path.join(ROOT, "algorithms", "mopo.py")), reason="algorithms/mopo.py not written yet")
def test_quick_run_writes_figures_and_results(tmp_path):
    out = tmp_path / "docs"
    results = rw.run(rw.ToyArgs(quick=True, out_dir=str(out), runs_dir=str(tmp_path / "runs")))
    for name in ("toy_figure2.png", "toy_figure9.png"):
        path = out / name
        assert path.stat().st_size > 10_000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "toy_results.json").read_text())
    assert saved["settings"]["epochs"] == 1 and saved["settings"]["seeds"] == [1]
    for algo in ("mopo", "orpo"):
        assert len(saved[algo]["per_seed"]) == 1 and np.isfinite(saved[algo]["mean"])
        assert saved[algo]["mean"] == pytest.approx(results[algo]["mean"])
        assert abs(saved[algo]["mean"]) <= 10 * 6 / SQRT2  # a 10-step return is bounded by 10 · max reward
    # both algorithms trained on the toy file and left their exported policies in their run dirs
    runs = sorted(os.listdir(tmp_path / "runs"))
    assert any(r.startswith("riskworld__orpo__1") for r in runs) and any(r.startswith("riskworld__mopo__1") for r in runs)
