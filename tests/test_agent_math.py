"""The agents' update math (TD3+BC, ORPO's output policy, and SAC) on tiny networks, against hand-written formulas.

A one-line change to TD3+BC's update used to pass every test except the byte check of the shared blocks (which sees
bytes, not meaning). Here each test builds a tiny agent (obs 3, act 2, one hidden layer of 4) in float64, fixes the
update's random draws (torch.randn_like patched to return chosen tensors), swaps its Adam optimisers for SGD (so a
parameter's change is exactly −lr·gradient), and recomputes the update with plain tensor algebra from the parameters
read before it: the target with its noise and clipping, every loss term and its weight, the gradients (autograd of
the hand-written losses), the delayed and soft target updates. The expected values never call the agents' code.

Each test runs on every file's copy of the classes: TD3BC in orpo.py, mopo.py and td3bc.py; SAC in orpo.py, mopo.py,
oroo.py and mbpo.py; the `agents` block (ObsNorm, TwinCritic, soft_update) in all five.

One-line changes the tests are known to catch (43 planted one at a time in a scratch copy of orpo.py's blocks, the
26 that apply also in td3bc.py's; each failed the tests named, on the planted file's parametrisation):
  TD3+BC target: `(1 - b["done"])` or γ dropped, min -> Q2 or max, the noise clip dropped, σ or c not × max_action,
    next_act's clamp dropped, critic or actor instead of its target, critic loss a mean over both critics
                                                        -> test_td3bc_critic_step_by_hand
  TD3+BC actor: λ's `.detach()` or `.abs()` dropped, Q1 -> min(Q1, Q2) or Q2, the BC term's sign swapped, dropped or
    summed, either target soft-updated with 1 − τ        -> test_td3bc_actor_and_target_step_by_hand
  TD3+BC: the actor or the targets stepped whatever `actor_step` says, or on a counter of the agent's own
                                                        -> test_td3bc_steps_the_actor_exactly_when_asked and the two
                                                           step tests (the delay itself, every policy_freq-th global
                                                           step, is the steps block's: tests/test_device.py)
  SAC: α's clamp dropped, min -> Q1 in the target or the actor loss, critic instead of critic_target, −α·logπ'
    dropped or +, `(1 - b["done"])` dropped, critic loss a mean, the alpha loss's sign, H̄ = +|A|, log π not
    detached in the alpha loss, soft update with 1 − τ  -> test_sac_update_by_hand
  SAC: α's `.detach()` dropped (harmless to the math, as the actor's backward takes only the actor's inputs; caught
    as a logged stat holding a graph)                   -> test_sac_update_by_hand
  SAC actor: the log-det correction dropped or without max_action, log_std's clamp dropped or at −20
                                                        -> test_tanh_gaussian_actor_by_hand (and test_sac_update_...)
  agents: soft_update's `lerp_(s, 1 - tau)`, ObsNorm without + 1e-3, TwinCritic on raw obs or without its ReLU
                                                        -> test_soft_update_..., test_obs_norm_..., test_twin_critic_...
"""

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import sac_settings, td3_settings

OBS_DIM, ACT_DIM, HIDDEN, MAX_ACTION = 3, 2, (4,), 2.0
NORM_MEAN = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
NORM_STD = torch.tensor([2.0, 0.5, 1.5], dtype=torch.float64)
LR = {"actor": 0.05, "critic": 0.1, "alpha": 0.2}  # SGD step sizes swapped in for Adam
# TD3's target noise draws: with σ = 0.2·max_action = 0.4 and c = 0.5·max_action = 1.0, |ε| > 2.5 is clipped
NOISE_EPS = torch.tensor([[3.0, -0.5], [-4.0, 1.0], [0.2, 2.8], [-1.0, -3.5], [0.7, 0.0], [2.0, -2.6]],
                         dtype=torch.float64)  # fmt: skip
SAC_EPS = (  # the SAC update draws ε twice: a' ~ π(s') for the target, then ã ~ π(s) for the actor
    torch.tensor([[0.3, -1.2], [1.5, 0.4], [-0.7, -0.1], [0.0, 2.1], [-1.8, 0.9], [0.6, -0.4]], dtype=torch.float64),
    torch.tensor([[-0.5, 0.8], [1.1, -1.6], [0.2, 0.3], [-2.2, 0.5], [0.9, 1.4], [-0.3, -0.9]], dtype=torch.float64),
)
TOL = {"rtol": 1e-9, "atol": 1e-10}


@pytest.fixture(params=["orpo", "mopo", "td3bc"])
def td3bc_file(request, files):
    return files[request.param]


@pytest.fixture(params=["orpo", "mopo", "oroo", "mbpo"])
def sac_file(request, files):
    return files[request.param]


@pytest.fixture(params=["orpo", "mopo", "oroo", "mbpo", "td3bc"])
def agents_file(request, files):
    return files[request.param]


# ---------------------------------------------------------------- set-up: tiny agents, a batch, fixed draws
def hyper(**overrides) -> SimpleNamespace:
    """The Args fields the agents read, with values that tell the terms apart (τ ≠ 1 − τ, γ < 1, λ's α ≠ 1)."""
    fields = {"hidden_dims": HIDDEN, "actor_lr": 3e-4, "critic_lr": 3e-4, "sac_actor_lr": 1e-4, "sac_critic_lr": 3e-4,
              "sac_alpha_lr": 1e-4, "gamma": 0.9, "tau": 0.3, "alpha": 2.5, "policy_noise": 0.2, "noise_clip": 0.5,
              "target_entropy": None}  # fmt: skip
    return SimpleNamespace(**{**fields, **overrides})


def obs_norm(m):
    return m.ObsNorm(NORM_MEAN.float(), NORM_STD.float())


def jitter(net: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    """Moves a target network away from its online copy (as training does), so the tests see which one is read."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def use_sgd(agent) -> None:
    """Plain SGD instead of Adam: each parameter then moves by exactly −lr·(its gradient)."""
    agent.actor_optim = torch.optim.SGD(agent.actor.parameters(), lr=LR["actor"])
    agent.critic_optim = torch.optim.SGD(agent.critic.parameters(), lr=LR["critic"])
    if hasattr(agent, "alpha_optim"):
        agent.alpha_optim = torch.optim.SGD([agent.log_alpha], lr=LR["alpha"])


def tiny_td3bc(m, **overrides):
    torch.manual_seed(0)
    agent = m.TD3BC(obs_norm(m), ACT_DIM, MAX_ACTION, **td3_settings(hyper(**overrides))).double()
    jitter(agent.critic_target, 6)  # seed 6: Q1' < Q2' on some of the batch's rows, Q1' > Q2' on others
    jitter(agent.actor_target, 2)
    with torch.no_grad():  # the target policy near ±max_action, so next_act's clamp bites on some rows
        agent.actor_target.net[-1].bias += torch.tensor([1.5, -1.5], dtype=torch.float64)
    use_sgd(agent)
    return agent


def tiny_sac(m, log_alpha: float, **overrides):
    torch.manual_seed(0)
    agent = m.SAC(obs_norm(m), ACT_DIM, MAX_ACTION, **sac_settings(hyper(**overrides))).double()
    jitter(agent.critic_target, 6)
    with torch.no_grad():
        agent.log_alpha.fill_(log_alpha)
    use_sgd(agent)
    return agent


def tiny_batch(done=(0, 1, 0, 0, 1, 0), seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = len(done)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {"obs": NORM_MEAN + NORM_STD * randn(n, OBS_DIM), "act": (0.9 * MAX_ACTION * (2 * torch.rand(n, ACT_DIM,
                                                generator=g) - 1)).double(), "rew": randn(n),
                                                "next_obs": NORM_MEAN + NORM_STD * randn(n, OBS_DIM),
                                                "done": torch.tensor(done, dtype=torch.float64)}  # fmt: skip


def fix_draws(monkeypatch, *draws: torch.Tensor) -> list:
    """torch.randn_like returns these tensors in turn (the list empties as they are used; one draw too many fails)."""
    queue = list(draws)

    def randn_like(t, **kwargs):
        assert queue, "the update drew more random tensors than expected"
        eps = queue.pop(0)
        assert eps.shape == t.shape, f"a draw of shape {tuple(t.shape)}, expected {tuple(eps.shape)}"
        return eps.to(t.dtype)

    monkeypatch.setattr(torch, "randn_like", randn_like)
    return queue


def snap(net: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in net.parameters()]


def snapshot(agent, *names: str) -> dict[str, list[torch.Tensor]]:
    return {name: snap(getattr(agent, name)) for name in names}


# ---------------------------------------------------------------- the networks, by hand
def layer_pairs(params):
    return list(zip(params[0::2], params[1::2]))  # (weight, bias) per layer, in parameters() order


def normalised(obs):
    return (obs - NORM_MEAN) / NORM_STD


def mlp_ref(params, x):
    """nn.Linear layers (weight [out, in]) with ReLU between."""
    layers = layer_pairs(params)
    for i, (w, b) in enumerate(layers):
        x = x @ w.T + b
        if i < len(layers) - 1:
            x = x.clamp(min=0)
    return x


def twin_q_ref(params, obs, act):
    """(Q1, Q2): two independent MLPs on [normalised s, a]; the ensemble's weights are [2, in, out], biases [2, 1, out]."""
    x = torch.cat([normalised(obs), act], -1)
    qs = []
    for k in range(2):
        h = x
        layers = layer_pairs(params)
        for i, (w, b) in enumerate(layers):
            h = h @ w[k] + b[k]
            if i < len(layers) - 1:
                h = h.clamp(min=0)
        qs.append(h[:, 0])
    return qs


def deterministic_actor_ref(params, obs):
    return MAX_ACTION * torch.tanh(mlp_ref(params, normalised(obs)))


def tanh_gaussian_ref(params, obs, eps):
    """a = max·tanh(u), u = μ + σ·ε, log_std clamped to [−5, 2]; log π(a|s) = log N(u; μ, σ) − log|da/du| (+1e-6)."""
    out = mlp_ref(params, normalised(obs))
    mu, log_std = out[:, :ACT_DIM], out[:, ACT_DIM:].clamp(-5.0, 2.0)
    u = mu + log_std.exp() * eps
    log_prob = torch.distributions.Normal(mu, log_std.exp()).log_prob(u).sum(-1)
    log_prob = log_prob - torch.log(MAX_ACTION * (1 - torch.tanh(u) ** 2) + 1e-6).sum(-1)
    return MAX_ACTION * torch.tanh(u), log_prob


def sgd_step(params, loss_fn, lr):
    """(loss, params − lr·∂loss/∂params) for a hand-written loss of the parameters."""
    leaves = [p.clone().requires_grad_() for p in params]
    loss = loss_fn(leaves)
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), [p - lr * g for p, g in zip(params, grads)]


def lerp(target, source, tau):
    return [(1 - tau) * t + tau * s for t, s in zip(target, source)]


def assert_params(net: torch.nn.Module, expected, what: str) -> None:
    for i, (p, e) in enumerate(zip(net.parameters(), expected, strict=True)):
        torch.testing.assert_close(p.detach(), e, **TOL, msg=lambda m, i=i: f"{what}, tensor {i}: {m}")


def assert_stat(stats, key: str, expected) -> None:
    torch.testing.assert_close(stats[key], torch.as_tensor(expected, dtype=torch.float64), **TOL,
                               msg=lambda m: f"{key}: {m}")  # fmt: skip


def min_of_both(q1, q2):
    """min(Q1, Q2), after checking that the rows need it: each member is the smaller one somewhere."""
    assert (q1 < q2).any() and (q2 < q1).any(), "the batch does not tell min(Q1, Q2) from Q1 or Q2"
    return torch.minimum(q1, q2)


def assert_detached_scalars(stats) -> None:
    """Logged stats hold no autograd graph (a graph kept per step would leak memory)."""
    for k, v in stats.items():
        assert v.numel() == 1 and not v.requires_grad, f"stat {k}: shape {tuple(v.shape)}, grad {v.requires_grad}"


# ---------------------------------------------------------------- the agents block
def test_obs_norm_standardises_with_the_datas_mean_and_std(agents_file):
    """ObsNorm.of: (s − mean(D)) / (std(D) + 1e-3), torch's unbiased std; the identity without normalisation."""
    obs = torch.tensor([[1.0, 2.0, -3.0], [4.0, 0.0, 1.0], [-2.0, 5.0, 0.5], [0.0, 1.0, 1.0]], dtype=torch.float64)
    n = len(obs)
    mean = obs.sum(0) / n
    std = (((obs - mean) ** 2).sum(0) / (n - 1)).sqrt() + 1e-3
    torch.testing.assert_close(agents_file.ObsNorm.of(obs, True)(obs), (obs - mean) / std, **TOL)
    torch.testing.assert_close(agents_file.ObsNorm.of(obs, False)(obs), obs, **TOL)


def test_twin_critic_is_two_mlps_on_the_normalised_state_and_action(agents_file):
    """TwinCritic(s, a) = [Q1, Q2], two independently initialised MLPs on [(s − mean)/std, a] (the action raw)."""
    torch.manual_seed(0)
    critic = agents_file.TwinCritic(obs_norm(agents_file), OBS_DIM, ACT_DIM, HIDDEN).double()
    b = tiny_batch()
    q = critic(b["obs"], b["act"])
    q1, q2 = twin_q_ref(snap(critic), b["obs"], b["act"])
    assert q.shape == (2, len(b["obs"]))
    torch.testing.assert_close(q, torch.stack([q1, q2]), **TOL)
    assert (q1 - q2).abs().min() > 1e-3  # the two members differ, so min(Q1, Q2) is not Q1


def test_soft_update_moves_each_target_parameter_tau_of_the_way(agents_file):
    """soft_update(target, source, τ): target ← (1 − τ)·target + τ·source; the source is left alone."""
    torch.manual_seed(0)
    source = agents_file.TwinCritic(obs_norm(agents_file), OBS_DIM, ACT_DIM, HIDDEN).double()
    target = agents_file.TwinCritic(obs_norm(agents_file), OBS_DIM, ACT_DIM, HIDDEN).double()
    s0, t0 = snap(source), snap(target)
    agents_file.soft_update(target, source, 0.3)
    assert_params(target, lerp(t0, s0, 0.3), "target")
    assert_params(source, s0, "source")


# ---------------------------------------------------------------- TD3+BC
def td3bc_expected(before, b, eps, args, update_actor: bool) -> dict:
    """TD3+BC's update (Fujimoto & Gu 2021) recomputed from the parameters before it.

    y = r + γ(1 − done)·min(Q1', Q2')(s', clip(π'(s') + clip(σ·ε, −c, c), −max, max)), σ and c × max_action;
    critic loss Σ_k mean (Q_k(s, a) − y)²; then, on a delayed step, the actor loss −λ·mean Q1(s, π(s)) + mean (π(s) − a)²
    with λ = α / mean|Q1(s, π(s))| a constant and Q1 the critic after its step, and both targets soft-updated with τ.
    """
    sigma, clip = args.policy_noise * MAX_ACTION, args.noise_clip * MAX_ACTION
    next_act = deterministic_actor_ref(before["actor_target"], b["next_obs"]) + (sigma * eps).clamp(-clip, clip)
    next_act = next_act.clamp(-MAX_ACTION, MAX_ACTION)
    target = b["rew"] + args.gamma * (1 - b["done"]) * min_of_both(*twin_q_ref(before["critic_target"], b["next_obs"],
                                      next_act))  # fmt: skip

    def critic_loss(params):
        return sum(((q - target) ** 2).mean() for q in twin_q_ref(params, b["obs"], b["act"]))

    out = {"q": torch.stack(twin_q_ref(before["critic"], b["obs"], b["act"])).mean()}
    out["critic_loss"], out["critic"] = sgd_step(before["critic"], critic_loss, LR["critic"])
    if not update_actor:
        return out

    def actor_loss(params):
        pi = deterministic_actor_ref(params, b["obs"])
        q1 = twin_q_ref(out["critic"], b["obs"], pi)[0]
        lmbda = args.alpha / q1.abs().mean().detach()
        return -lmbda * q1.mean() + ((pi - b["act"]) ** 2).mean()

    out["actor_loss"], out["actor"] = sgd_step(before["actor"], actor_loss, LR["actor"])
    out["bc_loss"] = ((deterministic_actor_ref(before["actor"], b["obs"]) - b["act"]) ** 2).mean()
    out["critic_target"] = lerp(before["critic_target"], out["critic"], args.tau)
    out["actor_target"] = lerp(before["actor_target"], out["actor"], args.tau)
    return out


TD3BC_NETS = ("actor", "actor_target", "critic", "critic_target")


def test_td3bc_critic_step_by_hand(td3bc_file, monkeypatch):
    """A step without the actor (actor_step False, off TD3's delayed beat): the critic loss and its gradient from the
    clipped-noise, min-of-targets, terminal-aware target; the actor and both targets untouched; only critic_loss and q
    reported."""
    args = hyper()
    agent, b = tiny_td3bc(td3bc_file), tiny_batch()
    before = snapshot(agent, *TD3BC_NETS)
    draws = fix_draws(monkeypatch, NOISE_EPS)
    stats = agent.update(b, False)
    assert draws == [], "TD3+BC draws its target noise once per update"

    # the fixed draws exercise both clips: noise beyond ±c on some entries, π'(s') + noise beyond ±max_action on some
    noise = 0.2 * MAX_ACTION * NOISE_EPS
    assert (noise.abs() > 0.5 * MAX_ACTION).any() and (noise.abs() < 0.5 * MAX_ACTION).any()
    raw = deterministic_actor_ref(before["actor_target"], b["next_obs"]) + noise.clamp(-1.0, 1.0)
    assert (raw.abs() > MAX_ACTION).any() and (raw.abs() < MAX_ACTION).any()

    expected = td3bc_expected(before, b, NOISE_EPS, args, update_actor=False)
    assert set(stats) == {"critic_loss", "q"}
    assert_detached_scalars(stats)
    assert_stat(stats, "critic_loss", expected["critic_loss"])
    assert_stat(stats, "q", expected["q"])
    assert_params(agent.critic, expected["critic"], "critic after its step")
    for name in ("actor", "actor_target", "critic_target"):
        assert_params(getattr(agent, name), before[name], f"{name} (updated without actor_step)")


def test_td3bc_actor_and_target_step_by_hand(td3bc_file, monkeypatch):
    """A step with the actor (actor_step True, TD3's delayed beat): critic step, then the actor's −λ·Q1 + BC loss (λ
    detached) and its gradient, then soft updates of both targets from the new critic and actor, with τ."""
    args = hyper()
    agent, b = tiny_td3bc(td3bc_file), tiny_batch()
    fix_draws(monkeypatch, NOISE_EPS)
    agent.update(tiny_batch(seed=2), False)  # a critic step first, as the delay has it
    before = snapshot(agent, *TD3BC_NETS)
    draws = fix_draws(monkeypatch, NOISE_EPS.flip(0))
    stats = agent.update(b, True)
    assert draws == []

    expected = td3bc_expected(before, b, NOISE_EPS.flip(0), args, update_actor=True)
    assert set(stats) == {"critic_loss", "q", "actor_loss", "bc_loss"}
    assert_detached_scalars(stats)
    for key in ("critic_loss", "q", "actor_loss", "bc_loss"):
        assert_stat(stats, key, expected[key])
    for name in TD3BC_NETS:
        assert_params(getattr(agent, name), expected[name], name)


def test_td3bc_steps_the_actor_exactly_when_asked(td3bc_file):
    """update(b, actor_step): the critic moves on every call; the actor, both targets and the actor stats exactly on
    the calls with actor_step True, in any order (the agent keeps no step counter: the caller's global step number
    decides, plumbing's steps block)."""
    agent = tiny_td3bc(td3bc_file)
    asked = [False, True, True, False, False, True, False, False]
    critic_moves, actor_moves, target_moves, reports = [], [], [], []
    for call, actor_step in enumerate(asked):
        before = snapshot(agent, *TD3BC_NETS)
        stats = agent.update(tiny_batch(seed=call + 1), actor_step)
        changed = {n: any(not torch.equal(p, q) for p, q in zip(snap(getattr(agent, n)), before[n])) for n in before}
        critic_moves.append(changed["critic"])
        actor_moves.append(changed["actor"])
        target_moves.append(changed["actor_target"] and changed["critic_target"])
        reports.append("actor_loss" in stats and "bc_loss" in stats)
        assert changed["actor_target"] == changed["critic_target"] == actor_step, (call, changed)
    assert all(critic_moves)
    assert actor_moves == target_moves == reports == asked


# ---------------------------------------------------------------- SAC
def test_tanh_gaussian_actor_by_hand(sac_file, monkeypatch):
    """a = max·tanh(μ + σ·ε) with log_std clamped to [−5, 2], and log π(a|s) with the tanh change-of-variables
    correction log(max·(1 − tanh²u) + 1e-6); deterministic: max·tanh(μ), no draw."""
    torch.manual_seed(0)
    actor = sac_file.TanhGaussianActor(obs_norm(sac_file), OBS_DIM, ACT_DIM, HIDDEN, MAX_ACTION).double()
    with torch.no_grad():  # log_std spans both clamp bounds and the range between them
        actor.net[-1].weight[ACT_DIM:] *= 15.0
        actor.net[-1].bias[ACT_DIM:] = torch.tensor([-1.0, -4.0], dtype=torch.float64)
    b, eps = tiny_batch(), SAC_EPS[0]
    params = snap(actor)
    raw_log_std = mlp_ref(params, normalised(b["obs"]))[:, ACT_DIM:]
    assert (raw_log_std > 2).any() and (raw_log_std < -5).any() and ((raw_log_std > -5) & (raw_log_std < 2)).any()

    draws = fix_draws(monkeypatch, eps)
    action, log_prob = actor(b["obs"])
    assert draws == []
    expected_action, expected_log_prob = tanh_gaussian_ref(params, b["obs"], eps)
    torch.testing.assert_close(action, expected_action, **TOL)
    torch.testing.assert_close(log_prob, expected_log_prob, **TOL)

    action, _ = actor(b["obs"], deterministic=True)  # the queue is empty: a draw here would fail
    torch.testing.assert_close(action, MAX_ACTION * torch.tanh(mlp_ref(params, normalised(b["obs"]))[:, :ACT_DIM]))


@pytest.mark.parametrize("log_alpha, target_entropy", [(math.log(0.2), None), (math.log(3.0), -0.5)],
                         ids=["alpha-0.2-default-entropy", "alpha-clamped-to-1"])  # fmt: skip
def test_sac_update_by_hand(sac_file, monkeypatch, log_alpha, target_entropy):
    """One SAC update recomputed from the parameters before it (OfflineRL-Kit's order):
    α = min(exp(log_alpha), 1), a constant; y = r + γ(1 − done)·(min(Q1', Q2')(s', a') − α·log π(a'|s')), a' ~ π(s');
    critic loss Σ_k mean (Q_k(s, a) − y)²; actor loss mean(α·log π(ã|s) − min(Q1, Q2)(s, ã)) on the stepped critic;
    alpha loss −mean(log_alpha·(log π(ã|s) + H̄)), H̄ = −|A| by default; the critic target soft-updated with τ."""
    args = hyper(target_entropy=target_entropy)
    agent, b = tiny_sac(sac_file, log_alpha, target_entropy=target_entropy), tiny_batch()
    before = snapshot(agent, "actor", "critic", "critic_target")
    draws = fix_draws(monkeypatch, *SAC_EPS)
    stats = agent.update(b)
    assert draws == [], "SAC draws twice per update: a' for the target, ã for the actor"

    alpha = min(math.exp(log_alpha), 1.0)
    entropy_target = -ACT_DIM if target_entropy is None else target_entropy
    next_act, next_log_prob = tanh_gaussian_ref(before["actor"], b["next_obs"], SAC_EPS[0])
    next_q = min_of_both(*twin_q_ref(before["critic_target"], b["next_obs"], next_act)) - alpha * next_log_prob
    target = b["rew"] + args.gamma * (1 - b["done"]) * next_q

    def critic_loss(params):
        return sum(((q - target) ** 2).mean() for q in twin_q_ref(params, b["obs"], b["act"]))

    loss, critic = sgd_step(before["critic"], critic_loss, LR["critic"])
    assert_stat(stats, "critic_loss", loss)
    assert_stat(stats, "q", torch.stack(twin_q_ref(before["critic"], b["obs"], b["act"])).mean())
    assert_params(agent.critic, critic, "critic after its step")

    def actor_loss(params):
        act, log_prob = tanh_gaussian_ref(params, b["obs"], SAC_EPS[1])
        return (alpha * log_prob - min_of_both(*twin_q_ref(critic, b["obs"], act))).mean()

    loss, actor = sgd_step(before["actor"], actor_loss, LR["actor"])
    assert_stat(stats, "actor_loss", loss)
    assert_params(agent.actor, actor, "actor after its step")

    _, log_prob = tanh_gaussian_ref(before["actor"], b["obs"], SAC_EPS[1])
    assert_stat(stats, "entropy", -log_prob.mean())
    assert_stat(stats, "alpha", alpha)
    assert_stat(stats, "alpha_loss", -(log_alpha * (log_prob + entropy_target)).mean())
    # ∂(alpha loss)/∂log_alpha = −mean(log π + H̄): a too-random policy (log π < −H̄) lowers α
    expected_log_alpha = log_alpha + LR["alpha"] * (log_prob + entropy_target).mean()
    torch.testing.assert_close(agent.log_alpha.detach()[0], expected_log_alpha, **TOL)
    assert_params(agent.critic_target, lerp(before["critic_target"], critic, args.tau), "critic target (every step)")
    assert set(stats) == {"critic_loss", "actor_loss", "alpha", "alpha_loss", "q", "entropy"}
    assert_detached_scalars(stats)
