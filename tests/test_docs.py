"""The README and docs/ pages: every relative link points at a file that exists, and every #anchor at a heading."""

import glob
import os
import re

import pytest
from conftest import ROOT

PAGES = [
    "README.md",
    os.path.join("results", "README.md"),
    *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))),
]


def anchors(path: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.replace("`", "").strip().lower()).replace(" ", "-") for h in headings}


def broken_links(page: str) -> list[str]:
    path = os.path.join(ROOT, page)
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", link):  # http(s):, mailto:
            continue
        target, _, anchor = link.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(resolved):
            broken.append(f"{link} (no such file)")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            broken.append(f"{link} (no such heading)")
    return broken


def test_every_page_is_checked():
    assert "README.md" in PAGES and os.path.join("docs", "orpo.md") in PAGES and len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_a_broken_link_and_a_wrong_anchor_are_found(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title here\n[ok](a.md#title-here) [gone](b.md) [bad](a.md#nope)\n")
    monkeypatch.setattr("test_docs.ROOT", str(tmp_path))
    assert broken_links("docs/a.md") == ["b.md (no such file)", "a.md#nope (no such heading)"]


def test_the_readmes_first_try_times_are_the_stored_runs():
    """The first try's times and score in README.md come from results/quick_try/ (the run and its timing.json)."""
    import csv
    import json

    folder = os.path.join(ROOT, "results", "quick_try")
    rows = list(csv.DictReader(open(os.path.join(folder, "metrics.csv"))))
    summary = json.load(open(os.path.join(folder, "summary.json")))
    timing = json.load(open(os.path.join(folder, "timing.json")))
    fit = float(rows[0]["dynamics/fit_seconds"]) / 60
    epochs = ", ".join(f"{float(r['charts/epoch_seconds']) / 60:.1f}" for r in rows[1:])
    epochs = " and ".join(epochs.rsplit(", ", 1))
    said = (
        f"the collection took {timing['collect_wall_seconds'] / 60:.1f} min and the run "
        f"{timing['run_wall_seconds'] / 60:.0f} min: the capped ensemble fit {fit:.0f} min, the three epochs {epochs} "
        f"min, the score {summary['normalized_score']:.1f} after 3 epochs (last-10 {summary['last10_score']:.1f})"
    )
    readme = " ".join(open(os.path.join(ROOT, "README.md")).read().split())
    assert said in readme, said
    loads = [x for v in timing["load_average_1_5_15"].values() for x in v[:1]]
    assert f"load {min(loads):.0f}–{max(loads):.1f}" in readme


TOP_LEVEL = {"algorithms", "benchmarks", "datasets", "docs", "results", "tests", "toy", "README.md", "requirements.txt"}


def top_level(root: str) -> set[str]:
    """The names a checkout shows at its top level: hidden ones (.ci, .gitignore, .ruff.toml) and what .gitignore
    ignores (runs/, wandb/, caches) are not the repository's layout."""
    ignored = {line.strip().rstrip("/") for line in open(os.path.join(root, ".gitignore")) if line.strip()}
    return {n for n in os.listdir(root) if not n.startswith(".") and n not in ignored and n != "__pycache__"}


def test_the_top_level_holds_the_layout_and_nothing_else(tmp_path):
    """The repository's layout (development.md, "Formatting"): seven folders, README.md and requirements.txt; tool
    configuration is hidden (.ci/run, .ruff.toml)."""
    assert top_level(ROOT) == TOP_LEVEL
    for name in (".gitignore", "README.md", "runs"):
        (tmp_path / name).write_text("runs/\n" if name == ".gitignore" else "")
    (tmp_path / "pyproject.toml").write_text("")
    assert top_level(str(tmp_path)) == {"README.md", "pyproject.toml"}  # a stray file is seen, runs/ is not
