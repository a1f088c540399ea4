"""``host/optim.py``'s float32 Adam and RMSprop steps (the PS's optimizer, torch's formulas) as one
compiled pass each instead of ~12 numpy passes (~3x; a converged layer's subnormal moments no longer
cost 10x). ``load()`` builds the library once (``rlhls.core.native.build_library``), checks it bit for
bit against the numpy steps (``check``: three steps, gradients from subnormal to near overflow, zeros,
Inf, NaN; moments down to subnormals; parameters float64 and float32) and returns the step, or None
(no compiler, a failed build or check, ``RLHLS_NATIVE=0``): the numpy steps then run, the same bits.
The first float32 step of an optimizer loads it (``optim._fused_step``).
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from rlhls.core.native import build_library, enabled

__all__ = ["SOURCE", "load", "check"]

log = logging.getLogger(__name__)

# every operation in binary32 in host/optim.py's order (its in-place numpy sequence), the constants as
# numpy rounds them to float32; p of type P (float64 holding FP32 values: the difference in float64, as
# numpy's p -= u; or float32)
SOURCE = r"""
template <typename P>
static void adam_f32(P *p, const float *g, float *m, float *v, long n, float b1, float c1, float b2, float c2,
                     float rs, float eps, float lr) {
  for (long i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] * b1 + gi * c1;
    const float vi = v[i] * b2 + (gi * c2) * gi;
    const float u = (mi * lr) / (__builtin_sqrtf(vi) / rs + eps);
    p[i] = p[i] - (P)u;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename P>
static void rmsprop_f32(P *p, const float *g, float *v, long n, float alpha, float c, float eps, float lr) {
  for (long i = 0; i < n; ++i) {
    const float gi = g[i];
    const float vi = v[i] * alpha + (gi * c) * gi;
    const float u = (gi * lr) / (__builtin_sqrtf(vi) + eps);
    p[i] = p[i] - (P)u;
    v[i] = vi;
  }
}

extern "C" void rlhls_adam_f32_p64(double *p, const float *g, float *m, float *v, long n, float b1, float c1,
                                   float b2, float c2, float rs, float eps, float lr) {
  adam_f32(p, g, m, v, n, b1, c1, b2, c2, rs, eps, lr);
}
extern "C" void rlhls_adam_f32_p32(float *p, const float *g, float *m, float *v, long n, float b1, float c1,
                                   float b2, float c2, float rs, float eps, float lr) {
  adam_f32(p, g, m, v, n, b1, c1, b2, c2, rs, eps, lr);
}
extern "C" void rlhls_rmsprop_f32_p64(double *p, const float *g, float *v, long n, float alpha, float c, float eps,
                                      float lr) {
  rmsprop_f32(p, g, v, n, alpha, c, eps, lr);
}
extern "C" void rlhls_rmsprop_f32_p32(float *p, const float *g, float *v, long n, float alpha, float c, float eps,
                                      float lr) {
  rmsprop_f32(p, g, v, n, alpha, c, eps, lr);
}
"""


def _wrap(lib):
    fns = {}
    for kind, nk in (("adam", 7), ("rmsprop", 4)):
        for dtype, tag in ((np.float64, "p64"), (np.float32, "p32")):
            f = getattr(lib, f"rlhls_{kind}_f32_{tag}")
            f.argtypes = [ctypes.c_void_p] * (4 if kind == "adam" else 3) + [ctypes.c_long] + [ctypes.c_float] * nk
            f.restype = None
            fns[kind, np.dtype(dtype)] = f

    def fused(kind, p, g, m, v, consts) -> bool:
        """host/optim.py's float32 step in place: float32 C-contiguous g / m / v and p (float64 or
        float32) of one shape; False (nothing done) otherwise."""
        f = fns.get((kind, p.dtype))
        state = [a for a in (m, v) if a is not None]
        if (f is None or g.dtype != np.float32 or any(a.dtype != np.float32 for a in state)
                or any(a.shape != g.shape for a in (p, *state))
                or not all(a.flags.c_contiguous for a in (p, g, *state))):
            return False
        f(p.ctypes.data, g.ctypes.data, *[a.ctypes.data for a in state], g.size, *consts)
        return True

    return fused


def check(fused, adam, rmsprop) -> bool:
    """Bit for bit host/optim.py's numpy Adam and RMSprop steps (three steps; gradients from
    subnormal to near overflow, zeros, Inf, NaN; moments down to subnormals; p float64 and float32)."""
    rng = np.random.default_rng(11)
    n = 1003  # a vector loop's remainder too
    for make in (lambda: adam(1e-3), lambda: adam(3e-4, (0.8, 0.99), 1e-5), lambda: rmsprop(7e-4)):
        for dtype in (np.float64, np.float32):
            ours, ref = make(), make()
            p0 = rng.standard_normal(n).astype(np.float32).astype(dtype)
            pa, pb = p0.copy(), p0.copy()
            names = ("m", "v") if ours.kind == "adam" else ("v",)
            # moments down to FP32's subnormals
            start = {k: np.abs(rng.standard_normal(n) * np.exp2(rng.integers(-150, 0, n))).astype(np.float32)
                     for k in names}
            for opt, p in ((ours, pa), (ref, pb)):
                for k in names:
                    opt._slot(k, "w", p, np.float32)[...] = start[k]
            for step in range(3):
                g = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 60, n))).astype(np.float32)
                g[:4] = (0.0, np.inf, -np.inf, np.nan) if step == 2 else 0.0
                for opt, p in ((ours, pa), (ref, pb)):
                    opt.t += 1
                    m, v = opt.slots.get("m", {}).get("w"), opt.slots["v"]["w"]
                    if opt is ours:
                        if not fused(opt.kind, p, g, m, v, opt.constants()):
                            return False
                    else:
                        with np.errstate(all="ignore"):
                            opt._update_numpy(p, g, *([m] if m is not None else []), v)
            for a, b in [(pa, pb)] + [(ours.slots[k]["w"], ref.slots[k]["w"]) for k in ours.slots]:
                nan = np.isnan(a)
                if not (np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint8),
                                                                              b[~nan].view(np.uint8))):
                    return False
    return True


def load(adam, rmsprop):
    """The fused step ``fused(kind, p, g, m, v, constants) -> bool`` checked against the numpy steps of
    the optimizer classes `adam` and `rmsprop` (host/optim.py's), or None (see the module docstring)."""
    if not enabled():
        return None
    try:
        fused = _wrap(ctypes.CDLL(str(build_library("optim", SOURCE))))
    except Exception as e:  # noqa: BLE001 -- any build / load problem: the numpy steps do the same job
        log.debug("native optimizer step unavailable, using numpy: %s", e)
        return None
    if not check(fused, adam, rmsprop):
        log.debug("native optimizer step: self-check failed, using numpy")
        return None
    return fused
