"""F-DDPG's experiments (seed 002 §V-B, §V-C) and the evaluation of a trained arm policy.

    rlhls experiment fddpg-table7 [--design fddpg-arm-m1] [--seeds K] [--jobs J] [--full] [--param episodes=N]
                                  [--param snapshots=E1,E2,...] [--out DIR]
    rlhls experiment fddpg-table4 [--design D ...] [--param measure=STEPS] [--out DIR]

**Evaluation** (``evaluate``): a policy drives each of §V-C's tasks A-F once (``task=`` of
``rlhls/RoboticArm-v0``, deterministic, no noise, at most 300 steps). 'attach' = the magnet held the
box at some step; 'put' = the box came within 30 mm of the goal (the episode's termination);
'lifted' = the held box rose more than 10 mm above the ground (the seed marks a 'put' without it
with '*'). F-DDPG's policy is the fixed-point actor as it is exported (the design's PL formats,
hls4ml's tanh table: ``flow.build.export_policy``), the float DDPG's the FP32 actor the host acts
with. The states it sees and its actions are recorded (``policy_states.npz``: what ``rlhls build
DESIGN --weights RUN`` checks the exported project on) and one task is drawn as ``arm.gif``.

**fddpg-table7** (Table VII): per seed, the float DDPG (``precision fp32``: every node on the host)
and F-DDPG (``precision mixed`` under the seed's partition: the ``ddpg_gradient`` kernel's nodes on
the PL, Adam and the Polyak step on the host) train on eq. 1-6's random starts and goals; the actor
is saved when the count of finished training episodes reaches each snapshot (the seed: 400, 600,
..., 1200 of 1300 episodes of 300 gradients), and every snapshot is evaluated on A-F. A cell of
``table7.md`` is, per seed, the first snapshot whose policy completes the sub-task ('x': none).
Each run is a run folder ``<out>/<variant>-s<seed>/`` (metrics, checkpoint; ``policies/ep<E>.npz``,
``eval.json``: a run with one is finished), each a Ray task (host/engine.py: ``--jobs`` at once,
``--address`` a cluster; ``--resume``, or the same command again, keeps finished runs and continues
the others from their checkpoints). ``--full`` is the seed's
budget (3 seeds x 2 variants x 390,000 steps: about 80 minutes with ``--jobs 2`` on 2 busy cores); the
default is the demonstration (``DEMO``: 400 episodes, snapshots 100-400, 3 seeds: 16 minutes).
``--param episodes=N`` and ``--param snapshots=E1,E2,...`` set the budget and snapshots. ``fig7.png``:
success over tasks and seeds against the snapshot episode, and the
learning curves (mean +- std over seeds).

**fddpg-table4** (Tables III-VI): the time of the seed's 1300 episodes x 300 gradients (390,000
training steps) four ways, side by side with the seed's figures: our float numpy DDPG and our
emulation of F-DDPG (host seconds per training step measured over ``measure`` steps after the
replay warm-up, x 390,000), the modeled FPGA kernel alone (Table VI: its cycles at 200 MHz) and the
modeled FPGA with the parameters and gradients streamed over the link every step (the transfer
model, Tables III-IV). Models 1 and 2 train the same unpadded networks here (the padded outputs are
zeros), so their host times agree; the seed's NumPy times differ by the padded 24-wide layers.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

from rlhls.designs.errors import RlhlsError
from rlhls.partition import fileio

from . import (RUNS, TRAINS, Experiment, Summary, design_ref, episodes, evaluation, option, param, register_experiment,
               train_run)
from ..policy import POLICY_STATES
from ..report import register_report_section
from ..runner import CHECKPOINT, csv_text, read_metrics

__all__ = ["TASKS", "SEED_SNAPSHOTS", "VARIANTS", "seed_plan", "policy_fn", "evaluate", "write_gif",
           "Snapshots", "table7_run", "runs_table7", "summary_table7", "runs_table4", "summary_table4",
           "report_section", "DEMO"]

TASKS = "ABCDEF"
SEED_EPISODES, SEED_SNAPSHOTS, GRADIENTS = 1300, (400, 600, 800, 1000, 1200), 300
DEMO = {"episodes": 400, "snapshots": (100, 200, 300, 400)}
MEASURE = 900  # fddpg-table4: training steps timed per design and precision
VARIANTS = {"DDPG": "fp32", "F-DDPG": "mixed"}
LIFT_MM = 10.0
GIF_TASK = "C"
SEED_TABLE7 = {"A": ("x", "600", "x", "800", "x"), "B": ("Yes", "800", "800*", "800", "1000*"),
               "C": ("x", "600", "1200", "600", "600"), "D": ("x", "800", "1200", "600", "1000"),
               "E": ("x", "600", "1000", "600", "1000"), "F": ("Yes", "800", "800*", "600", "1000*")}


# ----------------------------------------------------------------------------- policies and tasks

def seed_plan(design) -> dict:
    """The seed's partition: the nodes of the design's own gradient kernel on the PL, the rest (Adam,
    the Polyak step) on the host."""
    from rlhls.designs.graph import build_graph
    from rlhls.designs.kernels import KernelContext, kernels_for

    graph = build_graph(design, design.batch_size)
    ctx = KernelContext(design, graph)
    own = {n.name for n in graph.nodes
           if any(getattr(k, "train_step", None) == "ddpg" for k, _ in kernels_for(n, ctx, "PL"))}
    if not own:
        raise RlhlsError(f"design '{design.name}' names no whole-step DDPG gradient kernel (ddpg_gradient)")
    return {n.name: "PL" if n.name in own else "PS" for n in graph.nodes}


def policy_fn(design, net, variant: str):
    """obs (N, d) -> actions (N, a): F-DDPG's exported fixed-point actor, or the host's FP32 one."""
    if variant == "F-DDPG":
        from rlhls.flow.build import policy_precision
        from rlhls.flow.hls4ml_convert import table_precisions

        ps = table_precisions(net, policy_precision(design)[0])
        return lambda o: net.forward(o, ps)
    from ..mixed import ps_forward

    return lambda o: ps_forward(net, o)


def _task(env, act, task: str, frames: bool):
    from ..envs.robotic_arm import GROUND_MM

    obs, info = env.reset(seed=0, options={"task": task})
    lift, ret, imgs, states, actions = 0.0, 0.0, [], [], []
    term = False
    for t in range(1, 10_000):
        a = np.asarray(act(np.asarray(obs, dtype=np.float64)[None]), dtype=np.float64)[0]
        states.append(np.asarray(obs, dtype=np.float64))
        actions.append(a)
        if frames and t % 2:
            imgs.append(env.render())
        obs, r, term, trunc, info = env.step(np.clip(a, -1.0, 1.0).astype(np.float32))
        ret += r
        if info["held"]:
            lift = max(lift, float(env.unwrapped.box[2]) - GROUND_MM)
        if term or trunc:
            break
    if frames:
        imgs.append(env.render())
    res = {"attach": bool(info["ever_attached"]), "put": bool(term), "lifted": lift > LIFT_MM,
           "lift_mm": round(lift, 1), "steps": t, "distance_mm": round(float(info["distance_mm"]), 1),
           "return": round(float(ret), 3)}
    return res, states, actions, imgs


def evaluate(design, net, variant: str, *, gif_task: str | None = None) -> dict:
    """{'tasks': {task: result}, 'states', 'actions', 'frames'} of a policy on tasks A-F."""
    import gymnasium as gym

    import rlhls.envs  # noqa: F401

    act = policy_fn(design, net, variant)
    tasks, S, A, frames = {}, [], [], []
    for task in TASKS:
        env = gym.make(design.env_id, render_mode="rgb_array" if task == gif_task else None)
        res, st, ac, imgs = _task(env, act, task, task == gif_task)
        env.close()
        tasks[task], frames = res, imgs or frames
        S += st
        A += ac
    return {"tasks": tasks, "states": np.stack(S), "actions": np.stack(A), "frames": frames, "variant": variant}


def write_gif(frames, path, fps: int = 10) -> None:
    """An animated GIF of RGB frames (pillow, which matplotlib brings)."""
    from PIL import Image

    if not frames:
        raise RlhlsError(f"GIF '{path}': no frames")
    imgs = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    buf = io.BytesIO()
    imgs[0].save(buf, format="GIF", save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0)
    fileio.atomic_write_bytes(path, buf.getvalue())


def save_policy_record(folder: Path, ev: dict) -> None:
    """policy_states.npz and arm.gif of an evaluation, in a run folder: the states, and the actions as
    ``actions`` where they are the exported policy's (F-DDPG's fixed-point actor: what ``rlhls build
    --weights`` compares its C simulation with), else as ``float_actions``."""
    buf = io.BytesIO()
    np.savez(buf, states=ev["states"], **{"actions" if ev["variant"] == "F-DDPG" else "float_actions": ev["actions"]})
    fileio.atomic_write_bytes(folder / POLICY_STATES, buf.getvalue())
    if ev["frames"]:
        write_gif(ev["frames"], folder / "arm.gif")


def trained_actor(design, run: Path):
    from rlhls.flow.build import policy_network

    from ..checkpoint import load_checkpoint

    return policy_network(design, load_checkpoint(run / CHECKPOINT)["trainer"])


def _net_from(design, params: dict):
    from rlhls.flow.build import policy_network

    return policy_network(design, {"actor": params})


# ----------------------------------------------------------------------------- Table VII

class Snapshots:
    """The ``on_update`` hook of a Table VII run: saves the actor (``policies/ep<E>.npz``) once the
    count of finished episodes reaches each of `at`, from the checkpoint of the update that reached
    it (called before every update, and once more after the last)."""

    def __init__(self, folder: Path, at):
        self.folder, self.at = Path(folder), tuple(at)

    def __call__(self, update=None) -> None:
        done = len(episodes(self.folder)[1])
        due = [e for e in self.at if done >= e and not (self.folder / "policies" / f"ep{e}.npz").exists()]
        if not due or not (self.folder / CHECKPOINT).is_file():
            return
        from ..checkpoint import load_checkpoint

        actor = load_checkpoint(self.folder / CHECKPOINT)["trainer"]["actor"]
        fileio.make_dirs(self.folder / "policies")
        buf = io.BytesIO()
        np.savez(buf, **actor)
        for e in due:
            fileio.atomic_write_bytes(self.folder / "policies" / f"ep{e}.npz", buf.getvalue())


def table7_run(design: str, variant: str, seed: int, out: str, steps: int, snapshots, overrides: dict,
               backend: str = "emu") -> dict:
    """One Table VII run (a worker process): train (in process, train_run), then evaluate every
    snapshot; returns eval.json."""
    from rlhls.designs.registry import get_design

    d, folder = get_design(design), Path(out)
    plan = seed_plan(d) if variant == "F-DDPG" else None
    snap = Snapshots(folder, snapshots)
    t0 = time.perf_counter()
    train_run(design, out, steps, seed, backend=backend, precision=VARIANTS[variant], plan=plan,
              overrides=overrides, on_update=snap)
    snap()
    res = {"variant": variant, "seed": seed, "train_seconds": round(time.perf_counter() - t0, 1), "snapshots": {}}
    for e in snapshots:
        path = folder / "policies" / f"ep{e}.npz"
        if path.is_file():
            with np.load(path, allow_pickle=False) as z:
                net = _net_from(d, {k: z[k] for k in z.files})
            res["snapshots"][str(e)] = evaluate(d, net, variant)["tasks"]
    ev = evaluate(d, trained_actor(d, folder), variant, gif_task=GIF_TASK)
    res["final"] = ev["tasks"]
    save_policy_record(folder, ev)
    fileio.write_json(folder / "eval.json", res)
    return res


def _parse_ints(text, what: str) -> tuple:
    try:
        vals = tuple(int(v) for v in str(text).replace(" ", "").split(",") if v)
    except ValueError:
        vals = ()
    if not vals or min(vals) < 1:
        raise RlhlsError(f"--param {what}={text!r}: expected positive integers separated by commas")
    return vals


def _first(evals: dict, task: str, key: str, snapshots) -> str:
    for e in snapshots:
        r = evals.get(str(e), {}).get(task)
        if r and r[key]:
            return f"{e}" + ("*" if key == "put" and not r["lifted"] else "")
    return "x"


def summarize_table7(out: Path, design: str, seeds: int, snapshots, failed: list | None = None) -> dict:
    """table7.md / table7.csv / fig7.png from the runs' eval.json (runs that have one)."""
    from ..report import markdown_table, mean_std_band, save_png

    runs = {}
    for v in VARIANTS:
        for s in range(seeds):
            p = out / f"{v}-s{s}" / "eval.json"
            if p.is_file():
                runs[(v, s)] = json.loads(p.read_text())
    rows, csv_rows = [], []
    for task in TASKS:
        cells = {}
        for v in VARIANTS:
            for key in ("attach", "put"):
                per = [_first(runs[(v, s)]["snapshots"], task, key, snapshots) for s in range(seeds) if (v, s) in runs]
                cells[(v, key)] = ", ".join(per) if per else "-"
        seed = SEED_TABLE7[task]
        rows.append([task, cells[("DDPG", "attach")], cells[("DDPG", "put")], cells[("F-DDPG", "attach")],
                     cells[("F-DDPG", "put")], seed[1], seed[2], seed[3], seed[4]])
        csv_rows.append({"task": task, **{f"{v}_{k}": c for (v, k), c in cells.items()},
                         "seed_ddpg_attach": seed[1], "seed_ddpg_put": seed[2], "seed_fddpg_attach": seed[3],
                         "seed_fddpg_put": seed[4]})
    head = ["task", "DDPG attach", "DDPG put", "F-DDPG attach", "F-DDPG put", "seed DDPG attach", "seed DDPG put",
            "seed F-DDPG attach", "seed F-DDPG put"]
    md = (f"# Table VII: episodes to achieve the goal ({design}, {seeds} seed(s), snapshots "
          f"{', '.join(map(str, snapshots))})\n\n"
          "Per seed, the first snapshot (training episodes) whose policy completes the sub-task on the task; "
          "'x': no snapshot does; '*': put without lifting the box. Seed's columns: Table VII.\n\n"
          + markdown_table(head, rows) + "\n".join(failed or []))
    fileio.atomic_write_text(out / "table7.md", md)
    fileio.atomic_write_text(out / "table7.csv", csv_text(csv_rows, list(csv_rows[0])))

    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    colors = {"DDPG": "tab:blue", "F-DDPG": "tab:red"}
    for v in VARIANTS:
        for key, style in (("attach", "--"), ("put", "-")):
            xs, ys = [], []
            for e in snapshots:
                ok = [runs[(v, s)]["snapshots"].get(str(e), {}).get(t, {}).get(key, False)
                      for s in range(seeds) if (v, s) in runs for t in TASKS]
                if ok:
                    xs.append(e)
                    ys.append(100.0 * np.mean(ok))
            if xs:
                ax1.plot(xs, ys, style, marker="o", color=colors[v], label=f"{v} {key}")
        curves = []
        for s in range(seeds):
            p = out / f"{v}-s{s}" / "episodes.csv"
            if p.is_file():
                ret = np.array([float(r["return"]) for r in read_metrics(p)])
                if len(ret):
                    w_ = min(20, len(ret))
                    ma = np.convolve(ret, np.ones(w_) / w_, mode="valid")
                    curves.append((np.arange(w_, len(ret) + 1), ma))
        mean_std_band(ax2, curves, colors[v], v)
    ax1.set(xlabel="training episodes (snapshot)", ylabel="% of tasks x seeds", ylim=(-5, 105),
            title="tasks A-F completed by the snapshot's policy")
    ax2.set(xlabel="training episode", ylabel="return (20-episode mean)", title="learning curves (mean +- std)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"F-DDPG Table VII: {design}")
    fig.tight_layout()
    save_png(fig, out / "fig7.png")
    return {"rows": csv_rows, "runs": len(runs)}


def runs_table7(ctx) -> list:
    from rlhls.designs.registry import get_design

    opts = ctx.opts
    design = get_design((opts.design or ["fddpg-arm-m1"])[0])
    if not design.name.startswith("fddpg-"):
        raise RlhlsError(f"fddpg-table7: design '{design.name}' is not an F-DDPG arm design (fddpg-arm-m1/m2/m3)")
    full = opts.full
    episodes_ = param(opts, "episodes", SEED_EPISODES if full else DEMO["episodes"], low=1)
    snaps = _parse_ints(opts.params["snapshots"], "snapshots") if "snapshots" in opts.params else (
        SEED_SNAPSHOTS if full else DEMO["snapshots"])
    seeds = int(opts.seeds or 3)
    steps = int(opts.steps or episodes_ * GRADIENTS)
    out = ctx.out
    settings = {"experiment": "fddpg-table7", "design": design.name, "episodes": episodes_, "snapshots": list(snaps),
                "steps": steps, "backend": opts.backend, "overrides": {k: str(v) for k, v in opts.overrides.items()}}
    ctx.start(settings)
    ctx.data.update(design=design.name, seeds=seeds, snapshots=snaps)
    jobs = [(v, s) for s in range(seeds) for v in VARIANTS]
    ctx.say(f"fddpg-table7: {design.name}, {len(jobs)} run(s) of {steps} steps ({episodes_} episodes of <= "
            f"{GRADIENTS} steps), snapshots {', '.join(map(str, snaps))} -> {out}")
    return [ctx.run(f"{v}-s{s}", out / f"{v}-s{s}", steps=steps, finished=_evaluated(out / f"{v}-s{s}"),
                    design=design_ref(design), variant=v, seed=s, out=str(out / f"{v}-s{s}"), snapshots=snaps,
                    overrides=dict(opts.overrides), backend=opts.backend)
            for v, s in jobs]


def summary_table7(ctx, outcomes) -> Summary:
    out = ctx.out
    summary = summarize_table7(out, ctx.data["design"], ctx.data["seeds"], ctx.data["snapshots"], failed=ctx.failed)
    return Summary(summary["rows"], (out / "table7.md").read_text().splitlines(),
                   [out / "table7.md", out / "table7.csv", out / "fig7.png"])


class _evaluated:
    """A Table VII run is finished when its eval.json is there (written after training and evaluation)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def __call__(self) -> bool:
        return (self.folder / "eval.json").is_file()


# ----------------------------------------------------------------------------- Table IV

def _host_step_seconds(design, precision: str, measure: int, backend: str = "emu") -> dict:
    """Host CPU seconds per training step (env step + acting + gradient + update) after the warm-up:
    this process's CPU time, so other load on the machine does not inflate it."""
    from ..algorithms.ddpg import DDPG

    hp = {"precision": precision, "learning_starts": 300, "steps_per_update": 300, "buffer_size": 10_000}
    plan = seed_plan(design) if precision == "mixed" else None
    t = DDPG(design, seed=0, backend=backend, hyperparams=hp, assignment=plan)
    try:
        t.train_update(1, 2)  # the replay warm-up (uniform actions) and one gradient
        n, secs, phases = 0, 0.0, {}
        while n < measure:
            t0 = time.process_time()
            row = t.train_update(2, 3)
            secs += time.process_time() - t0
            n += 300
            for k, v in row.items():
                if k.startswith("t_"):
                    phases[k[2:]] = phases.get(k[2:], 0.0) + v
    finally:
        t.close()
    return {"per_step_s": secs / n, "steps": n, "phases": {k: v / n for k, v in phases.items()}}


def runs_table4(ctx) -> list:
    """No runs: the designs are timed one after another in this process (summary_table4)."""
    ctx.start({"experiment": "fddpg-table4"})
    return []


def summary_table4(ctx, outcomes) -> Summary:
    from rlhls.designs.kernels import KernelContext, get_kernel
    from rlhls.designs.registry import get_design

    from ..report import markdown_table, save_png

    opts, out, say = ctx.opts, ctx.out, ctx.say
    names = opts.design or ["fddpg-arm-m1", "fddpg-arm-m2", "fddpg-arm-m3"]
    measure = param(opts, "measure", MEASURE, low=1)
    total = SEED_EPISODES * GRADIENTS
    rows, md = [], []
    k = get_kernel("ddpg_gradient")
    for name in names:
        d = get_design(name)
        if not name.startswith("fddpg-"):
            raise RlhlsError(f"fddpg-table4: design '{name}' is not an F-DDPG arm design")
        ctx = KernelContext(d)
        node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
        p = k.resolve(k.node_params(node, ctx))
        cost = k.cost(p, device=ctx.device)
        tr = cost["transfer"]
        say(f"{name}: measuring host time per training step (fp32, then the emulated kernel) ...")
        fp = _host_step_seconds(d, "fp32", measure, opts.backend)
        em = _host_step_seconds(d, "mixed", measure, opts.backend)
        # the modeled C+FPGA: the host's env, acting, sampling and Adam beside the kernel with its transfers
        # (their share of the emulation's wall-clock phases, of its CPU time per step)
        wall = sum(em["phases"].values()) or 1.0
        host_rest = em["per_step_s"] * (1.0 - em["phases"].get("backprop", 0.0) / wall)
        sf = d.seed_figures
        t4 = sf.get("table_iv") or {}
        r = {"design": name, "cycles": cost["cycles"], "seed_cycles": sf["table_vi_cycles"],
             "kernel_ms": cost["latency_us"] / 1e3, "transfer_ms": tr["total_us"] / 1e3, "io_share": tr["io_share"],
             "seed_table_iii_ms": sf["table_iii_exe_ms"], "seed_table_v_ms": sf["table_v_exe_ms"],
             "numpy_s": fp["per_step_s"] * total, "emu_s": em["per_step_s"] * total,
             "fpga_kernel_s": cost["latency_us"] * 1e-6 * total, "fpga_streamed_s": tr["total_us"] * 1e-6 * total,
             "c_fpga_s": (tr["total_us"] * 1e-6 + host_rest) * total,
             "seed_numpy_s": t4.get("numpy_s"), "seed_c_fpga_s": t4.get("c_fpga_s"),
             "numpy_ms_per_step": fp["per_step_s"] * 1e3, "emu_ms_per_step": em["per_step_s"] * 1e3,
             # the link rate Table III's time implies for the model's bytes (its compute and latencies aside)
             "implied_gb_s": tr["bytes"] / max(1e-9, 1e3 * sf["table_iii_exe_ms"] - tr["compute_us"]
                                               - tr["transfers"] * tr["latency_us"]) / 1e3}
        rows.append(r)

    def f(v, spec=".1f"):
        return "-" if v is None else format(v, spec)
    md.append(f"# 1300 episodes x 300 gradients ({total:,} training steps)\n\n"
              f"Host: CPU seconds per training step measured over {measure} steps x {total:,}. FPGA: the kernel's cycle "
              "model at 200 MHz (Table VI), and with every step's parameters and gradients streamed over PCIe "
              "2.0 x4 (the transfer model; 'C+FPGA' adds our host's env, acting, sampling and Adam).\n\n")
    md.append(markdown_table(
        ["design", "our numpy DDPG (s)", "our emulation (s)", "FPGA kernel (s)", "FPGA streamed (s)",
         "our C+FPGA (s)", "seed NumPy (s)", "seed C+FPGA (s)"],
        [[r["design"], f(r["numpy_s"]), f(r["emu_s"]), f(r["fpga_kernel_s"], ".2f"), f(r["fpga_streamed_s"]),
          f(r["c_fpga_s"]), f(r["seed_numpy_s"]), f(r["seed_c_fpga_s"])] for r in rows]))
    md.append("\nPer gradient step (Tables III, V, VI):\n\n")
    md.append(markdown_table(
        ["design", "kernel cycles", "Table VI cycles", "kernel ms", "streamed ms (model)", "I/O share",
         "Table III ms", "link rate Table III implies (GB/s)", "Table V ms", "numpy ms/step", "emulation ms/step"],
        [[r["design"], r["cycles"], r["seed_cycles"], f(r["kernel_ms"], ".4f"), f(r["transfer_ms"], ".3f"),
          f"{100 * r['io_share']:.0f}%", f(r["seed_table_iii_ms"], ".3f"), f(r["implied_gb_s"], ".2f"),
          f(r["seed_table_v_ms"], ".4f"), f(r["numpy_ms_per_step"], ".2f"), f(r["emu_ms_per_step"], ".2f")]
         for r in rows]))
    text = "".join(md)
    fileio.atomic_write_text(out / "table4.md", text)
    fileio.atomic_write_text(out / "table4.csv", csv_text(rows, list(rows[0])))
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    labels = ["our numpy", "our emulation", "FPGA kernel", "FPGA streamed", "seed NumPy", "seed C+FPGA"]
    keys = ["numpy_s", "emu_s", "fpga_kernel_s", "fpga_streamed_s", "seed_numpy_s", "seed_c_fpga_s"]
    x = np.arange(len(rows))
    wd = 0.8 / len(keys)
    for i, (lab, key) in enumerate(zip(labels, keys)):
        ax.bar(x + i * wd, [r[key] or 0.0 for r in rows], wd, label=lab)
    ax.set_xticks(x + 0.4 - wd / 2, [r["design"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("seconds for 1300 x 300 gradients")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(fig, out / "table4.png")
    return Summary(rows, text.splitlines(), [out / "table4.md", out / "table4.csv", out / "table4.png"])


# ----------------------------------------------------------------------------- the flow report

def learning_lines(run: Path, parts: int = 10) -> list:
    """The learning curve of a run as report lines: per tenth of its training episodes, the mean return
    and the share ending in 'put' (terminated before the arm's 300-step limit: the box within 30 mm of the
    goal); the curve itself is ``train/reward.png``."""
    from ..envs.robotic_arm import MAX_STEPS
    from ..report import markdown_table

    eps = read_metrics(run / "episodes.csv") if (run / "episodes.csv").is_file() else []
    if not eps:
        return []
    ret = np.array([float(e["return"]) for e in eps])
    put = np.array([int(float(e["length"])) < MAX_STEPS for e in eps])
    rows = []
    for c in np.array_split(np.arange(len(eps)), min(parts, len(eps))):
        rows.append([f"{c[0] + 1}-{c[-1] + 1}", f"{ret[c].mean():.1f}", f"{100 * put[c].mean():.0f}%"])
    ev = evaluation(run)
    return ["## Learning curve", "",
            f"{len(eps)} training episode(s) on eq. 1-6's random starts and goals (the return per episode: "
            "`train/reward.png` above).", "",
            markdown_table(["training episodes", "mean return", "ended in 'put'"], rows), "",
            *([f"The trained policy, deterministic (its noise off), on episodes of its own at the end of the run "
               f"(`train/eval.csv`): mean return {ev:.1f}.", ""] if ev == ev else [])]


def report_section(rec: dict, out: Path) -> list:
    """report.md lines for an F-DDPG flow run (host/report.py's section hook): the gradient kernel's
    cycles and transfers against Tables III and VI, the learning curve by tenths of the training
    episodes, and the trained policy on tasks A-F (its states recorded for ``rlhls build --weights``,
    ``train/arm.gif``)."""
    if not str(rec.get("design", "")).startswith("fddpg-"):
        return []
    from rlhls.designs.kernels import KernelContext, get_kernel
    from rlhls.designs.registry import get_design

    from ..report import markdown_table

    design = get_design(rec["design"])
    L = []
    k = get_kernel("ddpg_gradient")
    ctx = KernelContext(design)
    node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
    p = k.resolve(k.node_params(node, ctx))
    c = k.cost(p, device=ctx.device)
    sf = design.seed_figures
    L += ["## Gradient kernel (Table VI)", "",
          markdown_table(["", "cycles", "us at 200 MHz", "streamed over PCIe (us, model)", "I/O share"],
                         [["rlhls ddpg_gradient", c["cycles"], f"{c['latency_us']:.1f}",
                           f"{c['transfer']['total_us']:.1f}", f"{100 * c['transfer']['io_share']:.0f}%"],
                          ["seed (Tables VI, III)", sf["table_vi_cycles"], f"{1e3 * sf['table_vi_time_ms']:.1f}",
                           f"{1e3 * sf['table_iii_exe_ms']:.1f}", "-"]]),
          "", "Phases (cycles): " + ", ".join(f"{n} {v}" for n, v in c["phases"].items() if n != "fpga_cycles")
          + ".", ""]
    run = Path(rec.get("train", {}).get("folder", "")) if rec.get("train") else None
    if run is None or not (run / CHECKPOINT).is_file():
        return L
    L += learning_lines(run)
    variant = "F-DDPG" if rec.get("precision") == "mixed" else "DDPG"
    cache = rec.setdefault("fddpg", {})
    if cache.get("checkpoint_mtime") != (run / CHECKPOINT).stat().st_mtime_ns:
        ev = evaluate(design, trained_actor(design, run), variant, gif_task=GIF_TASK)
        save_policy_record(run, ev)
        cache.update(checkpoint_mtime=(run / CHECKPOINT).stat().st_mtime_ns, tasks=ev["tasks"])
    tasks = cache["tasks"]
    rows = [[t, "yes" if r["attach"] else "no", ("yes" + ("" if r["lifted"] else "*")) if r["put"] else "no",
             r["distance_mm"], r["steps"], r["return"]] for t, r in tasks.items()]
    L += ["## Tasks A-F (§V-C)", "",
          f"The trained actor ({variant}: {'the exported fixed-point policy' if variant == 'F-DDPG' else 'FP32'}) "
          "on each task once ('*': put without lifting the box). Its states and actions are in "
          "`train/policy_states.npz`; `rlhls build " + design.name + " --weights <this>/train --csim` exports it "
          "and checks the C simulation against them.", "",
          markdown_table(["task", "attach", "put", "box to goal (mm)", "steps", "return"], rows), "",
          f"![the arm on task {GIF_TASK}](train/arm.gif)", ""]
    return L


register_report_section(report_section)
# --param keys and their defaults (the demonstration's; --full: the seed's 1300 episodes, snapshots 400..1200)
register_experiment(Experiment(
    "fddpg-table7", "F-DDPG Table VII: episodes to 'attach' and 'put' on tasks A-F, float DDPG vs F-DDPG, snapshots",
    runs=runs_table7, run=table7_run, summarize=summary_table7,
    options=(option("--design", action="append", default=None, help="the F-DDPG arm design (default fddpg-arm-m1)"),
             *TRAINS, *RUNS),
    params={"episodes": DEMO["episodes"], "snapshots": ",".join(map(str, DEMO["snapshots"]))}))
register_experiment(Experiment(
    "fddpg-table4", "F-DDPG Tables III-VI: 1300 x 300 gradients on the host (numpy, emulation) and the modeled FPGA",
    runs=runs_table4, summarize=summary_table4,
    options=(option("--design", action="append", default=None,
                    help="an F-DDPG arm design (repeatable; default fddpg-arm-m1, -m2, -m3)"), "backend"),
    params={"measure": MEASURE}))
