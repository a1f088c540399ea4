"""All registered designs, by name (hls4ml's ``register_*`` style, as the kernels).

The package's own design modules are discovered (``rlhls.core.registry``): every module of this
package is imported on the first look-up, and those that define ``designs()`` (the seeds' modules)
give their designs, listed in the order of their seeds. Installed packages add
designs through the entry point group ``rlhls.designs``; a user registers one from any code with
``register_design(design)``, or keeps it in a file of their own: a DESIGN argument that names a
``.py`` file (``./my_design.py``, or ``./my_design.py:NAME`` where the file has several) imports
that file and takes the designs it registers or defines.

A design file is code: it is imported only when the user names it (a DESIGN argument, ``--design``,
``rlhls.load(run, design=...)``), never because a record names it. Its bytes are hashed and
exactly those bytes run; its designs carry ``origin`` {file, sha256}, which runs record
(``design_record``). ``recorded_design`` turns what a run folder, build or experiment recorded
back into a design: a registered design by name, a design file's only from the file the user gave
on this command line, with the recorded sha256.
"""

from __future__ import annotations

import hashlib
import sys
import traceback
import types
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.registry import Registry

from .design import Design

_MODULE_DESIGNS: dict[str, list] = {}  # module -> what its designs() gave (the same objects on a load again)


def _module_designs(module: types.ModuleType) -> list[Design]:
    if module.__name__ not in _MODULE_DESIGNS:
        fn = getattr(module, "designs", None)
        _MODULE_DESIGNS[module.__name__] = list(fn()) if callable(fn) else []
    return _MODULE_DESIGNS[module.__name__]


def _seed_order(name: str, design: Design, origin: str) -> tuple:
    """The package's designs in the order of their seeds, then the others in registration order."""
    if not origin.startswith(__package__ + "."):
        return (1, "")
    return (0, design.seed_file) if design.seed_file not in ("", "-") else (0, "~")  # no seed paper: after them


DESIGNS: Registry[Design] = Registry("design", package=__package__, group="rlhls.designs", collect=_module_designs,
                                     order=_seed_order)
_FILES: dict[Path, list[Design]] = {}  # a user's design files already imported


def register_design(design: Design, *, replace: bool = False) -> Design:
    """Add `design` to the registry (its kernels are checked first); returns it."""
    if not isinstance(design, Design):
        raise RlhlsError(f"register_design: {design!r} is not a Design")
    old = DESIGNS.get(design.name)
    if old is not None and old is not design and not replace:
        raise RlhlsError(f"register_design: a design named '{design.name}' is registered already "
                         "(pass replace=True to replace it)")
    design.check_kernels()  # every kernel it names is registered and takes the parameters it gives
    DESIGNS[design.name] = design
    return design


DESIGNS.add = register_design


def unregister_design(name: str) -> None:
    DESIGNS.pop(name, None)


def design_names() -> list[str]:
    return DESIGNS.names()


def get_design(name: str, *, files: bool = True) -> Design:
    """A registered design by name, or the design in a user's ``.py`` file (``path.py[:NAME]``).
    ``files=False`` for a name read from a file (a record someone may have crafted): a file there
    is refused, never imported."""
    if isinstance(name, str) and is_file_spec(name):
        if not files:
            raise RlhlsError(f"design '{_short(name)}' names a file: a design file is imported only when it is "
                             "given on the command line (a record never makes rlhls run code)")
        return load_design_file(name)
    if not isinstance(name, str) or name not in DESIGNS:
        raise DESIGNS.unknown(name, known_also="; or a design file ./NAME.py")
    return DESIGNS[name]


def _short(v, limit: int = 80) -> str:
    text = str(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def design_record(design: Design) -> dict:
    """What a run records of its design: ``{"design": name}``, and for a design file's design
    ``"design_file": {"file", "sha256"}`` (``recorded_design`` checks it)."""
    rec: dict[str, object] = {"design": design.name}
    if design.origin.get("file"):
        rec["design_file"] = {"file": design.origin["file"], "sha256": design.origin["sha256"]}
    if design.resized:
        rec["design_resized"] = dict(design.resized)
    return rec


def recorded_design(name: object, design_file: object = None, *, given: Design | str | None = None,
                    resized: object = None, where: str = "the run") -> Design:
    """The design a record names (`name`, and `design_file` / `resized` as ``design_record`` wrote
    them), never by importing a file the record names. `given`: the design the user named on this
    command line (a Design, or a name / ``FILE.py[:NAME]`` they typed), which must be the recorded
    one: the same name and, for a design file's, a file of the recorded sha256. A design a run
    resized (RL Zoo's ``net_arch``) is the recorded design resized again, its name checked."""
    if resized is not None:
        if not (isinstance(resized, dict) and isinstance(resized.get("from"), str)
                and isinstance(resized.get("net_arch"), dict)
                and isinstance(resized.get("activation"), (str, type(None)))
                and all(isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1 << 20
                                                    for n in v) for v in resized["net_arch"].values())):
            raise RlhlsError(f"{where}: its design_resized record is not {{from, net_arch, activation}}")
        if given is not None and not isinstance(given, Design):
            given = get_design(given)
        if isinstance(given, Design) and given.name == name:
            return recorded_design(name, design_file, given=given, where=where)
        base = recorded_design(resized["from"], design_file, given=given, where=where)
        design = base.with_net_arch(resized["net_arch"], resized["activation"])
        if design.name != name:
            raise RlhlsError(f"{where} is of design '{_short(name)}'; '{base.name}' resized as recorded is "
                             f"'{design.name}' (a damaged record)")
        return design
    if not isinstance(name, str) or not name:
        raise RlhlsError(f"{where}: records no design name (expected a string, got {_short(repr(name))})")
    want = file_name = None
    if design_file is not None:
        if not (isinstance(design_file, dict) and isinstance(design_file.get("file"), str)
                and isinstance(design_file.get("sha256"), str)):
            raise RlhlsError(f"{where}: its design_file record is not {{file, sha256}}")
        want, file_name = design_file["sha256"], design_file["file"]
    if given is None:
        if want is not None:
            raise RlhlsError(f"{where} is of design '{_short(name)}' from the file '{_short(file_name)}' "
                             f"(sha256 {want[:16]}...): give that file (--design FILE / design=FILE) to load it; "
                             "a run folder never makes rlhls import a file by itself")
        try:
            return get_design(name, files=False)
        except RlhlsError as e:
            raise RlhlsError(f"{where}: {e}") from None
    design = given if isinstance(given, Design) else get_design(given)
    if design.name != name:
        raise RlhlsError(f"{where} is of design '{_short(name)}', not of '{design.name}'")
    have = design.origin.get("sha256")
    if want is not None and have != want:
        what = f"'{design.origin['file']}' has sha256 {have}" if have else f"'{design.name}' is not from a file"
        raise RlhlsError(f"{where} was trained on the design file of sha256 {want}; {what} (the file changed: "
                         "give the file the run was made with)")
    return design


def design_spec(design: Design) -> str:
    """What names `design` in another process: its name, or ``/abs/path.py:NAME`` for a design from
    a user's file (``get_design`` there imports the file again)."""
    for path, designs in _FILES.items():
        if any(d is design for d in designs):
            return f"{path}:{design.name}"
    return design.name


def is_file_spec(text: object) -> bool:
    """Whether a DESIGN argument names a design file (``path.py`` or ``path.py:NAME``)."""
    if not isinstance(text, str):
        return False
    path, _, _ = text.rpartition(":") if ".py:" in text else (text, "", "")
    return path.endswith(".py")


def load_design_file(spec: str) -> Design:
    """The one design of a user's file ``path.py``, or its design NAME for ``path.py:NAME``."""
    path_text, _, pick = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    designs = design_file(path_text)
    names = [d.name for d in designs]
    if pick:
        for d in designs:
            if d.name == pick:
                return d
        raise RlhlsError(f"design file '{path_text}': no design '{pick}' in it (it has {', '.join(names)})")
    if len(designs) > 1:
        raise RlhlsError(f"design file '{path_text}' has several designs ({', '.join(names)}): "
                         f"name one as {path_text}:NAME")
    return designs[0]


def design_file(path_text: str) -> list[Design]:
    """Import a user's design file once and register the designs it registers or defines (at module
    level, or returned by its ``designs()``), in that order."""
    DESIGNS.load()
    path = Path(path_text)
    where = f"design file '{path_text}'"
    if not path.is_file():
        raise RlhlsError(f"{where}: no such file")
    key = path.resolve()
    try:
        source = key.read_bytes()
    except OSError as e:
        raise RlhlsError(f"{where}: cannot be read ({e.strerror or e})") from None
    digest = hashlib.sha256(source).hexdigest()
    if key in _FILES:
        if _FILES[key][0].origin.get("sha256") != digest:
            raise RlhlsError(f"{where}: changed since this process imported it (sha256 "
                             f"{_FILES[key][0].origin.get('sha256')}, now {digest}); start a new process")
        return _FILES[key]
    before = DESIGNS.snapshot()
    # a module name of its own, in sys.modules (pickling and dataclasses look the module up there)
    modname = f"rlhls_user_{key.stem}_{abs(hash(str(key))):x}"
    folder = str(key.parent)
    sys.path.insert(0, folder)  # its imports of modules beside it work, as under `python FILE.py`
    try:
        # exactly the bytes hashed above run (not a second read the file may have changed under)
        module = types.ModuleType(modname)
        module.__file__ = str(key)
        sys.modules[modname] = module
        with DESIGNS.registering_from(f"design file {key}"):
            exec(compile(source, str(key), "exec"), module.__dict__)
            defined = list(module.designs()) if callable(getattr(module, "designs", None)) else []
    except (KeyboardInterrupt, MemoryError):
        raise
    except BaseException as e:
        sys.modules.pop(modname, None)
        DESIGNS.restore(before)  # nothing half-registered
        line = next((f":{fr.lineno}" for fr in reversed(traceback.extract_tb(e.__traceback__))
                     if Path(fr.filename).resolve() == key), "")
        msg = str(e).splitlines()[0] if str(e) else ""
        kind = "" if isinstance(e, RlhlsError) else f"{type(e).__name__}: "
        raise RlhlsError(f"{where}{line}: {kind}{msg}".rstrip(": ")) from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    found = [d for name, d in DESIGNS.items() if before[0].get(name) is not d]
    found += [d for d in (*vars(module).values(), *defined) if isinstance(d, Design)]
    out, seen = [], {id(d) for d in before[0].values()}  # a registered design it imports is not its own
    for d in found:
        if id(d) not in seen:
            seen.add(id(d))
            out.append(d)
    if not out:
        raise RlhlsError(f"{where}: defines no Design (define one, or call register_design)")
    for d in out:  # a frozen dataclass: stamped once, here, before anything sees it as the file's
        object.__setattr__(d, "origin", {"file": str(key), "sha256": digest})
    try:
        with DESIGNS.registering_from(f"design file {key}"):
            for d in out:
                if DESIGNS.get(d.name) is not d:
                    register_design(d)
    except RlhlsError as e:
        sys.modules.pop(modname, None)
        DESIGNS.restore(before)  # all of the file's designs or none
        raise RlhlsError(f"{where}: {e}") from None
    _FILES[key] = out
    return out
