"""Many runs: ``experiment``."""

from __future__ import annotations

import argparse

from rlhls.designs.errors import RlhlsError

from .common import add_hyperparams, positive_int


def _sizes(text):
    from rlhls.host.experiments.apdrl import parse_sizes

    try:
        return parse_sizes(text)
    except RlhlsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _count(text):
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= MAX_RETRIES:
        raise argparse.ArgumentTypeError(f"expected an integer 0..{MAX_RETRIES}, got {text!r}")
    return n


MAX_RETRIES = 100  # Ray takes a 32-bit count; a run that dies a hundred times will not finish


def register(sub) -> None:
    from rlhls.host.experiments import EXPERIMENTS, experiment_names

    names = experiment_names()
    s = sub.add_parser("experiment", help="experiments that reproduce the seeds' tables and figures",
                       description="Experiments of several runs (settings x seeds), each a run folder of its own, "
                                   "summarised in tables and plots: "
                                   + "; ".join(f"{n}: {EXPERIMENTS[n].summary}" for n in names) + ".")
    s.add_argument("name", metavar="NAME", help=f"one of {', '.join(names)}")
    s.add_argument("--design", action="append", default=None,
                   help="heppo-*: the PPO design (default heppo-ppo); apdrl-table3: a benchmark to run "
                        "(repeatable; default all six)")
    s.add_argument("--steps", type=positive_int, default=None,
                   help="environment steps per run (default: the experiment's demonstration budget)")
    s.add_argument("--seeds", type=positive_int, default=None,
                   help="seeds 0..K-1 (default: the experiment's; 2 for heppo-*, 3 for apdrl-table3)")
    s.add_argument("--env", help="gymnasium env id (default: the design's)")
    s.add_argument("--out", help="experiment folder (default runs/<name>)")
    s.add_argument("--jobs", type=positive_int, default=0,
                   help="runs at once, each a Ray task (default: every CPU of the Ray cluster; 1 without "
                        "--address: one after another in this process, no Ray)")
    s.add_argument("--address", default=None, metavar="ADDR",
                   help="join the Ray cluster at ADDR ('auto': the one 'ray start --head' started on this node, "
                        "or HOST:PORT) instead of starting a local Ray instance; --out must be a folder every "
                        "node sees at the same path")
    s.add_argument("--resume", action="store_true",
                   help="continue the experiment in --out with the options it was started with: finished runs "
                        "are kept, partial ones resume from their checkpoints")
    s.add_argument("--retries", type=_count, default=2, metavar="N",
                   help="times a run whose worker died is tried again, from its checkpoint (default 2); past "
                        "that it is recorded as failed")
    s.add_argument("--backend", choices=("emu", "csim"), default="emu", help="kernel backend (default emu)")
    s.add_argument("--full", action="store_true", help="the design's own rollout (heppo-ppo: 64 x 1024)")
    add_hyperparams(s)
    s.add_argument("--sizes", type=_sizes, default=None,
                   help="apdrl-table4: hidden sizes H1xH2,... (default 64x64,400x300,4096x3072)")
    s.add_argument("--repeats", type=positive_int, default=3,
                   help="apdrl-table4: host timing repeats, best of (default 3)")
    s.add_argument("--report", action="store_true",
                   help="apdrl-table3: summarize the run folders in --out as they are (unfinished runs at "
                        "their last episode) and train nothing")
    s.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", dest="params",
                   help="a setting of the experiment itself (repeatable; each experiment documents its own)")
    s.add_argument("--quiet", action="store_true", help="no progress output")
    s.add_argument("--json", action="store_true", help="print the summary rows as JSON at the end")
    s.set_defaults(func=cmd_experiment)


def cmd_experiment(args) -> int:
    from rlhls.host.experiments import ExperimentOptions, run_experiment
    from rlhls.host.hyperparams import read_config

    from .common import parse_sets

    overrides = read_config(args.config) if args.config else {}
    overrides.update(parse_sets(args.sets))
    opts = ExperimentOptions(name=args.name, design=args.design, steps=args.steps, seeds=args.seeds, env=args.env,
                             out=args.out, jobs=args.jobs, backend=args.backend, full=args.full, overrides=overrides,
                             sizes=args.sizes, repeats=args.repeats, report=args.report, quiet=args.quiet,
                             json=args.json, params=parse_sets(args.params), address=args.address,
                             resume=args.resume, retries=args.retries)
    return run_experiment(opts)
