"""The packages pass ruff (pyflakes, pycodestyle, import order) and mypy as pyproject.toml configures them.

mypy checks them as the ``rlhls.*`` modules they install as. ``[tool.setuptools.package-dir]`` maps
``rlhls.core`` to ``core/`` and so on, which mypy does not read (nor can it follow an editable
install's import hook), so it runs in a folder of links laid out as the installed package. Its cache
is ``.mypy_cache/`` at the repository root (mypy's default there; it ignores itself in git): a second
run checks again only what changed.

By hand: ``python tests/test_lint.py`` (both, with their findings).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MYPY_CACHE = ROOT / ".mypy_cache"


def package_dirs() -> dict[str, Path]:
    """{package: its source folder} of pyproject.toml's [tool.setuptools.package-dir]."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {pkg: ROOT / folder for pkg, folder in dirs.items()}


def source_folders() -> list[str]:
    """The top folders of the packages' sources (core, designs, ..., rlhls)."""
    return sorted({d.relative_to(ROOT).parts[0] for d in package_dirs().values()})


def _py_files(folder: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), folder) for d, subs, files in os.walk(folder, followlinks=True)
            for f in files if f.endswith(".py") and "__pycache__" not in d}


def installed_layout(dest: Path) -> Path:
    """`dest`/rlhls laid out as the installed package, of links to the sources; returns `dest`."""
    dirs = package_dirs()
    top = dest / "rlhls"
    top.mkdir(parents=True)
    for entry in dirs.pop("rlhls").iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for pkg, folder in sorted(dirs.items()):
        link = dest.joinpath(*pkg.split("."))
        if link.exists():  # inside a package linked already (rlhls.designs.kernels)
            assert link.resolve() == folder.resolve(), f"{pkg}: {link} is not {folder}"
            continue
        # a link made through another link would land in the sources
        assert link.parent.resolve().is_relative_to(dest.resolve()), f"{pkg}: no place for it under {dest}"
        link.symlink_to(folder, target_is_directory=True)
    return dest


def run_ruff() -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "ruff", "check", *source_folders()], cwd=ROOT,
                       capture_output=True, text=True)
    return r, time.perf_counter() - t0


def run_mypy(work: Path) -> tuple[subprocess.CompletedProcess, float, int]:
    """mypy over the package laid out in `work`: (result, seconds, the package's source files)."""
    view = installed_layout(work)
    files = len(_py_files(view / "rlhls"))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(MYPY_CACHE), "-p", "rlhls"], cwd=view, capture_output=True, text=True)
    return r, time.perf_counter() - t0, files


def _sources(text: str) -> str:
    """mypy's paths (rlhls/core/x.py) as the repository's (core/x.py)."""
    for pkg, folder in sorted(package_dirs().items(), key=lambda kv: -len(kv[0])):
        text = text.replace(pkg.replace(".", "/") + "/", folder.relative_to(ROOT).as_posix() + "/")
    return text


def test_the_layout_holds_every_source_file_of_the_packages(tmp_path):
    view = installed_layout(tmp_path) / "rlhls"
    want = set()
    for pkg, folder in package_dirs().items():
        prefix = Path(*pkg.split(".")[1:])
        want |= {str(prefix / f) for f in _py_files(folder)}
    assert _py_files(view) == want
    assert len(want) > 100


def test_ruff_finds_nothing():
    r, seconds = run_ruff()
    print(f"ruff check {' '.join(source_folders())}: {seconds:.1f} s")
    assert r.returncode == 0, f"ruff check (exit {r.returncode}):\n{r.stdout}{r.stderr}"


def test_mypy_finds_nothing(tmp_path):
    r, seconds, files = run_mypy(tmp_path)
    print(f"mypy -p rlhls: {seconds:.1f} s, {files} files")
    assert r.returncode == 0, f"mypy (exit {r.returncode}):\n{_sources(r.stdout)}{r.stderr}"
    checked = re.search(r"in (\d+) source files", r.stdout)
    assert checked and int(checked[1]) == files, r.stdout  # every module of the package, nothing else


if __name__ == "__main__":
    r, seconds = run_ruff()
    print(f"ruff ({seconds:.1f} s):\n{r.stdout}{r.stderr}")
    with tempfile.TemporaryDirectory() as work:
        m, seconds, files = run_mypy(Path(work))
    print(f"mypy ({seconds:.1f} s, {files} files):\n{_sources(m.stdout)}{m.stderr}")
    sys.exit(r.returncode or m.returncode)
