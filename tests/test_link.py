"""rlhls build --platform / --link / --board (flow/link.py): the v++ link and package command lines,
recorded by a stand-in `v++` on PATH that writes what each step must leave, against AMD's documented
options (UG1393 "Building and Running the System", UG1076 "Linking the System" / "Packaging the System");
without v++ the same commands in the build's Makefile; bad input one line, nothing written."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.flow import link as L

DESIGN = "apdrl-ddpg-lunarcont"  # VEK280: its ILP plan puts matrix products on the AIE and kernels on the PL
NAME = DESIGN
SDX = "http://www.xilinx.com/sdx"

# v++ as the steps call it: records cwd and argv, checks the inputs a step names exist, writes its outputs
FAKE_VPP = r'''#!{python}
import json, os, sys
from pathlib import Path
a = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps({{"cwd": os.getcwd(), "argv": a}}) + "\n")
def opt(n):
    return a[a.index(n) + 1] if n in a else None
def need(paths):
    for p in paths:
        if not Path(p).is_file():
            print("no input", p)
            sys.exit(1)
if a[:3] == ["-c", "--mode", "hls"]:
    cfg = Path(opt("--config"))
    out = [l.split("=", 1)[1] for l in cfg.read_text().splitlines() if l.startswith("package.output.file=")]
    (cfg.parent / out[0]).write_bytes(b"xo")
elif a[:3] == ["-c", "--mode", "aie"]:
    need(["graph.cpp", opt("--config")])
    Path("libadf.a").write_bytes(b"adf")
elif a[0] == "--link":
    need([x for x in a if x.endswith((".xo", ".a"))] + [opt("--config")])
    o = Path(opt("-o")); o.parent.mkdir(parents=True, exist_ok=True); o.write_bytes(b"linked")
elif a[0] == "--package":
    need([x for x in a if x.endswith((".xsa", ".xclbin", ".a")) and x != opt("-o")])
    Path(opt("-o")).write_bytes(b"xclbin")
    d = Path(opt("--package.out_dir")); d.mkdir(parents=True, exist_ok=True)
    if opt("--package.boot_mode") == "sd":
        (d / "sd_card.img").write_bytes(b"img")
else:
    sys.exit(3)
'''


def xpfm(path: Path, library: str = "vek280") -> Path:
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n<sdx:platform sdx:vendor="xilinx" '
                    f'sdx:library="{library}" sdx:name="base" sdx:version="202420.1" xmlns:sdx="{SDX}">\n'
                    '  <sdx:hardwarePlatforms><sdx:hardwarePlatform sdx:path="hw" sdx:name="hw.xsa"/>'
                    '</sdx:hardwarePlatforms>\n</sdx:platform>\n')
    return path


def fake_vpp(bindir: Path, log: Path) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    p = bindir / "v++"
    p.write_text(FAKE_VPP.format(python=sys.executable, log=str(log)))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The design's ILP plan, a VEK280 platform file, a common image, and the build run with the
    recording v++ on PATH (--link --board), then again without v++ (commands only)."""
    from rlhls.cli import main
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    from rlhls.partition.design_plan import partition_design
    from rlhls.partition.plan import write_plan

    root = tmp_path_factory.mktemp("link")
    d = get_design(DESIGN)
    g = build_graph(d)
    write_plan(partition_design(d, graph=g), root / "plan", edges=g.all_edges())
    plat = xpfm(root / "xilinx_vek280_base_202420_1.xpfm")
    image = root / "xilinx-versal-common-v2024.2"
    image.mkdir()
    (image / "rootfs.ext4").write_bytes(b"")
    (image / "Image").write_bytes(b"")
    log = root / "calls.jsonl"
    fake_vpp(root / "bin", log)
    (root / "nobin").mkdir()
    args = ["build", DESIGN, "--plan", str(root / "plan"), "--platform", str(plat), "--common-image", str(image),
            "--board"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{root / 'bin'}{os.pathsep}/usr/bin:/bin")
        rc_run = main([*args, "--out", str(root / "linked"), "--link"])
        mp.setenv("PATH", f"{root / 'nobin'}{os.pathsep}/usr/bin:/bin")
        rc_written = main([*args, "--out", str(root / "written")])
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return {"root": root, "plat": plat, "image": image, "calls": calls, "rc_run": rc_run, "rc_written": rc_written}


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _call(world, first: str) -> dict:
    found = [c for c in world["calls"] if c["argv"][:len(first.split())] == first.split()]
    assert len(found) == 1, (first, [c["argv"][:3] for c in world["calls"]])
    return found[0]


def _opt(argv, name):
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


def test_link_and_package_carry_every_component_the_aie_graph_and_the_platform(world):
    out = world["root"] / "linked"
    assert world["rc_run"] == 0
    m = _manifest(out)
    comps, plat = m["components"], str(world["plat"].resolve())
    assert m["aie"]["nodes"] and len(comps) > 1  # both kinds are there
    # synthesis of every component first (the unified flow), each writing the .xo hls_config.cfg names
    synth = [c for c in world["calls"] if c["argv"][:3] == ["-c", "--mode", "hls"]]
    assert sorted(c["cwd"] for c in synth) == sorted(str((out / c["dir"]).resolve()) for c in comps)
    # the AIE graph compiled for the platform in aie/ (UG1076: --target hw for hw and hw_emu)
    aie = _call(world, "-c --mode aie")
    assert aie["cwd"] == str((out / "aie").resolve())
    assert aie["argv"] == ["-c", "--mode", "aie", "--target", "hw", "--platform", plat, "--config", "aie.cfg",
                           "--work_dir", "Work", "graph.cpp"]
    # the link: every component's .xo, libadf.a, the platform, system.cfg, the target; Versal links an .xsa
    link = _call(world, "--link")
    a = link["argv"]
    assert link["cwd"] == str(out.resolve())
    assert _opt(a, "-t") == "hw" and _opt(a, "--platform") == plat and _opt(a, "--config") == "system.cfg"
    assert _opt(a, "-o") == f"link/{NAME}.xsa"
    assert sorted(x for x in a if x.endswith(".xo")) == sorted(f"{c['dir']}/{c['top']}.xo" for c in comps)
    assert a.count("aie/libadf.a") == 1
    # the package: the .xsa and libadf.a into the xclbin and the SD card (UG1393 --package options)
    pkg = _call(world, "--package")
    p = pkg["argv"]
    image = world["image"].resolve()
    assert _opt(p, "-t") == "hw" and _opt(p, "--platform") == plat and _opt(p, "-o") == f"link/{NAME}.xclbin"
    assert _opt(p, "--package.boot_mode") == "sd" and _opt(p, "--package.image_format") == "ext4"
    assert _opt(p, "--package.rootfs") == f"{image}/rootfs.ext4"
    assert _opt(p, "--package.kernel_image") == f"{image}/Image"
    assert "--package.defer_aie_run" in p and _opt(p, "--package.sd_dir") == "board"
    assert p[-2:] == [f"link/{NAME}.xsa", "aie/libadf.a"]
    # in this order, each logged beside its outputs with its command line first
    order = [c["argv"][0] if c["argv"][0] != "-c" else c["argv"][2] for c in world["calls"]]
    assert order == ["hls"] * len(comps) + ["aie", "--link", "--package"]
    for step, log in (("link", "link/link.log"), ("package", "link/package.log"), ("aie", "aie/aie_compile.log")):
        first = (out / log).read_text().splitlines()[1]
        assert first.startswith("# v++ ") and first.split()[2:] == _call(
            world, {"link": "--link", "package": "--package", "aie": "-c --mode aie"}[step])["argv"]
    assert (out / "link" / "package" / "sd_card.img").is_file() and (out / "link" / f"{NAME}.xclbin").is_file()
    res = m["link"]["results"]
    assert [r["step"] for r in res] == ["aie", "link", "package"] and all(r["passed"] for r in res)
    assert m["complete"] is True and m["rules"]["passed"]


def test_without_vpp_the_makefile_holds_the_same_commands(world):
    assert world["rc_written"] == 0
    ran, written = world["root"] / "linked", world["root"] / "written"
    text = (written / "Makefile").read_text()
    assert text == (ran / "Makefile").read_text()
    cmds = L.makefile_commands(text)
    for call in world["calls"]:
        cwd = os.path.relpath(call["cwd"], ran.resolve())
        argv = call["argv"]
        if argv[:3] == ["-c", "--mode", "hls"]:  # rlhls passes the component's files by absolute path
            argv = [Path(x).name if x.startswith("/") else x for x in argv]
        assert (cwd, ["v++", *argv]) in cmds, (cwd, argv)
    assert len(cmds) == len(world["calls"])
    m = _manifest(written)
    assert m["link"]["results"] == [] and m["link"]["run"] is False and m["complete"] is True
    assert not (written / "link").exists()


def test_board_package(world):
    out = world["root"] / "linked"
    b = out / "board"
    assert sorted(p.name for p in b.iterdir()) == ["README.md", "board.json", "requirements.txt", "run.sh"]
    run = (b / "run.sh").read_text()
    assert f"exec python3 -m rlhls train {DESIGN} --backend board --xclbin {NAME}.xclbin \"$@\"" in run
    assert os.access(b / "run.sh", os.X_OK)
    pins = [x for x in (b / "requirements.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert pins and all("==" in x for x in pins) and any(x.startswith("numpy==") for x in pins)
    rec = json.loads((b / "board.json").read_text())
    m = _manifest(out)
    assert rec["xclbin"] == f"{NAME}.xclbin" and rec["aie_nodes"] == m["aie"]["nodes"]
    assert [k["top"] for k in rec["kernels"]] == [c["top"] for c in m["components"]]
    assert f"link/{NAME}.xclbin" in (b / "README.md").read_text()


def _cli(args, monkeypatch, capsys, path):
    from rlhls.cli import main

    monkeypatch.setenv("PATH", f"{path}{os.pathsep}/usr/bin:/bin")
    rc = main(args)
    err = capsys.readouterr().err
    return rc, err


def _refused(rc, err, start):
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"rlhls: error: {start}"), err


def test_link_without_vpp_is_one_line_and_writes_nothing(world, tmp_path, monkeypatch, capsys):
    before = snapshot(tmp_path)
    rc, err = _cli(["build", DESIGN, "--out", str(tmp_path / "o"), "--link", "--platform", str(world["plat"]),
                    "--common-image", str(world["image"])], monkeypatch, capsys, world["root"] / "nobin")
    _refused(rc, err, "v++ not found on PATH (needed for --link")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("text,start", [
    ("<html><body/></html>", "--platform '{p}': not a Vitis platform (root element <html>"),
    ("<sdx:platform xmlns:sdx='http://www.xilinx.com/sdx'", "--platform '{p}': not a Vitis platform (malformed XML"),
    ('<?xml version="1.0"?><!DOCTYPE p [<!ENTITY a "aaaa">]><p>&a;</p>', "--platform '{p}': holds a DTD"),
    (None, "--platform '{p}': no such file"),
])
def test_a_platform_file_that_is_not_one(world, tmp_path, monkeypatch, capsys, text, start):
    p = tmp_path / "xilinx_vek280_custom.xpfm"
    if text is not None:
        p.write_text(text)
    before = snapshot(tmp_path)
    rc, err = _cli(["build", DESIGN, "--out", str(tmp_path / "o"), "--platform", str(p)], monkeypatch, capsys,
                   world["root"] / "bin")
    _refused(rc, err, start.format(p=p))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args,start", [
    (["--platform", "{zcu102}"], "--platform 'xilinx_zcu102_base_202420_1' is a Zynq UltraScale+ MPSoC platform but "
                                 "the build's part xcve2802"),
    (["--platform", "xilinx_vck190_base_202420_1"], "--platform 'xilinx_vck190_base_202420_1' is the VCK190 "
                                                    "(xcvc1902) but the build's part is xcve2802"),
    (["--platform", "my_platform"], "--platform 'my_platform': not a file and not a platform name rlhls knows"),
    (["--link"], "--link needs --platform XPFM"),
    (["--link", "--platform", "{vek280}"], "--link for the embedded platform 'xilinx_vek280_base_202420_1' needs "
                                           "--common-image DIR"),
    (["--platform", "{vek280}", "--common-image", "{missing}"], "--common-image '{missing}': no such folder"),
    (["--platform", "{vek280}", "--common-image", "{empty}"], "--common-image '{empty}': no rootfs.ext4 in it"),
    (["--target", "hw_emu"], "--target and --common-image apply to a link: pass --platform XPFM"),
])
def test_platform_refusals(world, tmp_path, monkeypatch, capsys, args, start):
    monkeypatch.delenv("EDGE_COMMON_SW", raising=False)
    monkeypatch.delenv("PLATFORM_REPO_PATHS", raising=False)
    monkeypatch.delenv("XILINX_VITIS", raising=False)
    subs = {"zcu102": str(xpfm(tmp_path / "xilinx_zcu102_base_202420_1.xpfm", "zcu102")),
            "vek280": str(world["plat"]), "missing": str(tmp_path / "no-image"), "empty": str(tmp_path / "empty")}
    (tmp_path / "empty").mkdir()
    before = snapshot(tmp_path)
    rc, err = _cli(["build", DESIGN, "--out", str(tmp_path / "o"), *[a.format(**subs) for a in args]], monkeypatch,
                   capsys, world["root"] / "bin")
    _refused(rc, err, start.format(**subs))
    assert snapshot(tmp_path) == before


def _plat(kind, board):
    return L.Platform(f"xilinx_{board}_base_202420_1", f"xilinx_{board}_base_202420_1", None, board, kind)


COMPS = [{"dir": "pl/a", "top": "a"}, {"dir": "pl/b", "top": "b"}]


def test_zynq_ultrascale_links_an_xclbin_and_packages_an_sd_card():
    req = L.LinkRequest(_plat("zynqmp", "zcu102"), target="hw_emu", common_image=Path("/img"))
    steps = L.link_steps(req, design_name="d", components=COMPS, aie=False)
    assert [s.name for s in steps] == ["link", "package"]
    link, pkg = steps
    assert link.argv == ("v++", "--link", "-t", "hw_emu", "--platform", "xilinx_zcu102_base_202420_1", "--config",
                         "system.cfg", "--temp_dir", "link/_x", "-o", "link/d.link.xclbin", "pl/a/a.xo", "pl/b/b.xo")
    assert pkg.argv == ("v++", "--package", "-t", "hw_emu", "--platform", "xilinx_zcu102_base_202420_1",
                        "--package.out_dir", "link/package", "--package.boot_mode", "sd", "--package.rootfs",
                        "/img/rootfs.ext4", "--package.kernel_image", "/img/Image", "--package.image_format", "ext4",
                        "-o", "link/d.xclbin", "link/d.link.xclbin")
    assert pkg.outputs == ("link/d.xclbin",)  # hw_emu: no SD card image to wait for


def test_alveo_packages_the_xclbin_only():
    req = L.LinkRequest(_plat("alveo", "u250"))
    steps = L.link_steps(req, design_name="fddpg", components=COMPS, aie=False)
    assert [s.name for s in steps] == ["link", "package"]
    assert steps[1].argv == ("v++", "--package", "-t", "hw", "--platform", "xilinx_u250_base_202420_1",
                             "--package.out_dir", "link/package", "-o", "link/fddpg.xclbin", "link/fddpg.link.xclbin")


def test_makefile_without_a_common_image_asks_for_one():
    req = L.LinkRequest(_plat("versal", "vck190"))
    steps = L.link_steps(req, design_name="d", components=COMPS, aie=True)
    text = L.makefile_text(req, steps, design_name="d", components=COMPS)
    assert "COMMON_IMAGE ?= \n" in text and '@test -n "$(COMMON_IMAGE)"' in text
    assert "--package.rootfs $(COMMON_IMAGE)/rootfs.ext4" in text and "--package.defer_aie_run" in text


def test_a_failing_step_stops_the_chain(tmp_path, monkeypatch):
    """A tool that exits 0 without writing what the step must leave fails the step, and the link
    after it does not run."""
    from rlhls.flow.build import build_design
    from rlhls.flow.vitis import find_tools

    log = tmp_path / "calls.jsonl"
    fake_vpp(tmp_path / "bin", log)
    lazy = tmp_path / "bin" / "v++"
    lazy.write_text(lazy.read_text().replace('o.write_bytes(b"linked")', "pass"))
    plat = xpfm(tmp_path / "xilinx_vek280_base_202420_1.xpfm")
    req = L.link_request(str(plat), run=True, common_image=str(world_image(tmp_path)))
    asg = {"q.fc3.upd": "PL"}
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    g = build_graph(get_design("apdrl-dqn-cartpole"))
    plan = {n.name: asg.get(n.name, "PS") for n in g.nodes}
    res = build_design("apdrl-dqn-cartpole", tmp_path / "o", plan=plan, graph=g, hls4ml=False, link=req,
                       tools=find_tools(str(tmp_path / "bin")))
    r = res.link["results"]
    assert [x["step"] for x in r] == ["link"] and not r[0]["passed"]
    assert r[0]["detail"] == "exited 0 without writing link/apdrl-dqn-cartpole.xsa"
    assert not res.ok and res.vitis_passed
    assert [json.loads(x)["argv"][0] for x in log.read_text().splitlines()] == ["-c", "--link"]


def world_image(tmp_path: Path) -> Path:
    d = tmp_path / "image"
    d.mkdir(exist_ok=True)
    for f in ("rootfs.ext4", "Image"):
        (d / f).write_bytes(b"")
    return d


def test_platform_by_name_found_where_vpp_looks(tmp_path, monkeypatch):
    name = "xilinx_vek280_base_202420_1"
    (tmp_path / name).mkdir()
    xpfm(tmp_path / name / f"{name}.xpfm")
    monkeypatch.setenv("PLATFORM_REPO_PATHS", str(tmp_path))
    p = L.resolve_platform(name, need_file=True)
    assert p.file == (tmp_path / name / f"{name}.xpfm").resolve() and p.kind == "versal" and p.board == "vek280"
    monkeypatch.setenv("PLATFORM_REPO_PATHS", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("XILINX_VITIS", raising=False)
    with pytest.raises(RlhlsError, match=r"not found in \$PLATFORM_REPO_PATHS"):
        L.resolve_platform(name, need_file=True)
    assert L.resolve_platform(name).file is None  # only written: v++ looks it up where it runs


def test_flow_build_link_without_vpp_refused_before_any_stage(world, tmp_path, monkeypatch):
    import rlhls

    monkeypatch.setenv("PATH", f"{world['root'] / 'nobin'}{os.pathsep}/usr/bin:/bin")
    flow = rlhls.Flow(DESIGN, out=tmp_path / "flow")
    with pytest.raises(RlhlsError, match=r"^v\+\+ not found on PATH \(needed for --link"):
        flow.build(platform=str(world["plat"]), link=True, common_image=world["image"])
    assert not (tmp_path / "flow").exists()
