"""The shared blocks: byte-identical wherever carried, carried only where used, and in tutorial order.

The check and the sync tool live in .ci/sync_shared.py (`python .ci/sync_shared.py` copies orpo.py's blocks to the
other files); these tests only read files.
"""

import ast
import io
import os
import re
import sys
import tokenize

import pytest
from conftest import ROOT, load_module

sync_shared = load_module(".ci/sync_shared.py", "sync_shared")
blocks = sync_shared.blocks  # tests/test_baselines.py reads them
MODEL = ["layers", "model"]
MODEL_BASED = MODEL[1:]  # not in td3bc.py
# the blocks each file carries, in order, before `main`; everything else a run needs is in algorithms/plumbing.py
CARRIES = {"orpo": [*MODEL, "agents", "sac", "td3bc", "buffers", "mixing"], "mopo": [*MODEL, "agents", "sac", "td3bc",
           "buffers", "mixing"], "oroo": [*MODEL, "agents", "sac", "buffers", "mixing"], "mbpo": [*MODEL, "agents",
           "sac", "buffers", "mixing"], "td3bc": ["layers", "agents", "td3bc", "buffers"]}  # fmt: skip


def test_shared_blocks_are_identical():
    assert sync_shared.differences() == []


def test_the_check_catches_a_one_character_difference(tmp_path):
    (tmp_path / "algorithms").mkdir()
    text = open(os.path.join(ROOT, "algorithms", "orpo.py")).read()
    (tmp_path / "algorithms" / "orpo.py").write_text(text)
    (tmp_path / "algorithms" / "mopo.py").write_text(text)
    assert sync_shared.differences(str(tmp_path)) == []
    changed = text.replace("t.lerp_(s, tau)", "t.lerp_(s,tau)", 1)
    (tmp_path / "algorithms" / "mopo.py").write_text(changed)
    assert sync_shared.differences(str(tmp_path)) == ["shared block 'agents' differs between orpo.py and mopo.py"]
    sync_shared.sync(str(tmp_path))
    assert (tmp_path / "algorithms" / "mopo.py").read_text() == text


@pytest.mark.parametrize("name", list(CARRIES))
def test_each_file_carries_its_blocks_in_tutorial_order(name):
    text = open(os.path.join(ROOT, "algorithms", name + ".py")).read()
    marks = [(m.start(), m.group(1)) for m in re.finditer(r"^# --- shared: (\w+) ---$", text, re.M)]
    marks += [(m.start(), "main") for m in re.finditer(r"^def main\(", text, re.M)]
    assert [block for _, block in sorted(marks)] == [*CARRIES[name], "main"]


@pytest.mark.parametrize("name", list(CARRIES))
def test_a_method_file_imports_only_plumbing_and_third_party_packages(name):
    """The two files a user copies: the method file and plumbing.py (no other file of this repo)."""
    tree = ast.parse(open(os.path.join(ROOT, "algorithms", name + ".py")).read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    local = {os.path.splitext(f)[0] for d in ("algorithms", "datasets", "benchmarks",
                              "toy") for f in os.listdir(os.path.join(ROOT, d))}  # fmt: skip
    assert imported & local == {"plumbing"}
    assert not imported - local - set(sys.stdlib_module_names) - {"numpy", "torch", "tqdm", "plumbing"}


@pytest.mark.parametrize("name", list(CARRIES))
def test_every_carried_block_is_used_outside_itself(name):
    """A file carries only what it runs: every function, class and constant a block defines is used in the file
    beyond its own definition (a block whose names are all unused would be dead code in that file)."""
    text = open(os.path.join(ROOT, "algorithms", name + ".py")).read()
    tokens = []  # the names in code, and in f-strings' fields (a name used only in a comment does not count)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME:
            tokens.append(tok.string)
        elif tok.type == tokenize.STRING and re.match(r"[rRbB]*[fF]", tok.string):
            tokens += [w for field in re.findall(r"\{([^{}]*)\}", tok.string) for w in re.findall(r"\w+", field)]
    for block, body in sync_shared.blocks(os.path.join(ROOT, "algorithms", name + ".py")).items():
        defined = [a or b for a, b in re.findall(r"^(?:def|class) (\w+)|^([A-Z_]+) =", body, re.M)]
        unused = [d for d in defined if tokens.count(d) < 2]  # only its own definition
        assert not unused, f"{name}.py carries {', '.join(unused)} (shared block '{block}') but never uses it"


def test_plumbings_public_surface_is_what_the_method_files_import():
    """plumbing.__all__ (listed in its docstring) names exactly what the method files take from it: a new import must
    be declared there, and a name no file uses any more leaves it."""
    imported = set()
    for name in CARRIES:
        tree = ast.parse(open(os.path.join(ROOT, "algorithms", name + ".py")).read())
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "plumbing"
                     for a in n.names}  # fmt: skip
    tree = ast.parse(open(os.path.join(ROOT, "algorithms", "plumbing.py")).read())
    (surface,) = [ast.literal_eval(n.value) for n in tree.body if isinstance(n,
     ast.Assign) and n.targets[0].id == "__all__"]  # fmt: skip
    assert set(surface) == imported
    assert all(name in ast.get_docstring(tree) for name in surface)
