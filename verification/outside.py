"""The numbered checks that can only be judged from outside the sandbox.

The verify runner calls these around the launch: 27 launches from places the
workspace check must refuse (they refuse before any namespace exists), 48
launches from an environment planted with redirections, 49 SIGKILLs a
launcher mid-session and 60 hangs up its terminal, 35 compares what existed
before the launch with what is left after it; 70 and 71 plant in a scratch
repository, 73 runs a review-mode session in one and applies it, 74 runs
what a user runs outside after a review session that planted for it, and 77 and
78 read back from the egress record where a misaddressed allowed name went, and 82
kills a session's egress proxy and sees what the agent's next connection meets.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXIT_REFUSED = 77
EXIT_CONFIG = 78  # a path that may not be writable, from any source (ADR 0005)
# Matched before any dot: pasta's process is named passt.avx2 (or passt.avx512)
# after the wrapper picks the build for this CPU.
WATCHED_COMMS = frozenset({"bwrap", "pasta", "passt", "csbx-holder", "socat", "csbx-egress"})


@dataclass(frozen=True, slots=True)
class Result:
    number: str
    outcome: str  # PASS / FAIL / SKIP
    detail: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    processes: frozenset[tuple[int, str]]
    mounts: frozenset[str]
    temp_entries: frozenset[str]


def _processes() -> frozenset[tuple[int, str]]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm", encoding="utf-8", errors="replace") as handle:
                    found.add((int(name), handle.read().strip()))
            except OSError:
                continue
    return frozenset(found)


def _temp_entries() -> frozenset[str]:
    entries = set()
    for base in ("/tmp", "/var/tmp", f"/run/user/{os.getuid()}"):
        try:
            entries |= {os.path.join(base, name) for name in os.listdir(base)}
        except OSError:
            continue
    return frozenset(entries)


def snapshot() -> Snapshot:
    # newline="" and a cut at "\n" only: a raw \r in a mount point stays in its record.
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape",
              newline="") as handle:
        mounts = frozenset(fields[4] for fields in
                           (line.split(" ") for line in handle.read().split("\n"))
                           if len(fields) > 4)
    return Snapshot(_processes(), mounts, _temp_entries())


def check_35_no_leftovers(before: Snapshot, ignore: Sequence[str], settle: float = 3.0
                          ) -> Result:
    deadline = time.monotonic() + settle
    while True:
        after = snapshot()
        procs = sorted(f"{comm}[{pid}]" for pid, comm in after.processes - before.processes
                       if comm.partition(".")[0] in WATCHED_COMMS)
        temps = sorted(path for path in after.temp_entries - before.temp_entries
                       if path not in ignore and ("claude" in path or "csbx" in path))
        # Other launches on a shared host mount things too: only ours count.
        mounts = sorted(m for m in after.mounts - before.mounts
                        if "claude" in m or "csbx" in m or any(m.startswith(p) for p in ignore))
        if not (procs or temps or mounts) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    left = procs + temps + [f"mount {m}" for m in mounts]
    if left:
        return Result("35", "FAIL", f"left behind: {', '.join(left)}")
    return Result("35", "PASS", "no process, mount or temporary file left")


def check_27_workspace_refusal(shim: str, agent: str, home: str, workdir: str,
                               environ: Mapping[str, str]) -> Result:
    link = os.path.join(workdir, "home-link")
    if not os.path.lexists(link):
        os.symlink(home, link)
    places = {"/": "/", "$HOME": home, "/etc": "/etc", "a symlink to $HOME": link}
    accepted = []
    for label, cwd in places.items():
        result = subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/true"], cwd=cwd,
                                env=dict(environ), capture_output=True, text=True, check=False,
                                stdin=subprocess.DEVNULL, timeout=60)
        if result.returncode != EXIT_CONFIG or "claude-sandbox:" not in result.stderr:
            said = (result.stderr.strip().splitlines() or ["nothing on stderr"])[-1][:200]
            accepted.append(f"{label} (exit {result.returncode}: {said})")
    os.unlink(link)
    if accepted:
        return Result("27", "FAIL", f"not refused: {', '.join(accepted)}")
    return Result("27", "PASS", f"refused: {', '.join(places)}")


def check_53_environment_only_narrows(shim: str, agent: str, home: str, workdir: str,
                                      environ: Mapping[str, str], jail_widening_allowed: bool
                                      ) -> Result:
    """Widening variables and a workspace under a dot directory of $HOME are refused (78)."""
    dotdir = tempfile.mkdtemp(prefix=".csbx-verify-", dir=home)
    attempts: list[tuple[str, dict[str, str], str]] = [
        ("CLAUDE_SANDBOX_ALLOW_WRITE=~/.ssh", {"CLAUDE_SANDBOX_ALLOW_WRITE":
                                               os.path.join(home, ".ssh")}, workdir),
        (f"a workspace in ~/{os.path.basename(dotdir)}", {}, dotdir),
    ]
    if not jail_widening_allowed:
        attempts.append(("CLAUDE_SANDBOX_EGRESS_JAIL=0", {"CLAUDE_SANDBOX_EGRESS_JAIL": "0"},
                         workdir))
    accepted = []
    try:
        for label, extra, cwd in attempts:
            env = {k: v for k, v in environ.items() if not k.startswith("CLAUDE_SANDBOX_")}
            result = subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/true"],
                                    cwd=cwd, env={**env, **extra}, capture_output=True,
                                    text=True, check=False, stdin=subprocess.DEVNULL,
                                    timeout=60)
            named = next(iter(extra), "") in result.stderr or not extra
            if result.returncode != EXIT_CONFIG or not named:
                accepted.append(f"{label} (exit {result.returncode})")
    finally:
        shutil.rmtree(dotdir, ignore_errors=True)
    if accepted:
        return Result("53", "FAIL", f"not refused: {', '.join(accepted)}")
    note = "" if not jail_widening_allowed else \
        "; the operator's file lets the environment turn the jail off (env-may-widen)"
    return Result("53", "PASS", f"refused: {', '.join(a[0] for a in attempts)}{note}")


# Every program the launch path runs, and the interpreter's own names.
REDIRECTED_TOOLS = ("python", "python3", "bash", "sh", "bwrap", "unshare", "pasta", "ip",
                    "script", "git", "socat", "setpriv")


def _plant_redirections(trap: str) -> dict[str, str]:
    """Everything that would run planted code if the launch path could be redirected.

    Each plant touches a file named after itself in trap/fired; the returned
    variables point the launching environment at them.
    """
    fired = os.path.join(trap, "fired")
    bin_dir = os.path.join(trap, "bin")
    py_dir = os.path.join(trap, "py")
    user_site = os.path.join(trap, "userbase", "lib",
                             f"python{sys.version_info[0]}.{sys.version_info[1]}",
                             "site-packages")
    for directory in (fired, bin_dir, os.path.join(py_dir, "claude_sandbox"), user_site):
        os.makedirs(directory)
    for name in REDIRECTED_TOOLS:
        path = os.path.join(bin_dir, name)
        with open(path, "w") as handle:
            handle.write(f"#!/bin/sh\ntouch {fired}/bin-{name}\nexit 99\n")
        os.chmod(path, 0o755)
    touch = "open({!r}, 'w').close()\n"
    plants = {
        os.path.join(py_dir, "sitecustomize.py"): touch.format(f"{fired}/sitecustomize"),
        os.path.join(py_dir, "claude_sandbox", "__init__.py"): touch.format(f"{fired}/package"),
        os.path.join(user_site, "usercustomize.py"): touch.format(f"{fired}/usercustomize"),
        os.path.join(user_site, "planted.pth"): "import os; " + touch.format(f"{fired}/pth"),
        os.path.join(trap, "bash_env.sh"): f"touch {fired}/bash-env\n",
    }
    for path, text in plants.items():
        with open(path, "w") as handle:
            handle.write(text)
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": py_dir,
        "PYTHONSTARTUP": os.path.join(py_dir, "sitecustomize.py"),
        "PYTHONUSERBASE": os.path.join(trap, "userbase"),
        "PYTHONHOME": trap,
        "SHELL": os.path.join(bin_dir, "sh"),
        "BASH_ENV": os.path.join(trap, "bash_env.sh"),
        "ENV": os.path.join(trap, "bash_env.sh"),
        "BASH_FUNC_exec%%": f"() {{ touch {fired}/bash-function; }}",
    }


def check_48_not_redirectable(shim: str, agent: str, workdir: str,
                              environ: Mapping[str, str]) -> Result:
    trap = tempfile.mkdtemp(prefix="csbx-redirect-")
    try:
        planted = _plant_redirections(trap)
        result = subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/true"],
                                cwd=workdir, env={**environ, **planted}, capture_output=True,
                                text=True, check=False, stdin=subprocess.DEVNULL, timeout=120)
        fired = sorted(os.listdir(os.path.join(trap, "fired")))
    finally:
        shutil.rmtree(trap, ignore_errors=True)
    if fired:
        return Result("48", "FAIL", f"planted code ran: {', '.join(fired)}")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        return Result("48", "FAIL", f"the launch failed (exit {result.returncode}): {last}")
    return Result("48", "PASS", "no planted program, module, .pth or shell start-up file ran")


QUICK_QUESTIONS = ("--version", "--help")
REAL_PROGRAMS = "/usr/libexec/claude-sandbox/real"


def _quick_reference(program: str, question: str) -> tuple[int, str, str]:
    """The root-owned program's own answer: run in /, with only the environment the
    launcher gives it (launch/quick.py), from a fresh home and temporary directory."""
    scratch = tempfile.mkdtemp(prefix="csbx-quick-reference-")
    try:
        home, tmp = os.path.join(scratch, "home"), os.path.join(scratch, "tmp")
        os.mkdir(home)
        os.mkdir(tmp)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": tmp,
               "LANG": "C.UTF-8"}
        ran = subprocess.run([program, question], cwd="/", env=env, capture_output=True,
                             text=True, check=False, stdin=subprocess.DEVNULL, timeout=120)
        return ran.returncode, ran.stdout, ran.stderr
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_94_quick_questions_unsteerable(agent: str, workdir: str,
                                          environ: Mapping[str, str],
                                          shim_dir: str = "/usr/local/bin") -> Result:
    """`AGENT --version` and `--help` through the agent's shim, from a workspace and an
    environment planted with everything that would steer a Node or Bun program or the
    dynamic loader: nothing planted runs, and the answer is the root-owned program's."""
    trap = tempfile.mkdtemp(prefix="csbx-quick-")
    try:
        planted = _plant_redirections(trap)
        fired = os.path.join(trap, "fired")
        steer = os.path.join(trap, "steer.js")
        with open(steer, "w") as handle:
            handle.write(f"require('fs').writeFileSync({os.path.join(fired, 'node')!r}, '')\n")
        node_bin = os.path.join(trap, "bin", "node")
        with open(node_bin, "w") as handle:
            handle.write(f"#!/bin/sh\ntouch {fired}/bin-node\nexit 99\n")
        os.chmod(node_bin, 0o755)
        home = os.path.join(trap, "home")
        os.makedirs(os.path.join(home, ".codex"))
        with open(os.path.join(home, ".codex", "config.toml"), "w") as handle:
            handle.write("this is = not [toml\n")
        os.chmod(trap, 0o755)  # the user the shim runs as reads the plants
        for name, text in (("bunfig.toml", f'preload = ["{steer}"]\n'),
                           ("package.json", '{"type": "module", "imports": {}}\n'),
                           (".npmrc", f"node-options=--require {steer}\n")):
            with open(os.path.join(workdir, name), "w") as handle:
                handle.write(text)
        # Not LD_PRELOAD: the loader applies it to the shim's own bash and python before
        # any code of ours runs, as to every program the user starts (check 48's scope).
        planted.update(NODE_OPTIONS=f"--require {steer}", NODE_PATH=trap,
                       BUN_OPTIONS=f"--preload {steer}", HOME=home, XDG_CONFIG_HOME=home,
                       CODEX_HOME=os.path.join(home, ".codex"))
        program = os.path.realpath(os.path.join(REAL_PROGRAMS, agent))
        for question in QUICK_QUESTIONS:
            ran = subprocess.run([os.path.join(shim_dir, agent), question], cwd=workdir,
                                 env={**environ, **planted}, capture_output=True, text=True,
                                 check=False, stdin=subprocess.DEVNULL, timeout=120)
            went = sorted(os.listdir(fired))
            if went:
                return Result("94", "FAIL", f"{agent} {question}: planted code ran: "
                              f"{', '.join(went)}")
            if trap in ran.stderr:
                return Result("94", "FAIL", f"{agent} {question}: a planted path was used: "
                              f"{ran.stderr.strip()[:200]}")
            if (ran.returncode, ran.stdout, ran.stderr) != _quick_reference(program, question):
                return Result("94", "FAIL", f"{agent} {question}: the answer (exit "
                              f"{ran.returncode}) is not the root-owned program's own")
    finally:
        shutil.rmtree(trap, ignore_errors=True)
        for name in ("bunfig.toml", "package.json", ".npmrc"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(workdir, name))
    return Result("94", "PASS", f"{agent} --version and --help: the root-owned program's own "
                  "answer; no planted program, module, preload or config took part")


_PR_SET_CHILD_SUBREAPER = 36


def _state_and_parent(pid: int) -> tuple[str, int]:
    """From /proc/PID/stat: the state letter ("Z" for a zombie) and the parent's
    pid; ("", 0) once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            state, parent = handle.read().rsplit(")", 1)[1].split()[:2]
        return state, int(parent)
    except (OSError, ValueError):
        return "", 0


def _started(before: Snapshot, marker: str) -> bool:
    """Whether the session's own command (sleep with `marker`) runs yet."""
    for pid, comm in _processes() - before.processes:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if comm == "sleep" and marker.encode() in handle.read():
                    return True
        except OSError:
            continue
    return False


def _launch_processes(before: Snapshot, runner: int) -> list[str]:
    """Live processes, new since `before`, whose parent chain reaches the runner.

    The runner is a subreaper, so the kernel hands it every orphan of the launch,
    a double-forked or setsid one included: this is the whole launch, whatever its
    processes are named or become."""
    left = []
    for pid, comm in _processes() - before.processes:
        state, ancestor = _state_and_parent(pid)
        hops = 0
        while ancestor not in (0, 1, runner) and hops < 64:
            ancestor, hops = _state_and_parent(ancestor)[1], hops + 1
        if ancestor == runner and state not in ("", "Z"):
            left.append(f"{comm}[{pid}]")
    return sorted(left)


def _reap_children() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


class _Terminal:
    """A pty whose slave becomes a launch's controlling terminal, as a user's terminal is."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()

    def streams(self) -> dict[str, Any]:
        return {"stdin": self.slave, "stdout": self.slave, "stderr": self.slave,
                "start_new_session": True,
                "preexec_fn": lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)}

    def started(self) -> None:
        os.close(self.slave)
        os.set_blocking(self.master, False)

    def drain(self) -> None:
        """Read what the launch wrote, so that a full pty never blocks it."""
        try:
            while os.read(self.master, 65536):
                pass
        except OSError:
            pass

    def hang_up(self) -> None:
        os.close(self.master)  # the kernel hangs up the slave: SIGHUP to the session


def _quiet(stderr: Any = subprocess.DEVNULL) -> dict[str, Any]:
    return {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
            "stderr": stderr, "start_new_session": True}


def _last_line(stream: Any) -> str:
    """The last line a launch wrote to `stream` (a temporary file), for a FAIL's detail."""
    if stream is None:
        return ""
    stream.seek(0)
    lines = stream.read().decode("utf-8", "replace").strip().splitlines()
    return f": {lines[-1][:300]}" if lines else ""


def _workspace_files(workdir: str) -> frozenset[str]:
    return frozenset(os.path.join(root, name) for root, dirs, files in os.walk(workdir)
                     for name in dirs + files)


def check_49_killed_launcher(shim: str, agent: str, workdir: str,
                             environ: Mapping[str, str], settle: float = 5.0) -> Result:
    """SIGKILL the launcher mid-session, with a terminal and without: nothing of
    the launch may keep running, and its files (placeholders, the jail's
    directory, cgroups) are gone within the settle time, without a next launch.

    The runner makes itself a subreaper for the check, as an init would be: the
    launch's orphans come to it, and it reaps them, so only what still runs counts.
    """
    for terminal in (_Terminal(), None):
        failure = _killed_launcher(shim, agent, workdir, environ, settle, terminal)
        if failure:
            where = "with a terminal" if terminal else "without a terminal"
            return Result("49", "FAIL", f"{where}: {failure}")
    return Result("49", "PASS", "with a terminal and without, nothing ran on and no file "
                                "of the launch was left")


def _killed_launcher(shim: str, agent: str, workdir: str, environ: Mapping[str, str],
                     settle: float, terminal: _Terminal | None) -> str:
    if terminal is not None:
        return _kill_one(shim, agent, workdir, environ, settle, terminal, None)
    # Without a terminal what the launcher says goes to a file, so that a launch that
    # never starts says why in the FAIL.
    with tempfile.TemporaryFile() as said:
        return _kill_one(shim, agent, workdir, environ, settle, None, said)


def _kill_one(shim: str, agent: str, workdir: str, environ: Mapping[str, str], settle: float,
              terminal: _Terminal | None, said: Any) -> str:
    marker = f"{30 + secrets.randbelow(1000) / 1000:.3f}"  # sleep's argument, unique
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    runner = os.getpid()
    try:
        before = snapshot()
        files = _workspace_files(workdir)
        launcher = subprocess.Popen([shim, "shell", "--agent", agent, "--", "/bin/sleep", marker],
                                    cwd=workdir, env=dict(environ),
                                    **(terminal.streams() if terminal else _quiet(said)))
        if terminal:
            terminal.started()
        deadline = time.monotonic() + 60
        while not _started(before, marker):
            if terminal:
                terminal.drain()
            if launcher.poll() is not None or time.monotonic() > deadline:
                return f"the session never started (exit {launcher.poll()}){_last_line(said)}"
            time.sleep(0.05)
        launcher.kill()
        launcher.wait()
        # Everything of the launch must end by itself within the settle time: what
        # still runs then fails the check, whatever it is called; and the janitor
        # the launcher left removes its files in that time too.
        deadline = time.monotonic() + settle
        while True:
            _reap_children()
            left = _launch_processes(before, runner)
            temps = sorted(path for path in _temp_entries() - before.temp_entries
                           if "claude-sandbox" in path)
            planted = sorted(_workspace_files(workdir) - files)
            if not (left or temps or planted) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if terminal:
            terminal.hang_up()
        if left:
            return f"still running after the launcher's SIGKILL: {', '.join(left)}"
        if temps or planted:
            return f"left behind: {', '.join(temps + planted)}"
        return ""
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        _reap_children()


def check_60_hang_up_ends_the_session(shim: str, agent: str, workdir: str,
                                      environ: Mapping[str, str], settle: float = 2.0
                                      ) -> Result:
    """Close the terminal of a running session: the agent gets the hang-up, and
    nothing of the launch runs `settle` seconds later."""
    mark = os.path.join(workdir, f"csbx-hup-{secrets.token_hex(4)}")
    script = (f'trap "echo hup > {mark}; exit 3" HUP; echo READY; '
              "while :; do sleep 0.1; done")
    terminal = _Terminal()
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    runner = os.getpid()
    try:
        before = snapshot()
        launcher = subprocess.Popen([shim, "shell", "--agent", agent, "--", "/bin/sh", "-c",
                                     script], cwd=workdir, env=dict(environ),
                                    **terminal.streams())
        terminal.started()
        seen, deadline = b"", time.monotonic() + 60
        while b"READY" not in seen:
            if launcher.poll() is not None or time.monotonic() > deadline:
                return Result("60", "FAIL", f"the session never started (exit {launcher.poll()})")
            try:
                seen += os.read(terminal.master, 65536)
            except BlockingIOError:
                time.sleep(0.02)
            except OSError:
                break
        terminal.hang_up()
        deadline = time.monotonic() + settle
        while (left := _launch_processes(before, runner)) and time.monotonic() < deadline:
            _reap_children()
            time.sleep(0.05)
        status = launcher.wait(timeout=10)
        if left:
            return Result("60", "FAIL", f"still running {settle:.0f} s after the hang-up: "
                                        f"{', '.join(left)}")
        if not os.path.exists(mark):
            return Result("60", "FAIL", f"the agent never got the hang-up (exit {status})")
        os.unlink(mark)
        return Result("60", "PASS", f"the agent got SIGHUP and the launch ended (exit {status})")
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        _reap_children()


def _git(argv: Sequence[str], cwd: str, home: str) -> subprocess.CompletedProcess[str]:
    """The user's own git, outside, as a person runs it after a session."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "v", "GIT_AUTHOR_EMAIL": "v@x", "GIT_COMMITTER_NAME": "v",
           "GIT_COMMITTER_EMAIL": "v@x"}
    return subprocess.run(["git", "-c", "safe.directory=*", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=60,
                          stdin=subprocess.DEVNULL)


def _scratch_repository(home: str) -> str:
    repo = tempfile.mkdtemp(prefix="csbx-verify-git-", dir="/var/tmp")
    for argv in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "v"]):
        _git(argv, repo, home)
    return repo


def _launch_in(shim: str, agent: str, repo: str, environ: Mapping[str, str], script: str
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shim, "shell", "--agent", agent, "--", "/bin/sh", "-c", script],
                          cwd=repo, env=dict(environ), capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL, timeout=120)


def check_70_git_holds_only_what_git_makes(shim: str, agent: str, home: str,
                                           environ: Mapping[str, str]) -> Result:
    """A session plants links and a FIFO in .git; after it, none is there, and the user's
    own git outside writes nothing through them."""
    repo = _scratch_repository(home)
    # Outside the workspace, as ~/.bashrc is: the agent itself cannot write it.
    handle_fd, victim = tempfile.mkstemp(prefix=".csbx-verify-victim-", dir=home)
    os.close(handle_fd)
    try:
        with open(victim, "w", encoding="utf-8") as handle:
            handle.write("unchanged\n")
        links = " ; ".join(f"rm -f .git/{rel} ; ln -s {victim} .git/{rel}"
                           for rel in ("logs/HEAD", "ORIG_HEAD", "refs/heads/evil"))
        _launch_in(shim, agent, repo, environ,
                   f"{links} ; mkfifo .git/FETCH_HEAD ; git checkout -qb 'x;id'")
        left = []
        for root, dirs, files in os.walk(os.path.join(repo, ".git")):
            for name in dirs + files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                    left.append(os.path.relpath(path, repo))
        for argv in (["checkout", "-q", "-b", "after"], ["status", "--short"],
                     ["commit", "-q", "--allow-empty", "-m", "after"]):
            _git(argv, repo, home)
        with open(victim, encoding="utf-8") as handle:
            written = handle.read() != "unchanged\n"
    finally:
        shutil.rmtree(repo, ignore_errors=True)
        os.unlink(victim)
    if left or written:
        return Result("70", "FAIL", f"left in .git: {', '.join(left) or 'nothing'}; "
                      f"the user's git wrote through a link: {written}")
    return Result("70", "PASS", "links and a FIFO planted in .git were quarantined; git "
                  "checkout, status and commit outside wrote through nothing")


def check_71_launcher_git_unsteerable(shim: str, agent: str, home: str,
                                      environ: Mapping[str, str]) -> Result:
    """An include of /dev/tty and a FIFO at HEAD: the launch neither reads the terminal
    nor waits on the FIFO."""
    repo = _scratch_repository(home)
    try:
        with open(os.path.join(repo, ".git/config"), "a", encoding="utf-8") as handle:
            handle.write("[include]\n\tpath = /dev/tty\n")
        os.unlink(os.path.join(repo, ".git/HEAD"))
        os.mkfifo(os.path.join(repo, ".git/HEAD"))
        started = time.monotonic()
        try:
            result = _launch_in(shim, agent, repo, environ, "true")
        except subprocess.TimeoutExpired:
            return Result("71", "FAIL", "the launch hung on a FIFO at .git/HEAD")
        took = time.monotonic() - started
        head_ok = os.path.isfile(os.path.join(repo, ".git/HEAD"))
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    if result.returncode != 0 or not head_ok or took > 30:
        return Result("71", "FAIL", f"exit {result.returncode} after {took:.1f} s; "
                      f"HEAD a regular file again: {head_ok}")
    return Result("71", "PASS", f"the launch ran in {took:.1f} s; the FIFO was quarantined "
                  "and the include was never read")


def _tree(top: str) -> dict[str, tuple[int, str]]:
    """Every entry under `top`: its mode and its content's digest (a link's target)."""
    import hashlib

    found = {}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if os.path.islink(path):
                what = "link:" + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    what = hashlib.sha256(handle.read()).hexdigest()
            else:
                what = "other"
            found[os.path.relpath(path, top)] = (info.st_mode, what)
    return found


def check_73_review_keeps_the_workspace(shim: str, agent: str, home: str,
                                        environ: Mapping[str, str]) -> Result:
    """A review-mode session changes a scratch repository; it is byte for byte the same
    until `claude-sandbox review apply`, which lands the edit and the commit only."""
    repo = _scratch_repository(home)
    try:
        with open(os.path.join(repo, "a.txt"), "w", encoding="utf-8") as handle:
            handle.write("one\n")
        _git(["add", "a.txt"], repo, home)
        _git(["commit", "-qm", "base"], repo, home)
        before = _tree(repo)
        # The hook after the commit: under harsh, nothing runs from the workspace inside.
        script = ("echo two >> a.txt && echo new > b.txt && git add a.txt b.txt && git -c "
                  "user.name=v -c user.email=v@x commit -qm review-commit && mkfifo ff && "
                  "printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit && chmod +x "
                  ".git/hooks/pre-commit && echo made")
        made = _launch_in(shim, agent, repo, {**environ, "CLAUDE_SANDBOX_WORKSPACE_MODE":
                                              "review"}, script)
        if "made" not in made.stdout:
            return Result("73", "FAIL", f"the review session failed: {made.stderr[-300:]}")
        if _tree(repo) != before:
            changed = sorted(set(_tree(repo).items()) ^ set(before.items()))[:3]
            return Result("73", "FAIL", f"the real workspace changed before apply: {changed}")
        applied = subprocess.run([shim, "review", "--agent", agent, "apply", "--all"],
                                 cwd=repo, env=dict(environ), capture_output=True, text=True,
                                 check=False, stdin=subprocess.DEVNULL, timeout=120)
        with open(os.path.join(repo, "a.txt"), encoding="utf-8") as handle:
            edited = handle.read() == "one\ntwo\n"
        log = _git(["log", "--format=%s", "-1"], repo, home).stdout.strip()
        status = _git(["status", "--porcelain"], repo, home).stdout.strip()
        planted = [p for p in ("ff", ".git/hooks/pre-commit")
                   if os.path.lexists(os.path.join(repo, p))]
        subprocess.run([shim, "review", "--agent", agent, "discard", "--all", "--yes"],
                       cwd=repo, env=dict(environ), capture_output=True, check=False,
                       stdin=subprocess.DEVNULL, timeout=60)
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    if not edited or log != "review-commit" or status or planted:
        return Result("73", "FAIL", f"after apply (exit {applied.returncode}): edit landed "
                      f"{edited}, last commit {log!r}, git status {status!r}, planted left "
                      f"{planted}")
    return Result("73", "PASS", "the real workspace was unchanged until apply; apply landed "
                  "the edit and the commit, not the FIFO or the hook")


def _outside(argv: Sequence[str], cwd: str, home: str) -> None:
    """A program the user runs in the workspace after the session, as a shell would."""
    env = {"PATH": f"{os.path.dirname(shutil.which('cargo') or '/usr/bin')}:/usr/bin:/bin",
           "HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "npm_config_cache":
           os.path.join(cwd, ".csbx-npm-cache")}
    try:
        subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, check=False,
                       timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _cargo_stand_in(cwd: str) -> None:
    """cargo's documented lookup where cargo is absent: .cargo/config.toml in the
    directory and each parent, build.rustc-wrapper run before rustc (`WRAPPER rustc -vV`)."""
    import tomllib

    directory = cwd
    while True:
        path = os.path.join(directory, ".cargo", "config.toml")
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                try:
                    wrapper = tomllib.load(handle).get("build", {}).get("rustc-wrapper")
                except tomllib.TOMLDecodeError:
                    wrapper = None
            if isinstance(wrapper, str):
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run([wrapper, "rustc", "-vV"], cwd=cwd, capture_output=True,
                                   check=False, timeout=60, stdin=subprocess.DEVNULL)
            return
        if directory == "/":
            return
        directory = os.path.dirname(directory)


# The project the review session attacks: what a user then runs outside.
_PROJECT = {
    "app.py": "import helper\nprint(helper.VALUE)\n",
    "helper.py": "VALUE = 1\n",
    ".venv/bin/activate": "# activate\n",
    "package.json": '{"name": "csbx-verify", "version": "1.0.0"}\n',
    "Cargo.toml": '[package]\nname = "csbxverify"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/main.rs": "fn main() {}\n",
}


_PLANT = """\
import os, py_compile, subprocess, sys
marks, repo = sys.argv[1], sys.argv[2]
def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)
# A .pyc that Python outside loads without looking at its source.
write("/tmp/helper.py", f"open({os.path.join(marks, 'pyc')!r}, 'w')\\n")
py_compile.compile("/tmp/helper.py", cfile=f"__pycache__/helper.{sys.implementation.cache_tag}.pyc",
                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
with open(".venv/bin/activate", "a") as handle:
    handle.write(f"touch {marks}/activate\\n")
write("wrap.sh", f"#!/bin/sh\\ntouch {marks}/cargo\\nexec \\"$@\\"\\n", 0o755)
write(".cargo/config.toml", f'[build]\\nrustc-wrapper = "{repo}/wrap.sh"\\n')
write("package.json", '{"name": "csbx-verify", "version": "1.0.0", "scripts": '
      f'{{"preinstall": "touch {marks}/npm"}}}}\\n')
write(".git/hooks/post-checkout", f"#!/bin/sh\\ntouch {marks}/git-hook\\n", 0o755)
subprocess.run(["git", "config", "core.fsmonitor", f"touch {marks}/fsmonitor; false"], check=True)
"""


def check_74_review_plants_run_nothing_outside(shim: str, agent: str, home: str,
                                               environ: Mapping[str, str],
                                               mode: str = "review") -> Result:
    """A review session plants what python3, an activate script, cargo, npm and git run
    outside; each is then run outside in the real workspace, and none runs a plant.
    (`mode` live: the same plants in a live session, which the tests use to show
    that the check can fail.)"""
    repo = _scratch_repository(home)
    marks = tempfile.mkdtemp(prefix="csbx-verify-marks-", dir="/var/tmp")
    try:
        for relative, text in _PROJECT.items():
            os.makedirs(os.path.dirname(os.path.join(repo, relative)), exist_ok=True)
            with open(os.path.join(repo, relative), "w", encoding="utf-8") as handle:
                handle.write(text)
        _git(["add", "-A"], repo, home)
        _git(["commit", "-qm", "project"], repo, home)
        # The plants, made inside by Python: no shell quoting between here and there.
        with open(os.path.join(repo, ".csbx-plant.py"), "w", encoding="utf-8") as handle:
            handle.write(_PLANT)
        script = f"/usr/bin/python3 .csbx-plant.py {marks} {repo} && echo made"
        made = _launch_in(shim, agent, repo, {**environ, "CLAUDE_SANDBOX_WORKSPACE_MODE":
                                              mode}, script)
        if "made" not in made.stdout:
            return Result("74", "FAIL", f"the review session failed: {made.stderr[-300:]}")
        ran = ["python3 app.py", "source .venv/bin/activate", "npm install",
               "git checkout, status, commit"]
        _outside(["/usr/bin/python3", "app.py"], repo, home)
        _outside(["bash", "-c", "source .venv/bin/activate"], repo, home)
        if shutil.which("cargo"):
            _outside(["cargo", "build", "--offline", "-q"], repo, home)
            ran.append("cargo build")
        else:
            _cargo_stand_in(repo)
            ran.append("cargo's config lookup (cargo is absent)")
        _outside(["npm", "install", "--offline", "--no-audit", "--no-fund"], repo, home)
        for argv in (["checkout", "-qb", "after"], ["status"],
                     ["commit", "-q", "--allow-empty", "-m", "after"]):
            _git(argv, repo, home)
        fired = sorted(os.listdir(marks))
        subprocess.run([shim, "review", "--agent", agent, "discard", "--all", "--yes"],
                       cwd=repo, env=dict(environ), capture_output=True, check=False,
                       stdin=subprocess.DEVNULL, timeout=60)
    finally:
        shutil.rmtree(repo, ignore_errors=True)
        shutil.rmtree(marks, ignore_errors=True)
    if fired:
        return Result("74", "FAIL", f"ran outside before review: {', '.join(fired)}")
    return Result("74", "PASS", f"run outside before review: {', '.join(ran)}; none ran "
                  "what the session planted")


# Checks 77 and 78: a name the allow-list allows, sent to an address nothing answers at.
_FRONTED = r"""
import socket, ssl, sys
name, far = sys.argv[1], sys.argv[2]
try:
    context = ssl.create_default_context()
    with socket.create_connection((far, 443), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname=name):
            print("tls handshake")
except (OSError, ssl.SSLError) as error:
    print("tls refused", type(error).__name__)
try:
    with socket.create_connection((far, 80), timeout=20) as s:
        s.sendall(f"HEAD / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        print("http", s.recv(12))
except OSError as error:
    print("http refused", type(error).__name__)
"""
# A documentation address (RFC 5737): nothing on the internet answers there.
_FAR = "198.51.100.77"


def fronted_record(shim: str, agent: str, home: str, environ: Mapping[str, str],
                   name: str, policy: str) -> list[dict[str, Any]] | Result:
    """For checks 77 and 78: a session sends TLS with an allowed server name and HTTP with
    an allowed Host to an address nothing answers at; its record, as `claude-sandbox log
    --json` shows it; or why there is none to judge by (a SKIP or a FAIL for both)."""
    if policy != "allow-list" or not name:
        return Result("", "SKIP", f"egress-policy = {policy}: the proxy connects where the "
                      "agent asked" if policy != "allow-list" else
                      "no exact name on the allow-list")
    import json

    repo = _scratch_repository(home)
    try:
        with open(os.path.join(repo, ".csbx-fronted.py"), "w", encoding="utf-8") as handle:
            handle.write(_FRONTED)
        ran = _launch_in(shim, agent, repo, environ,
                         f"/usr/bin/python3 .csbx-fronted.py {name} {_FAR}")
        if ran.returncode != 0:
            return Result("", "FAIL", f"the session failed: {ran.stderr[-300:]}")
        shown = subprocess.run([shim, "log", "--agent", agent, "--json"], cwd=repo,
                               env=dict(environ), capture_output=True, text=True, check=False,
                               timeout=60)
        try:
            return list(json.loads(shown.stdout)["entries"])
        except (ValueError, KeyError, TypeError):
            return Result("", "FAIL", f"no record: {shown.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def _went_to_the_name(number: str, kind: str, record: list[dict[str, Any]] | Result,
                      name: str) -> Result:
    if isinstance(record, Result):
        return Result(number, record.outcome, record.detail)
    seen = [e for e in record if e.get("kind") == kind and e.get("address") == _FAR]
    wrong = [e for e in seen if e.get("upstream") == _FAR or e.get("name") != name]
    if not seen:
        return Result(number, "FAIL", f"the record has no {kind} entry for {_FAR}")
    if wrong:
        return Result(number, "FAIL", f"{kind} to {_FAR} went there: {wrong[0]}")
    where = seen[0].get("upstream") or f"nowhere ({seen[0].get('rule')})"
    return Result(number, "PASS", f"{kind} for {name} sent to {_FAR} went to {where}")


def check_77_allowed_tls_name_reaches_its_host(record: list[dict[str, Any]] | Result,
                                               name: str) -> Result:
    """TLS with an allowed server name sent elsewhere went to the name, or nowhere."""
    return _went_to_the_name("77", "tls", record, name)


def check_78_allowed_http_host_reaches_its_host(record: list[dict[str, Any]] | Result,
                                                name: str) -> Result:
    """HTTP with an allowed Host sent elsewhere went to the name, or nowhere."""
    return _went_to_the_name("78", "http", record, name)


# Port 443: what every agent may connect to, hardening = brokered included.
_DEAD_PROXY = r"""
import errno, socket, sys
far = sys.argv[1]

def attempt():
    try:
        with socket.create_connection((far, 443), timeout=5):
            return "connected"
    except socket.timeout:
        return "timeout"
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))

print("before", attempt(), flush=True)
print("ready", flush=True)
sys.stdin.readline()
print("after", attempt(), flush=True)
"""


def _proxies() -> set[int]:
    """This user's egress proxies now (by the name the proxy gives itself)."""
    found = set()
    for pid, comm in _processes():
        with contextlib.suppress(OSError):  # gone since
            if comm == "csbx-egress" and os.stat(f"/proc/{pid}").st_uid == os.getuid():
                found.add(pid)
    return found


def check_82_dead_proxy_ends_reach(shim: str, agent: str, home: str,
                                   environ: Mapping[str, str], jail_on: bool) -> Result:
    """The proxy is killed mid-session from outside: the agent's next connection meets
    the redirect to nothing (refused at once), never a way around it."""
    if not jail_on:
        return Result("82", "SKIP", "egress-jail = off: no proxy")
    repo = _scratch_repository(home)
    before = _proxies()
    try:
        with open(os.path.join(repo, ".csbx-dead-proxy.py"), "w", encoding="utf-8") as handle:
            handle.write(_DEAD_PROXY)
        session = subprocess.Popen(
            [shim, "shell", "--agent", agent, "--", "/usr/bin/python3", ".csbx-dead-proxy.py",
             _FAR], cwd=repo, env=dict(environ), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert session.stdin is not None and session.stdout is not None
        try:
            first = session.stdout.readline().strip()
            if session.stdout.readline().strip() != "ready":
                return Result("82", "FAIL", f"the session did not start: {first!r}")
            if first != "before connected":
                return Result("82", "FAIL", f"no redirect to the proxy to begin with: {first}")
            killed = _proxies() - before
            if len(killed) != 1:
                return Result("82", "FAIL", f"not one proxy of this session: {sorted(killed)}")
            pid = killed.pop()
            pidfd = os.pidfd_open(pid)
            try:
                os.kill(pid, signal.SIGKILL)
                select.select([pidfd], [], [], 10)  # readable once it has exited
            finally:
                os.close(pidfd)
            session.stdin.write("go\n")
            session.stdin.flush()
            after = session.stdout.readline().strip()
            session.wait(timeout=60)
        finally:
            if session.poll() is None:
                session.kill()
                session.wait()
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    if not after:
        return Result("82", "PASS", "the session ended with its proxy")
    if after in ("after ECONNREFUSED", "after ENETUNREACH", "after EPERM", "after EACCES"):
        return Result("82", "PASS", f"with the proxy killed, a connection to {_FAR}:443 meets "
                      f"{after.split()[1]} at once")
    return Result("82", "FAIL", f"with the proxy killed, a connection to {_FAR}:443: {after}")


_INJECTED = r"""
import json, os, sys, urllib.request
name, host, other = sys.argv[1:4]
token = os.environ.get(name, "")
seen = {"token": token}
for label, url in (("85", f"https://{host}/"), ("86", f"https://{other}/"),
                   ("87", f"http://{host}/")):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            headers = json.loads(answer.read())["headers"]
        seen[label] = next((h.split(":", 1)[1].strip() for h in headers
                            if h.lower().startswith("authorization:")), "(none)")
    except (OSError, ValueError, KeyError) as error:
        seen[label] = f"error: {error}"
print(json.dumps(seen))
"""


def echo_variable(echo: Sequence[str] | None, credential_lines: Sequence[str]) -> str:
    """The variable a credential line brokers for the echo host, or ""."""
    if not echo:
        return ""
    from claude_sandbox.launch.facts import credentials

    hosts = credentials.table(credential_lines)
    declared = [line.split()[0] for line in credential_lines]
    return next((name for name in declared if echo[0] in hosts.get(name, ())), "")


def injection_seen(shim: str, agent: str, home: str, environ: Mapping[str, str],
                   echo: Sequence[str] | None, credential_lines: Sequence[str]
                   ) -> tuple[list[Result], str]:
    """For checks 85-87: a session sends its credential's sentinel to the credential's
    host over TLS, to another allowed host and to the credential's host in the clear;
    what each received, judged (in the checks' order), and that session's sentinel (for
    probe A56, which replays it in another session)."""
    numbers = ("85", "86", "87")
    if not echo:
        return [Result(n, "SKIP", "no echo host given (verify --echo-host HOST OTHER)")
                for n in numbers], ""
    host, other = echo
    name = echo_variable(echo, credential_lines)
    real = environ.get(name, "") if name else ""
    if not real:
        return [Result(n, "SKIP", f"no credential line names {host}, or its variable is "
                       "not set") for n in numbers], ""
    import json

    repo = _scratch_repository(home)
    try:
        with open(os.path.join(repo, ".csbx-injected.py"), "w", encoding="utf-8") as handle:
            handle.write(_INJECTED)
        ran = _launch_in(shim, agent, repo, environ,
                         f"/usr/bin/python3 .csbx-injected.py {name} {host} {other}")
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    try:
        seen = json.loads(ran.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [Result(n, "FAIL", f"the session failed: {ran.stderr.strip()[-300:]}")
                for n in numbers], ""
    sentinel = str(seen.get("token", ""))
    if not sentinel or sentinel == real:
        return [Result(n, "FAIL", f"${name} inside is {'empty' if not sentinel else 'real'}")
                for n in numbers], ""
    want = {"85": f"Bearer {real}", "86": f"Bearer {sentinel}", "87": f"Bearer {sentinel}"}
    what = {"85": f"{host} over TLS", "86": f"{other} over TLS", "87": f"{host} in the clear"}
    results = []
    for number in numbers:
        got = str(seen.get(number))
        shown = "the real value" if real in got else "the sentinel" if sentinel in got else got
        outcome = "PASS" if got == want[number] else "FAIL"
        results.append(Result(number, outcome, f"{what[number]} received {shown}"))
    return results, sentinel


def check_85_real_value_at_its_host(seen: list[Result]) -> Result:
    """Over TLS to the credential's host, the real value arrives."""
    return seen[0]


def check_86_sentinel_elsewhere(seen: list[Result]) -> Result:
    """To another allowed host, the sentinel arrives."""
    return seen[1]


def check_87_no_injection_in_the_clear(seen: list[Result]) -> Result:
    """To the credential's host in the clear, the sentinel arrives."""
    return seen[2]
