"""The terminal through the sandbox: Ctrl-C and window resizes reach the agent, and only it.

A real pty drives `claude-sandbox shell`, jail off and on, as a person's terminal would.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios
import time

import pytest

from .ptyio import PtyProcess

pytestmark = pytest.mark.integration

AGENT = """
import fcntl, os, signal, struct, sys, termios, time
def size():
    return struct.unpack("hhhh", fcntl.ioctl(0, termios.TIOCGWINSZ, b"0" * 8))[:2]
events = []
signal.signal(signal.SIGWINCH, lambda *a: events.append("winch"))
signal.signal(signal.SIGINT, lambda *a: events.append("int"))
print("READY", size(), flush=True)
seen, deadline = set(), time.monotonic() + 60  # until both came, however slow the machine
while seen != {"winch", "int"} and time.monotonic() < deadline:
    time.sleep(0.05)
    while events:
        seen.add(events[0])
        print(events.pop(0).upper(), size(), flush=True)
print("SURVIVED", flush=True)
sys.exit(42)
"""


class Terminal(PtyProcess):
    def __init__(self, jail: str, workspace: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(workspace)
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "TERM": "xterm",
                   "CLAUDE_SANDBOX_EGRESS_JAIL": jail}
            # sh reports the dispositions the agent got (python would ignore SIGPIPE itself).
            script = 'grep SigIgn /proc/self/status; exec /usr/bin/python3 -c "$0"'
            os.execve("/usr/local/bin/claude-sandbox",
                      ["claude-sandbox", "shell", "--", "/bin/sh", "-c", script, AGENT], env)
        self.seen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("hhhh", rows, cols, 0, 0))

    def status(self) -> int:
        while self.wait_for("\0never", timeout=0.2):
            pass
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


@pytest.mark.parametrize("jail", ["0", "1"])
def test_ctrl_c_and_resize_reach_the_agent_and_only_it(jail: str, tmp_path: object) -> None:
    terminal = Terminal(jail, str(tmp_path))
    terminal.resize(30, 100)
    # Nothing ignored: not SIGPIPE (Python's), not SIGINT (the launcher's, for bwrap).
    assert terminal.wait_for("SigIgn:\t0000000000000000"), terminal.seen
    assert terminal.wait_for("READY (30, 100)"), terminal.seen
    terminal.resize(40, 120)
    assert terminal.wait_for("WINCH (40, 120)"), terminal.seen
    os.write(terminal.fd, b"\x03")
    assert terminal.wait_for("INT"), terminal.seen
    # The agent handled Ctrl-C and went on: bwrap did not die of it and take it along.
    assert terminal.wait_for("SURVIVED"), terminal.seen
    assert terminal.status() == 42


SLEEPER = """
import os, signal, sys, time
marker = sys.argv[1]
signal.signal(signal.SIGHUP, lambda *a: (open(marker, "w").write("hup"), sys.exit(1)))
print("READY", flush=True)
time.sleep(120)
"""


def _sandbox_processes(token: str) -> list[str]:
    """Processes of a launch: anything whose command line holds the test's token."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if token.encode() in handle.read():
                        found.append(pid)
            except OSError:
                pass
    return found


def _gone_within(token: str, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _sandbox_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _start(jail: str, workspace: str, token: str) -> Terminal:
    terminal = Terminal.__new__(Terminal)
    terminal.pid, terminal.fd = pty.fork()
    if terminal.pid == 0:
        os.chdir(workspace)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "TERM": "xterm",
               "CLAUDE_SANDBOX_EGRESS_JAIL": jail}
        os.execve("/usr/local/bin/claude-sandbox",
                  ["claude-sandbox", "shell", "--", "/usr/bin/python3", "-c", SLEEPER,
                   os.path.join(workspace, token)], env)
    terminal.seen = b""
    assert terminal.wait_for("READY"), terminal.seen
    return terminal


@pytest.mark.parametrize("jail", ["0", "1"])
def test_closing_the_terminal_hangs_up_the_agent_and_ends_everything(
        jail: str, tmp_path: object) -> None:
    token = f"csbx-hup-{os.getpid()}-{jail}"
    terminal = _start(jail, str(tmp_path), token)
    os.kill(terminal.pid, 1)  # what the kernel sends the foreground group on a hang-up
    left = _gone_within(token, 2.0)
    status = os.waitstatus_to_exitcode(os.waitpid(terminal.pid, 0)[1])
    assert left == [], f"still running 2 s after the hang-up: {left}"
    assert status == 1, status  # the agent's own status: it handled the hang-up
    assert os.path.exists(os.path.join(str(tmp_path), token)), "the agent got no hang-up"


@pytest.mark.parametrize("jail", ["0", "1"])
def test_a_sigkilled_launcher_with_a_terminal_leaves_nothing(jail: str, tmp_path: object) -> None:
    token = f"csbx-kill-{os.getpid()}-{jail}"
    terminal = _start(jail, str(tmp_path), token)
    os.kill(terminal.pid, 9)
    os.waitpid(terminal.pid, 0)
    left = _gone_within(token, 2.0)
    assert left == [], f"still running 2 s after the launcher's SIGKILL: {left}"


def test_a_command_resolves_as_the_inside_sees_it(tmp_path: object) -> None:
    """A PATH entry under $HOME ahead of /usr/bin (a pyenv shim) is not there inside."""
    import subprocess

    shims = "/root/.csbx-shims"
    os.makedirs(shims, exist_ok=True)
    with open(f"{shims}/python3", "w") as handle:
        handle.write("#!/bin/sh\necho outer-shim\n")
    os.chmod(f"{shims}/python3", 0o755)
    try:
        result = subprocess.run(
            ["/usr/local/bin/claude-sandbox", "shell", "--", "python3", "-c", "print('inner')"],
            cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
            env={"PATH": f"{shims}:/usr/local/bin:/usr/bin:/bin", "HOME": "/root",
                 "CLAUDE_SANDBOX_EGRESS_JAIL": "0"})
    finally:
        import shutil
        shutil.rmtree(shims)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "inner"


def test_background_work_the_agent_leaves_is_named_when_it_ends(tmp_path: object) -> None:
    """On a terminal, what the agent started and left running ends with the session, and
    the session says so rather than end it silently."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(str(tmp_path))
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "TERM": "xterm",
               "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
        os.execve("/usr/local/bin/claude-sandbox",
                  ["claude-sandbox", "shell", "--", "/bin/sh", "-c",
                   "sleep 300 & sleep 301 & echo STARTED"], env)
    terminal = PtyProcess()
    terminal.pid, terminal.fd = pid, fd
    assert terminal.wait_for("left running end with the session", timeout=60), terminal.seen
    assert terminal.wait_for(")\r\n"), terminal.seen  # the line's end
    # Each child is named as it is then: `sleep`, or `sh` until its fork has exec'd.
    named = re.search(rb"(\d+) process\(es\) the agent left running end with the session "
                      rb"\(([^)]*)\)", terminal.seen)
    assert named and named.group(1) == b"2", terminal.seen
    assert set(named.group(2).split(b", ")) <= {b"sleep", b"sh"}, terminal.seen
    os.waitpid(pid, 0)
