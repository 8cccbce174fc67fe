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
        check_output_path(problems, dataset_path(args.name or "", args.data_dir, args.out), "--out/--name")
    return problems


def main(args: Args) -> None:
    arrays, attrs = [], []
    for part in args.parts:
        path = part_path(part, args.data_dir)
        with h5py.File(path, "r") as f:
            missing = [k for k in DATA_KEYS if k not in f]
            if missing:
                raise ValueError(f"{path} lacks {', '.join(missing)}; it is not a D4RL-layout dataset")
            arrays.append({k: f[k][()] for k in DATA_KEYS})
            attrs.append(dict(f.attrs))
        if "behavior_mean_return" not in attrs[-1]:
            raise ValueError(f"{path} has no behavior_mean_return attr; make it with datasets/collect.py")
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
