"""What a jailed launch does first: the preflight, and the holder's spawn.

The holder's namespace and pasta's attach are the longest wait of a jailed
launch (DESIGN's performance targets), so the holder starts before anything
else is imported: this module needs only os, stat and _socket. Importing
jail.py (subprocess, socket, json through routes) costs 15-35 ms here, and
that now overlaps pasta's attach instead of delaying it.
"""

from __future__ import annotations

import _socket
import os
import stat

from . import paths
from .errors import EXIT_UNAVAILABLE, SandboxError


def _check_tun() -> None:
    fix = 'add "--device=/dev/net/tun" to runArgs in devcontainer.json'
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SandboxError(
            f"egress jail: /dev/net/tun is missing; {fix}", EXIT_UNAVAILABLE
        ) from None
    except OSError as exc:
        raise SandboxError(
            f"egress jail: /dev/net/tun cannot be opened ({exc.strerror}); "
            f"run `chmod 666 /dev/net/tun` as root, or {fix}",
            EXIT_UNAVAILABLE,
        ) from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    # A bind of /dev/null or a file over the node opens fine but is no tun.
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != 10 or os.minor(st.st_rdev) != 200:
        raise SandboxError(
            f"egress jail: /dev/net/tun is not the tun device (10:200); {fix}", EXIT_UNAVAILABLE
        )


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip() or "0")
    except (OSError, ValueError):
        return None


def _check_userns() -> None:
    """Refuse where the kernel or a sysctl disables unprivileged user namespaces.

    These are the knobs we can read without creating a namespace; anything
    else that refuses one shows up when the holder cannot start (run()).
    """
    fix = "enable unprivileged user namespaces"
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        raise SandboxError(
            f"egress jail: user namespaces are refused (user.max_user_namespaces = 0); {fix}",
            EXIT_UNAVAILABLE,
        )
    if os.geteuid() != 0 and _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        raise SandboxError(
            f"egress jail: user namespaces are refused "
            f"(kernel.unprivileged_userns_clone = 0); {fix}",
            EXIT_UNAVAILABLE,
        )
    if not os.path.exists("/proc/self/ns/user"):
        raise SandboxError("egress jail: this kernel has no user namespaces", EXIT_UNAVAILABLE)


def preflight(*, needs_socat: bool) -> None:
    """Fail closed before anything starts: each missing primitive is one line."""
    for name in ("unshare", "pasta", "ip"):
        paths.tool(name)
    if needs_socat:
        paths.tool("socat")
    _check_tun()
    _check_userns()


class Holder:
    """The holder process, with the part of subprocess.Popen's interface jail.py uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone all the same
                self.returncode = 0
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        # jail.py waits without a timeout; the parameter keeps Popen's signature.
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = 0
                break
            except InterruptedError:
                continue
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, 9)  # SIGKILL, without importing signal


def spawn_holder() -> tuple[Holder, _socket.socket]:
    """Start `unshare -rn INTERPRETER -I -m claude_sandbox _jail_holder --fd N`.

    The socketpair is the only channel (seed 000: never a pipe). Python opens
    every descriptor non-inheritable, so the holder gets its end and the three
    standard streams only, as Popen(close_fds=True) would give it.
    """
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        os.set_inheritable(theirs.fileno(), True)
        argv = [
            paths.tool("unshare"), "--user", "--map-root-user", "--net",
            paths.INTERPRETER, "-I", "-m", "claude_sandbox", "_jail_holder",
            "--fd", str(theirs.fileno()),
        ]  # fmt: skip
        # fork and exec, not posix_spawn: glibc's posix_spawn leaves its two internal
        # signals (32, 33) ignored in the child, and an ignored disposition would
        # survive every exec down to the agent, where nothing can reset it.
        pid = os.fork()
        if pid == 0:
            try:
                os.execve(argv[0], argv, os.environ)
            finally:
                os._exit(127)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return Holder(pid), ours
