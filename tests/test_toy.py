"""The RiskWorld toy (toy/riskworld.py): env dynamics and reward sign, the dataset recipe, evaluation, the statistics,
and one tiny run that checks each arm trained with the u and λp it claims and reused the seed's ensemble."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import gymnasium as gym
import h5py
import numpy as np
import pytest
from conftest import ROOT, load_module
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

rw = load_module("toy/riskworld.py", "riskworld")
SQRT2 = np.sqrt(2.0)


def env_at(state):
    env = gym.make("RiskWorld-v0")
    env.reset(seed=0)
    env.unwrapped.state = np.asarray(state, dtype=np.float32)
    return env


# ---------------------------------------------------------------- env
@pytest.mark.parametrize(
    "state, action, next_state",
    [
        ((0.5, -0.2), (0.3, 0.1), (0.8, -0.1)),  # inside: s + a
        ((2.5, 2.8), (1.0, 1.0), (3.0, 3.0)),  # clipped at the upper-right corner
        ((-2.5, -2.9), (-1.0, -0.5), (-3.0, -3.0)),  # clipped at the lower-left corner
        ((2.9, -2.9), (0.6, -0.6), (3.0, -3.0)),  # clipped at the end of the band
        ((0.0, 0.0), (5.0, -7.0), (1.0, -1.0)),  # actions beyond [-1, 1] are clipped to it
    ],
)
def test_step_moves_by_the_action_and_clips_at_the_border(state, action, next_state):
    env = env_at(state)
    obs, reward, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.float32))
    np.testing.assert_allclose(obs, next_state, atol=1e-6)
    assert reward == pytest.approx((next_state[0] + next_state[1]) / SQRT2, abs=1e-6)
    assert not terminated and not truncated


def test_reward_is_the_signed_distance_to_the_line():
    assert rw.reward_fn(np.array([3.0, 3.0])) == pytest.approx(6 / SQRT2)  # upper right: high reward
    assert rw.reward_fn(np.array([-3.0, -3.0])) == pytest.approx(-6 / SQRT2)  # lower left: negative, not |x + y|
    assert rw.reward_fn(np.array([2.0, -2.0])) == pytest.approx(0.0)  # on the line y = -x
    env = env_at((-1.0, -1.0))
    assert env.step(np.array([-1.0, -1.0], dtype=np.float32))[1] == pytest.approx(-4 / SQRT2)


def test_episodes_start_in_the_band_and_end_by_time_limit_only():
    env = gym.make("RiskWorld-v0")
    starts = np.array([env.reset(seed=i)[0] for i in range(1000)])
    assert (np.abs(starts.sum(1)) < 0.25).all() and (np.abs(starts) <= 3).all()
    assert starts[:, 0].min() < -2.5 and starts[:, 0].max() > 2.5  # the whole band, not a piece of it
    env.reset(seed=0)
    for t in range(10):
        _, _, terminated, truncated, _ = env.step(np.array([1.0, 1.0], dtype=np.float32))
        assert not terminated and truncated == (t == 9)


# ---------------------------------------------------------------- dataset
def test_dataset_lies_in_the_band_and_follows_the_env(tmp_path):
    data = rw.make_dataset()
    assert len(data["observations"]) == 10_000
    obs, act, nxt = data["observations"], data["actions"], data["next_observations"]
    assert (np.abs(obs.sum(1)) < 0.25).all() and (np.abs(obs) <= 3).all()
    assert (np.abs(act) <= 1).all() and act.min() < -0.99 and act.max() > 0.99
    np.testing.assert_allclose(nxt, np.clip(obs + act, -3, 3), atol=1e-6)
    np.testing.assert_allclose(data["rewards"], (nxt[:, 0] + nxt[:, 1]) / SQRT2, atol=1e-5)
    assert not data["terminals"].any() and not data["timeouts"].any()
    # the band is covered end to end, so "out of distribution" means off the band, not a gap in it
    assert np.histogram(obs[:, 0], bins=12, range=(-3, 3))[0].min() > 300

    small = rw.make_dataset(500, seed=3)
    path = rw.write_dataset(str(tmp_path / "riskworld.hdf5"), small)
    with h5py.File(path, "r") as f:
        assert f.attrs["env_id"] == "RiskWorld-v0" and f.attrs["reward_fn"] == "env"
    load_module("algorithms/orpo.py", "orpo")
    task, _ = plumbing.resolve_task("ignored", path, None, None)
    assert task.gym_id == "RiskWorld-v0"
    loaded = plumbing.load_transitions(path)  # every row kept: none is a timeout
    np.testing.assert_array_equal(loaded["next_obs"], small["next_observations"])
    assert loaded["done"].sum() == 0


# ---------------------------------------------------------------- evaluation and statistics
def test_roll_returns_the_real_envs_episode_returns():
    def up_right(obs):
        return np.ones_like(obs)

    states, returns = rw.roll(up_right, 30, seed=7)
    assert states.shape == (3, 11, 2) and returns.shape == (3,)
    for ep in range(3):
        s, expected = gym.make("RiskWorld-v0").reset(seed=7 + ep)[0].astype(np.float64), 0.0
        np.testing.assert_allclose(states[ep, 0], s, atol=1e-6)
        for _ in range(10):
            s = np.clip(s + 1.0, -3, 3)
            expected += (s[0] + s[1]) / SQRT2
        assert returns[ep] == pytest.approx(expected, abs=1e-4)
        np.testing.assert_allclose(states[ep, -1], (3.0, 3.0))
    assert rw.upper_right_share(states[:, 1:]) == pytest.approx(np.mean(states[:, 1:].reshape(-1, 2).min(1) > 1.5))


def test_the_toys_interval_is_the_shared_bootstrap(monkeypatch):
    """aggregate's ci95 is benchmarks/stats.py's bootstrap (tests/test_stats.py holds it against scipy's)."""
    rows = [dict(algo="orpo", u="max_aleatoric", lambda_p=100.0, seed=s, avg_return=r, share_upper_right=0.0,
                 train_seconds=1.0) for s, r in ((1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0), (5, 10.0))]  # fmt: skip
    entry = rw.aggregate(rows)["orpo|max_aleatoric|100"]
    assert tuple(entry["ci95"]) == rw.stats.bootstrap([0.0, 0.0, 0.0, 0.0, 10.0]) == (0.0, 6.0)
    assert entry["mean"] == 2.0 and entry["per_seed"] == [0.0, 0.0, 0.0, 0.0, 10.0]


def test_orpo_beats_mopo_only_with_disjoint_intervals():
    def entry(algo, u, mean, ci, seeds=3):
        return {
            f"{algo}|{u}|100": {
                "algo": algo,
                "u": u,
                "lambda_p": 100.0,
                "mean": mean,
                "ci95": ci,
                "per_seed": [mean] * seeds,
            }
        }

    table = {
        **entry("mopo", "ensemble_std", 5.0, [1.0, 9.0]),
        **entry("orpo", "max_aleatoric", 35.0, [34.0, 36.0]),
        **entry("mopo", "max_aleatoric", 33.0, [20.0, 35.0]),
        **entry("orpo", "ensemble_std", 5.5, [2.0, 9.0]),
    }
    got = {c["comparison"]: c for c in rw.comparisons(table, (100.0,))}
    assert got["as the authors ran it"]["orpo_better"]  # MOPO with ensemble_std against ORPO with max_aleatoric
    assert not got["matched max_aleatoric"]["orpo_better"] and not got["matched max_aleatoric"]["mopo_better"]
    assert not got["matched ensemble_std"]["orpo_better"]
    assert "matched mixture_std" not in got  # no cells, no comparison
    one_seed = {**table, **entry("mopo", "ensemble_std", 5.0, [5.0, 5.0], seeds=1)}
    assert not next(c for c in rw.comparisons(one_seed, (100.0,)) if c["comparison"] == "as the authors ran it")[
        "orpo_better"
    ]


# ---------------------------------------------------------------- the command line
def test_results_go_to_runs_unless_the_committed_ones_are_asked_for(tmp_path, monkeypatch):
    """A user's run writes under runs/; --write-docs rewrites the committed runs in results/toy_<setting>/ (whose
    tables benchmarks/report.py puts in docs/toy.md), never docs/ itself."""
    monkeypatch.chdir(tmp_path)
    assert rw.resolve(rw.ToyArgs())[1] == str(tmp_path / "runs" / "toy" / "demo")
    assert rw.resolve(rw.ToyArgs(setting="paper", write_docs=True))[1] == os.path.join(ROOT, "results", "toy_paper")


def no_work(*a, **k):
    raise AssertionError("a fit or a training run started")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "-1"], "--seeds (-1,): must lie in [0, 4294967295]"),  # failed after a 151 s fit
        (["--seeds", "1", "1"], "--seeds 1 1: give each value once"),
        (["--lambda-ps", "-1"], "--lambda-ps (-1.0,): must lie in [0, inf)"),
        (["--lambda-ps", "nan"], "--lambda-ps (nan,): must lie in [0, inf)"),  # trained for minutes
        (["--lambda-o", "inf"], "--lambda-o inf: must lie in [0, inf)"),
        (["--rollout-length", "0"], "--rollout-length 0: must lie in [1, 100]"),  # trained for minutes
        (["--dynamics-batch-size", "0"], "--dynamics-batch-size 0: must lie in [1, 4096]"),
        (["--dynamics-patience", "0"], "--dynamics-patience 0: must lie in [1, 1000]"),
        (["--dynamics-max-epochs", "0"], "--dynamics-max-epochs 0: must lie in [1, 100000]"),
        (["--dataset-seed", "-2"], "--dataset-seed -2: must lie in [0, 4294967295]"),
        (["--workers", "0"], "--workers 0: must lie in [1, 64]"),
        (["--write-docs", "--out-dir", "x"], "either --write-docs or --out-dir"),
        (["--out-dir", "a_file"], "--out-dir a_file: {tmp}/a_file is not a folder; pass a writable folder"),
        (["--ensembles-dir", "a_file"], "--ensembles-dir a_file: {tmp}/a_file is not a folder"),
        (["--out-dir", "a_file/sub"], "--out-dir a_file/sub: {tmp}/a_file is not a folder"),
    ],
)
def test_bad_flags_are_one_line_before_any_work(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rw, "run_jobs", no_work)
    (tmp_path / "a_file").write_text("")
    assert rw.cli(argv) == 2
    out, err = capsys.readouterr()
    message = message.format(tmp=tmp_path)
    assert out == "" and err.startswith("error: ") and message in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["a_file"]  # nothing written: no ensemble, no output folder


class Payload:
    """A pickle that runs code when loaded without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("kind", ["crafted", "garbage", "truncated", "foreign", "other seed"])
def test_a_bad_ensemble_file_is_one_line_naming_it(kind, tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(rw, "run_jobs", no_work)
    args = rw.ToyArgs(setting="quick", out_dir=str(tmp_path / "out"), ensembles_dir=str(tmp_path / "ens"))
    setting = rw.resolve(args)[0]
    path = rw.ensemble_path(str(tmp_path / "ens"), rw.fit_config(setting, args), 1)
    os.makedirs(os.path.dirname(path))
    marker = tmp_path / "code_ran"
    good = {"model": {}, "metrics": {"seed": 1, "holdout_mse": 1e-3, "epochs": 5, "fit_seconds": 1.0}}
    if kind == "crafted":
        torch.save({"model": Payload(str(marker)), "metrics": good["metrics"]}, path)
    elif kind == "garbage":
        open(path, "w").write("not a torch file")
    elif kind == "truncated":
        torch.save(good, path)
        open(path, "r+b").truncate(200)
    elif kind == "foreign":  # a torch file, but not this ensemble's layers
        torch.save({**good, "model": {"w": torch.zeros(3)}}, path)
    else:  # a real ensemble of this fit rule, but seed 2's
        orpo = rw.toolbox.algorithm("orpo")
        model = orpo.EnsembleDynamics(2, 2, setting.dynamics_hidden_dims, setting.num_ensemble, setting.num_elites)
        torch.save({"model": model.state_dict(), "metrics": {**good["metrics"], "seed": 2}}, path)
    argv = ["--setting", "quick", "--out-dir", args.out_dir, "--ensembles-dir", args.ensembles_dir]
    assert rw.cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path} is not an ensemble") and "delete it" in err and err.count("\n") == 1
    assert not marker.exists()  # weights_only: the crafted pickle's code did not run
    if kind == "crafted":
        assert "weights_only loading refused it: Unsupported global: GLOBAL io.open" in err
    assert not (tmp_path / "out").exists()


def test_a_damaged_cell_file_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rw, "run_jobs", no_work)
    cell = tmp_path / "out" / "cells" / "orpo__max_aleatoric__lp100__s1.json"
    cell.parent.mkdir(parents=True)
    cell.write_text('{"algo": ')
    assert rw.cli(["--setting", "quick", "--out-dir", str(tmp_path / "out"), "--ensembles-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {cell} is not a finished run") and "delete it" in err and err.count("\n") == 1


# ---------------------------------------------------------------- the job runner, as a process
# The toy's command line (cli, its signal handlers, run_jobs with 2 workers) with jobs that only wait: the README's
# `python toy/riskworld.py` once hung after its last run (a killed idle pool process held the call queue's lock), and
# a SIGTERM printed a starting worker's traceback. Jobs of 2 s: a worker started after the first ones is idle before
# the last one ends (with 0.5-s jobs the pool's hang did not show).
RUNNER = """
import sys, time
sys.path.insert(0, {toy!r})
import riskworld as rw

def run(args, command=None):
    jobs = [rw.Job(f"job {{i}}", (time.sleep, 2.0), f"{{args.out_dir}}/logs/{{i}}.log", (), i) for i in range(3)]
    rw.run_jobs(jobs, args.workers, lambda job: print(job.label, "done", flush=True))

rw.run = run
sys.exit(rw.cli(sys.argv[1:]))
"""


def runner(out, **popen):
    cmd = [sys.executable, "-c", RUNNER.format(toy=os.path.join(ROOT, "toy")), "--out-dir", str(out), "--workers", "2"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_the_job_runner_ends_after_its_last_job(tmp_path):
    p = runner(tmp_path)
    try:
        stdout, stderr = p.communicate(timeout=120)  # about 10 s; the pool hung here for good
    finally:
        p.kill()
    assert p.returncode == 0 and stderr == "", stderr
    assert sorted(stdout.splitlines()) == ["job 0 done", "job 1 done", "job 2 done"]
    assert worker_processes(tmp_path) == []


@pytest.mark.slow  # the slow tier: the toy's processes (about 15 s each here)
@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)])
def test_signals_end_the_job_runner_in_one_line(signals, tmp_path):
    """SIGTERM once a job has finished (the pool started a worker then, which printed a traceback when the toy went
    away), and two Ctrl-Cs 0.1 s apart (the second one, once the default handler was back, ended the toy by the
    signal: exit -2)."""
    p = runner(tmp_path)
    try:
        assert p.stdout.readline().endswith(" done\n")
        for sig in signals:
            p.send_signal(sig)
            time.sleep(0.1)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
    name = signal.Signals(signals[0]).name
    assert p.returncode == 128 + signals[0], stderr
    assert stderr.startswith(f"interrupted by {name}: workers stopped") and stderr.count("\n") == 1, stderr
    assert worker_processes(tmp_path) == []


# ---------------------------------------------------------------- tiny runs of the whole pipeline
def toy(*flags, **popen):
    """The toy's command line as a user runs it (a subprocess)."""
    cmd = [sys.executable, os.path.join(ROOT, "toy", "riskworld.py"), "--setting", "quick", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, **popen)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run (1 fit, 4 training runs, 2 workers): its output, folders and results."""
    tmp = tmp_path_factory.mktemp("quick")
    out, ens = tmp / "out", tmp / "ensembles"
    proc = toy("--out-dir", str(out), "--ensembles-dir", str(ens))
    assert proc.returncode == 0, proc.stderr
    return proc, out, ens, json.loads((out / "results.json").read_text())


@pytest.mark.slow  # the slow tier: the toy's runs end to end
def test_quick_run_trains_each_arm_with_its_u_on_the_seeds_ensemble_and_resumes(quick):
    _, out, ens, results = quick
    ensembles = list(ens.iterdir())
    assert len(ensembles) == 1  # one fit for the seed, shared by the 4 runs
    cells = {p.name: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    assert sorted(cells) == sorted(
        f"{a}__{u}__lp100__s1.json" for a in ("mopo", "orpo") for u in ("ensemble_std", "max_aleatoric")
    )
    for row in cells.values():  # what the algorithm's own run recorded in its config.json
        assert row["config_uncertainty"] == row["u"] and row["config_lambda_p"] == 100.0
        assert row["config_load_dynamics_path"] == str(ensembles[0])
        assert row["config_env"] == "riskworld"  # the run's recorded dataset, not the Args default hopper-medium-v2
        assert row["episodes"] == 20 and np.isfinite(row["avg_return"])
    authors = next(c for c in results["comparisons"] if c["comparison"] == "as the authors ran it")
    assert authors["mopo"] == cells["mopo__ensemble_std__lp100__s1.json"]["avg_return"]
    assert authors["orpo"] == cells["orpo__max_aleatoric__lp100__s1.json"]["avg_return"]
    for name in ("uncertainty.png", "visited_lp100.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["ensembles"]["per_seed"][0]["holdout_mse"] > 0
    # a second invocation finds every cell and the ensemble done: nothing is retrained
    stamps = {p: p.stat().st_mtime_ns for p in [*(out / "cells").iterdir(), *ensembles]}
    again = toy("--out-dir", str(out), "--ensembles-dir", str(ens))
    assert again.returncode == 0, again.stderr
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((out / "results.json").read_text())["table"] == results["table"]
    assert "4 already finished" in again.stdout


@pytest.mark.slow  # the slow tier: the toy's runs end to end
def test_output_is_a_line_per_run_and_a_table_with_details_in_the_logs(quick):
    proc, out, _, results = quick
    lines = proc.stdout.splitlines()
    assert proc.stderr == ""  # not a terminal: no progress bars, and nothing else
    # a header, a line per fit and per run, the table (2 lines above the header, 4 rows, 2 below), the last line
    assert len(lines) <= 17, proc.stdout
    for word in ("hopper", "lambda_p", "{", "summary", "run_dir", "matched"):
        assert word not in proc.stdout  # no config dump or summary.json, no one-seed verdicts
    assert not re.search(r"\[(-?[\d.]+), \1\]", proc.stdout)  # no one-seed "interval" like [1.2, 1.2]
    rows = {(e["algo"].upper(), e["u"]): e["mean"] for e in results["table"].values()}
    for (algo, u), mean in rows.items():
        done = [x for x in lines if x.startswith(f"{algo} {u} λp 100 seed 1: return ")]
        row = [x for x in lines if re.match(rf"{algo} +{u} +100 +{mean:.1f} +\d+ %", x)]
        assert len(done) == 1 and f"return {mean:.1f}," in done[0] and len(row) == 1, proc.stdout
    assert "1 seed: no intervals and no verdict" in proc.stdout
    for key in ("orpo__max_aleatoric__lp100__s1", "mopo__ensemble_std__lp100__s1"):
        log = (
            out / "logs" / f"{key}.log"
        ).read_text()  # the details: the algorithm's start and result lines, the toy's
        assert re.search(r"riskworld \(\d+ transitions\)", log) and "hopper-medium-v2" not in log
        assert re.search(r"finished: \d+ epochs in .*summary\.json", log) and f"{key}: average return" in log
        assert "epoch/s" not in log and "%|" not in log, log  # the epoch bar reports to the toy, it draws no bar here
    fit_log = (out / "logs" / "ensemble_s1.log").read_text()
    assert "holdout MSE" in fit_log and "%|" not in fit_log, fit_log  # the fit's bar too


def worker_processes(out) -> list[int]:
    """The pids of the toy's workers that are still alive (each log's first line names its worker's pid)."""
    pids = []
    for log in out.glob("logs/*.log"):
        first = log.read_text().split("\n", 1)[0]
        if first.startswith("worker pid ") and os.path.exists(f"/proc/{first.split()[-1]}"):
            with open(f"/proc/{first.split()[-1]}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    pids.append(int(first.split()[-1]))
    return pids


def starting_worker(pid: int, blocked: list) -> bool:
    """Whether the toy has spawned a pool process (polled every 0.1 s, the first one is seen while it starts); its
    blocked signals (/proc's SigBlk mask) go to `blocked`."""
    with contextlib.suppress(OSError):  # a thread or a process that ended while it was read: the next poll sees it
        for task in os.listdir(f"/proc/{pid}/task"):
            for kid in open(f"/proc/{pid}/task/{task}/children").read().split():
                if b"spawn_main" in open(f"/proc/{kid}/cmdline", "rb").read():
                    blocked.append(int(re.search(r"SigBlk:\s*(\w+)", open(f"/proc/{kid}/status").read())[1], 16))
                    return True
    return False


@pytest.mark.slow  # the slow tier: the toy's runs end to end
def test_interrupt_stops_the_workers_keeps_finished_runs_and_resumes(tmp_path):
    out, ens, tmp = tmp_path / "out", tmp_path / "ensembles", tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, os.path.join(ROOT, "toy", "riskworld.py"), "--setting", "quick", "--workers", "1"]
    cmd += ["--out-dir", str(out), "--ensembles-dir", str(ens), "--dynamics-max-epochs", "30"]
    env = {**os.environ, "TMPDIR": str(tmp)}

    def interrupted(sig, when, group):
        """Start the toy, send `sig` when `when(its pid)` holds (to its process group, as a terminal's Ctrl-C does)."""
        p = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        deadline = time.time() + 300
        while not when(p.pid) and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert p.poll() is None, "the toy ended before the signal"
        os.killpg(p.pid, sig) if group else p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 128 + sig, stderr
        assert (
            stderr.startswith(f"interrupted by {signal.Signals(sig).name}: workers stopped") and stderr.count("\n") == 1
        )
        assert worker_processes(out) == []  # the workers stopped with it
        assert not [p for d in (out, ens) if d.exists() for p in d.rglob("*.tmp")]  # nothing half-written
        assert not [p for p in tmp.iterdir() if p.name.startswith("riskworld_")]  # the run folders removed
        return stdout

    # SIGTERM to the toy alone during the fit: no ensemble is kept
    fit_log = out / "logs" / "ensemble_s1.log"
    interrupted(signal.SIGTERM, lambda pid: fit_log.exists() and time.sleep(1) is None, group=False)
    assert not ens.exists() or not list(ens.iterdir())
    # Ctrl-C once the first run has finished: that run is kept
    cells = out / "cells"
    interrupted(signal.SIGINT, lambda pid: len(list(cells.glob("*.json"))) >= 1, group=True)
    kept = {p: p.stat().st_mtime_ns for p in cells.glob("*.json")}
    assert 1 <= len(kept) < 4
    # Ctrl-C while a pool process starts, still in the terminal's process group: the same one line (it once printed
    # the starting process's "Fatal Python error" and traceback too)
    blocked = []
    interrupted(signal.SIGINT, lambda pid: starting_worker(pid, blocked), group=True)
    assert {q: q.stat().st_mtime_ns for q in cells.glob("*.json")} == kept
    for sig in (signal.SIGINT, signal.SIGTERM):  # how: it starts with them blocked (whether the race shows is chance)
        assert blocked[0] & 1 << (sig - 1), f"a pool process started with {sig.name} unblocked: {blocked}"
    # the same command resumes: the kept runs are not retrained, the rest are
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"{len(kept)} already finished" in p.stdout and len(list(cells.glob("*.json"))) == 4
    assert {q: q.stat().st_mtime_ns for q in kept} == kept
