"""`rlhls profile DESIGN [--device DEV] [--batch N] --out profile.csv [--json]`.

Costs every training-graph node of DESIGN on every unit it may run on (partition.profile) and
writes the profile CSV (partition.profile_io.write_profile, atomically). ``--json`` prints the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlhls.designs.errors import RlhlsError

__all__ = ["add_profile_arguments", "run_profile"]


def positive_int(text: str) -> int:
    """argparse type of every count option of the command line (batch, steps, envs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def add_profile_arguments(parser) -> None:
    parser.add_argument("design", help="registered design name (see `rlhls designs`)")
    parser.add_argument("--device", default=None, help="catalogue device (default: the design's)")
    parser.add_argument("--batch", type=positive_int, default=None, help="batch size (default: the design's)")
    parser.add_argument("--out", required=True, help="profile CSV to write")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _row_json(r) -> dict:
    return {"node": r.node, "unit": r.unit, "latency_us": r.latency_us, "point": r.point,
            "resources": dict(r.resources), "cycles": r.cycles, "flops": r.flops}


def run_profile(args) -> int:
    from rlhls.designs.devices import get_device
    from rlhls.designs.registry import get_design

    from .profile import profile_design
    from .profile_io import write_profile

    design = get_design(args.design)
    device = get_device(args.device if args.device else design.device)
    out = Path(args.out)
    if out.is_dir():
        raise RlhlsError(f"--out '{out}' is a directory; expected a CSV file path")
    if not out.parent.exists():
        raise RlhlsError(f"--out '{out}': folder '{out.parent}' does not exist")
    rows = profile_design(design, device, args.batch)
    write_profile(rows, out)
    if args.json:
        json.dump([_row_json(r) for r in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        nodes = len({r.node for r in rows})
        units = sorted({r.unit for r in rows})
        print(f"{design.name} on {device.id}: {len(rows)} rows for {nodes} nodes on {', '.join(units)} -> {out}")
    return 0
