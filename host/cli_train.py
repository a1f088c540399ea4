"""`rlhls train DESIGN`: train a design's agent on the host; see host/runner.py for the run folder.

    rlhls train DESIGN [--env ID] [--steps N] [--seed S] [--backend emu|csim|cosim]
                       [--experiment K] [--out DIR] [--resume]
                       [--num-envs N] [--num-steps T] [--set key=value ...] [--quiet]

``--num-envs`` / ``--num-steps`` / ``--experiment`` are shorthands for ``--set num_envs=N`` etc.;
``--set`` overrides any hyperparameter of the algorithm (``rlhls.host.ppo.CLEANRL_DEFAULTS``
lists PPO's: e.g. ``--set update_epochs=4 --set anneal_lr=false --set quant_bits=6``).
The default run folder is ``runs/<design>-<env>-s<seed>-e<experiment>``.
"""

from __future__ import annotations

import argparse
import sys

from rlhls.designs.errors import RlhlsError

TRAINERS = ("ppo",)


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def add_train_arguments(parser) -> None:
    parser.add_argument("design", help="design name (rlhls designs)")
    parser.add_argument("--env", help="gymnasium env id (default: the design's); networks are resized to it")
    parser.add_argument("--steps", type=_positive, default=1_000_000, help="environment steps (default 1e6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("emu", "csim", "cosim"), default="emu",
                        help="what runs the GAE kernel (default emu)")
    parser.add_argument("--experiment", type=int, choices=(1, 2, 3, 4, 5),
                        help="HEPPO-GAE Table III configuration (default: the design's, 5 for heppo-ppo)")
    parser.add_argument("--out", help="run folder (default runs/<design>-<env>-s<seed>-e<experiment>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument("--num-envs", type=_positive, help="= --set num_envs=N")
    parser.add_argument("--num-steps", type=_positive, help="= --set num_steps=T (rollout length)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a hyperparameter (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _overrides(args) -> dict:
    out = {}
    for item in args.overrides:
        if "=" not in item:
            raise RlhlsError(f"--set {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    for k, v in (("num_envs", args.num_envs), ("num_steps", args.num_steps), ("experiment", args.experiment)):
        if v is not None:
            out[k] = v
    return out


def run_train(args) -> int:
    from rlhls.designs.registry import get_design

    from .ppo import PPO, resolve_hyperparams
    from .runner import train

    design = get_design(args.design)
    if design.algorithm not in TRAINERS:
        raise RlhlsError(f"design '{design.name}' uses {design.algorithm.upper()}; "
                         f"rlhls train runs {', '.join(a.upper() for a in TRAINERS)} so far")
    overrides = _overrides(args)
    hp = resolve_hyperparams(design, overrides)  # validates before anything is written
    env_id = args.env or design.env_id
    out = args.out or f"runs/{design.name}-{env_id}-s{args.seed}-e{hp['experiment']}"
    config = {"design": design.name, "algorithm": design.algorithm, "env": env_id, "seed": args.seed,
              "backend": args.backend, "experiment": hp["experiment"], "hyperparams": hp}

    def make():
        return PPO(design, env_id=env_id, seed=args.seed, backend=args.backend, hyperparams=overrides)

    res = train(make, config, out, steps=args.steps, resume=args.resume, progress=not args.quiet,
                title=f"{design.name} on {env_id} (exp {hp['experiment']}, seed {args.seed})")
    print(f"{res['updates']} updates, {res['env_steps']} env steps -> {res['out']}")
    return 0


def main(argv=None) -> int:  # standalone use until the lead wires it into rlhls/cli.py
    p = argparse.ArgumentParser(prog="rlhls train")
    add_train_arguments(p)
    try:
        return run_train(p.parse_args(argv))
    except RlhlsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
