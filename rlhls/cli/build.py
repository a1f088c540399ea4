"""How it becomes hardware: ``build``, and ``check`` (the vendor's rules on a build folder)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from .common import add_design, add_log_flags, bound, print_json, say


def register(sub) -> None:
    s = sub.add_parser("build", help="emit Vitis HLS projects and AIE graph stubs; csim/synth/cosim",
                       description="Emit the design's plan as Vitis HLS components (PL), an ADF graph (AIE), "
                                   "system.cfg and manifest.json; --csim checks every component with g++ (and the "
                                   "AIE kernels under the shim); --synth/--cosim run Vitis when it is on PATH. Exit "
                                   "0 built (every check passed), 1 a check failed, 2 bad input.")
    add_design(s)
    s.add_argument("--out", metavar="DIR", help="build folder (default: build/<DESIGN>, with --weights "
                                                "build/<DESIGN>-policy)")
    s.add_argument("--weights", metavar="RUN_FOLDER",
                   help="the trained policy of a run folder (rlhls train, or rlhls run's folder): its inference "
                        "network as one Vitis HLS project with the trained weights in the design's PL formats; "
                        "with --csim, its C simulation against the emulator bit for bit on the states the run recorded "
                        "(policy_states.npz; else states the environment visits under random actions)")
    s.add_argument("--plan", metavar="PLAN.json",
                   help="partition plan (rlhls partition): PL nodes become HLS components, AIE nodes the AIE graph, "
                        "PS nodes nothing (default: every node on PL)")
    s.add_argument("--part", metavar="PART", help="AMD/Xilinx part (default: the design's device)")
    s.add_argument("--clock", metavar="NS", type=float, help="PL clock period in ns (default: the design's)")
    s.add_argument("--csim", action="store_true", help="compile and run every kernel's testbench with g++ and "
                                                       "check the AIE kernels under the shim")
    s.add_argument("--synth", action="store_true", help="run Vitis HLS synthesis (v++ or vitis_hls on PATH)")
    s.add_argument("--cosim", action="store_true", help="run Vitis C/RTL co-simulation (implies synthesis)")
    s.add_argument("--platform", metavar="XPFM",
                   help="Vitis platform (an .xpfm file or a name such as xilinx_vek280_base_202420_1): write the "
                        "v++ --link / --package commands for it into the build's Makefile")
    s.add_argument("--link", action="store_true",
                   help="run those commands (synthesis, the AIE compile, v++ --link, v++ --package): needs v++ on "
                        "PATH; each log beside its outputs under link/")
    s.add_argument("--target", choices=("hw", "hw_emu"), default="hw", help="v++ build target (default hw)")
    s.add_argument("--common-image", metavar="DIR",
                   help="embedded platforms: AMD's common image folder (rootfs.ext4, Image) the package puts on the "
                        "SD card (default $EDGE_COMMON_SW)")
    s.add_argument("--board", action="store_true",
                   help="write board/: what to copy to the board (the host program entry, pinned requirements, "
                        "the xclbin it expects, a README); with --board or --platform the forward layers are "
                        "rlhls' own kernels, not hls4ml networks, as the board backend calls them")
    s.add_argument("--full-data", action="store_true",
                   help="aie/data/: one whole training step's PLIO streams for aiesimulator (large for a big batch; "
                        "--synth and --cosim imply it) instead of a sample of each")
    s.add_argument("--force", action="store_true",
                   help="write into a non-empty --out that rlhls did not write (no file of yours is deleted)")
    add_log_flags(s, verbose="show what hls4ml and the compilers print")
    s.add_argument("--json", action="store_true", help="print the result as JSON (no progress lines)")
    s.set_defaults(func=cmd_build)
    c = sub.add_parser("check", help="check a build folder against AMD's documented rules (UG1399, UG1393, UG1079)",
                       description="Check the Vitis HLS components, system.cfg and the AIE graph of a build folder "
                                   "against the vendor's documented rules (kernel interfaces and pragmas, linking, ADF "
                                   "graph, PLIO and kernel sources, part names); each violation names its file, line, "
                                   "rule and the document section. rlhls build runs it last. Exit 0 no violation, 1 "
                                   "violations, 2 bad input.")
    c.add_argument("build_dir", metavar="BUILD_DIR", help="a folder written by rlhls build")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=cmd_check)


def cmd_check(args) -> int:
    from rlhls.flow.rules import RULES, check_build, summary

    v = check_build(args.build_dir)
    if args.json:
        print_json({"build_dir": str(args.build_dir), **summary(v)})
        return 1 if v else 0
    for x in v:
        print(x)
    print(f"{args.build_dir}: {len(RULES)} rule(s), {len(v)} violation(s)")
    return 1 if v else 0


def cmd_policy(args) -> int:
    """rlhls build DESIGN --weights RUN_FOLDER."""
    from rlhls.core.procs import library_output
    from rlhls.designs.registry import get_design
    from rlhls.host.policy import export_run_policy

    out = Path(args.out) if args.out else Path("build") / f"{get_design(args.design).name}-policy"
    progress = say(args.quiet or args.json)  # the console's handler: --quiet and -q hush it
    with contextlib.nullcontext() if args.verbose else library_output(None):
        m = export_run_policy(args.design, args.weights, out, part=args.part, clock_ns=args.clock, force=args.force,
                              csim=args.csim, progress=progress)
    where = m["states_from"]
    if args.json:
        print_json(m)
        return 0 if not m["csim"] or m["csim"]["passed"] else 1
    for n in m["notes"]:
        logging.getLogger("rlhls").warning(n)
    print(f"{m['design']}: policy '{m['network']}' ({m['formats']['storage']}) -> {out}/{m['component']['dir']} "
          f"(top {m['component']['top']}, {m['states']} state(s) from {where}, {m['seconds']:.1f} s)")
    c = m["csim"]
    if c is not None:
        rec = "" if c["equals_recorded"] is None else (", equal to the recorded actions" if c["equals_recorded"]
                                                       else ", DIFFERENT from the recorded actions")
        how = "bit-exact with the emulator" if c["exact"] else (
            f"{c['max_diff_lsb']:.3g} LSB from the emulator (hls4ml's float sums: within its documented bound)")
        print(f"  csim {'pass' if c['passed'] else 'FAIL'}: {how}{rec}")
        return 0 if c["passed"] else 1
    return 0


def cmd_build(args) -> int:
    if args.weights is not None:
        if (args.plan or args.synth or args.cosim or args.platform or args.link or args.board or args.full_data
                or args.sets or args.config):
            from rlhls.core.errors import RlhlsError

            raise RlhlsError("--weights exports the trained policy as the run bound it: --plan, --synth, --cosim, "
                             "--platform, --link, --board, --full-data, --set and --config do not apply to it")
        return cmd_policy(args)
    from rlhls.core.procs import library_output
    from rlhls.flow.build import build_design
    from rlhls.flow.link import link_request
    from rlhls.partition.plan import load_plan

    run = bound(args)  # the same design and sizes as rlhls train / rlhls run bind
    out = Path(args.out) if args.out else Path("build") / run.given.name
    plan = load_plan(args.plan) if args.plan else None
    link = link_request(args.platform, run=args.link, target=args.target, common_image=args.common_image,
                        board=args.board)
    progress = say(args.quiet or args.json)  # the console's handler: --quiet and -q hush it
    with contextlib.nullcontext() if args.verbose else library_output(None):  # hls4ml's banners
        res = build_design(run.design, out, plan=plan, bound=run.record(), part=args.part, clock_ns=args.clock,
                           csim=args.csim, synth=args.synth, cosim=args.cosim, force=args.force, progress=progress,
                           link=link, full_data=args.full_data,
                           hls4ml=link is None)  # the board backend calls layers one by one: rlhls' kernels
    if args.json:
        print_json(res.to_json())
        return 0 if res.ok else 1
    for w in res.warnings:
        logging.getLogger("rlhls").warning(w)
    print(f"{res.design}: {len(res.components)} PL component(s), {len(res.aie['nodes'])} AIE node(s), "
          f"{_host_nodes(res)} -> {res.out}  (part {res.part}, clock {res.clock_ns} ns, {res.seconds:.1f} s)")
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
        for a in res.aie.get("csim") or []:
            print(f"    {a['kernel']:<40} check {'pass' if a['passed'] else 'FAIL'}: {a.get('detail', '')}")
    if res.unmapped:
        print(f"  on the host, no PL kernel: {', '.join(res.unmapped)}")
    if res.rules is not None:
        bad = res.rules["violations"]
        print(f"  rules: {len(res.rules['rules'])} checked, {len(bad)} violation(s)"
              + "".join(f"\n    {x['file']}:{x['line']}: [{x['rule']}] {x['message']}" for x in bad))
    if res.link is not None:
        _print_link(res)
    return 0 if res.ok else 1


def _host_nodes(res) -> str:
    """The nodes that run on the host: those the plan puts on the PS and the PL nodes no kernel
    implements (the build's warning counts the latter the same way)."""
    ps, none = len(res.host), len(res.unmapped)
    text = f"{ps + none} host node(s)"
    if ps and none:
        return f"{text} ({ps} on the PS by the plan, {none} with no PL kernel)"
    if none:
        return f"{text} (PL nodes with no PL kernel)"
    return text


def _print_link(res) -> None:
    link = res.link
    if link["platform"] is not None:
        p = link["platform"]
        print(f"  link: {p['name']} ({p['kind']}, target {link['target']}): commands in {res.out}/{link['makefile']}"
              + ("" if link["run"] else " (not run: pass --link)"))
    for r in link.get("results", []):
        print(f"    {r['step']:<8} {'pass' if r['passed'] else 'FAIL'}"
              + (f": {r['detail']}" if r.get("detail") else "") + f" (log {r['log']})")
    if link.get("not_run"):
        print(f"    not run: {link['not_run']}")
    if link.get("board"):
        print(f"  board: {res.out}/board ({len(link['board'])} file(s)); see board/README.md")
