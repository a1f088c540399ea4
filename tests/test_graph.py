"""Training graphs: structure of every design's step, and AP-DRL Fig. 8 / Table III for DQN-Breakout."""

import csv
import io
import math

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import design_names, get_design


def _conv_out(n, k, s):
    return (n - k) // s + 1


def test_breakout_reproduces_apdrl_fig8_and_table3():
    d = get_design("apdrl-dqn-breakout")
    g = build_graph(d, batch=1)
    mm = g.mm_nodes
    # An independent count from the architecture of Table III (MAC = 2 FLOPs).
    h1 = _conv_out(84, 8, 4)
    h2 = _conv_out(h1, 4, 2)
    h3 = _conv_out(h2, 3, 1)
    macs = [h1 * h1 * 32 * 8 * 8 * 4, h2 * h2 * 64 * 4 * 4 * 32, h3 * h3 * 64 * 3 * 3 * 64, 64 * h3 * h3 * 512, 512 * 4]
    fwd = [2 * m for m in macs]
    bwd = [2 * f for f in fwd]
    bwd[0] = fwd[0]  # no input gradient for the first layer
    expected = sorted(fwd + fwd + bwd)
    assert sorted(n.flops for n in mm) == expected
    seed = d.seed_figures
    assert len(mm) == seed["fig8_mm_nodes"] == 15
    assert min(n.flops for n in mm) == pytest.approx(seed["fig8_min_flops"], rel=0.01)
    assert max(n.flops for n in mm) == pytest.approx(seed["fig8_max_flops"], rel=0.01)
    assert sum(n.flops for n in mm) == pytest.approx(seed["table_iii_train_flops"], rel=0.01)
    phases = sorted({n.phase for n in mm})
    assert phases == ["bwd", "fwd", "tfwd"]


@pytest.mark.parametrize("name", design_names())
def test_every_design_has_a_consistent_graph(name):
    d = get_design(name)
    g = build_graph(d, batch=4)
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names))
    known = set(names)
    for e in g.edges:
        assert e.src in known and e.dst in known and e.bytes > 0
    order = g.topological_order()
    pos = {v: i for i, v in enumerate(order)}
    assert all(pos[e.src] < pos[e.dst] for e in g.edges)
    nets = d.build_networks()
    for spec in d.networks:
        net = nets[spec.name]
        for layer in net.layers:
            if layer.kind == "Flatten":
                continue
            fwd = g.node(f"{spec.name}.{layer.name}.fwd")
            assert fwd.mm == layer.is_mm
            assert fwd.flops == layer.flops(4)["forward"]
            assert f"{spec.name}.{layer.name}.bwd" in known
            has_t = f"{spec.name}.{layer.name}.tfwd" in known
            assert has_t == spec.target
            if layer.n_params:
                upd = g.node(f"{spec.name}.{layer.name}.upd")
                assert not upd.mm
    # only matrix-multiply layers may be marked mm, and every mm node is a Dense/Conv2d pass
    for n in g.mm_nodes:
        assert n.phase in ("fwd", "tfwd", "bwd", "fvp_fwd", "fvp_bwd")
    # sinks and sources exist; every node is on a path from a source
    assert any(not g.predecessors(n) for n in names)


@pytest.mark.parametrize("name", ["apdrl-dqn-cartpole", "apdrl-ddpg-lunarcont", "heppo-ppo", "a2c-traffic"])
def test_flops_scale_with_batch_but_updates_do_not(name):
    d = get_design(name)
    g1, g2 = build_graph(d, batch=8), build_graph(d, batch=16)
    for a in g1.nodes:
        b = g2.node(a.name)
        if a.phase in ("fwd", "tfwd", "bwd"):
            assert b.flops == 2 * a.flops
        if a.phase in ("upd", "soft", "gae"):
            assert b.flops == a.flops


def test_algorithm_specific_nodes():
    ddpg = build_graph(get_design("apdrl-ddpg-lunarcont"), batch=256)
    names = {n.name for n in ddpg.nodes}
    assert {"critic_loss", "actor_loss", "critic@pi.fc1.fwd", "actor.fc1.soft", "critic.fc3.tfwd"} <= names
    # the actor is updated through the critic after the critic's own update
    assert "critic.fc1.upd" in ddpg.predecessors("critic@pi.fc1.fwd")
    assert "critic@pi.fc1.bwd" in ddpg.predecessors("actor.fc3_tanh.bwd")
    # the critic's first layer backward in the actor pass only needs the action columns
    c1 = get_design("apdrl-ddpg-lunarcont").build_networks()["critic"].layers[0]
    assert ddpg.node("critic@pi.fc1.bwd").flops == 2 * 256 * 2 * c1.params["W"].shape[1]
    ppo = build_graph(get_design("apdrl-ppo-mspacman"))
    assert "gae" in ppo.predecessors("loss")
    trpo = build_graph(get_design("cpp-trpo-humanoid"), batch=10)
    assert {"policy.fc1.fvp_fwd", "policy.fc1.fvp_bwd", "cg", "linesearch"} <= {n.name for n in trpo.nodes}
    traffic = build_graph(get_design("a2c-traffic"))
    # the shared trunk gets gradients from both heads
    assert set(traffic.predecessors("trunk.fc1_relu.bwd")) >= {"policy.fc1.bwd", "value.fc1.bwd"}


def test_edges_csv_round_trips():
    g = build_graph(get_design("apdrl-dqn-cartpole"), batch=2)
    rows = list(csv.DictReader(io.StringIO(g.edges_csv())))
    assert [(r["src"], r["dst"], int(r["bytes"])) for r in rows] == [(e.src, e.dst, e.bytes) for e in g.edges]
    rows = list(csv.DictReader(io.StringIO(g.edges_csv(carry=True))))
    assert [(r["src"], r["dst"], int(r["bytes"]), r["carry"] == "1") for r in rows] == \
        [(e.src, e.dst, e.bytes, e.carry) for e in g.edges + g.carry_edges]
    assert any(r["carry"] == "1" for r in rows) and any(r["carry"] == "0" for r in rows)


@pytest.mark.parametrize("name", design_names())
def test_carry_edges_feed_weights_to_the_next_step(name):
    d = get_design(name)
    g = build_graph(d, batch=4)
    B = math.ceil(d.storage_format.bits / 8)
    carry = {(e.src, e.dst): e.bytes for e in g.carry_edges}
    assert all(e.carry for e in g.carry_edges) and not any(e.carry for e in g.edges)
    nets = d.build_networks()
    for spec in d.networks:
        for layer in nets[spec.name].layers:
            if layer.kind == "Flatten":
                continue
            fwd, upd = f"{spec.name}.{layer.name}.fwd", f"{spec.name}.{layer.name}.upd"
            if layer.n_params:
                assert carry[(upd, fwd)] == layer.n_params * B
            else:  # parameterless layers: no update and nothing carried
                assert not any(dst in (fwd, f"{spec.name}.{layer.name}.tfwd") for _, dst in carry)
            soft, tfwd = f"{spec.name}.{layer.name}.soft", f"{spec.name}.{layer.name}.tfwd"
            if d.algorithm == "ddpg" and layer.n_params:
                assert carry[(soft, tfwd)] == layer.n_params * B
            if d.algorithm == "dqn":  # the target copy syncs every C steps, not every step
                assert not any(dst == tfwd for _, dst in carry)
    # JSON: plain edges keep exactly {src, dst, bytes}; carry edges add "carry": true
    js = g.to_json()["edges"]
    assert all(set(e) == {"src", "dst", "bytes"} for e in js[:len(g.edges)])
    assert all(set(e) == {"src", "dst", "bytes", "carry"} and e["carry"] is True for e in js[len(g.edges):])
    assert len(js) == len(g.edges) + len(g.carry_edges)


def test_bad_batch_is_an_input_error():
    with pytest.raises(RlhlsError, match="batch"):
        build_graph(get_design("apdrl-dqn-cartpole"), batch=0)


def test_bytes_follow_the_storage_format():
    # F-DDPG stores fixed<32,8> (4 bytes); a 108-unit hidden layer's forward output edge at batch 32
    g = build_graph(get_design("fddpg-arm-m1"), batch=32)
    e = [e for e in g.edges if e.src == "actor.fc1.fwd" and e.dst == "actor.fc1_relu.fwd"][0]
    assert e.bytes == 32 * 108 * math.ceil(32 / 8)
