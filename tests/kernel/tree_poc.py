"""The process-tree proof of concept: a mini orchestrator tries every side door.

Run inside bwrap by tests/kernel/test_process_tree.py, as root or an unprivileged user:

    python3 -I tree_poc.py CLIENT WORKSPACE STATE

It forks. The parent stays outside every Landlock domain and is the command server:
for each request from the client it runs `bash -c COMMAND` in namespaces of its own
(user, pid, mount, a fresh /proc), with the client's descriptors 0, 1 and 2, and sends
the exit status back. The child is the orchestrator (standing in for the agent): it
enters a domain that allows EXECUTE only of the client, writing only below STATE, and
scopes signals and abstract sockets (Landlock ABI 6); then it tries each side door in a
forked child of its own and prints one JSON line: door -> the errno name, or "ok".
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import socket
import sys

# The package copy beside this file: the project's own Landlock structures and calls.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from claude_sandbox.core import kernel
from claude_sandbox.inside import landlock

LIBC = ctypes.CDLL(None, use_errno=True)
EXECUTE, WRITE_FILE = landlock.ACCESS_FS_EXECUTE, 1 << 1
# Every right that changes the file system: removing, making anything, refer, truncate.
CHANGE = sum(1 << bit for bit in (4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14))
SCOPE = landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL
ABSTRACT = b"\0claude-sandbox-tree-poc"


def _check(result: int, what: str) -> int:
    if result < 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")
    return result


def enter_domain(client: str, state: str) -> None:
    """EXECUTE only the client; write only below `state` and to /dev/null; scoped."""
    attr = landlock._RulesetAttr(EXECUTE | WRITE_FILE | CHANGE, 0, SCOPE)
    ruleset = _check(landlock._syscall(kernel.SYS_LANDLOCK_CREATE_RULESET, ctypes.addressof(attr),
                                       ctypes.sizeof(attr), 0), "ruleset")
    for path, allowed in ((client, EXECUTE), (state, WRITE_FILE | CHANGE),
                          ("/dev/null", WRITE_FILE)):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = landlock._PathBeneathAttr(allowed, fd)
        _check(landlock._syscall(kernel.SYS_LANDLOCK_ADD_RULE, ruleset, landlock._RULE_PATH_BENEATH,
                                 ctypes.addressof(rule), 0), path)
        os.close(fd)
    _check(LIBC.prctl(38, 1, 0, 0, 0), "no_new_privs")
    _check(landlock._syscall(kernel.SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "restrict_self")


def serve(sock: socket.socket, listener: socket.socket) -> None:
    """The command server: one request a message, until the orchestrator is gone."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 3)
        except OSError:
            return
        if not data:
            return
        command = data.decode("utf-8", "surrogateescape")
        # Its own user, pid and mount namespaces and a fresh /proc: the command sees
        # none of the orchestrator's processes and cannot signal them, as the same uid.
        # Not for root inside bwrap: mapping uid 0 again needs CAP_SETFCAP (the kernel's
        # verify_root_map), and unmapped it may not mount a procfs; root's commands run
        # unmapped (the overflow uid) in a pid namespace of their own, with the outer
        # /proc. The real server runs outside bwrap, where root holds the capabilities.
        if os.getuid() == 0:
            isolation = ["--user", "--pid", "--fork"]
        else:
            isolation = ["--map-current-user", "--pid", "--fork", "--mount", "--mount-proc"]
        argv = [unshare, *isolation, "--kill-child", "/bin/bash", "-c", command]
        pid = os.fork()
        if pid == 0:
            try:
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sock.send(bytes([code if code >= 0 else 128 - code]))
    del listener


def attempt(door: str, action: object) -> str:
    """Run one side door in a child of the orchestrator; its outcome as a word."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            result = action()  # type: ignore[operator]
            word = "ok" if result is None else str(result)
        except OSError as error:
            word = errno.errorcode.get(error.errno or 0, str(error))
        os.write(write_end, word.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        word = handle.read().decode() or "exec-succeeded"
    os.waitpid(pid, 0)
    return word


def main() -> int:
    client, workspace, state = sys.argv[1:4]
    with open("/bin/true", "rb") as handle:
        true_elf = handle.read()
    config = os.path.join(workspace, "settings.json")
    with open(config, "w") as handle:
        handle.write("{}\n")
    server_end, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(ABSTRACT)
    listener.listen(1)
    pid = os.fork()
    if pid:
        agent_end.close()
        serve(server_end, listener)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    server = os.getppid()
    server_end.close()
    listener.close()
    os.set_inheritable(agent_end.fileno(), True)
    os.environ["TREE_FD"] = str(agent_end.fileno())
    enter_domain(client, state)

    def exec_file(path: str, args: list[str]) -> None:
        os.execv(path, args)

    def write_and_exec(directory: str) -> None:
        path = os.path.join(directory, "payload")
        with open(path, "wb") as out:
            out.write(true_elf)
        os.chmod(path, 0o755)
        os.execv(path, [path])

    def memfd_exec(through_proc: bool) -> None:
        fd = os.memfd_create("payload", 0)
        os.write(fd, true_elf)
        if through_proc:
            os.execv(f"/proc/self/fd/{fd}", ["payload"])
        os.execve(fd, ["payload"], {})  # fexecve: execveat(fd, "", AT_EMPTY_PATH)

    def ptrace_server() -> None:
        if LIBC.ptrace(16, server, 0, 0) != 0:  # PTRACE_ATTACH
            raise OSError(ctypes.get_errno(), "ptrace")

    def connect_abstract() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(ABSTRACT)

    def write_config() -> None:
        with open(config, "w") as out:
            out.write('{"hooks": {}}\n')

    def through_client() -> str:
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.dup2(write_end, 1)
            os.execv(client, [client, "-c", "echo inside $(id -u); ls /proc | grep -c '^[0-9]'; "
                              "exit 3"])
        os.close(write_end)
        with os.fdopen(read_end) as handle:
            output = handle.read().split()
        _, status = os.waitpid(child, 0)
        return f"status {os.waitstatus_to_exitcode(status)} {' '.join(output)}"

    results = {
        "exec a shell": attempt("shell", lambda: exec_file("/bin/sh", ["sh", "-c", "exit 0"])),
        "exec an interpreter": attempt("python", lambda: exec_file(
            sys.executable, [sys.executable, "-c", "pass"])),
        "write into the workspace": attempt("write", lambda: write_and_exec(workspace)),
        "exec a binary it wrote": attempt("written", lambda: write_and_exec(state)),
        "exec from memory (fexecve)": attempt("memfd", lambda: memfd_exec(False)),
        "exec from memory (/proc/self/fd)": attempt("memfd-proc", lambda: memfd_exec(True)),
        "signal the server": attempt("kill", lambda: os.kill(server, 0)),
        "ptrace the server": attempt("ptrace", ptrace_server),
        "reach the server's abstract socket": attempt("abstract", connect_abstract),
        "change its own configuration": attempt("config", write_config),
        "a command through the client": attempt("client", through_client),
    }
    agent_end.close()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
