"""Reading what the vendor tools report about a component: Vitis HLS synthesis (``csynth.xml``)
and co-simulation (``<top>_cosim.rpt``) reports, and the files of a folder that hold them.

``read_csynth(path) -> SynthReport`` reads one synthesis report as Vivado HLS 2018-2020 and
Vitis HLS 2020-2025 write it, in every layout they use:

* classic (``vivado_hls`` / ``vitis_hls -f``): ``<proj>/<solution>/syn/report/csynth.xml`` and
  the same report again as ``<top>_csynth.xml`` beside it;
* unified (``v++ -c --mode hls``, the Vitis IDE's components): ``<work_dir>/hls/syn/report/`` or
  ``<workspace>/<comp>/<comp>/hls/syn/report/``, same two names.

The elements relied on (all under the root ``<profile>``)::

    ReportVersion/Version                                  tool version (2018.3 ... 2025.2)
    UserAssignments/{TopModelName, Part, ProductFamily, TargetClockPeriod, FlowTarget}
    PerformanceEstimates/SummaryOfTimingAnalysis/EstimatedClockPeriod
    PerformanceEstimates/SummaryOfOverallLatency/{Best-caseLatency, Worst-caseLatency,
                                                  Interval-min, Interval-max}   (cycles or 'undef')
    AreaEstimates/Resources/{LUT, FF, DSP | DSP48E, BRAM_18K, URAM}   (a missing one: None)
    AreaEstimates/AvailableResources                        (present in every version)

``FlowTarget`` exists from Vitis HLS 2020.1 on (``vivado`` or ``vitis``); Vivado HLS reports lack
it. Latencies and intervals are ``undef`` where the tool cannot bound them (dataflow tops,
data-dependent loops): they come back as None.

The clocks, latencies, intervals and resources come from hls4ml's report module
(``hls4ml.report.vivado_report.parse_vivado_report``), as hls4ml reads its own projects. That
function takes a whole hls4ml project folder, so each report is shown to it in a throw-away
folder of the shape it expects (``project.tcl``, ``<top>_prj/hls.app``,
``<top>_prj/solution1/syn/report/<top>_csynth.xml``). hls4ml does not return the top, the part,
the product family, the version or the flow target (it knows them from its own project), so
those are read here from the same XML; and hls4ml dereferences each element it reads without a
check, so the elements above are checked here first, and a report without one of them is refused
with one line naming it instead of hls4ml's traceback.

``read_cosim(path) -> CosimReport`` reads a co-simulation report. The status, the min/max latency
and interval come from hls4ml too (the report placed at ``solution1/sim/report/<top>_cosim.rpt``).
hls4ml skips the average latency column, which is the one a profile wants (the mean of the
testbench's calls), so that column and the top (from the report's heading) are read here.

``read_aiesim_output(path) -> AieSimOutput`` reads one output PLIO's file as aiesimulator writes
it (``aiesimulator_output/data/<plio>.txt``, AMD UG1076 "Simulation Output Files"): data lines of
whitespace-separated numbers (the stream's words), each burst preceded by its time stamp
``T <time> ps|ns|us`` and, where a packet ends, ``TLAST``. It gives the words, the first and last
time stamps (ns) and the throughput between them. The AIE compiler's own reports (``Work/``:
mapping, tiles and PLIOs per graph) have no published schema and are not read.

``find_reports(folder)`` lists the synthesis and co-simulation reports under a folder: every
``csynth.xml`` (the top's summary); a ``<name>_csynth.xml`` only in a folder without one and where
its ``TopModelName`` is ``<name>`` (beside ``csynth.xml`` the tool writes the top's copy and one
report per sub-function, named after the function, which are not the component's); every
``<top>_cosim.rpt``; every ``*.txt`` under an ``aiesimulator_output``
folder's ``data/``.

Every problem — a file that cannot be read, malformed XML, a report without an element above — is
an ``RlhlsError`` of one line naming the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import read_limited, scratch_dir, within

__all__ = ["SynthReport", "CosimReport", "AieSimOutput", "read_csynth", "read_cosim", "read_aiesim_output",
           "find_reports", "REPORT_RESOURCES"]

REPORT_RESOURCES = ("LUT", "FF", "DSP", "BRAM_18K", "URAM")
MAX_REPORT_BYTES = 256 << 20  # csynth.xml and cosim reports are kilobytes, an aiesimulator output of a long
# simulation tens of MB; a file is read whole, its size checked first

_TOP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# (element path, what it is): every one hls4ml's reader dereferences, plus the top and part we read
_REQUIRED = (
    ("UserAssignments/TopModelName", "the top function"),
    ("UserAssignments/Part", "the part"),
    ("UserAssignments/TargetClockPeriod", "the target clock"),
    ("PerformanceEstimates/SummaryOfTimingAnalysis/EstimatedClockPeriod", "the estimated clock"),
    ("PerformanceEstimates/SummaryOfOverallLatency/Best-caseLatency", "the best-case latency"),
    ("PerformanceEstimates/SummaryOfOverallLatency/Worst-caseLatency", "the worst-case latency"),
    ("PerformanceEstimates/SummaryOfOverallLatency/Interval-min", "the minimum interval"),
    ("PerformanceEstimates/SummaryOfOverallLatency/Interval-max", "the maximum interval"),
    ("AreaEstimates/Resources", "the resource estimates"),
    ("AreaEstimates/AvailableResources", "the available resources"),
)


@dataclass(frozen=True)
class SynthReport:
    """One synthesis report: clocks in ns, latencies and intervals in cycles (None: ``undef``),
    resources by the report's names (None: the report has no such element)."""

    path: str
    layout: str               # 'classic' | 'unified' | 'file' (a report outside a tool's folders)
    tool: str                 # 'Vivado HLS' | 'Vitis HLS'
    version: str | None
    top: str
    part: str
    family: str | None
    flow_target: str | None
    target_clock_ns: float
    estimated_clock_ns: float
    latency_best_cycles: int | None
    latency_worst_cycles: int | None
    interval_min: int | None
    interval_max: int | None
    resources: dict = field(default_factory=dict)

    @property
    def clock_ns(self) -> float:
        """The period the kernel runs at: the target, or the estimate where it misses the target."""
        return max(self.target_clock_ns, self.estimated_clock_ns)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("resources")
        return {**d, **{k: self.resources.get(k) for k in REPORT_RESOURCES}, "clock_ns": self.clock_ns}


@dataclass(frozen=True)
class CosimReport:
    """One co-simulation report: the RTL simulated, its status, latency and interval in cycles."""

    path: str
    top: str
    rtl: str
    status: str
    latency_min_cycles: int | None
    latency_avg_cycles: float | None
    latency_max_cycles: int | None
    interval_min: int | None
    interval_max: int | None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AieSimOutput:
    """One aiesimulator output PLIO: its words and time stamps (ns from the simulation's start)."""

    path: str
    plio: str
    words: int
    stamps: int
    first_ns: float
    last_ns: float

    @property
    def words_per_us(self) -> float | None:
        span = self.last_ns - self.first_ns
        return None if span <= 0 else self.words / span * 1e3

    def to_json(self) -> dict:
        return {**asdict(self), "words_per_us": self.words_per_us}


def _read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise RlhlsError(f"{path}: is a folder; expected a report file")
    try:
        return read_limited(path, MAX_REPORT_BYTES, "a report holds")
    except FileNotFoundError:
        raise RlhlsError(f"{path}: no such file") from None
    except OSError as e:
        raise RlhlsError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:  # larger than a report, not a regular file (a FIFO would block)
        raise RlhlsError(f"{path}: cannot be read ({e})") from None


def _decoded(path: Path, data: bytes, expected: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RlhlsError(f"{path}: not a text file; expected {expected}") from None


def _layout(path: Path) -> str:
    parts = [p.lower() for p in path.parts]
    if len(parts) >= 4 and parts[-3:-1] == ["syn", "report"]:
        return "unified" if parts[-4] == "hls" else "classic"
    return "file"


def _text(root, where: str) -> str | None:
    el = root.find(where)
    return None if el is None or el.text is None else el.text.strip()


def _cycles(text, path, what: str) -> int | None:
    if text is None or str(text).strip() == "undef":
        return None
    try:
        return int(str(text).strip())
    except ValueError:
        raise RlhlsError(f"{path}: {what} '{text}' is neither a whole number of cycles nor 'undef'") from None


def _ns(text, path, what: str) -> float:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        raise RlhlsError(f"{path}: {what} '{text}' is not a number of ns") from None


def _parse_xml(path: Path):
    data = _read_bytes(path)
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise RlhlsError(f"{path}: malformed XML ({e})") from None
    return root, data


def _hls4ml_report(top: str, csynth: bytes | None = None, cosim: bytes | None = None) -> dict:
    """hls4ml's parse_vivado_report on a throw-away project holding these reports."""
    from hls4ml.report.vivado_report import parse_vivado_report

    with scratch_dir("report") as tmp:
        root = Path(tmp)
        (root / "project.tcl").write_text(f'set project_name "{top}"\nset backend "Vivado"\n')
        sol = root / f"{top}_prj" / "solution1"
        (sol / "syn" / "report").mkdir(parents=True)
        (sol.parent / "hls.app").write_text('<project><solutions><solution name="solution1"/></solutions></project>\n')
        if csynth is not None:
            (sol / "syn" / "report" / f"{top}_csynth.xml").write_bytes(csynth)
        if cosim is not None:
            (sol / "sim" / "report").mkdir(parents=True)
            (sol / "sim" / "report" / f"{top}_cosim.rpt").write_bytes(cosim)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it did not find
            return parse_vivado_report(str(root)) or {}


def read_csynth(path) -> SynthReport:
    """One ``csynth.xml`` (module docstring)."""
    path = Path(path)
    root, data = _parse_xml(path)
    if root.tag != "profile":
        raise RlhlsError(f"{path}: root element <{root.tag}> is not <profile>; expected a Vitis HLS csynth.xml")
    for where, what in _REQUIRED:
        if root.find(where) is None:
            raise RlhlsError(f"{path}: no <{where}> ({what}); expected a Vitis HLS csynth.xml")
    top = _text(root, "UserAssignments/TopModelName") or ""
    if not _TOP_RE.match(top):
        raise RlhlsError(f"{path}: TopModelName '{top}' is not a C function name")
    part = _text(root, "UserAssignments/Part") or ""
    if not part:
        raise RlhlsError(f"{path}: <UserAssignments/Part> is empty; expected the part synthesised for")
    try:
        rep = _hls4ml_report(top, csynth=data).get("CSynthesisReport")
    except (AttributeError, TypeError, ET.ParseError) as e:  # an element hls4ml needs is empty
        raise RlhlsError(f"{path}: hls4ml's report reader cannot read it ({e})") from None
    if not rep:
        raise RlhlsError(f"{path}: hls4ml's report reader found no synthesis report in it")
    flow_target = _text(root, "UserAssignments/FlowTarget")
    res = {}
    for k in REPORT_RESOURCES:  # hls4ml names DSP48E 'DSP'
        v = rep.get(k)
        res[k] = None if v is None else _cycles(v, path, f"resource {k}")
    return SynthReport(
        path=str(path), layout=_layout(path), tool="Vitis HLS" if flow_target else "Vivado HLS",
        version=_text(root, "ReportVersion/Version"), top=top, part=part,
        family=_text(root, "UserAssignments/ProductFamily"), flow_target=flow_target,
        target_clock_ns=_ns(rep["TargetClockPeriod"], path, "TargetClockPeriod"),
        estimated_clock_ns=_ns(rep["EstimatedClockPeriod"], path, "EstimatedClockPeriod"),
        latency_best_cycles=_cycles(rep["BestLatency"], path, "Best-caseLatency"),
        latency_worst_cycles=_cycles(rep["WorstLatency"], path, "Worst-caseLatency"),
        interval_min=_cycles(rep["IntervalMin"], path, "Interval-min"),
        interval_max=_cycles(rep["IntervalMax"], path, "Interval-max"),
        resources=res)


_COSIM_TOP = re.compile(r"Co-Simulation Report for '([^']+)'")


def read_cosim(path) -> CosimReport:
    """One ``<top>_cosim.rpt`` (module docstring): the last RTL whose status is not NA."""
    path = Path(path)
    data = _read_bytes(path)
    text = _decoded(path, data, "a Vitis HLS co-simulation report")
    m = _COSIM_TOP.search(text)
    if m is None:
        raise RlhlsError(f"{path}: no \"Co-Simulation Report for '<top>'\" heading; expected a Vitis HLS "
                         "co-simulation report")
    top = m.group(1)
    if not _TOP_RE.match(top):
        raise RlhlsError(f"{path}: top '{top}' is not a C function name")
    rows = [ln for ln in text.splitlines() if re.match(r"^\|\s*(VHDL|Verilog)\s*\|", ln)]
    # the last simulated RTL, as hls4ml takes it (its min/max and our average from one row)
    cells = next(([c.strip() for c in ln.strip().strip("|").split("|")] for ln in reversed(rows)
                  if ln.split("|")[2].strip() != "NA"), None)
    if cells is None or len(cells) < 8:
        raise RlhlsError(f"{path}: no VHDL or Verilog row with a status; expected a simulated RTL")
    rep = _hls4ml_report(top, cosim=data).get("CosimReport") or {}
    if not rep:
        raise RlhlsError(f"{path}: hls4ml's report reader found no co-simulation result in it")

    def num(v, what):
        return None if v in (None, "NA") else _cycles(v, path, what)

    avg = None if cells[3] == "NA" else _ns(cells[3], path, "average latency")
    return CosimReport(path=str(path), top=top, rtl=str(rep["RTL"]), status=str(rep["Status"]),
                       latency_min_cycles=num(rep.get("LatencyMin"), "minimum latency"), latency_avg_cycles=avg,
                       latency_max_cycles=num(rep.get("LatencyMax"), "maximum latency"),
                       interval_min=num(rep.get("IntervalMin"), "minimum interval"),
                       interval_max=num(rep.get("IntervalMax"), "maximum interval"))


_STAMP = re.compile(r"^T\s+([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(ps|ns|us)\s*$")
_SCALE_NS = {"ps": 1e-3, "ns": 1.0, "us": 1e3}


def read_aiesim_output(path) -> AieSimOutput:
    """One aiesimulator output file (module docstring)."""
    path = Path(path)
    data = _read_bytes(path)
    text = _decoded(path, data, "an aiesimulator output (T <time> ns lines and data)")
    words, stamps = 0, []
    for n, ln in enumerate(text.splitlines(), 1):
        ln = ln.strip()
        if not ln or ln == "TLAST":
            continue
        m = _STAMP.match(ln)
        if m:
            stamps.append(float(m.group(1)) * _SCALE_NS[m.group(2)])
            continue
        for cell in ln.split():
            try:
                float(cell)
            except ValueError:
                raise RlhlsError(f"{path}: line {n}: '{cell}' is neither a time stamp (T <time> ps|ns|us), TLAST "
                                 "nor a number; expected an aiesimulator output") from None
        words += len(ln.split())
    if not stamps or not words:
        raise RlhlsError(f"{path}: no {'time stamps (T <time> ps|ns|us)' if not stamps else 'data'}; expected an "
                         "aiesimulator output, written with time stamps")
    return AieSimOutput(path=str(path), plio=path.stem, words=words, stamps=len(stamps), first_ns=min(stamps),
                        last_ns=max(stamps))


def _named_top(path: Path) -> bool:
    """A ``<name>_csynth.xml`` is a top's report when it names ``<name>`` its top (module docstring)."""
    name = path.name[: -len("_csynth.xml")]
    try:
        root = ET.fromstring(_read_bytes(path))
    except (ET.ParseError, RlhlsError):
        return True  # let read_csynth say what is wrong with it
    return _text(root, "UserAssignments/TopModelName") == name


def find_reports(folder) -> dict:
    """``{"csynth": [paths], "cosim": [paths], "aiesim": [paths]}`` under `folder`, sorted (module
    docstring)."""
    folder = Path(folder)
    synth, cosim, aiesim = [], [], []
    for p in sorted(folder.rglob("*")):
        if p.is_dir():  # a broken link stays in: reading it says what is wrong
            continue
        aie_out = p.suffix == ".txt" and p.parent.name == "data" and p.parent.parent.name == "aiesimulator_output"
        if p.name.endswith(("csynth.xml", "_cosim.rpt")) or aie_out:
            within(folder, p)  # a report through a link out of the folder is refused, not read
        if p.name == "csynth.xml":
            synth.append(p)
        elif p.name.endswith("_csynth.xml") and not (p.parent / "csynth.xml").is_file() and _named_top(p):
            synth.append(p)
        elif p.name.endswith("_cosim.rpt"):
            cosim.append(p)
        elif p.suffix == ".txt" and p.parent.name == "data" and p.parent.parent.name == "aiesimulator_output":
            aiesim.append(p)
    return {"csynth": synth, "cosim": cosim, "aiesim": aiesim}
