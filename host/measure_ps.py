"""PS times measured on the machine rlhls runs on (the xiltimer role of AP-DRL's profiling): each
training-graph node's PS implementation, the emulator's own PS code in the design's PS format,
timed over repeats.

``measure_ps(design, graph=None, repeats=15) -> {node: Timing}`` times the nodes the host runs
layer by layer:

* ``fwd`` / ``tfwd``: the layer's forward on a batch of the graph's size;
* ``bwd``: its backward (input gradient unless it is its network's first layer, and the weight
  gradient), after one untimed forward;
* ``upd``: one step of the network's optimizer on the layer's parameters (a network without one,
  TRPO's policy, adds a step to its weights: timed as an SGD step);
* ``soft``: the Polyak step ``t = tau p + (1 - tau) t`` on the layer's parameters.

Format: a PS in fp32 runs the float32 path of the emulator (``host.mixed``: float32 tensors and
BLAS, as Arm library code does); any other PS format runs the layers' numpy model in
``Precision(storage, acc)`` of the PS. Losses, returns, GAE, CG and line searches are the
algorithms' own code, not separable per node: those nodes stay on the model (``skipped``).

Each node: ``warmup`` untimed calls, then ``repeats`` timed ones (``time.perf_counter_ns``); the
median is the node's latency, the spread is reported as min, max and the interquartile range. On
the board's Arm cores the same command times the real PS; elsewhere it times this machine.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FloatFormat
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext
from rlhls.designs.network import Precision

from .mixed import _ps32_backward, _ps32_forward
from .optim import make_optimizer

__all__ = ["Timing", "measure_ps", "measured_rows", "TIMED_PHASES"]

TIMED_PHASES = ("fwd", "tfwd", "bwd", "upd", "soft")


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    max_us: float
    iqr_us: float
    repeats: int

    def to_json(self) -> dict:
        return asdict(self)


def _time(fn, repeats: int, warmup: int) -> Timing:
    for _ in range(warmup):
        fn()
    ts = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        ts[i] = (time.perf_counter_ns() - t0) / 1e3
    q1, med, q3 = np.percentile(ts, [25, 50, 75])
    return Timing(float(med), float(ts.min()), float(ts.max()), float(q3 - q1), repeats)


def measure_ps(design, graph=None, *, repeats: int = 15, warmup: int = 2, seed: int = 0,
               progress=None) -> tuple[dict[str, Timing], list[str]]:
    """``({node: Timing}, [skipped nodes])`` (module docstring); `progress(text)` hears of each node."""
    if repeats < 1:
        raise RlhlsError(f"--repeats {repeats}: expected a whole number >= 1")
    graph = graph if graph is not None else build_graph(design)
    ctx = KernelContext(design, graph)
    storage, acc = ctx.unit_formats("PS")
    fp32 = isinstance(storage, FloatFormat) and (storage.exp_bits, storage.man_bits) == (8, 23)
    prec = Precision(storage, acc)
    rng = np.random.default_rng(seed)
    out, skipped = {}, []
    for node in graph.nodes:
        layer = ctx.layer(node)
        if node.phase not in TIMED_PHASES or layer is None:
            skipped.append(node.name)
            continue
        batch = graph.batch
        net = ctx.network(node)
        first = net is not None and net.layers and net.layers[0] is layer
        dtype = np.float32 if fp32 else np.float64
        x = rng.standard_normal((batch, *layer.in_shape)).astype(dtype)
        dy = rng.standard_normal((batch, *layer.out_shape)).astype(dtype)
        if node.phase in ("fwd", "tfwd"):
            fn = (lambda l=layer, x=x: _ps32_forward(l, x, False)) if fp32 else \
                 (lambda l=layer, x=x: l.forward(x, prec))
        elif node.phase == "bwd":
            (_ps32_forward(layer, x, False) if fp32 else layer.forward(x, prec))
            fn = (lambda l=layer, dy=dy, f=first: _ps32_backward(l, dy, False, not f, True)) if fp32 else \
                 (lambda l=layer, dy=dy, f=first: l.backward(dy, prec, need_input_grad=not f))
        elif not layer.params:
            skipped.append(node.name)
            continue
        elif node.phase == "upd":
            spec = ctx.net_spec(node)
            kind = getattr(spec, "optimizer", None) or "adam"
            # no optimizer (TRPO's policy): the update adds a step to the weights, as SGD's does
            opt = make_optimizer(kind if kind in ("adam", "rmsprop", "sgd") else "sgd", 1e-4)
            params = {k: (v.astype(np.float32) if fp32 else v.copy()) for k, v in layer.params.items()}
            grads = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in params.items()}
            fn = lambda o=opt, p=params, g=grads: o.step(p, g)  # noqa: E731
        else:  # soft: Polyak averaging of the target copy
            params = {k: (v.astype(np.float32) if fp32 else v.copy()) for k, v in layer.params.items()}
            target = {k: v.copy() for k, v in params.items()}
            tau = 0.005

            def fn(p=params, t=target, tau=tau):
                for k, v in p.items():
                    t[k] *= 1 - tau
                    t[k] += tau * v
        if progress is not None:
            progress(f"PS {node.name}: {warmup} + {repeats} calls")
        out[node.name] = _time(fn, repeats, warmup)
    return out, skipped


def measured_rows(rows, timings: dict):
    """`rows` with each timed node's PS row at the measured median (source ``measured``)."""
    from rlhls.partition.profile_io import ProfileRow

    new = []
    for r in rows:
        t = timings.get(r.node)
        if r.unit == "PS" and t is not None:
            r = ProfileRow(node=r.node, unit="PS", latency_us=t.median_us, point=r.point, resources=dict(r.resources),
                           cycles=None, flops=r.flops, source="measured", runs=r.runs)
        new.append(r)
    return new
