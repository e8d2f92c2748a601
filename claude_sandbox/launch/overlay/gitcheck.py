"""A git directory holds only what git makes: checked before every launch and after it.

git outside writes through whatever it finds in its directory: a link at
`logs/HEAD` to `~/.bashrc` makes the user's next `git checkout` append a line
the next shell runs; a FIFO at `HEAD` hangs every git that opens it. Git
itself makes only regular files and directories. So, by class and not by a
list of names, everything else anywhere in a git directory (a symbolic link,
FIFO, socket or device) is moved out to a quarantine in the user's store and
named, with how to put it back (check 70). The few files whose content steers
where git looks (HEAD, commondir, gitdir, a linked worktree's files) must be
regular files that parse; a bad one is quarantined too.

A directory its user cannot list is not one git makes either: a mode of 0311
on `logs/` hides a link at `logs/HEAD` from a walk, while git outside, which
needs only to search it, still writes through that link. Such a directory is
made listable again (named, with its old mode) and walked, so what it hid is
taken like anything else.

The walk is bounded by the directory's own entries, never by a clock, so it
always completes: it reads each directory's entries with their types
(`scandir`, no `stat`) and opens nothing but the few small files it parses.
"""

from __future__ import annotations

import os
import stat
import time

from claude_sandbox.launch.overlay import gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


class Quarantine:
    """Where what a check removed goes: one directory per launch, made on first use."""

    def __init__(self, store: str) -> None:
        self.root = os.path.join(store, "quarantine",
                                 time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}")
        self.lines: list[str] = []

    def _place(self, path: str) -> str:
        target = os.path.join(self.root, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        return target

    def take(self, path: str, why: str) -> None:
        """Move `path` out of the git directory, keeping what it was; one report line."""
        try:
            info = os.lstat(path)
        except OSError:
            return
        from shlex import quote  # the names are the agent's: a pasted command runs them

        target = self._place(path)
        kind = stat.S_IFMT(info.st_mode)
        if kind == stat.S_IFLNK:
            link = os.readlink(path)
            os.symlink(link, target)
            restore = f"ln -s {quote(link)} {quote(path)}"
        elif kind == stat.S_IFREG:
            _move_file(path, target)
            restore = f"mv {quote(target)} {quote(path)}"
        else:  # a FIFO, socket or device holds no data: its kind is all there is
            # The name is the agent's bytes: kept as they are, never an encoding error.
            with open(target + ".what", "w", encoding="utf-8", errors="surrogateescape") as note:
                note.write(f"{_kind_name(kind)} at {path}\n")
            restore = f"(it held no data: recreate it by hand if you made it: {path})"
        if kind != stat.S_IFREG:
            os.unlink(path)
        self.lines.append(f"moved {path} ({_kind_name(kind)}: {why}) to the quarantine; "
                          f"to put it back: {restore}")

    def open_up(self, path: str) -> bool:
        """Make a directory no one could list listable by its owner, named with the mode
        it had; False (and a warning) when it cannot be, and so stays unchecked."""
        from shlex import quote  # the names are the agent's: a pasted command runs them

        mode = gitrepo.add_mode(path, 0o700)
        if mode is None:
            self.lines.append(f"warning: {path} is a directory that cannot be listed or made "
                              "listable, so what it holds was not checked, and git outside "
                              "would write through a link in it; list it as its owner and "
                              "remove what is not a file or a directory")
            return False
        self.lines.append(f"made {path} listable (its mode {mode:04o} hid what it holds, and "
                          "git makes no such directory); to put it back: "
                          f"chmod {mode:04o} {quote(path)}")
        return True


def _move_file(path: str, target: str) -> None:
    try:
        os.rename(path, target)
    except OSError:  # another file system: copy, then remove
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            with open(target, "wb") as out:
                while chunk := os.read(fd, 1 << 20):
                    out.write(chunk)
        finally:
            os.close(fd)
        os.unlink(path)


def _kind_name(kind: int) -> str:
    return {stat.S_IFLNK: "a symbolic link", stat.S_IFREG: "a file", stat.S_IFIFO: "a FIFO",
            stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device"}.get(kind, "an unknown file type")


def not_plain(gitdir: str) -> Iterator[str]:
    """Every path under `gitdir` that is neither a regular file nor a directory, then
    every directory there (`gitdir` itself too) that could not be listed."""
    unlisted: list[str] = []
    for _, entry in gitrepo.walk(gitdir, unlisted=unlisted):
        if not entry.is_dir(follow_symlinks=False) and not entry.is_file(follow_symlinks=False):
            yield entry.path
    for relative in unlisted:
        yield os.path.join(gitdir, relative) if relative else gitdir


def _take_not_plain(gitdir: str, quarantine: Quarantine) -> None:
    """Quarantine what not_plain names. A directory it names could not be listed: it is
    opened up and walked on its own, once, so that what it hid is taken too."""
    pending, opened = [gitdir], set()
    while pending:
        for path in list(not_plain(pending.pop())):
            if not gitrepo.real_dir(path):
                quarantine.take(path, "git makes only regular files and directories")
            elif path not in opened:
                opened.add(path)
                if quarantine.open_up(path):
                    pending.append(path)


def _bad_pointer(path: str, valid: bool) -> bool:
    return os.path.lexists(path) and not valid


def check(gitdir: str, quarantine: Quarantine) -> None:
    """Quarantine what git does not make in `gitdir`, and its pointers that do not parse."""
    _take_not_plain(gitdir, quarantine)
    head = os.path.join(gitdir, "HEAD")
    if _bad_pointer(head, gitrepo.ref_value(gitrepo.read_small(head)) is not None):
        quarantine.take(head, "not a ref or an object id")
    if not os.path.lexists(head):
        _fresh_head(gitdir, quarantine)
    commondir = os.path.join(gitdir, "commondir")
    if os.path.lexists(commondir):  # a common git directory names no other
        quarantine.take(commondir, "it would send git to another directory's config and hooks")
    worktrees = os.path.join(gitdir, "worktrees")
    try:
        names = os.listdir(worktrees)
    except OSError:
        names = []
    for name in names:
        _check_worktree(os.path.join(worktrees, name), quarantine)


def _check_worktree(meta: str, quarantine: Quarantine) -> None:
    """A linked worktree's files: commondir back to this repository, gitdir absolute."""
    commondir = os.path.join(meta, "commondir")
    if _bad_pointer(commondir, gitrepo.read_small(commondir) in ("../..\n", "../..")):
        quarantine.take(commondir, "a worktree's commondir must name its own repository")
    gitdir = os.path.join(meta, "gitdir")
    text = gitrepo.read_small(gitdir) or ""
    line = text.rstrip("\n")
    if _bad_pointer(gitdir, line.startswith("/") and "\n" not in line and line.endswith(".git")):
        quarantine.take(gitdir, "a worktree's gitdir must be the absolute path of its .git file")
    head = os.path.join(meta, "HEAD")
    if _bad_pointer(head, gitrepo.ref_value(gitrepo.read_small(head)) is not None):
        quarantine.take(head, "not a ref or an object id")


def _fresh_head(gitdir: str, quarantine: Quarantine) -> None:
    """A git directory without HEAD is not one to git: give it a HEAD on a branch it has."""
    heads = sorted(name for name in gitrepo.all_refs(gitdir) if name.startswith("refs/heads/"))
    branch = next((n for n in ("refs/heads/main", "refs/heads/master") if n in heads),
                  heads[0] if heads else "refs/heads/main")
    fd = os.open(os.path.join(gitdir, "HEAD"),
                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(f"ref: {branch}\n")
    quarantine.lines.append(f"{gitdir}/HEAD now names {branch}")
