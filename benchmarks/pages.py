"""Markdown pages from the Jinja2 templates in benchmarks/templates/ (report.py's results pages, scores.py's table).

A template holds the prose, one paragraph a line; render() joins a paragraph's lines and wraps it at `width` (None: one
line a paragraph); the builder that calls it computes the numbers. A template checks each relation a sentence states
with `{% do holds(condition, "the sentence") %}`.
"""

import os
import re
import textwrap

import jinja2
import numpy as np

import runinfo
import toolbox
from runinfo import minus, sci, signed

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
FILTERS = {
    "f": lambda v, spec=".1f": format(v, spec),
    "m": lambda v, spec=".1f": minus(format(v, spec)),
    "fl": lambda xs, spec=".1f", sep=", ": sep.join(format(v, spec) for v in xs),
    "signed": signed,
    "sci": sci,
    "minus": minus,
    "seeds": runinfo.seeds_text,
    "count": runinfo.count_word,
    "mean": lambda xs: float(np.mean(list(xs))),
    "table": lambda rows, head: "\n".join(runinfo.md_table(head, rows)),
}


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
    env.globals.update(holds=holds)
    env.tests.update(startingwith=str.startswith)
    return reflow(env.get_template(template).render(**context), width)
