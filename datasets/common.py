"""Shared pieces of the dataset scripts: where datasets live, how transitions are
recorded, the HalfCheetah jump rewards, and the atomic D4RL-layout HDF5 writer.

A dataset file holds, at its root:
    observations       float32 [N, obs_dim]
    actions            float32 [N, act_dim]
    rewards            float32 [N]
    next_observations  float32 [N, obs_dim]   true next obs returned by `step`
    terminals          bool    [N]            the environment terminated
    timeouts           bool    [N]            the episode was cut here without terminating
and the attrs env_id, reward_fn, policy, steps, seed, created_by, plus
ref_min_score / ref_max_score when D4RL has reference returns for the task.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import gymnasium as gym
import h5py
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import toolbox  # noqa: E402  (the scripts' one command line; it puts algorithms/ on the path)
from plumbing import UsageError  # noqa: E402  (the one error type)

DATA_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
REWARD_FNS = ("env", "halfcheetah-jump", "halfcheetah-jump-hard")

# D4RL's reference returns (random / expert policy) for normalised scores. They only
# mean something for the environment's own reward, so the jump tasks report raw returns.
REF_SCORES = {
    "Hopper-v4": (-20.272305, 3234.3),
    "HalfCheetah-v4": (-280.178953, 12135.0),
    "Walker2d-v4": (1.629008, 4592.3),
}


# ---------------------------------------------------------------------------- paths


def data_dir(override: str | None = None) -> Path:
    """Same lookup as D4RL, so files written here are found by D4RL-style loaders."""
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get("D4RL_DATASET_DIR", "~/.d4rl/datasets")).expanduser()


def dataset_path(name: str, data_dir_override: str | None = None, out: str | None = None) -> Path:
    """`<data_dir>/<name>.hdf5`, unless an explicit `--out` path is given."""
    if out:
        return Path(out).expanduser()
    return data_dir(data_dir_override) / f"{name}.hdf5"


def env_slug(env_id: str) -> str:
    """ "HalfCheetah-v4" -> "halfcheetah", the stem D4RL uses in dataset names."""
    return re.sub(r"-v\d+$", "", env_id).lower()


# ---------------------------------------------------------------------------- recording


def allocate_buffer(steps: int, obs_dim: int, act_dim: int, info_keys=()) -> dict[str, np.ndarray]:
    """Preallocated arrays for `steps` transitions, plus float64 columns for info fields
    (e.g. "x_velocity") that rewards are later relabelled from."""
    buf = {
        "observations": np.zeros((steps, obs_dim), np.float32),
        "actions": np.zeros((steps, act_dim), np.float32),
        "rewards": np.zeros(steps, np.float32),
        "next_observations": np.zeros((steps, obs_dim), np.float32),
        "terminals": np.zeros(steps, bool),
        "timeouts": np.zeros(steps, bool),
    }
    for key in info_keys:
        buf[key] = np.zeros(steps, np.float64)
    return buf


def record(buf, t, obs, action, reward, next_obs, terminated, truncated, info) -> None:
    """Store transition `t`. A step that both terminates and hits the time limit counts
    as a terminal only: it is a true end (no bootstrapping), and D4RL-style loaders drop
    timeout steps, which would otherwise lose a real terminal transition."""
    buf["observations"][t] = obs
    buf["actions"][t] = action
    buf["rewards"][t] = reward
    buf["next_observations"][t] = next_obs
    buf["terminals"][t] = terminated
    buf["timeouts"][t] = truncated and not terminated
    for key in buf.keys() - set(DATA_KEYS):
        buf[key][t] = info[key]


def close_last_episode(buf) -> None:
    """The collection usually stops mid-episode; mark that cut as a timeout so every
    episode in the file ends with either a terminal or a timeout."""
    if not buf["terminals"][-1]:
        buf["timeouts"][-1] = True


def uniform_policy(action_space: gym.spaces.Box, seed: int):
    """Uniform random actions from its own RNG, so the env's RNG only drives resets."""
    rng = np.random.default_rng(seed)
    low, high = action_space.low, action_space.high

    def policy(obs_batch: np.ndarray) -> np.ndarray:
        return rng.uniform(low, high, size=(len(obs_batch), len(low))).astype(np.float32)

    return policy


def collect_rollouts(env: gym.Env, policy, steps: int, seed: int, info_keys=(), desc: str = "collect"):
    """Step `env` for `steps` transitions with `policy(obs_batch) -> action_batch`,
    resetting at episode ends. Episodes stay contiguous, in order."""
    buf = allocate_buffer(steps, env.observation_space.shape[0], env.action_space.shape[0], info_keys)
    obs, _ = env.reset(seed=seed)
    for t in tqdm(range(steps), desc=desc, unit="step", mininterval=1.0):
        # Policies see float32, exactly what the dataset stores, so actions can be
        # recomputed from the file.
        action = np.asarray(policy(obs[None].astype(np.float32)), dtype=np.float32)[0]
        next_obs, reward, terminated, truncated, info = env.step(action)
        record(buf, t, obs, action, reward, next_obs, terminated, truncated, info)
        obs = env.reset()[0] if terminated or truncated else next_obs
    close_last_episode(buf)
    return buf


def episode_returns(rewards: np.ndarray, terminals: np.ndarray, timeouts: np.ndarray) -> np.ndarray:
    """Returns of the episodes in a dataset (the last, cut one included)."""
    ends = np.flatnonzero(terminals | timeouts)
    return np.array([seg.sum() for seg in np.split(rewards, ends + 1)[: len(ends)]])


def normalized_score(env_id: str, ret: float) -> float:
    """D4RL's normalised score, 100 * (R - random) / (expert - random), with its reference returns."""
    low, high = REF_SCORES[env_id]
    return 100.0 * (ret - low) / (high - low)


def behavior_attrs(env_id: str, data, last_cut: bool) -> dict:
    """The behaviour policy's mean episode return in `data` and its D4RL-normalised score (where D4RL has reference
    returns), as dataset attrs. `last_cut`: the last episode was cut by the end of the collection, not by the env, so
    it is left out (unless it is the only one)."""
    returns = episode_returns(data["rewards"], data["terminals"], data["timeouts"])
    if last_cut and len(returns) > 1:
        returns = returns[:-1]
    attrs = {"behavior_mean_return": float(returns.mean()), "behavior_episodes": len(returns)}
    if env_id in REF_SCORES:
        attrs["behavior_normalized_score"] = normalized_score(env_id, attrs["behavior_mean_return"])
    return attrs


# ---------------------------------------------------------------------------- rewards


def halfcheetah_run_reward(action: np.ndarray, x_velocity: np.ndarray) -> np.ndarray:
    """HalfCheetah-v4's reward with the forward velocity clipped to [-3, 3] (what the
    behaviour SAC of halfcheetah-jump is trained on). Batched: action [B, act_dim]."""
    return np.clip(x_velocity, -3.0, 3.0) - 0.1 * np.sum(np.square(action), axis=-1)


def halfcheetah_jump_reward(next_obs: np.ndarray, action: np.ndarray, x_velocity: np.ndarray, hard: bool = False):
    """Jump rewards of the ORPO paper, from HalfCheetah-v4 transitions (batched).

    r = clip(v_x, -3, 3) - 0.1 ||a||^2 + 15 z, with z = next_obs[:, 0] the root height
    (qpos[1]) and v_x = info["x_velocity"]. The hard variant pays -3 whenever the root
    angle next_obs[:, 1] (qpos[2]) exceeds 1 rad, i.e. the cheetah is flipping over.
    """
    next_obs = np.asarray(next_obs)
    reward = halfcheetah_run_reward(action, x_velocity) + 15.0 * next_obs[:, 0]
    if hard:
        reward = np.where(next_obs[:, 1] > 1.0, -3.0, reward)
    return reward


# ---------------------------------------------------------------------------- writing


def write_dataset(
    path, data, *, env_id: str, reward_fn: str, policy: str, seed: int, created_by: str, extra_attrs=None
):
    """Write the D4RL-layout file atomically: into `<path>.tmp`, then renamed, so a
    crash or a kill never leaves a file that looks complete."""
    if reward_fn not in REWARD_FNS:
        raise ValueError(f"reward_fn must be one of {REWARD_FNS}, got {reward_fn!r}")
    dtypes = {"terminals": bool, "timeouts": bool}
    arrays = {k: np.asarray(data[k], dtype=dtypes.get(k, np.float32)) for k in DATA_KEYS}
    n = len(arrays["observations"])
    if any(len(a) != n for a in arrays.values()) or arrays["observations"].shape != arrays["next_observations"].shape:
        raise ValueError(f"inconsistent shapes: { {k: a.shape for k, a in arrays.items()} }")

    attrs = dict(env_id=env_id, reward_fn=reward_fn, policy=policy, steps=n, seed=seed, created_by=created_by)
    if reward_fn == "env" and env_id in REF_SCORES:
        attrs["ref_min_score"], attrs["ref_max_score"] = REF_SCORES[env_id]
    attrs.update(extra_attrs or {})

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    image = io.BytesIO()  # HDF5 writes into memory: on a full disk its own writer spews errors, then segfaults
    with h5py.File(image, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
        f.attrs.update(attrs)
    try:  # the file's bytes by plain Python I/O: a full disk is one OSError
        with open(tmp, "wb") as raw:
            raw.write(image.getbuffer())
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(f"could not write {path} ({e.strerror or e}); free space or write elsewhere") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


# ---------------------------------------------------------------------------- checks


def check_int(problems: list[str], flag: str, value: int | None, minimum: int, below: int | None = None) -> None:
    """minimum <= value (< below, where given)."""
    if value is not None and value < minimum:
        problems.append(f"{flag} must be at least {minimum}, got {value}")
    elif value is not None and below is not None and value >= below:
        problems.append(f"{flag} must be below {below}, got {value}")


def check_float(
    problems: list[str], flag: str, value: float, low: float, high: float = math.inf, low_open: bool = False
) -> None:
    """low <= value <= high (low < value with low_open); NaN and infinities never pass."""
    ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"in ({low}, {high}]" if low_open else f"in [{low}, {high}]"
        if high == math.inf:
            bound = f"{'above' if low_open else 'at least'} {low}"
        problems.append(f"{flag} must be a finite number {bound}, got {value}")


def check_output_path(problems: list[str], path: Path, flag: str) -> None:
    """The dataset can be written there: not a directory, and its nearest existing parent is a writable directory.
    Checked before the collection, so a bad path costs nothing."""
    path = Path(path)
    if path.is_dir():
        problems.append(f"{flag}: {path} is a directory; give the file to write, e.g. {path / 'dataset.hdf5'}")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        problems.append(f"{flag}: cannot create {path}: {parent} is not a directory")
    else:
        try:  # a probe, not os.access: root passes os.access even where writes fail (read-only mounts, /proc)
            tempfile.TemporaryFile(dir=parent).close()
        except OSError as e:
            problems.append(
                f"{flag}: cannot create {path}: {parent} is not writable ({e.strerror}); choose another {flag}"
            )


def check_overwrite(problems: list[str], path: Path, flag: str, overwrite: bool, inputs=()) -> None:
    """A dataset is written over an existing file only with --overwrite, and never over one of the script's inputs:
    a replaced dataset is lost, and a stopped run made from it can no longer resume (its fingerprint changed)."""
    path = Path(path)
    if not path.is_file():
        return
    same = [str(given) for given in inputs if Path(given).exists() and os.path.samefile(path, given)]
    if same:
        problems.append(
            f"{flag}: {path} is an input ({same[0]}); write elsewhere (--overwrite never replaces an input)"
        )
    elif not overwrite:
        problems.append(f"{path} exists; pass --overwrite to replace it, or write elsewhere ({flag})")


def check_box_env(env: gym.Env, env_id: str) -> tuple[int, int]:
    """obs/action dims of an env with a flat Box observation and a Box action space (what the datasets hold)."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
        raise UsageError(
            f"--env {env_id} has a {type(act_space).__name__} action space {act_space}; "
            "the datasets need continuous (Box) actions, e.g. --env Hopper-v4"
        )
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise UsageError(
            f"--env {env_id} has the observation space {obs_space}; the datasets need flat Box observations"
        )
    return obs_space.shape[0], act_space.shape[0]


def check_memory(steps: int, obs_dim: int, act_dim: int, info_columns: int = 0) -> None:
    """The preallocated buffer must fit in this machine's memory (numpy would allocate it lazily and be killed later)."""
    need = steps * (4 * (2 * obs_dim + act_dim + 1) + 2 + 8 * info_columns)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        raise UsageError(
            f"--steps {steps} needs {need / 2**30:.1f} GiB for the dataset, more than this machine's "
            f"{have / 2**30:.1f} GiB; collect fewer steps"
        )


def load_torch_file(path, what: str, fix: str):
    """torch.load with weights_only=True (tensors and plain values only: a crafted file cannot run code); a missing,
    truncated, corrupt or unsafe file is a ValueError naming the file and what is wrong."""
    import torch

    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror or e}); {fix}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "GLOBAL" in str(e):  # torch refused a class or function (its text advises weights_only=False)
            raise ValueError(
                f"{path}: the {what} holds objects other than tensors and plain values; "
                f"it is not loaded (unsafe); {fix}"
            ) from None
        raise ValueError(f"{path}: the {what} is truncated or corrupt (UnpicklingError); {fix}") from None
    except Exception as e:  # damage surfaces as RuntimeError, EOFError, KeyError, OSError, ...
        raise ValueError(f"{path}: the {what} is truncated or corrupt ({type(e).__name__}); {fix}") from None


# ---------------------------------------------------------------------------- command line
def run_cli(
    main: Callable,
    args_type: type,
    check_flags: Callable | None = None,
    on_interrupt: str = "interrupted; no dataset was written",
) -> None:
    """benchmarks/toolbox.py's command line: the flags parsed as the algorithm files parse theirs, then all checked
    before any work (one line per problem, exit 2); bad input ends in one line naming the problem, not a traceback
    (exit 2 for a flag whose value cannot work, else 1); Ctrl-C and SIGTERM end in the `on_interrupt` line (exit
    130, 143)."""
    # the *-v4 envs are the closest to D4RL's v2 data: Gymnasium's "out of date" warning would only add two lines
    warnings.filterwarnings("ignore", message=".*is out of date.*")

    def checked(args) -> int:
        problems = check_flags(args) if check_flags else []
        if problems:
            raise UsageError("\n".join(problems))
        main(args)
        return 0

    errors = (ValueError, gym.error.Error)  # a damaged file, an env that cannot be made
    sys.exit(toolbox.cli(checked, args_type, sys.argv[1:], "\n" + on_interrupt, sigterm=True, errors=errors))
