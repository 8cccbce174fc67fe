"""Join datasets of the same env end to end, as D4RL made medium-expert (the medium data, then the expert data).

    python datasets/join.py local/hopper-medium local/hopper-expert --name local/hopper-medium-expert

Each part is a dataset name under the data dir (<data_dir>/<name>.hdf5) or a path ending in .hdf5. The parts must
share env_id, reward_fn and shapes, and carry the behaviour attrs collect.py and sac.py write; the joined file's
behaviour return is the mean over all the parts' whole episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import tyro

from common import (
    DATA_KEYS,
    REF_SCORES,
    check_output_path,
    check_overwrite,
    dataset_path,
    normalized_score,
    run_cli,
    write_dataset,
)


@dataclass
class Args:
    parts: tyro.conf.Positional[tuple[str, ...]]
    """the datasets to join, in order: names like local/hopper-medium, or .hdf5 paths"""
    name: str | None = None
    """name of the joined dataset, e.g. local/hopper-medium-expert"""
    data_dir: str | None = None
    """overrides $D4RL_DATASET_DIR / ~/.d4rl/datasets"""
    out: str | None = None
    """write to this exact path instead of <data_dir>/<name>.hdf5"""
    overwrite: bool = False
    """replace an existing dataset at the output path (never one of the parts)"""


def part_path(part: str, data_dir: str | None) -> Path:
    return Path(part).expanduser() if part.endswith(".hdf5") else dataset_path(part, data_dir)


def check_flags(args: Args) -> list[str]:
    problems = []
    if len(args.parts) < 2:
        problems.append(f"give at least two datasets to join, got {len(args.parts)}")
    if not args.name and not args.out:
        problems.append("--name is required (e.g. --name local/hopper-medium-expert), or --out")
    for part in args.parts:
        if not part_path(part, args.data_dir).is_file():
            problems.append(f"{part}: no such dataset ({part_path(part, args.data_dir)}); make it first")
    if args.name or args.out:
        path = dataset_path(args.name or "", args.data_dir, args.out)
        check_output_path(problems, path, "--out/--name")
        check_overwrite(
            problems, path, "--out/--name", args.overwrite, [part_path(p, args.data_dir) for p in args.parts]
        )
    return problems


# The attrs a part must carry: what collect.py and sac.py write (the behaviour weights the joined mean by episodes).
PART_ATTRS = ("env_id", "reward_fn", "seed", "behavior_mean_return", "behavior_episodes")


def read_part(path: Path) -> tuple[dict, dict]:
    """A part's arrays and attrs; every problem is one line naming the file (a ValueError)."""
    import plumbing  # the algorithm files' data check (run_cli put algorithms/ on the path)

    try:  # keys, shapes, dtypes, NaN rows, 0/1 ends: a part the algorithms would refuse is refused here
        plumbing.load_transitions(str(path))
    except plumbing.UserError as e:
        raise ValueError(str(e)) from None
    with h5py.File(path, "r") as f:
        arrays = {k: f[k][()] for k in DATA_KEYS}
        attrs = dict(f.attrs)
    missing = [k for k in PART_ATTRS if k not in attrs]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)} attr; make it with datasets/collect.py or sac.py")
    episodes, mean = attrs["behavior_episodes"], attrs["behavior_mean_return"]
    numbers = isinstance(episodes, (int, np.integer)) and isinstance(mean, (float, int, np.floating, np.integer))
    if not (numbers and episodes >= 1 and np.isfinite(mean)):
        raise ValueError(
            f"{path}: behavior_episodes {episodes} and behavior_mean_return {mean} must be a count >= 1 and a "
            "finite number; make it again with datasets/collect.py"
        )
    return arrays, attrs


def main(args: Args) -> None:
    arrays, attrs = [], []
    for part in args.parts:
        data, a = read_part(part_path(part, args.data_dir))
        arrays.append(data)
        attrs.append(a)
    first = attrs[0]
    for part, a, data in zip(args.parts, attrs, arrays):
        for key in ("env_id", "reward_fn"):
            if a.get(key) != first.get(key):
                raise ValueError(f"{part} has {key} {a.get(key)!r}, {args.parts[0]} has {first.get(key)!r}")
        for key in ("observations", "actions"):
            if data[key].shape[1:] != arrays[0][key].shape[1:]:
                raise ValueError(f"{part}'s {key} have shape {data[key].shape[1:]}, not {arrays[0][key].shape[1:]}")
    joined = {k: np.concatenate([data[k] for data in arrays]) for k in DATA_KEYS}
    episodes = sum(int(a["behavior_episodes"]) for a in attrs)
    mean = sum(float(a["behavior_mean_return"]) * int(a["behavior_episodes"]) for a in attrs) / episodes
    behavior = {"behavior_mean_return": mean, "behavior_episodes": episodes}
    if first["env_id"] in REF_SCORES and first["reward_fn"] == "env":
        behavior["behavior_normalized_score"] = normalized_score(first["env_id"], mean)
    path = write_dataset(
        dataset_path(args.name or "", args.data_dir, args.out),
        joined,
        env_id=str(first["env_id"]),
        reward_fn=str(first["reward_fn"]),
        policy=" + ".join(str(a.get("policy")) for a in attrs),
        seed=int(first["seed"]),
        created_by=Path(__file__).name,
        extra_attrs=behavior
        | {"parts": list(args.parts), "part_steps": [len(data["rewards"]) for data in arrays]}
        | {"part_behavior_mean_returns": [float(a["behavior_mean_return"]) for a in attrs]},
    )
    print(f"{len(joined['rewards'])} transitions, {episodes} whole episodes, mean return {mean:.1f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main, Args, check_flags)
