"""Where the benchmarks scripts write by default: a user's run never overwrites the committed pages (docs/) or the
committed runs (results/); benchmarks/report.py alone rewrites docs/, from results/, on purpose."""

import os

from conftest import ROOT, load_module


def test_no_benchmarks_script_writes_under_docs_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # relative defaults resolve against where the user runs them; the repository is the risk
    committed = [os.path.join(ROOT, "docs"), os.path.join(ROOT, "results")]
    outputs = {"scores": ("out", "runs_dir"), "uncertainty_scales": ("out",), "compare": ("out", "results", "runs_dir"),
               "budget": ("out", "results", "runs_dir"), "speed": ("out",), "episodes": ("out", "figure")}  # fmt: skip
    for script, fields in outputs.items():
        args = load_module(f"benchmarks/{script}.py", f"defaults_{script}").Args()
        for name in fields:
            value = getattr(args, name)
            if not value:  # speed.py: no file unless --out is given; episodes.py: no figure unless --figure
                continue
            path = os.path.abspath(value)
            assert not any(os.path.commonpath([path, c]) == c for c in committed), (script, name, value)
    rw = load_module("toy/riskworld.py", "defaults_riskworld")
    path = rw.resolve(rw.ToyArgs())[1]
    assert not any(os.path.commonpath([path, c]) == c for c in committed), path
