"""Vitis tool discovery and the command lines `rlhls build --synth/--cosim` runs.

Two flows (AMD UG1702 "Creating HLS Components from the Command Line", UG1399):
  * unified (Vitis >= 2023.2; the only one from 2024.2 on):
        v++ -c --mode hls --config <comp>/hls_config.cfg --work_dir <comp>/work          (synthesis + package)
        vitis-run --mode hls --cosim --config <comp>/hls_config.cfg --work_dir <comp>/work (needs the synthesis)
  * classic Tcl (vitis_hls of releases before 2024.2):
        vitis_hls -f <comp>/run_hls.tcl -tclargs csynth export [cosim]
The unified flow is used when `v++` (and, for --cosim, `vitis-run`) are on PATH; otherwise
`vitis_hls`. Every command runs with the component folder as working directory and its output
goes to `<comp>/<step>.log`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import open_owned

from .project import HLS_CONFIG, RUN_HLS, WORK_DIR


@dataclass(frozen=True)
class VitisTools:
    vpp: str | None
    vitis_run: str | None
    vitis_hls: str | None


def find_tools(path: str | None = None) -> VitisTools:
    """Absolute paths of v++, vitis-run and vitis_hls on PATH (or on `path`), None where absent."""
    return VitisTools(shutil.which("v++", path=path), shutil.which("vitis-run", path=path),
                      shutil.which("vitis_hls", path=path))


def select_flow(tools: VitisTools, *, synth: bool, cosim: bool) -> str | None:
    """'unified', 'tcl', or None when nothing is asked; RlhlsError (one line) naming a missing tool."""
    if not (synth or cosim):
        return None
    if tools.vpp and (tools.vitis_run or not cosim):
        return "unified"
    if tools.vitis_hls:
        return "tcl"
    what = "--cosim" if cosim else "--synth"
    if tools.vpp:
        raise RlhlsError(f"vitis-run not found on PATH (needed for {what} next to v++; source Vitis' settings64.sh)")
    raise RlhlsError(f"v++ not found on PATH (needed for {what}; install Vitis >= 2023.2 and source settings64.sh, "
                     "or put vitis_hls of an older release on PATH)")


@dataclass(frozen=True)
class Step:
    name: str       # 'synth' | 'cosim'
    argv: tuple
    cwd: Path
    log: Path


def component_steps(flow: str, tools: VitisTools, comp_dir: Path, *, synth: bool, cosim: bool) -> list[Step]:
    """The commands for one component; cosim implies synthesis first (it simulates the RTL)."""
    comp_dir = Path(comp_dir).resolve()
    cfg, work = comp_dir / HLS_CONFIG, comp_dir / WORK_DIR
    steps = []
    if flow == "unified":
        if synth or cosim:
            steps.append(Step("synth", (tools.vpp, "-c", "--mode", "hls", "--config", str(cfg),
                                        "--work_dir", str(work)), comp_dir, comp_dir / "synth.log"))
        if cosim:
            steps.append(Step("cosim", (tools.vitis_run, "--mode", "hls", "--cosim", "--config", str(cfg),
                                        "--work_dir", str(work)), comp_dir, comp_dir / "cosim.log"))
    elif flow == "tcl":
        args = ["csynth", "export"] + (["cosim"] if cosim else [])
        steps.append(Step("cosim" if cosim else "synth",
                          (tools.vitis_hls, "-f", str(comp_dir / RUN_HLS), "-tclargs", *args),
                          comp_dir, comp_dir / ("cosim.log" if cosim else "synth.log")))
    else:
        raise ValueError(flow)
    return steps


def run_step(step: Step, env: dict | None = None, header: str = "") -> dict:
    """Run one command; {'step','argv','cwd','returncode','seconds','log'}. Never raises on a tool failure.
    env: extra environment variables (added to os.environ); header: written to the log first (the command)."""
    t0 = time.perf_counter()
    log_path = Path(step.log)
    # the build folder's own file, never through a link (a folder rlhls merged into may hold one)
    fd = open_owned(log_path.parent, log_path.name, os.O_WRONLY | os.O_CREAT)
    os.ftruncate(fd, 0)
    with open(fd, "wb") as log:
        if header:
            log.write(header.encode())
            log.flush()
        try:
            rc = procs.run(list(step.argv), cwd=step.cwd, stdout=log, stderr=subprocess.STDOUT,  # dies with rlhls
                           env={**os.environ, **env} if env else None, tree=True).returncode
        except OSError as e:
            log.write(f"{e}\n".encode())
            rc = 127
    return {"step": step.name, "argv": list(step.argv), "cwd": str(step.cwd), "returncode": rc,
            "passed": rc == 0, "seconds": round(time.perf_counter() - t0, 3), "log": str(step.log)}
