"""First-order optimizers on numpy parameter dicts (PyTorch semantics) and grad-norm clipping.

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

import numpy as np

from rlhls.designs.errors import RlhlsError

__all__ = ["Optimizer", "Adam", "RMSprop", "SGD", "clip_grad_norm", "make_optimizer"]


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return norm


class Optimizer:
    kind = ""

    def __init__(self, lr: float):
        self.lr = float(lr)
        self.t = 0
        self.slots: dict[str, dict[str, np.ndarray]] = {}
        self._buf = None  # scratch of _scratch, not state

    def _scratch(self, like: np.ndarray):
        """Two float64 work arrays shaped like `like` (views of buffers kept between steps: fresh
        multi-MB temporaries cost page faults on every step)."""
        buf = self._buf
        if buf is None or buf.shape[1] < like.size:
            buf = self._buf = np.empty((2, like.size))
        return buf[0, :like.size].reshape(like.shape), buf[1, :like.size].reshape(like.shape)

    def _slot(self, kind: str, name: str, like: np.ndarray) -> np.ndarray:
        d = self.slots.setdefault(kind, {})
        if name not in d:
            d[name] = np.zeros_like(like, dtype=np.float64)
        return d[name]

    def step(self, params: dict, grads: dict) -> None:
        missing = sorted(set(params) - set(grads))
        if missing:
            raise RlhlsError(f"{type(self).__name__}.step: no gradient for {missing}")
        self.t += 1
        for name, p in params.items():
            self._update(name, p, np.asarray(grads[name], dtype=np.float64))

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
        m, v = self._slot("m", name, p), self._slot("v", name, p)
        a, b = self._scratch(p)
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
        a /= np.sqrt(c2)
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
        v = self._slot("v", name, p)
        a, b = self._scratch(p)
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
            b = self._slot("b", name, p)
            b *= self.momentum
            b += g  # zero-initialised, so the first step gives b = g as torch
            g = b
        p -= self.lr * g


def make_optimizer(kind: str, lr: float, **kw) -> Optimizer:
    kinds = {"adam": Adam, "rmsprop": RMSprop, "sgd": SGD}
    if kind not in kinds:
        raise RlhlsError(f"optimizer '{kind}': expected one of {', '.join(kinds)}")
    return kinds[kind](lr, **kw)
