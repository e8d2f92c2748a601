"""Deny by default at the host boundary: sockets, host addresses, outer /proc, root-only
files, caps. Real launches through the installed shim, as root and as a test user; the
network targets are addresses the tests make themselves (a veth pair)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from .conftest import SHIM_DIR, Launcher

pytestmark = pytest.mark.integration

MASK_PROC = "mount --make-rprivate / && mount --bind /dev/null /proc/timer_list && "


def _inside(launcher: Launcher, code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return launcher.shell("/usr/bin/python3", "-c", code, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def odd_socket() -> Iterator[str]:
    """A listening socket at a random path no list would name, outside any workspace."""
    directory = f"/var/lib/csbx-odd-{secrets.token_hex(4)}"
    os.makedirs(directory, mode=0o755)
    path = os.path.join(directory, f"{secrets.token_hex(3)}.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    yield path
    server.close()
    shutil.rmtree(directory, ignore_errors=True)


CONNECT = """
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); print("CONNECTED", path)
    except OSError as e:
        print("refused", path, e.errno)
"""


def test_a_socket_at_an_odd_path_is_not_connectable(launcher: Launcher, odd_socket: str) -> None:
    result = launcher.shell("/usr/bin/python3", "-c", CONNECT, odd_socket)
    assert result.returncode == 0, result.stderr
    assert "CONNECTED" not in result.stdout, result.stdout


def test_a_socket_bound_in_from_elsewhere_is_not_connectable(launcher: Launcher,
                                                             odd_socket: str) -> None:
    """A socket file bind-mounted at an unusual path, as an engine's -v would place it."""
    target = f"/opt/csbx-mounted-{secrets.token_hex(3)}.sock"
    script = (f"mount --make-rprivate / && touch {target} && mount --bind {odd_socket} {target}"
              ' && exec "$@"')
    argv = ["/usr/local/bin/claude-sandbox", "shell", "--", "/usr/bin/python3", "-c", CONNECT,
            target]
    if launcher.user != "root":
        argv = ["setpriv", f"--reuid={launcher.uid}", f"--regid={launcher.uid}",
                "--init-groups", *argv]
    try:
        result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *argv],
                                cwd=launcher.workspace, capture_output=True, text=True,
                                timeout=120, env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                                  "HOME": launcher.home,
                                                  "CLAUDE_SANDBOX_EGRESS_JAIL": "0"})
    finally:
        if os.path.exists(target):
            os.unlink(target)
    assert result.returncode == 0, result.stderr
    assert "refused" in result.stdout and "CONNECTED" not in result.stdout, result.stdout


def test_a_socket_under_a_symlinked_var_run_breaks_no_launch(launcher: Launcher) -> None:
    """/run/docker.sock with /var/run -> /run: the launch goes on, the socket is gone."""
    if os.path.islink("/var/run") is False and not os.path.isdir("/run"):
        pytest.skip("no /run here")
    path = f"/run/csbx-{secrets.token_hex(3)}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(1)
    try:
        result = launcher.shell("/usr/bin/python3", "-c", CONNECT, path,
                                path.replace("/run/", "/var/run/"))
    finally:
        server.close()
        os.unlink(path)
    assert result.returncode == 0 and "bwrap:" not in result.stderr, result.stderr
    assert "CONNECTED" not in result.stdout


@pytest.fixture
def host_address() -> Iterator[tuple[str, int]]:
    """A TEST-NET-2 address on a veth of the host, with a TCP listener on it."""
    name = f"csbx{secrets.token_hex(3)}"
    address = "198.51.100.77"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p"],
                   check=True)
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", name], check=True)
    subprocess.run(["ip", "link", "set", name, "up"], check=True)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, 0))
    server.listen(8)
    try:
        yield address, server.getsockname()[1]
    finally:
        server.close()
        subprocess.run(["ip", "link", "del", name], check=False)


def test_an_address_of_the_host_is_unreachable_from_the_jail(
        launcher: Launcher, host_address: tuple[str, int]) -> None:
    address, port = host_address
    code = (f"import socket; s = socket.socket(); s.settimeout(3)\n"
            f"try:\n    s.connect(({address!r}, {port})); print('CONNECTED')\n"
            f"except OSError as e:\n    print('refused', e)\n")
    result = _inside(launcher, code, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"})
    assert result.returncode == 0, result.stderr
    assert "refused" in result.stdout, result.stdout
    routes = launcher.shell("/usr/sbin/ip", "route", "get", address,
                            env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"})
    assert "unicast" not in routes.stdout and " via " not in routes.stdout, routes.stdout


def test_the_dns_forwarder_answers_port_53_only(launcher: Launcher) -> None:
    # connect() meets the egress proxy on the loopback, which resets a connection to
    # the forwarder's address at once; reaching anything would answer or wait.
    code = ("import socket\nfor port in (22, 80, 8080):\n"
            "    s = socket.socket(); s.settimeout(3)\n"
            "    try:\n        s.connect(('169.254.1.53', port)); s.recv(1)\n"
            "        print('CONNECTED', port)\n"
            "    except TimeoutError:\n        print('CONNECTED', port)\n"
            "    except OSError:\n        pass\n")
    result = _inside(launcher, code, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"})
    assert result.returncode == 0 and "CONNECTED" not in result.stdout, result


SCAN = """
import os, sys
secret = (sys.argv[1] + sys.argv[2]).encode()  # in two halves: no command line holds it
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if secret in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            pass
print("found", found)
"""


@pytest.mark.parametrize("jail", ["0", "1"])
def test_outer_command_lines_are_hidden_where_the_engine_masks_proc(
        launcher: Launcher, jail: str) -> None:
    secret = "csbx" + secrets.token_hex(6)
    sleeper = subprocess.Popen(["/bin/sh", "-c", f"exec -a 'tool --token={secret}' sleep 60"])
    try:
        argv = ["/usr/local/bin/claude-sandbox", "shell", "--", "/usr/bin/python3", "-c", SCAN,
                secret[:6], secret[6:]]
        if launcher.user != "root":
            argv = ["setpriv", f"--reuid={launcher.uid}", f"--regid={launcher.uid}",
                    "--init-groups", *argv]
        result = subprocess.run(["unshare", "-m", "sh", "-c", MASK_PROC + 'exec "$@"', "sh",
                                 *argv], cwd=launcher.workspace, capture_output=True,
                                text=True, timeout=120,
                                env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                     "HOME": launcher.home, "CLAUDE_SANDBOX_EGRESS_JAIL": jail})
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    assert "found []" in result.stdout, result.stdout


@pytest.mark.parametrize("store", ["home", "state-dir"])
def test_a_root_only_file_made_after_a_launch_is_hidden_at_the_next(launcher: Launcher,
                                                                    store: str) -> None:
    """Whichever store the configuration names, the home's or a state-dir's. /var is shown
    through a view that refuses root's own files (ADR 0020); /etc too, or, where the
    test's configuration is bound over /etc/claude-sandbox.conf (a mount below it), the
    walk covers /etc/shadow, its cache in the store the configuration names."""
    if launcher.user != "root":
        pytest.skip("a root launch only")
    state_dir = tempfile.mkdtemp(prefix="csbx-state-", dir="/var/tmp")
    conf = f"state-dir = {state_dir}\nenv-may-widen = egress-jail\n" if store == "state-dir" \
        else None
    directory = f"/var/lib/csbx-ro-{secrets.token_hex(3)}"
    try:
        launcher.shell("/bin/true", config=conf)  # the cache exists now
        os.mkdir(directory, 0o755)
        with open(os.open(f"{directory}/key", os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("csbx-secret\n")
        result = launcher.shell("/bin/cat", f"{directory}/key", "/etc/shadow", config=conf)
        assert "csbx-secret" not in result.stdout and "root:" not in result.stdout, result
        assert os.path.exists(os.path.join(state_dir, "0", "root-only-10")) == (
            store == "state-dir")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)


def test_a_root_only_file_made_during_a_root_session_is_refused(launcher: Launcher) -> None:
    """What no walk before the launch could find: root makes a 0600 file, and a link to
    it, while the session runs; the agent waits for them and cannot read either."""
    if launcher.user != "root":
        pytest.skip("a root launch only")
    explained = launcher.run([f"{SHIM_DIR}/claude-sandbox", "explain", "--json"])
    viewed = json.loads(explained.stdout)["late_masks"]["root_only_views"]
    # A place in a tree shown through a view: one with a mount below it (podman's storage
    # in /var/lib) is walked, and the walk cannot cover what is made during a session.
    parent = next((p for p in ("/opt", "/var/lib", "/usr/local")
                   if os.path.isdir(p) and any(p == v or p.startswith(v + "/") for v in viewed)),
                  None)
    if parent is None:
        pytest.skip(f"no tree here is shown through a view: {viewed}")
    directory = tempfile.mkdtemp(prefix="csbx-during-", dir=parent)
    os.chmod(directory, 0o755)

    def make_them() -> None:
        key = os.path.join(directory, "key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
            handle.write("csbx-secret\n")
        os.link(key, os.path.join(directory, "linked"))
        with open(os.path.join(launcher.workspace, "ready"), "w") as handle:
            handle.write("ready\n")

    timer = threading.Timer(1.0, make_them)
    timer.start()
    try:
        # The marker is waited for in the workspace: a name looked up in a view and not
        # found stays unfound in that session (ADR 0020, Consequences).
        result = launcher.shell("/bin/sh", "-c", (
            "n=0; while [ ! -e ready ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done; "
            f"cat ready; cat {directory}/key; cat {directory}/linked; true"))
        assert "ready" in result.stdout, result
        assert "csbx-secret" not in result.stdout, result
        assert result.stderr.count("Permission denied") == 2, result
    finally:
        timer.join()
        shutil.rmtree(directory, ignore_errors=True)
        os.unlink(os.path.join(launcher.workspace, "ready"))


@pytest.mark.parametrize("jail", ["0", "1"], ids=["jail-off", "jail-on"])
def test_no_descriptor_of_a_view_reaches_the_sandbox(launcher: Launcher, jail: str) -> None:
    """A view's descriptor would open its tree below every mount bwrap puts over it (the
    toolchains' covers, the private /var/tmp): none is open inside, whether the child
    that execs bwrap attached the views (the jail off) or the holder did."""
    result = launcher.shell(
        "/bin/sh", "-c", 'for f in /proc/self/fd/*; do echo "$(readlink "$f")"; done',
        env={"CLAUDE_SANDBOX_EGRESS_JAIL": jail}, config="env-may-widen = egress-jail\n")
    assert result.returncode == 0, result.stderr
    targets = result.stdout.split()
    assert targets and not [t for t in targets if t.startswith("/")
                            and not t.startswith(("/dev/", "/proc/"))], targets


def test_a_fork_bomb_a_memory_hog_and_a_tmpfs_fill_hit_their_caps(launcher: Launcher) -> None:
    conf = "env-may-widen = egress-jail\nmax-pids = 64\nmax-memory = 256M\ntmpfs-size = 64M\n"
    code = """
import os, sys, subprocess
pids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(20); os._exit(0)
        pids.append(pid)
    print("forks: all 200")
except OSError as e:
    print("forks: stopped at", len(pids), e.errno)
for pid in pids:
    os.kill(pid, 9); os.waitpid(pid, 0)
hog = subprocess.run([sys.executable, "-c", "b = bytearray(1 << 30); print('hog lived')"],
                     capture_output=True, text=True)
print("hog:", hog.returncode, hog.stdout.strip())
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(200):
            f.write(b"x" * (1 << 20))
    print("fill: all 200M")
except OSError as e:
    print("fill: stopped", e.errno)
"""
    started = time.monotonic()
    result = launcher.shell("/usr/bin/python3", "-c", code, config=conf)
    assert result.returncode == 0, result.stderr
    assert "forks: stopped at" in result.stdout, result.stdout
    assert "hog lived" not in result.stdout, result.stdout
    assert "fill: stopped" in result.stdout, result.stdout
    # Outside, the container stays responsive.
    assert subprocess.run(["/bin/true"], timeout=10).returncode == 0
    assert time.monotonic() - started < 110


def test_harsh_runs_beside_a_mount_only_root_may_reach(launcher: Launcher) -> None:
    """A writable mount below a directory only root may enter (podman's storage under a
    0700 /var/lib/containers): under harsh a user's launch cannot make it noexec, and need
    not, since the agent cannot reach it either. The launch runs, and the mount stays out
    of the agent's reach, as root's too (a root-only directory is covered)."""
    base = tempfile.mkdtemp(prefix="csbx-private-", dir="/var/lib")
    os.chmod(base, 0o700)
    storage = os.path.join(base, "storage")
    os.mkdir(storage)
    subprocess.run(["mount", "-t", "tmpfs", "csbx-storage", storage], check=True)
    try:
        result = launcher.shell(
            "/bin/sh", "-c", f"ls {storage} >/dev/null 2>&1 && echo reached || echo unreachable",
            config="env-may-widen = egress-jail\nhardening = harsh\n")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["unreachable"], result
    finally:
        subprocess.run(["umount", storage], check=False)
        shutil.rmtree(base, ignore_errors=True)
