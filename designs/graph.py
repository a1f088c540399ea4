"""TrainingGraph: the DAG of one training step of a design, at a batch size.

Nodes, per layer of every network (Flatten is a reshape and gets none):
  `<net>.<layer>.fwd`   forward on the batch
  `<net>.<layer>.tfwd`  forward through the target copy (DQN, DDPG)
  `<net>.<layer>.bwd`   backward: input gradient and weight/bias gradients together, as AP-DRL groups
                        them; the first layer of a network computes no input gradient unless an
                        upstream network needs it (a shared trunk, DDPG's actor through the critic)
  `<net>.<layer>.upd`   optimizer step on that layer's parameters
  `<net>.<layer>.soft`  Polyak update of the target copy (DDPG)
plus the algorithm's own nodes: `loss` (or `critic_loss`, `actor_loss`, `value_loss`, `surrogate`),
`gae` (PPO), `returns` (A2C), and for TRPO the Fisher-vector product passes `fvp_fwd` / `fvp_bwd`
(CPP's combined forward and Pearlmutter backward), `cg` and `linesearch`. Each algorithm's graph
is built by its own module (``host/algorithms/<name>.py``, registered with the algorithm) from
the builder's parts here (``forward``, ``backward``, ``update``, ``soft``, ``loss``, ``node``,
``actor_critic``).
DDPG's actor update runs the critic again on the actor's actions: those nodes are named
`critic@pi.<layer>.<phase>` (TD3: `qf1@pi.<layer>.<phase>`, its first critic).

Counting convention (documented in the README):
  * a multiply-accumulate is 2 FLOPs; matrix-multiply nodes count only their MACs (no bias adds);
    backward = 2x forward MACs (input gradient + weight gradient), less the input gradient of a
    first layer. With it, DQN-Breakout at batch 1 gives AP-DRL Fig. 8 / Table III: 15 MM nodes,
    4.10 KFLOPs (fc2 forward) to 10.62 MFLOPs (conv2 backward), 68.21 MFLOPs of MM work (seed: 68.17).
  * activations count the per-element FLOPs of the network module; optimizer steps count per
    parameter: SGD 2, RMSprop 9, Adam 12, Polyak 3; GAE 7 per rollout element, n-step returns 3;
    losses a few per output (see `_LOSS_FLOPS`). TRPO's FVP and CG nodes are multiplied by cg_iters.
  * bytes of a node: what it reads and writes (activations in and out, parameters, gradients,
    optimizer state) in the design's storage format; bytes of an edge: the tensor it carries.
`mm` marks matrix-multiply nodes: only those may go to AIE (AP-DRL §IV-A).

Loop-carried edges (``TrainingGraph.carry_edges``): training steps run back to back, and the
parameters a step writes are read by the next step. For every parameterised layer
``<net>.<layer>.upd -> <net>.<layer>.fwd`` (the new weights feed the next forward of that layer;
for TRPO the update node ``policy.<layer>.upd`` also feeds ``fvp_fwd``) and, for DDPG,
``<net>.<layer>.soft -> <net>.<layer>.tfwd`` (the Polyak-averaged target copy). A DQN target copy
is synchronised only every C steps, so it gets none. A carry edge ``u -> v`` with bytes b means,
for a schedule repeated with period T (the makespan): ``S_v + T >= S_u + t_u + xfer(b)``.
Carry edges carry the layer's parameters (``n_params x word``); they are not part of the DAG.

Node runs (``Node.runs``): how many times a node runs per training step (gradient step) where not
once, by the rule its algorithm registers (``register_node_runs``; PPO's GAE once per rollout of
update_epochs x num_minibatches steps, DDPG's actor every ``policy_frequency`` critic steps, TRPO's
FVP and value-fit counts) from the design's hyperparameters. The partitioner's objective and the
performance model weigh each node by them (rlhls.partition.heft: nodes that run equally often form
a loop scheduled on its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from importlib import import_module
from typing import Callable

from rlhls.core.errors import RlhlsError

OPT_FLOPS = {"sgd": 2, "none": 2, "rmsprop": 9, "adam": 12}
OPT_STATES = {"sgd": 0, "none": 0, "rmsprop": 1, "adam": 2}
POLYAK_FLOPS = 3
GAE_FLOPS = 7
RETURNS_FLOPS = 3
CG_FLOPS_PER_PARAM = 10
MAX_BATCH = 1 << 20  # samples in one training step: the designs' largest is 50,000 (TRPO on Humanoid); a
# batch's activations are allocated by every backend and by PS timing


def _loss_flops(algorithm: str, batch: int, outputs: int) -> int:
    per = _LOSS_FLOPS.get(algorithm, _policy_loss_flops)(outputs)
    return batch * per


def _policy_loss_flops(outputs: int) -> int:
    return 10 * outputs + 10


# algorithm -> its training-graph builder ``fn(bld, design, nets)`` and FLOPs per sample of its loss
GRAPH_BUILDERS: dict[str, Callable] = {}
_LOSS_FLOPS: dict[str, Callable[[int], int]] = {}
# algorithm -> its node-runs rule ``fn(node, hyperparams) -> runs per training step``
_NODE_RUNS: dict[str, Callable] = {}


def register_graph_builder(algorithm: str, fn: Callable, *, loss_flops: Callable[[int], int] | None = None,
                           replace: bool = False) -> Callable:
    """Make `algorithm` one a Design may name: `fn(bld, design, nets)` adds its nodes to the graph
    builder `bld` (``forward``, ``backward``, ``update``, ``soft``, ``loss``, ``node``, ``edge``;
    ``graph_builder("a2c")`` reuses a built-in one). `loss_flops(outputs)`: FLOPs per sample of its
    loss nodes (default that of A2C's policy-gradient loss, 10 per output + 10)."""
    if not isinstance(algorithm, str) or not algorithm:
        raise RlhlsError(f"register_graph_builder: algorithm {algorithm!r} is not a name")
    if not callable(fn):
        raise RlhlsError(f"register_graph_builder('{algorithm}'): {fn!r} is not callable")
    old = GRAPH_BUILDERS.get(algorithm)
    if old is not None and old is not fn and not replace:
        raise RlhlsError(f"register_graph_builder: algorithm '{algorithm}' has a graph builder already "
                         "(pass replace=True to replace it)")
    GRAPH_BUILDERS[algorithm] = fn
    if loss_flops is not None:
        _LOSS_FLOPS[algorithm] = loss_flops
    return fn


def unregister_graph_builder(algorithm: str) -> None:
    GRAPH_BUILDERS.pop(algorithm, None)
    _LOSS_FLOPS.pop(algorithm, None)


def register_node_runs(algorithm: str, fn: Callable | None) -> None:
    """`fn(node, hyperparams)`: how many times `algorithm`'s training step runs a node (module
    docstring), given the design's hyperparameters; None removes the rule (every node once)."""
    if fn is None:
        _NODE_RUNS.pop(algorithm, None)
    else:
        _NODE_RUNS[algorithm] = fn


def _set_runs(graph: TrainingGraph, design) -> None:
    rule = _NODE_RUNS.get(design.algorithm)
    if rule is None:
        return
    hp = dict(design.hyperparams)
    for n in graph.nodes:
        try:
            r = float(rule(n, hp))
        except (KeyError, TypeError, ZeroDivisionError, ValueError) as e:
            raise RlhlsError(f"design '{design.name}': its hyperparameters lack what the {design.algorithm} "
                             f"node-runs rule needs ({e})") from None
        if not math.isfinite(r) or r < 0:
            raise RlhlsError(f"design '{design.name}': the {design.algorithm} rule runs node '{n.name}' {r!r} "
                             "times per training step; expected a number >= 0")
        n.runs = r


def graph_builder(algorithm: str) -> Callable:
    if algorithm not in GRAPH_BUILDERS:
        # each algorithm's module (rlhls.host.algorithms, the plug-in layer of the trainers) registers
        # its builder: loaded by name here, so this layer imports nothing of the host's
        import_module("rlhls.host.algorithms").algorithm_names()
    if algorithm not in GRAPH_BUILDERS:
        raise RlhlsError(f"algorithm '{algorithm}' has no training-graph builder (registered: "
                         f"{', '.join(GRAPH_BUILDERS)}; register_algorithm(Algorithm(..., graph=fn)) gives one)")
    return GRAPH_BUILDERS[algorithm]


@dataclass
class Node:
    name: str
    layer: str
    phase: str
    flops: int
    bytes: int
    mm: bool
    runs: float = 1.0  # per training step (module docstring)

    @property
    def kind(self) -> str:
        """What the node computes, as kernels declare it (``Kernel.implements``): ``mm.fwd`` /
        ``mm.bwd`` (a matrix multiply's forward, target forward or backward), ``act.fwd`` /
        ``act.bwd`` (an activation's), else the phase (``upd``, ``soft``, ``loss``, ``gae``,
        ``returns``, ``fvp_fwd``, ``fvp_bwd``, ``cg``, ``linesearch``)."""
        phase = "fwd" if self.phase == "tfwd" else self.phase
        if phase in ("fwd", "bwd"):
            return ("mm." if self.mm else "act.") + phase
        return phase

    @property
    def instance(self) -> str:
        """The network instance of a layer node (``q``, ``critic@pi``), else the node name."""
        return self.name.split(".", 1)[0]

    def as_dict(self) -> dict:
        d = {"name": self.name, "layer": self.layer, "phase": self.phase, "kind": self.kind,
             "flops": int(self.flops), "bytes": int(self.bytes), "mm": bool(self.mm)}
        if self.runs != 1.0:
            d["runs"] = self.runs
        return d


@dataclass
class Edge:
    src: str
    dst: str
    bytes: int
    carry: bool = False  # loop-carried: from this step's src to the next step's dst

    def as_dict(self) -> dict:
        d = {"src": self.src, "dst": self.dst, "bytes": int(self.bytes)}
        if self.carry:
            d["carry"] = True
        return d


@dataclass
class TrainingGraph:
    design: str
    batch: int
    nodes: list = field(default_factory=list)
    edges: list = field(default_factory=list)
    carry_edges: list = field(default_factory=list)  # loop-carried, not part of the DAG

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def mm_nodes(self) -> list:
        return [n for n in self.nodes if n.mm]

    def predecessors(self, name: str) -> list:
        return [e.src for e in self.edges if e.dst == name]

    def successors(self, name: str) -> list:
        return [e.dst for e in self.edges if e.src == name]

    def topological_order(self) -> list:
        """The nodes in an order every edge respects: ready nodes first-in first-out, in the order
        of ``nodes`` and ``edges`` (graphlib's); a cycle is one line naming it."""
        ts: TopologicalSorter[str] = TopologicalSorter()
        for n in self.nodes:
            ts.add(n.name)
        for e in self.edges:
            ts.add(e.dst, e.src)
        try:
            return list(ts.static_order())
        except CycleError as e:
            raise RlhlsError(f"training graph of '{self.design}' has a cycle: {' -> '.join(e.args[1])}") from None

    def to_json(self) -> dict:
        return {"design": self.design, "batch": self.batch,
                "nodes": [n.as_dict() for n in self.nodes],
                "edges": [e.as_dict() for e in self.edges + self.carry_edges]}

    def all_edges(self) -> list:
        """DAG edges then carry edges, as ``(src, dst, bytes)`` / ``(src, dst, bytes, True)`` tuples
        (the partitioner's edge form)."""
        return ([(e.src, e.dst, int(e.bytes)) for e in self.edges]
                + [(e.src, e.dst, int(e.bytes), True) for e in self.carry_edges])

    def edges_csv(self, carry: bool = False) -> str:
        """Graph CSV: the DAG ``src,dst,bytes``; with ``carry`` also the loop-carried edges, as
        ``src,dst,bytes,carry`` (carry 0/1; see rlhls.partition.profile_io)."""
        if not carry:
            lines = ["src,dst,bytes"] + [f"{e.src},{e.dst},{int(e.bytes)}" for e in self.edges]
        else:
            lines = ["src,dst,bytes,carry"] + [f"{e.src},{e.dst},{int(e.bytes)},{int(e.carry)}"
                                               for e in self.edges + self.carry_edges]
        return "\n".join(lines) + "\n"

    def summary(self) -> dict:
        mm = self.mm_nodes
        return {"nodes": len(self.nodes), "edges": len(self.edges), "carry_edges": len(self.carry_edges),
                "mm_nodes": len(mm),
                "mm_flops": sum(n.flops for n in mm), "flops": sum(n.flops for n in self.nodes),
                "min_mm_flops": min((n.flops for n in mm), default=0),
                "max_mm_flops": max((n.flops for n in mm), default=0)}


def elements(shape) -> int:
    return int(math.prod(shape))


class _Builder:
    def __init__(self, design, batch: int):
        self.design = design
        self.batch = batch
        self.B = max(1, math.ceil(design.storage_format.bits / 8))
        self.g = TrainingGraph(design.name, batch)
        self._names: set[str] = set()

    # -- primitives
    def node(self, name, layer, phase, flops, nbytes, mm=False):
        if name in self._names:
            raise RlhlsError(f"training graph of '{self.design.name}': node '{name}' defined twice")
        self._names.add(name)
        self.g.nodes.append(Node(name, layer, phase, int(flops), int(nbytes), bool(mm)))
        return name

    def edge(self, src, dst, nbytes):
        if src is not None:
            self.g.edges.append(Edge(src, dst, int(nbytes)))

    def carry(self, src, dst, nbytes):
        self.g.carry_edges.append(Edge(src, dst, int(nbytes), carry=True))

    # -- network passes
    @staticmethod
    def compute_layers(net):
        return [l for l in net.layers if l.kind != "Flatten"]

    def forward(self, inst, net, phase, sources=(), weight_sources=None):
        """Forward chain; `sources` are (node, bytes) feeding the first layer. Returns the last node."""
        b, B = self.batch, self.B
        prev, prev_bytes = None, 0
        for i, layer in enumerate(self.compute_layers(net)):
            name = f"{inst}.{layer.name}.{phase}"
            nin, nout = elements(layer.in_shape), elements(layer.out_shape)
            self.node(name, f"{net.name}.{layer.name}", phase, layer.flops(b)["forward"],
                      (nin + nout) * b * B + layer.n_params * B, layer.is_mm)
            if i == 0:
                for src, nbytes in sources:
                    self.edge(src, name, nbytes)
            else:
                self.edge(prev, name, prev_bytes)
            if weight_sources and layer.name in weight_sources:
                self.edge(weight_sources[layer.name], name, layer.n_params * B)
            prev, prev_bytes = name, nout * b * B
        return prev

    def backward(self, inst, net, fwd_phase, sources, *, first_input_grad=False, weights=True,
                 input_grad_cols=None, fwd_inst=None):
        """Backward chain from the last layer to the first. Returns {layer name: bwd node}."""
        b, B = self.batch, self.B
        fwd_inst = fwd_inst or inst
        layers = self.compute_layers(net)
        out, nxt, nxt_bytes = {}, None, 0
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            f = layer.flops(b)
            nin, nout = elements(layer.in_shape), elements(layer.out_shape)
            want_dx = i > 0 or first_input_grad
            flops = f["backward_weight"] if weights else 0
            if want_dx:
                dx = f["backward_input"]
                if i == 0 and input_grad_cols is not None and layer.is_mm:
                    dx = dx * input_grad_cols // nin  # only the columns an upstream network needs
                flops += dx
            name = f"{inst}.{layer.name}.bwd"
            grads = layer.n_params * B if weights else 0
            self.node(name, f"{net.name}.{layer.name}", "bwd", flops,
                      (nout + nin * (2 if want_dx else 1)) * b * B + layer.n_params * B + grads, layer.is_mm)
            if i == len(layers) - 1:
                for src, nbytes in sources:
                    self.edge(src, name, nbytes)
            else:
                self.edge(nxt, name, nxt_bytes)
            # the forward pass of the same layer kept its input for the weight / activation gradient
            self.edge(f"{fwd_inst}.{layer.name}.{fwd_phase}", name, nin * b * B)
            out[layer.name] = name
            nxt, nxt_bytes = name, nin * b * B
        return out

    def update(self, inst, net, bwd_nodes, optimizer):
        B = self.B
        out = {}
        for layer in self.compute_layers(net):
            if layer.n_params == 0:
                continue
            n, s = layer.n_params, OPT_STATES[optimizer]
            name = self.node(f"{inst}.{layer.name}.upd", f"{net.name}.{layer.name}", "upd",
                             OPT_FLOPS[optimizer] * n, (3 + 2 * s) * n * B)
            self.edge(bwd_nodes[layer.name], name, n * B)
            # the next step's forward of this layer reads the new weights
            for phase in ("fwd", "fvp_fwd"):
                if f"{inst}.{layer.name}.{phase}" in self._names:
                    self.carry(name, f"{inst}.{layer.name}.{phase}", n * B)
            out[layer.name] = name
        return out

    def soft(self, inst, net, upd_nodes):
        B = self.B
        for layer in self.compute_layers(net):
            if layer.n_params == 0:
                continue
            n = layer.n_params
            name = self.node(f"{inst}.{layer.name}.soft", f"{net.name}.{layer.name}", "soft",
                             POLYAK_FLOPS * n, 3 * n * B)
            self.edge(upd_nodes[layer.name], name, n * B)
            self.carry(name, f"{inst}.{layer.name}.tfwd", n * B)  # next step's target forward

    def loss(self, name, outputs_from, per_output_flops_outputs):
        b, B = self.batch, self.B
        nout = sum(nb for _, nb in outputs_from) // B
        node = self.node(name, name, "loss", _loss_flops(self.design.algorithm, b, per_output_flops_outputs),
                         2 * nout * B)
        for src, nbytes in outputs_from:
            self.edge(src, node, nbytes)
        return node


def out_bytes(bld, net):
    return elements(net.output_shape) * bld.batch * bld.B


def build_graph(design, batch: int | None = None, seed: int = 0) -> TrainingGraph:
    """The training graph of one step of `design` at `batch` (default: the design's batch size)."""
    if batch is None:
        batch = design.batch_size
    if not isinstance(batch, int) or batch < 1:
        raise RlhlsError(f"batch size {batch!r} must be a positive integer")
    if batch > MAX_BATCH:
        raise RlhlsError(f"batch size {batch}: more than the {MAX_BATCH} samples a training step may have")
    try:
        build = graph_builder(design.algorithm)
    except RlhlsError as e:
        raise RlhlsError(f"design '{design.name}': {e}") from None
    nets = design.build_networks(seed)
    bld = _Builder(design, batch)
    build(bld, design, nets)
    bld.g.topological_order()
    _set_runs(bld.g, design)
    return bld.g


def actor_critic(bld, design, nets, targets_node, targets_bytes):
    """Policy + value networks (optionally on a shared trunk) -> one loss -> backward -> updates."""
    heads = [s for s in design.networks if s.role in ("actor", "critic")]
    trunks = [s for s in design.networks if s.role == "trunk"]
    last = {}
    for t in trunks:
        last[t.name] = bld.forward(t.name, nets[t.name], "fwd")
    outs = []
    for h in heads:
        src = [(last[h.input_from], out_bytes(bld, nets[h.input_from]))] if h.input_from else []
        last[h.name] = bld.forward(h.name, nets[h.name], "fwd", src)
        outs.append((last[h.name], out_bytes(bld, nets[h.name])))
    loss = bld.loss("loss", outs + [(targets_node, targets_bytes)], design.action_dim)
    bwd = {}
    for h in heads:
        net = nets[h.name]
        bwd[h.name] = bld.backward(h.name, net, "fwd", [(loss, out_bytes(bld, net))],
                                   first_input_grad=h.input_from is not None)
    for t in trunks:
        net = nets[t.name]
        srcs = [(bwd[h.name][bld.compute_layers(nets[h.name])[0].name], out_bytes(bld, net))
                for h in heads if h.input_from == t.name]
        bwd[t.name] = bld.backward(t.name, net, "fwd", srcs)
    for s in design.networks:
        bld.update(s.name, nets[s.name], bwd[s.name], s.optimizer)
