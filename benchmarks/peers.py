"""Run the authors' code on our data, with our evaluation: the peer rows of benchmarks/compare.py (docs/peers.md).

  kit-mopo        OfflineRL-Kit's MOPO (run_example/run_mopo.py), its "suggested hypers" for the dataset
  official-orpo   the official ORPO fork (run_example/run_orpo.py), its README's command and the paper's tuned values;
                  its optimistic rollout policy is never trained (its update is dead code upstream), and runs that way
  official-td3bc  the same repository's run_td3bc.py, the jump tasks only (its branch for each, as written)
  official-mopo   the same repository's run_mopo.py, the jump tasks only (its branches, the appendix's λp 1, h 5)
  official-cql    the same repository's run_cql.py (the Kit's CQL), the jump tasks only (its branches, its defaults)
  official-combo  the same repository's run_combo.py (the Kit's COMBO), halfcheetah-jump-hard only (its branch, its
                  defaults); halfcheetah-jump is refused: run_combo.py's branch for it can never be taken

    python benchmarks/peers.py --peer kit-mopo --dataset-path hopper-medium-v2.hdf5 --eval-env Hopper-v4 --seed 1 \\
        --epochs 1000 --rollout-batch-size 50000 --eval-episodes 10 --run-dir runs/peers/kit-mopo__hopper-medium__1

The peer's tree at --commit (pinned) is extracted from --source (a git URL or directory) into $TMPDIR/orpo-peers/ and
imported from there; `gym.make` answers with a stand-in serving the HDF5 file through `get_dataset()`, so the run
script's own data, buffers, fit, policies and trainer run unchanged. Only the evaluation is ours (algorithms/*.py's:
the deterministic policy, one episode per env reset with seed + 1000·epoch, D4RL's reference returns). On
halfcheetah-jump and halfcheetah-jump-hard the actions are handed over ×3 (their RescaleAction(-3, 3)) and mapped back
÷3 in our evaluation, which sums the task's reward (raw returns). Output in --run-dir, written atomically: config.json,
metrics.csv (row 0: the dynamics fit), summary.json, peer_log/. A run whose trainer is the Kit's MFPolicyTrainer or
MBPolicyTrainer (official-td3bc, official-mopo, official-cql, official-combo, kit-mopo) keeps checkpoint.pt after its
fit and after every epoch, and the same command goes on from it (see `resume`); official-orpo's trainer starts over.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Annotated, Optional
import ast
import builtins
import contextlib
import csv
import fcntl
import glob
import hashlib
import importlib.util
import io
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import types

import numpy as np

from toolbox import (UsageError, UserError, algorithm, device_name, file_fingerprint, git_revision, numerics_env,
                     replace_atomically, write_json)  # noqa: E402  # fmt: skip
import plumbing  # noqa: E402  (algorithms/, put on the path by toolbox: the algorithm files' reward and metrics)

ORPO_REPO = ("https://github.com/George-Chia/ORPO", "2f75a5009962175a517adc4a04c5c6459716630b")
MODES = ("aleatoric", "pairwise-diff", "ensemble_std", "ensemble_var")  # what the official EnsembleDynamics computes
PEERS = {  # settings: the run-script flags a dataset's settings set; uncertainty_modes: what its ensemble computes
    "kit-mopo": {"source": "https://github.com/yihaosun1124/OfflineRL-Kit", "commit":
                 "e3ce69793766d02660217d4dfc0af4693a5531bd", "script": "run_example/run_mopo.py",
                 "settings": ("--penalty-coef", "--rollout-length"), "uncertainty_modes": MODES[:3]},
    "official-orpo": {"source": ORPO_REPO[0], "commit": ORPO_REPO[1], "script": "run_example/run_orpo.py",
                      "settings": ("--penalty-coef", "--bonus-coef", "--rollout-length",
                                   "--rollout-length-rollout-policy"), "uncertainty_modes": MODES},
    # the same repository's baselines, on the jump tasks only (their branches for them: JUMP_SCRIPT_TASK)
    "official-td3bc": {"source": ORPO_REPO[0], "commit": ORPO_REPO[1], "script": "run_example/run_td3bc.py",
                       "settings": (), "uncertainty_modes": ()},  # no model
    "official-mopo": {"source": ORPO_REPO[0], "commit": ORPO_REPO[1], "script": "run_example/run_mopo.py",
                      "settings": ("--penalty-coef", "--rollout-length"), "uncertainty_modes": MODES},
    "official-cql": {"source": ORPO_REPO[0], "commit": ORPO_REPO[1], "script": "run_example/run_cql.py",
                     "settings": (), "uncertainty_modes": ()},  # no model
    # COMBO's rewards carry no penalty (run_combo.py L182-187 passes no penalty_coef: 0): its u is only recorded
    "official-combo": {"source": ORPO_REPO[0], "commit": ORPO_REPO[1], "script": "run_example/run_combo.py",
                       "settings": (), "uncertainty_modes": MODES},
}  # fmt: skip
# what each peer's run script trains with: the trainer class and the policy classes whose rollout (tag) / learn we record
TRAINERS = {
    "kit-mopo": ("MBPolicyTrainer", {"MOPOPolicy": ""}),
    "official-orpo": ("MBPolicyOOMITrainer", {"OOMITD3BCPolicy": "_pessimistic",
                                              "OptimisticRolloutPolicy": "_optimistic"}),
    "official-td3bc": ("MFPolicyTrainer", {"TD3BCPolicy": None}),  # no model, no rollouts
    "official-mopo": ("MBPolicyTrainer", {"MOPOPolicy": ""}),
    "official-cql": ("MFPolicyTrainer", {"CQLPolicy": None}),  # no model, no rollouts
    "official-combo": ("MBPolicyTrainer", {"COMBOPolicy": ""}),
}  # fmt: skip
# the peers whose TD3+BC update --one-action-unit hands the actor's units: the file of that update (offlinerlkit/policy/)
TD3BC_LEARN = {"official-orpo": "model_based/oomi_td3bc.py", "official-td3bc": "model_free/td3bc.py"}
DOMAINS = plumbing.DOMAINS  # D4RL's reference returns (d4rl/infos.py), as the algorithm files score with
KINDS = ("medium-replay", "medium-expert", "full-replay", "medium", "random", "expert")  # longest match first
# official-orpo: the paper's "Tuned hyper-parameters" table, as algorithms/orpo.py's PRESETS hold it (the LaTeX checks
# them): (penalty-coef λp, uncertainty type, rollout-length h^p, bonus-coef λo, rollout-length-rollout-policy h^o), u
# in the official code's names. The repository's README gives commands for two datasets only (halfcheetah-random,
# walker2d-medium-replay); both agree with the table, and both pass --real-ratio-rollout 0.05 --real-ratio-final 0.05
# --final-policy-rollout-ratio-final 0.45, which is used for every dataset. run_orpo.py parses --uncertainty_mode but
# never hands it to the ensemble, so the ensemble's default ("aleatoric") is what runs whatever the table says.
ORPO_TABLE = {
    task: (lp, "aleatoric" if u == "max_aleatoric" else u, h, lo, h_o)
    for task, (lp, u, h, lo, h_o) in algorithm("orpo").PRESETS.items()
    if task.endswith("-v2")
}
ORPO_SHARES = "--real-ratio-rollout 0.05 --real-ratio-final 0.05 --final-policy-rollout-ratio-final 0.45".split()
# The paper's generalisation tasks that the official repository's run scripts have branches for (docs/peers.md,
# "halfcheetah-jump-hard" and "halfcheetah-jump"). Each branch (jump-hard: run_orpo.py L102-113, run_td3bc.py L69-83,
# run_mopo.py L80-91, run_cql.py L89-103, run_combo.py L89-103; jump: run_orpo.py L90-101, run_td3bc.py L54-68,
# run_mopo.py L68-79, run_cql.py L63-77) wraps D4RL's env in RescaleAction(env, -3, 3) and sets args.action_scale =
# 3.0: their datasets hold the actions their collection scripts fed that wrapper (in [-3, 3]) and their policies
# output actor·3 (td3bc.py L83, sac.py L80). Our files hold HalfCheetah-v4's actions in [-1, 1]. OfflineRL-Kit's
# run_mopo.py has no such branch.
JUMP_TASK = "halfcheetah-jump-hard"
JUMP_EASY = "halfcheetah-jump"  # the whole replay buffer of an online SAC, the jump reward (no −3 term)
JUMP_TASKS = (JUMP_EASY, JUMP_TASK)
assert set(JUMP_TASKS) == set(plumbing.JUMP_TASKS)
# each task's reward: plumbing's task_reward for it
JUMP_REWARD_TASKS = {t: plumbing.Task(t, "HalfCheetah-v4", "halfcheetah", reward_fn=t) for t in JUMP_TASKS}
JUMP_HARD = JUMP_REWARD_TASKS[JUMP_TASK]
# the --task each run script takes its branch on. run_orpo.py tests `args.task == "halfcheetah-jump-hard"` (L102) and
# `args.task == "halfcheetah-jump"` (L90). run_td3bc.py (L69), run_mopo.py (L80), run_cql.py (L89) and run_combo.py
# (L89) test `args.task.split('-')[0] == "halfcheetahvelSafejump"` for jump-hard, and run_td3bc.py (L54), run_mopo.py
# (L68) and run_cql.py (L63) `args.task.split('-')[0] == "halfcheetahveljump"` for jump, so any suffix takes them (the
# name is used elsewhere only for log folders and get_termination_fn: run_mopo.py L157 meets termination_fns.py L132's
# 'halfcheetahveljump' case on jump, its 'halfcheetah' case on jump-hard); jump-hard's "-hard" is ours. run_combo.py has
# no branch a name can reach for jump (COMBO_JUMP_REFUSAL)
JUMP_SCRIPT_TASK = {
    JUMP_TASK: {"official-orpo": JUMP_TASK, "official-td3bc": "halfcheetahvelSafejump-hard",
                "official-mopo": "halfcheetahvelSafejump-hard", "official-cql": "halfcheetahvelSafejump-hard",
                "official-combo": "halfcheetahvelSafejump-hard"},
    JUMP_EASY: {"official-orpo": JUMP_EASY, "official-td3bc": "halfcheetahveljump",
                "official-mopo": "halfcheetahveljump", "official-cql": "halfcheetahveljump"},
}  # fmt: skip
JUMP_PEERS = {task: tuple(names) for task, names in JUMP_SCRIPT_TASK.items()}  # the peers each jump task runs with
JUMP_ONLY = ("official-td3bc", "official-mopo", "official-cql", "official-combo")  # the jump tasks only here
# run_combo.py's branch for the easier task tests `args.task.split('-')[0] == "halfcheetah-jump"` (L75): no piece of a
# split on '-' holds a '-', so no --task takes it and every halfcheetah-jump name falls into its D4RL branch (L115-116,
# gym.make(args.task)). Reaching it would take patching their test; peers.py refuses instead
COMBO_JUMP_REFUSAL = (
    "--peer official-combo cannot run halfcheetah-jump: run_combo.py's branch for it (L75) tests "
    "args.task.split('-')[0] == \"halfcheetah-jump\", which no task name satisfies (no piece of a split on '-' holds a "
    "'-'), so the task would fall into its D4RL branch (L115-116, gym.make(args.task)); it runs halfcheetah-jump-hard "
    "(its halfcheetahvelSafejump branch, L89)"
)
JUMP_ACTIONS = (-3.0, 3.0)  # RescaleAction(env, -3, 3): their action range; the env's own is [-1, 1]
# the README's command for each task, less --task/--dataset (README L70 for halfcheetah-jump, L76 for jump-hard: the same
# flags): λp 1, λo 0.1, h 5, h^o 5, shares 0.05 / 0.05 / 0 (u: none passed, so the ensemble's default aleatoric)
README_JUMP_FLAGS = {
    task: (
        "--penalty-coef 1 --bonus-coef 0.1 --rollout-length 5 --rollout-length-rollout-policy 5 "
        "--real-ratio-rollout 0.05 --real-ratio-final 0.05 --final-policy-rollout-ratio-final 0"
    ).split()
    for task in JUMP_TASKS
}
JUMP_FLAGS = README_JUMP_FLAGS[JUMP_TASK]
# official-mopo: the appendix's MOPO settings for the jump tasks ("For Halfcheetah-jump and Halfcheetah-jump-hard
# datasets, we adopt the hyper-parameters used in MOPO, setting λp = 1 and h^p = 5"); run_mopo.py's defaults are 2.5 and
# 5, and its other defaults stay (u aleatoric, real ratio 0.05, SAC 256×256). official-td3bc: none (run_td3bc.py's
# defaults, α 2.5, "for all D4RL-Gym tasks"); the README gives no command for either script. official-cql and
# official-combo: none either (the paper states no CQL or COMBO setting for the jump tasks): run_cql.py's defaults
# (cql-weight 5, its "suggested hypers ... for all D4RL-Gym tasks"), run_combo.py's (cql-weight 0.5, h 5, real ratio
# 0.5, rho_s mix)
JUMP_SCRIPT_FLAGS = {
    task: {peer: flags for peer, flags in (
        ("official-orpo", README_JUMP_FLAGS[task]), ("official-td3bc", []),
        ("official-mopo", ["--penalty-coef", "1", "--rollout-length", "5"]), ("official-cql", []),
        ("official-combo", []),
    ) if peer in JUMP_PEERS[task]}
    for task in JUMP_TASKS
}  # fmt: skip
# what a fresh start removes
OUTPUTS = ("config.json", "metrics.csv", "summary.json", "error.txt", "peer_log", "peer_dynamics", "checkpoint.pt")
# the Kit's trainers whose loops a run resumes: the state between two epochs is the policy's, the model buffer's, the
# learning-rate schedule's and the RNGs' (MBPolicyTrainer: if its rollouts fall on epoch starts, see `resumable`)
RESUMABLE = ("MFPolicyTrainer", "MBPolicyTrainer")
# flags of one invocation, not of the run: a resume (or a finished run's rerun) may change them
INVOCATION = ("stop_after_epochs", "threads", "cuda")


def cache_root() -> str:
    return os.path.join(os.environ.get("TMPDIR") or tempfile.gettempdir(), "orpo-peers")


# ---------- The command line
@dataclass
class Args:
    # The peer and the data
    peer: str
    """kit-mopo | official-orpo | official-td3bc | official-mopo | official-cql | official-combo (the last four: the
    jump tasks only; official-combo halfcheetah-jump-hard only)"""
    dataset_path: str
    """D4RL-layout HDF5 file"""
    run_dir: str
    """the run's folder: config.json, metrics.csv, summary.json and the peer's own logs"""
    source: Optional[str] = None
    """git URL or local git directory (default: the peer's GitHub URL)"""
    commit: Optional[str] = None
    """commit to run (default: the pinned one, see PEERS)"""
    eval_env: Optional[str] = None
    """Gymnasium id of the evaluation env (default: the file's env_id)"""
    task: Optional[str] = None
    """the D4RL name whose settings the peer takes, e.g. hopper-medium-v2, or halfcheetah-jump / halfcheetah-jump-hard
    (the official-*) (default: the file's reward_fn attr if it names a jump task, else the eval env's domain and the
    kind (medium, medium-replay, ...) in the file's name)"""
    peer_flags: Optional[str] = None
    """run-script flags that override the dataset's settings, e.g. '--penalty-coef 0.5 --rollout-length 5'; naming every
    flag a dataset sets (PEERS' settings) lets --task be one the peer has no settings for"""
    uncertainty_mode: Optional[str] = None
    """the ensemble's uncertainty_mode, e.g. ensemble_std (default: the constructor's, aleatoric: neither run script
    passes one)"""

    # The run
    seed: Annotated[int, "[0, 4294967296)"] = 1
    """seed of the run (the peer's own seeding, and the evaluation envs')"""
    epochs: Optional[Annotated[int, "[1, inf)"]] = None
    """policy epochs (default: the run script's own)"""
    steps_per_epoch: Annotated[int, "[1, inf)"] = 1000
    """gradient steps per epoch"""
    rollout_batch_size: Optional[Annotated[int, "[1, inf)"]] = None
    """model-rollout start states (default: 50000)"""
    eval_episodes: Optional[Annotated[int, "[1, inf)"]] = None
    """episodes per evaluation (default: the peer's 10)"""
    cuda: bool = True
    """use a GPU if there is one"""
    threads: Annotated[int, "[1, inf)"] = 1
    """torch.set_num_threads"""
    dynamics_max_epochs: Optional[Annotated[int, "[1, inf)"]] = None
    """cap the ensemble fit (NOT the peer's setting: its run scripts fit until early stopping); for timing only"""
    load_dynamics: Optional[str] = None
    """an ensemble fitted by algorithms/*.py (a run's dynamics.pt or a --dynamics-cache entry) for the peer to roll out
    in instead of fitting its own: written in its format to <run-dir>/peer_dynamics and given to its run script as
    --load-dynamics-path, which skips its fit (the sizes must be its ensemble's: 7 models, 5 elites, 4×200)"""
    stop_after_epochs: Optional[Annotated[int, "[1, inf)"]] = None
    """stop after this many policy epochs in this invocation, with a checkpoint; the same command goes on (a trainer
    that resumes only: not official-orpo's, nor a model-based one whose steps per epoch are no multiple of its
    --rollout-freq)"""
    one_action_unit: bool = False
    """official-orpo or official-td3bc on a jump task, a diagnostic and NOT the peer's code as written: its
    TD3+BC update gets the batch's actions ÷3, so that its critic, target actions, actor and BC term all work in the
    actor's [-1, 1] (docs/peers.md, "their TD3+BC mixes action units")"""


def parse_args(argv=None) -> Args:
    """The flags (the project's --help layout and one-line parse errors), checked."""
    argv, words = list(sys.argv[1:] if argv is None else argv), []
    for word in argv:  # `--peer-flags '--penalty-coef 2'`: a value that starts with -- is still the flag's value
        words[-1:] = [f"--peer-flags={word}"] if words[-1:] == ["--peer-flags"] else [*words[-1:], word]
    try:
        args = plumbing.parse_args(Args, words)
    except plumbing.UserError as e:
        raise UsageError(str(e)) from None  # exit 2, whatever plumbing's code
    if args.peer not in PEERS:
        raise UsageError(f"unknown --peer '{args.peer}'; use one of {', '.join(PEERS)}")
    plumbing.check_args(args)  # every number in its field's range
    if not PEERS[args.peer]["uncertainty_modes"]:  # a model-free peer: the model's flags have nothing to act on
        for name in ("rollout_batch_size", "load_dynamics", "dynamics_max_epochs", "uncertainty_mode"):
            if getattr(args, name) is not None:
                flag = f"--{name.replace('_', '-')}"
                raise UsageError(f"{flag}: {args.peer} ({PEERS[args.peer]['script']}) has no model; drop it")
    modes = PEERS[args.peer]["uncertainty_modes"]
    if args.uncertainty_mode is not None and args.uncertainty_mode not in modes:
        raise UsageError(f"--uncertainty-mode {args.uncertainty_mode}: {args.peer}'s ensemble has {', '.join(modes)}")
    try:
        args.peer_flags = shlex.split(args.peer_flags or "")
    except ValueError as e:
        raise UsageError(f"--peer-flags: {e}") from None
    if args.load_dynamics is not None:
        if args.dynamics_max_epochs is not None:
            raise UsageError("--load-dynamics skips the peer's fit, so --dynamics-max-epochs caps nothing: pass one")
        if not os.path.isfile(args.load_dynamics):
            raise UsageError(f"--load-dynamics {args.load_dynamics}: no such file; pass a run's dynamics.pt")
        args.load_dynamics = os.path.abspath(args.load_dynamics)
    if args.one_action_unit and args.peer not in TD3BC_LEARN:
        raise UsageError(f"--one-action-unit changes a TD3+BC update (official-orpo's, official-td3bc's); {args.peer} "
                         "has none: drop it")  # fmt: skip
    args.source = args.source or PEERS[args.peer]["source"]
    args.commit = args.commit or PEERS[args.peer]["commit"]
    return args


# ---------- The peer's source: a git URL or directory -> its tree at the commit, extracted once into $TMPDIR/orpo-peers/
def git(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    return subprocess.run(["git", *args], capture_output=True, timeout=timeout, env=env)


def git_dir_of(source: str) -> str:
    """A local git directory for --source: the directory itself (bare or work tree), or a cached clone of a URL."""
    if os.path.isdir(source):
        inner = os.path.join(source, ".git")
        git_dir = inner if os.path.exists(inner) else source
        if git("--git-dir", git_dir, "rev-parse", "--git-dir").returncode != 0:
            raise UsageError(f"--source {source} is a directory but not a git repository")
        return git_dir
    if not re.match(r"^([a-z][a-z0-9+.-]*://|git@|file:)", source):
        raise UsageError(f"--source {source} is neither a git directory nor a git URL")
    clone = os.path.join(cache_root(), "clones", hashlib.sha1(source.encode()).hexdigest()[:16])
    if not os.path.isdir(clone):
        os.makedirs(os.path.dirname(clone), exist_ok=True)
        partial = f"{clone}.partial{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            out = git("clone", "--bare", "--quiet", source, partial)
        except subprocess.TimeoutExpired:
            out = types.SimpleNamespace(returncode=1, stderr=b"timed out")
        if out.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            why = out.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"cannot fetch --source {source} ({why[-1] if why else 'git clone failed'})")
        with contextlib.suppress(OSError):  # another process may have made it meanwhile
            os.rename(partial, clone)
        shutil.rmtree(partial, ignore_errors=True)
    return clone


def extract(peer: str, source: str, commit: str) -> dict:
    """The peer's package and run script at `commit`, extracted into the cache (once per commit)."""
    git_dir = git_dir_of(source)
    out = git("--git-dir", git_dir, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if out.returncode != 0 and not os.path.isdir(source):  # a cached clone may predate the commit
        git("--git-dir", git_dir, "fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*")
        out = git("--git-dir", git_dir, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if out.returncode != 0:
        raise UsageError(f"--commit {commit} is not in --source {source}")
    sha = out.stdout.decode().strip()
    root = os.path.join(cache_root(), f"{peer}-{sha}")
    paths = ["offlinerlkit", PEERS[peer]["script"]]
    if not os.path.isfile(os.path.join(root, ".extracted")):
        out = git("--git-dir", git_dir, "archive", "--format=tar", sha, "--", *paths)
        if out.returncode != 0:
            why = out.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"--source {source} at {sha[:12]} lacks {', '.join(paths)} ({why[-1] if why else ''})")
        partial = f"{root}.partial{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:  # Python 3.11.4+: no link or path outside it
            tar.extractall(partial, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        open(os.path.join(partial, ".extracted"), "w").close()
        with contextlib.suppress(OSError):
            os.rename(partial, root)
        shutil.rmtree(partial, ignore_errors=True)
    return {"root": root, "commit": sha, "git_dir": git_dir, "extracted": paths}


# ---------- Stubs: what the run scripts import but this environment does not have (or must not use)
def install_stubs(make_env) -> list[str]:
    """`gym` and `d4rl` (the stand-in env replaces D4RL's); tensorboard is a dependency, the peers' Logger uses it."""
    installed = []
    gym = types.ModuleType("gym")
    gym.__doc__ = "peers.py stub: make() answers with the stand-in dataset env; the rest is for type hints"

    class Env:
        pass

    class Wrapper(Env):
        def __init__(self, env):
            self.env = env

        def __getattr__(self, name):  # as gym's Wrapper: public attributes come from the wrapped env
            if name == "env" or name.startswith("_"):
                raise AttributeError(name)
            return getattr(self.env, name)

    class RescaleAction(Wrapper):
        """gym's RescaleAction (the run scripts' jump branches wrap the stand-in in it): action_space [low, high]; never
        stepped, but `action()` is gym's map, the one our evaluation applies (to_env_action)."""

        def __init__(self, env, min_action, max_action):
            import gymnasium

            super().__init__(env)
            self.min_action, self.max_action = float(min_action), float(max_action)
            space = env.action_space
            self.action_space = gymnasium.spaces.Box(min_action, max_action, shape=space.shape, dtype=space.dtype)

        def action(self, action):
            space = self.env.action_space
            return to_env_action(action, (self.min_action, self.max_action), (space.low, space.high))

    gym.Env, gym.Wrapper, gym.make = Env, Wrapper, make_env
    gym.wrappers = types.ModuleType("gym.wrappers")
    gym.wrappers.RescaleAction = RescaleAction
    gym.spaces = types.ModuleType("gym.spaces")
    gym.spaces.Space = type("Space", (), {})
    gym.envs = types.ModuleType("gym.envs")
    gym.envs.mujoco = types.ModuleType("gym.envs.mujoco")
    gym.envs.mujoco.mujoco_env = types.ModuleType("gym.envs.mujoco.mujoco_env")
    gym.envs.mujoco.mujoco_env.MujocoEnv = type("MujocoEnv", (Env,), {})
    for name in [n for n in sys.modules if n == "gym" or n.startswith("gym.")]:
        del sys.modules[name]
    for mod in (gym, gym.wrappers, gym.spaces, gym.envs, gym.envs.mujoco, gym.envs.mujoco.mujoco_env):
        sys.modules[mod.__name__] = mod
    installed.append(
        "gym: a module whose make(task) returns the stand-in env (the HDF5 file through get_dataset(), the Gymnasium "
        "env's spaces, D4RL's reference returns, no stepping); Env, Wrapper (forwarding attributes to the wrapped env, "
        "as gym's), wrappers.RescaleAction (its action_space only: the run scripts' jump branches), "
        "spaces.Space and envs.mujoco.mujoco_env.MujocoEnv exist only for the peer's type hints and base classes"
    )
    sys.modules["d4rl"] = types.ModuleType("d4rl")
    installed.append("d4rl: an empty module (the run scripts import it only to register D4RL's gym envs)")
    return installed


# ---------- Data, task and settings
def read_dataset(path: str) -> tuple[dict, dict]:
    """The file's arrays as D4RL's get_dataset() gives them (rewards/terminals/timeouts 1-D), checked as the algorithm
    files check their data (plumbing.load_transitions: keys, shapes, finite rows, 0/1 flags), and its attrs."""
    import h5py

    if not os.path.isfile(path):
        raise UsageError(f"--dataset-path {path} does not exist")
    try:
        plumbing.load_transitions(path)
    except UserError as e:
        raise UsageError(str(e)) from None  # exit 2: bad input
    with h5py.File(path, "r") as f:
        data = {k: np.asarray(f[k][()]) for k in ("observations", "actions", "rewards", "next_observations",
                                                   "terminals", "timeouts")}  # fmt: skip
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    flat = ("rewards", "terminals", "timeouts")
    return {k: v[:, 0] if v.ndim == 2 and k in flat else v for k, v in data.items()}, attrs


def infer_task(args: argparse.Namespace, attrs: dict) -> tuple[str, str, tuple | None]:
    """(task name, Gymnasium eval env id, reference returns) from --task / --eval-env / the file: a D4RL name with D4RL's
    reference returns, or a jump task (halfcheetah-jump, halfcheetah-jump-hard) with none (its score is the raw
    return)."""
    eval_env = args.eval_env or attrs.get("env_id")
    if not eval_env:
        raise UsageError(f"{args.dataset_path} names no evaluation env (attr env_id); pass --eval-env, e.g. Hopper-v4")
    domain = next((d for d, (gid, _, _) in DOMAINS.items() if eval_env.split("-")[0] == gid.split("-")[0]), None)
    if domain is None:
        raise UsageError(f"--eval-env {eval_env}: the peers run MuJoCo Hopper, HalfCheetah or Walker2d only")
    reward_fn = attrs.get("reward_fn")
    if args.peer == "official-combo" and JUMP_EASY in (args.task, None if args.task else reward_fn):
        raise UsageError(COMBO_JUMP_REFUSAL)
    named = args.task or reward_fn  # --task, else the file's rewards
    jump = named if named in JUMP_TASKS else None
    if jump:
        if args.peer not in JUMP_PEERS[jump]:
            raise UsageError(
                f"{jump} runs with --peer {', '.join(JUMP_PEERS[jump])} only (the official run scripts have a branch "
                f"for it); {args.peer}'s run script has none"
            )
        if domain != "halfcheetah":
            raise UsageError(f"--task {jump} is a HalfCheetah task, but --eval-env is {eval_env}")
        if reward_fn not in (None, jump):
            raise UsageError(
                f"{args.dataset_path} holds the rewards of '{reward_fn}' (attr reward_fn), not {jump}'s; make the "
                f"file with: python datasets/halfcheetah_jump.py --task {jump}"
            )
        return jump, eval_env, None
    if args.peer in JUMP_ONLY:  # their branches for the D4RL names are not the paper's rows here: not run
        raise UsageError(
            f"--peer {args.peer} runs {' and '.join(jump_tasks_of(args.peer))} only (a file made by "
            f"datasets/halfcheetah_jump.py --task TASK, or --task TASK); for D4RL datasets use kit-mopo or official-orpo"
        )
    if reward_fn not in (None, "env"):  # another task's rewards: scored with the env's reward they would mislead
        raise UsageError(
            f"{args.dataset_path} holds the rewards of '{reward_fn}' (attr reward_fn); peers.py runs the env's own "
            f"reward (D4RL names) or --task {' / '.join(JUMP_TASKS)}"
        )
    task = d4rl_task(args.task, domain, args.dataset_path, f"but --eval-env is {eval_env}")
    return task, eval_env, DOMAINS[domain][1:]


def jump_tasks_of(peer: str) -> list[str]:
    """The jump tasks a peer's run script has a reachable branch for."""
    return [task for task in JUMP_TASKS if peer in JUMP_PEERS[task]]


def d4rl_task(task: str | None, domain: str, path: str, why: str) -> str:
    """--task as a D4RL name (...-v2), or the domain and the kind (medium, medium-replay, ...) in the file's name."""
    if task:
        full = task if task.endswith("-v2") else f"{task}-v2"
        if not full.startswith(f"{domain}-"):
            raise UsageError(f"--task {task} is not a {domain} dataset, {why}")
        return full
    name = os.path.splitext(os.path.basename(path))[0]
    kind = next((k for k in KINDS if k in name.lower().replace("_", "-")), None)
    if kind is None:
        raise UsageError(f"cannot tell the kind (random, medium, ...) of {name!r}: pass --task {domain}-medium-v2")
    return f"{domain}-{kind}-v2"


def script_args(root: str, script: str, argv: list[str]) -> argparse.Namespace:
    """The run script's own get_args(), taken from its source and run on `argv` (its defaults plus our command)."""
    path = os.path.join(root, script)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_args")
    namespace = {"argparse": argparse, "np": np, "torch": __import__("torch")}
    exec(compile(ast.Module(body=[func], type_ignores=[]), path, "exec"), namespace)
    saved, err = sys.argv, io.StringIO()
    try:
        sys.argv = [path, *argv]
        with contextlib.redirect_stderr(err):  # argparse's usage block: one line is ours to print
            return namespace["get_args"]()
    except SystemExit:
        why = err.getvalue().strip().splitlines()
        raise UsageError(f"{script} rejected the command {' '.join(argv)} ({why[-1] if why else 'exit'})") from None
    finally:
        sys.argv = saved


def dataset_flags(peer: str, root: str, task: str, dataset_path: str | None = None) -> list[str]:
    """The run script's flags for `task`: the peer's own settings for the dataset (a jump task: the name its run
    script's branch takes and official-orpo's README command for the task, with --dataset dataset_path when given)."""
    if task in JUMP_TASKS:
        if peer == "official-combo" and task == JUMP_EASY:
            raise UsageError(COMBO_JUMP_REFUSAL)
        if peer not in JUMP_PEERS[task]:
            raise UsageError(f"{task} runs with --peer {', '.join(JUMP_PEERS[task])} only; not with {peer}")
        dataset = ["--dataset", dataset_path] if dataset_path else []
        return ["--task", JUMP_SCRIPT_TASK[task][peer], *dataset, *JUMP_SCRIPT_FLAGS[task][peer]]
    if peer in JUMP_ONLY:
        raise UsageError(f"{peer} runs {' and '.join(jump_tasks_of(peer))} only here; not {task}")
    if peer == "kit-mopo":
        with open(os.path.join(root, PEERS[peer]["script"])) as f:
            text = f.read()
        suggested = {
            m[0]: (m[1], m[2]) for m in re.findall(r"(\S+-v2): rollout-length=(\d+), penalty-coef=([\d.]+)", text)
        }
        if task not in suggested:
            raise UsageError(f"kit-mopo's run_mopo.py suggests settings for {', '.join(suggested)}; not for {task}")
        h, penalty = suggested[task]
        return ["--task", task, "--rollout-length", h, "--penalty-coef", penalty]
    if task not in ORPO_TABLE:
        raise UsageError(
            f"official-orpo has the paper's settings for {', '.join(ORPO_TABLE)}, {JUMP_EASY} and {JUMP_TASK}; not "
            f"for {task}"
        )
    penalty, u, h, bonus, h_o = ORPO_TABLE[task]
    command = ["--task", task, "--penalty-coef", str(penalty), "--bonus-coef", str(bonus)]
    command += ["--uncertainty_mode", u, *ORPO_SHARES, "--rollout-length", str(h)]
    return command + ["--rollout-length-rollout-policy", str(h_o)]


def peer_command(peer: str, root: str, task: str, args: argparse.Namespace, device: str) -> list[str]:
    """The run script's command line for `task`: the peer's settings for the dataset (overridden by --peer-flags), our
    seed/epochs/sizes/device."""
    try:
        command = dataset_flags(peer, root, task, os.path.abspath(args.dataset_path))
    except UsageError as e:
        given = {f.split("=")[0] for f in args.peer_flags}
        missing = [f for f in PEERS[peer]["settings"] if f not in given]
        if peer in JUMP_ONLY:
            raise
        if missing:  # the run script's defaults are no dataset's settings
            raise UsageError(f"{e} (or give {' '.join(missing)} in --peer-flags)") from None
        command = ["--task", task] + (ORPO_SHARES if peer == "official-orpo" else [])
    command += args.peer_flags  # after the dataset's: the run script's parser keeps an option's last value
    command += ["--seed", str(args.seed), "--step-per-epoch", str(args.steps_per_epoch), "--device", device]
    for flag, value in (
        ("--epoch", args.epochs),
        ("--rollout-batch-size", args.rollout_batch_size),
        ("--eval_episodes", args.eval_episodes),
    ):
        if value is not None:
            command += [flag, str(value)]
    return command


# ---------- --load-dynamics: an ensemble of ours, in the peer's format
def save_npy(path: str, value: np.ndarray) -> None:
    with open(path, "wb") as f:  # np.save(name) would add .npy to the temporary name
        np.save(f, value)


def peer_dynamics(path: str, out_dir: str, peer_args: argparse.Namespace, obs_dim: int, scale: float) -> dict:
    """Write `path`'s ensemble (algorithms/*.py's EnsembleDynamics) as the peers' EnsembleDynamics.load reads it:
    dynamics.pth (EnsembleDynamicsModel's state dict) and the StandardScaler's mu.npy and std.npy. Both models compute
    the same function: inputs standardised by a mean and std, Swish (= SiLU) hidden layers as batched [E, in, out]
    matmuls, the mean and log-variance of (Δs, r) under the same soft bounds, a random elite per row. Where the peer's
    actions are the env's ×scale (the jump task), the scaler's action entries are ours ×scale: (scale·a − scale·m) /
    (scale·s) = (a − m) / s. Returns what config.json records of it (its fit's metrics among them)."""
    import torch

    what = "ensemble (a run's dynamics.pt or a --dynamics-cache entry)"
    saved = plumbing.load(path, what)
    state = saved.get("model") if isinstance(saved, dict) else None
    hidden, n_models = list(peer_args.dynamics_hidden_dims), peer_args.n_ensemble
    try:
        layers = [state[f"layers.{i}.weight"] for i in range(len([k for k in state if k.endswith(".bias")]))]
        dims, models = [layers[0].shape[1]] + [w.shape[2] for w in layers[:-1]], layers[0].shape[0]
        elites, mean, std = state["elites"], state["in_mean"], state["in_std"]
        fits = layers[-1].shape[2] == 2 * (obs_dim + 1) and len(mean) == dims[0] and state["max_logvar"].numel() > 0
    except (KeyError, TypeError, AttributeError, IndexError):
        raise UsageError(
            f"--load-dynamics {path} holds no ensemble of algorithms/*.py; pass a run's dynamics.pt"
        ) from None
    if not fits or dims[1:] != hidden or models != n_models or len(elites) != peer_args.n_elites:
        raise UsageError(
            f"--load-dynamics {path}: {models} models ({len(elites)} elites) of hidden sizes {dims[1:]} (input "
            f"{dims[0]}), but the peer builds {n_models} ({peer_args.n_elites} elites) of {hidden} for this data; "
            "load an ensemble of the peer's sizes, or give it these in --peer-flags (--n-ensemble, --n-elites, "
            "--dynamics-hidden-dims)"
        )
    theirs = {}
    for i, w in enumerate(layers):
        name = f"backbones.{i}" if i < len(layers) - 1 else "output_layer"
        for k, v in (("weight", w), ("bias", state[f"layers.{i}.bias"])):
            theirs[f"{name}.{k}"] = theirs[f"{name}.saved_{k}"] = v.float().clone()  # saved_*: load_save's copy
    theirs |= {k: state[k].reshape(-1).float().clone() for k in ("max_logvar", "min_logvar")}
    theirs["elites"] = elites.long().clone()
    mu, sigma = (v.float().numpy().reshape(1, -1).copy() for v in (mean, std))
    mu[:, obs_dim:] *= scale
    sigma[:, obs_dim:] *= scale
    os.makedirs(out_dir, exist_ok=True)
    replace_atomically(os.path.join(out_dir, "dynamics.pth"), lambda tmp: torch.save(theirs, tmp))
    for name, value in (("mu.npy", mu), ("std.npy", sigma)):
        replace_atomically(os.path.join(out_dir, name), lambda tmp, v=value: save_npy(tmp, v))
    metrics = {k: float(v) for k, v in saved.get("metrics", {}).items() if isinstance(v, (int, float))}
    origin = plumbing.read_json(os.path.join(os.path.dirname(path), "config.json")).get("_dynamics")  # a run's file
    return {"path": path, "fingerprint": file_fingerprint(path), "metrics": metrics, "format_dir": out_dir,
            "fitted_by": saved.get("fitted_by"), "run_dynamics": origin, "action_scale": scale}  # fmt: skip


def fold_obs_normalization(state: dict, mu, std, obs_mean, obs_std) -> tuple[dict, np.ndarray, np.ndarray]:
    """Where the peer standardises its buffer's observations before its ensemble sees them (run_orpo.py L127-130 and
    L240-242: every task but hopper and walker2d; ReplayBuffer.normalize_obs, σ = std + 1e-3), its own fit maps
    s_n = (s − m)/σ to (Δs/σ, r), and its rollouts hand it s_n. A converted ensemble of ours maps raw s, so it is folded
    into those units once the peer has normalised: the scaler's obs entries become ((μ − m)/σ, σ_in/σ), the mean head's
    Δs columns are divided by σ, and the log-variance head's Δs entries (its bias and both soft bounds, which commute
    with a shift) move by −2·log σ. Exact: the folded model is ours written in the peer's units."""
    import torch

    m, sigma = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (obs_mean, obs_std))
    n = len(m)
    mu, std = np.array(mu, dtype=np.float32, copy=True), np.array(std, dtype=np.float32, copy=True)
    mu[:, :n] = (mu[:, :n] - m) / sigma
    std[:, :n] = std[:, :n] / sigma
    state = dict(state)
    for key, value in state.items():
        value = value.clone()
        scale, shift = (torch.as_tensor(x, dtype=value.dtype, device=value.device) for x in (sigma, -2 * np.log(sigma)))
        if key.startswith("output_layer.") and key.endswith("weight"):  # weight, saved_weight: [E, in, 2(n + 1)]
            value[..., :n] /= scale
        elif key.startswith("output_layer.") and key.endswith("bias"):
            value[..., :n] /= scale
            value[..., n + 1 : 2 * n + 1] += shift
        elif key in ("max_logvar", "min_logvar"):
            value[..., :n] += shift
        state[key] = value
    return state, mu, std


# ---------- Evaluation: the protocol of algorithms/*.py (reset seed + 1000·epoch, deterministic actions)
def make_eval_envs(env_id: str, n: int):
    return plumbing.make_eval_envs(plumbing.Task("", env_id, ""), n)


def evaluate(act, envs, seed: int, reward_fn=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """plumbing.evaluate's loop, with the episode lengths the peer's logs record: (returns, lengths, first obs);
    reward_fn(next_obs, action, info), if given, replaces the env's reward. Not plumbing.evaluate itself: that casts
    the observations to float32 first, while the peers' own _evaluate hands select_action the env's float64 ones (their
    scaler standardises them in float64: mb_policy_trainer.py L170, td3bc.py L77)."""
    obs, _ = envs.reset(seed=seed)
    first_obs, n = obs.copy(), envs.num_envs
    returns, lengths, running = np.zeros(n), np.zeros(n, dtype=int), np.ones(n, dtype=bool)
    while running.any():
        action = act(obs)
        obs, reward, terminated, truncated, info = envs.step(action)
        returns += running * (reward if reward_fn is None else reward_fn(obs, action, info))
        lengths += running
        running &= ~(terminated | truncated)
    return returns, lengths, first_obs


def jump_hard_reward(next_obs: np.ndarray, action: np.ndarray, info: dict) -> np.ndarray:
    """plumbing's task_reward, a in the env's [-1, 1]: run_orpo.py's HalfcheetahSafejumpRewardWrapper (wrappedEnv.py
    L16-27) is the same reward in D4RL's env (its reward_ctrl: −0.1·‖a‖² of the action after RescaleAction)."""
    return plumbing.task_reward(JUMP_HARD, next_obs, action, None, info)


def jump_reward(next_obs: np.ndarray, action: np.ndarray, info: dict) -> np.ndarray:
    """halfcheetah-jump's: plumbing's task_reward, a in the env's [-1, 1], no −3 term; the jump branches'
    HalfcheetahjumpRewardWrapper (wrappedEnv.py L5-14) in D4RL's env after RescaleAction."""
    return plumbing.task_reward(JUMP_REWARD_TASKS[JUMP_EASY], next_obs, action, None, info)


JUMP_REWARDS = {JUMP_EASY: jump_reward, JUMP_TASK: jump_hard_reward}  # the reward our evaluation sums, by task


def to_env_action(action: np.ndarray, peer_range: tuple, env_range: tuple) -> np.ndarray:
    """gym 0.22's RescaleAction.action: low + (high − low)·(a − min)/(max − min), clipped; on HalfCheetah a / 3."""
    (lo, hi), (low, high) = peer_range, env_range
    return np.clip(low + (high - low) * ((action - lo) / (hi - lo)), low, high)


def deterministic_actions(policy):  # the peer's evaluation action, on a batch of observations
    return lambda obs: np.asarray(policy.select_action(obs, deterministic=True), dtype=np.float32)


def eval_policy(policy, task: str):
    """(act, reward_fn) for evaluate(): the peer's deterministic action in the env's units, the task's reward (None: the
    env's). On the jump tasks select_action returns actor·3 in [-3, 3] (td3bc.py L83, run_orpo.py L100 / L112), which
    their eval env's RescaleAction(-3, 3) maps to the env's [-1, 1]: so does ours."""
    act = deterministic_actions(policy)
    if task not in JUMP_TASKS:
        return act, None
    scale = getattr(policy, "action_scale", None)
    if scale != JUMP_ACTIONS[1]:  # what the conversions in both directions assume
        raise RuntimeError(f"the peer's policy has action_scale {scale}; peers.py assumes {JUMP_ACTIONS[1]} on {task}")
    env_range = (-1.0, 1.0)  # HalfCheetah-v4's (and D4RL's) action space
    return (lambda obs: to_env_action(act(obs), JUMP_ACTIONS, env_range).astype(np.float32)), JUMP_REWARDS[task]


def export_policy(policy, task: str, obs: np.ndarray, path: str) -> str:
    """The peer's final policy as our policy.pt, written by plumbing.export_policy where its actor is an MLP this file
    format holds: the official TD3+BC Actor (Linear-ReLU layers, max·tanh: deterministic_mlp) or the Kit's ActorProb
    with an unbounded mean and a state-dependent σ (SAC's, CQL's, COMBO's, MOPO's: tanh_gaussian_mlp, acting
    tanh(mean)), on its scaler's standardised observations; kept only if on `obs` its actions equal the peer's
    evaluation actions (eval_policy). Returns what was done, in words."""
    import torch

    actor, scaler = getattr(policy, "actor", None), getattr(policy, "scaler", None)
    is_module = isinstance(actor, torch.nn.Module)
    linears = [m for m in actor.modules() if isinstance(m, torch.nn.Linear)] if is_module else []
    dist = getattr(actor, "dist_net", None)
    # the peer's action in the env's units is its actor's × action_scale, ÷ 3 on the jump tasks (eval_policy)
    gain = float(getattr(policy, "action_scale", 1.0)) / (JUMP_ACTIONS[1] if task in JUMP_TASKS else 1.0)
    if isinstance(dist, torch.nn.Module) and getattr(dist, "_unbounded", False) and getattr(dist, "_c_sigma", False):
        if (dist._sigma_min, dist._sigma_max) != (-5.0, 2.0):  # our file's sampler clamps log σ to [−5, 2]
            return f"no policy.pt: the peer's log σ is clamped to [{dist._sigma_min}, {dist._sigma_max}], not [-5, 2]"
        body = [m for m in actor.backbone.modules() if isinstance(m, torch.nn.Linear)]
        heads = torch.nn.Linear(int(dist.mu.in_features), 2 * int(dist.mu.out_features))  # [mean, log σ]
        with torch.no_grad():
            heads.weight.copy_(torch.cat([dist.mu.weight, dist.sigma.weight]))
            heads.bias.copy_(torch.cat([dist.mu.bias, dist.sigma.bias]))
        kind, max_action, linears = "tanh_gaussian_mlp", gain, body + [heads]
    elif linears and hasattr(actor, "_max"):
        kind, max_action = "deterministic_mlp", float(actor._max) * gain
    else:
        return "no policy.pt: the peer's actor is neither a deterministic MLP nor the Kit's ActorProb"
    layers = [torch.nn.Linear(int(m.in_features), int(m.out_features)) for m in linears]  # theirs: numpy-int sizes
    for m, new in zip(linears, layers):
        new.load_state_dict(m.state_dict())
    obs_dim = layers[0].in_features
    mean, std = (np.zeros(obs_dim), np.ones(obs_dim)) if scaler is None else (scaler.mu, scaler.std)
    row = lambda v: torch.as_tensor(np.reshape(v, -1), dtype=torch.float32)
    net = torch.nn.Sequential(*[x for new in layers for x in (new, torch.nn.ReLU())][:-1])  # plumbing's Actor.net
    actor_like = types.SimpleNamespace(net=net, kind=kind, max_action=max_action,
                                       obs_norm=types.SimpleNamespace(mean=row(mean), std=row(std)))  # fmt: skip
    tmp = path + ".check.pt"
    plumbing.export_policy(actor_like, tmp)
    try:
        act_dim = layers[-1].out_features // (2 if kind == "tanh_gaussian_mlp" else 1)
        ours = algorithm("collect", "datasets").load_policy(tmp, obs_dim, act_dim)(obs)
        theirs = eval_policy(policy, task)[0](obs)
        gap = float(np.abs(np.asarray(ours, dtype=np.float64) - theirs).max())
        if not gap < 1e-4:
            return f"no policy.pt: its actions differ from the peer's by up to {gap:.2g} on {len(obs)} states"
        os.replace(tmp, path)
        return f"policy.pt written (its actions equal the peer's on {len(obs)} states, within {gap:.1g}; {kind})"
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def eval_metrics(returns: np.ndarray, ref: tuple[float, float] | None) -> dict[str, float]:
    """plumbing.evaluate's: the return, and D4RL's normalised score per episode where there are reference returns (not
    on the jump tasks), 100·(R − R_random)/(R_expert − R_random)."""
    metrics = {"eval/return": float(returns.mean()), "eval/return_std": float(returns.std())}
    if ref:
        score = 100.0 * (returns - ref[0]) / (ref[1] - ref[0])
        metrics |= {"eval/normalized_score": float(score.mean()), "eval/normalized_score_std": float(score.std())}
    return metrics


class StandInEnv:
    """gym.make(task) in the run script: the HDF5 file through get_dataset(), the eval env's spaces, D4RL's normalised
    score; never stepped (the evaluation is ours)."""

    _max_episode_steps = 1000

    def __init__(self, task: str, raw: dict, observation_space, action_space, ref: tuple[float, float]):
        self.task, self.raw, self.ref = task, raw, ref
        self.observation_space, self.action_space = observation_space, action_space
        self.seeded = None

    def get_dataset(self, **kwargs) -> dict:
        return dict(self.raw)

    def seed(self, seed):
        self.seeded = seed  # the script seeds its eval env; ours are seeded per evaluation

    def get_normalized_score(self, score):
        if self.ref is None:  # run_orpo.py's trainer never asks on the jump tasks (is_generalization_env)
            raise RuntimeError(f"{self.task} has no reference returns")
        return (score - self.ref[0]) / (self.ref[1] - self.ref[0])

    def reset(self, *args, **kwargs):
        raise RuntimeError("peers.py replaces the peer's evaluation; the stand-in env cannot be stepped")

    step = reset


# ---------- Resume: the state of the peer's training between two epochs, in a file torch.load(weights_only=True) reads
def training_state(obj) -> dict:
    """What training changes in a peer's policy or buffer: a module's state_dict, each optimiser's state, and its other
    tensors (the Kit's log α is a bare tensor that its optimiser holds), arrays (a buffer's filled rows) and numbers."""
    import torch

    state = {"modules": obj.state_dict() if isinstance(obj, torch.nn.Module) else {}, "optims": {}, "values": {}}
    for k, v in vars(obj).items():
        if isinstance(v, torch.optim.Optimizer):
            state["optims"][k] = v.state_dict()
        elif isinstance(v, torch.Tensor):
            state["values"][k] = v.detach().cpu().clone()
        elif isinstance(v, np.ndarray):
            state["values"][k] = torch.from_numpy(v[: getattr(obj, "_size", len(v))].copy())
        elif isinstance(v, (bool, int, float)):
            state["values"][k] = v
    return state


def set_training_state(obj, state: dict) -> None:
    """The inverse of training_state, in place: an optimiser keeps the tensors it holds."""
    if state["modules"]:
        obj.load_state_dict(state["modules"])
    for k, v in state["optims"].items():
        getattr(obj, k).load_state_dict(v)
    for k, v in state["values"].items():
        old = getattr(obj, k)
        if isinstance(old, np.ndarray):
            old[: len(v)] = v.numpy()
        elif hasattr(old, "data"):  # a tensor
            old.data.copy_(v)
        else:
            setattr(obj, k, v)


def rng_state() -> dict:
    """plumbing's torch RNG states (CPU, CUDA), and numpy's global and Python's (the Kit draws from both), as tensors
    and numbers."""
    import torch

    np_state, py_state = np.random.get_state(), random.getstate()
    return plumbing.rng_state() | {"numpy": [torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
                                   "random": [py_state[0], list(py_state[1]), py_state[2]]}  # fmt: skip


def set_rng_state(rng: dict) -> None:
    plumbing.set_rng_state(rng)
    keys, *rest = rng["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), *rest))
    random.setstate((rng["random"][0], tuple(rng["random"][1]), rng["random"][2]))


def resumable(trainer) -> bool:
    """A trainer whose loop `resume` can start at a later epoch: the Kit's MF and MB trainers, the MB one when its
    rollouts fall on epoch starts (its step count restarts at 0 in a resumed invocation)."""
    name = type(trainer).__name__
    if name == "MBPolicyTrainer":  # and a model that its trainer never updates (no run script does)
        return trainer._step_per_epoch % trainer._rollout_freq == 0 and trainer._dynamics_update_freq == 0
    return name in RESUMABLE


def resume(trainer, state: dict, train):
    """The peer's own train() from the epoch after `state`'s: the policy, the model buffer, the learning-rate schedule
    and the RNGs as they were after that epoch, and its loop's `range(1, epochs + 1)` started there (the name read in
    its module), so its code runs unchanged from that epoch on."""
    set_training_state(trainer.policy, state["policy"])
    if state["fake_buffer"] is not None:
        set_training_state(trainer.fake_buffer, state["fake_buffer"])
    if state["lr_scheduler"] is not None:
        trainer.lr_scheduler.load_state_dict(state["lr_scheduler"])
    set_rng_state(state["rng"])
    module, epochs = sys.modules[type(trainer).__module__], (1, trainer._epoch + 1)
    module.range = lambda *a: builtins.range(state["epoch"] + 1, epochs[1]) if a == epochs else builtins.range(*a)
    try:
        return train()
    finally:
        del module.range


# ---------- Recording: metrics.csv from the peer's logger and wrapped calls (their results returned unchanged)
class Recorder:
    LOSSES = {"loss/actor": "losses/actor_loss", "loss/alpha": "losses/alpha_loss", "alpha": "losses/alpha"}

    def __init__(self, run_dir: str, ref: tuple[float, float], seed: int, batch: int):
        self.path, self.ref, self.seed, self.batch = os.path.join(run_dir, "metrics.csv"), ref, seed, batch
        self.rows, self.scores, self.epoch = [], [], 0
        self.tag = None  # the rollout running now: "" (MOPO), "_optimistic" (π^o) or "_pessimistic" (π^p)
        self.sums, self.dyn, self.eval_row = {}, {}, {}
        self.last_sample, self.epoch_start, self.rollout_seconds, self.steps = None, None, 0.0, 1000
        self.uncertainty_mode = None  # the ensemble's, once built
        self.task, self.action_scale = None, 1.0  # the peer's actions are the env's times action_scale (jump: 3)
        self.loaded = None  # --load-dynamics: row 0 is the loaded ensemble's fit (its metrics), as our runs log it
        self.policy = None  # the peer's policy at its last evaluation
        self.loaded_dynamics = self.obs_folded = None  # a loaded ensemble; whether the peer's obs scaling was folded in
        # resume: the checkpoint this invocation goes on from, the peer's own fit (kept in every checkpoint), its
        # trainer, the run's seconds before this invocation, --stop-after-epochs and the epochs of this invocation
        self.state = self.fitted = self.trainer = self.saved = None
        self.seconds_before, self.t0, self.stop_after, self.epochs_now = 0.0, time.time(), None, 0

    def go_on_from(self, state: dict) -> None:
        self.state, self.rows, self.scores, self.epoch = state, state["rows"], state["scores"], state["epoch"]
        self.fitted, self.seconds_before, self.saved = state["dynamics"], state["seconds"], state["epoch"]

    def seconds(self) -> float:
        return self.seconds_before + time.time() - self.t0

    def checkpoint(self, **parts) -> None:
        """checkpoint.pt: the epoch, the metrics rows, the peer's fit, the RNG states and `parts` (the trainer's)."""
        import torch

        state = {"epoch": self.epoch, "rows": self.rows, "scores": self.scores, "dynamics": self.fitted,
                 "seconds": self.seconds(), "rng": rng_state(), **parts}  # fmt: skip
        replace_atomically(os.path.join(os.path.dirname(self.path), "checkpoint.pt"), lambda t: torch.save(state, t))
        self.saved = self.epoch

    def going_on(self) -> str:
        """What the same command does next: go on from the last checkpoint, or start over."""
        if self.saved is None:  # stopped before its first checkpoint, or official-orpo's trainer (not resumable)
            return "the same command starts it over (no checkpoint to go on from)"
        return "the same command " + self.goes_on()

    def goes_on(self) -> str:
        return f"goes on from its checkpoint after epoch {self.saved}" + " (its fit)" * (self.saved == 0)

    def policy_epoch_done(self) -> None:
        """After an epoch's row: the trainer's state into checkpoint.pt (a resumable trainer); --stop-after-epochs."""
        t = self.trainer  # set before the first epoch (train_recorded)
        if resumable(t):
            fake = getattr(t, "fake_buffer", None)
            self.checkpoint(policy=training_state(t.policy), fake_buffer=fake and training_state(fake),
                            lr_scheduler=t.lr_scheduler.state_dict() if t.lr_scheduler else None)  # fmt: skip
            self.epoch_start = time.time()  # the next epoch's clock leaves the checkpoint out
        self.epochs_now += 1
        if self.epochs_now == self.stop_after and self.epoch < t._epoch:
            raise plumbing.Stop(0)  # not a signal: --stop-after-epochs, after the checkpoint

    def add(self, key: str, values) -> None:
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        s = self.sums.setdefault(key, [0.0, 0])
        s[0] += float(values.sum())
        s[1] += len(values)

    def log(self, epoch: int, metrics: dict) -> None:
        self.rows.append({"epoch": epoch, **metrics})
        fields = list(dict.fromkeys(k for row in self.rows for k in row))

        def write(tmp):
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(self.rows)

        replace_atomically(self.path, write)

    # the peer's dynamics fit
    def fit_done(self, seconds: float) -> None:
        row = {"dynamics/holdout_mse": self.dyn.get("holdout_mse"), "dynamics/epochs": self.dyn.get("epochs", 0)}
        row.update({"dynamics/train_loss": self.dyn.get("train_loss"), "dynamics/fit_seconds": seconds})
        self.log(0, row)
        self.epoch_start = time.time()

    def training_starts(self) -> None:
        if self.loaded is not None and not self.rows:
            keys = ("holdout_mse", "epochs", "train_nll", "fit_seconds")
            self.log(0, {f"dynamics/{k}": self.loaded.get(f"dynamics/{k}") for k in keys})
        self.epoch_start = time.time()

    # one policy epoch ends with the trainer's dumpkvs, after our evaluation
    def epoch_done(self, kvs: dict) -> None:
        row, learn = {}, {k[len("learn/") :]: t / c for k, (t, c) in self.sums.items() if k.startswith("learn/")}
        for k, v in self.LOSSES.items():
            if k in learn:
                row[v] = learn[k]
        if "loss/critic1" in learn and "loss/critic2" in learn:
            row["losses/critic_loss"] = learn["loss/critic1"] + learn["loss/critic2"]
        for key, (total, count) in self.sums.items():
            if key.startswith("rollout/"):
                row[key] = total if key.startswith("rollout/nonfinite_rows") else total / count
        row.update(self.eval_row)
        if self.rollout_seconds:
            row["charts/rollout_seconds"] = self.rollout_seconds
        row["charts/epoch_seconds"] = time.time() - self.epoch_start
        train_seconds = row["charts/epoch_seconds"] - row.get("charts/eval_seconds", 0.0)
        row["charts/SPS"] = self.steps / train_seconds if train_seconds > 0 else float("nan")
        for k, v in kvs.items():  # everything else the peer's logger averaged, under its own name
            if not k.startswith(("eval", "timestep")):
                row[f"peer/{k}"] = float(v)
        self.log(self.epoch, row)
        self.sums, self.eval_row, self.rollout_seconds = {}, {}, 0.0
        self.epoch_start = time.time()


def instrument(peer: str, rec: Recorder, envs, cap, uncertainty_mode: str | None, one_unit: bool = False) -> None:
    """Wrap the peer's classes (one peer per process): our evaluation replaces theirs; --uncertainty-mode sets the
    ensemble's; --one-action-unit divides the actions its TD3+BC update sees by action_scale; the rest only records."""
    from offlinerlkit.buffer import ReplayBuffer
    from offlinerlkit.dynamics import EnsembleDynamics
    from offlinerlkit import policy_trainer
    from offlinerlkit.utils.logger import Logger

    def _evaluate(self):
        t0 = time.time()
        rec.epoch += 1
        self.policy.eval()  # as the peer's own _evaluate does; its trainer calls policy.train() at each epoch start
        reset_seed = rec.seed + 1000 * rec.epoch
        act, reward_fn = eval_policy(self.policy, rec.task)
        rec.policy = self.policy  # the last one evaluated: the final policy, exported when the run finishes
        returns, lengths, _ = evaluate(act, envs, reset_seed, reward_fn)
        metrics = eval_metrics(returns, rec.ref)
        rec.scores.append(metrics.get("eval/normalized_score", metrics["eval/return"]))  # the raw return without ref
        metrics["eval/last10_score"] = float(np.mean(rec.scores[-10:]))
        metrics["eval/reset_seed"] = reset_seed
        metrics["charts/eval_seconds"] = time.time() - t0
        rec.eval_row = metrics
        return {"eval/episode_reward": list(returns), "eval/episode_length": list(lengths)}

    def _evaluate_dynamics(self):  # ORPO's second, model-based evaluation: a diagnostic, not run here
        return {f"eval_Dynamics/episode_{k}": [0.0] for k in ("reward", "length", "uncertainty")}

    trainer = getattr(policy_trainer, TRAINERS[peer][0])  # MB trainers of both packages, or official-td3bc's MF one
    trainer._evaluate = _evaluate
    trainer._evaluate_Dynamics = _evaluate_dynamics
    model_free = TRAINERS[peer][0] == "MFPolicyTrainer"

    dumpkvs = Logger.dumpkvs

    def dumpkvs_recorded(self, exclude=None):
        kvs = dict(self._name2val)
        if exclude is not None and "policy_training_progress" in exclude:  # a dynamics epoch
            rec.dyn["epochs"] = rec.dyn.get("epochs", 0) + 1
            rec.dyn["train_loss"] = float(kvs.get("loss/dynamics_train_loss", np.nan))
        elif (exclude is not None and "dynamics_training_progress" in exclude) or (exclude is None and model_free):
            rec.epoch_done(kvs)  # a policy epoch (MFPolicyTrainer.train dumps all of it: run_td3bc.py has no model)
            rec.policy_epoch_done()
        return dumpkvs(self, exclude)

    Logger.dumpkvs = dumpkvs_recorded

    train, select_elites, step = EnsembleDynamics.train, EnsembleDynamics.select_elites, EnsembleDynamics.step

    def train_timed(self, data, logger, *a, **kw):
        import torch

        if rec.fitted is not None:  # a resumed run: the ensemble its first invocation fitted, not a second fit
            self.model.load_state_dict(rec.fitted["model"])
            self.scaler.mu, self.scaler.std = (rec.fitted[k].numpy() for k in ("mu", "std"))
            self.model.eval()
            if rec.state["epoch"] == 0:  # stopped before its first epoch: its RNGs as right after that fit
                set_rng_state(rec.state["rng"])
            return None
        if cap is not None:
            kw["max_epochs"] = cap
        t0 = time.time()
        out = train(self, data, logger, *a, **kw)
        rec.fit_done(time.time() - t0)
        rec.fitted = {"model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
                      "mu": torch.as_tensor(self.scaler.mu), "std": torch.as_tensor(self.scaler.std)}  # fmt: skip
        rec.checkpoint(policy=None, fake_buffer=None, lr_scheduler=None)  # epoch 0: the fit and the RNGs after it
        return out

    def select_elites_recorded(self, metrics):  # called once, with each model's best holdout MSE
        rec.dyn["holdout_mse"] = float(np.sort(metrics)[: self.model.num_elites].mean())
        return select_elites(self, metrics)

    def step_recorded(self, obs, action):
        next_obs, reward, terminal, info = step(self, obs, action)
        if rec.tag is not None:
            tag = rec.tag
            u = info.get("uncertainty", info.get("penalty"))
            if u is not None:
                rec.add(f"rollout/u{tag}", u)
            rec.add(f"rollout/reward{tag}", info["raw_reward"])
            rec.add(f"rollout/reward_p{tag}", reward)
            if tag == "_optimistic" and "bouns_reward" in info:
                rec.add("rollout/reward_o_optimistic", info["bouns_reward"])
        return next_obs, reward, terminal, info

    EnsembleDynamics.train, EnsembleDynamics.select_elites = train_timed, select_elites_recorded
    init = EnsembleDynamics.__init__

    def init_recorded(self, *a, **kw):  # the run scripts pass no uncertainty_mode: its default runs unless we set one
        init(self, *a, **(kw | ({"uncertainty_mode": uncertainty_mode} if uncertainty_mode else {})))
        rec.uncertainty_mode = self._uncertainty_mode

    EnsembleDynamics.__init__ = init_recorded
    EnsembleDynamics.step = step_recorded
    load, normalize_obs = EnsembleDynamics.load, ReplayBuffer.normalize_obs

    def load_recorded(self, load_path):
        load(self, load_path)
        rec.loaded_dynamics = self  # --load-dynamics: ours, in raw observations

    def normalize_obs_recorded(self, *a, **kw):  # the buffer now holds s_n: the loaded ensemble must take s_n too
        obs_mean, obs_std = normalize_obs(self, *a, **kw)
        d = rec.loaded_dynamics
        if d is not None and rec.obs_folded is None:
            state, d.scaler.mu, d.scaler.std = fold_obs_normalization(
                d.model.state_dict(), d.scaler.mu, d.scaler.std, obs_mean, obs_std
            )
            d.model.load_state_dict(state)
            rec.obs_folded = "the loaded ensemble was folded into the peer's standardised observations"
        return obs_mean, obs_std

    EnsembleDynamics.load, ReplayBuffer.normalize_obs = load_recorded, normalize_obs_recorded

    sample = ReplayBuffer.sample

    def sample_recorded(self, batch_size):
        out = sample(self, batch_size)
        if batch_size == rec.batch:  # the start states of the coming rollouts (and D's actions there)
            rec.last_sample = out
        return out

    ReplayBuffer.sample = sample_recorded

    def wrap_rollout(cls, tag):
        rollout = cls.rollout

        def rollout_recorded(self, init_obss, rollout_length):
            t0, rec.tag = time.time(), tag
            try:
                transitions, info = rollout(self, init_obss, rollout_length)
            finally:
                rec.tag = None
            rec.rollout_seconds += time.time() - t0
            b = len(init_obss)
            rec.add(f"rollout/length{tag}", np.array([len(transitions["obss"]) / b]))
            bad = ~np.isfinite(np.concatenate([transitions["next_obss"], transitions["rewards"]], 1)).all(1)
            rec.add(f"rollout/nonfinite_rows{tag}", np.array([bad.sum()]))
            start = rec.last_sample
            if start is not None and len(start["actions"]) == b:
                data_act = start["actions"].cpu().numpy()
                # in the env's units, as orpo.py's (their rollouts and D's actions are both ×action_scale)
                dist = np.linalg.norm(transitions["actions"][:b] - data_act, axis=-1) / rec.action_scale
                rec.add(f"rollout/action_distance{tag}", dist)
            return transitions, info

        cls.rollout = rollout_recorded

    def wrap_learn(cls):  # the update's own statistics (official-orpo's trainer never logs them: dead code)
        learn = cls.learn

        def learn_recorded(self, batch):
            if one_unit:  # D's and both rollouts' actions (actor·3) in the units of the actor that is trained on them
                unit = lambda b: dict(b, actions=b["actions"] / self.action_scale)  # noqa: E731
                batch = unit(batch) if "actions" in batch else {part: unit(b) for part, b in batch.items()}
            result = learn(self, batch)
            for k, v in result.items():
                rec.add(f"learn/{k}", np.array([v]))
            return result

        cls.learn = learn_recorded

    train_policy = trainer.train

    def train_recorded(self, *a, **kw):  # the policy epochs' clock starts here (after a fit, a load, or none)
        rec.trainer = self
        rec.training_starts()
        if rec.state is None or rec.state["epoch"] == 0:
            return train_policy(self, *a, **kw)
        rec.policy = self.policy  # evaluated after the last epoch, which may have been run before this invocation
        return resume(self, rec.state, lambda: train_policy(self, *a, **kw))

    trainer.train = train_recorded
    import offlinerlkit.policy as policies

    for name, tag in TRAINERS[peer][1].items():
        cls = getattr(policies, name)
        if tag is not None:
            wrap_rollout(cls, tag)
        if tag != "_optimistic":  # π^o's update is dead code upstream: the trained policy's learn is the one to record
            wrap_learn(cls)


# ---------- The run
def prepare_run_dir(args: argparse.Namespace, cli: dict):
    """Lock the run directory; a finished run with the same command is left alone, an unfinished one with a checkpoint
    goes on from it (returned), anything else starts over."""
    try:
        os.makedirs(args.run_dir, exist_ok=True)
        lock = open(os.path.join(args.run_dir, "run.lock"), "a+")
    except OSError as e:
        raise UsageError(f"cannot write in --run-dir {args.run_dir} ({e.strerror})") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(f"--run-dir {args.run_dir} is in use by another process") from None
    summary_path = os.path.join(args.run_dir, "summary.json")
    if os.path.isfile(summary_path):
        with contextlib.suppress(OSError, ValueError):
            with open(summary_path) as f:
                summary = json.load(f)
            if summary.get("finished"):
                with open(os.path.join(args.run_dir, "config.json")) as f:
                    saved = {k: v for k, v in (json.load(f).get("cli") or {}).items() if k not in INVOCATION}
                if saved == {k: v for k, v in cli.items() if k in saved or v is not None}:  # flags added since: unset
                    return lock, summary, None
                raise UsageError(f"--run-dir {args.run_dir} holds a finished run of another command; use another")
    path = os.path.join(args.run_dir, "checkpoint.pt")
    for tmp in glob.glob(path + ".*tmp"):  # a write cut short by a kill
        os.remove(tmp)
    config = {}
    with contextlib.suppress(OSError, ValueError), open(os.path.join(args.run_dir, "config.json")) as f:
        config = json.load(f)
    if os.path.isfile(path) and {k: v for k, v in (config.get("cli") or {}).items() if k not in INVOCATION} == cli:
        if config.get("dataset_fingerprint") != file_fingerprint(args.dataset_path):
            raise UsageError(f"{args.dataset_path} changed since {path} was written (its fingerprint); put the run's "
                             "data back, or delete the checkpoint to start over")  # fmt: skip
        import torch

        try:
            return lock, None, torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a damaged or foreign file
            raise UsageError(f"{path} is not a readable checkpoint ({e}); delete it (the run starts over)") from None
    if os.path.isfile(path):
        print(f"note: {path} is another command's checkpoint: this run starts over")
    for name in OUTPUTS:
        target = os.path.join(args.run_dir, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.remove(target)
    return lock, None, None


def main(argv=None) -> int:
    t_start = time.time()
    args = parse_args(argv)
    # the flags, not what plumbing noted of them, nor this invocation's
    cli = {k: v for k, v in vars(args).items() if k != "typed" and k not in INVOCATION}
    raw, attrs = read_dataset(args.dataset_path)
    task, eval_env_id, ref = infer_task(args, attrs)
    scale = JUMP_ACTIONS[1] if task in JUMP_TASKS else 1.0  # the peer's actions = the env's (in [-1, 1]) × scale
    if args.one_action_unit and scale == 1.0:
        raise UsageError(f"--one-action-unit: on {task} the peer's actions are the env's (×1), so it changes nothing; "
                         "drop it")  # fmt: skip
    if task in JUMP_TASKS and np.abs(raw["actions"]).max() > 1.0:
        lo, hi = raw["actions"].min(), raw["actions"].max()
        raise UsageError(f"{args.dataset_path}: actions span [{lo:.4g}, {hi:.4g}], outside HalfCheetah-v4's [-1, 1]; "
                         f"peers.py hands the official code {task} data ×{scale:g}, so the file must hold the "
                         "env's actions (as datasets/halfcheetah_jump.py writes them), not the official collection's "
                         "[-3, 3]")  # fmt: skip
    # what the run script is handed: on the jump task the actions ×3, the convention of its data and policies
    handed = raw if scale == 1.0 else dict(raw, actions=raw["actions"] * np.float32(scale))
    envs = make_eval_envs(eval_env_id, args.eval_episodes or 10)
    obs_dim, act_dim = raw["observations"].shape[1], raw["actions"].shape[1]
    if envs.single_observation_space.shape != (obs_dim,) or envs.single_action_space.shape != (act_dim,):
        raise UsageError(f"the data has obs/action dims {obs_dim}/{act_dim} but {eval_env_id} has "
                         f"{envs.single_observation_space.shape}/{envs.single_action_space.shape}; pass the matching "
                         "--eval-env")  # fmt: skip
    lock, done, state = prepare_run_dir(args, cli)
    if done is not None:
        print(f"{args.run_dir} already holds this run, finished (summary.json); nothing to do")
        return 0
    source = extract(args.peer, args.source, args.commit)

    import torch

    torch.set_num_threads(args.threads)
    device = "cuda" if args.cuda and torch.cuda.is_available() else "cpu"
    command = peer_command(args.peer, source["root"], task, args, device)
    converted = os.path.join(os.path.abspath(args.run_dir), "peer_dynamics")
    command += ["--load-dynamics-path", converted] if args.load_dynamics else []
    peer_args = script_args(source["root"], PEERS[args.peer]["script"], command)
    trainer = TRAINERS[args.peer][0]
    # `resumable`'s rule, read from the run script's flags before its trainer exists
    rolls_off = peer_args.step_per_epoch % getattr(peer_args, "rollout_freq", 1)
    if args.stop_after_epochs and (
        trainer not in RESUMABLE or rolls_off or getattr(peer_args, "dynamics_update_freq", 0)
    ):
        raise UsageError(f"--stop-after-epochs: {args.peer}'s trainer ({trainer}, its steps per epoch and rollout "
                         "frequency) cannot go on from a checkpoint, so the run would start over; drop it")  # fmt: skip
    if peer_args.task != (JUMP_SCRIPT_TASK[task][args.peer] if task in JUMP_TASKS else task):
        raise UsageError(f"--peer-flags sets --task {peer_args.task}; pass it as peers.py's --task instead")
    dataset_arg = getattr(peer_args, "dataset", None)  # the official scripts' --dataset: read (by us) on a jump task
    if task in JUMP_TASKS and os.path.realpath(dataset_arg or "") != os.path.realpath(args.dataset_path):
        raise UsageError(f"--peer-flags sets --dataset {dataset_arg}; the data is --dataset-path's")
    loaded = args.load_dynamics and peer_dynamics(args.load_dynamics, converted, peer_args, obs_dim, scale)
    stand_in = StandInEnv(task, handed, envs.single_observation_space, envs.single_action_space, ref)
    stubs = install_stubs(lambda name, *a, **kw: stand_in)
    for name in [n for n in sys.modules if n == "offlinerlkit" or n.startswith("offlinerlkit.")]:
        del sys.modules[name]
    sys.path.insert(0, source["root"])
    saved_argv, sys.argv = sys.argv, [os.path.join(source["root"], PEERS[args.peer]["script"]), *command]
    try:
        spec = importlib.util.spec_from_file_location("peer_run_script", sys.argv[0])
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)  # `def train(args=get_args())` parses `command` here
    finally:
        sys.argv = saved_argv

    def get_dataset(h5path, next_observation_path=None):
        """The official scripts' jump branches read their file with load_dataset.get_dataset(args.dataset) (jump-hard:
        run_orpo.py L109, run_td3bc.py L76, run_mopo.py L87, run_cql.py L96, run_combo.py L96; jump: run_orpo.py L97,
        run_td3bc.py L61, run_mopo.py L75, run_cql.py L70): served here, the file read above (its six D4RL keys),
        actions ×3."""
        if os.path.realpath(h5path) != os.path.realpath(args.dataset_path) or next_observation_path is not None:
            raise RuntimeError(f"peers.py serves {args.dataset_path} only, not get_dataset({h5path!r})")
        return dict(handed)

    if task in JUMP_TASKS:
        script.get_dataset = get_dataset  # the name the script imported (`from ...load_dataset import get_dataset`)
    import offlinerlkit
    import offlinerlkit.utils.logger as peer_logger

    assert os.path.realpath(offlinerlkit.__file__).startswith(os.path.realpath(source["root"]))
    peer_logger.ROOT_DIR = os.path.join(os.path.abspath(args.run_dir), "peer_log")  # make_log_dirs' root
    rec = Recorder(args.run_dir, ref, args.seed, getattr(peer_args, "rollout_batch_size", None))
    rec.steps, rec.task, rec.action_scale = peer_args.step_per_epoch, task, scale
    rec.loaded, rec.stop_after, rec.t0 = (loaded["metrics"] if loaded else None), args.stop_after_epochs, t_start
    if state is not None:
        rec.go_on_from(state)
        print(rec.goes_on())
    instrument(args.peer, rec, envs, args.dynamics_max_epochs, args.uncertainty_mode, args.one_action_unit)

    from offlinerlkit.utils.load_dataset import qlearning_dataset

    kept = len(qlearning_dataset(None, dataset=handed)["observations"])
    replaced = [
        "evaluation: the trainer's _evaluate runs ours (Gymnasium, one episode per sub-env, reset seed + 1000·epoch, "
        "select_action(obs, deterministic=True), " + ("D4RL reference returns)" if ref else f"its action ÷{scale:g} "
        f"(gym's RescaleAction({JUMP_ACTIONS[0]:g}, {JUMP_ACTIONS[1]:g}) map), {task}'s reward, raw returns)"),
        "the run script's log root (log/) is <run-dir>/peer_log",
    ] + [text for when, text in (
        (args.peer == "official-orpo", "official-orpo's _evaluate_Dynamics (its policy's return in the learned model) "
         "is not run"),
        (task in JUMP_TASKS, f"{os.path.basename(PEERS[args.peer]['script'])}'s get_dataset(args.dataset) returns the "
         f"file's arrays read here, the actions ×{scale:g} (their {task} data's convention)"),
        (args.one_action_unit, f"a diagnostic (--one-action-unit): its TD3+BC update ({TD3BC_LEARN.get(args.peer)} "
         f"learn) gets the batch's actions ÷{scale:g}"),
        (args.uncertainty_mode, f"the ensemble's uncertainty_mode is {args.uncertainty_mode} (the run script "
         "passes none)"),
        (args.dynamics_max_epochs, f"the ensemble fit is capped at {args.dynamics_max_epochs} epochs (not the peer's "
         "setting)"),
        (loaded, f"no ensemble fit: it loads {args.load_dynamics} (fitted by algorithms/*.py), in its format in "
         "peer_dynamics/"),
    ) if when]  # fmt: skip
    model = "fitted by the peer's code" if PEERS[args.peer]["uncertainty_modes"] else "none (no model)"
    config = dict(
        peer=args.peer, source=args.source, commit=source["commit"], extracted_to=source["root"],
        extracted_paths=source["extracted"], run_script=PEERS[args.peer]["script"], run_script_command=command,
        peer_settings=dict(vars(peer_args)), task=task, eval_env=eval_env_id,
        reference_returns=list(ref) if ref else None, score_kind="d4rl_normalized" if ref else "raw_return",
        dataset_path=os.path.abspath(args.dataset_path),
        dataset_fingerprint=file_fingerprint(args.dataset_path),  # as our runs' _dataset records it
        dataset_rows=len(raw["observations"]), transitions_kept_by_qlearning_dataset=kept,
        action_scale=scale,  # the file's actions times this are what the peer gets; its policy's ÷ it, the env's
        actions_handed=[float(handed["actions"].min()), float(handed["actions"].max())], stubs=stubs, replaced=replaced,
        dynamics_max_epochs=args.dynamics_max_epochs, dynamics={"source": "loaded", **loaded} if loaded else {"source":
        model}, device=device, device_name=device_name(torch.device(device)),
        torch_threads=torch.get_num_threads(), numerics_env=numerics_env(), torch=torch.__version__,
        python=platform.python_version(), cli=cli,
        _command=sys.argv,  # as our runs record them, so the results pages name the code that ran
        _git_revision=git_revision(os.path.abspath(__file__)),
    )  # fmt: skip
    write_json(config, os.path.join(args.run_dir, "config.json"), default=str)
    print(f"{args.peer} @ {source['commit'][:12]} on {task} -> eval {eval_env_id}; {args.run_dir}")
    print("  " + " ".join(command))

    def summary(status: str, error: str | None = None) -> dict:
        last = next((r for r in reversed(rec.rows) if "eval/return" in r), {})
        folded = "as the ensemble was fitted (raw, or the peer's own fit)" if rec.uncertainty_mode else "no model"
        out = dict(
            status=status, finished=status == "finished", peer=args.peer, commit=source["commit"], task=task,
            eval_env=eval_env_id, seed=args.seed, epochs=rec.epoch, score_kind=config["score_kind"],
            **{k: last.get(f"eval/{k}") for k in ("normalized_score", "normalized_score_std", "return", "return_std")},
            last10_score=float(np.mean(rec.scores[-10:])) if rec.scores else None,
            ensemble_uncertainty_mode=rec.uncertainty_mode,  # the u its ensemble computed
            dynamics_source=config["dynamics"]["source"], dynamics_observations=rec.obs_folded or folded,
            wall_seconds=rec.seconds(), device=device, device_name=config["device_name"],
            numerics_env=config["numerics_env"], error=error,
            run_dir=args.run_dir,
        )  # fmt: skip
        write_json(out, os.path.join(args.run_dir, "summary.json"), default=str)
        return out

    def on_signal(signum, frame):
        raise KeyboardInterrupt(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        script.train()  # the run script's own train(): data, seeding, models, dynamics fit, trainer
    except plumbing.Stop:  # --stop-after-epochs (a signal is a KeyboardInterrupt of on_signal's)
        summary("stopped")
        print(f"stopped after epoch {rec.epoch} (--stop-after-epochs {args.stop_after_epochs}); {rec.going_on()}")
        return 0
    except KeyboardInterrupt as e:
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        summary("interrupted", f"interrupted by {signal.Signals(signum).name} after epoch {rec.epoch}")
        print(f"error: interrupted after epoch {rec.epoch}; {rec.going_on()}", file=sys.stderr)
        return 128 + signum
    except Exception as e:
        with open(os.path.join(args.run_dir, "error.txt"), "w") as f:
            f.write(traceback.format_exc())
        summary("failed", f"{type(e).__name__}: {e}")
        print(
            f"error: the peer's code raised {type(e).__name__}: {e} (traceback in {args.run_dir}/error.txt)",
            file=sys.stderr,
        )
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        envs.close()
    if rec.epoch == peer_args.epoch and rec.policy is not None:
        try:
            with torch.no_grad():
                print(export_policy(rec.policy, task, raw["observations"][:: max(1, len(raw["observations"]) // 256)],
                                    os.path.join(args.run_dir, "policy.pt")))  # fmt: skip
        except Exception as e:  # the file is an extra: whatever the peer's actor holds, the finished run stands
            print(f"no policy.pt: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
    out = summary("finished" if rec.epoch == peer_args.epoch else "failed")
    if out["finished"]:  # what a resume needed (the model buffer: hundreds of MB); a finished run is left alone
        with contextlib.suppress(OSError):
            os.remove(os.path.join(args.run_dir, "checkpoint.pt"))
    print(json.dumps(out, indent=2))
    lock.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.code)
