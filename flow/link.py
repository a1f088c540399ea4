"""Link and package a build for a Vitis platform (``v++ --link`` / ``v++ --package``), and the board package.

``rlhls build DESIGN --platform P`` writes the commands that make the device binary out of the build
into a ``Makefile`` of the build folder; ``--link`` also runs them (Vitis on ``PATH``), each with its
log beside its outputs; ``--board`` writes ``board/``, what to copy to the board.

The commands (AMD UG1393 "Building and Running the System": "Linking the Kernels", "Packaging the
System", "--package Options"; UG1702 "v++ Command", "--package Options"; UG1076 "Linking the System",
"Packaging the System for Hardware"; the same options as AMD's own Vitis_Accel_Examples makefiles
``makefile_zynqmp.mk`` / ``makefile_versal_ps.mk`` / ``makefile_us_alveo.mk`` and the Vitis-Tutorials
AIE ``05-AI-engine-versal-integration`` Makefile), run in the build folder (the AIE compile in ``aie/``)::

    pl/<c>/<top>.xo    cd pl/<c> && v++ -c --mode hls --config hls_config.cfg --work_dir work
                       (``package.output.file`` of hls_config.cfg puts the .xo beside it)
    aie/libadf.a       cd aie && v++ -c --mode aie --target hw --platform P --config aie.cfg --work_dir Work graph.cpp
    link               v++ --link -t T --platform P --config system.cfg --temp_dir link/_x
                           -o link/<name>.xsa (Versal) | link/<name>.link.xclbin   <every .xo> [aie/libadf.a]
    package            v++ --package -t T --platform P --package.out_dir link/package
                           [embedded: --package.boot_mode sd --package.rootfs R --package.kernel_image I
                            --package.image_format ext4 [--package.sd_dir board]]
                           [Versal with an AIE graph: --package.defer_aie_run]
                           -o link/<name>.xclbin  link/<name>.xsa aie/libadf.a | link/<name>.link.xclbin

UG1076: the AIE graph's ``libadf.a`` goes to both the link and the package of a Versal design;
``--package.defer_aie_run``: the host program (not the PDI load) starts the graph. UG1393: Versal's
link makes an ``.xsa`` that the package turns into the ``.xclbin``; Zynq UltraScale+ and Alveo link
an ``.xclbin`` that the package completes; embedded platforms need the common image's ``rootfs.ext4``
and ``Image`` (``--common-image DIR``, AMD's ``xilinx-{zynqmp,versal}-common-*`` download) and get an
SD card image (``link/package/sd_card.img``). The compile and the link use the same ``-t`` and
``--platform`` (UG1076 "Linking the System").

``system.cfg`` has one compute unit per PL component (``nk=``) and ``sc=`` only where the build
streams between kernels: today none (the kernels exchange tensors through memory, ``m_axi``); the
AIE graph's PLIOs need PL data movers the build does not emit yet, so a real link of a plan with AIE
nodes needs them added (said as a warning).

The platform is an ``.xpfm`` file (XML, read bounded: size, no DTD, root ``<sdx:platform>``) or a
platform name ``xilinx_<board>_...``; the board (from the name or the file's ``sdx:library``) tells
Zynq UltraScale+ (``zynqmp``), Versal (``versal``) or a PCIe card (``alveo``), and the design's part
must be of that family (and, for a board whose device is known, that device).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import owned_file, read_limited

from . import project as P
from . import vitis as V

TARGETS = ("hw", "hw_emu")  # UG1393: sw_emu is not a target of a board
KINDS = {"zynqmp": "Zynq UltraScale+ MPSoC", "versal": "Versal", "alveo": "Alveo / PCIe accelerator card"}
# board -> (kind, AMD device of its part): ZCU102 UG1182, ZCU104 UG1267, ZCU106 UG1244, KV260/KR260 the K26
# SOM (DS987), VCK190 UG1366, VEK280 UG1612, VMK180 UG1411, U200/U250 DS962, U280 DS963, U50 DS965, U55C DS978
BOARDS = {
    "zcu102": ("zynqmp", "xczu9eg"), "zcu104": ("zynqmp", "xczu7ev"), "zcu106": ("zynqmp", "xczu7ev"),
    "kv260": ("zynqmp", "xck26"), "kr260": ("zynqmp", "xck26"),
    "vck190": ("versal", "xcvc1902"), "vek280": ("versal", "xcve2802"), "vmk180": ("versal", "xcvm1802"),
    "u200": ("alveo", "xcu200"), "u250": ("alveo", "xcu250"), "u280": ("alveo", "xcu280"),
    "u50": ("alveo", "xcu50"), "u55c": ("alveo", "xcu55c"),
}
# a part's family from its device prefix (DS890 / DS950 / DS962 ordering information)
_PART_KINDS = (("xczu", "zynqmp"), ("xck26", "zynqmp"), ("xcvc", "versal"), ("xcve", "versal"),
               ("xcvm", "versal"), ("xcvp", "versal"), ("xcvh", "versal"), ("xcu", "alveo"), ("xcvu", "alveo"),
               ("xcku", "alveo"))
SDX_NS = "http://www.xilinx.com/sdx"
MAX_XPFM_BYTES = 4 << 20  # an .xpfm is a few kilobytes of XML
# what a path must be made of to go into a Makefile and a shell command unquoted
_SAFE = re.compile(r"^[A-Za-z0-9_./+@%=:,~-]+$")
_MAKE_VAR = re.compile(r"^\$\(COMMON_IMAGE\)/[A-Za-z0-9_.]+$")  # a path under the Makefile's COMMON_IMAGE
LINK_DIR = "link"
PACKAGE_DIR = "link/package"
MAKEFILE = "Makefile"
BOARD_DIR = "board"
AIE_LIB = "aie/libadf.a"
# what `rlhls train` imports on the board (measured: a DDPG LunarLander run); the flow's own tools
# (hls4ml, onnx, qonnx, Ray, the SUMO and Atari environments) stay on the workstation
BOARD_PACKAGES = ("numpy", "ml_dtypes", "Jinja2", "PuLP", "highspy", "matplotlib", "tensorboardX", "Pillow",
                  "PyYAML", "tqdm", "psutil", "gymnasium[box2d,mujoco]")


@dataclass(frozen=True)
class Platform:
    arg: str             # as given
    name: str            # xilinx_vek280_base_202420_1
    file: Path | None    # the .xpfm, where known
    board: str | None    # vek280 (None: a platform of a board rlhls does not know)
    kind: str            # zynqmp | versal | alveo

    @property
    def vpp_arg(self) -> str:
        """What --platform gets: the file, else the name (v++ looks it up in PLATFORM_REPO_PATHS)."""
        return str(self.file) if self.file is not None else self.name

    @property
    def embedded(self) -> bool:
        return self.kind in ("zynqmp", "versal")

    def to_json(self) -> dict:
        return {"arg": self.arg, "name": self.name, "file": str(self.file) if self.file else None,
                "board": self.board, "kind": self.kind}


@dataclass(frozen=True)
class LinkRequest:
    """What --platform / --link / --board ask (``link_request``)."""
    platform: Platform | None
    run: bool = False                 # --link: run the commands (else only written)
    target: str = "hw"
    common_image: Path | None = None  # embedded: the folder with rootfs.ext4 and Image
    board: bool = False


@dataclass
class LinkStep:
    name: str          # 'aie' | 'link' | 'package'
    argv: tuple        # argv[0] is 'v++'
    cwd: str           # relative to the build folder
    log: str           # relative to the build folder, beside the outputs
    outputs: tuple     # relative to the build folder: what the step must leave
    inputs: tuple = () # relative to the build folder: what it needs (Makefile prerequisites)
    result: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"step": self.name, "argv": list(self.argv), "cwd": self.cwd, "log": self.log,
                "outputs": list(self.outputs), **({"result": self.result} if self.result else {})}


# ---------------------------------------------------------------------------------------------
# the platform
# ---------------------------------------------------------------------------------------------


def _board_of(*names: str) -> str | None:
    for n in names:
        for tok in re.split(r"[_\-.\s]+", n.lower()):
            if tok in BOARDS:
                return tok
    return None


def _kind_from_xpfm(root) -> str | None:
    """The processor a platform's software configurations name (an unknown board's platform)."""
    text = " ".join(f"{k}={v}" for el in root.iter() for k, v in el.attrib.items()).lower()
    if "cortex-a72" in text or "cortex-a78" in text or "versal" in text:
        return "versal"
    if "cortex-a53" in text or "zynqmp" in text or "zynq_ultrascale" in text:
        return "zynqmp"
    if "x86" in text or "xdma" in text or "qdma" in text:
        return "alveo"
    return None


def read_xpfm(path: Path, arg: str) -> Platform:
    """A platform file: bounded read, no DTD (no entity expansion), root <sdx:platform>."""
    where = f"--platform '{arg}'"
    if path.suffix.lower() != ".xpfm":
        raise RlhlsError(f"{where}: not an .xpfm file; expected a Vitis platform file (e.g. "
                         "xilinx_zcu102_base_202420_1.xpfm) or a platform name")
    try:
        data = read_limited(path, MAX_XPFM_BYTES, "a platform file holds")
    except (OSError, ValueError) as e:
        raise RlhlsError(f"{where}: cannot read it ({e}); expected a Vitis platform file .xpfm") from None
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise RlhlsError(f"{where}: holds a DTD; a Vitis platform file has none (it was not parsed)")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise RlhlsError(f"{where}: not a Vitis platform (malformed XML: {e})") from None
    if root.tag != f"{{{SDX_NS}}}platform":
        raise RlhlsError(f"{where}: not a Vitis platform (root element <{root.tag.split('}')[-1]}>, expected "
                         f"<sdx:platform> of {SDX_NS})")
    lib = root.get(f"{{{SDX_NS}}}library") or ""
    board = _board_of(lib, path.stem)
    kind = BOARDS[board][0] if board else _kind_from_xpfm(root)
    if kind is None:
        raise RlhlsError(f"{where}: cannot tell the platform's family (a board rlhls knows: {', '.join(BOARDS)}; "
                         "or a processor cortex-a53 / cortex-a72 / x86 in its configurations)")
    return Platform(arg, path.stem, path.resolve(), board, kind)


def _find_platform_file(name: str) -> Path | None:
    """Where v++ finds a platform by name: $PLATFORM_REPO_PATHS, then $XILINX_VITIS/base_platforms."""
    roots = [Path(p) for p in os.environ.get("PLATFORM_REPO_PATHS", "").split(os.pathsep) if p]
    if os.environ.get("XILINX_VITIS"):
        roots.append(Path(os.environ["XILINX_VITIS"]) / "base_platforms")
    for r in roots:
        for cand in (r / name / f"{name}.xpfm", r / f"{name}.xpfm"):
            if cand.is_file():
                return cand
    return None


def resolve_platform(arg, *, need_file: bool = False) -> Platform:
    """--platform: an .xpfm path or a platform name (``need_file``: found where v++ looks, for --link)."""
    if not isinstance(arg, str) or not arg.strip():
        raise RlhlsError(f"--platform {arg!r}: expected a Vitis platform file .xpfm or a platform name")
    if "\x00" in arg:
        raise RlhlsError("--platform: the path holds a NUL byte")
    path = Path(arg)
    looks_path = arg.lower().endswith(".xpfm") or os.sep in arg or (os.altsep and os.altsep in arg) or path.exists()
    if looks_path:
        if not path.is_file():
            raise RlhlsError(f"--platform '{arg}': no such file; expected a Vitis platform file .xpfm "
                             "(e.g. $XILINX_VITIS/base_platforms/<name>/<name>.xpfm)")
        plat = read_xpfm(path, arg)
    else:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", arg):
            raise RlhlsError(f"--platform '{arg}': not a platform name (letters, digits, _ . -) nor an .xpfm file")
        board = _board_of(arg)
        if board is None:
            raise RlhlsError(f"--platform '{arg}': not a file and not a platform name rlhls knows (xilinx_<board>_..., "
                             f"boards: {', '.join(BOARDS)}); pass the .xpfm file")
        found = _find_platform_file(arg)
        if found is not None:
            plat = read_xpfm(found, arg)
        elif need_file:
            raise RlhlsError(f"--platform '{arg}': not found in $PLATFORM_REPO_PATHS nor $XILINX_VITIS/base_platforms "
                             "(install the platform, or pass its .xpfm file)")
        else:
            plat = Platform(arg, arg, None, board, BOARDS[board][0])
    if not _SAFE.match(plat.vpp_arg):
        raise RlhlsError(f"--platform '{arg}': the path holds characters a Makefile cannot carry (letters, digits and "
                         "_ . / + @ % = : , ~ - only); move or link the platform to such a path")
    return plat


def link_request(platform=None, *, run: bool = False, target: str = "hw", common_image=None,
                 board: bool = False) -> LinkRequest | None:
    """The checked --platform / --link / --target / --common-image / --board (None when none is asked);
    RlhlsError (one line) before anything is written."""
    if platform is None:
        if run:
            raise RlhlsError("--link needs --platform XPFM (the Vitis platform to link for: an .xpfm file or a "
                             "platform name such as xilinx_vek280_base_202420_1)")
        if common_image is not None or target != "hw":
            raise RlhlsError("--target and --common-image apply to a link: pass --platform XPFM")
        return LinkRequest(None, board=True) if board else None
    if target not in TARGETS:
        raise RlhlsError(f"--target {target!r}: expected one of {', '.join(TARGETS)} (UG1393 build targets of a board)")
    plat = resolve_platform(platform, need_file=run)
    image = None
    if common_image is not None:
        image = Path(common_image)
        if not image.is_dir():
            raise RlhlsError(f"--common-image '{common_image}': no such folder; expected AMD's common image for the "
                             f"platform (xilinx-{_image_family(plat)}-common-<version>/, with rootfs.ext4 and Image)")
        image = image.resolve()
        if not _SAFE.match(str(image)):
            raise RlhlsError(f"--common-image '{common_image}': the path holds characters a Makefile cannot carry "
                             "(letters, digits and _ . / + @ % = : , ~ - only)")
        if not plat.embedded:
            raise RlhlsError(f"--common-image: platform '{plat.name}' is an {KINDS[plat.kind]} platform; only "
                             "embedded platforms (Zynq UltraScale+, Versal) boot a common image")
    if run and plat.embedded:
        if image is None and os.environ.get("EDGE_COMMON_SW"):
            return link_request(platform, run=run, target=target, common_image=os.environ["EDGE_COMMON_SW"],
                                board=board)
        if image is None:
            raise RlhlsError(f"--link for the embedded platform '{plat.name}' needs --common-image DIR (AMD's "
                             f"xilinx-{_image_family(plat)}-common-<version>/ with rootfs.ext4 and Image; or "
                             "$EDGE_COMMON_SW)")
    for f in ("rootfs.ext4", "Image"):
        if image is not None and not (image / f).is_file():
            raise RlhlsError(f"--common-image '{common_image}': no {f} in it; expected AMD's common image "
                             "(rootfs.ext4 and Image)")
    return LinkRequest(plat, run=run, target=target, common_image=image, board=board)


def _image_family(plat: Platform) -> str:
    return "versal" if plat.kind == "versal" else "zynqmp"


def part_kind(part: str) -> str | None:
    p = part.lower()
    for prefix, kind in _PART_KINDS:
        if p.startswith(prefix):
            return kind
    return None


def check_request(req: LinkRequest, *, part: str, tools: V.VitisTools) -> None:
    """Before anything is written: v++ on PATH for --link; the build's part of the platform's family
    (and of its board's device, where rlhls knows the board)."""
    plat = req.platform
    if plat is None:
        return
    if req.run and not tools.vpp:
        raise RlhlsError("v++ not found on PATH (needed for --link; source Vitis' settings64.sh, or leave out --link: "
                         f"the commands are written into the build's {MAKEFILE} either way)")
    kind = part_kind(part)
    if kind is not None and kind != plat.kind:
        raise RlhlsError(f"--platform '{plat.name}' is a {KINDS[plat.kind]} platform but the build's part {part} is "
                         f"{KINDS[kind]}: pass the design's platform (or --part of the platform's device)")
    if plat.board is not None:
        device = BOARDS[plat.board][1]
        if not part.lower().startswith(device):
            raise RlhlsError(f"--platform '{plat.name}' is the {plat.board.upper()} ({device}) but the build's part is "
                             f"{part}: pass the design's platform (or --part of the {plat.board.upper()}'s device)")


# ---------------------------------------------------------------------------------------------
# the commands
# ---------------------------------------------------------------------------------------------


def output_name(design_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", design_name) or "design"


def xo_path(comp_dir: str, top: str) -> str:
    """The kernel object of a component (hls_config.cfg's package.output.file, run_hls.tcl's -output)."""
    return f"{comp_dir}/{top}.xo"


def xclbin_name(design_name: str) -> str:
    return f"{output_name(design_name)}.xclbin"


def link_steps(req: LinkRequest, *, design_name: str, components: list, aie: bool) -> list[LinkStep]:
    """The AIE compile (a graph on a Versal platform), the link and the package; `components`:
    dicts with dir and top."""
    plat = req.platform
    assert plat is not None
    t, pf = req.target, plat.vpp_arg
    name = output_name(design_name)
    xos = tuple(xo_path(c["dir"], c["top"]) for c in components)
    libadf = (AIE_LIB,) if aie else ()
    steps = []
    if aie:
        # UG1076 "Compiling the AI Engine Graph": --target hw serves hw and hw_emu
        steps.append(LinkStep("aie", ("v++", "-c", "--mode", "aie", "--target", "hw", "--platform", pf,
                                      "--config", "aie.cfg", "--work_dir", "Work", "graph.cpp"),
                              "aie", "aie/aie_compile.log", libadf))
    linked = f"{LINK_DIR}/{name}.xsa" if plat.kind == "versal" else f"{LINK_DIR}/{name}.link.xclbin"
    steps.append(LinkStep("link", ("v++", "--link", "-t", t, "--platform", pf, "--config", P.SYSTEM_CFG,
                                   "--temp_dir", f"{LINK_DIR}/_x", "-o", linked, *xos, *libadf),
                          ".", f"{LINK_DIR}/link.log", (linked,), xos + libadf))
    xclbin = f"{LINK_DIR}/{xclbin_name(design_name)}"
    pkg = ["v++", "--package", "-t", t, "--platform", pf, "--package.out_dir", PACKAGE_DIR]
    outputs = [xclbin]
    if plat.embedded:
        image = str(req.common_image) if req.common_image is not None else "$(COMMON_IMAGE)"
        pkg += ["--package.boot_mode", "sd", "--package.rootfs", f"{image}/rootfs.ext4",
                "--package.kernel_image", f"{image}/Image", "--package.image_format", "ext4"]
        if req.board:
            pkg += ["--package.sd_dir", BOARD_DIR]  # the board package on the SD card
        if t == "hw":
            outputs.append(f"{PACKAGE_DIR}/sd_card.img")
    if plat.kind == "versal" and aie:
        pkg.append("--package.defer_aie_run")  # the host program starts the graph (UG1393 --package options)
    pkg += ["-o", xclbin, linked, *(libadf if plat.kind == "versal" else ())]
    steps.append(LinkStep("package", tuple(pkg), ".", f"{LINK_DIR}/package.log", tuple(outputs),
                          (linked, *(libadf if plat.kind == "versal" else ()))))
    return steps


def makefile_text(req: LinkRequest, steps: list[LinkStep], *, design_name: str, components: list) -> str:
    """The same commands for `make` on a machine with Vitis."""
    plat = req.platform
    assert plat is not None
    lines = [
        f"# Generated by rlhls build: link and package design '{design_name}' for platform '{plat.name}'",
        f"# ({KINDS[plat.kind]}, target {req.target}). Run `make` here with Vitis' settings64.sh sourced: the",
        "# same commands `rlhls build --link` runs (AMD UG1393 'Building and Running the System', UG1076 for the",
        "# AIE graph).",
    ]
    if plat.embedded:
        lines += [f"# Embedded platform: COMMON_IMAGE is AMD's xilinx-{_image_family(plat)}-common-<version>/ folder "
                  "(rootfs.ext4, Image).",
                  f"COMMON_IMAGE ?= {req.common_image or ''}"]
    lines += ["", ".PHONY: all xo aie link package", "all: package", ""]
    xos = [xo_path(c["dir"], c["top"]) for c in components]
    lines += ["xo: " + " ".join(xos), ""]
    for c, xo in zip(components, xos):
        lines += [f"{xo}:", f"\tcd {c['dir']} && v++ -c --mode hls --config {P.HLS_CONFIG} --work_dir {P.WORK_DIR}", ""]
    for s in steps:
        target = s.outputs[0]
        cmd = " ".join(a if _SAFE.match(a) or _MAKE_VAR.match(a) else shlex.quote(a) for a in s.argv)
        pre = f"cd {s.cwd} && " if s.cwd != "." else ""
        lines += [f"{s.name}: {target}", f"{target}: {' '.join(s.inputs)}".rstrip()]
        if s.name == "package" and plat.embedded:
            lines.append('\t@test -n "$(COMMON_IMAGE)" || { echo "set COMMON_IMAGE=<common image folder>"; exit 2; }')
        if s.cwd == ".":
            lines.append(f"\tmkdir -p {LINK_DIR}")
        lines += [f"\t{pre}{cmd}", ""]
    return "\n".join(lines) + "\n"


def makefile_commands(text: str) -> list[tuple[str, list[str]]]:
    """(cwd, argv) of every v++ command a generated Makefile holds, its variables expanded."""
    vars_ = dict(re.findall(r"^([A-Z_]+) \?= (.*)$", text, re.M))
    out = []
    for line in text.splitlines():
        if not line.startswith("\t") or "v++" not in line:
            continue
        cmd = re.sub(r"\$\(([A-Z_]+)\)", lambda m: vars_.get(m.group(1), ""), line.strip())
        cwd = "."
        m = re.match(r"cd (\S+) && (.*)$", cmd)
        if m:
            cwd, cmd = m.group(1), m.group(2)
        out.append((cwd, shlex.split(cmd)))
    return out


def run_link_steps(out: Path, steps: list[LinkStep], tools: V.VitisTools, say) -> list[dict]:
    """Run the steps in order (argv[0] the v++ on PATH), stopping at the first that fails; a step
    fails on a non-zero exit or when an output it must leave is missing."""
    results = []
    for s in steps:
        cwd = out / s.cwd
        owned_file(out, s.log, write=True)  # link/ of a folder rlhls merged into may be a user's link
        (out / s.log).parent.mkdir(parents=True, exist_ok=True)
        say(f"{s.name}: v++ {s.argv[1]} ... (log {s.log})")
        header = f"# rlhls build --link, in {s.cwd}:\n# {shlex.join(s.argv)}\n"
        r = V.run_step(V.Step(s.name, (tools.vpp, *s.argv[1:]), cwd, out / s.log), header=header)
        missing = [o for o in s.outputs if not (out / o).exists()]
        if r["passed"] and missing:
            r["passed"] = False
            r["detail"] = f"exited 0 without writing {', '.join(missing)}"
        r["log"] = s.log
        r["cwd"] = s.cwd
        s.result = r
        results.append(r)
        if not r["passed"]:
            break
    return results


def aie_plios(out: Path) -> tuple[list[str], list[str]]:
    """The AIE graph's input and output PLIO names (aie/manifest.json)."""
    try:
        m = json.loads((out / "aie" / "manifest.json").read_text())
        ins = [p for n in m["nodes"] for p in n["plio_inputs"]]
        outs = [p for n in m["nodes"] for p in n["plio_outputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [], []
    return ins, outs


def write_link_files(root: Path, req: LinkRequest, *, design, components: list, aie_nodes: list,
                     part: str) -> dict:
    """Into the (staged) build folder: the Makefile (a platform given) and board/ (--board); returns
    what the manifest records under ``link``. `components`: dicts with name, dir, top, cu, nodes."""
    rec: dict = {"platform": None, "target": req.target, "run": req.run, "makefile": None, "steps": [],
                 "results": [], "board": None}
    if req.platform is not None:
        steps = link_steps(req, design_name=design.name, components=components, aie=bool(aie_nodes))
        (root / MAKEFILE).write_text(makefile_text(req, steps, design_name=design.name, components=components))
        rec.update(platform=req.platform.to_json(), makefile=MAKEFILE,
                   common_image=str(req.common_image) if req.common_image is not None else None,
                   xclbin=f"{LINK_DIR}/{xclbin_name(design.name)}", steps=[s.to_json() for s in steps])
    if req.board:
        rec["board"] = write_board(root, req, design=design, components=components, aie_nodes=aie_nodes, part=part)
    return rec


# ---------------------------------------------------------------------------------------------
# the board package
# ---------------------------------------------------------------------------------------------


def _pins() -> list[str]:
    lines = []
    for spec in BOARD_PACKAGES:
        name = spec.split("[")[0]
        try:
            lines.append(f"{spec}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{spec}  # not installed where the build ran: unpinned")
    return lines


def board_entry(design, design_name: str) -> tuple[list[str], dict]:
    """(the host program's argv, files to copy beside it): the design by name, or its file."""
    files = {}
    spec = design_name
    origin = getattr(design, "origin", {}) or {}
    if origin.get("file"):
        src = Path(origin["file"])
        files[src.name] = src
        spec = f"./{src.name}:{design_name}"
    return ["python3", "-m", "rlhls", "train", spec, "--backend", "board", "--xclbin",
            xclbin_name(design_name)], files


def write_board(root: Path, req: LinkRequest, *, design, components: list, aie_nodes: list, part: str) -> list[str]:
    """board/ in the (staged) build folder: run.sh (the host program entry), requirements.txt (pinned),
    board.json (what the host program expects), README.md. Returns the files written (relative)."""
    import platform as _platform

    from rlhls.core import __version__

    d = root / BOARD_DIR
    d.mkdir(parents=True, exist_ok=True)
    name = design.name
    argv, extra = board_entry(design, name)
    xclbin = xclbin_name(name)
    plat = req.platform
    for fname, src in extra.items():
        shutil.copyfile(src, d / fname)
    (d / "run.sh").write_text(
        f"#!/bin/sh\n# Generated by rlhls build --board: train design '{name}' on the board, its PL/AIE kernels in\n"
        f"# {xclbin} (this folder), the rest of the training step on the board's processors.\n"
        "# Usage: sh run.sh [more `rlhls train` options, e.g. --steps 100000 --out runs/board]\n"
        "set -eu\ncd \"$(dirname \"$0\")\"\n"
        f"exec {shlex.join(argv)} \"$@\"\n")
    os.chmod(d / "run.sh", 0o755)
    py = _platform.python_version()
    req_lines = [f"# The Python packages `rlhls train` imports, pinned to the versions rlhls {__version__} was "
                 f"built and tested with (Python {py} here).",
                 "# Install on the board:  pip install -r requirements.txt  and rlhls itself without its "
                 "workstation tools:",
                 f"#   pip install --no-deps rlhls-{__version__}-py3-none-any.whl   (made here with: pip wheel "
                 "--no-deps <rlhls source>)",
                 "# pyxrt (XRT's Python API) comes with XRT in the board's image (PetaLinux / the common image), "
                 "not from PyPI.",
                 *_pins()]
    (d / "requirements.txt").write_text("\n".join(req_lines) + "\n")
    record = {"generator": "rlhls build --board", "version": __version__, "design": name, "part": part,
              "xclbin": xclbin, "command": argv,
              "platform": plat.to_json() if plat is not None else None,
              "sd_card": f"{PACKAGE_DIR}/sd_card.img" if plat is not None and plat.embedded else None,
              "kernels": [{"name": c["name"], "top": c["top"], "cu": c["cu"], "nodes": list(c["nodes"])}
                          for c in components],
              "aie_nodes": list(aie_nodes)}
    (d / "board.json").write_text(json.dumps(record, indent=1) + "\n")
    (d / "README.md").write_text(_board_readme(name, xclbin, argv, plat, extra, aie_nodes))
    return sorted(p.relative_to(root).as_posix() for p in d.rglob("*") if p.is_file())


def _board_readme(name: str, xclbin: str, argv: list, plat: Platform | None, extra: dict, aie_nodes: list) -> str:
    where = (f"for platform `{plat.name}` ({KINDS[plat.kind]})" if plat is not None
             else "(no --platform given: pass one to get the link and package commands)")
    copy = ["`board/` (this folder)", f"`link/{xclbin}` (made by the link and package) next to `run.sh`"]
    boot = ""
    if plat is not None and plat.embedded:
        boot = ("\nThe SD card image `link/package/sd_card.img` boots the board with the platform's Linux and this "
                "folder on its boot partition (`--package.sd_dir board`): write it to a card "
                "(`dd if=sd_card.img of=/dev/sdX bs=4M conv=fsync`), boot, copy the xclbin into this folder there "
                "(`scp`), then `cd` to it (the boot partition is mounted under `/run/media/`).\n")
    elif plat is not None:
        boot = ("\nAn Alveo card runs in a host PC with XRT installed: `xbutil examine` lists the card; the "
                "xclbin is loaded by the host program.\n")
    aie = (f"\nThe AIE graph ({len(aie_nodes)} node(s)) starts from the host program (`--package.defer_aie_run`).\n"
           if aie_nodes else "")
    design_file = "".join(f"- `{f}`: the design file the host program loads\n" for f in extra)
    return f"""# Board package of design `{name}`

Generated by `rlhls build --board` {where}.

## What to copy to the board

- {copy[0]}
- {copy[1]}
{design_file}{boot}{aie}
## On the board

```sh
pip install -r requirements.txt      # pinned; pyxrt comes with XRT in the board's image
pip install --no-deps rlhls-*.whl    # rlhls itself (pip wheel --no-deps <rlhls source> on the workstation)
sh run.sh --steps 100000 --out runs/board
```

`run.sh` runs `{shlex.join(argv)}`: the training loop on the board's processors, the plan's
PL and AIE nodes in `{xclbin}` through XRT. `board.json` lists the kernels (compute units) the
xclbin must hold and the nodes each runs.

The board backend (`--backend board`) loads the xclbin once through XRT's `pyxrt` and runs the
plan's PL kernels in it, weights updated in place in device buffers; the run folder gets each
kernel's measured time (`board_timings.csv`, for `rlhls profile --measured`).
"""
