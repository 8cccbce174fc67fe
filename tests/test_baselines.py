"""Tests of the baselines mopo.py (and its --policy td3bc), oroo.py, mbpo.py and td3bc.py on the Hopper-v4 fixture,
and of every algorithm script's --help. The shared code they copy from orpo.py is tested in test_orpo.py."""

import ast
import dataclasses
import glob
import json
import math
import os

import numpy as np
import pytest
import torch
import tyro
from plumbing import Task
from conftest import ROOT, TINY, load_module, run_file
from test_orpo import PAPER_HYPERPARAMETERS, read_metrics
from test_shared_blocks import MODEL_BASED, blocks

TD3BC_TINY = ["--epochs", "2", "--steps-per-epoch", "20", "--batch-size", "32", "--hidden-dims", "32", "32",
              "--eval-episodes", "2", "--no-cuda"]  # fmt: skip
# name: (script, flags); every run uses seed 7 and 2 epochs, so the resume test can compare against it
MODEL_FREE = ("td3bc", "cql")  # no ensemble, no rollouts, no row 0
RUNS = {"mopo": ("mopo", TINY), "mopo_td3bc": ("mopo", [*TINY, "--policy", "td3bc", "--exp-name", "mopo_td3bc"]),
                 "oroo": ("oroo", TINY), "mbpo": ("mbpo", TINY), "td3bc": ("td3bc", TD3BC_TINY),
        "cql": ("cql", [*TD3BC_TINY, "--num-repeat", "4"]), "combo": ("combo", [*TINY, "--num-repeat", "4"])}  # fmt: skip


@pytest.fixture(scope="module")
def runs(hopper_data_dir, tmp_path_factory):
    """Every baseline run once end to end through its command line; name -> (result, run dir)."""
    root, out = tmp_path_factory.mktemp("baselines"), {}
    for name, (script, flags) in RUNS.items():
        result = run_file(script, "--env", "hopper-random-v2", "--seed", "7", *flags, cwd=str(root / name),
                          data_dir=hopper_data_dir[0])  # fmt: skip
        dirs = glob.glob(str(root / name / "runs" / "*"))
        out[name] = result, dirs[0] if len(dirs) == 1 else None
    return out


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("name", RUNS)
def test_end_to_end_run_writes_a_finite_score(runs, name):
    result, run_dir = runs[name]
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.basename(run_dir).startswith(f"hopper-random-v2__{name}__7__")
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["finished"] and summary["exp_name"] == name and summary["algorithm"] == name.split("_")[0]
    presets = {"td3bc": "none", "cql": "none", "combo": "fallback (run_combo.py's defaults)"}
    assert summary["preset"] == presets.get(name, "hopper-random-v2")  # mopo_td3bc: mopo.py --policy td3bc
    assert np.isfinite(summary["normalized_score"]) and np.isfinite(summary["last10_score"])
    files = {"config.json", "metrics.csv", "checkpoint.pt", "policy.pt"}
    files |= set() if name in MODEL_FREE else {"dynamics.pt"}
    assert files <= set(os.listdir(run_dir)) and not glob.glob(os.path.join(run_dir, "*.tmp"))
    sac = name in ("mopo", "oroo", "mbpo", "cql", "combo")
    assert torch.load(os.path.join(run_dir,
                      "policy.pt"))["kind"] == ("tanh_gaussian_mlp" if sac else "deterministic_mlp")  # fmt: skip

    rows = read_metrics(run_dir)
    assert [r["epoch"] for r in rows] == (["1", "2"] if name in MODEL_FREE else ["0", "1", "2"])  # row 0: the fit
    last = rows[-1]
    keys = ["eval/normalized_score", "eval/last10_score", "losses/critic_loss", "losses/actor_loss", "losses/q",
            "charts/epoch_seconds"]  # fmt: skip
    keys += ["losses/alpha", "losses/entropy"] if sac else ["losses/bc_loss"]
    keys += ["losses/cql_gap", "losses/td_loss"] if name in ("cql", "combo") else []
    if name not in MODEL_FREE:
        keys += ["rollout/u", "rollout/reward", "rollout/length", "rollout/action_distance", "eval/model_return",
                 "eval/model_uncertainty", "charts/lr_actor"]  # fmt: skip
        # SAC's actor LR follows the cosine of the default 1000-epoch horizon, not the run's 2 epochs (a short run is
        # the beginning of the long one); TD3+BC's stays 3e-4
        cosine = [1e-4 * 0.5 * (1 + math.cos(math.pi * e / 1000)) for e in (1, 2)]
        assert [float(r["charts/lr_actor"]) for r in rows[1:]] == pytest.approx(cosine if sac else [3e-4, 3e-4],
                      rel=1e-6)  # fmt: skip
        assert 0 < float(last["rollout/length"]) <= 5  # the hopper-random preset's h = 5
    else:
        assert not any(k.startswith("rollout/") or k.startswith("dynamics/") or "model_" in k for k in last)
    for key in keys:
        assert np.isfinite(float(last[key])), key
    # the relabelled reward moves away from r̂ in the direction of its MDP (u > 0)
    if name.startswith("mopo"):
        assert float(last["rollout/reward_p"]) < float(last["rollout/reward"])
    if name == "oroo":
        assert float(last["rollout/reward_o"]) > float(last["rollout/reward"])

    config = json.load(open(os.path.join(run_dir, "config.json")))  # the presets were applied and saved
    expected = {"mopo": dict(lambda_p=5.9, uncertainty="max_aleatoric", rollout_length=5, normalize_obs=False),
                             "mopo_td3bc": dict(policy="td3bc", lambda_p=5.9, normalize_obs=False),
                             "oroo": dict(lambda_o=0.015, uncertainty="max_aleatoric", rollout_length=5,
                             normalize_obs=False), "mbpo": dict(uncertainty="max_aleatoric", rollout_length=5,
                             normalize_obs=False), "td3bc": dict(normalize_obs=True, hidden_dims=[32, 32],
                             alpha=2.5), "cql": dict(cql_weight=5.0, temperature=1.0, num_repeat=4,
                             normalize_obs=False, deterministic_backup=True, lagrange_threshold=None),
                "combo": dict(cql_weight=0.5, rollout_length=5, real_ratio=0.5, num_repeat=4, paper_literal=False)}[name]  # fmt: skip
    assert {k: config[k] for k in expected} == expected


def test_resume_continues_a_stopped_run_exactly(runs, hopper_data_dir, tmp_path):
    """mopo --policy td3bc: TD3+BC's optimisers, the constant LR schedule and the model buffer resume (the delayed actor
    follows the global step count)."""
    script, flags = RUNS["mopo_td3bc"]
    stopped = run_file(script, "--env", "hopper-random-v2", "--seed", "7", *flags, "--stop-after-epochs", "1",
                       cwd=str(tmp_path), data_dir=hopper_data_dir[0])  # fmt: skip
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "*"))
    resumed = run_file(script, "--resume", run_dir, "--no-cuda", cwd=str(tmp_path), data_dir=hopper_data_dir[0])
    assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stderr[-2000:]
    straight, resumed_rows = read_metrics(runs["mopo_td3bc"][1]), read_metrics(run_dir)
    assert len(resumed_rows) == len(straight) == 3
    for key in straight[2]:
        if "seconds" not in key and "SPS" not in key:
            assert straight[2][key] == resumed_rows[2][key], key  # same seed on CPU: the same numbers, every digit


# ---------------------------------------------------------------- the MDP each policy is trained in
@pytest.mark.parametrize("name,expected", [
        ("mopo", lambda rew, u: rew - 5.9 * u),  # P-MDP, hopper-random's λp
        ("oroo", lambda rew, u: rew + 0.015 * u),  # O-MDP, hopper-random's λo
        ("mbpo", lambda rew, u: rew),  # the model MDP
])  # fmt: skip
def test_policy_batches_use_the_algorithms_reward(files, hopper_data_dir, tmp_path, monkeypatch, name, expected):
    """Run main() in-process and record every batch request: D's rows keep their real reward, the model buffer's rows
    carry the algorithm's reward, computed from the r̂ and u stored with them."""
    module = files[name]
    calls, sample_mix = [], module.sample_mix

    def recording_sample_mix(sources):
        calls.append(sources)
        return sample_mix(sources)

    monkeypatch.setattr(module, "sample_mix", recording_sample_mix)
    args = tyro.cli(module.Args, args=[*TINY, "--epochs", "1", "--steps-per-epoch", "3", "--env", "hopper-random-v2",
                    "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)])  # fmt: skip
    module.main(args)
    assert len(calls) == 3
    (real, n_real, real_key), (model, n_model, model_key) = calls[-1]
    assert (real_key, n_real, n_model) == ("rew", 1, 31)  # 5% of 32 from D: int(1.6) = 1
    assert real.size == real.capacity > model.capacity  # D itself, full, and the model buffer
    rew, u = model.data["rew"][: model.size, 0], model.data["u"][: model.size, 0]
    assert model.size >= 64  # one epoch of rollouts from 64 start states
    torch.testing.assert_close(model.data[model_key][: model.size, 0], expected(rew, u))


# ---------------------------------------------------------------- presets
def test_presets_equal_the_papers_table(files):
    """MOPO's are the paper's "MOPO (Our implementation)" column; OROO takes λo from ORPO's column, and OROO and MBPO
    the uncertainty type and h from MOPO's."""
    table = PAPER_HYPERPARAMETERS
    assert len(table) == 12
    for name, (lambda_p, uncertainty, h_p, lambda_o, _) in table.items():
        assert files["mopo"].PRESETS[name] == (lambda_p, uncertainty, h_p), name
        assert files["oroo"].PRESETS[name] == (lambda_o, uncertainty, h_p), name
        assert files["mbpo"].PRESETS[name] == (uncertainty, h_p), name
    for task in ("halfcheetah-jump", "halfcheetah-jump-hard"):  # MOPO's λp = 1, h = 5; ORPO's λo = 0.1
        assert files["mopo"].PRESETS[task] == (1.0, "max_aleatoric", 5)
        assert files["oroo"].PRESETS[task] == (0.1, "max_aleatoric", 5)
        assert files["mbpo"].PRESETS[task] == ("max_aleatoric", 5)


def test_presets_fill_only_unset_fields(files):
    mopo = files["mopo"]
    # local/NAME made with D4RL's recipe takes NAME-v2's preset; a user's value wins
    task = Task("local/walker2d-medium", "Walker2d-v4", "walker2d")
    args, source = mopo.apply_presets(mopo.Args(lambda_p=1.5), task)
    assert source == "walker2d-medium-v2"
    assert (args.lambda_p, args.uncertainty, args.rollout_length, args.normalize_obs) == (1.5, "ensemble_std", 1, False)
    # observations: never normalised for SAC (OfflineRL-Kit); for TD3+BC as ORPO's output policy (halfcheetah only)
    cheetah = Task("halfcheetah-medium-v2", "HalfCheetah-v4", "halfcheetah")
    assert mopo.apply_presets(mopo.Args(), cheetah)[0].normalize_obs is False
    assert mopo.apply_presets(mopo.Args(policy="td3bc"), cheetah)[0].normalize_obs is True
    assert mopo.apply_presets(mopo.Args(policy="td3bc"), task)[0].normalize_obs is False
    unknown = Task("my-data", "Hopper-v4", "hopper")
    oroo, mbpo = files["oroo"], files["mbpo"]
    assert mopo.apply_presets(mopo.Args(), unknown)[1] == "fallback"
    assert oroo.apply_presets(oroo.Args(rollout_length=3), task)[0].rollout_length == 3
    assert oroo.apply_presets(oroo.Args(), unknown)[0].lambda_o == oroo.FALLBACK_PRESET[0]
    assert mbpo.apply_presets(mbpo.Args(), cheetah)[0].uncertainty == "ensemble_var"


# ---------------------------------------------------------------- Args, --help
def field_docstrings(path, name="Args"):
    """{field: docstring} of the `Args` dataclass, read from the source (the string right below each field)."""
    (cls,) = [n for n in ast.parse(open(path).read()).body if isinstance(n, ast.ClassDef) and n.name == name]
    docs = {}
    for stmt, after in zip(cls.body, cls.body[1:] + [None]):
        if isinstance(stmt, ast.AnnAssign):
            is_doc = (isinstance(after, ast.Expr) and isinstance(after.value,
                      ast.Constant) and isinstance(after.value.value, str))  # fmt: skip
            docs[stmt.target.id] = " ".join(after.value.value.split()) if is_doc else None
    return docs


SCRIPTS = sorted(
    os.path.basename(p)[: -len(".py")]
    for p in glob.glob(os.path.join(ROOT, "algorithms", "*.py"))
    if not p.endswith("plumbing.py")  # the module the algorithm files import, not a script
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_lists_every_field_with_its_docstring(script, capsys, monkeypatch):
    """tyro's --help, in this process: every field of Args and RunArgs has a docstring, shown with its flag; every
    boolean (Optional[bool] too) is a --x / --no-x pair."""
    import plumbing

    monkeypatch.setenv("COLUMNS", "200")
    module = load_module(f"algorithms/{script}.py", f"help_{script}")
    with pytest.raises(SystemExit) as done:
        plumbing.parse_args(module.Args, ["--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert done.value.code == 0
    docs = {**field_docstrings(os.path.join(ROOT, "algorithms", f"{script}.py")),
            **field_docstrings(os.path.join(ROOT, "algorithms", "plumbing.py"), "RunArgs")}  # fmt: skip
    assert sorted(docs) == sorted(f.name for f in dataclasses.fields(module.Args)), script
    for field, doc in docs.items():
        flag = "--" + field.replace("_", "-")
        assert doc and " ".join(doc.split()) in text, f"{script}.py {flag} lacks its docstring"
        kind = {**module.RunArgs.__annotations__, **module.Args.__annotations__}[field]
        if kind in ("bool", "Optional[bool]"):
            assert f"{flag}, --no-{flag[2:]}" in text, flag


# deliberate differences from orpo.py's Args (default and docstring); every other shared field is identical
# (real_ratio: one policy's batch share of D in the baselines, π^p's with a preset default in orpo.py)
DIFFERENT = {"mopo": {"rollout_length", "real_ratio", "exploration_noise", "hidden_dims", "normalize_obs",
             "paper_literal"}, "oroo": {"rollout_length", "real_ratio", "hidden_dims", "normalize_obs"},
             "mbpo": {"uncertainty", "rollout_length", "real_ratio", "hidden_dims", "normalize_obs"},
             "td3bc": {"steps_per_epoch", "hidden_dims", "normalize_obs"},
             "cql": {"steps_per_epoch", "hidden_dims", "normalize_obs", "actor_lr", "critic_lr", "paper_literal"},
             "combo": {"rollout_length", "real_ratio", "hidden_dims", "normalize_obs", "paper_literal"}}  # fmt: skip


@pytest.mark.parametrize("name", DIFFERENT)
def test_args_match_orpo_in_order_and_docstrings(files, orpo, name):
    ours, theirs = (field_docstrings(os.path.join(ROOT, "algorithms", f"{name}.py")),
                    field_docstrings(os.path.join(ROOT, "algorithms", "orpo.py")))  # fmt: skip
    shared = [f for f in ours if f in theirs]
    assert shared == [f for f in theirs if f in ours], "shared fields are in another order than in orpo.py"
    defaults = {f.name: f.default for f in dataclasses.fields(files[name].Args)}
    orpo_defaults = {f.name: f.default for f in dataclasses.fields(orpo.Args)}
    for field in shared:
        if field in DIFFERENT[name]:
            assert (ours[field], defaults[field]) != (theirs[field], orpo_defaults[field]), f"{field} is the same"
        elif field != "exp_name":
            assert (ours[field], defaults[field]) == (theirs[field], orpo_defaults[field]), field


def test_td3bc_references_nothing_from_the_model_based_blocks():
    """td3bc.py omits the model block (the ensemble, u, termination, rollouts): no name it defines may appear in it."""
    reference = blocks(os.path.join(ROOT, "algorithms", "orpo.py"))
    defined = {node.name for block in MODEL_BASED for node in ast.parse(reference[block]).body if isinstance(node,
               (ast.FunctionDef, ast.ClassDef))}  # fmt: skip
    assert {"EnsembleDynamics", "fit_dynamics", "termination_fn", "rollout"} <= defined
    tree = ast.parse(open(os.path.join(ROOT, "algorithms", "td3bc.py")).read())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value,
                                       str) and n.value.isidentifier()}  # fmt: skip
    assert not used & defined  # and it carries no model block: test_shared_blocks' tutorial-order test


def test_combo_batches_take_half_from_D_first_and_half_from_the_model(files, hopper_data_dir, tmp_path, monkeypatch):
    """combo.py's update gets half its rows from D (first, as `n_real` says) and half from the model buffer."""
    module, calls = files["combo"], []
    update = module.CQL.update

    def recording_update(self, b, n_real=None):
        calls.append(({k: v.clone() for k, v in b.items()}, n_real))
        return update(self, b, n_real)

    monkeypatch.setattr(module.CQL, "update", recording_update)
    args = tyro.cli(module.Args, args=[*TINY, "--epochs", "1", "--steps-per-epoch", "3", "--env", "hopper-random-v2",
                    "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path), "--num-repeat", "2"])  # fmt: skip
    module.main(args)
    batch, n_real = calls[-1]
    assert len(calls) == 3 and n_real == 16 and len(batch["obs"]) == 32  # real ratio 0.5 of 32
    data = torch.as_tensor(hopper_data_dir[1]["next_observations"])
    in_d = (batch["next_obs"][:, None, :] == data[None]).all(-1).any(-1)
    assert in_d[:16].all() and not in_d[16:].any()  # the model rows' next states are the model's, not D's
    assert batch["done"].dim() == batch["rew"].dim() == 1


def test_combo_presets_are_the_kits_suggested_table_and_the_authors_defaults(files):
    """OfflineRL-Kit's run_combo.py docstring ("suggested hypers": h, w per dataset, copied here by hand); everything
    else, the jump tasks included, takes the authors' run_combo.py defaults h 5, w 0.5; a user's value wins."""
    combo = files["combo"]
    kit = {"halfcheetah-medium-v2": (5, 0.5), "hopper-medium-v2": (5, 5.0), "walker2d-medium-v2": (1, 5.0),
           "halfcheetah-medium-replay-v2": (5, 0.5), "hopper-medium-replay-v2": (5, 0.5),
           "walker2d-medium-replay-v2": (1, 0.5), "halfcheetah-medium-expert-v2": (5, 5.0),
           "hopper-medium-expert-v2": (5, 5.0), "walker2d-medium-expert-v2": (1, 5.0)}  # fmt: skip
    assert combo.PRESETS == kit and combo.FALLBACK_PRESET == (5, 0.5)
    for name, domain in (("halfcheetah-jump-hard", "halfcheetah"), ("hopper-random-v2", "hopper")):
        args, source = combo.apply_presets(combo.Args(), Task(name, "HalfCheetah-v4", domain))
        assert (args.rollout_length, args.cql_weight, source.split()[0]) == (5, 0.5, "fallback")
    args, source = combo.apply_presets(combo.Args(cql_weight=1.0), Task("local/walker2d-medium", "Walker2d-v4",
                                       "walker2d"))  # fmt: skip
    assert (args.rollout_length, args.cql_weight, source) == (1, 1.0, "walker2d-medium-v2")
