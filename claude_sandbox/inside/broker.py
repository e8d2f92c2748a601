"""`hardening = brokered`: the command server, and the agent's narrower view.

`_enter` forks before anything enters a Landlock domain
(docs/adr/0009-the-enforced-process-tree.md):

- The child becomes the agent (agentside.py). In a user and mount namespace of its
  own it sees every place it writes noexec (the workspace and allow-write paths
  included, which its own file tools write), and the command client (command-client.c)
  in place of every shell; then it enters a Landlock domain that lets it execute only
  its own program, the client and the loader, write only its state, the workspace,
  /tmp and /dev, and neither signal nor reach an abstract socket outside it;
  memfd_create fails for it.
- The parent stays outside that domain and serves commands: each connection on
  SOCKET is one shell the agent started (its Bash tool, a hook, a `sh -c` anywhere
  in its code). The server runs the real shell in a fresh sandbox: user, mount and
  pid namespaces of its own, the sandbox's writable workspace, the session's network
  (the egress jail), a cap on processes, and a Landlock domain that scopes signals
  and abstract sockets, so a command can neither see the agent's processes nor
  signal or trace them. Its descriptors are the client's, its status goes back.

The server is also the agent's parent outside its domain that relays a Ctrl-Z
(enter.relay_stops explains why that parent exists). It exits with the agent's
status, and its children's parent-death signals end every command with it.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # `signal` imports enum
import _socket  # `socket` imports enum and selectors: milliseconds at every launch
import os
import posixpath
import select

from claude_sandbox.core import kernel, libc, paths, wire
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.process import pass_stop_on
from claude_sandbox.inside import landlock
from claude_sandbox.inside.agentside import (
    agent_view,
    check,
    limit_agent,
    limit_transports,
    mount,
    own_namespaces,
    read_only,
)
from claude_sandbox.inside.spec import Inner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

SOCKET = paths.BROKER_SOCKET
REQUEST_LIMIT = 8 << 20  # command-client.c's limit
SIGNAL_LIMIT = 64  # a signal from the client, a status from the command's init
EXIT_CANNOT = 126  # a shell's status for a command it cannot run
_RELAYED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2, signal.SIGWINCH}


# ----------------------------------------------------------------------- the server
def serve(settings: Inner, agent: int, listener: Any, tty: bool) -> NoReturn:
    """Accept commands until the agent ends; exit with its status."""
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wake-up fd fires
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)  # the agent's to decide, as in relay_stops
    if tty:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTSTP})
    poller = select.poll()
    poller.register(listener.fileno(), select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    handlers: set[int] = set()
    while True:
        for fd, _ in poller.poll():  # EINTR is retried (PEP 475)
            if fd == wake_read:
                while len(os.read(wake_read, 512)) == 512:
                    pass
                continue
            try:
                conn, _ = listener._accept()  # the C object's: a bare descriptor
            except OSError:
                continue
            try:
                pid = os.fork()
            except OSError:  # max-pids reached: this command is refused, the session lives
                _reply(conn, EXIT_CANNOT)
                os.close(conn)
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                os.close(wake_read)
                os.close(wake_write)
                listener.close()
                _forked(_handle, settings, conn)
            os.close(conn)
            handlers.add(pid)
        _reap(agent, handlers, tty)


def _reap(agent: int, handlers: set[int], tty: bool) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
        except ChildProcessError:
            os._exit(EXIT_CANNOT)
        if pid == 0:
            return
        if pid != agent:
            handlers.discard(pid)
            continue
        if os.WIFSTOPPED(status):
            if tty:  # the same relay as enter.relay_stops
                pass_stop_on(pid)
            continue
        for handler in handlers:  # each one's death ends its command's namespaces
            try:
                os.kill(handler, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)


# -------------------------------------------------------------- one command, served
def _receive(conn: int) -> tuple[list[str], list[int]]:
    """The client's request (its fields) and its descriptors; ([], []) when malformed."""
    sock = _socket.socket(fileno=os.dup(conn))
    sock.settimeout(10.0)  # the client sends its request at once: a stalled one is refused
    try:
        message = wire.receive(sock, REQUEST_LIMIT)
    except (OSError, wire.WireError):
        message = None
    sock.close()
    return (list(message.fields), list(message.fds)) if message else ([], [])


def _forked(body: Any, *args: Any) -> NoReturn:
    """Run a forked child's body; whatever it raises ends that child, never unwinds the
    server's own stack in a copy of it."""
    try:
        body(*args)
    except BaseException as exc:  # the child's last word, then its end
        try:
            os.write(2, f"claude-sandbox: command server: {exc!r}\n".encode())
        finally:
            os._exit(EXIT_CANNOT)
    os._exit(EXIT_CANNOT)


def parse(data: bytes) -> tuple[str, str, list[str], dict[str, str]] | None:
    """The body of command-client.c's request (core/wire.py's fields), or None."""
    try:
        return _request(wire.unpack(data, REQUEST_LIMIT))
    except wire.WireError:
        return None


def _request(fields: list[str]) -> tuple[str, str, list[str], dict[str, str]] | None:
    """(the executed shell, working directory, argv, environment), or None when malformed:
    "1", the shell as executed (AT_EXECFN), the working directory, the count of
    arguments, the arguments, the environment."""
    if len(fields) < 4 or fields[0] != "1" or not fields[3].isascii() \
            or not fields[3].isdigit() or len(fields[3]) > 7:
        return None
    count = int(fields[3])
    if count < 1 or len(fields) < 4 + count or not fields[4]:
        return None
    argv = fields[4:4 + count]
    # A name is what execve takes: not empty, no "=" (the first "=" splits).
    env = dict(item.split("=", 1) for item in fields[4 + count:] if "=" in item[1:])
    return fields[1], fields[2], argv, env


def _handle(settings: Inner, conn: int) -> NoReturn:
    """One command: its sandbox, its signals, its status back to the client."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the server blocks SIGTSTP
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        fields, fds = _receive(conn)
        request = _request(fields) if len(fds) == 3 else None
        if request is not None and settings.offline_commands and _network_streams(fds):
            os.write(fds[2], b"claude-sandbox: command server: offline-commands: a command's "
                     b"standard streams may not be network sockets, refused\n")
            _reply(conn, EXIT_CANNOT)
            os._exit(0)
        shell = _real_shell(settings, request[0]) if request else None
        if request is None or shell is None:
            os.write(fds[2] if len(fds) == 3 else 2,
                     b"claude-sandbox: command server: a malformed request, refused\n")
            _reply(conn, EXIT_CANNOT)
            os._exit(0)
        check(libc.load_libc().prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        # Offline: a network namespace of its own, where not even loopback is up.
        own_namespaces(kernel.CLONE_NEWNS | kernel.CLONE_NEWPID
                       | (kernel.CLONE_NEWNET if settings.offline_commands else 0))
        mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
        # The server's socket is out of a command's reach: it cannot replace it.
        mount("none", paths.BROKER_DIR, "tmpfs", kernel.MS_RDONLY | kernel.MS_NOSUID
              | kernel.MS_NODEV | kernel.MS_NOEXEC, "size=0")
    except OSError as exc:
        os.write(2, f"claude-sandbox: command server: {exc}\n".encode())
        _reply(conn, EXIT_CANNOT)
        os._exit(0)
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    init = os.fork()
    if init == 0:
        os.close(status_read)
        _forked(_init, settings, shell, request, fds, status_write)
    os.close(status_write)
    wire.close(fds)
    _relay(conn, init, status_read)


def _network_streams(fds: list[int]) -> bool:
    """Whether any of `fds` is a socket of another family than AF_UNIX: a connection the
    agent made, handed to an offline command as a standard stream."""
    import stat

    for fd in fds:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            sock = _socket.socket(fileno=os.dup(fd))
            try:
                if sock.family != _socket.AF_UNIX:
                    return True
            finally:
                sock.close()
    return False


def _real_shell(settings: Inner, executed: str) -> str | None:
    """The shell the client stood in for, resolved in the server's (unchanged) view."""
    if not executed.startswith("/"):
        return None
    real = posixpath.realpath(executed)
    return real if real in settings.shells else None


def _init(settings: Inner, shell: str, request: tuple[str, str, list[str], dict[str, str]],
          fds: list[int], status: int) -> NoReturn:
    """Pid 1 of the command's namespace: runs the shell and passes signals to its group.

    Not the shell itself: pid 1 gets only the signals it handles, and a shell
    handles none of TERM, INT or HUP when it runs `-c`."""
    try:
        check(libc.load_libc().prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        try:
            mount("proc", "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
        except OSError:
            # The outer /proc, bound with the engine's masks (no procfs may be mounted):
            # kept, read-only for the command (writable only for the uid maps above).
            read_only("/proc")
        command = os.fork()
        if command == 0:
            _forked(_exec_command, settings, shell, request, fds)
        wire.close(fds)
        for signum in _RELAYED:
            signal.signal(signum, lambda s, _f, g=command: _pass(g, s))
        code = os.waitstatus_to_exitcode(os.waitpid(command, 0)[1])  # EINTR retried (PEP 475)
        code = 256 - code if code < 0 else code
    except OSError as exc:
        os.write(2, f"claude-sandbox: command server: {exc}\n".encode())
        code = EXIT_CANNOT
    os.write(status, wire.pack(["status", str(code)]))
    os._exit(0)


def _pass(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def _exec_command(settings: Inner, shell: str,
                  request: tuple[str, str, list[str], dict[str, str]], fds: list[int]) -> NoReturn:
    _, cwd, argv, env = request
    try:
        os.setpgid(0, 0)
        for signum in (*_RELAYED, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        # No capability in the command's own user namespace survives its exec, even
        # for uid 0 (an exec as root refills them from the bounding set).
        for cap in range(64):
            libc.load_libc().prctl(kernel.PR_CAPBSET_DROP, cap, 0, 0, 0)
        import resource

        cap = settings.max_pids if settings.max_pids is not None else COMMAND_PIDS
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        cap = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if landlock.abi_version() < landlock.SCOPE_ABI:  # the agent refused already
            raise SandboxError("Landlock cannot scope the command", EXIT_UNAVAILABLE)
        # Offline: no socket file or FIFO to meet the agent at, which has the network.
        landlock.enter("standard", no_rendezvous=settings.offline_commands)
        if settings.offline_commands:
            limit_transports()
        os.chdir(cwd)
        os.execve(shell, argv, env)
    except (OSError, SandboxError) as exc:
        os.write(2, f"claude-sandbox: command server: cannot run {shell}: {exc}\n".encode())
    os._exit(EXIT_CANNOT)


# Processes one command may run at once when the operator set no max-pids: a fork
# bomb ends here, not at the sandbox's or the host's limit.
COMMAND_PIDS = 4096


def _relay(conn: int, init: int, status_read: int) -> NoReturn:
    """Pass the client's signals on until the command ends; a vanished client kills it."""
    pidfd = os.pidfd_open(init)
    poller = select.poll()
    poller.register(conn, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    client = _socket.socket(fileno=conn)
    client.settimeout(1.0)  # a message begun must end: a client that stalls in one is gone
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if conn in ready:
            try:
                message = wire.receive(client, SIGNAL_LIMIT)
            except (OSError, wire.WireError):
                message = None
            if message is None:  # the client is gone (killed after its timeout), so is the
                os.kill(init, signal.SIGKILL)  # command
                poller.unregister(conn)
            else:
                wire.close(message.fds)  # a signal carries none; one sent anyway is not kept
                signum = _number(message.fields, "signal")
                if signum is not None and signum in _RELAYED:
                    os.kill(init, signum)
        if pidfd in ready:
            os.waitpid(init, 0)
            _reply(conn, _status(os.read(status_read, SIGNAL_LIMIT)))
            os._exit(0)


def _status(data: bytes) -> int:
    """What the command's init wrote: "status", N; killed (256 + SIGKILL) otherwise."""
    status = _number(wire.unpack(data, SIGNAL_LIMIT) if data.endswith(b"\0") else [], "status")
    return 256 + 9 if status is None else status


def _number(fields: tuple[str, ...] | list[str], kind: str) -> int | None:
    """N of a message `kind`, N (a signal, a status: at most 3 digits); None otherwise."""
    if len(fields) == 2 and fields[0] == kind and fields[1].isascii() \
            and fields[1].isdigit() and len(fields[1]) <= 3:
        return int(fields[1])
    return None


def _reply(conn: int, code: int) -> None:
    try:
        os.write(conn, wire.frame(["status", str(code)]))
    except OSError:
        pass


# -------------------------------------------------------------------- the entry
def run(settings: Inner, tty: bool) -> NoReturn:
    """Fork the agent into its view and domain; serve its commands here."""
    if os.getuid() == 0:
        raise SandboxError(
            "hardening = brokered does not run as root yet: its command server needs a user "
            "namespace per command, and uid 0 inside the sandbox cannot map itself into one; "
            "launch as an unprivileged user or use hardening = harsh", EXIT_UNAVAILABLE)
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        listener.bind(SOCKET)
        listener.listen(64)
    except OSError as exc:
        raise SandboxError(f"brokered: cannot listen on {SOCKET}: {exc.strerror}",
                           EXIT_UNAVAILABLE) from None
    agent = os.fork()
    if agent == 0:
        listener.close()
        try:
            check(libc.load_libc().prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
            agent_view(settings)
        except OSError as exc:
            raise SandboxError(f"brokered: cannot make the agent's view: {exc}",
                               EXIT_UNAVAILABLE) from None
        landlock.enter_brokered((*settings.agent_writable, *settings.commands_only),
                                settings.agent_exec,
                                settings.agent_connect, settings.agent_bind,
                                no_rendezvous=settings.offline_commands)
        limit_agent()
        command = settings.command
        try:
            os.execv(command[0], command)
        except OSError as exc:
            raise SandboxError(f"cannot run {command[0]}: {exc.strerror}",
                               EXIT_UNAVAILABLE) from None
    serve(settings, agent, listener, tty)
