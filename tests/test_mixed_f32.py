"""PL / AIE tensors kept in float32 (MixedPrecision.f32, dense(out32=True), Network layers on stored
float32 arrays) give the float64 path's bits: random inputs wide enough that FP16 / BF16 overflow
to Inf, sums overflow, NaN appears, and values fall into the subnormals."""

import numpy as np
import pytest

from rlhls.designs.arith import dense
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.network import Dense, Network, Precision, ReLU, Tanh
from rlhls.designs.registry import get_design
from rlhls.flow import native
from rlhls.host.mixed import MixedPrecision

FP16, BF16 = parse_format("fp16"), parse_format("bf16")


def _same(a, b) -> bool:
    """Equal bit for bit as float64 values (NaN matches NaN: payloads are not modelled)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    nan = np.isnan(a)
    return a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a[~nan].view(np.int64), b[~nan].view(np.int64))


def _wide(rng, shape, fmt):
    """Values of fmt: mostly moderate down into the subnormals, some near the top of the range
    (products and sums that overflow), a few +-Inf, signed zeros."""
    top = 15 if fmt == FP16 else 120
    e = np.where(rng.random(shape) < 0.05, rng.uniform(top - 5, top + 0.99, shape), rng.uniform(-26, 3, shape))
    v = fmt.quantize(rng.choice([-1.0, 1.0], shape) * 2.0 ** e)
    v[rng.random(shape) < 0.005] = np.inf
    v[rng.random(shape) < 0.02] = -0.0
    return v


@pytest.fixture(params=[True, False], ids=["native", "numpy"])
def kernels(request, monkeypatch):
    if not request.param:
        monkeypatch.setenv("RLHLS_NATIVE", "0")
    native.install()
    yield request.param
    monkeypatch.delenv("RLHLS_NATIVE", raising=False)
    native.install()


@pytest.mark.parametrize("fmt", [FP16, BF16], ids=str)
def test_dense_out32_equals_float64(fmt, kernels):
    rng = np.random.default_rng(1)
    acc = parse_format("fp32")
    seen = set()
    for n, k, m in [(9, 300, 17), (40, 8, 33), (3, 5, 1)]:
        x, w, b = _wide(rng, (n, k), fmt), _wide(rng, (k, m), fmt), _wide(rng, (m,), fmt)
        x[0, 0] = np.nan
        kw = dict(in_fmt=fmt, w_fmt=fmt, acc_fmt=acc, out_fmt=fmt, x_quantized=True)
        y64 = dense(x, w, b, **kw)
        y32 = dense(x.astype(np.float32), w.astype(np.float32), b, **kw, w_quantized=True, out32=True)
        assert y32.dtype == np.float32 and y64.dtype == np.float64
        assert _same(y32, y64)
        fin = np.isfinite(y64)
        seen |= {c for c, hit in (("inf", np.isinf(y64).any()), ("nan", np.isnan(y64).any()),
                                  ("tiny", (np.abs(y64[fin]) < 2.0 ** -14).any()), ("finite", fin.any())) if hit}
    assert seen == {"inf", "nan", "tiny", "finite"}  # the cases this is about


def test_layers_on_stored_float32_equal_float64():
    """Dense / ReLU / Tanh forward and backward on stored float32 arrays: float64's values."""
    p = Precision("fp16", "fp32")
    outs = []
    for dt in (np.float64, np.float32):
        net = Network("n", (12,), [Dense(40), ReLU(), Dense(30), Tanh(), Dense(3)], seed=0)
        for l in net.layers:
            for k, a in l.params.items():
                a[...] = FP16.quantize(np.random.default_rng(len(a.shape) + a.size).standard_normal(a.shape) * 0.3)
        x = _wide(np.random.default_rng(3), (16, 12), FP16).astype(dt)
        for l in net.layers:
            x = l.forward(x, p, stored=True)
            if l.name == "fc1":
                assert x.dtype == dt  # float32 in, float32 out
        dy = _wide(np.random.default_rng(4), x.shape, FP16).astype(dt)
        for l in reversed(net.layers):
            dy = l.backward(dy, p, stored=True)
        outs.append((x, dy, {(l.name, k): g for l in net.layers for k, g in getattr(l, "grads", {}).items()}))
    (x64, dx64, g64), (x32, dx32, g32) = outs
    assert _same(x32, x64) and _same(dx32, dx64)
    assert g32.keys() == g64.keys() and all(_same(g32[k], g64[k]) for k in g64)
    assert g32[("fc3", "W")].dtype == np.float32  # float32 dy in: float32 dW out
    assert np.isfinite(dx64).any() and not np.isfinite(dx64).all()


def _plan(design, seed):
    """A random plan over PS / PL / AIE (updates and soft updates never on the AIE)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in build_graph(design).nodes:
        units = ("PS", "PL", "AIE") if n.mm and not n.name.endswith((".upd", ".soft")) else ("PS", "PL")
        out[n.name] = str(rng.choice(units))
    return out


def _mps(t):
    return [m for m in vars(t).values() if isinstance(m, MixedPrecision)] + list(getattr(t, "mp_t", {}).values())


def _params(t):
    """Every network's parameters and the optimizers' state, by name."""
    out = {f"{n}.{l.name}.{k}": a.copy() for n, net in vars(t).items() if isinstance(net, Network)
           for l in net.layers for k, a in l.params.items()}
    for n, opt in vars(t).items():
        for kind, slots in getattr(opt, "slots", {}).items():
            out.update({f"{n}.{kind}.{k}": a.copy() for k, a in slots.items()})
    return out


@pytest.mark.parametrize("algo,seed", [("dqn", 0), ("dqn", 1), ("ddpg", 2), ("ddpg", 3)])
def test_training_float32_tensors_equal_float64(algo, seed):
    """Whole gradient steps under random plans, float32 PL / AIE tensors vs float64 ones: the same
    weights, optimizer state and counts bit for bit, with overflowing inputs and loss scales."""
    runs = []
    for f32 in (True, False):
        rng = np.random.default_rng(seed)
        if algo == "dqn":
            from rlhls.host.algorithms.dqn import DQN, PHASES

            design = get_design("apdrl-dqn-cartpole")
            t = DQN(design, seed=0, assignment=_plan(design, seed), hyperparams={
                "precision": "mixed", "learning_starts": 0, "batch_size": 32})
        else:
            from rlhls.host.algorithms.ddpg import DDPG, PHASES

            design = get_design("apdrl-ddpg-lunarcont")
            t = DDPG(design, seed=0, assignment=_plan(design, seed), hyperparams={
                "precision": "mixed", "learning_starts": 0, "batch_size": 16, "buffer_size": 100})
        for m in _mps(t):
            assert m.f32  # the default
            m.f32 = f32
        times = {k: 0.0 for k in PHASES}
        obs_dim = design.obs_shape[0]
        counts = []
        for i in range(4):
            big = 3e4 if i == 1 else 0.5  # an overflowing batch: FP16 Inf, NaN, skipped step
            B = 32 if algo == "dqn" else 16
            s, s2 = rng.standard_normal((B, obs_dim)) * big, rng.standard_normal((B, obs_dim)) * 0.5
            r, d = rng.standard_normal(B), np.zeros(B)
            if algo == "dqn":
                t.train_step(s, s2, rng.integers(0, 2, B), r, d, times)
            else:
                t.critic_step(s, s2, rng.uniform(-1, 1, (B, t.act_dim)), r, d, times)
                t.actor_step(s, times)
                t.update_targets()
            counts.append([m.take_counts() for m in _mps(t)])
        runs.append((_params(t), counts))
        t.close()
    (p32, c32), (p64, c64) = runs
    assert p32 and p32.keys() == p64.keys()
    assert all(_same(p32[k], p64[k]) for k in p64)
    assert c32 == c64
    assert any(c.get("conv_overflows", 0) or c.get("grad_overflows", 0) for step in c64 for c in step)
