"""Smoke tests of benchmarks/speed.py: it runs as a user would, at tiny sizes, and its output is checked."""

import csv
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile

import pytest
from conftest import ROOT, run_script

pytestmark = (
    pytest.mark.slow
)  # the slow tier: benchmarks/speed.py and the GPU check rehearsed on the CPU (minutes each)

SPEED_TINY = (
    "--repeats 1 --heavy-repeats 1 --rollout-batch-size 2048 --dataset-size 5000 --steps-per-epoch 20 --dynamics-epochs 1 "
    "--ensemble-steps 3 --eval-episodes 2 --epoch-repeats 2 --horizons 1 2"
).split()


def test_speed_benchmark_times_the_files_own_epochs_with_a_bf16_column(tmp_path):
    out = tmp_path / "speed"
    result = run_script(
        "benchmarks/speed.py",
        *SPEED_TINY,
        "--compare",
        os.path.join(ROOT, "algorithms", "orpo.py"),
        "--labels",
        "bf16",
        "fp32",
        "--dynamics-bf16",
        "bf16",
        # small networks and one episode: the test checks the table's bookkeeping, not the default sizes' speed
        "--algo-flags=--no-pessimism --dynamics-hidden-dims 32 32 --hidden-dims 32 32 --num-ensemble 3 --num-elites 2",
        "--eval-episodes",
        "1",
        "--matmul-size",
        "256",  # a 2048² bf16 matmul takes minutes on a CPU without bf16 units (an AVX2-only EPYC here)
        "--out",
        str(out),
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "speed.json").read_text())
    rows = {r["name"]: r for r in report["rows"]}
    for name in (
        "fp32 matmul 256×256 (machine limit)",
        "bf16 matmul 256×256",
        "ensemble fit (3 × 2×32, batch 256)",  # the runs' own ensemble (--algo-flags), not the defaults
        "  reference: loop over 3 nn.Sequential",
        "model rollouts h=1 in the epoch",
        "  reference: one call, numpy every step",
        "epoch h=1, without evaluation",
        "epoch h=2, with evaluation",
        "model rollouts h=2 in the epoch",
    ):
        assert name in rows, name
    for r in report["rows"]:
        assert set(r["values"]) == {"bf16", "fp32"}, r["name"]
        assert all(math.isfinite(v) and v > 0 for v in r["values"].values()), r["name"]
    # the ratio column divides by the reference measured in the same run
    ordered = report["rows"]
    for i, r in enumerate(ordered):
        if r["ref"] is not None:
            assert (
                ordered[i + 1]["name"].startswith("  reference: ") and r["ref"] == ordered[i + 1]["values"]["fp32"]
            ), r["name"]
    assert sum(r["ref"] is not None for r in ordered) == 3  # the ensemble fit, the rollouts at h = 1 and at h = 2
    # the epoch rows are the runs' own metrics.csv times, medians over the timed epochs (the first one warms up)
    for label in ("bf16", "fp32"):
        for h in (1, 2):
            epochs = [r for r in report["runs"][f"{label} h={h}"]["rows"] if r["epoch"] > 1]
            assert len(epochs) == 2

            def median(f, epochs=epochs):
                return statistics.median(f(r) for r in epochs)

            first = [r["name"] for r in ordered].index(f"epoch h={h}, without evaluation")
            value = {r["name"].strip(): r["values"][label] for r in ordered[first : first + 7]}  # the rows of this h
            assert value[f"epoch h={h}, with evaluation"] == median(lambda r: r["charts/epoch_seconds"])
            assert value["of which rollouts"] == median(lambda r: r["charts/rollout_seconds"])
            assert value[f"epoch h={h}, without evaluation"] == pytest.approx(median(lambda r: 20 / r["charts/SPS"]))
            rate = median(
                lambda r: (
                    2048
                    * (r["rollout/length_optimistic"] + r["rollout/length_pessimistic"])
                    / r["charts/rollout_seconds"]
                )
            )
            assert value[f"model rollouts h={h} in the epoch"] == pytest.approx(rate)
            # --algo-flags reached the runs: --no-pessimism sets λp = 0, so r^p = r̂
            assert all(r["rollout/reward_p_pessimistic"] == r["rollout/reward_pessimistic"] for r in epochs)
        assert report["runs"][f"fit {label}"]["rows"][0]["dynamics/epochs"] == 1
    table = (tmp_path / "speed.md").read_text()
    assert "bf16 = " in table and "--dynamics-bf16" in table and "| measurement | unit | bf16 | fp32 |" in table


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--only", "matmul", "--dynamics-bf16", "after"], "--labels"),
        (["--only", "updates"], "--only updates"),
        (["--horizons", "0"], "--horizons"),
    ],
)
def test_speed_benchmark_rejects_bad_flags_in_one_line(tmp_path, flags, says):
    result = run_script("benchmarks/speed.py", *flags, cwd=str(tmp_path))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], result.stderr


@pytest.mark.parametrize(
    "flags, says",
    [
        ("--epochs 0", "orpo.py exited with 2: error: --epochs 0: must lie in [1, inf)"),  # the file's own check
        ("--epochs nan", "orpo.py exited with 2: error: Error parsing --epochs: invalid literal for int()"),  # tyro's
    ],
)
def test_speed_benchmark_names_a_failing_run_in_one_line(tmp_path, flags, says):
    """A run of the file that exits non-zero (here: a flag it rejects) ends the benchmark with the run's reason in one
    line: the file's own error line (a flag it cannot parse, too: the algorithm files print no box)."""
    result = run_script(
        "benchmarks/speed.py", *SPEED_TINY, "--only", "ensemble", f"--algo-flags={flags}", cwd=str(tmp_path)
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + says), result.stderr


# benchmarks/scores.py (the grid harness) is tested in test_scores_grid.py: both launchers end to end, resume after a
# kill, failed runs, the aggregate against a hand computation, the paper's numbers and the flag errors.


# ---------------------------------------------------------------- benchmarks/gpu_check.sh, rehearsed on the CPU
GPU_CHECK_STEPS = ["versions", "tests", "collect", "profile", "concurrent", "run", "resume", "graphs", "twins"]
GPU_CHECK_STEPS += ["speed_orpo", "speed_mopo"]


def test_gpu_check_rehearsal_runs_every_step_and_its_summary_holds(tmp_path):
    """`gpu_check.sh --rehearse`: every step of the GPU check at tiny sizes on the CPU, so the script cannot rot before a
    GPU session runs it. Each step must pass; the summary's phase table is checked against the run's own metrics.csv
    (from artifacts.tar.gz), the resume against the epochs, the CPU twins must be bit-identical, the profile's and the
    concurrent runs' tables must hold their rows (the latter checked against the runs' metrics.csv), and the last line
    is the paper's 60-run ORPO column from the best K."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable, TMPDIR=str(tmp_path))
    result = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "gpu_check.sh"), "--rehearse"],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    check_gpu_check_output(out)


def check_gpu_check_output(out) -> None:
    """What a rehearsal's $OUT must hold (also usable on a kept rehearsal's output)."""
    assert sorted(p.name for p in out.iterdir()) == ["artifacts.tar.gz", "gpu_check.json", "gpu_check.md", "log.txt"]
    report = json.loads((out / "gpu_check.json").read_text())
    steps = [s for s in report["steps"] if s["name"] != "install"]  # install runs only where .whl/ holds wheels
    assert [s["name"] for s in steps] == GPU_CHECK_STEPS
    assert all(s["status"] == "ok" for s in report["steps"]), report["steps"]
    assert report["tests"]["passed"] >= 1 and report["tests"]["failed"] == []
    # the phase table: medians of the run's epochs after the first, projected to 1000 epochs
    with tarfile.open(out / "artifacts.tar.gz") as tar:
        rows = list(csv.DictReader(io.TextIOWrapper(tar.extractfile("main_metrics.csv"))))
    epochs = [r for r in rows if int(r["epoch"]) >= 2]
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3] and report["run"]["epochs_done"] == 3
    phases = {p["phase"].split(" (")[0].split(",")[0]: p for p in report["phases"]}
    epoch = statistics.median(float(r["charts/epoch_seconds"]) for r in epochs)
    rollout = statistics.median(float(r["charts/rollout_seconds"]) for r in epochs)
    fit = float(rows[0]["dynamics/fit_seconds"])
    assert phases["epoch"]["seconds"] == pytest.approx(epoch)
    assert phases["rollouts"]["seconds"] == pytest.approx(rollout)
    assert phases["epoch"]["projected_1000_epoch_hours"] == pytest.approx(1000 * epoch / 3600)
    assert phases["whole run: fit + 1000 epochs"]["projected_1000_epoch_hours"] == pytest.approx(
        (fit + 1000 * epoch) / 3600
    )
    # with two timed epochs the medians are means, and the three phases add up to the epoch (SPS leaves evaluation out)
    assert sum(phases[k]["seconds"] for k in ("rollouts", "updates", "evaluation")) == pytest.approx(epoch)
    assert report["resume"] == {"from_epoch": 3, "to_epoch": 5, "summary_status": "finished"}
    det = report["determinism"]
    assert det["identical"] and det["values"] > 50 and det["warn_run_finished"], det
    assert det["files"] == ["dynamics.pt", "policy.pt"], det  # the weights were compared, not only the metrics
    for algo in ("orpo", "mopo"):
        assert "| measurement | unit | fp32 | bf16 |" in report["speed"][algo], algo
    assert "| measurement | unit | eager | graphs |" in report["speed"]["graphs"]
    assert "graphs = " in report["speed"]["graphs"] and " --cuda-graphs" in report["speed"]["graphs"]
    md = (out / "gpu_check.md").read_text()
    assert "| phase | seconds | projected 1000-epoch hours |" in md and "bit-identical" in md
    check_profile(report["profile"], md)
    check_concurrent(report, out, md)


def check_profile(profile, md) -> None:
    """gpu_check.sh's profile step: 20 update steps of orpo.py, eager and graphs (eager on a CPU), each with its two top-15
    tables and a busy share."""
    assert [r["mode"] for r in profile["runs"]] == ["eager", "graphs"]
    for r in profile["runs"]:
        assert r["steps"] == 20 and r["device"] == "cpu" and r["graphs"] is False, r  # a CPU ignores --cuda-graphs
        assert 0 < r["device_busy_ms"] <= r["window_ms"] and 0 < r["device_busy_share"] <= 1, r
        assert len(r["device_top"]) == len(r["host_top"]) == 15, r
        assert all(e["ms"] > 0 and e["calls"] >= 1 for e in r["device_top"] + r["host_top"])
        ms = [e["ms"] for e in r["host_top"]]
        assert ms == sorted(ms, reverse=True)
        assert f"{r['mode']}: the 15 ops with the most host time (self CPU), over 20 update steps:" in md
    assert "| mode | device | update steps recorded | wall ms per step |" in md


def check_concurrent(report, out, md) -> None:
    """K = 1 and 2 runs at once, eager and graphs: every run's epochs from its metrics.csv (in artifacts.tar.gz), the
    aggregate rate, and the last line of gpu_check.md from the best K."""
    conc = report["concurrent"]
    assert [(c["k"], c["mode"]) for c in conc["configs"]] == [(1, "eager"), (1, "graphs"), (2, "eager"), (2, "graphs")]
    assert conc["not_run"] == [] and conc["steps_per_epoch"] == 10
    with tarfile.open(out / "artifacts.tar.gz") as tar:
        for c in conc["configs"]:
            assert c["complete"] and len(c["runs"]) == c["k"] and c["device"] == "cpu", c
            assert {r["cuda_graphs"] for r in c["runs"]} == {c["mode"] == "graphs"}  # the flag reached the runs
            for r in c["runs"]:
                name = os.path.relpath(r["dir"], os.path.dirname(os.path.dirname(os.path.dirname(r["dir"]))))
                member = next(m for m in tar.getnames() if m.endswith(f"concurrent/{name}/metrics.csv"))
                rows = list(csv.DictReader(io.TextIOWrapper(tar.extractfile(member))))
                timed = [{k: float(v) for k, v in row.items() if v} for row in rows if int(row["epoch"]) >= 2]
                assert [int(row["epoch"]) for row in rows] == [0, 1, 2, 3]
                med = lambda key, timed=timed: statistics.median(t[key] for t in timed)
                assert r["epoch_seconds"] == pytest.approx(med("charts/epoch_seconds"))
                updates = statistics.median(10 / t["charts/SPS"] - t["charts/rollout_seconds"] for t in timed)
                projected = med("charts/rollout_seconds") + med("charts/eval_seconds") + 100 * updates
                assert r["projected_epoch_seconds"] == pytest.approx(projected)
            assert c["run_epochs_per_hour"] == pytest.approx(
                sum(3600 / r["projected_epoch_seconds"] for r in c["runs"])
            )
    best = max(conc["configs"], key=lambda c: c["run_epochs_per_hour"])
    pc = report["paper_column"]
    assert (pc["k"], pc["mode"]) == (best["k"], best["mode"]) and pc["hours"] == pytest.approx(
        60 * 1000 / best["run_epochs_per_hour"]
    )
    assert "| K runs at once | mode | each run's epoch seconds (10 steps) |" in md
    last = md.strip().splitlines()[-1]
    assert last.startswith(f"the paper's 60-run ORPO column on this device: {pc['hours']:.3g} h (from the best K: "), (
        last
    )
