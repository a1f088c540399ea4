"""A kernel of your own: the dense forward pass with its MAC lanes double-pumped (two multiply-
accumulates per lane and cycle), registered from your code and named by a design.

    python docs/examples/my_kernel.py
"""

import dataclasses

from rlhls.designs import KernelSpec
from rlhls.designs.kernels import get_kernel, register_kernel
from rlhls.designs.kernels.dense import DenseForward
from rlhls.designs.registry import get_design


def double_pumped(c: dict) -> dict:
    """A cost of dense_forward with two MACs per lane and cycle (an assumption: say so)."""
    c = dict(c)
    if c.get("cycles"):
        c["cycles"] = (c["cycles"] + 1) // 2
    c["latency_us"] = c["latency_us"] / 2
    c["source"] = "assumed: half the time of dense_forward (double-pumped DSPs); " + c.get("source", "")
    return c


class DoublePumpedDense(DenseForward):
    # the C++ template, the parameters, the numpy model and the graph nodes it implements are
    # DenseForward's; the name and the cost are its own
    name = "dense_forward_2x"
    summary = "dense forward pass, MAC lanes double-pumped (2 MACs per lane and cycle)"
    generic = False                 # only where a design names it ...
    replaces = ("dense_forward",)   # ... and there instead of the generic dense forward

    def cost(self, p, unit="PL", device=None):  # one instance (rlhls kernel NAME)
        return double_pumped(super().cost(p, unit, device))

    def node_points(self, node, ctx, unit):  # the profile's rows: every design point of a node
        return [(point, double_pumped(c)) for point, c in super().node_points(node, ctx, unit)]


register_kernel(DoublePumpedDense())

# its cost beside the generic kernel's, at the same parameters
p = get_kernel("dense_forward").resolve({"n": 128, "k": 4, "m": 64, "pf": 4})
for name in ("dense_forward", "dense_forward_2x"):
    c = get_kernel(name).cost(p)
    print(f"{name:18} {c['cycles']:6d} cycles {c['latency_us']:7.2f} us  dsp {c['resources']['dsp']:g}")

# a design that names it: the profile costs its forward nodes with it
base = get_design("apdrl-dqn-cartpole")
spec = next(s for s in base.kernels if s.name == "dense_forward")
mine = dataclasses.replace(base, name="cartpole-2x", kernels=tuple(
    dataclasses.replace(s, name="dense_forward_2x") if s is spec else s for s in base.kernels))

from rlhls.partition.design_plan import partition_design  # noqa: E402
from rlhls.partition.profile import profile_design  # noqa: E402

for design in (base, mine):
    rows = [r for r in profile_design(design) if r.node == "q.fc2.fwd" and r.unit == "PL"]
    best = min(rows, key=lambda r: r.latency_us)
    plan = partition_design(design)
    print(f"{design.name:20} q.fc2.fwd on the PL: fastest point {best.point} at {best.latency_us:.2f} us; "
          f"the plan's step {plan.makespan_us:.2f} us ({plan.status})")
