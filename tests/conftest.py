"""Shared fixtures: a small D4RL-layout HDF5 made from a real Hopper-v4 random policy, and the algorithm modules."""

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
from typing import NamedTuple
from unittest import mock

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from zygote import ZYGOTE_HERE, zygote

torch.set_num_threads(1)  # a 2-core machine: a second busy core makes OpenMP spin-waits very slow


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the slow tier (see docs/development.md)")


def slurm_here() -> bool:
    """A one-node Slurm can run here: .ci/run started one, or its daemons are installed (tests/test_slurm.py)."""
    tools = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")
    path = os.environ.get("PATH", "") + ":/usr/sbin"
    return bool(os.environ.get("ORPO_SLURM_CONF")) or all(shutil.which(t, path=path) for t in tools)


def pytest_configure(config):
    # the *-v4 MuJoCo envs are used on purpose (closest to D4RL's v2 data)
    config.addinivalue_line("filterwarnings", "ignore:.*is out of date.*:DeprecationWarning")
    config.addinivalue_line("markers",
                            "slow: the slow tier: the harnesses' end-to-end runs (benchmarks/, datasets/, toy/)")  # fmt: skip
    config.addinivalue_line("markers", "slurm_jobs: runs jobs on the one-node Slurm (collected first: they wait)")


def pytest_collection_modifyitems(config, items):
    """Two tiers on 2 cores: the default (the method files, plumbing.py and the launcher on a one-node Slurm,
    everything a planted bug in them trips; CI's limit is 15 min) and `--slow`, which adds the harnesses' end-to-end
    runs (about 13 min more)."""
    items.sort(key=lambda item: "slurm_jobs" not in item.keywords)  # stable: the Slurm jobs first, the rest in order
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="the slow tier (the harnesses' end-to-end runs): add --slow to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the one place the tests put the repo's folders on the path: the algorithm files import plumbing.py beside them, the
# dataset scripts `common`, the benchmarks scripts `toolbox`, test_minimal the fixtures' maker
sys.path[:0] = [os.path.join(ROOT, d) for d in ("algorithms", "datasets", "benchmarks", os.path.join("tests",
         "fixtures"))]  # fmt: skip
ALGORITHMS = ("orpo", "mopo", "oroo", "mbpo", "td3bc", "cql", "combo")
# The device of the tests that take one (tests/test_device.py): the CPU unless ORPO_TEST_DEVICE=cuda
# (benchmarks/gpu_check.sh sets it on a GPU machine; CI never does).
TEST_DEVICE = os.environ.get("ORPO_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def device() -> torch.device:
    if TEST_DEVICE not in ("cpu", "cuda"):
        pytest.exit(f"ORPO_TEST_DEVICE={TEST_DEVICE}: use cpu or cuda", returncode=2)
    if TEST_DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.exit("ORPO_TEST_DEVICE=cuda, but torch sees no CUDA device; unset it to test on the CPU", returncode=2)
    return torch.device(TEST_DEVICE)


def load_module(path: str, name: str):
    """Import a script by path (the algorithm files are importable without side effects)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def orpo():
    return load_module("algorithms/orpo.py", "orpo")


@pytest.fixture(scope="session")
def files():
    """The algorithm files as modules (their Args, presets, main)."""
    return {name: load_module(f"algorithms/{name}.py", name) for name in ALGORITHMS}


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def run_file(script: str, *argv, cwd: str, data_dir: str | None = None) -> Result:
    """algorithms/SCRIPT.py's command line in this process (plumbing.cli with an argv), in `cwd`, with `data_dir` as
    $D4RL_DATASET_DIR: (exit status, stdout, stderr). A traceback fails the test."""
    import plumbing

    module = sys.modules.get(script) or load_module(f"algorithms/{script}.py", script)
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.makedirs(cwd, exist_ok=True)
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, {"D4RL_DATASET_DIR": data_dir} if data_dir else {}):
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                plumbing.cli(module.main, module.Args, [str(a) for a in argv])
        except SystemExit as e:
            code = e.code
    assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()[-3000:]
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli(files, hopper_data_dir, tmp_path):
    """cli("orpo", *argv): run_file in tmp_path, with the Hopper fixture as the data dir."""
    return lambda script, *argv: run_file(script, *argv, cwd=str(tmp_path), data_dir=hopper_data_dir[0])


def write_random_dataset(path: str, env_id="Hopper-v4", steps=3000, seed=0, attrs: dict | None = None) -> dict:
    """Roll a uniform random policy in a real env and write D4RL's layout (with timeouts and next_observations).

    The env's time limit is shortened to 50 steps so that the file holds both terminal and timeout episode ends.
    """
    env = gym.make(env_id, max_episode_steps=50)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    cols = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")}
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for k, v in zip(cols, (obs, action, reward, next_obs, terminated, truncated and not terminated)):
            cols[k].append(v)
        obs = env.reset()[0] if terminated or truncated else next_obs
    cols["timeouts"][-1] = not cols["terminals"][-1]  # the unfinished last episode ends by truncation
    arrays = {k: np.asarray(v, dtype=bool if k in ("terminals", "timeouts") else np.float32) for k, v in cols.items()}
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v)
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
    env.close()
    return arrays


@pytest.fixture(scope="session")
def hopper_data_dir(tmp_path_factory):
    """A data dir holding the fixture under D4RL's cache name for hopper-random-v2, so --env works without a download."""
    root = tmp_path_factory.mktemp("d4rl")
    arrays = write_random_dataset(str(root / "hopper_random-v2.hdf5"))
    return str(root), arrays


TINY = (
    "--epochs 2 --steps-per-epoch 20 --batch-size 32 --rollout-batch-size 64 --dynamics-max-epochs 2 "
    "--dynamics-hidden-dims 32 32 --hidden-dims 32 32 --eval-episodes 2 --num-ensemble 3 --num-elites 2 --no-cuda"
).split()


def run_script(script: str, *args: str, data_dir=None, cwd=None, timeout=300, extra_env=None, fresh=False):
    """Run a script as a user would; one thread, since a second busy core makes OpenMP spin-waits very slow. A cluster
    named in the caller's SLURM_CONF is not passed on (tests/test_slurm.py names its own): the tests that expect no
    controller must not find one. The process is forked from this worker's zygote (tests/zygote.py: torch and the other
    libraries already imported, the project's modules fresh), or a new interpreter with fresh=True."""
    base = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    base = {**base, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    env = {**base, **(extra_env or {})}
    if data_dir:
        env["D4RL_DATASET_DIR"] = data_dir
    if cwd:
        os.makedirs(cwd, exist_ok=True)
    argv = [sys.executable, os.path.join(ROOT, script), *args]
    if not fresh and os.environ.get("ORPO_TESTS_FRESH") != "1" and ZYGOTE_HERE:
        return zygote(base).run(argv, cwd=cwd, env=env, timeout=timeout)
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


# the algorithm files' parts take their settings as arguments; these name them from an Args (as each file's main does)
def fit_settings(a) -> dict:
    return dict(lr=a.dynamics_lr, batch_size=a.dynamics_batch_size, max_epochs=a.dynamics_max_epochs,
                patience=a.dynamics_patience, holdout_ratio=a.dynamics_holdout_ratio, max_holdout=a.dynamics_max_holdout)  # fmt: skip


def sac_settings(a) -> dict:
    return dict(hidden_dims=a.hidden_dims, actor_lr=a.sac_actor_lr, critic_lr=a.sac_critic_lr, alpha_lr=a.sac_alpha_lr,
                gamma=a.gamma, tau=a.tau, target_entropy=a.target_entropy)  # fmt: skip


def td3_settings(a) -> dict:
    return dict(hidden_dims=a.hidden_dims, actor_lr=a.actor_lr, critic_lr=a.critic_lr, gamma=a.gamma, tau=a.tau,
                alpha=a.alpha, policy_noise=a.policy_noise, noise_clip=a.noise_clip)  # fmt: skip
