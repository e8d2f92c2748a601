"""Checks 102 and 103, run outside: what the launching process hands down.

102: a descriptor the launching process inherited (an IDE's socket, a multiplexer's pipe)
stays with the launcher. Check 61 proves it reaches nothing inside the sandbox; this one
looks at the launch's own processes outside it that live while the session runs: the
janitor, the jail's holder (bwrap by then), pasta, the egress proxy, the relays. Each
starts from the launcher (a fork, or the janitor's spawn) and keeps every descriptor it is
not told to close or that lacks close-on-exec. (The
late-mount helper and the directory-time reader end before the session runs:
tests/integration/test_helper_descriptors.py proves the helper.) The runner hands one down at a low
number and one above a soft limit it lowered, as `ulimit -Sn 1024` in a shell leaves it:
a close up to the soft limit does not reach that one.

103: a launcher started with SIGCHLD ignored (some process managers and shells leave it
so) still gets its session's status: with the disposition inherited, the kernel would
reap every child at once, and the launcher would wait for ever for one it can no
longer wait for.
"""

from __future__ import annotations

import os
import resource
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping

from outside import Result, Snapshot, _launch_processes, _quiet, _started, snapshot

LOW_FD = 9
HIGH_FD = 1500
LOWERED_SOFT_LIMIT = 1024


def _held_by(pid: int, target: os.stat_result) -> list[int] | None:
    """The descriptors of `pid` that lead to `target`; None where the kernel does not let
    this runner read them (another user's process, or one that is not dumpable and that
    this runner may not trace)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return []  # gone since
    held = []
    for name in names:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except PermissionError:
            return None
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            held.append(int(name))
    return sorted(held)


def _high_possible() -> bool:
    """Whether the hard limit lets a descriptor sit at HIGH_FD at all."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard == resource.RLIM_INFINITY or hard > HIGH_FD


def _hand_down(fd: int) -> None:
    """In the launcher's child before its exec: the file at a low number and, where the
    hard limit allows, at a high one under a soft limit lowered below it afterwards.
    Checked before the exec: a check that handed nothing down would pass."""
    if fd == LOW_FD:
        os.set_inheritable(fd, True)
    else:
        os.dup2(fd, LOW_FD, inheritable=True)
    handed = [LOW_FD]
    if _high_possible():
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 1), hard))
        os.dup2(fd, HIGH_FD, inheritable=True)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, LOWERED_SOFT_LIMIT), hard))
        handed.append(HIGH_FD)
    want = os.fstat(fd)
    for number in handed:
        got = os.fstat(number)
        if not os.get_inheritable(number) or (got.st_dev, got.st_ino) != (want.st_dev,
                                                                         want.st_ino):
            raise OSError(f"descriptor {number} was not handed down")


def check_102_no_inherited_descriptor_outside(shim: str, agent: str, workdir: str,
                                               environ: Mapping[str, str]) -> Result:
    """While a session runs, no process of the launch but the launcher holds a descriptor
    the launcher inherited."""
    marker = f"{30 + secrets.randbelow(1000) / 1000:.3f}"  # sleep's argument, unique
    handle, path = tempfile.mkstemp(prefix="csbx-verify-fd102-", dir="/var/tmp")
    os.close(handle)
    fd = os.open(path, os.O_RDONLY)
    try:
        target = os.fstat(fd)
        before = snapshot()
        with tempfile.TemporaryFile() as said:
            launcher = subprocess.Popen(
                [shim, "shell", "--agent", agent, "--", "/bin/sleep", marker], cwd=workdir,
                env=dict(environ), close_fds=False, preexec_fn=lambda: _hand_down(fd),
                **_quiet(said))
            try:
                deadline = time.monotonic() + 60
                while not _started(before, marker):
                    if launcher.poll() is not None or time.monotonic() > deadline:
                        said.seek(0)
                        last = said.read().decode("utf-8", "replace").strip()[-300:]
                        return Result("102", "FAIL", f"the session never started "
                                      f"(exit {launcher.poll()}): {last}")
                    time.sleep(0.05)
                return _verdict(launcher.pid, before, target)
            finally:
                launcher.kill()  # the launch's own teardown is check 49's
                launcher.wait()
    finally:
        os.close(fd)
        os.unlink(path)


def _verdict(launcher: int, before: Snapshot, target: os.stat_result) -> Result:
    seen: list[str] = []
    unread: list[str] = []
    for entry in _launch_processes(before, launcher):
        pid = int(entry.rsplit("[", 1)[1].rstrip("]"))
        if pid == launcher:
            continue
        held = _held_by(pid, target)
        if held is None:
            unread.append(entry)
        elif held:
            return Result("102", "FAIL", f"{entry} holds the descriptor the launcher "
                          f"inherited, at {', '.join(map(str, held))}")
        else:
            seen.append(entry.split("[")[0])
    if _held_by(launcher, target) == []:  # read, and not there: the set-up failed
        return Result("102", "FAIL", "the launcher itself did not inherit the descriptor: "
                      "the check proves nothing")
    if not seen:
        return Result("102", "FAIL", "no process of the launch could be read")
    names = ", ".join(sorted(set(seen)))
    handed = (f"{LOW_FD}, and {HIGH_FD} above a soft limit of {LOWERED_SOFT_LIMIT}"
              if _high_possible() else f"{LOW_FD}; the hard limit allows none at {HIGH_FD}")
    detail = (f"{len(seen)} processes of the launch ({names}) hold no descriptor it "
              f"inherited ({handed})")
    if unread:
        # Not dumpable (the proxy, the launcher) or another user's: their descriptors are
        # read by a runner that may trace them, root with CAP_SYS_PTRACE (a container's
        # root without it reads no more than a user).
        detail += (f"; not readable by this runner: {', '.join(unread)} (a run as root with "
                   "CAP_SYS_PTRACE reads them)")
    return Result("102", "PASS", detail)


def check_103_sigchld_ignored_launcher(shim: str, agent: str, workdir: str,
                                       environ: Mapping[str, str]) -> Result:
    """A launcher started with SIGCHLD ignored ends with its session's own status."""
    def ignoring() -> None:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)

    try:
        ran = subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/sh", "-c", "exit 7"],
                             cwd=workdir, env=dict(environ), capture_output=True, text=True,
                             check=False, stdin=subprocess.DEVNULL, timeout=60,
                             preexec_fn=ignoring)
    except subprocess.TimeoutExpired:
        return Result("103", "FAIL", "started with SIGCHLD ignored, the launch did not end "
                      "within 60 s of a session that exits at once")
    if ran.returncode != 7:
        return Result("103", "FAIL", f"started with SIGCHLD ignored, the launch ended with "
                      f"{ran.returncode}, not the session's 7: {ran.stderr.strip()[-300:]}")
    return Result("103", "PASS", "started with SIGCHLD ignored, the launch ended with its "
                  "session's status (7)")
