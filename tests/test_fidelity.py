"""The presets run what produced the paper's numbers (the authors' code), the literal reading is one flag away,
and no non-finite model row reaches a buffer."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import tyro
from conftest import TINY, sac_settings
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

TABLE = {  # a few rows of the paper's table, by kind: (dataset, the table's uncertainty type)
    "halfcheetah-random-v2": "ensemble_std",
    "walker2d-random-v2": "ensemble_var",
    "hopper-medium-v2": "max_aleatoric",
    "halfcheetah-medium-replay-v2": "ensemble_var",
    "walker2d-medium-replay-v2": "ensemble_std",
    "halfcheetah-jump": "max_aleatoric",
}


def preset(module, name, **kw):
    domain = name.split("-")[0]
    task = plumbing.Task(name, "X-v4", domain)
    return module.apply_presets(module.Args(env=name, **kw), task)[0]


def output_batch_rows(orpo, args) -> dict[str, int]:
    n = orpo.mix_counts(args.batch_size, (args.real_ratio, args.output_rollout_ratio,
                        1 - args.real_ratio - args.output_rollout_ratio))  # fmt: skip
    return dict(zip(("D", "pi_p", "pi_o"), n))


@pytest.mark.parametrize("name,official,literal", [
        (
            "hopper-medium-v2",
            (12, 115, 129),
            (12, 128, 116),
        ),  # official commands: --real-ratio-final 0.05 --final-policy-rollout-ratio-final 0.45
        ("walker2d-medium-replay-v2", (128, 76, 52), (128, 51, 77)),  # 0.5 : 0.3 : 0.2
        ("halfcheetah-jump", (12, 12, 232), (12, 230, 14)),  # 0.05 : 0.05 : 0.9; 95 % of the batch from π^o
])  # fmt: skip
def test_output_policy_batch_rows_per_preset(orpo, name, official, literal):
    """The presets' shares give these rows of π^p's 256-row batch (D, its own D^p_πp, π^o's D^p_πo) by main's rule
    for the counts; that main samples the sources in this order is checked by tests/test_mutations.py."""
    assert tuple(output_batch_rows(orpo, preset(orpo, name)).values()) == official
    assert tuple(output_batch_rows(orpo, preset(orpo, name, paper_literal=True)).values()) == literal


LITERAL = {"ensemble_var": "mixture_var", "ensemble_std": "mixture_std"}  # the appendix's formula of a table type


def test_uncertainty_presets_orpo_official_vs_literal(orpo):
    for name, table_type in TABLE.items():
        assert preset(orpo, name).uncertainty == "max_aleatoric", name  # the ORPO runner never passes its flag
        literal = preset(orpo, name, paper_literal=True).uncertainty
        assert literal == LITERAL.get(table_type, table_type), name
        assert preset(orpo, name, uncertainty="ensemble_std").uncertainty == "ensemble_std"  # a flag wins over a preset


def test_uncertainty_presets_mopo_use_kits_formula(files):
    mopo = files["mopo"]
    for name, table_type in TABLE.items():
        assert preset(mopo, name).uncertainty == table_type, name  # the MOPO runner passes the flag to Kit's formula
        literal = preset(mopo, name, paper_literal=True).uncertainty
        assert literal == LITERAL.get(table_type, table_type), name


def test_kits_ensemble_var_ignores_sigma_and_reward_and_uses_all_members(orpo):
    torch.manual_seed(0)
    mean, std = torch.randn(7, 50, 4), torch.rand(7, 50, 4)
    expected = torch.from_numpy(mean[..., :-1].numpy().var(0).mean(1))  # Kit: np.var over members, mean over s' dims
    torch.testing.assert_close(orpo.uncertainty(mean, std, "ensemble_var"), expected)
    torch.testing.assert_close(orpo.uncertainty(mean, 5 * std, "ensemble_var"), expected)  # no σ
    changed = mean.clone()
    changed[..., -1] += torch.randn(7, 50)  # the reward dimension does not count
    torch.testing.assert_close(orpo.uncertainty(changed, std, "ensemble_std"), expected.sqrt())
    mixture = (mean.var(0, unbiased=False) + std.pow(2).mean(0)).sum(-1)
    torch.testing.assert_close(orpo.uncertainty(mean, std, "mixture_var"), mixture)
    # one member: the members' disagreement is 0 (Args.problems refuses it), the mixture keeps their own variance
    assert (orpo.uncertainty(mean[:1], std[:1], "ensemble_var") == 0).all()
    assert (orpo.uncertainty(mean[:1], std[:1] + 0.1, "mixture_var") > 0).all()
    with pytest.raises(ValueError):
        orpo.uncertainty(mean, std, "nope")


def one_epoch_args(orpo, hopper_data_dir, tmp_path, *extra: str):
    """orpo.py's Args for one tiny in-process epoch on the Hopper fixture."""
    argv = [*TINY, "--epochs", "1", "--env", "hopper-random-v2", "--data-dir", hopper_data_dir[0]]
    return tyro.cli(orpo.Args, args=[*argv, "--runs-dir", str(tmp_path), *extra])


# ---------------------------------------------------------------- π^o as the official code ran it
def sac(orpo):
    norm = orpo.ObsNorm(torch.zeros(3), torch.ones(3))
    return orpo.SAC(norm, 2, 1.0, **sac_settings(orpo.Args(hidden_dims=(16, 16))))


def test_untrained_rollout_policy_samples_the_initial_actor(orpo):
    torch.manual_seed(0)
    policy = sac(orpo)
    act = orpo.make_rollout_policy(orpo.Args(rollout_policy="untrained"), policy, None)
    obs = torch.zeros(256, 3)
    a, b = act(obs), act(obs)
    assert not torch.equal(a, b) and a.std(0).min() > 0.1  # a stochastic sample, not the deterministic mean
    assert a.abs().max() <= 1.0


@pytest.mark.parametrize("rollout_policy,trained", [("untrained", False), ("optimistic", True)])
def test_only_the_optimistic_rollout_policy_is_updated(
    orpo, hopper_data_dir, tmp_path, monkeypatch, rollout_policy, trained
):
    """A 1-epoch in-process run: with `untrained`, π^o's SAC gets no update and its weights stay at their init."""
    created, updates = [], []
    original_init, original_update = orpo.SAC.__init__, orpo.SAC.update

    def recording_init(self, *a, **k):
        original_init(self, *a, **k)
        created.append((self, [p.detach().clone() for p in self.actor.parameters()]))

    def recording_update(self, batch):
        updates.append(self)
        return original_update(self, batch)

    monkeypatch.setattr(orpo.SAC, "__init__", recording_init)
    monkeypatch.setattr(orpo.SAC, "update", recording_update)
    args = one_epoch_args(orpo, hopper_data_dir, tmp_path, "--steps-per-epoch", "3", "--rollout-policy", rollout_policy)
    orpo.main(args)
    pi_o, init = created[-1]  # π^p is TD3+BC: π^o is the last SAC made (the first: main's throwaway, sizes checked)
    assert len(updates) == (3 if trained else 0)
    same = all(torch.equal(p, q) for p, q in zip(pi_o.actor.parameters(), init))
    assert same != trained


# ---------------------------------------------------------------- no non-finite row enters a buffer
def orpo_relabel(orpo, kind="max_aleatoric"):
    """ORPO's own columns (u, r^o, r^p), as main passes relabel to rollout."""
    return lambda rew, mean, std: orpo.relabel(rew, mean, std, SimpleNamespace(uncertainty=kind, lambda_o=0.1,
                                               lambda_p=1.0))  # fmt: skip


class PoisonedDynamics:
    """A model whose predictions are NaN for every third row's s' and whose σ is infinite for the next row (so u and
    both relabelled rewards are): a diverged ensemble."""

    def step(self, obs, act):
        next_obs, rew = obs + 0.01 * act.sum(-1, keepdim=True), torch.ones(len(obs))
        mean = torch.cat([next_obs, rew[:, None]], 1).expand(2, -1, -1)  # [N, B, D]: 2 members, s' and r
        std = torch.full_like(mean, 0.5)
        std[:, torch.arange(len(obs)) % 3 == 1] = torch.inf
        next_obs = torch.where((torch.arange(len(obs)) % 3 == 0)[:, None], torch.nan, next_obs)
        return next_obs, rew, mean, std


def test_rollout_drops_and_counts_nonfinite_rows(orpo):
    start = torch.zeros(30, 3)
    out = orpo.rollout(PoisonedDynamics(), lambda obs: torch.ones(len(obs), 2), start, 2,
                       lambda s: torch.zeros(len(s), dtype=torch.bool), orpo_relabel(orpo))  # fmt: skip
    # step 1: 30 rows, 20 bad (10 NaN s', 10 inf u) -> 10 kept; step 2: those 10 rows, 7 bad (rows 0,3,6,9 and 1,4,7)
    assert int(out["nonfinite"]) == 20 + 7
    assert len(out["u"]) == 10 + 3
    for k in ("obs", "act", "rew", "u", "rew_o", "rew_p", "next_obs", "done"):
        assert len(out[k]) == 13 and torch.isfinite(out[k]).all(), k
    assert len(out["first_act"]) == 30  # the action-distance diagnostic still sees every start state


def test_nonfinite_model_rows_never_reach_the_critic(orpo, hopper_data_dir, tmp_path, monkeypatch):
    """End to end: a model that predicts NaN for some rows leaves both policies' weights finite, and the run logs the count."""
    original_step = orpo.EnsembleDynamics.step

    def poisoned_step(self, obs, act):
        next_obs, rew, mean, std = original_step(self, obs, act)
        bad = torch.rand(len(obs)) < 0.2
        return torch.where(bad[:, None], torch.nan, next_obs), torch.where(bad, torch.nan, rew), mean, std

    monkeypatch.setattr(orpo.EnsembleDynamics, "step", poisoned_step)
    args = one_epoch_args(orpo, hopper_data_dir, tmp_path, "--steps-per-epoch", "20", "--eval-episodes", "1")
    summary = orpo.main(args)
    (run_dir,) = tmp_path.iterdir()
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    for part in ("rollout_policy", "output_policy"):
        for k, v in ckpt[part].items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                assert torch.isfinite(v).all(), (part, k)
    import csv

    with open(run_dir / "metrics.csv") as f:
        row = list(csv.DictReader(f))[-1]
    assert float(row["rollout/nonfinite_rows_optimistic"]) > 0 and float(row["rollout/nonfinite_rows_pessimistic"]) > 0
    assert np.isfinite(float(row["losses/critic_loss"])) and np.isfinite(summary["return"])


def test_a_rollout_with_no_finite_row_adds_nothing_and_sampling_it_is_one_line(orpo):
    class AllNaN:
        def step(self, obs, act):
            mean = torch.zeros(2, len(obs), obs.shape[1] + 1)
            return torch.full_like(obs, torch.nan), torch.zeros(len(obs)), mean, torch.ones_like(mean)

    out = orpo.rollout(AllNaN(), lambda obs: torch.zeros(len(obs), 2), torch.zeros(8, 3), 3,
                       lambda s: torch.zeros(len(s), dtype=torch.bool), orpo_relabel(orpo))  # fmt: skip
    assert int(out["nonfinite"]) == 8 and len(out["u"]) == 0
    fields = {"obs": 3, "act": 2, "rew": 1, "u": 1, "rew_o": 1, "rew_p": 1, "next_obs": 3, "done": 1}
    buf = orpo.ReplayBuffer(16, fields, "cpu")
    buf.add(out)
    assert buf.size == 0
    with pytest.raises(orpo.UserError, match="every rollout row so far was NaN or infinite"):
        orpo.sample_mix([(buf, 4, "rew")])
