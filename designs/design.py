"""Design: what one RL training accelerator is — algorithm, environment, networks, kernels,
formats, parallelism and target device — with the seed it comes from.

A design records every figure the seed gives (`seed_figures`) and, where the seed is silent,
what was chosen instead and why (`choices`). Networks are built on demand from factories so
that listing designs costs nothing and every build starts from the same seed.

One value for the build and the training: a kernel parameter that names a hyperparameter
(``Param.hyperparam``: the GAE unit's ``bits`` is ``quant_bits``, ``lookahead`` is
``gae_lookahead``, its rollout sizes ``num_envs`` x ``num_steps``, ...) is one value. Its home is
the design's KernelSpec where the KernelSpec gives it (the hardware's figure; the trainer's
default then comes from it, ``kernel_hyperparams``), else the design's ``hyperparams``; a design
giving both must give the same. A run's hyperparameters (``--set quant_bits=5``) reach both
through ``bind``: the Flow builds, profiles and trains the bound design, and the trainer takes its
kernels' parameters from it, so the csim-checked component is the one trained with. The plan's
design points reach both the same way (``at_points``: a PL node's ``pf<N>`` point is its kernel's
``pf``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from rlhls.core.errors import RlhlsError

from .formats import NumericFormat, parse_format

if TYPE_CHECKING:
    from .network import Network

_ACTS_KINDS = ("ReLU", "Tanh", "Sigmoid", "Softmax", "Identity")  # elementwise layers of an MLP
_PRISTINE: dict = {}  # (design, seed) -> initialised networks; orthogonal init of big layers is slow

OPTIMIZERS = ("sgd", "adam", "rmsprop", "none")


@dataclass(frozen=True)
class NetSpec:
    """One network of a design.

    `input_from` names another network whose output feeds this one (a shared trunk);
    `target` says the algorithm keeps a target copy of it (DQN, DDPG).
    """

    name: str
    role: str
    factory: Callable[[int], Network]  # seed -> a freshly initialised network
    target: bool = False
    input_from: str | None = None
    optimizer: str = "adam"
    extra_inputs: int = 0  # inputs appended to the state, e.g. the action for a DDPG critic

    def build(self, seed: int = 0) -> Network:
        return self.factory(seed)


@dataclass(frozen=True)
class KernelSpec:
    """A hardware kernel the design instantiates on a unit: its formats, its parameters (names of
    the registered kernel's parameters, e.g. the parallelism ``pf``) and, in ``notes``, facts of the
    seed's architecture that are not parameters of our kernel."""

    name: str
    unit: str
    storage: str
    acc: str
    params: dict = field(default_factory=dict)
    source: str = ""
    notes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Design:
    name: str
    seed_file: str
    seed_title: str
    algorithm: str
    env_id: str
    env_notes: str
    obs_shape: tuple
    action_dim: int
    action_space: str  # 'discrete' | 'continuous'
    networks: tuple[NetSpec, ...]
    kernels: tuple[KernelSpec, ...]
    formats: dict  # role -> format text ('storage', 'acc', ...)
    device: str
    clocks_mhz: dict  # unit -> clock used by the design
    batch_size: int
    hyperparams: dict
    seed_figures: dict = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    # ``rlhls run``'s demonstration budget: {"steps": N, "set": {hyperparameter: value}}, minutes on 2 cores;
    # "set" changes how long the run takes, never what is built (host/bound.py). "probe": the smaller sizes
    # of perf's short timing run (host/perf.py scales its graph phases to the design's)
    demo: dict = field(default_factory=dict)
    # the AMD part a build names where the device's own part is not AMD's (CPP's Stratix V); None: the device's
    part: str | None = None
    # {node-name glob: unit}: the seed's placement of nodes its own units do not implement (the
    # first matching glob wins); the partitioner then offers them that unit only
    pins: dict = field(default_factory=dict)
    # {node: design point} a plan chose (``at_points``): the PL kernels' parallelism for the build and
    # the trainers' kernels alike (designs.kernels.KernelContext); {}: the KernelSpecs' own
    points: dict = field(default_factory=dict)
    # the share (0..1) of the training graph's time hidden behind the host loop by double buffering
    # the architecture declares (host/perf.py); 0: serial. No registered seed states one: a unit's own
    # pipelining (CPP's coarse-grained FVP pipeline) is in its kernel's cost model
    host_overlap: float = 0.0
    # where the design came from: {} for the package's and a plug-in's, {"file": absolute path,
    # "sha256": of its bytes} for a user's design file (designs.registry); runs record it, and a
    # run folder is loaded with that file only when the user names it again and its hash agrees
    origin: dict = field(default_factory=dict, compare=False)
    # how a run resized it (``with_net_arch``): {"from": the design's name, "net_arch": {role: sizes},
    # "activation": name or None}; runs record it, so the run's policy loads again from its folder
    resized: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = f"design '{self.name}'"
        if (isinstance(self.host_overlap, bool) or not isinstance(self.host_overlap, (int, float))
                or not 0 <= self.host_overlap <= 1):
            raise RlhlsError(f"{where}: host_overlap {self.host_overlap!r}: expected a fraction 0..1 of the "
                             "training graph hidden behind the host loop")
        for glob, unit in self.pins.items():
            if unit not in ("PS", "PL", "AIE"):
                raise RlhlsError(f"{where}: pin '{glob}' names unit '{unit}' (expected PS, PL or AIE)")
        # any registered algorithm (its graph builder is looked up when the graph is built: a
        # user's algorithm may register after the design is made)
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise RlhlsError(f"{where}: algorithm {self.algorithm!r} is not an algorithm name (rlhls algorithms)")
        if self.batch_size < 1:
            raise RlhlsError(f"{where}: batch size {self.batch_size} must be >= 1")
        names = [n.name for n in self.networks]
        if len(set(names)) != len(names):
            raise RlhlsError(f"{where}: network names repeat: {names}")
        for n in self.networks:
            if n.input_from is not None and n.input_from not in names:
                raise RlhlsError(f"{where}: network '{n.name}' takes input from unknown network '{n.input_from}'")
            if n.optimizer not in OPTIMIZERS:
                raise RlhlsError(f"{where}: network '{n.name}': unknown optimizer '{n.optimizer}'")
        for role, text in self.formats.items():
            try:
                parse_format(text)
            except RlhlsError as e:
                raise RlhlsError(f"{where}: format '{role}': {e}") from None
        for k in self.kernels:
            for text in (k.storage, k.acc):
                parse_format(text)
        self.kernel_hyperparams()  # a value given twice is given once
        if self.part is not None and not (isinstance(self.part, str)
                                          and self.part.lower().startswith(("xc", "xa", "xq"))):
            raise RlhlsError(f"{where}: part {self.part!r} is not an AMD/Xilinx part number")

    def check_kernels(self) -> None:
        """Every KernelSpec names a registered kernel on one of its units, with parameters it takes."""
        from .kernels import get_kernel

        for spec in self.kernels:
            try:
                k = get_kernel(spec.name)
                if spec.unit not in k.units:
                    raise RlhlsError(f"runs on {', '.join(k.units)}, not on {spec.unit}")
                k.resolve(k.spec_params(spec))
            except RlhlsError as e:
                raise RlhlsError(f"design '{self.name}': kernel '{spec.name}': {e}") from None

    def kernel_hyperparams(self) -> dict:
        """{hyperparameter: value} the KernelSpecs fix (module docstring); a design hyperparameter
        or two KernelSpecs that disagree with one are refused."""
        from .kernels import KERNELS

        out: dict[str, object] = {}
        where: dict[str, str] = {}
        for spec in self.kernels:
            k = KERNELS.get(spec.name)  # an unknown kernel is check_kernels' to report
            for h, v in ({} if k is None else k.hyperparam_values(spec.params)).items():
                for other, what in ((out.get(h), f"kernel '{where.get(h)}'"),
                                    (self.hyperparams.get(h), "its hyperparameters")):
                    if other is not None and other != v:
                        raise RlhlsError(f"design '{self.name}': kernel '{spec.name}' sets {h} = {v!r} where "
                                         f"{what} set {other!r} (one value: give it once)")
                out[h], where[h] = v, spec.name
        return out

    def bind(self, hyperparams: dict, batch: int | None = None) -> "Design":
        """This design with a run's hyperparameters where its kernels' parameters name them (module
        docstring), and at the run's training batch `batch` (its algorithm's batch rule: the graph,
        the profile, the plan and the components' sizes are the run's): what the Flow builds and
        the trainer runs. The same design when nothing changes."""
        from .kernels import KERNELS

        hp = dict(hyperparams)
        kernels = []
        for spec in self.kernels:
            k = KERNELS.get(spec.name)
            params = spec.params if k is None else k.bind_params(spec.params, hp)
            kernels.append(spec if params == spec.params else replace(spec, params=params))
        hyper = {**self.hyperparams, **hp}  # what kernels read of them (ctx.hyperparam) is the run's
        batch = self.batch_size if batch is None else int(batch)
        if tuple(kernels) == self.kernels and hyper == self.hyperparams and batch == self.batch_size:
            return self
        return replace(self, kernels=tuple(kernels), hyperparams=hyper, batch_size=batch)

    def at_points(self, points: dict | None) -> "Design":
        """This design at a plan's design points ({node: point}, ``Plan.point``)."""
        points = dict(points or {})
        return self if points == self.points else replace(self, points=points)

    def with_net_arch(self, arch: dict, activation: str | None = None) -> "Design":
        """This design with other hidden layers: `arch` {network role ('q', 'actor', 'critic'): hidden
        sizes}, `activation` ('relu', 'tanh') of every hidden layer (RL Zoo's policy_kwargs). Each MLP
        keeps its input, output layer, gains and initialisation, as the AP-DRL Table IV variants do;
        the name says the sizes (a run's name, its networks' cache key); the same design when
        nothing changes."""
        from .nets import _ACTS
        from .network import Dense

        if activation is not None and activation not in ("relu", "tanh"):
            raise RlhlsError(f"design '{self.name}': hidden activation {activation!r}, expected relu or tanh")
        unknown = sorted(set(arch) - {n.role for n in self.networks})
        if unknown:
            raise RlhlsError(f"design '{self.name}' has no {unknown[0]} network (it has "
                             f"{', '.join(sorted({n.role for n in self.networks}))})")
        specs, tags = [], []
        for spec in self.networks:
            net = spec.build(0)
            hidden = tuple(arch.get(spec.role, ()))
            dense = [l for l in net.layers if isinstance(l, Dense)]
            acts = [l for l in net.layers[:-1] if l.kind in _ACTS_KINDS]
            old = (tuple(int(l.units) for l in dense[:-1]), acts[0].kind.lower() if acts else None)
            new = (hidden if spec.role in arch else old[0], activation or old[1])
            if new == old:
                specs.append(spec)
                continue
            if net.onnx_io is not None:  # the user's trained network: never replaced by fresh layers
                what = (f"net_arch {list(new[0])}" if new[0] != old[0] else "") + \
                    (" and " if new[0] != old[0] and new[1] != old[1] else "") + \
                    (f"activation {new[1]}" if new[1] != old[1] else "")
                hint = ("policy_kwargs net_arch=dict(qf=[...]) without activation_fn resizes the critic only"
                        if spec.role == "actor" and "critic" in {n.role for n in self.networks}
                        else "leave net_arch and activation_fn out of policy_kwargs")
                raise RlhlsError(f"design '{self.name}': network '{spec.name}' is imported from ONNX (graph "
                                 f"'{net.onnx_io['graph']}'); {what} would replace its layers and weights (RL Zoo: "
                                 f"{hint})")
            if len(net.input_shape) != 1 or any(l.kind not in ("Dense", *_ACTS_KINDS) for l in net.layers):
                raise RlhlsError(f"design '{self.name}': network '{spec.name}' is not an MLP; net_arch and "
                                 "activation_fn change MLPs only")
            first, out = dense[0], net.layers[net.layers.index(dense[-1]):]

            def factory(s, net=net, first=first, out=out, hidden=new[0], act=_ACTS[new[1] or "relu"]):
                from .network import Network

                layers = [x for h in hidden for x in (Dense(h, first.bias, first.init, first.gain), act())]
                return Network(net.name, net.input_shape, layers + out, seed=s, init=net.init)  # out: copied

            specs.append(replace(spec, factory=factory))
            tags.append(f"{spec.role}{'x'.join(map(str, new[0])) or '0'}{'' if new[1] == old[1] else new[1]}")
        if not tags:
            return self
        done = self.resized or {"from": self.name, "net_arch": {}, "activation": None}
        resized = {"from": done["from"], "net_arch": {**done["net_arch"], **{k: list(v) for k, v in arch.items()}},
                   "activation": activation or done["activation"]}
        return replace(self, name=f"{self.name}-{'-'.join(tags)}", networks=tuple(specs), resized=resized)

    def net(self, name: str) -> NetSpec:
        for n in self.networks:
            if n.name == name:
                return n
        names = ", ".join(n.name for n in self.networks)
        raise RlhlsError(f"design '{self.name}' has no network '{name}' (it has {names})")

    def build_networks(self, seed: int = 0) -> dict[str, Network]:
        """Fresh networks (callers train them in place); initialisation runs once per seed."""
        key = (self.name, seed)
        if key not in _PRISTINE:
            _PRISTINE[key] = {n.name: n.build(seed + i) for i, n in enumerate(self.networks)}
        return copy.deepcopy(_PRISTINE[key])

    @property
    def storage_format(self) -> NumericFormat:
        return parse_format(self.formats.get("storage", "fp32"))

    def describe(self, seed: int = 0) -> dict:
        nets = self.build_networks(seed)
        return {
            "name": self.name,
            "seed_file": self.seed_file,
            "seed_title": self.seed_title,
            "algorithm": self.algorithm,
            "env_id": self.env_id,
            "env_notes": self.env_notes,
            "obs_shape": list(self.obs_shape),
            "action_dim": self.action_dim,
            "action_space": self.action_space,
            "batch_size": self.batch_size,
            "device": self.device,
            "part": self.part,
            "clocks_mhz": dict(self.clocks_mhz),
            "formats": {role: str(parse_format(t)) for role, t in self.formats.items()},
            "networks": [
                {
                    "name": spec.name,
                    "role": spec.role,
                    "target": spec.target,
                    "input_from": spec.input_from,
                    "optimizer": spec.optimizer,
                    "input_shape": list(nets[spec.name].input_shape),
                    "n_params": int(nets[spec.name].n_params),
                    "layers": [_jsonable(d) for d in nets[spec.name].describe()],
                }
                for spec in self.networks
            ],
            "kernels": [
                {"name": k.name, "unit": k.unit, "storage": str(parse_format(k.storage)),
                 "acc": str(parse_format(k.acc)), "params": dict(k.params), "notes": dict(k.notes),
                 "source": k.source}
                for k in self.kernels
            ],
            "hyperparams": dict(self.hyperparams),
            "seed_figures": dict(self.seed_figures),
            "choices": list(self.choices),
            "demo": dict(self.demo),
            "host_overlap": self.host_overlap,
        }


def _jsonable(d: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
