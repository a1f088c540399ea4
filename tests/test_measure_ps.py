"""`rlhls profile --measure-ps`: each node's PS code timed on this machine (host/measure_ps.py)."""

import json
import time

import pytest

from rlhls.designs.kernels import KernelContext
from rlhls.designs.registry import get_design
from rlhls.host.measure_ps import _time, measure_ps
from rlhls.partition.profile import profile_design
from rlhls.partition.profile_io import read_profile

from test_reports import _cli


def test_timer_reports_median_and_spread():
    calls = []

    def sleepy():
        calls.append(1)
        time.sleep(0.002 if len(calls) % 2 else 0.004)

    t = _time(sleepy, repeats=5, warmup=1)
    assert len(calls) == 6 and t.repeats == 5
    assert 2000 <= t.min_us <= t.median_us <= t.max_us
    assert t.max_us >= 4000 and t.iqr_us > 0


def test_measure_ps_times_layer_nodes_in_the_ps_format():
    from rlhls.designs.graph import build_graph

    design = get_design("cpp-trpo-ant")  # PS in the design's fixed-point format, not fp32
    ctx = KernelContext(design, build_graph(design, 16))
    assert ctx.unit_formats("PS")[0].kind == "fixed"
    timings, skipped = measure_ps(design, ctx.graph, repeats=2, warmup=0)
    phases = {n.name: n.phase for n in ctx.graph.nodes}
    assert set(timings) == {n for n, p in phases.items() if p in ("fwd", "tfwd", "bwd", "upd", "soft")}
    assert set(skipped) == set(phases) - set(timings) and {"loss", "cg"} <= {phases[n] for n in skipped}
    assert all(t.median_us > 0 and t.repeats == 2 for t in timings.values())


def test_cli_measure_ps_replaces_ps_rows_only(tmp_path):
    out = tmp_path / "p.csv"
    rc, stdout, err = _cli(["profile", "apdrl-dqn-cartpole", "--batch", "32", "--measure-ps", "--repeats", "3",
                            "--out", str(out), "--json"])
    assert rc == 0, err
    printed = {(r["node"], r["unit"], r["point"]): r for r in json.loads(stdout)}
    model = profile_design("apdrl-dqn-cartpole", None, 32)
    rows = read_profile(out)
    assert len(rows) == len(model)
    for m, r in zip(model, rows):
        if m.unit == "PS" and m.node != "loss":
            spread = printed[(r.node, r.unit, r.point)]["spread"]
            assert r.source == "measured" and r.latency_us == pytest.approx(spread["median_us"])
            assert spread["min_us"] <= spread["median_us"] <= spread["max_us"] and spread["repeats"] == 3
        else:  # PL, AIE and the loss (the algorithm's own code) stay on the model
            assert r.source == "model" and r.latency_us == pytest.approx(m.latency_us)
    rc, _, err = _cli(["profile", "apdrl-dqn-cartpole", "--measure-ps", "--repeats", "0", "--out", str(out)])
    assert rc == 2 and "--repeats" in err
