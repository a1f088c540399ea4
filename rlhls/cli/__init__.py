"""The ``rlhls`` command line: every argparse in rlhls lives in this package.

One module per group of commands; each has ``register(sub)`` adding its subcommands (with
``--help``) and functions that turn parsed arguments into calls of the library (``rlhls.Flow``,
``designs``, ``partition``, ``flow``, ``host``). Bad input (an unknown design, a malformed CSV,
a bad parameter, an OS error) prints one line on stderr and exits with code 2; nothing is
half-written. SIGTERM ends a command the way Ctrl-C does ("rlhls: terminated", exit 143). Messages
go through the ``rlhls`` loggers (``common.console``): ``-q/--quiet`` and ``-v/--verbose``, before
the command or after it, set their level.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

# Training steps are many small matrix products: threaded BLAS costs more than it gains (batch-1
# acting 44 ms vs 1.5 ms measured on 2 cores). Set before numpy loads; the user's value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rlhls import __version__  # noqa: E402
from rlhls.core.errors import RlhlsError  # noqa: E402

from . import (  # noqa: E402
    build,
    cache,
    catalogue,
    evaluate,
    experiment,
    export,
    partition,
    perf,
    qor,
    run,
    shell,
    train,
)
from .common import EXIT_BAD_INPUT, Parser, add_log_flags, console  # noqa: E402

__all__ = ["main", "build_parser"]

_GROUPS = (catalogue, partition, build, train, evaluate, export, run, experiment, perf, qor, cache, shell)


def build_parser() -> Parser:
    p = Parser(prog="rlhls", description="HLS design flow for training deep-RL agents on AMD/Xilinx SoCs.")
    p.add_argument("--version", action="version", version=f"rlhls {__version__}")
    add_log_flags(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for group in _GROUPS:
        group.register(sub)
    _log_flags(sub)
    return p


def _log_flags(sub) -> None:
    """-q/--quiet and -v/--verbose after every command (and between `experiment` and its NAME) that
    has not added them with its own help."""
    for parser in sub.choices.values():
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                _log_flags(a)
        if "--quiet" not in parser._option_string_actions:
            add_log_flags(parser)


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C: the same way out (temporary files removed, records saying interrupted)."""


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM raises Terminated in the main thread for the block (where nobody handles it already)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        raise Terminated()
    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv=None) -> int:
    parser = build_parser()
    try:
        with _terminate_as_interrupt():
            args = parser.parse_args(argv)
            # given before the command or after it (add_log_flags: absent unless given)
            args.quiet = getattr(args, "quiet", False)
            args.verbose = getattr(args, "verbose", False)
            args.root_parser = parser  # `completion` describes the whole command line
            with console(args.quiet, args.verbose):
                return args.func(args)
    except RlhlsError as e:
        print(f"rlhls: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:  # a last line of defence: sizes are checked before work where they can be
        print("rlhls: error: out of memory (a size given is more than this machine holds)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except OSError as e:  # the same for an OS error a check did not foresee: one line, not a traceback
        where = f" '{e.filename}'" if e.filename else ""
        print(f"rlhls: error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated:
        print("rlhls: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("rlhls: interrupted", file=sys.stderr)
        return 130
