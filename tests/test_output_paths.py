"""Where the benchmarks scripts write by default: a user's run never overwrites the committed pages (docs/) or the
committed runs (results/); benchmarks/report.py alone rewrites docs/, from results/, on purpose."""

import os

from conftest import ROOT, load_module


def test_no_benchmarks_script_writes_under_docs_by_default(tmp_path, monkeypatch):
    """A user's run of scores.py, uncertainty_scales.py, compare.py, budget.py, speed.py or the toy never overwrites
    the committed pages: every default output path lies outside docs/ (and outside results/, the committed runs).
    report.py alone writes docs/, from results/, on purpose."""
    monkeypatch.chdir(ROOT)  # relative defaults resolve against where the user runs them; the repository is the risk
    committed = [os.path.join(ROOT, "docs"), os.path.join(ROOT, "results")]
    outputs = {"benchmarks/scores.py": ("out", "runs_dir"), "benchmarks/uncertainty_scales.py": ("out",),
                                        "benchmarks/compare.py": ("out", "results", "runs_dir"),
                                        "benchmarks/budget.py": ("out", "results", "runs_dir"),
                                        "benchmarks/speed.py": ("out",), "benchmarks/episodes.py": ("out", "figure")}  # fmt: skip
    for script, fields in outputs.items():
        args = load_module(script, "defaults_" + os.path.basename(script)[:-3]).Args()
        for name in fields:
            value = getattr(args, name)
            if not value:  # speed.py: no file unless --out is given; episodes.py: no figure unless --figure
                continue
            path = os.path.abspath(value)
            assert not any(os.path.commonpath([path, c]) == c for c in committed), (script, name, value)
    rw = load_module("toy/riskworld.py", "defaults_riskworld")
    path = rw.resolve(rw.ToyArgs())[1]
    assert not any(os.path.commonpath([path, c]) == c for c in committed), path
