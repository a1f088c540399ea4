"""ONNX export: the written model checks, has an IR onnxruntime reads, and matches our
float64 forward in float32 on random inputs."""


# Two xdist workers each running multi-threaded OpenBLAS on 2 CPUs make the QR of the
# orthogonal init 20-50x slower; one BLAS thread per worker (only if numpy is not loaded yet).

import numpy as np  # noqa: E402
import onnx
import onnxruntime as ort
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.network import Conv2d, Dense, Flatten, Identity, Network, ReLU, Sigmoid, Softmax, Tanh
from rlhls.designs.onnx_export import export_onnx
from rlhls.flow.onnx_file import write_onnx

NETS = {
    "mlp": lambda: Network("mlp", (4,), [Dense(64), ReLU(), Dense(64), ReLU(), Dense(2, gain=1.0)]),
    "tanh": lambda: Network("actor", (6,), [Dense(32), Tanh(), Dense(32, bias=False), Sigmoid(),
                                            Dense(3), Identity(), Tanh()], init="uniform"),
    "softmax": lambda: Network("pi", (8,), [Dense(16), Tanh(), Dense(5, gain=0.01), Softmax()], seed=3),
    "convnet": lambda: Network("q", (4, 84, 84), [
        Conv2d(32, 8, stride=4), ReLU(), Conv2d(64, 4, stride=2), ReLU(), Conv2d(64, 3, stride=1), ReLU(),
        Flatten(), Dense(512), ReLU(), Dense(4, gain=1.0)]),
}


@pytest.mark.parametrize("kind", sorted(NETS))
def test_export_loads_in_onnxruntime_and_matches(kind, tmp_path):
    net = NETS[kind]()
    path = tmp_path / f"{kind}.onnx"
    model = write_onnx(net, path)
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left

    written = onnx.load(path)
    assert written.ir_version <= 10
    assert written.opset_import[0].version == 17
    onnx.checker.check_model(written)
    assert [n.name for n in written.graph.node] == [l.name for l in net.layers]
    assert {i.name for i in written.graph.initializer} == set(net.get_params())
    assert model.SerializeToString() == written.SerializeToString()

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch in (1, 3):  # the batch axis is symbolic
        x = rng.standard_normal((batch,) + net.input_shape).astype(np.float32)
        ours = net.forward(x.astype(np.float64))
        theirs = sess.run(None, {"input": x})[0]
        assert theirs.shape == ours.shape
        np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ours).max()))


def test_export_without_path_returns_model():
    model = export_onnx(NETS["mlp"]())
    assert model.ir_version == 10 and model.graph.name == "mlp"
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_export_rejects_old_opset():
    with pytest.raises(RlhlsError, match="network 'mlp': ONNX opset 11, expected >= 13"):
        export_onnx(NETS["mlp"](), opset=11)
