"""The jail's holder joins the launch's cgroup before it serves anything, and refuses in
one line when it cannot (a launch whose caps would not hold must not go on)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _argv(*args: str) -> list[str]:
    """The holder's main, from this checkout, with `args`."""
    return [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
            "from claude_sandbox.jail import holder; sys.exit(holder.main(sys.argv[2:]))",
            str(REPO), *args]


def _holder(*cgroup: str) -> subprocess.CompletedProcess[str]:
    """The holder with a channel whose other end is closed at once: it joins, then finds
    nothing to serve and ends."""
    ours, theirs = socket.socketpair()
    args = [arg for directory in cgroup for arg in ("--cgroup", directory)]
    argv = _argv("--fd", str(theirs.fileno()), *args)
    with subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        ours.close()
        theirs.close()
        out, err = child.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


def test_a_cgroup_it_cannot_join_stops_it_before_it_serves(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cgroup"
    ran = _holder(str(missing))
    assert ran.returncode == 69, ran
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


def test_a_malformed_command_line_is_refused() -> None:
    for argv in (["--fd", "3", "--cgroup"], ["--fd", "3", "--other", "/x"]):
        ran = subprocess.run(_argv(*argv), capture_output=True, text=True, timeout=30,
                             check=False)
        assert ran.returncode == 64 and "internal" in ran.stderr, (argv, ran)
    assert os.path.isdir(REPO / "claude_sandbox")
