"""All registered designs, by name (hls4ml's ``register_*`` style, as the kernels).

The package's own design modules are discovered: every module of this package that defines
``designs()`` (the seeds' modules; listed in the order of their seeds). Installed packages add
designs through the entry point group ``rlhls.designs``; a user registers one from any code with
``register_design(design)``, or keeps it in a file of their own: a DESIGN argument that names a
``.py`` file (``./my_design.py``, or ``./my_design.py:NAME`` where the file has several) imports
that file and takes the designs it registers or defines.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import traceback
from pathlib import Path

from .design import Design
from .errors import RlhlsError
from .plugins import LazyLoad

DESIGNS: dict[str, Design] = {}
_NOT_DESIGNS = {"arith", "design", "devices", "errors", "formats", "graph", "lut", "nets", "network",
                "onnx_export", "onnx_import", "plugins", "quantizer", "registry"}  # modules that hold none
_FILES: dict[Path, list[Design]] = {}  # a user's design files already imported


def register_design(design: Design, *, replace: bool = False) -> Design:
    """Add `design` to the registry (its kernels are checked first); returns it."""
    _load()
    if not isinstance(design, Design):
        raise RlhlsError(f"register_design: {design!r} is not a Design")
    old = DESIGNS.get(design.name)
    if old is not None and old is not design and not replace:
        raise RlhlsError(f"register_design: a design named '{design.name}' is registered already "
                         "(pass replace=True to replace it)")
    design.check_kernels()  # every kernel it names is registered and takes the parameters it gives
    DESIGNS[design.name] = design
    return design


def unregister_design(name: str) -> None:
    DESIGNS.pop(name, None)


def _load_designs() -> None:
    from .plugins import load_entry_points

    found, package = [], {}
    for mod in pkgutil.iter_modules(sys.modules[__package__].__path__):
        if not mod.ispkg and mod.name not in _NOT_DESIGNS:
            module = importlib.import_module(f"{__package__}.{mod.name}")
            if callable(getattr(module, "designs", None)):
                found.append(list(module.designs()))
    for designs in sorted(found, key=lambda ds: min((d.seed_file for d in ds), default="")):
        for d in designs:
            d.check_kernels()
            if d.name in package:
                raise RlhlsError(f"design '{d.name}' is defined twice in rlhls.designs")
            package[d.name] = d
    for name, d in package.items():
        if DESIGNS.get(name, d) is not d:
            raise RlhlsError(f"design '{name}' is defined twice in rlhls.designs")
    added = [name for name in package if name not in DESIGNS]
    DESIGNS.update(package)
    try:
        load_entry_points("rlhls.designs", register_design,
                          lambda m: list(m.designs()) if callable(getattr(m, "designs", None)) else [],
                          registries=(DESIGNS,))
    except BaseException:  # the load runs again on the next look-up: the package's designs or none
        for name in added:
            if DESIGNS.get(name) is package[name]:
                del DESIGNS[name]
        raise


_load = LazyLoad(_load_designs)  # on first look-up: a plug-in's module may call register_design meanwhile


def design_names() -> list[str]:
    _load()
    return list(DESIGNS)


def get_design(name: str) -> Design:
    """A registered design by name, or the design in a user's ``.py`` file (``path.py[:NAME]``)."""
    if isinstance(name, str) and _is_file_spec(name):
        return load_design_file(name)
    _load()
    if name not in DESIGNS:
        raise RlhlsError(f"unknown design '{name}' (known: {', '.join(DESIGNS)}; or a design file ./NAME.py)")
    return DESIGNS[name]


def design_spec(design: Design) -> str:
    """What names `design` in another process: its name, or ``/abs/path.py:NAME`` for a design from
    a user's file (``get_design`` there imports the file again)."""
    for path, designs in _FILES.items():
        if any(d is design for d in designs):
            return f"{path}:{design.name}"
    return design.name


def _is_file_spec(text: str) -> bool:
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
    _load()
    path = Path(path_text)
    where = f"design file '{path_text}'"
    if not path.is_file():
        raise RlhlsError(f"{where}: no such file")
    key = path.resolve()
    if key in _FILES:
        return _FILES[key]
    before = dict(DESIGNS)
    # a module name of its own, in sys.modules (pickling and dataclasses look the module up there)
    modname = f"rlhls_user_{key.stem}_{abs(hash(str(key))):x}"
    folder = str(key.parent)
    sys.path.insert(0, folder)  # its imports of modules beside it work, as under `python FILE.py`
    try:
        spec = importlib.util.spec_from_file_location(modname, key)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
        defined = list(module.designs()) if callable(getattr(module, "designs", None)) else []
    except (KeyboardInterrupt, MemoryError):
        raise
    except BaseException as e:
        sys.modules.pop(modname, None)
        DESIGNS.clear()
        DESIGNS.update(before)  # nothing half-registered
        line = next((f":{fr.lineno}" for fr in reversed(traceback.extract_tb(e.__traceback__))
                     if Path(fr.filename).resolve() == key), "")
        msg = str(e).splitlines()[0] if str(e) else ""
        kind = "" if isinstance(e, RlhlsError) else f"{type(e).__name__}: "
        raise RlhlsError(f"{where}{line}: {kind}{msg}".rstrip(": ")) from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    found = [d for name, d in DESIGNS.items() if before.get(name) is not d]
    found += [d for d in (*vars(module).values(), *defined) if isinstance(d, Design)]
    out, seen = [], {id(d) for d in before.values()}  # a registered design it imports is not its own
    for d in found:
        if id(d) not in seen:
            seen.add(id(d))
            out.append(d)
    if not out:
        raise RlhlsError(f"{where}: defines no Design (define one, or call register_design)")
    try:
        for d in out:
            if DESIGNS.get(d.name) is not d:
                register_design(d)
    except RlhlsError as e:
        sys.modules.pop(modname, None)
        DESIGNS.clear()
        DESIGNS.update(before)  # all of the file's designs or none
        raise RlhlsError(f"{where}: {e}") from None
    _FILES[key] = out
    return out
