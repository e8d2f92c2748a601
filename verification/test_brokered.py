"""The checks and side doors of `hardening = brokered`, from the agent's own process.

Under brokered the runner launches this file as the agent itself, so that what it
tries is what the agent could try: it runs in the agent's view and Landlock domain,
and its parent is the command server (docs/adr/0009-the-enforced-process-tree.md). The rest of
the catalogue runs in a second launch as a command through the server, where the
agent's commands run. Elsewhere (other levels, or inside a command) these skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from probes import FACTS, errname, fresh_procfs, map_written_code, note, writable

from claude_sandbox.core import paths

Req = pytest.FixtureRequest
LIBC = ctypes.CDLL(None, use_errno=True)
# Programs that are on every system we support and are not the agent's: none may run.
OTHERS = ("/usr/bin/true", "/usr/bin/id", "/usr/bin/perl", "/usr/bin/git", "/usr/bin/env",
          "/usr/bin/python3")


def _same_file(a: str, b: str) -> bool:
    try:
        one, two = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


@pytest.fixture(autouse=True)
def _agent_context() -> None:
    if FACTS.get("hardening") != "brokered":
        pytest.skip(f"hardening = {FACTS.get('hardening')}: no command server")
    if not _same_file("/bin/sh", paths.COMMAND_CLIENT):
        pytest.skip("inside a command: the agent's own launch runs this check")


def _exec_error(path: str, argv: list[str] | None = None, fd: int | None = None) -> str:
    """Exec `path` (or the descriptor `fd`) in a child; the errno name, or "ran"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            if fd is not None:
                os.execve(fd, argv or ["x"], {})
            os.execv(path, argv or [path, "--version"])
        except OSError as error:
            os.write(write_end, errname(error.errno or 0).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        word = handle.read().decode() or "ran"
    os.waitpid(pid, 0)
    return word


def _command(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)


def _writable_copy(directory: str) -> str:
    handle, copy = tempfile.mkstemp(prefix=".csbx-brokered-", dir=directory)
    with open("/bin/true" if not _same_file("/bin/true", paths.COMMAND_CLIENT)
              else "/usr/bin/true", "rb") as source, os.fdopen(handle, "wb") as target:
        shutil.copyfileobj(source, target)
    os.chmod(copy, 0o755)
    return copy


def test_62_brokered_agent_runs_nothing_else(request: Req) -> None:
    ran = {path: word for path in OTHERS if os.path.exists(path)
           and os.path.realpath(path) not in FACTS.get("agent_programs", [])
           and (word := _exec_error(path)) != "EACCES"}
    assert not ran, f"the agent executed: {ran}"
    for shell in ("/bin/sh", "/bin/bash"):
        if os.path.exists(shell):
            assert _same_file(shell, paths.COMMAND_CLIENT), f"{shell} is a real shell here"
    note(request, "EACCES for every program but its own; the shells are the command client")


def test_63_brokered_server_out_of_reach(request: Req) -> None:
    server = os.getppid()
    with pytest.raises(PermissionError):
        os.kill(server, 0)
    assert LIBC.ptrace(16, server, 0, 0) != 0, "PTRACE_ATTACH to the server succeeded"
    assert ctypes.get_errno() == errno.EPERM, f"ptrace: {errname(ctypes.get_errno())}"
    with pytest.raises(OSError) as caught:
        Path(paths.BROKER_DIR, "planted").write_text("x")
    assert caught.value.errno in (errno.EACCES, errno.EROFS), errname(caught.value.errno or 0)
    note(request, f"signal and ptrace: EPERM; {paths.BROKER_DIR}: "
         f"{errname(caught.value.errno or 0)}")


def test_64_brokered_nothing_written_runs(request: Req) -> None:
    found = {}
    for directory in (os.environ.get("HOME", "/tmp"), "/tmp"):
        copy = _writable_copy(directory)
        try:
            found[directory] = _exec_error(copy, [copy])
        finally:
            os.unlink(copy)
    found.update(_memory_exec())
    ran = {where: word for where, word in found.items() if word not in ("EACCES", "ENOSYS")}
    assert not ran, f"ran or failed otherwise: {ran}"
    note(request, ", ".join(f"{where}: {word}" for where, word in found.items()))


def _memory_exec() -> dict[str, str]:
    """Run /usr/bin/true from a memfd both ways; memfd_create itself may be refused."""
    try:
        memfd = os.memfd_create("csbx-payload", 0)
    except OSError as error:
        return {"memfd_create": errname(error.errno or 0)}
    with open("/usr/bin/true", "rb") as source:
        os.write(memfd, source.read())
    found = {"memfd (fexecve)": _exec_error("", ["payload"], fd=memfd),
             "memfd (/proc/self/fd)": _exec_error(f"/proc/self/fd/{memfd}", ["payload"])}
    os.close(memfd)
    return found


def test_65_brokered_agent_writes_no_code(request: Req) -> None:
    workspace = str(FACTS["workspace"])
    written = Path(workspace, ".csbx-brokered-write")
    written.write_text("the agent's own Write and Edit\n")  # its file tools work
    written.unlink()
    copy = _writable_copy(workspace)
    try:
        word = _exec_error(copy, [copy])
        mapped = map_written_code(workspace)
    finally:
        os.unlink(copy)
    assert word == "EACCES", f"a program the agent wrote to the workspace: {word}"
    ran = [way for way, outcome in mapped.items() if outcome == "ran"]
    assert not ran, f"the agent mapped what it wrote executable: {', '.join(ran)}"
    # The control paths as check 52 holds them: an existing file read-only; a directory
    # an overlay of the agent's own; an absent one named at the session's end.
    controls = [os.path.join(workspace, rel) for rel in FACTS.get("controls", [])]
    held = [p for p in controls if os.path.lexists(p) and not os.path.isdir(p)]
    open_to_writes = [p for p in held if writable(p)[0]]
    assert not open_to_writes, f"control files writable: {', '.join(open_to_writes)}"
    note(request, "the agent writes the workspace; what it writes there does not run "
         f"(exec {word}; {'; '.join(f'{w}: {o}' for w, o in mapped.items())}); "
         f"{len(held)} control file(s) read-only")


def test_66_brokered_commands_through_the_server(request: Req) -> None:
    workspace = str(FACTS["workspace"])
    target = os.path.join(workspace, ".csbx-brokered-command")
    result = _command(f"echo out; echo err >&2; ls /proc | grep -c '^[0-9]'; "
                      f"echo x > {target}; exit 7")
    try:
        assert result.returncode == 7, f"status {result.returncode}: {result.stderr.strip()}"
        lines = result.stdout.split()
        assert lines[0] == "out" and result.stderr.strip() == "err", (result.stdout,
                                                                      result.stderr)
        assert os.path.exists(target), "the command could not write the workspace"
        if fresh_procfs():  # else the outer /proc is bound with masks, commands included
            assert int(lines[1]) <= 4, f"the command sees {lines[1]} processes"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(target)
    note(request, f"status, streams and the workspace through the server; "
         f"{lines[1]} processes visible to the command")


def test_67_brokered_command_cannot_reach_agent(request: Req) -> None:
    # The agent is named by its command line (this file's name, split in the script so
    # that the script's own command line does not match): a pid means nothing across
    # the command's pid namespace.
    result = _command('for p in /proc/[0-9]*; do '
                      'tr "\\0" " " < $p/cmdline 2>/dev/null '
                      '| grep -q "test_brok""ered" || continue; '
                      'echo SEEN; cat $p/environ >/dev/null 2>&1 && echo READ; '
                      'kill -0 ${p#/proc/} 2>/dev/null && echo SIGNALLED; done; exit 0')
    words = result.stdout.split()
    assert "READ" not in words, "a command read the agent's environment"
    assert "SIGNALLED" not in words, "a command signalled the agent"
    note(request, "the agent is not visible to its commands" if "SEEN" not in words else
         "visible (the outer /proc is bound), but its environment and signals are refused")


def test_68_brokered_locks_cannot_be_undone(request: Req) -> None:
    status = Path("/proc/self/status").read_text()
    effective = next(line.split()[1] for line in status.splitlines()
                     if line.startswith("CapEff:"))
    assert int(effective, 16) == 0, f"the agent holds capabilities {effective}"
    workspace = str(FACTS["workspace"]).encode()
    remount = LIBC.mount(None, workspace, None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND
    assert remount != 0, "the agent remounted the workspace"
    assert LIBC.umount2(workspace, 2) != 0, "the agent unmounted the workspace"  # MNT_DETACH
    assert os.getuid() != 0, "the agent runs as root"
    note(request, "no capabilities; remount and umount refused")


def test_69_brokered_agent_network(request: Req) -> None:
    port = next(p for p in range(2200, 2300) if p not in FACTS.get("agent_connect", []))
    with socket.socket() as sock:
        sock.settimeout(5)
        with pytest.raises(OSError) as caught:
            sock.connect(("127.0.0.1", port))
    assert caught.value.errno == errno.EACCES, f"connect: {errname(caught.value.errno or 0)}"
    with socket.socket() as sock, pytest.raises(OSError) as listen:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
    assert listen.value.errno == errno.EACCES, f"listen: {errname(listen.value.errno or 0)}"
    script = (f"import socket; s = socket.socket(); s.settimeout(5)\n"
              f"try: s.connect(('127.0.0.1', {port}))\n"
              f"except OSError as e: print(e.errno)")
    result = _command(f"exec python3 -c \"{script}\"")
    assert result.stdout.strip() != str(errno.EACCES), "Landlock refused the command too"
    note(request, f"the agent: connect to {port} and listen EACCES; a command: "
         f"errno {result.stdout.strip() or 'none (connected)'}")


# ------------------------------------------------------------- side doors (adversarial)
def _blocked(request: Req, detail: str) -> None:
    request.node.user_properties.append(("detail", detail))


def test_a41_exec_shell_or_interpreter_directly(request: Req) -> None:
    real = [p for p in ("/usr/bin/perl", "/usr/bin/dash", "/usr/bin/bash", "/usr/bin/python3")
            if os.path.exists(p) and not _same_file(p, paths.COMMAND_CLIENT)
            and os.path.realpath(p) not in FACTS.get("agent_programs", [])]
    # The real shell, reached through the server's view of the file system. Only where
    # the sandbox has its own procfs: under a container engine's masked /proc the pid
    # numbers in /proc are the container's, not the sandbox's.
    if fresh_procfs():
        real.append(f"/proc/{os.getppid()}/root/usr/bin/bash")
    words = {p: _exec_error(p, [p, "-c", "exit 0"]) for p in real}
    escaped = [p for p, word in words.items() if word == "ran"]
    if escaped:
        pytest.fail(f"executed directly: {', '.join(escaped)}")
    _blocked(request, ", ".join(f"{p}: {word}" for p, word in words.items()))


def test_a42_exec_from_memory(request: Req) -> None:
    found = _memory_exec()
    ran = {where: word for where, word in found.items() if word not in ("EACCES", "ENOSYS")}
    if ran:
        pytest.fail(f"memory exec: {ran}")
    _blocked(request, ", ".join(f"{where}: {word}" for where, word in found.items()))


def test_a43_signal_or_trace_the_server(request: Req) -> None:
    server = os.getppid()
    try:
        os.kill(server, 0)
        pytest.fail("signalled the command server")
    except PermissionError:
        pass
    if LIBC.ptrace(16, server, 0, 0) == 0:
        pytest.fail("attached to the command server")
    _blocked(request, "EPERM")


def test_a44_replace_the_server_socket(request: Req) -> None:
    sock = paths.BROKER_SOCKET
    try:
        os.unlink(sock)
        pytest.fail("removed the command server's socket")
    except OSError as error:
        _blocked(request, errname(error.errno or 0))


def test_a45_run_what_the_agent_wrote_to_the_workspace(request: Req) -> None:
    workspace = str(FACTS["workspace"])
    copy = _writable_copy(workspace)
    try:
        outcome = {"exec": _exec_error(copy, [copy]), **map_written_code(workspace)}
    finally:
        os.unlink(copy)
    ran = [way for way, word in outcome.items() if word == "ran"]
    if ran:
        pytest.fail(f"the agent ran what it wrote to the workspace: {', '.join(ran)}")
    _blocked(request, "; ".join(f"{way}: {word}" for way, word in outcome.items()))


def test_a59_transports_past_the_port_rule(request: Req) -> None:
    """MPTCP, SCTP and TCP Fast Open reach a port outside the agent's list past Landlock's
    TCP rules; UDP goes anywhere unless something limits it."""
    port = next(p for p in range(2200, 2300) if p not in FACTS.get("agent_connect", []))
    words = {}
    for name, protocol in (("MPTCP", 262), ("SCTP", 132)):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM, protocol) as sock:
                sock.settimeout(5)
                sock.connect(("127.0.0.1", port))
            words[name] = "connected"
        except OSError as error:
            words[name] = errname(error.errno or 0)
    try:
        with socket.socket() as sock:
            sock.settimeout(5)
            sock.sendto(b"x", 0x20000000, ("127.0.0.1", port))  # MSG_FASTOPEN
        words["TCP Fast Open"] = "sent"
    except OSError as error:
        words["TCP Fast Open"] = errname(error.errno or 0)
    if FACTS.get("egress_jail", True):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"x", ("198.51.100.1", 443))
            words["UDP"] = "sent"
        except OSError as error:
            words["UDP"] = errname(error.errno or 0)
    # A socket the protocol refuses (EPROTONOSUPPORT, EOPNOTSUPP) or Landlock (EACCES), or
    # a UDP datagram the jail's filter refuses at the sender (EPERM), went nowhere.
    escaped = {k: v for k, v in words.items()
               if v not in ("EPROTONOSUPPORT", "EOPNOTSUPP", "ENOTSUP", "EACCES", "EPERM")}
    if escaped:
        pytest.fail(f"past the agent's port rule: {escaped}")
    _blocked(request, ", ".join(f"{k}: {v}" for k, v in words.items()))


def test_a62_ld_preload_and_the_loader_from_the_agent(request: Req) -> None:
    outcome = {}
    for place in ("/tmp", os.path.expanduser("~")):
        outcome.update({f"{place}: {way}": word
                        for way, word in map_written_code(place).items()})
    ran = [way for way, word in outcome.items() if word == "ran"]
    if ran:
        pytest.fail(f"code the agent wrote ran in its own process: {', '.join(ran)}")
    _blocked(request, "; ".join(f"{way}: {word}" for way, word in outcome.items()))
