"""The RiskWorld toy (toy/riskworld.py): env dynamics and reward sign, the dataset recipe, evaluation, the statistics,
and one tiny run that checks each arm trained with the u and λp it claims and reused the seed's ensemble."""

import json
import os

import gymnasium as gym
import h5py
import numpy as np
import pytest
from conftest import ROOT, load_module

rw = load_module("toy/riskworld.py", "riskworld")
SQRT2 = np.sqrt(2.0)


def env_at(state):
    env = gym.make("RiskWorld-v0")
    env.reset(seed=0)
    env.unwrapped.state = np.asarray(state, dtype=np.float32)
    return env


# ---------------------------------------------------------------- env
@pytest.mark.parametrize(
    "state, action, next_state",
    [
        ((0.5, -0.2), (0.3, 0.1), (0.8, -0.1)),  # inside: s + a
        ((2.5, 2.8), (1.0, 1.0), (3.0, 3.0)),  # clipped at the upper-right corner
        ((-2.5, -2.9), (-1.0, -0.5), (-3.0, -3.0)),  # clipped at the lower-left corner
        ((2.9, -2.9), (0.6, -0.6), (3.0, -3.0)),  # clipped at the end of the band
        ((0.0, 0.0), (5.0, -7.0), (1.0, -1.0)),  # actions beyond [-1, 1] are clipped to it
    ],
)
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
    # the band is covered end to end, so "out of distribution" means off the band, not a gap in it
    assert np.histogram(obs[:, 0], bins=12, range=(-3, 3))[0].min() > 300

    small = rw.make_dataset(500, seed=3)
    path = rw.write_dataset(str(tmp_path / "riskworld.hdf5"), small)
    with h5py.File(path, "r") as f:
        assert f.attrs["env_id"] == "RiskWorld-v0" and f.attrs["reward_fn"] == "env"
    orpo = load_module("algorithms/orpo.py", "orpo")
    task, _ = orpo.resolve_task("ignored", path, None, None)
    assert task.gym_id == "RiskWorld-v0"
    loaded = orpo.load_transitions(path)  # every row kept: none is a timeout
    np.testing.assert_array_equal(loaded["next_obs"], small["next_observations"])
    assert loaded["done"].sum() == 0


# ---------------------------------------------------------------- evaluation and statistics
def test_roll_returns_the_real_envs_episode_returns():
    def up_right(obs):
        return np.ones_like(obs)

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
    assert rw.upper_right_share(states[:, 1:]) == pytest.approx(np.mean(states[:, 1:].reshape(-1, 2).min(1) > 1.5))


def test_bootstrap_interval_is_the_percentile_interval_of_resampled_means():
    assert rw.bootstrap_ci([4.0, 4.0, 4.0]) == (4.0, 4.0)
    # one 10 among five 0s: a resample mean is 2·(number of 10s drawn); P(≥ 3 draws) = 5.8 %, P(≥ 4) = 0.7 %,
    # so the 97.5th percentile is 6 and the 2.5th is 0
    assert rw.bootstrap_ci([0.0, 0.0, 0.0, 0.0, 10.0]) == (0.0, 6.0)
    # many seeds: the resampled mean is close to normal, so the interval is mean ± 1.96·σ/√n (90 % would be ± 1.64)
    v = np.arange(20.0)
    half = 1.96 * v.std() / np.sqrt(len(v))
    lo, hi = rw.bootstrap_ci(v)
    assert lo == pytest.approx(v.mean() - half, abs=0.2) and hi == pytest.approx(v.mean() + half, abs=0.2)


def test_orpo_beats_mopo_only_with_disjoint_intervals():
    def entry(algo, u, mean, ci, seeds=3):
        return {
            f"{algo}|{u}|100": {
                "algo": algo,
                "u": u,
                "lambda_p": 100.0,
                "mean": mean,
                "ci95": ci,
                "per_seed": [mean] * seeds,
            }
        }

    table = {
        **entry("mopo", "ensemble_std", 5.0, [1.0, 9.0]),
        **entry("orpo", "max_aleatoric", 35.0, [34.0, 36.0]),
        **entry("mopo", "max_aleatoric", 33.0, [20.0, 35.0]),
        **entry("orpo", "ensemble_std", 5.5, [2.0, 9.0]),
    }
    got = {c["comparison"]: c for c in rw.comparisons(table, (100.0,))}
    assert got["as the authors ran it"]["orpo_better"]  # MOPO with ensemble_std against ORPO with max_aleatoric
    assert not got["matched max_aleatoric"]["orpo_better"] and not got["matched max_aleatoric"]["mopo_better"]
    assert not got["matched ensemble_std"]["orpo_better"]
    assert "matched mixture_std" not in got  # no cells, no comparison
    one_seed = {**table, **entry("mopo", "ensemble_std", 5.0, [5.0, 5.0], seeds=1)}
    assert not next(c for c in rw.comparisons(one_seed, (100.0,)) if c["comparison"] == "as the authors ran it")[
        "orpo_better"
    ]


# ---------------------------------------------------------------- the command line
def test_results_go_to_runs_unless_docs_are_asked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert rw.resolve(rw.ToyArgs())[1] == str(tmp_path / "runs" / "toy" / "demo")
    assert rw.resolve(rw.ToyArgs(setting="paper", write_docs=True))[1] == os.path.join(ROOT, "docs", "toy_paper")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lambda-ps", "-1"], "λp and λo must be >= 0"),
        (["--workers", "0"], "must be >= 1"),
        (["--write-docs", "--out-dir", "x"], "either --write-docs or --out-dir"),
    ],
)
def test_bad_input_is_a_one_line_error(argv, message, capsys):
    assert rw.cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


# ---------------------------------------------------------------- a tiny run of the whole pipeline
def test_quick_run_trains_each_arm_with_its_u_on_the_seeds_ensemble_and_resumes(tmp_path):
    out, ens = tmp_path / "out", tmp_path / "ensembles"
    args = rw.ToyArgs(setting="quick", out_dir=str(out), ensembles_dir=str(ens), workers=1)
    results = rw.run(args)
    ensembles = list(ens.iterdir())
    assert len(ensembles) == 1  # one fit for the seed, shared by the 4 runs
    cells = {p.name: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    assert sorted(cells) == sorted(
        f"{a}__{u}__lp100__s1.json" for a in ("mopo", "orpo") for u in ("ensemble_std", "max_aleatoric")
    )
    for row in cells.values():  # what the algorithm's own run recorded in its config.json
        assert row["config_uncertainty"] == row["u"] and row["config_lambda_p"] == 100.0
        assert row["config_load_dynamics_path"] == str(ensembles[0])
        assert row["episodes"] == 20 and np.isfinite(row["avg_return"])
    authors = next(c for c in results["comparisons"] if c["comparison"] == "as the authors ran it")
    assert authors["mopo"] == cells["mopo__ensemble_std__lp100__s1.json"]["avg_return"]
    assert authors["orpo"] == cells["orpo__max_aleatoric__lp100__s1.json"]["avg_return"]
    for name in ("uncertainty.png", "visited_lp100.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["ensembles"]["per_seed"][0]["holdout_mse"] > 0
    # a second invocation finds every cell and the ensemble done: nothing is retrained
    stamps = {p: p.stat().st_mtime_ns for p in [*(out / "cells").iterdir(), *ensembles]}
    again = rw.run(args)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert again["table"] == results["table"]
