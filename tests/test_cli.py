"""The command line of the method files, in this process (plumbing.cli with an argv): --help is tyro's, every bad flag,
file or resume is refused before any work with one line that names it and what to do (a non-zero exit, never a
traceback), nothing is left half-written, and a run's record says what ran."""

import datetime
import json
import re
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from unittest import mock

import filelock
import h5py
import numpy as np
import pytest
import torch
from conftest import ALGORITHMS, TINY, load_module, write_random_dataset

import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)


# TINY's flags that td3bc.py (no model) has
TD3BC = "--epochs 2 --steps-per-epoch 20 --batch-size 32 --hidden-dims 32 32 --eval-episodes 2 --no-cuda".split()


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def only_run(folder) -> str:
    (run,) = [os.path.join(folder, d) for d in os.listdir(folder)]
    return run


def assert_nothing_written(tmp_path):
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")


# ---------------------------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("script", ALGORITHMS)
def test_help_is_tyros_with_every_flag_and_its_docstring(script, files, cli):
    code, out, _ = cli(script, "--help")
    assert code == 0
    for f in plumbing.dataclasses.fields(files[script].Args):
        assert f"--{f.name.replace('_', '-')}" in out, f.name
    assert "seed of the experiment" in out and "--no-cuda" in out  # a docstring; a boolean's pair


def test_an_optional_boolean_takes_the_spelling_of_every_boolean(files):
    parse = lambda *a: plumbing.parse_args(files["orpo"].Args, list(a)).normalize_obs  # noqa: E731
    assert (parse(), parse("--normalize-obs"), parse("--no-normalize-obs")) == (None, True, False)


# --------------------------------------------------------------------------------------------------------------- flags
@pytest.mark.parametrize("script, flags, named, fix", [("orpo", ["--no-pessimism", "--lambda-p", "5"],
                         "--lambda-p 5.0", "drop"), ("orpo", ["--rollout-policy", "fixed"], "--rollout-policy-path",
                         "go together"), ("orpo", ["--rollout-policy-path", "."], "--rollout-policy fixed",
                         "go together"), ("orpo", ["--rollout-policy", "fixed", "--rollout-policy-path", "nowhere"],
                         "--rollout-policy-path", "pass an"), ("orpo", ["--real-ratio", "0.6",
                         "--output-rollout-ratio", "0.6"], "--output-rollout-ratio 0.6", "exceed 1"), ("orpo",
                         ["--seed", "-1"], "--seed -1", "[0, 4294967296)"), ("orpo", ["--actor-lr", "0"],
                         "--actor-lr 0.0", "(0, inf)"), ("orpo", ["--gamma", "1.5"], "--gamma 1.5", "[0, 1]"),
                         ("orpo", ["--lambda-o", "inf"], "--lambda-o inf", "finite"), ("orpo", ["--hidden-dims", "32",
                         "0"], "--hidden-dims (32, 0)", "[1, inf)"), ("orpo", ["--dynamics-holdout-ratio", "1"],
                         "--dynamics-holdout-ratio 1.0", "(0, 1)"), ("orpo", ["--exp-name", "../../escape"],
                         "--exp-name '../../escape'", "plain name"), ("orpo", ["--dataset-path", "."],
                         "--dataset-path .: is a directory", "pass a D4RL-layout HDF5 file"), ("orpo",
                         ["--load-dynamics-path", "none.pt"], "--load-dynamics-path none.pt",
                         "pass a run's dynamics.pt"), ("mopo", ["--num-elites", "9"],
                         "--num-elites 9 exceeds --num-ensemble 7", ""), ("mbpo", ["--num-ensemble", "1",
                         "--num-elites", "1", "--uncertainty", "ensemble_std"], "--num-ensemble 1", "2+"), ("oroo",
                         ["--epochs", "0"], "--epochs 0", "[1, inf)"), ("td3bc", ["--checkpoint-minutes", "0"],
                         "--checkpoint-minutes 0.0", "(0, inf)"), ("td3bc", ["--threads", "0"], "--threads 0",
                         "[1, inf)")])  # fmt: skip
def test_a_bad_flag_is_one_line_naming_it_and_the_fix_exit_2_before_any_work(script, flags, named, fix, cli, tmp_path):
    code, out, err = cli(script, *flags)
    assert code == 2 and named in err and fix in err and err.startswith("error: "), err
    assert out == "" and not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


@pytest.mark.parametrize("flags, named", [(["--epochs", "x"], "--epochs"), (["--lambda-pp", "3"], "--lambda-p"),
                                          (["--uncertainty", "foo"], "--uncertainty")])  # fmt: skip
def test_an_unparsable_flag_is_tyros_box_naming_it_exit_2(flags, named, cli, tmp_path):
    code, out, err = cli("orpo", *flags)
    assert code == 2 and named in err and not (tmp_path / "runs").exists()


def test_a_copiers_own_flag_declares_its_range_and_rules_beside_it(files):
    """What a researcher adds to a copied file: plumbing checks it without knowing its name."""

    @dataclass
    class Mine(files["td3bc"].Args):
        beta: float = field(default=0.5, metadata={"range": "(0, 1]"})
        """my new coefficient"""
        warmup: int = 3

        def problems(self) -> list[str]:
            return ["--warmup must be below --epochs"] * (self.warmup >= self.epochs)

    plumbing.check_args(Mine())
    with pytest.raises(plumbing.UsageError) as e:
        plumbing.check_args(Mine(beta=0.0, warmup=5, epochs=2, seed=-3))
    assert str(e.value).splitlines() == [  # RunArgs' own --seed is checked by the same loop
        "--seed -3: must lie in [0, 4294967296)",
        "--beta 0.0: must lie in (0, 1]",
        "--warmup must be below --epochs",
    ]


def test_plumbing_names_no_method_flag_and_reads_none_by_attribute():
    source = open(plumbing.__file__).read()
    method_flags = {f.name for name in ALGORITHMS for f in plumbing.dataclasses.fields(load_module(
        f"algorithms/{name}.py", f"names_{name}").Args)} - {f.name for f in plumbing.dataclasses.fields(plumbing.RunArgs)}  # fmt: skip
    named = [f for f in sorted(method_flags) if re.search(rf"(--{f.replace('_', '-')}|\.{f})\b", source)]
    assert not named, f"plumbing.py names the method flags {named}"
    assert "getattr(args" not in source and "hasattr(args" not in source


# ------------------------------------------------------------------------------------------------------------ files
def broken(path, change) -> str:
    write_random_dataset(str(path), steps=100, attrs={"env_id": "Hopper-v4"})
    with h5py.File(path, "r+") as f:
        change(f)
    return str(path)


def replace(key, value):
    return lambda f: (f.__delitem__(key), f.__setitem__(key, value))


@pytest.mark.parametrize("change, named, fix", [(replace("observations", np.float32(1)),
                         "'observations' has shape ()", "expected 2-D"), (lambda f: (f.__delitem__("rewards"),
                         f.create_group("rewards")), "lacks the dataset(s) rewards", "needs"), (replace("rewards",
                         np.full(100, np.nan, np.float32)), "'rewards' has NaN", "drop them"), (replace("terminals",
                         np.full(100, 2.0)), "'terminals' must hold only 0/1", "fix the file"), (replace("actions",
                         np.full((100, 3), 5.0, np.float32)), "outside Hopper-v4's action space", "clip them"),
                         (lambda f: f.attrs.update(env_id=np.int64(3)), "attr 'env_id' is np.int64(3)",
                         "fix the file's attrs"), (lambda f: f.attrs.update(ref_min_score=1.0, ref_max_score=1.0),
                         "attrs ref_min_score", "or drop both"), (lambda f: f.attrs.update(reward_fn="bogus"),
                         "attr 'reward_fn' is 'bogus'", "use one of env"),
                         (lambda f: f.attrs.update(env_id="Walker2d-v4"), "but Walker2d-v4 has",
                         "pass the matching --eval-env"), (lambda f: f.attrs.update(env_id="nomodule:Foo-v0"),
                         "cannot make evaluation env", "pass --eval-env")], ids=["scalar", "group", "nan",
                         "terminals", "actions", "int-attr", "refs", "reward-fn", "dims", "env"])  # fmt: skip
def test_a_broken_data_file_is_one_line_naming_it_and_leaves_no_run_dir(change, named, fix, cli, tmp_path):
    path = broken(tmp_path / "x.hdf5", change)
    code, out, err = cli("td3bc", "--dataset-path", path, "--epochs", "1", "--no-cuda")
    assert code == 1 and named in last_line(err) and fix in last_line(err), err
    assert path in err or "--eval-env" in err  # the file, or the flag that picks the env
    assert "preset" not in out  # the config is printed once the data passed every check
    assert_nothing_written(tmp_path)


def test_an_unreadable_or_missing_dataset_is_one_line(cli, tmp_path):
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5")
    code, _, err = cli("orpo", "--dataset-path", "bad.hdf5", "--eval-env", "Hopper-v4")
    assert code == 1 and "bad.hdf5 is not a readable HDF5 file" in err and "download or make it again" in err
    code, _, err = cli("orpo", "--env", "local/nothing", "--data-dir", ".")
    assert code == 1 and "local/nothing.hdf5 does not exist; make it with `python datasets/collect.py`" in err
    code, _, err = cli("orpo", "--env", "hopper-typo-v2")
    assert code == 1 and "unknown dataset 'hopper-typo-v2'; use one of" in err
    os.mkfifo(tmp_path / "fifo")
    for path in ("/dev/null", str(tmp_path / "fifo")):  # a device, a fifo: named as such
        code, _, err = cli("orpo", "--dataset-path", path)
        assert code == 2 and f"--dataset-path {path}: is not a regular file" in err
    assert_nothing_written(tmp_path)


def test_a_failed_first_download_leaves_no_empty_folder(monkeypatch, tmp_path):
    def offline(url, dst, *a, **k):
        raise OSError("no network")

    monkeypatch.setattr(plumbing.torch.hub, "download_url_to_file", offline)
    with pytest.raises(plumbing.UserError, match="could not download the dataset .*put the file at"):
        plumbing.resolve_task("hopper-medium-v2", None, None, str(tmp_path / "d4rl" / "datasets"))
    assert not (tmp_path / "d4rl").exists()


def test_sizes_that_cannot_fit_in_memory_or_a_holdout_of_nothing_are_one_line_before_the_fit(cli, tmp_path):
    code, out, err = cli("orpo", "--env", "hopper-random-v2", *TINY, "--batch-size", str(10**12))
    assert code == 1 and "--batch-size 1000000000000 needs" in err and "lower the flags that size it" in err
    assert "dynamics:" not in out + err
    code, out, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--rollout-batch-size", str(10**11))
    assert code == 1 and "a buffer of" in err and "dynamics:" not in out + err
    code, out, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--dynamics-holdout-ratio", "1e-9")
    assert code == 1 and "--dynamics-holdout-ratio 1e-09 holds out 0 of" in err and "best_member" not in err
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------------------------------------- resume
@pytest.fixture
def td3bc_run(cli, tmp_path):
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--runs-dir", "done")
    assert code == 0, err
    return only_run(tmp_path / "done")


def test_resume_leaves_a_finished_run_alone_refuses_fewer_epochs_and_extends(td3bc_run, cli):
    before = {p: os.stat(os.path.join(td3bc_run, p)).st_mtime_ns for p in os.listdir(td3bc_run)}
    code, out, _ = cli("td3bc", "--resume", td3bc_run)
    assert code == 0 and "finished its 2 epochs: nothing to do (--epochs N extends it)" in out
    code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "1")
    assert code == 2 and "--epochs 1: " in err and "has run 2 epochs already" in err
    assert {p: os.stat(os.path.join(td3bc_run, p)).st_mtime_ns for p in os.listdir(td3bc_run)} == before
    code, out, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3", "--batch-size", "64", "--seed", "1")
    assert code == 0 and "note: --resume ignores --batch-size 64; the run keeps its saved 32" in out
    assert "--seed" not in out  # typed, but equal to the saved value
    summary = json.load(open(os.path.join(td3bc_run, "summary.json")))
    assert summary["epochs"] == 3 and summary["finished"] and len(summary["invocations"]) == 2


def test_every_file_refuses_another_scripts_run_dir_before_any_work(td3bc_run, cli):
    for script in ("orpo", "mopo", "oroo", "mbpo"):
        started, (code, _, err) = time.time(), cli(script, "--resume", td3bc_run)
        assert code == 1 and f"is a run of td3bc.py; pass a run directory made by {script}.py" in last_line(err)
        assert time.time() - started < 30


def test_a_run_dir_written_before_the_change_still_resumes(td3bc_run, cli):
    """An old config.json: it lacks a flag added since (its default is taken) and holds one removed since
    (--dynamics-cache: the run keeps its dynamics.pt); both are said in a note."""
    config = json.load(open(os.path.join(td3bc_run, "config.json")))
    del config["threads"]
    config["dynamics_cache"] = "runs/dynamics_cache"
    json.dump(config, open(os.path.join(td3bc_run, "config.json"), "w"))
    code, out, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 0, err
    assert "predates --threads; it resumes with the default None" in out
    assert "was saved with --dynamics-cache runs/dynamics_cache, which td3bc.py no longer has" in out


def test_a_config_of_unknown_origin_or_none_is_refused(cli, tmp_path, files):
    (tmp_path / "x").mkdir()
    code, _, err = cli("orpo", "--resume", "x")
    assert code == 1 and "--resume x has no readable config.json; pass a run directory made by orpo.py" in err
    config = {k: v for k, v in plumbing.asdict(files["orpo"].Args()).items() if k != "pessimism"}
    (tmp_path / "x" / "config.json").write_text(json.dumps(config))  # no _script: told apart by its flags
    code, _, err = cli("orpo", "--resume", "x")
    assert code == 1 and "is a run of another script" in err


def test_a_resume_is_refused_while_another_process_writes_the_run_or_once_its_data_changed(td3bc_run, cli, tmp_path,
                                                                                            hopper_data_dir):  # fmt: skip
    data, moved = os.path.join(hopper_data_dir[0], "hopper_random-v2.hdf5"), tmp_path / "d"
    moved.mkdir()
    write_random_dataset(str(moved / "hopper_random-v2.hdf5"), steps=500, seed=7)
    code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3", "--data-dir", str(moved))
    assert code == 1 and "changed since" in err and "resume with the original file" in err and os.path.isfile(data)
    with filelock.FileLock(os.path.join(td3bc_run, "run.lock")):  # what a live run holds
        code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 1 and f"{td3bc_run} is in use by another process; stop it first" in err
    assert cli("td3bc", "--resume", td3bc_run, "--epochs", "3")[0] == 0  # once it is gone, the resume runs


@pytest.mark.parametrize(
    "doctor",
    [lambda c: c.pop("rows"), lambda c: c.update(epoch="x"), lambda c: c.update(epoch=99),
     lambda c: c.update(scores=[float("nan")]), lambda c: c.update(parts={})],
    ids=["no-rows", "text-epoch", "epoch-beyond-the-run", "nan-score", "other-parts"],
)  # fmt: skip
def test_a_checkpoint_that_does_not_match_is_one_line(doctor, td3bc_run, cli):
    ckpt = torch.load(os.path.join(td3bc_run, "checkpoint.pt"), weights_only=True)
    doctor(ckpt)
    torch.save(ckpt, os.path.join(td3bc_run, "checkpoint.pt"))
    code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 1 and "checkpoint.pt does not match this run" in last_line(err)


def test_a_relative_data_dir_resumes_from_another_folder(cli, hopper_data_dir, tmp_path, monkeypatch):
    os.symlink(hopper_data_dir[0], tmp_path / "data")
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--data-dir", "data", "--runs-dir", "r")
    assert code == 0, err
    run = os.path.abspath(only_run(tmp_path / "r"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = cli("td3bc", "--resume", run, "--epochs", "3")
    assert code == 0, err


# ------------------------------------------------------------------------------------------- what a run writes
def test_a_run_says_in_one_line_what_runs_and_in_one_line_what_came_of_it(cli, tmp_path):
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--threads", "2", "--exp-name", "x")
    assert code == 0 and torch.get_num_threads() == 2
    first, last = out.strip().splitlines()[0], out.strip().splitlines()[-1]
    assert "hopper-random-v2 (" in first and "preset none" in first and "flags: batch_size 32" in first
    assert last.startswith("finished: 2 epochs in 0:00:") and "D4RL score" in last and "summary.json" in last
    run = only_run(tmp_path / "runs")
    assert os.path.basename(run).startswith("hopper-random-v2__x__1__")
    config, summary = (json.load(open(os.path.join(run, f))) for f in ("config.json", "summary.json"))
    assert config["_script"] == "td3bc.py" and "threads" in config["_typed"] and config["epochs"] == 2
    assert summary["algorithm"] == "td3bc" and summary["exp_name"] == "x" and summary["status"] == "finished"
    assert sorted(os.listdir(run)) == sorted(["checkpoint.pt", "config.json", "invocations.jsonl", "metrics.csv",
                                              "policy.pt", "summary.json", *[f for f in os.listdir(run) if "tfevents" in f]])  # fmt: skip
    torch.set_num_threads(1)


def test_the_run_record_starts_when_the_run_begins(files, cli, monkeypatch, tmp_path):
    """invocations.jsonl and config.json are there before the data is read: a run stopped in its ensemble fit has its
    start recorded, with the time it started."""
    seen = {}

    def spy(self, model, fit, path=None):
        with open(os.path.join(self.dir, "invocations.jsonl")) as f:
            seen["record"] = [json.loads(line) for line in f]
        seen["config"] = os.path.isfile(os.path.join(self.dir, "config.json"))
        raise KeyboardInterrupt

    monkeypatch.setattr(plumbing.Run, "load_or_fit", spy)
    started = int(time.time())
    code, _, err = cli("mopo", "--env", "hopper-random-v2", *TINY)
    assert code == 130 and "interrupted by SIGINT" in last_line(err) and "--resume" in last_line(err)
    (record,) = seen["record"]
    at = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    assert seen["config"] and record["start_epoch"] == 0 and started <= at <= time.time()
    summary = json.load(open(os.path.join(only_run(tmp_path / "runs"), "summary.json")))
    assert summary["status"] == "interrupted" and summary["invocations"] == [record]


def test_two_runs_started_in_the_same_second_get_different_directories(files, monkeypatch, tmp_path, hopper_data_dir):
    monkeypatch.setattr(plumbing.time, "time", lambda: 1_700_000_000.0)
    args = files["td3bc"].Args(env="hopper-random-v2", runs_dir=str(tmp_path), cuda=False, data_dir=hopper_data_dir[0])
    a, b = (plumbing.Run(args) for _ in range(2))
    for run in (a, b):
        run.end("stopped")  # restores the signal handlers
    assert os.path.basename(b.dir) == os.path.basename(a.dir) + "_2" and os.path.isfile(f"{b.dir}/config.json")


# ------------------------------------------------------------------------------------------------ hostile machines
def test_a_failed_checkpoint_write_keeps_the_last_good_one_and_says_so(cli, monkeypatch, tmp_path):
    saves, real = [], torch.save

    def save(obj, f):  # the disk fills after the first checkpoint
        if str(getattr(f, "name", f)).endswith("checkpoint.pt.tmp"):
            saves.append(f)
            if len(saves) > 1:
                f.write(b"half")
                raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        real(obj, f)

    monkeypatch.setattr(plumbing.torch, "save", save)
    code, _, err = cli("orpo", "--env", "hopper-random-v2", *TINY, "--epochs", "3", "--checkpoint-every", "1")
    line = last_line(err)
    assert code == 1 and line.startswith("error: could not write") and "free disk space" in line and "--resume" in line
    run = only_run(tmp_path / "runs")
    assert torch.load(os.path.join(run, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert not os.path.exists(os.path.join(run, "checkpoint.pt.tmp")) and all(f.closed for f in saves)
    assert json.load(open(os.path.join(run, "summary.json")))["status"] == "failed"


def test_an_unwritable_runs_dir_or_a_full_disk_fails_at_the_start_and_leaves_no_run_directory(cli, monkeypatch,
                                                                                                tmp_path):  # fmt: skip
    (tmp_path / "a_file").write_text("")
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", "--runs-dir", "a_file/runs")
    assert code == 1 and "cannot write in a_file/runs (Not a directory); pass a writable --runs-dir" in err
    assert out == ""  # before the data loads
    monkeypatch.setattr(plumbing, "atomic_save", mock.Mock(side_effect=OSError(28, "No space left on device")))
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC)
    assert code == 1 and "No space left on device; free disk space" in last_line(err)
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("fault, says", [(lambda run: run.epoch == 2 and plumbing.shutil.rmtree(run.dir), ("the run "
                         "directory", "was deleted while the run was writing it", "start the run again")), (lambda run:
                         run.on_thread_error(type("Hook", (), {"exc_type": OSError, "exc_value": OSError(28, "No space")})),
                         ("TensorBoard could not write", "free disk space"))], ids=["run-dir-deleted", "tensorboard"])  # fmt: skip
def test_an_error_mid_run_is_one_line_of_its_own(fault, says, cli, monkeypatch):
    """The error is printed on a line of its own, not glued to the progress bar being drawn, and not a traceback."""
    real_log = plumbing.Run.log
    monkeypatch.setattr(plumbing.Run, "log", lambda self, metrics: (fault(self), real_log(self, metrics)))
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3")
    (line,) = [line for line in err.replace("\r", "\n").splitlines() if says[0] in line]
    assert code == 1 and line.startswith("error: ") and all(s in line for s in says), err


def test_track_without_a_wandb_login_is_one_line_before_the_data_loads(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", "--track")
    assert code == 1 and "--track: wandb did not start" in err and "WANDB_MODE=offline" in err and "preset" not in out
    assert_nothing_written(tmp_path)


def test_nonfinite_weights_stop_the_run_before_evaluating_and_keep_the_last_good_checkpoint(cli, monkeypatch, tmp_path):
    evaluated, real_means, real_evaluate = [], plumbing.Run.means, plumbing.Run.evaluate

    def poison_in_epoch_2(self):
        if self.epoch == 2:
            with torch.no_grad():
                next(self.parts["policy"].actor.parameters()).fill_(float("nan"))
        return real_means(self)

    monkeypatch.setattr(plumbing.Run, "means", poison_in_epoch_2)
    monkeypatch.setattr(plumbing.Run, "evaluate", lambda run, *a: evaluated.append(run.epoch) or real_evaluate(run, *a))
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--checkpoint-every", "1")
    line = last_line(err)
    assert code == 1 and "training turned non-finite in epoch 2: policy.actor" in line and "lower the" in line
    assert evaluated == [1] and "last good checkpoint" in line  # NaN actions never reach MuJoCo
    run = only_run(tmp_path / "runs")
    assert torch.load(os.path.join(run, "checkpoint.pt"), weights_only=True)["epoch"] == 1


def test_a_method_file_without_its_plumbing_says_so_in_one_line(tmp_path):
    shutil.copy(os.path.join(os.path.dirname(plumbing.__file__), "td3bc.py"), tmp_path)
    done = subprocess.run([sys.executable, "td3bc.py", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=""))  # fmt: skip
    assert done.returncode == 1 and "copy this project's algorithms/plumbing.py beside td3bc.py" in done.stderr
    assert "Traceback" not in done.stderr and stat.S_ISREG(os.stat(tmp_path / "td3bc.py").st_mode)


def test_a_fixed_rollout_policy_from_a_td3bc_run_is_refused_before_the_fit(td3bc_run, cli, tmp_path):
    code, out, err = cli("orpo", "--env", "hopper-random-v2", *TINY, "--rollout-policy", "fixed",
                         "--rollout-policy-path", td3bc_run, "--dynamics-max-epochs", "100000")  # fmt: skip
    assert code == 1 and "an earlier ORPO run with the same sizes" in last_line(err) and "best_member" not in err
    assert_nothing_written(tmp_path)


def test_a_fit_that_diverges_is_one_line_and_leaves_no_run_dir(cli, tmp_path):
    write_random_dataset(str(tmp_path / "huge.hdf5"), steps=400, attrs={"env_id": "Hopper-v4"})
    with h5py.File(tmp_path / "huge.hdf5", "r+") as f:
        rewards = f["rewards"][()] * 1e30  # finite in float32, but their squares are not
        del f["rewards"]
        f["rewards"] = rewards
    code, _, err = cli("orpo", "--dataset-path", "huge.hdf5", *TINY)
    assert code == 1 and last_line(err).startswith("error: the ensemble fit diverged") and "lower the" in last_line(err)
    assert_nothing_written(tmp_path)
