"""The installer's plumbing: each step says what it would change, and changes it only
when it must (`--check` changes nothing); files are written whole, root's, in place."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from claude_sandbox.core import paths


class InstallError(Exception):
    pass


@dataclass
class Report:
    check: bool
    changed: int = 0

    def step(self, what: str, needed: bool, action: Callable[[], None]) -> None:
        if not needed:
            print(f"  unchanged  {what}")
            return
        self.changed += 1
        if self.check:
            print(f"  would      {what}")
            return
        action()
        print(f"  changed    {what}")


def run(argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def write(path: str, text: str, mode: int) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".claude-sandbox.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.chown(temporary, 0, 0)
    os.replace(temporary, path)


def differs(path: str, text: str, mode: int) -> bool:
    try:
        with open(path) as handle:
            same = handle.read() == text
        info = os.lstat(path)
    except OSError:
        return True
    return not same or (info.st_mode & 0o7777) != mode or info.st_uid != 0


def sync(report: Report, what: str, root: Path, wanted: Mapping[str, str],
         present: Iterable[str], mode: int, after: Callable[[], object] | None = None) -> None:
    """One step that makes the files below `root` exactly `wanted` (relative path: text,
    written with `mode`): what `present` lists but `wanted` does not is removed, what
    differs is written, and `after` runs once either happened."""
    stale = set(present) - set(wanted)
    differ = [rel for rel, text in wanted.items() if differs(str(root / rel), text, mode)]

    def action() -> None:
        for rel in stale:
            (root / rel).unlink()
        for rel in differ:
            write(str(root / rel), wanted[rel], mode)
        if after is not None:
            after()
    report.step(what, bool(stale or differ), action)


def write_bytes(path: str, data: bytes, mode: int) -> None:
    staged = f"{path}.new"
    with open(staged, "wb") as handle:
        handle.write(data)
    os.chmod(staged, mode)
    os.replace(staged, path)


def read(path: str) -> str | None:
    """The file's text; None when it does not exist. One we cannot read stops the
    install with its path rather than being taken for absent and overwritten."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: cannot read it ({exc}); fix or move it and run "
                           "again") from None


def dpkg_installed(package: str) -> bool:
    if paths.which("dpkg-query", paths.SYSTEM_DIRS) is None:
        return True
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package],
                            capture_output=True, text=True, check=False)
    return result.stdout.endswith("installed") and "not-installed" not in result.stdout

