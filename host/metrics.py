"""One set of metric names: the metrics.csv columns, their TensorBoard tags, the old names.

A trainer's metrics row names a quantity the same in every algorithm; ``TAGS`` gives the
TensorBoard tag of each column, CleanRL's where CleanRL logs the quantity (``charts/...``,
``losses/...``), ours under ``mixed/`` (loss scaling, overflows), ``time/`` (seconds per phase,
the ``t_<phase>`` columns) and ``stats/``. ``RENAMED`` maps the columns earlier versions wrote to
today's (``upgrade_row``: a resumed old run and the readers of old folders see today's names).

``Board`` writes a run's TensorBoard event file into the run folder through tensorboardX (no
deep-learning framework needed): per update the row's columns at its env step, ``charts/SPS``,
every finished episode's ``charts/episodic_return`` / ``charts/episodic_length`` at the env step
it ended, each evaluation's ``eval/...`` (its mean return also as CleanRL's ``eval/episodic_return``),
and the run's settings and hyperparameters once as text (``hyperparameters``, CleanRL's table). A
resumed run opens a new event file that purges what the old one wrote past the checkpoint
(``purge_step``), so an update a kill cut short is not shown twice. A write of the event file that
fails (a full disk) stops the run in one line naming the file, whichever thread wrote it; the run's
checkpoint resumes it. The writer makes its file by name and follows what is there:
``check_event_files`` refuses a folder where an event file is a symbolic link or has another hard
link before it is made.
"""

from __future__ import annotations

import math
import os
import sys

from rlhls.core.fileio import os_error

__all__ = ["TAGS", "RENAMED", "EVAL_COLUMNS", "tag", "upgrade_row", "Board", "check_event_files", "hyperparameter_text"]

EVENT_FILES = "events.out.tfevents.*"

# metrics.csv column -> TensorBoard tag (CleanRL's names where CleanRL logs the quantity)
TAGS = {
    "episodic_return": None, "episodic_length": None,  # per episode, from the episodes (below)
    "learning_rate": "charts/learning_rate", "epsilon": "charts/epsilon", "std": "charts/action_std",
    "td_loss": "losses/td_loss", "q_values": "losses/q_values",                    # DQN (dqn.py)
    "qf1_loss": "losses/qf1_loss", "qf1_values": "losses/qf1_values",              # DDPG (ddpg_continuous_action.py)
    "actor_loss": "losses/actor_loss",
    "qf2_loss": "losses/qf2_loss", "qf2_values": "losses/qf2_values", "critic_loss": "losses/qf_loss",  # TD3
    "policy_loss": "losses/policy_loss", "value_loss": "losses/value_loss",          # A2C, PPO, TRPO (ppo.py)
    "entropy": "losses/entropy", "approx_kl": "losses/approx_kl", "old_approx_kl": "losses/old_approx_kl",
    "clipfrac": "losses/clipfrac", "explained_variance": "losses/explained_variance",
}
EVAL_COLUMNS = ("mean_return", "std_return", "mean_length", "std_length")
RENAMED = {"pg_loss": "policy_loss", "v_loss": "value_loss", "qf_loss": "qf1_loss", "qf_values": "qf1_values"}
_MIXED = ("loss_scale", "critic_loss_scale", "actor_loss_scale", "quantized", "skipped_steps", "critic_skipped",
          "actor_skipped", "scale_shrinks", "scale_grows", "grad_overflows", "conv_overflows")
_RUNNER = ("update", "env_steps", "wall_s", "episodes")  # the step axis, or per-episode tags


def tag(column: str) -> str | None:
    """The TensorBoard tag of a metrics.csv column (None: not a scalar of its own)."""
    if column in TAGS:
        return TAGS[column]
    if column in _RUNNER:
        return None
    if column.startswith("t_"):
        return f"time/{column[2:]}"
    if column in _MIXED:
        return f"mixed/{column}"
    return f"stats/{column}"


def upgrade_row(row: dict) -> dict:
    """A metrics row with today's column names (an old run's row as read back)."""
    if not any(k in RENAMED for k in row):
        return row
    return {RENAMED.get(k, k): v for k, v in row.items()}


def _scalar(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def hyperparameter_text(config: dict) -> str:
    """The run's settings and hyperparameters as CleanRL logs them (TensorBoard's text tab): a Markdown
    table of param | value, the config's plain entries, then every hyperparameter."""
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    rows = [(k, v) for k, v in sorted(config.items()) if not isinstance(v, (dict, list, tuple))]
    rows += sorted((config.get("hyperparams") or {}).items()) if isinstance(config.get("hyperparams"), dict) else []
    return "|param|value|\n|-|-|\n" + "\n".join(f"|{cell(k)}|{cell(v)}|" for k, v in rows)


def check_event_files(out) -> None:
    """RlhlsError unless every entry of `out` named like an event file is a regular file of its own:
    tensorboardX opens its new file with a plain ``open(name, 'wb')``, which a link (or a hard link)
    placed at that name would lead to a file outside the folder."""
    from pathlib import Path

    from rlhls.core.fileio import owned_file

    try:
        names = sorted(p.name for p in Path(out).glob(EVENT_FILES))
    except OSError:
        return  # no folder yet: nothing there to follow
    for name in names:
        owned_file(out, name, write=True)


class Board:
    """A run's TensorBoard writer (see the module docstring)."""

    def __init__(self, out, update: int, resumed_at: int | None = None, config: dict | None = None):
        from tensorboardX import SummaryWriter

        check_event_files(out)

        # purge_step: events at or past the checkpoint's next step are hidden (a resumed run redoes them);
        # the first update in the name: a resume within the same second gets a file of its own
        self.w = SummaryWriter(logdir=str(out), purge_step=None if resumed_at is None else resumed_at + 1,
                               flush_secs=30, filename_suffix=f".u{update}")
        if config and resumed_at is None:  # once per run: a resumed run's first file has it
            self.w.add_text("hyperparameters", hyperparameter_text(config))

    def update(self, row: dict, episodes: list, sps: float) -> None:
        step = int(row["env_steps"])
        for k, v in row.items():
            t, f = tag(k), _scalar(v)
            if t is not None and f is not None:
                self.w.add_scalar(t, f, step)
        self.w.add_scalar("charts/SPS", sps, step)
        for env_step, ret, length in episodes:
            self.w.add_scalar("charts/episodic_return", float(ret), int(env_step))
            self.w.add_scalar("charts/episodic_length", float(length), int(env_step))
        self._flush()

    def evaluation(self, rec: dict) -> None:
        for k in EVAL_COLUMNS:
            f = _scalar(rec.get(k))
            if f is not None:
                self.w.add_scalar(f"eval/{k}", f, int(rec["env_steps"]))
                if k == "mean_return":  # CleanRL's tag of the evaluation's return
                    self.w.add_scalar("eval/episodic_return", f, int(rec["env_steps"]))
        self._flush()

    def _kept(self):
        """The event file's errors, kept (``_Kept``, put under tensorboardX's writer on first use)."""
        if not hasattr(self, "_kept_file"):
            self._kept_file = _Kept.install(self.w)
        return self._kept_file

    def _flush(self) -> None:
        """The events written so far on disk; one that could not be written (a full disk), here or in
        tensorboardX's writer thread, is one line naming the file (the run stops: its checkpoint resumes)."""
        kept = self._kept()
        try:
            self.w.flush()
        except OSError as e:  # a tensorboardX whose file _Kept could not reach
            raise os_error(kept.path if kept else self.w.logdir, e) from None
        if kept is not None and kept.error is not None:
            raise os_error(kept.path, kept.error)

    def close(self) -> None:
        """Flush and close the event file. A write that failed is one line, unless the run is ending on an
        error already (its own line stands); either way nothing is left for tensorboardX's exit handler."""
        kept = self._kept()
        try:
            self.w.close()
            error = kept.error if kept is not None else None
        except OSError as e:
            error = e
        if error is not None and sys.exc_info()[1] is None:
            raise os_error(kept.path if kept else self.w.logdir, error)


class _Kept:
    """The event file under tensorboardX's writer thread: an OS error (a full disk) is kept for
    ``Board`` to raise in the training's thread instead of ending the writer thread with a traceback
    (training would then wait for ever on its full queue, and its exit handler print another); the
    writes after it are dropped. Its ``flush`` syncs the file itself (no ``fileno``: tensorboardX's
    own fsync would raise in its thread)."""

    def __init__(self, f, path: str):
        self.f, self.path = f, path
        self.error: Exception | None = None  # the first write that failed

    @classmethod
    def install(cls, writer):
        try:
            rw = writer.file_writer.event_writer._ev_writer._py_recordio_writer
            kept = cls(rw._writer, rw.path)
        except AttributeError:  # another tensorboardX: its errors raise where they happen
            return None
        rw._writer = kept
        return kept

    def _do(self, fn):
        if self.error is None:
            try:
                fn()
            except (OSError, ValueError) as e:  # ValueError: written after a failed close
                self.error = e

    def write(self, data) -> None:
        self._do(lambda: self.f.write(data))

    def flush(self) -> None:
        self._do(self.f.flush)
        self._do(lambda: os.fsync(self.f.fileno()))

    def close(self) -> None:
        try:
            self.f.close()  # closed even when its buffer cannot be written
        except (OSError, ValueError) as e:
            self.error = self.error or e
