"""What every script beside the algorithm files shares (benchmarks/, toy/, datasets/): plumbing's error types (a
UserError exits 1, a UsageError 2, so an error of the algorithms' plumbing reads the same inside a script), flags
parsed with one-line errors, the command-line wrapper, atomic files, what a run records of its code and data (git
revision, data fingerprint), the command that starts a method file's run (through benchmarks/launch.py) and the
launchers' ensemble cache.

    from toolbox import UserError, UsageError, algorithm, cli, write_json, read_json, replace_atomically
"""

import contextlib
import errno
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the one place benchmarks/ puts the repo's folders on the path (every script here imports toolbox first): plumbing.py,
# as the algorithm files import it, and the dataset scripts (collect.py's load_policy, its neighbour common.py)
sys.path[:0] = [os.path.join(ROOT, "algorithms"), os.path.join(ROOT, "datasets")]
from plumbing import UsageError, UserError, parse_args, read_json, resolve_task, save  # noqa: E402

# what starts a method file's run in the lab: the launcher wraps its main with the lab's records (benchmarks/launch.py)
LAUNCHER = os.path.join(ROOT, "benchmarks", "launch.py")

_TMP_COUNT, _LOADING = itertools.count(), threading.RLock()


def device_name(device):
    """The GPU's or the CPU's model, with its cores and torch threads: every result says what it ran on."""
    import torch  # here: the scripts that never start a run need no torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = "CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:  # not Linux: no model name
        cpu = next((line.split(":")[1].strip() for line in f if line.startswith("model name")), cpu)
    return f"{cpu} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def numerics_env() -> dict:
    """The environment variables set that change which code a CPU run's arithmetic takes, and so its numbers: oneMKL
    picks its matrix multiply by CPU vendor, and a preloaded shim or MKL_CBWR changes the path (docs/data.md)."""
    return {k: os.environ[k] for k in ("LD_PRELOAD", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
            if k in os.environ}  # fmt: skip


def _tmp_name(path: str, suffix: str = ".tmp") -> str:
    """A temporary name beside path, unique (pid and a count): two writers of one file never move each other's half."""
    return f"{path}.{os.getpid()}.{next(_TMP_COUNT)}{suffix}"


def write_json(obj, path: str, default: Optional[Callable] = None) -> None:
    """Strict JSON, atomically, the scripts' one JSON writer: a NaN or an infinity is written as null (json.dump would
    write NaN, not JSON); `default` turns other objects into JSON (json.dump's). Its temporary name is _tmp_name's: a
    grid's records, written by two jobs at once, never get half a file."""

    def finite(x):
        if isinstance(x, dict):
            return {k: finite(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [finite(v) for v in x]
        return None if isinstance(x, float) and not math.isfinite(x) else x

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(finite(obj), f, indent=2, allow_nan=False, default=default)

    replace_atomically(path, write)


__all__ = ["UserError", "UsageError", "algorithm", "atomic_save", "cli", "file_fingerprint", "git_revision",
           "help_flags", "launch_command", "read_json", "replace_atomically", "unwritable_folder", "write_json",
           "write_text"]  # fmt: skip


def launch_command(script: str, *flags: str) -> list[str]:
    """The command that runs algorithms/SCRIPT.py (a path) with `flags` through the launcher, so the run records what
    the lab reads (config.json's provenance, invocations.jsonl, run.lock)."""
    return [sys.executable, LAUNCHER, script, *flags]


def method_argv(cmd: list[str]) -> list[str]:
    """[script, flags...] of a run's command, launched ([python, launch.py, script, ...]) or not ([python, script, ...]):
    what the run records as config.json's `_command`."""
    return cmd[2:] if os.path.basename(cmd[1]) == os.path.basename(LAUNCHER) else cmd[1:]


def failed_write(e: BaseException) -> bool:
    """torch.save's RuntimeError for a write that failed (a full disk): it wraps the OSError, or says so."""
    return isinstance(e, RuntimeError) and (isinstance(e.__context__, OSError) or "write" in str(e))


def atomic_save(obj, path: str) -> None:
    """plumbing.save (a .tmp renamed when complete), a failed write always an OSError naming the file: torch.save wraps
    the OSError of a full disk in a RuntimeError."""
    try:
        save(obj, path)
    except RuntimeError as e:
        if not failed_write(e):
            raise
        cause = e.__context__
        why = getattr(cause, "strerror", None) or str(e).splitlines()[0]
        raise OSError(getattr(cause, "errno", None) or errno.ENOSPC, f"could not write {path} ({why})") from None


def file_fingerprint(path: str) -> str:
    """Size and a hash of the first and last MiB: enough to notice a dataset file replaced under a run (a Minari id
    stands for itself)."""
    if path.startswith("minari:"):
        return path
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head, _, tail = f.read(1 << 20), f.seek(max(0, size - (1 << 20))), f.read(1 << 20)
    return f"{size}:{hashlib.sha256(head + tail).hexdigest()[:16]}"


def git_revision(script: str) -> Optional[str]:
    """The commit of the code that runs (`git describe --always --dirty`), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=os.path.dirname(script),
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def algorithm(script: str, folder: str = "algorithms"):
    """algorithms/SCRIPT.py as a module, loaded once per process, as `python algorithms/SCRIPT.py` has it (plumbing.py
    importable beside it; the files import without side effects): its Args, presets and method blocks. `folder`:
    datasets/ (its neighbours importable too: datasets/collect.py imports common.py)."""
    name = f"_{folder}_{script}"
    with _LOADING:  # two threads of a launcher (toolbox.cached_ensemble) never see a half-loaded module
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, folder, f"{script}.py"))
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def replace_atomically(path: str, write: Callable[[str], object], suffix: str = ".tmp") -> None:
    """write(tmp) then rename tmp to path: never half a file. The temporary name is plumbing's (unique: pid and a
    count), so two processes sharing a folder (compare.py's rows, a grid's jobs) never move each other's half-written
    file; `suffix` keeps the extension a writer reads its format from (matplotlib's savefig: .tmp.png)."""
    tmp = _tmp_name(path, suffix)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """A text file (UTF-8), atomically."""

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    replace_atomically(path, write)


def cli(main: Callable, args_class: type, argv: list[str], interrupted: str | Callable[[KeyboardInterrupt], str] = "",
        sigterm: bool = False, errors: tuple = ()) -> int:  # fmt: skip
    """A script's command line: parse the flags (the algorithm files' parser: their --help layout, a bad flag one line
    and exit 2), run main(args); an error is one line per problem and its exit status (a UserError's code, 1 for a
    failed write or one of `errors`), Ctrl-C one line (`interrupted`, a text or a function of the interrupt, else how
    to resume) and 128 + the signal (a KeyboardInterrupt raised with the signal's number, else SIGINT: 130).
    `sigterm`: SIGTERM (what Slurm or `kill` sends) stops main as Ctrl-C does while it runs."""
    try:
        args = parse_args(args_class, argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except SystemExit as e:  # --help
        return e.code or 0
    previous = signal.signal(signal.SIGTERM, _stop) if sigterm else None
    try:
        return main(args)
    except BrokenPipeError:  # `| head`: the reader is gone, so is the output
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (UserError, OSError, *errors) as e:  # one problem a line, each as plumbing.cli prints it
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return getattr(e, "code", 1)
    except KeyboardInterrupt as e:  # outside a run (a run's own Ctrl-C is handled where it runs)
        print((interrupted(e) if callable(interrupted) else interrupted) or "interrupted: run the same command again "
              "to resume", file=sys.stderr)  # fmt: skip
        return 128 + (e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT)
    finally:
        if previous is not None:  # None also where the handler before was not set from Python
            signal.signal(signal.SIGTERM, previous)


@functools.cache
def help_flags(path: str) -> frozenset[str]:
    """The flags a script takes, read from its --help ("--x" and "--no-x"): older and newer files alike."""
    out = subprocess.run(
        [sys.executable, path, "--help"], capture_output=True, text=True, env=os.environ | {"COLUMNS": "200"}
    )
    if out.returncode != 0:
        raise UserError(f"{path} --help failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return frozenset(f"--{f}" for pair in re.findall(r"^\W*--([a-z0-9-]+)(?:, --([a-z0-9-]+))?", out.stdout, re.M)
                     for f in pair if f)  # fmt: skip


def _stop(signum, frame):
    raise KeyboardInterrupt(signum)  # SIGTERM stops the script as Ctrl-C does (its runs checkpoint first)


def unwritable_folder(folder: str) -> str | None:
    """Why no file can be made in `folder` (created where missing), or None (compare.py's and speed.py's --out)."""
    parent = os.path.abspath(folder)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a folder"
    try:  # a probe, not os.access: root passes os.access on a read-only mount
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        return f"{parent} is not writable ({e.strerror})"
    return None


# ------------------------------------------------------------------------------------------------ the launchers' cache
# the flags that decide an ensemble fit: with the data file's fingerprint, the key of an entry of a launcher's cache
DYNAMICS_KEY = (
    "num_ensemble", "num_elites", "dynamics_hidden_dims", "dynamics_bf16", "dynamics_lr", "dynamics_batch_size",
    "dynamics_max_epochs", "dynamics_patience", "dynamics_holdout_ratio", "dynamics_max_holdout", "seed",
)  # fmt: skip


def ensemble_entry(cache: str, cmd: list[str]) -> Optional[str]:
    """The cache file of the ensemble that the run `cmd` ([python, launch.py, algorithms/SCRIPT.py, FLAGS...], or
    without the launcher) fits, one per (data file, DYNAMICS_KEY's flags); None for a run that fits none (td3bc.py, a
    --resume, a --load-dynamics-path)."""
    import dataclasses

    script, *flags = method_argv(cmd)
    Args = algorithm(os.path.splitext(os.path.basename(script))[0]).Args
    if not set(DYNAMICS_KEY) <= {f.name for f in dataclasses.fields(Args)}:
        return None
    if any(w.split("=")[0] in ("--resume", "--load-dynamics-path") for w in flags):
        return None
    with _LOADING:  # tyro's caches are not thread-safe: a launcher's threads parse one at a time
        args = parse_args(Args, flags)
    try:
        path = resolve_task(args.env, args.dataset_path, args.eval_env, args.data_dir)[1]
    except UserError:  # the run itself says what is wrong with its data
        return None
    key = {"data": file_fingerprint(path), **{k: vars(args)[k] for k in DYNAMICS_KEY}, "format": 1}
    digest = hashlib.sha256(json.dumps(json.loads(json.dumps(key)), sort_keys=True).encode()).hexdigest()[:20]
    return os.path.join(os.path.abspath(cache), f"{digest}.pt")  # the digest the runs' own --dynamics-cache used


def share_ensemble(entry: str, run_dir: Optional[str]) -> bool:
    """Copy run_dir's dynamics.pt into the cache as `entry` once it is there (atomically); True when the entry exists.
    An entry of the runs' former --dynamics-cache gets the seed it was fitted with, so a run that loads it takes its RNG
    state too (plumbing's load_or_fit) and continues as the run that fitted it did."""
    import shutil

    import torch

    if not os.path.isfile(entry) and run_dir and os.path.isfile(os.path.join(run_dir, "dynamics.pt")):
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        replace_atomically(entry, lambda tmp: shutil.copyfile(os.path.join(run_dir, "dynamics.pt"), tmp))
    if not os.path.isfile(entry):
        return False
    try:  # a truncated or foreign entry: one line naming it, not a traceback in a job's log
        saved = torch.load(entry, map_location="cpu", weights_only=True)
        if not isinstance(saved, dict) or "model" not in saved:
            raise ValueError("no 'model' in it")
        seed = saved["seed"] if "seed" in saved else saved["key"]["seed"]
    except Exception as e:  # torch raises many types for truncated, corrupt or crafted files
        why = f"{type(e).__name__}: {(str(e).strip() or 'unreadable').splitlines()[0].split('. ')[0]}"
        raise UserError(f"{entry}: a damaged or foreign ensemble cache entry ({why}); delete it (the next run that "
                        "needs it refits it)") from None  # fmt: skip
    if "seed" not in saved:
        replace_atomically(entry, lambda tmp: torch.save(saved | {"seed": seed}, tmp))
    return True


@contextlib.contextmanager
def cached_ensemble(cache: Optional[str], cmd: list[str]):
    """`with cached_ensemble(cache, cmd) as cmd:` run the command inside: it loads its ensemble from the cache
    (--load-dynamics-path ENTRY) when the entry is there; else the run fits it, and a thread copies its dynamics.pt into
    the cache as soon as the run has written it, then lets the other runs of that entry (waiting here on its lock, in
    any process) load it. A run that ends without one lets the next waiter fit it."""
    import glob

    import filelock

    entry = ensemble_entry(cache, cmd) if cache else None
    if entry is None:
        yield cmd
        return
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    lock = filelock.FileLock(entry + ".lock", thread_local=False)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        print(f"waiting for another run fitting the ensemble {entry}", flush=True)
        lock.acquire()
    try:
        shared = share_ensemble(entry, None)
    except BaseException:  # a bad entry: the runs waiting on its lock get the same line
        lock.release()
        raise
    if shared:
        lock.release()
        yield cmd + ["--load-dynamics-path", entry]
        return
    script, *flags = method_argv(cmd)
    with _LOADING:
        runs_dir, done = parse_args(algorithm(os.path.splitext(os.path.basename(script))[0]).Args, flags).runs_dir, []

    def watch():  # the run's directory is the one whose config.json records this command (the launcher writes it)
        try:
            while not os.path.isfile(entry):
                for config in glob.glob(os.path.join(glob.escape(runs_dir), "*", "config.json")):
                    if read_json(config).get("_command") == [script, *flags]:
                        share_ensemble(entry, os.path.dirname(config))
                if done:
                    break
                time.sleep(1)
        finally:
            lock.release()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield cmd
    finally:
        done.append(True)
        thread.join()
