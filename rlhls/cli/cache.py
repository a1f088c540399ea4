"""The compile cache: ``cache`` shows it (location, size, entries) and prunes it."""

from __future__ import annotations

import time

from rlhls.core.errors import RlhlsError

from .common import number, print_json

DEFAULT_DAYS = 30.0  # --prune alone: the entries no build used for a month


def register(sub) -> None:
    s = sub.add_parser("cache", help="show or prune the compile cache (csim programs, libraries, precompiled headers)",
                       description="The compile cache ($RLHLS_CACHE_DIR, else $XDG_CACHE_HOME/rlhls, else "
                                   "~/.cache/rlhls): its size and entries per kind. --prune removes the entries no "
                                   f"build used for --older-than DAYS (default {DEFAULT_DAYS:g}), then the least "
                                   "recently used until it holds at most --max-size MB; --clear removes every "
                                   "entry. An entry a build is using stays; nothing outside the cache is touched and "
                                   "no link is followed. A removed entry is built again when next needed.")
    s.add_argument("--prune", action="store_true", help="remove entries (by --older-than and --max-size)")
    s.add_argument("--older-than", type=number(at_least=0), metavar="DAYS",
                   help=f"--prune: the entries not used for DAYS days (default {DEFAULT_DAYS:g} without --max-size)")
    s.add_argument("--max-size", type=number(at_least=0), metavar="MB",
                   help="--prune: then the least recently used entries until the cache holds at most MB megabytes")
    s.add_argument("--clear", action="store_true", help="remove every entry (those a build is using stay)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_cache)


def cmd_cache(args) -> int:
    import os

    from rlhls.core.cache import prune, summary
    from rlhls.core.toolchain import cache_location

    root = cache_location()
    criteria = args.older_than is not None or args.max_size is not None
    if args.clear and (args.prune or criteria):
        raise RlhlsError("rlhls cache: --clear removes every entry: it takes no --prune, --older-than or --max-size")
    if criteria and not args.prune:
        raise RlhlsError("rlhls cache: --older-than and --max-size choose what --prune removes: add --prune")
    result = None
    if args.prune or args.clear:
        days = args.older_than if args.older_than is not None or args.max_size is not None else DEFAULT_DAYS
        result = prune(root, older_than_days=days, clear=args.clear,
                       max_bytes=None if args.max_size is None else int(args.max_size * 1e6),
                       default=not os.environ.get("RLHLS_CACHE_DIR"))
    shown = summary(root)
    if args.json:
        print_json({**shown, **({"pruned": result} if result is not None else {})})
        return 0
    if result is not None:
        in_use = f"; {result['in_use']} in use kept" if result["in_use"] else ""
        print(f"removed {result['removed']} entries ({_mb(result['removed_bytes'])}){in_use}")
    if not shown["exists"]:
        print(f"compile cache {root}: none yet")
        return 0
    print(f"compile cache {root}: {_mb(shown['size_bytes'])} in {shown['entries']} entries")
    now = time.time()
    for kind, k in sorted(shown["kinds"].items()):
        print(f"  {kind:<12} {_mb(k['size_bytes']):>10}  {k['entries']:>5} entries  last used "
              f"{_ago(now - k['newest_use'])}, least recently {_ago(now - k['oldest_use'])}")
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _ago(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(0.0, seconds) / 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"
