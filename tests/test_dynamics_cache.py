"""--dynamics-cache: one fitted ensemble per (data, dynamics flags, seed), fitted once and loaded by every later run, so
a run that loads it continues exactly as the run that fitted it; bad entries are refused in one line. And the fixed
horizon of SAC's actor-LR schedule (--sac-lr-horizon): a short run is the beginning of the long one."""

import csv
import fcntl
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, TINY, run_script

import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)


def rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def untimed(rs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_seconds") and k != "charts/SPS"} for r in rs]


def only_run(runs_dir) -> str:
    (found,) = glob.glob(os.path.join(str(runs_dir), "*", "config.json"))
    return os.path.dirname(found)


@pytest.fixture(scope="module")
def data(hopper_data_dir):
    return hopper_data_dir[0]


def run(script, tmp, name, *flags, data_dir):
    done = run_script(f"algorithms/{script}.py", "--env", "hopper-random-v2", *TINY, "--runs-dir", str(tmp / name),
                      *flags, data_dir=data_dir)  # fmt: skip
    return done


def test_a_run_that_loads_the_cache_continues_as_the_run_that_fitted_it(tmp_path, data):
    cache = tmp_path / "cache"
    first = run("orpo", tmp_path, "a", "--dynamics-cache", str(cache), data_dir=data)
    assert first.returncode == 0, first.stderr[-2000:]
    second = run("orpo", tmp_path, "b", "--dynamics-cache", str(cache), data_dir=data)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "loaded from the cache" in second.stdout
    a, b = only_run(tmp_path / "a"), only_run(tmp_path / "b")
    assert untimed(rows(a)) == untimed(rows(b))  # every metric, the fit's row 0 included
    (entry,) = glob.glob(str(cache / "*.pt"))
    ca, cb = (json.load(open(os.path.join(d, "config.json")))["_dynamics"] for d in (a, b))
    assert ca["source"] == "fitted into the cache" and cb["source"] == "cache"
    assert ca["path"] == cb["path"] == entry and cb["fitted_by"]["run_dir"] == os.path.abspath(a)
    assert json.load(open(os.path.join(b, "summary.json")))["dynamics"]["source"] == "cache"
    assert ca["holdout_mse"] == cb["holdout_mse"] == float(rows(a)[0]["dynamics/holdout_mse"])
    sidecar = json.load(open(entry[: -len(".pt")] + ".json"))
    assert sidecar["key"]["seed"] == 1 and sidecar["metrics"]["dynamics/holdout_mse"] == ca["holdout_mse"]
    # another algorithm file with the same data, flags and seed takes the same entry
    mopo = run("mopo", tmp_path, "c", "--dynamics-cache", str(cache), data_dir=data)
    assert mopo.returncode == 0 and glob.glob(str(cache / "*.pt")) == [entry], mopo.stderr[-2000:]
    # another seed, or another dynamics flag, is another entry
    other = run("mopo", tmp_path, "d", "--dynamics-cache", str(cache), "--seed", "2", data_dir=data)
    assert other.returncode == 0 and len(glob.glob(str(cache / "*.pt"))) == 2
    assert run("orpo", tmp_path, "e", data_dir=data).returncode == 0  # no cache: fits, says so
    assert json.load(open(os.path.join(only_run(tmp_path / "e"), "summary.json")))["dynamics"]["source"] == "fitted"


def entry_of(tmp_path, data, seed="1"):
    cache = tmp_path / "cache"
    done = run("mopo", tmp_path, "fit", "--dynamics-cache", str(cache), "--seed", seed, data_dir=data)
    assert done.returncode == 0, done.stderr[-2000:]
    (entry,) = glob.glob(str(cache / "*.pt"))
    return cache, entry


def one_line_error(done, *words):
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(w in last for w in words), last
    return last


def test_an_entry_of_other_data_or_settings_is_refused_never_used(tmp_path, data):
    cache, entry = entry_of(tmp_path, data, seed="1")
    # an entry copied under the name seed 2's key would have: its stored key says seed 1
    probe = run("mopo", tmp_path, "probe", "--dynamics-cache", str(tmp_path / "probe"), "--seed", "2",
                "--epochs", "1", data_dir=data)  # fmt: skip
    (name,) = [os.path.basename(p) for p in glob.glob(str(tmp_path / "probe" / "*.pt"))]
    shutil.copy(entry, cache / name)
    done = run("mopo", tmp_path, "x", "--dynamics-cache", str(cache), "--seed", "2", data_dir=data)
    one_line_error(done, "other data or settings", "delete it")
    assert probe.returncode == 0 and not os.listdir(tmp_path / "x")  # a failed start leaves no run directory


@pytest.mark.parametrize("damage", ["truncated", "no rng"])
def test_a_damaged_entry_is_one_line(tmp_path, data, damage):
    cache, entry = entry_of(tmp_path, data)
    if damage == "truncated":
        with open(entry, "r+b") as f:
            f.truncate(os.path.getsize(entry) // 2)
    else:
        saved = torch.load(entry, weights_only=True)
        del saved["rng"]
        torch.save(saved, entry)
    done = run("mopo", tmp_path, "x", "--dynamics-cache", str(cache), data_dir=data)
    one_line_error(done, entry, "delete")


def test_a_run_waits_for_the_entry_another_is_fitting_and_fits_it_if_that_one_dies(tmp_path, data):
    """The test holds the entry's lock as a fitter would; the run waits, and when the holder lets go without writing an
    entry (it crashed), the run fits and stores it itself. Nobody reads a half-written file: entries are renamed in."""
    cache, entry = entry_of(tmp_path, data)
    os.remove(entry)
    with open(entry + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log = open(tmp_path / "log", "w")
        env = dict(os.environ, OMP_NUM_THREADS="1", D4RL_DATASET_DIR=data, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, f"{ROOT}/algorithms/mopo.py", "--env", "hopper-random-v2", *TINY]
        p = subprocess.Popen([*cmd, "--runs-dir", str(tmp_path / "w"), "--dynamics-cache", str(cache)], stdout=log,
                             stderr=subprocess.STDOUT, env=env)  # fmt: skip
        for _ in range(300):
            if "waiting for another run" in (tmp_path / "log").read_text():
                break
            time.sleep(0.1)
        assert "waiting for another run" in (tmp_path / "log").read_text()
        assert p.poll() is None and not os.path.exists(entry)
    assert p.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-2000:]
    assert os.path.isfile(entry)
    assert json.load(open(os.path.join(only_run(tmp_path / "w"), "config.json")))["_dynamics"]["source"] == (
        "fitted into the cache"
    )


def test_bad_cache_flags_are_one_line_before_any_work(tmp_path, data):
    done = run("orpo", tmp_path, "x", "--dynamics-cache", str(tmp_path / "c"), "--load-dynamics-path", __file__,
               data_dir=data)  # fmt: skip
    assert done.returncode == 2 and "pass one" in done.stderr and "Traceback" not in done.stderr
    afile = tmp_path / "afile"
    afile.write_text("")
    done = run("orpo", tmp_path, "y", "--dynamics-cache", str(afile / "sub"), data_dir=data)
    last = one_line_error(done, "--dynamics-cache")
    assert "writable" in last and not os.path.exists(tmp_path / "y" / "config.json")


# ------------------------------------------------------------------------------------------- the schedule's horizon
def test_cosine_lr_reaches_0_at_its_horizon_and_stays_there(orpo):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule = orpo.CosineLR(opt, T_max=4)
    lrs = []
    for _ in range(8):
        opt.step()
        schedule.step()
        lrs.append(schedule.get_last_lr()[0])
    assert lrs[:4] == pytest.approx([0.8535534, 0.5, 0.1464466, 0.0], abs=1e-6)
    assert lrs[4:] == [0.0] * 4  # torch's CosineAnnealingLR climbs back up after T_max


def test_a_short_run_is_the_beginning_of_the_long_one(tmp_path, data):
    """Every metric of a 2-epoch run equals the first 2 epochs of a 4-epoch run with the same seed (the LR schedule no
    longer depends on --epochs), and extending the finished 2-epoch run to 4 gives the 4-epoch run's numbers."""
    flags = [f for f in TINY]
    flags[flags.index("--epochs") + 1] = "4"
    long = run_script("algorithms/orpo.py", "--env", "hopper-random-v2", *flags, "--runs-dir", str(tmp_path / "long"),
                      data_dir=data)  # fmt: skip
    short = run("orpo", tmp_path, "short", data_dir=data)
    assert long.returncode == 0 and short.returncode == 0, long.stderr[-1500:] + short.stderr[-1500:]
    a, b = untimed(rows(only_run(tmp_path / "short"))), untimed(rows(only_run(tmp_path / "long")))
    assert len(a) == 3 and a == b[:3]  # row 0 (the fit) and epochs 1-2
    lrs = [float(r["charts/lr_rollout_actor"]) for r in b[1:]]
    assert lrs == pytest.approx([1e-4 * 0.5 * (1 + math.cos(math.pi * e / 1000)) for e in range(1, 5)], rel=1e-6)
    extended = run_script(
        "algorithms/orpo.py", "--resume", only_run(tmp_path / "short"), "--epochs", "4", data_dir=data
    )
    assert extended.returncode == 0, extended.stderr[-1500:]
    assert untimed(rows(only_run(tmp_path / "short"))) == b


def test_the_horizon_flag_is_range_checked(orpo):
    with pytest.raises(plumbing.UsageError, match="--sac-lr-horizon 0: must lie in"):
        plumbing.check_args(orpo.Args(sac_lr_horizon=0))


# ------------------------------------------------------------------------------------------- a fit stopped part-way
class Stop(Exception):
    pass


def small_fit(orpo):
    """A small data set, 8-epoch fit settings and a seeded ensemble maker."""
    from conftest import fit_settings

    g = torch.Generator().manual_seed(0)
    obs, act = torch.randn(600, 3, generator=g), torch.rand(600, 2, generator=g) * 2 - 1
    data = {"obs": obs, "act": act, "next_obs": obs + 0.1 * act.sum(1, keepdim=True), "rew": obs[:, :1] ** 2}
    settings = fit_settings(orpo.Args(dynamics_max_epochs=8, dynamics_patience=100, dynamics_batch_size=64))

    def model():
        torch.manual_seed(7)
        return orpo.EnsembleDynamics(3, 2, (16, 16), 3, 2)

    return data, settings, model


def test_a_fit_stopped_part_way_continues_to_the_same_ensemble(orpo, tmp_path):
    """plumbing saves the fit's state (every --checkpoint-minutes; here every epoch); a fit killed after its third
    epoch and started again from that file ends with the ensemble, elites and metrics of the fit never stopped."""
    data, settings, model = small_fit(orpo)
    whole = model()
    expected = orpo.fit_dynamics(whole, data, **settings)
    path = str(tmp_path / "fit.pt")
    stopped, epochs = model(), []

    def fit_then_die(**kw):
        def progress(state):
            kw["progress"](state)
            epochs.append(1)
            if len(epochs) == 3:
                raise Stop

        return orpo.fit_dynamics(stopped, data, **settings, resume=kw["resume"], progress=progress)

    with pytest.raises(Stop):
        plumbing._checked_fit(fit_then_die, path, minutes=0)
    assert torch.load(path, weights_only=True)["state"]["epoch"] == 3
    again = model()
    metrics = plumbing._checked_fit(lambda **kw: orpo.fit_dynamics(again, data, **settings, **kw), path, minutes=0)
    assert not os.path.exists(path)  # removed once the fit is complete
    for k, v in whole.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    assert metrics["dynamics/holdout_mse"] == expected["dynamics/holdout_mse"]
    assert metrics["dynamics/epochs"] == expected["dynamics/epochs"] == 8
    # a state saved for another cache key is not used
    with pytest.raises(Stop):
        epochs.clear()
        plumbing._checked_fit(fit_then_die, path, minutes=0, key={"seed": 1})
    other = model()
    plumbing._checked_fit(
        lambda **kw: orpo.fit_dynamics(other, data, **settings, **kw), path, minutes=0, key={"seed": 2}
    )
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in whole.state_dict().items())  # fitted from scratch


def test_a_signal_during_the_fit_saves_its_last_finished_epoch(orpo, tmp_path):
    """No timed save yet (--checkpoint-minutes 60): a SIGINT/SIGTERM (KeyboardInterrupt) in the fifth epoch saves the
    state after the fourth, not the weights the fifth had half trained, and the fit started again from it ends as the
    fit never stopped."""
    data, settings, model = small_fit(orpo)
    whole = model()
    orpo.fit_dynamics(whole, data, **settings)
    path, stopped, epochs = str(tmp_path / "fit.pt"), model(), []

    def fit_then_signal(**kw):
        def progress(state):
            epochs.append(1)
            if len(epochs) == 5:  # the fifth epoch has trained: the signal lands before it is recorded
                raise KeyboardInterrupt
            kw["progress"](state)

        return orpo.fit_dynamics(stopped, data, **settings, resume=kw["resume"], progress=progress)

    with pytest.raises(KeyboardInterrupt):
        plumbing._checked_fit(fit_then_signal, path, minutes=60)
    assert torch.load(path, weights_only=True)["state"]["epoch"] == 4
    again = model()
    plumbing._checked_fit(lambda **kw: orpo.fit_dynamics(again, data, **settings, **kw), path, minutes=60)
    for k, v in whole.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_a_signal_whose_raise_was_lost_still_stops_the_fit_after_the_epoch(orpo, tmp_path):
    """The handler's KeyboardInterrupt is swallowed when it lands in a finalizer ("Exception ignored in ...", seen
    once in CI as a fit that ran on for 240 s after SIGINT); the flag the handler set stops the fit after that epoch,
    with that epoch's state saved."""
    data, settings, model = small_fit(orpo)
    path, stopped, epochs = str(tmp_path / "fit.pt"), model(), []

    def fit(**kw):
        def progress(state):
            epochs.append(1)
            kw["progress"](state)

        return orpo.fit_dynamics(stopped, data, **settings, resume=kw["resume"], progress=progress)

    with pytest.raises(KeyboardInterrupt):
        plumbing._checked_fit(fit, path, minutes=60, signalled=lambda: len(epochs) >= 3)
    assert len(epochs) == 3 and torch.load(path, weights_only=True)["state"]["epoch"] == 3
