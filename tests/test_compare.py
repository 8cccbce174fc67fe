"""benchmarks/compare.py: our rows at tiny sizes, the shared ensemble, resuming, the report's numbers."""

import csv
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

from conftest import ROOT, load_module, run_script, write_random_dataset

LAUNCHER, MOPO = (os.path.join(ROOT, *p) for p in (("benchmarks", "launch.py"), ("algorithms", "mopo.py")))


MIRROR = os.environ.get("ORPO_PEERS_MIRROR")  # the peers' git snapshots (tests/test_peers.py); unset: those tests skip
SOURCES = {
    peer: os.path.join(MIRROR or "$ORPO_PEERS_MIRROR", name, "repo")
    for peer, name in (("kit-mopo", "yihaosun1124+OfflineRL-Kit"), ("official-orpo", "George-Chia+ORPO"))
}

TINY_FLAGS = (
    "--algo-flags=--hidden-dims 32 32 --dynamics-hidden-dims 32 32 --num-ensemble 3 --num-elites 2 --batch-size 32"
)


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", os.path.join(ROOT, "benchmarks", "compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """One tiny comparison of our three kinds of row (orpo fits, mopo loads its ensemble, td3bc has none), 2 seeds."""
    root = tmp_path_factory.mktemp("compare")
    os.makedirs(root / "data" / "local")
    attrs = {"behavior_mean_return": 19.5, "behavior_normalized_score": 1.2}
    write_random_dataset(str(root / "data" / "local" / "hopper-random.hdf5"), steps=1500, attrs=attrs)
    common = ["--env", "local/hopper-random", "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs")]
    common += [
        "--results",
        str(root / "results"),
        "--out",
        str(root / "report"),
    ]
    common += ["--epochs", "3", "--steps-per-epoch", "10", "--rollout-batch-size", "50", "--eval-episodes", "1"]
    common += ["--dynamics-max-epochs", "2", "--settings", "ours"]  # ours: no peer source needed
    common += ["--dynamics-cache", str(root / "cache")]
    common += ["--rows", "orpo", "mopo", "td3bc", "--seeds", "1", "2", "--jobs", "2", TINY_FLAGS]
    first = run_script("benchmarks/compare.py", *common, timeout=600)
    return root, common, first


def tensors(obj, prefix=""):
    """Every tensor of a saved object, by path, as bytes (for exact comparison)."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj.cpu().numpy().tobytes()}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    return {k: v for key, value in items for k, v in tensors(value, f"{prefix}/{key}").items()}


def results_of(root, row, seed, dataset="local_hopper-random"):
    d = root / "results" / dataset / row / f"seed{seed}"
    with open(d / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return json.loads((d / "config.json").read_text()), rows, json.loads((d / "summary.json").read_text())


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_every_row_runs_with_the_same_cuts_and_the_model_rows_share_one_ensemble_per_seed(comparison):
    root, _, first = comparison
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for seed in (1, 2):
        configs = {row: results_of(root, row, seed)[0] for row in ("orpo", "mopo", "td3bc")}
        for row, c in configs.items():
            assert (c["seed"], c["epochs"], c["steps_per_epoch"], c["eval_episodes"]) == (seed, 3, 10, 1), row
        assert configs["orpo"]["rollout_batch_size"] == configs["mopo"]["rollout_batch_size"] == 50
        assert configs["orpo"]["dynamics_max_epochs"] == 2  # the one cap compare.py gives every row
        # one ensemble per seed, fitted by whichever model-based row came first, kept in compare's cache
        # (toolbox.share_ensemble) and loaded from there by the other
        dirs = {
            r: next((root / "runs" / "local_hopper-random" / r / f"seed{seed}").iterdir()) for r in ("orpo", "mopo")
        }
        sources = sorted(configs[r]["_dynamics"]["source"] for r in dirs)
        assert sources == ["fitted", "loaded"], sources
        loaded = next(configs[r]["_dynamics"]["path"] for r in dirs if configs[r]["_dynamics"]["source"] == "loaded")
        assert os.path.dirname(loaded) == str(root / "cache")
        ensemble = [torch.load(d / "dynamics.pt", weights_only=False)["model"] for d in dirs.values()]
        assert tensors(ensemble[0]) == tensors(ensemble[1])
        fits = [results_of(root, r, seed)[1][0] for r in dirs]  # both log the fit (epoch 0) row, the same numbers
        assert fits[0]["epoch"] == fits[1]["epoch"] == "0"
        assert fits[0]["dynamics/holdout_mse"] == fits[1]["dynamics/holdout_mse"]
        assert results_of(root, "orpo", seed)[2]["dynamics"]["source"] in sources
    behaviour = json.loads((root / "results" / "local_hopper-random" / "dataset.json").read_text())
    assert behaviour["behavior_normalized_score"] == pytest.approx(1.2) and behaviour["transitions"] == 1500


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_the_report_holds_the_runs_own_numbers(comparison):
    """last-10 per seed and its mean, recomputed from the committed metrics.csv files, are the table's."""
    root, _, first = comparison
    md = (root / "report.md").read_text()
    assert (root / "report.png").stat().st_size > 10_000
    for row, label in (("orpo", "ORPO, π^o trained (ours)"), ("mopo", "MOPO (ours)"), ("td3bc", "TD3+BC (ours)")):
        per_seed = []
        for seed in (1, 2):
            _, rows, summary = results_of(root, row, seed)
            scores = [float(r["eval/normalized_score"]) for r in rows if r["eval/normalized_score"]]
            assert len(scores) == 3
            per_seed.append(np.mean(scores[-10:]))
            assert summary["last10_score"] == pytest.approx(per_seed[-1], abs=1e-9)
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {label} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == "2" and cells[2] == "3", line
        assert cells[3] == f"{np.mean(per_seed):.1f}", line
        assert cells[4] == f"[{min(per_seed):.1f}, {max(per_seed):.1f}]", line  # the range over the 2 seeds
        half = 12.706 * np.std(per_seed, ddof=1) / np.sqrt(2)  # t(0.975, 1)
        assert cells[5] == f"[{np.mean(per_seed) - half:.1f}, {np.mean(per_seed) + half:.1f}]", line
        assert cells[6] == f"1: {per_seed[0]:.1f}, 2: {per_seed[1]:.1f}", line
    assert "behaviour policy's mean return 19.5 (normalised 1.2)" in md
    assert "ORPO, π^o trained (ours) − MOPO (ours), last-10, paired by seed" in md


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_a_second_call_runs_nothing_and_the_report_redraws_from_results_alone(comparison, tmp_path):
    root, common, _ = comparison
    again = run_script("benchmarks/compare.py", *common, timeout=300)
    assert again.returncode == 0 and "6 finished, 0 to run" in again.stdout, again.stdout[-2000:] + again.stderr
    out = tmp_path / "redrawn"
    only = run_script(
        "benchmarks/compare.py",
        "--report-only",
        "--results",
        str(root / "results"),
        "--out",
        str(out),
        "--runs-dir",
        str(tmp_path / "nothing-here"),
    )
    assert only.returncode == 0, only.stderr
    assert out.with_suffix(".md").read_text() == (root / "report.md").read_text().replace("report.png", "redrawn.png")


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_bad_input_is_one_line(tmp_path):
    no_kind, cheetah = tmp_path / "hopper.hdf5", tmp_path / "halfcheetah-medium.hdf5"
    no_kind.touch()  # only the names are read before these errors
    cheetah.touch()
    os.makedirs(tmp_path / "local")
    (tmp_path / "local" / "hopper-medium.hdf5").touch()
    os.makedirs(tmp_path / "results" / "local_hopper-medium")  # results made with --settings ours
    (tmp_path / "results" / "local_hopper-medium" / "dataset.json").write_text(
        json.dumps({"settings": "ours", "settings_task": "hopper-medium-v2"})
    )
    other = ["--env", "local/hopper-medium", "--data-dir", str(tmp_path), "--results", str(tmp_path / "results")]
    for argv, needle in (
        (["--rows", "sac"], "unknown row 'sac'"),
        (["--env", "local/hopper-x", "--data-dir", str(tmp_path)], "no dataset file"),
        (["--report-only", "--results", str(tmp_path)], "no finished run"),
        (["--epochs", "0"], "--epochs 0: must lie in [1, inf)"),
        (["--delta", "0"], "--delta 0.0: must lie in (0, inf)"),
        (["--algo-flags=--lambda-p 1"], "--lambda-p, a pair setting"),
        (["--env", str(no_kind), "--settings", "ours"], "pass --task hopper-medium-v2"),
        (["--env", str(no_kind), "--task", "walker2d-medium"], "not a hopper dataset"),
        # the Kit's ensemble has no ensemble_var u, which mopo.py's halfcheetah-medium preset takes
        (["--env", str(cheetah), "--settings", "ours", "--rows", "mopo", "kit_mopo"], "use --settings theirs"),
        (other + ["--rows", "td3bc"], "holds runs made with --settings ours --task hopper-medium-v2"),
        (["--rows", "td3bc", "official_orpo", "--peer-ensemble", "shared"], "add one to --rows"),
        (["--rows", "official_orpo_units"], "runs on --env halfcheetah-jump or halfcheetah-jump-hard only"),
        (["--env", "halfcheetah-jump", "--rows", "official_combo"], "run_combo.py's branch for halfcheetah-jump, L75"),
        (["--rows", "orpo", "kit_mopo", "--peer-ensemble", "shared", "--dynamics-cache", ""], "keep a cache"),
    ):
        r = run_script("benchmarks/compare.py", *argv, "--runs-dir", str(tmp_path / "runs"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, (argv, r.stderr)


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_peers_settings_flags_bad_input_is_one_line(tmp_path):
    """peers.py's --uncertainty-mode and --peer-flags (what compare.py gives a peer): one line, exit 2."""
    path = str(tmp_path / "hopper-medium.hdf5")
    write_random_dataset(path, steps=200, seed=2)
    base = ["--dataset-path", path, "--eval-env", "Hopper-v4", "--run-dir", str(tmp_path / "run")]
    cases = [
        (["--peer", "kit-mopo", "--uncertainty-mode", "ensemble_var"], "kit-mopo's ensemble has"),
        (["--peer", "kit-mopo", "--peer-flags=--penalty-coef '1"], "--peer-flags"),
    ]
    if os.path.isdir(SOURCES["kit-mopo"]):  # the run script's own parser and settings
        kit = ["--peer", "kit-mopo", "--source", SOURCES["kit-mopo"]]
        cases += [
            (kit + ["--peer-flags=--nope 1"], "rejected the command"),
            (
                kit + ["--task", "hopper-random", "--peer-flags=--penalty-coef 1"],
                "give --rollout-length in --peer-flags",
            ),
        ]
    for argv, needle in cases:
        r = run_script("benchmarks/peers.py", *argv, *base, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], (argv, r.stderr)


def test_peer_flags_override_the_peers_own_settings(tmp_path):
    """Where the peer has settings for the task (the Kit: λ 5.0 on hopper-medium), --peer-flags win."""
    if not os.path.isdir(SOURCES["kit-mopo"]):
        pytest.skip(f"needs the OfflineRL-Kit snapshot at {SOURCES['kit-mopo']}: set ORPO_PEERS_MIRROR")
    peers = load_module("benchmarks/peers.py", "peers_for_compare")
    args = peers.parse_args(
        ["--peer", "kit-mopo", "--dataset-path", "x", "--run-dir", "y", "--peer-flags=--penalty-coef 1.5"]
    )
    root = peers.extract("kit-mopo", SOURCES["kit-mopo"], args.commit)["root"]
    command = peers.peer_command("kit-mopo", root, "hopper-medium-v2", args, "cpu")
    parsed = peers.script_args(root, peers.PEERS["kit-mopo"]["script"], command)
    assert (parsed.penalty_coef, parsed.rollout_length, parsed.task) == (1.5, 5, "hopper-medium-v2")


def test_peers_snapshots_come_from_the_mirror_as_in_the_tests(monkeypatch, tmp_path):
    monkeypatch.setenv("ORPO_PEERS_MIRROR", str(tmp_path))
    args = load_compare().Args()
    assert args.kit_source == str(tmp_path / "yihaosun1124+OfflineRL-Kit" / "repo")
    assert args.orpo_source == str(tmp_path / "George-Chia+ORPO" / "repo")


def flag_values(cmd, names):
    """{flag: value} of a command line, for the flags named."""
    return {f: cmd[cmd.index(f) + 1] for f in names if f in cmd}


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_both_sides_of_a_pair_get_the_same_settings_on_any_file(tmp_path):
    """--settings ours on a HalfCheetah random-policy file given by its path: our rows and the peers' get mopo.py's /
    orpo.py's presets for halfcheetah-random-v2 (the paper's λp 6.64 and ensemble_std for MOPO), as flags on both
    sides, each in its own script's names (no peer is run: their commands only)."""
    compare = load_compare()
    path = str(tmp_path / "halfcheetah_random-v2.hdf5")
    rows = ("mopo", "kit_mopo", "orpo", "orpo_untrained", "official_orpo")
    args = compare.Args(env=(path,), settings="ours", rows=rows, runs_dir=str(tmp_path / "runs"))
    plan = compare.pair_settings(args, path)
    assert plan[0] == "halfcheetah-random-v2"
    cmd = {row: compare.command(args, compare.Task(path, row, 4), plan) for row in rows}
    assert cmd["mopo"][1:5] == [LAUNCHER, MOPO, "--dataset-path", path]  # through the lab's launcher, by its path
    assert compare.slug(path) == "halfcheetah_random-v2"
    mopo = {"--lambda-p": "6.64", "--uncertainty": "ensemble_std", "--rollout-length": "5"}
    assert flag_values(cmd["mopo"], mopo) == mopo
    orpo = {"--lambda-p": "6.64", "--lambda-o": "0.015", "--uncertainty": "max_aleatoric", "--rollout-length": "5"}
    orpo |= {
        "--rollout-length-o": "5",
        "--real-ratio": "0.05",
        "--output-rollout-ratio": "0.45",
        "--real-ratio-o": "0.05",
    }
    assert flag_values(cmd["orpo"], orpo) == flag_values(cmd["orpo_untrained"], orpo) == orpo
    peers = load_module("benchmarks/peers.py", "peers_for_compare")
    for row, want, u in (
        ("kit_mopo", {"--penalty-coef": "6.64", "--rollout-length": "5"}, "ensemble_std"),
        (
            "official_orpo",
            {"--penalty-coef": "6.64", "--bonus-coef": "0.015", "--rollout-length": "5"}
            | {"--rollout-length-rollout-policy": "5", "--real-ratio-final": "0.05"}
            | {"--final-policy-rollout-ratio-final": "0.45", "--real-ratio-rollout": "0.05"},
            "aleatoric",  # = our max_aleatoric
        ),
    ):
        parsed = peers.parse_args(cmd[row][2:])  # peers.py's own parser takes the command
        assert parsed.task == "halfcheetah-random-v2" and parsed.uncertainty_mode == u
        assert flag_values(parsed.peer_flags, want) == want and len(parsed.peer_flags) == 2 * len(want), row


def test_algo_flags_keep_only_what_a_script_takes():
    compare = load_compare()
    tokens = ["--hidden-dims", "32", "32", "--num-ensemble", "3", "--batch-size=16"]
    assert compare.own_flags(tokens, {"--hidden-dims", "--batch-size"}) == [
        "--hidden-dims",
        "32",
        "32",
        "--batch-size=16",
    ]


def test_order_row_starts_every_seed_of_a_row_before_the_next_row():
    compare = load_compare()
    args = compare.Args(rows=("mopo", "orpo"), seeds=(2, 3))
    assert [t.key for t in compare.tasks_of(args)] == [
        "local_hopper-medium/mopo/seed2",
        "local_hopper-medium/orpo/seed2",
        "local_hopper-medium/mopo/seed3",
        "local_hopper-medium/orpo/seed3",
    ]
    args.order = "row"
    assert [t.key for t in compare.tasks_of(args)] == [
        "local_hopper-medium/mopo/seed2",
        "local_hopper-medium/mopo/seed3",
        "local_hopper-medium/orpo/seed2",
        "local_hopper-medium/orpo/seed3",
    ]


# the MOPO pair's settings as each side's config.json records them (hopper-medium)
MOPO_CONFIGS = {
    "mopo": {"lambda_p": 5.0, "uncertainty": "max_aleatoric", "rollout_length": 5},
    "kit_mopo": {"peer_settings": {"penalty_coef": 5.0, "rollout_length": 5}},  # u: the ensemble's (summary.json)
}


def fake_results(root, rows, extra=None, configs=MOPO_CONFIGS):
    """A results folder of finished runs: rows = {row: [per-seed score curves]}; extra = {row: {column: [per-seed
    curves]}}; configs = {row: config.json}."""
    for row, curves in rows.items():
        for seed, curve in enumerate(curves, 1):
            d = root / "local_hopper-medium" / row / f"seed{seed}"
            os.makedirs(d)
            (d / "config.json").write_text(json.dumps(configs.get(row, {})))
            (d / "summary.json").write_text(json.dumps({"status": "finished", "device_name": "test CPU", "epochs": 20}))
            cols = {"eval/normalized_score": curve, **{k: v[seed - 1] for k, v in (extra or {}).get(row, {}).items()}}
            with open(d / "metrics.csv", "w") as f:
                f.write(",".join(["epoch", *cols]) + "\n")
                f.writelines(",".join([str(e), *(str(c[e - 1]) for c in cols.values())]) + "\n" for e in range(1, 21))


def pair_line(tmp_path, base, theirs, configs=MOPO_CONFIGS):
    fake_results(tmp_path / "results", {"mopo": base, "kit_mopo": theirs}, configs=configs)
    compare = load_compare()
    args = compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "report"), report_only=True)
    md = compare.report(args)
    return next(ln for ln in md.splitlines() if ln.startswith("- MOPO (ours) vs MOPO (OfflineRL-Kit)")), md


@pytest.mark.parametrize(
    "gaps, verdict",
    [
        ([0.05, 0.05, 0.05], "agree"),  # a HalfCheetah pair seen once (2.1 vs 2.0): no finding
        ([2.0, 2.0, 2.0], "agree"),  # a real difference, but inside ±δ
        ([15.0, 15.0, 15.0], "differ"),
        ([15.0, 15.0], "undecided"),  # 2 seeds: no verdict
        ([3.0, 4.0, 5.0], "undecided"),  # apart from 0, but the mean (4) is within δ and the interval reaches past it
        ([-8.0, 0.0, 8.0], "undecided"),  # wide: neither inside ±δ nor apart from 0
    ],
)
def test_a_pair_agrees_inside_the_margin_and_differs_beyond_it(tmp_path, gaps, verdict):
    """The ours-vs-theirs verdict, an equivalence test on the per-seed last-10 gap against δ = 5 points: the seeds'
    curves spread by ~2 points, and theirs lie `gaps` above ours with a tiny per-epoch spread."""
    rng = np.random.default_rng(0)
    base = [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) for _ in gaps]
    theirs = [c + g + rng.normal(0, 0.01, 20) for c, g in zip(base, gaps)]
    line, _ = pair_line(tmp_path, base, theirs)
    assert f"**{verdict}**" in line, line
    want = np.mean([c[-10:].mean() for c in theirs])
    assert f"vs {want:.1f};" in line, (line, want)
    d = np.mean([b[-10:].mean() - t[-10:].mean() for b, t in zip(base, theirs)])
    assert f"ours − theirs {d:+.1f} [" in line and f"{len(gaps)} seeds, δ = 5)" in line, line
    assert ("fewer than 3 common seeds" in line) == (len(gaps) < 3), line  # why a 2-seed pair has no verdict


def test_a_pair_with_more_seeds_on_one_side_says_over_how_many_seeds_each_number_is(tmp_path):
    """Ours has a third seed theirs lacks: the two row means are over 3 and 2 seeds, the paired difference over the 2
    common ones, so a reader cannot take the gap for the difference of the two means shown."""
    rng = np.random.default_rng(0)
    base = [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) for _ in range(3)]
    base[2] = base[2] + 40.0  # the unpaired seed moves ours' mean, not the paired gap
    theirs = [c + 15.0 + rng.normal(0, 0.01, 20) for c in base[:2]]
    line, _ = pair_line(tmp_path, base, theirs)
    ours_mean = np.mean([c[-10:].mean() for c in base])
    assert f"last-10 {ours_mean:.1f} vs " in line and "the means of 3 and 2 seeds;" in line, line
    d = np.mean([b[-10:].mean() - t[-10:].mean() for b, t in zip(base[:2], theirs)])
    assert f"ours − theirs {d:+.1f} [" in line and "2 common seeds, δ = 5)" in line, line


def test_a_pair_run_with_other_settings_gets_no_verdict(tmp_path):
    """0.05 points apart would agree; but the Kit's runs had another λ, so the pair is not like with like."""
    rng = np.random.default_rng(0)
    base = [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) for _ in range(3)]
    configs = {**MOPO_CONFIGS, "kit_mopo": {**MOPO_CONFIGS["kit_mopo"], "peer_settings": {"penalty_coef": 0.5}}}
    configs["kit_mopo"]["peer_settings"]["rollout_length"] = 5
    line, md = pair_line(tmp_path, base, [c + 0.05 for c in base], configs)
    assert "**undecided**" in line and "the settings differ" in line, line
    assert "**Settings differ** (from each run's config.json, ours vs theirs): lambda_p 5.0 vs 0.5." in md


def test_the_first_quantity_that_separates_a_pair_is_named_in_the_pipelines_order(tmp_path):
    """Both rows log rollout/u alike; their action distances differ by 0.3 % (1.949 vs 1.944, a HalfCheetah
    pair) with intervals narrow enough to be disjoint; their critic losses lie far apart; the score (last in the
    pipeline) too. The report names losses/critic_loss, not the score, and marks rollout/u and the 0.3 % as not
    separating."""
    rng = np.random.default_rng(1)
    curves = {
        r: [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) + (15 if r == "kit_mopo" else 0) for _ in range(3)]
        for r in ("mopo", "kit_mopo")
    }
    extra = {
        r: {
            "rollout/u": [0.3 + rng.normal(0, 0.02, 20) for _ in range(3)],
            "rollout/action_distance": [(1.949 if r == "mopo" else 1.944) + rng.normal(0, 1e-4, 20) for _ in range(3)],
            "losses/critic_loss": [(40 if r == "mopo" else 20) + rng.normal(0, 1, 20) for _ in range(3)],
        }
        for r in ("mopo", "kit_mopo")
    }
    fake_results(tmp_path / "results", curves, extra)
    compare = load_compare()
    md = compare.report(compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "r")))
    assert "the first quantity that separates them: **losses/critic_loss**" in md
    row = {
        ln.split(" | ")[0]: ln for ln in md.splitlines() if ln.startswith("| rollout/u |") or ln.startswith("| losses/")
    }
    assert row["| rollout/u"].endswith("| no |") and row["| losses/critic_loss"].endswith("| **yes** |")
    distance = next(ln for ln in md.splitlines() if ln.startswith("| rollout/action_distance |"))
    lo, hi = (c.split("[")[1].split("]")[0].split(", ") for c in distance.split(" | ")[1:3])
    assert float(lo[1]) < float(hi[0]) or float(hi[1]) < float(lo[0]), distance  # disjoint, yet too small to count
    assert distance.endswith("| +0.3 % | no |"), distance
    assert "| eval/normalized_score |" in md  # the score separates too, but comes last


@pytest.fixture(scope="module")
def halfcheetah_random(tmp_path_factory):
    """A HalfCheetah random-policy file, D4RL's layout, where neither peer has settings of its own for the name."""
    root = tmp_path_factory.mktemp("cheetah")
    os.makedirs(root / "local")
    attrs = {"behavior_mean_return": -280.0, "behavior_normalized_score": 0.0}
    write_random_dataset(str(root / "local" / "halfcheetah-random.hdf5"), "HalfCheetah-v4", steps=1500, attrs=attrs)
    return root


# the settings each side's config.json records, for --settings theirs --task halfcheetah-medium-v2 (the Kit's) and
# --settings ours (mopo.py's and orpo.py's halfcheetah-random-v2 presets): ours, then the peer's
MATCHED = {
    "theirs": {
        "kit_mopo": (
            {"lambda_p": 0.5, "uncertainty": "max_aleatoric", "rollout_length": 5},
            {"penalty_coef": 0.5, "rollout_length": 5, "ensemble_uncertainty_mode": "aleatoric"},
        ),
    },
    "ours": {
        "kit_mopo": (
            {"lambda_p": 6.64, "uncertainty": "ensemble_std", "rollout_length": 5},
            {"penalty_coef": 6.64, "rollout_length": 5, "ensemble_uncertainty_mode": "ensemble_std"},
        ),
        "official_orpo": (
            {"lambda_p": 6.64, "lambda_o": 0.015, "uncertainty": "max_aleatoric", "rollout_length": 5}
            | {"rollout_length_o": 5, "real_ratio": 0.05, "output_rollout_ratio": 0.45, "real_ratio_o": 0.05},
            {"penalty_coef": 6.64, "bonus_coef": 0.015, "ensemble_uncertainty_mode": "aleatoric", "rollout_length": 5}
            | {"rollout_length_rollout_policy": 5, "real_ratio_final": 0.05, "final_policy_rollout_ratio_final": 0.45}
            | {"real_ratio_rollout": 0.05},
        ),
    },
}


@pytest.mark.parametrize("settings", ["theirs", "ours"])
def test_pairs_run_like_with_like_on_a_random_policy_file(halfcheetah_random, tmp_path, settings):
    """A HalfCheetah random-policy file: each pair's two sides run with one set of settings, the Kit's
    halfcheetah-medium ones (--settings theirs --task) or our presets for the file (--settings ours), as each run's
    config.json records them; the report says so. The peers' snapshots come from $ORPO_PEERS_MIRROR."""
    if not all(os.path.isdir(s) for s in SOURCES.values()):
        pytest.skip(f"needs the peers' git snapshots at {' and '.join(SOURCES.values())}: set ORPO_PEERS_MIRROR")
    argv = ["--env", "local/halfcheetah-random", "--data-dir", str(halfcheetah_random), "--seeds", "4"]
    argv += ["--runs-dir", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--out", str(tmp_path / "r")]
    argv += ["--epochs", "2", "--steps-per-epoch", "5", "--rollout-batch-size", "50", "--eval-episodes", "1"]
    argv += ["--dynamics-max-epochs", "1", "--jobs", "2", TINY_FLAGS, "--settings", settings]
    argv += ["--task", "halfcheetah-medium-v2"] if settings == "theirs" else []
    rows = {"kit_mopo": ("mopo",), "official_orpo": ("orpo_untrained",)}
    argv += ["--rows", *(r for peer in MATCHED[settings] for r in (*rows[peer], peer))]
    result = run_script("benchmarks/compare.py", *argv, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for peer, (ours, theirs) in MATCHED[settings].items():
        for row in rows[peer]:
            config = results_of(tmp_path, row, 4, "local_halfcheetah-random")[0]
            assert {k: config[k] for k in ours} == ours, row
        config, _, summary = results_of(tmp_path, peer, 4, "local_halfcheetah-random")
        recorded = config["peer_settings"] | {"ensemble_uncertainty_mode": summary["ensemble_uncertainty_mode"]}
        assert {k: recorded[k] for k in theirs} == theirs, peer
        assert config["task"] == ("halfcheetah-medium-v2" if settings == "theirs" else "halfcheetah-random-v2")
    md = (tmp_path / "r.md").read_text()
    same = "Settings, the same in every run of both rows"
    assert md.count(same) == len(MATCHED[settings]), md
    assert md.count(f"Chosen by --settings {settings} for {config['task']}.") == len(MATCHED[settings]), md


def test_theirs_on_a_file_the_peer_has_no_settings_for_says_to_pass_task(halfcheetah_random, tmp_path):
    if not os.path.isdir(SOURCES["kit-mopo"]):
        pytest.skip(f"needs the OfflineRL-Kit snapshot at {SOURCES['kit-mopo']}: set ORPO_PEERS_MIRROR")
    argv = ["--env", "local/halfcheetah-random", "--data-dir", str(halfcheetah_random), "--rows", "mopo", "kit_mopo"]
    r = run_script("benchmarks/compare.py", *argv, "--runs-dir", str(tmp_path / "runs"), "--results", str(tmp_path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "not for halfcheetah-random-v2" in lines[0] and "pass --task" in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()


def test_two_compare_processes_sharing_a_results_folder_do_not_move_each_others_files(tmp_path, monkeypatch):
    """One compare.py per row on the same --results (as the long rows are run): the other process writes its
    dataset.json while this one is between its write and its rename. With one fixed temporary name, the other
    moved this one's file away and this rename failed with a traceback (seen on local/hopper-medium-replay)."""
    compare = load_compare()
    os.makedirs(tmp_path / "local")
    write_random_dataset(str(tmp_path / "local" / "hopper-random.hdf5"), steps=200)
    args = compare.Args(data_dir=str(tmp_path), results=str(tmp_path / "results"), runs_dir=str(tmp_path / "runs"))
    real_replace, others = os.replace, []

    def replace(src, dst):
        if dst.endswith("dataset.json") and not others:  # the other process, right now
            others.append(dst)
            compare.record_dataset(args, "local/hopper-random", "hopper-random-v2")
        return real_replace(src, dst)

    monkeypatch.setattr(compare.os, "replace", replace)
    compare.record_dataset(args, "local/hopper-random", "hopper-random-v2")
    assert others, "the interleaving was not exercised"
    folder = tmp_path / "results" / "local_hopper-random"
    assert sorted(os.listdir(folder)) == ["dataset.json"]  # no temporary file left behind
    assert json.loads((folder / "dataset.json").read_text())["settings_task"] == "hopper-random-v2"


def test_the_claims_contrasts_take_the_same_student_t_interval_as_the_pairs(tmp_path):
    """ORPO (trained) − MOPO per seed: +1, +2, +3 → mean +2, sd 1, t(0.975, 2)·1/√3 = 2.48 → [−0.5, +4.5]. A
    percentile bootstrap over 3 seeds would give about [+1.0, +3.0], an interval that covers far less than 95 %."""
    flat = [np.full(20, v, dtype=float) for v in (10.0, 20.0, 30.0)]
    fake_results(tmp_path / "results", {"orpo": [c + g for c, g in zip(flat, (1, 2, 3))], "mopo": flat})
    compare = load_compare()
    args = compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "report"), report_only=True)
    md = compare.report(args)
    line = next(ln for ln in md.splitlines() if ln.startswith("- ORPO, π^o trained (ours) − MOPO (ours), last-10"))
    assert line.endswith("paired by seed: +2.0 [-0.5, +4.5] (95 % Student-t) (3 seeds)"), line


def test_rows_show_their_range_and_student_t_interval_never_a_bootstrap(tmp_path):
    """Last-10 scores 10, 20, 30 over 3 seeds: range [10.0, 30.0]; 95 % Student-t 20 ± 4.303·10/√3 = [−4.8, 44.8].
    (A percentile bootstrap over 3 seeds is the range itself, and the page once called it a 95 % interval.)"""
    fake_results(tmp_path / "results", {"mopo": [np.full(20, v, dtype=float) for v in (10.0, 20.0, 30.0)]})
    compare = load_compare()
    md = compare.report(compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "r")), figure=False)
    line = next(ln for ln in md.splitlines() if ln.startswith("| MOPO (ours) |"))
    assert "| 20.0 | [10.0, 30.0] | [-4.8, 44.8] | 1: 10.0, 2: 20.0, 3: 30.0 |" in line, line
    assert "95 % CI" not in md and "bootstrap" not in md.split("Verdicts")[0], md
    assert not (tmp_path / "r.png").exists()  # figure=False draws none


def cut_mid_row(text):
    return text[: text.index("\n15,") + 3]  # 14 whole epochs, then epoch 15's number alone


@pytest.mark.parametrize("damage, why", [
    (cut_mid_row, "metrics.csv line 16 is cut short"),  # was a 14-epoch run: its last-10 over epochs 5-14
    (lambda t: t[: t.index("\n15,") + 1], "metrics.csv holds 14 of the 20 epochs summary.json counts"),
    (lambda t: t.replace("\n18,30.0", "\n18,nan"), "metrics.csv's eval/normalized_score holds a non-finite value"),
    (lambda t: t.replace("\n18,30.0", "\n18,3O.0"), "eval/normalized_score is '3O.0', not a number"),
])  # fmt: skip
def test_a_stored_run_that_disagrees_with_its_record_is_named_and_left_out(damage, why, tmp_path, capsys):
    """compare.py --report-only once read a metrics.csv cut mid-row as a shorter run, and NaN scores made the row's
    mean, interval and contrasts "nan", without a word (exit 0)."""
    fake_results(tmp_path / "results", {"mopo": [np.full(20, v, dtype=float) for v in (10.0, 20.0, 30.0)]})
    seed3 = tmp_path / "results" / "local_hopper-medium" / "mopo" / "seed3"
    (seed3 / "metrics.csv").write_text(damage((seed3 / "metrics.csv").read_text()))
    compare = load_compare()
    argv = ["--report-only", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "report")]
    assert compare.cli(argv) == 0
    out, err = capsys.readouterr()
    line = next(ln for ln in out.splitlines() if ln.startswith("| MOPO (ours) |"))
    assert "| 2 | 20 | 15.0 | [10.0, 20.0] | [-48.5, 78.5] | 1: 10.0, 2: 20.0 | 15.0 |" in line, line  # seeds 1, 2
    assert err.startswith(f"warning: {seed3}: left out of the report (") and why in err and err.count("\n") == 1, err
    assert err.endswith("; delete it (a run of the comparison copies the finished run there again)\n"), err


def test_the_paper_contrast_orpo_untrained_minus_mopo_is_reported(tmp_path):
    """The paper's ORPO − MOPO was made by code that never trains π^o: the page pairs ORPO untrained with MOPO."""
    flat = [np.full(20, v, dtype=float) for v in (10.0, 20.0, 30.0)]
    fake_results(tmp_path / "results", {"orpo_untrained": [c + 1 for c in flat], "mopo": flat})
    compare = load_compare()
    md = compare.report(compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "r")), figure=False)
    assert "- ORPO, π^o untrained (ours) − MOPO (ours), last-10, paired by seed: +1.0" in md, md


def test_shared_peer_rows_wait_for_the_seeds_ensemble_then_load_it(tmp_path):
    """--peer-ensemble shared: a peer row does not start while no model-based row of ours of its (dataset, seed) has a
    dynamics.pt, then gets that file as peers.py's --load-dynamics (and no fit cap: it fits nothing)."""
    compare = load_compare()
    path = str(tmp_path / "halfcheetah_random-v2.hdf5")
    rows = ("td3bc", "orpo", "official_orpo")
    args = compare.Args(env=(path,), settings="ours", rows=rows, runs_dir=str(tmp_path / "runs"), dynamics_max_epochs=3)
    plan, peer = compare.pair_settings(args, path), compare.Task(path, "official_orpo", 2)
    assert "--dynamics-max-epochs" in compare.command(args, peer, plan)  # own: it fits, capped like ours
    args.peer_ensemble = "shared"
    assert compare.waits(args, peer, [])
    other_seed = tmp_path / "runs" / "halfcheetah_random-v2" / "orpo" / "seed1" / "run"
    run = tmp_path / "runs" / "halfcheetah_random-v2" / "orpo" / "seed2" / "run"
    for d in (other_seed, run):
        os.makedirs(d)
        (d / "config.json").write_text("{}")
    (other_seed / "dynamics.pt").write_bytes(b"")
    assert compare.waits(args, peer, [])  # seed 1's ensemble is not seed 2's; the run without dynamics.pt is fitting
    (run / "dynamics.pt").write_bytes(b"")
    assert not compare.waits(args, peer, [])
    cmd = compare.command(args, peer, plan)
    assert cmd[cmd.index("--load-dynamics") + 1] == str(run / "dynamics.pt") and "--dynamics-max-epochs" not in cmd
    peers = load_module("benchmarks/peers.py", "peers_for_shared")
    assert peers.parse_args(cmd[2:]).load_dynamics == str(run / "dynamics.pt")  # peers.py takes it


def test_the_action_unit_diagnostic_is_the_official_row_plus_one_flag(tmp_path):
    """official_orpo_units: the official row's command (its pair's settings, the shared ensemble) with peers.py's
    --one-action-unit added, in a folder of its own; never one of the default rows."""
    compare = load_compare()
    path = str(tmp_path / "halfcheetah_random-v2.hdf5")
    rows = ("orpo", "official_orpo", "official_orpo_units")
    args = compare.Args(env=(path,), settings="ours", rows=rows, runs_dir=str(tmp_path / "runs"))
    plan = compare.pair_settings(args, path)
    official, units = (compare.command(args, compare.Task(path, r, 2), plan) for r in rows[1:])
    d = units.index("--run-dir") + 1
    assert units[d] == official[d].replace("official_orpo", "official_orpo_units") != official[d]
    assert units[:d] + units[d + 1 :] == official[:d] + official[d + 1 :] + ["--one-action-unit"]
    assert load_module("benchmarks/peers.py", "peers_for_units").parse_args(units[2:]).one_action_unit
    assert "official_orpo_units" not in compare.Args().rows
    # run_td3bc.py's: the same flag on the official_td3bc row's command, jump-hard only
    jump = str(tmp_path / "halfcheetah-jump-hard.hdf5")
    args = compare.Args(env=(jump,), rows=("official_td3bc", "official_td3bc_units"), runs_dir=str(tmp_path / "runs"))
    official, units = (
        compare.command(args, compare.Task(jump, r, 2), ("halfcheetah-jump-hard", {})) for r in args.rows
    )
    d = units.index("--run-dir") + 1
    assert units[:d] + units[d + 1 :] == official[:d] + official[d + 1 :] + ["--one-action-unit"]
    assert "official_td3bc_units" not in compare.Args().rows
    with pytest.raises(
        compare.UsageError, match="official_td3bc_units runs on --env halfcheetah-jump or halfcheetah-jump-hard only"
    ):
        compare.check(compare.Args(env=(path,), rows=("td3bc", "official_td3bc_units")))


@pytest.mark.slow  # the slow tier: compare.py end to end
def test_a_shared_peer_row_whose_ensemble_never_comes_fails_in_one_line(tmp_path):
    """Our model-based row of the seed fails before its fit: the waiting peer row is not left waiting forever."""
    os.makedirs(tmp_path / "local")
    write_random_dataset(str(tmp_path / "local" / "hopper-medium.hdf5"), steps=200)
    argv = ["--env", "local/hopper-medium", "--data-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs")]
    argv += ["--results", str(tmp_path / "results"), "--out", str(tmp_path / "report"), "--settings", "ours"]
    argv += ["--rows", "orpo", "official_orpo", "--seeds", "1", "--peer-ensemble", "shared"]
    argv += ["--algo-flags=--hidden-dims 0"]  # orpo.py refuses it at once
    r = run_script("benchmarks/compare.py", *argv, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "official_orpo/seed1: its seed's ensemble was never fitted" in r.stderr
    assert not os.path.exists(tmp_path / "runs" / "local_hopper-medium" / "official_orpo" / "seed1")


def test_the_official_td3bc_row_runs_its_script_alone_with_our_protocol(tmp_path):
    """official_td3bc (peers.py official-td3bc): the same data, seed, epochs × steps and evaluation as every row, and
    nothing of a model (no pair settings, start states, ensemble or cap); it never waits for the seed's ensemble, so
    --peer-ensemble shared needs no model-based row beside it; off halfcheetah-jump-hard it is refused."""
    compare = load_compare()
    os.makedirs(tmp_path / "data")
    path = str(tmp_path / "data" / "halfcheetah-jump-hard.hdf5")
    args = compare.Args(env=("halfcheetah-jump-hard",), data_dir=str(tmp_path / "data"), settings="ours", seeds=(5,),
                        rows=("official_td3bc",), runs_dir=str(tmp_path / "runs"), epochs=100, eval_episodes=5,
                        peer_ensemble="shared", dynamics_max_epochs=3, results=str(tmp_path / "results"),
                        out=str(tmp_path / "r"))  # fmt: skip
    compare.check(args)
    task = compare.Task("halfcheetah-jump-hard", "official_td3bc", 5)
    assert not compare.waits(args, task, [])
    cmd = compare.command(args, task, compare.pair_settings(args, "halfcheetah-jump-hard"))
    parsed = load_module("benchmarks/peers.py", "peers_for_td3bc").parse_args(cmd[2:])  # peers.py takes it
    assert (parsed.peer, parsed.dataset_path, parsed.seed, parsed.epochs) == ("official-td3bc", path, 5, 100)
    assert (parsed.steps_per_epoch, parsed.eval_episodes, parsed.eval_env) == (1000, 5, "HalfCheetah-v4")
    assert parsed.task == "halfcheetah-jump-hard" and parsed.peer_flags == [] and parsed.load_dynamics is None
    assert parsed.rollout_batch_size is parsed.dynamics_max_epochs is parsed.uncertainty_mode is None
    assert "official_td3bc" not in compare.Args().rows
    with pytest.raises(
        compare.UsageError, match="--rows official_td3bc runs on --env halfcheetah-jump or halfcheetah-jump-hard only"
    ):
        compare.check(compare.Args(env=("local/hopper-medium",), rows=("td3bc", "official_td3bc")))


def jump_args(compare, tmp_path, rows, dataset="halfcheetah-jump-hard", **kw):
    os.makedirs(tmp_path / "data", exist_ok=True)
    return compare.Args(env=(dataset,), data_dir=str(tmp_path / "data"), settings="ours", rows=rows,
                        runs_dir=str(tmp_path / "runs"), epochs=100, peer_ensemble="shared", **kw)  # fmt: skip


def a_shared_ensemble(tmp_path, row="mopo", seed=2, dataset="halfcheetah-jump-hard"):
    run = tmp_path / "runs" / dataset / row / f"seed{seed}" / "run"
    os.makedirs(run)
    (run / "config.json").write_text("{}")
    (run / "dynamics.pt").write_bytes(b"")
    return str(run / "dynamics.pt")


def test_the_official_mopo_row_takes_mopos_settings_and_the_seeds_ensemble(tmp_path):
    """official_mopo (peers.py official-mopo): our mopo row's settings (λp 1, u max_aleatoric = their aleatoric, h 5 on
    halfcheetah-jump-hard), the rows' start states, and with --peer-ensemble shared the seed's ensemble (it waits for
    it); off halfcheetah-jump-hard it is refused."""
    compare = load_compare()
    args = jump_args(compare, tmp_path, ("mopo", "official_mopo"), rollout_batch_size=5000)
    compare.check(args)
    plan, task = (
        compare.pair_settings(args, "halfcheetah-jump-hard"),
        compare.Task("halfcheetah-jump-hard", "official_mopo", 2),
    )
    assert plan[1]["official_mopo"] == {"lambda_p": 1.0, "uncertainty": "max_aleatoric", "rollout_length": 5}
    assert compare.waits(args, task, [])
    ensemble = a_shared_ensemble(tmp_path)
    assert not compare.waits(args, task, [])
    parsed = load_module("benchmarks/peers.py", "peers_for_mopo").parse_args(compare.command(args, task, plan)[2:])
    assert (parsed.peer, parsed.seed, parsed.epochs, parsed.steps_per_epoch) == ("official-mopo", 2, 100, 1000)
    assert parsed.peer_flags == ["--penalty-coef", "1.0", "--rollout-length", "5"]
    assert (parsed.uncertainty_mode, parsed.rollout_batch_size, parsed.load_dynamics) == ("aleatoric", 5000, ensemble)
    with pytest.raises(
        compare.UsageError, match="--rows official_mopo runs on --env halfcheetah-jump or halfcheetah-jump-hard only"
    ):
        compare.check(compare.Args(env=("local/hopper-medium",), rows=("mopo", "official_mopo")))


def test_the_official_cql_and_combo_rows_run_their_scripts_defaults_in_the_seeds_ensemble(tmp_path):
    """official_cql (no model: never waits, no model flags) and official_combo (its script's own h and w: no pair
    settings, but the rows' start states and, with --peer-ensemble shared, the seed's ensemble, for which it waits);
    both named only, jump-hard only."""
    compare = load_compare()
    args = jump_args(compare, tmp_path, ("combo", "official_cql", "official_combo"), rollout_batch_size=5000)
    compare.check(args)
    plan = compare.pair_settings(args, "halfcheetah-jump-hard")
    cql, combo = (compare.Task("halfcheetah-jump-hard", r, 2) for r in ("official_cql", "official_combo"))
    assert not compare.waits(args, cql, []) and compare.waits(args, combo, [])
    ensemble = a_shared_ensemble(tmp_path, "combo")
    assert not compare.waits(args, combo, [])
    peers = load_module("benchmarks/peers.py", "peers_for_cql_combo")
    theirs_cql, theirs_combo = (peers.parse_args(compare.command(args, t, plan)[2:]) for t in (cql, combo))
    assert (theirs_cql.peer, theirs_cql.load_dynamics, theirs_cql.rollout_batch_size) == ("official-cql", None, None)
    assert (theirs_combo.peer, theirs_combo.peer_flags, theirs_combo.uncertainty_mode) == ("official-combo", [], None)
    assert (theirs_combo.rollout_batch_size, theirs_combo.load_dynamics, theirs_combo.epochs) == (5000, ensemble, 100)
    assert not {"cql", "combo", "official_cql", "official_combo"} & set(compare.Args().rows)
    for row, where in (
        ("official_cql", "halfcheetah-jump or halfcheetah-jump-hard"),
        ("official_combo", "halfcheetah-jump-hard"),
    ):
        with pytest.raises(compare.UsageError, match=f"--rows {row} runs on --env {where} only"):
            compare.check(compare.Args(env=("local/hopper-medium",), rows=("combo", row)))
    with pytest.raises(compare.UsageError, match="--peer-ensemble shared: the peer rows load the ensemble"):
        compare.check(jump_args(compare, tmp_path, ("official_combo",)))


@pytest.mark.parametrize("dataset", ["halfcheetah-jump-hard", "halfcheetah-jump"])
def test_the_readme_row_is_the_official_row_with_the_readmes_batch_shares(dataset, tmp_path):
    """official_orpo_readme: official_orpo's command (its pair's settings, the shared ensemble) with the README
    command's batch shares for the task, 0.05 / 0 / 0.05 on both jump tasks (README L76 and L70; π^p's own share 0,
    where --settings ours gives official_orpo 0.05), in a folder of its own; never a default row. With the snapshot:
    what run_orpo.py parses from it is the README's command for the task (λp, λo, h, h^o, shares, task, dataset), and
    on halfcheetah-jump --settings theirs gives official_mopo run_mopo.py's own parse of λp 1, h 5."""
    compare = load_compare()
    args = jump_args(compare, tmp_path, ("orpo", "official_orpo", "official_orpo_readme"), dataset)
    ensemble = a_shared_ensemble(tmp_path, "orpo", dataset=dataset)
    plan = compare.pair_settings(args, dataset)
    official, readme = (compare.command(args, compare.Task(dataset, r, 2), plan) for r in args.rows[1:])
    peers = load_module("benchmarks/peers.py", f"peers_for_readme_{dataset}")
    theirs, ours = peers.parse_args(official[2:]), peers.parse_args(readme[2:])
    shares = ("--real-ratio-final", "--final-policy-rollout-ratio-final", "--real-ratio-rollout")

    def flags(parsed):
        return dict(zip(parsed.peer_flags[::2], parsed.peer_flags[1::2]))

    assert [flags(theirs)[f] for f in shares] == ["0.05", "0.05", "0.05"]  # orpo.py's appendix shares for the task
    assert [flags(ours)[f] for f in shares] == ["0.05", "0.0", "0.05"]  # the README's
    assert {k: v for k, v in flags(ours).items() if k not in shares} == {
        k: v for k, v in flags(theirs).items() if k not in shares
    }
    assert ours.run_dir == theirs.run_dir.replace("official_orpo", "official_orpo_readme") != theirs.run_dir
    assert ours.task == theirs.task == dataset and ours.load_dynamics == theirs.load_dynamics == ensemble
    assert not ours.one_action_unit and "official_orpo_readme" not in compare.Args().rows
    if not os.path.isdir(SOURCES["official-orpo"]):
        return  # the rest reads the run scripts' parsers
    root = peers.extract("official-orpo", SOURCES["official-orpo"], peers.PEERS["official-orpo"]["commit"])["root"]
    script = peers.PEERS["official-orpo"]["script"]
    parsed, readme_command = (
        vars(peers.script_args(root, script, c))
        for c in (
            peers.peer_command("official-orpo", root, dataset, ours, "cpu"),
            peers.dataset_flags("official-orpo", root, dataset, ours.dataset_path),
        )
    )
    keys = ("penalty_coef", "bonus_coef", "rollout_length", "rollout_length_rollout_policy", "real_ratio_rollout",
            "real_ratio_final", "final_policy_rollout_ratio_final", "task", "dataset")  # fmt: skip
    assert {k: parsed[k] for k in keys} == {k: readme_command[k] for k in keys}
    assert parsed["final_policy_rollout_ratio_final"] == 0.0
    if dataset == "halfcheetah-jump":
        assert (parsed["task"], parsed["penalty_coef"]) == ("halfcheetah-jump", 1.0)
        theirs_args = jump_args(compare, tmp_path, ("official_mopo", "orpo_untrained", "official_orpo"), dataset)
        theirs_args.settings, theirs_args.orpo_source = "theirs", SOURCES["official-orpo"]
        plan = compare.pair_settings(theirs_args, dataset)[1]
        assert plan["official_mopo"] == {"lambda_p": 1.0, "uncertainty": "max_aleatoric", "rollout_length": 5}
        assert plan["official_orpo"]["output_rollout_ratio"] == 0.0 and plan["official_orpo"]["lambda_o"] == 0.1


def test_the_official_rows_run_halfcheetah_jump_and_combo_is_refused_there(tmp_path):
    """official_td3bc, official_mopo, official_cql, official_orpo and its units variant take --env halfcheetah-jump:
    peers.py gets the task's file and --task halfcheetah-jump, official_mopo mopo.py's settings for the task (λp 1,
    max_aleatoric, h 5) and the seed's ensemble, the model-free rows nothing of a model. official_combo is refused there
    in one line naming run_combo.py L75; a D4RL --env stays refused for every one of them."""
    compare = load_compare()
    rows = ("mopo", "official_td3bc", "official_mopo", "official_cql", "official_orpo", "official_orpo_units",
            "official_td3bc_units")  # fmt: skip
    args = jump_args(compare, tmp_path, rows, "halfcheetah-jump", rollout_batch_size=5000, seeds=(2,))
    compare.check(args)
    plan = compare.pair_settings(args, "halfcheetah-jump")
    assert plan[0] == "halfcheetah-jump"
    assert plan[1]["official_mopo"] == {"lambda_p": 1.0, "uncertainty": "max_aleatoric", "rollout_length": 5}
    ensemble = a_shared_ensemble(tmp_path, dataset="halfcheetah-jump")
    peers = load_module("benchmarks/peers.py", "peers_for_easy")
    parsed = {
        r: peers.parse_args(compare.command(args, compare.Task("halfcheetah-jump", r, 2), plan)[2:]) for r in rows[1:]
    }
    path = str(tmp_path / "data" / "halfcheetah-jump.hdf5")
    for row, theirs in parsed.items():
        assert (theirs.peer, theirs.task, theirs.dataset_path) == (compare.ROWS[row][1], "halfcheetah-jump", path), row
        assert (theirs.seed, theirs.epochs, theirs.eval_env) == (2, 100, "HalfCheetah-v4")
        assert theirs.one_action_unit == row.endswith("_units")
    assert parsed["official_mopo"].peer_flags == ["--penalty-coef", "1.0", "--rollout-length", "5"]
    assert (parsed["official_mopo"].rollout_batch_size, parsed["official_mopo"].load_dynamics) == (5000, ensemble)
    for row in ("official_td3bc", "official_cql", "official_td3bc_units"):
        assert parsed[row].peer_flags == [] and parsed[row].load_dynamics is parsed[row].rollout_batch_size is None
    with pytest.raises(compare.UsageError, match="official_combo runs on --env halfcheetah-jump-hard only .*L75") as e:
        compare.check(
            jump_args(compare, tmp_path, ("combo", "official_combo"), "halfcheetah-jump", rollout_batch_size=5000)
        )
    assert "\n" not in str(e.value)
    for row in compare.JUMP_ROWS:  # D4RL names: their run scripts' D4RL branches are not the paper's rows here
        with pytest.raises(compare.UsageError, match=f"--rows {row} runs on --env halfcheetah-jump"):
            compare.check(compare.Args(env=("local/hopper-medium",), rows=("mopo", row)))
    # both jump files at once: official_combo is refused for the one it cannot run, the others take both
    both = ("halfcheetah-jump", "halfcheetah-jump-hard")
    compare.check(compare.Args(env=both, rows=("official_td3bc", "official_cql")))
    with pytest.raises(compare.UsageError, match="--rows official_combo runs on --env halfcheetah-jump-hard only"):
        compare.check(compare.Args(env=both, rows=("combo", "official_combo"), rollout_batch_size=5000))
