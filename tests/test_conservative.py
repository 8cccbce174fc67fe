"""cql.py and combo.py: the conservative critic update against a hand computation written as OfflineRL-Kit's
CQLPolicy.learn computes it (two separate critics, [B·R, 1] values concatenated on dim 1, the log-sum-exp over dim 1),
or CORL's (the paper's) with paper_literal; COMBO's rows."""

import copy

import numpy as np
import pytest
import torch
from conftest import load_module

cql = load_module("algorithms/cql.py", "cql_under_test")
B, R, OBS, ACT = 6, 4, 5, 3


def make(paper_literal=False, lagrange_threshold=None, max_action=1.0, seed=0):
    torch.manual_seed(seed)
    obs = torch.randn(B, OBS)
    batch = {"obs": obs, "act": (torch.rand(B, ACT) * 2 - 1) * max_action, "next_obs": obs + 0.1 * torch.randn(B, OBS),
             "rew": torch.randn(B), "done": (torch.rand(B) < 0.3).float()}  # fmt: skip
    sac = dict(hidden_dims=(16, 16), actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3, gamma=0.9, tau=0.1)
    policy = cql.CQL(cql.ObsNorm.of(obs, False), ACT, max_action, cql_weight=2.0, temperature=0.7, num_repeat=R,
                     deterministic_backup=True, lagrange_threshold=lagrange_threshold, cql_alpha_lr=1e-2,
                     paper_literal=paper_literal, **sac)  # fmt: skip
    policy.log_alpha.data.fill_(0.5)  # α = 1.65: the Kit's CQL uses it unclamped (its SAC would clamp it to 1)
    return policy, batch


def by_hand(p, b, paper_literal, n_real=None, kit_units=False):
    """The critic loss of one update, in OfflineRL-Kit's steps (the random draws in cql.py's order). kit_units: the
    Kit's densities on a box wider than [-1, 1]: log π without the log-determinant of the ×max_action scaling (its
    actforward scales after log_prob) and the uniform density 0.5^|A| whatever the box (its calc_random_values)."""
    obs, act, next_obs = b["obs"], b["act"], b["next_obs"]
    a, log_prob = p.actor(obs)  # actor and α first
    actor_loss = (p.log_alpha.exp().detach() * log_prob - torch.min(*p.critic(obs, a))).mean()
    p.actor_optim.zero_grad()
    actor_loss.backward()
    p.actor_optim.step()
    alpha_loss = -(p.log_alpha * (log_prob.detach() + p.target_entropy)).mean()
    p.alpha_optim.zero_grad()
    alpha_loss.backward()
    p.alpha_optim.step()
    with torch.no_grad():
        next_a, _ = p.actor(next_obs)
        next_q = torch.min(*p.critic_target(next_obs, next_a))  # deterministic backup
        target = b["rew"] + p.gamma * (1 - b["done"]) * next_q
        tmp_obs = obs.unsqueeze(1).repeat(1, R, 1).view(B * R, OBS)
        tmp_next = next_obs.unsqueeze(1).repeat(1, R, 1).view(B * R, OBS)
        pi_a, pi_logp = p.actor(tmp_obs)
        nx_a, nx_logp = p.actor(tmp_next)
        rand_a = (2 * torch.rand_like(pi_a) - 1) * p.actor.max_action
    width = 2.0 if kit_units else 2 * p.actor.max_action
    if kit_units:
        pi_logp, nx_logp = pi_logp + ACT * np.log(p.actor.max_action), nx_logp + ACT * np.log(p.actor.max_action)
    td, conservative = [], []
    for i in range(2):  # critic1, critic2
        q = p.critic(obs, act)[i]
        values = [p.critic(tmp_obs, pi_a)[i] - pi_logp, p.critic(tmp_obs, nx_a)[i] - nx_logp,
                  p.critic(tmp_obs, rand_a)[i] - np.log((1 / width) ** ACT)]  # fmt: skip
        if paper_literal:  # CORL: [B, R] pieces side by side, one log-sum-exp over 3R per state
            cat = torch.cat([v.view(B, R) for v in values], 1)
        else:  # the Kit: [B·R, 1] pieces (its reshape's result is discarded), one log-sum-exp over 3 per row
            cat = torch.cat([v.view(B * R, 1) for v in values], 1)
        up = q[:n_real] if paper_literal and n_real else q
        lse = torch.logsumexp(cat / p.temperature, dim=1).mean() * p.temperature
        td.append(((q - target) ** 2).mean())
        conservative.append(p.cql_weight * (lse - up.mean()))
    if p.threshold is not None:  # the Kit's Lagrange form: α' = clamp(exp), the term α'·(term − τ), α' steps first
        cql_alpha = torch.clamp(p.cql_log_alpha.exp(), 0.0, 1e6)
        conservative = [cql_alpha * (c - p.threshold) for c in conservative]
        cql_alpha_loss = -(conservative[0] + conservative[1]) * 0.5
        p.cql_alpha_optim.zero_grad()
        cql_alpha_loss.backward(retain_graph=True)
        p.cql_alpha_optim.step()
    return sum(td) + sum(conservative)


@pytest.mark.parametrize("paper_literal", [False, True])
@pytest.mark.parametrize("max_action", [1.0, 3.0])
def test_cql_update_equals_the_kits_steps(paper_literal, max_action):
    policy, batch = make(paper_literal, max_action=max_action)
    reference = copy.deepcopy(policy)
    torch.manual_seed(1)
    stats = policy.update(batch)
    torch.manual_seed(1)
    expected = by_hand(reference, batch, paper_literal)
    torch.testing.assert_close(stats["critic_loss"], expected.detach(), rtol=1e-5, atol=1e-5)
    # the critic step that loss drives: both sets of weights move the same way
    reference.critic_optim.zero_grad()
    expected.backward()
    reference.critic_optim.step()
    for mine, theirs in zip(policy.critic.parameters(), reference.critic.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


def test_the_two_estimators_differ():
    """Kit's per-row log-sum-exp and the paper's per-state one give different losses (the flag is not a no-op)."""
    losses = []
    for literal in (False, True):
        policy, batch = make(literal)
        torch.manual_seed(1)
        losses.append(float(policy.update(batch)["critic_loss"]))
    assert abs(losses[0] - losses[1]) > 1e-3


def test_the_conservative_term_lowers_q_off_the_data():
    """A heavy weight and many steps on one batch: Q on the data's actions ends above Q on uniform actions."""
    policy, batch = make()
    policy.cql_weight = 20.0
    for _ in range(300):
        policy.update(batch)
    with torch.no_grad():
        q_data = policy.critic(batch["obs"], batch["act"]).mean()
        q_unif = policy.critic(batch["obs"].repeat(50, 1), torch.rand(50 * B, ACT) * 2 - 1).mean()
    assert q_data > q_unif + 1.0


@pytest.mark.parametrize("threshold,direction", [(-50.0, 1), (50.0, -1)])
def test_lagrange_weight_rises_while_the_gap_exceeds_the_threshold(threshold, direction):
    policy, batch = make(lagrange_threshold=threshold)
    for _ in range(5):
        stats = policy.update(batch)
    assert np.sign(float(policy.cql_log_alpha.detach())) == direction
    assert "cql_alpha" in stats


def test_lagrange_off_leaves_its_weight_alone():
    policy, batch = make()
    policy.update(batch)
    assert float(policy.cql_log_alpha.detach()) == 0.0


@pytest.mark.parametrize("paper_literal", [False, True])
def test_combo_rows_down_at_every_state_up_on_Ds_rows_with_paper_literal(paper_literal):
    """COMBO's batch: the first n_real rows are D's. Q goes down at every row's state (ρ = mix) in both modes and up
    on every row's action (the Kit) or on D's rows only (paper_literal, COMBO's Eq. 2)."""
    policy, batch = make(paper_literal)
    reference, pristine = copy.deepcopy(policy), copy.deepcopy(policy)
    torch.manual_seed(1)
    stats = policy.update(batch, 2)
    torch.manual_seed(1)
    expected = by_hand(reference, batch, paper_literal, n_real=2)
    torch.testing.assert_close(stats["critic_loss"], expected.detach(), rtol=1e-5, atol=1e-5)
    torch.manual_seed(1)
    all_rows = pristine.update(batch)["critic_loss"]  # CQL: every row is D's
    assert (abs(float(all_rows) - float(stats["critic_loss"])) > 1e-4) == paper_literal


def test_the_kits_densities_on_the_jump_box_are_a_constant_apart():
    """On [-3, 3] the Kit's log π and uniform density are both in [-1, 1] units; ours are in the box's. Every sampled
    value moves by |A|·log 3, so the loss moves by w·|A|·log 3 per critic and the critics' gradients are the same."""
    policy, batch = make(max_action=3.0)
    ours, kits = copy.deepcopy(policy), copy.deepcopy(policy)
    torch.manual_seed(1)
    loss_ours = by_hand(ours, batch, False)
    torch.manual_seed(1)
    loss_kit = by_hand(kits, batch, False, kit_units=True)
    shift = 2 * policy.cql_weight * ACT * np.log(3.0)
    torch.testing.assert_close(loss_ours.detach(), loss_kit.detach() + shift, rtol=1e-5, atol=1e-4)
    for p in (ours, kits):
        p.critic_optim.zero_grad()
    loss_ours.backward()
    loss_kit.backward()
    for a, b in zip(ours.critic.parameters(), kits.critic.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("threshold", [-5.0, 5.0])
def test_the_lagrange_form_equals_the_kits(threshold):
    policy, batch = make(lagrange_threshold=threshold)
    policy.cql_log_alpha.data.fill_(0.3)
    reference = copy.deepcopy(policy)
    torch.manual_seed(1)
    stats = policy.update(batch)
    torch.manual_seed(1)
    expected = by_hand(reference, batch, False)
    torch.testing.assert_close(stats["critic_loss"], expected.detach().reshape(()), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(policy.cql_log_alpha.detach(), reference.cql_log_alpha.detach())
    assert float(policy.cql_log_alpha.detach()) != 0.3  # it moved
