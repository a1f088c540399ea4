"""The device catalogue: resources, clocks and link figures per unit (PS, PL, AIE), each with its source.

Six targets: the ZCU106 (XCZU7EV, HEPPO-GAE), the ZCU102 (XCZU9EG), the VEK280 (XCVE2802, AP-DRL),
the VCK190 (XCVC1902), the Maxeler MAX4 with its Stratix-V 5SGSD8 (CPP, F-DDPG), and a Kintex
UltraScale+ KU15P card (the AMD part CPP's Vitis HLS projects name).

Every number is a :class:`Figure` that names where it comes from.  Three kinds of source appear:

* a data sheet / architecture manual / board guide, by document number and table;
* a seed paper in ``seeds/`` (``seed 000`` HEPPO-GAE, ``001`` CPP, ``002`` F-DDPG, ``003`` AP-DRL);
* ``assumed: ...`` or ``derived: ...`` — a modelling assumption or arithmetic on other figures,
  to be replaced by measured numbers (a profile CSV) when they exist.

Where a data-sheet figure could not be re-read when the catalogue was written (no copy of the
document was reachable), its ``note`` says ``not retrieved`` and names what corroborates it.

Seed figures that disagree with the data sheets are recorded in ``Device.notes`` (for instance
HEPPO's Table IV 'Available' column, which holds the ZU9EG's numbers although the design targets
the ZU7EV of the ZCU106).

The partitioner reads :meth:`Device.capacity` — ``(unit, resource) -> capacity`` with resource
names ``lut, ff, dsp, bram36, uram, aie_tiles, cores`` (Stratix V: ``alm, ff, dsp, m20k``) — and
:attr:`Device.links` (``src, dst, latency_us, bytes_per_us``).  The cost models read
``Unit.perf`` and ``Unit.clock_mhz``.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field, replace

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import did_you_mean

__all__ = ["Figure", "Unit", "Link", "Device", "DEVICES", "get_device", "UNIT_NAMES"]

UNIT_NAMES = ("PS", "PL", "AIE")


# --------------------------------------------------------------------------------------------
# The data types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One number with its unit and where it comes from. An assumed figure (a source starting
    'assumed') carries its plausible range ``low`` .. ``high`` around ``value`` (why: in the note);
    ``rlhls perf`` re-evaluates a plan at both ends of every range (its band and tornado)."""

    value: float
    unit: str
    source: str
    note: str = ""
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RlhlsError(f"figure value {value!r} is not a number; expected a finite int or float")
        if not math.isfinite(float(value)):
            raise RlhlsError(f"figure value {value!r} is not finite; expected a finite number")
        object.__setattr__(self, "value", float(value))
        if not isinstance(self.unit, str):
            raise RlhlsError(f"figure unit {self.unit!r} is not a string; expected e.g. 'MHz'")
        if not isinstance(self.source, str) or not self.source.strip():
            raise RlhlsError(f"figure {value!r} {self.unit} has no source; expected a document or 'assumed: ...'")
        if not isinstance(self.note, str):
            raise RlhlsError(f"figure note {self.note!r} is not a string")
        what = f"figure {self.value:g} {self.unit} ({self.source[:60]})"
        if self.assumed and (self.low is None or self.high is None):
            raise RlhlsError(f"{what} is assumed and has no plausible range; give low and high around it")
        for end in ("low", "high"):
            x = getattr(self, end)
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
                raise RlhlsError(f"{what}: {end} {x!r} is not a finite number")
            object.__setattr__(self, end, float(x))
        if (self.low is None) != (self.high is None):
            raise RlhlsError(f"{what}: a range needs both low and high")
        if self.low is not None and not self.low <= self.value <= self.high:
            raise RlhlsError(f"{what}: range {self.low:g} .. {self.high:g} does not hold the value")

    @property
    def assumed(self) -> bool:
        """True for a modelling assumption (its source starts 'assumed')."""
        return self.source.lstrip().lower().startswith("assumed")

    def to_dict(self) -> dict:
        out = {"value": self.value, "unit": self.unit, "source": self.source}
        if self.note:
            out["note"] = self.note
        if self.low is not None:
            out["range"] = [self.low, self.high]
        return out


@dataclass(frozen=True)
class Unit:
    """One processing unit of a device: PS (processors), PL (fabric) or AIE (AI Engine array)."""

    name: str
    description: str
    clock_mhz: Figure
    resources: dict = field(default_factory=dict)  # dict[str, Figure]: capacities, all > 0
    perf: dict = field(default_factory=dict)  # dict[str, Figure]: cost-model figures

    def __post_init__(self) -> None:
        if self.name not in UNIT_NAMES:
            raise RlhlsError(f"unit name {self.name!r} is not known; expected one of {', '.join(UNIT_NAMES)}")
        if not isinstance(self.clock_mhz, Figure) or self.clock_mhz.value <= 0:
            raise RlhlsError(f"unit {self.name}: clock_mhz must be a positive Figure, got {self.clock_mhz!r}")
        for kind in ("resources", "perf"):
            table = getattr(self, kind)
            if not isinstance(table, dict):
                raise RlhlsError(f"unit {self.name}: {kind} must be a dict of Figure, got {type(table).__name__}")
            for key, fig in table.items():
                if not isinstance(key, str) or not isinstance(fig, Figure):
                    raise RlhlsError(f"unit {self.name}: {kind}[{key!r}] must be a Figure keyed by a string")
            object.__setattr__(self, kind, dict(table))
        for key, fig in self.resources.items():
            if fig.value <= 0:
                raise RlhlsError(
                    f"unit {self.name}: resource {key!r} = {fig.value:g} is not a positive capacity; "
                    "leave a resource the unit lacks out instead of giving it 0"
                )

    def figure(self, key: str) -> Figure:
        """The figure named ``key`` in resources, perf, or 'clock_mhz'."""
        if key == "clock_mhz":
            return self.clock_mhz
        if key in self.resources:
            return self.resources[key]
        if key in self.perf:
            return self.perf[key]
        known = ", ".join(["clock_mhz", *self.resources, *self.perf])
        raise RlhlsError(f"unit {self.name} has no figure {key!r}; expected one of: {known}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "clock_mhz": self.clock_mhz.to_dict(),
            "resources": {k: v.to_dict() for k, v in self.resources.items()},
            "perf": {k: v.to_dict() for k, v in self.perf.items()},
        }


@dataclass(frozen=True)
class Link:
    """A one-way data path between two units: a fixed latency plus a transfer rate. A second path
    between the same units has a ``name`` (e.g. the MAX4's Infiniband beside its PCIe); the planner
    uses the first listed."""

    src: str
    dst: str
    latency_us: Figure
    bytes_per_us: Figure
    name: str = ""

    def __post_init__(self) -> None:
        for end in (self.src, self.dst):
            if end not in UNIT_NAMES:
                raise RlhlsError(f"link end {end!r} is not a unit; expected one of {', '.join(UNIT_NAMES)}")
        if self.src == self.dst:
            raise RlhlsError(f"link {self.src}->{self.dst} joins a unit to itself; expected two different units")
        if self.latency_us.value < 0:
            raise RlhlsError(f"link {self.src}->{self.dst}: latency {self.latency_us.value:g} us is negative")
        if self.bytes_per_us.value <= 0:
            raise RlhlsError(f"link {self.src}->{self.dst}: bandwidth {self.bytes_per_us.value:g} B/us is not positive")

    def to_dict(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "latency_us": self.latency_us.to_dict(),
            "bytes_per_us": self.bytes_per_us.to_dict(),
            **({"name": self.name} if self.name else {}),
        }


@dataclass(frozen=True)
class Device:
    """A board and its part: units, links between them, and notes on the figures."""

    id: str
    board: str
    part: str
    family: str
    units: dict  # dict[str, Unit]
    links: tuple = ()  # tuple[Link, ...]
    notes: tuple = ()  # tuple[str, ...]
    aliases: tuple = ()  # extra names get_device accepts (part family, short names)

    def __post_init__(self) -> None:
        if not isinstance(self.units, dict) or not self.units:
            raise RlhlsError(f"device {self.id!r}: units must be a non-empty dict of Unit")
        for key, unit in self.units.items():
            if not isinstance(unit, Unit) or unit.name != key:
                raise RlhlsError(f"device {self.id!r}: units[{key!r}] must be a Unit named {key!r}")
        object.__setattr__(self, "units", dict(self.units))
        links = tuple(self.links)
        seen = set()
        for link in links:
            if not isinstance(link, Link):
                raise RlhlsError(f"device {self.id!r}: links must be Link objects, got {type(link).__name__}")
            for end in (link.src, link.dst):
                if end not in self.units:
                    raise RlhlsError(
                        f"device {self.id!r}: link {link.src}->{link.dst} names unit {end!r}, "
                        f"which the device lacks; expected one of {', '.join(self.units)}"
                    )
            if (link.src, link.dst, link.name) in seen:
                raise RlhlsError(f"device {self.id!r}: link {link.src}->{link.dst} {link.name!r} is given twice")
            seen.add((link.src, link.dst, link.name))
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "aliases", tuple(self.aliases))

    # -- what the partitioner and cost models read ---------------------------------------------

    def capacity(self) -> dict[tuple[str, str], float]:
        """``(unit, resource) -> capacity`` for every resource of every unit."""
        return {(u.name, key): fig.value for u in self.units.values() for key, fig in u.resources.items()}

    def unit(self, name: str) -> Unit:
        try:
            return self.units[name]
        except (KeyError, TypeError):
            raise RlhlsError(
                f"device {self.id} has no unit {name!r}; expected one of {', '.join(self.units)}"
            ) from None

    def figure(self, unit: str, key: str) -> Figure:
        """The figure ``key`` (resource, perf or 'clock_mhz') of unit ``unit``."""
        return self.unit(unit).figure(key)

    def link(self, src: str, dst: str, name: str | None = None) -> Link:
        """The first link src->dst (the planner's), or the one called `name`."""
        for link in self.links:
            if link.src == src and link.dst == dst and (name is None or link.name == name):
                return link
        have = ", ".join(f"{l.src}->{l.dst}" + (f" ({l.name})" if l.name else "") for l in self.links) or "none"
        what = f"{src}->{dst}" + (f" called {name!r}" if name is not None else "")
        raise RlhlsError(f"device {self.id} has no link {what}; it has: {have}")

    def figures(self):
        """Every figure of the device as ``(path, Figure)``, e.g. ``('PL.resources.dsp', fig)``."""
        for u in self.units.values():
            yield f"{u.name}.clock_mhz", u.clock_mhz
            for key, fig in u.resources.items():
                yield f"{u.name}.resources.{key}", fig
            for key, fig in u.perf.items():
                yield f"{u.name}.perf.{key}", fig
        for link in self.links:
            tag = f"link.{link.src}->{link.dst}" + (f".{link.name}" if link.name else "")
            yield f"{tag}.latency_us", link.latency_us
            yield f"{tag}.bytes_per_us", link.bytes_per_us

    def assumed(self) -> list:
        """``[(path, Figure)]`` of every assumed figure (each with its plausible range)."""
        return [(path, fig) for path, fig in self.figures() if fig.assumed]

    def with_value(self, path: str, value: float) -> Device:
        """This device with the figure at `path` (as :meth:`figures` names it) set to `value`, and the
        figures derived from it by a factor rescaled with it: a PS core's peak and sustained rate with
        ``flops_per_cycle_fp32``, the links clocked by the PL (their source says 'at the PL clock') with
        ``PL.clock_mhz``."""
        old = dict(self.figures())
        if path not in old:
            raise RlhlsError(f"device {self.id} has no figure {path!r}")
        ratio = value / old[path].value if old[path].value else 1.0
        scale: dict[str, float | None] = {path: None}
        if path == "PS.perf.flops_per_cycle_fp32":
            scale |= {"PS.perf.gflops_fp32_peak": ratio, "PS.perf.gflops_fp32_sustained": ratio}
        if path == "PL.clock_mhz":
            scale |= {p: ratio for p, f in old.items() if p.endswith(".bytes_per_us") and "at the PL clock" in f.source}

        def new(p: str, fig: Figure) -> Figure:
            if p not in scale:
                return fig
            r = scale[p]
            if r is None:
                return replace(fig, value=value, low=None if fig.low is None else min(fig.low, value),
                               high=None if fig.high is None else max(fig.high, value))
            return replace(fig, value=fig.value * r, low=None if fig.low is None else fig.low * r,
                           high=None if fig.high is None else fig.high * r)

        units = {}
        for name, u in self.units.items():
            units[name] = replace(u, clock_mhz=new(f"{name}.clock_mhz", u.clock_mhz),
                                  resources={k: new(f"{name}.resources.{k}", f) for k, f in u.resources.items()},
                                  perf={k: new(f"{name}.perf.{k}", f) for k, f in u.perf.items()})
        links = []
        for link in self.links:
            tag = f"link.{link.src}->{link.dst}" + (f".{link.name}" if link.name else "")
            links.append(replace(link, latency_us=new(f"{tag}.latency_us", link.latency_us),
                                 bytes_per_us=new(f"{tag}.bytes_per_us", link.bytes_per_us)))
        return replace(self, units=units, links=tuple(links))

    def describe(self) -> dict:
        """A JSON-able description: every figure with its value, unit, source and note."""
        return {
            "id": self.id,
            "board": self.board,
            "part": self.part,
            "family": self.family,
            "units": {name: u.to_dict() for name, u in self.units.items()},
            "links": [link.to_dict() for link in self.links],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------
# Sources (cited by document number; nothing fetched is committed)
# --------------------------------------------------------------------------------------------

NOT_RETRIEVED = "not retrieved when the catalogue was written (no reachable copy)"

DS891 = "AMD DS891 Zynq UltraScale+ MPSoC Data Sheet: Overview, device-resources table"
DS925_PS = "AMD DS925 Zynq UltraScale+ MPSoC DC/AC Switching Characteristics, PS performance table, -2 grade"
DS925_DSP = "AMD DS925 Table 'DSP48 Slice Switching Characteristics' (FMAX, all registers used)"
UG1228 = "AMD UG1228 Zynq UltraScale+ MPSoC Embedded Design Methodology Guide, ch. 2 'Processing System'"
UG1244 = "AMD UG1244 ZCU106 Board User Guide"
UG1182 = "AMD UG1182 ZCU102 Evaluation Board User Guide"
UG579 = "AMD UG579 UltraScale Architecture DSP Slice User Guide (DSP48E2: 27x18 multiplier)"
PG201 = "AMD PG201 Zynq UltraScale+ MPSoC Processing System (S_AXI_HP ports, 128-bit)"
DS950 = "AMD DS950 Versal Architecture and Product Data Sheet: Overview, device tables"
DS957_AIE = "AMD DS957 Versal AI Core DC/AC Switching Characteristics, 'AI Engine Switching Characteristics'"
DS958_PS = "AMD DS958 Versal AI Edge DC/AC Switching Characteristics, Table 1 'Processor Performance'"
DS958_AIE = "AMD DS958 Versal AI Edge DC/AC Switching Characteristics, 'AI Engine Switching Characteristics'"
AM009_VPU = "AMD AM009 Versal AI Engine Architecture Manual / UG1079 Table 1 'AI Engine Vector Precision Support'"
AM009_PL = "AMD AM009 Versal AI Engine Architecture Manual, 'AI Engine to Programmable Logic Interface'"
AM020_PROC = "AMD AM020 Versal AIE-ML Architecture Manual, 'AIE-ML Processor'"
AM020_SUMMARY = "AMD AM020 Versal AIE-ML Architecture Manual, 'Summary' table (AIE vs AIE-ML)"
AM020_PL = "AMD AM020 Versal AIE-ML Architecture Manual, 'AIE-ML to Programmable Logic Interface'"
UG1603_PL = ("AMD UG1603 AI Engine-ML Kernel and Graph Programming Guide, "
             "'Performance Comparison Between AI Engine/PL and AI Engine/NoC Interfaces'")
UG1603_FP = "AMD UG1603 AI Engine-ML Kernel and Graph Programming Guide, Table 'Floating-Point Accuracy'"
UG1273_PL = ("AMD UG1273 Versal Adaptive SoC Design Guide, 'Programmable Logic' "
             "(CLB: 32 LUT + 64 FF; DSP58 27x24, single-precision FP)")
UG1702_VCK190 = ("AMD UG1702 Vitis Reference Guide, 'Platform info for xilinx_vck190_base' "
                 "(400 AI Engines, 1968 DSP engines, dual A72 + dual R5)")
MLIR_AIE = ("Xilinx mlir-aie AIETargetModel.h "
            "(VC1902: 50 columns x 8 core rows; VE2802: 38 columns x 8 core rows + 2 memory-tile rows)")
INTEL_SV = "Intel Stratix V Device Overview (683258), Stratix V GS device-features table"
INTEL_SV_DSP = "Intel Stratix V Device Overview (683258), Table 11 'Variable Precision DSP Block Configurations'"
PCIE2 = "PCI-SIG PCI Express Base Specification 2.0 (5 GT/s per lane, 8b/10b)"

SEED_HEPPO = "seed 000 HEPPO-GAE"
SEED_CPP = "seed 001 CPP (Customised Pearlmutter Propagation)"
SEED_FDDPG = "seed 002 FPGA DDPG"
IB_FIT = {"bytes": 428_320, "compute_us": 83.665}  # fddpg-arm-m3's streamed bytes and kernel time (the models')
IB_BYTES_PER_US = round(IB_FIT["bytes"] / (2311.0 - IB_FIT["compute_us"] - 3 * 10.0), 1)
SEED_APDRL = "seed 003 AP-DRL"

SUSTAINED_FRACTION = 0.25  # assumed share of a core's peak FP32 rate that compiled C/numpy training code reaches


def _fig(value, unit, source, note="", *, rng: tuple | None = None):
    """A Figure; `rng` = (low, high, why) for an assumed one, the why appended to its note."""
    if rng is None:
        return Figure(value, unit, source, note)
    low, high, why = rng
    note = f"{note}; " if note else ""
    return Figure(value, unit, source, f"{note}plausible {low:g} .. {high:g} {unit}: {why}", low, high)


def _ps_perf(clock_mhz: float, flops_per_cycle: float, flops_source: str, flops_range: tuple) -> dict:
    peak = clock_mhz / 1000.0 * flops_per_cycle
    return {
        "flops_per_cycle_fp32": _fig(flops_per_cycle, "FLOP/cycle/core", flops_source, rng=flops_range),
        "gflops_fp32_peak": _fig(
            peak, "GFLOP/s per core", "derived: clock_mhz x flops_per_cycle_fp32",
            "per core; PS nodes run on one core each and do not overlap beyond resources['cores']",
        ),
        "gflops_fp32_sustained": _fig(
            peak * SUSTAINED_FRACTION, "GFLOP/s per core",
            f"assumed: {SUSTAINED_FRACTION:.0%} of gflops_fp32_peak for compiled training code on one core",
            "per core; replace with a measured rate (profile CSV) when one exists",
            rng=(peak * 0.10, peak * 0.50, "10 % .. 50 % of peak: scalar loops of small layers at the low end, "
                 "blocked NEON/AVX GEMM at the high end"),
        ),
    }


# --------------------------------------------------------------------------------------------
# Zynq UltraScale+: ZCU106 (XCZU7EV) and ZCU102 (XCZU9EG)
# --------------------------------------------------------------------------------------------

A53_CLOCK_MHZ = 1333.0
A53_FLOPS = 4.0  # one 2-lane fp32 FMA per cycle (64-bit NEON datapath)


def _zynq_ps() -> Unit:
    return Unit(
        name="PS",
        description="quad-core Arm Cortex-A53 APU (the dual-core Cortex-R5F RPU is not scheduled)",
        clock_mhz=_fig(
            A53_CLOCK_MHZ, "MHz", DS925_PS,
            f"APU maximum for the -2 speed grade of the boards' parts; {NOT_RETRIEVED}; "
            f"{UG1228} confirms the family top speed 'APU up to 1.5 GHz, RPU up to 600 MHz' (-3 grade)",
        ),
        resources={
            "cores": _fig(
                4, "cores", f"{DS891} (APU: quad-core Arm Cortex-A53); {SEED_HEPPO} §V-D",
                "APU cores only; the 2 Cortex-R5F cores are left to control code",
            ),
        },
        perf=_ps_perf(
            A53_CLOCK_MHZ, A53_FLOPS,
            "assumed: Cortex-A53 64-bit NEON datapath, one 2-lane fp32 FMA (4 FLOP) per cycle",
            (2.0, 4.0, "half where FMAs do not issue every cycle; 4 is the datapath's most"),
        ) | {"mem_gbytes_per_s_sustained": _fig(
            2.0, "GB/s per core", "assumed: one in-order Cortex-A53 core streaming from DDR4 (read + write)",
            "COST stream: memory side of the PS roofline; replace with a measured value",
            rng=(1.0, 4.0, "x0.5 .. x2: single-core stream rates vary with DDR speed and prefetching"))},
    )


def _ultrascale_pl_perf() -> dict:
    return {
        "dsp_per_mac_fixed18": _fig(1, "DSP48E2/MAC", f"derived: {UG579}", "operands up to 27x18 bits"),
        "dsp_per_mac_fixed27": _fig(
            2, "DSP48E2/MAC", f"derived: {UG579}", "a 27x27 product does not fit one 27x18 multiplier"
        ),
        "dsp_per_mac_fp32": _fig(
            5, "DSP48E2/MAC",
            "assumed: Vitis HLS default binding of fmul (3 DSP48E2) + fadd (2 DSP48E2), "
            "AMD PG060 Floating-Point LogiCORE",
            NOT_RETRIEVED, rng=(2, 5, "fmul on 2 DSPs and fadd in fabric .. the full-DSP binding"),
        ),
        "dsp_per_mac_fp16": _fig(
            2, "DSP48E2/MAC", "assumed: Vitis HLS half-precision hmul (1 DSP48E2) + hadd (1 DSP48E2)",
            "to be calibrated from Vitis HLS reports", rng=(1, 3, "hadd in fabric .. a 3-DSP binding"),
        ),
        "launch_overhead_us": _fig(
            2.0, "us", "assumed: XRT/driver start of a PL kernel (ap_start handshake + polling)",
            "replace with a measured value; AP-DRL §III-A reports PL start-up as short relative to AIE",
            rng=(1.0, 20.0, "a register poke and poll .. an XRT call through the driver"),
        ),
    }


def _zynq_links(pl_clock_mhz: float) -> tuple:
    rate = 16.0 * pl_clock_mhz  # one 128-bit AXI port at the PL clock
    src = f"assumed: one 128-bit S_AXI_HP port ({PG201}) at the PL clock {pl_clock_mhz:g} MHz = 16 B x f"
    lat = "assumed: AXI DMA/BRAM hand-off including the start/done handshake"
    lat_rng = (0.2, 5.0, "a bare AXI burst .. a DMA set-up with interrupt")
    rate_rng = (rate / 2, rate * 4, "a half-used port .. the four S_AXI_HP ports in parallel")
    return (
        Link("PS", "PL", _fig(1.0, "us", lat, rng=lat_rng), _fig(rate, "B/us", src, rng=rate_rng)),
        Link("PL", "PS", _fig(1.0, "us", lat, rng=lat_rng), _fig(rate, "B/us", src, rng=rate_rng)),
    )


# ZU7EV / ZU9EG programmable logic (DS891)
ZU7EV = dict(lut=230_400, ff=460_800, dsp=1_728, bram36=312, uram=96)
ZU9EG = dict(lut=274_080, ff=548_160, dsp=2_520, bram36=912)

# HEPPO-GAE Table IV (seed 000, §V-D): 64 PEs, 2-step lookahead
HEPPO_TABLE_IV = {  # resource: (total usage, 'Available' column, 'Utilization (%)' column)
    "lut": (12_864, 274_080, 4.69),
    "ff": (54_336, 548_160, 9.91),
    "dsp": (768, 2_520, 30.48),
}
HEPPO_TEXT_DSP_PERCENT = 17.7
HEPPO_BRAM_BLOCKS = ((29, 9), (32, 10))  # (blocks, percent quoted in §V-D)


def _zcu106() -> Device:
    pl_clock = 300.0
    pl = Unit(
        name="PL",
        description="UltraScale+ fabric of the XCZU7EV (CLB LUT/FF, DSP48E2, 36 Kb BRAM, 288 Kb UltraRAM)",
        clock_mhz=_fig(
            pl_clock, "MHz", f"{SEED_HEPPO} §V-D (system designed to run at 300 MHz)",
            f"fabric limits are higher: DSP48E2 FMAX 775 MHz at -2 ({DS925_DSP})",
        ),
        resources={
            "lut": _fig(ZU7EV["lut"], "CLB LUTs", f"{DS891}, ZU7EV",
                        f"{NOT_RETRIEVED}; consistent with third-party Vivado utilization excerpts "
                        "(230,400 CLB LUTs available)"),
            "ff": _fig(ZU7EV["ff"], "CLB flip-flops", f"{DS891}, ZU7EV",
                       f"{NOT_RETRIEVED}; consistent with third-party Vivado utilization excerpts "
                       "(460,800 CLB registers available)"),
            "dsp": _fig(ZU7EV["dsp"], "DSP48E2 slices", f"{DS891}, ZU7EV", NOT_RETRIEVED),
            "bram36": _fig(ZU7EV["bram36"], "36 Kb block RAMs", f"{DS891}, ZU7EV",
                           f"{NOT_RETRIEVED}; corroborated by {SEED_HEPPO} §V-D (29 blocks ~ 9%, 32 blocks ~ 10%)"),
            "uram": _fig(ZU7EV["uram"], "288 Kb UltraRAMs", f"{DS891}, ZU7EV", NOT_RETRIEVED),
        },
        perf=_ultrascale_pl_perf(),
    )
    t = HEPPO_TABLE_IV
    pct7 = {k: 100.0 * t[k][0] / ZU7EV[k] for k in t}
    bram7 = [(b, 100.0 * b / ZU7EV["bram36"], 100.0 * b / ZU9EG["bram36"]) for b, _ in HEPPO_BRAM_BLOCKS]
    notes = (
        "HEPPO-GAE (seed 000) Table IV 'Available' column (LUT 274,080 / FF 548,160 / DSP 2,520) holds the "
        "ZU9EG's (ZCU102's) figures, not the ZCU106's ZU7EV "
        f"(LUT {ZU7EV['lut']:,} / FF {ZU7EV['ff']:,} / DSP {ZU7EV['dsp']:,}, DS891). "
        f"Against the ZU7EV the 64-PE design uses LUT {pct7['lut']:.2f}%, FF {pct7['ff']:.2f}%, "
        f"DSP {pct7['dsp']:.2f}% (Table IV prints {t['lut'][2]}%, {t['ff'][2]}%, {t['dsp'][2]}%).",
        f"HEPPO-GAE §V-D text says 'DSPs at {HEPPO_TEXT_DSP_PERCENT}%', matching neither its Table IV "
        f"({t['dsp'][2]}% of 2,520) nor the ZU7EV ({pct7['dsp']:.1f}% of {ZU7EV['dsp']:,}); "
        f"{HEPPO_TEXT_DSP_PERCENT}% would be {HEPPO_TEXT_DSP_PERCENT / 100 * ZU7EV['dsp']:.0f} of the ZU7EV's DSPs.",
        "HEPPO-GAE §V-D BRAM figures agree with the ZU7EV: "
        + "; ".join(f"{b} blocks = {p7:.1f}% of {ZU7EV['bram36']} (ZU9EG: {p9:.1f}% of {ZU9EG['bram36']})"
                    for b, p7, p9 in bram7)
        + " — so the paper's BRAM percentages use the right device and its Table IV does not.",
        "HEPPO-GAE's PS description (quad-core Cortex-A53 + dual-core Cortex-R5) and 300 MHz PL clock agree "
        "with DS891/DS925; the 300 MHz is the design's clock, well under the -2 fabric limits.",
        "Assumptions, not data-sheet numbers: PS sustained rate (25% of peak), fp32/fp16 DSPs per MAC, "
        "kernel launch overhead, PS<->PL link latency and bandwidth (one 128-bit AXI port at the PL clock).",
    )
    return Device(
        id="zcu106",
        board="ZCU106",
        part="xczu7ev-ffvc1156-2-e",
        family="Zynq UltraScale+ MPSoC (EV)",
        units={"PS": _zynq_ps(), "PL": pl},
        links=_zynq_links(pl_clock),
        notes=notes,
        aliases=("xczu7ev", "zu7ev", "xczu7ev-2ffvc1156e"),
    )


def _zcu102() -> Device:
    pl_clock = 300.0
    pl = Unit(
        name="PL",
        description="UltraScale+ fabric of the XCZU9EG (CLB LUT/FF, DSP48E2, 36 Kb BRAM; no UltraRAM)",
        clock_mhz=_fig(
            pl_clock, "MHz", "assumed: same 300 MHz design clock as the ZCU106 designs (no seed targets the ZCU102)",
            f"fabric limits are higher: DSP48E2 FMAX 775 MHz at -2 ({DS925_DSP})",
            rng=(200.0, 400.0, "where HLS kernels on a -2 UltraScale+ part usually close timing"),
        ),
        resources={
            "lut": _fig(ZU9EG["lut"], "CLB LUTs", f"{DS891}, ZU9EG",
                        f"{NOT_RETRIEVED}; equals {SEED_HEPPO} Table IV 'Available'"),
            "ff": _fig(ZU9EG["ff"], "CLB flip-flops", f"{DS891}, ZU9EG",
                       f"{NOT_RETRIEVED}; equals {SEED_HEPPO} Table IV 'Available'"),
            "dsp": _fig(ZU9EG["dsp"], "DSP48E2 slices", f"{DS891}, ZU9EG",
                        f"{NOT_RETRIEVED}; equals {SEED_HEPPO} Table IV 'Available' "
                        "and stanford-ppl/spatial ZCU.scala (DSPs 2520)"),
            "bram36": _fig(ZU9EG["bram36"], "36 Kb block RAMs", f"{DS891}, ZU9EG",
                           f"{NOT_RETRIEVED}; equals the ZCU target of Stanford Spatial "
                           "(stanford-ppl/spatial ZCU.scala: BRAM 912)"),
        },
        perf=_ultrascale_pl_perf(),
    )
    notes = (
        "No seed runs on the ZCU102; it is catalogued because HEPPO-GAE (seed 000) Table IV's 'Available' "
        f"column (LUT {ZU9EG['lut']:,} / FF {ZU9EG['ff']:,} / DSP {ZU9EG['dsp']:,}) equals this device's "
        "figures although the paper targets the ZCU106 (see zcu106 notes).",
        "The ZU9EG has no UltraRAM, so the PL unit has no 'uram' resource (capacity 0).",
        "Assumptions, not data-sheet numbers: PL clock 300 MHz, PS sustained rate (25% of peak), fp32/fp16 DSPs "
        "per MAC, kernel launch overhead, PS<->PL link latency and bandwidth.",
    )
    return Device(
        id="zcu102",
        board="ZCU102",
        part="xczu9eg-ffvb1156-2-e",
        family="Zynq UltraScale+ MPSoC (EG)",
        units={"PS": _zynq_ps(), "PL": pl},
        links=_zynq_links(pl_clock),
        notes=notes,
        aliases=("xczu9eg", "zu9eg", "xczu9eg-2ffvb1156e"),
    )


# --------------------------------------------------------------------------------------------
# Versal: VEK280 (XCVE2802, AIE-ML) and VCK190 (XCVC1902, AIE)
# --------------------------------------------------------------------------------------------

A72_CLOCK_MHZ = 1400.0
A72_FLOPS = 8.0  # one 4-lane fp32 FMA per cycle (128-bit NEON)


def _versal_ps(platform_source: str, clock_source: str, clock_note: str) -> Unit:
    return Unit(
        name="PS",
        description="dual-core Arm Cortex-A72 APU (the dual-core Cortex-R5F RPU is not scheduled)",
        clock_mhz=_fig(A72_CLOCK_MHZ, "MHz", clock_source, clock_note),
        resources={
            "cores": _fig(2, "cores", platform_source,
                          "APU cores only; the 2 Cortex-R5F cores are left to control code"),
        },
        perf=_ps_perf(
            A72_CLOCK_MHZ, A72_FLOPS,
            "assumed: Cortex-A72 128-bit NEON, one 4-lane fp32 FMA (8 FLOP) per cycle",
            (4.0, 16.0, "half where FMAs do not issue every cycle .. both NEON pipes taking FMAs"),
        ) | {"mem_gbytes_per_s_sustained": _fig(
            4.0, "GB/s per core", "assumed: one out-of-order Cortex-A72 core streaming from LPDDR4/DDR4 (read + write)",
            "COST stream: memory side of the PS roofline; replace with a measured value",
            rng=(2.0, 8.0, "x0.5 .. x2: single-core stream rates vary with DDR speed and prefetching"))},
    )


def _versal_pl_perf() -> dict:
    return {
        "dsp_per_mac_fixed24": _fig(1, "DSP58/MAC", f"derived: {UG1273_PL}", "operands up to 27x24 bits"),
        "dsp_per_mac_fixed27": _fig(
            2, "DSP58/MAC", f"derived: {UG1273_PL}", "a 27x27 product does not fit one 27x24 multiplier"
        ),
        "dsp_per_mac_fp32": _fig(
            1, "DSP58/MAC", f"derived: {UG1273_PL}",
            "the DSP58 has a hard single-precision floating-point mode (DSPFP32 multiply-add)",
        ),
        "dsp_per_mac_fp16": _fig(
            1, "DSP58/MAC", "assumed: fp16 MAC mapped onto one DSPFP32 (widen, multiply-add, narrow)",
            "to be calibrated from Vitis HLS reports; AP-DRL (seed 003) runs its PL nodes in FP16",
            rng=(1, 2, "one DSPFP32 .. a separate DSP for the narrowing add"),
        ),
        "launch_overhead_us": _fig(
            2.0, "us", "assumed: XRT start of a PL kernel (ap_start handshake + polling)",
            "AP-DRL (seed 003) §III-A: PL start-up is short relative to the AIE's",
            rng=(1.0, 20.0, "a register poke and poll .. an XRT call through the driver"),
        ),
    }


PLIO_LATENCY_US = 0.175  # fitted: see PLIO_LATENCY_SOURCE
PLIO_LATENCY_SOURCE = ("fitted to 71 calibration rows of designs/qor/aie.csv (AMD Vitis Libraries 2024.2 / 2025.1 "
                       "DSP library L2 benchmarks, matrix_mult and matrix_vector_mul on AIE and AIE-ML; ids "
                       "aie-2024.2-mm-006 .. aie-2025.1-mm-131): steady-state latency, rlhls qor")


def _versal_links(pl_clock_mhz: float, aie_clock_mhz: float) -> tuple:
    axi = 16.0 * pl_clock_mhz
    plio = 8.0 * pl_clock_mhz
    gmio = 4.0 * aie_clock_mhz
    axi_src = f"assumed: one 128-bit AXI port between PS and PL at the PL clock {pl_clock_mhz:g} MHz = 16 B x f"
    plio_src = (f"derived: one 64-bit PLIO stream ({AM020_PL}) at the PL clock {pl_clock_mhz:g} MHz = 8 B x f; "
                "a kernel using n PLIOs (perf['plio_count'] at most) gets n times this")
    gmio_src = (f"derived: one 32-bit GMIO stream through the NoC DMA at the AIE clock {aie_clock_mhz:g} MHz = 4 B x f "
                f"({UG1603_PL}: 4 GB/s per AIE<->DMA connection at 1 GHz)")
    axi_lat = _fig(1.0, "us", "assumed: AXI hand-off including the start/done handshake",
                   rng=(0.2, 5.0, "a bare AXI burst .. a DMA set-up with interrupt"))
    plio_lat = _fig(PLIO_LATENCY_US, "us", PLIO_LATENCY_SOURCE,
                    "CDC FIFO + stream-switch hops + buffer lock hand-off (AM020 'Stream Switch Buffering and "
                    "Latency'); the AIE model adds it twice (in and out)")
    gmio_lat = _fig(5.0, "us", "assumed: PS writes DDR, AIE array DMA reads it through the NoC (GMIO)",
                    rng=(1.0, 20.0, "a warm NoC DMA .. a cache flush and a DMA set-up through the driver"))
    axi_rng = (axi / 2, axi * 4, "a half-used port .. four AXI ports in parallel")
    return (
        Link("PS", "PL", axi_lat, _fig(axi, "B/us", axi_src, rng=axi_rng)),
        Link("PL", "PS", axi_lat, _fig(axi, "B/us", axi_src, rng=axi_rng)),
        Link("PL", "AIE", plio_lat, _fig(plio, "B/us", plio_src)),
        Link("AIE", "PL", plio_lat, _fig(plio, "B/us", plio_src)),
        Link("PS", "AIE", gmio_lat, _fig(gmio, "B/us", gmio_src)),
        Link("AIE", "PS", gmio_lat, _fig(gmio, "B/us", gmio_src)),
    )


PLIO_ROUTABLE_FRACTION = 0.75  # see perf['plio_routable_fraction']


def _aie_interface_perf(tiles: int, tiles_source: str, total_gbs: float, total_source: str) -> dict:
    return {
        "plio_bits": _fig(64, "bits", f"{AM020_PL}; {AM009_PL}",
                          "each PL<->AIE stream is 64-bit (32/64, or two paired as one 128-bit PLIO)"),
        "pl_interface_tiles": _fig(tiles, "tiles", tiles_source),
        "plio_count": _fig(8 * tiles, "PL->AIE streams",
                           f"derived: 8 PL->AIE streams per PL interface tile ({AM020_PL}) x pl_interface_tiles"),
        "plio_count_out": _fig(6 * tiles, "AIE->PL streams",
                               f"derived: 6 AIE->PL streams per PL interface tile ({AM020_PL}) x pl_interface_tiles"),
        "pl_to_aie_gbytes_per_s": _fig(total_gbs, "GB/s", total_source,
                                       "total PL->AIE interface bandwidth, -2 (0.80 V) grade"),
        # what a graph may use of plio_count / plio_count_out (designs.kernels.cost.aie_plio_pairs)
        "plio_routable_fraction": _fig(
            PLIO_ROUTABLE_FRACTION, "of the PL<->AIE streams",
            "assumed: AMD publishes no routable fraction. The AIE compiler places each PLIO on an interface-tile "
            "column near its kernels and routes packet-switched and memory-tile traffic through the same stream "
            "switches, so a graph that takes every stream (AP-DRL's plans fill them to 98-100 %) leaves the router "
            "no freedom; 3/4 keeps one stream in four free",
            "the partitioner's ('AIE', 'plio') capacity and the build's AIE fit use the budget; raise it when a "
            "placed-and-routed graph shows more",
            rng=(0.5, 1.0, "half the streams .. every stream routed")),
        "launch_overhead_us": _fig(
            20.0, "us",
            "assumed: XRT graph run/wait per kernel invocation (AP-DRL §III-A: kernel launch dominates small layers)",
            "AP-DRL gives no number; calibrate from a profile CSV",
            rng=(2.0, 50.0, "a warm graph iteration .. an XRT graph run/wait through the driver"),
        ),
    }


# XCVE2802 / XCVC1902 programmable logic and AI Engine arrays
VE2802 = dict(lut=520_704, ff=1_041_408, dsp=1_312, bram36=600, uram=264)
VC1902 = dict(lut=899_840, ff=1_799_680, dsp=1_968, bram36=967, uram=463)
VE2802_AIE = dict(tiles=304, columns=38, mem_tiles=76, pl_tiles=28)
VC1902_AIE = dict(tiles=400, columns=50, pl_tiles=39)

# AP-DRL (seed 003) §V-A: "a dual-core Cortex-A72 APU, 304 AIE-ML tiles, 1312 DSP engines, 520.7K LUTs,
# and 113.4 Mb PL memory"; §III-A: PL@245 MHz vs AIE@1 GHz.
APDRL_VEK280 = dict(a72_cores=2, aie_tiles=304, dsp=1312, lut_k=520.7, pl_memory_mbit=113.4)


def pl_memory_mbit(lut: float, bram36: float, uram: float) -> float:
    """LUTRAM + block RAM + UltraRAM of a Versal PL in Mb (2**20 bits), the way DS950 totals them.

    LUTRAM: half the LUTs of a CLB can be 64-bit RAM (UG1273); block RAM 36 Kb; UltraRAM 288 Kb.
    """
    bits = lut / 2 * 64 + bram36 * 36 * 1024 + uram * 288 * 1024
    return bits / 2**20


def _vek280() -> Device:
    pl_clock, aie_clock = 245.0, 1000.0
    ps = _versal_ps(
        f"{SEED_APDRL} §II-B, §V-A (dual-core Cortex-A72 APU); {DS950}",
        DS958_PS,
        "FAPUMAX for the -2 grade at VCC_PSFP 0.80 V (M), i.e. the VEK280's -2MP part",
    )
    pl = Unit(
        name="PL",
        description="Versal fabric of the XCVE2802 (CLB LUT/FF, DSP58, 36 Kb BRAM, 288 Kb UltraRAM)",
        clock_mhz=_fig(pl_clock, "MHz", f"{SEED_APDRL} §III-A (PL@245 MHz)",
                       f"the AIE-PL interface runs up to 625 MHz at -2 (M) ({DS958_AIE}, FMAX_AI_PL)"),
        resources={
            "lut": _fig(VE2802["lut"], "CLB LUTs", f"{DS950}, VE2802",
                        f"{NOT_RETRIEVED}; AP-DRL §V-A quotes 520.7K"),
            "ff": _fig(VE2802["ff"], "CLB flip-flops", f"derived: 2 flip-flops per LUT ({UG1273_PL}) x lut",
                       "DS950 lists the same count"),
            "dsp": _fig(VE2802["dsp"], "DSP58 engines", f"{DS950}, VE2802",
                        f"{NOT_RETRIEVED}; AP-DRL §V-A quotes 1312"),
            "bram36": _fig(VE2802["bram36"], "36 Kb block RAMs", f"{DS950}, VE2802",
                           f"{NOT_RETRIEVED} and not corroborated; see notes on AP-DRL's 113.4 Mb"),
            "uram": _fig(VE2802["uram"], "288 Kb UltraRAMs", f"{DS950}, VE2802",
                         f"{NOT_RETRIEVED} and not corroborated; see notes on AP-DRL's 113.4 Mb"),
        },
        perf=_versal_pl_perf(),
    )
    a = VE2802_AIE
    aie_perf = {
        "macs_per_cycle_bf16": _fig(128, "MAC/cycle/tile",
                                    f"{AM020_PROC} ('128 bfloat16 MAC operations with FP32 accumulation')",
                                    "native BF16 with FP32 accumulation; AM020 Summary: 256 bf16 ops/tile"),
        "macs_per_cycle_fp32": _fig(21, "MAC/cycle/tile", f"{AM020_SUMMARY} (FP32: 42 ops/tile, emulated)",
                                    f"no native FP32 vector unit: emulated with bf16 passes "
                                    f"({UG1603_FP}: 6 for 'fast', 9 'safe', 3 'low')"),
        "macs_per_cycle_int8": _fig(256, "MAC/cycle/tile", f"{AM020_PROC}; {AM020_SUMMARY} (512 ops/tile)"),
        "macs_per_cycle_int16": _fig(64, "MAC/cycle/tile", f"{AM020_SUMMARY} (128 ops/tile)"),
        **_aie_interface_perf(
            a["pl_tiles"],
            f"{UG1603_PL} ('XCVE2802: 38 columns ... only 28 array interface tiles are available to the PL interface')",
            1120.0, f"{DS958_AIE}, Table 2, VE2802, -2 (M)",
        ),
    }
    aie = Unit(
        name="AIE",
        description="AIE-ML array of the XCVE2802: 38 columns x 8 rows of AIE-ML tiles + 2 rows of 512 KB memory tiles",
        clock_mhz=_fig(aie_clock, "MHz", f"{SEED_APDRL} §II-B, §III-A (AIE@1 GHz)",
                       f"the -2 (M) data-sheet maximum is 1250 MHz ({DS958_AIE}, FMAX)"),
        resources={
            "aie_tiles": _fig(a["tiles"], "AIE-ML tiles", f"{MLIR_AIE}; {SEED_APDRL} §V-A",
                              "also 'VE2802 ... contains 304 AI Engine tiles' (AMD Vitis AI Engine tutorials)"),
            "aie_mem_tiles": _fig(a["mem_tiles"], "512 KB memory tiles",
                                  f"derived: {MLIR_AIE} (2 memory-tile rows x 38 columns)"),
            "aie_data_memory_kb": _fig(a["tiles"] * 64, "KB",
                                       f"derived: aie_tiles x 64 KB data memory per tile ({AM020_SUMMARY})"),
            "aie_mem_tile_kb": _fig(a["mem_tiles"] * 512, "KB", f"derived: aie_mem_tiles x 512 KB ({AM020_SUMMARY})"),
        },
        perf=aie_perf,
    )
    ours = pl_memory_mbit(VE2802["lut"], VE2802["bram36"], VE2802["uram"])
    notes = (
        "AP-DRL (seed 003) §V-A describes the VEK280 as 'a dual-core Cortex-A72 APU, 304 AIE-ML tiles, 1312 DSP "
        "engines, 520.7K LUTs, and 113.4 Mb PL memory'. Cores, tiles and DSPs equal the catalogue; "
        f"520.7K is {VE2802['lut']:,} LUTs rounded to 0.1K.",
        f"PL memory: LUTRAM + {VE2802['bram36']} BRAM36 + {VE2802['uram']} URAM in the catalogue total "
        f"{ours:.1f} Mb against AP-DRL's {APDRL_VEK280['pl_memory_mbit']} Mb "
        f"({100 * (APDRL_VEK280['pl_memory_mbit'] - ours) / APDRL_VEK280['pl_memory_mbit']:.1f}% apart). "
        "The BRAM/URAM counts could not be re-read from DS950; the gap is unresolved — check DS950 before "
        "relying on bram36/uram for this part.",
        "AP-DRL's clocks (PL 245 MHz, AIE 1 GHz) are its operating points, below the DS958 -2 (M) maxima "
        "(AIE 1250 MHz, AIE-PL interface 625 MHz); the catalogue uses AP-DRL's clocks so its results can be "
        "reproduced. AP-DRL's numbers come from hardware emulation, not a board.",
        "AIE-ML has native BF16 (128 MAC/cycle/tile, FP32 accumulation) and no native FP32 vector unit "
        "(emulated, ~21 MAC/cycle/tile); AP-DRL runs AIE nodes in BF16 for this reason.",
        "Assumptions, not data-sheet numbers: PS sustained rate, fp16 DSPs per MAC, kernel launch overheads "
        "(PL 2 us, AIE 20 us), all link latencies, and the PS<->PL and PS<->AIE bandwidths.",
    )
    return Device(
        id="vek280",
        board="VEK280",
        part="xcve2802-vsvh1760-2MP-e-S",
        family="Versal AI Edge",
        units={"PS": ps, "PL": pl, "AIE": aie},
        links=_versal_links(pl_clock, aie_clock),
        notes=notes,
        aliases=("xcve2802", "ve2802"),
    )


def _vck190() -> Device:
    pl_clock, aie_clock = 300.0, 1250.0
    ps = _versal_ps(
        UG1702_VCK190,
        f"{DS958_PS} (the AI Edge table; the AI Core DS957 PS table was not retrieved)",
        "FAPUMAX for the -2 grade at 0.80 V (M); the VCK190's part is -2MP; assumed equal in DS957",
    )
    pl = Unit(
        name="PL",
        description="Versal fabric of the XCVC1902 (CLB LUT/FF, DSP58, 36 Kb BRAM, 288 Kb UltraRAM)",
        clock_mhz=_fig(pl_clock, "MHz", "assumed: 300 MHz kernel clock (no seed targets the VCK190)",
                       f"AM009 pairs a 1 GHz AIE with a 500 MHz PL; AIE-PL interface up to 625 MHz at -2 (M) "
                       f"({DS957_AIE})",
                       rng=(200.0, 500.0, "typical HLS closure .. AM009's 500 MHz PL")),
        resources={
            "lut": _fig(VC1902["lut"], "CLB LUTs", f"{DS950}, VC1902", NOT_RETRIEVED),
            "ff": _fig(VC1902["ff"], "CLB flip-flops", f"derived: 2 flip-flops per LUT ({UG1273_PL}) x lut",
                       "DS950 lists the same count"),
            "dsp": _fig(VC1902["dsp"], "DSP58 engines", f"{UG1702_VCK190}; {DS950}, VC1902"),
            "bram36": _fig(VC1902["bram36"], "36 Kb block RAMs", f"{DS950}, VC1902", NOT_RETRIEVED),
            "uram": _fig(VC1902["uram"], "288 Kb UltraRAMs", f"{DS950}, VC1902", NOT_RETRIEVED),
        },
        perf=_versal_pl_perf(),
    )
    a = VC1902_AIE
    aie_perf = {
        "macs_per_cycle_fp32": _fig(8, "MAC/cycle/tile", f"{AM009_VPU} (32 SPFP x 32 SPFP: 8)",
                                    "AM009 'Floating-Point Vector Unit': eight lanes of single-precision MAC"),
        "macs_per_cycle_bf16": _fig(8, "MAC/cycle/tile",
                                    "assumed: bf16 operands widened to fp32 and run at the fp32 rate",
                                    f"the first-generation AI Engine has no bfloat16 datapath ({AM020_SUMMARY}: '–')",
                                    rng=(4, 8, "the widening costing a pass .. the fp32 rate")),
        "macs_per_cycle_int8": _fig(128, "MAC/cycle/tile", f"{AM009_VPU} (8 real x 8 real: 128)"),
        "macs_per_cycle_int16": _fig(32, "MAC/cycle/tile", f"{AM009_VPU} (16 real x 16 real: 32)"),
        **_aie_interface_perf(
            a["pl_tiles"],
            f"{AM009_PL} ('In the VC1902 device, there are 50 columns ... "
            "only 39 array interface tiles are available to the PL interface')",
            1560.0, f"{DS957_AIE}, VC1902 PL-to-AIE total bandwidth, -2 (M)",
        ),
    }
    aie = Unit(
        name="AIE",
        description="AI Engine (AIE1) array of the XCVC1902: 50 columns x 8 rows, 32 KB data memory per tile",
        clock_mhz=_fig(aie_clock, "MHz", f"{DS957_AIE} (FMAX, -2 at 0.80 V (M) = the VCK190's -2MP part)",
                       "AMD's Vitis libraries benchmark the -1 part at 1 GHz and note 1.25 GHz "
                       "for xcvc1902-vsva2197-2MP-e-S"),
        resources={
            "aie_tiles": _fig(a["tiles"], "AI Engine tiles", f"{UG1702_VCK190}; {MLIR_AIE}"),
            "aie_data_memory_kb": _fig(a["tiles"] * 32, "KB",
                                       f"derived: aie_tiles x 32 KB data memory per tile ({AM020_SUMMARY})"),
        },
        perf=aie_perf,
    )
    notes = (
        "No seed runs on the VCK190; it is the AI Core (first-generation AI Engine) counterpart of the VEK280.",
        "The AI Engine (AIE1) has no bfloat16 datapath: BF16 nodes are costed at the FP32 rate of 8 MAC/cycle/tile "
        "(assumption), so AP-DRL's BF16-on-AIE choice buys no compute here, only bandwidth.",
        "The VC1902 has no AIE memory tiles (the AIE-ML's 512 KB shared memories), "
        "so there is no 'aie_mem_tiles' resource.",
        "Assumptions, not data-sheet numbers: PL clock 300 MHz, PS sustained rate, fp16 DSPs per MAC, kernel launch "
        "overheads, all link latencies, and the PS<->PL and PS<->AIE bandwidths.",
    )
    return Device(
        id="vck190",
        board="VCK190",
        part="xcvc1902-vsva2197-2MP-e-S",
        family="Versal AI Core",
        units={"PS": ps, "PL": pl, "AIE": aie},
        links=_versal_links(pl_clock, aie_clock),
        notes=notes,
        aliases=("xcvc1902", "vc1902"),
    )


# --------------------------------------------------------------------------------------------
# Maxeler MAX4 with a Stratix-V 5SGSD8 (CPP, F-DDPG) and its x86 host
# --------------------------------------------------------------------------------------------

# CPP (seed 001) Table I 'FPGA Total' row and F-DDPG (seed 002) Tables I/II 'Available' column
STRATIX_5SGSD8 = dict(alm=262_400, ff=524_800, ff_secondary=524_800, dsp=1_963, mult18x18=3_926, m20k=2_567)
XEON_CLOCK_MHZ = 2500.0
XEON_FLOPS = 16.0  # AVX: one 8-wide fp32 add + one 8-wide fp32 multiply per cycle


def _max4() -> Device:
    both = f"{SEED_CPP} §IV-C; {SEED_FDDPG} §V-A"
    ps = Unit(
        name="PS",
        description="host Intel Xeon E5-2640 (6 cores, 2.5 GHz, 32 nm), off-chip, linked to the MAX4 over PCIe 2.0 x4",
        clock_mhz=_fig(XEON_CLOCK_MHZ, "MHz", both, "'Intel Xeon E5-2640 CPU (32nm, 6 cores, 2.5GHz)'"),
        resources={"cores": _fig(6, "cores", both)},
        perf=_ps_perf(
            XEON_CLOCK_MHZ, XEON_FLOPS,
            "assumed: Sandy Bridge AVX, one 8-wide fp32 add and one 8-wide fp32 multiply per cycle",
            (8.0, 16.0, "one of the two AVX ports busy .. both"),
        ) | {"mem_gbytes_per_s_sustained": _fig(
            8.0, "GB/s per core", "assumed: one Sandy Bridge core streaming from DDR3 (read + write)",
            "COST stream: memory side of the PS roofline; replace with a measured value",
            rng=(4.0, 16.0, "x0.5 .. x2: single-core stream rates vary with DDR speed and prefetching"))},
    )
    s = STRATIX_5SGSD8
    table1 = f"{SEED_CPP} Table I 'FPGA Total'; {SEED_FDDPG} Tables I/II 'Available'"
    pl = Unit(
        name="PL",
        description="Intel (Altera) Stratix V GS 5SGSD8 on a Maxeler MAX4 dataflow engine "
                    "(ALMs, variable-precision DSP blocks, M20K)",
        clock_mhz=_fig(200.0, "MHz", f"{SEED_CPP} §IV-C ('FPGA clock frequency is 200MHz'); {SEED_FDDPG} §V-A"),
        resources={
            "alm": _fig(s["alm"], "ALMs", f"{table1} ('Logic')",
                        f"{INTEL_SV} lists 262,400 ALMs for the 5SGSD8 ({NOT_RETRIEVED}); "
                        "an ALM is two adaptive LUTs, not a 6-LUT"),
            "ff": _fig(s["ff"], "primary registers", f"{table1} ('Primary FF')",
                       f"{INTEL_SV} lists 1,049,600 registers = 4 per ALM, i.e. primary + secondary ({NOT_RETRIEVED})"),
            "ff_secondary": _fig(s["ff_secondary"], "secondary registers",
                                 f"{SEED_FDDPG} Tables I/II ('Secondary FFs' Available)"),
            "dsp": _fig(s["dsp"], "variable-precision DSP blocks", f"{table1} ('DSP')",
                        f"{INTEL_SV} ({NOT_RETRIEVED})"),
            "mult18x18": _fig(s["mult18x18"], "18x18 multipliers",
                              f"{SEED_FDDPG} Tables I/II ('Multipliers (18x18)' Available)",
                              f"two per DSP block ({INTEL_SV_DSP}: 18x18 uses 1/2 block)"),
            "m20k": _fig(s["m20k"], "M20K blocks (20 Kb)", f"{table1} ('BRAM', 'Block memory (M20k)')",
                         f"{INTEL_SV} ({NOT_RETRIEVED})"),
        },
        perf={
            "dsp_per_mac_fixed18": _fig(0.5, "DSP blocks/MAC", INTEL_SV_DSP,
                                        "18x18: 1/2 of a variable-precision DSP block"),
            "dsp_per_mac_fixed27": _fig(1, "DSP blocks/MAC",
                                        f"{INTEL_SV_DSP}; {SEED_CPP} §IV-B "
                                        "('a 27bit x 27bit multiplication can be carried out by one DSP')"),
            "dsp_per_mac_fixed36": _fig(2, "DSP blocks/MAC",
                                        f"{INTEL_SV_DSP}; {SEED_CPP} §IV-B ('for 28bit two DSPs are needed')",
                                        "any operand of 28..36 bits"),
            "dsp_per_mac_fp32": _fig(1, "DSP blocks/MAC",
                                     f"derived: {INTEL_SV_DSP} (27x27: 'single precision floating point')",
                                     "the multiplier's 24-bit mantissa product; the adder is built in ALMs"),
            "dsp_per_mac_fp16": _fig(0.5, "DSP blocks/MAC",
                                     "assumed: an 11-bit mantissa product fits an 18x18 half block",
                                     "adder in ALMs", rng=(0.5, 1.0, "a half block .. a whole one")),
            "launch_overhead_us": _fig(10.0, "us", "assumed: Maxeler SLiC action start over PCIe",
                                       "replace with a measured value",
                                       rng=(2.0, 50.0, "a polled start .. a driver call with interrupt")),
        },
    )
    pcie = _fig(2000.0, "B/us", f"derived: {PCIE2}: 4 lanes x 5 GT/s x 8/10 = 2 GB/s per direction",
                f"{SEED_FDDPG} §V-B: PCIe 2.0 x4; its Infiniband path is driver-limited")
    lat = _fig(10.0, "us", "assumed: PCIe round trip through the host driver (SLiC) per transfer",
               rng=(2.0, 50.0, "a bare PCIe round trip .. a driver call with interrupt"))
    # F-DDPG §V-B runs its model 3 over Infiniband, 'theoretically faster ... [but] the Linux driver ... limits
    # the speed', and gives no rate: the effective rate is fitted to its Table III row (2.311 ms per gradient)
    ib = _fig(IB_BYTES_PER_US, "B/us", f"fitted to {SEED_FDDPG} Table III model 3 (Infiniband, 2.311 ms per gradient): "
              f"the ddpg_gradient kernel's {IB_FIT['bytes']:,} bytes over 2311 us less its modeled compute "
              f"({IB_FIT['compute_us']} us) and 3 x the assumed 10 us latency",
              "driver-limited, as the seed says; FDR 4x Infiniband would carry ~6,800 B/us (not the seed's figure)")
    ib_lat = _fig(10.0, "us", "assumed: as the PCIe path's, per transfer",
                  rng=(2.0, 50.0, "as the PCIe path's"))
    notes = (
        "CPP (seed 001) Table I 'FPGA Total' (Logic 262,400 / Primary FF 524,800 / DSP 1,963 / BRAM 2,567) and "
        "F-DDPG (seed 002) Tables I/II 'Available' (also Secondary FFs 524,800 and 3,926 18x18 multipliers) agree "
        "with each other and with the Stratix V GS 5SGSD8 in Intel's device overview (262,400 ALMs, 1,049,600 "
        "registers = primary + secondary, 1,963 DSP blocks = 3,926 18x18 multipliers, 2,567 M20K).",
        "CPP's 'BRAM' column counts M20K blocks (20 Kb), not Xilinx 36 Kb BRAMs; 'Logic' counts ALMs, not LUTs.",
        f"F-DDPG's percentages recompute from the 'Available' column except one: Table II (model 3) prints "
        f"'Multipliers (18x18) 3749 / 3926 = 95.26%', but 3749/{s['mult18x18']} = {100 * 3749 / s['mult18x18']:.2f}% "
        f"(95.26% would be {0.9526 * s['mult18x18']:.0f} multipliers) — a typo in the paper's usage or percentage, "
        "not a disagreement about the device.",
        "CPP §IV-B: a 27x27 multiply fits one DSP block and 28 bits need two — consistent with Intel's table "
        "(27x27 = 1 block, 36x36 = 2 blocks); CPP chose 27-bit fixed point (4 integer + 23 fraction bits) for this.",
        "The 'PS' unit here is the off-chip host (Xeon E5-2640), reached over PCIe 2.0 x4; F-DDPG reports that "
        "Infiniband is theoretically faster but driver-limited, and used two FPGAs (actor and critic) for its model 3 "
        "— the catalogue models one MAX4 FPGA.",
        "The seeds do not give the package or speed grade of the 5SGSD8, so 'part' is the device name only.",
        "Assumptions, not data-sheet numbers: host sustained rate, fp16 DSPs per MAC, launch overhead, PCIe latency.",
    )
    return Device(
        id="max4-5sgsd8",
        board="Maxeler MAX4",
        part="5SGSD8",
        family="Intel Stratix V GS (Maxeler MAX4 dataflow engine) + x86 host",
        units={"PS": ps, "PL": pl},
        links=(Link("PS", "PL", lat, pcie), Link("PL", "PS", lat, pcie),
               Link("PS", "PL", ib_lat, ib, name="infiniband"), Link("PL", "PS", ib_lat, ib, name="infiniband")),
        notes=notes,
        aliases=("max4", "5sgsd8", "stratixv", "stratix-v", "stratix v 5sgsd8", "5sgsmd8"),
    )


# --------------------------------------------------------------------------------------------
# Kintex UltraScale+ KU15P on a PCIe card with the MAX4's x86 host (CPP's AMD build target)
# --------------------------------------------------------------------------------------------

DS890 = "AMD DS890 UltraScale Architecture and Product Data Sheet: Overview, Kintex UltraScale+ device-feature table"
XMP103 = "AMD XMP103 UltraScale+ FPGA Product Selection Guide, Kintex UltraScale+ table"
KU15P = dict(lut=522_720, ff=1_045_440, dsp=1_968, bram36=984, uram=128)


def _ku15p() -> Device:
    max4 = _max4()
    k = KU15P
    src = f"{DS890}, KU15P; {XMP103}"
    pl = Unit(
        name="PL",
        description="Kintex UltraScale+ XCKU15P fabric on a PCIe card (CLB LUT/FF, DSP48E2, 36 Kb BRAM, "
                    "288 Kb UltraRAM)",
        clock_mhz=_fig(200.0, "MHz", f"assumed: the CPP design's 200 MHz ({SEED_CPP} §IV-C), so only the FPGA changes",
                       "DSP48E2 FMAX is 775 MHz at -2 (Kintex UltraScale+ DC/AC data sheet DS922)",
                       rng=(150.0, 400.0, "a slack-poor closure .. where HLS kernels on a -2 part usually close")),
        resources={
            "lut": _fig(k["lut"], "CLB LUTs", src, NOT_RETRIEVED),
            "ff": _fig(k["ff"], "CLB flip-flops", f"derived: 2 flip-flops per CLB LUT x lut; {src}", NOT_RETRIEVED),
            "dsp": _fig(k["dsp"], "DSP48E2 slices", src,
                        f"{NOT_RETRIEVED}; 1,968 against the 5SGSD8's 1,963 DSP blocks, but a DSP48E2 multiplies "
                        "27x18: a 27x27 product takes two (dsp_per_mac_fixed27)"),
            "bram36": _fig(k["bram36"], "36 Kb block RAMs", src, NOT_RETRIEVED),
            "uram": _fig(k["uram"], "288 Kb UltraRAMs", src, NOT_RETRIEVED),
        },
        perf=_ultrascale_pl_perf(),
    )
    notes = (
        "Not a seed's device: the AMD part the CPP designs' Vitis HLS projects name (designs/cpp.py BUILD_PART). "
        "The KU15P is chosen for its DSP count (1,968 DSP48E2 against the Stratix V 5SGSD8's 1,963 variable-precision "
        "DSP blocks) and its class: a stand-alone FPGA on PCIe cards attached to an x86 host, as the MAX4 "
        "(xcku15p-ffve1517 parts sit on e.g. NI's PXIe-7986 FlexRIO and NVIDIA's Innova-2 Flex cards).",
        "A 5SGSD8 DSP block multiplies 27x27 in one block (CPP §IV-B picked 27-bit words for it); a DSP48E2 is 27x18, "
        "so the same products take two slices here. With this kernel's own tanh unit (fvp act_unit='table') the "
        "seed's Table I parallelism still fits (rlhls kernel fvp --design cpp-trpo-ant --device ku15p --set "
        "act_unit=table); with the seed's fitted tanh cost (act_unit='seed') it does not.",
        "PS and links are the MAX4's (the seed's Xeon E5-2640 host over PCIe 2.0 x4), an assumption that keeps the "
        "comparison to the FPGA; a KU15P card's own PCIe Gen3 x16 link is faster.",
        "The part's package and speed grade (FFVE1517, -2, extended) are a choice; the resources do not depend "
        "on them.",
    )
    return Device(
        id="ku15p",
        board="Kintex UltraScale+ KU15P PCIe card",
        part="xcku15p-ffve1517-2-e",
        family="Kintex UltraScale+ (PCIe accelerator card) + x86 host",
        units={"PS": max4.units["PS"], "PL": pl},
        links=tuple(l for l in max4.links if not l.name),  # PCIe; the Infiniband path is the MAX4 system's
        notes=notes,
        aliases=("xcku15p",),
    )


# --------------------------------------------------------------------------------------------
# The catalogue and the lookup
# --------------------------------------------------------------------------------------------

DEVICES: dict[str, Device] = {d.id: d for d in (_zcu106(), _zcu102(), _vek280(), _vck190(), _max4(), _ku15p())}


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


def _build_index() -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    exact: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for dev in DEVICES.values():
        for name in (dev.id, dev.board, dev.part, *dev.aliases):
            key = _norm(name)
            if exact.get(key, dev.id) != dev.id:
                raise RlhlsError(f"device name {name!r} is claimed by both {exact[key]} and {dev.id}")
            exact[key] = dev.id
        for name in (dev.part, *dev.aliases):
            if _norm(name).startswith(("xc", "5sg")):
                prefixes.append((_norm(name), dev.id))
    prefixes.sort(key=lambda p: -len(p[0]))
    return exact, tuple(prefixes)


_EXACT, _PREFIXES = _build_index()


def get_device(name) -> Device:
    """The catalogue device for an id ('zcu106'), a board ('ZCU106') or a part ('XCZU7EV', 'xcve2802-...');
    a Device is returned as it is.

    Case-insensitive; spaces, '-' and '_' are ignored.  A full part number with another package or
    speed grade resolves by its part family (e.g. 'XCZU7EV-2FFVC1156E' -> zcu106).
    """
    if isinstance(name, Device):
        return name
    known = ", ".join(DEVICES)
    if not isinstance(name, str) or not name.strip():
        raise RlhlsError(f"device name {name!r} is not a non-empty string; expected one of: {known}")
    key = _norm(name)
    if key in _EXACT:
        return DEVICES[_EXACT[key]]
    for prefix, dev_id in _PREFIXES:
        if key.startswith(prefix):
            return DEVICES[dev_id]
    near = did_you_mean(name, [*DEVICES, *(d.board for d in DEVICES.values())])
    raise RlhlsError(
        f"unknown device {name!r}{': ' + near if near else ''} (expected one of: {known}; or a board/part such as "
        "ZCU106, XCZU7EV, XCVE2802, 5SGSD8)"
    )
