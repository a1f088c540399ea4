"""Built equals trained (issue #27): for every registered design, each kernel the training run
executes runs with the parameters of a component the build renders (and csim checks).

One run's hyperparameters (small budgets; every hyperparameter a kernel parameter names set to a
value other than the design's, so a value that reached only one side shows) and one plan (every
node on the PL at design point ``pf4``) give both: the Flow's way, ``Design.bind`` at the
algorithm's batch and ``Design.at_points``. The build runs without csim (the parameters are
compared, not the bits: the kernels' tests check those); the training runs one update with the
plan's kernels executed through the backend, recording the parameters of every kernel model it
runs."""

from __future__ import annotations

import types

import pytest

from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KERNELS
from rlhls.designs.registry import design_names, get_design
from rlhls.flow.build import build_design
from rlhls.host import backends
from rlhls.host.algorithms import get_algorithm
from rlhls.partition.profile import _pin

# one short update per algorithm
SMALL = {
    "ppo": {"num_envs": 1, "num_steps": 4, "num_minibatches": 2, "update_epochs": 1},
    "a2c": {"num_envs": 1, "n_steps": 4, "rollouts_per_update": 1},
    "trpo": {"num_envs": 1, "num_steps": 16, "value_epochs": 1, "value_minibatch": 8, "line_search_steps": 2},
    "dqn": {"num_envs": 1, "learning_starts": 2, "batch_size": 2, "buffer_size": 16, "train_frequency": 1,
            "steps_per_update": 4},
    "ddpg": {"num_envs": 1, "learning_starts": 2, "batch_size": 2, "buffer_size": 16, "steps_per_update": 4},
    "td3": {"num_envs": 1, "learning_starts": 2, "batch_size": 2, "buffer_size": 16, "steps_per_update": 4},
    "sac": {"num_envs": 1, "learning_starts": 2, "batch_size": 2, "buffer_size": 16, "steps_per_update": 4},
}


def _changed(value):
    """Another valid value of a hyperparameter a kernel parameter names."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return value - 1 if value > 2 else value + 1
    return round(value - 0.01, 6) if value > 0.05 else value + 0.01


def _overrides(design, alg) -> dict:
    names = {f["name"] for f in alg.args.describe()}
    over = dict(SMALL[design.algorithm])
    hp = alg.hyperparams(design, over)
    for spec in design.kernels:
        k = KERNELS.get(spec.name)
        for q in (k.params if k else ()):
            h = q.hyperparam
            if h in names and h not in over and hp.get(h) is not None:
                over[h] = _changed(hp[h])
    if "precision" in names:  # the plan's kernels in the training loop; HEPPO's GAE path is its fp64 one
        over["precision"] = "fp64" if any(s.name == "gae" for s in design.kernels) else "mixed"
    return over


@pytest.mark.parametrize("name", design_names())
def test_built_equals_trained(name, tmp_path, monkeypatch):
    design = get_design(name)
    alg = get_algorithm(design.algorithm)
    over = _overrides(design, alg)
    hp = alg.hyperparams(design, over)
    bound = design.bind(hp, batch=alg.batch(hp))
    graph = build_graph(bound)
    points = {n.name: "pf4" for n in graph.nodes}
    # a loss node the design pins stays there (SAC's sampling and loss nodes compute on the PS only)
    pins = {n.name: _pin(design, n.name) if n.phase == "loss" else None for n in graph.nodes}
    plan = types.SimpleNamespace(assignment={n.name: pins[n.name] or "PL" for n in graph.nodes}, point=points,
                                 source="test")
    at = bound.at_points(points)
    built = build_design(at, tmp_path / "build", plan=plan, graph=graph, hls4ml=False)
    components = {}
    for c in built.components:
        components.setdefault(c.kernel, []).append(c.params)
        if c.kernel in ("dense_forward", "dense_backward", "weight_gradient", "weight_update"):
            dim = getattr(KERNELS[c.kernel], "pf_dim", "n")  # the plan's pf4, within the unrolled dimension
            assert c.params["pf"] == min(4, c.params[dim]) and set(c.points.values()) == {"pf4"}, c.name

    used = []

    def recording(cls):
        real = cls.model

        def model(self, p, **arrays):
            used.append((self.name, dict(p)))
            return real(self, p, **arrays)
        monkeypatch.setattr(cls, "model", model)

    for k in KERNELS.values():
        recording(type(k))
    real_init = backends.PlanKernels.__init__

    def compiled_init(self, *a, **kw):  # every PL operation through the backend's kernel calls
        real_init(self, *a, **kw)
        self.compiled = True
    monkeypatch.setattr(backends.PlanKernels, "__init__", compiled_init)

    trainer = alg.trainer(at, seed=0, backend="emu", hyperparams=over, assignment=plan.assignment)
    try:
        trainer.train_update(1, 1)
    finally:
        trainer.close()
    compared = 0
    for kname, p in used:
        if kname in components:
            assert p in components[kname], (kname, [{k: (v, c.get(k)) for k, v in p.items() if c.get(k) != v}
                                                    for c in components[kname]])
            compared += 1
    assert compared, (f"{name}: training ran none of the built kernels {sorted(components)} "
                      f"(it ran {sorted({k for k, _ in used})})")


def test_set_reaches_the_build_and_the_run(tmp_path):
    """``--set quant_bits=5`` (and the lookahead) changes the built GAE and standardizer units as
    the run; the manifest names the design point the plan chose for every PL node."""
    import json

    import rlhls
    from rlhls.host.algorithms.ppo import PPO

    over = {"quant_bits": 5, "gae_lookahead": 3, "num_envs": 2, "num_steps": 8, "num_minibatches": 2}
    flow = rlhls.Flow("heppo-ppo", out=tmp_path / "run", overrides=over, quiet=True)
    try:
        res = flow.build(csim=False, hls4ml=False)
        plan = flow.partition()
    finally:
        flow.close()
    comps = {c.kernel: c for c in res.components}
    assert comps["gae"].params["bits"] == comps["standardizer"].params["bits"] == 5
    assert (comps["gae"].params["lookahead"], comps["gae"].params["steps"], comps["gae"].params["trajectories"]) \
        == (3, 8, 2)
    ppo = PPO(flow.design, hyperparams=flow.overrides)
    try:
        assert ppo.gae_units == {"gae": comps["gae"].params, "standardizer": comps["standardizer"].params}
    finally:
        ppo.close()
    manifest = json.loads((tmp_path / "run" / "build" / "manifest.json").read_text())
    pl = [n for n, e in manifest["units"].items() if e["unit"] == "PL" and e["components"]]
    assert pl and all(manifest["units"][n]["point"] == plan.point[n] for n in pl)
    for c in manifest["components"]:
        assert c["points"] == {n: plan.point[n] for n in c["nodes"]}
