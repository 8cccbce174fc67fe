"""benchmarks/launch.py: a method file's run with what the lab keeps of it. The run directory is locked while a
process writes it, config.json, invocations.jsonl and summary.json say how the run came about, a resume on changed data
is refused, a fault of the machine is one line that names the fix (the last checkpoint intact), and not one logged
number moves."""

import contextlib
import csv
import errno
import fcntl
import glob
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from unittest import mock

import filelock
import h5py
import pytest
import torch
from conftest import ROOT, TINY, Result, write_random_dataset

import launch  # noqa: E402  (conftest puts benchmarks/ on sys.path)
import plumbing  # noqa: E402
import scores  # noqa: E402
import toolbox  # noqa: E402

TD3BC = "--epochs 2 --steps-per-epoch 20 --batch-size 32 --hidden-dims 32 32 --eval-episodes 2 --no-cuda".split()


@pytest.fixture
def run(hopper_data_dir, tmp_path):
    """run("td3bc", *flags): `python benchmarks/launch.py algorithms/td3bc.py FLAGS` in this process (in tmp_path, the
    Hopper fixture as the data dir): (exit status, stdout, stderr). A traceback fails the test."""

    def go(script, *argv):
        out, err, code = io.StringIO(), io.StringIO(), 0
        env = {"D4RL_DATASET_DIR": hopper_data_dir[0]}
        with contextlib.chdir(tmp_path), mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out):
            try:
                with contextlib.redirect_stderr(err):
                    launch.main([os.path.join(ROOT, "algorithms", f"{script}.py"), *map(str, argv)])
            except SystemExit as e:
                code = e.code
        assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()[-3000:]
        return Result(code, out.getvalue(), err.getvalue())

    return go


def only_run(folder) -> str:
    (found,) = [os.path.join(folder, d) for d in os.listdir(folder)]
    return found


def last_line(err: str) -> str:
    return err.strip().replace("\r", "\n").splitlines()[-1]


def rows(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [{k: v for k, v in r.items() if "seconds" not in k and k != "charts/SPS"} for r in csv.DictReader(f)]


def read(run_dir, name):
    with open(os.path.join(run_dir, name)) as f:
        return [json.loads(line) for line in f] if name.endswith(".jsonl") else json.load(f)


@pytest.fixture
def td3bc_run(run, tmp_path):
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--runs-dir", "done")
    assert code == 0, err
    return only_run(tmp_path / "done")


# ------------------------------------------------------------------------------------------------------ records
def test_a_launched_run_records_how_it_came_about_and_each_invocation(td3bc_run, run, hopper_data_dir):
    config = read(td3bc_run, "config.json")
    assert config["_command"] == [os.path.join(ROOT, "algorithms", "td3bc.py"), "--env", "hopper-random-v2", *TD3BC,
                                  "--runs-dir", "done"]  # fmt: skip
    assert config["_typed"] == sorted(["env", "epochs", "steps_per_epoch", "batch_size", "hidden_dims", "eval_episodes",
                                       "cuda", "runs_dir"])  # fmt: skip
    assert config["_filled"] == {} and config["_git_revision"] == toolbox.git_revision(launch.__file__)
    path = os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5")
    assert config["_dataset"] == {"path": path, "fingerprint": toolbox.file_fingerprint(path)}
    with mock.patch.dict(os.environ, {"MKL_CBWR": "COMPATIBLE"}):  # a run's arithmetic path is part of its record
        code, _, err = run("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 0, err
    first, second = read(td3bc_run, "invocations.jsonl")
    assert (first["start_epoch"], second["start_epoch"]) == (0, 2) and second["command"][-2:] == ["--epochs", "3"]
    assert "MKL_CBWR" not in first["numerics_env"] and second["numerics_env"]["MKL_CBWR"] == "COMPATIBLE"
    assert first["git_revision"] == config["_git_revision"] and "torch threads" in first["device_name"]
    summary = read(td3bc_run, "summary.json")
    assert summary["status"] == "finished" and summary["invocations"] == [first, second] and summary["dynamics"] is None
    assert 0 < summary["wall_seconds_this_invocation"] < time.time() - time.mktime(time.strptime(first["time"][:19],
                                                                                   "%Y-%m-%dT%H:%M:%S")) + 60  # fmt: skip
    assert read(td3bc_run, "config.json") == config  # a resume leaves the run's provenance as it was
    assert sorted(os.listdir(td3bc_run)) == sorted(["checkpoint.pt", "config.json", "invocations.jsonl", "metrics.csv",
                   "policy.pt", "summary.json", *[f for f in os.listdir(td3bc_run) if "tfevents" in f]])  # no run.lock  # fmt: skip


def test_a_launched_run_logs_the_numbers_of_the_file_run_alone_and_records_its_ensemble(run, tmp_path,
                                                                                         hopper_data_dir):  # fmt: skip
    """The wrappers draw no random number: every logged number equals the plain run's, the resume from the ensemble the
    launcher saved included; config.json says where the ensemble came from and what the presets filled."""
    flags = ["--env", "hopper-random-v2", *TINY]
    with mock.patch.dict(os.environ, {"D4RL_DATASET_DIR": hopper_data_dir[0]}):
        plumbing.cli(toolbox.algorithm("orpo").main, toolbox.algorithm("orpo").Args, [*flags, "--epochs", "3",
                     "--runs-dir", str(tmp_path / "plain")])  # fmt: skip
    assert run("orpo", *flags, "--runs-dir", "ours")[0] == 0
    ours = only_run(tmp_path / "ours")
    config = read(ours, "config.json")
    assert config["_dynamics"]["source"] == "fitted" and config["_dynamics"]["holdout_mse"] > 0
    assert config["_filled"]["lambda_p"] == 5.9 and "lambda_p" not in config["_typed"]  # hopper-random's preset
    saved = torch.load(os.path.join(ours, "dynamics.pt"), weights_only=True)
    assert (
        set(saved) == {"model", "metrics", "rng", "seed"}
        and saved["metrics"]["dynamics/holdout_mse"] == (config["_dynamics"]["holdout_mse"])
    )
    assert run("orpo", "--resume", ours, "--epochs", "3")[0] == 0
    assert rows(ours) == rows(only_run(tmp_path / "plain"))
    assert read(ours, "summary.json")["dynamics"] == config["_dynamics"]
    code, _, err = run("orpo", *flags, "--runs-dir", "loads", "--load-dynamics-path", os.path.join(ours, "dynamics.pt"))
    assert code == 0, err
    loaded = read(only_run(tmp_path / "loads"), "config.json")["_dynamics"]
    assert loaded == {"source": "loaded", "path": os.path.join(ours, "dynamics.pt"),
                      "holdout_mse": config["_dynamics"]["holdout_mse"]}  # fmt: skip


def test_the_record_starts_with_the_run_directory_and_a_signal_says_how_to_continue(run, tmp_path, monkeypatch):
    """A run stopped in its first gradient steps has its start recorded (config.json's provenance, invocations.jsonl)
    and holds its run.lock with its pid; the signal's line names the launcher's command that continues it. (The
    ensemble fit comes before the run directory: a run stopped there leaves nothing to resume.)"""
    seen = {}

    def stopped_in_the_steps(*a):
        run_dir = only_run(tmp_path / "runs")
        seen.update(config=read(run_dir, "config.json"), record=read(run_dir, "invocations.jsonl"))
        seen["holder"] = scores.lock_holder(run_dir)
        raise plumbing.Stop(signal.SIGINT)

    monkeypatch.setattr(toolbox.algorithm("mopo"), "gradient_steps", stopped_in_the_steps)
    code, _, err = run("mopo", "--env", "hopper-random-v2", *TINY)
    run_dir = only_run(tmp_path / "runs")
    script = os.path.relpath(os.path.join(ROOT, "algorithms", "mopo.py"), tmp_path)
    assert code == 130 and last_line(err).startswith("interrupted by SIGINT; continue with: python ")
    assert last_line(err).endswith(f"launch.py {script} --resume {os.path.relpath(run_dir, tmp_path)}")
    assert "_command" in seen["config"] and [r["start_epoch"] for r in seen["record"]] == [0]
    assert seen["holder"] == str(os.getpid()) and not os.path.exists(os.path.join(run_dir, "run.lock"))


# --------------------------------------------------------------------------------------------------------- the lock
def test_a_second_process_on_a_run_directory_is_refused_in_one_line_naming_the_lock(td3bc_run, run):
    lock = os.path.join(td3bc_run, "run.lock")
    with filelock.FileLock(lock):  # what a live run holds
        code, _, err = run("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 1 and last_line(err) == f"error: {td3bc_run} is in use by another process ({lock} is held); stop it first"  # fmt: skip
    os.remove(lock)  # filelock leaves its file
    os.mkdir(lock)
    code, _, err = run("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 1 and f"{lock} is a directory" in last_line(err) and "disk space" not in err
    os.rmdir(lock)
    assert run("td3bc", "--resume", td3bc_run, "--epochs", "3")[0] == 0  # once it is gone, the resume runs


def test_a_resume_on_a_dataset_that_changed_is_refused(td3bc_run, run, tmp_path, hopper_data_dir):
    moved = tmp_path / "d"
    moved.mkdir()
    write_random_dataset(str(moved / "hopper_random-v2.hdf5"), steps=500, seed=7)
    code, _, err = run("td3bc", "--resume", td3bc_run, "--epochs", "3", "--data-dir", str(moved))
    assert code == 1 and "changed since" in last_line(err) and "resume with the original file" in last_line(err)
    assert read(td3bc_run, "summary.json")["epochs"] == 2
    shutil.copy(os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5"), moved)  # the same file elsewhere: runs
    assert run("td3bc", "--resume", td3bc_run, "--epochs", "3", "--data-dir", str(moved))[0] == 0


# ------------------------------------------------------------------------------------------------ the machine's faults
def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_last_one(run, tmp_path, monkeypatch):
    saves, real = [], torch.save

    def save(obj, f):  # the disk fills after the first checkpoint
        if str(getattr(f, "name", f)).endswith("checkpoint.pt.tmp"):
            saves.append(f)
            if len(saves) > 1:
                f.write(b"half")
                raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        real(obj, f)

    monkeypatch.setattr(torch, "save", save)
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--checkpoint-every", "1")
    line, run_dir = last_line(err), only_run(tmp_path / "runs")
    assert code == 1 and line.startswith("error: could not write runs/") and "/checkpoint.pt (" in line
    assert err.count("error: ") == 1
    assert "; free disk space; continue with: python " in line and line.endswith(
        f"--resume {os.path.relpath(run_dir, tmp_path)}"
    )
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert not os.path.exists(os.path.join(run_dir, "checkpoint.pt.tmp")) and all(f.closed for f in saves)
    summary = read(run_dir, "summary.json")
    assert summary["status"] == "failed" and "could not write" in summary["error"] and summary["epochs"] == 2


@pytest.mark.parametrize("code_, fix", [(errno.ENOSPC, "free disk space"), (errno.EDQUOT, "the disk quota is full"),
                         (errno.EROFS, "this file system is read-only")], ids=["full", "quota", "read-only"])  # fmt: skip
def test_a_fault_of_the_machine_mid_run_is_one_line_naming_the_fix(code_, fix, run, tmp_path, monkeypatch):
    module, real = toolbox.algorithm("td3bc"), toolbox.algorithm("td3bc").log

    def log(writer, rows, run_dir, epoch, *a):
        if epoch == 2:
            raise OSError(code_, os.strerror(code_))
        return real(writer, rows, run_dir, epoch, *a)

    monkeypatch.setattr(module, "log", log)
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--checkpoint-every", "1")
    line = last_line(err)
    assert code == 1 and line.startswith(f"error: {os.strerror(code_)}; ") and fix in line.split("; continue with")[0]
    assert " --resume runs/" in line and err.count("error: ") == 1
    run_dir = only_run(tmp_path / "runs")
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["epoch"] == 1


def test_a_run_directory_deleted_mid_run_or_a_name_too_long_is_one_line(run, tmp_path, monkeypatch):
    module, real = toolbox.algorithm("td3bc"), toolbox.algorithm("td3bc").log

    def log(writer, rows, run_dir, epoch, *a):
        if epoch == 2:
            shutil.rmtree(run_dir)
        return real(writer, rows, run_dir, epoch, *a)

    monkeypatch.setattr(module, "log", log)
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3")
    assert code == 1 and "was deleted while the run was writing it" in last_line(err)
    assert last_line(err).endswith("start the run again") and os.listdir(tmp_path / "runs") == []
    monkeypatch.undo()
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--runs-dir", "x" * 300)
    assert code == 1 and "File name too long" in last_line(err) and "--runs-dir" in last_line(err)


def test_an_unwritable_runs_dir_is_one_line_before_the_data_loads(run, tmp_path):
    (tmp_path / "a_file").write_text("")
    code, out, err = run("td3bc", "--env", "hopper-random-v2", "--runs-dir", "a_file/runs")
    assert code == 1 and "a_file is not a folder; pass a writable --runs-dir" in last_line(err) and out == ""


# --------------------------------------------------------------------------------------------------- failed runs
def test_a_run_turned_non_finite_is_recorded_as_failed_with_its_last_checkpoint(run, tmp_path, monkeypatch):
    module, real = toolbox.algorithm("td3bc"), toolbox.algorithm("td3bc").gradient_steps

    def poisoned(step, first, *a):  # epoch 2's losses
        metrics = real(step, first, *a)
        return metrics | ({"losses/critic_loss": float("nan")} if first == 20 else {})

    monkeypatch.setattr(module, "gradient_steps", poisoned)
    code, _, err = run("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--checkpoint-every", "1")
    assert code == 1 and "training turned non-finite in epoch 2" in last_line(err)
    run_dir = only_run(tmp_path / "runs")
    summary = read(run_dir, "summary.json")
    assert summary["status"] == "failed" and "non-finite" in summary["error"] and summary["algorithm"] == "td3bc"
    assert scores.summary_state(summary) == "failed" and len(summary["invocations"]) == 1
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["epoch"] == 1


def test_a_run_that_fails_before_anything_a_resume_uses_leaves_no_run_directory(run, tmp_path):
    write_random_dataset(str(tmp_path / "huge.hdf5"), steps=400, attrs={"env_id": "Hopper-v4"})
    with h5py.File(tmp_path / "huge.hdf5", "r+") as f:
        rewards = f["rewards"][()] * 1e30  # finite in float32, but their squares are not
        del f["rewards"]
        f["rewards"] = rewards
    code, _, err = run("orpo", "--dataset-path", "huge.hdf5", *TINY)
    assert code == 1 and last_line(err).startswith("error: the ensemble fit diverged")
    assert not (tmp_path / "runs").exists() or os.listdir(tmp_path / "runs") == []


def test_the_resumable_fit_is_the_files_fit_and_goes_on_from_any_epoch(hopper_data_dir, tmp_path, monkeypatch):
    """The launcher's fit is the method file's, step for step: with early stopping at work, the same ensemble (every
    tensor), metrics and RNG state after it; and stopped after any of its epochs, then run again, it ends the same."""
    orpo = toolbox.algorithm("orpo")
    path = os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5")
    data = {k: torch.as_tensor(v) for k, v in plumbing.load_transitions(path).items()}
    settings = dict(lr=1e-2, batch_size=256, max_epochs=None, patience=2, holdout_ratio=0.2, max_holdout=500)

    def fit(fitter, *part):
        torch.manual_seed(5)
        model = orpo.EnsembleDynamics(11, 3, (16, 16), 3, 2)
        metrics = fitter(*part, model, data, **settings)
        state = {k: v.clone() for k, v in model.state_dict().items() if k != "_extra_state"}
        return {k: v for k, v in metrics.items() if k != "dynamics/fit_seconds"}, state, torch.get_rng_state()

    with contextlib.redirect_stdout(io.StringIO()):
        metrics, state, rng = fit(orpo.fit_dynamics)
        epochs = int(metrics["dynamics/epochs"])
        assert 5 < epochs < 60  # early stopping ended it
        part, real = str(tmp_path / "part.pt"), orpo.dynamics_step
        for cut in (1, 2, epochs // 2, epochs - 2, epochs - 1):

            def signal_after(*a, cut=cut):
                if os.path.isfile(part) and torch.load(part, weights_only=True)["epoch"] == cut:
                    raise plumbing.Stop(signal.SIGTERM)
                return real(*a)

            monkeypatch.setattr(orpo, "dynamics_step", signal_after)
            with pytest.raises(plumbing.Stop):
                fit(launch.resumable_fit, orpo, part)
            monkeypatch.setattr(orpo, "dynamics_step", real)
            again = fit(launch.resumable_fit, orpo, part)
            assert again[0] == metrics and torch.equal(again[2], rng), cut
            assert all(torch.equal(again[1][k], v) for k, v in state.items()), cut
            os.remove(part)
        whole = fit(launch.resumable_fit, orpo, part)
        after = fit(launch.resumable_fit, orpo, part)  # stopped after its last epoch, before the run saved dynamics.pt
    for done in (whole, after):
        assert done[0] == metrics and torch.equal(done[2], rng)
        assert all(torch.equal(done[1][k], v) for k, v in state.items())


def test_the_fits_part_is_named_by_the_data_the_file_the_ensembles_flags_the_seed_and_the_device(tmp_path, monkeypatch):
    """A part-way fit goes on only under the same key: another data file, method file, ensemble flag, seed or device
    type (CPU and CUDA draw from other generators) names another file; a resumed run keeps it beside its directory."""
    orpo, mopo = toolbox.algorithm("orpo"), toolbox.algorithm("mopo")

    def path(module=orpo, device="cpu", fingerprint="1:ab", **args):
        monkeypatch.setattr(launch, "RUN", launch.Launch(["x"], module, module.Args, []))
        launch.RUN.dataset, launch.RUN.args = {"fingerprint": fingerprint}, module.Args(runs_dir=str(tmp_path), **args)
        return launch.fit_path(torch.device(device))

    base = path()
    assert base == path() and os.path.dirname(base) == str(tmp_path)
    others = [path(device="cuda"), path(fingerprint="1:cd"), path(module=mopo), path(seed=2), path(dynamics_lr=3e-3),
              path(num_ensemble=5)]  # fmt: skip
    assert len({base, *others}) == 1 + len(others)
    assert os.path.dirname(path(resume=str(tmp_path / "a" / "run"))) == str(tmp_path / "a")


def test_a_fit_stopped_part_way_goes_on_from_its_last_epoch_and_ends_as_the_whole_fit(run, tmp_path, monkeypatch):
    """A signal in the fit's 4th epoch keeps the first 3 epochs' state (no run directory yet) and says so; the same
    command goes on from it, and the run logs every number of an uninterrupted one (the fit's row 0 included), so the
    ensemble, its metrics and the RNG state after the fit are the whole fit's; the part-way state then goes."""
    orpo = toolbox.algorithm("orpo")
    flags = ["--env", "hopper-random-v2", *TINY, "--dynamics-max-epochs", "6", "--dynamics-patience", "6"]
    assert run("orpo", *flags, "--runs-dir", "whole")[0] == 0
    real, parts = orpo.dynamics_step, lambda: [f for f in os.listdir(tmp_path / "cut") if f.endswith(".pt")]

    def signal_in_epoch_4(*a):
        if parts() and torch.load(tmp_path / "cut" / parts()[0], weights_only=True)["epoch"] == 3:
            raise plumbing.Stop(signal.SIGTERM)
        return real(*a)

    monkeypatch.setattr(orpo, "dynamics_step", signal_in_epoch_4)
    code, _, err = run("orpo", *flags, "--runs-dir", "cut")
    assert code == 143 and "the ensemble fit's last epoch is kept in" in last_line(err), err[-500:]
    assert "the same command goes on from it" in last_line(err) and len(parts()) == 1
    assert sorted(os.listdir(tmp_path / "cut")) == sorted(parts() + [parts()[0] + ".lock"])  # no run directory yet
    monkeypatch.setattr(orpo, "dynamics_step", real)
    (part,) = parts()
    # another command's fit (other flags) in the same folder neither goes on from it nor touches it
    code, out, err = run("orpo", *flags, "--dynamics-lr", "3e-3", "--runs-dir", "cut")
    assert code == 0 and "goes on" not in out and parts() == [part], err[-500:]
    # a process of the same command while another holds the part's lock fits without one, and leaves it as it was
    fd = os.open(tmp_path / "cut" / (part + ".lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    code, out, err = run("orpo", *flags, "--runs-dir", "cut")
    os.close(fd)
    assert code == 0 and "goes on" not in out and torch.load(tmp_path / "cut" / part, weights_only=True)["epoch"] == 3
    code, out, err = run("orpo", *flags, "--runs-dir", "cut")
    assert code == 0 and "the fit goes on after its epoch 3" in out, err[-500:]
    assert [f for f in os.listdir(tmp_path / "cut") if f.startswith(".")] == []  # the part and its lock went
    runs = sorted(glob.glob(str(tmp_path / "cut" / "*" / "config.json")))
    same = [os.path.dirname(c) for c in runs if "dynamics_lr" not in json.load(open(c))["_typed"]]
    assert len(same) == 2 and all(rows(d) == rows(only_run(tmp_path / "whole")) for d in same)
    assert rows(same[0])[0]["dynamics/epochs"] == "6.0"


def test_a_buffer_larger_than_the_free_memory_is_one_line_before_the_fit(run, tmp_path):
    code, out, err = run("mopo", "--env", "hopper-random-v2", *TINY, "--rollout-batch-size", str(10**11))
    assert code == 1 and "a buffer of " in last_line(err) and ",000,000 rows needs" in last_line(err)
    assert "lower the flags that size it" in last_line(err) and "dynamics:" not in out + err
    assert not (tmp_path / "runs").exists() or os.listdir(tmp_path / "runs") == []


# ------------------------------------------------------------------------------------------------ as a user runs it
def test_sigint_says_the_launchers_command_that_continues_the_run(hopper_data_dir, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", D4RL_DATASET_DIR=hopper_data_dir[0])
    cmd = toolbox.launch_command("algorithms/td3bc.py", "--env", "hopper-random-v2", *TD3BC, "--epochs", "500",
                                 "--runs-dir", str(tmp_path))  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not any(os.path.isfile(os.path.join(tmp_path, d, "checkpoint.pt")) for d in os.listdir(tmp_path)):
        assert proc.poll() is None and time.time() - t0 < 300, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=300)[1]
    run_dir = only_run(tmp_path)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    hint = f"interrupted by SIGINT; checkpoint saved; continue with: python benchmarks/launch.py algorithms/td3bc.py --resume {run_dir}"  # fmt: skip
    assert last_line(err) == hint and read(run_dir, "summary.json")["status"] == "interrupted"
    assert len(read(run_dir, "summary.json")["invocations"]) == 1
    again = [sys.executable, *hint.split("python ")[1].split(), "--stop-after-epochs", "1"]  # the printed command
    done = subprocess.run(again, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = read(run_dir, "summary.json")
    assert done.returncode == 0 and summary["status"] == "stopped" and len(summary["invocations"]) == 2, done.stderr


def test_the_launcher_takes_only_this_projects_method_files(tmp_path):
    shutil.copy(os.path.join(ROOT, "algorithms", "td3bc.py"), tmp_path)
    for argv, says in (([str(tmp_path / "td3bc.py")], "not a method file"), (["algorithms/plumbing.py"], "not a"),
                       ([], "usage: ")):  # fmt: skip
        done = subprocess.run([sys.executable, "benchmarks/launch.py", *argv], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and says in done.stdout + done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "benchmarks/launch.py", "algorithms/td3bc.py", "--help"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "td3bc.py" in done.stdout.splitlines()[0] and "--resume" in done.stdout
