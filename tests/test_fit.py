"""The ensemble fit around the runs: the launchers' cache (benchmarks/toolbox.py) fits once per (data, dynamics flags,
seed) and a run that loads the entry continues as the run that fitted it; and the fixed horizon of SAC's actor-LR
schedule (--sac-lr-horizon) makes a short run the beginning of the long one."""

import csv
import glob
import json
import math
import os
import subprocess
import sys
import threading

import pytest
import torch
from conftest import ROOT, TINY, load_module

import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)


def rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [
            {k: v for k, v in r.items() if not k.endswith("_seconds") and k != "charts/SPS"} for r in csv.DictReader(f)
        ]


def only_run(runs_dir) -> str:
    (found,) = glob.glob(os.path.join(str(runs_dir), "*", "config.json"))
    return os.path.dirname(found)


# ------------------------------------------------------------------------------------------- the launchers' cache
def test_the_launchers_cache_fits_once_and_a_run_loading_it_equals_its_fitter(hopper_data_dir, tmp_path, monkeypatch):
    """Two runs of one seed launched together: one fits, the other waits on the entry's lock, then loads it with the
    RNG state after the fit, and every logged number, the fit's row 0 included, is the same."""
    toolbox = load_module("benchmarks/toolbox.py", "toolbox")
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    env, cache = dict(os.environ, OMP_NUM_THREADS="1"), str(tmp_path / "cache")
    cmd = lambda runs, *more: toolbox.launch_command(f"{ROOT}/algorithms/orpo.py", "--env", "hopper-random-v2", *TINY,  # noqa: E731
                                                     "--runs-dir", str(tmp_path / runs), *more)  # fmt: skip
    done = {}

    def launch(name):
        with toolbox.cached_ensemble(cache, cmd(name)) as c:
            done[name] = subprocess.run(c, env=env, capture_output=True, text=True, timeout=600)

    threads = [threading.Thread(target=launch, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(d.returncode == 0 for d in done.values()), [d.stderr[-1500:] for d in done.values()]
    (entry,) = glob.glob(os.path.join(cache, "*.pt"))
    a, b = only_run(tmp_path / "a"), only_run(tmp_path / "b")
    sources = sorted(json.load(open(os.path.join(d, "config.json")))["_dynamics"]["source"] for d in (a, b))
    assert sources == ["fitted", "loaded"] and rows(a) == rows(b)
    assert toolbox.ensemble_entry(cache, cmd("c")) == entry  # the same data, flags and seed: the same entry
    assert toolbox.ensemble_entry(cache, cmd("c", "--seed", "2")) != entry
    assert toolbox.ensemble_entry(cache, cmd("c", "--dynamics-lr", "3e-4")) != entry
    td3bc = toolbox.launch_command(f"{ROOT}/algorithms/td3bc.py", "--env", "hopper-random-v2")
    assert (
        toolbox.ensemble_entry(cache, td3bc) is None and toolbox.ensemble_entry(cache, cmd("c", "--resume", a)) is None
    )
    # an entry is what the run that fitted saved (plumbing's format), and the command outside the launcher names it too
    assert set(torch.load(entry, weights_only=True)) >= {"model", "metrics", "rng", "seed"}
    assert toolbox.ensemble_entry(cache, [sys.executable, *cmd("c")[2:]]) == entry


def test_an_entry_of_the_former_dynamics_cache_gets_its_seed(tmp_path):
    """The runs' own --dynamics-cache wrote entries keyed by the same digest, without a top-level seed: the launcher
    adds it from the entry's key, so a run that loads it takes its RNG state as such a run did."""
    toolbox = load_module("benchmarks/toolbox.py", "toolbox")
    entry = str(tmp_path / "x.pt")
    torch.save({"model": {}, "metrics": {}, "rng": plumbing.rng_state(), "key": {"seed": 4}}, entry)
    assert toolbox.share_ensemble(entry, None) and torch.load(entry, weights_only=True)["seed"] == 4


class _RunsCode:
    def __reduce__(self):
        return (print, ("a crafted entry ran code",))


@pytest.mark.parametrize("kind", ["truncated", "garbage", "no model", "a tensor", "crafted", "no seed"])
def test_a_damaged_or_foreign_cache_entry_is_one_line_naming_it(kind, hopper_data_dir, tmp_path, monkeypatch):
    """A truncated or foreign entry once killed the launcher's job with a traceback (torch.load, or KeyError: 'key'):
    one line names the entry and says to delete it, and the entry's lock is let go for the next run."""
    import filelock

    toolbox = load_module("benchmarks/toolbox.py", "toolbox")
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    cache = str(tmp_path / "cache")
    cmd = [sys.executable, f"{ROOT}/algorithms/orpo.py", "--env", "hopper-random-v2", *TINY]
    entry = toolbox.ensemble_entry(cache, cmd)
    os.makedirs(cache)
    good = {"model": {"w": torch.zeros(3)}, "metrics": {}, "seed": 1, "padding": torch.zeros(1000)}
    if kind == "truncated":
        torch.save(good, entry)
        open(entry, "r+b").truncate(os.path.getsize(entry) // 2)
    elif kind == "garbage":
        open(entry, "w").write("not a torch file")
    else:
        torch.save({"no model": {k: v for k, v in good.items() if k != "model"}, "a tensor": torch.zeros(3),
                    "crafted": {**good, "x": _RunsCode()}, "no seed": {"model": {}}}[kind], entry)  # fmt: skip
    with pytest.raises(plumbing.UserError) as info:
        with toolbox.cached_ensemble(cache, cmd):
            raise AssertionError("the run started")
    message = str(info.value)
    assert message.startswith(f"{entry}: a damaged or foreign ensemble cache entry (") and "\n" not in message
    assert message.endswith("; delete it (the next run that needs it refits it)"), message
    filelock.FileLock(entry + ".lock").acquire(timeout=0)  # let go


# ------------------------------------------------------------------------------------------- the schedule's horizon
def test_cosine_lr_reaches_0_at_its_horizon_and_stays_there(orpo):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule, lrs = orpo.CosineLR(opt, T_max=4), []
    for _ in range(8):
        opt.step()
        schedule.step()
        lrs.append(schedule.get_last_lr()[0])
    assert lrs[:4] == pytest.approx([0.8535534, 0.5, 0.1464466, 0.0], abs=1e-6)
    assert lrs[4:] == [0.0] * 4  # torch's CosineAnnealingLR climbs back up after T_max


def test_a_short_run_is_the_beginning_of_the_long_one(orpo, hopper_data_dir, tmp_path, monkeypatch, capsys):
    """Every metric of a 2-epoch run equals the first 2 epochs of a 4-epoch run with the same seed (the LR schedule
    does not depend on --epochs), and extending the finished 2-epoch run to 4 gives the 4-epoch run's numbers."""
    monkeypatch.setenv("D4RL_DATASET_DIR", hopper_data_dir[0])
    flags = ["--env", "hopper-random-v2", *TINY]
    plumbing.cli(orpo.main, orpo.Args, [*flags, "--epochs", "4", "--runs-dir", str(tmp_path / "long")])
    plumbing.cli(orpo.main, orpo.Args, [*flags, "--runs-dir", str(tmp_path / "short")])
    a, b = rows(only_run(tmp_path / "short")), rows(only_run(tmp_path / "long"))
    assert len(a) == 3 and a == b[:3]  # row 0 (the fit) and epochs 1-2
    lrs = [float(r["charts/lr_rollout_actor"]) for r in b[1:]]
    assert lrs == pytest.approx([1e-4 * 0.5 * (1 + math.cos(math.pi * e / 1000)) for e in range(1, 5)], rel=1e-6)
    plumbing.cli(orpo.main, orpo.Args, [f"--resume={only_run(tmp_path / 'short')}", "--epochs=4"])
    assert rows(only_run(tmp_path / "short")) == b
