"""The trained policy out (``rlhls export RUN --onnx FILE``, host/export.py): a DQN run's Q-network
and a DDPG run's actor round-trip through onnxruntime to the run's own FP32 forward; a mixed /
fixed-point run's formats are in the model's metadata; an imported ONNX actor goes out in the layout it
came in; bad input is one line with nothing written. Also ``rlhls eval DESIGN --untrained`` (an
imported policy before training), RL Zoo's net_arch refused where it would replace an imported
network, and a TD3 entry given to a DDPG design naming the keys it ignores."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import rlhls
from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import get_design
from rlhls.host.mixed import ps_forward
from rlhls.host.train import train_design

CORPUS = Path(__file__).resolve().parent / "data" / "onnx"
RLZOO = Path(__file__).resolve().parent / "data" / "rlzoo"
ONE_EVAL = {"eval_episodes": 1}  # module fixtures run before conftest's one-episode default
DQN = ("apdrl-dqn-cartpole", {"learning_starts": 100, "steps_per_update": 100, **ONE_EVAL}, 300)  # mixed: FP16 PL
DDPG = ("apdrl-ddpg-mntncarcont", {"learning_starts": 100, "steps_per_update": 100, "batch_size": 16,
                                   "precision": "fp32", **ONE_EVAL}, 300)
FDDPG = ("fddpg-arm-m1", {"learning_starts": 100, "steps_per_update": 100, **ONE_EVAL}, 200)  # fixed<32,8> PL
FIXED = "PL fixed<32,8,RND,SAT> / fixed<64,16,RND,SAT>"

DESIGN = '''
from pathlib import Path
from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU, import_onnx
HERE = Path(__file__).resolve().parent

design = Design(
    name="{name}", seed_file="-", seed_title="an imported actor", algorithm="ddpg", env_id="Pendulum-v1",
    env_notes="-", obs_shape=(3,), action_dim=1, action_space="continuous",
    networks=(NetSpec("actor", "actor", lambda seed: import_onnx(HERE / "actor.onnx", "actor"), target=True),
              NetSpec("critic", "critic",
                      lambda seed: Network("critic", (4,), [Dense(16), ReLU(), Dense(1)], seed=seed),
                      target=True, extra_inputs=1)),
    kernels=(KernelSpec("dense_forward", "PL", "fp32", "fp32", {{"pf": 4}}),
             KernelSpec("dense_backward", "PL", "fp32", "fp32", {{"pf": 4}}),
             KernelSpec("weight_gradient", "PL", "fp32", "fp32", {{"pf": 4}}),
             KernelSpec("weight_update", "PL", "fp32", "fp32", {{"optimizer": "adam"}})),
    formats={{"storage": "fp32", "acc": "fp32"}}, device="zcu106", clocks_mhz={{"PL": 200.0}}, batch_size=8,
    hyperparams={{"learning_rate": 1e-3, "buffer_size": 1000, "learning_starts": 50, "policy_frequency": 1,
                  "optimizer": "adam", "steps_per_update": 100, "eval_episodes": 1}})
'''


def _train(spec, out):
    name, over, steps = spec
    train_design(get_design(name), out=out, steps=steps, overrides=over, progress=False)
    return out


@pytest.fixture(scope="module")
def registry_kept():
    """The design files this module imports are gone from the registry after it."""
    from rlhls.designs import registry

    registry.design_names()
    designs, mods = dict(registry.DESIGNS), set(sys.modules)
    yield
    for name in set(registry.DESIGNS) - set(designs):
        registry.unregister_design(name)
    for m in set(sys.modules) - mods:
        if m.startswith("rlhls_user_"):
            del sys.modules[m]
    registry._FILES.clear()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {"dqn": _train(DQN, root / "dqn"), "ddpg": _train(DDPG, root / "ddpg")}


@pytest.fixture(scope="module")
def imported(tmp_path_factory, registry_kept):
    """A DDPG design whose actor is torch's legacy export of SB3's TD3 actor (batch axis fixed to 1,
    output '14'), and its run of 200 steps."""
    root = tmp_path_factory.mktemp("imported")
    shutil.copy(CORPUS / "sb3_td3_actor_legacy.onnx", root / "actor.onnx")
    design = root / "design.py"
    design.write_text(DESIGN.format(name="export-imported-td3"))
    run = root / "run"
    assert main(["train", str(design), "--steps", "200", "--out", str(run), "--quiet"]) == 0
    return design, run


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _states(shape, n=64, seed=0):
    return (np.random.default_rng(seed).standard_normal((n, *shape)) * 2).astype(np.float32)


def _close(got, ref):
    """onnxruntime's float32 against the run's FP32 forward: within 1e-6 (relative past 1)."""
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-6 * max(1.0, float(np.abs(ref).max())), np.abs(got - ref).max()


def _meta(path) -> dict:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def _io(model) -> tuple:
    def dims(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    inits = {t.name for t in model.graph.initializer}
    x = next(i for i in model.graph.input if i.name not in inits)
    return x.name, dims(x), model.graph.output[0].name, dims(model.graph.output[0])


# ------------------------------------------------------------------------------------ round trips

def test_a_dqn_run_exports_its_q_network(runs, tmp_path, capsys):
    out = tmp_path / "q.onnx"
    assert main(["export", str(runs["dqn"]), "--onnx", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"network 'q' of run '{runs['dqn']}' (apdrl-dqn-cartpole, DQN) -> {out}: input "
                               "'input' (N, 4), output 'output' (N, 2)")
    policy = rlhls.load(runs["dqn"])
    x = _states((4,))
    got = _session(out).run(None, {"input": x})[0]
    _close(got, policy._trainer.q_values(x))
    assert np.array_equal(np.argmax(got, axis=1), policy.predict(x)[0])
    # a mixed-precision run: each forward node's unit and formats, as its plan put them
    plan = json.loads((runs["dqn"] / "config.json").read_text())["plan"]
    fmts = {"PS": "fp32 / fp32", "PL": "fp16 / fp32", "AIE": "bf16 / fp32"}
    meta = _meta(out)
    want = {f"q.{l}.fwd": f"{plan[f'q.{l}.fwd']} {fmts[plan[f'q.{l}.fwd']]}"
            for l in ("fc1", "fc1_relu", "fc2", "fc2_relu", "fc3")}
    assert json.loads(meta["rlhls.formats"]) == want
    assert meta["rlhls.precision"] == "mixed" and meta["rlhls.algorithm"] == "dqn"
    assert "Q-values" in meta["rlhls.output"]
    assert "mixed precision" in lines[1] and "q.fc1.fwd" in lines[1]


def test_a_ddpg_run_exports_its_actor(runs, tmp_path, capsys):
    out = tmp_path / "actor.onnx"
    assert main(["export", str(runs["ddpg"]), "--onnx", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["network"] == "actor" and res["layers"] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm", "Tanh"]
    assert res["formats"] is None  # an fp32 run: nothing to note
    policy = rlhls.load(runs["ddpg"])
    t = policy._trainer
    x = _states((2,))
    got = _session(out).run(None, {"input": x})[0]
    _close(got, ps_forward(t.actor, x, t.hp["ps_math"]))
    # what rlhls acts with: the tanh output scaled to the box (the metadata says how)
    act = np.clip(got * t.action_scale + t.action_bias, t.low, t.high)
    np.testing.assert_allclose(act, policy.predict(x)[0], rtol=0, atol=1e-6)
    meta = _meta(out)
    assert "rlhls.formats" not in meta and meta["rlhls.precision"] == "fp32" and "tanh" in meta["rlhls.output"]


def test_a_fixed_point_run_notes_its_formats(tmp_path, capsys):
    run = _train(FDDPG, tmp_path / "fddpg")
    out = tmp_path / "fddpg.onnx"
    assert main(["export", str(run), "--onnx", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and FIXED in lines[1]
    assert json.loads(_meta(out)["rlhls.formats"]) == {f"actor.{l}.fwd": FIXED
                                                       for l in ("fc1", "fc1_relu", "fc2", "fc2_tanh")}
    t = rlhls.load(run)._trainer
    x = _states((17,))
    _close(_session(out).run(None, {"input": x})[0], ps_forward(t.actor, x, t.hp["ps_math"]))


def test_an_imported_actor_goes_out_as_it_came_in(imported, tmp_path, capsys):
    from rlhls.designs.onnx_import import import_onnx

    design, run = imported
    out = tmp_path / "trained.onnx"
    assert main(["export", str(run), "--design", str(design), "--onnx", str(out)]) == 0
    assert "input 'input' (1, 3), output '14' (1, 1)" in capsys.readouterr().out
    original, written = onnx.load(str(CORPUS / "sb3_td3_actor_legacy.onnx")), onnx.load(str(out))
    assert _io(written) == _io(original) == ("input", [1, 3], "14", [1, 1])
    assert written.graph.name == original.graph.name
    layers = [n.op_type for n in original.graph.node if n.op_type not in ("Cast", "Flatten")]  # the no-ops dropped
    assert [n.op_type for n in written.graph.node] == layers == ["Gemm", "Relu", "Gemm", "Relu", "Gemm", "Tanh"]
    # the trained weights: the run's forward, not the file's
    t = rlhls.load(run, design=str(design))._trainer
    x = _states((3,), 16)
    got = np.concatenate([_session(out).run(None, {"input": row[None]})[0] for row in x])
    _close(got, ps_forward(t.actor, x, t.hp["ps_math"]))
    before = np.concatenate([_session(CORPUS / "sb3_td3_actor_legacy.onnx").run(None, {"input": row[None]})[0]
                             for row in x])
    assert not np.allclose(got, before, atol=1e-6)
    assert [l.kind for l in import_onnx(out).layers] == [l.kind for l in t.actor.layers]


IMPORTS = sorted(p.name for p in CORPUS.glob("*.onnx") if not p.name.startswith(("elu_", "gelu_", "silu_", "scaled_")))


@pytest.mark.parametrize("name", IMPORTS)
def test_every_imported_network_goes_out_in_its_layout(name):
    """A leading flatten of (1, 2, 3) and an output without its batch axis included."""
    from rlhls.designs.onnx_import import import_onnx
    from rlhls.host.export import onnx_model

    path = CORPUS / name
    model = onnx_model(import_onnx(path))
    assert _io(model) == _io(onnx.load(str(path), load_external_data=False))
    a, b = _session(path), ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = [d if isinstance(d, int) else 1 for d in a.get_inputs()[0].shape]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(b.run(None, {"input": x})[0], a.run(None, {"input": x})[0], rtol=2e-6, atol=2e-6)


def test_a_brevitas_actor_goes_out_with_its_quant_nodes():
    from test_onnx_import import _qonnx_run, brevitas_actor

    from rlhls.designs.onnx_import import import_onnx
    from rlhls.host.export import onnx_model

    m = brevitas_actor()
    net = import_onnx(m, "actor")
    out = onnx_model(net)
    assert _io(out) == _io(m)
    assert [n.op_type for n in out.graph.node] == ["Quant", "Quant", "Gemm", "Relu", "Quant", "Quant", "Gemm", "Tanh"]
    x = np.random.default_rng(2).uniform(-4, 4, (16, 3))
    np.testing.assert_allclose(_qonnx_run(out, x), _qonnx_run(m, x), rtol=1e-6, atol=1e-6)
    again = import_onnx(out)  # the formats come back: the 4-bit weights and the 8-bit activations
    assert [(l.kind, str(getattr(l, "fmt", "")), {k: str(f) for k, f in getattr(l, "param_formats", {}).items()})
            for l in again.layers] == \
        [(l.kind, str(getattr(l, "fmt", "")), {k: str(f) for k, f in getattr(l, "param_formats", {}).items()})
         for l in net.layers]


# --------------------------------------------------------------------------------------- refusals

def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("case", ["no folder", "not a run", "broken checkpoint", "user's file", "file is a folder",
                                  "missing folder", "folder is a file", "design file run without --design"])
def test_bad_input_is_one_line_and_nothing_written(case, runs, imported, tmp_path, capsys):
    run, out, extra = tmp_path / "run", tmp_path / "policy.onnx", []
    shutil.copytree(runs["dqn"], run)
    words = {"no folder": ["no such folder"], "not a run": ["no checkpoint.npz"],
             "broken checkpoint": ["checkpoint"], "user's file": ["exists", "--force"], "file is a folder": ["folder"],
             "missing folder": ["does not exist"], "folder is a file": ["is not a folder"],
             "design file run without --design": ["--design"]}[case]
    if case == "no folder":
        run = tmp_path / "nothing"
    elif case == "not a run":
        run = tmp_path / "empty"
        run.mkdir()
    elif case == "broken checkpoint":
        (run / "checkpoint.npz").write_bytes(b"PK\x03\x04 not a zip")
    elif case == "user's file":
        out.write_bytes(b"the user's model")
    elif case == "file is a folder":
        out.mkdir()
    elif case == "missing folder":
        out = tmp_path / "no" / "policy.onnx"
    elif case == "folder is a file":
        (tmp_path / "a_file").write_text("x")
        out = tmp_path / "a_file" / "policy.onnx"
    else:
        run = imported[1]
    before, run_before = _files(tmp_path), _files(run) if run.is_dir() else None
    assert main(["export", str(run), "--onnx", str(out), *extra]) == 2
    _one_line(capsys, *words)
    assert _files(tmp_path) == before
    if run_before is not None:
        assert _files(run) == run_before


def test_force_replaces_a_file(runs, tmp_path, capsys):
    out = tmp_path / "q.onnx"
    out.write_bytes(b"the user's model")
    assert main(["export", str(runs["dqn"]), "--onnx", str(out), "--force"]) == 0
    assert onnx.load(str(out)).graph.output[0].name == "output"
    assert [p.name for p in tmp_path.iterdir()] == ["q.onnx"]  # no temporary file left


# ------------------------------------------------------------------------ an imported policy, untrained

def test_eval_untrained_plays_the_imported_policy_as_the_file_computes_it(imported, capsys):
    from rlhls.host.evaluation import untrained

    design, _ = imported
    policy = untrained(str(design))
    x = _states((3,), 8)
    ref = np.concatenate([_session(CORPUS / "sb3_td3_actor_legacy.onnx").run(None, {"input": row[None]})[0]
                          for row in x])
    np.testing.assert_allclose(policy.predict(x)[0], np.clip(2.0 * ref, -2.0, 2.0), rtol=0, atol=1e-6)
    assert main(["eval", str(design), "--untrained", "--episodes", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["untrained"] is True and res["design"] == "export-imported-td3" and res["episodes"] == 1
    assert res["mean_return"] == policy.evaluate(episodes=1)["mean_return"]
    assert main(["eval", str(design), "--untrained", "--design", str(design)]) == 2
    _one_line(capsys, "--design", "--untrained")


# ----------------------------------------------------------------------------------------- RL Zoo

def test_rlzoo_net_arch_that_would_replace_an_imported_actor_is_refused(imported, tmp_path, capsys):
    from rlhls.host.bound import bind
    from rlhls.host.hyperparams import read_config

    design, _ = imported
    out = tmp_path / "run"
    before = _files(tmp_path)
    # RL Zoo's published Pendulum-v1 entry: net_arch=[400, 300] for the actor and the critic
    assert main(["train", str(design), "--config", str(RLZOO / "ddpg.yml"), "--steps", "10", "--out", str(out)]) == 2
    _one_line(capsys, "network 'actor' is imported from ONNX", "net_arch [400, 300]", "dict(qf=[...])")
    assert _files(tmp_path) == before and not out.exists()
    # the critic alone resized: the actor stays the file's
    yml = tmp_path / "critic.yml"
    yml.write_text("Pendulum-v1:\n  policy_kwargs: \"dict(net_arch=dict(qf=[32, 32]))\"\n")
    d = get_design(str(design))
    b = bind(d, config=read_config(str(yml), d))
    nets = b.design.build_networks(0)
    assert [l.units for l in nets["critic"].layers if l.kind == "Dense"] == [32, 32, 1]
    fresh = d.build_networks(0)["actor"]
    assert nets["actor"].onnx_io == fresh.onnx_io and all(
        np.array_equal(v, fresh.get_params()[k]) for k, v in nets["actor"].get_params().items())


def test_a_td3_entry_given_to_a_ddpg_design_names_the_keys_it_ignores(tmp_path, caplog):
    from rlhls.host.hyperparams import read_config

    yml = tmp_path / "td3.yml"  # RL Zoo's optimized TD3 entries carry target policy smoothing
    yml.write_text("MountainCarContinuous-v0:\n  n_timesteps: 300000\n  policy: 'MlpPolicy'\n  gamma: 0.98\n"
                   "  policy_delay: 2\n  target_policy_noise: 0.2\n  target_noise_clip: 0.5\n")
    d = get_design("apdrl-ddpg-mntncarcont")
    with caplog.at_level("WARNING", logger="rlhls"):
        cfg = read_config(str(yml), d)
    said = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(said) == 1 and "target_policy_noise=0.2, target_noise_clip=0.5 ignored" in said[0], said
    assert cfg["policy_frequency"] == 2 and cfg["gamma"] == 0.98
    assert not {"target_policy_noise", "target_noise_clip"} & set(cfg)
    with pytest.raises(RlhlsError, match="unknown key"):  # a key of no algorithm is still refused
        yml.write_text("MountainCarContinuous-v0:\n  target_policy_smoothing: 0.2\n")
        read_config(str(yml), d)
