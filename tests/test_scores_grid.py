"""benchmarks/scores.py: both launchers run a tiny 2-algorithm × 1-dataset × 2-seed grid end to end, a killed or
preempted run is resumed to the same metrics, failed/NaN runs are skipped and reported with a non-zero exit, the
aggregate statistics equal a hand computation, the paper's numbers come from its LaTeX, and bad flags are one line."""

import contextlib
import csv
import fcntl
import glob
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
from conftest import ROOT, load_module, run_script, write_random_dataset

SCRIPT = os.path.join(ROOT, "benchmarks", "scores.py")
PAPER_TEX = os.environ.get("ORPO_PAPER_TEX")  # the paper's LaTeX source, only to check paper_scores.csv against it
# 3 epochs, a checkpoint after each, one evaluation at the end (the kill tests need epochs that outlast a poll)
COMMON = [
    "--epochs",
    "3",
    "--steps-per-epoch",
    "20",
    "--batch-size",
    "32",
    "--hidden-dims",
    "32",
    "32",
    "--eval-episodes",
    "2",
    "--no-cuda",
    "--checkpoint-every",
    "1",
    "--eval-every",
    "3",
]
MODEL = [  # orpo's epochs long enough (300 steps, ~1 s) for the local grid's kill to land mid-run after a checkpoint
    "--steps-per-epoch",
    "300",
    "--rollout-batch-size",
    "64",
    "--dynamics-max-epochs",
    "1",
    "--dynamics-hidden-dims",
    "32",
    "32",
    "--num-ensemble",
    "3",
    "--num-elites",
    "2",
]
FLAGS = ["--reps", "200", f"--extra={shlex.join(COMMON)}", "--extra-for", f"orpo={shlex.join(MODEL)}"]
GRID = ["--algos", "td3bc", "orpo", "--envs", "hopper-random-v2", "--seeds", "1", "2", *FLAGS]


@pytest.fixture(scope="module")
def scores():
    return load_module("benchmarks/scores.py", "scores_module")


def metrics_without_timings(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [
            {k: v for k, v in r.items() if not k.startswith("charts/") and k != "dynamics/fit_seconds"}
            for r in csv.DictReader(f)
        ]


def run_dirs(runs, name):
    return sorted(glob.glob(os.path.join(str(runs), f"hopper-random-v2__{name}__*")))


def script_env(data_dir):
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", WANDB_MODE="offline", D4RL_DATASET_DIR=data_dir)


def wait_for(pattern, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = glob.glob(pattern)
        if found:
            return found[0]
        assert proc.poll() is None, "the launcher ended before the run saved a checkpoint"
        time.sleep(0.01)
    raise AssertionError(f"nothing matched {pattern} within {timeout} s")


def wait_gone(pid, timeout=10.0):
    """True once pid has exited (a zombie counts: an orphan's reaper may be slow), False after timeout seconds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def local_grid(hopper_data_dir, tmp_path_factory):
    """The grid through the default launcher (one run after another), killed once mid-way through orpo seed 1."""
    tmp = tmp_path_factory.mktemp("local_grid")
    runs, out = tmp / "runs", tmp / "scores.md"
    cmd = [SCRIPT, *GRID, "--runs-dir", str(runs), "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, *cmd],
        cwd=str(tmp),
        env=script_env(hopper_data_dir[0]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        killed = os.path.dirname(wait_for(str(runs / "hopper-random-v2__orpo__1__*" / "checkpoint.pt"), proc))
        child = json.loads((runs / "_grid" / "hopper-random-v2__orpo__1.json").read_text())["child_pid"]
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only, as a crash or the out-of-memory killer: its run goes too
    finally:
        proc.wait()
    run_gone = wait_gone(child)
    status = run_script(SCRIPT, "--status", "--runs-dir", str(runs), cwd=str(tmp))
    result = run_script(*cmd, data_dir=hopper_data_dir[0], cwd=str(tmp))
    return {
        "runs": runs,
        "out": out,
        "result": result,
        "cmd": cmd,
        "tmp": tmp,
        "killed": killed,
        "status": status,
        "run_gone": run_gone,
    }


# ------------------------------------------------------------------------------------------ launchers, end to end
@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_local_launcher_runs_the_grid_resumes_the_killed_run_and_tabulates(local_grid, hopper_data_dir):
    result, runs, out = local_grid["result"], local_grid["runs"], local_grid["out"]
    assert local_grid["run_gone"], "the run outlived its SIGKILLed launcher"
    # after the kill: td3bc's two runs finished, orpo seed 1 stopped (its launcher is gone), seed 2 not started
    assert "3 runs: 0 queued, 0 running, 2 finished, 0 failed, 1 stopped" in local_grid["status"].stdout, local_grid[
        "status"
    ].stdout
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"orpo hopper-random-v2 seed 1: resume {local_grid['killed']} at epoch" in result.stdout
    assert result.stdout.count(": finished (") == 4 and result.stdout.count("$ ") == 2  # resumed 1, started 1
    assert run_dirs(runs, "orpo__1") == [local_grid["killed"]]
    for name, flags in (("td3bc", COMMON), ("orpo", COMMON + MODEL)):  # what a later launch compares with
        for seed in (1, 2):
            record = json.loads((runs / "_grid" / f"hopper-random-v2__{name}__{seed}.json").read_text())
            assert record["flags"] == flags, (name, seed, record)
    assert len(list((runs / "dynamics_cache").glob("*.pt"))) == 2  # one ensemble per seed, fitted once
    summaries = [json.loads(p.read_text()) for p in runs.glob("*/summary.json")]
    assert sorted((s["algorithm"], s["seed"]) for s in summaries) == [
        ("orpo", 1),
        ("orpo", 2),
        ("td3bc", 1),
        ("td3bc", 2),
    ]
    assert all(s["finished"] and s["epochs"] == 3 for s in summaries)
    text = out.read_text()
    data = json.loads((local_grid["tmp"] / "scores.json").read_text())
    for algo, paper in (("orpo", "9.2 ± 1.4 (1)"), ("td3bc", "12.7 ± 3.9 (1)")):  # Table 1's hopper-random-v2 cells
        last10 = np.array(
            [s["last10_score"] for s in sorted(summaries, key=lambda s: s["seed"]) if s["algorithm"] == algo]
        )
        row = next(line for line in text.splitlines() if line.startswith(f"| hopper-random-v2 | {algo} |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2] == f"{last10.mean():.1f} ± {last10.std():.1f} †", row  # † : fewer epochs than the paper's
        assert cells[4] == paper and cells[6] == "2 (1, 2)" and cells[7] == "3 †", row
        cell = data["cells"][f"hopper-random-v2/{algo}"]
        assert cell["last10"] == last10.tolist() and cell["seeds"] == [1, 2]
        assert cell["ci95"][0] == pytest.approx(last10.min()) and cell["ci95"][1] == pytest.approx(last10.max())
    assert "fewer epochs than the paper's 1000" in text and "seeds 1, 2" in text and "epochs 3" in text
    assert "| orpo | 2 × 1 |" in text and "| td3bc |" in text.split("P(ORPO > baseline)")[1]
    for png in ("scores.png", "scores_profile.png"):
        assert (local_grid["tmp"] / png).stat().st_size > 0
    assert "fewer epochs" in data["meta"]["profile_title"] and "fewer epochs" in data["meta"]["curves_title"]
    # a second call finds all four finished: it starts nothing and only rebuilds the table
    again = run_script(*local_grid["cmd"], data_dir=hopper_data_dir[0], cwd=str(local_grid["tmp"]))
    assert again.returncode == 0 and again.stdout.count(": finished (") == 4 and "$ " not in again.stdout, again.stdout[
        -2000:
    ]


@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_submitit_local_executor_runs_the_grid_and_a_preempted_job_resumes(local_grid, hopper_data_dir, tmp_path):
    """The job code under submitit's LocalExecutor, 4 at once (--per-gpu 4 on the CPU); orpo seed 2 gets the
    time-limit signal mid-run, checkpoints, is requeued and resumes.

    Each launcher interrupted a different orpo run, so every run here has an uninterrupted twin in the other grid."""
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            SCRIPT,
            *GRID,
            "--per-gpu",
            "4",
            "--runs-dir",
            str(runs),
            "--out",
            str(tmp_path / "scores.md"),
        ],
        cwd=str(tmp_path),
        env=script_env(hopper_data_dir[0]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(str(runs / "hopper-random-v2__orpo__2__*" / "checkpoint.pt"), proc)
        record = json.loads((runs / "_grid" / "hopper-random-v2__orpo__2.json").read_text())
        os.kill(record["pid"], signal.SIGUSR2)  # what Slurm sends --signal-delay-s before the time limit
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    record = json.loads((runs / "_grid" / "hopper-random-v2__orpo__2.json").read_text())
    assert record["state"] == "finished" and record["requeues"] == 1 and record["launcher"] == "local"
    log = (runs / "_grid" / "logs" / "hopper-random-v2__orpo__2.log").read_text()
    assert log.count("=== ") == 2 and "--resume" in log.split("=== ")[2], log[-3000:]
    assert any(f"at epoch {e}" in log for e in (1, 2)), log[-3000:]  # continued, not restarted nor already done
    for name in ("orpo__1", "orpo__2", "td3bc__1", "td3bc__2"):
        (ours,), (reference,) = run_dirs(runs, name), run_dirs(local_grid["runs"], name)
        assert metrics_without_timings(ours) == metrics_without_timings(reference), name
    assert "| hopper-random-v2 | orpo |" in (tmp_path / "scores.md").read_text()


@pytest.mark.slow  # the slow tier: a launcher's run end to end
def test_sigterm_to_the_local_launcher_stops_its_run_which_saves_and_exits_143(tmp_path, hopper_data_dir):
    """SIGTERM to scores.py (what `kill` or a batch system sends) mid-run: the run saves and stops, the launcher says
    how to continue and exits 143, and no process of it is left (a relaunch resumes a stopped run: the grid test)."""
    runs = tmp_path / "runs"
    flags = ["--epochs", "200", *COMMON[2:]]  # --epochs 200: the signal comes long before the end
    cmd = [SCRIPT, "--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "--runs-dir", str(runs)]
    cmd += ["--out", str(tmp_path / "scores.md"), "--reps", "200", f"--extra={shlex.join(flags)}"]
    proc = subprocess.Popen([sys.executable, *cmd], cwd=str(tmp_path), env=script_env(hopper_data_dir[0]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        run = os.path.dirname(wait_for(str(runs / "hopper-random-v2__td3bc__1__*" / "checkpoint.pt"), proc))
        child = json.loads((runs / "_grid" / "hopper-random-v2__td3bc__1.json").read_text())["child_pid"]
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, stdout[-2000:] + stderr[-2000:]
    assert "interrupted: run the same command again to resume" in stderr
    assert wait_gone(child), "the run outlived its launcher"
    summary = json.loads((runs / os.path.basename(run) / "summary.json").read_text())
    assert summary["status"] == "interrupted", summary  # it saved its checkpoint, then stopped
    assert json.loads((runs / "_grid" / "hopper-random-v2__td3bc__1.json").read_text())["state"] == "stopped"
    status = run_script(SCRIPT, "--status", "--runs-dir", str(runs), cwd=str(tmp_path))
    assert "1 runs: 0 queued, 0 running, 0 finished, 0 failed, 1 stopped" in status.stdout, status.stdout


# ------------------------------------------------------------------------------------------ failures
def fake_run(runs, env, algo, seed, last10, epochs=3, kind="d4rl_normalized", config=None, **summary):
    """A run directory as the scripts leave it: config.json, metrics.csv and (unless summary is None) summary.json."""
    run_dir = runs / f"{env.replace('/', '_')}__{algo}__{seed}__{1000 + seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(
        json.dumps({"env": env, "exp_name": algo, "seed": seed, "epochs": epochs, "cuda": False, **(config or {})})
    )
    (run_dir / "metrics.csv").write_text(
        "epoch,eval/return,eval/normalized_score\n" + "".join(f"{e},{last10},{last10}\n" for e in range(1, epochs + 1))
    )
    if summary.get("status") != "none":
        s = {
            "env": env,
            "algorithm": algo,
            "seed": seed,
            "epochs": epochs,
            "finished": True,
            "device": "cpu",
            "device_name": "test CPU",
            "run_dir": str(run_dir),
            "score_kind": kind,
            "normalized_score": last10,
            "return": last10,
            "last10_score": last10,
            "wall_seconds": 3600.0,
            **summary,
        }
        (run_dir / "summary.json").write_text(json.dumps(s))
    return run_dir


def test_failed_and_nan_runs_are_skipped_reported_and_exit_nonzero(tmp_path, hopper_data_dir):
    runs, out = tmp_path / "runs", tmp_path / "scores.md"
    fake_run(runs, "hopper-random-v2", "td3bc", 1, 10.0)
    fake_run(runs, "hopper-random-v2", "td3bc", 2, float("nan"))  # today's NaN run: "finished" with a NaN score
    fake_run(
        runs,
        "hopper-random-v2",
        "orpo",
        1,
        None,
        finished=False,
        status="failed",
        error="error: epoch 2: losses/critic_loss is NaN",
    )  # the scripts' failed status
    fake_run(runs, "hopper-random-v2", "orpo", 2, None, finished=False, status="failed", error="error: boom")
    cmd = [
        "benchmarks/scores.py",
        "--algos",
        "td3bc",
        "orpo",
        "--envs",
        "hopper-random-v2",
        "--seeds",
        "1",
        "2",
        "--runs-dir",
        str(runs),
        "--out",
        str(out),
        "--reps",
        "200",
    ]
    result = run_script(*cmd, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "$ " not in result.stdout and result.stdout.count("failed earlier") == 3  # skipped, not rerun
    assert "3 of 4 runs failed" in result.stderr and "epoch 2: losses/critic_loss is NaN" in result.stderr
    text = out.read_text()
    assert "nan ±" not in text.lower() and "± nan" not in text.lower()
    assert "| hopper-random-v2 | orpo | no finished run |" in text and "| 10.0 ± 0.0 † |" in text
    assert "## Failed runs (3)" in text and "non-finite score" in text and "error: boom" in text
    # the aggregation alone: a directory where every run failed does not crash it
    (runs / "hopper-random-v2__td3bc__1__1001").rename(tmp_path / "elsewhere")
    none = run_script(
        "benchmarks/scores.py", "--table-only", "--runs-dir", str(runs), "--out", str(out), cwd=str(tmp_path)
    )
    assert none.returncode == 1 and "Traceback" not in none.stderr and "no finished run" in out.read_text(), none.stderr


def test_a_finished_run_whose_metrics_disagree_with_its_record_is_left_out_and_named(scores, tmp_path):
    """A finished run's metrics.csv cut mid-row (epoch 3 of 3): it is a failed run of the page's list, with the reason
    and what to do, not a number of the table."""
    runs, out = tmp_path / "runs", tmp_path / "scores.md"
    for seed, score in ((1, 10.0), (2, 20.0), (3, 30.0)):
        run_dir = fake_run(runs, "hopper-random-v2", "td3bc", seed, score)
    text = (run_dir / "metrics.csv").read_text()
    (run_dir / "metrics.csv").write_text(text[: text.index("\n3,") + 2])
    argv = ["--table-only", "--runs-dir", str(runs), "--out", str(out), "--reps", "200"]
    assert scores.cli(argv) == 1
    cell = json.loads((tmp_path / "scores.json").read_text())["cells"]["hopper-random-v2/td3bc"]
    assert cell["seeds"] == [1, 2] and cell["mean"] == 15.0
    page = out.read_text()
    assert (
        "## Failed runs (1)" in page
        and f"metrics.csv line 4 is cut short or has extra fields; delete {run_dir}" in page
    )


@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_a_run_that_fails_is_recorded_skipped_then_retried(tmp_path):
    """A run that fails after its start (its flags and dataset pass the launch's check_cells): a local dataset of 5
    transitions, which the script refuses when it loads them (a run needs 10)."""
    runs, data = tmp_path / "runs", tmp_path / "data"
    (data / "local").mkdir(parents=True)
    write_random_dataset(str(data / "local" / "five.hdf5"), steps=5, attrs={"env_id": "Hopper-v4"})
    cmd = [
        "benchmarks/scores.py",
        "--algos",
        "td3bc",
        "--envs",
        "local/five",
        "--seeds",
        "1",
        "--runs-dir",
        str(runs),
        "--out",
        str(tmp_path / "scores.md"),
        f"--extra={shlex.join(COMMON)}",
    ]
    first = run_script(*cmd, data_dir=str(data), cwd=str(tmp_path))
    assert first.returncode == 1 and "$ " in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    record = json.loads((runs / "_grid" / "local_five__td3bc__1.json").read_text())
    assert record["state"] == "failed" and record["error"].startswith("exit 1: error:") and "\n" not in record["error"]
    assert "usable transitions (timeouts dropped); a run needs at least 10" in record["error"], record["error"]
    assert record["flags"] == COMMON  # the flags it was started with, for the next launch's check
    assert record["error"] in first.stderr
    status = run_script("benchmarks/scores.py", "--status", "--runs-dir", str(runs), cwd=str(tmp_path))
    assert "1 failed" in status.stdout and record["error"] in status.stdout, status.stdout
    second = run_script(*cmd, data_dir=str(data), cwd=str(tmp_path))
    assert second.returncode == 1 and "$ " not in second.stdout and "failed earlier" in second.stdout
    third = run_script(*cmd, "--retry-failed", data_dir=str(data), cwd=str(tmp_path))
    assert third.returncode == 1 and third.stdout.count("$ ") == 1


@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_a_launch_tabulates_its_own_grid_as_table_only_does(tmp_path, hopper_data_dir):
    """A seed-3 grid failed in this runs dir; a launch of seeds 1 2 4 (all finished) must not report seed 3."""
    runs = tmp_path / "runs"
    for seed in (1, 2, 4):
        fake_run(runs, "hopper-random-v2", "td3bc", seed, 10.0 * seed)
    fake_run(runs, "hopper-random-v2", "td3bc", 3, None, finished=False, status="failed", error="error: boom")
    grid = ["--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "2", "4", "--runs-dir", str(runs)]
    texts = []
    for mode, out in (([], "by_launch.md"), (["--table-only"], "by_table_only.md")):
        result = run_script(
            "benchmarks/scores.py",
            *grid,
            *mode,
            "--reps",
            "200",
            "--out",
            str(tmp_path / out),
            data_dir=hopper_data_dir[0],
            cwd=str(tmp_path),
        )
        assert result.returncode == 0 and "$ " not in result.stdout, (mode, result.stdout[-2000:], result.stderr)
        lines = (tmp_path / out).read_text().replace(f"]({out[:-3]}", "](OUT").splitlines()  # figures' names
        texts.append("\n".join(ln for ln in lines if not ln.startswith("Made by")))  # its date differs
    assert texts[0] == texts[1]
    assert "| 3 (1, 2, 4) |" in texts[0] and "boom" not in texts[0] and "Failed runs" not in texts[0], texts[0]


# ------------------------------------------------------------------------------------------ aggregation
ORPO = {"hopper-random-v2": [10.0, 20.0], "walker2d-random-v2": [50.0, 90.0]}  # seeds 1, 2
MOPO = {"hopper-random-v2": [5.0, 15.0], "walker2d-random-v2": [50.0, 60.0]}


@pytest.fixture()
def fixed_runs(tmp_path):
    runs = tmp_path / "runs"
    for algo, table, epochs in (("orpo", ORPO, 1000), ("mopo", MOPO, 3)):
        for env, values in table.items():
            for seed, v in enumerate(values, start=1):
                fake_run(runs, env, algo, seed, v, epochs=epochs)
    fake_run(runs, "hopper-random-v2", "orpo", 3, 99.0, epochs=1000)  # a seed orpo lacks on walker2d: not aggregated
    fake_run(runs, "halfcheetah-random-v2", "orpo", 1, 30.0, epochs=1000)  # only orpo has it: not aggregated
    fake_run(runs, "halfcheetah-jump", "orpo", 1, 4000.0, epochs=1000, kind="raw_return")  # raw returns: not aggregated
    return runs


def test_aggregate_equals_a_hand_computation(scores, fixed_runs):
    report = scores.aggregate(scores.collect(str(fixed_runs)), reps=500, seed=0, paper=scores.paper_scores())
    cell = report["cells"]["hopper-random-v2/orpo"]
    assert (
        cell["seeds"] == [1, 2, 3]
        and cell["mean"] == pytest.approx(43.0)
        and cell["std"] == pytest.approx(np.std([10, 20, 99]))
    )
    # 2 seeds a < b: a resampled mean is a, (a+b)/2 or b with probability 1/4, 1/2, 1/4, so the 95 % interval is [a, b]
    assert report["cells"]["walker2d-random-v2/mopo"]["ci95"] == pytest.approx([50.0, 60.0])
    assert report["tasks"] == ["hopper-random-v2", "walker2d-random-v2"]
    assert report["matrices"]["orpo"] == [[10.0, 50.0], [20.0, 90.0]]  # runs × datasets, seed 3 left out
    orpo, mopo = report["aggregate"]["orpo"], report["aggregate"]["mopo"]
    assert orpo["iqm"] == pytest.approx((20 + 50) / 2)  # sorted 10 20 50 90: the middle two
    assert orpo["mean"] == pytest.approx(((10 + 20) / 2 + (50 + 90) / 2) / 2)
    assert mopo["iqm"] == pytest.approx((15 + 50) / 2) and mopo["mean"] == pytest.approx((10 + 55) / 2)
    # stratified bootstrap: each dataset keeps its 2 runs; the lowest/highest resample (both datasets at their
    # worst/best run, probability 1/16 > 2.5 %) are the interval's ends: for the mean and the IQM alike
    assert orpo["mean_ci95"] == pytest.approx([(10 + 50) / 2, (20 + 90) / 2])
    assert orpo["iqm_ci95"] == pytest.approx([(10 + 50) / 2, (20 + 90) / 2])
    # P(orpo > mopo): hopper 10>5, 20>5, 20>15 of 4 pairs; walker2d 50=50 (half), 90>50, 90>60 of 4
    poi = report["probability_of_improvement"]["mopo"]
    assert poi["p"] == pytest.approx((3 / 4 + 2.5 / 4) / 2)
    assert 0 <= poi["ci95"][0] <= poi["p"] <= poi["ci95"][1] <= 1
    assert any("halfcheetah-random-v2" in n for n in report["notes"])
    # the markdown: the paper's Table 1 numbers beside ours, only the short runs marked †
    text = scores.markdown(report, {"date": "d", "host_cpu": "c", "commits": ["abc"], "reps": 500, "paper_source": "p"})
    row = next(line for line in text.splitlines() if line.startswith("| hopper-random-v2 | orpo |"))
    assert row.startswith("| hopper-random-v2 | orpo | 43.0 ± 39.8 | [") and "| 9.2 ± 1.4 (1) |" in row
    assert "| hopper-random-v2 | mopo | 10.0 ± 5.0 † | [5.0, 15.0] | 31.7 ± 0.3 (1) |" in text
    assert "| halfcheetah-jump | orpo | 4000.0 ± 0.0 | [4000.0, 4000.0] | 5218.0 ± 128.5 (jump) |" in text
    assert "| orpo | 2 × 2 | 35.0 |" in text and "| mopo | 2 × 2 | 32.5 † |" in text and "| mopo | 0.69 † |" in text


def test_runs_of_different_configurations_never_share_a_row(scores, tmp_path):
    """td3bc seeds 1-2 ran with one learning rate, seeds 3-4 (a changed --extra-for) with another: two rows."""
    runs = tmp_path / "runs"
    for seed, lr, where in (
        (1, 3e-4, {}),
        (2, 3e-4, {"cuda": True, "checkpoint_every": 7}),
        (3, 1e-3, {}),
        (4, 1e-3, {}),
    ):
        fake_run(runs, "hopper-random-v2", "td3bc", seed, 10.0 * seed, config={"actor_lr": lr, "alpha": 2.5, **where})
    fake_run(runs, "walker2d-random-v2", "td3bc", 1, 5.0, config={"actor_lr": 3e-4, "alpha": 2.5})  # one config there
    report = scores.aggregate(scores.collect(str(runs)), reps=200, seed=0, paper=scores.paper_scores())
    cells = {k: (c["seeds"], c["mean"]) for k, c in report["cells"].items()}
    assert cells == {  # seed 2 differs from seed 1 only in where and how it ran (cuda, checkpoints): the same row
        "hopper-random-v2/td3bc [actor_lr=0.0003]": ([1, 2], 15.0),
        "hopper-random-v2/td3bc [actor_lr=0.001]": ([3, 4], 35.0),
        "walker2d-random-v2/td3bc": ([1], 5.0),
    }
    assert report["cells"]["hopper-random-v2/td3bc [actor_lr=0.001]"]["paper"][:2] == ("12.7 ± 3.9", "1")
    assert any(
        "hopper-random-v2 td3bc: runs of 2 configurations" in n and "differs in actor_lr)" in n for n in report["notes"]
    )
    text = scores.markdown(report, {"date": "d", "host_cpu": "c", "commits": [], "reps": 200})
    assert "| hopper-random-v2 | td3bc [actor_lr=0.001] | 35.0 ± 5.0 † |" in text


@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_a_launch_refuses_a_cell_that_ran_with_other_flags(tmp_path, hopper_data_dir):
    runs = tmp_path / "runs"
    fake_run(runs, "hopper-random-v2", "td3bc", 1, 10.0, config={"actor_lr": 3e-4})
    (runs / "_grid").mkdir()
    (runs / "_grid" / "hopper-random-v2__td3bc__1.json").write_text(  # as the launch that started it left it
        json.dumps({"env": "hopper-random-v2", "exp_name": "td3bc", "seed": 1, "state": "finished", "flags": COMMON})
    )
    grid = ["--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "--runs-dir", str(runs), "--reps", "200"]
    changed = run_script(
        "benchmarks/scores.py",
        *grid,
        f"--extra={shlex.join(COMMON)}",
        "--extra-for",
        "td3bc=--actor-lr 1e-3",
        data_dir=hopper_data_dir[0],
        cwd=str(tmp_path),
    )
    lines = changed.stderr.strip().splitlines()
    assert changed.returncode == 2 and len(lines) == 1 and "$ " not in changed.stdout, changed.stdout + changed.stderr
    assert lines[0].startswith("error: td3bc hopper-random-v2 seed 1 ran with other flags in ") and (
        "(--actor-lr (not given) there, 0.001 now)" in lines[0]
    ), lines[0]
    # flags that change only where and how a run runs (device, checkpoints) are the same configuration
    same = run_script(
        "benchmarks/scores.py",
        *grid,
        f"--extra={shlex.join([*COMMON, '--cuda', '--checkpoint-every', '2'])}",
        data_dir=hopper_data_dir[0],
        cwd=str(tmp_path),
    )
    assert same.returncode == 0 and "skip td3bc hopper-random-v2 seed 1: finished" in same.stdout, same.stderr


def test_figures_name_the_short_epochs(scores, fixed_runs):
    report = scores.aggregate(scores.collect(str(fixed_runs)), reps=200, seed=0)
    summaries = [st["run"]["summary"] for st in scores.collect(str(fixed_runs)).values() if st["state"] == "finished"]
    for fig in (scores.plot_profile(report, 200, 0), scores.plot_curves(summaries, report)):
        assert "fewer epochs than the paper's 1000" in fig._suptitle.get_text()
    report["short"] = False
    assert "fewer epochs" not in scores.plot_profile(report, 200, 0)._suptitle.get_text()


def test_paper_scores_hold_the_papers_tables_and_the_presets_match_them(scores):
    rows = scores.paper_scores()
    counts = {t: sum(r["table"] == t for r in rows) for t in ("1", "4", "jump", "lambda")}
    assert counts == {"1": 12 * 10, "4": 12 * 8, "jump": 2 * 5, "lambda": 2 * 8} and len(rows) == sum(counts.values())
    assert len({(r["table"], r["dataset"], r["column"]) for r in rows}) == len(rows)  # one number per table cell
    cell = {(r["table"], r["dataset"], r["column"]): (r["mean"], r["std"]) for r in rows}
    # copied by hand from the paper's PDF
    assert cell[("1", "hopper-random-v2", "ORPO")] == (9.2, 1.4)
    assert cell[("1", "hopper-random-v2", "MOReL")] == (53.6, None)  # a number without ±
    assert cell[("4", "walker2d-medium-expert-v2", "MOPO (TD3+BC)")] == (95.3, 16.8)
    assert cell[("4", "halfcheetah-medium-replay-v2", "ORPO (SAC)")] == (57.5, 3.0)
    assert cell[("jump", "halfcheetah-jump", "TD3+BC")] == (-4733.3, 746.7)
    assert cell[("lambda", "walker2d-medium-replay-v2", "1")] == (8.6, None)
    for name, (algos, envs) in scores.PRESETS.items():
        table = [r for r in rows if r["table"] == name]
        assert sorted(algos) == sorted({r["algorithm"] for r in table} - {""}), name
        assert sorted(envs) == sorted({r["dataset"] for r in table}), name
    assert {r["algorithm"] for r in rows} - {""} <= set(scores.VARIANTS)


def test_the_lambda_o_table_counts_only_for_a_run_with_its_lambdas(scores):
    rows = scores.paper_scores()
    number = lambda env, **config: scores.paper_number(rows, env, "orpo", config)
    assert number("halfcheetah-random-v2", lambda_o=1.0, lambda_p=4.56) == ("41.6", "lambda", "halfcheetah-random-v2")
    assert number("walker2d-medium-replay-v2", lambda_o=-0.01, lambda_p=2.48)[:2] == ("91.3", "lambda")
    assert number("halfcheetah-random-v2", lambda_o=0.015, lambda_p=6.64)[:2] == ("40.8 ± 1.6", "1")  # the preset
    assert number("halfcheetah-random-v2", lambda_o=1.0, lambda_p=6.64)[:2] == ("40.8 ± 1.6", "1")
    assert number("local/halfcheetah-random") == ("40.8 ± 1.6", "1", "halfcheetah-random-v2")
    assert scores.paper_number(rows, "hopper-random-v2", "oroo", {})[:2] == ("14.8 ± 9.0", "4")  # not in Table 1


# The paper's LaTeX, parsed: only to check benchmarks/paper_scores.csv, which is what scores.py reads.
LABELS = {"1": "d4rl-part", "4": "table:all-results", "jump": "fig:generalize", "lambda": "table:lambda"}
COLUMNS = {
    "CQL": "cql",
    "COMBO": "combo",
    "TD3+BC": "td3bc",
    "MBPO": "mbpo",
    "MOPO": "mopo",
    "ORPO": "orpo",
    "ORPO (SAC)": "orpo_sac",
    "OROO": "oroo",
    "MOPO (TD3+BC)": "mopo_td3bc",
}
# the text under the λo table: "The values of λp for the two configurations were 4.56 and 2.48, respectively."
LAMBDA_ROWS = {"H-R": ("halfcheetah-random-v2", "4.56"), "W-M-R": ("walker2d-medium-replay-v2", "2.48")}


def _skip_group(text, i):
    """Index after the balanced {...} that starts at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    raise ValueError("unbalanced braces")


def _split_top(text, sep):
    """Split at `sep` outside braces (so \\shortstack{Medium\\\\Replay} stays one cell)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        if text[i] == "\\" and text[i + 1 : i + 2] in ("{", "}"):
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    parts.append(text[start:])
    return parts


def _clean(cell):
    cell = re.sub(r"\\color\[HTML\]\{\w+\}", "", cell)
    cell = re.sub(r"\\(cellcolor|colorbox)\{\w+\}", "", cell)
    return re.sub(r"\\multicolumn\{\d+\}\{[^}]*\}", "", cell)


def _numbers(cell):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", _clean(cell))]


def _method_name(header_cell):
    i = header_cell.index("\\makecell[c]") + len("\\makecell[c]")
    inner = header_cell[i + 1 : _skip_group(header_cell, i) - 1]
    parts = [p.strip() for p in inner.split("\\\\")]
    return [p for p in parts if p and not re.fullmatch(r"\(.*\)|\d{4}|NeurIPS|ICLR|ICML", p)][0]


def latex_rows(path):
    """Every number of the four tables, in paper_scores.csv's columns and order (row by row, left to right)."""
    tex = open(path).read()
    out = []

    def add(table, dataset, column, mean, std=None, algorithm=None, config=""):
        algorithm = COLUMNS.get(column, "") if algorithm is None else algorithm
        out.append((table, LABELS[table], dataset, column, algorithm, config, mean, std))

    for table, label in LABELS.items():
        end = tex.index(f"\\label{{{label}}}")
        begin = tex.rindex("\\begin{tabular}", 0, end)
        body_start = _skip_group(tex, begin + len("\\begin{tabular}"))
        body = tex[body_start : tex.index("\\end{tabular}", body_start)]
        env_start = max(tex.rfind("\\begin{table}", 0, end), tex.rfind("\\begin{table*}", 0, end))
        if table != "lambda":
            assert re.search(r"5 (?:different|random) seeds", tex[env_start : end + 40]), table
        body = re.sub(
            r"\\(toprule|midrule|bottomrule|hline)|\\specialrule\{[^}]*\}\{[^}]*\}\{[^}]*\}|(?<!\\)%[^\n]*", "", body
        )
        rows = [[c.strip() for c in _split_top(r, "&")] for r in _split_top(body, "\\\\") if r.strip()]
        if table in ("jump", "lambda"):  # a header row, then one row per dataset; plain cells
            head = rows[0][1:]
            for row in rows[1:]:
                for column, c in zip(head, row[1:], strict=True):
                    nums = _numbers(c)
                    if table == "jump":
                        add(table, row[0].lower(), column, nums[0], nums[1])
                    else:
                        dataset, lambda_p = LAMBDA_ROWS[row[0]]
                        add(table, dataset, column, nums[0], None, "orpo", f"lambda_o={column} lambda_p={lambda_p}")
            continue
        methods, group = None, ""
        for row in rows:
            if any("\\makecell" in c for c in row):
                methods = [_method_name(c) for c in row if "\\makecell" in c]
                continue
            env = re.sub(r"[^A-Za-z0-9]", "", _clean(row[1])).lower() if len(row) > 1 else ""
            if methods is None or env not in ("halfcheetah", "hopper", "walker2d"):
                continue
            if row[0]:
                g = re.sub(r"\\multirow\{\d+\}\{\*\}|\\rotatebox\[[^\]]*\]\{\d+\}|\\shortstack", "", row[0])
                group = re.sub(r"\s+", "-", re.sub(r"[{}]", "", g.replace("\\\\", " ")).strip()).lower()
            k = 2
            for method in methods:
                if "\\multicolumn{2}" in row[k]:  # a number without ±
                    add(table, f"{env}-{group}-v2", method, _numbers(row[k])[0])
                    k += 1
                else:
                    add(table, f"{env}-{group}-v2", method, _numbers(row[k])[0], _numbers(row[k + 1])[0])
                    k += 2
            assert k == len(row), row
    return out


@pytest.fixture()
def paper_tex():
    if not PAPER_TEX or not os.path.isfile(PAPER_TEX):
        pytest.skip(
            f"no LaTeX source of the paper at ORPO_PAPER_TEX={PAPER_TEX!r}: set it to PATH/orpo_aaai24.tex to check "
            "benchmarks/paper_scores.csv against it"
        )
    return PAPER_TEX


def test_paper_scores_csv_equals_the_latex(paper_tex):
    with open(os.path.join(ROOT, "benchmarks", "paper_scores.csv"), newline="") as f:
        csv_rows = [
            (
                *(r[k] for k in ("table", "label", "dataset", "column", "algorithm", "config")),
                float(r["mean"]),
                float(r["std"]) if r["std"] else None,
            )
            for r in csv.DictReader(f)
        ]
    tex_rows = latex_rows(paper_tex)
    assert len(tex_rows) == 242
    for i, (ours, theirs) in enumerate(zip(csv_rows, tex_rows)):
        assert ours == theirs, f"paper_scores.csv row {i + 2} is {ours}, the LaTeX says {theirs}"
    assert len(csv_rows) == len(tex_rows)


# ------------------------------------------------------------------------------------------ flags, status, dry run
@pytest.mark.parametrize(
    "argv,words",
    [
        (["--launcher", "pbs"], "--launcher"),  # tyro's error box names the flag
        (["--launcher", "slurm"], "needs Slurm's sbatch"),
        (["--partition", "gpu"], "--partition only applies to --launcher slurm"),
        (["--launcher", "slurm", "--time", "0", "--dry-run"], "--time 0"),
        (["--launcher", "slurm", "--mem", "-1", "--dry-run"], "--mem -1"),
        (["--launcher", "slurm", "--slurm-param", "constraint", "--dry-run"], "KEY=VALUE"),
        (["--algos", "orpo", "orpo"], "--algos lists a value twice"),
        (["--algos", "sac"], "unknown algorithm 'sac'"),
        (["--seeds"], "--seeds needs at least one value"),
        (["--gpus", "2"], "--gpus only applies"),
        (["--per-gpu", "0"], "--per-gpu 0: needs at least 1 (runs at once per GPU)"),
        (["--launcher", "slurm", "--per-gpu", "2", "--dry-run"], "--per-gpu only applies to --launcher local"),
        (["--extra=--seed 3"], "--extra may not hold --seed"),
        (["--algos", "mopo", "mopo_td3bc", "--extra=--exp-name x"], "both run as --exp-name x"),
        (["--tim", "5"], "--time"),  # tyro's error box: "Perhaps you meant"
        (["--reps", "abc"], "--reps"),
        (["--seeds", "1", "x"], "--seeds"),
        (["foo"], "foo"),
        (["--extra-for", "orpo=--epochs 2", "--extra-for", "mopo=--epochs 2"], "--extra-for given more than once"),
    ],
)
def test_bad_flags_give_one_line_errors(tmp_path, argv, words):
    result = run_script("benchmarks/scores.py", *argv, "--runs-dir", str(tmp_path / "runs"), cwd=str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") or "╭" in result.stderr  # one line, or tyro's box
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "argv,words",
    [
        # every cell's full flag list through its script's own parser and checks, and its dataset, in the
        # launcher before anything runs (these launched runs that failed, and left runs/_grid/ or a table behind)
        (
            ["--algos", "td3bc", "--seeds", "-1"],
            "td3bc hopper-medium-v2 seed -1: --seed -1: must lie in [0, 4294967296)",
        ),
        (
            ["--envs", "bogus-env", "--extra=--epochs 1"],
            "orpo bogus-env seed 1: unknown dataset 'bogus-env'; use one of",
        ),
        (["--algos", "td3bc", "--envs", "local/no-such-data"], "local/no-such-data.hdf5 does not exist; make it with"),
        (
            ["--extra=--epochs nan"],
            "orpo hopper-medium-v2 seed 1: algorithms/orpo.py refuses its flags",
        ),  # + tyro's box
        (
            ["--algos", "td3bc", "--extra-for", "td3bc=--epochs nan"],
            "td3bc hopper-medium-v2 seed 1: algorithms/td3bc.py",
        ),
        (["--algos", "td3bc", "--dry-run", "--extra=--actor-lr nan"], "--actor-lr nan: must lie in (0, inf)"),
        (
            ["--algos", "orpo", "td3bc", "--extra=--rollout-batch-size 64"],
            "td3bc hopper-medium-v2 seed 1: algorithms/td3bc",
        ),
        (["--extra=--real-ratio 0.9"], "--real-ratio 0.9 + --output-rollout-ratio 0.45 exceed 1"),  # with the preset's
        (["--extra=--help"], "--extra may not hold --help"),  # the script's parser would print its help and exit 0
    ],
)
def test_a_cell_its_script_would_refuse_is_one_line_before_anything_runs(tmp_path, hopper_data_dir, argv, words):
    """The default grid is hopper-medium-v2, seeds 1 2 3: checked without its file (a run downloads it)."""
    out = ["--runs-dir", "runs", "--out", "out/scores.md"]
    result = run_script("benchmarks/scores.py", *argv, *out, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and lines[-1].startswith("error: "), result.stdout + result.stderr
    assert words in lines[-1] and (len(lines) == 1 or "╭" in result.stderr), lines  # one line, or after tyro's box
    assert "$ " not in result.stdout and os.listdir(tmp_path) == [], os.listdir(tmp_path)  # no runs/, no table


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--out", "a_file/scores.md"], "--out a_file/scores.md: {tmp}/a_file is not a folder"),
        (["--out", "a_file/sub/scores.md"], "--out a_file/sub/scores.md: {tmp}/a_file is not a folder"),
        (["--out", "."], "--out .: is a folder, not a file"),
        (["--runs-dir", "a_file"], "--runs-dir a_file: is a file, not a folder"),
        (["--runs-dir", "a_file/runs"], "--runs-dir a_file/runs: {tmp}/a_file is not a folder"),
        (["--table-only", "--out", "a_file/scores.md"], "--out a_file/scores.md: {tmp}/a_file is not a folder"),
    ],
)
def test_an_unwritable_output_is_refused_before_anything_runs(tmp_path, hopper_data_dir, argv, words):
    (tmp_path / "a_file").write_text("")
    grid = ["--algos", "td3bc", "--envs", "local/no-such-data", "--seeds", "1", f"--extra={shlex.join(COMMON)}"]
    if "--runs-dir" not in argv:
        argv = [*argv, "--runs-dir", "runs"]
    result = run_script("benchmarks/scores.py", *grid, *argv, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "$ " not in result.stdout, result.stdout + result.stderr
    assert lines[0].startswith(f"error: {words.format(tmp=tmp_path)}"), lines[0]
    assert lines[0].endswith("(give a path you can write to)"), lines[0]
    assert not (tmp_path / "runs").exists()


def test_slurm_dry_run_prints_the_array_and_starts_nothing(tmp_path):
    result = run_script(
        "benchmarks/scores.py",
        "--paper-table",
        "1",
        "--launcher",
        "slurm",
        "--dry-run",
        "--partition",
        "gpu",
        "--time",
        "600",
        "--cpus",
        "8",
        "--mem",
        "48",
        "--runs-dir",
        str(tmp_path / "runs"),
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    for line in (
        "#SBATCH --array=0-299%64",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=600",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=48GB",
        "#SBATCH --signal=USR2@180",
    ):
        assert line in result.stdout, line
    assert (
        result.stdout.count(": start: ") == 5 * 12 * 5  # Table 1's CQL, TD3+BC, MOPO, COMBO, ORPO
        and "mopo walker2d-medium-expert-v2 seed 5: start:" in result.stdout
    )
    assert not (tmp_path / "runs").exists()


def test_status_counts_each_state(scores, tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs, "hopper-random-v2", "orpo", 1, 10.0)  # finished
    fake_run(
        runs, "hopper-random-v2", "orpo", 2, None, finished=False, status="failed", error="error: epoch 4: q is NaN"
    )
    fake_run(runs, "hopper-random-v2", "orpo", 3, None, status="none")  # started, no summary, its launcher is gone
    fake_run(runs, "hopper-random-v2", "orpo", 4, None, status="none")  # started, its launcher is alive (this test)
    grid = runs / "_grid"
    for seed, rec in (
        (3, {"state": "running", "launcher": "local", "pid": 2**22 + 17}),
        (4, {"state": "running", "launcher": "local", "pid": os.getpid()}),
        (5, {"state": "queued", "launcher": "slurm", "job_id": "123_4"}),
    ):
        grid.mkdir(parents=True, exist_ok=True)
        (grid / f"hopper-random-v2__orpo__{seed}.json").write_text(
            json.dumps(
                {"env": "hopper-random-v2", "exp_name": "orpo", "seed": seed, "host": socket.gethostname(), **rec}
            )
        )
    result = run_script("benchmarks/scores.py", "--status", "--runs-dir", str(runs), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "5 runs: 1 queued, 1 running, 1 finished, 1 failed, 1 stopped, 0 not started" in result.stdout, result.stdout
    assert "error: epoch 4: q is NaN" in result.stdout
    grid_only = run_script(
        "benchmarks/scores.py",
        "--status",
        "--runs-dir",
        str(runs),
        "--algos",
        "orpo",
        "--envs",
        "hopper-random-v2",
        "--seeds",
        "1",
        "6",
        cwd=str(tmp_path),
    )
    assert "2 runs: 0 queued, 0 running, 1 finished, 0 failed, 0 stopped, 1 not started" in grid_only.stdout, (
        grid_only.stdout
    )


def hold_lock(run_dir):
    """Hold RUN_DIR/run.lock as a run does (exclusive flock for its whole life, its pid inside); close to let go."""
    f = open(run_dir / "run.lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def test_a_run_holding_its_lock_is_running_and_never_started_twice(scores, tmp_path, hopper_data_dir):
    runs = tmp_path / "runs"
    stopped = fake_run(runs, "hopper-random-v2", "td3bc", 1, None, status="none")  # no summary, no launcher record
    failed = fake_run(runs, "hopper-random-v2", "td3bc", 2, None, finished=False, status="failed", error="error: x")
    grid = ["--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "2", "--runs-dir", str(runs)]
    launch = [*grid, "--out", str(tmp_path / "scores.md"), "--retry-failed", f"--extra={shlex.join(COMMON)}"]
    locks = [hold_lock(stopped), hold_lock(failed)]  # their runs are alive, e.g. left by a launcher on another node
    try:
        status = run_script("benchmarks/scores.py", "--status", *grid, cwd=str(tmp_path))
        assert "2 runs: 0 queued, 2 running, 0 finished, 0 failed, 0 stopped" in status.stdout, status.stdout
        assert status.stdout.count(f"run.lock is held by pid {os.getpid()})") == 2, status.stdout
        result = run_script("benchmarks/scores.py", *launch, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
        assert "$ " not in result.stdout and result.returncode == 1, result.stdout + result.stderr
        for seed, run_dir in ((1, stopped), (2, failed)):
            line = f"skip td3bc hopper-random-v2 seed {seed}: running ({run_dir}/run.lock is held by pid {os.getpid()})"
            assert line in result.stdout.splitlines(), result.stdout
        # a job whose run was started elsewhere after the launch looked (the job checks again before it starts one)
        job = scores.GridJob(scores.Cell("td3bc", "td3bc", (), "td3bc", "hopper-random-v2", 1), str(runs), "local")
        assert job()["state"] == "running" and not (runs / "_grid" / "hopper-random-v2__td3bc__1.json").exists()
    finally:
        for f in locks:
            f.close()
    status = run_script("benchmarks/scores.py", "--status", *grid, cwd=str(tmp_path))  # the runs ended
    assert "2 runs: 0 queued, 0 running, 0 finished, 1 failed, 1 stopped" in status.stdout, status.stdout


def test_a_damaged_cache_entry_fails_its_cell_in_one_line(scores, hopper_data_dir, tmp_path, monkeypatch):
    """A truncated entry of the ensemble cache once killed the job with a traceback in its log while the launcher
    called the cell "not started" (the same command would resume it, and fail the same way): the cell fails with the
    line naming the entry and what to do, and starts no run."""
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    cell = scores.Cell("orpo", "orpo", tuple(MODEL), "orpo", "hopper-random-v2", 1, str(cache))
    job = scores.GridJob(cell, str(runs), "local")
    entry = scores.toolbox.ensemble_entry(str(cache), job._command(None))
    cache.mkdir()
    open(entry, "wb").write(b"PK\x03\x04 cut here")
    result = job()
    assert result["state"] == "failed" and result["error"].startswith(f"{entry}: a damaged or foreign ensemble"), result
    assert result["error"].endswith("delete it (the next run that needs it refits it)")
    record = json.loads((runs / "_grid" / f"{cell.id}.json").read_text())
    assert record["state"] == "failed" and record["error"] == result["error"]
    assert not [p for p in runs.iterdir() if p.name != "_grid"]  # no run was started


def test_a_killed_launcher_takes_its_run_with_it(tmp_path):
    """SIGKILL to the launcher (a crash, the out-of-memory killer): its run must not go on writing as an orphan."""
    launcher = (
        "import sys; sys.path.insert(0, sys.argv[1]); from conftest import load_module; "
        "s = load_module('benchmarks/scores.py', 'scores'); "
        "cell = s.Cell('td3bc', 'td3bc', (), 'td3bc', 'hopper-random-v2', 1); "
        "s.GridJob(cell, sys.argv[2], 'local')._run_child([sys.executable, '-c', 'import time; time.sleep(60)'])"
    )
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-c", launcher, os.path.join(ROOT, "tests"), str(runs)], cwd=str(tmp_path))
    record, child = runs / "_grid" / "hopper-random-v2__td3bc__1.json", None
    try:
        t0 = time.time()
        while child is None and time.time() - t0 < 60:
            child = json.loads(record.read_text()).get("child_pid") if record.exists() else None
            time.sleep(0.05)
        assert child, "the launcher never started its child"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_gone(child), "the launcher's child outlived it"
    finally:
        proc.kill()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


# ------------------------------------------------------------------------------------------ --per-gpu K
class FakeExecutor:
    """submitit's LocalExecutor for run_local's bookkeeping: each submitted job holds its slot for a moment in a thread
    (counting who runs at once) instead of running; a signal to its controller is recorded and ends it."""

    def __init__(self, on_run=None):
        self.jobs, self.now, self.most, self.most_on, self.lock, self.on_run = [], [], 0, {}, threading.Lock(), on_run

    def submit(self, job):
        executor, handle = self, types.SimpleNamespace(job=job, signals=[], paths=types.SimpleNamespace(stdout="/none"))
        handle._process = types.SimpleNamespace(send_signal=handle.signals.append)
        self.jobs.append(handle)
        gpu = job.env["CUDA_VISIBLE_DEVICES"]

        def hold():
            with executor.lock:
                executor.now.append(gpu)
                executor.most = max(executor.most, len(executor.now))
                executor.most_on[gpu] = max(executor.most_on.get(gpu, 0), executor.now.count(gpu))
            if executor.on_run:
                executor.on_run(executor, handle)
            t0 = time.time()
            while time.time() - t0 < 0.5 and not handle.signals:
                time.sleep(0.01)
            time.sleep(0.6 * (job.cell.seed % 2 == 0))  # slots free one after another
            with executor.lock:
                executor.now.remove(gpu)

        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        handle.done = lambda: not thread.is_alive()
        handle.result = lambda: {"cell": job.cell.label, "state": "stopped" if handle.signals else "finished",
                                 "run_dir": None, "error": None}  # fmt: skip
        return handle


def fake_launch(scores, monkeypatch, tmp_path, gpus, k, n, on_run=None):
    monkeypatch.setattr(scores, "local_gpus", lambda: gpus)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cells = [scores.Cell("td3bc", "td3bc", (), "td3bc", "hopper-random-v2", seed) for seed in range(1, n + 1)]
    executor = FakeExecutor(on_run)
    interrupted = scores.run_local(scores.Args(per_gpu=k, runs_dir=str(tmp_path)), cells, executor)
    return executor, cells, interrupted


@pytest.mark.parametrize("gpus, k", [(["0"], 3), (["5", "6"], 2), ([None], 2)], ids=["1 GPU", "2 GPUs", "no GPU"])
def test_per_gpu_runs_k_cells_at_once_on_each_gpu(scores, monkeypatch, tmp_path, gpus, k):
    """--per-gpu K: K cells at once on each GPU (each run told its GPU by CUDA_VISIBLE_DEVICES; on a machine without
    one, K at once on the CPU), every cell once, OMP_NUM_THREADS = host cores / runs at once, output to the logs only;
    each job watches the launcher (its run stops if the launcher dies)."""
    executor, cells, interrupted = fake_launch(scores, monkeypatch, tmp_path, gpus, k, n=7)
    assert interrupted is None
    jobs = [h.job for h in executor.jobs]
    assert sorted(j.cell.seed for j in jobs) == [c.seed for c in cells]  # each cell once
    assert executor.most == k * len(gpus)  # the first wave fills every slot
    assert executor.most_on == {gpu: k for gpu in gpus}  # K on each GPU, never more
    assert {j.env["OMP_NUM_THREADS"] for j in jobs} == {max(1, (os.cpu_count() or 1) // (k * len(gpus)))}
    assert not any(j.echo for j in jobs) and {j.watch for j in jobs} == {os.getpid()}
    assert {j.launcher for j in jobs} == {"local"} and all(j.local for j in jobs)


def test_one_at_a_time_without_per_gpu_each_run_sees_the_launchers_gpus(scores, monkeypatch, tmp_path):
    """The default local launch: one run after another, its output shown, CUDA_VISIBLE_DEVICES as the launcher's
    (unset stays unset), OMP_NUM_THREADS left alone."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cells = [scores.Cell("td3bc", "td3bc", (), "td3bc", "hopper-random-v2", seed) for seed in (1, 2)]
    executor = FakeExecutor()
    assert scores.run_local(scores.Args(runs_dir=str(tmp_path)), cells, executor) is None
    assert executor.most == 1 and [h.job.echo for h in executor.jobs] == [True, True]
    assert [h.job.env for h in executor.jobs] == [{"CUDA_VISIBLE_DEVICES": None, "OMP_NUM_THREADS": None}] * 2


def test_sigterm_stops_every_local_job_and_starts_no_more(scores, monkeypatch, tmp_path):
    """SIGTERM to a local launcher goes to each running job's controller once (submitit forwards it to the job, the
    job to its run, which saves), and no further cell starts; run_local says which signal stopped it."""

    def on_run(executor, handle):
        if handle.job.cell.seed == 1:
            t0 = time.time()
            # both slots taken; a loaded machine may start the second job seconds later (a 10 s cap failed once
            # under a 2-thread fit and the suite at nice 10, the second job not yet started)
            while len(executor.now) < 2 and time.time() - t0 < 120:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)  # handled in the main thread, as a real signal is

    previous = signal.signal(signal.SIGTERM, scores.toolbox._stop)  # scores.cli's handler: SIGTERM stops main
    try:
        executor, cells, interrupted = fake_launch(scores, monkeypatch, tmp_path, ["0"], 2, n=6, on_run=on_run)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert interrupted == signal.SIGTERM
    assert len(executor.jobs) == 2  # the first wave only
    assert [h.signals for h in executor.jobs] == [[signal.SIGTERM]] * 2


@pytest.mark.slow  # the slow tier: a launcher's whole grid end to end
def test_per_gpu_runs_its_cells_at_once_each_told_its_gpu(tmp_path, hopper_data_dir):
    """End to end: two td3bc cells with --per-gpu 2 on a launcher that sees GPUs 7 and 8 (ids a CPU machine ignores)
    run at the same time, each told its own GPU by CUDA_VISIBLE_DEVICES (the first cells go to every GPU in turn),
    and the launch tabulates both."""
    runs, out = tmp_path / "runs", tmp_path / "scores.md"
    cmd = [SCRIPT, "--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "2", "--per-gpu", "2"]
    cmd += ["--runs-dir", str(runs), "--out", str(out), "--reps", "200", f"--extra={shlex.join(COMMON)}"]
    env = dict(script_env(hopper_data_dir[0]), CUDA_VISIBLE_DEVICES="7,8")
    proc = subprocess.Popen([sys.executable, *cmd], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, text=True)
    together, told = False, set()
    try:
        while proc.poll() is None and not together:
            pids = []
            for seed in (1, 2):
                record = runs / "_grid" / f"hopper-random-v2__td3bc__{seed}.json"
                with contextlib.suppress(OSError, ValueError):
                    pids.append(json.loads(record.read_text()).get("child_pid"))
            live = {}
            for pid in filter(None, pids):
                with contextlib.suppress(OSError):
                    environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                    live[pid] = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
            told |= {e.get("CUDA_VISIBLE_DEVICES") for e in live.values()}
            together = len(live) == 2
            time.sleep(0.05)
        stdout, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert together, "the two runs never ran at the same time"
    assert told == {"7", "8"}, told  # each run its own GPU, not the launcher's "7,8"
    assert proc.returncode == 0, stdout[-2000:]
    assert "$ CUDA_VISIBLE_DEVICES=7 " in stdout and "$ CUDA_VISIBLE_DEVICES=8 " in stdout, stdout[-2000:]
    assert "| 2 (1, 2) |" in out.read_text()


def test_cuda_graphs_alone_does_not_make_another_configuration(scores):
    """--cuda-graphs changed its default (off -> on): a run started before, relaunched or tabled after, is the same
    configuration (graphs replay the eager steps' kernels; a CPU ignores the flag), as --cuda and --threads are."""
    before = {"lambda_p": 1.0, "cuda_graphs": False, "cuda": True, "threads": 1}
    after = {"lambda_p": 1.0, "cuda_graphs": True, "cuda": False, "threads": 2}
    assert scores.run_config(before) == scores.run_config(after)
    assert scores.run_config(before) != scores.run_config({**after, "lambda_p": 2.0})
