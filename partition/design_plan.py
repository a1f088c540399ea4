"""One call from a design to its plan: profile on the device, the device's capacities and links,
the ILP. What ``rlhls run``, ``rlhls.Flow``, mixed-precision training and the experiments use."""

from __future__ import annotations

from rlhls.designs.devices import get_device
from rlhls.designs.graph import build_graph

from .ilp import solve
from .profile import device_capacity, device_links, profile_design

__all__ = ["device_inputs", "partition_design"]


def device_inputs(device) -> tuple[dict, dict]:
    """(capacity, links) of a catalogue device in the partitioner's terms."""
    return dict(device_capacity(device)), dict(device_links(device))


def partition_design(design, device=None, batch: int | None = None, *, graph=None, rows=None,
                     solver: str = "cbc", time_limit: float | None = 60.0):
    """The Plan of `design` (a Design) on `device` (default: the design's) at `batch` (default: the
    design's). `graph` / `rows`: the training graph and profile when the caller has them."""
    dev = get_device(device or design.device)
    graph = graph if graph is not None else build_graph(design, batch)
    rows = rows if rows is not None else profile_design(design, dev, graph=graph)
    capacity, links = device_inputs(dev)
    cores = capacity.get(("PS", "cores"))
    plan = solve(rows, graph.all_edges(), capacity, links, ps_cores=int(cores) if cores else 1, solver=solver,
                 time_limit=time_limit, source=f"device {dev.id}")
    plan.record_sources(rows)
    return plan
