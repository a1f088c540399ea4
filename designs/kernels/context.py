"""KernelContext: what a kernel reads to implement a node of a design's training graph.

The build and the profiler hand a kernel one ``KernelContext`` per design (and batch; the build
and the trainers also the plan's design point per node, ``points``) and ask
``kernel.node_params(node, ctx)`` / ``kernel.node_points(node, ctx, unit)``. The context gives
the node's layer and network, the design's KernelSpec for a kernel, the formats a kernel computes
in on a unit, the unit's clock and the design's hyperparameters.

Formats per unit (AP-DRL §IV-D): a unit computes in the design's format of that unit where it has
one — ``ps`` on the PS (accumulating in it too), ``pl`` / ``pl_acc`` on the PL, ``aie`` /
``aie_acc`` on the AIE (AP-DRL: fp32, fp16/fp32, bf16/fp32) — else in ``storage`` / ``acc``.
A kernel the design names computes in its KernelSpec's formats.
"""

from __future__ import annotations

import math
import re

from rlhls.core.errors import RlhlsError

from ..devices import get_device
from ..formats import parse_format

__all__ = ["KernelContext", "unit_formats", "layer_dims"]


def unit_formats(design) -> dict:
    """``{unit: (storage format, accumulator format)}`` of a design (see the module docstring)."""
    f = design.formats
    storage = f.get("storage", "fp32")
    acc = f.get("acc", storage)
    out = {"PS": (f["ps"], f["ps"]) if "ps" in f else (storage, acc)}
    for unit, key in (("PL", "pl"), ("AIE", "aie")):
        out[unit] = (f.get(key, storage), f.get(f"{key}_acc", acc))
    return {u: (parse_format(s), parse_format(a)) for u, (s, a) in out.items()}


def layer_dims(layer, batch: int) -> tuple[int, int, int]:
    """(rows, K, M) of a Dense or Conv2d layer as one GEMM: Conv2d through im2col (rows =
    batch x output positions, K = C x KH x KW, M = out channels)."""
    if layer.kind == "Conv2d":
        o, oh, ow = layer.out_shape
        kh, kw = layer.kernel
        return batch * oh * ow, layer.in_shape[0] * kh * kw, o
    return batch, layer.in_shape[0], layer.out_shape[0]


class KernelContext:
    """One design (its training graph at a batch, its networks, a device) as kernels see it."""

    def __init__(self, design, graph=None, device=None, points: dict | None = None):
        from ..graph import build_graph

        self.design = design
        # {node: design point} a plan chose (partition: Plan.point), else the design's (Design.at_points)
        self.points = dict(design.points if points is None else points)
        self.graph = graph if graph is not None else build_graph(design)
        self.batch = self.graph.batch
        self.nets = design.build_networks(0)
        self.device = get_device(device or design.device) if not hasattr(device, "units") else device
        self._layers = {f"{n.name}.{l.name}": l for n in self.nets.values() for l in n.layers}
        self._units = unit_formats(design)

    # -- the node
    def layer(self, node):
        """The Dense / Conv2d / activation layer of a layer node, else None."""
        return self._layers.get(node.layer)

    def network(self, node):
        net = node.layer.split(".", 1)[0] if "." in node.layer else None
        return self.nets.get(net)

    def net_spec(self, node):
        net = self.network(node)
        return None if net is None else self.design.net(net.name)

    def compute_layers(self, net) -> list:
        return [l for l in net.layers if l.kind != "Flatten"]

    def needs_input_grad(self, node) -> bool:
        """A backward node computes an input gradient: not the first layer of its network unless a
        node upstream needs it (a shared trunk, DDPG's actor through the critic, SAC's ``policy_grad``)."""
        net, layer = self.network(node), self.layer(node)
        if net is None or layer is None:
            return False
        first = self.compute_layers(net)[0] is layer
        return not first or any(self.graph.node(s).phase in ("bwd", "loss") for s in self.graph.successors(node.name))

    def dims(self, node) -> tuple[int, int, int]:
        return layer_dims(self.layer(node), self.batch)

    def gemm(self, node) -> tuple[int, int, int]:
        """The node's work as one GEMM ``(n_eff, k, m)``: ``k x m`` the layer's weights and
        ``n_eff = ceil(MACs / (k m))`` (forward: batch x positions; backward: about twice)."""
        layer = self.layer(node)
        if layer is None or not layer.is_mm:
            raise RlhlsError(f"design '{self.design.name}': node '{node.name}' is a matrix multiply but layer "
                             f"'{node.layer}' is not a Dense/Conv2d layer of the design")
        _, k, m = layer_dims(layer, 1)
        return max(1, math.ceil(node.flops / (2 * k * m))), k, m

    def point_pf(self, node) -> int | None:
        """The parallelism ``pf`` of the design point the plan chose for `node` (``pf16``), or None."""
        m = re.fullmatch(r"pf(\d+)", str(self.points.get(node.name, "")))
        return int(m.group(1)) if m else None

    # -- the design
    def spec(self, kernel: str, unit: str = "PL"):
        """The design's KernelSpec of `kernel` on `unit`, or None when the design does not name it."""
        return next((k for k in self.design.kernels if k.name == kernel and k.unit == unit), None)

    def unit_formats(self, unit: str):
        """(storage, acc) NumericFormats of `unit` (module docstring)."""
        return self._units[unit]

    def formats(self, kernel: str, unit: str = "PL") -> tuple[str, str]:
        """(storage, acc) texts a kernel computes in on `unit`: its KernelSpec's, else the unit's
        (an optimizer's state and weights: the design's ``master`` format where it has one)."""
        spec = self.spec(kernel, unit)
        if spec is not None:
            return str(parse_format(spec.storage)), str(parse_format(spec.acc))
        if kernel == "weight_update" and "master" in self.design.formats:
            m = str(parse_format(self.design.formats["master"]))
            return m, m
        s, a = self._units[unit]
        return str(s), str(a)

    def spec_params(self, kernel) -> dict:
        """The design's KernelSpec parameters of `kernel` (a Kernel) on its first unit, or {}."""
        spec = next((self.spec(kernel.name, u) for u in kernel.units if self.spec(kernel.name, u)), None)
        return {} if spec is None else kernel.spec_params(spec)

    def clock_mhz(self, unit: str) -> float:
        """The design's clock of `unit` on its own device, else the catalogue's."""
        u = self.device.units[unit]
        if self.device.id == get_device(self.design.device).id and unit in self.design.clocks_mhz:
            return float(self.design.clocks_mhz[unit])
        return float(u.clock_mhz.value)

    def hyperparam(self, *keys, default=None):
        """The first of `keys` the design's hyperparameters hold as a number."""
        hp = self.design.hyperparams
        return next((hp[k] for k in keys if isinstance(hp.get(k), (int, float)) and not isinstance(hp.get(k), bool)),
                    default)
