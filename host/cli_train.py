"""`rlhls train DESIGN`: train a design's agent on the host; see host/runner.py for the run folder.

    rlhls train DESIGN [--env ID] [--steps N] [--seed S] [--backend emu|csim|cosim]
                       [--experiment K] [--precision fp32|mixed] [--plan PLAN.json] [--out DIR] [--resume]
                       [--num-envs N] [--num-steps T] [--set key=value ...] [--quiet]

``--num-envs`` / ``--num-steps`` / ``--experiment`` are shorthands for ``--set num_envs=N`` etc.;
``--set`` overrides any hyperparameter of the algorithm (``rlhls.host.ppo.CLEANRL_DEFAULTS``
lists PPO's: e.g. ``--set update_epochs=4 --set anneal_lr=false --set quant_bits=6``).
The default run folder is ``runs/<design>-<env>-s<seed>-e<experiment>`` (PPO) or
``runs/<design>-<env>-s<seed>-<precision>`` (DQN, A2C, DDPG).

DQN, A2C and DDPG designs (``host/dqn.py``, ``host/a2c.py``, ``host/ddpg.py``; their ``*_DEFAULTS``
list the hyperparameters):
``--precision fp32`` runs every training-graph node on the PS in FP32; ``--precision mixed`` runs
each node in its unit's format (AP-DRL §IV-D, ``host/mixed.py``) under ``--plan PLAN.json`` (from
``rlhls partition``) or, without it, under the plan profile + ILP give for the design's device and
batch (solved in-process; the assignment is written to config.json and a resumed run reuses it).
Default precision: the design's (``mixed`` for the AP-DRL designs). Default ``--steps``: the
design's ``total_timesteps`` if it has one, 1e6 otherwise.
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
    parser.add_argument("--experiment", type=int, choices=(1, 2, 3, 4, 5),
                        help="HEPPO-GAE Table III configuration (default: the design's, 5 for heppo-ppo)")
    parser.add_argument("--precision", choices=("fp32", "mixed"),
                        help="DQN, A2C, DDPG: fp32 on every node, or AP-DRL's per-unit mixed precision (default: the design's)")
    parser.add_argument("--plan", metavar="PLAN.json",
                        help="--precision mixed: the partition (plan.json or its folder) to take formats from "
                             "(default: profile + ILP in-process)")
    parser.add_argument("--out", help="run folder (default runs/<design>-<env>-s<seed>-e<experiment>)")
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
    if args.precision is not None or args.plan is not None:
        raise RlhlsError(f"--precision / --plan: {design.algorithm.upper()} trains in float64 so far "
                         "(DQN, A2C and DDPG take them)")
    hp = resolve_hyperparams(design, overrides)  # validates before anything is written
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
    """DQN, A2C and DDPG: fp32 or AP-DRL mixed precision, the plan from --plan, the resumed run, or the ILP."""
    import json
    from pathlib import Path

    from .mixed import default_plan, plan_assignment
    from .runner import train

    if design.algorithm == "dqn":
        from .dqn import DQN as Trainer
        from .dqn import resolve_hyperparams
    elif design.algorithm == "ddpg":
        from .ddpg import DDPG as Trainer
        from .ddpg import resolve_hyperparams
    else:
        from .a2c import A2C as Trainer
        from .a2c import resolve_hyperparams
    if args.precision is not None:
        overrides["precision"] = args.precision
    if args.experiment is not None:
        raise RlhlsError("--experiment: HEPPO-GAE experiments are for PPO designs")
    overrides.pop("experiment", None)
    if "num_steps" in overrides:
        if design.algorithm in ("dqn", "ddpg"):
            raise RlhlsError(f"--num-steps: {design.algorithm.upper()} has no rollout length "
                             "(use --set steps_per_update=N)")
        overrides["n_steps"] = overrides.pop("num_steps")  # A2C's rollout length, SB3's n_steps
    hp = resolve_hyperparams(design, overrides)  # validates before anything is written
    env_id = args.env or design.env_id
    out = args.out or f"runs/{design.name}-{env_id}-s{args.seed}-{hp['precision']}"
    if args.plan is not None and hp["precision"] != "mixed":
        raise RlhlsError("--plan: only with --precision mixed (fp32 runs every node on the PS)")
    assignment, plan_src = None, None
    if hp["precision"] == "mixed":
        old = Path(out) / "config.json"
        batch = hp["num_envs"] * hp["n_steps"] if design.algorithm == "a2c" else hp["batch_size"]
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

    def make():
        return Trainer(design, env_id=env_id, seed=args.seed, backend=args.backend, hyperparams=overrides,
                       assignment=assignment)

    res = train(make, config, out, steps=steps, resume=args.resume, progress=not args.quiet,
                title=f"{design.name} on {env_id} ({hp['precision']}, seed {args.seed})")
    print(f"{res['updates']} updates, {res['env_steps']} env steps -> {res['out']}")
    return 0
