"""The first hour with a copied file: a researcher's own flag, with or without a docstring, never breaks --help and can
declare its range; the console says in one line what runs and in one line what came of it; nothing is left behind."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, TINY, run_script


def copied_with_a_field(tmp_path, before: str, field: str) -> str:
    """orpo.py and plumbing.py copied, with `field` inserted as its own line above the line that starts `before`
    (None: after the last field of Args)."""
    for name in ("orpo.py", "plumbing.py"):
        shutil.copy(os.path.join(ROOT, "algorithms", name), tmp_path / name)
    text = (tmp_path / "orpo.py").read_text()
    if before is None:  # after eval_episodes' docstring, the last field of Args
        anchor = '    """episodes per evaluation, run as one vectorised environment"""\n'
        assert text.count(anchor) == 1
        text = text.replace(anchor, anchor + field + "\n")
    else:
        anchor = next(line for line in text.splitlines(keepends=True) if line.startswith(before))
        text = text.replace(anchor, field + "\n" + anchor, 1)
    (tmp_path / "orpo.py").write_text(text)
    return str(tmp_path / "orpo.py")


def help_of(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH="", COLUMNS="120")
    return subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "before, next_flag, next_text",
    [
        ("    paper_literal:", "--paper-literal", "the presets read the paper's text literally"),  # a bool comes next
        ("    rollout_policy:", "--rollout-policy", "π^o: trained optimistic SAC"),  # a string default comes next
        (None, None, None),  # the last field
    ],
)
def test_a_field_without_a_docstring_shows_in_help_and_leaves_its_neighbours_alone(
    before, next_flag, next_text, tmp_path
):
    script = copied_with_a_field(tmp_path, before, "    my_coef: float = 0.25")
    done = help_of(script)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = [ln for ln in done.stdout.splitlines() if "--my-coef" in ln]
    assert re.fullmatch(r"  --my-coef FLOAT\s+\(default: 0\.25\)", line), line
    if next_flag:  # the next field keeps its own docstring and default (it showed the next field's before)
        after = done.stdout.split(line, 1)[1]
        own = after[after.index(next_flag) :].split("\n  --")[0]  # the next flag's entry, up to the one after it
        assert next_text in own, own


def test_a_field_declares_its_range_beside_it(tmp_path):
    field = '    my_ratio: float = field(default=0.5, metadata={"range": "[0, 1]"})\n    """my share of the batch"""'
    script = copied_with_a_field(tmp_path, "    paper_literal:", field)
    text = open(script).read().replace("from dataclasses import dataclass", "from dataclasses import dataclass, field")
    open(script, "w").write(text)
    done = subprocess.run([sys.executable, script, "--my-ratio", "2"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=""))  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip() == "error: --my-ratio 2.0: must lie in [0, 1]", done.stderr
    assert "my share of the batch (default: 0.5)" in help_of(script).stdout


def test_the_console_says_in_one_line_what_runs_and_in_one_line_what_came_of_it(hopper_data_dir, tmp_path):
    done = run_script("algorithms/orpo.py", "--env", "hopper-random-v2", *TINY, "--runs-dir", str(tmp_path / "r"),
                      data_dir=hopper_data_dir[0])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "r").iterdir()
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.strip()]
    first = next(ln for ln in lines if ln.startswith(str(tmp_path / "r")))
    assert "hopper-random-v2" in first and "preset hopper-random-v2: lambda_p 5.9" in first and "seed 1" in first
    assert "epochs 2" in first and "(every flag: config.json)" in first
    assert not any(ln.startswith("  ") for ln in lines), "no config dump, one line"
    assert re.fullmatch(rf"finished: 2 epochs in 0:\d\d:\d\d, D4RL score -?[\d.]+, last-10 -?[\d.]+; {run_dir}/summary.json",
                        lines[-1]), lines[-1]  # fmt: skip
    assert not (run_dir / "run.lock").exists()  # no lock with a dead pid left behind
    assert (run_dir / "summary.json").exists() and (run_dir / "invocations.jsonl").exists()


def test_threads_flag_sets_torchs_threads(hopper_data_dir, tmp_path):
    done = run_script("algorithms/td3bc.py", "--env", "hopper-random-v2", "--epochs", "1", "--steps-per-epoch", "5",
                      "--eval-episodes", "1", "--threads", "2", "--runs-dir", str(tmp_path / "r"),
                      data_dir=hopper_data_dir[0])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "r").iterdir()
    summary = __import__("json").loads((run_dir / "summary.json").read_text())
    assert summary["torch_threads"] == 2 and summary["invocations"][0]["torch_threads"] == 2
