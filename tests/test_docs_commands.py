"""Every shell command in a code block of the documentation is run here, or marked long-running
on the line before its block: ``<!-- long-running: ~N min on 2 cores -->``, or ``<!-- long-running:
a server, until stopped -->`` for a server (docs/contributing.md)."""

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SHELLS = ("sh", "bash", "shell", "console")
# a budget, or a server (tensorboard, mkdocs serve) that runs until it is stopped
MARKER = re.compile(r"<!-- long-running: (~\d+(\.\d+)? min on 2 cores|a server, until stopped) -->")
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.M | re.S)


def shell_blocks(text: str):
    """(language, body, the line before the block) of every fenced block of a page."""
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        yield m.group(1), m.group(2), before


def commands(body: str) -> list[str]:
    """The commands of a block: one per line ('$ ' prompts and '# ...' comments dropped)."""
    out = []
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        line = re.sub(r"\s+#.*$", "", line)
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _pages():
    return sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith(("_", "examples")))


def _to_run():
    for page in _pages():
        for lang, body, before in shell_blocks(page.read_text()):
            if lang in SHELLS and not MARKER.fullmatch(before.strip()):
                yield pytest.param(page, commands(body), id=f"{page.relative_to(DOCS)}:{commands(body)[0][:40]}")


def test_markers_are_exact_and_mark_a_block():
    """A long-running marker is the exact form, right before a shell block (merged pages comply cheaply)."""
    for page in _pages():
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if "long-running" in line and line.startswith("<!--"):  # not one shown indented
                assert MARKER.fullmatch(line.strip()), f"{page}: line {i + 1}: {line!r}"
                assert i + 1 < len(lines) and re.match(r"```(sh|bash|shell|console)\b", lines[i + 1]), \
                    f"{page}: line {i + 1}: a marker must stand right before a shell code block"


def test_the_checker_sees_blocks_and_markers():
    page = ("text\n\n```sh\nrlhls designs   # list\n$ rlhls devices\n```\n\n"
            "<!-- long-running: ~3 min on 2 cores -->\n```sh\nrlhls run heppo-ppo\n```\n```text\nnot a command\n```\n")
    blocks = list(shell_blocks(page))
    assert [b[0] for b in blocks] == ["sh", "sh", "text"]
    assert commands(blocks[0][1]) == ["rlhls designs", "rlhls devices"]
    assert not MARKER.fullmatch(blocks[0][2]) and MARKER.fullmatch(blocks[1][2])
    assert not MARKER.fullmatch("<!-- long-running: a while -->")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh folder with the repository's examples at hand, as the pages' relative paths expect."""
    shutil.copytree(ROOT / "examples" / "pendulum_ddpg", tmp_path / "examples" / "pendulum_ddpg",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("page,cmds", list(_to_run()))
def test_unmarked_commands_run(page, cmds, workdir):
    from rlhls.cli import main
    from rlhls.designs import registry

    before = set(registry.design_names())  # the package's own, loaded first: they stay
    try:
        for cmd in cmds:
            argv = shlex.split(cmd)
            if argv[0] == "rlhls":  # in this process: no interpreter start per command
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                    rc = main(argv[1:])
                assert rc == 0, f"{page}: `{cmd}` exited {rc}: {err.getvalue()[-2000:]}"
            elif argv[0] == "python":
                r = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=120,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
                assert r.returncode == 0, f"{page}: `{cmd}` exited {r.returncode}: {r.stderr[-2000:]}"
            else:
                pytest.fail(f"{page}: `{cmd}` is neither rlhls nor python: run it in a test or mark its block "
                            "<!-- long-running: ~N min on 2 cores -->")
    finally:
        for name in set(registry.DESIGNS) - before:  # a design file's designs stay in this process only
            registry.unregister_design(name)
        registry._FILES.clear()
