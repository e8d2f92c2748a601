"""The launch path's modules from one file: their compiled code, mapped once, each checked
against its source as a .pyc is.

Every launch starts fresh interpreters (the launcher, the jail's holder, the Python inner
stage) that import some 80 modules of this package. For each, the import system searches
the package's directory, opens and reads the .pyc beside the source, and reads and
hashes the source to check it (the installer compiles them so): 3 to 5 ms of a launch,
measured (docs/adr/0018-the-launch-path-bundle.md). The
installer writes BUNDLE, root's, beside the package it installs (install/bundle.py):
every module's code, marshalled once, keyed by name, with the size and modification time
of the source it was compiled from. `install` puts a finder first on sys.meta_path that
serves a module from it only when:
- this package is the installed one (the bundle names its directory): a checkout on
  PYTHONPATH is never served the installed code;
- the bundle is a regular file owned by root that nobody else may write, opened without
  following a link, and was written for this interpreter's bytecode (its magic number);
- the module's source is still a regular file of exactly that size and time, as the
  .pyc check the import system makes.
Anything else, or a module it does not hold, goes to the normal import, as if there
were no bundle: it only saves time, and never serves code its source no longer is.
"""

from __future__ import annotations

import _imp
import _thread
import builtins
import marshal
import os
import sys

BUNDLE = "/usr/libexec/claude-sandbox/launch-bundle"
# The bundle's first line; the interpreter's magic number and the package's directory
# follow it, each on a line of its own.
MAGIC = b"claude-sandbox launch bundle 1\n"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType

# name: (source path, is a package, source size, source mtime_ns, offset, length): where
# the module's marshalled code lies in the bundle, after the index.
Entry = tuple[str, bool, int, int, int, int]


def header(magic: bytes, package: str) -> bytes:
    return MAGIC + magic.hex().encode() + b"\n" + package.encode() + b"\n"


def read(path: str, package: str, magic: bytes) -> tuple[dict[str, Entry], memoryview] | None:
    """The bundle's index and its code, where it is root's, unwritable by others, for
    this interpreter and this package directory; None otherwise. Only the index is
    loaded here: a module's code is loaded when it is imported."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not (info.st_uid == 0 and info.st_mode & 0o170022 == 0o100000):
            return None  # not a regular file, or another may write it
        # Mapped, not read: a launch touches the pages of the modules it imports only
        # (reading the whole file cost 1.9 ms, measured). The installer replaces the file
        # by a rename, never in place, so a mapping never sees it change.
        import mmap

        data = memoryview(mmap.mmap(fd, 0, prot=mmap.PROT_READ))
    except (OSError, ValueError, ImportError):  # ValueError: an empty file
        return None
    finally:
        os.close(fd)
    head = header(magic, package)
    if data[:len(head)] != head:
        return None
    data = data[len(head):]
    try:
        size = int.from_bytes(data[:8], "big")
        index = marshal.loads(data[8:8 + size])
    except (ValueError, EOFError, TypeError):
        return None
    return (index, data[8 + size:]) if type(index) is dict else None


class Finder:
    """A sys.meta_path finder and loader serving the bundle's modules."""

    def __init__(self, index: dict[str, Entry], code: memoryview, path: str) -> None:
        self.index = index
        self.code = code
        self.path = path

    def find_spec(self, name: str, path: object = None, target: object = None,
                  ) -> ModuleSpec | None:
        entry = self.index.get(name)
        try:
            if entry is None or not _current(entry):
                return None
            origin, package, _, _, offset, length = entry
            # Loaded here, not when executed: a part that does not load as code is the
            # normal import's to serve, never a failed one.
            code = marshal.loads(self.code[offset:offset + length])
        except (OSError, ValueError, TypeError, EOFError, IndexError):
            return None
        if type(code) is not type(_current.__code__):
            return None
        from _frozen_importlib import ModuleSpec  # loaded at start: importlib.machinery is not

        # A loader by its two methods (importlib.abc would cost an import).
        spec = ModuleSpec(name, self, origin=origin, is_package=package)  # type: ignore[arg-type]
        spec.has_location = True  # __file__ is the source's: paths beside it still resolve
        # __cached__ names where the code came from. Left unset, the import system would
        # work out a .pyc's name for every module (its string work, some 5 us each).
        spec.cached = self.path
        spec.loader_state = code
        if package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def get_code(self, name: str) -> CodeType | None:
        """The module's code (runpy asks for it: `python -m claude_sandbox`)."""
        spec = self.find_spec(name)
        return None if spec is None else spec.loader_state

    def exec_module(self, module: ModuleType) -> None:
        code: CodeType = module.__spec__.loader_state  # type: ignore[union-attr]
        exec(code, module.__dict__)  # the installed package's own code

    def load(self, name: str) -> ModuleType | None:
        """The module `name` made and run as the import system makes and runs it from
        this finder's spec, without the import system's own steps; None where the
        bundle does not serve it, or a second thread runs (importer()). Its parent
        package is already imported."""
        # The import system's global lock first, then the count of threads: a thread
        # counted by then is the import system's to serve (it may hold a module's lock
        # this import would wait for), and one that starts running later finds this lock
        # held and waits at its first import until the module is made.
        _imp.acquire_lock()
        try:
            spec = None if _thread._count() else self.find_spec(name)
            if spec is None:
                return None
            # The event the import system raises for each module it finds, for audit hooks.
            sys.audit("import", name, None, sys.path, sys.meta_path, sys.path_hooks)
            module = type(sys)(name)
            # What the import system sets on a module made from such a spec, no more.
            module.__dict__.update(__spec__=spec, __loader__=self, __file__=spec.origin,
                                   __cached__=self.path, __package__=spec.parent)
            if spec.submodule_search_locations is not None:
                module.__path__ = spec.submodule_search_locations
            # Marked before it is in sys.modules: a thread that finds it there while it
            # is made waits for the lock held here.
            spec._initializing = True  # type: ignore[attr-defined]
            sys.modules[name] = module
            try:
                self.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)  # as the import system: no half-made module
                raise
            finally:
                spec._initializing = False  # type: ignore[attr-defined]
            module = sys.modules[name]  # a module may have put another in its place
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
        finally:
            _imp.release_lock()
        return module


def _current(entry: Entry) -> bool:
    """Whether the source is still what the entry was compiled from (the .pyc check)."""
    info = os.stat(entry[0], follow_symlinks=False)
    return (info.st_mode & 0o170000 == 0o100000 and info.st_size == entry[2]
            and info.st_mtime_ns == entry[3])


_ABSENT: ModuleType = type(sys)("absent")  # not in sys.modules (None there blocks a name)


def importer(finder: Finder, original: Callable[..., ModuleType]) -> Callable[..., ModuleType]:
    """An `__import__` that makes the bundle's modules itself (Finder.load), and leaves
    every other import to `original`, the import system's.

    The import system's own steps for each module (its lock, the search of
    sys.meta_path, the spec's attributes, the module's place in sys.modules), written in
    Python, took about 3.6 ms of the 90 modules a jailed launch imports (ADR 0004). What
    is served, and when, is the finder's decision as before: a module it refuses, or a
    stale one, goes to the import system, and so does a name sys.modules blocks (None
    there), which it refuses. A process in which a second thread runs imports through
    the import system only, whose per-module locks keep one thread from seeing a module
    another is still making: Finder.load holds the import system's global lock while it
    makes a module, so a module made here must not wait for another thread.
    """
    index = finder.index
    modules = sys.modules

    def made(name: str) -> ModuleType | None:
        module = modules.get(name, _ABSENT)
        if module is _ABSENT:
            parent = name.rpartition(".")[0]
            if parent and made(parent) is None:
                return None
            module = modules.get(name, _ABSENT)  # its parent's import may have made it
            if module is _ABSENT:
                return finder.load(name)
        return module  # None: blocked in sys.modules, for the import system to refuse

    def import_(name: str, globals: object = None, locals: object = None,
                fromlist: tuple[str, ...] | list[str] | None = (), level: int = 0,
                ) -> ModuleType:
        module = None
        # Counted here too, not only in Finder.load: with a second thread running, a
        # module in sys.modules may be one that thread is still making, which only the
        # import system's per-module locks wait for.
        if not level and name in index and not _thread._count():
            module = made(name)
        if module is None:
            return original(name, globals, locals, fromlist, level)
        if not fromlist:
            return modules[name.partition(".")[0]]  # `import a.b` binds a
        if hasattr(module, "__path__"):
            for item in fromlist:  # `from a import b`, b a module not yet imported
                if not hasattr(module, item) and (
                        f"{name}.{item}" not in index or made(f"{name}.{item}") is None):
                    return original(name, globals, locals, fromlist, level)  # '*' too
        return module

    return import_


def install(package: str) -> None:
    """Serve this package's modules from the bundle, where it holds for `package` (the
    directory this package was imported from)."""
    # The bytecode's version, from the import system loaded at start (importlib.util
    # would import some ten modules more).
    magic = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    found = read(BUNDLE, package, magic)
    if found is not None:
        finder = Finder(*found, BUNDLE)
        # The finder for whatever asks the import system itself (runpy, importlib).
        sys.meta_path.insert(0, finder)
        # An interpreter told to time its imports (-X importtime) times the import
        # system's: only its steps print those times.
        if "importtime" not in sys._xoptions:
            builtins.__import__ = importer(finder, builtins.__import__)
