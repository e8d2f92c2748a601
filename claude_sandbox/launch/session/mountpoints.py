"""The sandbox's mount points in the agent's store, made without following a link, and
the directories above them pinned.

$HOME inside is the agent's state store, which the agent writes. bwrap makes the mount
point of each mount it is given (the directories above it, then the file or the
directory itself), follows a symbolic link on the way, and does so while the whole host
is still reachable at /oldroot. A link the agent left in its store where a later launch
mounts something (a new `~/.local` whose `bin/claude` links to `/oldroot/etc/...`) would
make that launch create an empty file or directory wherever the link points, as the
launching user, root on a root launch: outside the store, and so outside the sandbox
(docs/explanation/threat-model.md, check 105).

So before bwrap starts, the launcher makes every mount point in the store itself, one
component at a time from a descriptor of the store's home (`openat` with O_NOFOLLOW,
`mkdirat`, O_CREAT with O_EXCL), and refuses the launch where a component is a link or
of the wrong kind. bwrap then finds each one made and creates nothing.

A session of the same agent running meanwhile could still swap a directory on such a
path for a link between that check and bwrap's walk. So every directory between $HOME
and a mount point is pinned: bound onto itself from the descriptor the check opened
(`--bind-fd`), which makes it a mount point inside, and the kernel refuses to rename or
remove a mount point (EBUSY). A running session cannot move any directory on the path
to a mount point its own plan has.
"""

from __future__ import annotations

import errno
import os
import stat

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.launch.planner.pins import above, in_store, pin_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from claude_sandbox.launch.planner.mounts import Mount

# A directory opened where it is, never through a link (O_NOFOLLOW on its last component,
# and each component above it was opened the same way).
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_KINDS = ("tmpfs", "dir")
_BIND_KINDS = ("bind", "ro-bind", "ro-bind-try", "dev-bind")
def make(store_home: str, home: str, mounts: Sequence[Mount], agent: str) -> dict[str, int]:
    """Make the mount point of each mount in the store (`store_home`, bound at `home`
    inside); refuse a link on any of their paths. The pinned directories' descriptors,
    by pin_name, are the caller's to close."""
    stored = in_store(home, mounts)
    pins = [directory[len(home) + 1:] for directory in above(home, stored)]
    kept: dict[str, int] = {}
    top = os.open(store_home, _DIRECTORY)  # the launcher's own (state.ensure_home)
    try:
        # Each pin first, shallow first: the plan binds each one from its descriptor,
        # whatever bwrap then makes or leaves alone below it (a missing source).
        for relative in pins:
            _make_one(top, relative, "dir", agent, set(pins), kept)
        for mount in stored:
            _make_one(top, mount.dest[len(home) + 1:], _leaf(mount), agent, set(), kept)
    except BaseException:
        for fd in kept.values():
            os.close(fd)
        raise
    finally:
        os.close(top)
    return {pin_name(os.path.join(home, relative)): fd for relative, fd in kept.items()}


def _leaf(mount: Mount) -> str:
    """What bwrap makes at the mount's destination: "dir", "file", or "parents": only the
    directories above it (a link, which symlink(2) makes without following its last
    component; a remount; a bind whose source is missing, which bwrap skips or refuses)."""
    if mount.kind == "symlink":
        return "parents"
    if mount.kind in _DIRECTORY_KINDS:
        return "dir"
    if mount.kind == "data":
        return "file"
    if mount.kind in _BIND_KINDS:
        try:
            return "dir" if stat.S_ISDIR(os.stat(mount.source).st_mode) else "file"
        except OSError:
            return "parents"
    return "parents"


def _make_one(top: int, relative: str, leaf: str, agent: str, pins: set[str],
              kept: dict[str, int]) -> None:
    parts = relative.split("/")
    directories = parts if leaf == "dir" else parts[:-1]
    current = top
    try:
        for depth, name in enumerate(directories):
            path = "/".join(parts[:depth + 1])
            opened = _directory(current, name, path, relative, agent)
            if current != top and current not in kept.values():
                os.close(current)
            current = opened
            if path in pins and path not in kept:
                kept[path] = current  # kept open: bwrap binds it onto itself
        if leaf == "file":
            _file(current, parts[-1], relative, agent)
    finally:
        if current != top and current not in kept.values():
            os.close(current)


def _directory(parent: int, name: str, path: str, relative: str, agent: str) -> int:
    """`name` in `parent` opened as a directory, made where it is missing."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):  # a link, or not a directory
            raise _refused(parent, name, path, relative, agent) from None
        raise
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile: opened and judged below as any other
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refused(parent, name, path, relative, agent) from None
        raise


def _file(parent: int, name: str, relative: str, agent: str) -> None:
    """`name` in `parent`, made an empty file where it is missing; anything there but a
    directory or a link stands as it is (bwrap mounts over it)."""
    try:
        os.close(os.open(name, _NEW_FILE, 0o444, dir_fd=parent))
        return
    except FileExistsError:
        pass  # O_EXCL: an existing link is never followed, only judged below
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode):
        raise _refused(parent, name, relative, relative, agent)


def _refused(parent: int, name: str, path: str, relative: str, agent: str) -> SandboxError:
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        link = False
    what = "a symbolic link" if link else "not what the sandbox mounts there"
    below = "" if path == relative else f", which holds ~/{relative}"
    return SandboxError(
        f"~/{path} in {agent}'s state store is {what}{below}: the sandbox mounts ~/{relative} "
        f"there, and a launch must not follow a link the agent left out of the store. "
        f"Remove it (`claude-sandbox state show --agent {agent}` prints where the store is), or "
        f"start the store over with `claude-sandbox state reset --agent {agent}`", EXIT_REFUSED)
