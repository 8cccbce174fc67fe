"""The scale of every uncertainty heuristic u(s, a), so a user who tunes λp knows what it multiplies.

    python datasets/collect.py --env Hopper-v4 --policy random --steps 30000 --name local/hopper-random-30k
    python benchmarks/uncertainty_scales.py --envs local/hopper-random-30k local/walker2d-random-30k --out docs/uncertainty_scales.md

For each dataset: fit the ensemble exactly as orpo.py does (default sizes 7 × 4×200, 5 elites), then report the
median u of each heuristic (a) on D's own (s, a) pairs and (b) after 5 model steps of a uniform random policy
started from D's states, and the median |r| of D for comparison. The same model serves every heuristic.
"""

import os
import sys
import time
from dataclasses import dataclass, field

import torch

import toolbox  # noqa: E402  (the scripts' one error type, flags and command line; algorithms/orpo.py as a module)
import plumbing  # noqa: E402  (algorithms/, put on the path by toolbox)
import runinfo  # noqa: E402  (md_table)


@dataclass
class Args:
    envs: list[str] = field(default_factory=lambda: ["local/hopper-random"])
    """datasets (any --env value of algorithms/orpo.py)"""
    data_dir: str | None = None
    """where the datasets live (default: $D4RL_DATASET_DIR or ~/.d4rl/datasets)"""
    rows: int = 5000
    """state-action pairs of D on which u is measured, and start states of the 5-step rollouts"""
    steps: int = 5
    """model steps away from D"""
    seed: int = 1
    """seed of the fit and the rollouts"""
    threads: int = 1
    """torch threads"""
    out: str = "runs/uncertainty_scales.md"
    """markdown table written here (default under runs/, not committed; docs/uncertainty_scales.md was made with
    --out docs/uncertainty_scales.md, the command at the top of this file)"""
    extra: str = ""
    """extra orpo.py flags for the ensemble, e.g. --extra="--dynamics-max-epochs 5" (for a quick look)"""


def measure(orpo, env: str, args: Args) -> dict:
    import shlex

    run = orpo.Args(env=env, data_dir=args.data_dir, seed=args.seed, cuda=False)
    if args.extra:
        run = plumbing.parse_args(orpo.Args, ["--env", env, "--seed", str(args.seed), "--no-cuda", *shlex.split(
            args.extra)] + (["--data-dir", args.data_dir] if args.data_dir else []))  # fmt: skip
    task, path = plumbing.resolve_task(run.env, run.dataset_path, run.eval_env, run.data_dir)
    torch.manual_seed(args.seed)
    data = {k: torch.as_tensor(v) for k, v in plumbing.load_transitions(path).items()}
    dims = data["obs"].shape[1], data["act"].shape[1]
    model = orpo.EnsembleDynamics(*dims, run.dynamics_hidden_dims, run.num_ensemble, run.num_elites)
    t0 = time.time()
    fit = orpo.fit_dynamics(model, data, run.dynamics_lr, run.dynamics_batch_size, run.dynamics_max_epochs,
                            run.dynamics_patience, run.dynamics_holdout_ratio, run.dynamics_max_holdout)  # fmt: skip
    fit_seconds = time.time() - t0
    idx = torch.randperm(len(data["obs"]))[: args.rows]
    obs, act = data["obs"][idx], data["act"][idx]
    terminal = orpo.termination_fn(task.domain)
    row = dict(env=task.name, rows=len(data["obs"]), holdout_mse=fit["dynamics/holdout_mse"], fit_seconds=fit_seconds,
               median_abs_reward=float(data["rew"].abs().median()))  # fmt: skip
    with torch.no_grad():
        mean, logvar = model(torch.cat([obs, act], -1))
        std = (0.5 * logvar).exp()
        for kind in orpo.UNCERTAINTIES:
            row[f"D/{kind}"] = float(orpo.uncertainty(mean, std, kind).median())
        state, alive = obs, torch.ones(len(obs), dtype=torch.bool)
        for _ in range(args.steps):  # a uniform random policy, as far from D's actions as the box allows
            action = torch.rand(len(state), act.shape[1]) * 2 - 1
            state = model.step(state, action)[0]
            alive &= ~terminal(state)
            state = torch.nan_to_num(state)
        action = torch.rand(len(state), act.shape[1]) * 2 - 1
        mean, logvar = model(torch.cat([state, action], -1))
        std = (0.5 * logvar).exp()
        row["alive_after_steps"] = float(alive.float().mean())
        for kind in orpo.UNCERTAINTIES:
            row[f"far/{kind}"] = float(orpo.uncertainty(mean, std, kind)[alive].median())
    return row


def main(args: Args) -> None:
    if problems := [f"--{k} {getattr(args, k)}: must be at least 1" for k in ("rows", "steps", "threads")
                    if getattr(args, k) < 1]:  # fmt: skip
        raise toolbox.UsageError("\n".join(problems))
    torch.set_num_threads(args.threads)
    orpo = toolbox.algorithm("orpo")
    rows = []
    for env in args.envs:
        rows.append(measure(orpo, env, args))
        print(rows[-1], flush=True)
    kinds = orpo.UNCERTAINTIES
    table = []
    for r in rows:
        for where, label in (("D", "on D"), ("far", f"{args.steps} model steps away")):
            ratio = r[f"{where}/mixture_var"] / max(r[f"{where}/ensemble_var"], 1e-30)
            table.append([f"{r['env']} ({r['rows']} rows)", label, *(f"{r[f'{where}/{k}']:.3g}" for k in kinds),
                          f"1 : {ratio:.0f}", f"{r['median_abs_reward']:.3g}"])  # fmt: skip
    head = ["dataset", "where", *kinds, "ensemble_var : mixture_var", "median abs(r) of D"]
    lines = runinfo.md_table(head, table)
    cpu = toolbox.device_name(torch.device("cpu"))
    fits = "; ".join(f"{r['env']}: holdout MSE {r['holdout_mse']:.4f}, fit {r['fit_seconds']:.0f} s" for r in rows)
    extra = f' --extra="{args.extra}"' if args.extra else ""
    text = (
        f"# Uncertainty scales\n\nMade by `python benchmarks/uncertainty_scales.py --envs {' '.join(args.envs)}{extra}` on {cpu}, "
        f"{time.strftime('%Y-%m-%d')}, seed {args.seed}. Median u over {args.rows} of D's (s, a) pairs, and over the same "
        f"start states after {args.steps} model steps of a uniform random policy (rows that terminated are left out). "
        f"Ensemble as orpo.py fits it ({fits}).\n\n" + "\n".join(lines) + "\n"
    )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    toolbox.write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(toolbox.cli(main, Args, sys.argv[1:]))
