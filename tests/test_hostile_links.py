"""No file outside a folder is followed, and no file of the user's is replaced: a run folder whose
files are symbolic links or hard links to files elsewhere is refused in one line before anything is
written (the files elsewhere keep every byte and their mtime); a build folder whose manifest names
paths outside it is refused before any of them is read; a single-file output (--gif, --csv, --out)
never replaces a file rlhls did not write without --force, and says so before the slow work."""

import hashlib
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError

# CartPole DQN, 25-step updates, a 60-transition ring in 8-row chunks: replay files on disk
DQN_RUN = ["train", "apdrl-dqn-cartpole", "--steps", "100", "--precision", "fp32", "--quiet",
           "--set", "learning_starts=40", "--set", "steps_per_update=25", "--set", "buffer_size=60",
           "--set", "batch_size=8", "--set", "target_network_frequency=50"]
RESUME = [*DQN_RUN, "--steps", "150", "--resume"]  # update 5 appends to every CSV and to the newest chunk
NEWEST_CHUNK = "replay/transitions-12.bin"  # transitions 96..99 of 100: the next save appends to it


_OPENED: list | None = None


def _audit(event, args):
    if _OPENED is not None and event in ("open", "os.listdir", "os.scandir") and args \
            and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


def _reads_under(folder: Path, fn):
    """(fn()'s result, the paths it opened or listed that resolve under `folder`)."""
    global _OPENED
    _OPENED = []
    try:
        rc = fn()
    finally:
        seen, _OPENED = _OPENED, None
    root = os.path.realpath(folder)
    return rc, [p for p in seen if os.path.realpath(p).startswith(root + os.sep) or os.path.realpath(p) == root]


def _snapshot(folder: Path) -> dict:
    """Every entry under `folder` without following a link: a file's bytes and mtime, a link's target."""
    snap = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            snap[rel] = ("link", os.readlink(p))
        elif p.is_file():
            snap[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns)
        else:
            snap[rel] = "dir"
    return snap


def _one_line(capsys, *needles) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("dqn") / "run"
    assert main([*DQN_RUN, "--out", str(out)]) == 0
    assert (out / NEWEST_CHUNK).is_file() and (out / "eval.csv").is_file()
    return out


def _copy(trained, tmp_path) -> tuple[Path, Path]:
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(trained, run)
    outside.mkdir()
    return run, outside


def _plant(run: Path, outside: Path, rel: str, kind: str) -> Path:
    """Move run/rel outside and put a link to it in its place; returns the file (or folder) outside."""
    victim = outside / rel.replace("/", "_")
    shutil.move(run / rel, victim)
    if kind == "symlink":
        (run / rel).symlink_to(victim)
    else:
        os.link(victim, run / rel)
    return victim


def _future_event_files(run: Path, target: Path, kind: str, update: int = 5) -> None:
    """Links at the names tensorboardX gives the event file of update `update` in the next minutes."""
    now = int(time.time())
    for t in range(now - 2, now + 180):
        p = run / f"events.out.tfevents.{t}.{socket.gethostname()}.u{update}"
        p.symlink_to(target) if kind == "symlink" else os.link(target, p)


# the file a resume appends to in place, or reads: a link to a file elsewhere is refused up front
REFUSED = {"symlink": ["metrics.csv", "episodes.csv", "eval.csv", NEWEST_CHUNK, "replay", "events",
                       "config.json", "checkpoint.npz"],
           "hardlink": ["metrics.csv", "episodes.csv", "eval.csv", NEWEST_CHUNK, "events"]}
# replaced whole (os.replace), or only read: the link itself goes, the file elsewhere is kept
REPLACED = {"symlink": ["reward.png"], "hardlink": ["reward.png", "config.json", "checkpoint.npz"]}


@pytest.mark.parametrize("kind,rel", [(k, r) for k, rels in REFUSED.items() for r in rels])
def test_a_resume_through_a_link_is_refused_and_the_file_elsewhere_is_untouched(tmp_path, trained, capsys,
                                                                                 kind, rel):
    run, outside = _copy(trained, tmp_path)
    if rel == "events":
        victim = outside / "precious.bin"
        victim.write_bytes(b"the user's own bytes\n" * 50)
        _future_event_files(run, victim, kind)
    else:
        victim = _plant(run, outside, rel, kind)
    before, elsewhere = _snapshot(run), _snapshot(outside)
    capsys.readouterr()
    rc, read = _reads_under(outside, lambda: main([*RESUME, "--out", str(run)]))
    assert rc == 2 and read == []  # nothing outside read either (config.json, the checkpoint)
    _one_line(capsys, "is a symbolic link" if kind == "symlink" else "hard links",
              "events.out.tfevents." if rel == "events" else f"{run / rel}'")
    assert _snapshot(outside) == elsewhere  # bytes and mtime of the file (or folder) elsewhere
    assert _snapshot(run) == before  # nothing written in the run folder either
    assert victim.exists()


@pytest.mark.parametrize("kind,rel", [(k, r) for k, rels in REPLACED.items() for r in rels])
def test_a_link_to_a_file_replaced_whole_is_replaced_itself(tmp_path, trained, kind, rel):
    run, outside = _copy(trained, tmp_path)
    _plant(run, outside, rel, kind)
    elsewhere = _snapshot(outside)
    assert main([*RESUME, "--out", str(run)]) == 0
    assert _snapshot(outside) == elsewhere
    assert not (run / rel).is_symlink() and os.stat(run / rel).st_nlink == 1


def test_a_link_to_a_folder_inside_the_replay_chunks_leads_nowhere(tmp_path, trained, capsys):
    # a relative link that climbs out: replay/ -> ../outside/replay
    run, outside = _copy(trained, tmp_path)
    shutil.move(run / "replay", outside / "replay")
    (run / "replay").symlink_to(Path("..") / "outside" / "replay")
    elsewhere = _snapshot(outside)
    assert main([*RESUME, "--out", str(run)]) == 2
    _one_line(capsys, f"'{run / 'replay'}' is a symbolic link")
    assert _snapshot(outside) == elsewhere


def test_a_new_run_into_a_folder_of_ours_with_a_linked_csv_is_refused(tmp_path, trained, capsys):
    # a run of ours without its checkpoint is started again: metrics.csv is cut to its first line
    run, outside = _copy(trained, tmp_path)
    (run / "checkpoint.npz").unlink()
    victim = _plant(run, outside, "metrics.csv", "symlink")
    data, mtime = victim.read_bytes(), victim.stat().st_mtime_ns
    assert main([*DQN_RUN, "--out", str(run)]) == 2
    _one_line(capsys, f"'{run / 'metrics.csv'}' is a symbolic link")
    assert victim.read_bytes() == data and victim.stat().st_mtime_ns == mtime


def test_an_ownership_record_that_is_a_link_is_refused_not_read(tmp_path, capsys):
    from rlhls.core.fileio import OWNER

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere.json"
    out.mkdir()
    elsewhere.write_text(json.dumps({"command": "build", "files": []}))
    (out / OWNER).symlink_to(elsewhere)
    rc, read = _reads_under(elsewhere, lambda: main(["build", "apdrl-dqn-cartpole", "--out", str(out)]))
    assert rc == 2 and read == []
    _one_line(capsys, f"'{out / OWNER}' is a symbolic link")
    assert [p.name for p in out.iterdir()] == [OWNER]


def test_a_plain_resume_works_also_through_a_linked_parent_or_a_linked_run_folder(tmp_path, trained):
    real = tmp_path / "real"
    real.mkdir()
    shutil.copytree(trained, real / "run")
    (tmp_path / "via").symlink_to(real)  # the user's own link above the run folder: followed
    assert main([*RESUME, "--out", str(tmp_path / "via" / "run")]) == 0
    assert len(list((real / "run" / "metrics.csv").read_text().splitlines())) == 1 + 6
    (tmp_path / "alias").symlink_to(real / "run")  # --out itself a link to the folder
    assert main([*DQN_RUN, "--steps", "200", "--resume", "--out", str(tmp_path / "alias")]) == 0
    assert len(list((real / "run" / "metrics.csv").read_text().splitlines())) == 1 + 8


def test_eval_and_weights_read_nothing_through_a_link_out_of_the_run_folder(tmp_path, trained, capsys):
    from rlhls.designs.registry import get_design
    from rlhls.host.policy import run_folder

    for rel in ("checkpoint.npz", "config.json", NEWEST_CHUNK):
        run, outside = _copy(trained, tmp_path / rel.replace("/", "_"))
        _plant(run, outside, rel, "symlink")
        assert main(["eval", str(run), "--episodes", "1"]) == 2
        _one_line(capsys, f"'{run / rel}' is a symbolic link")
        if rel == "config.json":
            with pytest.raises(RlhlsError, match="config.json' is a symbolic link"):
                run_folder(get_design("apdrl-dqn-cartpole"), run)


def test_checkpoint_io_opens_no_link(tmp_path):
    from rlhls.host.checkpoint import read_rows, write_at
    from rlhls.core.fileio import open_owned, owned_file

    folder, outside = tmp_path / "f", tmp_path / "o"
    folder.mkdir()
    outside.mkdir()
    (outside / "x.bin").write_bytes(b"12345678")
    (folder / "sub").symlink_to(outside)
    (folder / "dangling").symlink_to(outside / "new.bin")  # O_CREAT through it would make a file there
    for rel in ("sub/x.bin", "dangling"):
        with pytest.raises(RlhlsError, match="is a symbolic link"):
            write_at(folder / rel, 0, b"zz", folder=folder)
        with pytest.raises(RlhlsError, match="is a symbolic link"):
            read_rows(folder / rel, "u1", 1, folder=folder)
        with pytest.raises(RlhlsError, match="is a symbolic link"):
            owned_file(folder, rel)
    os.mkfifo(folder / "fifo")
    with pytest.raises(RlhlsError, match="not a regular file"):
        os.close(open_owned(folder, "fifo"))  # refused, not blocked on
    assert (outside / "x.bin").read_bytes() == b"12345678" and not (outside / "new.bin").exists()
    assert write_at(folder / "own.bin", 0, b"ab") == 2 and (folder / "own.bin").read_bytes() == b"ab"


def test_library_output_appends_through_no_link(tmp_path):
    from rlhls.core.procs import library_output

    victim = tmp_path / "victim.log"
    victim.write_text("mine\n")
    for kind in ("symlink", "hardlink"):
        log = tmp_path / f"{kind}.log"
        log.symlink_to(victim) if kind == "symlink" else os.link(victim, log)
        with pytest.raises(RlhlsError, match="is a symbolic link" if kind == "symlink" else "hard links"):
            with library_output(log):
                print("library noise")
    assert victim.read_text() == "mine\n"
    with library_output(tmp_path / "own.log"):
        print("library noise")
    assert (tmp_path / "own.log").read_text() == "library noise\n"


def test_a_flow_resume_with_a_linked_log_or_record_is_refused(tmp_path):
    import rlhls

    out = tmp_path / "flow"
    f = rlhls.Flow("apdrl-dqn-cartpole", out, quiet=True)
    f.graph()
    f.close()
    victim = tmp_path / "victim.log"
    victim.write_text("mine\n")
    (out / "flow.log").symlink_to(victim)
    with pytest.raises(RlhlsError, match="flow.log' is a symbolic link"):
        rlhls.Flow("apdrl-dqn-cartpole", out, quiet=True, resume=True)
    (out / "flow.log").unlink()
    (tmp_path / "elsewhere").mkdir()
    (out / "train").symlink_to(tmp_path / "elsewhere")  # the training run would land there
    with pytest.raises(RlhlsError, match="train' is a symbolic link"):
        rlhls.Flow("apdrl-dqn-cartpole", out, quiet=True, resume=True)
    (out / "train").unlink()
    shutil.move(out / "run.json", tmp_path / "run.json")
    (out / "run.json").symlink_to(tmp_path / "run.json")
    with pytest.raises(RlhlsError, match="run.json' is a symbolic link"):
        rlhls.Flow("apdrl-dqn-cartpole", out, quiet=True, resume=True)
    assert victim.read_text() == "mine\n"


# -- build folders: what a manifest names is read only inside the folder

@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "b"
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(out)]) == 0
    return out


def _manifest(b: Path) -> dict:
    return json.loads((b / "manifest.json").read_text())


def _craft(b: Path, outside: Path, case: str) -> str:
    """Damage the copy `b` so that a check would read the copy of a component in `outside`; returns
    the one line's telling part."""
    m = _manifest(b)
    comp = m["components"][0]["dir"]  # pl/<name>
    shutil.copytree(b / comp, outside / "comp")
    if case in ("dotdot", "etc", "absolute", "file", "system_cfg"):
        key, value = {"dotdot": ("dir", "../outside/comp"), "etc": ("dir", "../../../../etc"),
                      "absolute": ("dir", str(outside / "comp")), "file": ("files", "../outside/comp/run_hls.tcl"),
                      "system_cfg": ("system_cfg", str(outside / "comp" / "hls_config.cfg"))}[case]
        if key == "dir":
            m["components"][0]["dir"] = value
        elif key == "files":
            m["files"][0]["path"] = value
        else:
            m["system_cfg"] = value
        (b / "manifest.json").write_text(json.dumps(m))
        return "not a path inside the build folder"
    if case == "linked_component":
        shutil.rmtree(b / comp)
        (b / comp).symlink_to(outside / "comp")
        return "leads out of the build folder through a symbolic link"
    if case == "linked_source":
        src = next((b / comp / "src").glob("*.cpp"))
        src.unlink()
        src.symlink_to(next((outside / "comp" / "src").glob("*.cpp")))
        return "leads out of"
    if case == "syn_file":
        cfg = b / comp / "hls_config.cfg"
        text = cfg.read_text()
        src = next(line for line in text.splitlines() if line.startswith("syn.file="))
        cfg.write_text(text.replace(src, "syn.file=../../../outside/comp/" + src.split("=", 1)[1]))
        return "leads out of"
    if case == "linked_manifest":
        shutil.move(b / "manifest.json", outside / "manifest.json")
        (b / "manifest.json").symlink_to(outside / "manifest.json")
        return "manifest.json' is a symbolic link"
    raise ValueError(case)


CRAFTED = ["dotdot", "etc", "absolute", "file", "system_cfg", "linked_component", "linked_source", "syn_file",
           "linked_manifest"]


@pytest.mark.parametrize("case", CRAFTED)
def test_check_reads_nothing_a_crafted_build_folder_points_to(tmp_path, build, capsys, case):
    b, outside = tmp_path / "b", tmp_path / "outside"
    shutil.copytree(build, b, symlinks=True)
    outside.mkdir()
    needle = _craft(b, outside, case)
    before, elsewhere = _snapshot(b), _snapshot(outside)
    capsys.readouterr()
    rc, read = _reads_under(outside, lambda: main(["check", str(b)]))
    assert rc == 2 and read == []
    _one_line(capsys, needle)
    assert _snapshot(b) == before and _snapshot(outside) == elsewhere


@pytest.mark.parametrize("case", ["dotdot", "linked_component", "report"])
def test_profile_reports_reads_nothing_outside_the_build_folder(tmp_path, build, capsys, case):
    b, outside = tmp_path / "b", tmp_path / "outside"
    shutil.copytree(build, b, symlinks=True)
    outside.mkdir()
    if case == "report":  # a synthesis report that is a link to a file elsewhere
        (outside / "csynth.xml").write_text("<profile/>\n")
        comp = _manifest(b)["components"][0]["dir"]
        (b / comp / "csynth.xml").symlink_to(outside / "csynth.xml")
        needle = "leads out of"
    else:
        needle = _craft(b, outside, case)
    capsys.readouterr()
    rc, read = _reads_under(outside, lambda: main(["profile", "apdrl-dqn-cartpole", "--reports", str(b),
                                                   "--out", str(tmp_path / "p.csv")]))
    assert rc == 2 and read == []
    _one_line(capsys, needle)
    assert not (tmp_path / "p.csv").exists()


def test_a_forced_build_into_a_folder_with_a_linked_subfolder_writes_nothing_through_it(tmp_path, capsys):
    out, outside = tmp_path / "mine", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "pl").symlink_to(outside)  # the build's pl/<component>/ files would land in `outside`
    assert main(["build", "apdrl-dqn-cartpole", "--out", str(out), "--force"]) == 2
    _one_line(capsys, f"'{out / 'pl'}' is a symbolic link")
    assert list(outside.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == ["notes.txt", "pl"]


# -- single-file outputs: a file rlhls did not write is kept (without --force), before the slow work

def test_eval_gif_keeps_a_file_rlhls_did_not_write_and_says_so_before_playing(tmp_path, trained, capsys,
                                                                              monkeypatch):
    from rlhls.host import evaluation

    mine = tmp_path / "mine.gif"
    mine.write_bytes(b"GIF89a my own animation")
    mtime = mine.stat().st_mtime_ns
    loaded = []
    real_load = evaluation.load
    monkeypatch.setattr(evaluation, "load", lambda *a, **k: loaded.append(a) or real_load(*a, **k))
    assert main(["eval", str(trained), "--episodes", "1", "--gif", str(mine)]) == 2
    _one_line(capsys, f"--gif '{mine}' exists and is not a file rlhls wrote (pass --force")
    assert loaded == [] and mine.read_bytes() == b"GIF89a my own animation" and mine.stat().st_mtime_ns == mtime
    # a GIF rlhls wrote is replaced without --force; the user's with it
    ours = tmp_path / "ours.gif"
    assert main(["eval", str(trained), "--episodes", "1", "--gif", str(ours)]) == 0
    assert main(["eval", str(trained), "--episodes", "1", "--gif", str(ours)]) == 0
    assert main(["eval", str(trained), "--episodes", "1", "--gif", str(mine), "--force"]) == 0
    assert mine.read_bytes()[:6] == b"GIF89a" and mine.read_bytes() != b"GIF89a my own animation"


def test_image_marks():
    import io

    import numpy as np
    from matplotlib.figure import Figure
    from PIL import Image

    from rlhls.core.fileio import GIF_COMMENT, PNG_METADATA, image_ours

    def png(**kw):
        buf = io.BytesIO()
        fig = Figure()
        fig.add_subplot().plot([0, 1])
        fig.savefig(buf, format="png", **kw)
        return buf.getvalue()

    def gif(**kw):
        buf = io.BytesIO()
        frames = [Image.fromarray(np.full((4, 4, 3), i * 60, np.uint8)).quantize(256) for i in range(3)]
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], loop=0, **kw)
        return buf.getvalue()

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for data, ours in ((png(metadata=PNG_METADATA), True), (png(), False), (gif(comment=GIF_COMMENT), True),
                           (gif(), False), (gif(comment=b"holiday"), False), (b"\x89PNG\r\n\x1a\n", False),
                           (b"GIF89a", False), (b"", False)):
            p = Path(d) / "x"
            p.write_bytes(data)
            assert image_ours(p) is ours, data[:40]


@pytest.mark.parametrize("argv,what", [
    (["graph", "apdrl-dqn-cartpole", "--csv", "{f}"], "--csv"),
    (["profile", "apdrl-dqn-cartpole", "--out", "{f}"], "--out"),
    (["profile", "--compare", "missing-model.csv", "missing-calibrated.csv", "--out", "{f}"], "--out"),
    (["eval", "{run}", "--gif", "{f}"], "--gif"),
])
@pytest.mark.parametrize("content", ["text", "png"])
def test_every_file_output_keeps_the_users_file(tmp_path, trained, capsys, argv, what, content):
    from matplotlib.figure import Figure

    f = tmp_path / ("mine.png" if "--compare" in argv else "mine.csv")
    if content == "png":  # a real PNG, not one of rlhls' figures
        Figure().savefig(f, format="png")
    else:
        f.write_text("src,dst\nmine\n")
    data, mtime = f.read_bytes(), f.stat().st_mtime_ns
    argv = [a.format(f=f, run=trained) for a in argv]
    assert main(argv) == 2
    _one_line(capsys, f"{what} '{f}' exists and is not a file rlhls wrote (pass --force")
    assert f.read_bytes() == data and f.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("argv", [
    ["build", "apdrl-dqn-cartpole"], ["perf", "apdrl-dqn-cartpole"], ["train", "apdrl-dqn-cartpole"],
    ["run", "apdrl-dqn-cartpole"], ["experiment", "apdrl-table3"],
    ["partition", "missing-profile.csv", "--graph", "missing-graph.csv", "--device", "vek280"],
])
def test_every_folder_output_keeps_the_users_file_and_folder(tmp_path, capsys, argv):
    f = tmp_path / "mine.txt"
    f.write_text("mine\n")
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("mine\n")
    before = (_snapshot(tmp_path))
    for out in (f, d):
        assert main([*argv, "--out", str(out)]) == 2
        _one_line(capsys, "is a file; expected a folder" if out == f else "was not written by rlhls")
    assert _snapshot(tmp_path) == before


def test_a_fifo_or_a_link_where_a_csv_goes_is_refused_without_blocking(tmp_path):
    """check_file_out reads an existing file's first line to see whether rlhls wrote it: never
    through a link, and a FIFO there neither blocks the open nor counts as ours."""
    import os

    from rlhls.core.fileio import check_file_out

    fifo = tmp_path / "g.csv"
    os.mkfifo(fifo)
    link = tmp_path / "l.csv"
    (tmp_path / "theirs.csv").write_text("src,dst,bytes\n")  # our header, but reached through a link
    link.symlink_to(tmp_path / "theirs.csv")
    for p in (fifo, link):
        with pytest.raises(RlhlsError, match="is not a file rlhls wrote"):
            check_file_out(p, header="src,dst")


def test_an_environment_id_with_a_nul_is_one_printable_line():
    from rlhls.host.envs import check_env_id

    with pytest.raises(RlhlsError) as e:
        check_env_id("CartPole\x00-v1")
    assert "\x00" not in str(e.value) and "\\x00" in str(e.value)
