"""The board backend (host/board.py) on xrt-sim, the stand-in for the pyxrt API it uses
(host/xrt_sim.py): a training run with --backend board equals --backend emu bit for bit for one
design of each kernel family (an AIE plan, DQN, the GAE unit, the DDPG gradient unit), resume
included; buffers are allocated once and the weights updated in place; its kernel times become
measured-board profile rows that move the plan; bad input is one line and writes nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.host import board as B
from rlhls.host import xrt_sim
from rlhls.host.runfolder import read_metrics

# (design, --steps of the first run, of the resumed run, --set): two updates, the second after --resume
CASES = {
    "apdrl-dqn-cartpole": (100, 200, ["learning_starts=50", "train_frequency=2", "batch_size=8",
                                      "steps_per_update=100"]),
    "apdrl-ddpg-lunarcont": (20, 40, ["learning_starts=10", "batch_size=4", "steps_per_update=20"]),
    "fddpg-arm-m1": (20, 40, ["learning_starts=10", "batch_size=4", "steps_per_update=20"]),
    "heppo-ppo": (32, 64, ["num_envs=2", "num_steps=16", "num_minibatches=2", "update_epochs=1"]),
}


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _sets(sets):
    return [a for s in sets for a in ("--set", s)]


def _train(design, out, steps, sets, *more):
    rc = main(["train", design, "--out", str(out), "--steps", str(steps), "--quiet", *_sets(sets), *more])
    assert rc == 0


def _comparable(rows):
    return [{k: v for k, v in r.items() if k != "wall_s" and not k.startswith("t_")} for r in rows]


def _sim_xclbin(run: Path, path: Path) -> Path:
    """The xrt-sim xclbin of a run's design, batch and plan (as `rlhls build` makes the real one of them)."""
    from rlhls.host.bound import bind_recorded

    cfg = json.loads((run / "config.json").read_text())
    bound = bind_recorded(cfg)
    design = bound.design.at_points(cfg["plan_points"]) if cfg.get("plan_points") else bound.design
    return B.write_sim_xclbin(path, design, bound.algorithm.batch(bound.hyperparams), cfg.get("plan"),
                              cfg.get("plan_points"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per design: the emu run, its xrt-sim xclbin and the board run (first part, then --resume);
    what the board backends did (instances, the weight buffers each weight_update call bound)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RLHLS_XRT", "sim")
    seen: dict = {"backends": [], "weight_bos": []}
    real_init, real_call = B.BoardBackend.__init__, B.BoardBackend.call

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        seen["backends"].append(self)

    def call(self, kernel_name, params, **arrays):
        out = real_call(self, kernel_name, params, **arrays)
        if kernel_name == "weight_update":
            seen["weight_bos"].append({k: bo for k, bo in self._bos.items() if k[1] in ("w", "m", "v")})
        return out
    mp.setattr(B.BoardBackend, "__init__", init)
    mp.setattr(B.BoardBackend, "call", call)
    root = tmp_path_factory.mktemp("board")
    res = {}
    try:
        for design, (first, total, sets) in CASES.items():
            emu = root / f"{design}-emu"  # resumed too: --steps sets the schedules (DQN's epsilon)
            _train(design, emu, first, sets)
            _train(design, emu, total, sets, "--resume")
            xclbin = _sim_xclbin(emu, root / f"{design}.xrt-sim.json")
            brd = root / f"{design}-board"
            n0 = len(seen["backends"])
            _train(design, brd, first, sets, "--backend", "board", "--xclbin", str(xclbin))
            _train(design, brd, total, sets, "--backend", "board", "--xclbin", str(xclbin), "--resume")
            res[design] = {"emu": emu, "board": brd, "xclbin": xclbin, "backends": seen["backends"][n0:]}
    finally:
        mp.undo()
    res["weight_bos"] = seen["weight_bos"]
    return res


@pytest.mark.parametrize("design", list(CASES))
def test_board_on_xrt_sim_equals_emu_resume_included(runs, design):
    r = runs[design]
    emu, brd = read_metrics(r["emu"] / "metrics.csv"), read_metrics(r["board"] / "metrics.csv")
    assert len(emu) >= 2 and _comparable(emu) == _comparable(brd)
    assert json.loads((r["board"] / "config.json").read_text())["backend"] == "board"
    # the kernels ran on the stand-in device: each process loaded the xclbin once and ran kernels
    assert len(r["backends"]) == 2 and all(b.device.loads == 1 for b in r["backends"])
    assert all(sum(k.calls for k in b._kernels.values()) > 0 for b in r["backends"])
    with open(r["board"] / B.TIMINGS, newline="") as f:
        rows = list(csv.DictReader(f))
    ran = {k for b in r["backends"] for k in b._kernels}
    assert {t["top"] for t in rows} == ran and all(int(t["calls"]) >= 1 for t in rows)
    if design == "apdrl-ddpg-lunarcont":  # the AIE products through the AIE data mover
        assert B.AIE_MOVER in ran
    assert {"heppo-ppo": "gae", "fddpg-arm-m1": "ddpg_gradient"}.get(design, "weight_update") in \
        {t["kernel"] for t in rows}


def test_weights_stay_in_their_device_buffers(runs):
    """Every weight_update call binds the same bo objects (allocated once per kernel and argument);
    the new weights are written over the old ones on the device, so weights the next step takes
    unchanged are not sent again."""
    calls = runs["weight_bos"]
    assert len(calls) > 4
    first: dict = {}
    for bos in calls:
        for key, bo in bos.items():
            first.setdefault(key, bo)
    backends = [b for d in CASES for b in runs[d]["backends"]]
    in_place = 0
    for b in backends:
        keys = [k for k in b._bos if k[1] == "w" and b.table[k[0]].kernel == "weight_update"]
        for k in keys:
            assert all(bos[k] is b._bos[k] for bos in calls if k in bos and bos[k] in b._bos.values())
            bo = b._bos[k]
            assert isinstance(bo, xrt_sim.bo) and bo.syncs["from_device"] >= 1
            # in place: weights the host left as the device wrote them are not sent again (a layer whose
            # weights the host rounds again, for an AIE forward pass, is)
            in_place += bo.syncs["to_device"] < b._kernels[k[0]].calls
    assert in_place and any(b.syncs["skipped"] for b in backends)


def _scaled(run: Path, dest: Path, factor: float) -> Path:
    import shutil

    shutil.copytree(run, dest)
    with open(run / B.TIMINGS, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(dest / B.TIMINGS, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(B.TIMING_COLUMNS)
        for r in rows:
            w.writerow([r["kernel"], r["top"], r["rows"], r["calls"],
                        *(repr(float(r[c]) * factor) for c in ("total_s", "min_s", "max_s"))])
    return dest


def test_measured_rows_move_the_plan(runs, tmp_path, capsys):
    """profile --measured writes measured-board rows for the timed PL nodes; a run whose kernels
    were a million times slower than the model takes those nodes off the PL, one a million times
    faster keeps them there."""
    from rlhls.host.bound import bind_recorded
    from rlhls.partition.design_plan import partition_design
    from rlhls.partition.profile import profile_design
    from rlhls.partition.profile_io import read_profile

    design = "apdrl-dqn-cartpole"
    run = runs[design]["board"]
    sets = CASES[design][2]
    out = tmp_path / "p.csv"
    assert main(["profile", design, *_sets(sets), "--measured", str(run), "--out", str(out)]) == 0
    rows = read_profile(out)
    measured = [r for r in rows if r.source == B.MEASURED_SOURCE]
    assert measured and all(r.unit == "PL" for r in measured)
    capsys.readouterr()

    cfg = json.loads((run / "config.json").read_text())
    bound = bind_recorded(cfg)
    d = bound.design
    base = profile_design(d)
    plans = {}
    for name, factor in (("slow", 1e6), ("fast", 1e-6)):
        scaled = _scaled(run, tmp_path / name, factor)
        rows, _ = B.run_measured_rows(scaled, list(base), design)
        plans[name] = partition_design(d, rows=rows, time_limit=30).assignment
    nodes = {r.node for r in measured}
    assert not any(plans["slow"][n] == "PL" for n in nodes)
    assert any(plans["fast"][n] == "PL" for n in nodes)


# ---------------------------------------------------------------------------------------------
# bad input: one line, nothing written
# ---------------------------------------------------------------------------------------------


def _refused(argv, tmp_path, capsys, start, monkeypatch, xrt="sim"):
    if xrt is None:
        monkeypatch.delenv("RLHLS_XRT", raising=False)
    else:
        monkeypatch.setenv("RLHLS_XRT", xrt)
    before = snapshot(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"rlhls: error: {start}"), err  # --quiet: the error alone
    assert snapshot(tmp_path) == before


def test_a_missing_xclbin(tmp_path, capsys, monkeypatch):
    argv = ["train", "apdrl-dqn-cartpole", "--out", str(tmp_path / "r"), "--backend", "board", "--xclbin",
            str(tmp_path / "nope.xclbin")]
    _refused(argv, tmp_path, capsys, f"--xclbin '{tmp_path / 'nope.xclbin'}': no such file", monkeypatch)
    _refused(argv[:-2], tmp_path, capsys, "--backend board needs --xclbin FILE", monkeypatch)


def test_a_missing_pyxrt(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyxrt(name, *a, **kw):
        if name == "pyxrt":
            raise ImportError("No module named 'pyxrt'")
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_pyxrt)
    x = tmp_path / "d.xclbin"
    x.write_bytes(b"xclbin2\0" + bytes(64))
    _refused(["train", "apdrl-dqn-cartpole", "--out", str(tmp_path / "r"), "--backend", "board", "--xclbin", str(x)],
             tmp_path, capsys, "board backend needs XRT's Python API: 'pyxrt' cannot be imported", monkeypatch,
             xrt=None)


@pytest.mark.parametrize("data,why", [
    (b"xclbin2\0" + bytes(64), "a real xclbin: xrt-sim opens only the stand-in"),
    (b"<sdx:platform/>", "not an xrt-sim xclbin (not JSON)"),
    (b'{"format": "something else"}', "not an xrt-sim xclbin (no 'format'"),
])
def test_a_file_that_is_not_an_xclbin(tmp_path, capsys, monkeypatch, data, why):
    x = tmp_path / "d.xclbin"
    x.write_bytes(data)
    _refused(["train", "apdrl-dqn-cartpole", "--out", str(tmp_path / "r"), "--backend", "board", "--xclbin", str(x)],
             tmp_path, capsys, f"--xclbin '{x}': not an xclbin XRT can open ({why}", monkeypatch)


def test_an_xclbin_of_another_design(runs, tmp_path, capsys, monkeypatch):
    other = runs["fddpg-arm-m1"]["xclbin"]
    sets = CASES["apdrl-dqn-cartpole"][2]
    _refused(["train", "apdrl-dqn-cartpole", "--out", str(tmp_path / "r"), "--steps", "100", "--quiet", *_sets(sets),
              "--backend", "board", "--xclbin", str(other)], tmp_path, capsys,
             f"--xclbin '{other}': holds no kernel q_fc1_fwd", monkeypatch)


def test_measured_of_a_run_that_is_not_a_board_run(runs, tmp_path, capsys, monkeypatch):
    emu = runs["apdrl-dqn-cartpole"]["emu"]
    _refused(["profile", "apdrl-dqn-cartpole", "--measured", str(emu), "--out", str(tmp_path / "p.csv")],
             tmp_path, capsys, f"--measured '{emu}': a run of backend 'emu', not 'board'", monkeypatch)
    brd = runs["apdrl-dqn-cartpole"]["board"]
    _refused(["profile", "fddpg-arm-m1", "--measured", str(brd), "--out", str(tmp_path / "p.csv")],
             tmp_path, capsys, f"--measured '{brd}': a run of design 'apdrl-dqn-cartpole', not 'fddpg-arm-m1'",
             monkeypatch)


def test_a_board_build_makes_the_kernels_the_backend_calls(tmp_path):
    """`rlhls build --board` builds the forward layers as rlhls' kernels, not hls4ml networks: its PL
    components are the board backend's kernel table, name for name (a default build has hls4ml ones)."""
    from rlhls.designs.registry import get_design

    design = get_design("heppo-ppo")  # fp32 on the PL: hls4ml takes its networks by default
    assert main(["build", design.name, "--board", "--out", str(tmp_path / "b"), "--quiet"]) == 0
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert {c["kind"] for c in m["components"]} == {"kernel"}
    table = {k.name for k in B.kernel_table(design, m["batch"], None) if k.unit == "PL"}
    assert {c["top"] for c in m["components"]} == table


def test_perf_models_a_board_run_with_its_measured_kernel_times(runs, tmp_path, capsys):
    """perf --run of a board run takes the run's host phases and its kernels' measured times (profile rows
    of source measured-board) in place of the model's rows they measured; of an emu run, neither."""
    brd, emu = runs["apdrl-dqn-cartpole"]["board"], runs["apdrl-dqn-cartpole"]["emu"]
    for run, measured in ((brd, True), (emu, False)):
        out = tmp_path / run.name
        assert main(["perf", "apdrl-dqn-cartpole", "--run", str(run), "--out", str(out), "--json", "--quiet",
                     "--time-limit", "5"]) == 0
        perf = json.loads(capsys.readouterr().out)
        assert (B.MEASURED_SOURCE in json.dumps(perf["assumptions"])) == measured
