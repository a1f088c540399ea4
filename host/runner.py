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
import json
import logging
import math
import sys
import time
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, make_dirs
from rlhls.core.procs import inform

from .checkpoint import load_checkpoint, save_checkpoint, write_at
from .figures import csv_text, plot_rewards
from .metrics import Board
from .runfolder import (
    CHECKPOINT,
    CSVS,
    EPISODE_COLUMNS,
    EVAL_CSV,
    EVAL_FIELDS,
    LAYOUT,
    check_checkpoint,
    check_folder,
    read_config,
    read_record,
    record_files,
    remove_stale_temps,
)

__all__ = ["train"]

# the budget, and what the hyperparameters derive (batch, kernels: a run from before they were recorded resumes)
_IGNORED_ON_RESUME = ("steps", "steps_trained", "batch", "kernels")
_EVAL_HP = ("eval_every", "eval_episodes")  # change nothing the run trains: may differ on --resume (or be absent)
log = logging.getLogger(__name__)
PLOT_EVERY_S = 30.0  # reward.png costs ~0.5-1.5 s: redrawn at most this often and after the last update


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
        old = read_config(out / "config.json")
        diff = sorted(k for k in set(old) | set(config)
                      if k not in _IGNORED_ON_RESUME and _same(old.get(k)) != _same(config.get(k)))
        if diff:
            raise RlhlsError(f"--resume: '{out}' was run with {_change(diff[0], old, config)}")
        ck = load_checkpoint(ckpt_path)
        check_checkpoint(ck, ckpt_path, config)
        metrics, episodes, evaluations = read_record(out, ck, ckpt_path)
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
        recorded = record_files(out, None)
        remove_stale_temps(out)
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
                    board = Board(out, update, resumed_at=env_steps - per if ck is not None else None, config=config)
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
                recorded = record_files(out, recorded)
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


def _change(key: str, old: dict, new: dict) -> str:
    """'gamma 0.99, now 0.5': the first value of config entry `key` that differs, a hyperparameter (or
    another mapping's entry) by its own name, never two whole mappings."""
    was, now = _same(old.get(key)), _same(new.get(key))
    had, has = key in old, key in new
    if isinstance(was, dict) and isinstance(now, dict):
        sub = sorted((k for k in set(was) | set(now) if was.get(k) != now.get(k)), key=str)[0]
        had, has = sub in was, sub in now
        key, was, now = (sub if key == "hyperparams" else f"{key}[{sub!r}]"), was.get(sub), now.get(sub)
    return f"{key} {_short(was) if had else '(none)'}, now {_short(now) if has else '(none)'}"


def _short(v, limit: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."

