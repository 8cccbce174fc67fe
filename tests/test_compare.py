"""benchmarks/compare.py (issue 19): our rows at tiny sizes, the shared ensemble, resuming, the report's numbers."""

import csv
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

from conftest import ROOT, run_script, write_random_dataset

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
    common += ["--results", str(root / "results"), "--out", str(root / "report"), "--reps", "500"]
    common += ["--epochs", "3", "--steps-per-epoch", "10", "--rollout-batch-size", "50", "--eval-episodes", "1"]
    common += ["--dynamics-max-epochs", "2"]
    common += ["--rows", "orpo", "mopo", "td3bc", "--seeds", "1", "2", "--jobs", "2", TINY_FLAGS]
    first = run_script("benchmarks/compare.py", *common, timeout=600)
    return root, common, first


def tensors(obj, prefix=""):
    """Every tensor of a saved object, by path, as bytes (for exact comparison)."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj.cpu().numpy().tobytes()}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    return {k: v for key, value in items for k, v in tensors(value, f"{prefix}/{key}").items()}


def results_of(root, row, seed):
    d = root / "results" / "local_hopper-random" / row / f"seed{seed}"
    with open(d / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return json.loads((d / "config.json").read_text()), rows, json.loads((d / "summary.json").read_text())


def test_every_row_runs_with_the_same_cuts_and_mopo_loads_orpos_ensemble(comparison):
    root, _, first = comparison
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for seed in (1, 2):
        configs = {row: results_of(root, row, seed)[0] for row in ("orpo", "mopo", "td3bc")}
        for row, c in configs.items():
            assert (c["seed"], c["epochs"], c["steps_per_epoch"], c["eval_episodes"]) == (seed, 3, 10, 1), row
        assert configs["orpo"]["rollout_batch_size"] == configs["mopo"]["rollout_batch_size"] == 50
        assert configs["orpo"]["dynamics_max_epochs"] == 2  # the one cap compare.py gives every row
        # mopo's ensemble is the one orpo fitted for the same seed, byte for byte
        orpo_dir = next(p for p in (root / "runs" / "local_hopper-random" / "orpo" / f"seed{seed}").iterdir())
        assert configs["orpo"]["load_dynamics_path"] is None
        assert configs["mopo"]["load_dynamics_path"] == str(orpo_dir / "dynamics.pt")
        mopo_dir = next(p for p in (root / "runs" / "local_hopper-random" / "mopo" / f"seed{seed}").iterdir())
        ensemble = [torch.load(d / "dynamics.pt", weights_only=False)["model"] for d in (orpo_dir, mopo_dir)]
        assert tensors(ensemble[0]) == tensors(ensemble[1])
        assert [r["epoch"] for r in results_of(root, "mopo", seed)[1]] == ["1", "2", "3"]  # no fit (epoch 0) row
        assert [r["epoch"] for r in results_of(root, "orpo", seed)[1]] == ["0", "1", "2", "3"]
    behaviour = json.loads((root / "results" / "local_hopper-random" / "dataset.json").read_text())
    assert behaviour["behavior_normalized_score"] == pytest.approx(1.2) and behaviour["transitions"] == 1500


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
        assert cells[3].startswith(f"{np.mean(per_seed):.1f} ["), line
        assert cells[4] == f"1: {per_seed[0]:.1f}, 2: {per_seed[1]:.1f}", line
    assert "behaviour policy's mean return 19.5 (normalised 1.2)" in md
    assert "ORPO, π^o trained (ours) − MOPO (ours), last-10, paired by seed" in md


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
        "--reps",
        "500",
        "--runs-dir",
        str(tmp_path / "nothing-here"),
    )
    assert only.returncode == 0, only.stderr
    assert out.with_suffix(".md").read_text() == (root / "report.md").read_text().replace("report.png", "redrawn.png")


def test_bad_input_is_one_line(tmp_path):
    for argv, needle in (
        (["--rows", "sac"], "unknown row 'sac'"),
        (["--env", "local/hopper-x", "--data-dir", str(tmp_path)], "no dataset file"),
        (["--report-only", "--results", str(tmp_path)], "no finished run"),
        (["--epochs", "0"], "--epochs must be at least 1"),
    ):
        r = run_script("benchmarks/compare.py", *argv, "--runs-dir", str(tmp_path / "runs"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, (argv, r.stderr)


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


def fake_results(root, rows, extra=None):
    """A results folder of finished runs: rows = {row: [per-seed score curves]}; extra = {row: {column: [per-seed
    curves]}}."""
    for row, curves in rows.items():
        for seed, curve in enumerate(curves, 1):
            d = root / "local_hopper-medium" / row / f"seed{seed}"
            os.makedirs(d)
            (d / "config.json").write_text("{}")
            (d / "summary.json").write_text(json.dumps({"status": "finished", "device_name": "test CPU"}))
            cols = {"eval/normalized_score": curve, **{k: v[seed - 1] for k, v in (extra or {}).get(row, {}).items()}}
            with open(d / "metrics.csv", "w") as f:
                f.write(",".join(["epoch", *cols]) + "\n")
                f.writelines(",".join([str(e), *(str(c[e - 1]) for c in cols.values())]) + "\n" for e in range(1, 21))


@pytest.mark.parametrize("shift, verdict, seeds", [(0.3, "agree", 3), (15.0, "differ", 3), (15.0, "undecided", 2)])
def test_a_pair_agrees_within_its_intervals_and_differs_beyond_them(tmp_path, shift, verdict, seeds):
    """The ours-vs-theirs verdict: peers' curves near ours agree, curves 15 points apart (seeds spread ~2) differ; with
    2 seeds a row's interval is just their range, so no verdict is given."""
    rng = np.random.default_rng(0)
    base = [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) for _ in range(seeds)]
    theirs = [c + shift + rng.normal(0, 1, 20) for c in base]
    fake_results(tmp_path / "results", {"mopo": base, "kit_mopo": theirs})
    compare = load_compare()
    args = compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "report"), reps=500, report_only=True)
    md = compare.report(args)
    line = next(ln for ln in md.splitlines() if ln.startswith("- MOPO (ours) vs MOPO (OfflineRL-Kit)"))
    assert f"**{verdict}**" in line, line
    want = np.mean([c[-10:].mean() for c in theirs])
    assert f"vs {want:.1f};" in line, (line, want)


def test_the_first_quantity_that_separates_a_pair_is_named_in_the_pipelines_order(tmp_path):
    """Both rows log rollout/u alike; their critic losses lie far apart; the score (last in the pipeline) too. The
    report names losses/critic_loss, not the score, and marks rollout/u as not separating."""
    rng = np.random.default_rng(1)
    curves = {
        r: [np.linspace(5, 30, 20) + rng.normal(0, 2, 20) + (15 if r == "kit_mopo" else 0) for _ in range(3)]
        for r in ("mopo", "kit_mopo")
    }
    extra = {
        r: {
            "rollout/u": [0.3 + rng.normal(0, 0.02, 20) for _ in range(3)],
            "losses/critic_loss": [(40 if r == "mopo" else 20) + rng.normal(0, 1, 20) for _ in range(3)],
        }
        for r in ("mopo", "kit_mopo")
    }
    fake_results(tmp_path / "results", curves, extra)
    compare = load_compare()
    md = compare.report(compare.Args(results=str(tmp_path / "results"), out=str(tmp_path / "r"), reps=500))
    assert "the first quantity that separates them: **losses/critic_loss**" in md
    row = {
        ln.split(" | ")[0]: ln for ln in md.splitlines() if ln.startswith("| rollout/u |") or ln.startswith("| losses/")
    }
    assert row["| rollout/u"].endswith("| no |") and row["| losses/critic_loss"].endswith("| **yes** |")
    assert "| eval/normalized_score |" in md  # the score separates too, but comes last
