"""The run folder: its layout, and every reader of it (one place for what ``rlhls train`` writes).

A training run folder (``rlhls train --out``, or an ``rlhls run`` folder's ``train/``) holds
``config.json``, ``metrics.csv``, ``episodes.csv``, ``eval.csv``, ``checkpoint.npz``,
``reward.png``, TensorBoard event files, an off-policy run's ``replay/`` chunks and the ownership
record (docs/formats/run-folder.md). The runner (host/runner.py) writes them; this module names
them and reads them back, as a folder someone may have copied, edited or crafted: every file is a
regular file of the folder itself (``fileio.owned_file``), JSON is read bounded (``fileio.read_json``),
and what a checkpoint counts is checked against the CSVs before it is believed.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import OWNER, check_out, open_owned, os_error, owned_file, read_json, write_json

from .checkpoint import checkpoint_steps
from .metrics import EVAL_COLUMNS, check_event_files, upgrade_row

__all__ = ["CHECKPOINT", "LAYOUT", "EVAL_CSV", "RUN_FILES", "CSVS", "EPISODE_COLUMNS", "EVAL_FIELDS", "run_dir",
           "check_folder", "read_config", "check_checkpoint", "read_record", "record_files", "remove_stale_temps",
           "read_metrics", "episodes", "evaluation", "metrics", "finished_steps"]

CHECKPOINT = "checkpoint.npz"
LAYOUT = "rlhls-run/2"  # the checkpoint's run layout: CSVs and replay files beside it, their lengths in it
EVAL_CSV = "eval.csv"
RUN_FILES = ["config.json", "metrics.csv", "episodes.csv", EVAL_CSV, CHECKPOINT, "reward.png"]
EVAL_FIELDS = (*EVAL_COLUMNS, "episodes", "seed")
CSVS = ("metrics.csv", "episodes.csv", EVAL_CSV)  # appended after every update, their lengths in the checkpoint
EPISODE_COLUMNS = ["env_step", "return", "length"]


def read_metrics(path) -> list[dict]:
    """The rows of a run's CSV, with today's column names (an older run's ``pg_loss`` reads as
    ``policy_loss``); a last line without its newline (torn by a kill mid-append, not counted by the
    checkpoint) is left out."""
    with open(path, newline="") as f:
        text = f.read()
    rows = csv.DictReader(io.StringIO(text if text.endswith("\n") else text[:text.rfind("\n") + 1]))
    return [upgrade_row(r) for r in rows]


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
    without a checkpoint. Every file the run reads or writes in place there must be a regular
    file of the folder itself (no symbolic link, no other hard link: fileio.owned_file)."""
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
    _check_own_files(out, resume)


def _check_own_files(out: Path, resume: bool) -> None:
    """Before anything is read or written: the files a resume reads (config.json, the checkpoint) and
    those any run appends to (the CSVs, the replay chunks, the event files) are the folder's own.
    Files replaced whole (os.replace) replace a link itself and are not checked when only written."""
    if not out.is_dir():
        return
    for name in (("config.json", CHECKPOINT) if resume else ()):
        owned_file(out, name)
    for name in CSVS:
        owned_file(out, name, write=True)
    replay = owned_file(out, "replay", write=True, dir=True)
    if replay.is_dir():
        for p in sorted(replay.glob("*.bin")):  # the chunks (host/algorithms/replay.py)
            owned_file(out, f"replay/{p.name}", write=True)
    check_event_files(out)


def read_config(path: Path) -> dict:
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise RlhlsError(f"--resume: '{path}' is missing (not a run folder, or a damaged one)") from None
    except OSError as e:
        raise os_error(path, e, "read") from None
    except ValueError as e:
        raise RlhlsError(f"--resume: '{path}' is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise RlhlsError(f"--resume: '{path}' is not a run's config (expected a JSON object)")
    return data


def check_checkpoint(ck, path: Path, config: dict) -> None:
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


def read_record(out: Path, ck: dict, path: Path) -> tuple[list, list, list]:
    """(metrics rows, episodes, evaluations) of the CSV bytes checkpoint `ck` covers, checked against it."""
    tables = {}
    for name, n in ck["csv"].items():
        try:
            with os.fdopen(open_owned(out, name), "rb") as f:
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


def record_files(out: Path, recorded: list | None) -> list:
    """The folder's ownership record: RUN_FILES, the replay chunks, the TensorBoard event files and a
    board run's kernel times, rewritten only when that set changed since `recorded`."""
    files = RUN_FILES + sorted(p.relative_to(out).as_posix() for p in
                               [*out.glob("replay/*.bin"), *out.glob("events.out.tfevents.*"),
                                *out.glob("board_timings.csv")]
                               if p.is_file() and not p.is_symlink())
    if files != recorded:
        write_json(out / OWNER, {"command": "train", "files": files})
    return files


def _stale_temps(out: Path) -> list[Path]:
    """Temp files of this folder's own writes that a killed process left (``.<file>.*.tmp``, the record's too)."""
    return [p for name in (OWNER, *RUN_FILES) for p in out.glob(f".{name}.*.tmp")]


def _only_stale_temps(out: Path) -> bool:
    """`out` holds temp files of its own writes and nothing else: a process killed in the first one (the
    run's record) left it so."""
    try:
        names = {p.name for p in out.iterdir()}
    except OSError:
        return False
    return bool(names) and names == {p.name for p in _stale_temps(out)}


def remove_stale_temps(out: Path) -> None:
    for p in _stale_temps(out):
        try:
            p.unlink()
        except OSError:
            pass


# ----------------------------------------------------------------------------- readers of a finished run

def _rows(path: Path) -> list:
    owned_file(path.parent, path.name)  # a run's own file, never one a link leads to
    try:
        return read_metrics(path)
    except OSError:
        return []


def episodes(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(environment step, return) of every finished episode of a run folder (empty without one)."""
    try:
        rows = _rows(Path(run) / "episodes.csv")
        return (np.array([float(r["env_step"]) for r in rows]), np.array([float(r["return"]) for r in rows]))
    except (KeyError, ValueError):
        return np.zeros(0), np.zeros(0)


def evaluation(run: Path) -> float:
    """The mean return of a run folder's last evaluation of its deterministic policy (eval.csv, at the
    end of the run by default; host/evaluation.py); NaN without one."""
    try:
        rows = _rows(Path(run) / "eval.csv")
        return float(rows[-1]["mean_return"]) if rows else float("nan")
    except (KeyError, ValueError):
        return float("nan")


def metrics(run: Path) -> list:
    """The rows of a run folder's metrics.csv (one per update; none without one)."""
    return _rows(Path(run) / "metrics.csv")


def finished_steps(run: Path) -> int:
    """Environment steps a run folder has trained (0 for none): what a resumed experiment skips or
    continues. Its checkpoint's count where it has one: metrics.csv is appended before the
    checkpoint is replaced, so a run killed between the two has one row more than it keeps."""
    held = checkpoint_steps(Path(run) / CHECKPOINT)
    if held is not None:
        return held
    try:
        rows = metrics(run)
        return int(rows[-1]["env_steps"]) if rows else 0
    except (KeyError, ValueError):
        return 0
