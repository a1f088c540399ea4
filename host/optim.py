"""First-order optimizers on numpy parameter dicts (PyTorch semantics) and grad-norm clipping.

Precision: a step computes in its gradients' dtype, float32 or float64 (anything else is taken as
float64). Float32 gradients (the PS's float32 path, host/mixed.py ``ps_math``) keep float32
optimizer state and every operation in float32 (scalars rounded to float32, as PyTorch's float32
kernels); the parameters, float64 arrays, are updated in place by the float32 step (``p - u`` of
FP32 values rounded to FP32 is the float32 difference). A slot made in one dtype and stepped in the
other (a checkpoint of the other path) is converted once. ``clip_grad_norm`` sums float32 arrays
in float32 (dot products), float64 ones as before. The float32 Adam and RMSprop steps run as one
compiled pass where ``optim_native`` has checked it gives these steps' bits (else numpy).

``params`` and ``grads`` are ``{name: ndarray}`` dicts (e.g. ``Network.get_params()`` keys,
prefixed by the network name when several networks share one optimizer). ``step(params,
grads)`` updates ``params`` in place. The learning rate is the attribute ``lr`` (PPO anneals
it). ``state_dict()`` / ``load_state_dict()`` give everything a checkpoint needs.

* ``Adam(lr, betas=(0.9, 0.999), eps=1e-8)`` — torch.optim.Adam: bias-corrected moments,
  ``p -= lr * m_hat / (sqrt(v_hat) + eps)``. CleanRL's PPO passes eps=1e-5.
* ``RMSprop(lr, alpha=0.99, eps=1e-8)`` — torch.optim.RMSprop (no momentum, not centered):
  ``v = alpha v + (1-alpha) g^2; p -= lr * g / (sqrt(v) + eps)``.
* ``SGD(lr, momentum=0)`` — torch.optim.SGD: ``b = momentum b + g; p -= lr * b``.
* ``clip_grad_norm(grads, max_norm)`` — torch.nn.utils.clip_grad_norm_: one global L2 norm
  over all arrays, scaled by ``max_norm / (norm + 1e-6)`` when that is < 1. Returns the norm.
"""

from __future__ import annotations

import math

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.native import enabled
from rlhls.core.registry import LazyLoad

from . import optim_native

__all__ = ["Optimizer", "Adam", "RMSprop", "SGD", "clip_grad_norm", "make_optimizer", "set_fused_step"]

# A compiled one-pass float32 step, fused(kind, p, g, m, v, constants) -> bool (False: not for these
# arrays): optim_native's, checked bit for bit against the numpy steps below (None: numpy's).
_fused = None


def set_fused_step(fn) -> None:
    global _fused
    _fused = fn


def _install() -> None:
    set_fused_step(optim_native.load(Adam, RMSprop))  # checked against this module's numpy steps


_install_once = LazyLoad(_install)


def _fused_step():
    """The fused step, built and checked once per process on the first float32 step; None under
    RLHLS_NATIVE=0."""
    _install_once()
    return _fused if enabled() else None


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    gs = list(grads.values())
    if gs and all(g.dtype == np.float32 for g in gs):  # float32: per-array dot products, summed in float32
        sq = np.float32(0.0)
        for g in gs:
            f = g.reshape(-1)
            sq += np.dot(f, f)
        norm = float(np.sqrt(sq))
    else:
        norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in gs)))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in gs:
            g *= coef
    return norm


class Optimizer:
    kind = ""

    def __init__(self, lr: float):
        self.lr = float(lr)
        self.t = 0
        self.slots: dict[str, dict[str, np.ndarray]] = {}
        self._buf: dict[np.dtype, np.ndarray] = {}  # scratch of _scratch per dtype, not state

    def _scratch(self, like: np.ndarray, dtype=np.float64):
        """Two work arrays of `dtype` shaped like `like` (views of buffers kept between steps:
        fresh multi-MB temporaries cost page faults on every step)."""
        dtype = np.dtype(dtype)
        buf = self._buf.get(dtype)
        if buf is None or buf.shape[1] < like.size:
            buf = self._buf[dtype] = np.empty((2, like.size), dtype=dtype)
        return buf[0, :like.size].reshape(like.shape), buf[1, :like.size].reshape(like.shape)

    def _slot(self, kind: str, name: str, like: np.ndarray, dtype=np.float64) -> np.ndarray:
        d = self.slots.setdefault(kind, {})
        a = d.get(name)
        if a is None:
            a = d[name] = np.zeros(like.shape, dtype=dtype)
        elif a.dtype != dtype:
            a = d[name] = a.astype(dtype)
        return a

    def step(self, params: dict, grads: dict) -> None:
        missing = sorted(set(params) - set(grads))
        if missing:
            raise RlhlsError(f"{type(self).__name__}.step: no gradient for {missing}")
        self.t += 1
        for name, p in params.items():
            g = np.asarray(grads[name])
            self._update(name, p, g if g.dtype == np.float32 else np.asarray(g, dtype=np.float64))

    def _update(self, name, p, g):
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"lr": self.lr, "t": self.t,
                "slots": {k: {n: a.copy() for n, a in d.items()} for k, d in self.slots.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.t = float(state["lr"]), int(state["t"])
        self.slots = {k: {n: np.array(a) for n, a in d.items()} for k, d in state["slots"].items()}


class Adam(Optimizer):
    kind = "adam"

    def step_size(self) -> float:
        """The bias-corrected step size of step t (the update kernel's alpha): lr sqrt(1-b2^t)/(1-b1^t)."""
        return self.lr * np.sqrt(1.0 - self.b2 ** self.t) / (1.0 - self.b1 ** self.t)

    def __init__(self, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(lr)
        self.b1, self.b2 = map(float, betas)
        self.eps = float(eps)

    def _update(self, name, p, g):
        m, v = self._slot("m", name, p, g.dtype), self._slot("v", name, p, g.dtype)
        if g.dtype == np.float32 and (f := _fused_step()) is not None and f("adam", p, g, m, v, self.constants()):
            return
        self._update_numpy(p, g, m, v)

    def constants(self) -> tuple:
        """The scalars of step t, in the fused step's order: b1, 1-b1, b2, 1-b2, sqrt(c2), eps, lr/c1."""
        return (self.b1, 1.0 - self.b1, self.b2, 1.0 - self.b2, math.sqrt(1.0 - self.b2 ** self.t), self.eps,
                self.lr / (1.0 - self.b1 ** self.t))

    def _update_numpy(self, p, g, m, v):
        a, b = self._scratch(p, g.dtype)
        # In place, the same operations in the same order as
        #   m = b1 m + (1-b1) g;  v = b2 v + ((1-b2) g) g
        #   p -= ((lr/c1) m) / (sqrt(v)/sqrt(c2) + eps)        (torch's denom)
        m *= self.b1
        m += np.multiply(g, 1.0 - self.b1, out=a)
        v *= self.b2
        np.multiply(g, 1.0 - self.b2, out=a)
        v += np.multiply(a, g, out=a)
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        np.sqrt(v, out=a)
        a /= math.sqrt(c2)  # a Python float: float32 arrays stay float32 ops
        a += self.eps
        np.multiply(m, self.lr / c1, out=b)
        b /= a
        p -= b


class RMSprop(Optimizer):
    kind = "rmsprop"

    def step_size(self) -> float:
        return self.lr

    def __init__(self, lr: float, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(lr)
        self.alpha, self.eps = float(alpha), float(eps)

    def _update(self, name, p, g):
        v = self._slot("v", name, p, g.dtype)
        if g.dtype == np.float32 and (f := _fused_step()) is not None and f("rmsprop", p, g, None, v,
                                                                            self.constants()):
            return
        self._update_numpy(p, g, v)

    def constants(self) -> tuple:
        """The fused step's scalars: alpha, 1-alpha, eps, lr."""
        return (self.alpha, 1.0 - self.alpha, self.eps, self.lr)

    def _update_numpy(self, p, g, v):
        a, b = self._scratch(p, g.dtype)
        v *= self.alpha  # v = alpha v + ((1-alpha) g) g;  p -= (lr g) / (sqrt(v) + eps), in place
        np.multiply(g, 1.0 - self.alpha, out=a)
        v += np.multiply(a, g, out=a)
        np.sqrt(v, out=a)
        a += self.eps
        np.multiply(g, self.lr, out=b)
        b /= a
        p -= b


class SGD(Optimizer):
    kind = "sgd"

    def step_size(self) -> float:
        return self.lr

    def __init__(self, lr: float, momentum: float = 0.0):
        super().__init__(lr)
        self.momentum = float(momentum)

    def _update(self, name, p, g):
        if self.momentum:
            b = self._slot("b", name, p, g.dtype)
            b *= self.momentum
            b += g  # zero-initialised, so the first step gives b = g as torch
            g = b
        p -= self.lr * g


def make_optimizer(kind: str, lr: float, **kw) -> Optimizer:
    kinds = {"adam": Adam, "rmsprop": RMSprop, "sgd": SGD}
    if kind not in kinds:
        raise RlhlsError(f"optimizer '{kind}': expected one of {', '.join(kinds)}")
    return kinds[kind](lr, **kw)
