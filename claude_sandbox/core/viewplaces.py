"""Where a root launch's views go (docs/adr/0020-root-only-files-by-an-unprivileged-mounter.md):
which trees get one, where each is attached before bwrap starts, and the bind sources
taken from them. The views themselves are made by core/unowned.py.
"""

from __future__ import annotations

import os

from claude_sandbox.core import kernel, paths
from claude_sandbox.core.libc import get_errno, load_libc
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# asm-generic/unistd.h, the unified table; linux/mount.h.
SYS_MOVE_MOUNT = 429
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MS_UNBINDABLE = 0x20000


def attach(view: int, target: str) -> str | None:
    """Attach a detached view at `target`, in this process's mount namespace (which it
    must own); None, or why not."""
    if load_libc().syscall(SYS_MOVE_MOUNT, view, b"", kernel.AT_FDCWD,
                           target.encode("utf-8", "surrogateescape"),
                           MOVE_MOUNT_F_EMPTY_PATH) != 0:
        return os.strerror(get_errno())
    return None


# Where the views are attached, in the mount namespace bwrap starts in: a tmpfs mounted
# over a directory of the package's there, one numbered directory per view. bwrap's
# read-only binds of the shown trees take their sources from it (`staged`); the trees'
# real paths stay as they are, for the binds that write (a workspace under /opt).
STAGING = paths.VIEWS_DIR


@record
class Views:
    """The trees a root launch shows through views, in the order the views were made:
    the first at STAGING/0, and so on."""

    roots: tuple[str, ...]
    # Places within them that are the sandbox's own (the workspace under /opt, /var/tmp's
    # private tmpfs): a bind from there keeps its real source, but from a tree shown
    # whatever lies around it (`bound`: allow-read, a toolchain), which its view shows.
    own: tuple[str, ...] = ()
    bound: tuple[str, ...] = ()

    def place(self, index: int) -> str:
        return f"{STAGING}/{index}"


def split(roots: Sequence[str], mountinfo_text: str) -> tuple[list[str], list[str]]:
    """`roots` (the trees the walk would cover) as (those a view can show, the rest). A
    tree with a mount below it, any mount, is the walk's: in the mounter's namespace that
    mount is locked (the kernel keeps a less privileged namespace from uncovering what
    lies under it), and overlayfs refuses a layer with a locked mount inside; an engine's
    /etc/hosts makes /etc one, a small tree."""
    from claude_sandbox.core import mountinfo

    points = [m.mountpoint for m in mountinfo.parse(mountinfo_text)]
    viewed: list[str] = []
    walked: list[str] = []
    for root in roots:
        mounted = any(point != root and paths.under(point, root) for point in points)
        (walked if mounted else viewed).append(root)
    return viewed, walked


def staged(path: str, views: Views) -> str | None:
    """Where `path`, in a tree shown through a view, is under STAGING; else None (and
    for a path in one of the sandbox's own places there)."""
    if paths.under_any(path, views.own) and not paths.under_any(path, views.bound):
        return None
    for index, root in enumerate(views.roots):
        if paths.under(path, root):
            return f"{views.place(index)}{path[len(root.rstrip('/')):]}"
    return None


def attach_all(views: Views, fds: Sequence[int]) -> str | None:
    """In a mount namespace this process owns (mounts private): STAGING made a tmpfs and
    each view attached at its place. None, or why not."""
    if len(fds) != len(views.roots):
        return "a root launch's views were lost on the way"
    libc = load_libc()
    if libc.mount(b"tmpfs", STAGING.encode(), b"tmpfs",
                  kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC, b"mode=0755") != 0:
        return f"cannot mount a tmpfs on {STAGING}: {os.strerror(get_errno())}"
    # Unbindable: a tree still walked that holds STAGING (/usr, with a mount below it) is
    # bound recursively without the views hanging there.
    if libc.mount(None, STAGING.encode(), None, MS_UNBINDABLE, None) != 0:
        return f"cannot make {STAGING} unbindable: {os.strerror(get_errno())}"
    for index, (fd, root) in enumerate(zip(fds, views.roots, strict=True)):
        os.mkdir(views.place(index), 0o755)
        failed = attach(fd, views.place(index))
        if failed is not None:
            return f"cannot show {root} without root's own files ({failed})"
    return None


def request(views: Views, fds: Sequence[int]) -> tuple[list[str], Sequence[int]]:
    """The jail holder's request to attach `views` (holder.py), and its descriptors."""
    return ["views", *views.roots], fds


def from_request(args: Sequence[str]) -> Views:
    """`request`'s fields back (after "views")."""
    return Views(tuple(args))
