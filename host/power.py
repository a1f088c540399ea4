"""Power and energy on a Zynq UltraScale+ SoC: static and dynamic power per resource and clock.

The decomposition is XPE's (AMD UG440, "Design Dynamic Power"): a device's static power plus the
design's dynamic power, each resource's dynamic power proportional to its count, its clock and its
toggle rate (UG440 "Using the Logic Sheet": Signal Rate = clock x toggle rate; default toggle 12.5 %).
So here::

    PS        static + active cores x per-core power          (the PS's full- and low-power domains)
    PL        static (0 when the PL domain is powered off) + sum(count x uW/MHz x clock) while it runs
    energy    sum(power x the seconds it is drawn)

Every coefficient is a ``Figure`` with its source; where no document gave the number it says
"assumed" and why (XPE itself was not run: its per-resource tables are inside the spreadsheet).
"""

from __future__ import annotations

import math
import numbers

from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import Figure

__all__ = ["ZU7EV_POWER", "PL_RESOURCES", "ps_power_w", "pl_dynamic_w", "soc_power_w", "energy_j"]

UG440 = "AMD UG440 Xilinx Power Estimator User Guide"
WIKI_POWER = ("AMD/Xilinx wiki 'Power Optimization Guide for Zynq UltraScale+ MPSoC', Device Capacity: "
              "'XCZU19EG device consumes 850mW more than a XCZU2EG device in static power'")
# system logic cells (AMD DS891, device-resources table): ZU2EG 103,320, ZU7EV 504,000, ZU19EG 1,143,450
_CELLS = {"zu2eg": 103_320, "zu7ev": 504_000, "zu19eg": 1_143_450}
_PL_STATIC_PER_CELL_W = 0.850 / (_CELLS["zu19eg"] - _CELLS["zu2eg"])

PL_RESOURCES = ("lut", "ff", "dsp", "bram36")

_X2 = "plausible x0.5 .. x2: XPE's figures move this much with the configuration and toggle rates"

# the ZCU106's XCZU7EV (-2, 25 C), the a2c-traffic design's device
ZU7EV_POWER = {
    "ps_static_w": Figure(0.20, "W", "assumed: the PS (FPD + LPD) leakage of a -2 part at 25 C is of this order in "
                          f"XPE ({UG440}); not run here", note=_X2, low=0.10, high=0.40),
    "ps_core_w": Figure(0.25, "W per active Cortex-A53 core at 1.2 GHz",
                        "assumed: one A53 core with its share of L2, interconnect and DDR traffic; no AMD document "
                        "found gives a per-core figure (XPE computes it from the PS configuration)",
                        note=_X2, low=0.125, high=0.50),
    "pl_static_w": Figure(round(_PL_STATIC_PER_CELL_W * _CELLS["zu7ev"], 4), "W",
                          f"derived: {WIKI_POWER}, taken as proportional to logic cells (the guide: 'static power is "
                          "directly proportional to device capacity'): 850 mW / (1,143,450 - 103,320) cells x 504,000 "
                          "cells of the ZU7EV (DS891); assumed zero intercept"),
    "lut_uw_per_mhz": Figure(0.04, "uW/MHz per LUT", f"assumed at {UG440}'s default 12.5 % toggle rate and fanout 3 "
                             "(the Logic sheet's per-LUT figure is inside XPE)",
                             note=_X2, low=0.02, high=0.08),
    "ff_uw_per_mhz": Figure(0.01, "uW/MHz per FF", f"assumed at {UG440}'s default 12.5 % toggle rate",
                            note=_X2, low=0.005, high=0.02),
    "dsp_uw_per_mhz": Figure(3.0, "uW/MHz per DSP48E2", f"assumed at ~38 % data toggle (random data, {UG440} 'Using "
                             "the DSP Sheet'), a 27x18 multiply-add each cycle",
                             note=_X2, low=1.5, high=6.0),
    "bram36_uw_per_mhz": Figure(8.0, "uW/MHz per 36 Kb BRAM", "assumed: one read or write port active each cycle",
                                note=_X2, low=4.0, high=16.0),
}


def _nonneg(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x < 0:
        raise RlhlsError(f"power: {what} = {x!r}: expected a number >= 0")
    return float(x)


def ps_power_w(active_cores, model=None) -> float:
    """The PS's power with `active_cores` A53 cores running (static + per-core)."""
    m = model or ZU7EV_POWER
    return m["ps_static_w"].value + _nonneg(active_cores, "active PS cores") * m["ps_core_w"].value


def pl_dynamic_w(resources: dict, clock_mhz, model=None) -> float:
    """Dynamic power of PL logic using `resources` ({lut, ff, dsp, bram36: count}) at `clock_mhz`."""
    m = model or ZU7EV_POWER
    f = _nonneg(clock_mhz, "PL clock (MHz)")
    return sum(_nonneg(resources.get(r, 0), f"PL {r}") * m[f"{r}_uw_per_mhz"].value for r in PL_RESOURCES) * f * 1e-6


def soc_power_w(active_cores, pl_resources: dict | None = None, clock_mhz: float = 0.0, model=None) -> dict:
    """{ps, pl_static, pl_dynamic, total} in W: the PS with `active_cores` cores; the PL powered off
    when `pl_resources` is None, else its static and the logic's dynamic power at `clock_mhz`."""
    m = model or ZU7EV_POWER
    ps = ps_power_w(active_cores, m)
    st = 0.0 if pl_resources is None else m["pl_static_w"].value
    dyn = 0.0 if pl_resources is None else pl_dynamic_w(pl_resources, clock_mhz, m)
    return {"ps": ps, "pl_static": st, "pl_dynamic": dyn, "total": ps + st + dyn}


def energy_j(parts) -> float:
    """Energy of [(watts, seconds), ...]."""
    return sum(_nonneg(w, "power (W)") * _nonneg(s, "time (s)") for w, s in parts)
