"""What a hostile or careless user meets: conflicting flags, resuming the wrong or a finished run, two writers in one
run directory, a full or unwritable disk, signals during the ensemble fit, malformed files, and non-finite
diagnostics. Each case is one line and the documented exit status, never a traceback; a run records what it ran."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error

import h5py
import numpy as np
import pytest
import torch
from conftest import ROOT, TINY, fit_settings, run_script, write_random_dataset
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)
from test_resume import small


def one_line(result, code):
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def tiny_run(script, data_dir, tmp_path, *extra, epochs="2"):
    result = run_script(
        f"algorithms/{script}.py",
        "--env",
        "hopper-random-v2",
        *small(script),
        "--epochs",
        epochs,
        *extra,
        data_dir=data_dir,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("hopper-random-v2__" + script)]
    return run_dir, result


# ------------------------------------------------------------------------------------------------ flags
@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--no-pessimism", "--lambda-p", "5"], "--no-pessimism labels π^p's data with λp = 0"),
        (["--rollout-policy-path", "."], "--rollout-policy fixed and --rollout-policy-path"),
        (["--rollout-policy", "fixed"], "--rollout-policy fixed and --rollout-policy-path"),
        (
            ["--rollout-policy", "fixed", "--rollout-policy-path", "nowhere"],
            "--rollout-policy-path nowhere: no such file",
        ),
        (["--seed", "-1"], "--seed -1: must lie in [0, 4294967296)"),
        (["--exp-name", "../../escape"], "--exp-name '../../escape': must be a plain name"),
        (["--dataset-path", "."], "--dataset-path .: is a directory"),
        (["--epochs", "nan"], "error: Error parsing --epochs: invalid literal for int()"),
        (["--uncertainty", "foo"], "invalid choice 'foo' for argument '--uncertainty'"),
        (["--bogus", "3"], "Unrecognized options: --bogus, 3 (see python "),
        (["--lambda-pp", "3"], "Unrecognized options: --lambda-pp, 3 (did you mean --lambda-p?)"),  # tyro's guess
    ],
)
def test_conflicting_and_unparsable_flags_are_one_line_exit_2(flags, expected, tmp_path):
    line = one_line(run_script("algorithms/orpo.py", *flags, cwd=str(tmp_path)), 2)
    assert expected in line, line
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


def test_a_fixed_rollout_policy_may_name_a_run_directory(orpo, tmp_path):
    import plumbing

    plumbing.check_args(orpo.Args(rollout_policy="fixed", rollout_policy_path=str(tmp_path)))  # the field says so
    with pytest.raises(plumbing.UsageError, match="is a directory; pass a D4RL-layout HDF5 file"):
        plumbing.check_args(orpo.Args(dataset_path=str(tmp_path)))  # a plain PATHS entry does not


def test_the_config_records_what_ran_without_pessimism(orpo):
    task = orpo.Task("hopper-medium-v2", "Hopper-v4", "hopper")
    assert orpo.apply_presets(orpo.Args(), task)[0].lambda_p == 5.0
    assert orpo.apply_presets(orpo.Args(pessimism=False), task)[0].lambda_p == 0.0  # what π^p's rewards use


# ------------------------------------------------------------------------------------------------ resume
def test_resume_leaves_a_finished_run_alone_and_refuses_fewer_epochs(hopper_data_dir, tmp_path):
    run_dir, _ = tiny_run("td3bc", hopper_data_dir[0], tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    summary = json.loads((run_dir / "summary.json").read_text())
    again = run_script("algorithms/td3bc.py", "--resume", str(run_dir), cwd=str(tmp_path))
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr[-2000:]
    fewer = one_line(run_script("algorithms/td3bc.py", "--resume", str(run_dir), "--epochs", "1", cwd=str(tmp_path)), 2)
    assert "has run 2 epochs already" in fewer
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before  # no new TensorBoard file, no rewrite
    assert json.loads((run_dir / "summary.json").read_text()) == summary and summary["status"] == "finished"


@pytest.fixture(scope="module")
def td3bc_run(hopper_data_dir, tmp_path_factory):
    return tiny_run("td3bc", hopper_data_dir[0], tmp_path_factory.mktemp("td3bc_run"))[0]


@pytest.mark.parametrize("script", ["orpo", "mopo", "oroo", "mbpo"])
def test_every_file_refuses_another_scripts_run_dir(script, td3bc_run, tmp_path):
    started = time.time()
    line = one_line(run_script(f"algorithms/{script}.py", "--resume", str(td3bc_run), cwd=str(tmp_path)), 1)
    assert f"is a run of td3bc.py; pass a run directory made by {script}.py" in line
    assert time.time() - started < 60  # refused before any data is read or any ensemble fitted


def test_a_config_without_its_script_name_is_refused_by_its_flags(orpo, tmp_path):
    """Run directories made before config.json named its script: the flags themselves tell the scripts apart."""
    config = {k: v for k, v in json.loads(json.dumps(plumbing.asdict(orpo.Args()))).items() if k != "pessimism"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(orpo.UserError, match="is a run of another script \\(its flags differ: pessimism\\)"):
        plumbing.resumed_args(orpo.Args(resume=str(tmp_path)))


def test_a_run_saved_before_a_flag_existed_resumes_with_its_default(orpo, tmp_path, capsys):
    """A flag added after a run was saved takes its default on --resume (said in a note); a flag the script does not
    know still marks another script's run."""
    config = {k: v for k, v in json.loads(json.dumps(plumbing.asdict(orpo.Args()))).items() if k != "pessimism"}
    config["_script"] = "orpo.py"
    (tmp_path / "config.json").write_text(json.dumps({**config, "seed": 5}))
    resumed = plumbing.resumed_args(orpo.Args(resume=str(tmp_path)))
    assert resumed.seed == 5 and resumed.pessimism == orpo.Args().pessimism
    assert "predates --pessimism; it resumes with the default" in capsys.readouterr().out
    (tmp_path / "config.json").write_text(json.dumps({**config, "lambda_q": 1.0}))
    with pytest.raises(orpo.UserError, match="saved by a orpo.py with flags this one lacks \\(lambda_q\\)"):
        plumbing.resumed_args(orpo.Args(resume=str(tmp_path)))


def test_a_second_writer_is_refused_with_the_first_ones_pid(td3bc_run, hopper_data_dir, tmp_path):
    run_dir = td3bc_run
    with open(run_dir / "run.lock", "a+") as lock:  # what a live run holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.truncate(0)
        lock.write("4242\n")
        lock.flush()
        line = one_line(
            run_script(
                "algorithms/td3bc.py",
                "--resume",
                str(run_dir),
                "--epochs",
                "3",
                data_dir=hopper_data_dir[0],
                cwd=str(tmp_path),
            ),
            1,
        )
    assert "is in use by another process (pid 4242)" in line
    assert json.loads((run_dir / "summary.json").read_text())["epochs"] == 2  # the refused writer wrote nothing


# ------------------------------------------------------------------------------------------------ disks and signals
def test_an_unusable_runs_dir_fails_before_the_data_loads(hopper_data_dir, tmp_path):
    (tmp_path / "a_file").write_text("")
    line = one_line(
        run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--runs-dir", "a_file/runs", cwd=str(tmp_path)),
        1,
    )
    assert "cannot write in a_file/runs (Not a directory); pass a writable --runs-dir" in line


def test_a_failed_checkpoint_write_keeps_the_last_good_one_and_says_so(
    orpo, hopper_data_dir, tmp_path, monkeypatch, capsys
):
    saves = []
    real_save = torch.save

    def disk_full_after_the_first_checkpoint(obj, f):
        if str(getattr(f, "name", f)).endswith("checkpoint.pt.tmp"):
            saves.append(f)
            if len(saves) > 1:
                f.write(b"half")
                raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        real_save(obj, f)

    monkeypatch.setattr(orpo.torch, "save", disk_full_after_the_first_checkpoint)
    argv = ["orpo.py", "--env", "hopper-random-v2", *TINY, "--epochs", "3", "--checkpoint-every", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as ended:
        orpo.cli(orpo.main, orpo.Args)
    assert ended.value.code == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bars
    assert last.startswith("error: could not write") and "file write failed" in last and "--resume" in last, last
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / "checkpoint.pt.tmp").exists()
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["epoch"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "could not write" in summary["error"]
    # the failed write's file is closed at once: on a full disk an open, removed file keeps its space, and then
    # summary.json could not be written either (seen on a tiny tmpfs)
    assert len(saves) == 2 and all(f.closed for f in saves)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_ensemble_fit_is_status_interrupted(signum, hopper_data_dir, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", D4RL_DATASET_DIR=hopper_data_dir[0], PYTHONUNBUFFERED="1")
    long_fit = ["--dynamics-max-epochs", "100000", "--dynamics-patience", "100000"]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "algorithms/orpo.py"), "--env", "hopper-random-v2", *TINY, *long_fit],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while "lambda_p" not in proc.stdout.readline():  # the config is printed once D is loaded, right before the fit
        assert proc.poll() is None, proc.stderr.read()[-2000:]
    seen = ""
    while seen.count("best_member_holdout_mse") < 2:  # the fit's second epoch ends: the first has been recorded
        seen += proc.stderr.read(1)
        assert proc.poll() is None, seen[-2000:]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert f"interrupted by {signal.Signals(signum).name}" in last
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "continue with: python " in last and last.endswith(f"orpo.py --resume runs/{run_dir.name}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["epochs"] == 0
    # the fit's epochs so far are kept (the last finished one's state), for --resume to continue from
    fitted = torch.load(run_dir / "dynamics_fit.pt", weights_only=True)["state"]["epoch"]
    assert fitted >= 1


# ------------------------------------------------------------------------------------------------ files
def test_an_hdf5_whose_rewards_is_a_group_is_one_line(orpo, tmp_path):
    path = str(tmp_path / "group.hdf5")
    write_random_dataset(path, steps=200)
    with h5py.File(path, "a") as f:
        del f["rewards"]
        f.create_group("rewards")
    with pytest.raises(orpo.UserError, match="lacks the dataset\\(s\\) rewards"):
        plumbing.load_transitions(path)


def test_a_failed_first_download_leaves_no_empty_folder(orpo, tmp_path, monkeypatch):
    def offline(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(plumbing.urllib.request, "urlopen", offline)
    data_dir = tmp_path / "d4rl" / "datasets"
    with pytest.raises(orpo.UserError, match="could not download the dataset"):
        plumbing.resolve_task("hopper-medium-v2", None, None, str(data_dir))
    assert not data_dir.exists() and not (tmp_path / "d4rl").exists()


def test_a_holdout_ratio_that_holds_out_nothing_fails_before_the_fit(orpo):
    args = orpo.Args(dynamics_holdout_ratio=1e-9, num_ensemble=2, num_elites=1, dynamics_hidden_dims=(8,))
    data = {k: torch.zeros(100, d) for k, d in (("obs", 3), ("act", 2), ("rew", 1), ("next_obs", 3))}
    model = orpo.EnsembleDynamics(3, 2, (8,), 2, 1)
    with pytest.raises(orpo.UserError, match="holds out 0 of 100 transitions"):
        orpo.fit_dynamics(model, data, **fit_settings(args))


# ------------------------------------------------------------------------------------------------ what a run prints
def test_an_input_error_comes_first_and_alone(tmp_path):
    bad = tmp_path / "bad.hdf5"
    bad.write_bytes(b"not an hdf5 file")
    result = run_script("algorithms/orpo.py", "--dataset-path", str(bad), "--eval-env", "Hopper-v4", cwd=str(tmp_path))
    assert "is not a readable HDF5 file" in one_line(result, 1)
    assert "lambda_p" not in result.stdout  # the config is printed only once the data passed its checks
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_a_holdout_that_cannot_work_is_one_line_before_the_config_is_printed(hopper_data_dir, tmp_path):
    """The ensemble's holdout size depends on D's size: checked once D is read, before the config dump."""
    flags = ["--env", "hopper-random-v2", "--dynamics-holdout-ratio", "1e-9", "--no-cuda"]
    result = run_script("algorithms/mopo.py", *flags, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    assert "holds out 0 of" in one_line(result, 1) and result.stdout.strip() == ""
    assert not list((tmp_path / "runs").iterdir())


def broken(path, change) -> str:
    """A 100-row D4RL-layout file (Hopper-v4), then `change(f)` applied to it."""
    write_random_dataset(str(path), steps=100, attrs={"env_id": "Hopper-v4"})
    with h5py.File(path, "r+") as f:
        change(f)
    return str(path)


def replace(key, value):
    def change(f):
        del f[key]
        f[key] = value

    return change


def empty(f):
    for k in list(f):
        value = f[k][()]
        del f[k]
        f[k] = value[:0]


def attr(**values):
    return lambda f: f.attrs.update(values)


@pytest.mark.parametrize(
    "change, expected",
    [
        (replace("observations", np.float32(1)), "'observations' has shape () and dtype float32; expected 2-D"),
        (empty, "holds 0 rows; a run needs at least 10 transitions"),
        (attr(env_id=np.int64(3)), "attr 'env_id' is np.int64(3), not a string"),
        (attr(env_id=np.array(["Hopper-v4", "Walker2d-v4"], dtype=h5py.string_dtype())), "attr 'env_id' is array("),
        (attr(ref_min_score="abc", ref_max_score="xyz"), "ref_max_score 'xyz' must be finite numbers, min < max"),
        (attr(ref_min_score=1.0, ref_max_score=1.0), "must be finite numbers, min < max"),
        (attr(reward_fn="bogus"), "attr 'reward_fn' is 'bogus'; use one of env, halfcheetah-jump"),
    ],
    ids=[
        "scalar-observations",
        "0-rows",
        "int-env-id",
        "2-env-ids",
        "text-references",
        "equal-references",
        "bogus-reward",
    ],
)
def test_a_broken_data_file_is_one_line_and_leaves_no_run_dir(change, expected, tmp_path):
    path = broken(tmp_path / "x.hdf5", change)
    result = run_script("algorithms/td3bc.py", "--dataset-path", path, "--epochs", "1", "--no-cuda", cwd=str(tmp_path))
    assert expected in one_line(result, 1)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_summary_json_is_strict_json_and_names_the_algorithm_apart_from_the_experiment(td3bc_run, tmp_path):
    summary_path = os.path.join(td3bc_run, "summary.json")
    summary = json.loads(open(summary_path).read(), parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert summary["algorithm"] == "td3bc" and summary["exp_name"] == "td3bc"
    plumbing.write_json({"last10_score": float("inf"), "x": float("nan"), "ok": 1.5}, str(tmp_path / "s.json"))
    assert json.loads((tmp_path / "s.json").read_text()) == {"last10_score": None, "x": None, "ok": 1.5}


def test_a_long_experiment_name_is_a_flag_error_before_any_work(tmp_path):
    result = run_script("algorithms/td3bc.py", "--exp-name", "x" * 300, cwd=str(tmp_path))
    assert "--exp-name 'xxxx" in one_line(result, 2) and "at most 100 characters" in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "doctor",
    [
        lambda c: c.pop("rows"),
        lambda c: c.update(epoch="x"),
        lambda c: c.update(epoch=99),
        lambda c: c.update(scores=[float("nan")]),
        lambda c: c.update(rows=[1, 2]),
    ],
    ids=["no-rows", "text-epoch", "epoch-beyond-the-run", "nan-score", "rows-not-dicts"],
)
def test_a_checkpoint_with_malformed_bookkeeping_is_one_line(doctor, td3bc_run, hopper_data_dir, tmp_path):
    """Not only the weights: a checkpoint's epoch, metrics rows, scores and wall time are checked before use."""
    import shutil

    run_dir = shutil.copytree(td3bc_run, tmp_path / "run")
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    doctor(ckpt)
    torch.save(ckpt, run_dir / "checkpoint.pt")
    result = run_script("algorithms/td3bc.py", "--resume", str(run_dir), "--epochs", "3", "--no-cuda",
                        data_dir=hopper_data_dir[0], cwd=str(tmp_path))  # fmt: skip
    assert "does not match this run" in one_line(result, 1)


def test_nonfinite_diagnostics_are_logged_and_a_poisoned_policy_is_never_evaluated(
    orpo, hopper_data_dir, tmp_path, monkeypatch
):
    """u or the model return may be NaN after a short fit: logged as such, the run goes on. Non-finite weights stop
    the run before its evaluation, so NaN actions never reach MuJoCo."""
    real_metrics, evaluated = orpo.rollout_metrics, []
    monkeypatch.setattr(orpo, "rollout_metrics", lambda *a: {**real_metrics(*a), "rollout/u_optimistic": np.nan})
    real_evaluate = plumbing.Run.evaluate
    monkeypatch.setattr(
        plumbing.Run, "evaluate", lambda self, *a: evaluated.append(self.epoch) or real_evaluate(self, *a)
    )
    argv = ["--env", "hopper-random-v2", *TINY, "--data-dir", hopper_data_dir[0], "--runs-dir", str(tmp_path / "a")]
    summary = orpo.main(plumbing.parse_args(orpo.Args, argv))
    assert summary["status"] == "finished" and evaluated == [1, 2]
    metrics = (tmp_path / "a" / os.path.basename(summary["run_dir"]) / "metrics.csv").read_text()
    assert "rollout/u_optimistic" in metrics and ",nan," in metrics

    real_means, evaluated[:] = plumbing.Run.means, []

    def poison_in_epoch_2(self):
        if self.epoch == 2:
            with torch.no_grad():
                next(self.parts["output_policy"].actor.parameters()).fill_(float("nan"))
        return real_means(self)

    monkeypatch.setattr(plumbing.Run, "means", poison_in_epoch_2)
    argv[-1] = str(tmp_path / "b")
    with pytest.raises(plumbing.RunEnded, match="epoch 2: output_policy.actor"):
        orpo.main(plumbing.parse_args(orpo.Args, argv))
    assert evaluated == [1]
