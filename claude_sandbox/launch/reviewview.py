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

from claude_sandbox.launch import gitrepo


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
            below = real_shows and not opaque(os.path.join(upper, path)) and _is_dir(
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


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def resolve(upper: str, workspace: str, rel: str) -> tuple[str | None, str]:
    """Where `rel` leads in the sessions' view, following links as the kernel would:
    (path relative to the workspace, kind), or (None, "out") when it leaves the workspace
    or loops. A program outside follows the same links once they are applied. One lstat
    or two a component: the walk keeps where it is."""
    top = workspace.rstrip("/")
    stack: list[tuple[str, bool]] = []  # (component, the real tree shows below it)
    pending = [p for p in rel.split("/") if p]
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if not stack:
                return None, "out"
            stack.pop()
            continue
        path = "/".join([*(p for p, _ in stack), part])
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
            return path, kind if not pending else "absent"
        stack.append((part, below))
    return "/".join(p for p, _ in stack), "dir"


def _is(upper: str, workspace: str, rel: str, *kinds: str) -> bool:
    """`rel` resolves to one of `kinds`; out of the workspace counts as there: git outside
    follows the link wherever it leads."""
    return resolve(upper, workspace, rel)[1] in (*kinds, "out")


def gitdir(upper: str, workspace: str, rel: str) -> bool:
    """git's test for a git directory, on `rel` as the sessions see it, links followed:
    a HEAD file, and objects/ and refs/ or a commondir file. A repository assembled over
    several sessions, or whose upper holds only new refs, is one."""
    def there(name: str, *kinds: str) -> bool:
        return _is(upper, workspace, f"{rel}/{name}", *kinds)

    return there("HEAD", "file") and ((there("objects", "dir") and there("refs", "dir"))
                                      or there("commondir", "file"))


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
