"""Review mode: what the sessions changed in the workspace waits in the store until applied.

With `workspace-mode = review` the whole workspace is one overlay (core/views.py):
the real workspace below, read-only, and an upper directory in the agent's
per-workspace store that takes every write, from one session to the next.
Nothing reaches the real workspace while a session runs, nor when it ends. The
next session sees the pending changes, and its launch says how many there are.

`claude-sandbox review` lists them (`changes`), with what can run or steer a
program outside first, in the classes of the session-end report (aftermath.py),
and applies or discards what the user chooses (reviewapply.py).

One session at a time: two overlays sharing one upper directory is undefined
in overlayfs. A session holds the store's lock for its whole life, and so does
`claude-sandbox review` while it works; a second one is refused (ADR 0012).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.overlay import aftermath, gitbase, gitrepo
from claude_sandbox.launch.overlay.reviewview import (
    GIT_NAMES,
    git_marked,
    gitdir,
    holds_repository,
    is_dir,
    opaque,
    resolve,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


@record
class Pending:
    """The store's pending changes for one workspace, locked by this process."""

    upper: str
    work: str
    lock: int
    count: int


@record
class Change:
    """One pending change, relative to the workspace.

    `what`: added, changed, deleted, replaced (a directory whose old entries go), or
    repository (a git directory's changes, applied by rule: gitapply.py). `kind`:
    file, dir, link, special, git, or "-" for a deletion. `klass`: the session-end
    report's class (aftermath.CLASSES), "" for ordinary source. `refused`: why it is
    never applied, or ""."""

    path: str
    what: str
    kind: str
    klass: str
    refused: str


def lock(directory: str, workspace: str) -> int:
    """The pending changes' lock, taken without waiting; a refusal while another holds it."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(directory, "lock"),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SandboxError(f"the changes pending review in {workspace} are in use by another "
                           "session or `claude-sandbox review`: review mode takes one at a "
                           "time; wait for it to end", EXIT_REFUSED) from None
    return fd


def open_pending(directory: str, workspace: str) -> Pending:
    """Lock the pending changes and make their directories; with none pending, note the
    workspace's repositories as they are now (the base `review apply` compares with)."""
    fd = lock(directory, workspace)
    try:
        upper, work = os.path.join(directory, "upper"), os.path.join(directory, "work")
        for path in (upper, work):
            os.makedirs(path, mode=0o700, exist_ok=True)
        count = count_pending(upper, workspace)
        if count == 0:
            _write_bases(directory, workspace)
    except BaseException:
        os.close(fd)
        raise
    return Pending(upper, work, fd, count)


def count_pending(upper: str, workspace: str) -> int:
    """How many changes wait: one walk of the upper directory, no file read."""
    return sum(1 for _ in _leaves(upper, workspace))


def pending_line(count: int, workspace: str, *, at_launch: bool) -> str:
    changes = "1 change" if count == 1 else f"{count} changes"
    if at_launch:
        return (f"{changes} from earlier sessions wait for review in {workspace}; the "
                "session sees them. `claude-sandbox review` lists them")
    return (f"the session's changes to {workspace} wait for review ({changes} in all); "
            "nothing reached the workspace. `claude-sandbox review` lists them, "
            "`claude-sandbox review apply` applies them")


def _leaves(upper: str, workspace: str) -> Iterator[tuple[str, os.DirEntry[str], bool]]:
    """(relative path, entry, is a repository) for what counts as one change: every
    non-directory, every directory that is a repository (not entered) or opaque or
    empty. A repository is told by its name, or by git's test (reviewview.gitdir).
    Iterative, links never followed; changes() sorts what it lists."""
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            with os.scandir(os.path.join(upper, relative)) as listed:
                entries = sorted(listed, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            if not entry.is_dir(follow_symlinks=False):
                yield name, entry, False
            elif entry.name == ".git" or (_has_head(upper, workspace, name)
                                          and gitdir(upper, workspace, name)):
                yield name, entry, True
            else:
                if opaque(entry.path) or not _has_entries(entry.path):
                    yield name, entry, False
                stack.append(name)


def changes(upper: str, workspace: str, control_names: frozenset[str]) -> list[Change]:
    """Every pending change, what can run or steer a program outside first (by the
    report's classes), refused ones among them, then ordinary source by path."""
    found = []
    budget = [_LISTING_STEPS]
    # The workspace's own top as a git directory (a HEAD, objects and refs put there):
    # git outside would take it for a bare repository, config and hooks included.
    top_is_git = gitdir(upper, workspace, "")
    for rel, entry, repository in _leaves(upper, workspace):
        real = os.path.join(workspace, rel)
        if repository:
            found.append(Change(rel, "repository", "git", "git", ""))
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as error:
            found.append(Change(rel, "added", "other", "special", "it cannot be read "
                                f"({error.strerror}): never applied; discard it"))
            continue
        mode = info.st_mode
        there = os.path.lexists(real)
        klass = _class(rel, mode, control_names)
        refused = ""
        if top_is_git and "/" not in rel and rel in _TOP_GIT:
            klass, refused = "git", ("with it the workspace's top is a git directory, whose "
                                     "config and hooks git outside would use: apply it "
                                     "yourself")
        if stat.S_ISDIR(mode):
            # A directory where the real path is something else, or hides what is there.
            replaced = there and (opaque(entry.path) or not is_dir(real))
            found.append(Change(rel, "replaced" if replaced else "added", "dir", klass,
                                refused))
        elif stat.S_ISCHR(mode) and info.st_rdev == 0:  # overlayfs's mark of a deletion
            refused = ("deleting a git directory, or a directory that holds one, is never "
                       "applied; delete it yourself" if holds_repository(real) else refused)
            found.append(Change(rel, "deleted", "-", klass, refused))
        elif stat.S_ISREG(mode):
            if entry.name == ".git":
                refused = refused or _gitfile_refusal(entry.path, upper, workspace, rel)
            if entry.name in GIT_NAMES and git_marked(upper, workspace, rel):
                klass = "git"  # a repository's file, before the repository is whole
            found.append(Change(rel, "changed" if there else "added", "file", klass, refused))
        elif stat.S_ISLNK(mode):
            out = resolve(upper, workspace, rel, budget)[0] is None
            if entry.name == ".git":
                refused = "a .git that is a link: git outside would follow it anywhere"
            found.append(Change(rel, "changed" if there else "added", "link",
                                "link-out" if out else klass, refused))
        else:
            found.append(Change(rel, "added", "special", "special",
                                "a FIFO, socket or device is never applied"))
    rank = {kind: index for index, (kind, _) in enumerate(aftermath.CLASSES)}
    return sorted(found, key=lambda c: (rank.get(c.klass, len(rank)), c.path))


def _class(rel: str, mode: int, control_names: frozenset[str]) -> str:
    parts = rel.split("/")
    if ".git" in parts[:-1]:
        return "git"
    if any(part in control_names for part in parts[:-1]):
        return "control"
    dotted = any(part.startswith(".") for part in parts[:-1])
    if stat.S_ISDIR(mode):
        return "control" if parts[-1] in control_names else ""
    return aftermath.name_class(rel, parts[-1], mode, dotted, control_names)


def _gitfile_refusal(path: str, upper: str, workspace: str, rel: str) -> str:
    """Why a `.git` file is never applied: it does not parse, or the directory it names,
    resolved in the sessions' view through every link, is not in the workspace."""
    text = gitrepo.read_small(path)
    if text is None or not text.startswith("gitdir: ") or "\n" in text.rstrip("\n"):
        return "a .git file that does not name a git directory"
    named = text[8:].strip()
    if named.startswith("/"):
        top = workspace.rstrip("/")
        if not named.startswith(top + "/"):
            return "a .git file that names a git directory outside the workspace"
        named = named[len(top) + 1:]
    else:
        parent = os.path.dirname(rel)
        named = f"{parent}/{named}" if parent else named
    if resolve(upper, workspace, named)[0] is None:
        return "a .git file that names a git directory outside the workspace"
    return ""


# Components all the links of one listing may walk: past it, each link counts as out.
_LISTING_STEPS = 500_000  # about ten seconds of lstat at worst
# What a git directory holds at its top: at the workspace's top they make one.
_TOP_GIT = frozenset({"HEAD", "config", "objects", "refs", "hooks", "info", "logs",
                      "packed-refs", "commondir", "index", "modules", "worktrees"})


def _has_head(upper: str, workspace: str, rel: str) -> bool:
    """An entry named HEAD in the directory, upper or real: git's test needs one, and
    this costs two lstats where the whole test costs a walk."""
    return any(os.path.lexists(os.path.join(top, rel, "HEAD")) for top in (upper, workspace))


def _has_entries(path: str) -> bool:
    try:
        with os.scandir(path) as listed:
            return any(True for _ in listed)
    except OSError:
        return False


# ------------------------------------------------- what the files were

_SEEN = "seen.json"


def _stat_of(path: str) -> list[int] | None:
    """What the real path is, to tell a later change by: a file's inode, size and
    modification time; a directory's inode, and its whole tree's entry count and latest
    change time (an edit deep below a directory the session deleted must count)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return [info.st_ino, info.st_size, info.st_mtime_ns]
    count, latest = 0, info.st_ctime_ns
    for _name, entry in gitrepo.walk(path):
        try:
            latest = max(latest, entry.stat(follow_symlinks=False).st_ctime_ns)
        except OSError:
            pass
        count += 1
    return [info.st_ino, count, latest]


def note_seen(directory: str, upper: str, workspace: str, since_ns: int) -> int:
    """At a session's end: for each pending change not noted yet, what the real path was
    (_stat_of, or absent). `review apply` compares: a path the user changed outside since
    is not overwritten unasked. One the user changed while the session ran (its change
    time at or after `since_ns`) is noted as changed already. Returns how many changes
    wait: the same walk count_pending makes."""
    seen = load_seen(directory)
    count = 0
    for rel, _entry, _repository in _leaves(upper, workspace):
        count += 1
        if rel in seen:
            continue
        path = os.path.join(workspace, rel)
        try:
            changed = os.lstat(path).st_ctime_ns >= since_ns
        except OSError:
            changed = False
        seen[rel] = _CHANGED if changed else _stat_of(path)
    _write_json(directory, _SEEN, seen)
    return count


_CHANGED = [-1, -1, -1]  # changed outside while a session ran: never equal to a stat


def save_seen(directory: str, seen: dict[str, list[int] | None]) -> None:
    _write_json(directory, _SEEN, seen)


def load_seen(directory: str) -> dict[str, list[int] | None]:
    return _read_json(directory, _SEEN)


def _read_json(directory: str, name: str) -> dict[str, Any]:
    """The object in `name`, or {} when it is absent, broken or not an object."""
    try:
        with open(os.path.join(directory, name), encoding="utf-8",
                  errors="surrogateescape") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def changed_since(seen: dict[str, list[int] | None], workspace: str, rel: str) -> str:
    """Why the real path may hold the user's own change the apply would overwrite, or ""."""
    if rel not in seen:
        return ("not noted when its session ended (an interrupted session): it may hold "
                "a change of yours")
    if seen[rel] == _CHANGED:
        return "changed in the workspace while the session ran"
    if _stat_of(os.path.join(workspace, rel)) != seen[rel]:
        return "changed in the workspace since the session changed it"
    return ""


def _write_json(directory: str, name: str, value: object) -> None:
    """`value` to `name` in `directory`, 0600, never through a link: a fresh `.part` file
    renamed over the name."""
    part = os.path.join(directory, name + ".part")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(part)  # a killed launch's; unlink does not follow a link
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with open(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        json.dump(value, handle)
    os.replace(part, os.path.join(directory, name))


# ------------------------------------------------- the repositories' bases

_BASES = "bases.json"


def _write_bases(directory: str, workspace: str) -> None:
    """Each repository in the workspace as it is before the first pending change: `review
    apply` then keeps a ref moved outside meanwhile, as a live session's end does."""
    bases = {}
    for repo in gitrepo.find(workspace):
        if (repo.gitdir + "/").startswith(workspace.rstrip("/") + "/"):
            snap = gitbase.snapshot(repo.gitdir)
            bases[os.path.relpath(repo.gitdir, workspace)] = [
                snap.head, [list(p) for p in snap.loose], [list(p) for p in snap.packed],
                snap.config]
    _write_json(directory, _BASES, bases)
    _write_json(directory, _SEEN, {})


def bases(directory: str) -> dict[str, Any]:
    """The repositories noted before the first pending change, by path in the workspace."""
    return _read_json(directory, _BASES)


def base(directory: str, rel: str, real: str) -> gitbase.Snapshot:
    """The base of the repository at `rel`: noted before the first pending change, or,
    for one the sessions made, what is there now. The index is always taken as it is
    now: the session's index matches the tree and HEAD it applies with."""
    now = gitbase.snapshot(real)
    try:
        head, loose, packed, config = bases(directory)[rel]
        return gitbase.Snapshot(head, tuple(tuple(p) for p in loose),
                                 tuple(tuple(p) for p in packed), config, now.index)
    except (KeyError, ValueError, TypeError):
        return now
