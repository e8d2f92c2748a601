"""Overlay views: a directory the sandbox writes whose writes land in the store.

A git directory (and each existing agent or IDE control directory) is shown to
the sandbox as an overlay: the real directory below, read-only, and an upper
directory in the user's state store on top. Everything the agent's git writes
(objects, refs, config, hooks, links) lands in the upper directory; nothing
reaches the real one until the launcher applies it, by rule, after the session
(docs/adr/0010-the-workspace-exit.md).

The overlays are mounted in a mount namespace of the sandbox's own, before
bwrap starts: the jail holder's (it makes one with its user namespace), or,
without the jail, one the forked child makes for itself just before it execs bwrap. bwrap's
recursive binds carry them in. Outside, in the user's terminal and IDE, the
real directory is unchanged and nothing new appears: there is no mount point
to make, no placeholder, no stand-in.

Unprivileged overlayfs needs a user namespace (kernel 5.11 and later) and the
`userxattr` option: the upper's whiteouts and opaque marks are `user.overlay.*`
attributes there.
"""

from __future__ import annotations

import os

from claude_sandbox.core import kernel
from claude_sandbox.core.libc import get_errno, load_libc


def _escaped(path: str) -> str:
    # overlayfs splits its options at "," and lowerdir at ":"; a backslash escapes both.
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def overlay_options(lower: str, upper: str, work: str) -> str:
    return (f"lowerdir={_escaped(lower)},upperdir={_escaped(upper)},"
            f"workdir={_escaped(work)},userxattr")


def mount_overlay(lower: str, upper: str, work: str, target: str) -> str | None:
    """Mount one overlay at `target`; None, or why it failed (the errno's text)."""
    libc = load_libc()
    options = overlay_options(lower, upper, work).encode("utf-8", "surrogateescape")
    if libc.mount(b"overlay", target.encode("utf-8", "surrogateescape"), b"overlay", 0,
                  options) != 0:
        return os.strerror(get_errno())
    return None


def own_mount_namespace(uid: int, gid: int) -> str | None:
    """Enter a new user and mount namespace as the same uid and gid, mounts private.

    For a launch without the jail, in the forked child just before it execs
    bwrap: the overlays need a mount namespace this process may change, and
    bwrap, unprivileged, then nests its own user namespace inside as usual.
    None, or why it failed.
    """
    return own_namespaces(0, (uid, gid), (uid, gid))


def own_namespaces(extra: int, inside: tuple[int, int], outside: tuple[int, int]) -> str | None:
    """Enter a new user and mount namespace (and the namespaces `extra` names), where
    `inside` (uid, gid) is this process's `outside` one, and make every mount private:
    what `unshare --user --map-user --map-group --mount` does, in this process.
    None, or why it failed.

    Called in forked children only: unshare of a user namespace needs a single-threaded
    process, and the change is for good.
    """
    libc = load_libc()
    # A process that is not dumpable cannot write its own /proc/self/*_map (the files
    # belong to root then), and a launcher that has started its session is not. The
    # jail's holder must be anyway, for pasta to open its namespaces; the child of a
    # launch without the jail execs bwrap next, which sets it again.
    libc.prctl(kernel.PR_SET_DUMPABLE, 1, 0, 0, 0)
    if libc.unshare(kernel.CLONE_NEWUSER | kernel.CLONE_NEWNS | extra) != 0:
        return f"unshare: {os.strerror(get_errno())}"
    try:
        # setgroups is denied before the group map, as an unprivileged writer must.
        for name, text in (("uid_map", f"{inside[0]} {outside[0]} 1\n"), ("setgroups", "deny"),
                           ("gid_map", f"{inside[1]} {outside[1]} 1\n")):
            with open(f"/proc/self/{name}", "wb") as handle:
                handle.write(text.encode())
    except OSError as error:
        return f"cannot write the user namespace's maps: {error.strerror}"
    # A change here must never propagate back to the container's mounts.
    if libc.mount(b"none", b"/", None, kernel.MS_REC | kernel.MS_PRIVATE, None) != 0:
        return f"cannot make the mounts private: {os.strerror(get_errno())}"
    return None
