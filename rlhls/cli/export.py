"""A run's trained policy out of rlhls: ``export``."""

from __future__ import annotations

from .common import print_json


def register(sub) -> None:
    s = sub.add_parser("export", help="write a run's trained policy network as ONNX",
                       description="Write the trained policy network of a run folder (rlhls train's, or rlhls "
                                   "run's): DQN's Q-network, DDPG's actor, the policy of PPO / A2C / TRPO, as float32 "
                                   "ONNX that onnxruntime runs to the run's own FP32 forward. A network imported from "
                                   "ONNX goes out in the layout it came in (input and output names and shapes); a "
                                   "mixed-precision run's formats are noted in the model's metadata "
                                   "(rlhls.formats). rlhls build DESIGN --weights RUN makes the HLS project of it.")
    s.add_argument("run", help="run folder (with config.json and checkpoint.npz)")
    s.add_argument("--onnx", metavar="FILE.onnx", required=True, help="the ONNX file to write")
    s.add_argument("--design", metavar="FILE.py",
                   help="the design file of a run of a user's design (./FILE.py[:NAME]): a run folder never makes "
                        "rlhls import a file by itself; the file's sha256 must be the one the run recorded")
    s.add_argument("--force", action="store_true", help="replace an existing --onnx file")
    s.add_argument("--json", action="store_true", help="print what was written as JSON")
    s.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from rlhls.host.export import export_run_onnx

    res = export_run_onnx(args.run, args.onnx, design=args.design, force=args.force)
    if args.json:
        print_json(res)
        return 0

    def shape(io):
        return f"'{io['name']}' ({', '.join(str(d) for d in io['dims'])})"

    print(f"network '{res['network']}' of run '{res['run']}' ({res['design']}, {res['algorithm'].upper()}) -> "
          f"{res['onnx']}: input {shape(res['input'])}, output {shape(res['output'])}, {len(res['layers'])} nodes")
    if res["formats"]:
        groups: dict[str, list[str]] = {}
        for node, fmt in res["formats"].items():
            groups.setdefault(fmt, []).append(node)
        print("trained in mixed precision; the file holds the float network, its formats are in the metadata "
              "(rlhls.formats): " + "; ".join(f"{fmt}: {', '.join(nodes)}" for fmt, nodes in groups.items()))
    return 0
