"""ONNX / QONNX import of what users bring: torch's legacy and dynamo exports of SB3-style actors
(tests/data/onnx, made by make_corpus.py there; torch is not needed here), the same exporters'
node patterns written with onnx.helper, Brevitas-style QONNX; each imports (and then computes what
onnxruntime / qonnx compute) or is refused in one line naming the real node. The new layers
(LeakyReLU, Clip, Softplus, LayerNorm, Quant, quantized weights): float64 gradients against finite
differences, fixed-point arithmetic against integer references and hls4ml's C simulation, and
designs that bring them train, csim == emu."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat, parse_format
from rlhls.designs.network import (Clip, Dense, LayerNorm, LeakyReLU, Network, Precision, Quant, ReLU, Sigmoid,
                                   Softplus, Tanh)
from rlhls.designs.onnx_import import import_onnx

CORPUS = Path(__file__).resolve().parent / "data" / "onnx"
RNG = np.random.default_rng(0)


def _ort(path_or_model, x):
    src = path_or_model if isinstance(path_or_model, (str, Path)) else path_or_model.SerializeToString()
    s = ort.InferenceSession(str(src) if isinstance(src, Path) else src, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    return s.run(None, {i.name: x.astype(np.float32)})[0]


def _same_function(net, path_or_model, shape, scale=1.0, tol=2e-6):
    """net's float64 forward equals onnxruntime's float32 one on the model (to float32 rounding)."""
    x = (RNG.standard_normal(shape) * scale).astype(np.float32)
    ref = _ort(path_or_model, x)
    ours = net.forward(x.reshape(1 if shape[0] == 1 else shape[0], *net.input_shape).astype(np.float64))
    np.testing.assert_allclose(ours.reshape(ref.shape), ref, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------- the torch corpus

ACCEPTED = {  # file stem -> the layers it becomes
    "sb3_td3_actor": ["Dense", "ReLU", "Dense", "ReLU", "Dense", "Tanh"],
    "bn_actor": ["Dense", "ReLU", "Dense", "ReLU", "Dense", "Tanh"],  # two BatchNorms folded away
    "acts_actor": ["Dense", "LayerNorm", "LeakyReLU", "Dense", "Softplus", "Dense", "Clip", "Dense", "Clip", "Dense",
                   "Sigmoid", "Dense", "Tanh"],
    "view_cnn_actor": ["Conv2d", "ReLU", "Conv2d", "ReLU", "Flatten", "Dense", "ReLU", "Dense", "Tanh"],
    "flatten_all_actor": ["Dense", "ReLU", "Dense", "Tanh"],
}
REFUSED = {
    ("scaled_actor", "legacy"): "node '/Mul' (Mul): a constant scale after Tanh with no Gemm / MatMul / Conv directly "
                                "before or after it to fold it into; rlhls scales the tanh output to the "
                                "environment's action box itself",
    ("scaled_actor", "dynamo"): "node 'node_mul' (Mul): a constant scale after Tanh",
    ("elu_actor", "legacy"): "node '/mu/mu.1/Elu' (Elu): not in the layer language (no ELU layer in the layer "
                             "language: use LeakyReLU or Softplus)",
    ("elu_actor", "dynamo"): "node 'node_Elu_4' (Elu): not in the layer language",
    ("silu_actor", "legacy"): "SiLU / Swish (x * sigmoid(x)) written out in primitive nodes; no SiLU layer in the "
                              "layer language: use Sigmoid, Tanh or LeakyReLU",
    ("silu_actor", "dynamo"): "SiLU / Swish (x * sigmoid(x)) written out in primitive nodes",
    ("gelu_actor", "legacy"): "GELU (x * (1 + erf(x / sqrt(2))) / 2) written out in primitive nodes; no GELU layer",
    ("gelu_actor", "dynamo"): "GELU (x * (1 + erf(x / sqrt(2))) / 2) written out in primitive nodes",
}
# SB3's export recipe (docs "Exporting models"), legacy exporter: PPO's policy (actions, values, log_prob;
# the Gaussian's std from exp(log_std) broadcast to the mean) and SAC's actor (its log_std head unread)
SB3_RECIPES = {"sb3_ppo_policy": ["Dense", "Tanh", "Dense", "Tanh", "Dense"],
               "sb3_sac_actor": ["Dense", "ReLU", "Dense", "ReLU", "Dense", "Tanh"]}


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("stem", sorted(ACCEPTED))
def test_torch_exports_import_and_compute_as_onnxruntime(stem, exporter):
    path = CORPUS / f"{stem}_{exporter}.onnx"
    net = import_onnx(path)
    assert [l.kind for l in net.layers] == ACCEPTED[stem]
    assert {d["init"] for d in net.describe() if "init" in d} == {"onnx"}
    shape = [d if isinstance(d, int) else 1 for d in ort.InferenceSession(str(path)).get_inputs()[0].shape]
    for scale in (1.0, 5.0):  # 5: inputs past the Clip bounds and the LayerNorm's unit scale
        _same_function(net, path, shape, scale)


@pytest.mark.parametrize("stem", sorted(SB3_RECIPES))
def test_sb3_export_recipes_import_the_action_and_prune_the_rest(stem, caplog):
    path = CORPUS / f"{stem}_legacy.onnx"
    model = onnx.load(str(path))
    ops = {n.op_type for n in model.graph.node}
    assert {"Exp", "Expand"} <= ops  # the distribution is in the file
    with caplog.at_level("WARNING", logger="rlhls.designs.onnx_import"):
        net = import_onnx(path)
    assert [l.kind for l in net.layers] == SB3_RECIPES[stem]
    for scale in (1.0, 5.0):
        _same_function(net, path, (1, 3), scale)  # the first output: the deterministic action
    if len(model.graph.output) > 1:  # PPO: the values and the log-probability are left out, said once
        (rec,) = caplog.records
        assert f"3 outputs; the first, '{model.graph.output[0].name}', is the network imported" in rec.getMessage()
    else:
        assert not caplog.records


def test_the_legacy_exporters_noops_are_dropped():
    # what the legacy exporter wrote: the no-op Cast of obs.float(), Identity of shared BatchNorm tensors
    legacy = onnx.load(str(CORPUS / "bn_actor_legacy.onnx"))
    ops = [n.op_type for n in legacy.graph.node]
    assert ops[:4] == ["Identity", "Identity", "Cast", "Flatten"] and ops.count("BatchNormalization") == 2
    # the dynamo exporter keeps weights of 1 KiB and more in '<model>.onnx.data' beside the model: read
    dyn = onnx.load(str(CORPUS / "acts_actor_dynamo.onnx"), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in dyn.graph.initializer)
    assert any(n.op_type == "Where" for n in dyn.graph.node)  # torch's Softplus threshold


@pytest.mark.parametrize("stem, exporter", sorted(REFUSED))
def test_torch_exports_refused_name_the_node(stem, exporter):
    path = CORPUS / f"{stem}_{exporter}.onnx"
    with pytest.raises(RlhlsError) as e:
        import_onnx(path)
    msg = str(e.value)
    assert msg.startswith(f"ONNX file '{path}': ") and REFUSED[(stem, exporter)] in msg and "\n" not in msg


# ------------------------------------------------------------------ exporter patterns with onnx.helper

def _vi(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _t(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def _model(nodes, inits, in_dims=(1, 3), out_dims=None, opset=17, extra_opsets=()):
    batch = lambda d: None if d is None else ["N", *list(d)[1:]]  # noqa: E731  (a symbolic batch axis)
    g = helper.make_graph(nodes, "m", [_vi("input", batch(in_dims))], [_vi(nodes[-1].output[0], batch(out_dims))],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 8
    return m


def _gemm(name, x, y, n_in, n_out, seed):
    r = np.random.default_rng(seed)
    w, b = r.standard_normal((n_out, n_in)) / math.sqrt(n_in), r.standard_normal(n_out) * 0.1
    return (helper.make_node("Gemm", [x, f"{name}.weight", f"{name}.bias"], [y], name=f"/{name}/Gemm", transB=1,
                             alpha=1.0, beta=1.0), [_t(f"{name}.weight", w), _t(f"{name}.bias", b)])


def _legacy_actor(mid_nodes=(), mid_inits=(), last="h2", tail=()):
    """The legacy exporter's SB3 actor: Cast (obs.float()), Flatten, Gemm, Relu, [mid], Gemm, Tanh."""
    g1, i1 = _gemm("l1", "flat", "h1", 3, 8, 1)
    g2, i2 = _gemm("l2", last, "pre", 8, 2, 2)
    nodes = [helper.make_node("Cast", ["input"], ["obs"], name="/actor/Cast", to=TensorProto.FLOAT),
             helper.make_node("Flatten", ["obs"], ["flat"], name="/actor/flatten/Flatten", axis=1), g1,
             helper.make_node("Relu", ["h1"], ["h2" if not mid_nodes else "r1"], name="/actor/Relu"),
             *mid_nodes, g2, helper.make_node("Tanh", ["pre"], ["act"], name="/actor/Tanh"), *tail]
    return _model(nodes, i1 + i2 + list(mid_inits))


def test_cast_flatten_and_identity_of_initializers_are_read():
    m = _legacy_actor()
    net = import_onnx(m)
    assert [l.kind for l in net.layers] == ["Dense", "ReLU", "Dense", "Tanh"]
    _same_function(net, m, (1, 3))
    # BatchNormalization whose running_var / running_mean are Identity nodes of other initializers (the
    # legacy exporter's sharing of equal tensors): after a ReLU, folded into the next Gemm
    bn = [helper.make_node("Identity", ["bn.weight"], ["bn.running_var"], name="Identity_0"),
          helper.make_node("Identity", ["bn.bias"], ["bn.running_mean"], name="Identity_1"),
          helper.make_node("BatchNormalization", ["r1", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                           ["h2"], name="/actor/bn/BatchNormalization", epsilon=1e-5, training_mode=0)]
    m = _legacy_actor(bn, [_t("bn.weight", RNG.uniform(0.5, 2, 8)), _t("bn.bias", RNG.standard_normal(8))])
    m.graph.node.insert(0, m.graph.node.pop(-5))  # the Identity nodes first, as the exporter writes them
    m.graph.node.insert(0, m.graph.node.pop(-5))
    net = import_onnx(m)
    assert [l.kind for l in net.layers] == ["Dense", "ReLU", "Dense", "Tanh"]
    _same_function(net, m, (4, 3))


def test_batchnorm_fold_is_the_float64_arithmetic():
    g, i = _gemm("l1", "input", "h", 3, 4, 3)
    gamma, beta, mean, var = (RNG.uniform(0.5, 2, 4), RNG.standard_normal(4), RNG.standard_normal(4),
                              RNG.uniform(0.1, 2, 4))
    f32 = [np.float32(v).astype(np.float64) for v in (gamma, beta, mean, var)]
    bn = helper.make_node("BatchNormalization", ["h", "g", "b", "m", "v"], ["y"], name="bn", epsilon=1e-3)
    m = _model([g, bn], i + [_t(k, v) for k, v in zip("gbmv", (gamma, beta, mean, var))], out_dims=[1, 4])
    net = import_onnx(m)
    W = numpy_helper.to_array(i[0]).astype(np.float64).T
    b = numpy_helper.to_array(i[1]).astype(np.float64)
    s = f32[0] / np.sqrt(f32[3] + np.float64(np.float32(1e-3)))
    assert np.array_equal(net.get_params()["fc1.W"], W * s)
    assert np.array_equal(net.get_params()["fc1.b"], b * s + (f32[1] - f32[2] * s))
    _same_function(net, m, (5, 3))


def test_dropout_at_inference_is_dropped_and_in_training_refused():
    ratio, off = _t("ratio", 0.25), numpy_helper.from_array(np.array(False), "training_mode")
    mid = [helper.make_node("Dropout", ["r1", "ratio", "training_mode"], ["h2", "mask"], name="/actor/Dropout")]
    m = _legacy_actor(mid, [ratio, off])
    net = import_onnx(m)
    assert [l.kind for l in net.layers] == ["Dense", "ReLU", "Dense", "Tanh"]
    _same_function(net, m, (3, 3))
    m = _legacy_actor(mid, [ratio, numpy_helper.from_array(np.array(True), "training_mode")])
    with pytest.raises(RlhlsError, match=r"node '/actor/Dropout' \(Dropout\): in training mode \(training_mode true\): "
                                         r"export the model in eval mode"):
        import_onnx(m)


def test_input_normalisation_folds_into_the_first_layer():
    # (obs - mean) / std before the first Gemm, as a user's wrapper writes it
    mean, std = RNG.standard_normal(3), RNG.uniform(0.5, 3, 3)
    g, i = _gemm("l1", "c", "h", 3, 4, 5)
    nodes = [helper.make_node("Sub", ["input", "mean"], ["a"], name="/Sub"),
             helper.make_node("Div", ["a", "std"], ["c"], name="/Div"), g, helper.make_node("Relu", ["h"], ["y"])]
    m = _model(nodes, i + [_t("mean", mean), _t("std", std)], out_dims=[1, 4])
    net = import_onnx(m)
    assert [l.kind for l in net.layers] == ["Dense", "ReLU"]
    _same_function(net, m, (6, 3), scale=3.0)


@pytest.mark.parametrize("case, msg", [
    ("cast to int", "node '/actor/Cast' (Cast): casts to INT64; only a cast to float / double (a no-op here) is read"),
    ("batchnorm after relu before tanh", "set below"),
    ("elu behind an identity", "node '/actor/Elu' (Elu): not in the layer language (no ELU layer"),
    ("reshape not a flatten", "node '/Reshape' (Reshape): reshapes [1, 6] to [1, 2, 3]; only a flatten"),
    ("per-element offset on an image", "node '/Add' (Add): the constant of shape [1, 2, 4, 4] on a (batch, 2, 4, 4) "
                                       "input: only one number, or one per feature / channel, is folded"),
    ("two consumers", "tensor 'h1' feeds 2 nodes ('/actor/Relu' (Relu), '/skip' (Add)): only a chain"),
    ("matmul by a computed tensor", "node '/w' (Relu): computes from constants only; only elementwise and shape "
                                    "operators are folded"),
    ("bipolar quant", "node 'q' (BipolarQuant): not in the layer language (binary (+-scale) quantization has no "
                      "fixed<W,I> format"),
])
def test_refusals_name_the_real_operator(case, msg):
    if case == "cast to int":
        m = _legacy_actor()
        m.graph.node[0].attribute[0].i = TensorProto.INT64
    elif case == "batchnorm after relu before tanh":
        g, i = _gemm("l1", "input", "h", 3, 2, 1)
        nodes = [g, helper.make_node("Relu", ["h"], ["n0"], name="relu"),
                 helper.make_node("BatchNormalization", ["n0", "g", "b", "m", "v"], ["r"], name="bn"),
                 helper.make_node("Tanh", ["r"], ["y"])]
        m = _model(nodes, i + [_t(k, np.ones(2)) for k in "gbmv"], out_dims=[1, 2])
        msg = "node 'bn' (BatchNormalization): BatchNormalization after Relu with no Gemm / MatMul / Conv directly " \
              "before or after it to fold it into; put it directly after a Linear / Conv layer (or directly before one)"
    elif case == "elu behind an identity":
        mid = [helper.make_node("Identity", ["r1"], ["e"], name="/actor/Identity"),
               helper.make_node("Elu", ["e"], ["h2"], name="/actor/Elu")]
        m = _legacy_actor(mid)
    elif case == "reshape not a flatten":
        g, i = _gemm("l1", "input", "h", 3, 6, 1)
        shape = numpy_helper.from_array(np.array([1, 2, 3], np.int64), "shape")
        m = _model([g, helper.make_node("Reshape", ["h", "shape"], ["y"], name="/Reshape")], i + [shape])
    elif case == "per-element offset on an image":
        w = _t("w", RNG.standard_normal((1, 2, 3, 3)))
        m = _model([helper.make_node("Add", ["input", "off"], ["a"], name="/Add"),
                    helper.make_node("Conv", ["a", "w"], ["y"], name="/Conv")],
                   [_t("off", RNG.standard_normal((1, 2, 4, 4))), w], in_dims=(1, 2, 4, 4))
    elif case == "two consumers":
        mid = [helper.make_node("Add", ["h1", "r1"], ["h2"], name="/skip")]
        m = _legacy_actor(mid)
    elif case == "matmul by a computed tensor":
        g, i = _gemm("l1", "input", "h", 3, 3, 1)
        m = _model([g, helper.make_node("Relu", ["wraw"], ["w2"], name="/w"),
                    helper.make_node("MatMul", ["h", "w2"], ["y"], name="/mm")],
                   i + [_t("wraw", RNG.standard_normal((3, 3)))])
    else:  # bipolar quant
        g, i = _gemm("l1", "input", "h", 3, 2, 1)
        q = helper.make_node("BipolarQuant", ["h", "s"], ["y"], name="q", domain="qonnx.custom_op.general")
        m = _model([g, q], i + [_t("s", 1.0)], extra_opsets=[helper.make_opsetid("qonnx.custom_op.general", 1)])
    with pytest.raises(RlhlsError) as e:
        import_onnx(m)
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_design_file_with_a_refused_actor_is_one_line(tmp_path, capsys, clean_registries):
    import shutil

    shutil.copy(CORPUS / "scaled_actor_legacy.onnx", tmp_path / "actor.onnx")
    design = tmp_path / "design.py"
    design.write_text(DESIGN.format(onnx="actor.onnx", name="scaled", **FP32))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["train", str(design), "--steps", "50", "--out", str(tmp_path / "t"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "node '/Mul' (Mul): a constant scale after Tanh" in err and "action box" in err
    assert err.count("\n") <= 2 and "Traceback" not in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_external_data_only_beside_the_model(tmp_path):
    import shutil

    for f in ("acts_actor_dynamo.onnx", "acts_actor_dynamo.onnx.data"):
        shutil.copy(CORPUS / f, tmp_path / f)
    assert len(import_onnx(tmp_path / "acts_actor_dynamo.onnx").layers) == 13
    (tmp_path / "acts_actor_dynamo.onnx.data").unlink()
    (tmp_path / "acts_actor_dynamo.onnx.data").symlink_to(CORPUS / "acts_actor_dynamo.onnx.data")
    with pytest.raises(RlhlsError, match="tensor 'mu.4.weight': its data file 'acts_actor_dynamo.onnx.data' is not a "
                                         "regular file"):
        import_onnx(tmp_path / "acts_actor_dynamo.onnx")
    (tmp_path / "acts_actor_dynamo.onnx.data").unlink()
    (tmp_path / "acts_actor_dynamo.onnx.data").write_bytes(b"\0" * 100)
    with pytest.raises(RlhlsError, match=r"tensor 'mu.4.weight': dims \[16, 16\] need 1024 bytes; its data file "
                                         r"'acts_actor_dynamo.onnx.data' gives 1024 at offset 0 of 100"):
        import_onnx(tmp_path / "acts_actor_dynamo.onnx")


# ------------------------------------------------------------------------------------ QONNX / Brevitas

QONNX = helper.make_opsetid("qonnx.custom_op.general", 1)


def _quant(x, y, name, scale, bits, signed=1, narrow=0, mode="ROUND", zp=0.0):
    inits = [_t(f"{name}.scale", scale), _t(f"{name}.zeropt", zp), _t(f"{name}.bitwidth", bits)]
    return (helper.make_node("Quant", [x, f"{name}.scale", f"{name}.zeropt", f"{name}.bitwidth"], [y], name=name,
                             domain="qonnx.custom_op.general", signed=signed, narrow=narrow, rounding_mode=mode),
            inits)


def brevitas_actor(**over):
    """What Brevitas' QONNX export writes for QuantIdentity -> QuantLinear(4-bit weights, narrow) ->
    QuantReLU(8-bit unsigned) -> QuantLinear -> Tanh: Quant nodes on the input, on each weight
    initializer (MatMul by the transposed weight, then the bias Add) and after the ReLU."""
    r = np.random.default_rng(7)
    w1, b1 = r.standard_normal((3, 16)) * 0.5, r.standard_normal(16) * 0.1
    w2, b2 = r.standard_normal((16, 1)) * 0.3, r.standard_normal(1) * 0.1
    p = dict(in_scale=2.0 ** -5, w_scale=2.0 ** -3, act_scale=2.0 ** -4) | over
    nodes, inits = [], [_t("w1", w1), _t("b1", b1), _t("w2", w2), _t("b2", b2)]
    for spec in (("input", "xq", "/input_quant/Quant", p["in_scale"], 8),
                 ("w1", "w1q", "/fc1/weight_quant/Quant", p["w_scale"], 4, 1, 1),
                 ("w2", "w2q", "/fc2/weight_quant/Quant", p["w_scale"], 4, 1, 1)):
        n, i = _quant(*spec, mode=over.get("mode", "ROUND")) if spec[0] == "w1" else _quant(*spec)
        nodes.append(n)
        inits += i
    if "zp" in over:
        inits[inits.index(next(t for t in inits if t.name == "/input_quant/Quant.zeropt"))] = _t(
            "/input_quant/Quant.zeropt", over["zp"])
    aq, ai = _quant("r", "rq", "/relu_quant/Quant", p["act_scale"], 8, signed=0)
    nodes += [helper.make_node("MatMul", ["xq", "w1q"], ["m1"], name="/fc1/MatMul"),
              helper.make_node("Add", ["m1", "b1"], ["h1"], name="/fc1/Add"),
              helper.make_node("Relu", ["h1"], ["r"], name="/relu/Relu"), aq,
              helper.make_node("MatMul", ["rq", "w2q"], ["m2"], name="/fc2/MatMul"),
              helper.make_node("Add", ["m2", "b2"], ["h2"], name="/fc2/Add"),
              helper.make_node("Tanh", ["h2"], ["y"], name="/tanh/Tanh")]
    return _model(nodes, inits + ai, out_dims=[1, 1], extra_opsets=[QONNX])


def _qonnx_run(model, x):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    from qonnx.transformation.infer_shapes import InferShapes

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 1
    w = ModelWrapper(m).transform(InferShapes())
    return np.concatenate([execute_onnx(w, {"input": row[None].astype(np.float32)})[w.graph.output[0].name]
                           for row in x])


def test_brevitas_actor_keeps_its_formats():
    m = brevitas_actor()
    net = import_onnx(m)
    assert [l.kind for l in net.layers] == ["Quant", "Dense", "ReLU", "Quant", "Dense", "Tanh"]
    assert str(net.layers[0].fmt) == "fixed<8,3,RND_CONV,SAT>"
    assert str(net.layers[3].fmt) == "ufixed<8,4,RND_CONV,SAT>"
    w4 = "fixed<4,1,RND_CONV,SAT_SYM>"
    assert {k: str(f) for k, f in net.layers[1].param_formats.items()} == {"W": w4}
    assert {k: str(f) for k, f in net.layers[4].param_formats.items()} == {"W": w4}
    # the float masters are the file's; the layer computes with their 4-bit values
    W = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "w1")).astype(np.float64)
    assert np.array_equal(net.get_params()["fc1.W"], W)
    assert set(np.unique(net.layers[1].param("W") * 8)) <= set(range(-7, 8))
    x = RNG.uniform(-4, 4, (32, 3))
    ref = _qonnx_run(m, x)
    np.testing.assert_allclose(net.forward(x), ref, rtol=1e-6, atol=1e-6)
    # the formats stay in training: a step of the float masters still computes on the 4-bit grid
    net.forward(x)
    net.backward(np.ones((32, 1)))
    g = net.grads["fc1.W"]
    net.set_params(net.get_params() | {"fc1.W": W - 0.01 * g})
    assert set(np.unique(net.layers[1].param("W") * 8)) <= set(range(-7, 8))


@pytest.mark.parametrize("bits, signed, narrow, mode, quant", [
    (8, 1, 0, "ROUND", "RND_CONV"), (4, 1, 1, "FLOOR", "TRN"), (6, 0, 0, "DOWN", "TRN_ZERO"),
    (5, 1, 0, "HALF_UP", "RND_INF"), (7, 0, 0, "HALF_DOWN", "RND_ZERO"),
])
def test_quant_formats_are_qonnx_quant(bits, signed, narrow, mode, quant):
    from qonnx.custom_op.general.quant import quant as qonnx_quant

    for f in (-2, 0, 3):
        n, i = _quant("input", "y", "q", 2.0 ** -f, bits, signed, narrow, mode)
        net = import_onnx(_model([n], i, out_dims=[1, 3], extra_opsets=[QONNX]))
        fmt = net.layers[0].fmt
        assert fmt == FixedFormat(bits, bits - f, bool(signed), quant, "SAT_SYM" if narrow else "SAT")
        x = np.concatenate([RNG.uniform(-2.0 ** (bits - f), 2.0 ** (bits - f), 2000),
                            (np.arange(-40, 40) + 0.5) * 2.0 ** -f])  # ties of every rounding
        ref = qonnx_quant(x, np.float64(2.0 ** -f), np.float64(0), np.float64(bits), signed, narrow, mode)
        assert np.array_equal(net.forward(x[:, None].repeat(3, 1))[:, 0], ref)


@pytest.mark.parametrize("over, msg", [
    ({"in_scale": 0.1}, "node '/input_quant/Quant' (Quant): scale 0.10000000149011612 is not a power of two"),
    ({"zp": 3.0}, "node '/input_quant/Quant' (Quant): zero point [3.0]: fixed<W,I> formats have zero point 0"),
    ({"mode": "CEIL"}, "node '/fc1/weight_quant/Quant' (Quant): rounding mode CEIL: no ap_fixed quantization mode"),
])
def test_quant_without_a_fixed_format_is_refused(over, msg):
    with pytest.raises(RlhlsError) as e:
        import_onnx(brevitas_actor(**over))
    assert msg in str(e.value), str(e.value)


# ------------------------------------------------------------------------------------ the new layers

def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("layer", [LeakyReLU(0.2), Clip(-0.5, 0.7), Clip(0.0, None), Softplus(), Softplus(0.3),
                                   LayerNorm(1e-3), Quant("fixed<16,6,RND_CONV,SAT>")],
                         ids=["leaky", "clip", "clip-lo", "softplus", "softplus-threshold", "layernorm", "quant"])
def test_backward_is_the_gradient(layer):
    net = Network("n", (5,), [Dense(6), layer, Dense(2)], seed=1)
    x = RNG.standard_normal((4, 5))
    x[np.abs(x) < 1e-3] = 0.1  # away from the kinks
    c = RNG.standard_normal((4, 2))
    loss = lambda v: float((net.forward(v) * c).sum())  # noqa: E731
    net.forward(x)
    dx = net.backward(c, need_input_grad=True)
    if layer.kind == "Quant":  # straight-through: the gradient of the unquantized network inside the range
        plain = Network("n", (5,), [Dense(6), Dense(2)], seed=1)
        plain.set_params(net.get_params())
        lossp = lambda v: float((plain.forward(v) * c).sum())  # noqa: E731
        np.testing.assert_allclose(dx, _fd(lossp, x), rtol=1e-6, atol=1e-7)
        return
    np.testing.assert_allclose(dx, _fd(loss, x), rtol=1e-5, atol=1e-7)
    if layer.params:
        name = net.layers[1].name
        net.forward(x)
        net.backward(c)
        for k in ("gamma", "beta"):
            p0 = net.get_params()

            def lk(v, k=k):
                net.set_params(p0 | {f"{name}.{k}": v})
                return loss(x)
            np.testing.assert_allclose(net.grads[f"{name}.{k}"], _fd(lk, p0[f"{name}.{k}"]), rtol=1e-5, atol=1e-7)
            net.set_params(p0)


def test_leaky_relu_fixed_point_is_the_exact_product():
    s = parse_format("fixed<30,8,RND,SAT>")  # 2 x 30 bits: more than float64 holds
    layer = Network("n", (1,), [LeakyReLU(0.1)]).layers[0]
    x = np.asarray(s.quantize(RNG.uniform(-100, 100, (2000, 1))), dtype=np.float64)
    y = layer.forward(x, Precision(s, "fixed<60,16>"))
    a = int(s.to_mantissa(s.quantize(np.float64(0.1))))
    for xi, yi in zip(x.ravel(), y.ravel()):
        m = int(s.to_mantissa(xi))
        if m > 0:
            assert yi == xi
        else:  # RND: round half up of m * a / 2**F, exactly in Python integers
            q = (m * a + (1 << (s.frac_bits - 1))) >> s.frac_bits
            assert yi == math.ldexp(q, -s.frac_bits)


def test_softplus_table_is_hls4mls():
    from rlhls.designs.lut import lut_tables

    (t,) = lut_tables("Softplus", 1024, parse_format("fixed<18,8>"))
    x = (2 * 8.0 * (np.arange(1024) - 512.0) / 1024).astype(np.float32)
    want = np.log(np.exp(x).astype(np.float64) + 1.0).astype(np.float32)  # float(log(double(expf(x)) + 1.))
    np.testing.assert_array_equal(t, np.asarray(parse_format("fixed<18,8>").quantize(want.astype(np.float64))))


def test_ps_float32_path_takes_the_new_layers():
    from rlhls.host.mixed import ps_forward

    net = Network("n", (5,), [Dense(8), LeakyReLU(), Dense(8), Softplus(20.0), LayerNorm(), Dense(8), Clip(0, 6),
                              Quant("fixed<8,3,RND_CONV,SAT>"), Dense(2)], seed=2)
    x = RNG.standard_normal((6, 5))
    np.testing.assert_allclose(ps_forward(net, x, "float32"), net.forward(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ps_forward(net, x, "float64"), net.forward(x), rtol=1e-5, atol=1e-5)


def test_export_then_import_is_the_same_network():
    net = Network("n", (5,), [Dense(8), LeakyReLU(0.25), Dense(8), Softplus(), LayerNorm(2.0 ** -13), Dense(8),
                              Clip(None, 2.0), Dense(2), Sigmoid()], seed=3)
    back = import_onnx(net.to_onnx())
    assert [(l.kind, l.describe()) for l in back.layers if l.kind != "Dense"] == \
           [(l.kind, l.describe()) for l in net.layers if l.kind != "Dense"]
    x = RNG.standard_normal((4, 5))
    np.testing.assert_allclose(back.forward(x), net.forward(x), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- hls4ml C simulation

def test_hls4ml_leaky_relu_and_softplus_bit_exact(tmp_path):
    from rlhls.flow.hls4ml_convert import check_hls4ml, compile_csim, convert_network

    net = Network("acts", (5,), [Dense(6), LeakyReLU(0.1), Dense(7), Softplus(20.0), Dense(3)], seed=0,
                  init="uniform")
    x = np.random.default_rng(4).uniform(-20.0, 20.0, (200, 5))
    p = Precision("fixed<24,6,TRN,WRAP>", "fixed<40,12,RND,SAT>", table="fixed<18,8>", table_size=512)
    r = convert_network(net, p, tmp_path / "fx", part="xczu7ev-ffvc1156-2-e", clock_ns=5.0)
    compile_csim(r["hls_model"])
    c = check_hls4ml(net, p, r["hls_model"], x)
    assert c["exact"] and c["passed"], c["max_diff_lsb"]
    plain = Precision(p.storage, p.acc)  # the float64 softplus is many LSBs away: the tables really ran
    assert np.abs(net.forward(x, plain) - c["output"]).max() > 100 * c["lsb"]


def test_hls4ml_refuses_layers_it_has_not():
    from rlhls.flow.hls4ml_convert import hls4ml_precision_config

    p = Precision("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>")
    for layer, kind in ((Clip(0, 6), "Clip"), (LayerNorm(), "LayerNorm")):
        net = Network("n", (3,), [Dense(4), layer, Dense(2)])
        with pytest.raises(RlhlsError, match=f"{kind} has no layer in hls4ml's ONNX reader"):
            hls4ml_precision_config(net, p)
    net = Network("n", (3,), [Dense(4), Quant("fixed<8,3>"), Dense(2)])
    with pytest.raises(RlhlsError, match=r"Quant to fixed<8,3> needs a fixed-point storage format that holds its "
                                         r"values \(storage fp32\)"):
        hls4ml_precision_config(net, Precision("fp32", "fp32"))
    with pytest.raises(RlhlsError, match=r"Quant to fixed<8,3> needs .* \(storage fixed<8,2,RND,SAT>\)"):
        hls4ml_precision_config(net, Precision("fixed<8,2,RND,SAT>", "fixed<20,8>"))


def test_hls4ml_brevitas_actor_bit_exact_in_its_widths(tmp_path):
    """The QONNX actor through hls4ml: its 4-bit weights and 8-bit activations are the project's types,
    and its C simulation equals the emulator bit for bit."""
    from rlhls.flow.hls4ml_convert import check_hls4ml, compile_csim, convert_network

    net = import_onnx(brevitas_actor(), "actor")
    p = Precision("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>")
    r = convert_network(net, p, tmp_path / "qat", part="xczu7ev-ffvc1156-2-e", clock_ns=5.0)
    defines = (tmp_path / "qat" / "firmware" / "defines.h").read_text()
    assert defines.count("ap_fixed<4,1,AP_RND_CONV,AP_SAT_SYM,0>") == 2  # fc1's and fc2's weight_t
    assert "ap_fixed<8,3,AP_RND_CONV,AP_SAT,0>" in defines and "ap_ufixed<8,4,AP_RND_CONV,AP_SAT,0>" in defines
    compile_csim(r["hls_model"])
    c = check_hls4ml(net, p, r["hls_model"], np.random.default_rng(4).uniform(-5.0, 5.0, (300, 3)))
    assert c["exact"] and c["passed"], c["max_diff_lsb"]


# ---------------------------------------------------------------------- designs that bring them

FP32 = {"st": "fp32", "acc": "fp32"}
FIXED = {"st": "fixed<16,6,RND,SAT>", "acc": "fixed<32,12,RND,SAT>"}

DESIGN = '''
from pathlib import Path
from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU, import_onnx
HERE = Path(__file__).resolve().parent

design = Design(
    name="{name}", seed_file="-", seed_title="an imported actor", algorithm="ddpg", env_id="Pendulum-v1",
    env_notes="-", obs_shape=(3,), action_dim=1, action_space="continuous",
    networks=(NetSpec("actor", "actor", lambda seed: import_onnx(HERE / "{onnx}", "actor"), target=True),
              NetSpec("critic", "critic", lambda seed: Network("critic", (4,), [Dense(16), ReLU(), Dense(1)], seed=seed),
                      target=True, extra_inputs=1)),
    kernels=(KernelSpec("dense_forward", "PL", "{st}", "{acc}", {{"pf": 4}}),
             KernelSpec("dense_backward", "PL", "{st}", "{acc}", {{"pf": 4}}),
             KernelSpec("weight_gradient", "PL", "{st}", "{acc}", {{"pf": 4}}),
             KernelSpec("weight_update", "PL", "fp32", "fp32", {{"optimizer": "adam"}})),  # the float masters
    formats={{"storage": "{st}", "acc": "{acc}"}}, device="zcu106", clocks_mhz={{"PL": 200.0}}, batch_size=8,
    hyperparams={{"learning_rate": 1e-3, "buffer_size": 1000, "learning_starts": 30, "policy_frequency": 1,
                  "optimizer": "adam"}})
'''


@pytest.fixture
def clean_registries():
    """The designs a test's files register are gone after it (other tests list the registry)."""
    import sys

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


@pytest.mark.parametrize("stem", ["bn_actor_legacy", "acts_actor_dynamo"])
def test_imported_actors_train(tmp_path, stem, clean_registries):
    import json
    import shutil

    for f in CORPUS.glob(f"{stem}.onnx*"):
        shutil.copy(f, tmp_path / f.name)
    design = tmp_path / "design.py"
    design.write_text(DESIGN.format(onnx=f"{stem}.onnx", name=f"imported-{stem.replace('_', '-')}", **FP32))
    out = tmp_path / "run"
    assert main(["train", str(design), "--steps", "60", "--out", str(out), "--quiet", "--json",
                 "--set", "steps_per_update=20"]) == 0
    from rlhls.host.runfolder import read_metrics

    assert len(read_metrics(out / "metrics.csv")) >= 1 and json.loads((out / "config.json").read_text())


@pytest.mark.parametrize("actor", ["acts", "brevitas"])
def test_imported_actor_csim_equals_emu(tmp_path, csim_calls, clean_registries, actor):
    """DDPG with an imported actor, every layer node on the PL: the torch export with LeakyReLU / Softplus /
    LayerNorm / Clip (fp32), and the Brevitas QAT actor in fixed point (its 4-bit weights and 8-bit
    activations in training); --backend csim (the compiled kernels) gives emu's metrics."""
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import load_design_file
    from rlhls.host.algorithms import get_algorithm
    from rlhls.host.runfolder import read_metrics
    from rlhls.host.train import train_design
    import shutil

    if actor == "acts":
        for f in CORPUS.glob("acts_actor_legacy.onnx*"):
            shutil.copy(f, tmp_path / f.name)
        onnx_file, formats = "acts_actor_legacy.onnx", FP32
    else:
        onnx.save(brevitas_actor(), tmp_path / "qat.onnx")
        onnx_file, formats = "qat.onnx", FIXED
    path = tmp_path / "design.py"
    path.write_text(DESIGN.format(onnx=onnx_file, name=f"imported-{actor}-csim", **formats))
    design = load_design_file(str(path))
    hp = {"learning_starts": 30, "batch_size": 8, "steps_per_update": 30}
    alg = get_algorithm(design.algorithm)
    batch = alg.batch(alg.hyperparams(design, hp))
    plan = {n.name: "PL" if n.kind in ("mm.fwd", "mm.bwd", "act.fwd", "act.bwd", "upd") else "PS"
            for n in build_graph(design, batch).nodes}
    runs = {}
    for backend in ("emu", "csim"):
        run = train_design(design, out=tmp_path / backend, steps=60, backend=backend, precision="mixed", plan=plan,
                           overrides=hp, progress=False)
        runs[backend] = [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")}
                         for r in read_metrics(run.folder / "metrics.csv")]
    assert len(runs["emu"]) >= 2 and runs["emu"] == runs["csim"]
    assert {"dense_forward", "dense_backward", "weight_gradient"} <= set(csim_calls)


def test_brevitas_design_builds_in_its_widths(tmp_path, clean_registries):
    """rlhls build --csim of a design with the QONNX actor: the actor's hls4ml component has the 4-bit weight
    types and passes its C simulation, its Quant layers folded into it (none left to the host)."""
    import json

    onnx.save(brevitas_actor(), tmp_path / "qat.onnx")
    path = tmp_path / "design.py"
    path.write_text(DESIGN.format(onnx="qat.onnx", name="imported-qat-build", **FIXED))
    assert main(["build", str(path), "--out", str(tmp_path / "b"), "--csim", "--quiet"]) == 0
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    comp = next(c for c in m["components"] if c["name"] == "actor_fwd")
    assert comp["kind"] == "hls4ml" and {"actor.quant.fwd", "actor.fc1_relu_quant.fwd"} <= set(comp["folded"])
    assert not [n for n in m["unmapped"] if "quant" in n]
    defines = (tmp_path / "b" / "pl" / "actor_fwd" / "firmware" / "defines.h").read_text()
    assert "ap_fixed<4,1,AP_RND_CONV,AP_SAT_SYM,0>" in defines and "ap_ufixed<8,4,AP_RND_CONV,AP_SAT,0>" in defines
    assert all(c["csim"]["passed"] for c in m["components"]) and "bit-exact" in comp["csim"]["detail"]


# --------------------------------------------------------------------------------------- hostile files

def test_folding_is_sized_before_it_runs(tmp_path):
    # two vectors whose broadcast product would be 2**30 floats (4 GiB): refused before qonnx folds it
    big = [_t("a", np.ones((1 << 15, 1))), _t("b", np.ones((1, 1 << 15)))]
    g, i = _gemm("l1", "input", "h", 3, 2, 1)
    # dead (the output does not read it): pruned, never computed
    net = import_onnx(_model([helper.make_node("Mul", ["a", "b"], ["c"], name="/blowup"), g], big + i,
                             out_dims=[1, 2]))
    assert [l.kind for l in net.layers] == ["Dense"]
    # read by the chain (the weight of its Gemm): sized before folding, refused
    g = helper.make_node("Gemm", ["input", "c"], ["h"], name="/l1/Gemm")
    m = _model([helper.make_node("Mul", ["a", "b"], ["c"], name="/blowup"), g], big, in_dims=(1, 1 << 15),
               out_dims=[1, 1 << 15])
    path = tmp_path / "big.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(RlhlsError) as e:
        import_onnx(path)
    assert str(e.value) == (f"ONNX file '{path}': node '/blowup' (Mul): its output 'c' of shape [32768, 32768] brings "
                            "the constants past the 268435456 elements a model may have")
    nodes = [helper.make_node("Identity", [f"x{k}"], [f"x{k + 1}"]) for k in range(5000)]
    nodes[0].input[0] = "input"
    with pytest.raises(RlhlsError, match="5000 nodes, more than the 4096 a model may have"):
        import_onnx(_model(nodes, []))
