"""jail/tie.c and spawn.spawn_tied: pasta and the outside relays start without a fork
of the launcher, and still end with it, in its cgroup, holding nothing it inherited."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from claude_sandbox.core import paths, process, spawn
from claude_sandbox.install import placed

TOP = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def tie(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tie program, built from this checkout as the installer builds it."""
    program = next(p for p in placed.PROGRAMS if p.target == paths.TIE)
    built = tmp_path_factory.mktemp("tie") / "tie"
    subprocess.run(["gcc", *program.flags, "-o", str(built), str(program.source)], check=True)
    return str(built)


def _spawn(tie: str, args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """tie run by this process (its parent is this process: the pid to name)."""
    return subprocess.run([tie, *args], capture_output=True, text=True, check=False,
                          **kwargs)  # type: ignore[call-overload, no-any-return]


def test_it_runs_the_program_with_its_arguments_and_environment(tie: str) -> None:
    result = _spawn(tie, [str(os.getpid()), "--", "/bin/sh", "-c", 'echo "$1 $WHO"; exit 7',
                          "sh", "argument"], env={"WHO": "env"})
    assert (result.returncode, result.stdout) == (7, "argument env\n")


def test_a_parent_it_was_not_told_runs_nothing(tie: str, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    result = _spawn(tie, [str(os.getppid()), "--", "/bin/touch", str(mark)])
    assert result.returncode == 127 and not mark.exists()


@pytest.mark.parametrize("dies", [True, False], ids=["launcher-dead", "launcher-alive"])
def test_a_launcher_dead_before_its_prctl_leaves_nothing_running(tie: str, tmp_path: Path,
                                                                 dies: bool) -> None:
    """The launcher spawned tie naming itself, then died before tie set the signal: tie
    finds itself reparented and runs nothing (the signal would never come). The process
    that becomes tie sleeps first, as `sh`, so that the launcher is gone by then; the
    same with a launcher that waits runs the program."""
    mark = tmp_path / "ran"
    middle = (
        "import os, sys\n"
        "pid = os.posix_spawn('/bin/sh', ['sh', '-c', 'sleep 0.3; exec \"$0\" \"$@\"', "
        f"{tie!r}, str(os.getpid()), '--', '/bin/touch', {str(mark)!r}], {{}})\n"
        f"if not {dies!r}:\n"
        "    sys.exit(os.waitpid(pid, 0)[1] >> 8)\n")
    assert subprocess.run([sys.executable, "-c", middle], check=False).returncode == 0
    time.sleep(0.6 if dies else 0)
    assert mark.exists() != dies


def test_the_program_dies_with_a_sigkilled_parent(tie: str, tmp_path: Path) -> None:
    """What check 49 relies on: the kernel kills the program when the launcher dies."""
    pidfile = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        f"os.posix_spawn({tie!r}, [{tie!r}, str(os.getpid()), '--', '/bin/sh', '-c', "
        f"'echo $$ > {pidfile}; exec sleep 60'], {{}})\n"
        "time.sleep(60)\n")])
    try:
        sleeper = int(_written(pidfile))
        assert process.pid_alive(sleeper)
    finally:
        parent.kill()
        parent.wait()
    _gone(sleeper)


def _written(path: Path) -> str:
    """What the program writes to `path` once it runs."""
    deadline = time.monotonic() + 10
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, "the program never ran"
        time.sleep(0.01)
    return path.read_text()


def _gone(pid: int) -> None:
    """`pid` ends soon after its parent was SIGKILLed."""
    deadline = time.monotonic() + 5
    while _running(pid):
        assert time.monotonic() < deadline, "the program outlived its SIGKILLed parent"
        time.sleep(0.01)


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its reaper."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_cgroup_it_cannot_join_stops_it_before_the_program(tie: str, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    result = _spawn(tie, [str(os.getpid()), str(tmp_path / "no-cgroup"), "--", "/bin/touch",
                          str(mark)])
    assert result.returncode == 69 and not mark.exists()
    assert result.stderr == (
        "claude-sandbox: the launch stops: its cgroup cannot be joined, so max-pids and "
        f"max-memory would not hold (cannot write to {tmp_path}/no-cgroup/cgroup.procs: "
        "No such file or directory)\n")


def test_it_writes_the_cgroup_join(tie: str, tmp_path: Path) -> None:
    """"0" to each directory's cgroup.procs (here plain files: the write is the join)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    for directory in dirs:
        directory.mkdir()
        (directory / "cgroup.procs").write_text("")
    result = _spawn(tie, [str(os.getpid()), *map(str, dirs), "--", "/bin/true"])
    assert result.returncode == 0
    assert [(d / "cgroup.procs").read_text() for d in dirs] == ["0", "0"]


def test_nothing_inherited_above_stderr_reaches_the_program(tie: str) -> None:
    """An inheritable descriptor of the starting process's, low and high, is closed."""
    low = os.open("/dev/null", os.O_RDONLY)
    high = os.dup2(low, 900)
    os.set_inheritable(low, True)
    try:
        result = _spawn(tie, [str(os.getpid()), "--", "/bin/ls", "/proc/self/fd"],
                        pass_fds=(low, high))
    finally:
        os.close(low)
        os.close(high)
    # 3: the listing's own descriptor, ls's
    assert result.returncode == 0 and sorted(map(int, result.stdout.split())) == [0, 1, 2, 3]



def test_without_close_range_what_proc_lists_is_closed(tie: str) -> None:
    """A kernel or an engine's seccomp profile without close_range (Linux before 5.9;
    ENOSYS): tie closes what /proc/self/fd lists instead, low and high alike."""
    middle = (
        "import errno, os, platform, sys\n"
        "CLOSE_RANGE = 436  # the unified table: one number on every architecture\n"
        "from claude_sandbox.core import bpf, kernel\n"
        "from claude_sandbox.core.libc import get_errno, load_libc\n"
        "libc = load_libc()\n"
        "libc.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # which a filter needs\n"
        "refusal = bpf.Refusal(CLOSE_RANGE, errno.ENOSYS)\n"
        "assert bpf.load(bpf.assemble((refusal,), platform.machine()))\n"
        "assert libc.syscall(CLOSE_RANGE, 3, 3, 0) == -1 and get_errno() == errno.ENOSYS\n"
        "low = os.open('/dev/null', os.O_RDONLY)\n"
        "high = os.dup2(low, 900)\n"
        "os.set_inheritable(low, True)\n"
        f"os.execv({tie!r}, [{tie!r}, str(os.getppid()), '--', '/bin/ls', '/proc/self/fd'])\n")
    result = subprocess.run([sys.executable, "-c", middle], capture_output=True, text=True,
                            check=False, env={"PYTHONPATH": TOP})
    assert result.returncode == 0, result.stderr
    # 3: the listing's own descriptor, ls's
    assert sorted(map(int, result.stdout.split())) == [0, 1, 2, 3]


def test_glibcs_internal_signals_are_not_left_ignored(tie: str) -> None:
    """posix_spawn leaves glibc's two internal signals ignored; tie gives the program
    their defaults, as a fork would have left them."""
    probe = (f"import os; os.posix_spawn({tie!r}, [{tie!r}, str(os.getpid()), '--', '/bin/grep', "
             "'SigIgn', '/proc/self/status'], {}); os.wait()")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    ignored = int(result.stdout.split()[1], 16)
    assert not ignored & (1 << 31 | 1 << 32), hex(ignored)


@pytest.mark.parametrize("args", [
    [],
    ["pid", "--", "/bin/true"],
    ["0", "--", "/bin/true"],
    ["+{pid}", "--", "/bin/true"],
    [" {pid}", "--", "/bin/true"],
    ["4294967297", "--", "/bin/true"],  # 2**32 + 1: no pid, not 1 modulo a cast
    ["{pid}", "--", "true"],
    ["{pid}", "relative", "--", "/bin/true"],
    ["{pid}", "/bin/true"],
    ["{pid}", "--"],
])
def test_bad_arguments_run_nothing(tie: str, args: list[str]) -> None:
    result = _spawn(tie, [a.format(pid=os.getpid()) for a in args])
    assert result.returncode == 64 and result.stderr.startswith("claude-sandbox tie: ")


ROOT = pytest.mark.skipif(os.getuid() != 0, reason="only a root-owned tie is run")


@pytest.fixture
def tie_placed(tie: str) -> Iterator[str]:
    """The built tie where only root could have put it: a root-owned 0755 directory
    (the test's temporary directories are under /tmp, which everyone may write)."""
    directory = tempfile.mkdtemp(prefix="csbx-tie-", dir="/usr/local/lib")
    try:
        os.chmod(directory, 0o755)
        path = os.path.join(directory, "tie")
        shutil.copy(tie, path)
        os.chmod(path, 0o755)
        yield path
    finally:
        shutil.rmtree(directory)


@ROOT
@pytest.mark.parametrize("installed", [True, False], ids=["tie", "fork"])
def test_spawn_tied_ends_with_its_parent_either_way(tie_placed: str, tmp_path: Path,
                                                    installed: bool) -> None:
    """Through the tie program where it is the installer's (root's, no one else may write
    it), by a fork otherwise: in its own session, its streams given, dead with its parent."""
    assert spawn.installed_program(tie_placed)
    where = tie_placed if installed else str(tmp_path / "absent")
    out = tmp_path / "out"
    parent = subprocess.Popen([sys.executable, "-c", (
        f"import os, sys, time; sys.path.insert(0, {TOP!r})\n"
        "from claude_sandbox.core import paths, spawn\n"
        f"paths.TIE = {where!r}\n"
        f"out = os.open({str(out)!r}, os.O_WRONLY | os.O_CREAT, 0o600)\n"
        "spawn.spawn_tied(['/bin/sh', '-c', 'read -r _ _ _ _ _ sid _ < /proc/$$/stat; "
        "echo $$ $sid $PPID; exec sleep 60'], {'PATH': '/usr/bin:/bin'}, {1: out})\n"
        "time.sleep(60)\n")])
    try:
        pid, session, ppid = map(int, _written(out).split())
        assert session == pid and ppid == parent.pid
    finally:
        parent.kill()
        parent.wait()
    _gone(pid)


@ROOT
def test_a_tie_others_may_write_is_not_run(tie_placed: str) -> None:
    os.chmod(tie_placed, 0o775)
    assert not spawn.installed_program(tie_placed)
    os.chmod(tie_placed, 0o755)
    assert spawn.installed_program(tie_placed)
    os.chown(tie_placed, 1, 0)
    assert not spawn.installed_program(tie_placed)
    os.chown(tie_placed, 0, 0)
    # Where others may write the directory, another program could have been put there.
    os.chmod(os.path.dirname(tie_placed), 0o777)
    assert not spawn.installed_program(tie_placed)
