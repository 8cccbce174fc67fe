"""Markdown pages from the Jinja2 templates in benchmarks/templates/ (report.py's results pages, compare.py's and
budget.py's pages, scores.py's table): the builder computes the numbers, a template holds the prose (one paragraph a
line, wrapped at `width`) and checks each relation a sentence states with `{% do holds(condition, "the sentence") %}`."""

import os
import re
import textwrap

import jinja2
import numpy as np

import runinfo
import toolbox
from runinfo import minus, sci, signed

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
rng = lambda lo, hi: minus(f"[{lo:.1f}, {hi:.1f}]")
FILTERS = {  # how a number reads in prose
    "f": lambda v, spec=".1f": format(v, spec),
    "m": lambda v, spec=".1f": minus(format(v, spec)),
    "fl": lambda xs, spec=".1f", sep=", ": sep.join(format(v, spec) for v in xs),
    "signed": signed, "sci": sci, "minus": minus, "seeds": runinfo.seeds_text, "count": runinfo.count_word,
    "mean": lambda xs: float(np.mean(list(xs))),
    "table": lambda rows, head: "\n".join(runinfo.md_table(head, rows)),
    # mean [95 % Student-t]; the mean alone where one pair gives no interval
    "tci": lambda p: signed(p["mean"]) + ("" if np.isnan(p["lo"]) else f" [{signed(p['lo'])}, {signed(p['hi'])}]"),
    "rng": lambda p: rng(*p),
    "zero": lambda p: "contains 0" if p["lo"] <= 0 <= p["hi"] else "excludes 0",
    # a compare.py row: mean [range] ('(1 seed)' alone), and its seed count where it differs from the page's
    "cell": lambda s, n=None: "—" if s is None else (f"{s['mean']:.1f} {rng(*s['range'])}" if len(s["x"]) >= 2 else
                              f"{s['mean']:.1f} (1 seed)") + ("" if len(s["x"]) == n else f" ({runinfo.count_word(len(s['x']))})"),
    "mr": lambda x: minus(f"{np.mean(x):.1f}" + (f" [{min(x):.1f}, {max(x):.1f}] (range, " if len(x) > 1 else " (")
                          + f"{runinfo.count_word(len(x))})"),  # 3492.3 [3335.7, 3649.0] (range, 2 seeds)
    # 'in all 3 seeds' / 'in 2 of 3 seeds': the seeds whose difference has this sign
    "every": lambda d, sign: (lambda k, n: f"in all {n} seeds" if k == n else f"in {k} of {n} seeds")(
        int(np.sum(np.sign(d) == sign)), len(d)),
    "final": lambda by_epoch: by_epoch[max(by_epoch)],
    "verdict": lambda p: p["verdict"] if p["same"] else "undecided (the settings differ)",
}  # fmt: skip


class ReportError(toolbox.UserError):
    """The runs no longer bear out a sentence of a template (or a page's markers are gone): one line, exit 1."""


def holds(condition: bool, sentence: str) -> None:
    if not condition:
        raise ReportError(f"the stored runs no longer bear out: {sentence!r}; edit its template in {TEMPLATES}")


def reflow(text: str, width: int | None = 120) -> str:
    """Paragraphs joined, then wrapped at `width` (a line whose wrap would start a list or heading stays whole); tables,
    headings, code blocks, images and comments as they are; a line starting `- ` starts a paragraph."""
    paras, code, prose = [], False, False  # [line, whether it is a paragraph]
    for line in text.split("\n"):
        code ^= line.startswith("```")
        plain = not (code or line.startswith(("```", "|", "#", "<!--", "![")) or not line.strip())
        if prose and plain and not line.startswith("- "):
            paras[-1][0] += " " + line.strip()
        else:
            paras.append([line, plain])
        prose = plain
    out = []
    for line, plain in paras:
        wrapped = textwrap.wrap(line, width, subsequent_indent="  " * line.startswith("- "), break_long_words=False,
                                break_on_hyphens=False) if plain and width and len(line) > width else [line]  # fmt: skip
        out += [line] if any(re.match(r"\s*([-+*>#]|\d+\.)( |$)", w) for w in wrapped[1:]) else wrapped
    return "\n".join(out)


def render(template: str, width: int | None = 120, filters: dict | None = None, **context) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             extensions=["jinja2.ext.do"], trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)  # fmt: skip
    env.filters.update(FILTERS, **(filters or {}))
    env.globals["holds"], env.tests["startingwith"] = holds, str.startswith
    return reflow(env.get_template(template).render(**context), width)
