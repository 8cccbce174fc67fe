"""Script starts for the tests without paying for torch's import each time.

Most of the suite's CPU went into starting interpreters: 228 script starts in the default tier, ~5 s of CPU each, 3.3 s
of it `import torch` (measured: docs/development.md). A zygote is one Python per pytest worker that has imported the
third-party libraries once (torch, gymnasium, mujoco, h5py, tyro, tensorboard, scipy, ...) and forks a child per script
start. The child is a process of its own, as a fresh `python SCRIPT ARGS` would be: its own argv, working directory,
environment, stdout and stderr (files), exit status, signals and children; it runs the script as `__main__` and
imports every project module (plumbing, toolbox, the method file) fresh from the script's folder, so a copied file
runs its own copy. What it shares with the zygote is only the third-party modules already in memory; a test that
checks an interpreter's own start (import-time side effects, what a bare `python` finds) passes fresh=True to
run_script, as tests/test_zygote.py does to check that a forked start reads as a fresh one.
"""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading

PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "torch.utils.tensorboard", "gymnasium",
           "gymnasium.envs.mujoco", "mujoco", "h5py", "tyro", "tqdm.auto", "scipy.stats", "submitit")  # fmt: skip

# The zygote's own program: import PRELOAD, then for each request line fork a child that runs the script and answer
# its pid. The children run side by side (a test may start several at once) and are reaped by the kernel (SIGCHLD
# ignored); each writes its exit status into its job's rc file as it ends.
SERVE = r"""
import atexit, contextlib, importlib, json, os, runpy, signal, sys, threading, traceback
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional library missing here: the child imports it, or fails, as a fresh python would
answer = os.fdopen(int(sys.argv[1]), "w", buffering=1)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
base_path = list(sys.path[1:])
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a fresh python's: the script waits for its own children
            sys.stdin.close()
            answer.close()
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, job["out"]), (2, job["err"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [os.path.dirname(os.path.abspath(job["argv"][0]))] + extra + base_path
            sys.argv = list(job["argv"])
            try:
                runpy.run_path(job["argv"][0], run_name="__main__")
                code = 0
            except SystemExit as e:  # as the interpreter reads it: None is 0, a message is printed and 1
                code = 0 if e.code is None else e.code
                if not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads, run atexit
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            with open(job["rc"], "w") as f:
                f.write(str(code & 0xFF))
            os._exit(code & 0xFF)
    answer.write(json.dumps({"pid": pid}) + "\n")
"""


class Zygote:
    def __init__(self, env: dict):
        read, write = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE, str(write), *PRELOAD], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write,), env=env,
                                     text=True)  # fmt: skip
        os.close(write)
        self.answers = os.fdopen(read, "r")
        self.lock = threading.Lock()  # one request and its answer at a time; the children then run side by side

    def run(self, argv, cwd, env, timeout) -> subprocess.CompletedProcess:
        """subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout), forked. A child
        killed by a signal leaves no rc file and reads as -9."""
        with tempfile.TemporaryDirectory() as tmp:
            files = {k: os.path.join(tmp, k) for k in ("out", "err", "rc")}
            job = {"argv": argv[1:], "cwd": os.path.abspath(cwd or os.getcwd()), "env": env, **files}
            with self.lock:
                self.proc.stdin.write(json.dumps(job) + "\n")
                self.proc.stdin.flush()
                line = self.answers.readline()
            if not line:
                raise RuntimeError("the tests' zygote ended")
            pid = json.loads(line)["pid"]
            with contextlib.suppress(ProcessLookupError):  # ProcessLookupError: already ended and reaped
                with open(os.pidfd_open(pid), "rb", buffering=0) as ended:  # closed after the wait
                    if not select.select([ended], [], [], timeout)[0]:
                        os.kill(pid, signal.SIGKILL)
                        select.select([ended], [], [])
                        raise subprocess.TimeoutExpired(argv, timeout)
            read = {k: open(f, errors="replace").read() if os.path.exists(f) else "" for k, f in files.items()}
            return subprocess.CompletedProcess(argv, int(read["rc"] or -9), read["out"], read["err"])


# Linux (fork without the macOS runtime's fork-safety aborts, and pidfd_open to wait for a child that is not ours);
# elsewhere run_script starts a fresh interpreter each time, as before
ZYGOTE_HERE = sys.platform == "linux" and hasattr(os, "pidfd_open")
_zygote: Zygote | None = None
_starting = threading.Lock()


def zygote(env: dict) -> Zygote:
    """This worker's zygote, started on first use with the tests' base environment."""
    global _zygote
    with _starting:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = Zygote(env)
        return _zygote
