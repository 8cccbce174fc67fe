"""The blocks marked `# --- shared: NAME ---` ... `# --- end ---` are byte-identical in every algorithm file that carries
them; algorithms/orpo.py is the reference for every block it carries, algorithms/cql.py for the one it lacks (cql,
which combo.py carries too).

Fix a bug once, in the reference file, then copy it to the other files:
    python .ci/sync_shared.py            # rewrite the other files' copies of orpo.py's blocks
    python .ci/sync_shared.py --check    # only report differences (exit 1); tests/test_shared_blocks.py runs this check
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("orpo", "mopo", "oroo", "mbpo", "td3bc", "cql", "combo")
BLOCK = re.compile(r"^# --- shared: (\w+) ---\n(.*?)^# --- end ---\n", re.S | re.M)


def blocks(path: str) -> dict[str, str]:
    """A file's shared blocks by name, in file order."""
    with open(path) as f:
        text = f.read()
    found = BLOCK.findall(text)
    names = [name for name, _ in found]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: a shared block appears twice")
    if text.count("# --- shared: ") != len(found):
        raise ValueError(f"{path}: a shared block is not closed by '# --- end ---'")
    return dict(found)


def present(root: str = ROOT) -> list[str]:
    return [f for f in FILES if os.path.isfile(os.path.join(root, "algorithms", f + ".py"))]


def reference_blocks(root: str = ROOT) -> dict[str, str]:
    """orpo.py's blocks, and cql.py's that orpo.py lacks (where cql.py exists)."""
    cql = os.path.join(root, "algorithms", "cql.py")
    return (blocks(cql) if os.path.isfile(cql) else {}) | blocks(os.path.join(root, "algorithms", "orpo.py"))


def differences(root: str = ROOT) -> list[str]:
    """One line per block that differs from the reference's or that no reference carries."""
    reference = reference_blocks(root)
    problems = []
    for name in present(root):
        for block, body in blocks(os.path.join(root, "algorithms", name + ".py")).items():
            if block not in reference:
                problems.append(f"{name}.py has a shared block '{block}' that neither orpo.py nor cql.py carries")
            elif body != reference[block]:
                source = "orpo.py" if block in blocks(os.path.join(root, "algorithms", "orpo.py")) else "cql.py"
                problems.append(f"shared block '{block}' differs between {source} and {name}.py")
    return problems


def sync(root: str = ROOT) -> None:
    """Copy every reference block into the other algorithm files that carry it."""
    reference = reference_blocks(root)
    for name in present(root):
        path = os.path.join(root, "algorithms", name + ".py")
        with open(path) as f:
            text = f.read()
        new = BLOCK.sub(lambda m: f"# --- shared: {m.group(1)} ---\n{reference[m.group(1)]}# --- end ---\n", text)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"synced {path}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        problems = differences()
        print("\n".join(problems) or "shared blocks are in sync")
        sys.exit(1 if problems else 0)
    if sys.argv[1:]:
        sys.exit("usage: python .ci/sync_shared.py [--check]")
    sync()
