"""rlhls build: project files, manifest, plan handling, never-clobber, csim of the generated kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.flow import build as B
from rlhls.flow import project as P
from rlhls.flow.build import PLACEHOLDER_PART, build_design
from rlhls.core.fileio import OWNER
from rlhls.partition.plan import load_plan

# hls4ml=False throughout: forward layers become dense_forward kernels (no hls4ml conversion,
# which takes seconds per network; test_run covers the hls4ml path end to end)


def _plan(path: Path, design: str, unit_of):
    """A plan.json for `design` with unit_of(node) per node, read back as the command line does."""
    g = build_graph(get_design(design))
    asg = {n.name: unit_of(n) for n in g.nodes}
    point = {n: "t1p1" if u == "AIE" else "0" for n, u in asg.items()}  # AIE: 1 tile, 1 stream pair
    path.write_text(json.dumps({"status": "Optimal", "makespan_us": 1.0, "gap": 0.0, "assignment": asg,
                                "start_us": {n: 0.0 for n in asg}, "point": point}))
    return load_plan(path)


def _one_layer(net: str, layer: str):
    # fwd/tfwd/bwd/upd of one layer (+ its activation) on PL: all four kernel kinds, the rest on PS
    return lambda n: "PL" if n.layer in (f"{net}.{layer}", f"{net}.{layer}_relu") and "@" not in n.name else "PS"


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "cart"
    return build_design("apdrl-dqn-cartpole", out, hls4ml=False), out


def test_cfg_tcl_keys_and_files_exist(cartpole):
    res, out = cartpole
    assert res.components
    for c in res.components:
        d = out / c.dir
        top, sec = P.parse_cfg((d / P.HLS_CONFIG).read_text())
        assert top["part"] == ["xcve2802-vsvh1760-2MP-e-S"]
        hls = sec["hls"]
        assert hls["flow_target"] == ["vitis"] and hls["syn.top"] == [c.top]
        assert hls["clock"] == [f"{P.clock_text(1000 / 245.0)}ns"]
        assert hls["package.output.format"] == ["xo"] and hls["syn.cflags"] and hls["tb.cflags"]
        for f in hls["syn.file"] + hls["tb.file"]:
            assert (d / f).is_file(), f
        tcl = (d / P.RUN_HLS).read_text()
        for word in ("open_project", f"set_top {c.top}", "add_files -tb", "open_solution", "set_part {",
                     "create_clock -period", "csim_design", "csynth_design", "cosim_design", "export_design"):
            assert word.replace("{", "xcve2802") in tcl or word in tcl, word
        for f in hls["syn.file"]:
            assert f"add_files {f}" in tcl


def test_system_cfg_and_manifest(cartpole):
    res, out = cartpole
    _, sec = P.parse_cfg((out / P.SYSTEM_CFG).read_text())
    nk = sec["connectivity"]["nk"]
    assert sorted(line.split(":")[0] for line in nk) == sorted(c.top for c in res.components)
    m = P.read_manifest(out)
    assert m["design"] == "apdrl-dqn-cartpole" and m["formats"]["pl"] == "fp16"
    assert P.verify_manifest(out) == []
    listed = {e["path"] for e in m["files"]}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {P.MANIFEST, OWNER}
    assert listed == on_disk
    g = build_graph(get_design("apdrl-dqn-cartpole"))
    assert set(m["units"]) == {n.name for n in g.nodes}
    kernels = {c["kernel"] for c in m["components"]}
    assert {"dense_backward", "weight_gradient", "weight_update"} <= kernels
    upd = next(c for c in m["components"] if c["kernel"] == "weight_update")
    assert upd["params"]["optimizer"] == "adam" and upd["params"]["storage"] == "fp32"  # master weights
    # a changed file is found
    f = out / m["files"][0]["path"]
    f.write_bytes(f.read_bytes() + b" ")
    assert P.verify_manifest(out) == [m["files"][0]["path"]]


def test_plan_places_aie_nodes(tmp_path, monkeypatch):
    calls = []
    real = B.emit_aie
    monkeypatch.setattr(B, "emit_aie", lambda design, nodes, out, **kw: calls.append(list(nodes)) or real(design, nodes, out, **kw))
    plan = _plan(tmp_path / "plan.json", "apdrl-dqn-cartpole",
                 lambda n: "AIE" if n.mm and n.phase == "bwd" else ("PS" if n.phase == "upd" else "PL"))
    res = build_design("apdrl-dqn-cartpole", tmp_path / "o", plan=plan, hls4ml=False)
    aie = [n.name for n in build_graph(get_design("apdrl-dqn-cartpole")).nodes if n.mm and n.phase == "bwd"]
    assert calls == [aie] and res.aie["nodes"] == aie and res.aie["files"]
    in_pl = {n for c in res.components for n in c.nodes}
    assert not in_pl & set(aie)
    assert not any(c.kernel in ("dense_backward", "weight_gradient", "weight_update") for c in res.components)
    m = P.read_manifest(tmp_path / "o")
    assert all(m["units"][n]["unit"] == "AIE" for n in aie) and "q.fc1.upd" in m["host"]


@pytest.mark.parametrize("case", ["nonempty", "unknown", "badplan", "aie_not_mm", "badpart"])
def test_bad_input_writes_nothing(tmp_path, case):
    out = tmp_path / "o"
    kw = {}
    design = "apdrl-dqn-cartpole"
    if case == "nonempty":
        out.mkdir()
        (out / "mine.txt").write_text("keep")
    elif case == "unknown":
        design = "no-such-design"
    elif case == "badplan":
        (tmp_path / "p.json").write_text("{not json")
        kw["plan"] = lambda: load_plan(tmp_path / "p.json")
    elif case == "aie_not_mm":
        kw["plan"] = _plan(tmp_path / "p.json", design, lambda n: "AIE")
    else:
        kw["part"] = "5SGSD8"
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RlhlsError) as e:
        build_design(design, out, hls4ml=False, **{k: v() if callable(v) else v for k, v in kw.items()})
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if case == "nonempty":
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
        build_design(design, out, hls4ml=False, force=True)  # --force writes into it, keeping the user's file
        assert P.read_manifest(out) and (out / "mine.txt").read_text() == "keep"
        build_design(design, out, hls4ml=False, force=True)  # and again over its own files
        assert (out / "mine.txt").read_text() == "keep"


def test_rebuild_over_own_build_and_placeholder_part(tmp_path):
    import dataclasses

    # a design on the MAX4 that names no AMD part (the registered F-DDPG designs name the U250's)
    bare = dataclasses.replace(get_design("fddpg-arm-m1"), part=None)
    out = tmp_path / "f"
    plan = _plan(tmp_path / "p.json", "fddpg-arm-m1", _one_layer("critic", "fc2"))
    r1 = build_design(bare, out, plan=plan, hls4ml=False)
    assert r1.part == PLACEHOLDER_PART and any("no AMD/Xilinx part" in w for w in r1.warnings)
    r2 = build_design(bare, out, plan=plan, part="xczu7ev-ffvc1156-2-e", hls4ml=False)
    assert P.parse_cfg((out / r2.components[0].dir / P.HLS_CONFIG).read_text())[0]["part"] == ["xczu7ev-ffvc1156-2-e"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(RlhlsError, match="--part"):
        build_design(bare, tmp_path / "g", synth=True, hls4ml=False)


GENERIC = {"dense_forward", "dense_backward", "weight_gradient", "weight_update"}


# F-DDPG: its own whole-step gradient kernel (fixed point) takes the layer's fwd/bwd nodes, the generic
# weight_update its Adam; AP-DRL's DQN: the generic kernels (fp16 / fp32 mixed)
@pytest.mark.parametrize("design,net,layer,kinds", [
    ("fddpg-arm-m1", "critic", "fc2", {"ddpg_gradient", "weight_update"}),
    ("apdrl-dqn-cartpole", "q", "fc2", GENERIC)])
def test_csim_passes_for_every_kernel(tmp_path, design, net, layer, kinds):
    plan = _plan(tmp_path / "p.json", design, _one_layer(net, layer))
    res = build_design(design, tmp_path / "o", plan=plan, csim=True, hls4ml=False)
    assert {c.kernel for c in res.components} == kinds
    assert all(c.csim and c.csim["passed"] for c in res.components), [c.csim for c in res.components]
    assert res.ok and res.to_json()["components"][0]["csim"]["passed"]


@pytest.mark.parametrize("design", __import__("rlhls.designs.registry", fromlist=["x"]).design_names())
def test_every_registered_design_builds(tmp_path, design):
    out = tmp_path / design
    build_design(design, out, hls4ml=False)
    m = json.loads((out / P.MANIFEST).read_text())
    g = build_graph(get_design(design))
    placed = {n for c in m["components"] for n in c["nodes"]}
    # every node is accounted for: a PL component, the AIE graph, the host, or named as unmapped
    for node in g.nodes:
        assert node.name in placed or node.name in m["unmapped"] or node.name in m["host"] \
            or node.name in m["aie"]["nodes"] or any(node.name in c.get("folded", []) for c in m["components"])
    for f in m["files"]:
        assert (out / f["path"]).is_file()
    assert all(f"nk={c['top']}:1:" in (out / "system.cfg").read_text() for c in m["components"])
    from rlhls.designs.kernels import get_kernel

    for c in (c for c in m["components"] if c["kind"] == "kernel"):
        # a component is named after every network and layer it computes (a second instance of a
        # network, critic@pi, counts as the network), unless the list is too long for a name
        if get_kernel(c["kernel"]).component_suffix and "more_" not in c["name"]:
            for node in c["nodes"]:
                inst, layer = g.node(node).instance, g.node(node).layer.split(".", 1)[1]
                assert f"{inst.split('@')[0]}_" in c["name"], (c, node)
                assert f"_{layer}_" in f"_{c['name']}_", (c, node)
        # it carries the headers its sources include, and no others
        d = out / c["dir"]
        text = "".join(p.read_text() for p in [*d.glob("src/*"), *d.glob("tb/*.cpp")])
        assert sorted(p.name for p in (d / "include").iterdir()) == B.our_headers([text])
        assert "rlhls_types.h" in B.our_headers([text])


def test_cpp_designs_build_for_their_amd_part(tmp_path):
    """CPP's Stratix V has no AMD part: the designs name the KU15P (designs/cpp.py BUILD_PART) and the
    build writes real Vitis HLS projects for it, no placeholder; --part still wins."""
    from rlhls.designs.cpp import BUILD_PART

    for name in ("cpp-trpo-ant", "cpp-trpo-humanoid"):
        assert B.resolve_part(get_design(name), None, need_real=True) == (BUILD_PART, "")
    g = build_graph(get_design("cpp-trpo-ant"))
    fvp = [n.name for n in g.nodes if n.kind in ("fvp_fwd", "fvp_bwd")]
    plan = _plan(tmp_path / "p.json", "cpp-trpo-ant", lambda n: "PL" if n.name in fvp else "PS")
    r = build_design("cpp-trpo-ant", tmp_path / "b", plan=plan, hls4ml=False)
    assert r.part == BUILD_PART == "xcku15p-ffve1517-2-e" and not any("no AMD/Xilinx part" in w for w in r.warnings)
    comp = next(c for c in r.components if c.kernel == "fvp")
    cfg = (tmp_path / "b" / comp.dir / P.HLS_CONFIG).read_text()
    assert P.parse_cfg(cfg)[0]["part"] == [BUILD_PART] and "PLACEHOLDER" not in cfg
    tcl = (tmp_path / "b" / comp.dir / P.RUN_HLS).read_text()
    assert BUILD_PART in tcl and "PLACEHOLDER" not in tcl
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["part_placeholder"] is False
    assert B.resolve_part(get_design("cpp-trpo-ant"), "xcvu9p-flga2104-2L-e", need_real=True)[0] == "xcvu9p-flga2104-2L-e"
    from rlhls.designs.fddpg import BUILD_PART as FDDPG_PART

    for name in ("fddpg-arm-m1", "fddpg-arm-m2", "fddpg-arm-m3"):  # the Alveo U250's part, not the placeholder
        assert B.resolve_part(get_design(name), None, need_real=True) == (FDDPG_PART, "")
