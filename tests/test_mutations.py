"""Tests that fail on one-line breaks of ORPO : each checks what a policy, the loader, the
ensemble or the termination function must compute against an independent source (the HDF5 file, the Gymnasium
env, hand-written formulas), never against the code under test.

Mutations each test is known to catch (checked by applying them to a copy of the tree):
  π^p's batch labelled with r^o, π^o's with r^p, π^p's three shares reversed  -> test_each_policy_trains_on_its_mdps_rewards...
  u from the elites only (step's mean/std cut to the elites), relabel's r^o sign swapped, ŝ' and r̂ sampled from
    every member instead of the elites                                        -> test_uncertainty_uses_all_members_not_only_the_elites
  walker2d's z < 2 bound dropped                                              -> test_termination_agrees_with_the_envs_own_health_check
  rewards shifted one row by the loader                                       -> test_loader_returns_the_files_rows_*
"""

from types import SimpleNamespace

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
import tyro
from conftest import TINY
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)


# ---------------------------------------------------------------- the loader, row by row against the file
def test_loader_returns_the_files_rows_hand_made(orpo, tmp_path):
    """Every column's values encode the row index, so any shift, reorder or wrong column shows."""
    n = 8
    rows = np.arange(n, dtype=np.float32)
    terminals, timeouts = np.zeros(n, bool), np.zeros(n, bool)
    terminals[2], timeouts[[4, 7]] = True, True
    path = str(tmp_path / "rows.hdf5")
    with h5py.File(path, "w") as f:
        f["observations"] = np.stack([rows, 10 + rows], 1)
        f["actions"] = (100 + rows)[:, None]
        f["rewards"] = (1000 + rows)[:, None]  # [N, 1], as some D4RL files store it
        f["next_observations"] = np.stack([rows + 0.5, 10.5 + rows], 1)
        f["terminals"] = terminals.astype(np.float32)  # 0/1 floats, as some files store them
        f["timeouts"] = timeouts
    data = plumbing.load_transitions(path)
    keep = [0, 1, 2, 3, 5, 6]  # the timeout steps 4 and 7 are dropped
    kept = np.array(keep, dtype=np.float32)
    np.testing.assert_array_equal(data["obs"], np.stack([kept, 10 + kept], 1))
    np.testing.assert_array_equal(data["act"], (100 + kept)[:, None])
    np.testing.assert_array_equal(data["rew"], (1000 + kept)[:, None])
    np.testing.assert_array_equal(data["next_obs"], np.stack([kept + 0.5, 10.5 + kept], 1))
    np.testing.assert_array_equal(data["done"], np.array([[0], [0], [1], [0], [0], [0]], np.float32))


def test_loader_returns_the_files_rows_real_hopper_data(orpo, hopper_data_dir):
    """The loader's output against the HDF5 file itself (read here with h5py), on real Hopper transitions."""
    data_dir, _ = hopper_data_dir
    task, path = plumbing.resolve_task("hopper-random-v2", None, None, data_dir)
    assert (task.gym_id, task.domain, task.ref_min, task.ref_max) == ("Hopper-v4", "hopper", -20.272305, 3234.3)
    with h5py.File(path, "r") as f:
        raw = {k: f[k][()] for k in f}
    keep = ~raw["timeouts"].astype(bool)
    # the file exercises both episode ends, and timeouts in its middle (so dropping them shifts later rows)
    assert raw["terminals"].sum() > 0 and 0 < np.flatnonzero(~keep)[0] < len(keep) - 1
    data = plumbing.load_transitions(path)
    expected = {"obs": raw["observations"][keep], "act": raw["actions"][keep], "rew": raw["rewards"][keep][:, None],
                "next_obs": raw["next_observations"][keep], "done": raw["terminals"][keep].astype(np.float32)[:,
                None]}  # fmt: skip
    assert set(data) == set(expected)
    for key, value in expected.items():
        assert data[key].dtype == np.float32, key
        np.testing.assert_array_equal(data[key], value, err_msg=key)
    assert len(np.unique(raw["rewards"][keep])) > 0.9 * keep.sum()  # rewards differ row to row: a shift cannot hide


# ---------------------------------------------------------------- termination against the env's own health check
def health_states(gym_id: str, zs, angles):
    """Observations of states placed with set_state, and the env's own verdict on each (`is_healthy`)."""
    env = gym.make(gym_id).unwrapped
    env.reset(seed=0)
    obs, healthy = [], []
    for z in zs:
        for angle in angles:
            qpos, qvel = env.init_qpos.copy(), env.init_qvel.copy()
            qpos[1], qpos[2] = z, angle
            env.set_state(qpos, qvel)
            obs.append(env._get_obs())
            healthy.append(env.is_healthy)
    return torch.as_tensor(np.array(obs), dtype=torch.float32), np.array(healthy)


@pytest.mark.parametrize("gym_id,domain", [("Walker2d-v4", "walker2d"), ("Hopper-v4", "hopper")])
def test_termination_agrees_with_the_envs_own_health_check(orpo, gym_id, domain):
    """Heights and angles on both sides of every bound, z > 2 included (random data never reaches it)."""
    zs = [0.3, 0.69, 0.71, 0.79, 0.81, 1.25, 1.99, 2.01, 2.5, 4.0]
    angles = [-1.2, -0.99, -0.21, -0.19, 0.0, 0.19, 0.21, 0.99, 1.2]
    obs, healthy = health_states(gym_id, zs, angles)
    assert healthy.any() and not healthy.all()
    if domain == "walker2d":  # the env itself ends an episode above z = 2
        assert (not healthy[obs[:, 0].numpy() > 2.0].any() and healthy[(obs[:, 0].numpy() > 1.5) & (obs[:,
                0].numpy() < 2)].any())  # fmt: skip
    done = orpo.termination_fn(domain)(obs).numpy()
    np.testing.assert_array_equal(done, ~healthy)


# ---------------------------------------------------------------- u from all N members, samples from the elites
LAMBDA_O, LAMBDA_P = 0.5, 2.0  # λo, λp: here and in the in-process run below


def constant_ensemble(orpo, means, logvars, elites):
    """An ensemble whose member i predicts the constant (Δs, r) = means[i] with log-variance logvars[i] (inputs ignored)."""
    n, out = means.shape
    model = orpo.EnsembleDynamics(out - 1, 1, (4,), n, len(elites))
    with torch.no_grad():
        for layer in model.layers:
            layer.weight.zero_()
            layer.bias.zero_()
        model.layers[-1].bias.copy_(torch.cat([means, logvars], 1).view_as(model.layers[-1].bias))
        model.elites.copy_(torch.tensor(elites))
    return model


def test_uncertainty_uses_all_members_not_only_the_elites(orpo):
    """The elites (1 and 3) agree exactly; the other three members differ and are the noisiest. u must see them all."""
    means = torch.tensor([[3.0, 0.0, 1.0], [1.0, 2.0, 5.0], [-2.0, 4.0, 0.0], [1.0, 2.0, 5.0], [0.0, -3.0, 2.0]])
    logvars = torch.tensor([[-1.0] * 3, [-6.0] * 3, [0.0] * 3, [-6.0] * 3, [-2.0] * 3])
    elites = [1, 3]
    model = constant_ensemble(orpo, means, logvars, elites)
    obs, act = torch.tensor([[0.5, -1.0], [2.0, 3.0]]), torch.zeros(2, 1)
    mean, logvar = model(torch.cat([obs, act], 1))
    torch.testing.assert_close(mean, means[:, None].expand(5, 2, 3))  # the construction does what it says
    std = (0.5 * logvar[:, 0]).exp()  # [N, 3], the same for every row; the soft bounds keep these log-variances

    # by hand, over all five members: population variance of the next-state means (s' = obs + Δs: obs cancels)
    spread = means.var(0, unbiased=False)  # [3]: (Δs_0, Δs_1, r)
    expected = {"max_aleatoric": std.norm(dim=-1).max(), "ensemble_var": spread[:2].mean(),
                                          "ensemble_std": spread[:2].mean().sqrt(),
                                          "mixture_var": (spread + std.pow(2).mean(0)).sum(),
                                          "mixture_std": (spread + std.pow(2).mean(0)).sum().sqrt()}  # fmt: skip
    assert set(expected) == set(orpo.UNCERTAINTIES)
    torch.manual_seed(0)
    next_obs, rew, mean_step, std_step = model.step(obs, act)
    # step hands the method every member's Gaussian over (s', r), not the elites' alone
    torch.testing.assert_close(mean_step, torch.cat([obs, torch.zeros(2, 1)], 1) + means[:, None])
    torch.testing.assert_close(std_step, std[:, None].expand(5, 2, 3))
    for kind, value in expected.items():
        args = SimpleNamespace(uncertainty=kind, lambda_o=LAMBDA_O, lambda_p=LAMBDA_P)
        columns = orpo.relabel(rew, mean_step, std_step, args)
        u = columns["u"]
        torch.testing.assert_close(u, value.expand(2), msg=kind)
        torch.testing.assert_close(columns["rew_o"], rew + LAMBDA_O * value, msg=kind)
        torch.testing.assert_close(columns["rew_p"], rew - LAMBDA_P * value, msg=kind)
        # the elites alone would give a different u: no spread at all, and a smaller σ
        elite_only = orpo.uncertainty(mean[elites], std[elites][:, None].expand(2, 2, 3), kind)
        assert (u > 1.5 * elite_only).all(), kind
    # ŝ' and r̂ are samples of the elites (Δs = (1, 2), r = 5, σ ≈ 0.05), never of the others
    torch.manual_seed(0)
    next_obs, rew, _, _ = model.step(obs.repeat(200, 1), act.repeat(200, 1))
    assert (next_obs - obs.repeat(200, 1) - torch.tensor([1.0, 2.0])).abs().max() < 0.5 and (rew - 5).abs().max() < 0.5


# ---------------------------------------------------------------- each policy's batches, in a tiny in-process run
def row_keys(obs, act, next_obs):
    rows = torch.cat([obs, act, next_obs], 1).to(torch.float32).cpu().numpy()
    return [r.tobytes() for r in rows]


REAL_RATIO, OUTPUT_ROLLOUT_RATIO = 0.1, 0.3


def test_each_policy_trains_on_its_mdps_rewards_and_rows_per_source(orpo, hopper_data_dir, tmp_path, monkeypatch):
    """Run main() for one epoch with every update's batch recorded, and trace each batch row to where it came from:
    the HDF5 file (D), π^o's model rollouts or π^p's model rollouts. Then
      π^o (SAC):     D rows carry the file's reward, π^o's rollout rows r^o = r̂ + λo·u (O-MDP), no π^p rows;
      π^p (TD3+BC):  D rows the file's reward, both rollouts' rows r^p = r̂ − λp·u (P-MDP);
    and the rows per source are the ones the flags ask for (batch 32: D 10 %, π^p's own 30 %, π^o's the rest)."""
    rollouts, updates, pi_o_fn = [], [], []
    original_rollout, original_make = orpo.rollout, orpo.make_rollout_policy
    sac_update, td3bc_update = orpo.SAC.update, orpo.TD3BC.update

    def recording_make(*a, **k):  # "π^o's action function"
        pi_o_fn.append(original_make(*a, **k))
        return pi_o_fn[-1]

    def recording_rollout(dynamics, policy, *a, **k):
        out = original_rollout(dynamics, policy, *a, **k)
        rollouts.append(("pi_o" if policy is pi_o_fn[0] else "pi_p", {key: v.clone() for key, v in out.items()}))
        return out

    def recorder(name, update):
        def recording_update(self, batch, *actor_step):  # TD3BC.update(b, actor_step), SAC.update(b)
            updates.append((name, {k: v.clone() for k, v in batch.items()}))
            return update(self, batch, *actor_step)

        return recording_update

    monkeypatch.setattr(orpo, "make_rollout_policy", recording_make)
    monkeypatch.setattr(orpo, "rollout", recording_rollout)
    monkeypatch.setattr(orpo.SAC, "update", recorder("pi_o", sac_update))
    monkeypatch.setattr(orpo.TD3BC, "update", recorder("pi_p", td3bc_update))
    data_dir = hopper_data_dir[0]
    args = tyro.cli(orpo.Args, args=[*TINY, "--epochs", "1", "--steps-per-epoch", "3", "--eval-episodes", "1",
                    "--env", "hopper-random-v2", "--data-dir", data_dir, "--runs-dir", str(tmp_path), "--lambda-o",
                    str(LAMBDA_O), "--lambda-p", str(LAMBDA_P), "--real-ratio", str(REAL_RATIO),
                    "--output-rollout-ratio", str(OUTPUT_ROLLOUT_RATIO)])  # fmt: skip
    orpo.main(args)

    # where each (s, a, s') row came from, and the reward each MDP gives it
    origin = {}
    _, path = plumbing.resolve_task("hopper-random-v2", None, None, data_dir)
    with h5py.File(path, "r") as f:
        keep = ~f["timeouts"][()].astype(bool)
        file_rows = {k: torch.as_tensor(f[k][()][keep], dtype=torch.float32) for k in ("observations", "actions",
                                        "next_observations", "rewards")}  # fmt: skip
    for key, r in zip(
        row_keys(file_rows["observations"], file_rows["actions"], file_rows["next_observations"]), file_rows["rewards"]
    ):
        origin[key] = ("D", float(r), float(r))
    assert [name for name, _ in rollouts] == ["pi_o", "pi_p"]
    for name, out in rollouts:
        r_o, r_p = out["rew"] + LAMBDA_O * out["u"], out["rew"] - LAMBDA_P * out["u"]
        assert (r_o != r_p).all()  # precondition: the two MDPs' rewards differ on every model row (u ≠ 0)
        for key, ro, rp in zip(row_keys(out["obs"], out["act"], out["next_obs"]), r_o.tolist(), r_p.tolist()):
            assert key not in origin
            origin[key] = (name, ro, rp)

    n = 32  # TINY's batch size
    n_d, n_own = int(n * REAL_RATIO), int(n * OUTPUT_ROLLOUT_RATIO)
    want_rows = {
        "pi_o": {"D": int(n * 0.05), "pi_o": n - int(n * 0.05)},  # --real-ratio-o 0.05 (default)
        "pi_p": {"D": n_d, "pi_p": n_own, "pi_o": n - n_d - n_own},
    }
    assert [name for name, _ in updates] == ["pi_o", "pi_p"] * 3
    for name, batch in updates:
        sources = [origin[key] for key in row_keys(batch["obs"], batch["act"], batch["next_obs"])]
        rows = {s: sum(src == s for src, _, _ in sources) for s in ("D", "pi_o", "pi_p")}
        assert rows == {**{"D": 0, "pi_o": 0, "pi_p": 0}, **want_rows[name]}, (name, rows)
        want_rew = [r_o if name == "pi_o" else r_p for _, r_o, r_p in sources]
        torch.testing.assert_close(batch["rew"].flatten(), torch.tensor(want_rew), msg=name)
