"""Views of the trees a root launch shows, made by an id that owns nothing there
(docs/adr/0020-root-only-files-by-an-unprivileged-mounter.md).

overlayfs checks every access twice: the reader's credentials against the overlay's
inode, and its mounter's credentials against the inode below. A read-only overlay
whose mounter has an id no user or group of the system has (uid and gid, no
supplementary group, in a user namespace where root's id is not mapped, so that no
capability of it applies to root's files) lets a reader through only where the other
class of the file's mode would (or an ACL entry naming no one): a
file root keeps from others (mode 0600 or 0640, root's) is refused, whoever reads it,
uid 0 included, and whenever it was made. No walk finds such files first.

The mounter is a forked child of the launcher, which is root's; it makes each view as a
detached mount (fsopen, fsconfig, fsmount: no mount point, nothing seen anywhere) and
sends the descriptors back. Whoever holds one attaches it in a mount namespace of its own
(the jail's holder, or the child that execs bwrap: core/viewplaces.py).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: `signal` imports enum
import _socket
import os
import time

from claude_sandbox.core import kernel, paths, wire
from claude_sandbox.core.libc import get_errno, load_libc
from claude_sandbox.core.process import close_all_but

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


# The mounter's uid and gid outside: an id no user and no group of this system has
# (unused_id), below 65536 (a rootless engine maps no more). Were it one, a root-owned
# 0640 file of that group, or an ACL naming it (nobody's, 65534: a daemon's key), would
# pass the mounter's group or user class while the reader passes as the owner.
FIRST_ID = 65533
ID_RANGE = 1024  # the ids looked at, down from FIRST_ID; the launcher maps no other

# asm-generic/unistd.h, the unified table; linux/mount.h.
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
FSOPEN_CLOEXEC = 0x1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
FSMOUNT_CLOEXEC = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
ANSWER_TIMEOUT = 10.0  # seconds; a mounter that has not answered by then is not waited for

# Nothing of a lower layer may point the overlay elsewhere: a user owns the attributes of
# its own files below a shown tree. Without `userxattr` the overlay reads only trusted.*
# attributes, which its mounter cannot; these say so again (`redirect_dir=off` needs the
# trusted attributes, and a user namespace is refused it).
OPTIONS = (("redirect_dir", "nofollow"), ("metacopy", "off"))

EMPTY = paths.EMPTY_DIR  # in the mounter's namespace, an empty tmpfs (_views)
_LIMIT = 1 << 20  # a message's bytes: the trees' paths, or a reason


def _escaped(path: str) -> str:
    # overlayfs splits lowerdir at ":" and its options at ","; a backslash escapes both.
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


class Mounter:
    """A mounter forked ahead of the plan (`start`), right after the jail's holder: the
    launcher's pages are shared with the holder already, so that the fork adds few copies
    to the launcher's later writes. While the launcher plans it finds its id and makes its
    user namespace; the launcher maps that namespace when it asks for the views (`ready`),
    so that neither waits for the other before then. It makes the views once the plan
    names the trees (`views`), and ends when its socket closes, whatever happens to the
    launcher."""

    def __init__(self, pid: int, sock: _socket.socket) -> None:
        self.pid = pid
        self.sock: _socket.socket | None = sock
        self.failed: str | None = None
        self.mapped = False

    def ready(self) -> str | None:
        """Map the user namespace the mounter made: None once it is, else why not (the
        mounter is stopped then, and `answer` says why)."""
        if self.failed is None and not self.mapped:
            self.failed = self._map()
            self.mapped = self.failed is None
            if self.failed is not None:
                self.stop()
        return self.failed

    def _map(self) -> str | None:
        if self.sock is None:
            return "the mounter was stopped"
        try:
            self.sock.settimeout(ANSWER_TIMEOUT)
            said = wire.receive_fields(self.sock, _LIMIT)
        except (OSError, wire.WireError) as error:
            said = ["err", str(error)]
        if said is None or len(said) != 2 or said[0] != "u":
            return said[-1] if said else "the mounter ended"
        if not (said[1].isascii() and said[1].isdigit()
                and FIRST_ID - ID_RANGE < int(said[1]) <= FIRST_ID):
            return f"the mounter named an id outside its range ({said[1][:16]!r})"
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {said[1]} 1\n"),
                               ("gid_map", f"0 {said[1]} 1\n")):
                with open(f"/proc/{self.pid}/{name}", "wb") as handle:
                    handle.write(text.encode())
            wire.send(self.sock, ["g"])
        except (OSError, wire.WireError) as error:
            return f"cannot map the mounter's user namespace ({error})"
        return None

    def views(self, trees: Sequence[str]) -> list[int] | str:
        """A detached, read-only view of each of `trees` (directories, absolute), in order;
        or why they could not be made, in a few words. The mounter is done then."""
        self.ask(trees)
        return self.answer(len(trees))

    def ask(self, trees: Sequence[str]) -> None:
        """Send the mounter `trees`, to make while the launcher goes on (`answer`)."""
        if self.ready() is not None or self.sock is None:
            return
        try:
            wire.send(self.sock, list(trees))  # over MAX_FDS: the mounter refuses them
        except (OSError, wire.WireError):
            pass  # gone: `answer` says so

    def answer(self, count: int) -> list[int] | str:
        """The views `ask` asked for, or why not; the socket is closed then, and the
        mounter ended (`stop` reaps it)."""
        if self.failed is not None:
            return self.failed
        if self.sock is None:
            return "the mounter was stopped"
        try:
            self.sock.settimeout(ANSWER_TIMEOUT)
            # Its descriptors close-on-exec as they arrive (wire.receive): one would open
            # its tree below every mount bwrap puts over it, were it inherited.
            message = wire.receive(self.sock, _LIMIT)
        except (OSError, wire.WireError) as error:  # a timeout among them: killed (stop)
            self.stop()
            return f"the mounter did not answer ({error})"
        if message is None or list(message.fields) != ["ok"] or len(message.fds) != count:
            self.stop()
            if message is None:
                return "the mounter ended"
            wire.close(message.fds)
            return message.fields[-1] if message.fields else "the mounter ended"
        # Answered: it exits on its own, and is reaped when the launch ends (`stop`):
        # waited for here, its exit (a user and a mount namespace torn down) took 1.4 ms.
        self.sock.close()
        self.sock = None
        return list(message.fds)

    def stop(self) -> None:
        """The socket closed (the mounter ends on it) and the mounter reaped: killed first
        where it has not ended (a mounter stopped by a signal would never read the EOF)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                time.sleep(0.001)  # the EOF's usual end: it exits at once
                if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                    os.kill(self.pid, _signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            self.pid = 0


def unused_id(passwd: str, group: str) -> int | None:
    """The first id down from FIRST_ID that no line of `passwd` nor `group` names."""
    taken = set()
    for text in (passwd, group):
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[2].isdigit():
                taken.add(int(fields[2]))
    return next((n for n in range(FIRST_ID, FIRST_ID - ID_RANGE, -1) if n not in taken), None)


def _system_unused_id() -> int | None:
    texts = []
    for name in ("/etc/passwd", "/etc/group"):
        try:
            with open(name, encoding="utf-8", errors="replace") as handle:
                texts.append(handle.read())
        except OSError:
            return None  # nothing to tell an unused id by: no views
    return unused_id(*texts)


def start() -> Mounter:
    """Fork the mounter, which goes on to make its user namespace (`Mounter.ready` maps
    it). Run as root, single-threaded."""
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's work is proved by what it sends
        # Nothing of the launcher's but its socket: the jail's channel, whose end the
        # launcher closes to end the holder, and what the launcher inherited (check 102).
        close_all_but({0, 1, 2, theirs.fileno()})
        _mounter(theirs)
    theirs.close()
    return Mounter(pid, ours)


def make(trees: Sequence[str]) -> list[int] | str:
    """`start` and `views` at once (explain, the tests), the mounter reaped."""
    mounter = start()
    try:
        return mounter.views(trees)
    finally:
        mounter.stop()


def _mounter(sock: _socket.socket) -> None:  # pragma: no cover
    """The child: never returns."""
    try:
        wire.send(sock, ["ok"], _views(sock))
        os._exit(0)
    except _Refused as refused:
        try:
            wire.send(sock, ["err", str(refused)])
        finally:
            os._exit(1)
    except BaseException:
        os._exit(1)


def _trees(sock: _socket.socket) -> list[str]:  # pragma: no cover
    """The launcher's trees, at most MAX_FDS (a view each goes back in one message)."""
    try:
        trees = wire.receive_fields(sock, _LIMIT)
    except (OSError, wire.WireError):
        trees = None
    if trees is None:
        raise _Refused("the launcher sent no trees")  # stopped: the launch needs none
    if not trees or len(trees) > wire.MAX_FDS:
        raise _Refused(f"{len(trees)} trees to show, not 1 to {wire.MAX_FDS}")
    return trees


class _Refused(Exception):
    pass


def _views(sock: _socket.socket) -> list[int]:  # pragma: no cover
    libc = load_libc()

    def refused(what: str) -> _Refused:
        return _Refused(f"{what}: {os.strerror(get_errno())}")

    unowned = _system_unused_id()  # here, not in the launcher: it plans meanwhile
    if unowned is None:
        raise _Refused("no id is free for the views' mounter")
    os.setgroups([])  # in the first namespace: no group of root's reaches the mounter
    if libc.unshare(kernel.CLONE_NEWUSER) != 0:
        raise refused("unshare a user namespace")
    wire.send(sock, ["u", str(unowned)])  # the id the launcher maps uid and gid 0 to
    if wire.receive_fields(sock, _LIMIT) != ["g"]:
        raise _Refused("the launcher did not map the mounter")
    if libc.unshare(kernel.CLONE_NEWNS) != 0:
        raise refused("unshare a mount namespace")
    if libc.mount(b"none", b"/", None, kernel.MS_REC | kernel.MS_PRIVATE, None) != 0:
        raise refused("make the mounts private")
    # The layer below each tree: empty, and in no tree (overlayfs refuses layers that
    # overlap, and the package's own empty directory is in /usr), a tmpfs of this
    # namespace's over it.
    if libc.mount(b"tmpfs", EMPTY.encode(), b"tmpfs", kernel.MS_RDONLY | kernel.MS_NOSUID
                  | kernel.MS_NODEV | kernel.MS_NOEXEC, b"mode=0755") != 0:
        raise refused("mount an empty layer")
    trees = _trees(sock)
    # Opened while this process is still root's uid: a tree below a directory only root
    # may search (/root/.rustup) is then named through its descriptor.
    held = []
    for tree in trees:
        try:
            held.append(os.open(tree, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError as error:
            raise _Refused(f"{tree}: {error.strerror}") from None
    os.setresgid(0, 0, 0)  # the unused id, as the maps say
    os.setresuid(0, 0, 0)
    views = []
    for tree, fd in zip(trees, held, strict=True):
        views.append(_view(tree, f"/proc/self/fd/{fd}"))
    return views


def _view(tree: str, lower: str) -> int:  # pragma: no cover
    call = load_libc().syscall
    fs = call(SYS_FSOPEN, b"overlay", FSOPEN_CLOEXEC)
    if fs < 0:
        raise _Refused(f"overlayfs: {os.strerror(get_errno())}")
    try:
        settings = (("lowerdir", f"{_escaped(lower)}:{_escaped(EMPTY)}"), *OPTIONS)
        for key, value in settings:
            if call(SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, key.encode(),
                    value.encode("utf-8", "surrogateescape"), 0) != 0:
                raise _Refused(f"{tree}: overlayfs refuses {key}: {_log(fs)}")
        if call(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0) != 0:
            raise _Refused(f"{tree}: overlayfs refuses it: {_log(fs)}")
        mount = call(SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC,
                     kernel.MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        if mount < 0:
            raise _Refused(f"{tree}: fsmount: {os.strerror(get_errno())}")
        return int(mount)
    finally:
        os.close(int(fs))


def _log(fs: int) -> str:
    """The file system's own message, where it left one, else errno's."""
    why = os.strerror(get_errno())
    try:
        text = os.read(fs, 512).decode("utf-8", "replace").strip()
    except OSError:
        return why
    return text.split(" ", 1)[-1] if text else why
