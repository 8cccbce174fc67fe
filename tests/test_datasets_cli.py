"""The datasets/ scripts' command line in-process (each script run as __main__ with an argv): what they refuse before
any work. Their collections end to end are in test_datasets.py and test_hostile_scripts.py (the slow tier)."""

import importlib
import json
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import ROOT

common = importlib.import_module("common")  # conftest puts datasets/ on the path
sac = importlib.import_module("sac")
jump = importlib.import_module("halfcheetah_jump")


def script(name, *argv, capsys, monkeypatch) -> tuple[int, str]:
    """datasets/NAME's command line in this process: (exit status, stderr without progress bars)."""
    monkeypatch.setattr(sys, "argv", [name, *map(str, argv)])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(os.path.join(ROOT, "datasets", name), run_name="__main__")
    err = capsys.readouterr().err
    return exit_.value.code, "\n".join(x for x in err.replace("\r", "\n").splitlines() if x and "step/s" not in x)


def dataset(path, steps=200) -> Path:
    """A small dataset with the attrs collect.py writes (join.py reads them)."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(steps, 3)).astype(np.float32)
    data = dict(observations=obs, actions=rng.uniform(-1, 1, (steps, 2)), rewards=rng.normal(size=steps),
                next_observations=obs + 0.1, terminals=np.zeros(steps, bool), timeouts=np.arange(steps) % 50 == 49)  # fmt: skip
    attrs = {"behavior_mean_return": 1.0, "behavior_episodes": 4}
    return common.write_dataset(path, data, env_id="Hopper-v4", reward_fn="env", policy="random", seed=0,
                                created_by="test", extra_attrs=attrs)  # fmt: skip


def test_join_never_writes_over_one_of_its_parts(tmp_path, capsys, monkeypatch):
    """`join.py A B --name A` once replaced A with the joined file (exit 0)."""
    a, b = dataset(tmp_path / "local" / "a.hdf5"), dataset(tmp_path / "local" / "b.hdf5")
    before = a.read_bytes()
    for where in (["--name", "local/a"], ["--name", "local/a", "--overwrite"], ["--out", a, "--overwrite"]):
        code, err = script(
            "join.py", "local/a", b, *where, "--data-dir", tmp_path, capsys=capsys, monkeypatch=monkeypatch
        )
        assert code == 2 and err.count("\n") == 0 and err.startswith("error: "), err
        assert f"{a} is an input" in err and "--overwrite never replaces an input" in err, err
    assert a.read_bytes() == before
    assert sorted(p.name for p in a.parent.iterdir()) == ["a.hdf5", "b.hdf5"]


def test_a_dataset_is_replaced_only_with_overwrite(tmp_path, capsys, monkeypatch):
    """collect.py and join.py once replaced an existing dataset without a word; halfcheetah_jump.py and sac.py
    (checked before their collections, which take hours) would have too."""
    a, b, out = dataset(tmp_path / "a.hdf5"), dataset(tmp_path / "b.hdf5"), tmp_path / "out.hdf5"
    for name, argv, flag in [("collect.py", ["--steps", 50, "--out", out], "--out"),
                             ("join.py", [a, b, "--out", out], "--out/--name")]:  # fmt: skip
        out.write_bytes(b"the user's dataset")
        code, err = script(name, *argv, capsys=capsys, monkeypatch=monkeypatch)
        assert code == 2 and err == f"error: {out} exists; pass --overwrite to replace it, or write elsewhere ({flag})"
        assert out.read_bytes() == b"the user's dataset"
        code, err = script(name, *argv, "--overwrite", capsys=capsys, monkeypatch=monkeypatch)
        assert code == 0 and out.read_bytes()[:4] == b"\x89HDF", (name, err)
    out.write_bytes(b"the user's dataset")
    (problem,) = jump.check_flags(jump.Args(task="halfcheetah-jump-hard", out=str(out)))
    assert problem.startswith(f"{out} exists; pass --overwrite")
    assert jump.check_flags(jump.Args(task="halfcheetah-jump-hard", out=str(out), overwrite=True)) == []
    # sac.py: its replay datasets (one per level) and its run's replay.hdf5
    run, data = tmp_path / "run", tmp_path / "data"
    replay = data / "local" / "hopper-medium-replay.hdf5"
    replay.parent.mkdir(parents=True)
    replay.write_bytes(b"another run's replay")
    args = dict(run_dir=str(run), data_dir=str(data), levels=("medium=33.3",))
    (problem,) = sac.check_flags(sac.Args(**args))
    assert problem == f"{replay} exists; pass --overwrite to replace it, or write elsewhere (--data-dir)"
    assert sac.check_flags(sac.Args(**args, overwrite=True)) == []
    run.mkdir()
    (run / "replay.hdf5").write_bytes(b"a finished run's buffer")
    problems = sac.check_flags(sac.Args(**args))
    assert (
        problems[0] == f"{run / 'replay.hdf5'} exists; pass --overwrite to replace it, or write elsewhere (--run-dir)"
    )
    # a resumed run writes again the replay datasets it wrote itself (snapshots.json names them), no other
    (run / "replay.hdf5").unlink()
    (run / "ckpt.pt").write_bytes(b"")
    assert len(sac.check_flags(sac.Args(**args, resume=True))) == 1
    (run / "snapshots.json").write_text(json.dumps({"medium": {"step": 5000, "replay": str(replay)}}))
    assert sac.check_flags(sac.Args(**args, resume=True)) == []


def policy_file(path, **changes) -> Path:
    net = nn.Sequential(nn.Linear(11, 8), nn.ReLU(), nn.Linear(8, 3))
    policy = {"kind": "deterministic_mlp", "max_action": 1.0, "obs_mean": torch.zeros(11), "obs_std": torch.ones(11),
              "state_dict": net.state_dict()}  # fmt: skip
    torch.save(policy | changes, path)
    return path


def test_collect_never_writes_over_its_policy(tmp_path, capsys, monkeypatch):
    policy = policy_file(tmp_path / "policy.pt")
    code, err = script("collect.py", "--policy", policy, "--steps", 50, "--out", policy, "--overwrite",
                       capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 2 and err == (
        f"error: --out: {policy} is an input ({policy}); write elsewhere (--overwrite never replaces an input)"
    )
    assert torch.load(policy, weights_only=True)["kind"] == "deterministic_mlp"


@pytest.mark.parametrize("where", ["state_dict", "obs_mean", "max_action"])
def test_collect_refuses_a_policy_with_nan_or_infinite_values(where, tmp_path, capsys, monkeypatch):
    """A policy file with NaN weights once made a dataset of NaN actions (exit 0)."""
    good = torch.load(policy_file(tmp_path / "good.pt"), weights_only=True)
    bad = {"state_dict": {**good["state_dict"], "0.weight": torch.full((8, 11), float("nan"))},
           "obs_mean": torch.full((11,), float("inf")), "max_action": float("nan")}[where]  # fmt: skip
    policy = policy_file(tmp_path / "policy.pt", **{where: bad})
    code, err = script("collect.py", "--policy", policy, "--steps", 50, "--out", tmp_path / "d.hdf5",
                       capsys=capsys, monkeypatch=monkeypatch)  # fmt: skip
    assert code == 1 and err.count("\n") == 0 and err.startswith(f"error: {policy}: "), err
    assert "NaN or infinite" in err and where in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.pt", "policy.pt"]  # no dataset


# ------------------------------------------------------------------------------------------------ fetch_d4rl.py
d4rl = importlib.import_module("fetch_d4rl")


def test_d4rl_fetch_puts_the_file_where_a_run_looks_for_it(monkeypatch, tmp_path, capsys):
    """The file fetched under d4rl's cache name is the one plumbing.resolve_task then finds (no second download)."""
    plumbing = importlib.import_module("plumbing")
    fetched = []

    def fake(url, dst, *a, **k):
        fetched.append(url)
        dataset(dst)

    monkeypatch.setattr(d4rl.torch.hub, "download_url_to_file", fake)
    code, err = script("fetch_d4rl.py", "--env", "walker2d-medium-replay-v2", "--data-dir", tmp_path, capsys=capsys,
                       monkeypatch=monkeypatch)  # fmt: skip
    assert code in (0, None) and fetched == [d4rl.D4RL_URL + "walker2d_medium_replay-v2.hdf5"], err
    monkeypatch.setattr(plumbing.torch.hub, "download_url_to_file", lambda *a, **k: 1 / 0)
    task, path = plumbing.resolve_task("walker2d-medium-replay-v2", None, None, str(tmp_path))
    assert path == str(tmp_path / "walker2d_medium_replay-v2.hdf5") and task.gym_id == "Walker2d-v4"


def test_a_failed_first_download_removes_the_folders_it_made_and_no_other(monkeypatch, tmp_path):
    """#71 item 6: the user's own empty folder stays; the ones the download made go."""
    monkeypatch.setattr(d4rl.torch.hub, "download_url_to_file", lambda url, dst, *a, **k: 1 / 0)
    (tmp_path / "mine").mkdir()
    with pytest.raises(d4rl.UserError, match="could not download .*put the file at"):
        d4rl.download(list(d4rl.URLS), str(tmp_path / "mine" / "d4rl" / "datasets" / "x.hdf5"))
    assert os.listdir(tmp_path) == ["mine"] and os.listdir(tmp_path / "mine") == []
    monkeypatch.setattr(
        d4rl.torch.hub, "download_url_to_file", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C: the same folders go
        d4rl.download(list(d4rl.URLS), str(tmp_path / "mine" / "d4rl" / "datasets" / "x.hdf5"))
    assert os.listdir(tmp_path / "mine") == [] and d4rl.socket.getdefaulttimeout() is None


def test_a_download_cut_short_is_not_kept_and_a_silent_server_times_out(monkeypatch, tmp_path):
    """#71 item 6: 5 KB of a promised file is not an HDF5 file: removed, one line; every read has a timeout; the
    mirror is tried after the original host."""
    timeouts = []

    def short(url, dst, *a, **k):
        timeouts.append(d4rl.socket.getdefaulttimeout())
        open(dst, "wb").write(b"\x89HDF" + b"0" * 5000)

    monkeypatch.setattr(d4rl.torch.hub, "download_url_to_file", short)
    with pytest.raises(d4rl.UserError) as e:
        d4rl.download([u.format(file="x.hdf5") for u in d4rl.URLS], str(tmp_path / "x.hdf5"))
    said = str(e.value)
    assert "could not download x.hdf5" in said and -1 < said.find("berkeley") < said.find("hugging"), said  # in order
    assert os.listdir(tmp_path) == [] and timeouts == [60, 60] and d4rl.socket.getdefaulttimeout() is None


def test_d4rl_fetch_refuses_an_unknown_name_before_any_download(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(d4rl.torch.hub, "download_url_to_file", lambda *a, **k: 1 / 0)
    code, err = script("fetch_d4rl.py", "--env", "hopper-mediun-v2", "--data-dir", tmp_path, capsys=capsys,
                       monkeypatch=monkeypatch)  # fmt: skip
    assert code == 2 and "--env hopper-mediun-v2: give D4RL names or all" in err and os.listdir(tmp_path) == []
    code, err = script("fetch_d4rl.py", "--env", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and "--env : give D4RL names or all" in err
    (tmp_path / "a_file").write_text("")
    code, err = script("fetch_d4rl.py", "--data-dir", tmp_path / "a_file", capsys=capsys, monkeypatch=monkeypatch)
    assert code == 2 and "--data-dir: cannot create" in err and "is not a directory" in err
