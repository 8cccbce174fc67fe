"""A method file's run as the lab keeps it: the file's own `main`, flags and plumbing.cli, wrapped in what the lab's
readers (compare.py, scores.py, budget.py, report.py) and its long runs need and a copier of the file does not.

    python benchmarks/launch.py algorithms/orpo.py --env hopper-medium-v2    # then the file's own flags, as ever

No method file is edited: the launcher loads it (toolbox.algorithm) and replaces names in its module (open_run, finish,
save, resolve_task, apply_presets, check_finite, load_dynamics, fit_dynamics, ReplayBuffer) with wrappers that call
the originals and add:
- RUN_DIR/run.lock, an exclusive flock holding the holder's pid for the run's lifetime: a second process on the same
  run directory (two --resume) is refused in one line;
- provenance: config.json's _command, _typed, _filled, _git_revision, _dataset {path, fingerprint} and _dynamics
  {source, path, holdout_mse}; invocations.jsonl, one line per start and resume (its threads, CPU and the environment
  variables that change a CPU's arithmetic path); summary.json's invocations, dynamics
  and wall_seconds_this_invocation; a run that turned non-finite or hit a fault of the machine gets a "failed" one;
- --resume refused once the dataset file changed (its fingerprint);
- a fault of the operating system (disk full, read-only, a name too long, the run directory deleted) in one line that
  names the fix, exit 1, no traceback, the last checkpoint intact (plumbing's writes are atomic);
- a buffer larger than the memory free refused before it is allocated;
- the ensemble fit resumable: its state saved after every epoch (RUNS_DIR/.fit-DIGEST.pt), so a fit stopped part-way
  (a signal, a kill, a session's end) goes on from its last epoch when the same command runs again, and ends as the
  uninterrupted fit would have (the file's own fit keeps no part-way state: hours on a CPU, none on a GPU).
"""

import contextlib
import csv
import errno
import fcntl
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import threading
import time
from dataclasses import asdict, fields
from typing import Optional

import torch
from tqdm.auto import tqdm

import toolbox  # noqa: E402  (puts algorithms/ on the path: plumbing)
from toolbox import ROOT, UserError, atomic_save, file_fingerprint, git_revision, read_json  # noqa: E402
from plumbing import Stop, cli, load, rng_state, script_name, set_rng_state  # noqa: E402


KEPT = ("checkpoint.pt", "dynamics.pt", "metrics.csv")  # what a resume uses: a failed start without them leaves no dir
FIXES = {errno.ENOSPC: "free disk space", errno.EDQUOT: "free disk space (the disk quota is full)",
         errno.ENAMETOOLONG: "a file name is too long: shorten --runs-dir, --exp-name or the dataset's file name",
         errno.EROFS: "pass a writable --runs-dir (this file system is read-only)",
         **dict.fromkeys((errno.EACCES, errno.EPERM, errno.ENOTDIR), "pass a writable --runs-dir")}  # fmt: skip
METHODS = sorted(
    f[:-3] for f in os.listdir(os.path.join(ROOT, "algorithms")) if f.endswith(".py") and f != "plumbing.py"
)


class Launch:
    """What the wrappers note of the one run this process launches."""

    def __init__(self, argv: list[str], module, args_class, hint: list[str]):
        self.argv, self.module, self.t0, self.hint = argv, module, time.time(), hint  # argv: [script, flags...]
        names = {w[2:].split("=")[0].replace("-", "_") for w in argv[1:] if w.startswith("--")}
        self.typed = {f.name for f in fields(args_class) if f.name in names or "no_" + f.name in names}
        self.args, self.task, self.dataset, self.filled, self.dynamics = None, None, None, {}, None
        self.run_dir, self.created, self.lock, self.nonfinite = None, False, None, False
        self.part = self.part_lock = None  # the fit's part-way state and the fd of its lock
        self.revision = git_revision(module.__file__)

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    def resume_hint(self) -> str:
        return f"continue with: python {shlex.join(self.hint)} --resume {shlex.quote(self.run_dir)}"


RUN: Optional[Launch] = None  # the run of this process; the wrappers pass through when there is none
HOOKED: set[str] = set()


# ------------------------------------------------------------------------------------------------------ the lock
def lock(run_dir: str) -> None:
    """RUN_DIR/run.lock, flocked for the run's lifetime, holding our pid (scores.py's lock_holder reads it)."""
    path = os.path.join(run_dir, "run.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        what = "is a directory" if os.path.isdir(path) else f"cannot be opened for writing ({e.strerror})"
        raise UserError(f"{path} {what}: a run holds this file while it writes {run_dir}; remove it, or make the "
                        "folder writable") from None  # fmt: skip
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise UserError(f"{run_dir} is in use by another process ({path} is held{f' by pid {pid}' * bool(pid)}); "
                        "stop it first") from None  # fmt: skip
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    RUN.lock = (fd, path)


def release() -> None:
    """run.lock removed while held (a waiter then finds it gone), then let go; the fit's part lock let go."""
    if RUN.lock is not None:
        fd, path = RUN.lock
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)
        RUN.lock = None
    if RUN.part_lock is not None:  # the fit's part-way state stays for the same command; its lock is let go
        with contextlib.suppress(OSError):
            os.close(RUN.part_lock)
        RUN.part_lock = None


# ---------------------------------------------------------------------------------------------------- the records
def note_dynamics() -> None:
    """config.json's _dynamics, once the run directory and the ensemble's source are both known."""
    if RUN.run_dir is not None and RUN.dynamics is not None:
        atomic_save(read_json(RUN.path("config.json")) | {"_dynamics": RUN.dynamics}, RUN.path("config.json"))
        RUN.dynamics = None


def summary_records() -> dict:
    """What summary.json adds to plumbing's: every invocation, the ensemble's source, the machine's name (the last
    invocation's: the CPU's model with its cores and threads, or the GPU's), this invocation's wall time."""
    with contextlib.suppress(OSError, ValueError), open(RUN.path("invocations.jsonl")) as f:
        invocations = [json.loads(line) for line in f if line.strip()]
    invocations, dynamics = locals().get("invocations", []), read_json(RUN.path("config.json")).get("_dynamics")
    return {"invocations": invocations, "dynamics": dynamics, "device_name": (invocations or [{}])[-1].get("device_name"),
            "wall_seconds_this_invocation": time.time() - RUN.t0}  # fmt: skip


def write_summary(extra: dict) -> dict:
    summary = read_json(RUN.path("summary.json")) | summary_records() | extra
    atomic_save(summary, RUN.path("summary.json"))
    return summary


def removed_new_dir() -> bool:
    """A run that started here and failed before it made anything a resume uses (e.g. its ensemble fit diverged)
    leaves no run directory."""
    if not (RUN.created and os.path.isdir(RUN.run_dir)) or any(os.path.exists(RUN.path(f)) for f in KEPT):
        return False
    release()
    shutil.rmtree(RUN.run_dir, ignore_errors=True)
    return True


def failed(error: str) -> None:
    """A run that failed: its summary.json says "failed" and why (scores.py does not retry it unless told to)."""
    if RUN.run_dir is None or not os.path.isdir(RUN.run_dir) or removed_new_dir():
        return
    with contextlib.suppress(OSError, ValueError), open(RUN.path("metrics.csv")) as f:
        epochs = max((int(float(r["epoch"])) for r in csv.DictReader(f)), default=0)
    args, task = RUN.args, RUN.task
    known = {"env": task and task.name, "algorithm": script_name(type(args)),
             "exp_name": args.exp_name, "seed": args.seed, "run_dir": RUN.run_dir, "epochs": locals().get("epochs", 0)}  # fmt: skip
    with contextlib.suppress(OSError):  # a full disk: the one line still says what happened
        write_summary(known | {"status": "failed", "finished": False, "error": error})


# ---------------------------------------------------------------------------------------------------- the wrappers
def resolve_task(real, env, dataset_path, eval_env, data_dir):
    """The dataset's path and fingerprint; a resume refused once the file changed since the run started."""
    task, path = real(env, dataset_path, eval_env, data_dir)
    RUN.task, fingerprint = task, file_fingerprint(path)
    RUN.dataset = {"path": path if path.startswith("minari:") else os.path.abspath(path), "fingerprint": fingerprint}
    saved = (read_json(os.path.join(RUN.run_dir, "config.json")).get("_dataset") or {}) if RUN.args.resume else {}
    if saved.get("fingerprint", fingerprint) != fingerprint:
        raise UserError(f"the dataset {path} changed since {RUN.run_dir} started (size:hash {saved['fingerprint']} "
                        f"-> {fingerprint}); resume with the original file or start a new run")  # fmt: skip
    return task, path


def apply_presets(real, args, task):
    """config.json's _filled: what the presets filled (the flags left unset)."""
    unset = {k for k, v in asdict(args).items() if v is None}
    args, preset = real(args, task)
    RUN.filled = {k: v for k, v in asdict(args).items() if k in unset and v is not None and k != "threads"}
    return args, preset


def open_run(real, args, task, preset, n):
    """A new run directory locked and its provenance added to config.json; every start and resume a line of
    invocations.jsonl."""
    run_dir, ckpt, writer = real(args, task, preset, n)
    if args.resume is None:
        RUN.run_dir, RUN.created = run_dir, True
        lock(run_dir)
        config = read_json(RUN.path("config.json")) | {"_dataset": RUN.dataset, "_typed": sorted(RUN.typed),
                 "_filled": RUN.filled, "_command": RUN.argv, "_git_revision": RUN.revision}  # fmt: skip
        atomic_save(config, RUN.path("config.json"))
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "start_epoch": ckpt["epoch"],
              "torch_threads": torch.get_num_threads(), "device_name": toolbox.device_name(device), "command": RUN.argv,
              "git_revision": RUN.revision, "numerics_env": toolbox.numerics_env()}  # fmt: skip
    with open(RUN.path("invocations.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    note_dynamics()  # an ensemble loaded before the run directory was made
    return run_dir, ckpt, writer


def load_dynamics(real, model, path, seed):
    metrics = real(model, path, seed)
    if RUN.args.resume is None or path != os.path.join(RUN.args.resume, "dynamics.pt"):  # not the run's own copy
        RUN.dynamics = {"source": "loaded", "path": os.path.abspath(path),
                        "holdout_mse": metrics.get("dynamics/holdout_mse")}  # fmt: skip
        note_dynamics()
    return metrics


def fit_dynamics(real, model, data, **settings):
    RUN.part = part = fit_path(data["obs"].device)
    try:  # one process at a time keeps a key's part-way state; another of the same key fits without one
        RUN.part_lock = os.open(part + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(RUN.part_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if RUN.part_lock is not None:
            os.close(RUN.part_lock)
        RUN.part = part = RUN.part_lock = None
    metrics = resumable_fit(RUN.module, part, model, data, **settings)
    RUN.dynamics = {"source": "fitted", "holdout_mse": metrics.get("dynamics/holdout_mse")}
    note_dynamics()
    return metrics


def save(real, obj, path):
    """Every file the run writes, atomically; once its dynamics.pt is written, the fit's part-way state goes."""
    atomic_save(obj, path)
    if RUN.part is not None and os.path.basename(path) == "dynamics.pt":
        drop_part()


def drop_part() -> None:
    """The fit's part-way state and its lock, once the run's dynamics.pt holds the fit (or the fit diverged)."""
    for path in (RUN.part, RUN.part + ".lock"):
        with contextlib.suppress(OSError):
            os.remove(path)
    if RUN.part_lock is not None:
        os.close(RUN.part_lock)
    RUN.part = RUN.part_lock = None


def check_finite(real, metrics, modules, epoch):
    try:
        return real(metrics, modules, epoch)
    except UserError:
        RUN.nonfinite = True  # a failed run, not one to resume
        raise


def finish(real, run_dir, args, task, rows, stop, seconds, preset, actor):
    """summary.json with the launcher's records; after a signal, the command that continues the run through here."""
    try:
        summary = real(run_dir, args, task, rows, stop, seconds, preset, actor)
    except Stop as e:
        write_summary({})
        raise Stop(e.signum, f"checkpoint saved; {RUN.resume_hint()}") from None
    return summary | write_summary({})


def replay_buffer(real):
    class ReplayBuffer(real):
        """The file's buffer, refused in one line before it is allocated when it needs more than the free memory."""

        def __init__(self, capacity, fields, device):
            check_memory(4 * capacity * sum(fields.values()), f"a buffer of {capacity:,} rows", device)
            super().__init__(capacity, fields, device)

    return ReplayBuffer


def check_memory(nbytes: int, what: str, device) -> None:
    """Refuse in one line, before any work, an allocation larger than the device's free memory."""
    device, free = torch.device(device), float("inf")  # not Linux: nothing to measure against
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
            free = next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), free)
    if nbytes > free:
        raise UserError(f"{what} needs {nbytes / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB free on the "
                        f"{device.type}; lower the flags that size it")  # fmt: skip


def hook(module) -> None:
    """Replace the module's names with the wrappers (once per module; with no run launched they pass through)."""
    if module.__name__ in HOOKED:
        return
    HOOKED.add(module.__name__)
    if hasattr(module, "ReplayBuffer"):
        module.ReplayBuffer = replay_buffer(module.ReplayBuffer)
    wrappers = (resolve_task, apply_presets, open_run, load_dynamics, fit_dynamics, check_finite, finish, save)
    for wrapper in (w for w in wrappers if hasattr(module, w.__name__)):
        real = getattr(module, wrapper.__name__)

        def wrapped(*a, real=real, wrapper=wrapper, **kw):
            return wrapper(real, *a, **kw) if RUN is not None else real(*a, **kw)

        setattr(module, wrapper.__name__, wrapped)


# -------------------------------------------------------------------------------------------- the fit, resumable
def fit_path(device) -> str:
    """Where the fit keeps its part-way state: in --runs-dir (a resumed run's: the folder holding it), named by what
    decides the fit (the data's fingerprint, the method file, the ensemble's flags, the seed and the device type, whose
    generators differ), so only the same command's fit goes on from it."""
    key = {"data": RUN.dataset["fingerprint"], "script": os.path.basename(RUN.module.__file__),
           "device": torch.device(device).type, **{k: vars(RUN.args)[k] for k in toolbox.DYNAMICS_KEY}}  # fmt: skip
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    folder = os.path.dirname(os.path.abspath(RUN.args.resume)) if RUN.args.resume else RUN.args.runs_dir
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f".fit-{digest}.pt")


def resumable_fit(m, part, model, data, lr, batch_size, max_epochs, patience, holdout_ratio, max_holdout):
    """The method file `m`'s fit_dynamics step for step (its random draws in the same order: the same ensemble, metrics and
    RNG state after it; tests/test_launch.py), with every epoch's end saved: the permutation, the bootstrap, the
    model, its optimiser, each member's best weights and error, the counters and the RNG states (part None: none). An
    epoch cut short is done again from the saved state, as it would have run."""
    if model.bf16 and data["obs"].is_cuda and not torch.cuda.is_bf16_supported():
        raise UserError("--dynamics-bf16: this GPU has no bfloat16 support (compute capability 8.0+); drop the flag")
    inputs = torch.cat([data["obs"], data["act"]], dim=-1)
    targets = torch.cat([data["next_obs"] - data["obs"], data["rew"]], dim=-1)
    n, E, dev = len(inputs), model.num_ensemble, inputs.device
    n_hold = min(int(n * holdout_ratio), max_holdout)
    if n_hold < 1 or n_hold >= n:
        raise UserError(f"--dynamics-holdout-ratio {holdout_ratio} holds out {n_hold} of {n} transitions")
    try:  # a damaged part, or one of other sizes or code: one line, and the fix
        saved = (
            load(part, "part-way ensemble fit", ("perm", "bootstrap", "epoch")) if part and os.path.isfile(part) else {}
        )
    except UserError as e:
        raise UserError(f"{str(e).split('; pass another file')[0]}; delete it (the fit then starts again)") from None
    perm = saved["perm"].to(dev) if saved else torch.randperm(n, device=dev)
    hold_x, hold_y = inputs[perm[:n_hold]], targets[perm[:n_hold]]
    train_x, train_y = inputs[perm[n_hold:]], targets[perm[n_hold:]]
    n_train = len(train_x)
    model.in_mean.copy_(train_x.mean(0))
    model.in_std.copy_(torch.where(train_x.std(0) < 1e-12, torch.ones_like(train_x[0]), train_x.std(0)))
    bootstrap = saved["bootstrap"].to(dev) if saved else torch.randint(n_train, (E, n_train), device=dev)
    optimizer = m.adam(model.param_groups(), lr)
    members = [p for layer in model.layers for p in (layer.weight, layer.bias)]
    best_params = [p.detach().clone() for p in members]
    best = torch.full((E,), float("inf"), device=dev)
    epoch, since_improved, nll, seconds = 0, 0, torch.full((), float("nan")), 0.0
    if saved:
        try:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            for p, s in zip(best_params, saved["best_params"], strict=True):
                p.copy_(s)
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise UserError(f"{part} does not fit this ensemble ({type(e).__name__}: {str(e).splitlines()[0]}); delete "
                            "it (the fit then starts again)") from None  # fmt: skip
        best, nll = saved["best"].to(dev), saved["nll"].to(dev)
        epoch, since_improved, seconds = saved["epoch"], saved["since_improved"], saved["seconds"]
        set_rng_state(saved["rng"])
        print(f"dynamics: the fit goes on after its epoch {epoch} ({part})", flush=True)
    t0 = time.time()
    with tqdm(desc="dynamics", unit="epoch", total=max_epochs, initial=epoch, leave=False) as bar:
        while since_improved < patience and epoch < (max_epochs or float("inf")):
            order = bootstrap.gather(1, torch.argsort(torch.rand(E, n_train, device=dev), dim=1))
            for start in range(0, n_train, batch_size):
                idx = order[:, start : start + batch_size]
                nll = m.dynamics_step(model, optimizer, train_x[idx], train_y[idx])
            with torch.no_grad():
                mse = ((model(hold_x)[0] - hold_y) ** 2).mean(dim=(1, 2))
                improved = torch.isinf(best) | ((best - mse) / best > 0.01)
                best = torch.where(improved, mse, best)
                for s, p in zip(best_params, members):
                    s.copy_(torch.where(improved.view(-1, 1, 1), p, s))
            since_improved = 0 if bool(improved.any()) else since_improved + 1
            epoch += 1
            state = {"perm": perm, "bootstrap": bootstrap, "model": model.state_dict(), "best_params": best_params,
                     "optimizer": optimizer.state_dict(), "best": best, "nll": nll, "epoch": epoch,
                     "since_improved": since_improved, "seconds": seconds + time.time() - t0, "rng": rng_state()}  # fmt: skip
            if part:
                atomic_save(state, part)
            bar.update(1)
            bar.set_postfix(best_member_holdout_mse=f"{best.min().item():.4f}")
    with torch.no_grad():
        for s, p in zip(best_params, members):
            p.copy_(s)
        model.elites.copy_(torch.argsort(best)[: len(model.elites)])
    mse = best[model.elites].mean().item()
    if not math.isfinite(mse):  # the same command would diverge again: no part-way state to go on from
        if part:
            drop_part()
        raise UserError(f"the ensemble fit diverged (holdout MSE {mse}); lower --dynamics-lr or check the dataset for "
                        "huge values")  # fmt: skip
    print(f"dynamics: elites' mean holdout MSE {mse:.4g} after {epoch} epochs")
    return {"dynamics/holdout_mse": mse, "dynamics/epochs": epoch, "dynamics/train_nll": nll.item(),
            "dynamics/fit_seconds": seconds + time.time() - t0}  # fmt: skip


# ------------------------------------------------------------------------------------------------------- the run
def fault(e: BaseException) -> str:
    """A fault of the operating system as one line naming the fix."""
    if RUN.run_dir is not None and not os.path.isdir(RUN.run_dir):
        return f"the run directory {RUN.run_dir} was deleted while the run was writing it ({e}); start the run again"
    said = e.strerror if isinstance(e, OSError) and e.filename is None and e.strerror else str(e).splitlines()[0]
    code = e.errno if isinstance(e, OSError) else errno.ENOSPC  # torch.save's RuntimeError: a write that failed
    why = f"{said}; {FIXES.get(code, 'free disk space or pass a writable --runs-dir')}"
    return why + (f"; {RUN.resume_hint()}" if RUN.run_dir is not None else "")


def launched(main):
    """`main` with the lock of a resumed run taken first, and its failures recorded and said in one line."""

    def run(args):
        RUN.args, RUN.t0, folder = args, time.time(), args.resume or args.runs_dir
        if why := toolbox.unwritable_folder(folder):  # before the data loads
            raise UserError(f"cannot write in {folder}: {why}; pass a writable --runs-dir")
        try:
            if args.resume is not None:
                RUN.run_dir = args.resume
                lock(args.resume)
            return main(args)
        except Stop as e:  # a signal before the epochs (in the fit): how to continue
            if not e.message and RUN.run_dir is None and RUN.part and os.path.isfile(RUN.part):
                raise Stop(e.signum, f"the ensemble fit's last epoch is kept in {RUN.part}; the same command goes on "
                           "from it") from None  # fmt: skip
            if e.message or RUN.run_dir is None or not os.path.isdir(RUN.run_dir):
                raise
            raise Stop(e.signum, RUN.resume_hint()) from None
        except (OSError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and not toolbox.failed_write(e):
                raise  # plumbing.cli's: out of memory one line, else a bug's traceback
            failed(why := fault(e))
            raise UserError(why) from None
        except UserError as e:
            failed(str(e)) if RUN.nonfinite else removed_new_dir()
            raise
        finally:
            release()

    return run


def main(argv: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    usage = f"usage: python benchmarks/launch.py algorithms/METHOD.py [its flags] (METHOD: {', '.join(METHODS)})"
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{usage}\n\nRuns a method file's main as `python algorithms/METHOD.py` does, with what a lab adds: run.lock,"
              " config.json's\nprovenance, invocations.jsonl, the dataset's fingerprint, one line for a fault of the "
              "machine (docs/runs.md).\n\n  -h, --help   this help; `python algorithms/METHOD.py --help` lists a "
              "method's flags", file=sys.stdout if argv else sys.stderr)  # fmt: skip
        sys.exit(0 if argv else 2)
    name = os.path.splitext(os.path.basename(argv[0]))[0]
    own = os.path.join(ROOT, "algorithms", f"{name}.py")
    if name not in METHODS or not os.path.isfile(argv[0]) or not os.path.samefile(argv[0], own):
        print(f"error: {argv[0]}: not a method file of this project's algorithms/; {usage[7:]}", file=sys.stderr)
        sys.exit(2)
    module = toolbox.algorithm(name)
    launch(module, module.main, module.Args, argv, [os.path.relpath(__file__), os.path.relpath(module.__file__)])


def launch(module, main, args_class, argv: list[str], hint: list[str]) -> None:
    """`main` (the module's, or a lab script's around it) parsed with `args_class` from argv[1:] and run as the lab
    keeps it, the module's names hooked; a resume is `python HINT... --resume RUN_DIR`."""
    global RUN
    hook(module)
    RUN, previous = Launch(argv, module, args_class, hint), threading.excepthook
    # TensorBoard's writer thread: its OSError (a full disk) is raised again in the main thread at its next write,
    # which says it in one line; the thread's own traceback is not printed
    threading.excepthook = lambda hook: None if issubclass(hook.exc_type, OSError) else previous(hook)
    sys.argv = argv  # as `python algorithms/METHOD.py FLAGS` has it: tyro's usage line names the method file
    try:
        cli(launched(main), args_class, argv[1:])
    finally:
        RUN, threading.excepthook = None, previous


if __name__ == "__main__":
    main()
