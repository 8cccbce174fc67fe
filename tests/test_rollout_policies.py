"""benchmarks/rollout_policies.py: RQ2's rollout policies (uniform random, a CVAE of D's actions, an earlier run's π^o
kept fixed) run orpo.py's main through the lab's launcher, never update π^o, refuse bad flags before any work, resume,
and leave orpo.py's own π^o hook as it was."""

import contextlib
import csv
import io
import json
import os
from unittest import mock

import numpy as np
import pytest
import torch
from conftest import ROOT, TINY, Result

import launch  # noqa: E402  (conftest puts benchmarks/ on sys.path)
import plumbing  # noqa: E402
import rollout_policies as rp  # noqa: E402

SCRIPT = os.path.join(ROOT, "benchmarks", "rollout_policies.py")


@pytest.fixture
def run(hopper_data_dir, tmp_path):
    """run(*flags): `python benchmarks/rollout_policies.py FLAGS` in this process, in tmp_path with the Hopper fixture
    as the data dir: (exit status, stdout, stderr). A traceback fails the test."""

    def go(*argv):
        out, err, code = io.StringIO(), io.StringIO(), 0
        env = {"D4RL_DATASET_DIR": hopper_data_dir[0]}
        with contextlib.chdir(tmp_path), mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out):
            try:
                with contextlib.redirect_stderr(err):
                    launch.launch(rp.orpo, rp.main, rp.Args, [SCRIPT, *map(str, argv)], [SCRIPT])
            except SystemExit as e:
                code = e.code
        assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()[-3000:]
        return Result(code, out.getvalue(), err.getvalue())

    return go


def run_dirs(folder) -> list[str]:
    return sorted(os.path.join(folder, d) for d in os.listdir(folder) if not d.startswith("."))


def rows(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [{k: v for k, v in r.items() if "seconds" not in k and k != "charts/SPS"} for r in csv.DictReader(f)]


@pytest.fixture
def source_run(hopper_data_dir, tmp_path):
    """A finished tiny ORPO run (orpo.py itself), whose trained π^o the `fixed` kind reuses."""
    with mock.patch.dict(os.environ, {"D4RL_DATASET_DIR": hopper_data_dir[0]}):
        plumbing.cli(rp.orpo.main, rp.orpo.Args, ["--env", "hopper-random-v2", *TINY, "--seed", "3", "--runs-dir",
                                                   str(tmp_path / "source")])  # fmt: skip
    (run_dir,) = run_dirs(tmp_path / "source")
    return run_dir


@pytest.mark.parametrize("kind", [["random"], ["cvae", "--cvae-steps", "30"], ["fixed"]])
def test_each_kind_runs_orpo_with_its_rollout_policy_never_updated(kind, run, tmp_path, request):
    hook = rp.orpo.make_rollout_policy
    extra = ["--rollout-policy-path", request.getfixturevalue("source_run")] if kind == ["fixed"] else []
    code, _, err = run("--env", "hopper-random-v2", *TINY, "--rollout-policy", *kind, *extra)
    assert code == 0, err[-2000:]
    (run_dir,) = run_dirs(tmp_path / "runs")
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert np.isfinite(summary["normalized_score"]) and summary["algorithm"] == "rollout_policies"
    assert summary["exp_name"] == f"orpo_{kind[0]}" and summary["dynamics"]["source"] == "fitted"  # the launcher's
    row = rows(run_dir)[-1]
    assert "rollout_policy/critic_loss" not in row and "losses/critic_loss" in row  # π^o fixed, π^p trained
    assert float(row["rollout/reward_p_optimistic"]) < float(row["rollout/reward_optimistic"])  # the P-MDP penalty
    assert rp.orpo.make_rollout_policy is hook  # orpo.py's own π^o is back


def test_a_run_stopped_after_its_first_epoch_resumes_through_the_script_to_the_same_numbers(run, tmp_path):
    flags = ["--env", "hopper-random-v2", *TINY, "--rollout-policy", "random"]
    assert run(*flags, "--runs-dir", "whole")[0] == 0
    code, out, err = run(*flags, "--runs-dir", "cut", "--stop-after-epochs", "1")
    assert code == 0, err[-1500:]
    (cut,) = run_dirs(tmp_path / "cut")
    assert json.load(open(os.path.join(cut, "summary.json")))["status"] == "stopped"
    assert run("--resume", cut)[0] == 0
    assert rows(cut) == rows(run_dirs(tmp_path / "whole")[0])


def test_fixed_loads_the_earlier_runs_pi_o_and_refuses_a_file_that_is_not_an_orpo_checkpoint(source_run):
    norm = rp.orpo.ObsNorm(torch.zeros(11), torch.ones(11))
    sac = rp.orpo.SAC(norm, 3, 1.0, hidden_dims=(32, 32), actor_lr=1e-4, critic_lr=3e-4, alpha_lr=1e-4, gamma=0.99,
                      tau=0.005)  # fmt: skip
    real = rp.orpo.ReplayBuffer(4, {"obs": 11, "act": 3}, "cpu")
    args = rp.Args(rollout_policy="fixed", rollout_policy_path=source_run)
    rp.make_rollout_policy(args, sac, real)
    saved = torch.load(os.path.join(source_run, "checkpoint.pt"), weights_only=True)["rollout_policy"]
    for k, v in sac.state_dict().items():
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(v, saved[k])
    args.rollout_policy_path = os.path.join(source_run, "policy.pt")  # the run's exported policy: not a checkpoint
    with pytest.raises(plumbing.UserError, match=r"policy\.pt is not a usable ORPO checkpoint \(--rollout-policy-path"):
        rp.make_rollout_policy(args, sac, real)


def test_random_takes_uniform_actions_in_the_box_whatever_the_actor():
    torch.manual_seed(0)
    sac = rp.orpo.SAC(rp.orpo.ObsNorm(torch.zeros(2), torch.ones(2)), 3, 2.0, hidden_dims=(8,), actor_lr=1e-4,
                      critic_lr=3e-4, alpha_lr=1e-4, gamma=0.99, tau=0.005)  # fmt: skip
    torch.nn.init.constant_(sac.actor.net[-1].bias, 10.0)  # the actor's samples all sit at the bound
    real = rp.orpo.ReplayBuffer(4, {"obs": 2, "act": 3}, "cpu")
    act = rp.make_rollout_policy(rp.Args(rollout_policy="random"), sac, real)(torch.zeros(20000, 2))
    assert act.shape == (20000, 3) and act.abs().max() <= 2.0
    assert act.mean().abs() < 0.05 and act.std() == pytest.approx(2 / 3**0.5, rel=0.02)  # U(-2, 2): σ = 2/√3


def test_the_cvae_learns_the_datas_actions():
    torch.manual_seed(0)
    obs = torch.rand(2000, 2) * 2 - 1
    act = torch.stack([0.8 * obs[:, 0], -0.5 * obs[:, 1]], 1)  # a deterministic behaviour policy
    real = rp.orpo.ReplayBuffer(2000, {"obs": 2, "act": 2}, "cpu")
    real.add({"obs": obs, "act": act})
    sac = rp.orpo.SAC(rp.orpo.ObsNorm(torch.zeros(2), torch.ones(2)), 2, 1.0, hidden_dims=(64, 64), actor_lr=1e-4,
                      critic_lr=3e-4, alpha_lr=1e-4, gamma=0.99, tau=0.005)  # fmt: skip
    policy = rp.make_rollout_policy(rp.Args(rollout_policy="cvae", cvae_steps=1500, hidden_dims=(64, 64)), sac, real)
    test_obs = torch.rand(500, 2) * 2 - 1
    error = (policy(test_obs) - torch.stack([0.8 * test_obs[:, 0], -0.5 * test_obs[:, 1]], 1)).pow(2).mean()
    assert error < 0.02  # uniform random actions would give ≈ 0.5


@pytest.mark.parametrize("flags, named, why", [
    (["--rollout-policy", "fixed"], "--rollout-policy-path", "go together"),
    (["--rollout-policy-path", "."], "--rollout-policy fixed", "go together"),
    (["--rollout-policy", "fixed", "--rollout-policy-path", "nowhere"], "--rollout-policy-path", "not an existing file"),
    (["--cvae-steps", "5"], "--cvae-steps 5", "only --rollout-policy cvae"),
    (["--sac-critic-lr", "0.1"], "--sac-critic-lr 0.1", "no SAC is trained"),  # orpo.Args' rules hold here too
    (["--rollout-policy", "optimistic"], "--rollout-policy", "optimistic"),  # orpo.py's own kinds run there
])  # fmt: skip
def test_bad_flags_are_refused_before_any_work(flags, named, why, run, tmp_path):
    code, out, err = run("--env", "hopper-random-v2", *TINY, "--epochs", "1", *flags)  # a plant that lets it run: short
    assert code == 2 and named in err and why in err, err[-1500:]
    assert not (tmp_path / "runs").exists()


def test_a_run_whose_kind_orpo_py_no_longer_takes_is_refused_on_resume(source_run, capsys):
    """A run made by orpo.py before RQ2's kinds moved (config.json: rollout_policy cvae) once resumed there silently with
    the SAC actor as π^o: refused in one line, naming the flag."""
    config = json.load(open(os.path.join(source_run, "config.json")))
    json.dump(config | {"rollout_policy": "cvae"}, open(os.path.join(source_run, "config.json"), "w"))
    with pytest.raises(SystemExit) as e:
        plumbing.cli(rp.orpo.main, rp.orpo.Args, ["--resume", source_run, "--epochs", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "`rollout-policy`" in err and "`cvae`" in err and "not one orpo takes" in err, err[
        -800:
    ]


def test_a_fixed_pi_o_of_other_sizes_is_refused_before_the_fit(run, tmp_path, source_run):
    hooks = rp.orpo.load_data, rp.orpo.make_rollout_policy
    code, out, err = run("--env", "hopper-random-v2", *TINY, "--hidden-dims", "16", "16", "--rollout-policy", "fixed",
                         "--rollout-policy-path", source_run, "--dynamics-max-epochs", "100000")  # fmt: skip
    last = err.strip().splitlines()[-1]
    assert code == 1 and "does not fit this run" in last and "best_member" not in err + out, err[-1500:]
    assert not (tmp_path / "runs").exists() and (rp.orpo.load_data, rp.orpo.make_rollout_policy) == hooks  # put back


def test_a_fixed_pi_o_from_a_td3bc_run_is_refused_before_the_fit(run, tmp_path, hopper_data_dir):
    with mock.patch.dict(os.environ, {"D4RL_DATASET_DIR": hopper_data_dir[0]}):
        plumbing.cli(launch.toolbox.algorithm("td3bc").main, launch.toolbox.algorithm("td3bc").Args,
                     ["--env", "hopper-random-v2", "--epochs", "1", "--steps-per-epoch", "5", "--eval-episodes", "1",
                      "--hidden-dims", "8", "--no-cuda", "--runs-dir", str(tmp_path / "td3bc")])  # fmt: skip
    (td3bc_run,) = run_dirs(tmp_path / "td3bc")
    code, out, err = run("--env", "hopper-random-v2", *TINY, "--rollout-policy", "fixed", "--rollout-policy-path",
                         td3bc_run, "--dynamics-max-epochs", "100000")  # fmt: skip
    last = err.strip().splitlines()[-1]
    assert code == 1 and "not a usable ORPO checkpoint" in last and "best_member" not in err + out
    assert not (tmp_path / "runs").exists()
