"""rlhls.Flow: the README's notebook example, run as written; each step returns its object and
writes its files once; a resumed flow takes the plan it solved."""

import json
import os
import re
from pathlib import Path

import pytest

import rlhls
from rlhls.core.errors import RlhlsError

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> str:
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    ex = next(b for b in blocks if "rlhls.Flow(" in b)
    return ex


def test_readme_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(compile(_example(), "README.md", "exec"), ns)  # noqa: S102  (the README's own code)
    plan, build, run, flow = ns["plan"], ns["build"], ns["run"], ns["flow"]
    out = Path(flow.out)
    assert set(plan.assignment) == {n.name for n in flow.graph().nodes} and plan.status == "Optimal"
    assert plan.makespan_us > 0 and type(plan.gantt()).__name__ == "Figure"
    assert build.passed and build.components
    for c in build.components:
        assert c.name and c.unit in ("PL", "AIE") and c.csim["passed"]
    assert run.metrics and run.folder == out / "train" and run.env_steps >= 20_000
    assert {"update", "env_steps", "td_loss"} <= set(run.metrics[-1])
    for f in ("graph.csv", "profile.csv", "plan/plan.json", "plan/gantt.png", "build/manifest.json", "report.md",
              "train/metrics.csv", "run.json"):
        assert (out / f).is_file(), f
    manifest = json.loads((out / "build" / "manifest.json").read_text())
    assert all(c["csim"]["passed"] for c in manifest["components"])  # the checks' results, written
    assert "AP-DRL" in (out / "report.md").read_text()
    perf = ns["perf"]  # the run's own metrics, the plan's graph
    assert perf.host.source.startswith("this flow's run") and perf.variants["plan"].units == plan.assignment
    assert perf.total_s > 0 and "## Modeled run on the device" in (out / "report.md").read_text()


def test_steps_compute_once_and_resume_takes_the_plan(tmp_path, monkeypatch):
    flow = rlhls.Flow("apdrl-a2c-invpendulum", out=tmp_path / "f", quiet=True)
    g = flow.graph()
    assert flow.graph() is g and flow.profile() is flow.profile()  # in memory, built once
    plan = flow.partition()
    stamp = (tmp_path / "f" / "plan" / "plan.json").stat().st_mtime_ns
    assert flow.partition() is plan and (tmp_path / "f" / "plan" / "plan.json").stat().st_mtime_ns == stamp
    with pytest.raises(RlhlsError, match="--resume"):
        rlhls.Flow("apdrl-a2c-invpendulum", out=tmp_path / "f")
    flow.close()  # one Flow at a time writes a folder
    again = rlhls.Flow("apdrl-a2c-invpendulum", out=tmp_path / "f", resume=True, quiet=True)
    assert again.partition().assignment == plan.assignment  # read from its plan.json, not solved again
    assert (tmp_path / "f" / "plan" / "plan.json").stat().st_mtime_ns == stamp
    again.close()
    with pytest.raises(RlhlsError, match="was run with seed 0, now 3"):
        rlhls.Flow("apdrl-a2c-invpendulum", out=tmp_path / "f", resume=True, seed=3)


def test_flow_refuses_bad_input_before_writing(tmp_path):
    with pytest.raises(RlhlsError, match="learning_rate"):
        rlhls.Flow("apdrl-dqn-cartpole", out=tmp_path / "x", overrides={"learning_rate": "-1"})
    with pytest.raises(RlhlsError, match="seed"):
        rlhls.Flow("apdrl-dqn-cartpole", out=tmp_path / "x", seed=-1)
    with pytest.raises(RlhlsError, match="fvp"):
        rlhls.Flow("cpp-trpo-ant", out=tmp_path / "x", overrides={"fvp": "float32"})
    assert not (tmp_path / "x").exists()


def test_a_build_without_checks_is_no_pass_and_a_resumed_report_keeps_the_record(tmp_path):
    """build(csim=False): ok (nothing failed) but not passed, and the report says no check ran;
    a resumed flow's report() keeps every stage the first flow ran; report.html embeds its figures."""
    out = tmp_path / "f"
    flow = rlhls.Flow("apdrl-a2c-invpendulum", out=out, quiet=True)
    build = flow.build(csim=False, hls4ml=False)
    assert build.ok and build.checks == 0 and not build.passed
    flow.report()
    rec = json.loads((out / "run.json").read_text())
    assert rec["ok"] and not rec["passed"] and rec["build"]["checks"] == 0
    text = (out / "report.md").read_text()
    assert "every check passed" not in text and "no check ran" in text
    flow.close()
    again = rlhls.Flow("apdrl-a2c-invpendulum", out=out, resume=True, quiet=True)
    again.report()  # only the report in this process
    back = json.loads((out / "run.json").read_text())
    assert [s["stage"] for s in back["stages"]] == ["training graph", "profile", "partition", "build", "report"]
    assert back["plan"] == rec["plan"] and back["build"] == rec["build"] and not back["passed"]
    assert "## Partition (ILP)" in (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    assert 'src="plan/gantt.png"' not in page and page.count('src="data:image/png;base64,') >= 2  # gantt, csim
    again.close()


def test_flow_build_synth_without_vitis_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from test_vitis_tools import _stubs

    monkeypatch.setenv("PATH", os.defpath)  # no Vitis here
    flow = rlhls.Flow("apdrl-a2c-invpendulum", out=tmp_path / "v", quiet=True)
    for kw, what in (({"synth": True}, "--synth"), ({"cosim": True, "csim": False}, "--cosim")):
        with pytest.raises(RlhlsError, match=f"v\\+\\+ not found on PATH \\(needed for {what}"):
            flow.build(**kw)
    assert not (tmp_path / "v").exists()
    bindir, log = _stubs(tmp_path, ["v++", "vitis-run"])  # stand-ins that record their calls and succeed
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.defpath}")
    build = flow.build(csim=False, cosim=True, hls4ml=False)
    rec = json.loads((tmp_path / "v" / "run.json").read_text())
    assert build.passed and build.checks == 2 * len(build.components) > 0  # synthesis, then co-simulation
    assert rec["passed"] and rec["stages"][-1]["stage"] == "build --cosim" and len(rec["build"]["vitis"]) == build.checks
    assert log.read_text().count("vitis-run --mode hls --cosim") == len(build.components)
    flow.close()


def test_help_of_flow_documents_every_parameter():
    import inspect

    for fn in (rlhls.Flow.__init__, rlhls.Flow.build, rlhls.Flow.train, rlhls.Flow.partition, rlhls.Flow.perf,
               rlhls.Flow.run):
        doc = inspect.getdoc(rlhls.Flow if fn is rlhls.Flow.__init__ else fn)
        for name in list(inspect.signature(fn).parameters)[1:]:
            assert f"``{name}``" in doc, (fn.__name__, name)
