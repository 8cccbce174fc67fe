"""Fetch D4RL's MuJoCo v2 files into the folder the algorithm files read, where their own download on first use (d4rl's
host only, as d4rl does) is not enough: the original host first, then a public mirror; every read times out after 60 s;
a file cut short (it does not open as HDF5) is removed, as are the folders made for it. A file already there is kept
(a damaged one is named by the run that reads it: delete it and fetch again).

    python datasets/fetch_d4rl.py --env hopper-medium-v2 walker2d-medium-replay-v2
    python datasets/fetch_d4rl.py --env all --data-dir /data/d4rl

The files go to --data-dir, else $D4RL_DATASET_DIR, else ~/.d4rl/datasets, under d4rl's own cache names
(hopper_medium-v2.hdf5), which is where `python algorithms/orpo.py --env hopper-medium-v2` looks.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass

import h5py
import torch

from common import check_output_path, data_dir, run_cli
from plumbing import D4RL_NAMES, D4RL_URL, UserError

# the original host first, then a public mirror of the same files
URLS = (D4RL_URL + "{file}", "https://huggingface.co/datasets/imone/D4RL/resolve/main/{file}")


@dataclass
class Args:
    env: tuple[str, ...] = ("hopper-medium-v2",)
    """D4RL names (hopper-medium-v2, walker2d-medium-replay-v2, ...), or `all` for the 12"""
    data_dir: str | None = None
    """where the algorithm files read datasets (None: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""


def check_flags(args: Args) -> list[str]:
    unknown, problems = [e for e in args.env if e not in (*D4RL_NAMES, "all")], []
    if unknown or not args.env:
        problems.append(f"--env {' '.join(unknown)}: give D4RL names or all ({', '.join(D4RL_NAMES)})")
    check_output_path(problems, data_dir(args.data_dir) / cache_name(D4RL_NAMES[0]), "--data-dir")
    return problems


def cache_name(env: str) -> str:
    """d4rl's own file name: hopper-medium-replay-v2 -> hopper_medium_replay-v2.hdf5 (plumbing.resolve_task's rule)."""
    domain, kind = env.split("-", 1)
    return f"{domain}_{kind.removesuffix('-v2').replace('-', '_')}-v2.hdf5"


def download(urls: list[str], path: str) -> str:
    """The first URL that gives a file opening as HDF5, by torch.hub, each read timing out after 60 s (a server that
    accepts and never answers); a file cut short is removed, as are the folders made for it (also on Ctrl-C). Returns
    the URL."""
    made, folder, reasons = [], os.path.dirname(os.path.abspath(path)), []
    while not os.path.isdir(folder):  # the folders this download makes, deepest first
        made, folder = made + [folder], os.path.dirname(folder)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(60)
    try:
        for url in urls:
            try:
                torch.hub.download_url_to_file(url, path)
                with h5py.File(path, "r"):
                    return url
            except Exception as e:  # URLError, HTTPError, a timeout, an HDF5 file cut short
                reasons.append(f"{url}: {getattr(e, 'reason', e)}")
                with contextlib.suppress(OSError):
                    os.remove(path)
    finally:  # also after Ctrl-C: no file, no folder made for it
        socket.setdefaulttimeout(timeout)
        for d in made if not os.path.isfile(path) else []:
            with contextlib.suppress(OSError):
                os.rmdir(d)
    raise UserError(
        f"could not download {os.path.basename(path)} ({'; '.join(reasons)}); put the file at {path}, or, "
        "offline, make a local dataset: python datasets/collect.py --env Hopper-v4 (docs/data.md)"
    )


def main(args: Args) -> None:
    folder = str(data_dir(args.data_dir))
    for env in D4RL_NAMES if "all" in args.env else dict.fromkeys(args.env):
        path = os.path.join(folder, cache_name(env))
        if os.path.isfile(path):
            print(f"{env}: {path} is there already")
            continue
        url = download([u.format(file=cache_name(env)) for u in URLS], path)
        print(f"{env}: {path} from {url}")


if __name__ == "__main__":
    run_cli(
        main,
        Args,
        check_flags,
        on_interrupt="interrupted; the files fetched so far are whole, the one being fetched is dropped",
    )
