"""Runs that survive, part 4: a resume does what the user typed, flags and files are checked before the ensemble fit,
two quick signals and a vanishing disk or run directory are one line each, and nothing is left half-written."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch
from conftest import ROOT, TINY, run_script, write_random_dataset
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)
from test_hostile import one_line, tiny_run


def run_cli(module, monkeypatch, capsys, *argv):
    """module.cli in this process, as `python orpo.py ARGV` runs it; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    try:
        module.cli(module.main, module.Args)
        code = 0
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def last_line(err: str) -> str:
    assert "Traceback" not in err, err[-2000:]
    return err.strip().splitlines()[-1]


# ----------------------------------------------------------------------------- resume does what the user typed
def test_resume_extends_to_the_default_epochs_and_names_every_typed_flag_it_ignores(hopper_data_dir, tmp_path):
    first = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--epochs", "2", "--steps-per-epoch", "5",
                       "--eval-episodes", "1", "--exp-name", "myexp", "--batch-size", "32", cwd=str(tmp_path),
                       data_dir=hopper_data_dir[0])  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    # --epochs 1000 is the default value, typed: it extends (one epoch here, then stopped), it is not "nothing to do"
    again = run_script("algorithms/td3bc.py", "--resume", str(run_dir), "--epochs", "1000", "--stop-after-epochs",
                       "1", "--batch-size", "256", "--eval-episodes", "10", data_dir=hopper_data_dir[0])  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs"] == 3 and summary["status"] == "stopped"
    assert "--resume ignores --batch-size 256" in again.stdout and "--resume ignores --eval-episodes 10" in again.stdout
    assert "--exp-name" not in again.stdout  # never typed: no note (it was "ignores --exp-name td3bc")
    assert [i["start_epoch"] for i in summary["invocations"]] == [0, 2]


def test_an_ensemble_of_one_with_a_disagreement_u_is_refused(tmp_path):
    done = run_script("algorithms/mopo.py", "--num-ensemble", "1", "--num-elites", "1", "--uncertainty",
                      "ensemble_std", "--env", "local/nothing", cwd=str(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "0 with --num-ensemble 1" in one_line(done, 2)


def test_mixture_u_keeps_its_aleatoric_part_with_one_member(orpo):
    """Only the members' disagreement is 0 with one member; mixture_var adds the members' own variance."""
    mean, std = torch.randn(1, 4, 3), torch.rand(1, 4, 3) + 0.1
    assert torch.all(orpo.uncertainty_fn(mean, std, "ensemble_var") == 0)
    assert torch.all(orpo.uncertainty_fn(mean, std, "mixture_var") > 0)


# ----------------------------------------------------------------------------- checked before the fit
def test_a_fixed_rollout_policy_from_a_td3bc_run_is_refused_before_the_fit(hopper_data_dir, tmp_path):
    td3bc_dir, _ = tiny_run("td3bc", hopper_data_dir[0], tmp_path)
    done = run_script("algorithms/orpo.py", "--env", "hopper-random-v2", *TINY, "--rollout-policy", "fixed",
                      "--rollout-policy-path", str(td3bc_dir), "--runs-dir", str(tmp_path / "o"),
                      "--dynamics-max-epochs", "100000", "--dynamics-patience", "100000",
                      data_dir=hopper_data_dir[0], timeout=120)  # fmt: skip
    assert "same sizes" in one_line(done, 1) and "dynamics:" not in done.stderr  # no fit started
    assert not os.listdir(tmp_path / "o")  # and no run directory left


@pytest.mark.parametrize(
    "flags",
    [["--rollout-batch-size", "1000000000"], ["--model-retain-epochs", "1000000000"], ["--batch-size", "1000000000"]],
)
def test_sizes_that_cannot_fit_in_memory_are_one_line_before_the_fit(flags, hopper_data_dir, tmp_path):
    done = run_script("algorithms/orpo.py", "--env", "hopper-random-v2", *TINY, *flags, "--runs-dir",
                      str(tmp_path / "o"), "--dynamics-max-epochs", "100000", data_dir=hopper_data_dir[0])  # fmt: skip
    line = one_line(done, 1)
    assert "GiB free" in line and "lower the flags" in line, line
    assert not os.listdir(tmp_path / "o")


def test_budget_checks_the_flags_it_passes_before_starting_a_run(tmp_path):
    done = run_script("benchmarks/budget.py", "--epochs", "0", "--runs-dir", str(tmp_path / "r"), "--results",
                      str(tmp_path / "res"), "--out", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 2 and "--epochs 0" in one_line(done, 2)
    assert not os.path.exists(tmp_path / "r")


# ----------------------------------------------------------------------------- two signals
def test_two_quick_signals_during_a_checkpoint_let_it_finish_then_stop(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):  # fmt: skip
    """SIGINT then SIGTERM while checkpoint.pt is being written: the write completes (no .tmp, a loadable checkpoint),
    then the run stops as interrupted by SIGTERM (143), with summary.json; it resumes."""
    real_save, sent = torch.save, []

    def save_with_two_signals(obj, f):
        if str(getattr(f, "name", "")).endswith("checkpoint.pt.tmp") and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        real_save(obj, f)

    monkeypatch.setattr(orpo.torch, "save", save_with_two_signals)
    flags = ["--env", "hopper-random-v2", *TINY, "--epochs", "3", "--checkpoint-every", "1"]
    code, out, err = run_cli(
        orpo, monkeypatch, capsys, *flags, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)
    )
    assert code == 143 and "interrupted by SIGTERM" in last_line(err)
    (run_dir,) = tmp_path.iterdir()
    assert not glob.glob(str(run_dir / "*.tmp"))
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["epoch"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["epochs"] == 1
    monkeypatch.setattr(orpo.torch, "save", real_save)
    code, out, err = run_cli(orpo, monkeypatch, capsys, "--resume", str(run_dir))
    assert code == 0 and json.loads((run_dir / "summary.json").read_text())["epochs"] == 3


def test_a_signal_while_the_summary_is_written_waits_for_it(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):
    real, hit = plumbing.write_json, []

    def write_json_with_a_signal(obj, path):
        if path.endswith("summary.json") and not hit:
            hit.append(1)
            os.kill(os.getpid(), signal.SIGTERM)  # the default action would kill the process here, without a line
        real(obj, path)

    monkeypatch.setattr(plumbing, "write_json", write_json_with_a_signal)
    flags = ["--env", "hopper-random-v2", *TINY, "--epochs", "1"]
    code, out, err = run_cli(
        orpo, monkeypatch, capsys, *flags, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)
    )
    assert hit and code == 0, err[-2000:]
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert out.strip().splitlines()[-1].startswith("finished: 1 epochs")


# ----------------------------------------------------------------------------- vanishing disks and folders
def test_a_run_directory_deleted_mid_run_is_one_line_that_says_so(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):
    real = plumbing.Logger.log

    def log_then_vanish(self, epoch, metrics):
        real(self, epoch, metrics)
        while epoch == 1 and os.path.isdir(os.path.dirname(self.path)):  # TensorBoard's thread may still be writing
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)

    monkeypatch.setattr(plumbing.Logger, "log", log_then_vanish)
    flags = ["--env", "hopper-random-v2", *TINY, "--epochs", "3", "--checkpoint-every", "1"]
    code, out, err = run_cli(
        orpo, monkeypatch, capsys, *flags, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)
    )
    line = last_line(err)
    assert code == 1 and "was deleted while the run was writing it" in line and "disk" not in line, line


def test_a_background_writer_error_is_one_line_not_a_traceback(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):
    """TensorBoard writes from its own thread: a full disk there raised a thread traceback over the one-line error."""
    real = plumbing.Logger.log

    def log_and_fail_in_a_thread(self, epoch, metrics):
        real(self, epoch, metrics)
        if epoch == 1:
            t = threading.Thread(target=lambda: (_ for _ in ()).throw(OSError(28, "No space left on device")))
            t.start()
            t.join()

    monkeypatch.setattr(plumbing.Logger, "log", log_and_fail_in_a_thread)
    flags = ["--env", "hopper-random-v2", *TINY, "--epochs", "3"]
    code, out, err = run_cli(
        orpo, monkeypatch, capsys, *flags, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)
    )
    line = last_line(err)
    assert code == 1 and "TensorBoard could not write" in line and "free disk space" in line, line
    assert "Exception in thread" not in err


def test_a_failed_write_at_the_start_leaves_no_run_directory(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):
    def full(obj, f):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(orpo.torch, "save", full)  # dynamics.pt, the first tensor file, cannot be written
    flags = ["--env", "hopper-random-v2", *TINY, "--epochs", "1"]
    code, out, err = run_cli(
        orpo, monkeypatch, capsys, *flags, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)
    )
    assert code == 1 and "free disk space" in last_line(err)
    assert not os.listdir(tmp_path)


def test_errno_names_the_fix(tmp_path):
    long = OSError(36, "File name too long")
    assert "shorten --runs-dir" in plumbing._write_failure(long, None)
    assert "read-only" in plumbing._write_failure(OSError(30, "Read-only file system"), None)
    assert "free disk space" in plumbing._write_failure(OSError(28, "No space left"), None)


# ----------------------------------------------------------------------------- tracebacks where a line was promised
def test_track_without_a_wandb_login_is_one_line_before_the_data_loads(hopper_data_dir, tmp_path):
    env = {"WANDB_MODE": "online", "HOME": str(tmp_path), "WANDB_API_KEY": "", "WANDB_CONFIG_DIR": str(tmp_path)}
    done = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--epochs", "1", "--track", "--runs-dir",
                      str(tmp_path / "r"), data_dir=hopper_data_dir[0], extra_env=env, timeout=120)  # fmt: skip
    line = one_line(done, 1)
    assert "--track: wandb did not start" in line and "WANDB_MODE=offline" in line, line
    assert not os.listdir(tmp_path / "r")


def test_an_eval_env_whose_module_does_not_import_is_one_line(hopper_data_dir, tmp_path):
    done = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--eval-env", "no_such_module:Foo-v0",
                      "--runs-dir", str(tmp_path / "r"), data_dir=hopper_data_dir[0])  # fmt: skip
    assert "cannot make evaluation env 'no_such_module:Foo-v0'" in one_line(done, 1)


@pytest.mark.parametrize("case", ["missing", "foreign", "module"])
def test_a_method_file_without_its_plumbing_says_so_in_one_line(case, tmp_path):
    shutil.copy(os.path.join(ROOT, "algorithms", "td3bc.py"), tmp_path / "td3bc.py")
    env = dict(os.environ, PYTHONPATH="", OMP_NUM_THREADS="1")
    if case == "module":  # `python -m algorithms.td3bc` from the root finds plumbing.py beside the file
        done = subprocess.run([sys.executable, "-m", "algorithms.td3bc", "--help"], cwd=ROOT, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0 and "--env" in done.stdout, done.stderr[-2000:]
        return
    if case == "foreign":
        (tmp_path / "plumbing.py").write_text("x = 1\n")
    done = subprocess.run([sys.executable, "td3bc.py", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "copy this project's algorithms/plumbing.py beside td3bc.py" in line


def test_the_toy_refuses_an_unwritable_out_dir_in_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    done = run_script("toy/riskworld.py", "--out-dir", str(afile / "sub"))
    assert done.returncode == 2 and "cannot write there" in one_line(done, 2)


def test_budget_stops_its_run_on_sigterm_and_says_how_to_continue(hopper_data_dir, tmp_path):
    """budget.py forwards SIGTERM to the running run, which checkpoints; it says so and exits 143."""
    os.makedirs(tmp_path / "data" / "local")
    write_random_dataset(str(tmp_path / "data" / "local" / "h.hdf5"), steps=1000, attrs={"env_id": "Hopper-v4"})
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "budget.py"), "--env", "local/h", "--data-dir",
           str(tmp_path / "data"), "--only", "mopo:uncapped", "--runs-dir", str(tmp_path / "r"), "--results",
           str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--dynamics-cache", ""]  # fmt: skip
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "r" / "uncapped_mopo.log"
    for _ in range(600):
        if log.exists() and "epoch" in log.read_text():
            break
        threading.Event().wait(0.2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 143, err[-2000:]
    assert "run the same command again to resume" in err and "Traceback" not in err
    (summary,) = glob.glob(str(tmp_path / "r" / "uncapped" / "mopo" / "*" / "summary.json"))
    assert json.load(open(summary))["status"] == "interrupted"


# ----------------------------------------------------------------------------- words and ways back
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_dataset_path_that_is_not_a_regular_file_is_named_as_such(kind, tmp_path):
    path = "/dev/zero"
    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    done = run_script("algorithms/td3bc.py", "--dataset-path", path, cwd=str(tmp_path))
    assert "is not a regular file" in one_line(done, 2)


def test_a_long_dataset_file_name_still_makes_a_run_directory(hopper_data_dir, tmp_path):
    long = tmp_path / ("h" * 230 + ".hdf5")
    shutil.copy(os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5"), long)
    done = run_script("algorithms/td3bc.py", "--dataset-path", str(long), "--eval-env", "Hopper-v4", "--epochs", "1",
                      "--steps-per-epoch", "5", "--eval-episodes", "1", "--runs-dir", str(tmp_path / "r"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_run_with_a_relative_data_dir_resumes_from_another_folder(hopper_data_dir, tmp_path):
    data = tmp_path / "work" / "data"
    shutil.copytree(hopper_data_dir[0], data)
    first = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--data-dir", "data", "--epochs", "1",
                       "--steps-per-epoch", "5", "--eval-episodes", "1", cwd=str(tmp_path / "work"))  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    (run_dir,) = (tmp_path / "work" / "runs").iterdir()
    assert json.loads((run_dir / "config.json").read_text())["data_dir"] == str(data)
    again = run_script("algorithms/td3bc.py", "--resume", str(run_dir), "--epochs", "2", cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    moved = tmp_path / "moved"
    shutil.move(str(data), moved)  # the data moved: --data-dir may follow it (the fingerprint still matches)
    third = run_script("algorithms/td3bc.py", "--resume", str(run_dir), "--epochs", "3", "--data-dir", str(moved))
    assert third.returncode == 0, third.stderr[-2000:]
