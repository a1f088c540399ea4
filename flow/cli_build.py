"""`rlhls build DESIGN [--out DIR] [--plan PLAN.json] [--part PART] [--clock NS] [--csim] [--synth]
[--cosim] [--force] [--json]` — see flow/build.py for what is generated.

Exit codes: 0 built (and every requested check passed); 1 built but a csim / synthesis /
co-simulation check failed; 2 bad input (one line on stderr, nothing written).
Progress goes to stderr, one line per component; --json prints only the result JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def add_build_arguments(parser) -> None:
    parser.add_argument("design", metavar="DESIGN", help="a registered design (rlhls designs)")
    parser.add_argument("--out", metavar="DIR", help="build folder (default: build/<DESIGN>)")
    parser.add_argument("--plan", metavar="PLAN.json",
                        help="partition plan (rlhls partition): PL nodes become HLS components, AIE nodes the "
                             "AIE graph, PS nodes nothing (default: every node on PL)")
    parser.add_argument("--part", metavar="PART", help="AMD/Xilinx part (default: the design's device)")
    parser.add_argument("--clock", metavar="NS", type=float, help="PL clock period in ns (default: the design's)")
    parser.add_argument("--csim", action="store_true", help="compile and run every kernel's testbench with g++")
    parser.add_argument("--synth", action="store_true", help="run Vitis HLS synthesis (v++ or vitis_hls on PATH)")
    parser.add_argument("--cosim", action="store_true", help="run Vitis C/RTL co-simulation (implies synthesis)")
    parser.add_argument("--force", action="store_true",
                        help="replace --out even if it is not empty and was not written by rlhls build")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (no progress lines)")


def run_build(args) -> int:
    from .build import build_design

    out = Path(args.out) if args.out else Path("build") / args.design
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    from rlhls.partition.plan import load_plan

    res = build_design(args.design, out, plan=load_plan(args.plan) if args.plan else None, part=args.part, clock_ns=args.clock, csim=args.csim,
                       synth=args.synth, cosim=args.cosim, force=args.force, progress=progress)
    if args.json:
        json.dump(res.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if res.ok else 1
    for w in res.warnings:
        print(f"rlhls: warning: {w}", file=sys.stderr)
    print(f"{res.design}: {len(res.components)} PL component(s), {len(res.aie['nodes'])} AIE node(s), "
          f"{len(res.host)} host node(s) -> {res.out}  (part {res.part}, clock {res.clock_ns} ns, "
          f"{res.seconds:.1f} s)")
    for c in res.components:
        what = c.kernel or "hls4ml"
        line = f"  {c.name:<28} {what:<16} top {c.top:<24} {len(c.nodes)} node(s)"
        if c.folded:
            line += f" + {len(c.folded)} folded"
        if c.csim is not None:
            line += f"  csim {'pass' if c.csim['passed'] else 'FAIL'}{' (cached)' if c.csim['cached'] else ''}"
            if not c.csim["passed"]:
                line += f": {c.csim['detail'].splitlines()[0] if c.csim['detail'] else ''}"
        for s in c.vitis:
            line += f"  {s['step']} {'pass' if s['passed'] else 'FAIL (see ' + s['log'] + ')'}"
        print(line)
    if res.aie["nodes"]:
        print(f"  aie: {', '.join(res.aie['nodes'])}")
    if res.unmapped:
        print(f"  unmapped (host): {', '.join(res.unmapped)}")
    return 0 if res.ok else 1
