"""`rlhls train DESIGN`: train a design's agent on the host; see host/runner.py for the run folder.

    rlhls train DESIGN [--env ID] [--steps N] [--seed S] [--backend emu|csim|cosim]
                       [--experiment K] [--precision fp64|fp32|mixed] [--plan PLAN.json] [--out DIR] [--resume]
                       [--num-envs N] [--num-steps T] [--set key=value ...] [--quiet]

``--num-envs`` / ``--num-steps`` / ``--experiment`` are shorthands for ``--set num_envs=N`` etc.
(``--num-steps`` is A2C's ``n_steps``; DQN and DDPG have no rollout length);
``--set`` overrides any hyperparameter of the algorithm (``rlhls.host.ppo.CLEANRL_DEFAULTS``
lists PPO's: e.g. ``--set update_epochs=4 --set anneal_lr=false --set quant_bits=6``).
The default run folder is ``runs/<design>-<env>-s<seed>-e<experiment>`` (PPO in fp64),
``runs/<design>-<env>-s<seed>-e<experiment>-<precision>`` (PPO in fp32 / mixed) or
``runs/<design>-<env>-s<seed>-<precision>`` (DQN, A2C, DDPG).

Precision. ``--precision fp32`` runs every training-graph node on the PS in FP32;
``--precision mixed`` runs each node in its unit's format (AP-DRL §IV-D, ``host/mixed.py``) under
``--plan PLAN.json`` (from ``rlhls partition``) or, without it, under the plan profile + ILP give
for the design's device and batch (solved in-process; the assignment is written to config.json
and a resumed run reuses it). The batch of that plan is the design's training batch: DQN's and
DDPG's ``batch_size``, A2C's ``num_envs x n_steps``, PPO's minibatch
``num_envs x num_steps / num_minibatches``. ``--precision fp64`` is PPO only: the float64 numpy
path of the HEPPO-GAE designs (no plan). Default precision: the design's (``mixed`` for the
AP-DRL designs, ``fp64`` for the HEPPO / CPP PPO designs). DQN, A2C, DDPG and PPO in fp32 / mixed
(``host/dqn.py``, ``host/a2c.py``, ``host/ddpg.py``, ``host/ppo.py``; their ``*_DEFAULTS`` list the
hyperparameters) record ``precision``, ``plan`` and ``plan_source`` in config.json; PPO also its
``experiment``. Default ``--steps``: the design's ``total_timesteps`` if it has one, 1e6
otherwise.
"""

from __future__ import annotations


from rlhls.designs.errors import RlhlsError
from rlhls.partition.cli_profile import positive_int

TRAINERS = ("ppo", "dqn", "a2c", "ddpg")


def add_train_arguments(parser) -> None:
    parser.add_argument("design", help="design name (rlhls designs)")
    parser.add_argument("--env", help="gymnasium env id (default: the design's); networks are resized to it")
    parser.add_argument("--steps", type=positive_int, help="environment steps (default: the design's total_timesteps "
                        "for DQN, else 1e6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("emu", "csim", "cosim"), default="emu",
                        help="what runs the GAE kernel (default emu)")
    parser.add_argument("--experiment", type=int, choices=(0, 1, 2, 3, 4, 5),
                        help="PPO: HEPPO-GAE Table III configuration, 0 = raw rewards (default: the design's, "
                             "5 for heppo-ppo, 0 for apdrl-ppo-mspacman)")
    parser.add_argument("--precision", choices=("fp64", "fp32", "mixed"),
                        help="fp32 on every node, or AP-DRL's per-unit mixed precision; fp64: PPO's float64 path "
                             "(default: the design's: mixed for AP-DRL designs, fp64 for HEPPO / CPP PPO)")
    parser.add_argument("--plan", metavar="PLAN.json",
                        help="--precision mixed: the partition (plan.json or its folder) to take formats from "
                             "(default: profile + ILP in-process)")
    parser.add_argument("--out", help="run folder (default runs/<design>-<env>-s<seed>-<e<experiment>|precision>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument("--num-envs", type=positive_int, help="= --set num_envs=N")
    parser.add_argument("--num-steps", type=positive_int, help="= --set num_steps=T (rollout length)")
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
    if design.algorithm in ("dqn", "a2c", "ddpg"):
        return _run_mixed(args, design, overrides)
    if args.precision is not None:
        overrides["precision"] = args.precision
    hp = resolve_hyperparams(design, overrides)  # validates before anything is written
    if hp["precision"] != "fp64":  # AP-DRL PPO (apdrl-ppo-mspacman, or --precision on any PPO design)
        return _run_mixed(args, design, overrides)
    if args.plan is not None:
        raise RlhlsError("--plan: only with --precision mixed (fp64 runs PPO in float64 numpy)")
    env_id = args.env or design.env_id
    out = args.out or f"runs/{design.name}-{env_id}-s{args.seed}-e{hp['experiment']}"
    config = {"design": design.name, "algorithm": design.algorithm, "env": env_id, "seed": args.seed,
              "backend": args.backend, "experiment": hp["experiment"], "hyperparams": hp}

    def make():
        return PPO(design, env_id=env_id, seed=args.seed, backend=args.backend, hyperparams=overrides)

    res = train(make, config, out, steps=args.steps or 1_000_000, resume=args.resume, progress=not args.quiet,
                title=f"{design.name} on {env_id} (exp {hp['experiment']}, seed {args.seed})")
    print(f"{res['updates']} updates, {res['env_steps']} env steps -> {res['out']}")
    return 0


def _run_mixed(args, design, overrides) -> int:
    """DQN, A2C, DDPG and AP-DRL PPO: fp32 or mixed precision, the plan from --plan, the resumed run,
    or the ILP at the design's batch (PPO: one minibatch)."""
    import json
    from pathlib import Path

    from .mixed import default_plan, plan_assignment
    from .runner import train

    algo = design.algorithm
    if algo == "ppo":
        from .ppo import PPO as Trainer
        from .ppo import resolve_hyperparams
    elif algo == "dqn":
        from .dqn import DQN as Trainer
        from .dqn import resolve_hyperparams
    elif algo == "ddpg":
        from .ddpg import DDPG as Trainer
        from .ddpg import resolve_hyperparams
    else:
        from .a2c import A2C as Trainer
        from .a2c import resolve_hyperparams
    if args.precision is not None:
        overrides["precision"] = args.precision
    if algo != "ppo":
        if args.experiment is not None:
            raise RlhlsError("--experiment: HEPPO-GAE experiments are for PPO designs")
        overrides.pop("experiment", None)
    if "num_steps" in overrides and algo != "ppo":
        if algo in ("dqn", "ddpg"):
            raise RlhlsError(f"--num-steps: {algo.upper()} has no rollout length (use --set steps_per_update=N)")
        overrides["n_steps"] = overrides.pop("num_steps")  # A2C's rollout length, SB3's n_steps
    hp = resolve_hyperparams(design, overrides)  # validates before anything is written
    env_id = args.env or design.env_id
    tag = f"e{hp['experiment']}-{hp['precision']}" if algo == "ppo" else hp["precision"]
    out = args.out or f"runs/{design.name}-{env_id}-s{args.seed}-{tag}"
    if args.plan is not None and hp["precision"] != "mixed":
        raise RlhlsError("--plan: only with --precision mixed (fp32 runs every node on the PS)")
    assignment, plan_src = None, None
    if hp["precision"] == "mixed":
        old = Path(out) / "config.json"
        if algo == "a2c":
            batch = hp["num_envs"] * hp["n_steps"]
        elif algo == "ppo":  # one minibatch
            batch = hp["num_envs"] * hp["num_steps"] // hp["num_minibatches"]
        else:
            batch = hp["batch_size"]
        if args.plan is not None:
            assignment, plan_src = plan_assignment(args.plan), str(args.plan)
        elif args.resume and old.exists() and json.loads(old.read_text()).get("plan_source") == "ilp":
            assignment, plan_src = json.loads(old.read_text())["plan"], "ilp"
        else:
            assignment, plan_src = default_plan(design, batch), "ilp"
    steps = args.steps or int(design.hyperparams.get("total_timesteps", 1_000_000))
    config = {"design": design.name, "algorithm": design.algorithm, "env": env_id, "seed": args.seed,
              "backend": args.backend, "precision": hp["precision"], "plan": assignment, "plan_source": plan_src,
              "hyperparams": hp}
    if algo == "ppo":
        config["experiment"] = hp["experiment"]

    def make():
        return Trainer(design, env_id=env_id, seed=args.seed, backend=args.backend, hyperparams=overrides,
                       assignment=assignment)

    res = train(make, config, out, steps=steps, resume=args.resume, progress=not args.quiet,
                title=f"{design.name} on {env_id} ({tag}, seed {args.seed})")
    print(f"{res['updates']} updates, {res['env_steps']} env steps -> {res['out']}")
    return 0
