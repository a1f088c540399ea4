"""Project files of a build folder: per PL component `hls_config.cfg` (Vitis unified flow,
`v++ -c --mode hls`) and a classic `run_hls.tcl` (vitis_hls before 2024.2); one `system.cfg`
for `v++ --link`; and `manifest.json` (what was generated from what, with sha256 of every file).

The text comes from the Jinja2 templates in `vitis/templates/project/`. Paths inside
hls_config.cfg are relative to the cfg file, paths inside run_hls.tcl relative to its folder
(vitis_hls runs there), so a build folder can be moved or copied to a machine with Vitis.

Config keys follow AMD UG1399/UG1702 ("v++ Mode HLS", "HLS General Options", "Package Options",
"C-Simulation Configuration"): `part=` is a v++ general option and stays above `[hls]`;
`flow_target`, `clock`, `syn.file`, `syn.top`, `syn.cflags`, `tb.file`, `tb.cflags`, `csim.O`,
`cosim.O`, `package.output.format` go under `[hls]`. Link: `[connectivity] nk=<kernel>:<n>:<cu>`
(UG1702 "--connectivity Options"). The ap_types headers are not named in the cflags: inside
Vitis the tool provides them; the g++ csim outside Vitis adds them itself (core/toolchain.py).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, owned_file, within

MANIFEST = "manifest.json"
GENERATOR = "rlhls build"
HLS_CONFIG = "hls_config.cfg"
RUN_HLS = "run_hls.tcl"
SYSTEM_CFG = "system.cfg"
TCL_PROJECT = "prj"
TCL_SOLUTION = "sol1"
WORK_DIR = "work"  # v++ / vitis-run --work_dir inside a component folder


def _templates_dir() -> Path:
    try:
        from rlhls.flow.paths import vitis_dir  # KERNELS stream
        root = Path(vitis_dir())
    except ImportError:
        root = Path(str(importlib.resources.files("rlhls.vitis")))
    return root / "templates" / "project"


_env = None


def _render(template: str, **ctx) -> str:
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_templates_dir())),
                                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                  undefined=jinja2.StrictUndefined, autoescape=False)
    return _env.get_template(template).render(**ctx)


def clock_text(clock_ns: float) -> str:
    return f"{clock_ns:.4f}".rstrip("0").rstrip(".")


@dataclass
class HlsComponent:
    """What the cfg and tcl writers need: file lists relative to the component folder."""

    name: str
    top: str
    syn_files: list
    tb_files: list
    cflags: str = ""
    tb_cflags: str = ""
    flow_target: str = "vitis"
    output_format: str = "xo"
    extra: dict = field(default_factory=dict)


_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+\-]+$")


def _check_paths(comp: HlsComponent) -> None:
    for f in [*comp.syn_files, *comp.tb_files]:
        if not _SAFE_PATH.match(f) or f.startswith("/"):
            # a space or a quote would split the cfg value / tcl word
            raise RlhlsError(f"component '{comp.name}': file name {f!r} must be a relative path of "
                             "letters, digits and _ . / + -")


def hls_config_text(comp: HlsComponent, *, design: str, part: str, clock_ns: float,
                    part_note: str = "") -> str:
    _check_paths(comp)
    return _render("hls_config.cfg.j2", name=comp.name, design=design, part=part, part_note=part_note,
                   flow_target=comp.flow_target, clock=f"{clock_text(clock_ns)}ns", top=comp.top,
                   syn_files=comp.syn_files, tb_files=comp.tb_files, cflags=comp.cflags,
                   tb_cflags=comp.tb_cflags, output_format=comp.output_format)


def run_hls_tcl_text(comp: HlsComponent, *, design: str, part: str, clock_ns: float,
                     part_note: str = "") -> str:
    _check_paths(comp)
    return _render("run_hls.tcl.j2", name=comp.name, design=design, part=part, part_note=part_note,
                   project=TCL_PROJECT, solution=TCL_SOLUTION, top=comp.top, syn_files=comp.syn_files,
                   tb_files=comp.tb_files, cflags=comp.cflags, tb_cflags=comp.tb_cflags,
                   flow_target=comp.flow_target, clock_ns=clock_text(clock_ns),
                   output_format=comp.output_format)


def system_cfg_text(components: list, *, design: str, streams=(), aie_nodes=(), part_note: str = "") -> str:
    """components: dicts with name, kind, kernel, top, cu, nodes."""
    return _render("system.cfg.j2", design=design, components=components, streams=list(streams),
                   aie_nodes=list(aie_nodes), part_note=part_note)


def parse_cfg(text: str) -> tuple[dict, dict]:
    """Parse a Vitis .cfg: ({key: [values]} above the first section, {section: {key: [values]}}).

    Keys repeat (syn.file, tb.file, nk), so values are lists; '#' starts a comment line.
    """
    top: dict = {}
    sections: dict = {}
    cur = top
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = sections.setdefault(line[1:-1].strip().lower(), {})
            continue
        if "=" not in line:
            raise RlhlsError(f"cfg line {i}: {raw!r} is not key=value")
        k, v = line.split("=", 1)
        cur.setdefault(k.strip(), []).append(v.strip())
    return top, sections


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_entries(root: Path, owners: dict | None = None) -> list[dict]:
    """Every file under root except the manifest: path (posix, relative), bytes, sha256, component."""
    owners = owners or {}
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name == MANIFEST and p.parent == root:
            continue
        rel = p.relative_to(root).as_posix()
        first = rel.split("/")[1] if rel.startswith("pl/") and rel.count("/") >= 2 else rel.split("/")[0]
        out.append({"path": rel, "bytes": p.stat().st_size, "sha256": sha256_file(p),
                    "component": owners.get(first, first if rel.startswith(("pl/", "aie/")) else None)})
    return out


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_manifest(out: Path) -> dict | None:
    """Our manifest in `out`, or None when there is none (or it is not ours); a manifest.json that is
    a symbolic link is refused (RlhlsError), never read."""
    p = Path(out) / MANIFEST
    owned_file(out, MANIFEST)
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("generator") == GENERATOR else None


def recorded_paths(m: dict) -> list[tuple[str, object]]:
    """(where, value) of every path a manifest records: component folders, files, system.cfg, AIE files."""
    found = []

    def each(key, value, field=None):
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, e in items:
            v = e.get(field) if field and isinstance(e, dict) else e
            if v is not None:  # not recorded: nothing to follow
                found.append((key + ("" if i is None else f"[{i}]") + (f".{field}" if field else ""), v))

    each("components", m.get("components"), "dir")
    each("component", m.get("component"), "dir")
    each("files", m.get("files"), "path")
    each("system_cfg", m.get("system_cfg"))
    if isinstance(m.get("aie"), dict):
        each("aie.files", m["aie"].get("files"))
    return found


def check_paths(out, m: dict) -> None:
    """Every path manifest `m` records is relative, without '..', and inside `out` with its links
    resolved: the manifest is data someone may have crafted, and the checks read what it names.
    RlhlsError (one line naming the entry) otherwise, before anything it names is read."""
    where = Path(out) / MANIFEST
    for key, rel in recorded_paths(m):
        pure = PurePosixPath(rel) if isinstance(rel, str) and rel and "\x00" not in rel else None
        if pure is None or pure.is_absolute() or ".." in pure.parts:
            raise RlhlsError(f"'{where}': {key} is {rel!r}, not a path inside the build folder (nothing it names "
                             "was read)")
        try:
            within(out, Path(out, *pure.parts))
        except RlhlsError:
            raise RlhlsError(f"'{where}': {key} '{rel}' leads out of the build folder through a symbolic link "
                             "(nothing it names was read)") from None


def build_manifest(folder, what: str = "--reports") -> tuple[Path, dict]:
    """(folder, its manifest) of a complete build folder `rlhls build` wrote; one RlhlsError line
    otherwise (its recorded paths checked: ``check_paths``)."""
    path = Path(folder).absolute()
    if not path.is_dir():
        raise RlhlsError(f"{what} '{folder}': no such folder; expected a folder written by `{GENERATOR}`")
    m = read_manifest(path)
    if m is None:
        raise RlhlsError(f"{what} '{folder}': no {MANIFEST} written by `{GENERATOR}` in it")
    check_paths(path, m)
    check_complete(folder, m)
    return path, m


def check_complete(folder, m: dict) -> None:
    """One line for a build whose manifest says its checks never finished: it is published with
    ``"complete": false`` before its C simulations, Vitis steps and rule checks run, and completed after
    them (a manifest without the key is of an older rlhls, whose builds were complete when published)."""
    if m.get("complete") is False:
        raise RlhlsError(f"build '{folder}' is incomplete: its checks did not finish (interrupted?); build it again")


def verify_manifest(out: Path) -> list[str]:
    """Files whose hash no longer matches the manifest (or that are missing)."""
    m = read_manifest(out)
    if m is None:
        raise RlhlsError(f"'{out}': no manifest.json written by {GENERATOR}")
    check_paths(out, m)
    bad = []
    for e in m["files"]:
        p = Path(out) / e["path"]
        if not p.is_file() or sha256_file(p) != e["sha256"]:
            bad.append(e["path"])
    return bad
