"""The workspace as review-mode sessions see it: the upper directory over the real one.

review.py lists and classes pending changes by what they will be once applied, and
a program outside follows links and finds git directories the way the kernel and
git do, through every link on the way. So each path here is resolved in the
sessions' view: an upper entry hides the real one, a whiteout deletes it, an opaque
directory hides everything real below it, and links are followed, at most as many
as the kernel follows, never out of the workspace unnoticed.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.launch.overlay import gitrepo


def opaque(path: str) -> bool:
    """overlayfs's mark on an upper directory that hides the real one's entries."""
    try:
        return os.getxattr(path, "user.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


_HOPS = 40  # the kernel's limit on links followed in one lookup


def _entry(upper: str, workspace: str, path: str, real_shows: bool) -> tuple[str, str, bool]:
    """(kind, link target, whether the real tree shows below it) of `path`, whose parents
    are directories in the sessions' view: the upper entry, or else the real one where it
    shows. Kinds: dir, file, link, other, absent."""
    try:
        info = os.lstat(os.path.join(upper, path))
    except OSError:
        info = None
    if info is not None:
        mode = info.st_mode
        if stat.S_ISCHR(mode) and info.st_rdev == 0:
            return "absent", "", False  # a whiteout
        if stat.S_ISDIR(mode):
            below = real_shows and not opaque(os.path.join(upper, path)) and is_dir(
                os.path.join(workspace, path))
            return "dir", "", below
        if stat.S_ISLNK(mode):
            return "link", os.readlink(os.path.join(upper, path)), False
        return ("file" if stat.S_ISREG(mode) else "other"), "", False
    if not real_shows:
        return "absent", "", False
    try:
        info = os.lstat(os.path.join(workspace, path))
    except OSError:
        return "absent", "", False
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        return "dir", "", True
    if stat.S_ISLNK(mode):
        return "link", os.readlink(os.path.join(workspace, path)), False
    return ("file" if stat.S_ISREG(mode) else "other"), "", False


def is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


_STEPS = 4096  # components one resolution may walk: past it, the link counts as out


def resolve(upper: str, workspace: str, rel: str, budget: list[int] | None = None
            ) -> tuple[str | None, str]:
    """Where `rel` leads in the sessions' view, following links as the kernel would:
    (path relative to the workspace, kind), or (None, "out") when it leaves the workspace,
    loops, climbs with `..` past a component that is not there (it leads out once that
    is made, or deleted), or walks more than _STEPS components. A program outside
    follows the same links once they are applied. One lstat or two a component.
    `budget`, shared by the resolutions of one listing: the components left to walk in
    all; once it is spent every link counts as out, so a listing always ends."""
    top = workspace.rstrip("/")
    stack: list[tuple[str, bool]] = []  # (path so far, the real tree shows below it)
    pending = [p for p in rel.split("/") if p]
    hops = steps = 0
    while pending:
        steps += 1
        if budget is not None:
            budget[0] -= 1
        if steps > _STEPS or (budget is not None and budget[0] < 0):
            return None, "out"
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if not stack:
                return None, "out"
            stack.pop()
            continue
        path = f"{stack[-1][0]}/{part}" if stack else part
        kind, target, below = _entry(upper, workspace, path, stack[-1][1] if stack else True)
        if kind == "link":
            hops += 1
            if hops > _HOPS:
                return None, "out"
            if target.startswith("/"):
                if target != top and not target.startswith(top + "/"):
                    return None, "out"
                stack, target = [], target[len(top):]
            pending = [p for p in target.split("/") if p] + pending
            continue
        if kind != "dir":
            if ".." in pending:
                return None, "out"
            return path, kind if not pending else "absent"
        stack.append((path, below))
    return (stack[-1][0] if stack else ""), "dir"


def _is(upper: str, workspace: str, rel: str, *kinds: str) -> bool:
    """`rel` resolves to one of `kinds`; out of the workspace counts as there: git outside
    follows the link wherever it leads."""
    return resolve(upper, workspace, rel)[1] in (*kinds, "out")


def gitdir(upper: str, workspace: str, rel: str) -> bool:
    """git's test for a git directory, on `rel` as the sessions see it, links followed as
    git follows them: a HEAD (a file, or a link), and objects and refs that are there at
    all (git asks only access(X_OK)), or a commondir file. A repository assembled over
    several sessions, or whose upper holds only new refs, is one."""
    def there(name: str, *kinds: str) -> bool:
        return _is(upper, workspace, f"{rel}/{name}" if rel else name, *kinds)

    head = (f"{rel}/HEAD" if rel else "HEAD")
    linked = _entry_kind(upper, workspace, head) == "link"
    return (linked or there("HEAD", "file")) and (
        (there("objects", "dir", "file") and there("refs", "dir", "file"))
        or there("commondir", "file"))


def _entry_kind(upper: str, workspace: str, rel: str) -> str:
    """The kind of `rel` itself, not followed (its parents resolved)."""
    parent, _, name = rel.rpartition("/")
    where, kind = resolve(upper, workspace, parent) if parent else ("", "dir")
    if where is None or kind != "dir":
        return "absent"
    return _entry(upper, workspace, f"{where}/{name}" if where else name, True)[0]


GIT_NAMES = frozenset({"config", "HEAD", "commondir", "gitdir", "packed-refs"})


def git_marked(upper: str, workspace: str, rel: str) -> bool:
    """The directory holding `rel`, as the sessions see it, has something of a git
    directory's: objects/, refs/ or commondir."""
    parent = os.path.dirname(rel)
    return any(_is(upper, workspace, f"{parent}/{name}" if parent else name, "dir", "file")
               for name in ("objects", "refs", "commondir"))


def holds_repository(path: str) -> bool:
    """`path` (in the real workspace, not followed) is a git directory or holds one."""
    if os.path.basename(path) == ".git" or gitrepo.looks_like_gitdir(path):
        return True
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    return any(entry.name == ".git" or (entry.is_dir(follow_symlinks=False)
                                        and gitrepo.looks_like_gitdir(entry.path))
               for _, entry in gitrepo.walk(path))
