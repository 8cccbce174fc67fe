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
import io
import os
import re
import signal
import sys
import tempfile
from typing import Callable

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "algorithms"))  # plumbing.py, as the algorithm files import it
from plumbing import UsageError, UserError, _tmp_name, help_text, read_json, write_json  # noqa: E402

__all__ = ["UserError", "UsageError", "algorithm", "cli", "parse_flags", "project_help", "read_json", "replace_atomically",
           "unwritable_folder", "write_json", "write_text", "one_line_tyro_error"]  # fmt: skip


def algorithm(script: str):
    """algorithms/SCRIPT.py as a module, loaded once per process, as `python algorithms/SCRIPT.py` has it (plumbing.py
    beside it on sys.path; the files import without side effects): its Args, presets and method blocks."""
    name = f"_algorithm_{script}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "algorithms", f"{script}.py"))
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
    main: Callable, args_class: type, argv: list[str], description: str | None = None, interrupted: str = ""
) -> int:
    """A script's command line: parse the flags, run main(args); an error is one line and its exit status (a
    UserError's code, 1 for a failed write), Ctrl-C one line (`interrupted`, else how to resume) and 128 + the signal
    (a KeyboardInterrupt raised with the signal's number, as SIGTERM handlers do, else SIGINT: 130)."""
    args = parse_flags(args_class, argv, description)
    if isinstance(args, int):
        return args
    try:
        return main(args)
    except (UserError, OSError) as e:  # one problem a line, each as plumbing.cli prints it
        print("\n".join(f"error: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return getattr(e, "code", 1)
    except KeyboardInterrupt as e:  # outside a run (a run's own Ctrl-C is handled where it runs)
        print(interrupted or "interrupted: run the same command again to resume", file=sys.stderr)
        return 128 + (e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT)


def parse_flags(args_class: type, argv: list[str], description: str | None = None):
    """tyro's parse with its error as one line: the parsed Args, or the exit status (0 after --help, 2 on bad flags).
    scores.py, compare.py and budget.py parse their flags this way."""
    if "-h" in argv or "--help" in argv:  # the algorithm files' layout: the script's docstring, then its flags
        with contextlib.suppress(BrokenPipeError):  # `--help | head`
            print(project_help(args_class), flush=True)
        return 0
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return tyro.cli(args_class, args=argv, description=description)
    except SystemExit as e:
        if e.code not in (0, None):
            print(f"error: {one_line_tyro_error(err.getvalue())}", file=sys.stderr)
            return 2
        sys.stderr.write(err.getvalue())
        return 0


def project_help(args_class: type) -> str:
    """--help as every script of this project prints it (algorithms/plumbing.py's help_text)."""
    return help_text(args_class)


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


def one_line_tyro_error(text: str) -> str:
    """tyro's boxed parse error as one line: the box's first paragraph and the fix it names (its "Perhaps you meant"
    flag, else the flag's usage line, else where the flags are listed). Where the output stream cannot encode the box
    (an ASCII locale, a captured stream), tyro draws its rules with dashes and puts one under the title: skipped."""
    rule = lambda ln: bool(ln) and set(ln) <= {"─", "-"}  # noqa: E731
    lines = [ln.strip().strip("│╭╮╰╯").strip() for ln in text.splitlines()[1:]]
    lines = lines[1:] if lines and rule(lines[0]) else lines
    body, hint, in_body = [], "", True
    for i, ln in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if ln.startswith("Perhaps you meant") and following:
            hint = f" (did you mean {following.split()[0]}?)"
        elif ln == "Argument helptext:" and following and not hint:
            hint = f" (usage: {following})"
        elif rule(ln):
            in_body = False
        elif in_body and ln and not ln.startswith("For full helptext"):
            body.append(ln)
    text = re.sub(r" ([.,)])", r"\1", " ".join(body)) or "bad command line"  # a line that rich wrapped, joined
    return text + (hint or (" (--help lists the flags)" if text.startswith("Unrecognized") else ""))
