"""Action distributions for policy-gradient methods, with gradients w.r.t. the network outputs.

The networks of rlhls are plain numpy (``designs.network``): there is no autograd, so every
distribution here returns, besides log-probabilities and entropies, their derivatives with
respect to what the policy network produced. The caller scales them by the loss weights and
feeds them to ``Network.backward``.

* ``DiagGaussian(mean, log_std)`` — continuous actions (CleanRL ``ppo_continuous_action``):
  ``mean`` (N, A) from the policy network, ``log_std`` (A,) a state-independent parameter.
  ``log_prob(a)`` sums over the action dimensions; ``d_log_prob(a)`` gives
  ``(d/dmean (N, A), d/dlog_std (N, A))`` per sample (sum the second over the batch for the
  parameter); ``entropy()`` per sample and ``d_entropy_log_std`` = 1 per dimension (it does not
  depend on the mean).
* ``Categorical(probs=...)`` — discrete actions from a softmax-output network (the designs'
  policy nets end in ``Softmax``): gradients are w.r.t. the probabilities and ``Network.backward``
  carries them through the softmax. ``Categorical(logits=...)`` for networks without a softmax:
  gradients w.r.t. the logits. Probabilities are floored at ``PROB_FLOOR`` inside logs.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DiagGaussian", "Categorical", "PROB_FLOOR"]

LOG_2PI = math.log(2.0 * math.pi)
PROB_FLOOR = 1e-12  # keeps log(p) finite when a softmax saturates


class DiagGaussian:
    """Diagonal Gaussian N(mean, exp(log_std)^2) with a state-independent log-std vector."""

    def __init__(self, mean, log_std):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.log_std = np.broadcast_to(np.asarray(log_std, dtype=np.float64), self.mean.shape[-1:])
        self.std = np.exp(self.log_std)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return self.mean + self.std * rng.standard_normal(self.mean.shape)

    def mode(self) -> np.ndarray:
        """The deterministic action (SB3's ``deterministic=True``): the mean."""
        return self.mean

    def log_prob(self, a) -> np.ndarray:
        z = (np.asarray(a, dtype=np.float64) - self.mean) / self.std
        return np.sum(-0.5 * z * z - self.log_std - 0.5 * LOG_2PI, axis=-1)

    def d_log_prob(self, a):
        """(d log_prob / d mean, d log_prob / d log_std), both (N, A)."""
        diff = np.asarray(a, dtype=np.float64) - self.mean
        var = self.std * self.std
        return diff / var, diff * diff / var - 1.0

    def entropy(self) -> np.ndarray:
        per_dim = 0.5 + 0.5 * LOG_2PI + self.log_std
        return np.full(self.mean.shape[:-1], float(np.sum(per_dim)))

    def d_entropy_log_std(self) -> np.ndarray:
        """d entropy / d log_std per sample: ones (A,)."""
        return np.ones(self.mean.shape[-1:])


class Categorical:
    """Categorical over the last axis, from probabilities (softmax output) or logits."""

    def __init__(self, probs=None, logits=None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: give exactly one of probs, logits")
        self.from_logits = logits is not None
        if self.from_logits:
            z = np.asarray(logits, dtype=np.float64)
            z = z - z.max(axis=-1, keepdims=True)
            e = np.exp(z)
            self.probs = e / e.sum(axis=-1, keepdims=True)
        else:
            self.probs = np.asarray(probs, dtype=np.float64)
        self._logp = np.log(np.maximum(self.probs, PROB_FLOOR))

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        # inverse-CDF sampling, one uniform per row
        cdf = np.cumsum(self.probs, axis=-1)
        u = rng.random(self.probs.shape[:-1] + (1,)) * cdf[..., -1:]
        return np.minimum((u > cdf).sum(axis=-1), self.probs.shape[-1] - 1).astype(np.int64)

    def mode(self) -> np.ndarray:
        """The deterministic action (SB3's ``deterministic=True``): the most probable one."""
        return np.argmax(self.probs, axis=-1).astype(np.int64)

    def log_prob(self, a) -> np.ndarray:
        a = np.asarray(a, dtype=np.int64)
        return np.take_along_axis(self._logp, a[..., None], axis=-1)[..., 0]

    def d_log_prob(self, a) -> np.ndarray:
        """d log_prob / d (probs or logits), (N, K)."""
        a = np.asarray(a, dtype=np.int64)
        onehot = np.zeros_like(self.probs)
        np.put_along_axis(onehot, a[..., None], 1.0, axis=-1)
        if self.from_logits:
            return onehot - self.probs
        return onehot / np.maximum(self.probs, PROB_FLOOR)

    def entropy(self) -> np.ndarray:
        return -np.sum(self.probs * self._logp, axis=-1)

    def d_entropy(self) -> np.ndarray:
        """d entropy / d (probs or logits), (N, K)."""
        if self.from_logits:
            h = self.entropy()[..., None]
            return -self.probs * (self._logp + h)
        return -(self._logp + 1.0)


def policy_distribution(out, log_std, softmax_out: bool):
    """The policy's action distribution from its network output: a Gaussian when there is a
    log-std vector (continuous actions), else a categorical over probabilities or logits."""
    if log_std is not None:
        return DiagGaussian(out, log_std)
    return Categorical(probs=out) if softmax_out else Categorical(logits=out)


def env_action(a, space: dict):
    """What the environment is stepped with: continuous actions clipped to the box (as CleanRL's
    ClipAction) in float32; discrete actions as sampled."""
    if space.get("low") is not None:
        return np.clip(a, space["low"], space["high"]).astype(np.float32)
    return a
