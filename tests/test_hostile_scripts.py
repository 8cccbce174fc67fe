"""Hostile input to the dataset and benchmark scripts: datasets/join.py, sac.py and halfcheetah_jump.py,
benchmarks/compare.py and speed.py, and the toy's figures with one seed. Each test holds a case that once ended in a
traceback, a silent wrong result, a half-written file or an orphaned process: bad flags and files are one line (exit
2 for flags, checked before any work), a full disk is one line and leaves no file, a signal stops cleanly and the same
command continues. The scripts run as a user would start them, at tiny sizes."""

import csv
import fcntl
import importlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import ROOT, load_module, write_random_dataset

pytestmark = pytest.mark.slow  # the slow tier: the benchmark and dataset scripts' hostile cases end to end

join = importlib.import_module("join")
sac = importlib.import_module("sac")
compare = load_module("benchmarks/compare.py", "compare_hostile")
speed = load_module("benchmarks/speed.py", "speed_hostile")
riskworld = load_module("toy/riskworld.py", "riskworld_hostile")

# sac.py's tiny run (seconds): checkpoints at the first episode ends after steps 400, 800 and 1200 (~416, ~807, ...)
TINY_SAC = (
    "--env Hopper-v4 --steps 1500 --learning-starts 300 --batch-size 16 --hidden-dim 16 --eval-every 250 "
    "--eval-episodes 2 --max-episode-steps 100 --checkpoint-every 400 --levels"
).split()


def run(script, *args, cwd=None, file_limit=None, env=None, timeout=300):
    """Run a script as a user would, one torch thread. file_limit: the largest file it may write, in bytes (a full
    disk without a mount: a write past it fails with EFBIG)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of the process being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run([sys.executable, os.path.join(ROOT, script), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1",
                          PYTHONUNBUFFERED="1", **(env or {})), preexec_fn=limit if file_limit else None)  # fmt: skip


def start(script, *args, cwd=None, env=None):
    """Start a script in the background with SIGINT at its default (as from a terminal)."""
    return subprocess.Popen([sys.executable, os.path.join(ROOT, script), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS="1",
                            PYTHONUNBUFFERED="1", **(env or {})), preexec_fn=lambda: signal.signal(signal.SIGINT,
                            signal.SIG_DFL))  # fmt: skip


def wait_for(condition, proc, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None and not condition():
        time.sleep(0.1)
    assert proc.poll() is None and condition(), proc.stderr.read()[-2000:] if proc.poll() is not None else "timeout"


def one_line(proc, code, needle):
    """Apart from progress bars, stderr is one `error: ...` line holding `needle` (no traceback, no warning), and
    the exit status."""
    lines = [line for line in re.split(r"[\r\n]", proc.stderr) if line.strip() and not re.search(r"\d+%\|", line)]
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]
    return lines[0]


def tmp_files(folder):
    return [str(p) for p in Path(folder).rglob("*.tmp*")]


# ------------------------------------------------------------------------------------------------ datasets/join.py
@pytest.fixture(scope="module")
def part(tmp_path_factory):
    """A 300-step dataset of collect.py (with its behaviour attrs)."""
    path = tmp_path_factory.mktemp("join") / "part.hdf5"
    assert run("datasets/collect.py", "--steps", 300, "--out", path).returncode == 0
    return path


def damaged(part, folder, name, attrs=None, drop_attrs=(), data=None):
    """A copy of `part` with attrs set or dropped and datasets replaced ("group": a group in its place)."""
    path = Path(folder) / f"{name}.hdf5"
    shutil.copy(part, path)
    with h5py.File(path, "a") as f:
        for k in drop_attrs:
            del f.attrs[k]
        f.attrs.update(attrs or {})
        for k, v in (data or {}).items():
            v = v(f[k][()]) if callable(v) else v  # a function of the part's array
            del f[k]
            f.create_group(k) if isinstance(v, str) else f.create_dataset(k, data=v)
    return path


@pytest.mark.parametrize("change, needle", [
        ({"attrs": {"behavior_episodes": 0}}, "behavior_episodes 0 and behavior_mean_return"),  # was ZeroDivisionError
        ({"attrs": {"behavior_episodes": -3}}, "must be a count >= 1"),  # was a joined file with a wrong mean
        ({"attrs": {"behavior_episodes": "many"}}, "behavior_episodes many"),
        ({"attrs": {"behavior_mean_return": float("nan")}}, "behavior_mean_return nan"),  # was a NaN mean written
        ({"drop_attrs": ["seed"]}, "has no seed attr"),  # was KeyError
        ({"drop_attrs": ["env_id"]}, "has no env_id attr"),
        ({"data": {"rewards": "group"}}, "lacks the dataset(s) rewards"),  # was TypeError
        ({"data": {"rewards": np.zeros(295, np.float32)}}, "'rewards' has shape (295,)"),
        ({"data": {"terminals": np.full(300, 2.0, np.float32)}}, "'terminals' must hold only 0/1"),  # was written
        ({"drop_attrs": ["behavior_episodes"]}, "has no behavior_episodes attr; make it with datasets/collect.py"),
        ({"data": {"observations": lambda obs: np.where(np.arange(300)[:, None] == 17, np.nan, obs)}},
         "'observations' has NaN or infinite rows; drop them from the file (1 row(s), first: row 17)"),  # was written
])  # fmt: skip
def test_join_refuses_a_bad_part_in_one_line(part, tmp_path, change, needle):
    """Both parts damaged alike (the first part's attrs name the joined file's); join.main raises the ValueError that
    run_cli prints as one line."""
    a, b = (damaged(part, tmp_path, name, **change) for name in ("A", "B"))
    with pytest.raises(ValueError) as info:
        join.main(join.Args(parts=(str(a), str(b)), out=str(tmp_path / "j.hdf5")))
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert str(a) in str(info.value) or str(b) in str(info.value), str(info.value)  # it names the file
    assert not (tmp_path / "j.hdf5").exists()


def test_a_full_disk_is_one_line_and_leaves_no_file(part, tmp_path):
    """HDF5's own writer on a full disk printed pages of errors, then segfaulted (exit 139)."""
    proc = run("datasets/join.py", part, part, "--out", tmp_path / "j.hdf5", file_limit=30_000)
    one_line(proc, 1, f"could not write {tmp_path / 'j.hdf5'} (File too large)")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ sac.py, jump
@pytest.mark.parametrize("script, flags, needle", [
        ("sac.py", ["--seed", 2**64], "--seed must be below 4294967296"),  # was torch's "Overflow" after the checks
        ("sac.py", ["--env", "NoSuchEnv-v4"], "--env NoSuchEnv-v4: Environment `NoSuchEnv` doesn't exist"),  # was 1
        ("halfcheetah_jump.py", ["--task", "halfcheetah-jump", "--seed", 2**64], "--seed must be below 4294967296"),
        (
            "halfcheetah_jump.py",  # was ignored: the random collection ran to its end
            ["--task", "halfcheetah-jump-hard", "--stop-at", 500],
            "--stop-at stops the SAC of --task halfcheetah-jump",
        ),
])  # fmt: skip
def test_dataset_flags_are_checked_before_any_work(tmp_path, script, flags, needle):
    where = ["--run-dir", tmp_path / "run"] if script == "sac.py" else ["--out", tmp_path / "d.hdf5"]
    one_line(run(f"datasets/{script}", *flags, *where), 2, needle)
    assert os.listdir(tmp_path) == []


def tiny_sac(steps=1500):
    """sac.py's objects for TINY_SAC, as its main makes them: (args, SAC, buffer, env, rng, settings)."""
    args = sac.Args(steps=steps, learning_starts=300, batch_size=16, hidden_dim=16, eval_every=250, eval_episodes=2,
                    max_episode_steps=100, checkpoint_every=400, levels=())  # fmt: skip
    env = sac.gym.make(args.env, max_episode_steps=args.max_episode_steps)
    env.reset(seed=0)
    settings = {k: getattr(args, k) for k in sac.SETTINGS} | {"levels": []}
    return args, sac.SAC(env, args, torch.device("cpu")), sac.allocate_buffer(steps, 11, 3), env, settings


def test_sac_checkpoints_of_other_settings_or_with_nan_weights_are_refused(tmp_path):
    args, agent, buf, env, settings = tiny_sac()
    rng, path = np.random.default_rng(0), tmp_path / "ckpt.pt"
    sac.save_checkpoint(path, 100, agent, buf, env, rng, {})  # no settings: an older version's, or another script's
    with pytest.raises(ValueError, match="made with other settings"):  # was resumed, whatever the settings now
        sac.load_checkpoint(path, agent, buf, env, rng, settings, args.steps)
    with torch.no_grad():
        agent.qf1.net[0].weight[0, 0] = float("nan")
    sac.save_checkpoint(path, 100, agent, buf, env, rng, settings)
    with pytest.raises(ValueError, match=r"holds NaN or infinite weights \(qf1.net.0.weight\); delete"):
        sac.load_checkpoint(path, agent, buf, env, rng, settings, args.steps)  # was NaN actions, then an obscure line


def test_sac_resume_of_a_checkpoint_without_its_progress_is_one_line(tmp_path):
    """A checkpoint of this script's layout without `extra` (the progress rows): was KeyError: 'rows'. Also: the
    whole stderr is the one line, without Gymnasium's two-line "out of date" warning."""
    _, agent, buf, env, settings = tiny_sac()
    (tmp_path / "run").mkdir()
    sac.save_checkpoint(tmp_path / "run" / "ckpt.pt", 416, agent, buf, env, np.random.default_rng(0), settings)
    proc = run("datasets/sac.py", *TINY_SAC, "--run-dir", tmp_path / "run", "--resume")
    one_line(proc, 1, "ckpt.pt lacks this script's progress (rows, snapshots, wall_s); delete it to start over")


def test_sac_sigterm_stops_cleanly_and_resume_finishes(tmp_path):
    """SIGTERM (Slurm, kill) once killed the process where it stood: no line, exit -15."""
    run_dir = tmp_path / "run"
    proc = start("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir)
    wait_for(lambda: (run_dir / "ckpt.pt").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("interrupted; rerun with --resume"), err[-2000:]
    assert (run_dir / "ckpt.pt").exists() and not tmp_files(run_dir)
    again = run("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir)  # the same command: says how to go on
    one_line(again, 2, "ckpt.pt exists: pass --resume to continue it")
    resumed = run("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir, "--resume")
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr[-2000:]
    assert (run_dir / "replay.hdf5").exists() and not (run_dir / "ckpt.pt").exists()


def test_sac_full_disk_keeps_the_last_checkpoint_and_resume_finishes(tmp_path):
    """The second checkpoint (~144 kB) does not fit under a 120 kB limit, the first (~102 kB) does. Was a RuntimeError
    traceback from torch.save and a half-written ckpt.pt.tmp."""
    run_dir = tmp_path / "run"
    proc = run("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir, file_limit=120_000)
    one_line(proc, 1, f"could not write {run_dir / 'ckpt.pt'} (File too large); the last checkpoint is kept")
    assert not tmp_files(run_dir)
    assert 400 <= torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] < 800
    resumed = run("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir, "--resume")
    assert resumed.returncode == 0 and (run_dir / "replay.hdf5").exists(), resumed.stderr[-2000:]


def test_sac_progress_on_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full_disk(path, mode="r", *rest, **kw):  # the file opens; half of a write lands, then the disk is full
        f = open(path, mode, *rest, **kw)
        write = f.write

        def half_then_full(text):
            write(text[: len(text) // 2])
            raise OSError(28, "No space left on device")

        f.write = half_then_full
        return f

    monkeypatch.setitem(sac.write_text.__globals__, "open", full_disk)  # the open of toolbox's write_text
    with pytest.raises(OSError, match="No space left"):
        sac.write_rows_csv(tmp_path / "progress.csv", [{"step": 5000, "eval_return": 54.1}])
    assert os.listdir(tmp_path) == []  # was a half-written progress.csv.tmp


def test_sac_resume_of_a_finished_run_touches_nothing(tmp_path):
    """--resume on a finished run (no ckpt.pt, its replay.hdf5 written) once trained it again from step 0 and
    overwrote every file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "replay.hdf5").write_bytes(b"the finished run's buffer")
    proc = run("datasets/sac.py", *TINY_SAC, "--run-dir", run_dir, "--resume")
    assert proc.returncode == 0 and "nothing left to do" in proc.stdout, proc.stderr[-2000:]
    assert os.listdir(run_dir) == ["replay.hdf5"] and (run_dir / "replay.hdf5").read_bytes().startswith(b"the")


# ------------------------------------------------------------------------------------------------ compare.py
@pytest.mark.parametrize("flags, needle", [
        ({"rows": ()}, "--rows needs at least one value"),  # was a run of nothing, then "no finished run"
        ({"seeds": (1, 1)}, "--seeds needs at least one value, each once, not 1 1"),  # was the same run twice at once
        ({"env": ("local/a", "local/a")}, "--env needs at least one value, each once"),
        ({"seeds": (2**32,)}, "--seeds (4294967296,): must lie in [0, 4294967296)"),  # was every run failing after the start
        ({"dynamics_max_epochs": 0}, "--dynamics-max-epochs 0: must lie in [1, inf)"),  # the same
        ({"delta": float("inf")}, "--delta inf: must lie in (0, inf)"),  # was every pair "agree"
        ({"algo_flags": "--epochs 5"}, "--algo-flags sets --epochs, which compare.py gives every row"),  # silently won
        ({"results": "/etc/hostname/results"}, "--results: cannot write in /etc/hostname/results"),  # was a traceback
        ({"runs_dir": "/etc/hostname/runs"}, "--runs-dir: cannot write in"),
        ({"out": "/etc/hostname/report", "report_only": True}, "--out: cannot write in"),  # was after the report
])  # fmt: skip
def test_compare_flags_are_checked_before_any_run(flags, needle):
    with pytest.raises(compare.UsageError) as info:
        compare.check(compare.Args(**flags))
    assert needle in str(info.value), str(info.value)


def test_compare_a_dataset_that_is_not_hdf5_is_one_line(tmp_path):
    (tmp_path / "hopper-medium.hdf5").write_text("not HDF5\n" * 100)  # was an OSError traceback
    proc = run("benchmarks/compare.py", *compare_flags(tmp_path), "--env", tmp_path / "hopper-medium.hdf5")
    one_line(proc, 2, "hopper-medium.hdf5 is not a D4RL-layout HDF5 file")


def compare_flags(tmp_path, rows=("td3bc",), epochs=1, steps=2):
    """A compare.py command at tiny sizes; --settings ours needs no peer source."""
    return [*["--runs-dir", tmp_path / "runs", "--results", tmp_path / "results", "--out", tmp_path / "report"],
            *["--settings", "ours", "--rows", *rows, "--seeds", 1, "--epochs", epochs, "--steps-per-epoch", steps],
            *["--eval-episodes", 1, "--algo-flags=--hidden-dims 8 8 --batch-size 8"]]  # fmt: skip


def fake_result(results, row, seed, fingerprint="1:0123456789abcdef", scores=(1.0, 2.0), status="finished"):
    """A finished run's files as compare.py copies them to --results."""
    d = Path(results) / "hopper-medium" / row / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"_dataset": {"fingerprint": fingerprint}}))
    summary = {"status": status, "wall_seconds": 1.0, "device_name": "cpu", "epochs": len(scores)}
    (d / "summary.json").write_text(json.dumps(summary))
    with open(d / "metrics.csv", "w") as f:
        f.write("epoch,eval/normalized_score\n" + "".join(f"{i + 1},{s}\n" for i, s in enumerate(scores)))
    return d


def test_compare_refuses_results_made_from_another_file_under_the_same_name(tmp_path):
    """Was: the new file's runs copied over the old file's, one seed at a time, and dataset.json rewritten."""
    data = tmp_path / "hopper-medium.hdf5"
    write_random_dataset(str(data), steps=200, attrs={"behavior_mean_return": 10.0})
    seed1 = fake_result(tmp_path / "results", "td3bc", 1)
    proc = run("benchmarks/compare.py", *compare_flags(tmp_path), "--env", data)
    one_line(proc, 2, f"{seed1} holds results made from another file than {data} (size:hash 1:0123456789abcdef")
    assert not (tmp_path / "runs").exists() and json.loads((seed1 / "config.json").read_text())["_dataset"]


@pytest.mark.parametrize("damage, needle", [
        (lambda d: d.rename(d.with_name("seedX")), "seedX: a damaged result (not a seed<N> folder)"),  # ValueError
        (lambda d: (d / "metrics.csv").unlink(), "a damaged result (FileNotFoundError"),  # was FileNotFoundError
        (lambda d: (d / "metrics.csv").write_text("epoch,eval/normalized_score\n1,\n2,\n"), "holds no evaluation"),
        (lambda d: (d / "summary.json").write_text('{"status": "fin'), "summary.json is not a JSON object"),  # skipped
])  # fmt: skip
def test_compare_a_damaged_result_is_one_line_naming_it(tmp_path, damage, needle):
    fake_result(tmp_path, "mopo", 2)
    damage(fake_result(tmp_path, "mopo", 1))
    with pytest.raises(compare.UsageError) as info:
        compare.load_results(str(tmp_path))
    assert needle in str(info.value) and "mopo/seed" in str(info.value), str(info.value)


@pytest.mark.parametrize("metrics, needle", [
        ("epoch,eval/normalized_score\n1,abc\n2,1.0\n", "line 2: eval/normalized_score is 'abc', not a number"),
        ("epoch,eval/normalized_score\n", "holds 0 of the 2 epochs summary.json counts"),  # was IndexError
])  # fmt: skip
def test_compare_a_result_that_disagrees_with_its_record_is_left_out_and_named(tmp_path, capsys, metrics, needle):
    """Such a run once refused the whole report (a value that is not a number) or entered it as a shorter run."""
    fake_result(tmp_path, "mopo", 2)
    (fake_result(tmp_path, "mopo", 1) / "metrics.csv").write_text(metrics)
    assert list(compare.load_results(str(tmp_path))["hopper-medium"]["rows"]["mopo"]) == [2]
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "mopo/seed1: left out of the report" in err and needle in err, err


def test_compare_a_dataset_json_that_is_not_an_object_is_ignored(tmp_path):
    fake_result(tmp_path, "mopo", 1)
    (tmp_path / "hopper-medium" / "dataset.json").write_text("[1, 2]")  # was AttributeError: 'list' has no 'get'
    assert compare.load_results(str(tmp_path))["hopper-medium"]["dataset"] == {}


def test_compare_leaves_a_live_peer_runs_folder_alone(tmp_path):
    """A peer run left alive (compare.py SIGKILLed) holds its run.lock. compare.py once deleted its folder and started
    a second run in it; now peers.py refuses the folder in use, the failure is named and the exit status is 1 (it was
    2, from "no finished run")."""
    data = tmp_path / "hopper-medium.hdf5"
    write_random_dataset(str(data), steps=200)
    peer = tmp_path / "runs" / "hopper-medium" / "kit_mopo" / "seed1"
    peer.mkdir(parents=True)
    (peer / "metrics.csv").write_text("epoch\n1\n")
    with open(peer / "run.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = run("benchmarks/compare.py", *compare_flags(tmp_path, rows=("kit_mopo",)), "--env", data)
    one_line(proc, 1, "hopper-medium/kit_mopo/seed1: exit 2")
    assert (peer / "metrics.csv").exists()
    assert "is in use by another process" in (peer.parent / "seed1.log").read_text()


def test_compare_a_second_sigterm_waits_for_the_runs_and_the_same_command_resumes(tmp_path):
    """The second signal once broke the wait for the runs' checkpoints with a KeyboardInterrupt traceback."""
    data = tmp_path / "hopper-medium.hdf5"
    write_random_dataset(str(data), steps=300)
    flags = [*compare_flags(tmp_path, epochs=8, steps=300), "--env", data]
    proc = start("benchmarks/compare.py", *flags)
    metrics = lambda: list((tmp_path / "runs").glob("hopper-medium/td3bc/seed1/*/metrics.csv"))
    wait_for(lambda: metrics() and len(metrics()[0].read_text().splitlines()) >= 3, proc)  # two epochs done
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and err.strip() == "interrupted: run the same command again to resume", err[-3000:]
    summary = json.loads((metrics()[0].parent / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    again = run("benchmarks/compare.py", *flags)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((metrics()[0].parent / "summary.json").read_text())["status"] == "finished"
    with open(tmp_path / "results" / "hopper-medium" / "td3bc" / "seed1" / "metrics.csv") as f:
        assert [int(float(r["epoch"])) for r in csv.DictReader(f)][-1] == 8


# ------------------------------------------------------------------------------------------------ speed.py
@pytest.mark.parametrize("flags, needle", [
        ({"seed": -1}, "--seed -1: must lie in [0, 2**32)"),  # was numpy's traceback after the checks
        ({"compare": __file__, "labels": ("a", "a")}, "--labels a a: the two columns need two names"),  # one column
        ({"horizons": (1, 1)}, "every h must be at least 1, each once"),  # each run twice
        ({"algo_flags": "--hidden-dims '32"}, "--algo-flags --hidden-dims '32: No closing quotation"),  # traceback
        ({"algo_flags": "--runs-dir x"}, "--algo-flags sets --runs-dir"),  # was IndexError after a run
        ({"out": "/etc/hostname/speed"}, "--out /etc/hostname/speed: /etc/hostname is not a folder"),  # was at the end
])  # fmt: skip
def test_speed_flags_are_checked_before_any_work(flags, needle):
    with pytest.raises(speed.UsageError) as info:  # toolbox.cli prints it as one line, exit 2
        speed.check(speed.Args(**flags))
    lines = str(info.value).splitlines()
    assert info.value.code == 2 and len(lines) == 1 and needle in lines[0], lines


SPEED_TINY = ["--only", "ensemble", "--dataset-size", 5000, "--repeats", 1, "--dynamics-epochs", 1]


@pytest.mark.parametrize("flags, code, needle", [
        (["--threads", "nan"], 2, "Error parsing --threads: invalid literal for int()"),  # tyro's box
        (["--module", "datasets/join.py"], 1, "join.py takes no --runs-dir: it is not an algorithm file"),  # Stop...
])  # fmt: skip
def test_speed_bad_input_is_one_line(tmp_path, flags, code, needle):
    proc = run("benchmarks/speed.py", *SPEED_TINY, *flags, cwd=ROOT)
    one_line(proc, code, needle) if code == 1 else None
    assert proc.returncode == code and needle in proc.stderr and "Traceback" not in proc.stderr


def test_speed_ensemble_of_a_file_without_an_ensemble_is_an_empty_table(tmp_path):
    """td3bc.py fits no ensemble: `--only ensemble` once ended in a StopIteration traceback."""
    proc = run("benchmarks/speed.py", *SPEED_TINY, "--module", "algorithms/td3bc.py", cwd=ROOT)
    assert proc.returncode == 0 and "| measurement | unit | module |" in proc.stdout, proc.stderr[-2000:]


def test_speed_a_full_disk_is_one_line_and_leaves_no_file(tmp_path):
    """The table's files once ended in an OSError traceback and a half-written speed.md."""
    out = tmp_path / "speed"
    proc = run("benchmarks/speed.py", "--only", "matmul", "--matmul-size", 64, "--out", out, file_limit=200)
    one_line(proc, 1, f"could not write {out}.md (File too large); the table is printed above")
    assert os.listdir(tmp_path) == [] and "fp32 matmul 64×64" in proc.stdout


def test_speed_sigterm_stops_the_run_in_flight_and_removes_its_folder(tmp_path):
    """SIGTERM once left the algorithm file's run going, orphaned, and its temporary folder behind."""
    proc = start("benchmarks/speed.py", *SPEED_TINY, cwd=ROOT, env={"TMPDIR": str(tmp_path)})

    def cmdline(pid: str) -> str:  # "" for a child that ended between pgrep and the read (the --help one)
        try:
            return Path(f"/proc/{pid}/cmdline").read_text()
        except OSError:
            return ""

    def child():  # the run of orpo.py (after its --help)
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        return next((int(k) for k in kids if "--runs-dir" in cmdline(k)), None)

    wait_for(child, proc)
    pid = child()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.strip().splitlines()[-1].startswith("interrupted: the runs stopped"), err
    time.sleep(0.5)
    status = Path(f"/proc/{pid}/status").read_text() if os.path.exists(f"/proc/{pid}") else "gone"
    assert status == "gone" or "zombie" in status, status  # killed (an orphaned zombie waits for init)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ toy: one seed
def toy_table(tmp_path, seeds):
    """Aggregated rows of both algorithms at λp = 100 with max_aleatoric, and their visited-state files."""
    rows = []
    for algo in ("mopo", "orpo"):
        for seed in seeds:
            rows.append({"algo": algo, "u": "max_aleatoric", "lambda_p": 100.0, "seed": seed, "train_seconds": 1.0})
            rows[-1] |= {"avg_return": 0.9 + seed, "share_upper_right": 0.0}
            key = riskworld.cell_key(algo, "max_aleatoric", 100.0, seed)
            np.savez(tmp_path / f"{key}.npz", visited=np.zeros((5, 2)))
    return riskworld.aggregate(rows)


@pytest.mark.parametrize("seeds", [(1,), (1, 2)])
def test_toy_figures_show_an_interval_only_over_two_seeds(tmp_path, monkeypatch, seeds):
    """One seed's titles once read "0.9 [0.9, 0.9]" while the text said "1 seed: no intervals"."""
    import matplotlib.pyplot as plt

    table, figures = toy_table(tmp_path, seeds), []
    monkeypatch.setattr(plt, "close", figures.append)  # keep each figure to read it
    riskworld.plot_visited(str(tmp_path / "v.png"), table, str(tmp_path), 100.0, "title")
    riskworld.plot_phase(str(tmp_path / "p.png"), table, riskworld.SETTINGS["demo"], "title")
    titles = [ax.get_title() for ax in figures[0].axes if ax.get_visible() and ax.get_title()]
    assert len(titles) == 2 and all(("[" in t) == (len(seeds) > 1) for t in titles), titles
    bars = [c.has_yerr for ax in figures[1].axes for c in ax.containers]
    assert bars == [len(seeds) > 1] * 2, bars


# ---------------------------------------------------------------------------------------------------- the launchers
def test_budget_stops_its_run_on_sigterm_and_says_how_to_continue(tmp_path):
    """budget.py forwards SIGTERM to the running run (started through the launchers' ensemble cache), which
    checkpoints; it says so and exits 143."""
    os.makedirs(tmp_path / "data" / "local")
    write_random_dataset(str(tmp_path / "data" / "local" / "h.hdf5"), steps=1000, attrs={"env_id": "Hopper-v4"})
    proc = start("benchmarks/budget.py", "--env", "local/h", "--data-dir", tmp_path / "data", "--only", "mopo:uncapped",
                 *["--runs-dir", "r", "--results", "res", "--out", "out", "--dynamics-cache", "cache"], cwd=tmp_path,
                 env={"D4RL_DATASET_DIR": ""})  # fmt: skip
    wait_for(lambda: list(tmp_path.glob("r/uncapped/mopo/*/metrics.csv")), proc, seconds=300)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143 and "run the same command again to resume" in err and "Traceback" not in err, err
    (summary,) = Path(tmp_path / "r" / "uncapped" / "mopo").glob("*/summary.json")
    assert json.loads(summary.read_text())["status"] == "interrupted"
    assert len(list(Path(tmp_path / "cache").glob("*.pt"))) == 1  # its ensemble, fitted once, is in the cache
