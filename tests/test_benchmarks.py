"""Smoke tests of the harnesses in benchmarks/: each runs as a user would, at tiny sizes, and its output is checked."""
import json
import os
import math
import re
import shlex

import numpy as np
import pytest
from conftest import ROOT, run_script
from test_baselines import TD3BC_TINY

SPEED_TINY = ["--repeats", "1", "--heavy-repeats", "1", "--rollout-batch-size", "2048", "--dataset-size", "5000",
              "--steps-per-epoch", "20", "--bare-steps", "10", "--update-steps", "5", "--ensemble-steps", "3",
              "--eval-episodes", "2", "--horizons", "1", "2"]


def test_speed_benchmark_table_with_a_bf16_column(tmp_path):
    out = tmp_path / "speed"
    result = run_script("benchmarks/speed.py", *SPEED_TINY, "--compare", os.path.join(ROOT, "algorithms", "orpo.py"),
                        "--labels", "bf16", "fp32", "--dynamics-bf16", "bf16", "--out", str(out), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "speed.json").read_text())
    rows = {r["name"]: r for r in report["rows"]}
    for name in ("fp32 matmul 2048×2048 (machine limit)", "bf16 matmul 2048×2048", "ensemble training (7 × 4×200, batch 256)",
                 "  reference: loop over 7 nn.Sequential", "model rollout, 2k starts × h=1", "  reference: one call, numpy every step",
                 "SAC update (3×256, batch 256)", "TD3+BC update (3×256, batch 256)", "ORPO epoch h=1, without evaluation",
                 "ORPO epoch h=2, with evaluation", "overhead ratio h=1 (epoch ÷ bare work)", "overhead ratio h=2 (epoch ÷ bare work)"):
        assert name in rows, name
    for r in report["rows"]:
        assert set(r["values"]) == {"bf16", "fp32"}, r["name"]
        assert all(math.isfinite(v) and v > 0 for v in r["values"].values()), r["name"]
    # the ratio column divides by the reference measured in the same run
    ensemble, reference = rows["ensemble training (7 × 4×200, batch 256)"], rows["  reference: loop over 7 nn.Sequential"]
    assert ensemble["ref"] == reference["values"]["fp32"]
    for h in (1, 2):
        epoch, bare = rows[f"ORPO epoch h={h}, without evaluation"]["values"], rows[f"  bare work h={h}"]["values"]
        ratio = rows[f"overhead ratio h={h} (epoch ÷ bare work)"]["values"]
        assert ratio["fp32"] == pytest.approx(epoch["fp32"] / bare["fp32"])
    table = (tmp_path / "speed.md").read_text()
    assert "bf16 = " in table and "--dynamics-bf16" in table and "| measurement | unit | bf16 | fp32 |" in table


def test_speed_benchmark_rejects_an_unknown_bf16_column(tmp_path):
    result = run_script("benchmarks/speed.py", "--only", "matmul", "--dynamics-bf16", "after", cwd=str(tmp_path))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--labels" in lines[0], result.stderr


def test_score_harness_runs_skips_and_tabulates(hopper_data_dir, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "scores.md"
    cmd = ["benchmarks/scores.py", "--algos", "td3bc", "--envs", "hopper-random-v2", "--seeds", "1", "2",
           "--runs-dir", str(runs), "--out", str(out), f"--extra={shlex.join(TD3BC_TINY)}"]
    result = run_script(*cmd, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    summaries = [json.loads(p.read_text()) for p in runs.glob("*/summary.json")]
    assert sorted(s["seed"] for s in summaries) == [1, 2] and all(s["finished"] for s in summaries)
    last10 = np.array([s["last10_score"] for s in summaries])
    row = next(line for line in out.read_text().splitlines() if line.startswith("| hopper-random-v2 | td3bc |"))
    assert re.search(rf"\| {last10.mean():.1f} ± {last10.std():.1f} \|", row) and "| 2 | 2 |" in row, row
    assert (tmp_path / "scores.png").stat().st_size > 0
    data = json.loads((tmp_path / "scores.json").read_text())["hopper-random-v2/td3bc"]
    assert dict(zip(data["seeds"], data["last10"])) == {s["seed"]: s["last10_score"] for s in summaries}
    # a second call finds both runs finished and only rebuilds the table
    again = run_script(*cmd, data_dir=hopper_data_dir[0], cwd=str(tmp_path))
    assert again.returncode == 0 and again.stdout.count("finished") == 2 and "$ " not in again.stdout, again.stdout[-2000:]
