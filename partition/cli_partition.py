"""`rlhls partition PROFILE.csv --graph GRAPH.csv (--device DEV | --capacity CAP.csv) ...`.

Reads the profile and graph (formats: `rlhls.partition.profile_io`), solves the ILP
(`rlhls.partition.ilp`), writes plan.json, plan.csv and gantt.png into --out (built in a temp
folder beside it and renamed, so nothing appears on failure) and prints the makespan, per-unit
utilisation, solver status, gap and the baselines — or, with --json, the plan as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlhls.designs.errors import RlhlsError

from .fileio import check_out
from .plan import _plan_folder
from .profile_io import check_inputs, read_capacity, read_graph, read_links, read_profile

__all__ = ["add_partition_arguments", "run_partition", "device_inputs"]


def add_partition_arguments(parser) -> None:
    parser.add_argument("profile", help="profile CSV: node,unit,latency_us[,point][,lut,ff,dsp,bram36,uram,aie_tiles]")
    parser.add_argument("--graph", required=True, help="graph CSV: src,dst,bytes")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--device", help="take capacities and links from this device of the catalogue")
    src.add_argument("--capacity", help="capacity CSV: unit,resource,capacity (PS cores as resource 'cores')")
    parser.add_argument("--links", help="links CSV: src_unit,dst_unit,latency_us,bytes_per_us (overrides the device's)")
    parser.add_argument("--solver", choices=("cbc", "highs"), default="cbc", help="MILP solver (default cbc)")
    parser.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    parser.add_argument("--out", default="plan", help="output folder (default ./plan)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty --out that rlhls did not write (no file of yours is deleted)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _links_dict(raw) -> dict:
    out = {}
    items = raw.items() if isinstance(raw, dict) else ((None, l) for l in raw)
    for key, val in items:
        if hasattr(val, "latency_us"):  # a devices.Link
            lat, bw = val.latency_us, val.bytes_per_us
            key = (val.src, val.dst)
        else:
            lat, bw = val
        lat = getattr(lat, "value", lat)
        bw = getattr(bw, "value", bw)
        out[tuple(key)] = (float(lat), float(bw))
    return out


def device_inputs(device: str):
    """(capacity, links) of a catalogue device; the COST stream's helpers when present."""
    try:
        from . import profile as prof

        return dict(prof.device_capacity(device)), _links_dict(prof.device_links(device))
    except (ImportError, AttributeError):
        from rlhls.designs.devices import get_device

        dev = get_device(device)
        return dev.capacity(), _links_dict(dev.links)


def run_partition(args) -> int:
    from .ilp import solve
    from .plan import write_plan

    if args.time_limit is not None and not args.time_limit > 0:
        raise RlhlsError(f"--time-limit {args.time_limit:g} must be > 0 seconds")
    check_out(Path(args.out), force=args.force, ours=_plan_folder)  # before the solve
    rows = read_profile(args.profile)
    edges = read_graph(args.graph)
    check_inputs(rows, edges, profile_name=str(args.profile), graph_name=str(args.graph))
    if args.device:
        capacity, links = device_inputs(args.device)
        source = f"device {args.device}"
    else:
        capacity, links = read_capacity(args.capacity), {}
        source = str(args.capacity)
    if args.links:
        links = read_links(args.links)
    cores = capacity.get(("PS", "cores"))
    ps_cores = int(cores) if cores else 1
    plan = solve(rows, edges, capacity, links, ps_cores=ps_cores, solver=args.solver,
                 time_limit=args.time_limit, source=source)
    out = write_plan(plan, Path(args.out), rows, edges, force=args.force)
    if args.json:
        print(json.dumps(plan.to_json(), indent=1))
        return 0
    print(f"makespan {plan.makespan_us:.6g} us  status {plan.status}  gap {plan.gap:.2%}  "
          f"solver {plan.solver} {plan.solve_seconds:.2f} s  PS cores {plan.ps_cores}")
    for unit, u in plan.utilisation.items():
        res = "  ".join(f"{k} {v:.1%}" for k, v in u.items() if k not in ("busy", "nodes"))
        print(f"  {unit:<4} {u['nodes']:>3} nodes  busy {u['busy']:.1%}  {res}".rstrip())
    for name, v in plan.baselines.items():
        ratio = "" if v is None or plan.makespan_us <= 0 else f"  (x{v / plan.makespan_us:.2f})"
        print(f"  baseline {name:<8} {'n/a' if v is None else f'{v:.6g} us'}{ratio}")
    print(f"wrote {out / 'plan.json'}, {out / 'plan.csv'}, {out / 'gantt.png'}")
    return 0
