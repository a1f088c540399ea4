"""The training runner every algorithm uses: run folder, config, metrics, checkpoints, resume,
reward curve, progress.

A trainer is any object with ``steps_per_update``, ``train_update(update, total_updates) ->
dict`` (one metrics row; an optional ``'_episodes'`` entry lists ``(env_step, return, length)``
of the episodes that ended), ``state_dict()``, ``load_state_dict(state)`` and ``close()``.
Updates are numbered from 1; ``total_updates = ceil(steps / steps_per_update)``.

Run folder (``out``):

* ``config.json`` — what the run is (design, env, seed, backend, hyperparameters, steps).
* ``metrics.csv`` — one row per update: ``update, env_steps, wall_s`` then the trainer's row
  (episodic return, losses, ``t_<phase>`` seconds); a column set fixed by the first update.
* ``episodes.csv`` — every finished episode: ``env_step, return, length``.
* ``eval.csv`` — every evaluation of the deterministic policy (host/evaluation.py): ``update,
  env_steps, mean_return, std_return, mean_length, std_length, episodes, seed``; every
  ``eval_every`` env steps (0: none on the way) and after the last update, ``eval_episodes``
  episodes each (0: never). Appended like the other CSVs.
* ``events.out.tfevents.*`` — the same as TensorBoard scalars (host/metrics.py ``Board``).
* ``checkpoint.npz`` — trainer state (parameters, optimizer, normalizers, RNG states and the
  environments' state: per sub-env its episode seed and actions since the reset, replayed on
  resume, see host/envs/vector.py ``ReplayableVecEnv``), update index, env steps, and the byte
  length of each CSV it covers; an off-policy trainer's replay buffer keeps its transitions in
  ``replay/`` (host/algorithms/replay.py), the checkpoint their counts. After **every** update the
  new CSV lines and transitions are appended (flushed to disk), then the checkpoint is written to a
  temp file in the folder and ``os.replace``d (the PNG at most every ``PLOT_EVERY_S`` seconds and
  after the last update): a killed run loses at most the update in progress, and what it appended
  past the checkpoint's lengths (a torn last line included) is ignored on resume and cut by the
  next write. Layout: docs/formats/checkpoint.md.
* ``reward.png`` — episodic return per episode and its rolling average (HEPPO-GAE Fig. 10 uses
  1000 readings; here ``min(1000, max(1, n // 10))`` so short runs still show a curve).

``resume=True`` loads ``checkpoint.npz`` of the folder and continues with update k+1; the
config must match (except ``steps``, which may grow). Everything is checked before anything is
written: config.json (there, JSON, the same run), the checkpoint (host/checkpoint.py: arrays and
JSON, never a pickle, so loading it runs no code; of this design and algorithm; its CSV rows
there; its state taken by the trainer), else one ``RlhlsError`` line and the folder as it was. A
checkpoint of the older layout (buffer, metrics and episodes inside, no ``layout`` key) is
refused in one line: such a run is started again (its policy still loads for ``--weights``).
Without ``resume`` a folder that already has a checkpoint is refused. Temp files a killed write left behind
(``.<file>.*.tmp`` of the run's own files) are removed when the folder is used again.

Progress: a tqdm bar on stderr (steps, steps/s, latest return) when stderr is a TTY; otherwise
one line per update, an INFO message of the ``rlhls.host.runner`` logger. `notes` (the caller's,
the rounding of the steps to whole updates) are warnings once every check has passed, before the
first update.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np

from rlhls.designs.errors import RlhlsError
from rlhls.partition.procs import inform
from rlhls.partition.fileio import (OWNER, atomic_write_bytes, atomic_write_text, check_out, make_dirs, os_error,
                                    write_json)

from .checkpoint import load_checkpoint, save_checkpoint, write_at
from .metrics import EVAL_COLUMNS, Board, upgrade_row

__all__ = ["train", "csv_text", "atomic_write_bytes", "atomic_write_text", "read_metrics", "rolling_window", "plot_rewards"]

CHECKPOINT = "checkpoint.npz"
LAYOUT = "rlhls-run/2"  # the checkpoint's run layout: CSVs and replay files beside it, their lengths in it
EVAL_CSV = "eval.csv"
RUN_FILES = ["config.json", "metrics.csv", "episodes.csv", EVAL_CSV, CHECKPOINT, "reward.png"]
_IGNORED_ON_RESUME = ("steps", "steps_trained")
_EVAL_HP = ("eval_every", "eval_episodes")  # change nothing the run trains: may differ on --resume (or be absent)
EVAL_FIELDS = (*EVAL_COLUMNS, "episodes", "seed")
CSVS = ("metrics.csv", "episodes.csv", EVAL_CSV)  # appended after every update, their lengths in the checkpoint
log = logging.getLogger(__name__)
EPISODE_COLUMNS = ["env_step", "return", "length"]
PLOT_EVERY_S = 30.0  # reward.png costs ~0.5-1.5 s: redrawn at most this often and after the last update


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def csv_text(rows: list[dict], columns: list[str]) -> str:
    """CSV with a header; floats as repr (exact), NaN as an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_fmt(r.get(c, "")) for c in columns])
    return buf.getvalue()


def read_metrics(path) -> list[dict]:
    """The rows of a run's CSV, with today's column names (an older run's ``pg_loss`` reads as
    ``policy_loss``); a last line without its newline (torn by a kill mid-append, not counted by the
    checkpoint) is left out."""
    with open(path, newline="") as f:
        text = f.read()
    rows = csv.DictReader(io.StringIO(text if text.endswith("\n") else text[:text.rfind("\n") + 1]))
    return [upgrade_row(r) for r in rows]


def rolling_window(n: int) -> int:
    return min(1000, max(1, n // 10))


def reward_figure(episodes: list, title: str):
    """Episodic return per episode and its rolling average (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    if episodes:
        x = np.array([e[0] for e in episodes], dtype=float)
        y = np.array([e[1] for e in episodes], dtype=float)
        w = rolling_window(len(y))
        ax.plot(x, y, ".", ms=2, alpha=0.3, color="tab:blue", label="episode return")
        if len(y) >= w:
            c = np.cumsum(np.insert(y, 0, 0.0))
            ax.plot(x[w - 1:], (c[w:] - c[:-w]) / w, color="tab:red", label=f"rolling average ({w})")
        ax.legend(loc="best")
    else:
        ax.text(0.5, 0.5, "no finished episode yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_rewards(episodes: list, path, title: str) -> None:
    buf = io.BytesIO()
    reward_figure(episodes, title).savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())


class _Progress:
    def __init__(self, total_steps: int, start_steps: int, enabled: bool):
        self.bar = None
        self.enabled = enabled
        self.t0, self.s0 = time.perf_counter(), start_steps
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=start_steps, unit="step", unit_scale=True,
                            file=sys.stderr, dynamic_ncols=True)

    def update(self, update: int, total_updates: int, steps: int, d_steps: int, ret: float):
        if not self.enabled:
            return
        text = "return " + ("-" if math.isnan(ret) else f"{ret:.2f}")
        if self.bar is not None:
            self.bar.update(d_steps)
            self.bar.set_postfix_str(text)
        else:
            rate = (steps - self.s0) / max(time.perf_counter() - self.t0, 1e-9)
            inform(log, f"update {update}/{total_updates}  steps {steps}  {rate:.0f} steps/s  {text}")

    def close(self):
        if self.bar is not None:
            self.bar.close()


def train(make_trainer, config: dict, out, *, steps: int, resume: bool = False, progress: bool = True,
          title: str = "", on_update=None, notes: list | None = None, eval_every: int = 0,
          eval_episodes: int = 0, capture=None) -> dict:
    """Run (or resume) a training run in folder `out`; returns {'updates', 'env_steps', 'out',
    'config', 'metrics', 'episodes', 'evaluations'}.

    `make_trainer()` builds a fresh trainer; `config` (JSON-able) is written to config.json.
    `eval_every` / `eval_episodes`: when the trainer's deterministic policy is evaluated (eval.csv);
    `capture()`: the context the evaluation's environment runs in (what its libraries print).
    `on_update(update)` is called before each update (tests use it to simulate a kill); `notes`
    collects what the user should be told (steps rounded up to whole updates)."""
    notes = [] if notes is None else notes
    out = Path(out)
    ckpt_path = out / CHECKPOINT
    config = dict(config, steps=int(steps))
    ck = None
    check_folder(out, resume)
    if resume:
        old = _read_config(out / "config.json")
        diff = sorted(k for k in set(old) | set(config)
                      if k not in _IGNORED_ON_RESUME and _same(old.get(k)) != _same(config.get(k)))
        if diff:
            key, was, now = diff[0], _same(old.get(diff[0])), _same(config.get(diff[0]))
            if isinstance(was, dict) and isinstance(now, dict):  # name the entry, not the whole mapping
                sub = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))[0]
                key, was, now = f"{key} entry {sub!r}", was.get(sub), now.get(sub)
            raise RlhlsError(f"--resume: '{out}' was run with a different {key} ({_short(was)}, now {_short(now)})")
        ck = load_checkpoint(ckpt_path)
        _check_checkpoint(ck, ckpt_path, config)
        metrics, episodes, evaluations = _read_record(out, ck, ckpt_path)
    trainer = make_trainer()  # bad environments and parameters fail here, before anything is written
    trainer.run_dir = out
    try:
        update, env_steps = 0, 0
        lengths = dict.fromkeys(CSVS, 0)  # bytes of each CSV the checkpoint covers
        if ck is None:
            metrics, episodes, evaluations = [], [], []
        else:  # the trainer takes the state before config.json is touched
            try:
                trainer.load_state_dict(ck["trainer"])
            except RlhlsError:
                raise
            except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
                raise RlhlsError(f"--resume: checkpoint '{ckpt_path}' does not fit this run "
                                 f"({type(e).__name__}: {e})") from None
            update, env_steps = int(ck["update"]), int(ck["env_steps"])
            lengths.update(ck["csv"])
        per = trainer.steps_per_update
        if ck is not None and env_steps != update * per:
            raise RlhlsError(f"--resume: checkpoint '{ckpt_path}' is damaged: env_steps {env_steps} are not "
                             f"{update} updates of {per} steps")
        if env_steps > steps:  # a resume asked for fewer steps than the run has: the record keeps what it holds
            notes.append(f"'{out}' has trained {env_steps} steps already, more than the {steps} asked: nothing to do")
            steps = env_steps
            config["steps"] = steps
        config["steps_trained"] = max(1, math.ceil(steps / per)) * per  # whole updates
        if not resume:
            make_dirs(out)
        recorded = _record_files(out, None)
        _remove_stale_temps(out)
        atomic_write_text(out / "config.json", json.dumps(config, indent=2, sort_keys=True, default=str) + "\n")
        total_updates = max(1, math.ceil(steps / per))
        if total_updates * per != steps:
            notes.append(f"{steps} steps are {total_updates} whole updates of {per} steps: training "
                         f"{total_updates * per} steps")
        if eval_episodes and not _predicts(trainer):
            notes.append(f"{type(trainer).__name__} has no predict (a deterministic policy): the run is not evaluated")
            eval_episodes = 0
        for n in notes:  # the caller's and ours, once every check has passed, before the first update
            log.warning(n)
        bar = _Progress(total_updates * per, env_steps, progress)
        last_plot = time.perf_counter()
        columns = list(metrics[0]) if metrics else None
        board = None  # opened with the first update: a resume with nothing to do writes no event file
        try:
            if update >= total_updates:  # nothing to train: what a killed write left past the checkpoint goes
                for name, n in lengths.items():
                    if n or (out / name).exists():
                        write_at(out / name, n, b"")
                plot_rewards(episodes, out / "reward.png", title)
            while update < total_updates:
                if on_update is not None:
                    on_update(update + 1)
                t0 = time.perf_counter()
                row = trainer.train_update(update + 1, total_updates)
                update += 1
                env_steps += per
                new_eps = row.pop("_episodes", [])
                episodes.extend(new_eps)
                wall = time.perf_counter() - t0
                metrics.append({"update": update, "env_steps": env_steps, "wall_s": wall, **row})
                columns = columns or list(metrics[0])
                if board is None:
                    board = Board(out, update, resumed_at=env_steps - per if ck is not None else None)
                board.update(metrics[-1], new_eps, per / max(wall, 1e-9))
                new_evals = []
                if eval_episodes and (update == total_updates or (
                        eval_every and env_steps // eval_every > (env_steps - per) // eval_every)):
                    with capture() if capture is not None else contextlib.nullcontext():
                        new_evals.append(_evaluate(trainer, update, env_steps, eval_episodes))
                    evaluations.extend(new_evals)
                    board.evaluation(new_evals[-1])
                # appended first, then the checkpoint that counts them (host/checkpoint.py write_at)
                for name, rows, cols in (("metrics.csv", metrics[-1:], columns),
                                         ("episodes.csv", [dict(zip(EPISODE_COLUMNS, e)) for e in new_eps],
                                          EPISODE_COLUMNS),
                                         (EVAL_CSV, new_evals, ["update", "env_steps", *EVAL_FIELDS])):
                    if not rows and name == EVAL_CSV:
                        continue  # no eval.csv in a run that never evaluates
                    text = csv_text(rows, cols)
                    lengths[name] = write_at(out / name, lengths[name],
                                             (text if lengths[name] == 0 else text.split("\n", 1)[1]).encode())
                save_checkpoint(ckpt_path, {"layout": LAYOUT, "design": config.get("design"),
                                            "algorithm": config.get("algorithm"), "trainer": trainer.state_dict(),
                                            "update": update, "env_steps": env_steps, "csv": dict(lengths)})
                recorded = _record_files(out, recorded)
                if update == total_updates or time.perf_counter() - last_plot >= PLOT_EVERY_S:
                    plot_rewards(episodes, out / "reward.png", title)
                    last_plot = time.perf_counter()
                bar.update(update, total_updates, env_steps, per, row.get("episodic_return", float("nan")))
        finally:
            bar.close()
            if board is not None:
                board.close()
        return {"updates": update, "env_steps": env_steps, "out": str(out), "config": config, "metrics": metrics,
                "episodes": episodes, "evaluations": evaluations}
    finally:
        trainer.close()


def _evaluate(trainer, update: int, env_steps: int, episodes: int) -> dict:
    """One eval.csv row: the trainer's deterministic policy on its own environment (host/evaluation.py)."""
    from .evaluation import evaluate

    res = evaluate(lambda obs: trainer.predict(obs, True, None), trainer.env_id, episodes=episodes, seed=trainer.seed)
    return {"update": update, "env_steps": env_steps, **{k: res[k] for k in EVAL_FIELDS}}


def _predicts(trainer) -> bool:
    """Whether the trainer has its own ``predict`` (a user's trainer may have none)."""
    from .algorithms.base import TrainerBase

    fn = getattr(type(trainer), "predict", None)
    return callable(fn) and fn is not TrainerBase.predict


def _same(v):
    """A config entry as config.json holds it, without the evaluation's hyperparameters."""
    v = json.loads(json.dumps(v, default=str))
    return {k: x for k, x in v.items() if k not in _EVAL_HP} if isinstance(v, dict) else v


def _short(v, limit: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def run_dir(folder, what: str = "run folder") -> Path:
    """The training run folder of `folder` (rlhls train's, or an rlhls run folder's ``train/``);
    RlhlsError naming `what` when it is missing or holds no checkpoint."""
    run = Path(folder)
    if not (run / CHECKPOINT).is_file() and (run / "train" / CHECKPOINT).is_file():
        run = run / "train"
    if not run.is_dir():
        raise RlhlsError(f"{what} '{run}': no such folder (expected a run folder of rlhls train or rlhls run)")
    if not (run / CHECKPOINT).is_file():
        raise RlhlsError(f"{what} '{run}': no {CHECKPOINT} (expected a run folder of rlhls train or rlhls run)")
    return run


def check_folder(out, resume: bool) -> None:
    """The run folder's own checks (before the run's slow preparations: they fail first):
    --resume needs a checkpoint; a new run needs an --out that is new, empty or a run of ours
    without a checkpoint."""
    out = Path(out)
    ckpt_path = out / CHECKPOINT
    if resume:
        if not ckpt_path.is_file():
            raise RlhlsError(f"--resume: no checkpoint in '{out}' (expected {ckpt_path})")
    else:
        if ckpt_path.exists():
            raise RlhlsError(f"run folder '{out}' already has a checkpoint: pass --resume to continue it "
                             "or choose another --out")
        if not _only_stale_temps(out):  # those of a run killed in its first write: a new folder still
            check_out(out, command="train", hint="choose another --out",
                      ours=lambda d: (d / "config.json").is_file() and (d / "metrics.csv").is_file())


def _read_config(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RlhlsError(f"--resume: '{path}' is missing (not a run folder, or a damaged one)") from None
    except OSError as e:
        raise os_error(path, e, "read") from None
    except (ValueError, UnicodeDecodeError):
        raise RlhlsError(f"--resume: '{path}' is not JSON") from None
    if not isinstance(data, dict):
        raise RlhlsError(f"--resume: '{path}' is not a run's config (expected a JSON object)")
    return data


def _check_checkpoint(ck, path: Path, config: dict) -> None:
    if isinstance(ck, dict) and "layout" not in ck and {"metrics", "episodes", "trainer"} <= set(ck):
        raise RlhlsError(f"--resume: checkpoint '{path}' is of an older rlhls (replay buffer and metrics inside it) "
                         "and cannot be continued: start the run again (its policy still loads for --weights)")
    if not isinstance(ck, dict) or not {"trainer", "update", "env_steps", "csv"} <= set(ck):
        raise RlhlsError(f"--resume: '{path}' is not a run's checkpoint (missing its state)")
    if ck.get("layout") != LAYOUT:
        raise RlhlsError(f"--resume: checkpoint '{path}' has layout {_short(ck.get('layout'))}, expected {LAYOUT!r}")
    for key in ("design", "algorithm"):
        if ck.get(key) != config.get(key):
            raise RlhlsError(f"--resume: checkpoint '{path}' is of {key} {ck.get(key)!r}, this run of "
                             f"{config.get(key)!r}")
    bad = None
    update, env_steps, lengths = ck["update"], ck["env_steps"], ck["csv"]
    if not _count(update):
        bad = f"update {_short(update)} (expected an integer >= 0)"
    elif not _count(env_steps):
        bad = f"env_steps {_short(env_steps)} (expected an integer >= 0)"
    elif not isinstance(lengths, dict) or not {"metrics.csv", "episodes.csv"} <= set(lengths) <= set(CSVS) \
            or not all(_count(n) for n in lengths.values()):
        bad = f"csv {_short(lengths)} (expected the byte lengths of {', '.join(CSVS)})"
    if bad is not None:
        raise RlhlsError(f"--resume: checkpoint '{path}' is damaged: {bad}")


def _value(text: str):
    """A CSV field as it was written (csv_text): an int, an exact float, NaN for empty, else text."""
    if text == "":
        return float("nan")
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _read_record(out: Path, ck: dict, path: Path) -> tuple[list, list, list]:
    """(metrics rows, episodes, evaluations) of the CSV bytes checkpoint `ck` covers, checked against it."""
    tables = {}
    for name, n in ck["csv"].items():
        try:
            with open(out / name, "rb") as f:
                data = f.read(n)
        except FileNotFoundError:
            data = b""
        except OSError as e:
            raise os_error(out / name, e, "read") from None
        if len(data) < n:
            raise RlhlsError(f"--resume: '{out / name}' holds {len(data)} bytes, checkpoint '{path}' counts {n}: "
                             "the run folder is damaged")
        try:
            rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        except (UnicodeDecodeError, csv.Error):
            raise RlhlsError(f"--resume: '{out / name}' is not the CSV checkpoint '{path}' counts: the run folder "
                             "is damaged") from None
        tables[name] = [dict(zip(rows[0], map(_value, r))) for r in rows[1:]] if rows else []
    metrics = tables["metrics.csv"]
    episodes = [tuple(e.get(c) for c in EPISODE_COLUMNS) for e in tables["episodes.csv"]]
    evaluations = tables.get(EVAL_CSV, [])
    update, env_steps = ck["update"], ck["env_steps"]
    bad = None
    if len(metrics) != update or any(m.get("update") != i for i, m in enumerate(metrics, 1)):
        bad = f"update {update} against its {len(metrics)} metrics rows"
    elif metrics and metrics[-1].get("env_steps") != env_steps:
        bad = f"env_steps {env_steps} against its metrics ({_short(metrics[-1].get('env_steps'))})"
    elif not all(all(_number(x) for x in e) for e in episodes):
        bad = "episodes.csv (expected rows of env_step, return, length)"
    elif not all(_count(e.get("env_steps")) for e in evaluations):
        bad = f"{EVAL_CSV} (expected rows of update, env_steps, {', '.join(EVAL_FIELDS)})"
    if bad is not None:
        raise RlhlsError(f"--resume: checkpoint '{path}' is damaged: {bad}")
    return metrics, episodes, evaluations


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 62


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _record_files(out: Path, recorded: list | None) -> list:
    """The folder's ownership record: RUN_FILES, the replay chunks and the TensorBoard event files,
    rewritten only when that set changed since `recorded`."""
    files = RUN_FILES + sorted(p.relative_to(out).as_posix() for p in
                               [*out.glob("replay/*.bin"), *out.glob("events.out.tfevents.*")] if p.is_file())
    if files != recorded:
        write_json(out / OWNER, {"command": "train", "files": files})
    return files


def _stale_temp(name: str) -> bool:
    """`name` is a temp file of one of a run folder's own writes (``.<file>.*.tmp``, the record's too)."""
    return name.endswith(".tmp") and any(name.startswith(f".{f}.") for f in (OWNER, *RUN_FILES))


def _only_stale_temps(out: Path) -> bool:
    """`out` holds temp files of its own writes and nothing else: a process killed in the first one (the
    run's record) left it so."""
    try:
        names = [p.name for p in out.iterdir()]
    except OSError:
        return False
    return bool(names) and all(_stale_temp(n) for n in names)


def _remove_stale_temps(out: Path) -> None:
    """Temp files of this folder's own writes that a killed process left (``.<file>.*.tmp``)."""
    for name in (OWNER, *RUN_FILES):
        for p in out.glob(f".{name}.*.tmp"):
            try:
                p.unlink()
            except OSError:
                pass
