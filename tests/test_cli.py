"""The command line of the method files, in this process (plumbing.cli with an argv): --help is tyro's, every bad flag,
data file, model file or resume is refused before any work with one line that names it and what to do (a non-zero
exit, never a traceback), nothing is left half-written, and a run's directory holds what the run made.

What a lab adds around a run (locks, provenance, fingerprints, one-line messages for faults of the operating system)
is benchmarks/launch.py's and is tested in tests/test_launch.py."""

import csv
import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated

import h5py
import numpy as np
import pytest
import torch
from conftest import ALGORITHMS, TINY, load_module, run_file, run_script, write_random_dataset

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
    for f in dataclasses.fields(files[script].Args):
        assert f"--{f.name.replace('_', '-')}" in out, f.name
    assert "seed of the experiment" in out and "--no-cuda" in out  # a docstring; a boolean's pair


def test_an_optional_boolean_takes_the_spelling_of_every_boolean(files):
    parse = lambda *a: plumbing.parse_args(files["orpo"].Args, list(a)).normalize_obs  # noqa: E731
    assert (parse(), parse("--normalize-obs"), parse("--no-normalize-obs")) == (None, True, False)


# --------------------------------------------------------------------------------------------------------------- flags
@pytest.mark.parametrize("script, flags, named, fix", [("orpo", ["--no-pessimism", "--lambda-p", "5"],
                         "--lambda-p 5.0", "drop"), ("orpo", ["--real-ratio", "0.6",
                         "--output-rollout-ratio", "0.6"], "--output-rollout-ratio 0.6", "exceed 1"), ("orpo",
                         ["--seed", "-1"], "--seed -1", "[0, 4294967296)"), ("orpo", ["--actor-lr", "0"],
                         "--actor-lr 0.0", "(0, inf)"), ("orpo", ["--gamma", "1.5"], "--gamma 1.5", "[0, 1]"),
                         ("orpo", ["--lambda-o", "inf"], "--lambda-o inf", "[0, inf)"), ("orpo", ["--hidden-dims", "32",
                         "0"], "--hidden-dims (32, 0)", "[1, inf)"), ("orpo", ["--hidden-dims"], "--hidden-dims",
                         "give at least one value"), ("orpo", ["--dynamics-holdout-ratio", "1"],
                         "--dynamics-holdout-ratio 1.0", "(0, 1)"), ("orpo", ["--exp-name", "../../escape"],
                         "--exp-name '../../escape'", "plain name"), ("orpo", ["--load-dynamics-path", "none.pt"],
                         "--load-dynamics-path", "none.pt: not an existing file"), ("mopo", ["--num-elites", "9"],
                         "--num-elites 9 exceeds --num-ensemble 7", ""), ("mbpo", ["--num-ensemble", "1",
                         "--num-elites", "1", "--uncertainty", "ensemble_std"], "--num-ensemble 1", "2+"), ("oroo",
                         ["--epochs", "0"], "--epochs 0", "[1, inf)"), ("td3bc", ["--checkpoint-minutes", "0"],
                         "--checkpoint-minutes 0.0", "(0, inf)"), ("td3bc", ["--threads", "0"], "--threads 0",
                         "[1, inf)")])  # fmt: skip
def test_a_bad_flag_is_one_line_naming_it_and_the_fix_exit_2_before_any_work(script, flags, named, fix, cli, tmp_path):
    code, out, err = cli(script, *flags)
    assert code == 2 and named in err and fix in err and err.startswith("error: "), err
    assert out == "" and not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


# #71 item 4: a flag the chosen variant ignores, typed with a value other than its default, is refused with the reason
@pytest.mark.parametrize("script, flags, named, why", [
    ("mopo", ["--policy", "sac", "--alpha", "5", "--policy-noise", "0.4"], "--alpha 5.0", "TD3+BC's (--policy td3bc)"),
    ("mopo", ["--policy", "td3bc", "--sac-actor-lr", "0.001"], "--sac-actor-lr 0.001", "SAC's (--policy sac)"),
    ("orpo", ["--output-algo", "sac", "--policy-freq", "3"], "--policy-freq 3", "π^p is SAC"),
    ("orpo", ["--rollout-policy", "untrained", "--real-ratio-o", "0.1"], "--real-ratio-o 0.1", "π^o is not trained"),
    ("orpo", ["--rollout-policy", "untrained", "--sac-critic-lr", "0.1"], "--sac-critic-lr 0.1", "no SAC is trained"),
])  # fmt: skip
def test_a_flag_the_chosen_variant_ignores_is_refused_with_the_reason(script, flags, named, why, cli, tmp_path):
    code, out, err = cli(script, *flags)
    assert code == 2 and named in err and why in err and "drop it" in err and out == "", err
    assert "--policy-noise 0.4" in err if "--policy-noise" in flags else True  # every such flag is named
    assert not (tmp_path / "runs").exists()


def test_a_variants_own_flags_and_the_others_defaults_are_accepted(files):
    for script, args in [("mopo", dict(policy="td3bc", alpha=5.0)), ("mopo", dict(policy="sac", sac_actor_lr=1e-3,
                         alpha=2.5)), ("orpo", dict(output_algo="sac", sac_actor_lr=1e-3))]:  # fmt: skip
        plumbing.check_args(files[script].Args(**args))


@pytest.mark.parametrize("flags, named", [(["--epochs", "x"], "--epochs"), (["--lambda-pp", "3"], "--lambda-p"),
                                          (["--uncertainty", "foo"], "--uncertainty")])  # fmt: skip
def test_an_unparsable_flag_is_tyros_box_naming_it_exit_2(flags, named, cli, tmp_path):
    code, out, err = cli("orpo", *flags)
    assert code == 2 and named in err and not (tmp_path / "runs").exists()


def test_a_copiers_own_flag_declares_its_range_and_rules_beside_it(files):
    """What a researcher adds to a copied file: plumbing checks it without knowing its name."""

    @dataclass
    class Mine(files["td3bc"].Args):
        beta: Annotated[float, "(0, 1]"] = 0.5
        """my new coefficient"""
        warmup: int = 3

        def problems(self):
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
    method_flags = {f.name for name in ALGORITHMS for f in dataclasses.fields(load_module(
        f"algorithms/{name}.py", f"names_{name}").Args)} - {f.name for f in dataclasses.fields(plumbing.RunArgs)}  # fmt: skip
    named = [f for f in sorted(method_flags) if re.search(rf"(--{f.replace('_', '-')}|\.{f})\b", source)]
    assert not named, f"plumbing.py names the method flags {named}"
    assert "getattr(args" not in source and "hasattr(args" not in source


def test_paths_are_stored_absolute(files, tmp_path, monkeypatch):
    """#71 item 5: a relative path typed in one folder is the same file from another (the printed --resume hint)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.pt").write_bytes(b"")
    args = plumbing.parse_args(files["mopo"].Args, ["--load-dynamics-path", "d.pt", "--data-dir", "."])
    assert (args.load_dynamics_path, args.data_dir) == (str(tmp_path / "d.pt"), str(tmp_path))


# ------------------------------------------------------------------------------------------------------------ files
def broken(path, change) -> str:
    write_random_dataset(str(path), steps=100, attrs={"env_id": "Hopper-v4"})
    with h5py.File(path, "r+") as f:
        change(f)
    return str(path)


def replace(key, value):
    return lambda f: (f.__delitem__(key), f.__setitem__(key, value))


@pytest.mark.parametrize("change, named, fix", [(replace("observations", np.float32(1)),
                         "'observations' has shape ()", "expected 2-D"), (replace("actions", np.zeros(100, np.float32)),
                         "'actions' has shape (100,)", "expected 2-D"), (lambda f: (f.__delitem__("rewards"),
                         f.create_group("rewards")), "lacks the dataset(s) rewards", "needs"), (replace("rewards",
                         np.full(100, np.nan, np.float32)), "'rewards' has NaN", "drop them"), (replace("terminals",
                         np.full(100, 2.0)), "'terminals' must hold only 0/1", "fix the file"), (replace("actions",
                         np.full((100, 3), 5.0, np.float32)), "outside Hopper-v4's action space", "clip them"),
                         (lambda f: f.attrs.update(env_id=np.int64(3)), "env_id must be a string",
                         "fix the file's attrs"), (lambda f: f.attrs.update(ref_min_score=1.0, ref_max_score=1.0),
                         "ref_min_score 1.0, ref_max_score 1.0: env_id", "or drop both"), (lambda f: f.attrs.update(reward_fn="bogus"),
                         "reward_fn 'bogus', ref_min_score None", "reward_fn one of env, halfcheetah-jump"), (lambda f:
                         f.attrs.create("reward_fn", np.array(["env"], h5py.string_dtype())), "reward_fn array(", "reward_fn one of env"),
                         (lambda f: f.attrs.update(env_id="Walker2d-v4"), "but Walker2d-v4 has",
                         "pass the matching --eval-env"), (lambda f: f.attrs.update(env_id="nomodule:Foo-v0"),
                         "cannot make evaluation env", "pass --eval-env")], ids=["scalar", "1-d-actions", "group", "nan",
                         "terminals", "actions", "int-attr", "refs", "reward-fn", "array-attr", "dims", "env"])  # fmt: skip
def test_a_broken_data_file_is_one_line_naming_it_and_leaves_no_run_dir(change, named, fix, cli, tmp_path):
    path = broken(tmp_path / "x.hdf5", change)
    code, out, err = cli("td3bc", "--dataset-path", path, "--epochs", "1", "--no-cuda")
    assert code == 1 and named in last_line(err) and fix in last_line(err), err
    assert path in err or "--eval-env" in err  # the file, or the flag that picks the env
    assert "preset" not in out  # what runs is printed once the data passed every check
    assert_nothing_written(tmp_path)


def test_an_unreadable_or_missing_dataset_is_one_line(cli, tmp_path):
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5")
    code, _, err = cli("orpo", "--dataset-path", "bad.hdf5", "--eval-env", "Hopper-v4")
    assert code == 1 and "bad.hdf5 is not a readable HDF5 file" in err and "download or make it again" in err
    code, _, err = cli("orpo", "--dataset-path", ".", "--eval-env", "Hopper-v4")  # a folder
    assert code == 1 and "is not a readable HDF5 file" in err
    code, _, err = cli("orpo", "--env", "local/nothing", "--data-dir", ".")
    assert code == 1 and "local/nothing.hdf5 does not exist; make it with `python datasets/collect.py`" in err
    code, _, err = cli("orpo", "--env", "hopper-typo-v2")
    assert code == 1 and "unknown dataset 'hopper-typo-v2'; use one of" in err
    os.mkfifo(tmp_path / "fifo")
    for path in ("/dev/null", str(tmp_path / "fifo")):  # a device, a fifo (reading it would wait forever): refused
        code, _, err = cli("orpo", "--dataset-path", path)
        assert code == 2 and f"--dataset-path {path}: not an existing file or folder" in err
    assert_nothing_written(tmp_path)


@pytest.mark.parametrize("sizes", [["--hidden-dims", "100000000", "100000000"], ["--num-ensemble", "10000000000"],
                                   ["--batch-size", str(10**12)], ["--rollout-batch-size", str(10**11)]])  # fmt: skip
def test_sizes_that_cannot_fit_in_memory_are_one_line_before_the_fit(sizes, cli, tmp_path):
    """#71 item 7: allocated (or built on a forked RNG, then dropped) before the ensemble fit, which they would
    otherwise follow by hours."""
    code, out, err = cli("mbpo", "--env", "hopper-random-v2", *TINY, *sizes)
    assert code == 1 and last_line(err).startswith("error: out of memory") and "lower the flags" in err, err
    assert "dynamics:" not in out + err
    assert_nothing_written(tmp_path)


def test_a_holdout_of_nothing_or_a_diverging_fit_is_one_line_and_leaves_no_run_dir(cli, tmp_path):
    code, out, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--dynamics-holdout-ratio", "1e-9")
    assert code == 1 and "--dynamics-holdout-ratio 1e-09 holds out 0 of" in err and "best_member" not in err
    write_random_dataset(str(tmp_path / "huge.hdf5"), steps=400, attrs={"env_id": "Hopper-v4"})
    with h5py.File(tmp_path / "huge.hdf5", "r+") as f:
        rewards = f["rewards"][()] * 1e30  # finite in float32, but their squares are not
        del f["rewards"]
        f["rewards"] = rewards
    code, _, err = cli("orpo", "--dataset-path", "huge.hdf5", *TINY)
    assert code == 1 and last_line(err).startswith("error: the ensemble fit diverged") and "lower" in last_line(err)
    assert_nothing_written(tmp_path)


@pytest.fixture
def mopo_run(cli, tmp_path):
    code, _, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--runs-dir", "fitted")
    assert code == 0, err
    return only_run(tmp_path / "fitted")


@pytest.mark.parametrize("doctor, says", [(lambda d: torch.ones(3), "not a dict with model, metrics"),
                         (lambda d: d | {"model": {}}, "does not fit this run"), (lambda d: d | {"rng": {"torch": 1}},
                         "does not fit this run"), (lambda d: d | {"metrics": {"a": "b"}}, "no numbers as its fit's"),
                         (lambda d: b"cut", "not a usable ensemble")],
                         ids=["bare-tensor", "other-sizes", "rng-layout", "metrics-layout", "truncated"])  # fmt: skip
def test_a_bad_ensemble_file_is_one_line_naming_it_before_any_work(doctor, says, mopo_run, cli, tmp_path):
    """#71 item 7: --load-dynamics-path with a bare tensor, other sizes, an RNG entry or metrics in another layout, or
    a truncated file: refused before a run directory is made."""
    saved = torch.load(os.path.join(mopo_run, "dynamics.pt"), weights_only=True)
    doctored = doctor(saved)
    path = tmp_path / "bad.pt"
    path.write_bytes(doctored) if isinstance(doctored, bytes) else torch.save(doctored, path)
    code, _, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--load-dynamics-path", str(path))
    assert code == 1 and str(path) in last_line(err) and says in last_line(err), err
    assert_nothing_written(tmp_path)


# ---------------------------------------------------------------------------------------------------------- resume
@pytest.fixture
def td3bc_run(cli, tmp_path):
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--runs-dir", "done")
    assert code == 0, err
    return only_run(tmp_path / "done")


def test_resume_leaves_a_finished_run_alone_refuses_fewer_epochs_and_extends(td3bc_run, cli, tmp_path):
    before = {p: os.stat(os.path.join(td3bc_run, p)).st_mtime_ns for p in os.listdir(td3bc_run)}
    code, out, _ = cli("td3bc", "--resume", td3bc_run)
    assert code == 0 and "finished its 2 epochs: nothing to do (--epochs N extends it)" in out
    code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "1")
    assert code == 2 and "--epochs 1: " in err and "has run 2 epochs already" in err
    assert {p: os.stat(os.path.join(td3bc_run, p)).st_mtime_ns for p in os.listdir(td3bc_run)} == before
    code, out, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3", "--batch-size", "64", "--seed", "1")
    assert code == 0 and "note: --resume ignores --batch-size 64; the run keeps its 32" in out
    assert "--seed" not in out  # typed, but equal to the saved value
    summary = json.load(open(os.path.join(td3bc_run, "summary.json")))
    assert summary["epochs"] == 3 and summary["finished"]
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--runs-dir", "straight")
    timing = re.compile(r"seconds|SPS")
    rows = [[{k: v for k, v in r.items() if not timing.search(k)} for r in csv.DictReader(open(os.path.join(d,
            "metrics.csv")))] for d in (td3bc_run, only_run(tmp_path / "straight"))]  # fmt: skip
    assert code == 0 and rows[0] == rows[1]  # it kept its batch size: the numbers of a 3-epoch run


def test_a_new_run_reads_no_checkpoint_from_the_folder_it_starts_in(td3bc_run, cli, tmp_path):
    """A checkpoint.pt in the working folder belongs to no new run: the run starts at epoch 0 (once it was read)."""
    shutil.copy(os.path.join(td3bc_run, "checkpoint.pt"), tmp_path / "checkpoint.pt")
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--runs-dir", "new")
    epochs = [row["epoch"] for row in csv.DictReader(open(os.path.join(only_run(tmp_path / "new"), "metrics.csv")))]
    assert code == 0 and "resumed" not in out and epochs == ["1", "2", "3"], (out, err[-800:], epochs)


def test_every_file_refuses_another_scripts_run_dir_before_any_work(td3bc_run, cli, tmp_path):
    for script in ("orpo", "mopo", "oroo", "mbpo"):
        code, out, err = cli(script, "--resume", td3bc_run)
        assert code == 1 and f"is not a run of {script} (its config.json: td3bc)" in last_line(err) and out == ""
    (tmp_path / "x").mkdir()
    code, _, err = cli("orpo", "--resume", "x")
    assert code == 1 and "is not a run of orpo (its config.json: None)" in err


@pytest.mark.parametrize("doctor", [lambda c: c.pop("rows"), lambda c: c.update(epoch="x"),
                         lambda c: c.update(epoch=99), lambda c: c.pop("policy"), lambda c: c.update(rng={})],
                         ids=["no-rows", "text-epoch", "epoch-beyond-the-run", "no-policy", "rng"])  # fmt: skip
def test_a_checkpoint_that_does_not_match_is_one_line(doctor, td3bc_run, cli):
    ckpt = torch.load(os.path.join(td3bc_run, "checkpoint.pt"), weights_only=True)
    doctor(ckpt)
    torch.save(ckpt, os.path.join(td3bc_run, "checkpoint.pt"))
    code, _, err = cli("td3bc", "--resume", td3bc_run, "--epochs", "3")
    assert code == 1 and "checkpoint.pt" in last_line(err) and re.search("does not fit|not a usable", err), err


def test_a_relative_data_dir_resumes_from_another_folder(cli, hopper_data_dir, tmp_path, monkeypatch):
    os.symlink(hopper_data_dir[0], tmp_path / "data")
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--data-dir", "data", "--runs-dir", "r")
    assert code == 0, err
    run = os.path.abspath(only_run(tmp_path / "r"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = cli("td3bc", "--resume", run, "--epochs", "3")
    assert code == 0, err


def test_a_resume_takes_this_invocations_flags_not_the_runs(cli, tmp_path):
    """--stop-after-epochs (like --threads, --cuda, ...) is the invocation's: a run started with it and resumed without
    it runs to its end."""
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--stop-after-epochs", "1")
    run = only_run(tmp_path / "runs")
    assert code == 0 and json.load(open(os.path.join(run, "summary.json")))["epochs"] == 1, err
    code, _, err = cli("td3bc", "--resume", run)
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert code == 0 and summary["status"] == "finished" and summary["epochs"] == 3, err


def test_a_run_that_loaded_its_ensemble_resumes_from_its_own_copy_once_the_file_is_gone(mopo_run, cli, tmp_path):
    """#71 item 5: the run's own dynamics.pt, not --load-dynamics-path's file (here relative, and deleted), and the
    same numbers as the run that fitted it (same seed: its RNG state after the fit comes along)."""
    shutil.copy(os.path.join(mopo_run, "dynamics.pt"), tmp_path / "shared.pt")
    code, _, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--load-dynamics-path", "shared.pt",
                       "--stop-after-epochs", "1", "--runs-dir", "loaded")  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path / "loaded")
    assert json.load(open(os.path.join(run, "config.json")))["load_dynamics_path"] == str(tmp_path / "shared.pt")
    os.remove(tmp_path / "shared.pt")
    code, out, err = cli("mopo", "--resume", run)
    assert code == 0 and "resumed at epoch 1" in out, err
    fitted, loaded = (open(os.path.join(r, "metrics.csv")).read().splitlines() for r in (mopo_run, run))
    assert len(fitted) == len(loaded) and fitted[0] == loaded[0]
    columns = fitted[0].split(",")
    timing = [i for i, c in enumerate(columns) if c.endswith("_seconds") or c == "charts/SPS"]
    for a, b in zip(fitted[1:], loaded[1:]):
        a, b = a.split(","), b.split(",")
        assert [x for i, x in enumerate(a) if i not in timing] == [x for i, x in enumerate(b) if i not in timing]


# ------------------------------------------------------------------------------------------- what a run writes
def test_a_run_says_in_one_line_what_runs_and_in_one_line_what_came_of_it(cli, tmp_path):
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--threads", "2", "--exp-name", "x")
    assert code == 0 and torch.get_num_threads() == 2
    first, last = out.strip().splitlines()[0], out.strip().splitlines()[-1]
    assert "hopper-random-v2 (" in first and "preset none" in first and "seed 1" in first
    # the minutes move with the machine's load
    assert re.match(r"finished: 2 epochs in \d+\.\d min, D4RL score", last) and "summary.json" in last, last
    run = only_run(tmp_path / "runs")
    assert os.path.basename(run).startswith("hopper-random-v2__x__1__")
    config, summary = (json.load(open(os.path.join(run, f))) for f in ("config.json", "summary.json"))
    assert config["_script"] == "td3bc" and config["threads"] == 2 and config["epochs"] == 2
    assert summary["algorithm"] == "td3bc" and summary["exp_name"] == "x" and summary["status"] == "finished"
    assert sorted(os.listdir(run)) == sorted(["checkpoint.pt", "config.json", "metrics.csv", "policy.pt",
                                              "summary.json", *[f for f in os.listdir(run) if "tfevents" in f]])  # fmt: skip
    torch.set_num_threads(1)


def test_two_runs_started_in_the_same_second_get_different_directories(files, monkeypatch, tmp_path):
    monkeypatch.setattr(plumbing.time, "time", lambda: 1_700_000_000.0)
    args = files["td3bc"].Args(env="hopper-random-v2", runs_dir=str(tmp_path), cuda=False, exp_name="td3bc")
    task = plumbing.Task("hopper-random-v2", "Hopper-v4", "hopper")
    (a, _, wa), (b, _, wb) = (plumbing.open_run(args, task, "none", 10) for _ in range(2))
    wa.close(), wb.close()
    assert os.path.basename(b) == os.path.basename(a) + "_2" and os.path.isfile(f"{b}/config.json")


# ------------------------------------------------------------------------------------------------ hostile machines
def test_a_failed_checkpoint_write_keeps_the_last_good_one(files, hopper_data_dir, monkeypatch, tmp_path):
    """A full disk mid-run may end in Python's own error (the lab's launcher makes it one line), but the last
    checkpoint stays whole and no temporary file is left."""
    saves, real = [], torch.save

    def save(obj, f):  # the disk fills after the first checkpoint
        if str(getattr(f, "name", f)).endswith("checkpoint.pt.tmp"):
            saves.append(f)
            if len(saves) > 1:
                f.write(b"half")
                raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        real(obj, f)

    monkeypatch.setattr(plumbing.torch, "save", save)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    with pytest.raises(RuntimeError, match="file write failed"):
        plumbing.cli(files["td3bc"].main, files["td3bc"].Args, [*TD3BC, "--env", "hopper-random-v2", "--epochs", "3",
                                                              "--checkpoint-every", "1"])  # fmt: skip
    run = only_run(tmp_path / "runs")
    assert torch.load(os.path.join(run, "checkpoint.pt"), weights_only=True)["epoch"] == 1
    assert not os.path.exists(os.path.join(run, "checkpoint.pt.tmp")) and all(f.closed for f in saves)


@pytest.mark.parametrize("minutes, saved", [("10", [3]), ("1e-9", [1, 2, 3])])
def test_checkpoint_minutes_saves_after_the_first_epoch_past_its_clock(minutes, saved, files, hopper_data_dir,
                                                                       monkeypatch, tmp_path):  # fmt: skip
    """--checkpoint-every 100 saves only after the last epoch; --checkpoint-minutes past due saves after each."""
    epochs, real = [], plumbing.save
    monkeypatch.setattr(files["td3bc"], "save", lambda obj, path: [epochs.append(obj["epoch"]), real(obj, path)])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    plumbing.cli(files["td3bc"].main, files["td3bc"].Args, [*TD3BC, "--env", "hopper-random-v2", "--epochs", "3",
                                                          "--checkpoint-minutes", minutes])  # fmt: skip
    assert epochs == saved


def test_an_unwritable_runs_dir_is_one_line_and_leaves_nothing(cli, tmp_path):
    (tmp_path / "a_file").write_text("")
    code, out, err = cli("td3bc", "--env", "hopper-random-v2", "--runs-dir", "a_file/runs")
    assert code == 1 and "cannot write in a_file/runs (Not a directory); pass a writable --runs-dir" in err


def test_track_without_a_wandb_login_is_one_line_before_any_work(cli, monkeypatch, tmp_path):
    """Before the data loads and the ensemble is fitted (not hours later), and no run directory."""
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--track")
    assert code == 1 and "--track: wandb did not start" in err and "WANDB_MODE=offline" in err, err
    assert "preset" not in out and "dynamics" not in out + err
    assert_nothing_written(tmp_path)


def test_track_names_the_wandb_run_after_the_run_and_gives_it_the_effective_flags(cli, monkeypatch, tmp_path):
    """A stand-in for wandb: started before any work, named after the run directory once there is one, updated with
    the flags the preset filled (λp of hopper-random), finished with the run."""
    calls = []
    fake = type(sys)("wandb")
    fake.run = type("Run", (), {})()
    fake.config = type("Config", (), {"update": lambda self, c, **k: calls.append(("config", c))})()
    fake.init = lambda **k: calls.append(("init", k))
    fake.finish = lambda: calls.append(("finish",))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    code, out, err = cli("mopo", "--env", "hopper-random-v2", *TINY, "--epochs", "1", "--track")
    assert code == 0, err
    assert [c[0] for c in calls] == ["init", "config", "finish"] and calls[0][1]["sync_tensorboard"]
    assert fake.run.name == os.path.basename(only_run(tmp_path / "runs")) and calls[1][1]["lambda_p"] == 5.9


def test_track_logs_the_run_to_wandb_offline(hopper_data_dir, tmp_path):
    """--track with WANDB_MODE=offline (its own process: wandb keeps its settings for the life of one): the wandb run
    is named after the run directory, holds the effective flags and is finished with the run."""
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    done = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", *TD3BC, "--track", cwd=str(tmp_path),
                      data_dir=hopper_data_dir[0], extra_env=env, fresh=True)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    run = os.path.basename(only_run(tmp_path / "runs"))
    (offline,) = [d for d in os.listdir(tmp_path / "wandb") if d.startswith("offline-run-")]
    assert os.listdir(tmp_path / "wandb" / offline / "files" / "runs" / run)  # TensorBoard's events, synced
    (record,) = [f for f in os.listdir(tmp_path / "wandb" / offline) if f.endswith(".wandb")]
    record = (tmp_path / "wandb" / offline / record).read_bytes()  # what `wandb sync` uploads
    assert run.encode() in record and b"normalize_obs" in record and b"eval/return" in record


def test_nonfinite_weights_stop_the_run_before_evaluating_and_keep_the_last_good_checkpoint(files, cli, monkeypatch,
                                                                                             tmp_path):  # fmt: skip
    td3bc, evaluated = files["td3bc"], []
    real_steps, real_evaluate = td3bc.gradient_steps, td3bc.evaluate

    def poison_in_epoch_2(step, first, n, *a):
        out = real_steps(step, first, n, *a)
        if first == n:  # epoch 2
            with torch.no_grad():
                for p in (p for cell in step.__closure__ for p in getattr(cell.cell_contents, "parameters", list)()):
                    p.fill_(float("nan"))
        return out

    monkeypatch.setattr(td3bc, "gradient_steps", poison_in_epoch_2)
    monkeypatch.setattr(td3bc, "evaluate", lambda policy, envs, task, seed, *a: evaluated.append(seed) or
                        real_evaluate(policy, envs, task, seed, *a))  # fmt: skip
    code, _, err = cli("td3bc", "--env", "hopper-random-v2", *TD3BC, "--epochs", "3", "--checkpoint-every", "1")
    line = last_line(err)
    assert code == 1 and "training turned non-finite in epoch 2: policy." in line and "lower the" in line
    assert evaluated == [1001] and "the last checkpoint is kept" in line  # NaN actions never reach MuJoCo
    run = only_run(tmp_path / "runs")
    assert torch.load(os.path.join(run, "checkpoint.pt"), weights_only=True)["epoch"] == 1


def test_a_method_file_without_its_plumbing_says_so_in_one_line(tmp_path):
    shutil.copy(os.path.join(os.path.dirname(plumbing.__file__), "td3bc.py"), tmp_path)
    done = subprocess.run([sys.executable, "td3bc.py", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=""))  # fmt: skip
    assert done.returncode == 1 and "copy this project's algorithms/plumbing.py beside td3bc.py" in done.stderr
    assert "Traceback" not in done.stderr and stat.S_ISREG(os.stat(tmp_path / "td3bc.py").st_mode)


def test_run_file_is_the_scripts_own_command_line(cli, tmp_path):
    """conftest.run_file (every test here) is plumbing.cli with an argv: the same exit status as `python orpo.py`."""
    assert run_file("orpo", "--epochs", "0", cwd=str(tmp_path)).returncode == 2
