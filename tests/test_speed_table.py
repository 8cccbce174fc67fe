"""benchmarks/speed.py's two-column table says which column is faster, in words a reader cannot misread."""

import speed  # noqa: E402


def row(name, unit, a, b, higher):
    return dict(name=name, unit=unit, values={"eager": a, "graphs": b}, higher=higher, gflop=None, ref=None, note="")


def test_the_pair_column_says_faster_or_slower_by_a_ratio_above_one():
    # the 2026-11-27 H100 numbers: eager's epoch took 12.6 s, the graphs' 1.97 s; eager's rollouts ran 1.19x the rate
    table = speed.render(
        [
            row("epoch", "s", 12.6, 1.97, False),
            row("rollouts", "transitions/s", 1582976, 1330260, True),
            row("same", "s", 1.0, 1.0, False),
        ],
        ["eager", "graphs"],
        None,
    ).splitlines()
    assert table[0].split(" | ")[4] == "eager vs graphs"
    cells = [line.split(" | ")[4] for line in table[2:]]
    assert cells == ["6.40× slower", "1.19× faster", ""]
