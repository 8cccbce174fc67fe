"""tests/zygote.py: a forked script start reads as a fresh `python SCRIPT ARGS` would (exit status, output, working
directory, environment, the project's modules from the script's own folder, a timeout)."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import run_script
from zygote import ZYGOTE_HERE, zygote

pytestmark = pytest.mark.skipif(not ZYGOTE_HERE, reason="the zygote is Linux-only; the scripts start fresh here")


def start(tmp_path, body, *args, timeout=60, name="script.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    base = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return zygote(base).run([sys.executable, str(script), *args], cwd=str(tmp_path), env={**base, "A": "1"},
                  timeout=timeout)  # fmt: skip


def test_exit_status_output_argv_cwd_and_environment_are_the_scripts_own(tmp_path):
    body = "import os, sys; print(sys.argv[1:], os.getcwd(), os.environ.get('A'), __name__); "
    out = start(tmp_path, body + "print('to stderr', file=sys.stderr); sys.exit(int(sys.argv[1]))", "3", "x")
    assert out.returncode == 3 and out.stderr == "to stderr\n"
    assert out.stdout == f"['3', 'x'] {tmp_path} 1 __main__\n"
    message = start(tmp_path, "import sys; sys.exit('refused: one line')")
    assert (message.returncode, message.stderr) == (1, "refused: one line\n")
    crash = start(tmp_path, "raise KeyError('boom')")
    assert crash.returncode == 1 and crash.stderr.startswith("Traceback") and "KeyError: 'boom'" in crash.stderr
    atexit = start(tmp_path, "import atexit; atexit.register(lambda: print('at exit'))")
    assert (atexit.returncode, atexit.stdout) == (0, "at exit\n")


def test_torch_is_already_there_a_module_beside_the_script_is_its_own_and_a_timeout_kills_the_child(tmp_path):
    (tmp_path / "plumbing.py").write_text("WHERE = 'beside the script'\n")  # not the plumbing the zygote may hold
    out = start(tmp_path, "import sys, plumbing; print('torch' in sys.modules, plumbing.WHERE)")
    assert out.returncode == 0 and out.stdout == "True beside the script\n", out.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        start(tmp_path, "import time; time.sleep(60)", timeout=1)


@pytest.mark.parametrize("argv", [["--help"], ["--batch-size", "0"]], ids=["help", "bad flag"])
def test_a_forked_start_reads_as_a_fresh_one(argv):
    forked = run_script("algorithms/td3bc.py", *argv)
    fresh = run_script("algorithms/td3bc.py", *argv, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr
