"""What rlhls knows: ``designs``, ``devices``, ``format``, ``kernels``, ``kernel``, ``algorithms``,
``plugins``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import did_you_mean

if TYPE_CHECKING:
    from rlhls.core.registry import Registry

from .common import parse_sets, print_json

RESOURCE_KEYS = ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")


def register(sub) -> None:
    s = sub.add_parser("designs", help="list the registered designs",
                       description="List registered designs: seed, algorithm, environment, networks layer by layer, "
                                   "kernels, formats, parallelism and target device. Given run folders (rlhls "
                                   "run, train or build), what each was bound to: design, hyperparameters, batch, "
                                   "--set values and every kernel's parameters (read from its record; nothing runs).")
    s.add_argument("names", nargs="*", metavar="DESIGN|RUN",
                   help="only these designs (names, or design files ./FILE.py[:NAME]: all the file's designs), or "
                        "run / build folders")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_designs)

    s = sub.add_parser("devices", help="list the device catalogue",
                       description="Device catalogue: per unit (PS, PL, AIE) resources and clocks, "
                                   "each with its source.")
    s.add_argument("names", nargs="*", metavar="DEVICE", help="only these devices (id, board or part)")
    s.add_argument("--json", action="store_true", help="print JSON with the source of every figure")
    s.set_defaults(func=cmd_devices)

    s = sub.add_parser("format", help="parse numeric formats and show their C++ types",
                       description="Parse formats: fixed<W,I[,Q[,O]]>, ufixed<W,I[,Q[,O]]>, fp32, fp16, bf16, uq<n>.")
    s.add_argument("formats", nargs="+", metavar="FORMAT")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_format)

    s = sub.add_parser("kernels", help="list the kernels, their parameters and the graph nodes they implement",
                       description="The kernel registry: every kernel's parameters, units and node kinds.")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_kernels)

    s = sub.add_parser("kernel", help="print one kernel's cycle/resource model",
                       description="One kernel's cycle and resource model. With --design the parameters are the "
                                   "design's (its KernelSpec, else the first graph node the kernel implements); "
                                   "--set overrides them.")
    s.add_argument("name", help="kernel (rlhls kernels)")
    s.add_argument("--design", help="take the parameters, device and unit from this design")
    s.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter (repeatable), e.g. --set pf=4 --set storage=fp16")
    s.add_argument("--unit", choices=("PS", "PL", "AIE"), help="unit to cost (default: the kernel's first)")
    s.add_argument("--device", help="device id, board or part (default: the design's, else zcu106)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_kernel)

    s = sub.add_parser("algorithms", help="list the training algorithms and their hyperparameters",
                       description="The algorithm registry: per algorithm its hyperparameters (what --set and "
                                   "--config take) with defaults, ranges and documentation.")
    s.add_argument("names", nargs="*", metavar="ALGORITHM", help="only these algorithms")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_algorithms)

    s = sub.add_parser("plugins", help="list every plug-in (kernels, designs, algorithms, environments, experiments) "
                                       "and where it came from",
                       description="Every registry's entries with their origin: a module of rlhls, a user's module "
                                   "or design file, or an installed package's entry point (rlhls.core.registry).")
    s.add_argument("kinds", nargs="*", metavar="KIND",
                   help="only these registries (kernel, design, algorithm, environment, experiment)")
    s.add_argument("--json", action="store_true", help="print JSON: [{kind, name, origin}, ...]")
    s.set_defaults(func=cmd_plugins)


def cmd_designs(args) -> int:
    from pathlib import Path

    from rlhls.designs.registry import design_file, design_names, get_design

    if args.names and any(Path(n).is_dir() for n in args.names):
        return _show_bindings(args)
    designs: list = []
    for n in args.names or design_names():
        # a file without :NAME lists all its designs
        designs += design_file(n) if n.endswith(".py") else [get_design(n)]
    described = [d.describe() for d in designs]
    if args.json:
        print_json(described)
        return 0
    for design, d in zip(designs, described):
        print(f"{d['name']}  [{d['algorithm'].upper()}]")
        if d["seed_title"] not in ("", "-"):  # the paper by its title (a user's design may name none)
            print(f"  seed       {d['seed_title']}")
        if design.origin.get("file"):
            print(f"  file       {design.origin['file']}")
        print(f"  env        {d['env_id']}  obs {tuple(d['obs_shape'])}  "
              f"actions {d['action_dim']} ({d['action_space']})")
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
                detail = {k: v for k, v in layer.items()
                          if k not in ("name", "kind", "in_shape", "out_shape", "params")}
                detail_s = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in detail.items())
                print(f"    {layer['name']:<14} {layer['kind']:<8} {shape:<28} {layer['params']:>9,} params  "
                      f"{detail_s}")
        for k in d["kernels"]:
            params = " ".join(f"{p}={v}" for p, v in {**k["params"], **k["notes"]}.items())
            print(f"  kernel     {k['name']} on {k['unit']}: storage {k['storage']}, acc {k['acc']}; {params}")
        for c in d["choices"]:
            print(f"  choice     {c}")
        print()
    return 0


def _show_bindings(args) -> int:
    """rlhls designs RUN...: what each run, flow or build folder was bound to (its record, read only)."""
    from pathlib import Path

    from rlhls.core.errors import RlhlsError
    from rlhls.host.bound import folder_binding

    if not all(Path(n).is_dir() for n in args.names):
        raise RlhlsError("rlhls designs: give design names or run folders, not both")
    shown = [folder_binding(n) for n in args.names]
    if args.json:
        print_json(shown)
        return 0
    for b in shown:
        src = b.get("design_file")
        print(f"{b['folder']}: design {b['design']}  [{str(b.get('algorithm', '?')).upper()}]  ({b['from']})")
        if isinstance(src, dict):
            print(f"  file       {src.get('file')}  sha256 {src.get('sha256')}")
        if isinstance(b.get("design_resized"), dict):
            r = b["design_resized"]
            print(f"  resized    from {r.get('from')}: net_arch {r.get('net_arch')}, activation {r.get('activation')}")
        print(f"  env        {b.get('env', '?')}   batch {b.get('batch', '?')}"
              + ("   demonstration budget" if b.get("demo") else ""))
        if b.get("overrides"):
            print("  --set      " + " ".join(f"{k}={v}" for k, v in b["overrides"].items()))
        for k in b.get("kernels") or []:
            params = " ".join(f"{p}={v}" for p, v in (k.get("params") or {}).items())
            print(f"  kernel     {k.get('name')} on {k.get('unit')}: {params}")
        hp = b.get("hyperparams") or {}
        print("  hyperparameters " + ", ".join(f"{k}={v}" for k, v in sorted(hp.items())))
        print()
    return 0


def cmd_devices(args) -> int:
    from rlhls.designs.devices import DEVICES, get_device

    devices = [get_device(n) for n in args.names] if args.names else list(DEVICES.values())
    if args.json:
        print_json([d.describe() for d in devices])
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
        print_json(rows)
    else:
        for r in rows:
            print(f"{r['format']:<28} {r['kind']:<8} {r['bits']:>3} bits  {r['cpp_type']}")
    return 0


def cmd_kernels(args) -> int:
    from rlhls.designs.kernels import get_kernel, kernel_names

    desc = [get_kernel(n).describe() for n in kernel_names()]
    if args.json:
        print_json(desc)
        return 0
    for d in desc:
        print(f"{d['name']}: {d['summary']}")
        print(f"  on {', '.join(d['units'])}; implements {', '.join(d['implements']) or '-'}"
              f"{' (generic)' if d['generic'] else ''}; in {', '.join(d['inputs'])} -> out {', '.join(d['outputs'])}"
              f"   [{d['source']}]")
        for q in d["params"]:
            extra = f" ({'|'.join(map(str, q['choices']))})" if q.get("choices") else ""
            print(f"    {q['name']:<12} {q['kind']:<7} default {q['default']!s:<22} {q['doc']}{extra}")
    return 0


def kernel_report(name: str, sets=(), unit: str | None = None, device: str | None = None,
                  design: str | None = None) -> dict:
    """The kernel's parameters and its cost on a unit of a device: the kernel's defaults, or with
    `design` one entry per instance the design's training graph needs (``nodes``: the nodes it computes,
    its parameters from their layers and the design's kernel spec); --set over either. The top level
    holds the first instance (the kernel spec alone where no node needs the kernel)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels import KernelContext, get_kernel

    k = get_kernel(name)
    sets = parse_sets(sets)
    if design is None:
        dev = get_device(device or "zcu106")
        unit = unit or k.units[0]
        p = k.resolve(sets)
        return {"kernel": name, "unit": unit, "device": dev.id, "params": p, "params_from": "the kernel's defaults",
                **k.cost(p, unit=unit, device=dev)}
    from rlhls.designs.registry import get_design

    d = get_design(design)
    dev = get_device(device or d.device)
    unit = unit or k.units[0]
    ctx = KernelContext(d, device=dev)
    spec = next((s for s in d.kernels if s.name == name), None)
    base = k.spec_params(spec) if spec is not None else {}
    instances: list[dict] = []  # one per distinct parameter set, with the nodes it computes
    for node in ctx.graph.nodes:
        q = k.node_params(node, ctx) if node.kind in k.implements else None
        if q is None:
            continue
        p = k.resolve({**base, **q, **sets})
        same = next((i for i in instances if i["params"] == p), None)
        if same is None:
            instances.append({"nodes": [node.name], "params": p})
        else:
            same["nodes"].append(node.name)
    if not instances and spec is None:
        raise RlhlsError(f"--design {d.name}: kernel '{name}' implements no node of its training graph and "
                         "the design does not name it")
    if instances:
        n_nodes = sum(len(i["nodes"]) for i in instances)
        source = (f"design {d.name}: {n_nodes} node(s) of its training graph, {len(instances)} instance(s)"
                  + (", its kernel spec" if spec is not None else ""))
    else:
        instances = [{"nodes": [], "params": k.resolve({**base, **sets})}]
        source = f"design {d.name}'s kernel spec (no node of its training graph needs it)"
    for i in instances:
        i.update(k.cost(i["params"], unit=unit, device=dev))
    first = instances[0]
    return {"kernel": name, "unit": unit, "device": dev.id, "design": d.name, "params_from": source,
            **{key: v for key, v in first.items() if key != "nodes"}, "instances": instances}


def cmd_kernel(args) -> int:
    rep = kernel_report(args.name, args.sets, args.unit, args.device, args.design)
    if args.json:
        print_json(rep)
        return 0
    print(f"{rep['kernel']} on {rep['unit']} of {rep['device']} (parameters: {rep['params_from']})")
    instances = rep.get("instances") or [rep]
    # what every instance shares once, then what each has of its own
    shared = {key: v for key, v in instances[0]["params"].items() if all(i["params"].get(key) == v for i in instances)}
    if len(instances) > 1:
        print("  every one   " + ", ".join(f"{key}={v}" for key, v in shared.items()))
    for i in instances:
        if i.get("nodes"):
            names = i["nodes"]
            more = f" and {len(names) - 4} more" if len(names) > 4 else ""
            print(f"  nodes       {', '.join(names[:4])}{more}")
        own = {key: v for key, v in i["params"].items() if len(instances) == 1 or key not in shared}
        print("  params      " + (", ".join(f"{key}={v}" for key, v in own.items()) or "-"))
        print(f"  cycles      {i['cycles']:.0f}" if i.get("cycles") is not None else "  cycles      -")
        print(f"  latency     {i['latency_us']:.3f} us")
        if "throughput_el_per_s" in i:
            print(f"  throughput  {i['throughput_el_per_s']:.4g} elements/s")
        print(f"  memory      {i['memory_bytes']} bytes")
        print("  resources   " + "  ".join(f"{key} {i['resources'].get(key, 0):.0f}" for key in RESOURCE_KEYS))
        for st in i.get("stages") or []:
            print(f"  stage       {st}")
    return 0


def cmd_algorithms(args) -> int:
    from rlhls.host.algorithms import algorithm_names, get_algorithm

    algs = [get_algorithm(n) for n in (args.names or algorithm_names())]
    desc: list[dict[str, Any]] = [{"name": a.name, "summary": a.summary, "trainer": a.trainer.__name__,
                                   "hyperparams": a.args.describe()} for a in algs]
    if args.json:
        print_json(desc)
        return 0
    for d in desc:
        print(f"{d['name']}: {d['summary']}")
        for f in d["hyperparams"]:
            rng = ""
            if "low" in f or "high" in f:
                rng = f" [{f.get('low', '')}..{f.get('high', '')}]"
            for key, sym in (("above", ">"), ("below", "<")):
                if key in f:
                    rng += f" ({sym} {f[key]})"
            ch = f" ({'|'.join(map(str, f['choices']))})" if f.get("choices") else ""
            print(f"    {f['name']:<28} {f['type']:<12} default {f['default']!s:<10} {f['doc']}{rng}{ch}")
        print()
    return 0


def cmd_plugins(args) -> int:
    from rlhls.designs.kernels import KERNELS
    from rlhls.designs.registry import DESIGNS
    from rlhls.host.algorithms import ALGORITHMS
    from rlhls.host.envs import ENVIRONMENT_IDS, register_environments
    from rlhls.host.experiments import EXPERIMENTS

    registries: dict[str, Registry[Any]] = {"kernel": KERNELS, "design": DESIGNS, "algorithm": ALGORITHMS,
                                            "environment": ENVIRONMENT_IDS, "experiment": EXPERIMENTS}
    unknown = sorted(set(args.kinds) - set(registries))
    if unknown:
        near = did_you_mean(unknown[0], registries)
        raise RlhlsError(f"plugins: unknown kind '{unknown[0]}'{': ' + near if near else ''} "
                         f"(expected one of {', '.join(registries)})")
    register_environments()
    rows = [r for kind, reg in registries.items() if not args.kinds or kind in args.kinds for r in reg.describe()]
    if args.json:
        print_json(rows)
        return 0
    width = max((len(r["name"]) for r in rows), default=0)
    for kind in registries:
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            print(f"{kind}s ({len(mine)}):")
            for r in mine:
                print(f"  {r['name']:<{width}}  {r['origin']}")
    return 0
