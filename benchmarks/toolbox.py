"""What every script beside the algorithm files shares (benchmarks/, toy/, datasets/): the one error type, flags
parsed with one-line errors, the command-line wrapper and JSON files.

    from toolbox import UserError, UsageError, algorithm, cli, write_json, read_json, replace_atomically

One error type: algorithms/plumbing.py's UserError (a failure: exit 1) and its UsageError (bad flags or input: exit
2), so an error raised by the algorithms' plumbing inside a script reads the same as the script's own. JSON files
are written as plumbing writes a run's (strict JSON, atomically); every other file (a page, a figure, a copy) through
replace_atomically.
"""

import contextlib
import importlib.util
import os
import signal
import sys
import tempfile
from typing import Callable


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "algorithms"))  # plumbing.py, as the algorithm files import it
from plumbing import UsageError, UserError, _tmp_name, parse_args, read_json, write_json  # noqa: E402

__all__ = ["UserError", "UsageError", "algorithm", "cli", "read_json", "replace_atomically", "unwritable_folder",
           "write_json", "write_text"]  # fmt: skip


def algorithm(script: str, folder: str = "algorithms"):
    """algorithms/SCRIPT.py as a module, loaded once per process, as `python algorithms/SCRIPT.py` has it (plumbing.py
    beside it on sys.path; the files import without side effects): its Args, presets and method blocks. `folder`:
    another folder's script, its neighbours importable (datasets/collect.py imports common.py)."""
    name = f"_{folder}_{script}"
    if os.path.join(ROOT, folder) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, folder))
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


def cli(
    main: Callable,
    args_class: type,
    argv: list[str],
    interrupted: str | Callable[[KeyboardInterrupt], str] = "",
    sigterm: bool = False,
    errors: tuple = (),
) -> int:
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
