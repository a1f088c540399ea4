"""`rlhls kernel NAME [--set key=value ...] [--unit U] [--device DEV] [--json]` (one kernel's
cycle/resource model) and `rlhls kernels [--json]` (the kernels and their parameters)."""

from __future__ import annotations

import json
import sys

from rlhls.designs.kernels import KERNELS, get_kernel
from rlhls.designs.kernels.base import Kernel

RESOURCE_KEYS = ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")


def add_kernel_arguments(parser) -> None:
    parser.add_argument("name", help=f"kernel ({', '.join(KERNELS)})")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a parameter (repeatable), e.g. --set pf=4 --set storage=fp16")
    parser.add_argument("--unit", default="PL", choices=("PS", "PL", "AIE"), help="unit to cost (default PL)")
    parser.add_argument("--device", default="zcu106", help="device id, board or part (default zcu106)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def kernel_report(name: str, sets=(), unit: str = "PL", device: str = "zcu106") -> dict:
    from rlhls.designs.devices import get_device
    k = get_kernel(name)
    p = k.resolve(Kernel.parse_assignments(sets))
    dev = get_device(device)
    c = k.cost(p, unit=unit, device=dev)
    return {"kernel": name, "unit": unit, "device": dev.id, "params": p, **c}


def run_kernel(args) -> int:
    rep = kernel_report(args.name, args.sets, args.unit, args.device)
    if args.json:
        json.dump(rep, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{rep['kernel']} on {rep['unit']} of {rep['device']}")
    print("  params      " + ", ".join(f"{k}={v}" for k, v in rep["params"].items()))
    print(f"  cycles      {rep['cycles']:.0f}" if rep.get("cycles") is not None else "  cycles      -")
    print(f"  latency     {rep['latency_us']:.3f} us")
    if "throughput_el_per_s" in rep:
        print(f"  throughput  {rep['throughput_el_per_s']:.4g} elements/s")
    print(f"  memory      {rep['memory_bytes']} bytes")
    print("  resources   " + "  ".join(f"{k} {rep['resources'][k]:.0f}" for k in RESOURCE_KEYS))
    return 0


def add_kernels_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def run_kernels(args) -> int:
    desc = [k.describe() for k in KERNELS.values()]
    if args.json:
        json.dump(desc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for d in desc:
        print(f"{d['name']}: {d['summary']}")
        print(f"  in {', '.join(d['inputs'])} -> out {', '.join(d['outputs'])}   [{d['source']}]")
        for q in d["params"]:
            extra = f" ({'|'.join(map(str, q['choices']))})" if q.get("choices") else ""
            print(f"    {q['name']:<10} {q['kind']:<7} default {q['default']!s:<22} {q['doc']}{extra}")
    return 0
