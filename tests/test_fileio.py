"""Nothing lost, nothing half-written: --out refusal, --force that deletes nothing of the user's,
OS errors as one line, file modes from the user's umask."""

import os
import resource
import subprocess
import sys

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import OWNER, atomic_write_text, check_out, owned_files, staged_folder


def _partition_inputs(tmp_path):
    (tmp_path / "p.csv").write_text("node,unit,latency_us\na,PS,2\na,PL,1\nb,PS,3\nb,PL,1\n")
    (tmp_path / "g.csv").write_text("src,dst,bytes\na,b,8\n")
    (tmp_path / "c.csv").write_text("unit,resource,capacity\nPS,cores,1\n")
    return ["partition", str(tmp_path / "p.csv"), "--graph", str(tmp_path / "g.csv"),
            "--capacity", str(tmp_path / "c.csv")]


def test_partition_refuses_a_users_folder_and_force_keeps_their_files(tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_bytes(b"keep me\x00")
    (mine / "sub" / "data.bin").write_bytes(b"\x01\x02")
    argv = _partition_inputs(tmp_path) + ["--out", str(mine)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not empty and was not written by rlhls" in err and err.count("\n") == 1
    assert sorted(p.name for p in mine.rglob("*")) == ["data.bin", "notes.txt", "sub"]
    assert main(argv + ["--force"]) == 0
    assert (mine / "notes.txt").read_bytes() == b"keep me\x00" and (mine / "sub" / "data.bin").read_bytes() == b"\x01\x02"
    assert (mine / "plan.json").is_file() and set(owned_files(mine)) == {"plan.json", "plan.csv", "gantt.png"}
    assert main(argv + ["--force"]) == 0  # again: ours are replaced, the user's stay
    assert (mine / "notes.txt").read_bytes() == b"keep me\x00"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_partition_out_is_a_file_or_a_users_file_in_the_way(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("user data")
    assert main(_partition_inputs(tmp_path) + ["--out", str(taken)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert taken.read_text() == "user data" and not [p for p in tmp_path.iterdir() if ".old" in p.name]
    # --force into a folder where a file of the user's has our name: refused, nothing changed
    d = tmp_path / "d"
    d.mkdir()
    (d / "plan.json").write_text("mine")
    assert main(_partition_inputs(tmp_path) + ["--out", str(d), "--force"]) == 2
    assert "rlhls did not write is in the way" in capsys.readouterr().err
    assert [p.name for p in d.iterdir()] == ["plan.json"] and (d / "plan.json").read_text() == "mine"


def test_partition_out_dot_is_refused(tmp_path, capsys, monkeypatch):
    args = _partition_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(args + ["--out", "."]) == 2
    assert "not empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_staged_folder_leaves_nothing_on_error(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(RuntimeError):
        with staged_folder(out, command="test") as tmp:
            (tmp / "x").write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def _as_unprivileged(fn):
    """fn() in a forked child that cannot override permissions (root drops to nobody there);
    returns what fn returned, as text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the modules are loaded already, so nothing is read from disk
        os.close(r)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            text = str(fn())
        except BaseException as e:  # noqa: BLE001
            text = f"{type(e).__name__}: {e}"
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    return text


def test_os_errors_are_one_line(tmp_path):
    import tempfile

    base = tempfile.mkdtemp(prefix="rlhls-ro-", dir="/tmp")  # traversable by the unprivileged child
    try:
        os.chmod(base, 0o755)
        ro = os.path.join(base, "ro")
        os.mkdir(ro, 0o555)

        def write_file():
            atomic_write_text(os.path.join(ro, "f.txt"), "x")

        def write_folder():
            with staged_folder(os.path.join(ro, "out", "x"), command="test"):
                pass

        assert _as_unprivileged(write_file) == f"RlhlsError: cannot write '{ro}/f.txt': Permission denied"
        assert _as_unprivileged(write_folder) == f"RlhlsError: cannot create folder '{ro}/out': Permission denied"
        assert os.listdir(ro) == []
    finally:
        os.chmod(os.path.join(base, "ro"), 0o755)
        import shutil
        shutil.rmtree(base)
    with pytest.raises(RlhlsError, match="cannot create folder '/proc/rlhls-test'"):
        with staged_folder("/proc/rlhls-test/out/x", command="test"):
            pass


def test_full_disk_mid_write_leaves_no_temp_file(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) stands in for a disk that fills up mid-write."""
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from rlhls.core.fileio import atomic_write_bytes\n"
        "from rlhls.core.errors import RlhlsError\n"
        "try:\n"
        f"    atomic_write_bytes({str(tmp_path / 'big.bin')!r}, b'x' * 100000)\n"
        "except RlhlsError as e:\n"
        "    print(e)\n"
        "    sys.exit(2)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "cannot write" in p.stdout and "big.bin" in p.stdout and p.stdout.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_modes_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        import importlib

        import rlhls.core.fileio as F
        importlib.reload(F)
        F.atomic_write_text(tmp_path / "f.txt", "x")
        with F.staged_folder(tmp_path / "d", command="test") as tmp:
            (tmp / "g.txt").write_text("y")
        assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
    finally:
        os.umask(old)


def test_check_out_accepts_own_and_empty_folders(tmp_path):
    check_out(tmp_path / "new", command="test")
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", command="test")
    with staged_folder(tmp_path / "own", command="test") as tmp:
        (tmp / "a.txt").write_text("a")
    assert (tmp_path / "own" / OWNER).is_file()
    check_out(tmp_path / "own", command="test")
    with pytest.raises(RlhlsError, match="is a folder of 'rlhls test', not of 'rlhls build'"):
        check_out(tmp_path / "own", command="build")
    check_out(tmp_path / "own", command="build", force=True)
    with staged_folder(tmp_path / "own", command="test") as tmp:  # republish over our own: a swap
        (tmp / "b.txt").write_text("b")
    assert sorted(p.name for p in (tmp_path / "own").iterdir()) == [OWNER, "b.txt"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)  # the module is importable here (Linux)


@pytest.mark.parametrize("command", [["train", "apdrl-dqn-cartpole", "--steps", "1000", "--precision", "fp32"],
                                     ["build", "apdrl-dqn-cartpole"]])
def test_commands_refuse_a_users_folder(tmp_path, capsys, command):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("my,own\n1,2\n")
    assert main(command + ["--out", str(mine)]) == 2
    assert "not empty and was not written by rlhls" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["metrics.csv"] and (mine / "metrics.csv").read_text() == "my,own\n1,2\n"
