"""Runs survive: a signal or a kill loses at most an epoch and resumes to the same numbers, a run that turns
non-finite stops and keeps its last good checkpoint, bad flags and bad files are one line each."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import tyro
from conftest import ROOT, TINY, run_script
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

SMALL = [*TINY, "--checkpoint-every", "1"]
MODEL_ONLY = {
    "--rollout-batch-size": 1,
    "--dynamics-max-epochs": 1,
    "--dynamics-hidden-dims": 2,
    "--num-ensemble": 1,
    "--num-elites": 1,
}


def small(script):
    """SMALL without the model flags for td3bc.py, which has no model."""
    if script != "td3bc":
        return SMALL
    out, skip = [], 0
    for a in SMALL:
        if skip:
            skip -= 1
        elif a in MODEL_ONLY:
            skip = MODEL_ONLY[a]
        else:
            out.append(a)
    return out


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def assert_same_metrics(a, b):
    """Same seed on CPU: every metric but the timings equal to the last digit."""
    ra, rb = rows(a), rows(b)
    assert [r["epoch"] for r in ra] == [r["epoch"] for r in rb]
    for x, y in zip(ra, rb):
        for key in x:
            if "seconds" not in key and "SPS" not in key:
                assert x[key] == y[key], (x["epoch"], key)


def start(script, runs, data_dir, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", D4RL_DATASET_DIR=data_dir)
    return subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, "algorithms", f"{script}.py"),
            "--env",
            "hopper-random-v2",
            *small(script),
            "--runs-dir",
            str(runs),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_row(runs, epoch, proc, timeout=240):
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


# orpo.py in the default tier; the same plumbing in mopo.py and td3bc.py in the slow one
SLOW = pytest.mark.slow


@pytest.mark.parametrize("script", ["orpo", pytest.param("mopo", marks=SLOW), pytest.param("td3bc", marks=SLOW)])
def test_sigint_and_sigkill_resume_to_the_uninterrupted_metrics(script, hopper_data_dir, tmp_path):
    data_dir = hopper_data_dir[0]
    epochs = ["--epochs", "4"]
    straight = start(script, tmp_path / "straight", data_dir, *epochs)
    # Ctrl-C after epoch 1: the current epoch finishes, a checkpoint is written, exit 130, and the message names the run dir
    interrupted = start(script, tmp_path / "sigint", data_dir, *epochs)
    run_int = wait_for_row(tmp_path / "sigint", 1, interrupted)
    interrupted.send_signal(signal.SIGINT)
    out, err = interrupted.communicate(timeout=240)
    assert interrupted.returncode == 130, err[-2000:]
    assert f"--resume {run_int}" in err.strip().splitlines()[-1] and "Traceback" not in err
    summary = json.loads(open(os.path.join(run_int, "summary.json")).read())
    assert summary["status"] == "interrupted" and not summary["finished"]
    stopped_at = int(rows(run_int)[-1]["epoch"])
    assert 1 <= stopped_at < 4  # the epoch the signal arrived in (or the one whose checkpoint it interrupted)
    # SIGKILL in epoch ≥ 2: no handler runs; the epoch-1 (or later) checkpoint is what survives
    killed = start(script, tmp_path / "sigkill", data_dir, *epochs)
    run_kill = wait_for_row(tmp_path / "sigkill", 2, killed)
    killed.kill()
    killed.communicate()
    straight.communicate(timeout=240)
    assert straight.returncode == 0
    (run_straight,) = [os.path.join(tmp_path / "straight", d) for d in os.listdir(tmp_path / "straight")]
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda d: run_script(
                    f"algorithms/{script}.py", "--resume", d, "--no-cuda", data_dir=data_dir, cwd=str(tmp_path)
                ),
                [run_int, run_kill],
            )
        )
    for result, run_dir in zip(results, [run_int, run_kill]):
        assert result.returncode == 0 and "resumed" in result.stdout, result.stderr[-2000:]
        assert json.loads(open(os.path.join(run_dir, "summary.json")).read())["status"] == "finished"
        assert_same_metrics(run_straight, run_dir)


def test_resume_of_a_run_killed_during_or_right_after_the_fit(hopper_data_dir, tmp_path):
    """A kill before the first checkpoint leaves config.json (and maybe dynamics.pt): --resume refits, or reuses the
    ensemble with the RNG as it was after the fit, and ends with the uninterrupted run's metrics."""
    data_dir = hopper_data_dir[0]
    done = run_script("algorithms/orpo.py", "--env", "hopper-random-v2", *SMALL, data_dir=data_dir, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    (straight,) = (tmp_path / "runs").iterdir()
    for keep_dynamics in (False, True):
        copy = tmp_path / f"copy_{keep_dynamics}"
        copy.mkdir()
        (copy / "config.json").write_text((straight / "config.json").read_text())
        if keep_dynamics:
            (copy / "dynamics.pt").write_bytes((straight / "dynamics.pt").read_bytes())
        result = run_script(
            "algorithms/orpo.py", "--resume", str(copy), "--no-cuda", data_dir=data_dir, cwd=str(tmp_path)
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert ("fitting the ensemble from its last saved state" in result.stdout) != keep_dynamics
        assert "starts again from epoch 0" in result.stdout
        assert_same_metrics(straight, copy)


def test_a_run_that_turns_nonfinite_stops_and_keeps_its_last_good_checkpoint(
    orpo, hopper_data_dir, tmp_path, monkeypatch
):
    original = plumbing.Run.means

    def poison_in_epoch_2(self):
        if self.epoch == 2:
            with torch.no_grad():
                next(self.parts["output_policy"].critic.parameters()).fill_(float("nan"))
        return original(self)

    monkeypatch.setattr(plumbing.Run, "means", poison_in_epoch_2)
    args = tyro.cli(
        orpo.Args,
        args=[
            *SMALL,
            "--epochs",
            "3",
            "--env",
            "hopper-random-v2",
            "--data-dir",
            hopper_data_dir[0],
            "--runs-dir",
            str(tmp_path),
        ],
    )
    with pytest.raises(plumbing.RunEnded, match=r"epoch 2: output_policy\.critic\.layers\.0\.weight is NaN") as ended:
        orpo.main(args)
    assert ended.value.code == 1
    (run_dir,) = tmp_path.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and not summary["finished"] and "epoch 2" in summary["error"]
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in ckpt["parts"]["output_policy"].values() if isinstance(v, torch.Tensor))


def test_nonfinite_losses_exit_nonzero_with_one_line(hopper_data_dir, tmp_path):
    result = run_script(
        "algorithms/orpo.py",
        "--env",
        "hopper-random-v2",
        *SMALL,
        "--lambda-p",
        "1e38",
        data_dir=hopper_data_dir[0],
        cwd=str(tmp_path),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: training turned non-finite in epoch 1: losses/") and "NaN or infinite" in last, last
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert not (run_dir / "checkpoint.pt").exists()


BAD_FLAGS = [
    "--batch-size",
    "0",
    "--epochs",
    "-1",
    "--gamma",
    "1.5",
    "--eval-episodes",
    "0",
    "--checkpoint-every",
    "0",
    "--eval-every",
    "0",
    "--checkpoint-minutes",
    "nan",
]
MODEL_FLAGS = [
    "--rollout-length",
    "0",
    "--num-elites",
    "9",
    "--num-ensemble",
    "3",
    "--lambda-p",
    "nan",
    "--dynamics-holdout-ratio",
    "0",
]

ORPO_FLAGS = [
    "--rollout-length-o",
    "0",
    "--real-ratio-o",
    "1.5",
    "--output-rollout-ratio",
    "-0.1",
    "--cvae-steps",
    "-1",
]


@pytest.mark.parametrize("script", ["orpo", "mopo", "oroo", "mbpo", "td3bc"])
def test_bad_flags_are_one_line_each_exit_2_and_leave_nothing(script, tmp_path):
    flags = BAD_FLAGS + (MODEL_FLAGS if script != "td3bc" else []) + (ORPO_FLAGS if script == "orpo" else [])
    if script in ("mbpo", "oroo", "td3bc"):
        flags = [f for i, f in enumerate(flags) if "--lambda-p" not in flags[max(0, i - 1) : i + 1]]
    result = run_script(f"algorithms/{script}.py", "--env", "nope-v9", *flags, cwd=str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert all(line.startswith("error: --") for line in lines), lines
    named = {line.split()[1] for line in lines}
    expected = {f for f in flags if f.startswith("--") and f != "--num-ensemble"}
    assert named == expected, named ^ expected
    assert not (tmp_path / "runs").exists()  # checked before the dataset (unknown here) and before any directory


def test_ratios_that_exceed_one_and_a_missing_fixed_policy_are_flag_errors(tmp_path):
    result = run_script(
        "algorithms/orpo.py",
        "--real-ratio",
        "0.7",
        "--output-rollout-ratio",
        "0.5",
        "--rollout-policy",
        "fixed",
        cwd=str(tmp_path),
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "error: --rollout-policy fixed and --rollout-policy-path RUN_DIR (an earlier ORPO run) go together",
        "error: --real-ratio 0.7 + --output-rollout-ratio 0.5 exceed 1 (π^o's rollouts get the rest)",
    ]


def test_resume_refuses_bad_checkpoints_and_changed_data_and_names_ignored_flags(hopper_data_dir, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "hopper_random-v2.hdf5").write_bytes(
        open(os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5"), "rb").read()
    )
    done = run_script(
        "algorithms/td3bc.py",
        "--env",
        "hopper-random-v2",
        *small("td3bc"),
        "--epochs",
        "1",
        data_dir=str(data_dir),
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    ckpt = run_dir / "checkpoint.pt"
    good = ckpt.read_bytes()

    def resume(*extra):
        return run_script(
            "algorithms/td3bc.py",
            "--resume",
            str(run_dir),
            "--no-cuda",
            *extra,
            data_dir=str(data_dir),
            cwd=str(tmp_path),
        )

    extended = resume("--epochs", "2", "--batch-size", "64")
    assert extended.returncode == 0, extended.stderr[-2000:]
    assert "note: --resume ignores --batch-size 64; the run keeps its saved 32" in extended.stdout
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for content, reason in [
        (good[: len(good) // 2], "is not a usable checkpoint"),
        (b"garbage", "is not a usable checkpoint"),
    ]:
        ckpt.write_bytes(content)
        result = resume("--epochs", "3")
        assert result.returncode == 1 and "Traceback" not in result.stderr and "weights_only" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: {ckpt} {reason}"), result.stderr[-500:]
    torch.save({"epoch": 1, "parts": Exploit()}, ckpt)
    result = resume("--epochs", "3")
    assert result.returncode == 1 and "holds objects other than tensors and plain values" in result.stderr
    assert not marker.exists()
    ckpt.write_bytes(good)
    with open(data_dir / "hopper_random-v2.hdf5", "r+b") as f:
        f.seek(-100, os.SEEK_END)
        f.write(b"\0" * 100)
    changed = resume("--epochs", "3")
    assert changed.returncode == 1 and "changed since" in changed.stderr.strip().splitlines()[-1], changed.stderr[-500:]


def test_two_runs_started_in_the_same_second_get_different_directories(orpo, monkeypatch, tmp_path, hopper_data_dir):
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    args = orpo.Args(env="hopper-random-v2", runs_dir=str(tmp_path / "runs"), cuda=False, data_dir=hopper_data_dir[0])
    a, b = (plumbing.Run(args, orpo.apply_presets) for _ in range(2))
    for run in (a, b):
        run.end("stopped")  # restores the signal handlers
    assert a.dir != b.dir and os.path.isfile(os.path.join(b.dir, "config.json"))


def test_bad_terminals_and_out_of_range_actions_are_one_line(orpo, tmp_path):
    import h5py
    from conftest import write_random_dataset

    path = str(tmp_path / "d.hdf5")
    arrays = write_random_dataset(path, steps=200)
    with h5py.File(path, "r+") as f:
        del f["terminals"]
        f["terminals"] = arrays["terminals"].astype(np.float32) * 2
    with pytest.raises(
        orpo.UserError, match=r"'terminals' must hold only 0/1 .* \(\d+ row\(s\), first: row \d+, 2\.0\)"
    ):
        plumbing.load_transitions(path)
    write_random_dataset(path, steps=200)
    with h5py.File(path, "r+") as f:
        acts = f["actions"][()]
        acts[17, 1] = 1.5
        del f["actions"]
        f["actions"] = acts
    task = orpo.Task("x", "Hopper-v4", "hopper")
    with pytest.raises(orpo.UserError, match=r"1 action\(s\) lie outside Hopper-v4's action space \(first: row 1\d\)"):
        args = orpo.Args(eval_episodes=1, normalize_obs=False)
        plumbing.Run.load_data(SimpleNamespace(task=task, data_path=path, args=args, device=torch.device("cpu")))


@pytest.mark.parametrize(
    "script,flags,expected",
    [
        (
            "benchmarks/speed.py",
            ["--repeats", "0", "--horizons", "0", "--compare", "/nope"],
            {"--repeats", "--horizons", "--compare"},
        ),
        ("benchmarks/uncertainty_scales.py", ["--rows", "0", "--steps", "-1"], {"--rows", "--steps"}),
    ],
)
def test_benchmark_scripts_check_their_flags_first(script, flags, expected, tmp_path):
    result = run_script(script, *flags, cwd=str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-1000:]
    lines = result.stderr.strip().splitlines()
    assert {line.split()[1] for line in lines} == expected and all(line.startswith("error: --") for line in lines)


def test_a_fit_that_diverges_is_one_line_and_leaves_no_run_dir(tmp_path):
    import h5py
    from conftest import write_random_dataset

    path = str(tmp_path / "huge.hdf5")
    write_random_dataset(path, steps=400, attrs={"env_id": "Hopper-v4"})
    with h5py.File(path, "r+") as f:
        rewards = f["rewards"][()] * 1e30  # finite in float32, but their squares are not
        del f["rewards"]
        f["rewards"] = rewards
    result = run_script("algorithms/orpo.py", "--dataset-path", path, *SMALL, cwd=str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: the ensemble fit diverged"), result.stderr[-500:]
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")
