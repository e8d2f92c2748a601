"""The memos of large directories the root-only walk lists (rootonly.py).

A directory with many entries, owned by another user than root, keeps each entry's
inode, and what was judged of those not skipped, in a file of its own beside the walk's
cache: listing it again after one change then costs a readdir and a set difference,
not a stat per entry. A memo only saves time: one that cannot be read or written, or
that does not parse, stands for none. A full rebuild writes every memo anew and removes
the rest, so that the memos of directories gone or no longer shown do not stay in the
store for good.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.launch.facts import rootcache

# The verdicts a memo may hold, as rootonly.py writes them: a file or a directory to
# hide, a directory to descend into, an entry to skip.
CODES = frozenset({"f", "D", "d", "s"})


class Listings:
    """The judged entries of large directories, one file each under `directory`: the
    names, then their keys (the inode, and `/` after it for a directory), then `name,
    code` for each entry not skipped; NUL between fields, two NULs between the three
    parts (a name is never empty and holds no NUL)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.written: set[str] = set()  # the memos saved by this launch, by file name

    def _path(self, listed: str) -> str:
        return os.path.join(self.directory, paths.sha256_hex(
            listed.encode("utf-8", "surrogateescape"))[:24])

    def load(self, listed: str) -> tuple[dict[str, str], dict[str, str]]:
        """Every entry's key by name, and the code of each not skipped ({} when none)."""
        try:
            # As the cache is read: no link followed, no FIFO waited on (rootcache.py).
            data = rootcache.read_own(self._path(listed))
            parts = (data or b"").decode("utf-8", "surrogateescape").split("\0\0")
            names, keys, marks = (part.split("\0") for part in parts)
            known = dict(zip(names, keys, strict=True))
            codes = dict(zip(marks[0::2], marks[1::2], strict=True)) if marks != [""] else {}
        except (OSError, ValueError):
            return {}, {}
        if not set(codes.values()) <= CODES or not codes.keys() <= known.keys():
            return {}, {}
        return known, codes

    def save(self, listed: str, known: dict[str, str], codes: dict[str, str]) -> None:
        text = "\0\0".join(["\0".join(known), "\0".join(known.values()),
                            "\0".join(f"{name}\0{code}" for name, code in codes.items())])
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            path = self._path(listed)
            rootcache.write_new(path, text.encode("utf-8", "surrogateescape"))
            self.written.add(os.path.basename(path))
        except OSError:
            pass  # a memo only saves time

    def prune(self) -> None:
        """After a full rebuild, which wrote the memo of every large directory it listed:
        remove the others (a directory gone, or no longer large or shown), which would
        otherwise stay in the store for good."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name not in self.written:
                try:
                    os.unlink(os.path.join(self.directory, name))
                except OSError:
                    pass  # another launch's rebuild took it first, or a directory: left


class Rebuild(Listings):
    """A full rebuild: every entry judged again, the memos written anew."""

    def load(self, listed: str) -> tuple[dict[str, str], dict[str, str]]:
        return {}, {}


class ReadOnly(Listings):
    """The memos read, never written (`explain`)."""

    def save(self, listed: str, known: dict[str, str], codes: dict[str, str]) -> None:
        pass

    def prune(self) -> None:
        pass


class ReadOnlyRebuild(ReadOnly, Rebuild):
    """A full rebuild for `explain`: every entry judged again, no memo written."""
