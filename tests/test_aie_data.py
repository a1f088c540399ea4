"""The AIE build's data (flow/aie.py): by default a sample of each node whose size and memory do not
grow with the batch, checked under the g++ shim on exactly the files written; the whole training
step only when asked (full_data, --full-data, --synth). And the experiments' engine choice
(host/experiments: one process where Ray's start does not pay)."""

import json
import subprocess
import tracemalloc

import numpy as np
import pytest

from rlhls.cli import main
from rlhls.core.toolchain import compile_cpp
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.flow.aie import PLIO_SAMPLES, _render_harness, check_aie, data_gemms, data_node, emit_aie, shim_dir


def _manifest(out):
    return json.loads((out / "aie" / "manifest.json").read_text())


def _data_sizes(out) -> dict:
    """{file: bytes of a .bin, lines of a PLIO text file} of data/."""
    return {p.name: p.stat().st_size if p.suffix == ".bin" else len(p.read_text().splitlines())
            for p in sorted((out / "aie" / "data").iterdir())}


# cartpole's q.fc2.fwd (batch rows in M) and q.fc2.bwd (the batch in dW's K), time-shared on shared PLIOs
POINTS = {"q.fc2.fwd": "t4p2", "q.fc2.bwd": "t3p1"}


def _emit(tmp_path, name, batch, **kw):
    d = get_design("apdrl-dqn-cartpole")
    emit_aie(d, list(POINTS), tmp_path / name, graph=build_graph(d, batch), points=POINTS, **kw)
    return tmp_path / name


def test_sample_data_and_its_memory_do_not_grow_with_the_batch(tmp_path):
    peaks, sizes = [], []
    for batch in (256, 4096):
        tracemalloc.start()
        out = _emit(tmp_path, f"b{batch}", batch)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        sizes.append(_data_sizes(out))
        m = _manifest(out)
        assert m["batch"] == batch and all(n["data"]["instance"] == "sample" for n in m["nodes"])
    assert sizes[0] == sizes[1]  # the same files, of the same sizes and lines
    assert sum(p.stat().st_size for p in (tmp_path / "b4096" / "aie" / "data").iterdir()) < 200_000
    assert peaks[1] < 1.5 * peaks[0]  # the whole step at batch 4096 takes 16x batch 256's
    # the node's full products grow; the sample's do not
    big = {n["name"]: n for n in _manifest(tmp_path / "b4096")["nodes"]}
    fwd, bwd = big["q.fc2.fwd"], big["q.fc2.bwd"]
    assert fwd["gemms"][0]["M"] == 4096 and fwd["data"]["products"][0][0] <= 256
    dw = [g for g in bwd["gemms"] if g["tag"] == "dw"][0]
    assert dw["K"] == 4096 and bwd["data"]["products"][1][1] <= 256


def test_a_sample_keeps_the_kernel_and_the_edges_of_the_node():
    """Same chunks and K chunks (the kernel as compiled), each dimension's ragged last block, every
    tile of the node busy and one with a second block."""
    from rlhls.flow.aie import _layout

    d = get_design("apdrl-dqn-cartpole")
    nodes, _ = _layout(d, list(POINTS), build_graph(d, 1000), POINTS)
    for node in nodes:
        sample = data_gemms(node)
        assert sum(s["blocks"] for s in sample) >= min(sum(x["blocks"] for x in node["gemms"]), node["tiles"] + 1)
        for full, s in zip(node["gemms"], sample):
            for k in ("mc", "kc", "nc", "grid_k", "at", "bt", "bias", "fn"):
                assert s[k] == full[k]
            for dim, unit, grid in (("M", "mc", "grid_m"), ("N", "nc", "grid_n")):
                assert s[grid] <= full[grid] and s[dim] <= full[dim]
                assert s[dim] - (s[grid] - 1) * s[unit] == full[dim] - (full[grid] - 1) * full[unit]
            assert s["K"] <= full["K"] and (s["K"] == full["K"] or s["K"] % s["kc"] == full["K"] % full["kc"])
    assert data_gemms(nodes[0], full=True) == nodes[0]["gemms"]


def _trace(path) -> list:
    w = np.fromfile(path, dtype="<u2").tolist()
    out, i = [], 0
    while i < len(w):
        out.append((w[i], w[i + 2:i + 2 + w[i + 1]]))
        i += 2 + w[i + 1]
    return out


def _text_lines(packets, split: bool) -> list:
    """The stream as text lines (UG1076 'TXT File Format', 64-bit PLIO; UG1079 packet headers)."""
    lines = []
    for pid, words in packets:
        w = list(words) + [0] * (len(words) % 2)
        u32 = [w[i] | w[i + 1] << 16 for i in range(0, len(w), 2)]
        if split:
            h = 0x0FFF0000 | pid
            u32 = [h | (0 if bin(h).count("1") % 2 else 1 << 31)] + u32
        rows = [" ".join(str(v) for v in u32[i:i + 2]) for i in range(0, len(u32), 2)]
        if split:
            rows.insert(len(rows) - 1, "TLAST")
        lines += rows
    return lines


def _first_beats(lines: list, beats: int) -> list:
    out, n = [], 0
    for i, ln in enumerate(lines):
        if n == beats:
            break
        if ln == "TLAST":
            if i + 1 < len(lines) and n + 1 <= beats:
                out.append(ln)
            continue
        out.append(ln)
        n += 1
    return out


@pytest.mark.parametrize("full", [False, True])
def test_the_data_files_are_what_the_harness_plays(tmp_path, full):
    """in.bin through the harness of the data's instance gives expected.bin bit for bit; each PLIO
    text file is the first PLIO_SAMPLES beats of what the harness sends / receives on it (all of
    them with full_data)."""
    out = _emit(tmp_path, "e", 1024, full_data=full)  # dW: 8 K chunks, 2 of them data in the sample
    aie = out / "aie"
    for node in _manifest(out)["nodes"]:
        c, inst = node["cname"], data_node(node)
        assert node["data"] == {"instance": "full" if full else "sample", "plio_beats": None if full else PLIO_SAMPLES,
                                "products": [[g["M"], g["K"], g["N"]] for g in inst["gemms"]]}
        if full:
            assert inst["gemms"] == node["gemms"]
        (tmp_path / f"{c}_h.cpp").write_text(_render_harness(inst))
        exe = compile_cpp([aie / "kernels" / f"{c}.cc", tmp_path / f"{c}_h.cpp"], tmp_path / f"{c}_h",
                          include_dirs=[shim_dir(), aie / "kernels"], flags=("-DRLHLS_AIE_MAIN",))
        (tmp_path / c).mkdir()
        subprocess.run([str(exe), str(aie / "data" / f"{c}.in.bin"), str(tmp_path / f"{c}.out.bin"), str(tmp_path / c)],
                       check=True)
        assert (tmp_path / f"{c}.out.bin").read_bytes() == (aie / "data" / f"{c}.expected.bin").read_bytes()
        for q in range(node["plio_pairs"]):
            split = sum(1 for k in node["kernels"] if k["plio"] == q) > 1
            for name, tr in ((f"{c}_in{q}.txt", f"in{q}.u16"), (f"{c}_out{q}_expected.txt", f"out{q}.u16")):
                want = _text_lines(_trace(tmp_path / c / tr), split)
                got = (aie / "data" / name).read_text().split("\n")
                assert got[-1] == "" and len(want) > PLIO_SAMPLES, name  # streams longer than a sample
                assert got[:-1] == (want if full else _first_beats(want, PLIO_SAMPLES)), name


def test_check_runs_the_written_data(tmp_path):
    """check_aie runs the harness on data/<node>.in.bin and compares with data/<node>.expected.bin:
    one word changed there is one mismatch of that product."""
    out = _emit(tmp_path, "c", 512)
    res = check_aie(out)
    assert [r["kernel"] for r in res] == ["q_fc2_fwd_y", "q_fc2_bwd_dx", "q_fc2_bwd_dw"]
    assert all(r["passed"] and r["data"] == "sample" and r["detail"] == "bit-exact" for r in res), res
    nodes = {n["name"]: n for n in _manifest(out)["nodes"]}
    assert [list(r["checked"]) for r in res] == nodes["q.fc2.fwd"]["data"]["products"] + \
        nodes["q.fc2.bwd"]["data"]["products"]
    assert res[2]["shape"][1] == 512 and res[2]["checked"][1] < 512  # dW: K is the batch
    exp = out / "aie" / "data" / "q_fc2_bwd.expected.bin"
    w = np.fromfile(exp, dtype="<u2")
    n_dx = res[1]["checked"][0] * res[1]["checked"][2]
    w[n_dx + 5] ^= 1  # one bit of dW's sixth result
    w.tofile(exp)
    res = check_aie(out)
    assert [r["passed"] for r in res] == [True, True, False]
    assert res[2]["mismatches"] == 1 and res[2]["detail"] == f"1 of {res[2]['checked'][0] * res[2]['checked'][2]} " \
                                                             "outputs differ"
    # a node emitted without data is checked on a sample drawn from the seed
    out = _emit(tmp_path, "nodata", 512, data=False)
    assert not (out / "aie" / "data").exists()
    res = check_aie(out, seed=3)
    assert all(r["passed"] and r["data"] == "seed" for r in res), res


def test_full_data_is_the_whole_step_and_checked(tmp_path):
    out = _emit(tmp_path, "f", 128, full_data=True)
    res = check_aie(out)
    assert all(r["passed"] and r["data"] == "full" and r["checked"] == r["shape"] for r in res), res
    fwd = _manifest(out)["nodes"][0]
    # in.bin: the whole x (128 x 64), W (64 x 64) and bias; expected.bin: y (128 x 64)
    assert (out / "aie" / "data" / "q_fc2_fwd.in.bin").stat().st_size == 2 * (128 * 64 + 64 * 64 + 64)
    assert (out / "aie" / "data" / "q_fc2_fwd.expected.bin").stat().st_size == 2 * 128 * 64
    assert fwd["data"]["instance"] == "full"


def test_build_writes_the_sample_unless_full_data_is_asked(tmp_path):
    from rlhls.flow.build import build_design

    d = get_design("apdrl-dqn-cartpole")
    g = build_graph(d)
    plan = {n.name: ("AIE" if n.name in ("q.fc2.fwd", "q.fc2.bwd") else "PL") for n in g.nodes}
    for full in (False, True):
        out = tmp_path / f"full{full}"
        r = build_design(d, out, plan=plan, graph=g, hls4ml=False, full_data=full)
        assert r.aie["nodes"] == ["q.fc2.fwd", "q.fc2.bwd"]
        assert {n["data"]["instance"] for n in _manifest(out)["nodes"]} == {"full" if full else "sample"}


def test_full_data_with_weights_is_refused(tmp_path, capsys):
    out = tmp_path / "policy"
    assert main(["build", "apdrl-dqn-cartpole", "--weights", str(tmp_path / "run"), "--full-data",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--full-data" in err and "do not apply to it" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- experiments: --jobs

def _runs(n, steps):
    from rlhls.host.experiments import Run

    return [Run(f"r{i}", fn=abs, kwargs={"x": i}, steps=steps) for i in range(n)]


def test_jobs_default_is_one_process_where_ray_does_not_pay():
    from rlhls.host.experiments import choose_jobs

    # <= 2 cores: one process whatever the runs (two workers on two cores measured no faster)
    jobs, why = choose_jobs(_runs(4, 100_000), cores=2)
    assert jobs == 1 and "in this process" in why and "2 CPU core(s)" in why
    # more cores: short runs in this process, long ones (or of unknown length) on Ray with every core
    assert choose_jobs(_runs(4, 200), cores=8)[0] == 1
    assert choose_jobs(_runs(1, 100_000), cores=8)[0] == 1
    jobs, why = choose_jobs(_runs(4, 100_000), cores=8)
    assert jobs is None and "Ray tasks, 4 at once" in why
    assert choose_jobs(_runs(4, None), cores=8)[0] is None
    # what the user asks is done
    assert choose_jobs(_runs(4, 200), jobs=3, cores=2) == (3, "Ray tasks, 3 at once (--jobs 3)")
    assert choose_jobs(_runs(4, 100_000), jobs=1, cores=8)[0] == 1
    assert choose_jobs(_runs(4, 200), address="auto", cores=2)[0] is None


def _square(width: int, seed: int, steps: int) -> dict:
    return {"seed": seed, "value": width * width + seed}


def test_experiment_default_runs_short_runs_without_ray(tmp_path, capsys, monkeypatch):
    import rlhls.host.engine as engine
    import rlhls.host.experiments as experiments
    from rlhls.host.experiments import RUNS, Experiment, Summary, register_experiment, unregister_experiment

    def no_ray(*a, **k):
        raise AssertionError("Ray started")

    monkeypatch.setattr(engine, "ray_session", no_ray)
    monkeypatch.setattr(experiments, "_cores", lambda: 8)

    def runs(ctx):
        ctx.start({"name": ctx.opts.name})
        return [ctx.run(f"s{s}", steps=100, width=3, seed=s) for s in range(ctx.opts.seeds or 1)]

    register_experiment(Experiment("user-short", "short runs", runs=runs, run=_square,
                                   summarize=lambda ctx, o: Summary([x.result for x in o]),
                                   options=("seeds", *RUNS)))
    try:
        out = tmp_path / "short"
        assert main(["experiment", "user-short", "--seeds", "3", "--out", str(out), "--json"]) == 0
        cap = capsys.readouterr()
        assert [r["value"] for r in json.loads(cap.out)] == [9, 10, 11]
        line = "user-short: one run after another in this process (about 6 s of runs"
        assert line in cap.err
        assert json.loads((out / "experiment.json").read_text())["engine"]["jobs"] == 1
    finally:
        unregister_experiment("user-short")
