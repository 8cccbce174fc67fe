"""The tests that take a device: the CPU here and in CI, a GPU with ORPO_TEST_DEVICE=cuda (benchmarks/gpu_check.sh).

What only a GPU would reveal, checked where it can be on a CPU: the epoch loop's update steps make no host round trip
(no .item(), bool(tensor), float(tensor), .cpu(), .numpy(), .tolist(), boolean-mask indexing, host data copied in), its
rollouts wait for the host only to compact their rows (a bounded number of times per model step), every tensor the
loop makes is made with the run's device, and neither part draws from numpy's, Python's or (on a GPU) torch's CPU
generator. `Check` watches every torch call of a region through a TorchFunctionMode; on a GPU the update region also
runs under torch.cuda.set_sync_debug_mode("error"), which catches any synchronisation the mode cannot see.

Also here: the ensemble's fit and forward (fp32 and --dynamics-bf16), one epoch of every model-based file, and an
exact resume, each on the test device; and on a GPU only, --cuda-graphs against eager in every file (on a CPU, the
steps block's driver, gradient_steps and cuda_graph, with a stand-in for torch.cuda's graphs and streams).
"""

import contextlib
import csv
import dataclasses
import os
import random
import signal
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import tyro
from conftest import TINY, fit_settings
from torch.overrides import TorchFunctionMode
import plumbing  # noqa: E402  (conftest puts algorithms/ on sys.path)

# calls that make the host wait for the device (or copy through the host), by name: Tensor methods and torch functions
SYNCS = {"item": "reads a value on the host", "tolist": "reads values on the host",
         "numpy": "copies to a numpy array", "__array__": "copies to a numpy array",
         "__bool__": "Python branches on a tensor's value", "__float__": "reads a value on the host",
         "__int__": "reads a value on the host", "__index__": "reads a value on the host",
         "__complex__": "reads a value on the host", "__format__": "formats a value on the host",
         "__repr__": "formats values on the host", "cpu": "copies to the host",
         "nonzero": "the host waits for the count of nonzero entries",
         "argwhere": "the host waits for the count of nonzero entries",
         "masked_select": "the host waits for the count of selected entries",
         "unique": "the host waits for the count of unique entries",
         "unique_consecutive": "the host waits for the count of unique entries",
         "tensor": "copies host data to the device", "as_tensor": "copies host data to the device",
         "asarray": "copies host data to the device", "from_numpy": "wraps a numpy array"}  # fmt: skip
# factories whose tensor lands on the CPU (the default device) unless they are given device=
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm", "linspace", "eye"}
FACTORIES |= {"logspace", "scalar_tensor", "empty_strided"}
# rollout() keeps each step's fields (obs, act, rew, the method's relabel columns, next_obs, done) with one boolean
# mask each, and one more mask picks the rows still alive: a rollout's masks per model step are its fields + 1


class HostRoundTrip(AssertionError):
    pass


def is_mask(index) -> bool:
    if isinstance(index, (tuple, list)):
        return any(is_mask(i) for i in index)
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


def tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors(v)


class Check(TorchFunctionMode):
    """Raises HostRoundTrip at the first torch call in the region that syncs with (or copies through) the host, makes
    a tensor without device=, returns one off `device`, or takes a generator of another device; on leaving, if the
    region drew from numpy's, Python's or (device not the CPU) torch's CPU random generator. With `count_masks`,
    boolean-mask indexing is counted in `masks` instead (the rollouts' row compaction); with `count_reads`, float(t)
    is counted in `reads` instead (the means read after the last step), and on a GPU ends the sync-debug mode."""

    def __init__(self, where: str, device: torch.device, count_masks: bool = False, count_reads: bool = False):
        super().__init__()
        self.where, self.device, self.count_masks, self.masks = where, device, count_masks, 0
        self.count_reads, self.reads = count_reads, 0

    def fail(self, what: str) -> None:
        raise HostRoundTrip(f"{what}, in {self.where}")

    def __enter__(self):
        self.rngs = self.rng_states()
        return super().__enter__()

    def __exit__(self, kind, value, tb):
        super().__exit__(kind, value, tb)
        if kind is None:
            before, after = self.rngs, self.rng_states()
            for name in before:
                if not rng_equal(before[name], after[name]):
                    self.fail(f"{name}'s random generator was used (the host draws, the device waits)")

    def rng_states(self) -> dict:
        states = {"numpy": np.random.get_state(), "Python": random.getstate()}
        if self.device.type != "cpu":
            states["torch's CPU"] = torch.get_rng_state()
        return states

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "__float__" and self.count_reads:
            self.reads += 1
            if self.device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
        elif name in SYNCS:
            self.fail(f"{name}: {SYNCS[name]}")
        if name in ("__getitem__", "__setitem__") and len(args) > 1 and is_mask(args[1]):
            if not self.count_masks:
                self.fail("indexing with a boolean mask: the host waits for the count of selected rows")
            self.masks += 1
        if name == "where" and len(args) + len(kwargs) == 1:
            self.fail("torch.where(condition): the host waits for the count of true entries")
        if name in FACTORIES and kwargs.get("device") is None:
            self.fail(f"torch.{name} without device=: the tensor is made on the default device, the CPU")
        generator = kwargs.get("generator")
        if generator is not None and generator.device.type != self.device.type:
            self.fail(f"torch.{name} draws from a {generator.device} generator")
        out = func(*args, **kwargs)
        for t in tensors(out):
            if t.device.type != self.device.type:
                self.fail(f"{name} returned a tensor on {t.device}, not on {self.device}")
        return out


def rng_equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(rng_equal(x, y) for x, y in zip(a, b))
    return a == b


def device_tiny(device: torch.device) -> list[str]:
    return [f for f in TINY if f != "--no-cuda"] + ["--cuda" if device.type == "cuda" else "--no-cuda"]


def file_tiny(module, device: torch.device) -> list[str]:
    """device_tiny's flags that the file takes (td3bc.py has no ensemble, no rollouts)."""
    fields, out, keep = {f.name for f in dataclasses.fields(module.Args)}, [], False
    for token in device_tiny(device):
        if token.startswith("--"):
            keep = token[2:].removeprefix("no-").replace("-", "_") in fields
        if keep:
            out.append(token)
    return out


@contextlib.contextmanager
def probed_epochs(module, device: torch.device, monkeypatch):
    """Run `module.main` with each epoch's first part (the epoch's start up to its gradient_steps call: the start
    states, the rollouts, the buffers) under Check("the rollouts", count_masks=True) and its gradient_steps call
    under Check("the update steps", count_reads=True); yields the regions' checks, the model steps the rollouts
    took, the fields each rollout stored and the statistics gradient_steps returned."""
    seen = {"the rollouts": [], "the update steps": [], "model_steps": 0, "fields": [], "stats": []}
    active = []
    cuda = device.type == "cuda"

    def enter(where: str) -> None:
        check = Check(where, device, count_masks=where == "the rollouts", count_reads=where == "the update steps")
        check.__enter__()
        active.append(check)
        seen[where].append(check)
        if cuda and where == "the update steps":
            torch.cuda.set_sync_debug_mode("error")  # any synchronisation at all, also one the mode cannot see

    def leave(failed: bool = False) -> None:
        check = active.pop()
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
        check.__exit__(*((RuntimeError, None, None) if failed else (None, None, None)))

    tqdm, gradient_steps, rollout, step = (
        module.tqdm,
        module.gradient_steps,
        module.rollout,
        module.EnsembleDynamics.step,
    )

    class probed_tqdm(tqdm):  # main's epoch loop iterates a range (its bar shows the score); the fit's bar is a context
        def __iter__(self):
            for epoch in super().__iter__():
                if isinstance(self.iterable, range):
                    enter("the rollouts")
                yield epoch

    def probed_gradient_steps(*a, **k):
        leave()
        enter("the update steps")
        stats = gradient_steps(*a, **k)
        leave()
        seen["stats"].append(dict(stats))  # main adds its other metrics to this dict
        return stats

    def recorded_rollout(*a, **k):
        out = rollout(*a, **k)
        seen["fields"].append(len(set(out) - {"first_act", "nonfinite"}))
        return out

    def counted_step(self, *a, **k):
        seen["model_steps"] += bool(active and active[-1].where == "the rollouts")
        return step(self, *a, **k)

    monkeypatch.setattr(module, "tqdm", probed_tqdm)
    monkeypatch.setattr(module, "gradient_steps", probed_gradient_steps)
    monkeypatch.setattr(module, "rollout", recorded_rollout)
    monkeypatch.setattr(module.EnsembleDynamics, "step", counted_step)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield seen
    finally:
        while active:  # a failure inside a region leaves its check entered
            leave(failed=True)
        for s, handler in handlers.items():
            signal.signal(s, handler)


# ---------------------------------------------------------------- the check itself
@pytest.mark.parametrize("snippet", ["x.sum().item()", "x.tolist()", "x.numpy()", "np.asarray(x)",
                         "bool(x.sum() > 0)", "float(x.sum())", "f'{x.sum():.3f}'", "x.cpu()", "x[x > 0]",
                         "x.nonzero()", "torch.as_tensor(np.zeros(3), device=x.device)", "torch.zeros(3)",
                         "np.random.rand()", "random.random()"])  # fmt: skip
def test_the_check_catches_each_kind_of_host_round_trip(snippet, device):
    """Each of these lines in an update step would make a GPU wait for the host (or the host for the GPU)."""
    x = torch.randn(8, device=device)
    with pytest.raises(HostRoundTrip), Check("a test", device):
        eval(snippet, {"torch": torch, "np": np, "random": random, "x": x})


def test_the_check_lets_device_side_work_pass(device):
    x = torch.randn(8, device=device)
    with Check("a test", device) as check:
        y = torch.where(x > 0, x, torch.zeros_like(x)) + torch.randn(8, device=device)
        y = y[torch.randint(8, (4,), device=device)] * len(x)  # an index tensor and a shape: no wait
        y.add_(1).clamp_(max=3.0)
    assert check.masks == 0 and y.device.type == device.type


# ---------------------------------------------------------------- the epoch loop of every model-based file
FILES = [("orpo", []), ("orpo", ["--output-algo", "sac"]), ("mopo", []), ("mopo", ["--policy", "td3bc"]), ("oroo",
          []), ("mbpo", []), ("combo", ["--num-repeat", "2"])]  # fmt: skip


@pytest.mark.parametrize("name, flags", FILES, ids=[" ".join([n, *f]) for n, f in FILES])
def test_epoch_loop_makes_no_host_round_trip(files, hopper_data_dir, tmp_path, monkeypatch, device, name, flags):
    """One epoch of the file's own main() on the test device: its update steps never wait for the host but to read
    each statistic's mean once after the last step, its rollouts only to compact their rows (at most one wait per
    stored field and one for the alive rows per model step), and every tensor either part makes is on the run's
    device."""
    module = files[name]
    argv = [*device_tiny(device), "--epochs", "1", "--env", "hopper-random-v2", "--data-dir", hopper_data_dir[0]]
    args = tyro.cli(module.Args, args=[*argv, "--runs-dir", str(tmp_path), *flags])
    with probed_epochs(module, device, monkeypatch) as seen:
        summary = module.main(args)
    assert summary["finished"] and summary["device"] == device.type, summary
    assert len(seen["the rollouts"]) == len(seen["the update steps"]) == 1  # the regions were entered and checked
    assert seen["model_steps"] >= 1 and seen["fields"]
    masks = sum(c.masks for c in seen["the rollouts"])
    assert 0 < masks <= (max(seen["fields"]) + 1) * seen["model_steps"], (masks, seen["model_steps"], seen["fields"])
    (stats,) = seen["stats"]
    assert seen["the update steps"][0].reads == len(stats) > 0, (seen["the update steps"][0].reads, sorted(stats))


# ---------------------------------------------------------------- the ensemble and the rollouts
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_ensemble_fits_and_predicts_on_the_device(files, device, bf16):
    orpo = files["orpo"]
    torch.manual_seed(0)
    n = 3000
    obs, act = torch.rand(n, 3, device=device) * 2 - 1, torch.rand(n, 2, device=device) * 2 - 1
    delta = torch.stack([torch.sin(2 * obs[:, 0]) + act[:, 0], obs[:, 1] * act[:, 1], 0.5 * obs[:, 2]], dim=1)
    data = {"obs": obs, "act": act, "next_obs": obs + delta, "rew": ((obs**2).sum(1) - act[:, 0])[:, None]}
    model = orpo.EnsembleDynamics(3, 2, (64, 64), 5, 3, bf16=bf16).to(device)
    metrics = orpo.fit_dynamics(model, data, **fit_settings(orpo.Args(dynamics_max_epochs=15)))
    target_var = torch.cat([delta, data["rew"]], 1).var(0).mean().item()
    assert metrics["dynamics/holdout_mse"] < 0.15 * target_var, metrics  # 0.6 × target_var after one epoch
    assert all(p.device.type == device.type for p in model.state_dict().values())
    assert len(model.elites) == len(set(model.elites.tolist())) == 3  # three distinct members
    o, a = torch.rand(256, 3, device=device) * 2 - 1, torch.rand(256, 2, device=device) * 2 - 1  # fresh inputs
    truth = torch.stack([torch.sin(2 * o[:, 0]) + a[:, 0], o[:, 1] * a[:, 1], 0.5 * o[:, 2]], 1)
    x = torch.cat([o, a], 1)
    with torch.no_grad():
        mean, logvar = model(x)
        assert ((mean[model.elites, :, :3].mean(0) - truth) ** 2).mean() < 0.15 * target_var
        model.bf16 = False
        mean32, logvar32 = model(x)
    assert mean.dtype == logvar.dtype == torch.float32 and mean.shape == (5, 256, 4) and mean.device.type == device.type
    if bf16:  # the autocast path of this device stays close to its fp32 forward, and so does each u
        assert 0 < (mean - mean32).abs().max() < 0.05 and (logvar - logvar32).abs().max() < 0.05
        for kind in orpo.UNCERTAINTIES:
            u16, u32 = (orpo.uncertainty(m, (0.5 * lv).exp(), kind) for m, lv in ((mean, logvar), (mean32, logvar32)))
            assert ((u16 - u32).abs() / u32).median() < 0.02, kind
    next_obs, rew, mean, std = model.step(obs[:256], act[:256])
    u = orpo.uncertainty(mean, std, "ensemble_var")
    assert {t.device.type for t in (next_obs, rew, mean, std, u)} == {device.type}
    assert next_obs.shape == (256, 3) and rew.shape == u.shape == (256,) and mean.shape == std.shape == (5, 256, 4)
    assert bool(torch.isfinite(u).all())


def test_rollout_on_the_device_stops_rows_at_termination(files, device):
    orpo = files["orpo"]
    model = orpo.EnsembleDynamics(11, 3, (16,), 3, 2).to(device)
    start = torch.zeros(50, 11, device=device)
    terminal = lambda s: torch.arange(len(s), device=s.device) % 2 == 0
    args = SimpleNamespace(uncertainty="ensemble_std", lambda_o=0.1, lambda_p=1.0)
    with Check("the rollout", device, count_masks=True) as check:
        out = orpo.rollout(model, lambda s: torch.zeros(len(s), 3, device=s.device), start, 3, terminal,
                           partial(orpo.relabel, args=args))  # fmt: skip
    assert len(out["obs"]) == 50 + 25 + 12 and float(out["done"].sum()) == 25 + 13 + 6
    assert {v.device.type for v in out.values()} == {device.type}
    fields = {"obs", "act", "rew", "u", "rew_o", "rew_p", "next_obs", "done"}  # ORPO's relabel: u, r^o, r^p
    assert set(out) == fields | {"first_act", "nonfinite"}
    assert check.masks == 3 * (len(fields) + 1)


# ---------------------------------------------------------------- resume
def test_resume_on_the_device_continues_exactly(files, hopper_data_dir, tmp_path, device):
    """A run stopped after epoch 1 and resumed (networks, optimisers, buffers and RNG states restored on the device,
    the run's own ensemble read back from its dynamics.pt, not fitted again) ends with the uninterrupted run's
    numbers."""
    orpo = files["orpo"]
    argv = [*device_tiny(device), "--env", "hopper-random-v2", "--data-dir", hopper_data_dir[0], "--seed", "7"]
    straight = orpo.main(tyro.cli(orpo.Args, args=[*argv, "--runs-dir", str(tmp_path / "a")]))
    stopped = orpo.main(tyro.cli(orpo.Args, args=[*argv, "--runs-dir", str(tmp_path / "b"), "--stop-after-epochs",
                        "1"]))  # fmt: skip
    assert not stopped["finished"] and stopped["epochs"] == 1
    cuda = "--cuda" if device.type == "cuda" else "--no-cuda"
    assert os.path.isfile(os.path.join(stopped["run_dir"], "dynamics.pt")), "the run kept no copy of its ensemble"
    # as plumbing.cli does: the run's saved flags, this invocation's --cuda
    args = plumbing.resumed(
        tyro.cli(orpo.Args, args=["--resume", stopped["run_dir"], cuda]), ["--resume", stopped["run_dir"], cuda]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(orpo, "fit_dynamics", lambda *a, **k: pytest.fail("the resumed run fitted its ensemble again"))
        resumed = orpo.main(args)
    assert resumed["finished"] and resumed["device"] == straight["device"] == device.type
    rows = {}
    for key, summary in (("a", straight), ("b", resumed)):
        with open(os.path.join(summary["run_dir"], "metrics.csv")) as f:
            rows[key] = list(csv.DictReader(f))
    assert len(rows["a"]) == len(rows["b"]) == 3
    for key, value in rows["a"][2].items():
        if not any(t in key for t in ("seconds", "SPS")):
            assert rows["b"][2][key] == value, key  # to the last digit


# ---------------------------------------------------------------- --cuda-graphs
# every file's driver: ORPO with both π^p (TD3+BC: its delayed actor; SAC: every step), MOPO with both policies, OROO,
# MBPO, COMBO, TD3+BC and CQL
GRAPH_FILES = [*FILES, ("td3bc", []), ("cql", ["--num-repeat", "2"])]


@pytest.mark.parametrize("name, flags", GRAPH_FILES, ids=[" ".join([n, *f]) for n, f in GRAPH_FILES])
def test_cuda_graphs_keep_the_eager_numbers(files, hopper_data_dir, tmp_path, monkeypatch, device, name, flags):
    """--cuda-graphs captures each epoch's gradient steps as CUDA graphs (the steps block's gradient_steps, the one
    driver of every file: the step with the actor and the step without it) and replays them: the same kernels and
    random numbers, so two epochs end with the eager run's metrics; per epoch, two graphs are captured for TD3+BC's
    delayed actor, one for SAC. A CPU
    ignores the flag, so this runs only on a GPU (benchmarks/gpu_check.sh)."""
    if device.type != "cuda":
        pytest.skip("CUDA graphs need a CUDA device (benchmarks/gpu_check.sh runs this test on one)")
    module = files[name]
    captured = []
    graph_class = torch.cuda.CUDAGraph
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: captured.append(graph_class(*a, **k)) or captured[-1])
    argv = [*file_tiny(module, device), "--env", "hopper-random-v2", "--data-dir", hopper_data_dir[0], "--seed", "3"]
    argv += ["--eval-every", "2", *flags]  # one evaluation, after epoch 2: the GPU check's time goes to the updates
    rows = {}
    for mode, extra in (("eager", ["--no-cuda-graphs"]), ("graphs", ["--cuda-graphs"])):
        before = len(captured)
        summary = module.main(tyro.cli(module.Args, args=[*argv, "--runs-dir", str(tmp_path / mode), *extra]))
        assert summary["finished"] and summary["device"] == "cuda", summary
        td3 = name == "td3bc" or "td3bc" in flags or name == "orpo" and "sac" not in flags  # a delayed actor
        assert len(captured) - before == ((2 if td3 else 1) * 2 if mode == "graphs" else 0)  # per epoch; none eagerly
        with open(os.path.join(summary["run_dir"], "metrics.csv")) as f:
            rows[mode] = list(csv.DictReader(f))
    assert len(rows["eager"]) == len(rows["graphs"]) == (2 if name in ("td3bc", "cql") else 3)  # + the fit's row 0
    for eager, graphs in zip(rows["eager"], rows["graphs"]):
        assert eager.keys() == graphs.keys(), eager["epoch"]
        for key, value in eager.items():
            if value and not any(t in key for t in ("seconds", "SPS")):
                assert float(graphs[key]) == pytest.approx(float(value), rel=1e-4, abs=1e-6), (name, eager["epoch"],
                             key)  # fmt: skip


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("period, n, first", [(1, 20, 0), (2, 20, 0), (2, 4, 40), (3, 17, 7), (3, 3, 0), (4, 9, 2),
                         (3, 2, 0)])  # fmt: skip
def test_gradient_steps_bookkeeping_with_a_stand_in_for_cuda_graphs(files, monkeypatch, period, n, first, graphs):
    """What a CPU can check of the steps block (gradient_steps and cuda_graph) and of --cuda-graphs, with torch.cuda's
    graphs and streams replaced by stand-ins (a capture runs the step's Python once and records its kernels, a replay
    runs them; the kernels count the device's steps and refill the step's outputs, as a real graph's do):
      - global steps first+1 .. first+n run in order, the actor's on exactly the multiples of `period` (TD3's delay:
        the count runs on across epochs), whatever mix of eager steps and replays runs them;
      - eagerly: every step runs as it is, on the current stream; with graphs: at least 3 warm-up steps, of every kind
        the replays use, on a side stream; then the step with and (period > 1) the step without the actor captured once each and
        replays for the rest (nothing captured when no step is left after the warm-up);
      - a side stream starts after the current stream's work (the rollouts' rows, the weights) and the current stream
        waits for it before anything else runs on it (CUDA's recipe for capturing: side.wait_stream(current) before
        the warm-up, current.wait_stream(side) after it), also when no capture follows;
      - Adam's groups are capturable during the captures only;
      - the means come back as floats: each statistic over the steps that reported it (the actor's over its steps)."""
    orpo = files["orpo"]
    seen = {"captures": [], "capturable": [], "capturing": None, "stream": None, "events": []}
    policy = torch.nn.Module()
    policy.optim = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])

    class Graph:
        def __init__(self):
            self.kernels = []

        def replay(self):
            seen["events"].append(("replay", default))
            for kernel in self.kernels:
                kernel()

    @contextlib.contextmanager
    def capture(graph):
        seen["events"].append(("capture", default))
        seen["capturable"].append(policy.optim.param_groups[0]["capturable"])
        seen["capturing"] = graph
        try:
            yield
        finally:
            seen["capturing"] = None

    class Stream:
        def wait_stream(self, other):
            seen["events"].append(("wait", self, other))

    @contextlib.contextmanager
    def on_stream(stream):
        seen["stream"] = stream
        try:
            yield
        finally:
            seen["stream"] = None

    default = Stream()
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: seen["stream"] or default)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)

    device_steps, ran = torch.tensor(float(first)), []  # the device's step count; (step, actor, stream) per step run

    def step(actor_step):  # like a method's gradient_step: prefixed statistics, the actor's on actor steps only
        out = {"losses/critic_loss": torch.zeros(())} | ({"losses/actor_loss": torch.zeros(())} if actor_step else {})

        def kernels():
            device_steps.add_(1)
            ran.append((int(device_steps), actor_step, seen["stream"] or default))
            out["losses/critic_loss"].copy_(device_steps)
            if actor_step:
                out["losses/actor_loss"].copy_(10 * device_steps)

        if seen["capturing"] is not None:
            seen["capturing"].kernels.append(kernels)
            seen["captures"].append(actor_step)
        else:
            seen["events"].append(("step", seen["stream"] or default))
            kernels()
        return out

    means = orpo.gradient_steps(step, first, n, period, graphs, [policy])

    steps = range(first + 1, first + n + 1)
    assert [(g, actor) for g, actor, _ in ran] == [(g, g % period == 0) for g in steps]
    events, eager = seen["events"], [e for e in seen["events"] if e[0] == "step"]
    sides = {stream for _, stream in eager} - {default}
    assert len(sides) <= graphs  # eagerly, the current stream only
    for side in sides:  # the warm-up's stream: it starts after the current stream's work, which then waits for it
        first_use, last_use = events.index(("step", side)), max(i for i, e in enumerate(events) if e == ("step", side))
        assert ("wait", side, default) in events[:first_use], "the side stream did not wait for the current one"
        assert ("wait", default, side) in events[last_use:], "the current stream never waits for the side stream"
        join = events.index(("wait", default, side), last_use)
        assert all(e[1] is not default for e in events[last_use:join]), "work on the current stream before the join"
    replays = [e for e in events if e[0] == "replay"]
    if replays:  # the warm-up: the leading eager steps, at least 3, of every kind replayed; then replays only
        warmup = len(eager)
        assert warmup >= 3 and all(stream in sides for _, stream in eager) and len(replays) == n - warmup
        assert {actor for _, actor, _ in ran[warmup:]} <= {actor for _, actor, _ in ran[:warmup]}
    assert sorted(seen["captures"]) == (
        sorted({period == 1, True}) if replays else []
    )  # period 1: the actor always steps
    assert (graphs and n > 3 + period) <= bool(replays)  # enough steps are replayed
    assert seen["capturable"] == [True] * len(seen["captures"]) and policy.optim.param_groups[0]["capturable"] is False
    actor_steps = [g for g in steps if g % period == 0]
    expected = {"losses/critic_loss": sum(steps) / n}
    expected |= {"losses/actor_loss": 10 * sum(actor_steps) / len(actor_steps)} if actor_steps else {}
    assert means == pytest.approx(expected) and all(type(v) is float for v in means.values())
