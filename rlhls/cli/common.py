"""What every command shares: the one-line-error parser, count arguments, JSON output, --set /
--config, the console (the ``rlhls`` loggers on stderr, --quiet / --verbose)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import did_you_mean

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit code 2."""

    def error(self, message):
        # a subcommand names itself ("rlhls train: ..."); the root's errors are already "rlhls: ..."
        raise RlhlsError(f"{self.prog}: {message}" if " " in self.prog else message)

    def _check_value(self, action, value):
        # a mistyped choice (a command, an experiment, --backend ...) names the nearest ones
        if action.choices is not None and value not in action.choices:
            near = did_you_mean(value, [str(c) for c in action.choices])
            if near:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}: {near} "
                                                     f"(choose from {', '.join(map(repr, action.choices))})")
        super()._check_value(action, value)


QUIET_HELP = "no progress messages nor warnings (errors only)"
VERBOSE_HELP = "debug messages too, and what libraries print (hls4ml, the ALE, solvers)"


def add_log_flags(parser, *, quiet: str = QUIET_HELP, verbose: str = VERBOSE_HELP) -> None:
    """-q/--quiet and -v/--verbose, the same before a command and after it: absent unless given
    (argparse.SUPPRESS), so a subcommand's parser never resets what the root's took; ``main`` reads
    ``args.quiet`` / ``args.verbose`` from wherever they were given."""
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=quiet)
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose)


def positive_int(text: str) -> int:
    """argparse type of every count option (batch, steps, seeds, jobs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def number(*, above: float | None = None, at_least: float | None = None):
    """argparse type of a finite number option: > `above` or >= `at_least`, said in its message."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not math.isfinite(value) or (above is not None and value <= above) or \
                (at_least is not None and value < at_least):
            want = f"> {above:g}" if above is not None else f">= {at_least:g}"
            raise argparse.ArgumentTypeError(f"{text} must be a number {want}")
        return value
    return parse


positive_float = number(above=0)


MAX_REPEATS = 10_000  # timed calls per node (profile --measure-ps): the median settles within tens; each
# call's time is kept


def at_most(high: int):
    """argparse type of a count option with a ceiling, said in its message (checked before any work)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"{value} is more than {high}, the most it takes")
        return value
    return parse


def seed_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 0 <= value < 2 ** 32:
        raise argparse.ArgumentTypeError(f"{value} must be an integer 0 <= seed < 2**32")
    return value


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def say(quiet: bool = False):
    """A command's progress messages: INFO on the ``rlhls`` logger (nothing when `quiet`)."""
    if quiet:
        return lambda msg: None
    return logging.getLogger("rlhls").info


class _Format(logging.Formatter):
    def format(self, record):
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"rlhls: {record.levelname.lower()}: {msg}"
        return f"[{record.name}] {msg}" if record.levelno < logging.INFO else msg


@contextlib.contextmanager
def console(quiet: bool = False, verbose: bool = False):
    """The ``rlhls`` loggers on the console for one command: INFO and up, errors only with --quiet
    (a run's notes stay in its --json), DEBUG with --verbose. The handler writes to the console itself (a copy of fd 2),
    not to what ``library_output`` redirects while libraries run."""
    stream, own = sys.stderr, False
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if sys.__stderr__ is not None and sys.stderr is sys.__stderr__ and sys.stderr.fileno() == 2:
            stream, own = os.fdopen(os.dup(2), "w", buffering=1, errors="replace"), True
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Format())
    log = logging.getLogger("rlhls")
    old = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
    log.propagate = False  # one line per message, whatever the root logger has
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(old[0])
        log.propagate = old[1]
        if own:
            with contextlib.suppress(OSError):
                stream.close()


def parse_sets(items) -> dict:
    """``['gamma=0.9', 'pf=4', ...]`` (``--set``) -> {'gamma': '0.9', 'pf': '4', ...}."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise RlhlsError(f"--set {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def add_hyperparams(parser, entry: str = "the entry of the design or its environment") -> None:
    """--set KEY=VALUE (repeatable) and --config FILE.yaml (`entry`: which entry of an RL Zoo file)."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                        help="set a hyperparameter of the algorithm (repeatable; `rlhls algorithms` lists them)")
    parser.add_argument("--config", metavar="FILE.yaml",
                        help=f"hyperparameters from a YAML file: a mapping, or an RL Zoo file as published ({entry}; "
                             "SB3's names); --set wins")


DESIGN_HELP = "a registered design (rlhls designs) or a design file ./FILE.py[:NAME]"


def add_design(parser, *, required: bool = True, entry: str = "the entry of the design or its environment") -> None:
    """The design arguments every command takes the same way: DESIGN, --set KEY=VALUE, --config FILE."""
    parser.add_argument("design", metavar="DESIGN", nargs=None if required else "?", help=DESIGN_HELP)
    add_hyperparams(parser, entry)


def bound(args, *, demo: bool = False, precision: str | None = None, extra: dict | None = None):
    """The command's run, bound once (``rlhls.host.bound.bind``) from its design arguments: every
    command binds a design the same way, so each builds, profiles and trains the same components."""
    from rlhls.designs.registry import get_design
    from rlhls.host.bound import bind

    design = get_design(args.design)
    overrides, config = hyperparams(args, design)
    return bind(design, overrides={**overrides, **(extra or {})}, config=config, env_id=getattr(args, "env", None),
                precision=precision, demo=demo)


def hyperparams(args, design=None) -> tuple[dict, dict | None]:
    """(overrides from --set, config from --config: of `design` on --env, RL Zoo's entries too)."""
    from rlhls.host.hyperparams import read_config

    config = (read_config(args.config, design, getattr(args, "env", None)) if getattr(args, "config", None)
              else None)
    return parse_sets(args.sets), config
