"""benchmarks/episodes.py: what a policy does on the jump task, checked against an episode replayed here with the
reward function that made the jump data (datasets/common.py), not the one episodes.py calls (plumbing's)."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import load_module, run_script

from common import halfcheetah_jump_reward  # noqa: E402


def replay(action_of, seed: int) -> dict:
    """One HalfCheetah-v4 episode under jump-hard's reward: its return, flips, heights and speed."""
    env = gym.make("HalfCheetah-v4")
    obs, _ = env.reset(seed=seed)
    ret, flips, forward, z, speed, done = 0.0, 0, 0, [], [], False
    while not done:
        a = action_of(obs)
        obs, _, terminated, truncated, info = env.step(a)
        ret += halfcheetah_jump_reward(obs[None], a[None], np.array([info["x_velocity"]]), hard=True)[0]
        flips += obs[1] > 1.0
        forward += obs[1] < -1.0
        z.append(obs[0])
        speed.append(info["x_velocity"])
        done = terminated or truncated
    return {
        "return": ret,
        "flip_share": flips / len(z),
        "forward_flip_share": forward / len(z),
        "z_mean": np.mean(z),
        "z_max": np.max(z),
        "speed_mean": np.mean(speed),
    }


def test_random_policy_numbers_match_a_replay_with_the_datas_reward(tmp_path):
    out = tmp_path / "episodes.json"
    result = run_script(
        "benchmarks/episodes.py", "--episodes", "2", "--seed", "3", "--out", str(out), cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    made = json.loads(out.read_text())
    (inv,) = made["made_by"]  # one invocation
    assert inv["seeds"] == [3, 4] and inv["task"] == "halfcheetah-jump-hard" and inv["figure"] is None
    (row,) = made["policies"]
    rng = np.random.default_rng(3)  # the random policy draws all its episodes from one generator, seeded --seed
    space = gym.make("HalfCheetah-v4").action_space
    for seed, got in zip((3, 4), row["episodes"]):
        want = replay(lambda obs: rng.uniform(space.low, space.high, (1, 6))[0], seed)
        assert got["steps"] == 1000
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    assert 0 < row["mean"]["flip_share"] < 1  # random actions tip the cheetah over now and then
    assert row["mean"]["return"] == pytest.approx(np.mean([e["return"] for e in row["episodes"]]))


def test_a_run_directorys_policy_with_its_label_and_the_figure(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"exp_name": "mine", "seed": 7}))
    net = torch.nn.Sequential(torch.nn.Linear(17, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
    with torch.no_grad():
        net[2].weight.zero_()
        net[2].bias.fill_(0.5)  # tanh(0.5) on every joint, whatever the state
    torch.save({"kind": "deterministic_mlp", "obs_dim": 17, "act_dim": 6, "hidden_dims": [8], "max_action": 1.0,
                "obs_mean": torch.zeros(17), "obs_std": torch.ones(17), "state_dict": net.state_dict()}, run / "policy.pt")  # fmt: skip
    out, figure = tmp_path / "e.json", tmp_path / "fig" / "strip.png"
    args = ("--policies", str(run), "--episodes", "1", "--frames", "3", "--out", str(out), "--figure", str(figure))
    result = run_script("benchmarks/episodes.py", *args, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())["policies"]
    assert row["label"] == "mine seed 7" and (row["exp_name"], row["seed"]) == ("mine", 7)  # the page's row and seed
    want = replay(lambda obs: np.full(6, np.tanh(0.5)), 0)
    for k, v in want.items():
        assert row["episodes"][0][k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a peers.py run (the official code's row): no exp_name in its config; its row from the peer, its seed from summary
    (run / "config.json").write_text(json.dumps({"peer": "official-orpo"}))
    (run / "summary.json").write_text(json.dumps({"seed": 2, "last10_score": 12.5, "epochs": 1}))
    (run / "metrics.csv").write_text("epoch,eval/return\n1,12.5\n")
    result = run_script("benchmarks/episodes.py", *args[:8], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())["policies"]
    assert (row["label"], row["exp_name"], row["seed"], row["last10_score"]) == (
        "official_orpo seed 2",
        "official_orpo",
        2,
        12.5,
    )
    # the diagnostic row (peers.py --one-action-unit): its own row, not the official code's
    (run / "config.json").write_text(json.dumps({"peer": "official-orpo", "cli": {"one_action_unit": True}}))
    result = run_script("benchmarks/episodes.py", *args[:8], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())["policies"]
    assert (row["label"], row["exp_name"]) == ("official_orpo_units seed 2", "official_orpo_units")


class StartTipped(gym.Wrapper):
    """HalfCheetah-v4 reset onto its back: root pitch `pitch` rad (obs[1]), which it cannot right with no action."""

    def __init__(self, pitch: float):
        super().__init__(gym.make("HalfCheetah-v4"))
        self.pitch = pitch

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        base = self.env.unwrapped
        qpos, qvel = base.init_qpos.copy(), base.init_qvel.copy()
        qpos[1], qpos[2] = 0.3, self.pitch  # lifted a little so that it falls onto its back, not into the floor
        base.set_state(qpos, qvel)
        return base._get_obs(), {}


@pytest.mark.parametrize("pitch, flips, forward", [(3.0, 1, 0), (-3.0, 0, 1)])
def test_tipped_backwards_pays_the_penalty_tipped_forwards_is_counted_apart(pitch, flips, forward):
    """On its back tail first (pitch above +1) every step pays jump-hard's −3; head first (below −1) none does, and the
    forward share counts those steps instead, so a policy that lies head first is not read as one that never tipped."""
    episodes = load_module("benchmarks/episodes.py", "episodes_tipped")
    task = episodes.plumbing.Task("halfcheetah-jump-hard", "HalfCheetah-v4", "halfcheetah", "halfcheetah-jump-hard")
    numbers, _ = episodes.play(lambda obs: np.zeros((1, 6)), StartTipped(pitch), task, 0, 0)
    assert numbers["flip_share"] == pytest.approx(flips, abs=0.02)
    assert numbers["forward_flip_share"] == pytest.approx(forward, abs=0.02)
    if flips:
        assert numbers["return"] == pytest.approx(-3.0 * 1000, abs=0.02 * 3000)  # −3 a step, nothing else


def test_a_run_whose_metrics_disagree_with_its_record_plays_without_its_score(tmp_path, capsys):
    """A run whose metrics.csv holds fewer epochs than its summary.json counts: its policy plays, its last-10 score
    (which the jump page sets beside the episodes) is left out and the run named."""
    episodes = load_module("benchmarks/episodes.py", "episodes_record_check")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"exp_name": "mine", "seed": 7}))
    (run / "summary.json").write_text(json.dumps({"seed": 7, "last10_score": 12.5, "epochs": 2}))
    (run / "metrics.csv").write_text("epoch,eval/return\n1,12.5\n")  # epoch 2 cut off
    net = torch.nn.Sequential(torch.nn.Linear(17, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
    torch.save({"kind": "deterministic_mlp", "obs_dim": 17, "act_dim": 6, "hidden_dims": [8], "max_action": 1.0,
                "obs_mean": torch.zeros(17), "obs_std": torch.ones(17), "state_dict": net.state_dict()}, run / "policy.pt")  # fmt: skip
    out = tmp_path / "e.json"
    argv = ["--policies", str(run), "--episodes", "1", "--frames", "1", "--out", str(out)]
    assert episodes.cli(episodes.main, episodes.Args, argv) == 0
    (row,) = json.loads(out.read_text())["policies"]
    assert row["label"] == "mine seed 7" and row["last10_score"] is None and row["episodes"]
    err = capsys.readouterr().err
    assert f"warning: {run}: its last-10 score is left out (metrics.csv holds 1 of the 2 epochs" in err, err


@pytest.mark.parametrize(
    "args, code, words",
    [
        (("--policies", "{run}"), 1, "holds no policy.pt"),
        (("--policies", "random", "random", "--labels", "a"), 2, "1 names for 2 policies"),
        (("--task", "jump"), 2, "--task jump: use one of"),
        (("--episodes", "0"), 2, "--episodes 0: must be at least 1"),
        (("--policies", "{run}/nothing.pt"), 1, "cannot read the policy file"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, code, words):
    (tmp_path / "run").mkdir()
    args = [a.format(run=tmp_path / "run") for a in args]
    result = run_script("benchmarks/episodes.py", *args, "--out", str(tmp_path / "e.json"), cwd=str(tmp_path))
    assert result.returncode == code, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "e.json").exists()


def test_add_keeps_the_stored_policies_and_records_each_invocation(tmp_path):
    """--add: a later seed's policies join the file; the ones stored before (whose policy.pt may be gone) stay, each
    tagged with the invocation that played it; a file written before --add (one made_by) reads as one invocation."""
    out = tmp_path / "e.json"
    first = run_script("benchmarks/episodes.py", "--episodes", "1", "--out", str(out), cwd=str(tmp_path))
    assert first.returncode == 0, first.stderr[-2000:]
    made = json.loads(out.read_text())
    made["made_by"] = made["made_by"][0]  # the format before --add: one invocation, policies untagged
    del made["policies"][0]["made_by"]
    out.write_text(json.dumps(made))
    args = ("--episodes", "1", "--seed", "5", "--labels", "another", "--out", str(out))
    again = run_script("benchmarks/episodes.py", "--add", *args, cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    made = json.loads(out.read_text())
    assert [(p["label"], p["made_by"]) for p in made["policies"]] == [("random (the data's policy)", 0), ("another", 1)]
    assert [m["seeds"] for m in made["made_by"]] == [[0], [5]] and "--add" in made["made_by"][1]["command"]
    # played again under the same label: replaced, not doubled; without --add the file holds this invocation alone
    again = run_script("benchmarks/episodes.py", "--add", *args, cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    made = json.loads(out.read_text())
    assert [p["label"] for p in made["policies"]] == ["random (the data's policy)", "another"]
    assert [p["made_by"] for p in made["policies"]] == [0, 2] and len(made["made_by"]) == 3
    alone = run_script("benchmarks/episodes.py", *args, cwd=str(tmp_path))
    assert alone.returncode == 0 and [p["label"] for p in json.loads(out.read_text())["policies"]] == ["another"]
