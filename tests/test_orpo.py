"""Unit and end-to-end tests of algorithms/orpo.py on a small real Hopper-v4 dataset."""

import copy
import csv
import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest
from types import SimpleNamespace
import torch
import tyro
from conftest import TINY, fit_settings, sac_settings, td3_settings, write_random_dataset
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

PAPER_TEX = os.environ.get("ORPO_PAPER_TEX")  # the paper's LaTeX source, only to check PAPER_HYPERPARAMETERS


# ---------------------------------------------------------------- data
def test_dataset_path_takes_eval_env_from_metadata_or_flag(orpo, tmp_path):
    path = str(tmp_path / "mine.hdf5")
    write_random_dataset(path, steps=200, attrs={"env_id": "Hopper-v4"})
    task, _ = plumbing.resolve_task("ignored", path, None, None)
    assert task.gym_id == "Hopper-v4" and task.ref_min == -20.272305  # env reward: D4RL's reference returns apply
    bare = str(tmp_path / "bare.hdf5")
    write_random_dataset(bare, steps=200)
    with pytest.raises(orpo.UserError, match="--eval-env"):
        plumbing.resolve_task("ignored", bare, None, None)
    assert plumbing.resolve_task("ignored", bare, "Hopper-v4", None)[0].gym_id == "Hopper-v4"


# ---------------------------------------------------------------- uncertainty
def test_uncertainty_grows_away_from_data_and_step_shapes(orpo):
    torch.manual_seed(0)
    obs, act = torch.rand(2000, 3) * 2 - 1, torch.rand(2000, 1) * 2 - 1
    data = {"obs": obs, "act": act, "next_obs": obs + 0.1 * act, "rew": obs.sum(1, keepdim=True)}
    model = orpo.EnsembleDynamics(3, 1, (32, 32), 5, 3)
    orpo.fit_dynamics(model, data, **fit_settings(orpo.Args(dynamics_max_epochs=15)))
    near_obs, near_act = torch.rand(500, 3) * 2 - 1, torch.rand(500, 1) * 2 - 1
    far_obs = near_obs.sign() * 6 + near_obs  # far outside the data's [-1, 1] cube
    near, far = model.step(near_obs, near_act), model.step(far_obs, near_act)  # (ŝ', r̂, mean, std) each
    next_obs, rew, mean, std = near
    assert next_obs.shape == (500, 3) and rew.shape == (500,) and mean.shape == std.shape == (5, 500, 4)
    for kind in orpo.UNCERTAINTIES:
        u_near, u_far = orpo.uncertainty(*near[2:], kind), orpo.uncertainty(*far[2:], kind)
        assert u_near.shape == (500,)
        # the models' disagreement grows off the data (≈ 6× in var, ≈ 2.5× in std over seeds); a learned σ need not
        if kind != "max_aleatoric":
            assert (u_far.mean() > {"ensemble_var": 3.0, "ensemble_std": 1.5, "mixture_var": 3.0,
                    "mixture_std": 1.5}[kind] * u_near.mean()), kind  # fmt: skip


# ---------------------------------------------------------------- termination
@pytest.mark.parametrize("gym_id,domain", [("Hopper-v4", "hopper"), ("Walker2d-v4", "walker2d"), ("HalfCheetah-v4",
                         "halfcheetah")])  # fmt: skip
def test_termination_matches_the_env(orpo, gym_id, domain):
    env = gym.make(gym_id)
    env.action_space.seed(0)
    fn = orpo.termination_fn(domain)
    obs, _ = env.reset(seed=0)
    next_obs, done = [], []
    for _ in range(1500):
        o, _, terminated, truncated, _ = env.step(env.action_space.sample())
        next_obs.append(o)
        done.append(terminated)
        if terminated or truncated:
            env.reset()
    predicted = fn(torch.as_tensor(np.array(next_obs), dtype=torch.float32)).numpy()
    np.testing.assert_array_equal(predicted, np.array(done))
    if domain != "halfcheetah":
        assert 0 < np.sum(done) < len(done)  # both outcomes were exercised
    # the usual hopper function's np.abs(bool) bug checked only the upper bound: a velocity of −150 must
    # terminate Hopper (the env bounds every state entry to ±100); Walker2d and HalfCheetah have no such bound
    state = torch.zeros(1, len(obs))
    state[0, 0], state[0, 5] = 1.25, -150.0
    assert bool(fn(state)[0]) == (domain == "hopper")
    assert bool(fn(torch.tensor([[float("nan")] * len(obs)]))[0])


# ---------------------------------------------------------------- buffers
def test_ring_buffer_is_fifo(orpo):
    buf = orpo.ReplayBuffer(5, {"x": 1}, "cpu")
    buf.add({"x": torch.arange(3.0)})
    assert (buf.size, buf.ptr) == (3, 3)
    buf.add({"x": torch.arange(3.0, 7.0)})  # 3 and 4 fill the end, 5 and 6 overwrite the two oldest (0 and 1)
    assert buf.size == 5 and sorted(buf.data["x"][:, 0].tolist()) == [2, 3, 4, 5, 6]
    buf.add({"x": torch.arange(10.0, 18.0)})  # more than the capacity: the newest 5 remain
    assert sorted(buf.data["x"][:, 0].tolist()) == [13, 14, 15, 16, 17]
    assert set(buf.sample(100)["x"][:, 0].tolist()) <= {13, 14, 15, 16, 17}


# ---------------------------------------------------------------- ensemble
def test_weight_decay_in_adam_equals_the_l2_term_in_the_loss(orpo):
    """param_groups' coupled weight decay gives the same steps as 0.5·wd·‖W‖² added to the loss (MOPO's formulation)."""
    torch.manual_seed(0)
    grouped = orpo.EnsembleDynamics(5, 2, (32, 32), 4, 2)
    in_loss, no_decay = copy.deepcopy(grouped), copy.deepcopy(grouped)
    opt_grouped, opt_loss = orpo.adam(grouped.param_groups(), 1e-3), orpo.adam(in_loss.parameters(), 1e-3)
    opt_none = orpo.adam(no_decay.parameters(), 1e-3)
    assert sum(len(g["params"]) for g in grouped.param_groups()) == len(list(grouped.parameters()))
    for _ in range(5):
        x, y = torch.randn(4, 16, 7), torch.randn(4, 16, 6)
        orpo.dynamics_step(grouped, opt_grouped, x, y)
        orpo.dynamics_step(no_decay, opt_none, x, y)
        mean, logvar = in_loss(x)
        nll = ((mean - y) ** 2 * (-logvar).exp() + logvar).mean(dim=(1, 2)).sum()
        l2 = sum(wd * 0.5 * layer.weight.pow(2).sum() for wd, layer in zip(in_loss.weight_decays, in_loss.layers))
        opt_loss.zero_grad()
        (nll + l2 + 0.01 * (in_loss.max_logvar.sum() - in_loss.min_logvar.sum())).backward()
        opt_loss.step()
    for a, b in zip(grouped.parameters(), in_loss.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # the decay really acts: without it the weights differ
    assert max((a - c).abs().max().item() for a, c in zip(grouped.parameters(), no_decay.parameters())) > 1e-7


def test_bf16_on_a_gpu_without_bfloat16_is_a_user_error(orpo, monkeypatch):
    """Checked before the fit touches the GPU, so a fake capability answer (and fake CUDA data) tests it on a CPU."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    model = orpo.EnsembleDynamics(3, 1, (8,), 2, 1, bf16=True)
    with pytest.raises(orpo.UserError, match="--dynamics-bf16: this GPU has no bfloat16 support"):
        orpo.fit_dynamics(model, {"obs": SimpleNamespace(is_cuda=True)}, **fit_settings(orpo.Args()))


def test_early_stopping_restores_each_models_best(orpo):
    """Training stops on patience, and the weights left are each model's best on the holdout set."""
    torch.manual_seed(1)
    obs, act = torch.randn(600, 2), torch.randn(600, 1)
    data = {"obs": obs, "act": act, "next_obs": obs + 0.3 * obs.roll(1, 1) + 0.1 * torch.randn(600, 2),
            "rew": torch.randn(600, 1)}  # fmt: skip
    model = orpo.EnsembleDynamics(2, 1, (32,), 3, 2)
    torch.manual_seed(5)
    metrics = orpo.fit_dynamics(model, data, **fit_settings(orpo.Args(dynamics_patience=2, dynamics_max_epochs=300,
                                dynamics_batch_size=64)))  # fmt: skip
    assert metrics["dynamics/epochs"] < 300  # the noisy reward stops improving long before
    torch.manual_seed(5)
    hold = torch.randperm(600)[: min(int(600 * 0.2), 1000)]  # fit_dynamics' first random draw is its holdout split
    x, y = torch.cat([obs, act], 1)[hold], torch.cat([data["next_obs"] - obs, data["rew"]], 1)[hold]
    with torch.no_grad():
        mse = ((model(x)[0] - y) ** 2).mean(dim=(1, 2))
    assert metrics["dynamics/holdout_mse"] == pytest.approx(mse[model.elites].mean().item(), rel=1e-5)
    assert set(model.elites.tolist()) == set(torch.argsort(mse)[:2].tolist())


# ---------------------------------------------------------------- presets
# The paper's "Tuned hyper-parameters" table (\label{fig:d4rl-tuned-hyperparams}): per dataset our MOPO's
# (λp, uncertainty, h^p) and ORPO's (λo, h^o), copied from the paper; test_hyperparameters_equal_the_latex checks
# them against the LaTeX when ORPO_PAPER_TEX names it.
PAPER_HYPERPARAMETERS = {"halfcheetah-random-v2": (6.64, "ensemble_std", 5, 0.015, 5), "hopper-random-v2": (5.9,
                                                   "max_aleatoric", 5, 0.015, 5), "walker2d-random-v2": (0.21,
                                                   "ensemble_var", 1, 0.002, 5), "halfcheetah-medium-v2": (5.92,
                                                   "ensemble_var", 5, 0.015, 1), "hopper-medium-v2": (5.0,
                                                   "max_aleatoric", 5, 0.015, 1), "walker2d-medium-v2": (5.28,
                                                   "ensemble_std", 1, 0.015, 1),
                                                   "halfcheetah-medium-replay-v2": (0.96, "ensemble_var", 5, 0.002,
                                                   5), "hopper-medium-replay-v2": (2.5, "max_aleatoric", 5, 0.005, 5),
                                                   "walker2d-medium-replay-v2": (2.48, "ensemble_std", 1, 0.015, 1),
                                                   "halfcheetah-medium-expert-v2": (4.56, "max_aleatoric", 5, 0.015,
                                                   1), "hopper-medium-expert-v2": (10.0, "max_aleatoric", 5, 0.015,
                                                   5), "walker2d-medium-expert-v2": (2.5, "max_aleatoric", 1, 0.015,
                                                   1)}  # fmt: skip


def test_hyperparameters_equal_the_latex():
    if not PAPER_TEX or not os.path.isfile(PAPER_TEX):
        pytest.skip(
            f"no LaTeX source of the paper at ORPO_PAPER_TEX={PAPER_TEX!r}: set it to PATH/orpo_aaai24.tex to check "
            "PAPER_HYPERPARAMETERS against it"
        )
    tex = open(PAPER_TEX).read()
    table = tex[
        tex.index("Optimized MOPO~\\cite{lu2022revisiting} \\\\ $(N") : tex.index("label{fig:d4rl-tuned-hyperparams}")
    ]
    rows = {}
    names = {"Ensemble Std": "ensemble_std", "Ensemble Var": "ensemble_var", "Max Aleatoric": "max_aleatoric"}
    row = r"^\s*\\!\\!\\!([a-z-]+)(?:\\!)*\s*&\s*(\w+)\s*&([^&]+)&([^&]+)&\s*([\d.]+,\s*\d+)\s*\\\\"
    for kind, env, _, ours, orpo_cols in re.findall(row, table, flags=re.M):
        kind = {"med-expert": "medium-expert"}.get(kind, kind)
        lp, unc, hp = [x.strip() for x in re.sub(r"\\makecell\[c\]\{|\}", "", ours).split(",")]
        lo, ho = [x.strip() for x in orpo_cols.split(",")]
        rows[f"{env}-{kind}-v2"] = (float(lp), names[unc], int(hp), float(lo), int(ho))
    assert rows == PAPER_HYPERPARAMETERS


def test_presets_equal_the_papers_table(orpo):
    for name, row in PAPER_HYPERPARAMETERS.items():
        assert orpo.PRESETS[name] == row, name
    for name in PAPER_HYPERPARAMETERS:
        assert orpo.preset_shares(name) == ((0.5, 0.3, 0.2) if "medium-replay" in name else (0.05, 0.45, 0.5))
    assert orpo.preset_shares("halfcheetah-jump") == (0.05, 0.05, 0.9)


def test_presets_fill_only_unset_fields(orpo, hopper_data_dir):
    task, _ = plumbing.resolve_task("hopper-random-v2", None, None, hopper_data_dir[0])
    args, source = orpo.apply_presets(orpo.Args(env="hopper-random-v2", lambda_p=1.5), task)
    assert source == "hopper-random-v2"
    assert (args.lambda_p, args.uncertainty, args.rollout_length, args.lambda_o, args.rollout_length_o) == (1.5,
            "max_aleatoric", 5, 0.015, 5)  # fmt: skip
    assert args.normalize_obs is False  # the official code does not normalise hopper/walker2d observations


# ---------------------------------------------------------------- end to end
def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def test_end_to_end_run_writes_a_finite_score(cli, tmp_path):
    result = cli("orpo", "--env", "hopper-random-v2", *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("hopper-random-v2__orpo__1__")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert np.isfinite(summary["normalized_score"]) and np.isfinite(summary["last10_score"]) and summary["finished"]
    for name in ("config.json", "metrics.csv", "checkpoint.pt", "dynamics.pt", "policy.pt"):
        assert (run_dir / name).is_file(), name
    assert any(p.name.startswith("events.out.tfevents") for p in run_dir.iterdir())
    rows = read_metrics(run_dir)
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]  # row 0: the ensemble's fit
    assert float(rows[0]["dynamics/holdout_mse"]) > 0 and float(rows[0]["dynamics/epochs"]) == 2
    keys = ["eval/normalized_score", "eval/model_return", "eval/model_uncertainty", "rollout/u_optimistic", "losses/q",
            "rollout/u_pessimistic", "rollout/action_distance_optimistic", "losses/critic_loss", "losses/actor_loss",
            "rollout_policy/alpha", "rollout_policy/critic_loss"]  # fmt: skip
    for key in keys:
        assert np.isfinite(float(rows[-1][key])), key
    config = json.loads((run_dir / "config.json").read_text())
    assert config["lambda_p"] == 5.9 and config["rollout_length_o"] == 5  # the preset was applied and saved
    assert not list(run_dir.glob("*.tmp"))


# ---------------------------------------------------------------- ablation switches (Table 4; RQ2's: test_rollout_policies.py)
@pytest.mark.parametrize("switch", [["--output-algo", "sac"], ["--no-pessimism"], ["--rollout-policy", "untrained"],
                         ["--dynamics-bf16"]])  # fmt: skip
def test_ablation_switches_run(cli, tmp_path, switch):
    result = cli("orpo", "--env", "hopper-random-v2", *TINY, *switch)
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert np.isfinite(json.loads((run_dir / "summary.json").read_text())["normalized_score"])
    row = read_metrics(run_dir)[-1]
    assert ("rollout_policy/critic_loss" in row) == ("untrained" not in switch)
    if switch == ["--output-algo", "sac"]:
        assert "losses/alpha" in row and "losses/bc_loss" not in row
    reward, reward_p = float(row["rollout/reward_optimistic"]), float(row["rollout/reward_p_optimistic"])
    if switch == ["--no-pessimism"]:
        assert reward_p == pytest.approx(reward)  # the model MDP: r^p = r̂
    else:
        assert reward_p < reward  # the P-MDP penalty λp·u > 0


# ---------------------------------------------------------------- bad input: one line, non-zero exit
def test_missing_file_without_network(cli, tmp_path, monkeypatch):
    # a proxy on a closed local port makes every download fail at once, like a machine without network
    env_dir = tmp_path / "empty"
    env_dir.mkdir()
    for k in ("http_proxy", "https_proxy"):
        monkeypatch.setenv(k, "http://127.0.0.1:9")  # offline
    code, _, err = cli("orpo", "--env", "walker2d-medium-v2", "--data-dir", str(env_dir))
    last = err.strip().splitlines()[-1]  # one line: the URL tried and where to put the file
    assert code == 1 and "rail.eecs.berkeley.edu" in last and str(env_dir / "walker2d_medium-v2.hdf5") in last, err
    assert "python datasets/fetch_d4rl.py --env walker2d-medium-v2" in last  # the fetcher with a mirror
    assert not list(env_dir.iterdir())  # nothing half-written


def test_agents_take_each_hyperparameter_from_its_own_flag(orpo):
    """SAC and TD3BC read their settings from Args by name: every learning rate reaches its own optimiser."""
    args = orpo.Args(hidden_dims=(8, 8), sac_actor_lr=1e-5, sac_critic_lr=2e-5, sac_alpha_lr=3e-5, actor_lr=4e-5,
                     critic_lr=5e-5, gamma=0.9, tau=0.01, alpha=1.5, policy_noise=0.3, noise_clip=0.4,
                     target_entropy=-0.5)  # fmt: skip
    norm = orpo.ObsNorm(torch.zeros(4), torch.ones(4))
    sac = orpo.SAC(norm, 2, 2.0, **sac_settings(args))
    lrs = [opt.param_groups[0]["lr"] for opt in (sac.actor_optim, sac.critic_optim, sac.alpha_optim)]
    assert lrs == [1e-5, 2e-5, 3e-5]
    assert (sac.gamma, sac.tau, sac.target_entropy) == (0.9, 0.01, -0.5)
    assert [m.out_features for m in sac.actor.net if isinstance(m, torch.nn.Linear)] == [8, 8, 4]
    td3 = orpo.TD3BC(norm, 2, 2.0, **td3_settings(args))
    assert [opt.param_groups[0]["lr"] for opt in (td3.actor_optim, td3.critic_optim)] == [4e-5, 5e-5]
    assert (td3.gamma, td3.tau, td3.alpha) == (0.9, 0.01, 1.5)
    assert (td3.policy_noise, td3.noise_clip) == (0.6, 0.8)  # TD3's noise scales with the action bound


def test_policy_freq_steps_the_actor_on_every_policy_freq_th_global_step(orpo, hopper_data_dir, tmp_path, monkeypatch):
    """--policy-freq reaches TD3+BC's delay: over two epochs of 5 steps, π^p's actor steps on global steps 3, 6 and 9
    (the count runs on across epochs), its critic on every step."""
    asked, update = [], orpo.TD3BC.update
    monkeypatch.setattr(orpo.TD3BC, "update", lambda self, b, actor_step: asked.append(actor_step) or update(self, b,
                        actor_step))  # fmt: skip
    argv = [*TINY, "--steps-per-epoch", "5", "--policy-freq", "3", "--eval-every", "2", "--eval-episodes", "1"]
    argv += ["--env", "hopper-random-v2", "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)]
    assert orpo.main(tyro.cli(orpo.Args, args=argv))["finished"]
    assert asked == [step % 3 == 0 for step in range(1, 11)]
