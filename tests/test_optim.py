"""host/optim.py: the in-place optimizer steps give the bits of their textbook expressions
(PyTorch's formulas in float64), scratch buffers carry nothing between parameters, and the
state round-trips."""

import numpy as np
import pytest

from rlhls.host.optim import SGD, Adam, RMSprop, clip_grad_norm, make_optimizer


def _params(rng):
    return {"big": rng.standard_normal((40, 30)), "small": rng.standard_normal(7), "mid": rng.standard_normal((5, 9))}


def _bits(a, b):
    return np.array_equal(a.view(np.int64), b.view(np.int64))


@pytest.mark.parametrize("betas, eps", [((0.9, 0.999), 1e-8), ((0.5, 0.9), 1e-5)])
def test_adam_equals_expression(betas, eps):
    rng = np.random.default_rng(0)
    p = _params(rng)
    ref = {k: v.copy() for k, v in p.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    opt = Adam(3e-4, betas, eps)
    b1, b2 = betas
    for t in range(1, 6):
        g = {k: rng.standard_normal(v.shape) * 10.0 ** rng.integers(-6, 3) for k, v in p.items()}
        opt.step(p, g)
        for k in p:
            m[k] = b1 * m[k] + (1.0 - b1) * g[k]
            v2[k] = b2 * v2[k] + (1.0 - b2) * g[k] * g[k]
            c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
            ref[k] = ref[k] - (3e-4 / c1) * m[k] / (np.sqrt(v2[k]) / np.sqrt(c2) + eps)
            assert _bits(p[k], ref[k]) and _bits(opt.slots["m"][k], m[k]) and _bits(opt.slots["v"][k], v2[k]), (t, k)


def test_rmsprop_and_sgd_equal_expression():
    rng = np.random.default_rng(1)
    p, q = _params(rng), None
    q = {k: v.copy() for k, v in p.items()}
    ref_r, ref_s = {k: v.copy() for k, v in p.items()}, {k: v.copy() for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    buf = {k: np.zeros_like(v) for k, v in p.items()}
    rms, sgd = RMSprop(1e-3, alpha=0.95, eps=1e-6), SGD(1e-2, momentum=0.9)
    for _ in range(4):
        g = {k: rng.standard_normal(v.shape) for k, v in p.items()}
        rms.step(p, g)
        sgd.step(q, g)
        for k in p:
            v2[k] = 0.95 * v2[k] + (1.0 - 0.95) * g[k] * g[k]
            ref_r[k] = ref_r[k] - 1e-3 * g[k] / (np.sqrt(v2[k]) + 1e-6)
            buf[k] = 0.9 * buf[k] + g[k]
            ref_s[k] = ref_s[k] - 1e-2 * buf[k]
            assert _bits(p[k], ref_r[k]) and _bits(q[k], ref_s[k]), k


def test_state_round_trip_and_errors():
    rng = np.random.default_rng(2)
    p = _params(rng)
    g = {k: rng.standard_normal(v.shape) for k, v in p.items()}
    a = make_optimizer("adam", 1e-3)
    a.step(p, g)
    b = make_optimizer("adam", 1e-3)
    b.load_state_dict(a.state_dict())
    pa, pb = {k: v.copy() for k, v in p.items()}, {k: v.copy() for k, v in p.items()}
    a.step(pa, g)
    b.step(pb, g)
    assert all(_bits(pa[k], pb[k]) for k in p)
    assert "_buf" not in a.state_dict()
    with pytest.raises(Exception, match="no gradient"):
        a.step(p, {})
    n = clip_grad_norm({"x": np.array([3.0, 4.0])}, 1.0)
    assert n == 5.0
