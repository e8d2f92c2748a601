"""Git repositories as the launcher reads them: found, parsed and validated without git.

The launcher never runs git on a repository the agent could have steered: an
`[include] path = /dev/tty`, a FIFO at `HEAD` or a `core.fsmonitor` would make
the launcher's own git read the terminal, block, or run a program (check 71).
What it needs it reads itself, here: where a workspace's git directory is, the
values of refs and HEAD, and whether a name is one git itself would make.
Every open is `O_NOFOLLOW | O_NONBLOCK` and checked to be a regular file
before a byte is read, so a planted link or FIFO costs nothing.

A git directory the launch does not find has no overlay: the session writes it
directly, hooks and config included, and git outside then runs them. So a
`.git` git would follow but this module cannot place (a link, a linked
worktree's directory outside its repository) refuses the launch instead of
being passed over.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_HEX = frozenset("0123456789abcdef")
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
SMALL = 1 << 16  # HEAD, commondir, gitdir, a ref: a line, never this long


@record
class Repository:
    """One git directory the sandbox shows as an overlay, and what it belongs to."""

    gitdir: str  # the common git directory: objects, refs, config, hooks
    top: str  # the working tree it serves ("" for a bare layout's own directory)
    why: str  # for explain: how the launch found it


def read_small(path: str, limit: int = SMALL) -> str | None:
    """A regular file's text, or None: absent, a link, a FIFO, a device, too long."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return os.read(fd, limit + 1).decode("utf-8", "surrogateescape")
    except OSError:
        return None
    finally:
        os.close(fd)


def is_object_id(text: str) -> bool:
    return len(text) in (40, 64) and set(text) <= _HEX


def valid_refname(name: str) -> bool:
    """git's check-ref-format rules, for a full name under refs/ (or a pseudo-ref)."""
    if not name or name.startswith("/") or name.endswith(("/", ".", ".lock")):
        return False
    if len(name) > 1024 or name.count("/") > 64:  # deeper than git makes, and than makedirs
        return False
    if ".." in name or "@{" in name or "//" in name or name == "@":
        return False
    if any(ord(c) < 0x20 or c in " ~^:?*[\\\x7f" for c in name):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in name.split("/"))


def ref_value(text: str | None) -> str | None:
    """A ref file's content if it is one git writes: an object id, or `ref: refs/...`."""
    if text is None or not text.endswith("\n") or text.count("\n") != 1:
        return None
    value = text[:-1]
    if is_object_id(value):
        return value
    if value.startswith("ref: ") and value[5:].startswith("refs/") and valid_refname(value[5:]):
        return value
    return None


def gitfile_target(path: str) -> str | None:
    """Where a `.git` file (`gitdir: PATH`) leads, resolved as git resolves it, or None.

    git strips every trailing CR and LF, joins a relative PATH to the file's directory,
    and lets the kernel resolve the result: `..` after a link climbs from the link's
    target, not from its name. A text-only reading (normpath) would judge another
    directory than the one git opens."""
    text = read_small(path)
    if text is None:
        return None
    text = text.rstrip("\r\n")
    if not text.startswith("gitdir: "):
        return None
    target = text[len("gitdir: "):]
    if not target or any(c in target for c in "\r\n\0"):
        return None
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


def link_on_the_way(dotgit: str, workspace: str) -> str | None:
    """The first symbolic link below `workspace` on the way the `.git` file `dotgit`
    names, as written (gitfile_target resolves it): only a session could have put one
    there, and a link the agent made leads the launch wherever the agent chose. A link
    outside the workspace (an operator's /home on another disk) is not the agent's."""
    text = read_small(dotgit)
    if text is None or not text.startswith("gitdir: "):
        return None
    current = os.path.dirname(dotgit)
    written = text[len("gitdir: "):].rstrip("\r\n")
    if written.startswith("/"):
        current = "/"
    for part in written.split("/"):
        if part in ("", "."):
            continue
        # Textual `..` is the kernel's own until a link was passed, and the first link
        # below the workspace ends the walk.
        current = os.path.dirname(current) if part == ".." else os.path.join(current, part)
        if (current + "/").startswith(workspace.rstrip("/") + "/") and os.path.islink(current):
            return current
    return None


def names_gitdir(dotgit: str, gitdir: str) -> bool:
    """Whether the `.git` entry at `dotgit` is still what leads to `gitdir`: that
    directory itself (not a link), or a regular `.git` file that names it or a linked
    worktree's directory inside it whose `commondir` leads back to it."""
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return os.path.realpath(dotgit) == os.path.realpath(gitdir)
    target = gitfile_target(dotgit) if stat.S_ISREG(mode) else None
    if target is None:
        return False
    real, common = os.path.realpath(target), os.path.realpath(gitdir)
    return real == common or (_in_worktrees(real, common)
                              and os.path.realpath(common_dir(real)) == common)


def common_dir(gitdir: str) -> str:
    """A linked worktree's git directory names the repository's in `commondir`."""
    text = read_small(os.path.join(gitdir, "commondir"))
    if text is None or not text.strip() or "\n" in text.rstrip("\n"):
        return gitdir
    return os.path.normpath(os.path.join(gitdir, text.rstrip("\n")))


def add_mode(path: str, bits: int, *, own_only: bool = False) -> int | None:
    """The mode `path` had, once `bits` are added to it; None when it is not a directory
    (a link is not one), is another user's (`own_only`), has them already, or cannot
    be changed.

    The directory is opened without following a link and changed through that
    descriptor: a link swapped in between a look and a chmod by path would have its
    target's mode changed instead (a key made world-readable)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if (own_only and info.st_uid != os.geteuid()) or mode & bits == bits:
            return None
        # An O_PATH descriptor takes no fchmod; its /proc link reaches the same inode.
        os.chmod(f"/proc/self/fd/{fd}", mode | bits)
    except OSError:
        return None
    finally:
        os.close(fd)
    return mode


def real_dir(path: str) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def looks_like_gitdir(path: str) -> bool:
    """git's own test for a git directory: HEAD, objects/ and refs/ (none a link)."""
    return (read_small(os.path.join(path, "HEAD")) is not None
            and real_dir(os.path.join(path, "objects")) and real_dir(os.path.join(path, "refs")))


def _in_worktrees(real: str, common: str) -> bool:
    """Whether `real` is a directory git makes for a linked worktree: `common`/worktrees/NAME."""
    return os.path.dirname(real) == os.path.join(common, "worktrees")


def find(workspace: str) -> tuple[Repository, ...]:
    """The git directories a launch in `workspace` overlays.

    The repository the workspace belongs to, found as git finds it: upward from
    the workspace until an entry named `.git`, without crossing into another
    file system (git stops there too). A `.git` file (a linked worktree, a
    submodule, a `.bare` layout) leads to the git directory it names, and a
    linked worktree's to the common one, where config, refs and hooks live: the
    overlay covers that. Submodules' git directories live inside it (modules/).
    A `.git` that is a symbolic link (or a FIFO, socket or device) is not
    followed: the launch is refused (SandboxError, status 77), with what to do.
    """
    directory = workspace
    try:
        device = os.lstat(workspace).st_dev
    except OSError:
        return ()
    while True:
        entry = os.path.join(directory, ".git")
        try:
            info = os.lstat(entry)
        except OSError:
            info = None
        if info is not None:
            return _at_entry(entry, info, directory, workspace)
        parent = os.path.dirname(directory)
        if parent == directory:
            return ()
        try:
            if os.lstat(parent).st_dev != device:
                return ()
        except OSError:
            return ()
        directory = parent


def _at_entry(entry: str, info: os.stat_result, directory: str,
              workspace: str) -> tuple[Repository, ...]:
    """The repository the `.git` entry git stops at leads to, if git would use one."""
    where = "the workspace's" if directory == workspace else f"{directory}'s"
    if stat.S_ISDIR(info.st_mode):
        return (Repository(entry, directory, f"{where} .git"),)
    if not stat.S_ISREG(info.st_mode):
        raise _not_followed(entry, info)
    target = gitfile_target(entry)
    if target is None:
        return ()  # git refuses a .git file it cannot parse: it writes nothing there
    link = link_on_the_way(entry, workspace)
    if link is not None:
        raise SandboxError(
            f"refusing to launch: {entry} names a git directory through {link}, a symbolic "
            f"link in the workspace (to {os.path.realpath(link)}); a session could have "
            "left it there to lead the launch to another repository, which the sandbox "
            "would then show and the session's end write; replace the link with the "
            "directory it stands for, or point the .git file at the git directory itself",
            EXIT_REFUSED)
    if common_dir(target) != target:
        common = _worktree_common(entry, target)
        return ((Repository(common, directory, f"the repository of {where} linked worktree"),)
                if common is not None else ())
    if looks_like_gitdir(target):  # a commondir in it is gitcheck's to take
        return (Repository(target, directory, f"the repository {where} .git file names"),)
    if os.path.lexists(os.path.join(target, "commondir")):
        raise _worktree_refused(entry, target, "its commondir is not a one-line file")
    return ()


def _worktree_common(entry: str, target: str) -> str | None:
    """A linked worktree's common git directory, by git's own test, or None.

    git makes the worktree's own directory (HEAD, index, logs) without objects/
    or refs/: it tests HEAD there and the rest in the common directory. That
    directory is written as much as the common one, so it must lie inside it,
    in worktrees/, where the common directory's overlay holds it too."""
    real = os.path.realpath(target)
    common = os.path.realpath(common_dir(real))
    if read_small(os.path.join(real, "HEAD")) is None or not looks_like_gitdir(common):
        return None  # git would not take it for a repository either
    if not _in_worktrees(real, common):
        raise _worktree_refused(entry, target, f"it is not in {common}/worktrees/, where "
                                "git makes a worktree's directory")
    return common


def _worktree_refused(entry: str, target: str, why: str) -> SandboxError:
    """git would write a worktree's directory that no overlay of the launch holds."""
    return SandboxError(
        f"refusing to launch: {entry} leads to {target}, a linked worktree's git directory, "
        f"and {why}; the sandbox could not hold its repository, so the session would write "
        "it directly; make the worktree again with `git worktree add`", EXIT_REFUSED)


def _not_followed(entry: str, info: os.stat_result) -> SandboxError:
    """Why a `.git` that is neither a directory nor a file refuses the launch.

    A link leads git to a directory the session would write directly, with no
    overlay and no rule, hooks and config included; a `.git` file leads git to
    the same place, and the launch follows that one to the directory it holds."""
    from shlex import quote  # the names are the user's: the command is pasted

    if not stat.S_ISLNK(info.st_mode):
        return SandboxError(f"refusing to launch: {entry} is a FIFO, socket or device, which "
                            "git never makes and would block on or misread; remove it",
                            EXIT_REFUSED)
    target = os.path.realpath(entry)
    return SandboxError(
        f"refusing to launch: {entry} is a symbolic link (to {target}); the sandbox cannot "
        "hold a git directory reached through a link, and the session would write it "
        "directly, hooks and config that git outside runs included; replace the link with "
        f"a .git file that git follows the same way: rm {quote(entry)} && "
        f"printf 'gitdir: %s\\n' {quote(target)} > {quote(entry)}", EXIT_REFUSED)


def walk(top: str, start: str = "", *, ordered: bool = False,
         unlisted: list[str] | None = None) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(path relative to `top`, entry) for everything under `top`/`start`; `ordered`: in
    name order within each directory. Iterative, bounded by the tree alone: directories
    are entered, links never followed. A directory that cannot be listed is skipped, and
    its relative path ("" for `top` itself) appended to `unlisted`: what it hides (a link
    at logs/HEAD behind a mode of 0311) is a check's to name."""
    stack = [start]
    while stack:
        relative = stack.pop()
        try:
            listed = os.scandir(os.path.join(top, relative))
            entries = sorted(listed, key=lambda e: e.name) if ordered else list(listed)
        except FileNotFoundError:
            continue  # gone since its entry was read: it hides nothing
        except OSError:
            if unlisted is not None:
                unlisted.append(relative)
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            yield name, entry
            if entry.is_dir(follow_symlinks=False):
                stack.append(name)


def loose_refs(gitdir: str) -> Iterator[tuple[str, str | None]]:
    """(refname, value or None if not a valid ref file) for every file under refs/."""
    for name, entry in walk(gitdir, "refs"):
        if entry.is_file(follow_symlinks=False) and not entry.name.endswith(".lock"):
            yield name, ref_value(read_small(entry.path))


def packed_refs(text: str | None) -> dict[str, str]:
    """packed-refs' `OID NAME` lines; comments and peeled (`^OID`) lines skipped."""
    found: dict[str, str] = {}
    for line in (text or "").splitlines():
        if line.startswith(("#", "^")):
            continue
        oid, _, name = line.partition(" ")
        if is_object_id(oid) and valid_refname(name):
            found[name] = oid
    return found


def all_refs(gitdir: str) -> dict[str, str]:
    """Every ref's value as git reads it: a loose file wins over its packed line."""
    refs = packed_refs(read_small(os.path.join(gitdir, "packed-refs"), 256 << 20))
    refs.update((name, value) for name, value in loose_refs(gitdir) if value is not None)
    return refs
