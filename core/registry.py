"""One registry type for every plug-in point (kernels, designs, algorithms, environments, experiments).

A ``Registry`` maps a name to what is registered under it, and records where each came from. Its
entries come three ways, the same for every kind:

* **the package's own modules**: on the first look-up every module of its package is imported (in
  name order; sub-packages and ``_private`` modules are not). A module registers what it defines
  with the kind's ``register_*`` call, or the registry's ``collect(module)`` rule gathers it (the
  kernels' classes, the seeds' ``designs()``, the environments' ``ENVIRONMENTS`` tables);
* **installed packages**: the entry points of its group (``rlhls.<kind>s``) — a module (imported, and
  collected), a callable (called; what it returns is registered) or an object;
* **a user's code**: the kind's ``register_*`` call.

The load runs once per process, under a lock (``LazyLoad``): threads looking the registry up
meanwhile wait for it, a plug-in registering during the load does not wait for itself. A load that
fails is not done: the next look-up runs it again; what the entry points registered before the
failing one is taken out again. ``describe()`` lists every entry with its origin (``rlhls plugins``).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import pkgutil
import sys
import threading
from collections.abc import MutableMapping
from importlib import metadata
from types import FrameType, ModuleType
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from .errors import RlhlsError

__all__ = ["Registry", "LazyLoad", "load_entry_points", "did_you_mean"]

T = TypeVar("T")  # what a registry holds (a Kernel, a Design, an Algorithm, ...)


class LazyLoad:
    """A load on first use: ``load()`` runs once per process. Threads that ask meanwhile wait for it
    (a lock); a call from inside the load (a plug-in's module calling ``register_*``) returns at once,
    the lock being reentrant. A load that raises is not done: the next call runs it again and meets
    the same error, never a half-filled registry."""

    def __init__(self, load: Callable[[], None]) -> None:
        self._load = load
        self._lock = threading.RLock()
        self._running = False
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        with self._lock:
            if self.done or self._running:
                return
            self._running = True
            try:
                self._load()
                self.done = True
            finally:
                self._running = False


class Registry(MutableMapping[str, T], Generic[T]):
    """name -> entry of one kind of plug-in (see the module docstring). A mapping: every read loads
    the registry first. ``add`` is the kind's register function (its checks), used for what the
    package's modules and the entry points bring; ``order`` a sort key ``(name, entry, origin)`` of
    the listing (default: registration order)."""

    def __init__(self, kind: str, *, package: str | None = None, group: str | None = None,
                 collect: Callable[[ModuleType], Any] | None = None, order: Callable | None = None,
                 linked: tuple = ()) -> None:
        self.kind, self.package, self.group, self.collect, self.order = kind, package, group, collect, order
        self.linked = linked  # mappings its register function also fills (taken back with it when a plug-in fails)
        self.add: Callable[[Any], Any] | None = None
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._context: str | None = None  # where what is registered now comes from, during the load
        self._lazy = LazyLoad(self._load)

    # -- loading
    def load(self) -> None:
        self._lazy()

    def reload(self) -> None:
        """Look for plug-ins again on the next look-up (entry points installed since; tests)."""
        self._lazy.done = False

    @property
    def loaded(self) -> bool:
        return self._lazy.done

    def _load(self) -> None:
        try:
            if self.package:
                package = importlib.import_module(self.package)
                for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
                    if m.ispkg or m.name.startswith("_"):
                        continue
                    self._context = f"{self.package}.{m.name}"
                    try:
                        module = importlib.import_module(self._context)
                    except RlhlsError:
                        raise
                    except Exception as e:  # one line naming the module, not its traceback
                        first = (str(e).splitlines() or [""])[0]
                        raise RlhlsError(f"{self.kind} module {self._context} failed to import: "
                                         f"{type(e).__name__}: {first}") from e
                    self._collect(module)
            if self.group:
                load_entry_points(self.group, self._add, self._collected, registries=(self._items, *self.linked),
                                  where=self._where_from)
        finally:
            self._context = None

    def modules(self) -> list[str]:
        """The package's modules that give entries by ``collect`` (imported, nothing registered)."""
        if not self.package:
            return []
        package = importlib.import_module(self.package)
        found = []
        for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not m.ispkg and not m.name.startswith("_"):
                name = f"{self.package}.{m.name}"
                if self._collected(importlib.import_module(name)):
                    found.append(name)
        return found

    def _where_from(self, where: str | None) -> None:
        self._context = where

    def _collected(self, module: ModuleType) -> list:
        return list(self.collect(module) or ()) if self.collect is not None else []

    def _collect(self, module: ModuleType) -> None:
        for obj in self._collected(module):
            self._add(obj)

    def _add(self, obj) -> None:
        if self.add is None:
            raise RlhlsError(f"the {self.kind} registry has no register function")
        self.add(obj)

    # -- the mapping
    def __getitem__(self, name: str) -> T:
        self.load()
        return self._items[name]

    def __setitem__(self, name: str, entry: T) -> None:
        self.put(name, entry)

    def put(self, name: str, entry: T, origin: str | None = None) -> None:
        """Register `entry` as `name`, from `origin` (default: the module or entry point being loaded,
        else the module of the code that registers it)."""
        self._items[name] = entry
        self._origins[name] = self._context or origin or _caller()

    def __delitem__(self, name: str) -> None:
        del self._items[name]
        self._origins.pop(name, None)

    def pop(self, name: str, *default: Any) -> Any:
        """Take an entry out (no load: what was never loaded needs no removing)."""
        self._origins.pop(name, None)
        return self._items.pop(name, *default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self.load()
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def names(self) -> list[str]:
        self.load()
        names = list(self._items)
        order = self.order
        if order is not None:
            names.sort(key=lambda n: order(n, self._items[n], self._origins.get(n, "")))
        return names

    def origin(self, name: str) -> str:
        """Where `name` came from: a module of rlhls, a user's module, or an installed package's entry point."""
        self.load()
        return self._origins.get(name, "")

    def snapshot(self) -> tuple[dict[str, T], dict[str, str]]:
        """The entries and their origins as they are now (``restore`` puts them back)."""
        self.load()
        return dict(self._items), dict(self._origins)

    def restore(self, snapshot: tuple[dict[str, T], dict[str, str]]) -> None:
        self._items, self._origins = dict(snapshot[0]), dict(snapshot[1])

    @contextlib.contextmanager
    def registering_from(self, where: str) -> Iterator[None]:
        """What is registered in the block comes from `where` (a user's design file, say)."""
        old, self._context = self._context, where
        try:
            yield
        finally:
            self._context = old

    def unknown(self, name: object, *, known_also: str = "") -> RlhlsError:
        """The one-line error of a name not registered: the nearest names first (``did_you_mean``),
        then every name (and `known_also`, what else the look-up takes)."""
        near = did_you_mean(name, self.names())
        return RlhlsError(f"unknown {self.kind} '{_short(name)}'{': ' + near if near else ''} "
                          f"(known: {', '.join(self.names())}{known_also})")

    def describe(self) -> list[dict]:
        return [{"kind": self.kind, "name": n, "origin": self._origins.get(n, "")} for n in self.names()]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._items)} entries{'' if self.loaded else ', not loaded yet'})"


def did_you_mean(name: object, names: Iterable[str], n: int = 3) -> str:
    """"did you mean 'a' or 'b'?" naming the registered names nearest a mistyped `name` (difflib,
    case ignored); "" when none is near."""
    if not isinstance(name, str) or not name:
        return ""
    by_lower: dict[str, str] = {}
    for k in names:
        by_lower.setdefault(k.lower(), k)
    scored = []
    for k in by_lower:
        m = difflib.SequenceMatcher(None, name.lower(), k)
        if m.real_quick_ratio() >= 0.6 and m.quick_ratio() >= 0.6 and m.ratio() >= 0.6:
            scored.append((m.ratio(), k))
    scored.sort(key=lambda sk: -sk[0])
    # the nearest, and those about as near (not every name that shares a prefix)
    close = [by_lower[k] for r, k in scored[:n] if r >= scored[0][0] - 0.05]
    if not close:
        return ""
    quoted = [f"'{c}'" for c in close]
    return "did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"


def _short(v: object, limit: int = 80) -> str:
    text = str(v) if str(v).isprintable() else ascii(str(v))[1:-1]  # a newline would break the one line
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _caller() -> str:
    """The module of the code that registered an entry (outside the registries' own modules)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if (name != __name__ and not name.startswith(("_collections_abc", "collections"))
                and not frame.f_code.co_name.startswith(("register", "_register", "add"))):
            return name or "?"
        frame = frame.f_back
    return "?"


_ABSENT = object()


def load_entry_points(group: str, register: Callable, from_module: Callable | None = None,
                      registries: tuple = (), where: Callable[[str | None], None] | None = None) -> None:
    """Load every entry point of `group`; ``register(obj)`` takes each object one yields, and
    ``from_module(module)`` the objects of an entry point that names a module (default: none, its
    import registers them). When one fails, what ``register`` put into `registries` (mappings) is
    taken out again, so the next load registers it afresh. ``where(text)`` is told which entry point
    is loading (None after)."""
    try:
        eps = metadata.entry_points(group=group)
    except Exception as e:  # a broken distribution's metadata must not stop rlhls
        raise RlhlsError(f"entry points of {group}: {e}") from None
    undo: list = [{} for _ in registries]  # per registry: key -> its value before (_ABSENT: none)

    def add(obj: Any) -> None:
        before = [dict(getattr(r, "_items", r)) for r in registries]
        register(obj)
        for reg, old, changed in zip(registries, before, undo):
            for k, v in dict(getattr(reg, "_items", reg)).items():
                if old.get(k, _ABSENT) is not v:
                    changed.setdefault(k, old.get(k, _ABSENT))

    try:
        _load_all(group, eps, add, from_module, where)
    except BaseException:
        for reg, changed in zip(registries, undo):
            for k, v in changed.items():
                if v is _ABSENT:
                    reg.pop(k, None)
                else:
                    reg[k] = v
        raise
    finally:
        if where is not None:
            where(None)


def _load_all(group: str, eps: Iterable[metadata.EntryPoint], register: Callable[[Any], None],
              from_module: Callable | None, where: Callable[[str | None], None] | None) -> None:
    for ep in eps:
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        text = f"entry point '{ep.name}' of {group} (package {dist})"
        if where is not None:
            where(text)
        try:
            obj = ep.load()
            if isinstance(obj, ModuleType):
                objs = from_module(obj) if from_module is not None else ()
            elif callable(obj) and not isinstance(obj, type):
                objs = obj()
            else:
                objs = (obj,)
            if objs is None:
                objs = ()
            for o in (objs if isinstance(objs, (list, tuple)) else (objs,)):
                register(o)
        except RlhlsError as e:
            raise RlhlsError(f"{text}: {e}") from None
        except Exception as e:
            raise RlhlsError(f"{text}: {type(e).__name__}: {e}") from None
