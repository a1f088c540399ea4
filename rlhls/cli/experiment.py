"""Many runs: ``experiment NAME``, one subcommand per registered experiment with exactly its options."""

from __future__ import annotations

import argparse
from dataclasses import fields

from rlhls.core.errors import RlhlsError

from .common import Parser, add_hyperparams, add_log_flags


def _typed(fn):
    """An experiment's option type (RlhlsError on a bad value) as argparse's."""
    def parse(text):
        try:
            return fn(text)
        except RlhlsError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = getattr(fn, "__name__", "value")
    return parse


def register(sub) -> None:
    from rlhls.host.experiments import experiment_names, get_experiment

    names = experiment_names()
    s = sub.add_parser("experiment", help="experiments that reproduce the seeds' tables and figures",
                       description="Experiments of several runs (settings x seeds), each a run folder of its own, "
                                   "summarised in tables and plots. 'rlhls experiment NAME --help' lists the "
                                   "options of one.")
    names_sub = s.add_subparsers(dest="name", metavar="NAME", parser_class=Parser)
    names_sub.required = True
    for n in names:
        exp = get_experiment(n)
        p = names_sub.add_parser(n, help=exp.summary, description=exp.summary)
        for o in exp.all_options():
            if o.dest in ("quiet", "verbose"):  # -q / -v, as every command takes them (below)
                continue
            if o.dest == "overrides":
                add_hyperparams(p, "every design its own entry: of its name, its environment, else 'default' "
                                   "(none: refused); its n_timesteps the budget unless --steps")
                continue
            kw = dict(o.kwargs)
            if callable(kw.get("type")):
                kw["type"] = _typed(kw["type"])
            p.add_argument(*o.flags, dest=o.dest, **kw)
        add_log_flags(p, quiet="no progress output")
        p.set_defaults(func=cmd_experiment)


def cmd_experiment(args) -> int:
    from rlhls.host.experiments import ExperimentOptions, get_experiment, run_experiment

    from .common import parse_sets

    known = {f.name for f in fields(ExperimentOptions)} - {"name", "overrides", "params"}
    kw = {k: getattr(args, k) for k in known if hasattr(args, k)}
    if hasattr(args, "sets"):
        kw["overrides"] = parse_sets(args.sets)  # --config: run_experiment reads it, each design its values
    kw["params"] = parse_sets(getattr(args, "params", []))
    exp = get_experiment(args.name)
    # its own options as given (a default stays out: --resume then takes the recorded value)
    kw["params"].update({o.dest: getattr(args, o.dest) for o in exp.all_options() if o.dest in exp.own_keys()
                         and getattr(args, o.dest) != o.kwargs.get("default")})
    return run_experiment(ExperimentOptions(name=args.name, **kw))
