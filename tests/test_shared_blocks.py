"""The blocks marked `# --- shared: NAME ---` ... `# --- end ---` must be byte-identical in every algorithm file.

Fix a bug once, in algorithms/orpo.py, then copy it everywhere with:  python tests/test_shared_blocks.py --sync
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("orpo", "mopo", "oroo", "mbpo", "td3bc")
BLOCK = re.compile(r"^# --- shared: (\w+) ---\n(.*?)^# --- end ---\n", re.S | re.M)
# blocks every file must carry; td3bc.py (model-free) has no ensemble, uncertainty, termination or rollouts
REQUIRED = {"imports", "data", "evaluation", "layers", "agents", "buffers", "runs"}
MODEL_BASED = {"ensemble", "uncertainty", "termination", "rollouts"}


def blocks(path: str) -> dict[str, str]:
    text = open(path).read()
    found = BLOCK.findall(text)
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), f"{path}: a shared block appears twice"
    assert text.count("# --- shared: ") == len(found), f"{path}: a shared block is not closed by '# --- end ---'"
    return dict(found)


def present(root: str = ROOT) -> list[str]:
    return [f for f in FILES if os.path.isfile(os.path.join(root, "algorithms", f + ".py"))]


def check(root: str = ROOT) -> None:
    reference = blocks(os.path.join(root, "algorithms", "orpo.py"))
    assert REQUIRED | MODEL_BASED <= set(reference)
    for name in present(root):
        other = blocks(os.path.join(root, "algorithms", name + ".py"))
        need = REQUIRED | (set() if name == "td3bc" else MODEL_BASED)
        assert need <= set(other), f"{name}.py lacks shared block(s) {sorted(need - set(other))}"
        for block, body in other.items():
            assert block in reference, f"{name}.py has a shared block '{block}' that orpo.py lacks"
            assert body == reference[block], f"shared block '{block}' differs between orpo.py and {name}.py; run python tests/test_shared_blocks.py --sync"


def test_shared_blocks_are_identical():
    check()


def test_the_check_catches_a_one_character_difference(tmp_path):
    import pytest

    (tmp_path / "algorithms").mkdir()
    text = open(os.path.join(ROOT, "algorithms", "orpo.py")).read()
    (tmp_path / "algorithms" / "orpo.py").write_text(text)
    (tmp_path / "algorithms" / "mopo.py").write_text(text)
    check(str(tmp_path))
    (tmp_path / "algorithms" / "mopo.py").write_text(text.replace("os.replace(path + \".tmp\", path)", "os.replace(path + \".tmp\",path)", 1))
    with pytest.raises(AssertionError, match="'runs' differs"):
        check(str(tmp_path))


def sync() -> None:
    """Copy every shared block of orpo.py into the other algorithm files."""
    reference = blocks(os.path.join(ROOT, "algorithms", "orpo.py"))
    for name in present():
        path = os.path.join(ROOT, "algorithms", name + ".py")
        text = open(path).read()
        new = BLOCK.sub(lambda m: f"# --- shared: {m.group(1)} ---\n{reference[m.group(1)]}# --- end ---\n", text)
        if new != text:
            open(path, "w").write(new)
            print(f"synced {path}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--sync"]:
        sync()
    else:
        sys.exit("usage: python tests/test_shared_blocks.py --sync")
