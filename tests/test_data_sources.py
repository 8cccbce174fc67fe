"""The algorithms' loader on the other data sources: Minari datasets and the datasets this repo makes."""

import json
import warnings

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from conftest import TINY, load_module, run_file, run_script
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

minari = pytest.importorskip("minari")


@pytest.fixture(scope="module")
def minari_dir(tmp_path_factory):
    """A small Minari dataset made here (Hopper-v4, random policy, 4 episodes), in a private Minari root."""
    root = tmp_path_factory.mktemp("minari")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(root))
    from minari.data_collector.episode_buffer import EpisodeBuffer

    env = gym.make("Hopper-v4", max_episode_steps=60)
    env.action_space.seed(0)
    buffers = []
    for episode in range(4):  # whole episodes, as Minari stores them (no jax needed for full buffers)
        obs, _ = env.reset(seed=episode)
        cols = {"observations": [obs], "actions": [], "rewards": [], "terminations": [], "truncations": []}
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            truncated = truncated or (episode % 2 == 1 and len(cols["actions"]) == 9)  # episodes 1, 3: cut at 10 steps
            for k, v in zip(cols, (obs, action, reward, terminated, truncated)):
                cols[k].append(v)
            done = terminated or truncated
        buffers.append(EpisodeBuffer(id=episode, seed=episode, **{k: np.asarray(v) for k, v in cols.items()}))
    with warnings.catch_warnings():  # minari asks for an author, an email, a permalink...: none for a test's file
        warnings.filterwarnings("ignore", message="`[a-z_]+` is set to None", category=UserWarning)
        minari.create_dataset_from_buffers("test/hopper/random-v0", buffers, env="Hopper-v4", algorithm_name="random",
                                           ref_min_score=-20.272305, ref_max_score=3234.3)  # fmt: skip
    yield str(root)
    mp.undo()


def test_minari_dataset_through_the_loader(orpo, minari_dir, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", minari_dir)
    task, path = plumbing.resolve_task("test/hopper/random-v0", None, None, None)
    assert (task.gym_id, task.domain, task.ref_min, task.ref_max) == ("Hopper-v4", "hopper", -20.272305, 3234.3)
    data = plumbing.load_transitions(path)
    episodes = list(minari.load_dataset("test/hopper/random-v0").iterate_episodes())
    # both episode ends occur (random Hopper falls; episodes 1 and 3 are cut), so dropping timeouts is exercised
    assert sum(int(ep.terminations[-1]) for ep in episodes) > 0 and sum(int(ep.truncations[-1]) for ep in episodes) == 2
    # the loader's rows, every column, against the episodes as Minari returns them: s' is the episode's next
    # observation, the truncated last step of a cut episode is dropped (D4RL's rule), float64 becomes float32
    expected = {k: [] for k in ("obs", "act", "rew", "next_obs", "done")}
    for ep in episodes:
        for t in range(len(ep.actions)):
            if ep.truncations[t]:
                continue
            row = ep.observations[t], ep.actions[t], [ep.rewards[t]], ep.observations[t + 1], [ep.terminations[t]]
            for k, v in zip(expected, row):
                expected[k].append(np.asarray(v, dtype=np.float32))
    assert set(data) == set(expected)
    for k, rows in expected.items():
        np.testing.assert_array_equal(data[k], np.stack(rows), err_msg=k)


def test_minari_end_to_end_and_bad_id(minari_dir, tmp_path, monkeypatch):
    env = {"MINARI_DATASETS_PATH": minari_dir, "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = run_file("orpo", "--env", "test/hopper/random-v0", *TINY, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["score_kind"] == "d4rl_normalized" and np.isfinite(summary["normalized_score"])
    bad = run_file("orpo", "--env", "test/hopper/nonexistent-v0", cwd=str(tmp_path))  # run_file fails on a traceback
    last = bad.stderr.strip().splitlines()[-1]
    assert bad.returncode != 0 and last.startswith("error: could not load Minari dataset 'test/hopper/nonexistent-v0'")


def test_jump_task_reports_raw_returns(tmp_path):
    made = run_script("datasets/halfcheetah_jump.py", "--task", "halfcheetah-jump-hard", "--steps", "1500",
                      "--data-dir", str(tmp_path / "data"))  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    result = run_file("orpo", "--env", "halfcheetah-jump-hard", *TINY, "--data-dir", str(tmp_path / "data"),
                      cwd=str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["score_kind"] == "raw_return" and summary["normalized_score"] is None
    assert np.isfinite(summary["return"])
    config = json.loads((run_dir / "config.json").read_text())
    keys = "lambda_p", "lambda_o", "rollout_length", "rollout_length_o", "real_ratio", "output_rollout_ratio"
    assert [config[k] for k in keys] == [1.0, 0.1, 5, 5, 0.05, 0.05]  # 12 D / 12 π^p / 232 π^o rows


def test_jump_reward_in_evaluation_matches_the_dataset_scripts(orpo):
    """The evaluation reward of the jump tasks equals the reward the dataset script relabels with."""
    common = load_module("datasets/common.py", "dcommon")
    env = gym.make("HalfCheetah-v4")
    env.reset(seed=0)
    env.action_space.seed(0)
    for hard in (False, True):
        task = plumbing.Task(
            "t", "HalfCheetah-v4", "halfcheetah", "halfcheetah-jump-hard" if hard else "halfcheetah-jump"
        )
        for _ in range(200):
            action = env.action_space.sample()
            obs, reward, _, _, info = env.step(action)
            info = {"x_velocity": np.array([info["x_velocity"]])}
            ours = plumbing.task_reward(task, obs[None], action[None], np.array([reward]), info)
            theirs = common.halfcheetah_jump_reward(obs[None], action[None], info["x_velocity"], hard=hard)
            np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.slow  # the slow tier: datasets/collect.py end to end
def test_local_dataset_from_collect_py(tmp_path):
    data = str(tmp_path / "data")
    made = run_script("datasets/collect.py", "--env", "Hopper-v4", "--policy", "random", "--steps", "1500",
                      "--data-dir", data)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    result = run_file("orpo", "--env", "local/hopper-random", *TINY, "--data-dir", data, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("local_hopper-random__orpo__")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["preset"] == "hopper-random-v2" and summary["score_kind"] == "d4rl_normalized"
    assert np.isfinite(summary["normalized_score"])
    missing = run_file("orpo", "--env", "local/walker2d-random", "--data-dir", data, cwd=str(tmp_path))
    assert missing.returncode != 0 and "datasets/collect.py" in missing.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["sac", "td3bc"])
def test_collect_py_runs_a_policy_exported_by_the_algorithms(orpo, tmp_path, kind):
    """policy.pt from export_policy (a SAC actor for mopo/oroo/mbpo, TD3+BC for orpo/td3bc) drives collect.py."""
    torch.manual_seed(0)
    norm = orpo.ObsNorm(torch.randn(11), torch.rand(11) + 0.5)
    actor = (orpo.TanhGaussianActor if kind == "sac" else orpo.DeterministicActor)(norm, 11, 3, (16, 16), 1.0)
    path = tmp_path / "run" / "policy.pt"
    path.parent.mkdir()
    plumbing.export_policy(actor, str(path))
    made = run_script("datasets/collect.py", "--env", "Hopper-v4", "--policy", str(path), "--steps", "300", "--out",
                      str(tmp_path / "d.hdf5"))  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    with h5py.File(tmp_path / "d.hdf5", "r") as f:
        obs, act = f["observations"][()], f["actions"][()]
    with torch.no_grad():  # the actor's own deterministic action (SAC: tanh of the mean, not a sample)
        expected = actor(torch.as_tensor(obs), deterministic=True)[0] if kind == "sac" else actor(torch.as_tensor(obs))
    np.testing.assert_allclose(act, expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("args,needle", [(["--env", "Hoppr-v4"], "Hoppr"), (["--policy", "/nonexistent/policy.pt"],
                         "/nonexistent/policy.pt")])  # fmt: skip
def test_collect_py_bad_input_is_one_line(tmp_path, args, needle):
    result = run_script("datasets/collect.py", "--steps", "10", "--out", str(tmp_path / "x.hdf5"), *args)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr and last.startswith("error: ") and needle in last
    assert not (tmp_path / "x.hdf5").exists()
