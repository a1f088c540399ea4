"""Training on the host: ``train``."""

from __future__ import annotations

from .common import add_design, add_log_flags, bound, positive_int, print_json, say, seed_int


def register(sub) -> None:
    s = sub.add_parser("train", help="train a design on the host (emu/csim/cosim backends)",
                       description="Train a design's agent on the host with its registered algorithm; the run "
                                   "folder holds config.json, metrics.csv, episodes.csv, the checkpoint and "
                                   "reward.png. `rlhls algorithms` lists every hyperparameter --set and --config take.")
    add_design(s)
    s.add_argument("--env", help="gymnasium env id (default: the design's); networks are resized to it")
    s.add_argument("--steps", type=positive_int,
                   help="environment steps, rounded up to whole updates (default: the design's total_timesteps, "
                        "else 1e6)")
    s.add_argument("--seed", type=seed_int, default=0)
    s.add_argument("--backend", choices=("emu", "csim", "cosim", "board"), default="emu",
                   help="what runs the plan's PL and AIE nodes: the numpy models (emu), their C++ compiled with "
                        "g++ (csim), Vitis co-simulation (cosim), the xclbin on the device through XRT (board)")
    s.add_argument("--xclbin", metavar="FILE",
                   help="--backend board: the design's xclbin (RLHLS_XRT=sim: the xrt-sim stand-in's, see "
                        "docs/guide/board.md)")
    s.add_argument("--precision", choices=("fp64", "fp32", "mixed"),
                   help="fp32 on every node, or AP-DRL's per-unit mixed precision; fp64: PPO's float64 path "
                        "(default: the design's)")
    s.add_argument("--plan", metavar="PLAN.json",
                   help="--precision mixed: the partition (plan.json or its folder) to take formats from "
                        "(default: profile + ILP in-process)")
    s.add_argument("--out", help="run folder (default runs/<design>-<env>-s<seed>[-e<experiment>][-<precision>])")
    s.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    s.add_argument("--num-envs", type=positive_int, help="= --set num_envs=N")
    s.add_argument("--num-steps", type=positive_int, help="= --set num_steps=T (the rollout length)")
    s.add_argument("--experiment", type=int, help="= --set experiment=K (HEPPO-GAE Table III, PPO)")
    add_log_flags(s, quiet="no progress output", verbose="show what the environments' libraries print")
    s.add_argument("--json", action="store_true", help="print a summary of the run as JSON at the end")
    s.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    from rlhls.host.train import train_design
    from rlhls.partition.plan import load_plan

    extra = {k: v for k, v in (("num_envs", args.num_envs), ("num_steps", args.num_steps),
                               ("experiment", args.experiment)) if v is not None}
    run = train_design(bound(args, precision=args.precision, extra=extra), out=args.out, steps=args.steps,
                       seed=args.seed, backend=args.backend, plan=load_plan(args.plan) if args.plan else None,
                       resume=args.resume, progress=not (args.quiet or args.json), say=say(args.quiet or args.json),
                       log=None if args.verbose else _devnull(), xclbin=args.xclbin)
    if args.json:
        print_json(run.to_json())
    else:
        print(f"{run.updates} updates, {run.env_steps} env steps -> {run.folder}")
    return 0


def _devnull():
    import os

    return os.devnull
