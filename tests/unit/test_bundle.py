"""The launch-path bundle serves a module only from a root-owned file nobody else may
write, made for this interpreter and this package directory, and only while its source
is what it was compiled from; anything else is the normal import's (core/bundle.py)."""

from __future__ import annotations

import os
import sys
from importlib.util import MAGIC_NUMBER, module_from_spec
from pathlib import Path

import pytest

from claude_sandbox.core import bundle, paths
from claude_sandbox.install import bundle as builder

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the bundle must be root's")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package named claude_sandbox, as the installer lays it out."""
    root = tmp_path / "site" / "claude_sandbox"
    for directory in (root / "core", root / "tools", root / "install"):
        directory.mkdir(parents=True)
        (directory / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "answer.py").write_text("VALUE = 42\n")
    (root / "tools" / "doctor.py").write_text("X = 1\n")
    return root


def _written(tmp_path: Path, package: Path, mode: int = 0o644) -> str:
    path = tmp_path / "launch-bundle"
    path.write_bytes(builder.build(package))
    path.chmod(mode)
    return str(path)


def _spec(path: str, package: Path, name: str) -> object:
    found = bundle.read(path, str(package), MAGIC_NUMBER)
    assert found is not None
    return bundle.Finder(*found, path).find_spec(name)


def test_a_module_is_served_from_the_bundle(tmp_path: Path, package: Path) -> None:
    path = _written(tmp_path, package)
    found = bundle.read(path, str(package), MAGIC_NUMBER)
    assert found is not None
    index, _ = found
    # The tools and the installer run from the tools venv; the package itself is
    # imported before the finder is there.
    assert set(index) == {"claude_sandbox.core", "claude_sandbox.core.answer"}
    spec = bundle.Finder(*found, path).find_spec("claude_sandbox.core.answer")
    assert spec is not None and spec.origin == str(package / "core" / "answer.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert module.VALUE == 42 and module.__file__ == spec.origin
    assert module.__cached__ == path  # where its code came from
    package_spec = bundle.Finder(*found, path).find_spec("claude_sandbox.core")
    assert package_spec is not None
    assert package_spec.submodule_search_locations == [str(package / "core")]
    assert builder.current(path, package)
    # runpy (`python -m`) asks the loader for the code itself.
    code = bundle.Finder(*found, path).get_code("claude_sandbox.core.answer")
    assert code is not None and code.co_filename == spec.origin


@pytest.mark.parametrize("change", ["time", "size", "gone", "link"])
def test_a_source_changed_since_is_not_served(tmp_path: Path, package: Path,
                                              change: str) -> None:
    path = _written(tmp_path, package)
    source = package / "core" / "answer.py"
    info = source.stat()
    if change == "time":
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns + 1))
    elif change == "size":
        source.write_text("VALUE = 421\n")
        os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns))
    elif change == "gone":
        source.unlink()
    else:
        moved = tmp_path / "answer.py"
        source.rename(moved)
        source.symlink_to(moved)
    assert _spec(path, package, "claude_sandbox.core.answer") is None
    assert not builder.current(path, package)


def test_a_module_added_since_makes_the_bundle_not_current(tmp_path: Path,
                                                           package: Path) -> None:
    path = _written(tmp_path, package)
    (package / "core" / "new.py").write_text("")
    assert _spec(path, package, "claude_sandbox.core.new") is None
    assert not builder.current(path, package)


@pytest.mark.parametrize("fault", ["group-writable", "other-writable", "link", "fifo",
                                   "another-package", "another-interpreter", "truncated",
                                   "empty", "not-a-bundle"])
def test_a_bundle_that_is_not_exactly_ours_is_not_read(tmp_path: Path, package: Path,
                                                        fault: str) -> None:
    good = _written(tmp_path, package)
    path = str(tmp_path / "faulty")
    data = Path(good).read_bytes()
    magic, where = MAGIC_NUMBER, str(package)
    if fault == "link":
        os.symlink(good, path)
    elif fault == "fifo":
        os.mkfifo(path, 0o644)
    else:
        body = {"truncated": data[:len(data) // 2], "empty": b"",
                "not-a-bundle": b"#!/bin/sh\n" + data}.get(fault, data)
        Path(path).write_bytes(body)
        os.chmod(path, {"group-writable": 0o664, "other-writable": 0o646}.get(fault, 0o644))
    if fault == "another-package":
        where = str(tmp_path / "checkout" / "claude_sandbox")
    if fault == "another-interpreter":
        magic = bytes([MAGIC_NUMBER[0] ^ 1]) + MAGIC_NUMBER[1:]
    found = bundle.read(path, where, magic)
    if fault == "truncated" and found is not None:
        # The index may survive the cut; the code it points past the end does not load.
        assert bundle.Finder(*found, path).find_spec("claude_sandbox.core.answer") is None
    else:
        assert found is None


def test_an_installed_package_is_served_and_a_checkout_never(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path,
                                                             package: Path) -> None:
    """install() reads the one bundle path, for the directory it is given: a checkout's
    package (another directory) is left to the normal import."""
    path = _written(tmp_path, package)
    monkeypatch.setattr(bundle, "BUNDLE", path)
    before = list(sys.meta_path)
    try:
        bundle.install(str(tmp_path / "checkout" / "claude_sandbox"))
        assert sys.meta_path == before
        bundle.install(str(package))
        assert isinstance(sys.meta_path[0], bundle.Finder)
    finally:
        sys.meta_path[:] = before


def test_the_bundle_lies_in_the_installed_tree() -> None:
    assert f"{paths.LIBEXEC}/launch-bundle" == bundle.BUNDLE



_IMPORTS = """
import _thread, json, sys, time
sys.path.insert(0, {site!r})
import claude_sandbox
made = []
finder = type(sys.meta_path[0])
if finder.__name__ == "Finder":
    load = finder.load
    def counted(self, name):
        module = load(self, name)
        if module is not None:
            made.append(name)
        return module
    finder.load = counted
from claude_sandbox.core import answer
import claude_sandbox.core.sub.leaf as leaf
from claude_sandbox.core.sub import leaf as same, twig
try:
    import claude_sandbox.core.broken
except RuntimeError:
    pass
import claude_sandbox.core.stale
sys.modules["claude_sandbox.core.blocked"] = None  # blocked: the import refuses it
try:
    import claude_sandbox.core.blocked
except ModuleNotFoundError:
    blocked = "refused"
else:
    blocked = "imported"
del sys.modules["claude_sandbox.core.blocked"]
import claude_sandbox.core.racing
while not claude_sandbox.core.racing.SEEN or not _thread._count():
    time.sleep(0.01)  # the thread racing started has its answer, and still runs
import claude_sandbox.core.late
names = [n for n in sys.modules if n.startswith("claude_sandbox.core.")
         and n != "claude_sandbox.core.bundle"]
print(json.dumps({{
    "values": [answer.VALUE, answer.OTHER, leaf is same, twig.TWIG,
               "claude_sandbox.core.broken" in sys.modules,
               claude_sandbox.core.sub.leaf is leaf, claude_sandbox.core.racing.SEEN,
               blocked, hasattr(__builtins__, "BLOCKED_RAN")],
    "made": made,
    "modules": {{n: [type(m.__loader__).__name__, m.__file__, m.__package__,
                    getattr(m, "__path__", None), m.__spec__.name, m.__spec__.origin]
                for n, m in sorted((n, sys.modules[n]) for n in names)}},
}}))
"""

# A module whose making starts a thread that imports it: the thread must find it made.
_RACING = """import _thread, time
SEEN = []
def _look():
    import claude_sandbox.core.racing as me
    SEEN.append(hasattr(me, "DONE"))
    time.sleep(1)  # alive while the next import is made
_thread.start_new_thread(_look, ())
time.sleep(0.3)
DONE = True
"""


def test_an_import_makes_the_bundles_modules_as_the_import_system_does(
        tmp_path: Path, package: Path) -> None:
    """The bundle's `__import__` (bundle.importer) gives a module the attributes, the
    place in sys.modules and on its parent, and the errors the import system gives it;
    it leaves a stale module to the import system, and every import once a second
    thread runs; a name sys.modules blocks is refused, never run; and a thread started
    while a module is made finds it made."""
    import json
    import shutil
    import subprocess

    core = package / "core"
    shutil.copy(bundle.__file__, core / "bundle.py")
    (core / "answer.py").write_text("from claude_sandbox.core import other\n"
                                    "VALUE = 42\nOTHER = other.OTHER\n")
    (core / "other.py").write_text("OTHER = 'other'\n")
    (core / "sub").mkdir()
    (core / "sub" / "__init__.py").write_text("")
    (core / "sub" / "leaf.py").write_text("")
    (core / "sub" / "twig.py").write_text("TWIG = 1\n")
    (core / "broken.py").write_text("from claude_sandbox.core import other\n"
                                    "raise RuntimeError('a module that fails')\n")
    (core / "stale.py").write_text("")
    (core / "racing.py").write_text(_RACING)
    (core / "blocked.py").write_text("import builtins\nbuiltins.BLOCKED_RAN = True\n")
    (core / "late.py").write_text("")
    path = _written(tmp_path, package)
    (core / "stale.py").write_text("CHANGED = True\n")
    script = _IMPORTS.format(site=str(package.parent))
    seen = {}
    for served in (True, False):
        (package / "__init__.py").write_text(
            "from claude_sandbox.core import bundle\n"
            f"bundle.BUNDLE = {path if served else str(tmp_path / 'none')!r}\n"
            "bundle.install(__path__[0])\n")
        ran = subprocess.run([sys.executable, "-I", "-S", "-c", script],
                             capture_output=True, text=True, check=True)
        seen[served] = json.loads(ran.stdout)
    assert (seen[True]["values"] == seen[False]["values"]
            == [42, "other", True, 1, False, True, [True], "refused", False])
    bundled, imported = seen[True]["modules"], seen[False]["modules"]
    assert set(bundled) == set(imported)
    for name, (loader, *attributes) in bundled.items():
        assert attributes == imported[name][1:], name
        assert loader == ("SourceFileLoader" if name.endswith(".stale") else "Finder"), name
    # Made here: all but the stale one (the import system's own), the one that failed,
    # and the one imported while a thread ran (the import system's, served by the finder).
    assert sorted(seen[True]["made"]) == sorted(
        f"claude_sandbox.core.{name}" for name in
        ("answer", "other", "sub", "sub.leaf", "sub.twig", "racing"))
