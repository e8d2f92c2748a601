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
