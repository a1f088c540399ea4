"""heppo-table1 timed warm in CPU time: the arithmetic of GAE's share and the whole-PPO speed-up, the
per-trajectory GAE against the batched one, the settled check, the one-time costs kept out of the
timed figures, the unit's band. No timed assertion: clocks and phase times are given."""

import csv
import json
import types

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import get_device
from rlhls.designs.registry import get_design
from rlhls.host import perf, phases
from rlhls.host.algorithms import get_algorithm
from rlhls.host.experiments import heppo
from rlhls.host.gae import gae_reference, gae_units


class FakeClock:
    """A process_time that moves only when told (and a wall clock that never moves)."""

    def __init__(self):
        self.now = 0.0

    def process_time(self):
        return self.now

    def perf_counter(self):
        return 0.0


def test_amdahl_share_and_speedup_by_hand():
    a = heppo.amdahl(9.0, 1.0, 0.0)
    assert a["share"] == pytest.approx(0.1) and a["speedup"] == pytest.approx(10 / 9)
    assert heppo.amdahl(9.0, 1.0, 0.5)["speedup"] == pytest.approx(10 / 9.5)
    # the seed's CPU-only column: GAE 15.04 % removed -> 1 / (1 - 0.1504)
    assert heppo.amdahl(84.96, 15.04, 0.0)["speedup"] == pytest.approx(1 / (1 - 0.1504))


def test_headline_median_spread_band_and_settled():
    unit = {"central": 0.0, "low": 0.0, "high": 1.0}
    h = heppo.gae_headline([9.0, 9.0, 9.0, 9.0], [1.0, 1.0, 1.0, 1.02], unit)
    assert h["share"]["median"] == pytest.approx(0.1) and h["share"]["max"] == pytest.approx(1.02 / 10.02)
    assert h["speedup"]["median"] == pytest.approx(10 / 9) and h["speedup"]["max"] == pytest.approx(10.02 / 9)
    assert h["band"] == pytest.approx([10 / 10, 10 / 9]) and h["settled"] is True
    line = heppo.table1_headline("batched", h, 1.18)
    assert line.startswith("batched: GAE 10 % of PPO") and "speed-up with the unit 1.1111x" in line
    assert "band 1-1.1111x" in line and "seed CPU only 1.18x" in line
    # the halves disagree by more than 5 %: no figure is printed as a result
    h = heppo.gae_headline([9.0] * 4, [1.0, 1.0, 3.0, 3.0], unit)
    assert h["settled"] is False
    assert "speed-up not settled (the two halves of the repeats differ by more than 5 %" in \
        heppo.table1_headline("per_trajectory", h, 1.18)
    h = heppo.gae_headline([9.0], [1.0], unit)
    assert h["settled"] is None and "not settled (one repeat" in heppo.table1_headline("x", h, 1.18)
    with pytest.raises(RlhlsError, match="2 update"):
        heppo.gae_headline([9.0, 9.0], [1.0], unit)


def test_settled_compares_the_halves_in_the_order_taken():
    assert phases.settled([1.0, 1.04]) is True and phases.settled([1.0, 1.06]) is False
    assert phases.settled([1.0]) is None
    assert phases.settled([1.0, 1.0, 2.0, 2.0]) is False and phases.settled([1.0, 2.0, 1.0, 2.0]) is True
    s = phases.spread([3.0, 1.0, 2.0, 10.0])
    assert s == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}


def test_per_trajectory_gae_equals_the_batched_one_with_episode_ends():
    ro = heppo.random_rollout(64, 7, seed=3)
    assert {0, 1, 2} <= set(np.unique(ro["dones"]).tolist())  # terminations and truncations both
    args = (ro["rewards"], ro["values"], ro["dones"], ro["bootstrap"], 0.99, 0.95, ro["trunc_values"])
    adv, rtg = heppo.gae_per_trajectory(*args)
    ref_adv, ref_rtg = gae_reference(*args)
    np.testing.assert_allclose(adv, ref_adv, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rtg, ref_rtg, rtol=0, atol=1e-12)
    # an end cuts the recursion: the step before a termination sees no bootstrap
    t, n = map(int, np.argwhere(ro["dones"] == 1)[0])
    assert adv[t, n] == pytest.approx(ro["rewards"][t, n] - ro["values"][t, n])
    with pytest.raises(RlhlsError, match="no trunc_values"):
        heppo.gae_per_trajectory(*args[:6])


def test_cpu_times_keeps_the_slow_first_call_out(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(phases, "time", types.SimpleNamespace(process_time=clock.process_time,
                                                              perf_counter=clock.perf_counter))
    calls = []

    def fn():  # a one-time compile on the first call
        clock.now += 100.0 if not calls else 1.0
        calls.append(1)

    assert phases.cpu_times(fn, 3) == [1.0, 1.0, 1.0] and len(calls) == 4


def test_cpu_clock_makes_the_phase_timer_read_cpu_time(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(phases, "time", types.SimpleNamespace(process_time=clock.process_time,
                                                              perf_counter=clock.perf_counter))
    times = {}
    with phases.cpu_clock():
        with phases.timed(times, "gae_fetch"):
            clock.now += 2.5
    assert times == {"gae_fetch": 2.5}
    with phases.timed(times, "env_run"):  # outside: wall seconds again (the real clock)
        clock.now += 7.0
    assert times["env_run"] < 7.0


def _row(env, fetch, compute, back):
    return {"env_steps": 2048, "t_env_run": env, "t_gae_fetch": fetch, "t_gae_compute": compute,
            "t_gae_write": 0.0, "t_backprop": back}


def test_phase_times_keep_the_warmup_update_out():
    rows = [_row(2.5, 0.7, 0.001, 1.0), _row(2.0, 0.01, 0.001, 1.0), _row(2.2, 0.02, 0.001, 1.2),
            _row(2.1, 0.03, 0.001, 1.1)]
    pt = heppo.phase_times(rows)
    assert pt["timed"]["gae_fetch"] == [0.01, 0.02, 0.03]  # the warm-up's 0.7 s (helper kernels) not among them
    assert pt["one_time"]["gae_fetch"] == pytest.approx(0.7 - 0.02)
    assert pt["one_time"]["env_run"] == pytest.approx(2.5 - 2.1)
    assert pt["gae"] == pytest.approx([0.011, 0.021, 0.031])
    assert pt["rest"] == pytest.approx([3.0, 3.4, 3.2]) and pt["total"] == pytest.approx([3.011, 3.421, 3.231])
    with pytest.raises(RlhlsError, match="1 update"):
        heppo.phase_times(rows[:1])
    with pytest.raises(RlhlsError, match="t_env_run = 'x' is not a number"):
        heppo.phase_times([rows[0], {**rows[1], "t_env_run": "x"}])


def test_unit_time_and_its_band_by_hand():
    d = get_design("heppo-ppo")
    hp = get_algorithm("ppo").hyperparams(d, {"num_envs": 8, "num_steps": 256, "num_minibatches": 8})
    gp = gae_units(d, hp)["gae"]
    assert (gp["trajectories"], gp["steps"], gp["pes"]) == (8, 256, 64)
    u = heppo.unit_time(d, gp, error=(0.25, "given"))
    dev = get_device(d.device)
    launch = dev.unit("PL").perf["launch_overhead_us"]
    cyc, b = u["cycles_s"], u["bytes"]
    assert b == 256 * 2 * 8 * 32 / 8  # the FILO image: 256 rows of reward and value words (32-bit results in place)
    assert u["central"] == pytest.approx(cyc + (launch.value + 2 * (1.0 + b / 4800.0)) * 1e-6)
    assert u["low"] == pytest.approx(0.75 * cyc + (launch.low + 2 * (0.2 + b / 19200.0)) * 1e-6)
    assert u["high"] == pytest.approx(1.25 * cyc + (launch.high + 2 * (5.0 + b / 2400.0)) * 1e-6)
    assert len(u["constants"]) == 6


def _fake_measure(design, *, seed=0, updates=1):
    """A warm-up update whose GAE fetch carries a one-time 0.7 s, then updates that settle."""
    assert updates == 1 + 4
    timed = [_row(3.0, 0.01, 0.001, 1.0), _row(3.0, 0.01, 0.001, 1.0), _row(3.0, 0.01, 0.001, 1.0),
             _row(3.0, 0.01, 0.001, 1.0)]
    hp = get_algorithm("ppo").hyperparams(design, {"num_envs": 8, "num_steps": 256, "num_minibatches": 8})
    return [_row(3.2, 0.71, 0.001, 1.0), *timed], hp


def test_table1_experiment_keeps_one_time_costs_apart(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(perf, "measure_host", _fake_measure)
    monkeypatch.setattr(perf, "model_error", lambda: {"PL": (0.1, "given")})
    monkeypatch.setattr(heppo, "_install_helpers", lambda: None)
    out = tmp_path / "t1"
    assert main(["experiment", "heppo-table1", "--out", str(out), "--quiet"]) == 0
    rows = {r["phase"]: r for r in csv.DictReader(open(out / "table1.csv"))}
    assert float(rows["gae_fetch"]["here_s"]) == pytest.approx(0.01)
    assert float(rows["gae_fetch"]["one_time_s"]) == pytest.approx(0.70)
    assert float(rows["env_run"]["here_pct"]) == pytest.approx(100 * 3.0 / 4.011)
    sp = json.loads((out / "speedup.json").read_text())["speedup"]
    assert sp["trainer_share"] == pytest.approx(0.011 / 4.011) and sp["trainer_settled"] is True
    unit = json.loads((out / "speedup.json").read_text())["unit"]["central"]
    assert sp["trainer_speedup"] == pytest.approx(4.011 / (4.0 + unit))
    # the seed's rate: 2,048 elements at 9,000 el/s against the rest as measured
    assert sp["seed_rate_share"] == pytest.approx((2048 / 9000) / (4.0 + 2048 / 9000))
    assert sp["batched_gae_s"] > 0 and sp["per_trajectory_gae_s"] > 0 and sp["per_trajectory_el_s"] > 0
    md = (out / "table1.md").read_text()
    assert "most in gae_fetch (+0.7 s)" in md and "after one warm-up update, in CPU time" in md
    assert "- trainer: GAE 0.274 % of PPO" in md and "seed CPU only 1.18x" in md


@pytest.mark.parametrize("args,match", [
    (["--param", "repeats=0"], "--param repeats='0': expected >= 1"),
    (["--design", "cpp-trpo-ant"], "uses TRPO; Table I profiles PPO"),
])
def test_bad_settings_are_one_line_and_write_nothing(tmp_path, capsys, args, match):
    out = tmp_path / "bad"
    assert main(["experiment", "heppo-table1", "--out", str(out), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) <= 2 and "Traceback" not in err
    assert not out.exists()
