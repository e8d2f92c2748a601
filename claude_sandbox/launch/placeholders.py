"""Placeholders for absent control paths: made before the sandbox starts, removed after.

A protected path that does not exist yet needs something to mount over, or
the agent could create it (controlfiles.py). The launcher makes that
something (an empty directory, or a neutral file inside .git), and removes
it when the session ends. A launcher that is killed cannot clean up, so each
launch writes a ledger of what it made into the user's state store, and every
launch first removes what the ledgers of dead launchers name, but only where
the path still holds exactly the placeholder that was made (same inode, still
empty or still its neutral content): nothing else is ever removed.

Two launches in one workspace share placeholders: a launch that finds a path
another live launch's ledger names copies that row into its own ledger, and a
path a live ledger names is left for that launch to remove, so the last one
ends it (a placeholder removed under a running session would end its hold).
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.process import pid_alive
from claude_sandbox.launch.controlfiles import Placeholder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

LEDGER_DIR = "placeholders"


def _ledger(store: str, pid: int) -> str:
    return os.path.join(store, LEDGER_DIR, str(pid))


# A ledger is one line a placeholder: kind, dev, ino, then path and content with
# unicode_escape, tab-separated. Not JSON: json imports re, milliseconds at every launch.


def _read(path: str) -> list[dict[str, object]]:
    try:
        with open(path, encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except (OSError, ValueError):
        return []
    rows: list[dict[str, object]] = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) != 5 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        try:
            path_, content = (f.encode("ascii").decode("unicode_escape") for f in fields[3:])
        except (UnicodeError, ValueError):
            continue
        rows.append({"kind": fields[0], "dev": int(fields[1]), "ino": int(fields[2]),
                     "path": path_, "content": content})
    return rows


def _live_rows(store: str, me: int) -> list[dict[str, object]]:
    """The rows of every other live launch's ledger."""
    directory = os.path.join(store, LEDGER_DIR)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    rows: list[dict[str, object]] = []
    for name in names:
        if name.isdigit() and int(name) != me and pid_alive(int(name)):
            rows += _read(os.path.join(directory, name))
    return rows


def made_by_others(store: str) -> frozenset[str]:
    """Paths that hold, exactly, a placeholder another live launch made.

    Such a path is absent as far as this launch's plan goes: planning inside it
    (`.git/config` inside another session's empty `.git`) would try to create in a
    directory that is read-only until that session ends.
    """
    return frozenset(str(row.get("path")) for row in _live_rows(store, os.getpid())
                     if _still_ours(row))


def _claimed_by_others(store: str, me: int) -> set[str]:
    return {str(row.get("path")) for row in _live_rows(store, me)}


def _still_ours(row: dict[str, object]) -> bool:
    """Whether the path holds exactly the placeholder the row records.

    A row with inode 0 is one a launch was about to make when it died: the path
    must then hold that placeholder's kind and content, made by this user.
    """
    path = str(row.get("path"))
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if row.get("ino") == 0:
        if info.st_uid != os.getuid():
            return False
    elif (info.st_dev, info.st_ino) != (row.get("dev"), row.get("ino")):
        return False
    if row.get("kind") == "dir":
        return stat.S_ISDIR(info.st_mode) and not os.listdir(path)
    if not stat.S_ISREG(info.st_mode):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read() == row.get("content")
    except OSError:
        return False


def _remove(rows: Iterable[dict[str, object]], keep: set[str]) -> list[str]:
    """Remove each placeholder that is still exactly ours; the paths left behind."""
    left = []
    for row in rows:
        path = str(row.get("path"))
        if path in keep:
            continue
        if not _still_ours(row):
            if os.path.lexists(path):
                left.append(path)
            continue
        try:
            if row.get("kind") == "dir":
                os.chmod(path, 0o700)
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            left.append(path)
    return left


def sweep(store: str, dead: int = 0) -> None:
    """Remove what killed launchers left: their placeholders and their ledgers.

    `dead`: a launcher known to be gone though its pid still exists (a zombie
    not yet reaped, when the janitor sweeps right after it died).
    """
    directory = os.path.join(store, LEDGER_DIR)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.isdigit() or (int(name) != dead and pid_alive(int(name))):
            continue
        ledger = os.path.join(directory, name)
        _remove(_read(ledger), _claimed_by_others(store, int(name)))
        try:
            os.unlink(ledger)
        except OSError:
            pass


class Made:
    """The placeholders one launch made; `remove()` once the session is over."""

    def __init__(self, store: str, rows: list[dict[str, object]]) -> None:
        self._store = store
        self._rows = rows

    def remove(self) -> list[str]:
        """Remove them; the paths that could not be (someone changed them)."""
        if not self._rows:
            return []
        me = os.getpid()
        left = _remove(self._rows, _claimed_by_others(self._store, me))
        self._rows = []
        try:
            os.unlink(_ledger(self._store, me))
        except OSError:
            pass
        return left


def make(store: str, wanted: Sequence[Placeholder], held: Sequence[str] = ()) -> Made:
    """Create each placeholder that is still absent, recording each in the ledger.

    `sweep` removes only what a ledger names and the path still holds exactly.
    """
    others = {str(row.get("path")): row for row in _live_rows(store, os.getpid())}
    shared = [others[path] for path in held if path in others]
    if not wanted and not shared:
        return Made(store, [])
    os.makedirs(os.path.join(store, LEDGER_DIR), mode=0o700, exist_ok=True)
    rows: list[dict[str, object]] = list(shared)  # another launch's, now ours as well
    ledger = _ledger(store, os.getpid())
    # Written before anything is made: a launcher killed while it makes them leaves
    # a ledger that names each (inode 0: about to be made), so its janitor, or the
    # next launch, removes what it finds there that is exactly such a placeholder.
    planned = [{"path": item.path, "kind": item.kind, "content": item.content,
                "dev": 0, "ino": 0} for item in wanted]
    _write_ledger(ledger, rows + planned)
    created: list[Placeholder] = []
    for item in wanted:
        try:
            if item.kind == "dir":
                os.mkdir(item.path, 0o755)
            else:
                fd = os.open(item.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(item.content)
        except FileExistsError:
            continue  # made meanwhile (another launch): held read-only all the same
        except OSError as error:
            Made(store, rows + _rows_of(created)).remove()
            raise SandboxError(
                f"cannot make the placeholder {item.path} that keeps a control path from "
                f"being created inside ({error.strerror})", EXIT_REFUSED) from None
        created.append(item)
    # The inodes replace the plan, one write for them all.
    rows += _rows_of(created)
    for item in created:
        if item.kind == "dir":
            os.chmod(item.path, 0o555)  # nothing is created in it from outside either
    if rows:
        _write_ledger(ledger, rows)
    else:
        os.unlink(ledger)
    return Made(store, rows)


def _rows_of(created: Sequence[Placeholder]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for item in created:
        info = os.lstat(item.path)
        rows.append({"path": item.path, "kind": item.kind, "content": item.content,
                     "dev": info.st_dev, "ino": info.st_ino})
    return rows


def _write_ledger(path: str, rows: list[dict[str, object]]) -> None:
    def escaped(value: object) -> str:
        return str(value).encode("unicode_escape").decode("ascii").replace("\t", "\\t")

    temporary = f"{path}.part"
    with open(temporary, "w", encoding="ascii") as handle:
        for row in rows:
            handle.write(f"{row.get('kind')}\t{row.get('dev')}\t{row.get('ino')}\t"
                         f"{escaped(row.get('path'))}\t{escaped(row.get('content', ''))}\n")
    os.replace(temporary, path)
