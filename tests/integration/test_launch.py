"""Real launches through the installed shims: what the sandbox holds, proved from inside."""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SHIM_DIR, Launcher

pytestmark = pytest.mark.integration

CORE_VENV = "/usr/libexec/claude-sandbox/venv"
CONFIG = "/etc/claude-sandbox.conf"


@pytest.fixture
def planted(launcher: Launcher) -> Iterator[dict[str, str]]:
    """Credentials and an IDE socket where a careless sandbox would expose them."""
    home = launcher.home
    files = {
        "ssh": f"{home}/.ssh/id_rsa",
        "aws": f"{home}/.aws/credentials",
        "other": f"{home}/.config/other/token",
        "runsecret": "/run/secrets/x",
    }
    created = []
    for path in files.values():
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory)
            created.append(directory)
        with open(path, "w") as handle:
            handle.write("TOP-SECRET-" + path)
        os.chown(path, launcher.uid, launcher.uid)
        if path.startswith(home):
            os.chown(directory, launcher.uid, launcher.uid)
    sock_path = f"/tmp/vscode-ipc-{secrets.token_hex(4)}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(1)
    os.chmod(sock_path, 0o777)
    files["ide"] = sock_path
    try:
        yield files
    finally:
        server.close()
        os.unlink(sock_path)
        for path in list(files.values())[:4]:
            os.unlink(path)
        for directory in reversed(created):
            shutil.rmtree(directory, ignore_errors=True)


def probe(
    launcher: Launcher,
    probe_copy: str,
    reads: list[str],
    writes: list[str],
    secret: str,
    env: dict[str, str] | None = None,
) -> dict[str, object]:
    token = secrets.token_hex(6)
    secret_file = os.path.join(launcher.workspace, "secret")
    with open(secret_file, "w") as handle:
        handle.write(secret)
    os.chmod(secret_file, 0o644)
    result = launcher.shell(
        "/usr/bin/python3",
        probe_copy,
        token,
        secret_file,
        *reads,
        "--",
        *writes,
        env={"SUPER_SECRET": secret, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    report["token"] = token
    return report


def test_the_sandbox_holds_only_what_it_should(
    launcher: Launcher, probe_copy: str, planted: dict[str, str]
) -> None:
    secret = "s3cr3t-" + secrets.token_hex(8)
    home = launcher.home
    outside_dirs = [
        home,
        f"{home}/.ssh",
        "/tmp",
        "/var/tmp",
        "/etc",
        "/opt",
        os.path.dirname(launcher.workspace) + "/..",
        CORE_VENV,
        "/usr/local/bin",
    ]
    report = probe(
        launcher,
        probe_copy,
        reads=[
            planted["ssh"],
            planted["aws"],
            planted["other"],
            planted["runsecret"],
            f"{home}/.netrc",
            f"{home}/.Xauthority",
        ],
        writes=[launcher.workspace, *outside_dirs, planted["ide"]],
        secret=secret,
    )
    # $HOME is the agent's state store: nothing of the outer home is there (check 03);
    # the probe's own write to $HOME lands in the store (the leftover check below).
    assert not {".ssh", ".aws"} & set(report["home"]), report["home"]
    assert report["config_dir"] in (None, [], ["gh"], ["glab-cli"], ["gh", "glab-cli"])
    # Planted credentials are unreachable; the nulled dotfiles read empty.
    reads = report["read"]
    for name in ("ssh", "aws", "other", "runsecret"):
        assert reads[planted[name]].startswith("error:ENOENT"), (name, reads[planted[name]])
    assert reads[f"{home}/.netrc"] == "read:" and reads[f"{home}/.Xauthority"] == "read:"
    # The IDE socket in /tmp is not there (check 11).
    assert report["sockets"][planted["ide"]] == "error:ENOENT"
    assert not any(name.startswith("vscode-ipc") for name in report["tmp"])
    # The secret in the launching environment is not inside, nor readable through /proc.
    assert "SUPER_SECRET" not in report["env"]
    assert secret not in json.dumps(report["env"])
    assert report["proc_leaks"] == []
    assert report["env"]["IS_SANDBOX"] == "1"
    # No capabilities, no new privileges (checks 06, 02); a nested pid namespace (07).
    assert int(report["CapEff"], 16) == 0
    assert report["NoNewPrivs"] == "1"
    # A fresh procfs shows one NSpid level; the namespace itself is what differs.
    assert len(report["NSpid"].split()) >= 2 or report["pidns"] != os.readlink("/proc/self/ns/pid")
    # The workspace is writable and the write lands outside; nothing else persists.
    assert report["write"][launcher.workspace] == "written"
    assert os.path.exists(os.path.join(launcher.workspace, f".probe-{report['token']}"))
    for directory in outside_dirs:
        leftover = os.path.join(directory, f".probe-{report['token']}")
        assert not os.path.exists(leftover), f"a write inside reached {leftover}"
    # The config and the core venv are read-only inside.
    assert report["write"][CORE_VENV] == "error:EROFS"
    assert report["write"]["/etc"] == "error:EROFS"


def test_config_file_is_read_only_inside(launcher: Launcher) -> None:
    result = launcher.shell("/bin/sh", "-c", f"echo 'egress-jail = 0' >> {CONFIG}")
    assert result.returncode != 0
    # The mount itself is read-only, whoever asks (as root, too: no capability can remount).
    flags = launcher.shell(
        "/usr/bin/python3",
        "-c",
        f"import os; print([os.statvfs(p).f_flag & os.ST_RDONLY for p in ('{CONFIG}', "
        f"'{CORE_VENV}/lib', '/usr/local/bin/claude')])",
    )
    assert flags.stdout.strip() == "[1, 1, 1]", flags.stderr


def test_allow_write_is_writable_and_nothing_beside_it(launcher: Launcher) -> None:
    extra = f"{launcher.workspace}-extra"
    os.mkdir(extra)
    os.chown(extra, launcher.uid, launcher.uid)
    try:
        result = launcher.shell(
            "/bin/sh",
            "-c",
            f"touch {extra}/ok && touch /srv/nope",
            config=f"allow-write = {extra}\nenv-may-widen = egress-jail\n",
        )
        assert os.path.exists(f"{extra}/ok")
        assert result.returncode != 0 and not os.path.exists("/srv/nope")
    finally:
        shutil.rmtree(extra)


@pytest.mark.parametrize("where", ["/", "HOME", "/etc"])
def test_launching_from_a_forbidden_directory_refuses(launcher: Launcher, where: str) -> None:
    cwd = launcher.home if where == "HOME" else where
    # Not `--version` alone: that makes nothing writable, and is answered (check 94).
    result = launcher.run(["/usr/local/bin/claude", "--version", "--verbose"], cwd=cwd)
    assert result.returncode == 78
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("claude-sandbox: refusing to make ")
    assert "Traceback" not in result.stderr


def test_the_quick_questions_answer_from_anywhere(launcher: Launcher) -> None:
    """`claude --version` makes nothing writable, so it answers from $HOME and /, where a
    launch is refused, and it needs no sandbox (launch/quick.py, check 94)."""
    for cwd in (launcher.home, "/"):
        result = launcher.run(["/usr/local/bin/claude", "--version"], cwd=cwd)
        assert result.returncode == 0 and "Claude Code" in result.stdout, result
        assert "egress jail" not in result.stderr


def test_the_launch_path_is_served_from_the_bundle(launcher: Launcher) -> None:
    """The installed interpreter, started as the shims start it, imports the launcher's,
    the jail's and the inner stage's modules from the installer's bundle (core/bundle.py),
    as root and as a user; and the bundle holds every module as its source now is."""
    from pathlib import Path

    from claude_sandbox.install import bundle

    site = glob.glob(f"{CORE_VENV}/lib/python3*/site-packages")[0]
    # What puts the finder in place (core.bundle) is imported before it, and so is what
    # fills a closed standard descriptor before the bundle is opened (core.streams).
    before = ("claude_sandbox.core", "claude_sandbox.core.bundle", "claude_sandbox.core.streams")
    code = (f"import sys; sys.path.append({site!r}); import claude_sandbox.launch.steps, "
            "claude_sandbox.jail.session, claude_sandbox.inside.enter; print(*sorted({"
            "type(m.__loader__).__name__ for n, m in sys.modules.items() "
            f"if n.startswith('claude_sandbox.') and n not in {before!r}}}), "
            "__import__.__qualname__)")
    result = launcher.run([f"{CORE_VENV}/bin/python", "-I", "-S", "-c", code])
    # Made by the bundle's own __import__, not the import system's steps (bundle.importer).
    assert result.returncode == 0, result
    assert result.stdout.split() == ["Finder", "importer.<locals>.import_"], result
    assert bundle.current("/usr/libexec/claude-sandbox/launch-bundle",
                          Path(site) / "claude_sandbox")


def test_shell_exit_status_is_the_commands(launcher: Launcher) -> None:
    assert launcher.shell("/bin/sh", "-c", "exit 7").returncode == 7
    assert launcher.shell("/bin/sh", "-c", "kill -TERM $$").returncode == 128 + 15


@pytest.mark.parametrize("closed", ["1", "2"])
def test_the_status_comes_back_with_a_standard_stream_closed(launcher: Launcher,
                                                             closed: str) -> None:
    """Started with its standard output or error closed (`>&-`), the launcher has no
    stream there to flush at its end (__main__._leave), and still ends with the
    session's status, not an error of its own."""
    result = launcher.run(["/bin/sh", "-c", f'exec "$@" {closed}>&-', "sh",
                           f"{SHIM_DIR}/claude-sandbox", "shell", "--", "sh", "-c", "exit 5"])
    assert result.returncode == 5, result.stderr


def test_git_works_inside_with_the_curated_config(launcher: Launcher) -> None:
    result = launcher.shell(
        "/bin/sh",
        "-c",
        "git config user.email && git config --show-origin --list | cut -f1 | sort -u && "
        "git init -q repo && cd repo && git commit -q --allow-empty -m x && echo committed",
    )
    assert result.returncode == 0, result.stderr
    assert "committed" in result.stdout
    origins = {line for line in result.stdout.splitlines() if line.startswith("file:")}
    assert origins <= {"file:/etc/claude-gitconfig", "file:.git/config"}, origins


def test_a_broken_config_refuses_with_file_and_line(launcher: Launcher) -> None:
    result = launcher.shell("true", env={"CLAUDE_SANDBOX_ALLOW_IP": "10.0.0.0/8"})
    assert result.returncode == 78
    assert result.stderr.strip() == (
        "claude-sandbox: $CLAUDE_SANDBOX_ALLOW_IP: '10.0.0.0/8' is not a single IPv4 "
        "address (no CIDR, no names)"
    )


def test_the_jail_off_warning_is_said_once(launcher: Launcher) -> None:
    result = launcher.shell("true")
    assert result.stderr.count("the egress jail is off") == 1


def test_the_agent_cannot_push_input_into_the_launching_terminal(launcher: Launcher) -> None:
    """The agent shares the terminal (job control works as without the sandbox), and
    TIOCSTI, which would type a command for the user's shell, is refused (check 45)."""
    inner = ("import fcntl, os, termios\n"
             "fd = os.open('/dev/tty', os.O_RDWR)\n"
             "try:\n    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n    print('INJECTED')\n"
             "except OSError as error:\n    print('REFUSED', error.errno)\n")
    command = ["script", "-qec",
               f"/usr/local/bin/claude-sandbox shell -- /usr/bin/python3 -c \"{inner}\"",
               "/dev/null"]
    result = launcher.run(command)
    assert result.returncode == 0, result.stderr
    assert "REFUSED 1" in result.stdout, result.stdout  # EPERM from the seccomp filter


def test_explain_lists_every_option_with_a_reason(launcher: Launcher) -> None:
    result = launcher.run(["/usr/local/bin/claude-sandbox", "explain", "--agent", "codex"])
    assert result.returncode == 0, result.stderr
    lines = [
        line
        for line in result.stdout.splitlines()
        if line.startswith("  --") and not line.startswith("  -- ")
    ]
    assert lines and all("  # " in line for line in lines)
    store = f"{launcher.home}/.local/state/claude-sandbox/codex/home"
    assert any(f"--bind {store} {launcher.home} " in line for line in lines)


@pytest.mark.parametrize("jail", ["0", "1"])
def test_explain_shows_the_plan_a_launch_runs(launcher: Launcher, jail: str) -> None:
    """The same plan, not a look-alike: explain's digest is the digest the launch traced,
    and its JSON holds the command, the writable paths and the environment the launch got."""
    env = {"CLAUDE_SANDBOX_EGRESS_JAIL": jail, "TERM": "xterm", "LC_ALL": "C.UTF-8"}
    config = "env-may-widen = egress-jail\n" if jail == "0" else None
    command = ["/bin/sh", "-c", 'echo "HOME=$HOME"; echo "SHELL=$SHELL"']
    explained = launcher.run(["/usr/local/bin/claude-sandbox", "explain", "--", *command],
                             env=env, config=config)
    assert explained.returncode == 0, explained.stderr
    digest = next(line.split()[2] for line in explained.stdout.splitlines()
                  if line.startswith("# plan "))
    ran = launcher.run(["/usr/local/bin/claude-sandbox", "shell", "--", *command],
                       env={**env, "CLAUDE_SANDBOX_TRACE": "1"}, config=config)
    assert ran.returncode == 0, ran.stderr
    traced = [line.split()[4] for line in ran.stderr.splitlines()
              if line.startswith("claude-sandbox: trace: plan digest ")]
    assert traced == [digest], ran.stderr
    plan = json.loads(launcher.run(["/usr/local/bin/claude-sandbox", "explain", "--json", "--",
                                    *command], env=env, config=config).stdout)
    assert plan["inner"]["command"] == command
    assert launcher.workspace in plan["inner"]["writable"]
    shown = dict(plan["env"])
    assert f"HOME={shown['HOME']}" in ran.stdout and f"SHELL={shown['SHELL']}" in ran.stdout
    assert (plan["jail"] is not None) == (jail == "1")


def test_no_sandbox_process_outlives_the_launch(launcher: Launcher) -> None:
    marker = "cs-leak-" + secrets.token_hex(4)
    launcher.shell("/bin/sh", "-c", f"sleep 300 & exec -a {marker} sleep 0.1")
    survivors = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    lingering = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True)
    assert survivors.stdout == ""
    # The backgrounded sleep died with the sandbox's pid namespace.
    for pid in lingering.stdout.split():
        with open(f"/proc/{pid}/status") as handle:
            assert launcher.user == "root" or f"Uid:\t{launcher.uid}" not in handle.read()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("allow-ip = 10.0.0.0/8", "'10.0.0.0/8' is not a single IPv4 address (no CIDR, no names)"),
        ("frobnicate = 1", "unknown key 'frobnicate'"),
        ("allow-write = relative/dir", "'relative/dir' is not an absolute path"),
        ("pass-env = LD_PRELOAD", "LD_PRELOAD is on the pass-env deny-list (LD_*)"),
    ],
)
def test_a_bad_line_in_the_real_config_file_refuses(tmp_path: pytest.TempPathFactory,
                                                     line: str, message: str) -> None:
    """The operator's file, bound over /etc/claude-sandbox.conf in a private mount namespace."""
    conf = os.path.join(str(tmp_path), "claude-sandbox.conf")
    with open(conf, "w") as handle:
        handle.write(f"# a comment\n\n{line}\n")
    script = (f"mount --bind {conf} {CONFIG} && cd {tmp_path} && "
              "exec /usr/local/bin/claude-sandbox shell -- /bin/true")
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 78
    assert result.stderr == f"claude-sandbox: {CONFIG}:3: {message}\n"


def test_sessions_side_by_side_share_one_workspace(launcher: Launcher) -> None:
    """A second session (and eight at once) in a workspace while another runs: each
    starts, and the sandbox leaves nothing in the workspace (ADR 0010: no stand-ins)."""
    first = subprocess.Popen(
        ["setpriv", f"--reuid={launcher.uid}", f"--regid={launcher.uid}", "--init-groups",
         "/usr/local/bin/claude-sandbox", "shell", "--", "/bin/sh", "-c",
         "touch started && sleep 4"],
        cwd=launcher.workspace, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": launcher.home,
             "CLAUDE_SANDBOX_EGRESS_JAIL": "0"})
    try:
        deadline = time.monotonic() + 15
        while not os.path.exists(os.path.join(launcher.workspace, "started")):
            assert time.monotonic() < deadline, "the first session did not start"
            time.sleep(0.05)
        assert os.listdir(launcher.workspace) == ["started"]  # nothing of the sandbox's
        second = launcher.shell("/bin/true")
        assert second.returncode == 0, second.stderr
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: launcher.shell("/bin/true"), range(8)))
        assert [r.returncode for r in results] == [0] * 8, [r.stderr for r in results]
    finally:
        first.wait(timeout=30)
    assert os.listdir(launcher.workspace) == ["started"]


def test_the_jails_processes_keep_nothing_the_launcher_held(launcher: Launcher) -> None:
    """The jail's holder is a fork of the launcher, and the egress proxy a fork of the
    holder. The proxy, which lives the whole session and faces the agent's traffic, holds
    no descriptor the launcher held: neither one it inherited (an IDE's socket; here a
    file at 7, and one at 1500, above the soft limit the launching shell then lowered,
    which a close up to that limit left open) nor its own (the janitor's pipe, whose end
    of file tells the janitor the launcher is gone). Nor does the session."""
    marker = Path(launcher.home) / "inherited-by-the-launcher"  # the user may open it
    marker.write_text("the launcher's\n")
    os.chmod(marker, 0o644)
    started = os.path.join(launcher.workspace, "started")
    script = ('ulimit -Sn 4096; exec 7<"$1" 1500<"$1"; ulimit -Sn 1024; exec '
              f'{SHIM_DIR}/claude-sandbox shell -- sh -c "ls /proc/self/fd > fds; touch started; '
              'sleep 2"')
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(launcher.run, ["bash", "-c", script, "bash", str(marker)],
                              env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"})
        deadline = time.monotonic() + 60
        while not os.path.exists(started):
            assert not running.done(), running.result().stderr
            assert time.monotonic() < deadline, "the session did not start"
            time.sleep(0.05)
        proxies = [pid for pid in os.listdir("/proc") if pid.isdigit()
                   and _comm(pid) == "csbx-egress" and _uid(pid) == launcher.uid]
        assert proxies, "no egress proxy ran"
        for pid in proxies:
            held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            assert str(marker) not in held, held
            assert not [link for link in held if link.startswith("pipe:")], held
        result = running.result(timeout=60)
    marker.unlink()
    assert result.returncode == 0, result.stderr
    with open(os.path.join(launcher.workspace, "fds")) as handle:
        inside = handle.read().split()
    assert "7" not in inside and "1500" not in inside, inside


@pytest.mark.parametrize("jail", ["0", "1"])
def test_a_launcher_started_with_sigchld_ignored_still_waits(launcher: Launcher,
                                                            jail: str) -> None:
    """A parent that ignores SIGCHLD passes that on through exec. The launcher's children
    would then be reaped by the kernel, and its wait for the session would block until
    every child ended (pasta, the janitor: never), so the launch hung. It gives SIGCHLD its
    default back, and the session's status comes back."""
    ignoring = ("import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
                "os.execv(sys.argv[1], sys.argv[1:])")
    result = launcher.run(["/usr/bin/python3", "-c", ignoring, f"{SHIM_DIR}/claude-sandbox",
                           "shell", "--", "sh", "-c", "exit 3"],
                          env={"CLAUDE_SANDBOX_EGRESS_JAIL": jail}, timeout=60,
                          config="env-may-widen = egress-jail\n" if jail == "0" else None)
    assert result.returncode == 3, result.stderr


def _uid(pid: str) -> int:
    """The real uid (/proc/PID itself is root's when the process is not dumpable)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return -1


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def test_a_refusal_while_planning_leaves_no_jail_behind(launcher: Launcher) -> None:
    """The jail's holder and pasta start before the facts and the plan are made; a
    launch refused there (an unknown command) ends them and removes their directory."""
    def ours() -> set[str]:  # pasta's pid file names the jail; the holder has its name
        found = set()  # pgrep -x takes one name of at most 15 characters a call
        for how, pattern in (("-f", r"claude-sandbox-jail\."), ("-x", "csbx-holder"),
                             ("-x", "csbx-egress")):
            ran = subprocess.run(["pgrep", "-u", str(launcher.uid), how, pattern],
                                 capture_output=True, text=True)
            found |= set(ran.stdout.split())
        return found

    before = set(glob.glob(f"/tmp/claude-sandbox-jail.{launcher.uid}.*")), ours()
    result = launcher.shell("no-such-command-anywhere", env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"})
    assert result.returncode == 127, result.stderr
    assert "command not found" in result.stderr
    assert set(glob.glob(f"/tmp/claude-sandbox-jail.{launcher.uid}.*")) <= before[0]
    assert ours() <= before[1]


@pytest.mark.parametrize("jail", ["0", "1"])
def test_a_low_process_limit_refuses_in_one_line_or_caps_within_it(launcher: Launcher,
                                                                    jail: str) -> None:
    """Under a user's RLIMIT_NPROC too low for a launch, one line and 69, never a traceback
    or bwrap's own message; under one lower than the default cap's floor (64), the session
    runs, its cap within the user's limit (the inner stage could not raise it)."""
    env = {"CLAUDE_SANDBOX_EGRESS_JAIL": jail}
    if launcher.user == "root":
        pytest.skip("root is never held by RLIMIT_NPROC")
    shim = "/usr/local/bin/claude-sandbox"
    for limit in ("2", "4"):
        refused = launcher.run(["prlimit", f"--nproc={limit}", shim, "shell", "--", "true"],
                               env=env)
        assert refused.returncode == 69, refused.stderr
        assert "process limit" in refused.stderr
        assert "Traceback" not in refused.stderr and "bwrap:" not in refused.stderr
    ran = launcher.run(["prlimit", "--nproc=40", shim, "shell", "--", "cat",
                        "/proc/self/limits"], env=env)
    assert ran.returncode == 0, ran.stderr
    assert any(line.split()[2:4] == ["40", "40"] for line in ran.stdout.splitlines()
               if line.startswith("Max processes"))


@pytest.mark.parametrize("jail", ["0", "1"])
def test_a_low_open_files_limit_refuses_in_one_line(launcher: Launcher, jail: str) -> None:
    """Under a soft RLIMIT_NOFILE too low for a launch (pasta alone opens a pool of
    sockets), one line and 69, never a traceback, and nothing left in /tmp."""
    before = set(os.listdir("/tmp"))
    for limit in (8, 16, 24):
        refused = launcher.run(["/bin/sh", "-c", f'ulimit -n {limit}; exec "$@"', "sh",
                                f"{SHIM_DIR}/claude-sandbox", "shell", "--", "true"],
                               env={"CLAUDE_SANDBOX_EGRESS_JAIL": jail})
        assert refused.returncode == 69, refused.stderr
        assert "open-files limit" in refused.stderr and "Traceback" not in refused.stderr
    assert not {name for name in set(os.listdir("/tmp")) - before
                if name.startswith("claude-sandbox-")}
