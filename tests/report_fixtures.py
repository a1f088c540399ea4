"""Vitis HLS report fixtures written by the tests, in the schema the tools write (see
partition/reports.py for the elements read). One writer per tool generation:

* ``vivado``  Vivado HLS 2018.3-2019.2: no ``FlowTarget``, ``DSP48E``, no ``URAM`` on 7-series parts,
  blank lines between sections and no indentation (2018.3), a ``DataflowPipelineThroughput`` range;
* ``vitis``   Vitis HLS 2020.1-2025.2: ``FlowTarget``, ``DSP``, ``URAM``, indented, real-time latencies
  (2022.1 on) and a per-module ``ModuleInformation`` whose figures are not the top's.

Layouts (``write_csynth(..., layout=)``): ``classic`` (``<proj>/<solution>/syn/report/csynth.xml`` and
``<top>_csynth.xml``), ``unified`` (``<work_dir>/hls/syn/report/csynth.xml`` and ``<top>_csynth.xml``),
``ide`` (``<comp>/<comp>/hls/syn/report/csynth.xml``).
"""

from __future__ import annotations

from pathlib import Path

VERSIONS = ("2018.3", "2019.2", "2020.1", "2021.2", "2022.1", "2023.1", "2023.2.2", "2024.1", "2025.2")


def csynth_xml(top, part, *, version="2023.2", target_ns=4.0, est_ns=3.1, best=100, worst=120, imin=101,
               imax=121, res=None, family="versalaicore", drop=(), sub_module=None) -> str:
    """A csynth.xml text. `best`/`worst`/`imin`/`imax` may be 'undef'; `res` {LUT, FF, DSP, BRAM_18K,
    URAM} (a missing key: no element); `drop`: element names left out (e.g. 'Interval-min')."""
    res = {"LUT": 1000, "FF": 2000, "DSP": 8, "BRAM_18K": 4, "URAM": 0} if res is None else res
    vivado = version < "2020"
    dsp = "DSP48E" if vivado else "DSP"

    def el(tag, value, ind=""):
        return "" if tag in drop else f"{ind}<{tag}>{value}</{tag}>\n"

    def resources(ind):
        out = ""
        for k in ("BRAM_18K", "DSP", "FF", "LUT", "URAM"):
            if k in res:
                out += el(dsp if k == "DSP" else k, res[k], ind)
        return out

    i1, i2, i3, i4 = ("", "", "", "") if version == "2018.3" else ("    ", "        ", "            ", "                ")
    gap = "\n" if version == "2018.3" else ""
    x = f"<profile>\n{gap}{i1}<ReportVersion>\n{el('Version', version, i2)}{i1}</ReportVersion>\n{gap}"
    x += f"{i1}<UserAssignments>\n{i2}<unit>ns</unit>\n{el('ProductFamily', family, i2)}{el('Part', part, i2)}"
    x += f"{el('TopModelName', top, i2)}{el('TargetClockPeriod', f'{target_ns:.2f}', i2)}"
    x += f"{i2}<ClockUncertainty>{target_ns * 0.27:.2f}</ClockUncertainty>\n"
    if not vivado:
        x += el("FlowTarget", "vivado", i2)
    x += f"{i1}</UserAssignments>\n{gap}{i1}<PerformanceEstimates>\n{i2}<PipelineType>no</PipelineType>\n"
    x += f"{i2}<SummaryOfTimingAnalysis>\n{i3}<unit>ns</unit>\n{el('EstimatedClockPeriod', est_ns, i3)}"
    x += f"{i2}</SummaryOfTimingAnalysis>\n{i2}<SummaryOfOverallLatency>\n{i3}<unit>clock cycles</unit>\n"
    x += el("Best-caseLatency", best, i3)
    x += f"{i3}<Average-caseLatency>{'undef' if 'undef' in (best, worst) else worst}</Average-caseLatency>\n"
    x += el("Worst-caseLatency", worst, i3)
    if version >= "2022":
        x += f"{i3}<Worst-caseRealTimeLatency>{f'{worst * target_ns:.3f} ns' if isinstance(worst, int) else 'undef'}" \
             "</Worst-caseRealTimeLatency>\n"
    if vivado:
        x += f"{i3}<DataflowPipelineThroughput>\n{i4}<range>\n{i4}<min>{imin}</min>\n{i4}<max>{imax}</max>\n"
        x += f"{i4}</range>\n{i3}</DataflowPipelineThroughput>\n"
    x += el("Interval-min", imin, i3) + el("Interval-max", imax, i3)
    x += f"{i2}</SummaryOfOverallLatency>\n{i1}</PerformanceEstimates>\n{gap}"
    if "AreaEstimates" not in drop:
        x += f"{i1}<AreaEstimates>\n"
        x += "" if "Resources" in drop else f"{i2}<Resources>\n{resources(i3)}{i2}</Resources>\n"
        if "AvailableResources" not in drop:
            x += f"{i2}<AvailableResources>\n{i3}<BRAM_18K>1934</BRAM_18K>\n{i3}<{dsp}>1968</{dsp}>\n"
            x += f"{i3}<FF>1799680</FF>\n{i3}<LUT>899840</LUT>\n{i2}</AvailableResources>\n"
        x += f"{i1}</AreaEstimates>\n{gap}"
    x += f"{i1}<InterfaceSummary>\n{i2}<RtlPorts>\n{i3}<name>ap_start</name>\n{i3}<Object>{top}</Object>\n"
    x += f"{i3}<Type>return value</Type>\n{i3}<IOProtocol>ap_ctrl_hs</IOProtocol>\n{i3}<Dir>in</Dir>\n"
    x += f"{i3}<Bits>1</Bits>\n{i2}</RtlPorts>\n{i1}</InterfaceSummary>\n"
    if sub_module and version >= "2022":  # per-module figures, which must not be taken for the top's
        x += f"{i1}<ModuleInformation>\n{i2}<Module>\n{i3}<Name>{sub_module}</Name>\n{i3}<PerformanceEstimates>\n"
        x += f"{i4}<SummaryOfOverallLatency>\n{i4}<Best-caseLatency>7</Best-caseLatency>\n"
        x += f"{i4}<Worst-caseLatency>9</Worst-caseLatency>\n{i4}</SummaryOfOverallLatency>\n"
        x += f"{i3}</PerformanceEstimates>\n{i3}<AreaEstimates>\n{i4}<Resources>\n{i4}<LUT>3</LUT>\n{i4}<FF>5</FF>\n"
        x += f"{i4}</Resources>\n{i3}</AreaEstimates>\n{i2}</Module>\n{i1}</ModuleInformation>\n"
    return x + "</profile>\n"


def report_dir(root, top, layout: str) -> Path:
    root = Path(root)
    return {"classic": root / "prj" / "sol1" / "syn" / "report",
            "unified": root / "work" / "hls" / "syn" / "report",
            "ide": root / top / top / "hls" / "syn" / "report"}[layout]


def write_csynth(root, top, part, *, layout="unified", both=True, **kw) -> Path:
    """Write the report where `layout` puts it under `root` (a component folder); returns csynth.xml."""
    d = report_dir(root, top, layout)
    d.mkdir(parents=True, exist_ok=True)
    text = csynth_xml(top, part, **kw)
    (d / "csynth.xml").write_text(text)
    if both:
        (d / f"{top}_csynth.xml").write_text(text)
    return d / "csynth.xml"


def cosim_rpt(top, *, version="2023.2", status="Pass", lat=(250, 260, 270), ii=("NA", "NA", "NA")) -> str:
    """A <top>_cosim.rpt text; 2022.1 on it has a 'Total Execution Time' column."""
    new = version >= "2022"
    tool = "Vivado HLS" if version < "2020" else "Vitis HLS"
    head = (f"================================================================\n== {tool} Report for '{top}'\n"
            "================================================================\n+ General Information: \n"
            f"    * Version:        {version}\n    * Project:        prj\n    * Solution:       sol1\n\n"
            f"================================================================\n== Co-Simulation Report for '{top}'\n"
            "================================================================\n")
    cols = [f"{c:>7}" for c in [*lat, *ii] + ([lat[1]] if new else [])]  # right-aligned, as the tool pads
    na = [f"{'NA':>7}"] * len(cols)
    extra = "| Total Execution Time |" if new else "|"
    table = (f"+--------+--------+-------------------------+------------------------+{'------+' if new else ''}\n"
             f"|        |        |         Latency         |        Interval        {extra}\n"
             f"|  RTL   | Status |   min  |   avg  |  max  |  min  |  avg  |  max  {'|      ' if new else ''}|\n"
             f"+--------+--------+-------------------------+------------------------+{'------+' if new else ''}\n"
             f"|    VHDL|      NA|{'|'.join(na)}|\n"
             f"| Verilog|{status:>8}|{'|'.join(cols)}|\n"
             f"+--------+--------+-------------------------+------------------------+{'------+' if new else ''}\n")
    return head + table


def write_cosim(root, top, *, layout="unified", **kw) -> Path:
    d = report_dir(root, top, layout).parent.parent / "sim" / "report"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{top}_cosim.rpt"
    p.write_text(cosim_rpt(top, **kw))
    return p
