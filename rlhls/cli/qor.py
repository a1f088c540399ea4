"""``rlhls qor``: the cost models beside published measurements (``rlhls.partition.qor``)."""

from __future__ import annotations

from pathlib import Path

from .common import print_json, say


def register(sub) -> None:
    s = sub.add_parser("qor", help="the cost models against published measurements: held-out errors, fitted constants",
                       description="Predict every row of the reference corpus (published AIE, PL and PS measurements, "
                                   "each citing its document) with the kernels' cost models, fit the models' free "
                                   "constants on the calibration rows and report the errors on the held-out rows, for "
                                   "the constants of the code (assumed) and the fitted ones (calibrated). Writes one "
                                   "predicted-vs-measured figure per unit and points.csv into --out. Changes no "
                                   "constant of the catalogue or the cost models.")
    s.add_argument("--json", action="store_true",
                   help='print {"metrics": [...]} (held-out errors per unit and metric); writes files only with --out')
    s.add_argument("--constants", choices=("calibrated", "assumed"), default="calibrated",
                   help="whose held-out errors --json prints (default calibrated; the table shows both)")
    s.add_argument("--corpus", metavar="DIR", help="a folder of corpus CSVs (aie.csv, pl.csv, ps.csv) instead of "
                                                   "the package's")
    s.add_argument("--out", help="output folder of the figures (default runs/qor)")
    s.add_argument("--force", action="store_true", help="write into a non-empty folder rlhls did not write")
    s.set_defaults(func=cmd_qor)


def cmd_qor(args) -> int:
    from rlhls.partition.qor import check_qor_out, qor, write_qor

    out = Path(args.out) if args.out else (None if args.json else Path("runs/qor"))
    if out is not None:
        check_qor_out(out, force=args.force)  # before the work, so a refused --out costs nothing
    say(args.quiet or args.json)("rlhls qor: fitting the cost models' constants on the calibration rows")
    q = qor(args.corpus)
    if out is not None:
        write_qor(q, out, force=args.force)
    if args.json:
        print_json(q.to_json(args.constants))
        return 0
    print(q.text())
    if out is not None:
        print(f"-> {out}/ ({', '.join(p.name for p in sorted(out.iterdir()) if not p.name.startswith('.'))})")
    return 0
