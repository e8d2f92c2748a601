"""The launch-path bundle (core/bundle.py): every module of the core venv's package but
the tools and the installer, compiled as the import system compiles it, with its
source's size and time; written by the installer after the package."""

from __future__ import annotations

import marshal
import os
import stat
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from claude_sandbox.core import bundle
from claude_sandbox.install.report import Report, write_bytes


def _sources(package: Path) -> dict[str, tuple[Path, bool]]:
    """Each module the bundle holds: its name, its source, whether it is a package."""
    found = {}
    for source in sorted(package.rglob("*.py")):
        relative = source.relative_to(package)
        if "__pycache__" in relative.parts or relative.parts[0] in ("tools", "install"):
            continue  # the tools and the installer run from the tools venv
        parts = ["claude_sandbox", *relative.with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        if len(parts) > 1:  # the package itself is imported before the finder exists
            found[".".join(parts)] = (source, is_package)
    return found


def build(package: Path) -> bytes:
    """The bundle's bytes for the package installed at `package` (its directory)."""
    index: dict[str, bundle.Entry] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, (source, is_package) in _sources(package).items():
        info = os.stat(source)
        code = compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
        blob = marshal.dumps(code)
        index[name] = (str(source), is_package, info.st_size, info.st_mtime_ns, offset,
                       len(blob))
        blobs.append(blob)
        offset += len(blob)
    table = marshal.dumps(index)
    return b"".join([bundle.header(MAGIC_NUMBER, str(package)), len(table).to_bytes(8, "big"),
                     table, *blobs])


def current(path: str, package: Path) -> bool:
    """Whether the bundle at `path` holds every module of `package` as its source is now
    (marshal's bytes differ from one build to the next, so they are not compared)."""
    found = bundle.read(path, str(package), MAGIC_NUMBER)
    if found is None:
        return False
    index = found[0]
    sources = _sources(package)
    if index.keys() != sources.keys():
        return False
    for name, (source, is_package) in sources.items():
        entry = index[name]
        # As the finder looks at it (core/bundle.py): the entry, not a link to it.
        info = os.stat(source, follow_symlinks=False)
        if (not stat.S_ISREG(info.st_mode)
                or entry[:4] != (str(source), is_package, info.st_size, info.st_mtime_ns)):
            return False
    return True


def install_bundle(report: Report, package: Path) -> None:
    report.step(f"launch bundle {bundle.BUNDLE}", not current(bundle.BUNDLE, package),
                lambda: write_bytes(bundle.BUNDLE, build(package), 0o644))
