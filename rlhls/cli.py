"""The `rlhls` command line.

Every subcommand has `--help`. Bad input (an unknown design, a malformed format, a bad
parameter) prints one line on stderr and exits with code 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

# Training steps are many small matrix products: threaded BLAS costs more than it gains (batch-1
# acting 44 ms vs 1.5 ms measured on 2 cores). Set before numpy loads; the user's value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from rlhls import __version__  # noqa: E402
from rlhls.designs.errors import RlhlsError  # noqa: E402
from rlhls.partition.cli_profile import positive_int  # noqa: E402
from rlhls.partition.profile_io import atomic_write_text  # noqa: E402

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit code 2."""

    def error(self, message):
        # a subcommand names itself ("rlhls train: ..."); the root's errors are already "rlhls: ..."
        raise RlhlsError(f"{self.prog}: {message}" if " " in self.prog else message)


def _print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} "


# -- designs -------------------------------------------------------------------------------------

def cmd_designs(args) -> int:
    from rlhls.designs.registry import design_names, get_design

    names = args.names or design_names()
    described = [get_design(n).describe() for n in names]
    if args.json:
        _print_json(described)
        return 0
    for d in described:
        print(f"{d['name']}  [{d['algorithm'].upper()}]  seed {d['seed_file']}")
        print(f"  {d['seed_title']}")
        print(f"  env        {d['env_id']}  obs {tuple(d['obs_shape'])}  actions {d['action_dim']} ({d['action_space']})")
        clocks = ", ".join(f"{u} {c:g} MHz" for u, c in d["clocks_mhz"].items())
        print(f"  device     {d['device']}  ({clocks})   batch {d['batch_size']}")
        print("  formats    " + ", ".join(f"{k}={v}" for k, v in d["formats"].items()))
        for net in d["networks"]:
            extra = []
            if net["target"]:
                extra.append("target copy")
            if net["input_from"]:
                extra.append(f"input from {net['input_from']}")
            extra.append(f"optimizer {net['optimizer']}")
            print(f"  network    {net['name']} ({net['role']}): input {tuple(net['input_shape'])}, "
                  f"{net['n_params']:,} params; {'; '.join(extra)}")
            for layer in net["layers"]:
                shape = f"{tuple(layer['in_shape'])} -> {tuple(layer['out_shape'])}"
                detail = {k: v for k, v in layer.items() if k not in ("name", "kind", "in_shape", "out_shape", "params")}
                detail_s = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in detail.items())
                print(f"    {layer['name']:<14} {layer['kind']:<8} {shape:<28} {layer['params']:>9,} params  {detail_s}")
        for k in d["kernels"]:
            params = " ".join(f"{p}={v}" for p, v in k["params"].items())
            print(f"  kernel     {k['name']} on {k['unit']}: storage {k['storage']}, acc {k['acc']}; {params}")
        for c in d["choices"]:
            print(f"  choice     {c}")
        print()
    return 0


# -- graph ---------------------------------------------------------------------------------------

def cmd_graph(args) -> int:
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design

    g = build_graph(get_design(args.design), args.batch)
    if args.csv:
        atomic_write_text(args.csv, g.edges_csv(carry=True))
    if args.json:
        data = g.to_json()
        _print_json({"nodes": data["nodes"], "edges": data["edges"]})
        return 0
    s = g.summary()
    print(f"training graph of {g.design} at batch {g.batch}: {s['nodes']} nodes, {s['edges']} edges, "
          f"{s['carry_edges']} loop-carried edges (weights to the next step)")
    print(f"{'node':<34} {'phase':<9} {'FLOPs':>12} {'bytes':>12}  mm")
    for n in g.nodes:
        print(f"{n.name:<34} {n.phase:<9} {_si(n.flops) + 'FLOP':>12} {_si(n.bytes) + 'B':>12}  {'yes' if n.mm else ''}")
    print(f"matrix-multiply nodes: {s['mm_nodes']}, {_si(s['mm_flops'])}FLOPs in all "
          f"(smallest {_si(s['min_mm_flops'])}FLOPs, largest {_si(s['max_mm_flops'])}FLOPs); "
          f"all nodes {_si(s['flops'])}FLOPs")
    if args.csv:
        print(f"edges written to {args.csv}")
    return 0


# -- devices and formats -------------------------------------------------------------------------

def cmd_devices(args) -> int:
    from rlhls.designs.devices import DEVICES, get_device

    devices = [get_device(n) for n in args.names] if args.names else list(DEVICES.values())
    if args.json:
        _print_json([d.describe() for d in devices])
        return 0
    for d in devices:
        print(f"{d.id}  {d.board}  {d.part}  ({d.family})")
        for unit in d.units.values():
            res = ", ".join(f"{k} {v.value:,.0f}" for k, v in unit.resources.items())
            print(f"  {unit.name:<4} {unit.description}; {unit.clock_mhz.value:g} MHz; {res}")
        for note in d.notes:
            print(f"  note: {note}")
        print()
    return 0


def cmd_format(args) -> int:
    from rlhls.designs.formats import parse_format

    rows = []
    for text in args.formats:
        f = parse_format(text)
        rows.append({"format": str(f), "kind": f.kind, "bits": f.bits, "cpp_type": f.cpp_type})
    if args.json:
        _print_json(rows)
    else:
        for r in rows:
            print(f"{r['format']:<28} {r['kind']:<8} {r['bits']:>3} bits  {r['cpp_type']}")
    return 0


# -- entry point ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rlhls", description="HLS design flow for training deep-RL agents on AMD/Xilinx SoCs.")
    p.add_argument("--version", action="version", version=f"rlhls {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    s = sub.add_parser("designs", help="list the registered designs",
                       description="List registered designs: seed, algorithm, environment, networks layer by layer, "
                                   "kernels, formats, parallelism and target device.")
    s.add_argument("names", nargs="*", metavar="DESIGN", help="only these designs")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_designs)

    s = sub.add_parser("graph", help="print the training graph of a design",
                       description="Print the DAG of one training step: per layer forward, target forward, backward "
                                   "and update nodes, plus loss/GAE nodes, with FLOPs and bytes.")
    s.add_argument("design", metavar="DESIGN")
    s.add_argument("--batch", type=positive_int, default=None, help="batch size (default: the design's)")
    s.add_argument("--json", action="store_true",
                   help='print {"nodes": [...], "edges": [...]}; loop-carried edges have "carry": true')
    s.add_argument("--csv", metavar="FILE",
                   help="write the edges as src,dst,bytes,carry (the partitioner's graph CSV)")
    s.set_defaults(func=cmd_graph)

    s = sub.add_parser("devices", help="list the device catalogue",
                       description="Device catalogue: per unit (PS, PL, AIE) resources and clocks, each with its source.")
    s.add_argument("names", nargs="*", metavar="DEVICE", help="only these devices (id, board or part)")
    s.add_argument("--json", action="store_true", help="print JSON with the source of every figure")
    s.set_defaults(func=cmd_devices)

    s = sub.add_parser("format", help="parse numeric formats and show their C++ types",
                       description="Parse formats: fixed<W,I[,Q[,O]]>, ufixed<W,I[,Q[,O]]>, fp32, fp16, bf16, uq<n>.")
    s.add_argument("formats", nargs="+", metavar="FORMAT")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_format)

    # Subcommands whose arguments and bodies live with their concept (flow/, partition/, host/).
    for name, module, stem, help_text in _DELEGATED:
        mod = importlib.import_module(module)
        s = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        getattr(mod, f"add_{stem}_arguments")(s)
        s.set_defaults(func=_deferred(module, f"run_{stem}"))
    return p


_DELEGATED = (
    ("profile", "rlhls.partition.cli_profile", "profile", "profile every training-graph node on every unit"),
    ("partition", "rlhls.partition.cli_partition", "partition", "solve the PS/PL/AIE partition (ILP) of a profile"),
    ("kernel", "rlhls.flow.cli_kernel", "kernel", "print one kernel's cycle/resource model"),
    ("kernels", "rlhls.flow.cli_kernel", "kernels", "list the kernels and their parameters"),
    ("build", "rlhls.flow.cli_build", "build", "emit Vitis HLS projects and AIE graph stubs; csim/synth/cosim"),
    ("train", "rlhls.host.cli_train", "train", "train a design on the host (emu/csim/cosim backends)"),
    ("run", "rlhls.host.pipeline", "run", "the whole flow: graph, profile, partition, build --csim, train, report"),
    ("experiment", "rlhls.host.experiments", "experiment", "experiments: HEPPO-GAE Table III and bit sweep, AP-DRL Tables III and IV"),
)


def _deferred(module: str, func: str):
    def run(args):
        return getattr(importlib.import_module(module), func)(args)
    return run


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except RlhlsError as e:
        print(f"rlhls: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("rlhls: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
