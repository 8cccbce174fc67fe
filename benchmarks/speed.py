"""Speed of an algorithm file's own epoch on this device, with references measured in the same run.

Each measurement is a real run of the file (`python FILE ... --runs-dir TMP`) on a synthetic D4RL-layout dataset of
HalfCheetah-v4 sizes; the table reads the times its metrics.csv holds (charts/epoch_seconds, rollout_seconds,
eval_seconds, SPS, dynamics/fit_seconds). The references run in this process, in fp32: a loop over 7 nn.Sequential
models (the ensemble fit) and an OfflineRL-Kit-style rollout (one network call, numpy every step).

    python benchmarks/speed.py                                     # every row of docs/speed.md's table, 1 thread
    python benchmarks/speed.py --compare /tmp/orpo_before.py --labels after before  # a second file, same settings
    python benchmarks/speed.py --algo-flags=--no-pessimism          # more flags for every run of the files
    python benchmarks/speed.py --cuda --out /tmp/speed              # on a GPU; writes /tmp/speed.md and /tmp/speed.json

On a shared CPU use one thread (the default): with 2, OpenMP spin-waits make batched matmuls 8-60x slower whenever the
other core is busy. The 1-minute load average is reported next to the table.
"""

import csv
import glob
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import toolbox  # noqa: E402  (the scripts' one-line parse errors and atomic writes)
import runinfo  # noqa: E402  (md_table)
from toolbox import UsageError, UserError, unwritable_folder  # noqa: E402

PHASES = ("matmul", "ensemble", "epoch")
UNCERTAINTIES = ("max_aleatoric", "ensemble_var", "ensemble_std", "mixture_var", "mixture_std")


@dataclass
class Args:
    module: str = os.path.join(ROOT, "algorithms", "orpo.py")
    """the algorithm file to measure"""
    compare: str | None = None
    """a second algorithm file (e.g. a copy from before a change), run right after --module with the same settings"""
    cuda: bool = False
    """run on a CUDA GPU when one is present"""
    threads: int = 1
    """torch CPU threads, here and in the runs (OMP_NUM_THREADS; 1: immune to a busy second core)"""
    repeats: int = 5
    """repeats of the ensemble reference and the matmuls (median reported)"""
    matmul_size: int = 2048
    """n of the n×n matmuls that give the machine's limit (a bf16 one takes minutes on a CPU without bf16 units)"""
    heavy_repeats: int = 3
    """repeats of the rollout reference (median reported)"""
    epoch_repeats: int = 1
    """timed epochs per run (median reported), after --warmup-epochs"""
    warmup_epochs: int = 1
    """untimed epochs at the start of each run (first calls are slower); 0 times every epoch"""
    horizons: tuple[int, ...] = (1, 5)
    """rollout horizons h, one run each (--rollout-length h, and --rollout-length-o h where the file has it)"""
    rollout_batch_size: int = 50000
    """start states per rollout"""
    dataset_size: int = 100000
    """rows of the synthetic dataset D"""
    steps_per_epoch: int = 1000
    """gradient steps per epoch (ORPO: one SAC and one TD3+BC update each)"""
    dynamics_epochs: int = 2
    """epochs of the ensemble fit (--dynamics-max-epochs); its fit_seconds also holds the first calls' costs (~1 s on a
    CPU), which more epochs dilute"""
    ensemble_steps: int = 20
    """training steps per timed repeat of the ensemble reference"""
    eval_episodes: int = 10
    """evaluation episodes after every epoch (one vectorised HalfCheetah-v4 env each), then model_eval"""
    uncertainty: str = "ensemble_var"
    """uncertainty heuristic of the rollouts (halfcheetah-medium-v2's table type, OfflineRL-Kit's formula)"""
    algo_flags: str = ""
    """more flags for every run of the files, written with '=': --algo-flags=--no-pessimism"""
    only: tuple[str, ...] = PHASES
    """phases to run: matmul ensemble epoch"""
    labels: tuple[str, str] = ("module", "compare")
    """column names of --module and --compare (e.g. after before)"""
    dynamics_bf16: tuple[str, ...] = ()
    """columns (by label) whose runs get --dynamics-bf16, e.g. `--compare algorithms/orpo.py --labels bf16 fp32
    --dynamics-bf16 bf16` for the same file with and without it; the references stay fp32"""
    cuda_graphs: tuple[str, ...] = ()
    """columns (by label) whose epoch runs get --cuda-graphs, e.g. `--compare algorithms/orpo.py --labels eager graphs
    --cuda-graphs graphs` (takes effect on a GPU only)"""
    out: str | None = None
    """write OUT.md and OUT.json"""
    seed: int = 0


def check(a: Args) -> None:
    """Counts, files, phases, heuristic and columns: one line per problem and exit 2, before any work."""
    problems, columns = [], a.labels if a.compare else a.labels[:1]
    for k, v in vars(a).items():
        lowest = {"warmup_epochs": 0}.get(k, 1)
        if isinstance(v, int) and not isinstance(v, bool) and k != "seed" and v < lowest:
            problems.append(f"--{k.replace('_', '-')} {v}: must be at least {lowest}")
    if not 0 <= a.seed < 2**32:  # numpy's and the files' --seed range
        problems.append(f"--seed {a.seed}: must lie in [0, 2**32)")
    if not a.horizons or min(a.horizons) < 1 or len(set(a.horizons)) < len(a.horizons):
        problems.append(f"--horizons {a.horizons}: every h must be at least 1, each once")
    if len(set(columns)) < len(columns):  # one name would hold both columns' numbers
        problems.append(f"--labels {' '.join(a.labels)}: the two columns need two names")
    try:
        tokens = shlex.split(a.algo_flags)
    except ValueError as e:
        tokens = []
        problems.append(f"--algo-flags {a.algo_flags}: {e}")
    if any(t.split("=")[0] == "--runs-dir" for t in tokens):  # each run's folder is where its metrics are read
        problems.append("--algo-flags sets --runs-dir, which speed.py gives each run")
    why = unwritable_folder(os.path.dirname(os.path.abspath(a.out))) if a.out else None
    if why:  # before minutes of measurements
        problems.append(f"--out {a.out}: {why}")
    for k, path in (("module", a.module), ("compare", a.compare)):
        if path and not os.path.isfile(path):
            problems.append(f"--{k} {path}: no such file")
    problems += [f"--only {p}: use {', '.join(PHASES)}" for p in a.only if p not in PHASES]
    if a.uncertainty not in UNCERTAINTIES:
        problems.append(f"--uncertainty {a.uncertainty}: use {', '.join(UNCERTAINTIES)}")
    for flag, named in (("--dynamics-bf16", a.dynamics_bf16), ("--cuda-graphs", a.cuda_graphs)):
        if set(named) - set(columns):
            problems.append(
                f"{flag} {' '.join(named)}: names columns; this run's are {', '.join(columns)} (see --labels)"
            )
    if problems:
        raise UsageError("\n".join(problems))


def fail(message: str) -> None:
    raise UserError(message)


def median_time(fn: Callable, repeats: int, device: torch.device, loads: list) -> float:
    """Median wall time of fn after one warm-up call (CUDA synchronised around each call)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        loads.append(os.getloadavg()[0])
    return statistics.median(times)


def gflop(fn: Callable) -> float:
    """Matmul GFLOP of one call of fn (torch's flop counter: mm, bmm, addmm, baddbmm)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


# ---------------------------------------------------------------- the algorithm files' own runs
def write_dataset(path: str, n: int, seed: int) -> np.ndarray:
    """D4RL's HDF5 layout. Observations at scale 10 (like HalfCheetah's velocities) with Δs ~ N(0, 0.1²): a short fit
    learns Δs ≈ 0, so model_eval's 1000 model steps stay finite, as the runs' finiteness check requires."""
    g = np.random.default_rng(seed)
    obs = (10 * g.standard_normal((n, 17))).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["observations"] = obs
        f["actions"] = g.uniform(-1, 1, (n, 6)).astype(np.float32)
        f["rewards"] = g.standard_normal(n).astype(np.float32)
        f["next_observations"] = (obs + 0.1 * g.standard_normal((n, 17))).astype(np.float32)
        f["terminals"] = np.zeros(n, dtype=bool)
        f["timeouts"] = np.arange(n) % 1000 == 999  # D4RL's 1000-step episodes; the runs drop these rows
    return obs[np.arange(n) % 1000 != 999]


def last_line(text: str) -> str:
    """A run's reason: its last line, or the first line in tyro's error box (the flag and what is wrong with it)."""
    lines = text.strip().splitlines() or ["no output"]
    box = [line.strip("│ ") for line in lines if line.startswith("│")]
    return f"error: {box[0]}" if lines[-1].startswith("╰") and box else lines[-1]


def run_file(path: str, flags: set[str], settings: dict, a: Args, work: str) -> dict:
    """One run of `path` in a fresh --runs-dir: its metrics.csv rows, the device summary.json names, its dynamics.pt.
    A setting whose flag the file lacks is left out (e.g. --rollout-length-o without π^o), unless it switches on."""
    runs_dir = tempfile.mkdtemp(dir=work, prefix="runs_")
    # a file of this project's algorithms/ runs through the lab's launcher, as the lab's other runs; a copy from
    # elsewhere (--compare a file from before a change) runs alone
    own = os.path.dirname(os.path.abspath(path)) == os.path.join(ROOT, "algorithms")
    cmd = (
        toolbox.launch_command(path, "--runs-dir", runs_dir) if own else [sys.executable, path, "--runs-dir", runs_dir]
    )
    for k, v in settings.items():
        flag = "--" + ("no-" if v is False else "") + k.replace("_", "-")
        if flag in flags:
            cmd += [flag] + ([] if isinstance(v, bool) else [str(v)])
        elif v is True:
            fail(f"{path} has no {flag} flag")
    cmd += shlex.split(a.algo_flags)
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads), "WANDB_MODE": "offline"}
    env["COLUMNS"] = "200"  # tyro's error box wraps its message at the terminal's width
    t0 = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    if result.returncode != 0:
        fail(
            f"{os.path.basename(path)} exited with {result.returncode}: {last_line(result.stderr)} ({shlex.join(cmd)})"
        )
    # progress on stderr, so a step cut by a timeout (benchmarks/gpu_check.sh) still says where its time went
    flags = cmd[cmd.index("--runs-dir") + 2 :]
    print(f"speed.py: {os.path.basename(path)} {shlex.join(flags)}: {time.time() - t0:.1f} s", file=sys.stderr)
    run_dir = os.path.dirname(glob.glob(os.path.join(runs_dir, "*", "metrics.csv"))[0])
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        out = {"rows": [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]}
    with open(os.path.join(run_dir, "summary.json")) as f:
        out["device_name"] = json.load(f).get("device_name")
    with open(os.path.join(run_dir, "config.json")) as f:
        out["config"] = json.load(f)
    if os.path.isfile(os.path.join(run_dir, "dynamics.pt")):
        out["dynamics_path"] = shutil.move(os.path.join(run_dir, "dynamics.pt"), runs_dir + ".dynamics.pt")
    shutil.rmtree(runs_dir)  # its checkpoint of 50k-start buffers takes hundreds of MB
    return out


# ---------------------------------------------------------------- references (this process, fp32)
class LoopEnsemble(nn.Module):
    """The ensemble fit's reference: n separate nn.Sequential models of the same sizes, called one after the other, with
    the same step (Gaussian NLL, log-variance bounds, fused Adam with the per-layer L2 as weight decay)."""

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...], n: int):
        super().__init__()
        dims = [in_dim, *hidden]

        def member() -> nn.Sequential:
            layers = [m for i, o in zip(dims[:-1], dims[1:]) for m in (nn.Linear(i, o), nn.SiLU())]
            return nn.Sequential(*layers, nn.Linear(dims[-1], 2 * out_dim))

        self.members = nn.ModuleList(member() for _ in range(n))
        self.max_logvar = nn.Parameter(torch.full((1, out_dim), 0.5))
        self.min_logvar = nn.Parameter(torch.full((1, out_dim), -10.0))
        linears = zip(*[[m for m in member if isinstance(m, nn.Linear)] for member in self.members])
        decays = [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4]
        groups = [{"params": [m.weight for m in layer], "weight_decay": wd} for wd, layer in zip(decays, linears)]
        rest = [p for name, p in self.named_parameters() if not name.endswith(".weight")]
        self.optimizer = torch.optim.Adam(groups + [{"params": rest}], lr=1e-3, fused=True)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        nll = 0.0
        for member, xi, yi in zip(self.members, x, y):
            mean, logvar = member(xi).chunk(2, dim=-1)
            logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
            logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
            nll = nll + ((mean - yi) ** 2 * (-logvar).exp() + logvar).mean()
        loss = nll + 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


def one_call_ensemble(x_data: torch.Tensor, n: int = 7, hidden: tuple[int, ...] = (200,) * 4) -> Callable:
    """The rollouts' reference network: the ensemble's sizes and math, the whole batch in one batched call."""
    dims = [x_data.shape[1], *hidden, 2 * 18]
    ws = [torch.randn(n, i, o, device=x_data.device) / (2 * i**0.5) for i, o in zip(dims[:-1], dims[1:])]
    bs = [torch.zeros(n, 1, o, device=x_data.device) for o in dims[1:]]
    mu, sd = x_data.mean(0), x_data.std(0)

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = ((x - mu) / sd).expand(n, *x.shape)
        for k, (w, b) in enumerate(zip(ws, bs)):
            h = torch.baddbmm(b, h, w)
            h = F.silu(h) if k < len(ws) - 1 else h
        mean, logvar = h.chunk(2, dim=-1)
        logvar = 0.5 - F.softplus(0.5 - logvar)
        return mean, -10.0 + F.softplus(logvar + 10.0)

    return forward


def naive_rollout(
    model: Callable, actor: Callable, obs: np.ndarray, h: int, uncertainty: str, device, buf: dict
) -> int:
    """The rollouts' reference (OfflineRL-Kit style): the model in torch on the whole batch; actions, sampling,
    termination, uncertainty and the buffer in numpy, with a host round trip every step. Returns the rows stored."""
    ptr = 0
    for _ in range(h):
        with torch.no_grad():
            act = actor(torch.as_tensor(obs, device=device)).cpu().numpy()
            mean, logvar = model(torch.as_tensor(np.concatenate([obs, act], -1), device=device))
        mean, logvar = mean.cpu().numpy(), logvar.cpu().numpy()
        mean[..., :-1] += obs
        std = np.sqrt(np.exp(logvar))
        samples = (mean + np.random.normal(size=mean.shape) * std).astype(np.float32)
        samples = samples[np.random.choice(5, size=len(obs)), np.arange(len(obs))]  # a random elite per row
        next_obs, rew = samples[:, :-1], samples[:, -1:]
        done = ~np.isfinite(next_obs).all(-1, keepdims=True)  # halfcheetah: only a diverged state ends a row
        if uncertainty == "max_aleatoric":
            u = np.amax(np.linalg.norm(std, axis=2), axis=0)[:, None]
        elif uncertainty.startswith("ensemble"):  # OfflineRL-Kit: the members' next-state means only
            u = mean[..., :-1].var(0).mean(-1, keepdims=True)
        else:  # the appendix's mixture variance over s' and r
            u = (mean.var(0) + (std**2).mean(0)).sum(-1, keepdims=True)
        u = np.sqrt(u) if uncertainty.endswith("_std") else u
        step = {"obs": obs, "act": act, "rew": rew, "u": u, "next_obs": next_obs, "done": done}
        step |= {"rew_o": rew + 0.015 * u, "rew_p": rew - 5 * u}  # relabelled, as the algorithm stores them
        for k, v in step.items():
            buf.setdefault(k, np.zeros((len(obs) * h, v.shape[1]), np.float32))[ptr : ptr + len(obs)] = v
        ptr += len(obs)
        obs = next_obs[~done[:, 0]]
    return ptr


# ---------------------------------------------------------------- rows
def row(name: str, unit: str, values: dict, flops: float | None = None, ref: float | None = None, note: str = ""):
    """values in `unit`; flops: matmul GFLOP per step or transition of a rate (unit '…/s'); ref: the reference's."""
    return dict(name=name, unit=unit, values=values, gflop=flops, ref=ref, higher=unit.endswith("/s"), note=note)


def ensemble_rows(a: Args, fits: dict, obs: np.ndarray, names: list, device, loads: list) -> list[dict]:
    """Steps per second of each run's own fit_dynamics (row 0 of its metrics.csv) against the loop reference."""
    n_train = len(obs) - min(int(0.2 * len(obs)), 1000)  # the fit's holdout: 20 %, at most 1000 rows (the defaults)
    fit = {k: f["rows"][0] for k, f in fits.items()}  # row 0 of metrics.csv: the fit's own metrics
    # the ensemble the runs fitted (--algo-flags may change it); the reference loop gets the first column's shape
    shapes = {
        k: (c["num_ensemble"], tuple(c["dynamics_hidden_dims"]), c["dynamics_batch_size"])
        for k, c in ((k, f["config"]) for k, f in fits.items())
    }
    n, hidden, batch = next(iter(shapes.values()))
    steps = {k: -(-n_train // shapes[k][2]) * r["dynamics/epochs"] / r["dynamics/fit_seconds"] for k, r in fit.items()}
    act = np.random.uniform(-1, 1, (len(obs), 6)).astype(np.float32)
    x = torch.as_tensor(np.concatenate([obs, act], -1), device=device)
    y = torch.randn(len(obs), 18, device=device)
    loop = LoopEnsemble(23, 18, hidden, n).to(device)

    def loop_steps(count: int) -> None:
        for _ in range(count):
            idx = torch.randint(len(x), (n, batch), device=device)  # a bootstrap row per member, as fit_dynamics
            loop.step(x[idx], y[idx])

    flops = gflop(lambda: loop_steps(1))
    ref = a.ensemble_steps / median_time(lambda: loop_steps(a.ensemble_steps), a.repeats, device, loads)
    note = f"dynamics/fit_seconds of {a.dynamics_epochs} epoch(s) of fit_dynamics on {len(obs) // 1000}k rows"
    if len(set(shapes.values())) > 1:
        note += "; the columns' ensembles differ (the name is the first's)"
    width = f"{len(hidden)}×{hidden[0]}" if len(set(hidden)) == 1 else "-".join(map(str, hidden))
    return [
        row(f"ensemble fit ({n} × {width}, batch {batch})", "steps/s", steps, flops, ref=ref, note=note),
        row(f"  reference: loop over {n} nn.Sequential", "steps/s", dict.fromkeys(names, ref), flops),
    ]


def epoch_rows(a: Args, h: int, runs: dict, obs: np.ndarray, names: list, device, loads: list) -> list[dict]:
    """Medians over each run's timed epochs (its metrics.csv rows); its rollouts' rate against the numpy reference."""
    b, med = a.rollout_batch_size, {}
    for k, run in runs.items():
        per: dict[str, list] = {}
        for r in (r for r in run["rows"] if r["epoch"] > a.warmup_epochs):
            without = a.steps_per_epoch / r["charts/SPS"]  # SPS leaves evaluation out
            rollout = r.get("charts/rollout_seconds")
            rows = b * sum(v for m, v in r.items() if m.startswith("rollout/length"))  # all rollouts of the epoch
            epoch = {"without": without, "with": r["charts/epoch_seconds"], "eval": r["charts/eval_seconds"]}
            if rollout is not None:  # the model-based files
                epoch |= {"rollout": rollout, "updates": without - rollout, "rate": rows / rollout}
            for m, v in epoch.items():
                per.setdefault(m, []).append(v)
        med[k] = {m: statistics.median(v) for m, v in per.items()}
    spec = [
        (f"epoch h={h}, without evaluation", "without", "steps per epoch ÷ charts/SPS"),
        ("  of which rollouts", "rollout", "charts/rollout_seconds"),
        ("  of which updates", "updates", "the rest: the update steps and the epoch's metrics"),
        (f"  evaluation ({a.eval_episodes} episodes + model_eval)", "eval", "charts/eval_seconds"),
        (f"epoch h={h}, with evaluation", "with", "charts/epoch_seconds"),
    ]
    spec = [(name, m, note) for name, m, note in spec if any(m in v for v in med.values())]  # td3bc.py: no rollouts
    out = [row(name, "s", {k: v[m] for k, v in med.items() if m in v}, note=note) for name, m, note in spec]
    if any("rate" in v for v in med.values()):
        ref, flops = reference_rollout(obs, h, a, device, loads)
        rates = {k: v["rate"] for k, v in med.items() if "rate" in v}
        note = "rows (b × Σ rollout/length*) ÷ charts/rollout_seconds: rollouts, relabelling, buffer adds"
        out.append(row(f"model rollouts h={h} in the epoch", "transitions/s", rates, flops, ref, note))
        name, note = "  reference: one call, numpy every step", f"{b // 1000}k starts × h={h}"
        out.append(row(name, "transitions/s", dict.fromkeys(names, ref), flops, note=note))
    return out


def reference_rollout(obs: np.ndarray, h: int, a: Args, device, loads: list) -> tuple[float, float]:
    """Transitions per second of naive_rollout from b states of D, and its matmul GFLOP per transition."""
    act = np.random.uniform(-1, 1, (len(obs), 6))
    x = torch.as_tensor(np.concatenate([obs, act], -1), dtype=torch.float32, device=device)
    dynamics, mean, std = one_call_ensemble(x), x[:, :17].mean(0), x[:, :17].std(0)
    hidden = [m for i, o in ((17, 256), (256, 256), (256, 256)) for m in (nn.Linear(i, o), nn.ReLU())]
    net = nn.Sequential(*hidden, nn.Linear(256, 6)).to(device)  # the policies' sizes
    buf, b, stored = {}, a.rollout_batch_size, []

    def policy(s: torch.Tensor) -> torch.Tensor:
        return torch.tanh(net((s - mean) / std))

    def rollout() -> None:  # from b states of D, sampled in numpy as OfflineRL-Kit does
        start = obs[np.random.randint(len(obs), size=b)]
        stored.append(naive_rollout(dynamics, policy, start, h, a.uncertainty, device, buf))

    with torch.no_grad():
        flops = gflop(lambda: dynamics(torch.cat([x[:1000, :17], policy(x[:1000, :17])], -1))) / 1000
    t = median_time(rollout, a.heavy_repeats, device, loads)
    return statistics.median(stored) / t, flops


# ---------------------------------------------------------------- table
def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def render(rows: list, names: list[str], peak: float | None) -> str:
    pair = [f"{names[0]} vs {names[1]}"] if len(names) == 2 else []
    head = ["measurement", "unit", *names, *pair, "vs reference", "GFLOP/s", "% of matmul peak", "notes"]
    table = []
    for r in rows:
        vals = [r["values"].get(n) for n in names]
        cells = [r["name"], r["unit"], *[fmt(v) if v is not None else "" for v in vals]]
        if pair:
            x, y = vals
            q = (x / y if r["higher"] else y / x) if x and y and x != y else None  # > 1: the first column is faster
            cells.append("" if q is None else f"{q:.2f}× faster" if q > 1 else f"{1 / q:.2f}× slower")
        g = [r["gflop"] * v for v in vals if v is not None and r["gflop"] is not None]
        cells.append(" / ".join(f"{v / r['ref']:.2f}×" for v in vals if v is not None) if r["ref"] else "")
        cells.append(" / ".join(f"{x:.1f}" for x in g))
        cells.append(" / ".join(f"{100 * x / peak:.0f} %" for x in g) if peak else "")
        table.append([*cells, r["note"]])
    return "\n".join(runinfo.md_table(head, table))


def measure(a: Args, files: dict, device, loads: list, work: str) -> tuple[list, float | None, dict]:
    """The table's rows, the fp32 matmul peak and every run's metrics."""
    names, rows, peak, runs = list(files), [], None, {}
    if "matmul" in a.only:
        n = a.matmul_size
        m = torch.randn(n, n, device=device)
        peak = 2 * n**3 / median_time(lambda: m @ m, a.repeats, device, loads) / 1e9
        rows.append(row(f"fp32 matmul {n}×{n} (machine limit)", "GFLOP/s", dict.fromkeys(names, peak), note="median"))
        if a.dynamics_bf16:  # the limit --dynamics-bf16 works against ("% of matmul peak" stays relative to fp32)
            m16 = m.bfloat16()
            bf16 = 2 * n**3 / median_time(lambda: m16 @ m16, a.repeats, device, loads) / 1e9
            rows.append(row(f"bf16 matmul {n}×{n}", "GFLOP/s", dict.fromkeys(names, bf16), note="median"))
    if "ensemble" not in a.only and "epoch" not in a.only:
        return rows, peak, runs
    data_path = os.path.join(work, "halfcheetah-medium-v2.hdf5")  # its name picks that dataset's presets
    obs = write_dataset(data_path, a.dataset_size, a.seed)
    flags = {k: toolbox.help_flags(path) for k, path in files.items()}
    for k, path in files.items():
        if "--runs-dir" not in flags[k]:
            fail(f"{path} takes no --runs-dir: it is not an algorithm file of this repo")
    common = {"dataset_path": data_path, "eval_env": "HalfCheetah-v4", "seed": a.seed, "cuda": a.cuda, "eval_every": 1}
    common |= {"eval_episodes": a.eval_episodes, "uncertainty": a.uncertainty}
    fits = {}  # per column: --dynamics-epochs of fit and a one-step epoch; its epoch runs load the dynamics.pt
    for k, path in files.items():
        fit = common | {"epochs": 1, "steps_per_epoch": 1, "rollout_batch_size": 1000}
        fit |= {"dynamics_max_epochs": a.dynamics_epochs, "dynamics_bf16": k in a.dynamics_bf16}
        if "--load-dynamics-path" in flags[k]:  # td3bc.py has no model
            fits[k] = runs[f"fit {k}"] = run_file(path, flags[k], fit, a, work)
    if "ensemble" in a.only and fits:  # td3bc.py has no ensemble to time
        rows += ensemble_rows(a, fits, obs, names, device, loads)
    for h in a.horizons if "epoch" in a.only else ():
        for k, path in files.items():  # the columns one after the other, for each h
            epoch = common | {"epochs": a.warmup_epochs + a.epoch_repeats, "steps_per_epoch": a.steps_per_epoch}
            epoch |= {"rollout_batch_size": a.rollout_batch_size, "rollout_length": h, "rollout_length_o": h}
            epoch |= {"dynamics_bf16": k in a.dynamics_bf16, "cuda_graphs": k in a.cuda_graphs}
            epoch |= {"load_dynamics_path": fits[k]["dynamics_path"]} if k in fits else {}
            runs[f"{k} h={h}"] = run_file(path, flags[k], epoch, a, work)
        rows += epoch_rows(a, h, {k: runs[f"{k} h={h}"] for k in files}, obs, names, device, loads)
    return rows, peak, runs


def main(a: Args) -> dict:
    check(a)
    torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.cuda and torch.cuda.is_available() else "cpu")
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    files = {a.labels[0]: os.path.abspath(a.module)} | ({a.labels[1]: os.path.abspath(a.compare)} if a.compare else {})
    loads, t_start, work = [os.getloadavg()[0]], time.time(), tempfile.mkdtemp(prefix="speed_")
    try:
        rows, peak, runs = measure(a, files, device, loads, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seen = next((r["device_name"] for r in runs.values() if r.get("device_name")), None)
    load = {"start": loads[0], "min": min(loads), "max": max(loads), "end": os.getloadavg()[0]}
    name = toolbox.device_name(device)  # a CPU's with its cores and threads, which the next line gives
    meta = {"device": name.rsplit(" (", 1)[0] if device.type == "cpu" else name, "runs_device": seen}
    meta |= {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version()}
    meta |= {"load_1min": load, "seconds": time.time() - t_start, "columns": files, "args": asdict(a)}
    lines = [
        f"device: {meta['device']} ({device.type}), {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{meta['threads']} thread(s){f'; the runs report {seen}' if seen else ''}",
        f"1-min load average {load['start']:.2f} at start, {load['min']:.2f}–{load['max']:.2f} during, "
        f"{load['end']:.2f} at end; {meta['seconds']:.0f} s",
        "columns: "
        + ", ".join(
            f"{k} = {v}{' --dynamics-bf16' * (k in a.dynamics_bf16)}{' --cuda-graphs' * (k in a.cuda_graphs)}"
            for k, v in files.items()
        ),  # fmt: skip
        f"every run with: {a.algo_flags}" if a.algo_flags else "",
        f"epochs: median of {a.epoch_repeats} per run after {a.warmup_epochs} warm-up; references: medians of "
        f"{a.repeats} (ensemble) and {a.heavy_repeats} (rollouts) repeats after a warm-up",
    ]
    text = "\n".join(line for line in lines if line) + "\n\n" + render(rows, list(files), peak)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        write_text(a.out + ".md", text + "\n")
        write_text(a.out + ".json", json.dumps({"meta": meta, "rows": rows, "runs": runs}, indent=2))
    return {"meta": meta, "rows": rows, "runs": runs}


def write_text(path: str, text: str) -> None:
    """Atomically (toolbox's); a failed write (a full disk) is one line."""
    try:
        toolbox.write_text(path, text)
    except OSError as e:
        raise UserError(f"could not write {path} ({e.strerror}); the table is printed above") from None


if __name__ == "__main__":  # SIGTERM as Ctrl-C: subprocess.run kills the run, `finally` removes the folder
    interrupted = "interrupted: the runs stopped and the temporary folder removed; nothing written"
    sys.exit(toolbox.cli(lambda a: [main(a), 0][1], Args, sys.argv[1:], interrupted, sigterm=True))  # main: the table
