"""The host C++ toolchain: g++ against the Xilinx ap_types headers that hls4ml ships.

``compile_cpp`` builds an executable (or, with ``flags=("-shared", "-fPIC")``, a shared
library for ctypes) with ``-O2 -std=c++14 -ffp-contract=off`` (no FMA contraction, so float
code rounds after every operation as the numpy models do). The result is cached by content:
the hash covers the compiler, the flags, the sources and every header in the include
folders, is stored beside the output as ``<output>.sha256``, and a matching hash skips the
build. A build against the ap_types headers includes them precompiled (``-include`` of a gcc PCH
in the cache, one per compiler, flags and header content; parsing them was ~0.8 of a csim
compile's 1 s): the same code, so the same binary, and a build without it where it cannot be made.
The output path (and so the cache folder) is the caller's choice; concurrent callers
(pytest-xdist workers) are serialised with a lock file. g++ runs with TMPDIR a scratch folder of
rlhls (``compiler_env``): what a killed compile leaves there is swept. The vendor headers are
used in place from the installed hls4ml package, never copied.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import fileio, procs
from .errors import RlhlsError

BASE_FLAGS = ("-O2", "-std=c++14", "-ffp-contract=off")
_HEADER_SUFFIXES = {".h", ".hh", ".hpp", ".hxx", ".inc", ".ipp", ".tpp"}
_version_cache: dict[str, str] = {}


def ap_types_include() -> Path:
    """Folder holding ap_fixed.h inside the installed hls4ml package."""
    spec = importlib.util.find_spec("hls4ml")  # locate without importing (hls4ml imports are slow)
    if spec is None or not spec.submodule_search_locations:
        raise RlhlsError("ap_types headers: the hls4ml package is not installed "
                         "(pip install hls4ml; it ships templates/vivado/ap_types)")
    for root in spec.submodule_search_locations:
        inc = Path(root) / "templates" / "vivado" / "ap_types"
        if (inc / "ap_fixed.h").is_file():
            return inc
    raise RlhlsError(f"ap_types headers: no templates/vivado/ap_types/ap_fixed.h in hls4ml at "
                     f"{list(spec.submodule_search_locations)}")


def find_cxx(name: str = "g++") -> str:
    """Absolute path of the C++ compiler (g++ on PATH)."""
    path = shutil.which(name)
    if path is None:
        raise RlhlsError(f"C++ compiler: {name!r} not found on PATH (install g++ >= 9)")
    return path


def _cxx_version(cxx: str) -> str:
    if cxx not in _version_cache:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
        _version_cache[cxx] = out.stdout.splitlines()[0] if out.stdout else cxx
    return _version_cache[cxx]


def _build_hash(cxx, sources, include_dirs, flags) -> str:
    h = hashlib.sha256()
    h.update(_cxx_version(cxx).encode())
    h.update(repr(list(flags)).encode())
    for src in sources:
        h.update(b"\0src\0" + src.read_bytes())
    for inc in include_dirs:
        h.update(b"\0inc\0" + str(inc).encode())
        for p in sorted(inc.rglob("*")):
            if p.suffix in _HEADER_SUFFIXES and p.is_file():
                h.update(str(p.relative_to(inc)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def compile_cpp(sources, output, include_dirs=(), flags=()) -> Path:
    """Compile and link ``sources`` into ``output``; rebuilt only when the content hash changes.

    Several sources compile in parallel (one g++ per translation unit, up to the CPU count),
    then link; a failure raises RlhlsError naming the first error line and a full log file.
    """
    sources = [Path(s).resolve() for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    include_dirs = [Path(d).resolve() for d in include_dirs]
    output = Path(output).resolve()
    for s in sources:
        if not s.is_file():
            raise RlhlsError(f"compile_cpp: source {str(s)!r} does not exist")
    for d in include_dirs:
        if not d.is_dir():
            raise RlhlsError(f"compile_cpp: include folder {str(d)!r} does not exist")
    cxx = find_cxx()
    all_flags = [*BASE_FLAGS, *flags]
    digest = _build_hash(cxx, sources, include_dirs, all_flags)
    try:
        ap = ap_types_include().resolve()
    except RlhlsError:
        ap = None  # a build that does not use them needs no hls4ml
    pch = _ap_pch(cxx, all_flags, ap) if ap is not None and ap in include_dirs else None
    stamp = output.with_name(output.name + ".sha256")
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output.with_name(output.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building the same thing
        if output.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
            with contextlib.suppress(OSError):
                os.utime(stamp)  # its last use: rlhls cache --prune removes the least recently used first
            return output
        for stale in output.parent.glob(f"{glob.escape(output.name)}.*[0-9]"):  # a killed build's (we hold the lock)
            if re.fullmatch(r"\.(tmp|objs)\d+", stale.name[len(output.name):]):
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
        tmp = output.with_name(f"{output.name}.tmp{os.getpid()}")
        incs = [f"-I{d}" for d in include_dirs]
        if pch is not None:
            incs = ["-include", str(pch), *incs]
        if len(sources) == 1:
            _run(cxx, [*all_flags, *incs, str(sources[0]), "-o", str(tmp)], output)
        else:
            objdir = output.with_name(f"{output.name}.objs{os.getpid()}")
            objdir.mkdir(exist_ok=True)
            objs = [objdir / f"{i}-{s.stem}.o" for i, s in enumerate(sources)]
            try:
                with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                    list(pool.map(lambda so: _run(cxx, [*all_flags, *incs, "-c", str(so[0]),
                                                       "-o", str(so[1])], output),
                                  zip(sources, objs)))
                _run(cxx, [*all_flags, *map(str, objs), "-o", str(tmp)], output)
            finally:
                shutil.rmtree(objdir, ignore_errors=True)
        os.replace(tmp, output)
        fileio.atomic_write_text(stamp, digest + "\n")
    return output


_PCH_HEADERS = ("ap_fixed.h", "ap_int.h")  # guarded: a source that includes them again gets nothing new


def _ap_pch(cxx, flags, ap: Path) -> Path | None:
    """The ap_types headers precompiled for these flags (gcc takes a PCH only under the flags it
    was made with, so each flag set has its own), built once into the cache; None if gcc cannot."""

    text = "".join(f'#include "{h}"\n' for h in _PCH_HEADERS)
    h = hashlib.sha256(f"{_cxx_version(cxx)}\0{flags!r}\0{text}".encode())
    for name in _PCH_HEADERS:
        h.update((ap / name).read_bytes())
    folder = cache_dir() / "pch" / h.hexdigest()[:16]
    header, gch = folder / "rlhls_ap_types.h", folder / "rlhls_ap_types.h.gch"
    if gch.is_file():
        with contextlib.suppress(OSError):
            os.utime(gch)  # its last use (rlhls cache --prune)
        return header
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not gch.is_file():
                for stale in folder.glob("*.tmp*"):  # a killed build's (we hold the lock)
                    stale.unlink(missing_ok=True)
                fileio.atomic_write_text(header, text)
                tmp = folder / f"rlhls_ap_types.h.gch.tmp{os.getpid()}"
                with compiler_env() as env:
                    res = procs.run([cxx, *flags, f"-I{ap}", "-x", "c++-header", str(header), "-o", str(tmp)],
                                    capture_output=True, text=True, tree=True, env=env)
                if res.returncode != 0:
                    tmp.unlink(missing_ok=True)
                    return None
                os.replace(tmp, gch)
    except (OSError, RlhlsError):
        return None  # an unwritable cache: the plain build still works
    return header


@contextlib.contextmanager
def compiler_env():
    """The environment a compiler runs in: TMPDIR a scratch folder of ours, so the temporary files of
    g++ and its cc1plus / as (the ``.s``) go with the block, or are swept (``fileio.sweep_dead``) when
    rlhls was killed with them."""
    with fileio.scratch_dir("cc") as d:
        yield {**os.environ, "TMPDIR": str(d)}


def _run(cxx, args, output):
    with compiler_env() as env:  # g++ and its cc1plus die with rlhls
        res = procs.run([cxx, *args], capture_output=True, text=True, tree=True, env=env)
    if res.returncode != 0:
        log = output.with_name(output.name + ".log")
        log.write_text(" ".join([cxx, *args]) + "\n\n" + res.stderr)
        first = next((ln for ln in res.stderr.splitlines() if "error" in ln), res.stderr[:200])
        raise RlhlsError(f"compile_cpp: g++ failed building {output.name}: {first.strip()} "
                         f"(full log: {log})")


def cache_location() -> Path:
    """Where the build cache is: $RLHLS_CACHE_DIR, else $XDG_CACHE_HOME/rlhls, else ~/.cache/rlhls
    (nothing created; ``rlhls cache`` shows and prunes it, core/cache.py)."""
    env = os.environ.get("RLHLS_CACHE_DIR")
    if env:
        return Path(env)
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except RuntimeError:  # no home folder to be found
        base = "~/.cache"
    return Path(base) / "rlhls"


def cache_dir() -> Path:
    """Build cache for csim programs and csim-backend libraries (``cache_location``, created here with
    its CACHEDIR.TAG). One that cannot be written (HOME a file, a read-only folder) is replaced by a
    scratch folder of this process, said once."""
    return _usable(cache_location())


_USABLE: dict = {}  # cache folder asked -> the folder used (itself, or a scratch one), once per process


def _usable(path: Path) -> Path:
    if str(path) not in _USABLE:
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".rlhls-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
            _USABLE[str(path)] = path
            from .cache import write_tag

            write_tag(path)  # backup tools skip it; rlhls cache --prune knows the folder is its cache
        except OSError as e:
            from .fileio import process_scratch

            scratch = _USABLE[str(path)] = process_scratch() / "cache"
            scratch.mkdir(exist_ok=True)
            logging.getLogger(__name__).warning(
                f"the build cache '{path}' cannot be written ({e.strerror or e}): compiling into a scratch folder "
                "for this command (set RLHLS_CACHE_DIR to a writable folder to keep the builds)")
    return _USABLE[str(path)]
