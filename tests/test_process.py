"""Where the process is the point: a run stopped by SIGINT, SIGTERM or SIGKILL (in its epochs, in its ensemble fit,
while its evaluation env is made, a second signal while its checkpoint is written) exits with 128 + the signal and no
traceback, loses at most an epoch, and resumes to the uninterrupted run's numbers."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, TINY

SMALL = [*TINY, "--checkpoint-every", "1", "--epochs", "4", "--dynamics-max-epochs", "4", "--dynamics-batch-size", "16"]


def rows(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [{k: v for k, v in r.items() if "seconds" not in k and k != "charts/SPS"} for r in csv.DictReader(f)]


def start(runs, data_dir, *flags, driver=None):
    """orpo.py as a user starts it (or under `driver`, a Python snippet that patches a library first)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", D4RL_DATASET_DIR=data_dir)
    argv = [f"{ROOT}/algorithms/orpo.py", "--env", "hopper-random-v2", *flags, "--runs-dir", str(runs)]
    cmd = [sys.executable, *(["-c", driver] if driver else []), *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_row(runs, epoch, proc, timeout=300):
    """Poll metrics.csv until it holds `epoch`; returns the run dir."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        for d in os.listdir(runs) if os.path.isdir(runs) else []:
            path = os.path.join(runs, d, "metrics.csv")
            if os.path.isfile(path) and any(r["epoch"] == str(epoch) for r in rows(os.path.join(runs, d))):
                return os.path.join(runs, d)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise TimeoutError


def wait_for(proc, text):
    """Read the process's stdout until a line holds `text`."""
    while text not in proc.stdout.readline():
        assert proc.poll() is None, proc.communicate()


def resume(run_dir, data_dir):
    env = dict(os.environ, OMP_NUM_THREADS="1", D4RL_DATASET_DIR=data_dir)
    argv = [sys.executable, f"{ROOT}/algorithms/orpo.py", "--resume", run_dir, "--no-cuda"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def straight(hopper_data_dir, tmp_path_factory):
    """The uninterrupted 4-epoch run every stopped one must end equal to."""
    runs = tmp_path_factory.mktemp("straight")
    proc = start(runs, hopper_data_dir[0], *SMALL)
    err = proc.communicate(timeout=600)[1]
    assert proc.returncode == 0, err[-2000:]
    (run,) = os.listdir(runs)
    return os.path.join(runs, run)


def test_sigint_and_sigkill_resume_to_the_uninterrupted_metrics(straight, hopper_data_dir, tmp_path):
    data = hopper_data_dir[0]
    interrupted, killed = start(tmp_path / "int", data, *SMALL), start(tmp_path / "kill", data, *SMALL)
    # Ctrl-C after epoch 1: the epoch finishes, a checkpoint is written, exit 130, the message says how to continue
    run_int = wait_for_row(tmp_path / "int", 1, interrupted)
    interrupted.send_signal(signal.SIGINT)
    # SIGKILL in epoch >= 2: no handler runs; the last checkpoint is what survives
    run_kill = wait_for_row(tmp_path / "kill", 2, killed)
    killed.kill()
    killed.communicate()
    out, err = interrupted.communicate(timeout=300)
    assert interrupted.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "interrupted by SIGINT" in err.splitlines()[-1] and f"--resume {run_int}" in err.splitlines()[-1]
    assert json.load(open(os.path.join(run_int, "summary.json")))["status"] == "interrupted"
    for run in (run_int, run_kill):
        done = resume(run, data)
        assert done.returncode == 0 and "resumed" in done.stdout, done.stderr[-2000:]
        summary = json.load(open(os.path.join(run, "summary.json")))
        assert summary["status"] == "finished" and rows(run) == rows(straight)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_the_fit_stops_at_once_and_leaves_nothing_to_resume(signum, hopper_data_dir, tmp_path):
    """The fit is the run's first step and writes its dynamics.pt when done: stopped part-way, there is no run
    directory, and the same command starts it again (the lab's launcher keeps a long fit's part-way state)."""
    proc = start(tmp_path, hopper_data_dir[0], *SMALL)
    seen = ""
    while seen.count("best_member_holdout_mse") < 2:  # the fit's second epoch ends
        seen += proc.stderr.read(1)
        assert proc.poll() is None, seen[-2000:]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == f"interrupted by {signal.Signals(signum).name}"
    assert not os.path.exists(tmp_path) or os.listdir(tmp_path) == []


def test_a_launched_run_killed_in_its_fit_goes_on_from_the_last_epoch_to_the_same_numbers(hopper_data_dir, tmp_path):
    """SIGKILL in the lab launcher's ensemble fit (no handler runs): the state of the last finished epoch is whole on
    disk (RUNS_DIR/.fit-*.pt), and the same command goes on from it to the numbers of a run never stopped."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", D4RL_DATASET_DIR=hopper_data_dir[0])
    flags = [*TINY, "--dynamics-max-epochs", "8", "--dynamics-batch-size", "16"]

    def launch(runs):
        cmd = [sys.executable, f"{ROOT}/benchmarks/launch.py", f"{ROOT}/algorithms/orpo.py", "--env",
               "hopper-random-v2", *flags, "--runs-dir", str(runs)]  # fmt: skip
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    whole = launch(tmp_path / "whole")
    proc, seen = launch(tmp_path / "cut"), ""
    while seen.count("best_member_holdout_mse") < 3:  # the fit's third epoch ends (its state saved before)
        seen += proc.stderr.read(1)
        assert proc.poll() is None, seen[-2000:]
    proc.kill()
    proc.wait()
    assert whole.wait(timeout=300) == 0, whole.stderr.read()[-2000:]
    part, lock = sorted(os.listdir(tmp_path / "cut"))  # no run directory yet: the run starts after its fit
    assert (
        part.startswith(".fit-")
        and lock == part + ".lock"
        and torch.load(tmp_path / "cut" / part, weights_only=True)["epoch"] >= 2
    )
    again = launch(tmp_path / "cut")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "the fit goes on after its epoch" in out, err[-2000:]
    (run,) = os.listdir(tmp_path / "cut")  # the part-way state went with the run's dynamics.pt
    assert rows(tmp_path / "cut" / run) == rows(tmp_path / "whole" / os.listdir(tmp_path / "whole")[0])


def test_a_run_killed_right_after_the_fit_resumes_to_the_same_numbers(straight, hopper_data_dir, tmp_path):
    """A kill before the first checkpoint leaves config.json and dynamics.pt: --resume reuses the ensemble with the RNG
    state as it was after the fit (or, the ensemble gone too, fits it again) and ends with the uninterrupted run's
    metrics."""
    for keep_dynamics in (False, True):
        copy = tmp_path / f"copy_{keep_dynamics}"
        copy.mkdir()
        shutil.copy(os.path.join(straight, "config.json"), copy)
        if keep_dynamics:
            shutil.copy(os.path.join(straight, "dynamics.pt"), copy)
        done = resume(str(copy), hopper_data_dir[0])
        assert done.returncode == 0, done.stderr[-2000:]
        assert ("elites' mean holdout MSE" in done.stdout) != keep_dynamics  # fitted again, or not
        assert rows(copy) == rows(straight)


SLOW_SAVE = """import runpy, sys, time
sys.path.insert(0, sys.argv[1].rsplit('/', 1)[0])
import plumbing
real = plumbing.save
def slow(obj, path):  # a checkpoint that takes a second to write
    if path.endswith('checkpoint.pt') and obj['epoch'] >= 2:
        print('saving', flush=True)
        time.sleep(1)
    real(obj, path)
plumbing.save = slow
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_a_second_signal_while_the_checkpoint_is_written_stops_at_once_and_keeps_the_last_one(straight,
                                                                                               hopper_data_dir, tmp_path):  # fmt: skip
    """SIGINT, then SIGTERM 0.2 s later while the checkpoint is written (#71 item 9: the process then died by the
    second signal, exit -15): exit 143 in one line, the previous checkpoint whole, no .tmp, and the resume equal."""
    proc = start(tmp_path, hopper_data_dir[0], *SMALL, driver=SLOW_SAVE)
    wait_for(proc, "saving")  # epoch 2's checkpoint is being written
    run = os.path.join(tmp_path, os.listdir(tmp_path)[0])
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # the second, while the file is still being written
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted by SIGTERM"
    assert torch.load(os.path.join(run, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert not [f for f in os.listdir(run) if f.endswith(".tmp")]
    done = resume(run, hopper_data_dir[0])
    assert done.returncode == 0 and "resumed at epoch 1" in done.stdout and rows(run) == rows(straight)


SLOW_ENV = """import runpy, sys, time
import gymnasium as gym
sys.path.insert(0, sys.argv[1].rsplit('/', 1)[0])
real = gym.make
def make(*a, **k):  # MuJoCo imported lazily: a signal lands inside gym, which turns it into an error of its own
    try:
        print('making', flush=True)
        time.sleep(5)
    except KeyboardInterrupt:
        raise gym.error.DependencyNotInstalled('MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`')
    return real(*a, **k)
gym.make = make
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_sigterm_while_the_evaluation_env_is_made_is_an_interruption(hopper_data_dir, tmp_path):
    """#71 item 9: reported as 'cannot make evaluation env ... MuJoCo is not installed', exit 1, before."""
    proc = start(tmp_path, hopper_data_dir[0], *SMALL, driver=SLOW_ENV)
    wait_for(proc, "making")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "interrupted by SIGTERM", err[-2000:]
