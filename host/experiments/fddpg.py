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

**fddpg-table4** (Tables III-VI): per design, the NumPy baseline as the seed runs it (our float
DDPG's CPU seconds per training step over ``measure`` steps after the replay warm-up, x the seed's
1300 episodes x 300 gradients; its gradient = the forward, target forward and backward phases'
share) against the ddpg_gradient kernel's cycle model at 200 MHz: streamed over each of the
device's PS->PL links (the MAX4's PCIe 2.0 x4 and Infiniband; Table III), alone (Tables V-VI), and
in the whole run (Table IV: C+FPGA = streamed gradient + environment + the rest of the host loop,
that rest measured in our Python emulation and in ``GLUE_CPP``, a g++ reimplementation of it), with
speed-up and normalized (x 2, the seed's lithography factor) columns beside the seed's. Models 1
and 2 train the same unpadded networks here (the padded outputs are zeros), so their host times
agree; the seed's NumPy times differ by the padded 24-wide layers.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlhls.core import fileio
from rlhls.core.errors import RlhlsError

from ..figures import csv_text, register_report_section
from ..policy import POLICY_STATES
from ..runfolder import CHECKPOINT, episodes, evaluation, read_metrics
from . import RUNS, TRAINS, Experiment, Summary, design_ref, option, param, read_object, register_experiment, train_run

__all__ = ["TASKS", "SEED_SNAPSHOTS", "VARIANTS", "seed_plan", "policy_fn", "evaluate", "write_gif",
           "Snapshots", "table7_run", "runs_table7", "summary_table7", "runs_table4", "summary_table4",
           "table4_row", "c_glue_seconds", "GLUE_CPP",
           "report_section", "DEMO"]

TASKS = "ABCDEF"
SEED_EPISODES, SEED_SNAPSHOTS, GRADIENTS = 1300, (400, 600, 800, 1000, 1200), 300
DEMO: dict[str, Any] = {"episodes": 400, "snapshots": (100, 200, 300, 400)}
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

    from ..envs import register_environments

    register_environments()  # rlhls/RoboticArm-v0 for gym.make

    act = policy_fn(design, net, variant)
    tasks, S, A = {}, [], []
    frames: list[np.ndarray] = []
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
               backend: str = "emu", config: dict | None = None) -> dict:
    """One Table VII run (a worker process): train (in process, train_run), then evaluate every
    snapshot; returns eval.json. `config`: --config's values (its net_arch resizes the design)."""
    from rlhls.designs.registry import get_design

    from ..hyperparams import apply_config

    d, folder = apply_config(get_design(design), config)[0], Path(out)
    plan = seed_plan(d) if variant == "F-DDPG" else None
    snap = Snapshots(folder, snapshots)
    t0 = time.perf_counter()
    train_run(design, out, steps, seed, backend=backend, precision=VARIANTS[variant], plan=plan,
              overrides=overrides, config=config, on_update=snap)
    snap()
    res: dict[str, Any] = {"variant": variant, "seed": seed, "train_seconds": round(time.perf_counter() - t0, 1),
                           "snapshots": {}}
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
    from ..figures import markdown_table, mean_std_band, save_png

    runs = {}
    for v in VARIANTS:
        for s in range(seeds):
            p = out / f"{v}-s{s}" / "eval.json"
            if p.is_file():
                runs[(v, s)] = read_object(p)
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
    _, config = ctx.config(design)
    steps = ctx.steps(config, episodes_ * GRADIENTS)
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
                    overrides=dict(opts.overrides), config=config, backend=opts.backend)
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
        n, secs = 0, 0.0
        phases: dict[str, float] = {}
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


# the host's work per training step of C+FPGA besides the kernel and the environment, in C++ (the
# seed's host is a C program): act (the fp32 actor on one state), store the transition, sample and
# gather a minibatch, pack the online and target parameters to fixed<32,8> words, unpack the gradients,
# Adam on every parameter, the Polyak step of both targets. argv: obs act batch steps layer sizes...
GLUE_CPP = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
static uint64_t s = 88172645463325252ull;
static inline uint64_t rnd() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
static inline float frnd() { return (rnd() >> 40) * (1.0f / 16777216.0f) - 0.5f; }
int main(int argc, char** argv) {
  int obs = atoi(argv[1]), act = atoi(argv[2]), batch = atoi(argv[3]), steps = atoi(argv[4]);
  std::vector<int> a_dims, c_dims;  // actor: obs -> hidden... -> act; critic: obs+act -> hidden... -> 1
  a_dims.push_back(obs); c_dims.push_back(obs + act);
  for (int i = 5; i < argc; ++i) { a_dims.push_back(atoi(argv[i])); c_dims.push_back(atoi(argv[i])); }
  a_dims.push_back(act); c_dims.push_back(1);
  auto count = [](const std::vector<int>& d) {
    size_t n = 0;
    for (size_t i = 1; i < d.size(); ++i) n += (size_t)d[i - 1] * d[i] + d[i];
    return n;
  };
  size_t P = count(a_dims) + count(c_dims);
  std::vector<float> w(P), tw(P), g(P), m(P), v(P), x(64), y(512);
  for (auto& q : w) q = frnd() * 0.1f;
  tw = w;
  std::vector<int32_t> words(3 * P);
  const int cap = 10000, row = 2 * obs + act + 2;
  std::vector<float> buf((size_t)cap * row), mb((size_t)batch * row);
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, tau = 0.001f;
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    std::clock_t t0 = std::clock();  // CPU time, as the Python side is timed
    for (int t = 0; t < steps; ++t) {
      std::vector<float> in(obs); for (auto& q : in) q = frnd();
      size_t off = 0; std::vector<float> h = in;  // act: the actor's forward on one state
      for (size_t l = 1; l < a_dims.size(); ++l) {
        std::vector<float> o(a_dims[l]);
        for (int j = 0; j < a_dims[l]; ++j) {
          float acc = w[off + (size_t)a_dims[l - 1] * a_dims[l] + j];
          for (int i = 0; i < a_dims[l - 1]; ++i) acc += h[i] * w[off + (size_t)i * a_dims[l] + j];
          o[j] = l + 1 < a_dims.size() ? (acc > 0 ? acc : 0) : std::tanh(acc) + 0.1f * frnd();
        }
        off += (size_t)a_dims[l - 1] * a_dims[l] + a_dims[l]; h = o;
      }
      float* r = &buf[(size_t)(t % cap) * row];  // store
      for (int i = 0; i < obs; ++i) { r[i] = in[i]; r[obs + act + 2 + i] = in[i] + 0.01f; }
      for (int i = 0; i < act; ++i) r[obs + i] = h[i];
      r[obs + act] = frnd(); r[obs + act + 1] = 0;
      int filled = t < cap ? t + 1 : cap;  // sample and gather a minibatch
      for (int b = 0; b < batch; ++b) {
        const float* src = &buf[(size_t)(rnd() % filled) * row];
        for (int i = 0; i < row; ++i) mb[(size_t)b * row + i] = src[i];
      }
      for (size_t i = 0; i < P; ++i) {  // pack online and target parameters, unpack the gradients
        words[i] = (int32_t)std::lrint(w[i] * 16777216.0f);
        words[P + i] = (int32_t)std::lrint(tw[i] * 16777216.0f);
      }
      for (size_t i = 0; i < P; ++i) g[i] = words[2 * P + i] * (1.0f / 16777216.0f) + 1e-4f * mb[i % mb.size()];
      float c1 = 1.0f - std::pow(b1, (float)(t + 1)), c2 = 1.0f - std::pow(b2, (float)(t + 1));
      for (size_t i = 0; i < P; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i]; v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
      for (size_t i = 0; i < P; ++i) tw[i] += tau * (w[i] - tw[i]);
    }
    double dt = double(std::clock() - t0) / CLOCKS_PER_SEC;
    if (dt < best) best = dt;
  }
  double sum = 0; for (size_t i = 0; i < P; ++i) sum += w[i] + tw[i];
  printf("%.9g %zu %g\n", best / steps, P, sum);
  return 0;
}
"""
NORMALIZE = 2.0  # the seed's: 'Normalised timings are based on the 200% lithography differences' (14 vs 28 nm)
LINKS = (None, "infiniband")  # the device's first PS->PL path (the MAX4's PCIe 2.0 x4), then its Infiniband
SEED_LINK = {"fddpg-arm-m1": None, "fddpg-arm-m2": None, "fddpg-arm-m3": "infiniband"}  # Table III's column


def c_glue_seconds(design, steps: int = 3000) -> dict | None:
    """Seconds per training step of GLUE_CPP (g++ -O2, built once into the build cache) for the design's
    networks: the C-speed host loop of C+FPGA less the environment; None where g++ is missing."""
    import hashlib
    import subprocess

    from rlhls.core.toolchain import cache_dir, compile_cpp

    k = design.kernels[0].params
    folder = cache_dir() / "fddpg-glue" / hashlib.sha256(GLUE_CPP.encode()).hexdigest()[:16]
    try:
        fileio.make_dirs(folder)
        src = folder / "glue.cpp"
        if not src.is_file():
            fileio.atomic_write_text(src, GLUE_CPP)
        exe = compile_cpp([src], folder / "glue", flags=["-O2"])
    except RlhlsError as e:
        if "not found on PATH" in str(e):
            return None
        raise
    out = subprocess.run([str(exe), str(k["obs"]), str(k["act"]), str(k["batch"]), str(steps),
                          *map(str, k["hidden"])], capture_output=True, text=True, check=True, timeout=120)
    per_step, params, _ = out.stdout.split()
    return {"per_step_s": float(per_step), "params": int(params), "steps": steps}


def runs_table4(ctx) -> list:
    """No runs: the designs are timed one after another in this process (summary_table4)."""
    from rlhls.designs.registry import get_design

    for name in ctx.opts.design or ():  # checked before anything is written
        get_design(name)
        if not name.startswith("fddpg-"):
            raise RlhlsError(f"fddpg-table4: design '{name}' is not an F-DDPG arm design")
    param(ctx.opts, "measure", MEASURE, low=1)
    ctx.start({"experiment": "fddpg-table4"})
    return []


def _grad_share(phases: dict) -> float:
    """The gradient's share (forward, target forward, backward) of a run's wall-clock phases."""
    wall = sum(phases.values()) or 1.0
    return sum(phases.get(p, 0.0) for p in ("update_forward", "target_forward", "backprop")) / wall


def table4_row(name: str, measure: int, backend: str = "emu", say=print) -> dict:
    """One design's figures for Tables III-VI: host times measured here (per step, CPU time), the
    kernel's model per link, and the C-speed host loop."""
    from rlhls.designs.kernels import KernelContext, get_kernel
    from rlhls.designs.kernels.ddpg_gradient import transfer
    from rlhls.designs.registry import get_design

    d = get_design(name)
    if not name.startswith("fddpg-"):
        raise RlhlsError(f"fddpg-table4: design '{name}' is not an F-DDPG arm design")
    k = get_kernel("ddpg_gradient")
    ctx = KernelContext(d)
    node = next(n for n in ctx.graph.nodes if k.node_params(n, ctx) is not None)
    p = k.resolve(k.node_params(node, ctx))
    cost = k.cost(p, device=ctx.device)
    links = {ln or "pcie": transfer(p, ctx.device, link=ln) for ln in LINKS}
    seed_link = SEED_LINK.get(name) or "pcie"
    say(f"{name}: measuring host time per training step (fp32, then the emulated kernel) ...")
    fp = _host_step_seconds(d, "fp32", measure, backend)
    em = _host_step_seconds(d, "mixed", measure, backend)
    glue = c_glue_seconds(d)
    total = SEED_EPISODES * GRADIENTS
    # shares of the wall-clock phases applied to the CPU seconds per step (other load on the machine aside)
    wall = sum(em["phases"].values()) or 1.0
    env_s = em["per_step_s"] * em["phases"].get("env_run", 0.0) / wall
    py_glue = em["per_step_s"] * (1.0 - em["phases"].get("backprop", 0.0) / wall) - env_s
    grad_s = fp["per_step_s"] * _grad_share(fp["phases"])
    sf = d.seed_figures
    sp, t4, nz = sf.get("speedups", {}), sf.get("table_iv") or {}, sf.get("normalized_speedups", {})
    kernel_s = cost["latency_us"] * 1e-6
    streamed = links[seed_link]["total_us"] * 1e-6
    r = {"design": name, "link": seed_link, "cycles": cost["cycles"], "seed_cycles": sf["table_vi_cycles"],
         "kernel_ms": kernel_s * 1e3, "seed_kernel_ms": sf["table_vi_time_ms"], "seed_table_v_ms": sf["table_v_exe_ms"],
         "io_share": links[seed_link]["io_share"], "seed_table_iii_ms": sf["table_iii_exe_ms"],
         **{f"streamed_{ln}_ms": t["total_us"] / 1e3 for ln, t in links.items()},
         **{f"bytes_{ln}": t["bytes"] for ln, t in links.items()},
         "numpy_grad_ms": grad_s * 1e3, "seed_numpy_grad_ms": sf["table_iii_exe_ms"] * sp.get("iii", float("nan")),
         "numpy_ms_per_step": fp["per_step_s"] * 1e3, "emu_ms_per_step": em["per_step_s"] * 1e3,
         "env_ms_per_step": env_s * 1e3, "py_glue_ms_per_step": py_glue * 1e3,
         "c_glue_ms_per_step": None if glue is None else glue["per_step_s"] * 1e3,
         # Table III / V / VI: the NumPy gradient against the kernel streamed, alone (V and VI: the cycle model)
         "iii_speedup": grad_s / streamed, "seed_iii_speedup": sp.get("iii"),
         "v_speedup": grad_s / kernel_s, "seed_v_speedup": sp.get("v"),
         "vi_speedup": grad_s / kernel_s, "seed_vi_speedup": sp.get("vi"),
         # Table IV: the whole 1300 x 300 run
         "numpy_s": fp["per_step_s"] * total, "emu_s": em["per_step_s"] * total,
         "fpga_kernel_s": kernel_s * total, "fpga_streamed_s": streamed * total,
         "c_fpga_s": (streamed + env_s + py_glue) * total,
         "c_fpga_cglue_s": None if glue is None else (streamed + env_s + glue["per_step_s"]) * total,
         "c_fpga_cglue_noenv_s": None if glue is None else (streamed + glue["per_step_s"]) * total,
         "seed_numpy_s": t4.get("numpy_s"), "seed_c_fpga_s": t4.get("c_fpga_s"),
         "seed_iv_speedup": (t4["numpy_s"] / t4["c_fpga_s"]) if t4 else None,
         **{f"seed_{t}_normalized": nz.get(t) for t in ("iii", "iv", "v", "vi")},
         # the seed's own C+FPGA per step against its own streamed gradient: its host loop's share
         "seed_c_fpga_ms_per_step": t4["c_fpga_s"] / total * 1e3 if t4 else None,
         "host_share": (env_s + py_glue) / (streamed + env_s + py_glue)}
    # bands: the link's assumed figures (designs/devices.py ranges) at their ends for the streamed gradient,
    # the cycle model at -/+ the PL latency model's held-out error (rlhls qor) for the kernel alone
    from ..perf import model_error

    dev, err = ctx.device, model_error().get("PL", (0.0, ""))[0]
    ends = [(path, f) for path, f in dev.assumed() if path.startswith("link.")]

    def streamed_at(end: str) -> float:
        d = dev
        for path, f in ends:
            d = d.with_value(path, f.low if end == "low" else f.high)
        return transfer(p, d, link=LINKS[1] if seed_link == "infiniband" else None)["total_us"] * 1e-6

    r["iii_speedup_low"], r["iii_speedup_high"] = grad_s / streamed_at("high"), grad_s / streamed_at("low")
    r["vi_speedup_low"], r["vi_speedup_high"] = grad_s / (kernel_s * (1 + err)), grad_s / (kernel_s * (1 - err))
    r["link_rate"] = next((ln.bytes_per_us.source for ln in dev.links if (ln.src, ln.dst) == ("PS", "PL")
                           and ln.name == ("" if seed_link == "pcie" else seed_link)), "")
    r["iv_speedup"] = r["numpy_s"] / r["c_fpga_s"]
    r["iv_speedup_cglue"] = None if glue is None else r["numpy_s"] / r["c_fpga_cglue_s"]
    r["iv_speedup_cglue_noenv"] = None if glue is None else r["numpy_s"] / r["c_fpga_cglue_noenv_s"]
    return r


def summary_table4(ctx, outcomes) -> Summary:
    from ..figures import markdown_table, save_png

    opts, out, say = ctx.opts, ctx.out, ctx.say
    names = opts.design or ["fddpg-arm-m1", "fddpg-arm-m2", "fddpg-arm-m3"]
    measure = param(opts, "measure", MEASURE, low=1)
    total = SEED_EPISODES * GRADIENTS
    rows = [table4_row(n, measure, opts.backend, say) for n in names]
    N = NORMALIZE

    def f(v, spec=".1f"):
        return "-" if v is None else format(v, spec)

    def x(ours, seed, seed_norm):  # speed-up and normalized speed-up, ours / the seed's (as it prints them)
        return [f(ours, ".3g"), f(seed, ".3g"), f(None if ours is None else N * ours, ".3g"), f(seed_norm, ".3g")]
    md = [f"# F-DDPG Tables III-VI: {', '.join(names)}\n\n"
          f"NumPy baseline: our float DDPG's CPU seconds per training step measured here over {measure} steps after "
          f"the replay warm-up (a slice of the seed's 1300 episodes x 300 gradients = {total:,} steps, scaled); "
          "its gradient is the forward, target forward and backward phases' share. FPGA: the ddpg_gradient "
          "kernel's cycle model at 200 MHz, streamed over the link (transfer model: 3 x latency + bytes / "
          f"bandwidth). Normalized = x {N:g} (the seed's: 14 nm CPU against the 28 nm FPGA).\n\n"]
    md.append("## Table III: gradient streamed over the link (ms per gradient, speed-up over NumPy)\n\n")
    md.append(markdown_table(
        ["design", "link", "bytes", "ours ms (PCIe)", "ours ms (Infiniband)", "seed ms", "NumPy grad ms here",
         "seed NumPy grad ms", "speed-up", "band", "seed", "normalized", "seed normalized"],
        [[r["design"], r["link"], r[f"bytes_{r['link']}"], f(r["streamed_pcie_ms"], ".3f"),
          f(r["streamed_infiniband_ms"], ".3f"), f(r["seed_table_iii_ms"], ".3f"), f(r["numpy_grad_ms"], ".3f"),
          f(r["seed_numpy_grad_ms"], ".3f"),
          *x(r["iii_speedup"], r["seed_iii_speedup"], r["seed_iii_normalized"])[:1],
          f"({r['iii_speedup_low']:.3g}-{r['iii_speedup_high']:.3g})",
          *x(r["iii_speedup"], r["seed_iii_speedup"], r["seed_iii_normalized"])[1:]]
         for r in rows]))
    md.append("\n\nBand: the link's assumed latencies (designs/devices.py, 2-50 us per transfer) at their ends. "
              + " ".join(f"{r['design']}'s {r['link']} rate: {r['link_rate']}"
                         + (" - fitted to the seed's table shown here, not evidence." if "fitted" in r["link_rate"]
                            else ".") for r in rows))
    md.append("\n\n## Table IV: 1300 episodes x 300 gradients (s)\n\n")
    md.append(markdown_table(
        ["design", "NumPy here", "seed NumPy", "C+FPGA (Python host)", "C+FPGA (C++ host glue)",
         "C+FPGA (C++ glue, env free)", "seed C+FPGA", "speed-up (Python / C++ / C++ env free)", "seed",
         "normalized (C++ glue)", "seed normalized"],
        [[r["design"], f(r["numpy_s"]), f(r["seed_numpy_s"]), f(r["c_fpga_s"]), f(r["c_fpga_cglue_s"]),
          f(r["c_fpga_cglue_noenv_s"]), f(r["seed_c_fpga_s"]),
          " / ".join(f(v, ".3g") for v in (r["iv_speedup"], r["iv_speedup_cglue"], r["iv_speedup_cglue_noenv"])),
          f(r["seed_iv_speedup"], ".3g"),
          f(None if r["iv_speedup_cglue"] is None else N * r["iv_speedup_cglue"], ".3g"),
          f(r["seed_iv_normalized"], ".3g")] for r in rows]))
    md.append("\n\nWhere the time of C+FPGA goes, per training step (ms): the streamed gradient, the "
              "environment (Python here), the rest of the host loop (act, store, sample, pack, Adam, Polyak) in "
              "Python and in C++ (GLUE_CPP, g++ -O2, timed here):\n\n")
    md.append(markdown_table(
        ["design", "streamed gradient", "env (Python)", "host glue (Python)", "host glue (C++)",
         "host share of our C+FPGA", "seed C+FPGA per step", "seed streamed gradient (Table III)"],
        [[r["design"], f(r[f"streamed_{r['link']}_ms"], ".3f"), f(r["env_ms_per_step"], ".3f"),
          f(r["py_glue_ms_per_step"], ".3f"), f(r["c_glue_ms_per_step"], ".4f"), f"{100 * r['host_share']:.0f}%",
          f(r["seed_c_fpga_ms_per_step"], ".3f"), f(r["seed_table_iii_ms"], ".3f")] for r in rows]))
    md.append("\n\n## Tables V and VI: the kernel alone (ms per gradient, speed-up over NumPy)\n\n")
    md.append(markdown_table(
        ["design", "cycles", "seed cycles (VI)", "ours ms", "seed ms (VI)", "seed ms (V, measured)",
         "speed-up (band)", "seed V", "seed VI", "normalized", "seed V normalized", "seed VI normalized"],
        [[r["design"], r["cycles"], r["seed_cycles"], f(r["kernel_ms"], ".4f"), f(r["seed_kernel_ms"], ".3f"),
          f(r["seed_table_v_ms"], ".4f"),
          f"{r['vi_speedup']:.3g} ({r['vi_speedup_low']:.3g}-{r['vi_speedup_high']:.3g})",
          f(r["seed_v_speedup"], ".3g"),
          f(r["seed_vi_speedup"], ".3g"), f(N * r["vi_speedup"], ".3g"), f(r["seed_v_normalized"], ".3g"),
          f(r["seed_vi_normalized"], ".3g")] for r in rows]))
    md.append("\n\nBand: the cycle model at -/+ the PL latency model's held-out error (rlhls qor); the 200 MHz "
              "clock is the seed's.\n")
    text = "".join(md)
    fileio.atomic_write_text(out / "table4.md", text)
    fileio.atomic_write_text(out / "table4.csv", csv_text(rows, list(rows[0])))
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    labels = ["NumPy here", "C+FPGA (Python host)", "C+FPGA (C++ glue)", "FPGA streamed", "seed NumPy",
              "seed C+FPGA"]
    keys = ["numpy_s", "c_fpga_s", "c_fpga_cglue_s", "fpga_streamed_s", "seed_numpy_s", "seed_c_fpga_s"]
    xs = np.arange(len(rows))
    wd = 0.8 / len(keys)
    for i, (lab, key) in enumerate(zip(labels, keys)):
        ax.bar(xs + i * wd, [r[key] or 0.0 for r in rows], wd, label=lab)
    ax.set_xticks(xs + 0.4 - wd / 2, [r["design"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel(f"seconds for {SEED_EPISODES} x {GRADIENTS} gradients")
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
    from ..figures import markdown_table

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

    from ..figures import markdown_table

    design = get_design(rec["design"], files=False)
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
