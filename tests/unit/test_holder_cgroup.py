"""The jail's holder, a fork of the launcher: it joins the launch's cgroup before it
serves anything, and refuses in one line when it cannot (a launch whose caps would not
hold must not go on); it keeps none of the launcher's descriptors, even at 0, 1 or 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _holder(*cgroup: str) -> subprocess.CompletedProcess[str]:
    """The holder, forked as a launch forks it, from this checkout, with a channel this
    end closes once the holder says its namespaces exist: it joins, then finds nothing
    to serve and ends. Its status is the process's."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from claude_sandbox.core import wire; "
            "from claude_sandbox.jail import holderfork; "
            "holder, sock = holderfork.spawn_holder(tuple(sys.argv[2:])); "
            "print(*wire.receive_fields(sock, 64)); sock.close(); sys.exit(holder.wait())")
    argv = [sys.executable, "-I", "-c", code, str(REPO), *cgroup]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_a_cgroup_it_cannot_join_stops_it_before_it_serves(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cgroup"
    ran = _holder(str(missing))
    assert ran.returncode == 69 and ran.stdout == "up\n", ran
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "cgroup cannot be joined" in lines[0], ran.stderr
    assert str(missing) in lines[0]


def test_it_writes_itself_into_each_directory(tmp_path: Path) -> None:
    """Into a plain directory standing for a cgroup: the holder writes "0" (itself) to
    each cgroup.procs, then serves until its channel closes."""
    dirs = [tmp_path / "pids", tmp_path / "memory"]
    for directory in dirs:
        directory.mkdir()
        (directory / "cgroup.procs").write_text("")
    ran = _holder(*map(str, dirs))
    assert ran.returncode in (0, 1), ran  # the channel closed: nothing more to hold
    for directory in dirs:
        assert (directory / "cgroup.procs").read_text() == "0"


def test_a_launcher_without_stdin_does_not_lend_the_holder_its_own_end() -> None:
    """With its stdin closed, the launcher's first descriptor takes number 0: here its
    end of the holder's channel. An exec would close it (close-on-exec); the forked holder
    puts /dev/null there instead, so it still sees end of file when the launcher's end
    closes (a launcher SIGKILLed in set-up), and ends. (The package fills a standard
    descriptor it was started without, core/streams.py: stdin is closed here after that,
    so that the holder's own guard is what is tested.)"""
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from claude_sandbox.core import "
            "wire; from claude_sandbox.jail import holderfork; os.close(0); "
            "holder, sock = holderfork.spawn_holder(); assert sock.fileno() == 0, sock.fileno(); "
            "assert wire.receive_fields(sock, 64) == ['up']; "
            "print(os.readlink(f'/proc/{holder.pid}/fd/0'), flush=True); sock.close(); "
            "sys.exit(holder.wait())")
    ran = subprocess.run([sys.executable, "-I", "-c", code, str(REPO)], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30, check=False)
    assert ran.stdout.strip() == "/dev/null", ran
    assert ran.returncode == 1, ran  # its channel closed: nothing more to hold


def test_the_package_fills_a_standard_descriptor_it_was_started_without(
        tmp_path: Path) -> None:
    """stdin closed and stderr open only for reading (as bash leaves its script at the
    lowest free number across a shim's exec): importing the package puts /dev/null at
    both, and a message to stderr is written, not an error."""
    script = tmp_path / "script"
    script.write_text("read only\n")
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import claude_sandbox; "
            "print(os.readlink('/proc/self/fd/0'), os.readlink('/proc/self/fd/2')); "
            "sys.stderr.write('said\\n'); sys.stderr.flush()")

    def start() -> None:
        os.close(0)
        fd = os.open(script, os.O_RDONLY)
        os.dup2(fd, 2)
        os.close(fd)

    ran = subprocess.run([sys.executable, "-I", "-c", code, str(REPO)], capture_output=True,
                         text=True, timeout=30, check=False, preexec_fn=start)
    assert ran.returncode == 0, ran
    assert ran.stdout.split() == ["/dev/null", "/dev/null"], ran
