"""benchmarks/budget.py: the budget-cut report reads the runs' own numbers; bad input is one line."""

import json
import os

from conftest import run_script


def fake_run(folder, scores, qs, starts, cap, fit=None, status="finished"):
    """A run's small files: metrics.csv (row 0 the fit, when it fitted), config.json and summary.json."""
    os.makedirs(folder)
    rows = ["epoch,dynamics/holdout_mse,dynamics/epochs,eval/normalized_score,losses/q,rollout/u"]
    if fit:
        rows.append(f"0,{fit[0]},{fit[1]},,,")
    rows += [f"{e},,,{s},{q},0.5" for e, (s, q) in enumerate(zip(scores, qs), 1)]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    config = {"rollout_batch_size": starts, "dynamics_max_epochs": cap, "load_dynamics_path": None if fit else "x"}
    (folder / "config.json").write_text(json.dumps(config))
    summary = {"status": status, "last10_score": float(sum(scores[-10:]) / 10), "normalized_score": scores[-1]}
    summary |= {"wall_seconds": 3600.0, "device_name": "test CPU"}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_the_report_holds_each_runs_numbers(tmp_path):
    scores, qs = list(range(20)), [10.0 * e for e in range(1, 21)]
    base = tmp_path / "compare" / "local_hopper-medium"
    fake_run(base / "orpo" / "seed1", scores, qs, 5000, 20, fit=(0.0331, 20))
    fake_run(base / "mopo" / "seed1", [s + 1 for s in scores], qs, 5000, 20)  # loaded orpo's ensemble
    fake_run(tmp_path / "budget" / "uncapped" / "mopo", [s + 2 for s in scores], [q * 2 for q in qs], 5000, None,
             fit=(0.0285, 61))  # fmt: skip
    fake_run(tmp_path / "budget" / "starts50k" / "orpo", scores, qs, 50000, 20, fit=(0.0331, 20), status="failed")
    out = tmp_path / "report"
    flags = ["--baseline", str(tmp_path / "compare"), "--results", str(tmp_path / "budget"), "--out", str(out)]
    result = run_script("benchmarks/budget.py", "--report-only", *flags)
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "report.md").read_text()
    # last-10 of 0..19 is 14.5; Q over the last 10 epochs of 10..200 is 155, its max 200
    assert (
        "| ORPO, π^o trained (ours) | 5,000 | capped at 20 epochs, 20 epochs | 0.0331 | 14.5 | 19.0 | 155.0 | 200.0 |"
        in md
    )
    assert (
        "| MOPO (ours) | 5,000 | capped at 20 epochs (loaded from its seed's other run) | 0.0331 | 15.5 | 20.0 |" in md
    )
    assert (
        "| MOPO (ours) | 5,000 | early stopping only, 61 epochs | 0.0285 | 16.5 | 21.0 | 310.0 | 400.0 | 1.00 |" in md
    )
    assert "| ORPO, π^o trained (ours) | starts50k | not finished |" in md  # an unfinished run is not reported
    assert os.path.isfile(tmp_path / "report.png")


def test_bad_input_is_one_line(tmp_path):
    for argv, code, words in [
        (["--only", "orpo:fast"], 2, "--only orpo:fast: use ROW:CUT"),
        (["--seed", "x"], 2, "--seed"),
        (
            ["--report-only", "--results", str(tmp_path / "none"), "--baseline", str(tmp_path / "none")],
            1,
            "no finished",
        ),
    ]:
        result = run_script("benchmarks/budget.py", *argv, "--out", str(tmp_path / "r"))
        assert result.returncode == code, (argv, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr, argv  # tyro's box for a bad value
        assert result.stderr.count("\n") == 1 or argv[0] == "--seed", argv


def test_a_live_run_without_a_checkpoint_is_left_alone(tmp_path):
    """A run still in its ensemble fit has no checkpoint yet; a second budget.py (one per core) must not take it for
    a stopped run and delete its folder: the run's lock says it is alive."""
    import fcntl

    run = tmp_path / "runs" / "uncapped" / "mopo" / "local_hopper-medium__mopo_uncapped__1__1"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    with open(run / "run.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the live algorithm file holds it
        result = run_script("benchmarks/budget.py", "--only", "mopo:uncapped", "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 1 and "is in use by another process" in result.stderr, result.stderr
    assert (run / "config.json").is_file()


def test_the_report_names_each_runs_caveats(tmp_path):
    """A run resumed with another thread count (summary.json invocations, as runs record them now) and a run of the
    old SAC schedule (config.json without sac_lr_horizon): the page says both, for the runs they hold for."""
    scores, qs = list(range(20)), [10.0 * e for e in range(1, 21)]
    base = tmp_path / "compare" / "local_hopper-medium"
    fake_run(base / "mopo" / "seed1", scores, qs, 5000, 20, fit=(0.0331, 20))
    run = tmp_path / "budget" / "uncapped" / "mopo"
    fake_run(run, scores, qs, 5000, None, fit=(0.0285, 61))
    summary = json.loads((run / "summary.json").read_text())
    summary["invocations"] = [{"start_epoch": 0, "torch_threads": 1}, {"start_epoch": 7, "torch_threads": 2}]
    (run / "summary.json").write_text(json.dumps(summary))
    for folder, horizon in ((base / "mopo" / "seed1", None), (run, 1000)):
        config = json.loads((folder / "config.json").read_text()) | {"_script": "mopo.py", "policy": "sac"}
        config |= {"epochs": 20} | ({"sac_lr_horizon": horizon} if horizon else {})
        (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "report"
    flags = ["--baseline", str(tmp_path / "compare"), "--results", str(tmp_path / "budget"), "--out", str(out)]
    result = run_script("benchmarks/budget.py", "--report-only", *flags)
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "report.md").read_text()
    assert (
        "- MOPO (ours) (fit uncapped): resumed at epoch 7 with 2 torch threads instead of 1 (not bit-identical to an "
        "uninterrupted run)." in md
    ), md
    assert (
        "- MOPO (ours) (5,000 starts, fit capped): the SAC policy's actor LR cosine-annealed over the run's own 20"
        in md
    )
    assert md.count("cosine-annealed") == 1, md  # the run with sac_lr_horizon has no such note
