"""Smoke tests of benchmarks/speed.py: it runs as a user would, at tiny sizes, and its output is checked."""
import json
import os
import math

import pytest
from conftest import ROOT, run_script

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


# benchmarks/scores.py (the grid harness) is tested in test_scores_grid.py: both launchers end to end, resume after a
# kill, failed runs, the aggregate against a hand computation, the paper's numbers and the flag errors.
