"""--synth/--cosim: the Vitis command lines, checked with stub executables that record argv and cwd."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.flow.build import build_design
from rlhls.flow.vitis import find_tools

def _stubs(tmp_path: Path, names) -> tuple[Path, Path]:
    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    for n in names:
        p = bindir / n
        p.write_text(f'#!/bin/sh\necho "$(pwd) | {n} $*" >> "{log}"\nexit 0\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return bindir, log


def _plan(tmp_path):
    import json
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    g = build_graph(get_design("apdrl-dqn-cartpole"))
    asg = {n.name: ("PL" if n.name in ("q.fc3.upd", "q.fc2.upd") else "PS") for n in g.nodes}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"status": "Optimal", "makespan_us": 1, "gap": 0, "assignment": asg,
                             "start_us": {n: 0 for n in asg}, "point": {n: "0" for n in asg}}))
    from rlhls.partition.plan import load_plan
    return load_plan(p)


def _build(tmp_path, names, **kw):
    bindir, log = _stubs(tmp_path, names)
    tools = find_tools(str(bindir))
    res = build_design("apdrl-dqn-cartpole", tmp_path / "o", plan=_plan(tmp_path), tools=tools,
                       hls4ml=False, **kw)
    return res, log.read_text().splitlines() if log.exists() else []


def test_unified_flow_command_lines(tmp_path):
    res, calls = _build(tmp_path, ["v++", "vitis-run", "vitis_hls"], cosim=True)
    assert res.flow == "unified" and len(res.components) == 2 and res.ok
    expect = []
    for c in res.components:
        d = (tmp_path / "o" / c.dir).resolve()
        expect += [f"{d} | v++ -c --mode hls --config {d}/hls_config.cfg --work_dir {d}/work",
                   f"{d} | vitis-run --mode hls --cosim --config {d}/hls_config.cfg --work_dir {d}/work"]
    assert calls == expect


def test_tcl_flow_when_only_vitis_hls(tmp_path):
    res, calls = _build(tmp_path, ["vitis_hls"], synth=True)
    assert res.flow == "tcl"
    d = [(tmp_path / "o" / c.dir).resolve() for c in res.components]
    assert calls == [f"{x} | vitis_hls -f {x}/run_hls.tcl -tclargs csynth export" for x in d]


@pytest.mark.parametrize("names,flag,tool", [([], "synth", "v++"), (["v++"], "cosim", "vitis-run")])
def test_missing_tool_one_line_exit_2(tmp_path, names, flag, tool):
    with pytest.raises(RlhlsError) as e:
        _build(tmp_path, names, **{flag: True})
    assert str(e.value).startswith(f"{tool} not found") and "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()


def test_cli_missing_tool_exit_2(tmp_path, monkeypatch, capsys):
    from rlhls.cli import main

    bindir, _ = _stubs(tmp_path, [])
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    rc = main(["build", "apdrl-dqn-cartpole", "--out", str(tmp_path / "o"), "--synth"])
    err = capsys.readouterr().err
    assert rc == 2 and "v++ not found" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "o").exists()


def test_failing_tool_marks_build_not_ok(tmp_path):
    bindir, log = _stubs(tmp_path, ["v++", "vitis-run"])
    (bindir / "v++").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexit 3\n')
    res = build_design("apdrl-dqn-cartpole", tmp_path / "o", plan=_plan(tmp_path), cosim=True,
                       tools=find_tools(str(bindir)), hls4ml=False)
    assert not res.ok and all(len(c.vitis) == 1 and c.vitis[0]["returncode"] == 3 for c in res.components)
