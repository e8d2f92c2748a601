"""Every signal at every phase of an interactive launch leaves nothing behind.

Each launch runs in a real pty, as root and as a user, jail off and on. A
signal arrives during set-up, while the agent runs, or while the launcher
tears down, the way a user (Ctrl-C and Ctrl-\\ reach the terminal's whole
foreground group) or a supervisor (TERM, HUP, KILL to the launcher) sends it.
Afterwards: no process, mount, cgroup, jail directory or placeholder of the
launch is left, and the status is the agent's own or 128 + the signal.
Job control (Ctrl-Z, `fg`) runs under a real interactive bash.
"""

from __future__ import annotations

import os
import pty
import pwd
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from .conftest import TEST_USER
from .ptyio import PtyProcess

pytestmark = pytest.mark.integration

SHIM = "/usr/local/bin/claude-sandbox"
# The agent: says READY, runs a while, says BYE and exits 7 (its own status).
AGENT = (
    "import sys, time; print('READY', flush=True); time.sleep(float(sys.argv[1])); "
    "print('BYE', flush=True); sys.exit(7)  # csbx-signal-agent"
)
SIGNALS = {
    "INT": signal.SIGINT, "QUIT": signal.SIGQUIT, "TERM": signal.SIGTERM,
    "HUP": signal.SIGHUP, "KILL": signal.SIGKILL,
}  # fmt: skip
# Where the signal lands: after a trace line of set-up, after the agent's first
# line, or after its last (the launcher is then tearing down).
PHASES = {"set-up": None, "running": "READY", "teardown": "BYE"}


def _user_argv(user: str, argv: list[str]) -> list[str]:
    if user == "root":
        return argv
    uid = pwd.getpwnam(user).pw_uid
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", *argv]


def _env(user: str, jail: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pwd.getpwnam(user).pw_dir,
            "USER": user, "TERM": "xterm", "LANG": "C.UTF-8",
            "CLAUDE_SANDBOX_EGRESS_JAIL": jail, "CLAUDE_SANDBOX_TRACE": "1"}


class Session(PtyProcess):
    """One launch in its own pty; the launcher is the pty's session leader."""

    def __init__(self, user: str, jail: str, workspace: str, seconds: float) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(workspace)
            argv = [SHIM, "shell", "--", "/usr/bin/python3", "-c", AGENT, str(seconds)]
            argv = _user_argv(user, argv)
            os.execve(argv[0], argv, _env(user, jail))
        self.seen = b""

    def send(self, signum: int) -> None:
        """INT and QUIT as a terminal sends them (the foreground group), others to the launcher."""
        if signum in (signal.SIGINT, signal.SIGQUIT):
            try:
                group = os.tcgetpgrp(self.fd)
            except OSError:
                return  # the terminal has no foreground group left: the launch is over
            if group > 0 and group != os.getpgrp():  # never the test's own group
                os.killpg(group, signum)
        else:
            os.kill(self.pid, signum)

    def status(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.wait_for("\0never", timeout=0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"the launcher did not end: {self.seen[-2000:]!r}")


# ------------------------------------------------------------------ leftovers
def _ours(pid: str) -> bool:
    """A process a launch starts: the launcher and its helpers, bwrap, pasta, relays, the
    egress proxy."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
        with open(f"/proc/{pid}/comm", "rb") as handle:
            comm = handle.read().strip()
    except OSError:
        return False
    return (b"claude_sandbox" in cmdline or b"csbx-signal-agent" in cmdline
            or comm in (b"bwrap", b"pasta", b"pasta.avx2", b"passt", b"socat", b"csbx-egress"))


def _describe(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ")[:200].decode(errors="replace")
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return f"[state {fields[0]} ppid {fields[1]}] {cmdline}"
    except OSError:
        return "(gone)"


def _processes() -> set[str]:
    return {pid for pid in os.listdir("/proc") if pid.isdigit() and _ours(pid)}


def _mounts() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        return {" ".join(line.split()[3:5]) for line in handle}


def _cgroups() -> set[str]:
    found = set()
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        found |= {os.path.join(root, d) for d in dirs if d.startswith("claude-sandbox-")}
        if root.count("/") > 5:
            dirs[:] = []
    return found


def _tmp() -> set[str]:
    return {name for name in os.listdir("/tmp") if name.startswith("claude-sandbox-jail.")}


def _tree(workspace: str) -> set[str]:
    return {os.path.join(root, name) for root, dirs, files in os.walk(workspace)
            for name in dirs + files}


class Snapshot:
    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self.state = self._take()

    def _take(self) -> dict[str, set[str]]:
        return {"processes": _processes(), "mounts": _mounts(), "cgroups": _cgroups(),
                "jail directories": _tmp(), "workspace files": _tree(self.workspace)}

    def left(self, within: float = 3.0) -> dict[str, set[str]]:
        """What exists now that did not before, once the launch had `within` s to go."""
        deadline = time.monotonic() + within
        while True:
            now = self._take()
            extra = {k: now[k] - self.state[k] for k in now if now[k] - self.state[k]}
            if not extra or time.monotonic() > deadline:
                if "processes" in extra:  # name them: a pid alone says nothing in a report
                    extra["processes"] = {f"{pid} {_describe(pid)}" for pid in extra["processes"]}
                return extra
            time.sleep(0.05)


@pytest.fixture
def workspace(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    user = request.param
    path = tempfile.mkdtemp(prefix="cs-sig-", dir="/tmp")
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        yield user, path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(path + "-user", ignore_errors=True)


USERS = ["root", TEST_USER]


@pytest.mark.parametrize("workspace", USERS, indirect=True)
@pytest.mark.parametrize("jail", ["0", "1"])
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("name", list(SIGNALS))
def test_a_signal_at_any_phase_leaves_nothing(
        workspace: tuple[str, str], jail: str, phase: str, name: str) -> None:
    user, path = workspace
    signum = SIGNALS[name]
    before = Snapshot(path)
    session = Session(user, jail, path, seconds=30 if phase == "running" else 0.2)
    marker = PHASES[phase] or ("jail started" if jail == "1" else "trace: plan")
    assert session.wait_for(marker), session.seen[-2000:]
    session.send(signum)
    status = session.status()
    left = before.left()
    assert not left, f"left behind: {left}\n{session.seen[-1500:]!r}"
    # The user's own signal ends a launch quietly: "holder ended" is for another's kill.
    assert b"holder ended" not in session.seen, session.seen[-1500:]
    allowed = {7, 128 + signum}
    if phase == "running" and signum != signal.SIGKILL:
        allowed = {128 + signum}  # the agent does not handle it: it dies of it
    assert status in allowed, (status, session.seen[-1500:])


# ---------------------------------------------------------------- job control
JOB = (
    "import os, signal, sys, time\n"
    "print('READY', flush=True)\n"
    "if sys.argv[1] == 'self': os.kill(0, signal.SIGTSTP)  # Claude Code's Ctrl-Z in raw mode\n"
    "print('RESUMED', flush=True)\n"
    "time.sleep(30)\n"
)


class Shell(PtyProcess):
    """An interactive bash in a pty: the user's shell, with job control."""

    def __init__(self, user: str, jail: str, workspace: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(workspace)
            env = {**_env(user, jail), "PS1": "PROMPT$ "}
            del env["CLAUDE_SANDBOX_TRACE"]
            argv = _user_argv(user, ["/bin/bash", "--norc", "--noprofile", "-i"])
            os.execve(argv[0], argv, env)
        self.seen = b""
        assert self.wait_for("PROMPT$ ")

    def type(self, text: str, then: str, timeout: float = 30) -> None:
        mark = len(self.seen)
        os.write(self.fd, text.encode())
        deadline = time.monotonic() + timeout
        while then.encode() not in self.seen[mark:] and time.monotonic() < deadline:
            self.wait_for("\0never", timeout=0.05)
        assert then.encode() in self.seen[mark:], (text, then, self.seen[-1500:])

    def close(self) -> None:
        os.write(self.fd, b"exit\n")
        time.sleep(0.2)
        os.close(self.fd)
        os.waitpid(self.pid, 0)


@pytest.mark.parametrize("workspace", USERS, indirect=True)
@pytest.mark.parametrize("jail", ["0", "1"])
@pytest.mark.parametrize("how", ["ctrl-z", "self"])
def test_ctrl_z_and_fg(workspace: tuple[str, str], jail: str, how: str) -> None:
    """Ctrl-Z gives the shell its prompt back, `fg` resumes the agent: as without the sandbox.

    `self`: the agent stops itself with kill(0, SIGTSTP), as Claude Code does
    on Ctrl-Z in raw mode; its Landlock domain cannot signal the launcher, so
    the sandbox passes the stop on.
    """
    user, path = workspace
    before = Snapshot(path)
    shell = Shell(user, jail, path)
    try:
        mode = "self" if how == "self" else "wait"
        shell.type(f"{SHIM} shell -- /usr/bin/python3 -c \"$(printf '%b' '{_escaped(JOB)}')\" "
                   f"{mode}\n", "READY")
        if how == "ctrl-z":
            shell.type("\x1a", "Stopped")
        else:
            assert shell.wait_for("Stopped"), shell.seen[-1500:]
        shell.type("jobs\n", "Stopped")
        shell.type("fg\n", "RESUMED" if how == "self" else "claude-sandbox")
        time.sleep(0.3)
        shell.type("\x03", "PROMPT$ ")
        shell.type("echo STATUS=$?\n", "STATUS=130")  # fg's status: the agent's, 128 + SIGINT
    finally:
        shell.close()
    assert not before.left(), before.left()


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("'", "\\047")


# ----------------------------------------------------------------------- soak
SOAK = int(os.environ.get("CLAUDE_SANDBOX_TERMINAL_SOAK", "100"))


@pytest.mark.parametrize("workspace", ["root"], indirect=True)
def test_interactive_sessions_killed_at_random_moments_leave_nothing(
        workspace: tuple[str, str]) -> None:
    """SOAK sessions (100 by default), users and jail alternating, each signalled at a
    random moment between its start and a little after its end."""
    _, root_path = workspace
    user_path = root_path + "-user"
    os.mkdir(user_path)
    os.chown(user_path, *(lambda e: (e.pw_uid, e.pw_gid))(pwd.getpwnam(TEST_USER)))
    before = {p: Snapshot(p) for p in (root_path, user_path)}
    rng = random.Random(int(os.environ.get("CLAUDE_SANDBOX_SOAK_SEED", "12")))
    statuses = []
    started = time.monotonic()
    for index in range(SOAK):
        user, path = (("root", root_path), (TEST_USER, user_path))[index % 2]
        jail = "1" if index % 4 >= 2 else "0"
        name = rng.choice(list(SIGNALS))
        session = Session(user, jail, path, seconds=0.3)
        time.sleep(rng.uniform(0, 0.6))
        try:
            session.send(SIGNALS[name])
        except ProcessLookupError:
            pass
        status = session.status()
        statuses.append((name, status, jail, session.seen[-600:]))
        assert time.monotonic() - started < 600, "the soak is bounded to 10 minutes"
    for snapshot in before.values():
        left = snapshot.left(within=5.0)
        assert not left, f"after {SOAK} sessions: {left}"
    # 1: the agent, a Python interpreter, interrupted while it still imports.
    allowed = {0, 1, 7, *(128 + s for s in SIGNALS.values())}
    odd = [entry for entry in statuses if entry[1] not in allowed]
    assert not odd, odd


RAW = (
    "import sys, time, tty; tty.setraw(0); sys.stdout.write('\\x1b[?1049hRAW\\r\\n'); "
    "sys.stdout.flush(); time.sleep(30)  # csbx-signal-agent"
)


@pytest.mark.parametrize("workspace", ["root"], indirect=True)
@pytest.mark.parametrize("jail", ["0", "1"])
def test_the_terminal_is_given_back_sane(workspace: tuple[str, str], jail: str) -> None:
    """An agent killed in raw mode on the alternate screen: the shell gets its modes back."""
    import termios

    _, path = workspace
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(path)
        argv = [SHIM, "shell", "--", "/usr/bin/python3", "-c", RAW]
        os.execve(argv[0], argv, _env("root", jail))
    session = Session.__new__(Session)
    session.pid, session.fd, session.seen = pid, fd, b""
    before = termios.tcgetattr(fd)
    assert session.wait_for("RAW"), session.seen[-1500:]
    assert termios.tcgetattr(fd)[3] != before[3], "the agent did not switch to raw mode"
    os.kill(pid, signal.SIGTERM)
    while not os.waitpid(pid, os.WNOHANG)[0]:
        session.wait_for("\0never", timeout=0.05)
    assert termios.tcgetattr(fd) == before, "the terminal's modes were not restored"
    os.close(fd)


# ------------------------------------------------------------- the jail's holder
def _holder_of(launcher: int) -> int:
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                name, rest = handle.read().split(" (", 1)[1].rsplit(")", 1)
            parent = int(rest.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == launcher and name == "csbx-holder":  # a fork of the launcher, named
            return int(pid)
    raise AssertionError("no holder")


@pytest.mark.parametrize("workspace", USERS, indirect=True)
@pytest.mark.parametrize("when", ["jail: pasta spawned", "trace: jail started"])
def test_a_holder_killed_during_set_up_is_said(workspace: tuple[str, str], when: str) -> None:
    """The jail's holder killed from outside while the launch sets up (the OOM killer, an
    operator's kill), as the launcher starts it or later: one line says so, the status is
    the holder's, nothing is left."""
    user, path = workspace
    before = Snapshot(path)
    session = Session(user, "1", path, seconds=0.2)
    assert session.wait_for(when), session.seen[-2000:]
    os.kill(_holder_of(session.pid), signal.SIGKILL)
    status = session.status()
    left = before.left()
    assert not left, f"left behind: {left}\n{session.seen[-1500:]!r}"
    assert status == 128 + signal.SIGKILL, (status, session.seen[-1500:])
    assert b"holder ended before the session started" in session.seen, session.seen[-1500:]
    assert b"READY" not in session.seen


# Traps TERM and HUP as an agent may, to save its work: its status says it got one.
TRAPPING = ("import signal, sys, time\n"
            "for s in (signal.SIGTERM, signal.SIGHUP):\n"
            "    signal.signal(s, lambda n, f: (print('GOT', n, flush=True), sys.exit(3)))\n"
            "time.sleep(3); print('MISSED', flush=True)\n")


@pytest.mark.parametrize("workspace", USERS, indirect=True)
@pytest.mark.parametrize("jail", ["0", "1"])
@pytest.mark.parametrize("name", ["TERM", "HUP"])
def test_a_signal_as_the_session_starts_is_not_lost(
        workspace: tuple[str, str], jail: str, name: str) -> None:
    """TERM or a hang-up sent to the launcher as the session starts, while bwrap and the
    inner stage still ignore it, reaches the agent once it can take it (process.Forward's
    owed signals): the launch ends at once, with the agent's trap having run (3) or, where
    the signal came before the agent, by the signal; never after the grace kill,
    never with the agent's own end as if nothing was sent."""
    user, path = workspace
    env = {k: v for k, v in _env(user, jail).items() if k != "CLAUDE_SANDBOX_TRACE"}
    argv = _user_argv(user, [SHIM, "shell", "--", "python3", "-c", TRAPPING])
    for delay in [0.04 + 0.006 * step for step in range(14)]:
        launched = subprocess.Popen(argv, cwd=path, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(delay)
        os.kill(launched.pid, SIGNALS[name])  # setpriv execs: this is the launcher
        sent = time.monotonic()
        out = launched.communicate(timeout=30)[0].decode()
        took = time.monotonic() - sent
        assert "MISSED" not in out, (delay, out)
        # -N: the launcher itself, before the session, ended by the signal's default (the
        # jail off sets no handler until then; the janitor sweeps what it made).
        assert launched.returncode in (3, 128 + SIGNALS[name], -SIGNALS[name]), (delay, out)
        assert took < 0.8, (delay, took, out)  # the grace kill comes after 1 s


@pytest.mark.parametrize("workspace", USERS, indirect=True)
@pytest.mark.parametrize("jail", ["0", "1"])
def test_a_launch_under_nohup_lives_through_a_hang_up(
        workspace: tuple[str, str], jail: str) -> None:
    """Started with HUP ignored (nohup), the launch keeps it ignored as the agent does:
    a hang-up sent to the launcher ends nothing, and the agent's own status comes back."""
    user, path = workspace
    env = {k: v for k, v in _env(user, jail).items() if k != "CLAUDE_SANDBOX_TRACE"}
    launched = subprocess.Popen(
        _user_argv(user, [SHIM, "shell", "--", "sh", "-c", "sleep 0.8; echo done; exit 4"]),
        cwd=path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    time.sleep(0.4)
    os.kill(launched.pid, signal.SIGHUP)
    out = launched.communicate(timeout=30)[0].decode()
    assert launched.returncode == 4 and "done" in out, out
