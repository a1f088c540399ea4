"""Optimizer weight update (SGD, Adam, RMSprop) over a flat parameter vector of n elements.

Formats: S = ``storage`` (weights w and gradients g), A = ``acc`` (optimizer state m, v, every
intermediate, and the hyperparameter constants). Each operation below is ONE rounding to the
format named (A(.) / S(.)), computed as ``base.op`` / ``rl::`` in vitis/include/rlhls_types.h:
fixed point from the exact product / sum (ap_fixed assignment), floats from the float64 result
with one RNE; sqrt and division from the correctly rounded float64 result for every format.

Constants (compile-time, each rounded once to A from float64):
  B1 = A(beta1), C1 = A(1 - beta1), B2 = A(beta2), C2 = A(1 - beta2),
  RHO = A(rho), CR = A(1 - rho), EPS = A(eps)       (lr and eps must not round to 0)
The step size ``alpha`` comes at run time as a one-element array in A, so one component serves
a whole run whose learning rate is annealed: SGD and RMSprop take alpha = A(lr) of the step,
Adam the bias-corrected step size below. ``lr`` is the nominal rate (the testbench's alpha).

SGD      inputs w, g, alpha             outputs w_new
    t  = A(alpha * g);   w_new = S(A(w - t))
Adam     inputs w, g, m, v, alpha       outputs w_new, m_new, v_new
    m_new = A(A(B1 * m) + A(C1 * g))
    v_new = A(A(B2 * v) + A(A(C2 * g) * g))
    d     = A(A(sqrt(v_new)) + EPS)
    u     = A(A(alpha * m_new) / d)
    w_new = S(A(w - u))
    alpha is the bias-corrected step size of step t >= 1, computed on the host in float64 and
    passed as a one-element array in A: alpha = A(lr * sqrt(1 - beta2**t) / (1 - beta1**t))
    (``adam_alpha``). EPS is then Kingma & Ba's "epsilon hat" (added to sqrt(v), not sqrt(v_hat)).
RMSprop  inputs w, g, v, alpha          outputs w_new, v_new
    v_new = A(A(RHO * v) + A(A(CR * g) * g))
    d     = A(A(sqrt(v_new)) + EPS)
    w_new = S(A(w - A(A(alpha * g) / d)))

Runtime length: parameter ``n`` is N_MAX; the HLS top takes the element count as the
``s_axilite`` scalar ``n`` (1 <= n <= N_MAX), so one component updates any slice of up to
N_MAX parameters and the testbench runs ``tb_rows`` (64) elements whatever the layer size.

Elements are independent: ``pf`` elements per cycle (UNROLL / cyclic ARRAY_PARTITION factor,
pf <= n), ``ii`` the PIPELINE II of the element loop; neither changes any bit.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..formats import NumericFormat, parse_format
from .base import Array, Kernel, Param, check_formats, finish_cost, get_dev, op

__all__ = ["WeightUpdate", "adam_alpha", "OPTIMIZER_INPUTS"]

OPTIMIZER_INPUTS = {"sgd": ("w", "g", "alpha"), "adam": ("w", "g", "m", "v", "alpha"),
                    "rmsprop": ("w", "g", "v", "alpha")}
OPTIMIZER_OUTPUTS = {"sgd": ("w_new",), "adam": ("w_new", "m_new", "v_new"), "rmsprop": ("w_new", "v_new")}
OPS_PER_ELEMENT = {"sgd": 2, "adam": 12, "rmsprop": 9}  # multiplies, adds, sqrt, divide as counted above


def adam_alpha(p: dict, t: int) -> float:
    """Bias-corrected Adam step size for step t >= 1 (float64; the kernel rounds it to acc)."""
    return p["lr"] * math.sqrt(1.0 - p["beta2"] ** t) / (1.0 - p["beta1"] ** t)


class WeightUpdate(Kernel):
    name = "weight_update"
    summary = "optimizer step w <- w - update(g) for sgd | adam | rmsprop, state in acc"
    source = "002 (DDPG, Adam), 003 (AP-DRL: SGD/Adam/RMSprop weight update on PS/PL), 004 (A2C, RMSprop)"
    params = (
        Param("n", "int", 64, "maximum number of parameters N_MAX (the top takes n <= N_MAX at run time)", min=1),
        Param("optimizer", "str", "adam", "update rule", choices=("sgd", "adam", "rmsprop")),
        Param("storage", "format", "fixed<16,6,RND,SAT>", "format of w and g"),
        Param("acc", "format", "fixed<32,8,RND,SAT>", "format of the state (m, v), intermediates, constants"),
        Param("lr", "float", 1e-3, "learning rate", min=0.0),
        Param("beta1", "float", 0.9, "Adam first-moment decay", min=0.0),
        Param("beta2", "float", 0.999, "Adam second-moment decay", min=0.0),
        Param("rho", "float", 0.99, "RMSprop decay", min=0.0),
        Param("eps", "float", 1e-5, "denominator epsilon (Adam, RMSprop)", min=0.0),
        Param("pf", "int", 1, "elements updated per cycle (UNROLL / partition factor)", min=1),
        Param("ii", "int", 1, "PIPELINE initiation interval of the element loop", min=1),
    )
    inputs = ("w", "g", "m", "v", "alpha")  # the subset the optimizer needs: OPTIMIZER_INPUTS
    outputs = ("w_new", "m_new", "v_new")
    template = "weight_update.cpp.j2"
    rows_param = "n"
    fast_fp32 = True  # fp32 formats: binary32 numpy arithmetic (the same bits as op by op, faster)
    implements = ("upd",)
    generic = True
    component_suffix = "upd"

    def node_params(self, node, ctx):
        layer, spec = ctx.layer(node), ctx.net_spec(node)
        opt = spec.optimizer if spec else "adam"
        storage, acc = ctx.formats(self.name, "PL")
        hp = ctx.design.hyperparams
        # the run's optimizer and its constants where the design's hyperparameters hold them (a bound
        # design: Design.bind), as the trainers' optimizers (host/optim.py) have them
        opt = hp["optimizer"] if hp.get("optimizer") in ("sgd", "adam", "rmsprop") else opt
        p = {"n": layer.n_params, "optimizer": "sgd" if opt == "none" else opt, "storage": storage, "acc": acc}
        lr = ctx.hyperparam(f"{spec.name}_lr" if spec else "", "learning_rate", "lr")
        if lr is not None:
            p["lr"] = lr
        if p["optimizer"] == "adam" and ctx.hyperparam("adam_eps") is not None:
            p["eps"] = ctx.hyperparam("adam_eps")
        elif p["optimizer"] == "rmsprop" and "optimizer" in hp:
            p.update(rho=ctx.hyperparam("rmsprop_alpha", default=0.99),
                     eps=ctx.hyperparam("rmsprop_eps", default=1e-8))
        p.update({k: v for k, v in ctx.spec_params(self).items() if k in ("pf", "ii")})
        if ctx.point_pf(node):  # the plan's design point (elements per cycle)
            p["pf"] = min(ctx.point_pf(node), p["n"])
        return p

    def node_points(self, node, ctx, unit):
        """The optimizer step over the layer's parameters at ``pf`` = 1, 4, 16, 64 elements per cycle."""
        from . import cost as C

        p = self.resolve(self.node_params(node, ctx))
        acc = self.formats(p)["acc"]
        clock = ctx.clock_mhz("PL")
        return [(f"pf{pf}", C.pl_elementwise(p["n"], OPS_PER_ELEMENT[p["optimizer"]], acc, ctx.device, pf=pf,
                                             clock_mhz=clock))
                for pf in (1, 4, 16, 64) if pf == 1 or pf <= p["n"]]

    def tb_rows(self, p, tb_rows=None):  # elements are cheap: test more of them than dense rows
        return super().tb_rows(p, 64 if tb_rows is None else tb_rows)

    def validate(self, p):
        fm = check_formats(self.name, p)
        self.check_pf(p, "n")
        for key in ("beta1", "beta2", "rho"):
            if not p[key] < 1.0:
                raise self._err(f"parameter {key!r} = {p[key]!r} must be < 1")
        acc = fm["acc"]
        need = ["lr"] if p["optimizer"] == "sgd" else (["eps"] if p["optimizer"] == "adam" else ["lr", "eps"])
        for key in need:
            if not float(acc.quantize(p[key])) > 0:
                raise self._err(f"parameter {key!r} = {p[key]!r} rounds to {float(acc.quantize(p[key]))!r} "
                                f"in acc format {str(acc)!r} (expected a positive value; widen acc)")

    def constants(self, p) -> dict[str, float]:
        return dict(_constants(p["acc"], p["beta1"], p["beta2"], p["rho"], p["eps"]))

    def cpp_constants(self, p):
        return {k: ("acc", v) for k, v in self.constants(p).items()}

    def arrays(self, p):
        n = p["n"]
        fmt_of = {"w": "storage", "g": "storage", "m": "acc", "v": "acc", "alpha": "acc"}
        ins = [Array(x, (1,), fmt_of[x]) if x == "alpha" else Array(x, (n,), fmt_of[x], True)
               for x in OPTIMIZER_INPUTS[p["optimizer"]]]
        outs = [Array(x, (n,), fmt_of[x[0]], True) for x in OPTIMIZER_OUTPUTS[p["optimizer"]]]
        return ins, outs

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        c = self.constants(p)
        if self.fast_fp32 and p["storage"] == p["acc"] == "fp32":
            return self._model_fp32(p, a, c)  # its cast to binary32 is the inputs' rounding to fp32
        a = self.quantize_inputs(p, a)
        fm = self.formats(p)
        S, A = fm["storage"], fm["acc"]
        w, g = a["w"], a["g"]
        out = {}
        step = a["alpha"][0]
        if p["optimizer"] == "sgd":
            t = op(A, "mul", step, A, g, S)
            out["w_new"] = op(S, "cast", op(A, "sub", w, S, t, A), A)
            return out
        if p["optimizer"] == "adam":
            m1 = op(A, "add", op(A, "mul", c["B1"], A, a["m"], A), A, op(A, "mul", c["C1"], A, g, S), A)
            v1 = _second_moment(A, S, c["B2"], c["C2"], a["v"], g)
            d = op(A, "add", op(A, "sqrt", v1, A), A, c["EPS"], A)
            u = op(A, "div", op(A, "mul", step, A, m1, A), A, d, A)
            out["m_new"] = m1
        else:
            v1 = _second_moment(A, S, c["RHO"], c["CR"], a["v"], g)
            d = op(A, "add", op(A, "sqrt", v1, A), A, c["EPS"], A)
            u = op(A, "div", op(A, "mul", step, A, g, S), A, d, A)
        out["w_new"] = op(S, "cast", op(A, "sub", w, S, u, A), A)
        out["v_new"] = v1
        return {k: out[k] for k in OPTIMIZER_OUTPUTS[p["optimizer"]]}

    @staticmethod
    def _model_fp32(p, a, c):
        """All formats fp32: every operation in IEEE binary32, which is the same single rounding
        of the exact (or correctly rounded float64) result that ``op`` computes — binary64 has
        more than 2 x 24 + 2 bits, so rounding twice never differs from rounding once."""
        f = np.float32
        w, g, step = a["w"].astype(f), a["g"].astype(f), f(a["alpha"][0])
        k = {name: f(v) for name, v in c.items()}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if p["optimizer"] == "sgd":
                return {"w_new": (w - step * g).astype(np.float64)}
            if p["optimizer"] == "adam":
                m1 = k["B1"] * a["m"].astype(f) + k["C1"] * g
                v1 = k["B2"] * a["v"].astype(f) + (k["C2"] * g) * g
                u = (step * m1) / (np.sqrt(v1) + k["EPS"])
                return {"w_new": (w - u).astype(np.float64), "m_new": m1.astype(np.float64),
                        "v_new": v1.astype(np.float64)}
            v1 = k["RHO"] * a["v"].astype(f) + (k["CR"] * g) * g
            u = (step * g) / (np.sqrt(v1) + k["EPS"])
            return {"w_new": (w - u).astype(np.float64), "v_new": v1.astype(np.float64)}

    def random_inputs(self, p, rng, rows: int | None = None, *, t: int | None = None):
        fm = self.formats(p)
        S, A = fm["storage"], fm["acc"]
        n = rows or p["n"]
        arrs = {"w": S.quantize(rng.standard_normal(n) * 0.5), "g": S.quantize(rng.standard_normal(n) * 0.5),
                "m": A.quantize(rng.standard_normal(n) * 0.05), "v": A.quantize(rng.random(n) * 0.05),
                "alpha": A.quantize(np.array([adam_alpha(p, t if t is not None else int(rng.integers(1, 20)))
                                              if p["optimizer"] == "adam" else p["lr"]]))}
        return {k: arrs[k] for k in OPTIMIZER_INPUTS[p["optimizer"]]}

    def cost(self, p, unit="PL", device=None):
        from . import cost as C
        dev = get_dev(device)
        fm = self.formats(p)
        ins, outs = self.arrays(p)
        nbytes = sum(a.size * int(np.ceil(fm[a.fmt_key].bits / 8)) for a in ins + outs)
        ops = OPS_PER_ELEMENT[p["optimizer"]]
        if unit == "PL":
            c = C.pl_elementwise(p["n"], ops, fm["acc"], dev, pf=p["pf"], ii=p["ii"])
        elif unit == "PS":
            c = C.ps_cost(float(ops * p["n"]), dev, nbytes=nbytes)
        else:
            raise self._err(f"unit {unit!r} has no cost model for an elementwise update (expected PS or PL)")
        return finish_cost(self.name, c, elements=p["n"], memory_bytes=nbytes)


@functools.lru_cache(maxsize=256)
def _constants(acc: str, beta1: float, beta2: float, rho: float, eps: float) -> tuple:
    """The compile-time constants, each rounded once to the accumulator format (cached: every
    training step asks for them)."""
    a = parse_format(acc)
    q = lambda v: float(a.quantize(v))  # noqa: E731
    return (("B1", q(beta1)), ("C1", q(1.0 - beta1)), ("B2", q(beta2)), ("C2", q(1.0 - beta2)), ("RHO", q(rho)),
            ("CR", q(1.0 - rho)), ("EPS", q(eps)))


def _second_moment(A: NumericFormat, S: NumericFormat, decay, one_minus, v, g):
    """A(A(decay * v) + A(A(one_minus * g) * g))."""
    t = op(A, "mul", op(A, "mul", one_minus, A, g, S), A, g, S)
    return op(A, "add", op(A, "mul", decay, A, v, A), A, t, A)
