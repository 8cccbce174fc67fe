"""The scripts beside the algorithm files share one error type (plumbing's UserError / UsageError) and one command line
(benchmarks/toolbox.py's cli): an error is one line and its exit status, never a traceback."""

import ast
import json
import dataclasses
import glob
import os
import signal

import pytest
from conftest import ROOT

import toolbox  # noqa: E402

BUILTIN_BASES = {"Exception", "BaseException", "ValueError", "RuntimeError", "OSError", "KeyError", "TypeError"}


def test_no_script_defines_its_own_error_type():
    scripts = [
        os.path.relpath(p, ROOT)
        for folder in ("benchmarks", "benchmarks/gpu_check", "toy", "datasets")
        for p in glob.glob(os.path.join(ROOT, folder, "*.py"))
    ]
    own = []
    for path in scripts:
        for node in ast.walk(ast.parse(open(os.path.join(ROOT, path)).read())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
                if bases & BUILTIN_BASES:
                    own.append(f"{path}: {node.name}({', '.join(sorted(bases))})")
    assert not own, f"raise plumbing's UserError (exit 1) or UsageError (exit 2) instead: {own}"


@dataclasses.dataclass
class Args:
    n: int = 1
    """a number"""


def raises(e):
    def main(args):
        raise e

    return main


@pytest.mark.parametrize(
    "main, code, line",
    [
        (lambda args: args.n, 7, None),
        (raises(toolbox.UsageError("--n 0: must be at least 1")), 2, "error: --n 0: must be at least 1"),
        (raises(toolbox.UserError("the run failed; see its log")), 1, "error: the run failed; see its log"),
        (raises(OSError(28, "No space left on device")), 1, "error: [Errno 28] No space left on device"),
        (raises(KeyboardInterrupt()), 130, "interrupted: run the same command again to resume"),
        (raises(KeyboardInterrupt(signal.SIGTERM)), 143, "interrupted: run the same command again to resume"),
    ],
)
def test_cli_gives_each_error_one_line_and_its_exit_status(main, code, line, capsys):
    assert toolbox.cli(main, Args, ["--n", "7"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ([line] if line else []), err


class Outside(Exception):
    pass


def test_cli_sigterm_stops_main_as_ctrl_c_and_its_errors_are_one_line(capsys):
    """sigterm=True: SIGTERM inside main is a Ctrl-C (128 + 15, the interrupted line, a function of the interrupt),
    and the handler outside is back afterwards; `errors` are more exception types printed as one line, exit 1."""

    def outside(signum, frame):
        raise Outside

    previous = signal.signal(signal.SIGTERM, outside)
    try:
        said = lambda e: f"stopped by {e.args[0]}"  # noqa: E731
        assert toolbox.cli(lambda args: os.kill(os.getpid(), signal.SIGTERM), Args, [], said, sigterm=True) == 143
        assert capsys.readouterr().err.strip().splitlines() == [f"stopped by {int(signal.SIGTERM)}"]
        assert signal.getsignal(signal.SIGTERM) is outside
        assert toolbox.cli(raises(ValueError("bad file\nsecond")), Args, [], errors=(ValueError,)) == 1
        assert capsys.readouterr().err.strip().splitlines() == ["error: bad file", "error: second"]
        with pytest.raises(ValueError):  # not named: a traceback, as before
            toolbox.cli(raises(ValueError("x")), Args, [])
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("argv, named", [(["--nn", "3"], "--n"), (["--m", "3"], "--m"), (["--n", "x"], "--n")])
def test_cli_bad_flags_are_tyros_box_naming_the_flag_exit_2(argv, named, capsys):
    """The algorithm files' parser (plumbing.parse_args, tyro): its error box names the flag, exit 2."""
    assert toolbox.cli(lambda args: 0, Args, argv) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_one_json_writer_strict_atomic_and_its_own_per_process(tmp_path, monkeypatch):
    """Every script writes JSON through toolbox's write_json (gpu_check's versions.py, which imports nothing of the
    project, aside): strict JSON at any depth, `default` for other objects, a temporary name of this process's own."""
    calls = []
    for folder in ("benchmarks", "benchmarks/gpu_check", "toy", "datasets"):
        for path in glob.glob(os.path.join(ROOT, folder, "*.py")):
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.dump":
                    calls.append(os.path.relpath(path, ROOT))
    assert sorted(calls) == ["benchmarks/gpu_check/versions.py", "benchmarks/toolbox.py"], calls
    path = str(tmp_path / "r.json")
    toolbox.write_json({"a": [1.0, float("nan")], "b": {"c": float("inf")}, "d": tmp_path}, path, default=str)
    assert json.loads(open(path).read()) == {"a": [1.0, None], "b": {"c": None}, "d": str(tmp_path)}
    opened = []
    real_open = open
    monkeypatch.setitem(toolbox.write_json.__globals__, "open", lambda p, *a: opened.append(p) or real_open(p, *a))
    toolbox.write_json({}, path)
    assert len(opened) == 1 and opened[0].startswith(f"{path}.{os.getpid()}.") and opened[0].endswith(".tmp")
    assert os.listdir(tmp_path) == ["r.json"]
