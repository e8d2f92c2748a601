"""`claude-sandbox review apply` and `discard`: pending changes to the real workspace, or away.

What the user accepts is written into the real workspace by this process, outside
the sandbox, with the agent stopped (the store's lock, review.py). Nothing is
written through a link: each parent directory is opened one name at a time with
O_NOFOLLOW, so a link already in the real workspace (or one applied earlier)
cannot lead a write elsewhere, and each file is written to a fresh name (O_EXCL)
and renamed into place. Mode bits are kept, never set-user-ID, set-group-ID or
sticky. A FIFO, socket or device is never applied. A git directory is applied by
the rule a live session's end uses (gitapply.py), checked after (gitcheck.py), and
what that rule did not carry over is kept aside in the store and named.

An applied or discarded change leaves the upper directory, so the next session
sees the real workspace there again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time

from claude_sandbox.launch.overlay import gitapply, gitcheck, gitrepo, review, reviewview
from claude_sandbox.launch.overlay.gitsession import remove_tree, strip_made
from claude_sandbox.launch.overlay.review import Change

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotApplied(Exception):
    """One change could not be applied: the message says why; it stays pending."""


def apply(directory: str, workspace: str, chosen: Sequence[Change],
          quarantine: gitcheck.Quarantine, *, force: bool = False,
          controls: frozenset[str] = gitapply.CONTROLS) -> tuple[list[str], bool]:
    """Apply each chosen change; (lines to print, whether every one was applied).

    Directories that replace old ones first, the repositories last: their HEAD and
    index match the files the session left. A path the user changed in the workspace
    since the sessions first changed it is not overwritten unless `force`: nothing of
    the user's is lost unasked."""
    upper = os.path.join(directory, "upper")
    seen = review.load_seen(directory)
    order = sorted(chosen, key=lambda c: (c.what != "replaced", c.what == "repository",
                                          c.path.count("/"), c.path))
    lines: list[str] = []
    # Each directory the changes could make a git directory, and whether it is one now.
    was_git = {rel: _git_follows(os.path.join(workspace, rel))
               for rel in _candidates(upper, workspace, chosen)}
    complete = True
    for change in order:
        if change.refused:
            lines.append(f"not applied: {change.path}: {change.refused}")
            complete = False
            continue
        conflict = "" if force or change.what == "repository" else \
            review.changed_since(seen, workspace, change.path)
        if conflict:
            lines.append(f"not applied: {change.path}: {conflict}; compare with "
                         "`claude-sandbox review diff`, then apply it with --force, or "
                         "discard it")
            complete = False
            continue
        try:
            if change.what == "repository":
                lines += _apply_repository(directory, workspace, change.path, quarantine,
                                           controls)
            else:
                _apply_one(upper, workspace, change)
                lines.append(f"applied: {change.what} {change.path}")
            seen.pop(change.path, None)  # what a later session changes there is new
        except (NotApplied, OSError) as error:
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            lines.append(f"not applied: {change.path}: {why}")
            complete = False
    lines += _made_repositories(workspace, was_git, quarantine)
    _prune(upper, workspace)
    review.save_seen(directory, seen)
    return lines, complete


def _candidates(upper: str, workspace: str, chosen: Sequence[Change]) -> set[str]:
    """The workspace's top, every parent of a chosen change, and where each chosen `.git`
    file points: the directories an apply could turn into git directories."""
    found = {""}
    for change in chosen:
        parts = change.path.split("/")
        found |= {"/".join(parts[:depth]) for depth in range(1, len(parts) + 1)}
        if parts[-1] == ".git" and change.kind == "file":
            text = gitrepo.read_small(os.path.join(upper, change.path)) or ""
            target = os.path.realpath(os.path.join(workspace, os.path.dirname(change.path),
                                                   text[8:].strip()))
            if text.startswith("gitdir: ") and target.startswith(workspace.rstrip("/") + "/"):
                found.add(os.path.relpath(target, workspace))
    return found


def _made_repositories(workspace: str, was_git: dict[str, bool],
                       quarantine: gitcheck.Quarantine) -> list[str]:
    """A directory the applied changes made a git directory (a HEAD beside objects and
    refs, applied in pieces; the workspace's top; what a new `.git` file names) was made
    by the sessions: checked, and its hooks and configuration held as a live session's
    new repository's are. Repositories that were git directories before stay as they are."""
    lines = []
    for rel in sorted(r for r, before in was_git.items() if not before):
        real = os.path.join(workspace, rel) if rel else workspace
        if os.path.islink(real) or not _git_follows(real):
            continue
        gitcheck.check(real, quarantine)
        strip_made(real, 0, quarantine)
        lines += [f"{rel or 'the workspace'} became a git directory by the changes applied: "
                  "checked, its hooks and configuration held", *quarantine.lines]
        quarantine.lines.clear()
    return lines


def _git_follows(path: str) -> bool:
    """git's own test, links followed as git follows them: a HEAD (a file or a link),
    objects and refs it may enter (access X_OK), or a commondir."""
    head = os.path.join(path, "HEAD")
    return (os.path.isfile(head) or os.path.islink(head)) and (
        (os.access(os.path.join(path, "objects"), os.X_OK)
         and os.access(os.path.join(path, "refs"), os.X_OK))
        or os.path.isfile(os.path.join(path, "commondir")))


def discard(directory: str, paths: Sequence[str], workspace: str) -> list[str]:
    """Drop what waits at or under each path (relative to the workspace) from the upper
    directory: the sessions see the real workspace there again."""
    upper = os.path.join(directory, "upper")
    lines = []
    for rel in paths:
        path = os.path.join(upper, rel) if rel else upper
        if _through_link(upper, rel):
            lines.append(f"nothing waits at {rel} (a link on the way: discard the link)")
            continue
        if not os.path.lexists(path):
            lines.append(f"nothing waits at {rel}")
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            remove_tree(path)
            os.makedirs(upper, mode=0o700, exist_ok=True)
        else:
            os.unlink(path)
        lines.append(f"discarded: {rel or 'everything'}")
    _prune(upper, workspace)
    seen = review.load_seen(directory)
    review.save_seen(directory, {path: value for path, value in seen.items()
                                 if not any(not rel or path == rel or path.startswith(rel + "/")
                                            for rel in paths)})
    return lines


def _through_link(upper: str, rel: str) -> bool:
    """A parent of `rel` in the upper directory is not a directory (a link the agent made
    would lead the removal out of the store)."""
    parts = rel.split("/") if rel else []
    for depth in range(1, len(parts)):
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(upper, *parts[:depth])).st_mode):
                return True
        except OSError:
            return False
    return False


def _apply_one(upper: str, workspace: str, change: Change) -> None:
    source = os.path.join(upper, change.path)
    name = os.path.basename(change.path)
    parent = _open_parent(upper, workspace, change.path)
    try:
        if change.what == "deleted":
            _remove(parent, name)
            os.unlink(source)
        elif change.kind == "dir":
            if change.what == "replaced":
                _empty_but(parent, name, set(os.listdir(source)))
            elif not _is_dir(parent, name):
                _remove(parent, name)
                os.mkdir(name, _dir_mode(source), dir_fd=parent)
            with contextlib.suppress(OSError):
                os.removexattr(source, "user.overlay.opaque", follow_symlinks=False)
        elif change.kind == "link":
            temporary = _fresh(name)
            os.symlink(os.readlink(source), temporary, dir_fd=parent)
            if _is_dir(parent, name):
                _remove(parent, name)  # the session replaced a directory with this link
            _into_place(parent, temporary, name)
            os.unlink(source)
        elif change.kind == "file":
            _copy_file(source, parent, name)
            os.unlink(source)
        else:
            raise NotApplied("a FIFO, socket or device is never applied")
    finally:
        os.close(parent)


def _open_parent(upper: str, workspace: str, rel: str) -> int:
    """The real parent directory of `rel`, made where missing, never through a link."""
    fd = os.open(workspace, _DIR)
    done = ""
    try:
        for part in rel.split("/")[:-1]:
            done = f"{done}/{part}" if done else part
            try:
                next_fd = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, _dir_mode(os.path.join(upper, done)), dir_fd=fd)
                next_fd = os.open(part, _DIR, dir_fd=fd)
            except (NotADirectoryError, OSError) as error:
                raise NotApplied(f"{done} in the workspace is not a directory (a link or "
                                 f"a file: {error.strerror}); apply it first, or move it") \
                    from None
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copy_file(source: str, parent: int, name: str) -> None:
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotApplied("no longer a regular file")
        temporary = _fresh(name)
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            while chunk := os.read(fd, 1 << 20):
                os.write(out, chunk)
            os.fchmod(out, stat.S_IMODE(info.st_mode) & 0o755)  # no set-id, no sticky, no
            # write for group and others: the file is the user's now
        finally:
            os.close(out)
        if _is_dir(parent, name):
            _remove(parent, name)  # the session replaced a directory with this file
        _into_place(parent, temporary, name)
    finally:
        os.close(fd)


def _apply_repository(directory: str, workspace: str, rel: str,
                      quarantine: gitcheck.Quarantine, controls: frozenset[str]) -> list[str]:
    upper = os.path.join(directory, "upper", rel)
    real = os.path.join(workspace, rel)
    os.close(_open_parent(os.path.join(directory, "upper"), workspace, rel))
    if os.path.islink(real) or (os.path.lexists(real) and not os.path.isdir(real)):
        raise NotApplied("the workspace has a link or a file there")
    # A git directory the real workspace did not hold before this apply was made by
    # the sessions, perhaps over several of them (a config applied earlier as a plain
    # file): its hooks and configuration are the agent's, and are held as a live
    # session's new repository's are.
    made = not gitrepo.looks_like_gitdir(real)
    if os.path.isdir(real):
        # Only regular files and directories, before anything is written there: a link
        # applied earlier as a plain change (logs -> ~) must not lead git's files out.
        gitcheck.check(real, quarantine)
    result = gitapply.apply(upper, real, review.base(directory, rel, real), workspace,
                            copy=True, controls=controls)
    if os.path.isdir(real):  # absent when the rule carried nothing over
        gitcheck.check(real, quarantine)
    if made:
        strip_made(real, 0, quarantine)
    lines = [f"applied: repository {rel} (objects, refs, HEAD, index and allowed "
             "configuration, by rule)", *result.lines, *quarantine.lines]
    quarantine.lines.clear()
    if result.kept:
        kept = os.path.join(directory, "kept", time.strftime("%Y%m%dT%H%M%S"), rel)
        os.makedirs(os.path.dirname(kept), mode=0o700, exist_ok=True)
        os.rename(upper, kept)
        lines.append(f"what the sessions' git wrote in {rel} and was not applied is kept "
                     f"in {kept}")
    else:
        remove_tree(upper)
    return lines


def _prune(upper: str, workspace: str) -> None:
    """Remove the upper's directories left empty that change nothing: not opaque, and
    a directory in the real workspace too. Iterative: deepest first."""
    directories = [rel for rel, entry in gitrepo.walk(upper)
                   if entry.is_dir(follow_symlinks=False)]
    for rel in sorted(directories, key=lambda r: r.count("/"), reverse=True):
        path, real = os.path.join(upper, rel), os.path.join(workspace, rel)
        if os.path.islink(real) or not os.path.isdir(real) or reviewview.opaque(path):
            continue  # a new or replaced directory: still a change
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _remove(parent: int, name: str) -> None:
    """Remove `name` in `parent`, a directory tree without following links; never a git
    directory or a tree that holds one: history is not deleted by a review."""
    try:
        info = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        if reviewview.holds_repository(f"/proc/self/fd/{parent}/{name}"):
            raise NotApplied(f"{name} is, or holds, a git directory: never deleted by a "
                             "review; delete it yourself")
        try:
            shutil.rmtree(name, dir_fd=parent)
        except RecursionError:  # deeper than the interpreter's stack: coreutils
            import subprocess

            from claude_sandbox.core import paths

            subprocess.run([paths.tool("rm"), "-rf", "--one-file-system", "--",
                            f"/proc/self/fd/{parent}/{name}"], pass_fds=(parent,),
                           check=False, capture_output=True, stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    else:
        os.unlink(name, dir_fd=parent)


def _empty_but(parent: int, name: str, keep: set[str]) -> None:
    """A directory the session replaced: the real one loses what the new one lacks."""
    if not _is_dir(parent, name):
        _remove(parent, name)
        os.mkdir(name, 0o755, dir_fd=parent)
        return
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        for entry in os.listdir(fd):
            if entry not in keep:
                _remove(fd, entry)
    finally:
        os.close(fd)


def _is_dir(parent: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode)
    except FileNotFoundError:
        return False


def _dir_mode(path: str) -> int:
    try:
        return stat.S_IMODE(os.lstat(path).st_mode) & 0o777
    except OSError:
        return 0o755


def _fresh(name: str) -> str:
    return f".{name[:200]}.csbx-{os.urandom(4).hex()}"


def _into_place(parent: int, temporary: str, name: str) -> None:
    os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)


