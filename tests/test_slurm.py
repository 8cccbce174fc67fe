"""benchmarks/scores.py --launcher slurm against a real Slurm: a one-node cluster on this machine
(benchmarks/slurm_local.sh; .ci/run installs and starts it and names it in ORPO_SLURM_CONF, else the first test here
starts one where Slurm is installed). All of them are in the default tier, the five that run jobs collected first.

An array of td3bc and orpo cells gives the local launcher's table; a job at its --time limit checkpoints, is
requeued and resumes to an uninterrupted run's metrics; a scancelled job is named as not finished and is the only cell
a relaunch resumes; a controller that restarts without its state loses its jobs, which the aggregate names and a
relaunch continues, and a launch while it is down starts nothing twice; sbatch's refusals are one line before anything
is written; submitit's files land where docs/grid.md says. The tests skip, with the reason, where Slurm is not
installed (a test run installs nothing; .ci/run does, and says why where it cannot). They share the cluster (2 job
slots on CI's 2 cores) and the uninterrupted runs they compare with: both
are made once per pytest run, whichever xdist worker needs them first, under file locks."""

import contextlib
import csv
import fcntl
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, load_module, run_script, slurm_here, write_random_dataset

# The jobs that run (an array, a time limit, scancel, a controller restart): first in the default tier's order
# (conftest.py), so that their waits on the cluster overlap the other tests.
JOBS = pytest.mark.slurm_jobs


SCRIPT = os.path.join(ROOT, "benchmarks", "scores.py")
CLUSTER_SCRIPT = os.path.join(ROOT, "benchmarks", "slurm_local.sh")
ENV = "hopper-random-v2"
# 4 epochs of 100 steps, a checkpoint after each: a run outlasts a poll of its first checkpoint
COMMON = [
    "--epochs",
    "4",
    "--steps-per-epoch",
    "100",
    "--batch-size",
    "32",
    "--hidden-dims",
    "32",
    "32",
    "--eval-episodes",
    "2",
    "--no-cuda",
    "--checkpoint-every",
    "1",
    "--eval-every",
    "2",
]
MODEL = [
    "--rollout-batch-size",
    "64",
    "--dynamics-max-epochs",
    "1",
    "--dynamics-hidden-dims",
    "32",
    "32",
    "--num-ensemble",
    "3",
    "--num-elites",
    "2",
]
# what each job asks of the one-node cluster: 1 of its CPUs, 1 GB, no GPU


def slurm_flags(**given):
    asked = {"gpus": "0", "cpus": "1", "mem": "1", "time": "10", **given}
    return ["--launcher", "slurm", *[a for k, v in asked.items() for a in (f"--{k.replace('_', '-')}", str(v))]]


SLURM = slurm_flags()


def grid(algos, seeds):
    model = ["--extra-for", f"orpo={shlex.join(MODEL)}"] if "orpo" in algos else []
    return [
        "--algos",
        *algos,
        "--envs",
        ENV,
        "--seeds",
        *map(str, seeds),
        "--reps",
        "200",
        f"--extra={shlex.join(COMMON)}",
        *model,
    ]


# ------------------------------------------------------------------------------------------ shared by the workers
def shared_dir(tmp_path_factory, worker_id) -> Path:
    """One folder for every xdist worker of this pytest run (pytest's own base folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


@contextlib.contextmanager
def flock(path, exclusive=True):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(folder: Path, name: str, make):
    """make()'s JSON result, made by the first worker that asks and read from folder/name.json by the others."""
    with flock(folder / f"{name}.lock"):
        path = folder / f"{name}.json"
        if not path.exists():
            path.write_text(json.dumps(make()))
        return json.loads(path.read_text())


def free_port_pair(start=16817) -> int:
    for port in range(start, start + 400, 2):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free ports for a test cluster")


class Cluster:
    def __init__(self, conf: str, shared: Path):
        self.conf, self.dir, self.shared = conf, os.path.dirname(conf), shared

    def env(self, data_dir, **extra):
        env = dict(os.environ, SLURM_CONF=self.conf, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", WANDB_MODE="offline")
        env.update(D4RL_DATASET_DIR=data_dir, PATH=os.environ["PATH"] + ":/usr/sbin")
        return {**env, **extra}

    def use(self, exclusive=False):
        """Jobs of several tests share the cluster; a test that restarts its controller has it alone."""
        return flock(self.shared / "slurm_use.lock", exclusive)

    def cancel_jobs_from(self, folder) -> None:
        """scancel every job submitted from folder (a test's own, after it failed half-way)."""
        out = subprocess.run(["squeue", "-h", "-o", "%A %Z"], capture_output=True, text=True, env=self.env(""))
        ids = [ln.split()[0] for ln in out.stdout.splitlines() if ln.split()[-1].startswith(str(folder))]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, env=self.env(""))

    def cmd(self, *argv, check=True):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=self.env(""))
        assert not check or out.returncode == 0, f"{argv}: {out.stderr}"
        return out.stdout


@pytest.fixture(scope="session")
def slurm(tmp_path_factory, worker_id):
    """The cluster: CI's (ORPO_SLURM_CONF), else one that the first worker starts and the last one stops."""
    shared = shared_dir(tmp_path_factory, worker_id)
    if os.environ.get("ORPO_SLURM_UNAVAILABLE"):  # .ci/run could not start one; it says why
        reason = os.environ["ORPO_SLURM_UNAVAILABLE"]
        if os.environ.get("ORPO_SLURM_UNAVAILABLE_RC") == "2":  # Slurm cannot be installed here
            pytest.skip(f"no Slurm: {reason}")
        pytest.fail(f"the one-node Slurm did not come up in .ci/run: {reason}")
    if os.environ.get("ORPO_SLURM_CONF"):
        yield Cluster(os.environ["ORPO_SLURM_CONF"], shared)
        return
    if not slurm_here():  # a test run installs no packages: .ci/run does, or the user (docs/grid.md)
        pytest.skip("Slurm is not installed here: `bash benchmarks/slurm_local.sh install` (root, apt-get) installs it")
    folder = shared / "slurm"
    folder.mkdir(exist_ok=True)
    with flock(folder / "lock"):
        state = json.loads((folder / "state.json").read_text()) if (folder / "state.json").exists() else {}
        if state.get("skip"):
            pytest.skip(state["skip"])
        if not state.get("users"):
            env = dict(os.environ, SLURM_LOCAL_PORT=str(free_port_pair()))
            up = subprocess.run(
                ["bash", CLUSTER_SCRIPT, "up", str(folder / "cluster")], capture_output=True, text=True, env=env
            )
            if up.returncode == 2:  # Slurm is not installed and cannot be (not root, no apt-get, no registry)
                (folder / "state.json").write_text(json.dumps({"skip": f"no Slurm: {up.stderr.strip()}"}))
                pytest.skip(f"no Slurm: {up.stderr.strip()}")
            assert up.returncode == 0, up.stderr
        state = {"users": state.get("users", 0) + 1}
        (folder / "state.json").write_text(json.dumps(state))
    try:
        yield Cluster(str(folder / "cluster" / "slurm.conf"), shared)
    finally:
        with flock(folder / "lock"):
            state = json.loads((folder / "state.json").read_text())
            state["users"] -= 1
            if not state["users"]:
                subprocess.run(["bash", CLUSTER_SCRIPT, "down", str(folder / "cluster")], capture_output=True)
            (folder / "state.json").write_text(json.dumps(state))


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, worker_id):
    """hopper-random-v2 under D4RL's cache name (a few thousand steps of a random policy), one file for all workers."""
    shared = shared_dir(tmp_path_factory, worker_id)
    folder = shared / "slurm_data"

    def make():
        folder.mkdir(exist_ok=True)
        write_random_dataset(str(folder / "hopper_random-v2.hdf5"))
        return str(folder)

    return once(shared, "slurm_data", make)


@pytest.fixture
def own(slurm, tmp_path):
    """tmp_path, whose jobs and paused runs are cancelled and continued when the test ends (it may fail half-way)."""
    paused = []
    yield paused
    for pid in paused:
        signal_quietly(pid, signal.SIGCONT)
    slurm.cancel_jobs_from(tmp_path)


def scores(*argv, cluster, data_dir, cwd, timeout=600, extra_env=None):
    """scores.py to its end, as conftest.run_script starts a script (forked from the worker's zygote)."""
    env = cluster.env(data_dir, **(extra_env or {}))
    return run_script("benchmarks/scores.py", *argv, cwd=str(cwd), timeout=timeout, extra_env=env)


def start_scores(*argv, cluster, data_dir, cwd):
    """scores.py started (a fresh interpreter); its stdout goes to CWD/launcher.out, which a test can read as it runs."""
    out = Path(cwd) / "launcher.out"
    with open(out, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, SCRIPT, *argv],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(cwd),
            env=cluster.env(data_dir),
        )
    proc.out = out
    return proc


def finish(proc, timeout):
    """(stdout, stderr) of a started scores.py once it has ended."""
    _, stderr = proc.communicate(timeout=timeout)
    return proc.out.read_text(), stderr


@pytest.fixture(scope="session")
def reference(tmp_path_factory, worker_id, slurm, data_dir):
    """reference(algo, seed): the run directory of that cell through the local launcher, uninterrupted (what a Slurm
    run must equal), made once per pytest run by the first test that asks (a test asks while it waits on Slurm)."""
    shared = shared_dir(tmp_path_factory, worker_id)
    runs = shared / "slurm_reference" / "runs"

    def get(algo, seed):
        def make():
            runs.mkdir(parents=True, exist_ok=True)
            argv = [*grid([algo], [seed]), "--runs-dir", str(runs), "--out", str(runs.parent / f"{algo}_{seed}.md")]
            result = scores(*argv, cluster=slurm, data_dir=data_dir, cwd=runs.parent)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            return run_dir(runs, algo, seed)

        return once(shared, f"slurm_reference_{algo}_{seed}", make)

    get.runs = runs
    return get


def run_dir(runs, algo, seed):
    (found,) = glob.glob(os.path.join(str(runs), f"{ENV}__{algo}__{seed}__*"))
    return found


def metrics_without_timings(run):
    with open(os.path.join(run, "metrics.csv")) as f:
        return [
            {k: v for k, v in r.items() if not k.startswith("charts/") and k != "dynamics/fit_seconds"}
            for r in csv.DictReader(f)
        ]


def record(runs, algo, seed):
    return json.loads((Path(runs) / "_grid" / f"{ENV}__{algo}__{seed}.json").read_text())


def wait_until(what, check, proc=None, timeout=180, step=0.05):
    t0 = time.time()
    while time.time() - t0 < timeout:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"the launcher ended before {what}: {proc.out.read_text()[-3000:]}{proc.stderr.read()}"
            )
        time.sleep(step)
    raise AssertionError(f"no {what} within {timeout} s")


def checkpointed_child(runs, algo, seed, proc):
    """Once the cell's run has its first checkpoint: the run's pid (from the cell's record)."""
    pattern = os.path.join(str(runs), f"{ENV}__{algo}__{seed}__*", "checkpoint.pt")
    wait_until(f"a checkpoint of {algo} seed {seed}", lambda: glob.glob(pattern), proc)
    return wait_until("the run's pid in its record", lambda: record(runs, algo, seed).get("child_pid"), proc)


def alive(pid) -> bool:
    """pid is running or paused (a zombie is not alive: its parent may be slow to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def signal_quietly(pid, sig):
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def table_rows(path):
    """The table's rows without the wall-time column (the only one that depends on how fast a run went)."""
    return [line.rsplit("|", 2)[0] for line in Path(path).read_text().splitlines() if line.startswith("|")]


def numbers(path):
    data = json.loads(Path(path).with_suffix(".json").read_text())
    for cell in data["cells"].values():
        cell.pop("hours_per_run")
    return {k: v for k, v in data.items() if k != "meta"}


# ------------------------------------------------------------------------------------------ an array, end to end
@pytest.fixture(scope="session")
def array(tmp_path_factory, worker_id, slurm, data_dir, reference):
    """The four cells (td3bc and orpo, seeds 1 2) as one job array on the cluster, waited for and aggregated, and the
    local launcher's table of the same cells (made meanwhile, on the third process); made once."""
    shared = shared_dir(tmp_path_factory, worker_id)

    def make():
        tmp = shared / "slurm_array"
        tmp.mkdir(exist_ok=True)
        argv = [*grid(["td3bc", "orpo"], [1, 2]), *SLURM, "--wait"]
        argv += ["--runs-dir", str(tmp / "runs"), "--out", str(tmp / "scores.md")]
        t0 = time.time()
        with slurm.use():
            proc = start_scores(*argv, cluster=slurm, data_dir=data_dir, cwd=tmp)
            try:
                for algo in ("td3bc", "orpo"):
                    for seed in (1, 2):
                        reference(algo, seed)
                local = [*grid(["td3bc", "orpo"], [1, 2]), "--table-only", "--runs-dir", str(reference.runs)]
                table = scores(*local, "--out", str(tmp / "local.md"), cluster=slurm, data_dir=data_dir, cwd=tmp)
                assert table.returncode == 0, table.stderr
                stdout, stderr = finish(proc, timeout=600)
            finally:
                proc.kill()
        return {
            "runs": str(tmp / "runs"),
            "out": str(tmp / "scores.md"),
            "local": str(tmp / "local.md"),
            "rc": proc.returncode,
            "stdout": stdout,
            "stderr": stderr,
            "seconds": time.time() - t0,
        }

    return once(shared, "slurm_array", make)


@JOBS
def test_an_array_on_slurm_gives_the_local_launchers_table(array, reference):
    assert array["rc"] == 0, array["stdout"][-3000:] + array["stderr"][-3000:]
    jobs = re.findall(r"^submitted .* seed \d: job (\d+)_(\d)$", array["stdout"], re.MULTILINE)
    assert len(jobs) == 4 and len({a for a, _ in jobs}) == 1, array["stdout"]  # one array of 4
    for algo in ("td3bc", "orpo"):
        for seed in (1, 2):
            rec = record(array["runs"], algo, seed)
            assert rec["state"] == "finished" and rec["launcher"] == "slurm" and rec["host"] == socket.gethostname()
            assert re.fullmatch(r"\d+_[0-3]", rec["job_id"]) and not rec.get("requeues"), rec
            ours = run_dir(array["runs"], algo, seed)
            assert metrics_without_timings(ours) == metrics_without_timings(reference(algo, seed)), (algo, seed)
    assert table_rows(array["out"]) == table_rows(array["local"])
    assert numbers(array["out"]) == numbers(array["local"])
    assert "| hopper-random-v2 | td3bc |" in Path(array["out"]).read_text()


@JOBS
def test_the_jobs_output_and_submitits_files_land_where_the_docs_say(array):
    """docs/grid.md: RUNS_DIR/_grid/submitit/ARRAYID_TASK/ holds the job's pickles and its output (stdout and stderr
    in one file), RUNS_DIR/_grid/submitit/ARRAYID/ the array's sbatch script, RUNS_DIR/_grid/logs/CELL.log the run's
    output."""
    grid = Path(array["runs"]) / "_grid"
    for algo in ("td3bc", "orpo"):
        for seed in (1, 2):
            job = record(array["runs"], algo, seed)["job_id"]
            folder = grid / "submitit" / job
            assert sorted(p.name for p in folder.iterdir()) == sorted(
                [f"{job}_submitted.pkl", f"{job}_0_result.pkl", f"{job}_0_log.out"]
            )
            out = (folder / f"{job}_0_log.out").read_text()
            assert f"Starting with JobEnvironment(job_id={job}" in out and "Job completed successfully" in out
            assert f"{algo} {ENV} seed {seed}: finished" in out  # the job's stdout
            assert "submitit WARNING" in out or "submitit INFO" in out  # and its stderr (submitit logs there)
            log = (grid / "logs" / f"{ENV}__{algo}__{seed}.log").read_text()
            assert log.count("=== ") == 1 and f"--seed {seed}" in log and "score=" in log
    array_id = record(array["runs"], "td3bc", 1)["job_id"].split("_")[0]
    script = (grid / "submitit" / array_id / f"{array_id}_submission.sh").read_text()
    assert "#SBATCH --array=0-3%4" in script and "#SBATCH --signal=USR2@180" in script
    assert f"#SBATCH --output={grid / 'submitit'}/%A_%a/%A_%a_0_log.out" in script


# ------------------------------------------------------------------------------------------ time limit, scancel
@JOBS
def test_a_job_at_its_time_limit_checkpoints_is_requeued_and_resumes_to_the_same_metrics(
    slurm, data_dir, reference, tmp_path, own
):
    """orpo seed 1 with --time 1: Slurm's warning (USR2, --signal-delay-s 10 before the limit, from its 30-s time-limit
    check) comes 20-50 s into the job. The run is paused (SIGSTOP) after its first checkpoint so that a 10-s run meets
    a 1-minute limit; Slurm's signal continues it (SIGCONT, and the test's own once it sees the warning)."""
    runs = tmp_path / "runs"
    argv = [*grid(["orpo"], [1]), *slurm_flags(time=1, signal_delay_s=10), "--wait"]
    with slurm.use():
        proc = start_scores(
            *argv,
            "--runs-dir",
            str(runs),
            "--out",
            str(tmp_path / "s.md"),
            cluster=slurm,
            data_dir=data_dir,
            cwd=tmp_path,
        )
        try:
            child = checkpointed_child(runs, "orpo", 1, proc)
            own.append(child)
            signal_quietly(child, signal.SIGSTOP)
            uninterrupted = reference("orpo", 1)  # made while the job waits for its time limit
            job = record(runs, "orpo", 1)["job_id"]
            log_out = runs / "_grid" / "submitit" / job / f"{job}_0_log.out"
            wait_until("Slurm's warning", lambda: "Caught signal SIGUSR2" in log_out.read_text(), proc, timeout=90)
            signal_quietly(child, signal.SIGCONT)
            stdout, stderr = finish(proc, timeout=240)
        finally:
            proc.kill()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    rec = record(runs, "orpo", 1)
    assert rec["state"] == "finished" and rec["requeues"] == 1 and rec["job_id"] == job, rec
    out = log_out.read_text()
    assert "this job is timed-out" in out and f"Requeued job {job}" in out, out[-3000:]
    assert out.count("Starting with JobEnvironment") == 2, out[-3000:]
    log = (runs / "_grid" / "logs" / f"{ENV}__orpo__1.log").read_text()
    assert log.count("=== ") == 2 and "--resume" in log.split("=== ")[2], log[-3000:]
    resumed = re.search(r"resumed (?:\S+ )?at epoch (\d)", log)  # "RUN_DIR: ...; resumed at epoch N"
    assert resumed and 1 <= int(resumed.group(1)) <= 3, log[-3000:]  # continued from a checkpoint, not restarted
    assert metrics_without_timings(run_dir(runs, "orpo", 1)) == metrics_without_timings(uninterrupted)


@JOBS
def test_scancel_of_one_job_is_named_unfinished_and_a_relaunch_resumes_only_it(
    slurm, data_dir, reference, tmp_path, own
):
    runs = tmp_path / "runs"
    argv = [*grid(["td3bc"], [1, 2]), *SLURM, "--runs-dir", str(runs), "--out", str(tmp_path / "s.md")]
    with slurm.use():
        proc = start_scores(*argv, "--wait", cluster=slurm, data_dir=data_dir, cwd=tmp_path)
        try:
            child = checkpointed_child(runs, "td3bc", 2, proc)
            own.append(child)
            signal_quietly(child, signal.SIGSTOP)  # it stays mid-run until scancel's signals reach it
            job = record(runs, "td3bc", 2)["job_id"]
            slurm.cmd("scancel", job)
            signal_quietly(child, signal.SIGCONT)
            reference("td3bc", 2)  # made while seed 1 finishes
            stdout, stderr = finish(proc, timeout=240)
        finally:
            proc.kill()
        assert proc.returncode == 1, stdout[-3000:] + stderr[-3000:]
        assert "1 of 2 runs are not finished" in stderr, stderr
        line = next(ln for ln in stderr.splitlines() if ln.startswith(f"  td3bc {ENV} seed 2: "))
        # the job's record says "stopped" (the run saved and exited), or still "running" where Slurm's SIGKILL (5 s
        # after its SIGTERM here) came first on a loaded machine: either way the run kept its last checkpoint
        assert re.search(
            rf"seed 2: stopped at epoch [1-3]/4 in {run_dir(runs, 'td3bc', 2)} \((its )?slurm job {job}\b", line
        )
        assert f"td3bc {ENV} seed 1" not in stderr and record(runs, "td3bc", 1)["state"] == "finished"
        table = scores(*argv, "--table-only", cluster=slurm, data_dir=data_dir, cwd=tmp_path)
        assert table.returncode == 0 and line in table.stderr.splitlines(), table.stderr
        again = scores(*argv, "--wait", cluster=slurm, data_dir=data_dir, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"skip td3bc {ENV} seed 1: finished" in again.stdout
    assert re.findall(r"^submitted (.*): job", again.stdout, re.MULTILINE) == [f"td3bc {ENV} seed 2"], again.stdout
    log = (runs / "_grid" / "logs" / f"{ENV}__td3bc__2.log").read_text()
    assert log.count("=== ") == 2 and "--resume" in log.split("=== ")[2], log[-3000:]
    assert (runs / "_grid" / "logs" / f"{ENV}__td3bc__1.log").read_text().count("=== ") == 1
    for seed in (1, 2):
        ours = run_dir(runs, "td3bc", seed)
        assert metrics_without_timings(ours) == metrics_without_timings(reference("td3bc", seed)), seed


@JOBS
def test_a_controller_that_loses_its_jobs_is_reported_and_a_relaunch_continues_them(
    slurm, data_dir, reference, tmp_path, own
):
    """An array of 2 that runs one job at a time: seed 1 mid-run, seed 2 pending, when slurmctld stops. A launch
    meanwhile starts nothing (squeue cannot answer: the records are trusted, and seed 1's run holds its run.lock).
    slurmctld comes back without its state (slurmctld -c): it kills the job it no longer knows (an orphan) and has
    forgotten the pending one. The waiting launcher names both cells as not finished; a relaunch resumes seed 1 and
    starts seed 2, each once."""
    runs = tmp_path / "runs"
    argv = [*grid(["td3bc"], [1, 2]), *SLURM, "--runs-dir", str(runs), "--out", str(tmp_path / "s.md")]
    with slurm.use(exclusive=True):  # it restarts the controller: no other test's jobs may be on the cluster
        proc = start_scores(*argv, "--wait", "--array-parallelism", "1", cluster=slurm, data_dir=data_dir, cwd=tmp_path)
        try:
            child = checkpointed_child(runs, "td3bc", 1, proc)
            own.append(child)
            signal_quietly(child, signal.SIGSTOP)
            jobs = [
                wait_until("job ids", lambda seed=seed: record(runs, "td3bc", seed).get("job_id"), proc)
                for seed in (1, 2)
            ]
            assert record(runs, "td3bc", 2)["state"] == "queued"
            ctld = int(Path(slurm.dir, "slurmctld.pid").read_text())
            os.kill(ctld, signal.SIGTERM)
            wait_until("slurmctld's end", lambda: not alive(ctld), timeout=30)
            during = scores(*argv, cluster=slurm, data_dir=data_dir, cwd=tmp_path)
            assert during.returncode == 0 and "submitted 0 job(s)" in during.stdout, during.stdout + during.stderr
            assert f"skip td3bc {ENV} seed 1: running ({run_dir(runs, 'td3bc', 1)}/run.lock is held by pid" in (
                during.stdout
            )
            assert f"skip td3bc {ENV} seed 2: queued (slurm job {jobs[1]})" in during.stdout, during.stdout
            wait_until("the waiting launcher's failed poll", lambda: "squeue does not answer" in proc.out.read_text())
            subprocess.run(
                [shutil.which("slurmctld", path=slurm.env("")["PATH"]), "-c", "-i"],
                env=slurm.env(""),
                check=True,
                timeout=60,
            )
            for seed in (1, 2):  # made while the controller finds its orphan and the launcher its jobs gone
                reference("td3bc", seed)
            wait_until("the orphan's end", lambda: not alive(child), timeout=120, step=0.5)  # killed, still paused
            stdout, stderr = finish(proc, timeout=240)
        finally:
            proc.kill()
            if subprocess.run(["scontrol", "ping"], env=slurm.env(""), capture_output=True).returncode:
                subprocess.run([shutil.which("slurmctld", path=slurm.env("")["PATH"]), "-i"], env=slurm.env(""))
        assert proc.returncode == 1, stdout[-3000:] + stderr[-3000:]
        assert "squeue does not answer" in stdout and "2 of 2 runs are not finished" in stderr, stdout + stderr
        lines = {
            seed: next(ln for ln in stderr.splitlines() if ln.startswith(f"  td3bc {ENV} seed {seed}: "))
            for seed in (1, 2)
        }
        assert (
            "stopped at epoch" in lines[1] and f"its slurm job {jobs[0]} left the queue while the run was" in lines[1]
        )
        assert lines[2].endswith(f"not started (its slurm job {jobs[1]} left the queue before the run began)"), lines[2]
        again = scores(*argv, "--wait", cluster=slurm, data_dir=data_dir, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert len(re.findall(r"^submitted td3bc", again.stdout, re.MULTILINE)) == 2, again.stdout
    for seed, runs_started in ((1, 2), (2, 1)):  # seed 1: started, resumed; seed 2: started once
        log = (runs / "_grid" / "logs" / f"{ENV}__td3bc__{seed}.log").read_text()
        assert log.count("=== ") == runs_started and ("--resume" in log) == (seed == 1), log[-3000:]
        ours = run_dir(runs, "td3bc", seed)
        assert metrics_without_timings(ours) == metrics_without_timings(reference("td3bc", seed)), seed


# ------------------------------------------------------------------------------------------ refusals, one line each
@pytest.mark.parametrize(
    "asked,words",
    [
        ({"partition": "nope"}, "sbatch refused the jobs: invalid partition specified: nope"),
        ({"mem": "100000"}, "sbatch refused the jobs: Requested node configuration is not available"),
        ({"cpus": "64"}, "each job asks for --partition (the default), --time 10, --cpus 64, --mem 1, --gpus 0"),
        ({"gpus": "1"}, "sbatch refused the jobs: Invalid generic resource (gres) specification"),
    ],
)
def test_an_sbatch_refusal_is_one_line_before_anything_is_written(slurm, data_dir, tmp_path, own, asked, words):
    """Each would have been accepted and left pending for ever (memory, CPUs: the cluster does not enforce its
    partition's limits at submission, like many) or refused with a traceback; `sbatch --test-only` catches both."""
    with slurm.use():
        result = scores(
            *grid(["td3bc"], [1, 2]),
            *slurm_flags(**asked),
            "--runs-dir",
            "runs",
            cluster=slurm,
            data_dir=data_dir,
            cwd=tmp_path,
        )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert words in lines[0] and lines[0].endswith("nothing was submitted"), lines[0]
    assert os.listdir(tmp_path) == [] and "submitted" not in result.stdout
    assert str(tmp_path) not in slurm.cmd("squeue", "-h", "-o", "%Z")  # no job of this launch


def test_no_controller_is_one_line(slurm, data_dir, tmp_path):
    """sbatch installed, its slurm.conf naming a controller that does not answer (the issue's traceback)."""
    conf = Path(slurm.conf).read_text()
    conf = re.sub(r"(?m)^SlurmctldPort=\d+", f"SlurmctldPort={free_port_pair(26817)}", conf)
    (tmp_path / "slurm.conf").write_text("MessageTimeout=2\n" + conf)  # sbatch gives up after 2 s, not 20
    result = scores(
        *grid(["td3bc"], [1]),
        *SLURM,
        "--runs-dir",
        "runs",
        cluster=slurm,
        data_dir=data_dir,
        cwd=tmp_path,
        extra_env={"SLURM_CONF": str(tmp_path / "slurm.conf")},
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "error: --launcher slurm needs Slurm's sbatch to reach a controller, and it could not: Unable to contact slurm "
        "controller (connect failure)"
    ), lines[0]
    assert not (tmp_path / "runs").exists()


def test_a_submission_refused_after_the_check_puts_the_records_back(slurm, data_dir, tmp_path):
    """sbatch that passes --test-only but refuses the submission (as a QOS job limit does): one line, the cells'
    records as they were (none left "queued", which a later launch would skip for ever), no file of the array."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --test-only ] && exec {shutil.which("sbatch", path=slurm.env("")["PATH"])} "$@"\n'
        'echo "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, '
        "user's size and/or time limits)\" >&2\nexit 1\n"
    )
    (fake / "sbatch").chmod(0o755)
    runs = tmp_path / "runs"
    (runs / "_grid").mkdir(parents=True)
    earlier = {"env": ENV, "exp_name": "td3bc", "seed": 1, "algo": "td3bc", "state": "stopped", "launcher": "slurm"}
    (runs / "_grid" / f"{ENV}__td3bc__1.json").write_text(json.dumps(earlier))
    path = f"{fake}:{slurm.env('')['PATH']}"
    argv = [*grid(["td3bc"], [1, 2]), *SLURM, "--runs-dir", str(runs)]
    with slurm.use():  # its --test-only asks the controller
        result = scores(*argv, cluster=slurm, data_dir=data_dir, cwd=tmp_path, extra_env={"PATH": path})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: sbatch refused the jobs: Batch job submission failed: Job violates"), lines[0]
    assert sorted(os.listdir(runs / "_grid")) == [f"{ENV}__td3bc__1.json"]
    assert json.loads((runs / "_grid" / f"{ENV}__td3bc__1.json").read_text()) == earlier
    status = scores(*argv[:-2], "--status", "--runs-dir", str(runs), cluster=slurm, data_dir=data_dir, cwd=tmp_path)
    assert "2 runs: 0 queued, 0 running, 0 finished, 0 failed, 0 stopped, 2 not started" in status.stdout, status.stdout


# ------------------------------------------------------------------------------------------ without a cluster
@pytest.fixture(scope="module")
def scores_module():
    return load_module("benchmarks/scores.py", "scores_for_slurm_tests")


@pytest.mark.parametrize(
    "rc,stderr,expected",
    [
        (0, "", set()),
        (1, "slurm_load_jobs error: Invalid job id specified", set()),  # the controller forgot the one job asked for
        (1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", None),  # nobody can tell
    ],
)
def test_squeue_that_does_not_answer_is_not_taken_for_jobs_that_ended(
    scores_module, tmp_path, monkeypatch, rc, stderr, expected
):
    """A launch while the controller is down (or restarting) must not start again a cell whose job it cannot see."""
    (tmp_path / "squeue").write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit {rc}\n")
    (tmp_path / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert scores_module.slurm_live_jobs(["12_3"]) == expected
    st = scores_module.cell_state(
        (ENV, "td3bc", 1),
        [],
        {"state": "queued", "launcher": "slurm", "job_id": "12_3"},
        scores_module.slurm_live_jobs(["12_3"]),
    )
    assert st["state"] == ("queued" if expected is None else "not started")


def test_a_signal_delay_that_reaches_the_jobs_start_is_refused(tmp_path):
    """--time 2 with the default --signal-delay-s 180: each job (and each requeued one) would be told to stop as it
    starts, 20 times over, and never progress."""
    result = subprocess.run(
        [sys.executable, SCRIPT, "--launcher", "slurm", "--time", "2", "--dry-run", "--runs-dir", "runs"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--signal-delay-s 180 with --time 2: Slurm would tell each job to stop as it starts" in result.stderr
    assert "give --time of at least 4 or a smaller --signal-delay-s" in result.stderr


# ------------------------------------------------------------------------------------------ the cluster script
def test_a_cluster_that_never_becomes_ready_is_one_line_naming_the_daemons_log(slurm, tmp_path):
    """A node declared with more memory than the machine has: slurmctld and slurmd start, the node never turns idle."""
    env = dict(
        os.environ,
        SLURM_LOCAL_PORT=str(free_port_pair(36817)),
        SLURM_LOCAL_TIMEOUT="6",
        SLURM_LOCAL_MEMORY="99999999",
    )
    folder = tmp_path / "cluster"
    try:
        up = subprocess.run(["bash", CLUSTER_SCRIPT, "up", str(folder)], capture_output=True, text=True, env=env)
        pids = {d: int((folder / f"{d}.pid").read_text()) for d in ("munged", "slurmctld", "slurmd")}
    finally:
        subprocess.run(["bash", CLUSTER_SCRIPT, "down", str(folder)], capture_output=True, env=env, timeout=60)
    lines = up.stderr.strip().splitlines()
    assert up.returncode == 1 and up.stdout == "" and len(lines) == 1, up.stderr
    assert lines[0].startswith("error: slurm_local: slurmd did not come up within 6 s (node state "), lines[0]
    assert "Low RealMemory" in lines[0] and lines[0].endswith(f"see {folder}/slurmd.log and {folder}/slurmctld.log")
    for daemon, pid in pids.items():  # down stopped them all
        assert wait_until(f"{daemon}'s end", lambda pid=pid: not alive(pid), timeout=10), daemon
