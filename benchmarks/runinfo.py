"""What the results pages say about a stored run besides its scores: spreads over seeds and provenance (compare.py's,
budget.py's and report.py's pages).

Provenance: config.json's `_command` and `_git_revision`, summary.json's `device_name`, `torch_threads` and
`invocations` (one per start or resume); older runs carry a `provenance.json` with what could be recovered; a run with
neither still tells a resume by `wall_seconds_this_invocation` < `wall_seconds`. A run stored before `--sac-lr-horizon`
annealed its SAC actor's learning rate over its own --epochs, not over the paper's 1000.
"""

import csv
import json
import os
import re
from typing import Optional

import numpy as np

PROVENANCE = "provenance.json"


# ---------------------------------------------------------------- spreads and numbers in prose
def seed_range(x) -> tuple:
    """[min, max] over seeds (axis 0)."""
    x = np.asarray(x, dtype=float)
    return x.min(0), x.max(0)


def minus(text: str) -> str:
    """Typographic minus signs, for prose."""
    return text.replace("-", "−")


def signed(v: float, fmt: str = ".1f") -> str:
    return minus(f"{v:+{fmt}}")


def sci(v: float, digits: int = 1) -> str:
    """2.35e6 as '2.4e6' (no exponent padding), small numbers plainly ('209')."""
    if v == 0 or 1e-2 <= abs(v) < 1e3:
        return f"{v:.{digits + 2}g}"
    mantissa, exp = f"{v:.{digits}e}".split("e")
    return f"{mantissa}e{int(exp)}"


def seeds_text(seeds) -> str:
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def md_table(head, rows) -> list[str]:
    """A markdown table's lines: the header, its rule, one line per row (each cell str()'d)."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"  # noqa: E731
    return [line(head), "|" + "---|" * len(head), *map(line, rows)]


def count_word(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


# ---------------------------------------------------------------- provenance
def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def threads_of(summary: dict, config: dict) -> Optional[int]:
    """The torch threads of the run's last invocation: summary `torch_threads`, else its device_name's count."""
    for value in (summary.get("torch_threads"), config.get("torch_threads")):
        if isinstance(value, int):
            return value
    m = re.search(r"(\d+) torch threads?", str(summary.get("device_name", "")))
    return int(m.group(1)) if m else None


def invocations(config: dict, summary: dict, provenance: dict) -> Optional[list[dict]]:
    """One entry per start or resume ({"start_epoch", "torch_threads", ...}), from the run's own record, else its
    provenance.json; None when neither has them."""
    for source in (summary, provenance):
        inv = source.get("invocations")
        if isinstance(inv, list) and inv and all(isinstance(i, dict) for i in inv):
            return inv
    return None


def resumed_unrecorded(summary: dict) -> bool:
    """The run was resumed, but neither it nor a provenance.json says when (its last invocation is shorter than its
    whole wall time)."""
    whole, last = summary.get("wall_seconds"), summary.get("wall_seconds_this_invocation")
    return isinstance(whole, (int, float)) and isinstance(last, (int, float)) and last < whole - 1.0


def sac_lr_annealed_over_run(config: dict) -> Optional[str]:
    """Whose SAC actor LR the run annealed over its own --epochs (runs made before --sac-lr-horizon), or None."""
    if "sac_lr_horizon" in config or not config.get("_script"):
        return None
    script = str(config["_script"]).removesuffix(".py")
    if script == "orpo" and config.get("rollout_policy") != "untrained":
        return "π^o's"
    if script in ("mopo", "mbpo", "oroo") and config.get("policy", "sac") in (None, "sac"):
        return "the SAC policy's"
    return None


def lr_column(metrics: list[dict]) -> Optional[str]:
    for key in ("charts/lr_rollout_actor", "charts/lr_actor"):
        if metrics and key in metrics[-1]:
            return key
    return None


def lr_at(metrics: list[dict], epoch: int) -> Optional[float]:
    key = lr_column(metrics)
    for r in metrics if key else []:
        if r.get("epoch") not in (None, "") and int(float(r["epoch"])) == epoch and r.get(key) not in (None, ""):
            return float(r[key])
    return None


def run_notes(config: dict, summary: dict, provenance: dict, metrics: list[dict]) -> list[str]:
    """The caveats that follow from a run's provenance, one short phrase each (the same phrase for the same caveat,
    so a page can group seeds by it)."""
    notes = []
    inv = invocations(config, summary, provenance)
    if inv and len(inv) > 1:
        first = inv[0].get("torch_threads")
        for i in inv[1:]:
            threads, at = i.get("torch_threads"), i.get("start_epoch")
            text = f"resumed at epoch {at}" if at is not None else "resumed"
            if threads is not None and first is not None and threads != first:
                text += f" with {threads} torch threads instead of {first} (not bit-identical to an uninterrupted run)"
            elif first is None:
                text += " (the first invocation's thread count not recorded)"
            notes.append(text)
    elif resumed_unrecorded(summary):
        notes.append("resumed (when and with how many threads not recorded)")
    whose = sac_lr_annealed_over_run(config)
    if whose:
        epochs = int(config.get("epochs") or 0)
        at40, at50 = lr_at(metrics, epochs - 10), lr_at(metrics, epochs)
        values = f": {sci(at40)} at epoch {epochs - 10}, {sci(at50)} at {epochs}" if None not in (at40, at50) else ""
        notes.append(f"{whose} actor LR cosine-annealed over the run's own {epochs} epochs{values}")
    return notes


# ---------------------------------------------------------------- a stored run against its own record
def record_damage(summary: dict, metrics: list[dict], score_key: Optional[str] = None) -> Optional[str]:
    """Why a finished run's files cannot be used, or None: metrics.csv must hold a row for each of the epochs that
    summary.json's `epochs` counts (a copy cut mid-run holds fewer), every row whole and numeric (a copy cut mid-row
    ends in a short one), and the scores finite (summary.json's last10_score, metrics.csv's `score_key`). Every
    reader of stored runs (compare.py, report.py, scores.py, episodes.py) leaves such a run out and names it."""
    epochs = summary.get("epochs")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        return f"summary.json records no epochs ({epochs!r})"
    for line, row in enumerate(metrics, 2):  # line 1 is the header
        if None in row or None in row.values():  # csv.DictReader's mark of a row longer or shorter than the header
            return f"metrics.csv line {line} is cut short or has extra fields"
        for key, value in row.items():
            try:
                float(value or 0)
            except ValueError:
                return f"metrics.csv line {line}: {key} is {value!r}, not a number"
    have = {int(float(r["epoch"])) for r in metrics if r.get("epoch")}
    if missing := [e for e in range(1, epochs + 1) if e not in have]:
        return f"metrics.csv holds {epochs - len(missing)} of the {epochs} epochs summary.json counts"
    last10 = summary.get("last10_score", 0.0)  # a NaN is written as null
    if not (isinstance(last10, (int, float)) and np.isfinite(last10)):
        return f"summary.json's last10_score is {last10}"
    if score_key and not all(np.isfinite(float(r[score_key])) for r in metrics if r.get(score_key)):
        return f"metrics.csv's {score_key} holds a non-finite value"
    return None


def run_damage(folder: str, score_key: Optional[str] = None) -> Optional[str]:
    """record_damage of the run stored in `folder` (its summary.json and metrics.csv)."""
    try:
        with open(os.path.join(folder, "metrics.csv"), newline="") as f:
            metrics = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"metrics.csv cannot be read ({type(e).__name__})"
    return record_damage(read_json(os.path.join(folder, "summary.json")), metrics, score_key)


def load_provenance(folder: str) -> dict:
    return read_json(os.path.join(folder, PROVENANCE))
