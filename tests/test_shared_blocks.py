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
CARRIES = {"orpo": [*MODEL, "agents", "sac", "schedule", "td3bc", "buffers", "mixing", "steps"], "mopo": [*MODEL,
           "agents", "sac", "schedule", "td3bc", "buffers", "mixing", "steps"], "oroo": [*MODEL, "agents", "sac",
           "schedule", "buffers", "mixing", "steps"], "mbpo": [*MODEL, "agents", "sac", "schedule", "buffers", "mixing",
           "steps"], "td3bc": ["layers", "agents", "td3bc", "buffers", "steps"], "cql": ["layers", "agents", "sac",
           "cql", "buffers", "steps"]}  # fmt: skip


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


def callbacks(name: str) -> list[str]:
    """Calls from a method file into plumbing that hand it one of the file's own functions (or a lambda)."""
    tree = ast.parse(open(os.path.join(ROOT, "algorithms", name + ".py")).read())
    plumbing = {a.asname or a.name for n in tree.body if isinstance(n, ast.Try) for i in n.body
                if isinstance(i, ast.ImportFrom) and i.module == "plumbing" for a in i.names}  # fmt: skip
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    found = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
        args = [*call.args, *(k.value for k in call.keywords)]
        handed = [ast.unparse(a) for a in args if isinstance(a, ast.Lambda) or isinstance(a, ast.Name) and a.id in own]
        if call.func.id in plumbing and handed:
            found.append(f"{call.func.id}({', '.join(handed)})")
    return sorted(found)


@pytest.mark.parametrize("name", list(CARRIES))
def test_main_calls_plumbing_and_plumbing_never_calls_back(name):
    """#69: `main` owns the run; plumbing's functions take values, not the method's functions. The one exception is
    the entry point, cli(main, Args)."""
    assert callbacks(name) == ["cli(main, Args)"]


def test_the_callback_check_finds_a_function_handed_to_plumbing(tmp_path, monkeypatch):
    text = open(os.path.join(ROOT, "algorithms", "td3bc.py")).read()
    (tmp_path / "algorithms").mkdir()
    planted = text.replace(
        "log(writer, rows, run_dir, epoch, metrics,", "log(writer, rows, run_dir, epoch, gradient_step,"
    )
    (tmp_path / "algorithms" / "td3bc.py").write_text(planted)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert callbacks("td3bc") == ["cli(main, Args)", "log(gradient_step)"]


def test_plumbing_holds_no_run_state():
    """No class in plumbing holds the run (its classes are the error types and the flags' dataclasses) and no module
    global is assigned after import."""
    tree = ast.parse(open(os.path.join(ROOT, "algorithms", "plumbing.py")).read())
    classes = {n.name: [ast.unparse(b) for b in n.bases] for n in tree.body if isinstance(n, ast.ClassDef)}
    assert classes == {"UserError": ["Exception"], "UsageError": ["UserError"], "Stop": ["KeyboardInterrupt"],
                       "Task": [], "RunArgs": []}  # fmt: skip
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)]
