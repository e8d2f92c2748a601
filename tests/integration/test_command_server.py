"""The command server of `hardening = brokered`, driven from a real agent process.

Each test launches `claude-sandbox shell -- python3 SCRIPT` as the unprivileged test
user with `hardening = brokered` bound over the operator's file in a private mount
namespace: SCRIPT is the agent, and every shell it starts goes through the server.
What a user relies on: a timeout's TERM reaches the command, a client killed after its
grace period takes its command along, a garbled request harms nothing, and no command
outlives the agent.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.integration
SHIM = "/usr/local/bin/claude-sandbox"


@pytest.fixture
def setup() -> Iterator[tuple[pwd.struct_passwd, str, str]]:
    if os.getuid() != 0:
        pytest.skip("needs root to bind the configuration and act as the test user")
    user = pwd.getpwnam("sbxuser")
    workspace = tempfile.mkdtemp(prefix="csbx-server-")
    os.chown(workspace, user.pw_uid, user.pw_gid)
    conf = os.path.join(workspace, ".conf")
    with open(conf, "w") as handle:
        handle.write("hardening = brokered\nenv-may-widen = egress-jail\n")
    os.chmod(conf, 0o644)
    yield user, workspace, conf
    shutil.rmtree(workspace, ignore_errors=True)


# What a container engine does to /proc (test_boundary.py's simulation): no fresh procfs.
MASK_PROC = "mount --make-rprivate / && mount --bind /dev/null /proc/timer_list && "


def _agent(setup: tuple[pwd.struct_passwd, str, str], script: str, timeout: float = 60,
           masked: bool = False) -> subprocess.CompletedProcess[str]:
    user, workspace, conf = setup
    path = os.path.join(workspace, "agent.py")
    with open(path, "w") as handle:
        handle.write(script)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
    argv = ["unshare", "-m", "sh", "-c",
            f'{MASK_PROC if masked else ""}mount --bind {conf} /etc/claude-sandbox.conf && '
            'exec "$@"', "sh", *as_user,
            SHIM, "shell", "--", "/usr/bin/python3", path]
    return subprocess.run(argv, cwd=workspace, capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir,
                                                "CLAUDE_SANDBOX_EGRESS_JAIL": "0"})


def _leftovers(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def test_term_reaches_the_command_and_its_status_comes_back(setup) -> None:  # type: ignore[no-untyped-def]
    result = _agent(setup, """
import signal, subprocess, sys, time
p = subprocess.Popen(["/bin/bash", "-c", "trap 'echo got-term; exit 9' TERM; echo ready; "
                      "sleep 30 & wait"], stdout=subprocess.PIPE, text=True)
assert p.stdout.readline().strip() == "ready"
p.send_signal(signal.SIGTERM)
print("output", p.stdout.read().strip(), "status", p.wait(timeout=20))
""")
    assert "output got-term status 9" in result.stdout, (result.stdout, result.stderr)


def test_a_killed_client_takes_its_command_along(setup) -> None:  # type: ignore[no-untyped-def]
    marker = "csbx-server-sleeper-4821"
    result = _agent(setup, f"""
import signal, subprocess, time
p = subprocess.Popen(["/bin/sh", "-c", "sleep 3600; : {marker}"])
time.sleep(1)
assert open("/proc/self/status").read()  # the command runs, in its own pid namespace
p.kill()  # what Claude Code does 1.5 s after a timeout's TERM
p.wait()
time.sleep(1)
import os
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):  # the agent sees its commands' pids
    try:
        if b"{marker}" in open(f"/proc/{{pid}}/cmdline", "rb").read():
            left.append(pid)
    except OSError:
        pass
print("left", len(left))
""")
    assert "left 0" in result.stdout, (result.stdout, result.stderr)
    assert not _leftovers(marker), "the command outlived its client"


def test_a_garbled_request_harms_nothing(setup) -> None:  # type: ignore[no-untyped-def]
    result = _agent(setup, """
import socket, subprocess
for junk in (b"", b"\\xff" * 9, (40).to_bytes(4, "little") + b"1\\0/etc/passwd\\0/\\0" + b"9" * 30):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("/usr/libexec/claude-sandbox/broker/command.sock")  # paths.BROKER_SOCKET
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        print("reply", len(s.recv(16)))
print("after", subprocess.run(["/bin/sh", "-c", "exit 4"]).returncode)
""")
    assert "after 4" in result.stdout, (result.stdout, result.stderr)


def test_no_command_outlives_the_agent(setup) -> None:  # type: ignore[no-untyped-def]
    marker = "csbx-server-orphan-7731"
    result = _agent(setup, f"""
import subprocess, time
subprocess.Popen(["/bin/sh", "-c", "sleep 3600 & sleep 3600; : {marker}"])
time.sleep(1)
print("agent ends")
""")
    assert "agent ends" in result.stdout, (result.stdout, result.stderr)
    assert not _leftovers(marker), "a command outlived the agent"


def test_brokered_where_the_host_masks_proc(setup) -> None:  # type: ignore[no-untyped-def]
    """A container engine's masked /proc: no fresh procfs anywhere, and the agent's view
    and each command's namespaces still write their own uid maps."""
    result = _agent(setup, """
import os, shutil, subprocess
open("agent-wrote", "w").close()
shutil.copy("/bin/true", "agent-program")
os.chmod("agent-program", 0o755)
try:
    subprocess.run(["./agent-program"])
    print("agent ran its own program")
except OSError as error:
    print("agent", error.strerror)
print("command", subprocess.run(["/bin/sh", "-c", "echo x > command-wrote; exit 3"]).returncode)
""", masked=True)
    assert os.path.exists(os.path.join(setup[1], "agent-wrote")), (result.stdout, result.stderr)
    assert "agent Permission denied" in result.stdout, (result.stdout, result.stderr)
    assert "command 3" in result.stdout, (result.stdout, result.stderr)



def test_offline_commands_have_no_network(setup) -> None:  # type: ignore[no-untyped-def]
    """`offline-commands`: a command cannot reach even a listener the sandbox's own network
    reaches (the container's 127.0.0.1 with the jail off); without it, it can."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    probe = os.path.join(setup[1], "probe.py")
    with open(probe, "w") as handle:
        handle.write("import socket\ns = socket.socket()\ns.settimeout(5)\n"
                     f"try:\n    s.connect(('127.0.0.1', {port}))\n    print('reached')\n"
                     "except OSError as e:\n    print('refused', e.errno)\n")
    os.chmod(probe, 0o644)
    script = f"""
import subprocess
print(subprocess.run(["/bin/sh", "-c", "exec python3 {probe}"], capture_output=True,
                     text=True).stdout.strip())
"""
    try:
        assert "reached" in _agent(setup, script).stdout
        with open(setup[2], "a") as handle:
            handle.write("offline-commands\n")
        result = _agent(setup, script)
        assert "refused" in result.stdout, (result.stdout, result.stderr)
    finally:
        listener.close()


def test_offline_commands_and_the_agent_have_nowhere_to_meet(setup) -> None:  # type: ignore[no-untyped-def]
    """`offline-commands`: no socket file or FIFO can be made by the agent or by a command
    (a relay through /tmp would give the command the agent's network), and a network
    socket the agent hands a command as a standard stream is refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    with open(setup[2], "a") as handle:
        # local-port: the agent's own process may connect there (brokered's port rule).
        handle.write(f"offline-commands\nlocal-port = {port}\n")
    script = f"""
import os, socket, subprocess
for kind in ("socket", "fifo"):
    path = "/tmp/relay-" + kind
    try:
        if kind == "socket":
            socket.socket(socket.AF_UNIX).bind(path)
        else:
            os.mkfifo(path)
        print("agent made", kind)
    except OSError as error:
        print("agent", kind, error.strerror)
bind = "import socket; socket.socket(socket.AF_UNIX).bind('/tmp/cmd.sock')"
made = subprocess.run(["/bin/sh", "-c", "mkfifo /tmp/cmd-fifo; echo fifo $?; "
                       f"python3 -c \\"{{bind}}\\"; echo socket $?"],
                      capture_output=True, text=True)
print("command", made.stdout.split(), made.stderr.strip()[-80:])
tcp = socket.create_connection(("127.0.0.1", {port}))
handed = subprocess.run(["/bin/sh", "-c", "echo through >&0"], stdin=tcp,
                        capture_output=True, text=True)
print("handed", handed.returncode, handed.stderr.strip())
# A Unix stream is allowed; an unconnected TCP socket sent over it must not connect.
ours, theirs = socket.socketpair()
receive = ("import socket; s = socket.socket(fileno=0); "
           "_, fds, _, _ = socket.recv_fds(s, 1, 1); t = socket.socket(fileno=fds[0]); "
           "t.settimeout(5)\\n"
           "try:\\n    t.connect(('127.0.0.1', {port})); print('connected')\\n"
           "except OSError as e:\\n    print('refused', e.errno)")
command = subprocess.Popen(["/bin/sh", "-c", f'exec python3 -c "{{receive}}"'], stdin=theirs,
                           stdout=subprocess.PIPE, text=True)
theirs.close()
unconnected = socket.socket()
socket.send_fds(ours, [b"x"], [unconnected.fileno()])
print("passed", command.communicate(timeout=30)[0].strip())
"""
    try:
        result = _agent(setup, script)
    finally:
        listener.close()
    out = result.stdout
    assert "agent socket Permission denied" in out and "agent fifo Permission denied" in out, (
        out, result.stderr)
    assert "'fifo', '1'" in out and "'socket', '1'" in out, (out, result.stderr)
    assert "handed 126" in out and "may not be network sockets" in out, (out, result.stderr)
    assert "passed refused 13" in out, (out, result.stderr)  # EACCES: Landlock, no port


def test_agent_exec_lets_the_agent_run_a_program_itself(setup) -> None:  # type: ignore[no-untyped-def]
    script = """
import os, subprocess
for program in ("/usr/bin/git", "/usr/bin/id"):
    try:
        print(program, subprocess.run([program, "--version"], capture_output=True).returncode)
    except PermissionError:
        print(program, "EACCES")
"""
    assert "/usr/bin/git EACCES" in _agent(setup, script).stdout
    with open(setup[2], "a") as handle:
        handle.write("agent-exec = /usr/bin/git\n")
    result = _agent(setup, script)
    assert "/usr/bin/git 0" in result.stdout and "/usr/bin/id EACCES" in result.stdout, (
        result.stdout, result.stderr)
