"""What `claude-sandbox verify` plants outside before a run, for the checks to look for
(a canary in an outer process, planted variables, listeners, sockets, root-only and
store files), and the facts about them the checks compare with what they see inside;
`Fixtures.close` removes all of it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claude_sandbox.core import paths
from claude_sandbox.core.libc import load_libc

CANARY_PREFIX = "csbx-canary-"
# Variables the runner plants in the launch environment: none may reach inside.
PLANTED = ("GH_TOKEN", "OPENAI_API_KEY", "DISPLAY", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK",
           "CSBX_CANARY")
# A process that starts a short-lived thread every 20 ms for an hour.
THREADING_DECOY = ("import threading, time\n"
                   "for _ in range(180000):\n"
                   "    threading.Thread(target=time.sleep, args=(0.2,)).start()\n"
                   "    time.sleep(0.02)\n")


@dataclass(slots=True)
class Fixtures:
    """What the runner plants outside for one run; `close` removes all of it."""

    workdir: str
    decoy: subprocess.Popen[bytes] | None = None
    threads: subprocess.Popen[bytes] | None = None
    sockets: list[socket.socket] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    shm_id: int | None = None
    inherited_fd: int = -1  # held open, inheritable, across the launch (check 61)
    forged: tuple[str, int] | None = None  # check 59's forged cache: path, inode

    def close(self) -> None:
        if self.inherited_fd >= 0:
            os.close(self.inherited_fd)
        for process in (self.decoy, self.threads):
            if process is not None:
                process.kill()
                process.wait()
        for sock in self.sockets:
            sock.close()
        for path in self.files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if self.forged is not None:  # still the forged one: no launch wrote it again
            with contextlib.suppress(OSError):
                if os.lstat(self.forged[0]).st_ino == self.forged[1]:
                    os.unlink(self.forged[0])
        if self.shm_id is not None:
            load_libc().shmctl(self.shm_id, 0, None)  # IPC_RMID
        for directory in self.dirs:
            shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def nameservers() -> list[str]:
    try:
        text = Path("/etc/resolv.conf").read_text(encoding="utf-8")
    except OSError:
        return []
    return [line.split()[1] for line in text.splitlines()
            if line.startswith("nameserver") and len(line.split()) > 1]


def outer_tty_rdev() -> int | None:
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.fstat(fd).st_rdev
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_rdev
    finally:
        os.close(fd)


def plant(workdir: str) -> tuple[Fixtures, dict[str, Any], dict[str, str]]:
    """Start the outer fixtures; returns them, their facts and the planted variables."""
    fixtures = Fixtures(workdir)
    canary = CANARY_PREFIX + secrets.token_hex(16)
    planted = {"GH_TOKEN": canary, "OPENAI_API_KEY": canary, "DISPLAY": ":97",
               "LC_CSBX_CANARY": canary,  # an LC_ name that is no locale category
               "AWS_SECRET_ACCESS_KEY": canary, "SSH_AUTH_SOCK": "/tmp/csbx-agent.sock",
               "CSBX_CANARY": canary}
    # An outer process whose environment holds the secret, like the user's shell.
    sleep = paths.which("sleep", ("/usr/bin", "/bin")) or "/bin/sleep"
    # Its command line holds the secret too, as a careless `tool --token=...` would.
    fixtures.decoy = subprocess.Popen([f"csbx-decoy --token={canary}", "3600"], executable=sleep,
                                      env={"PATH": "/usr/bin:/bin", **planted},
                                      stdin=subprocess.DEVNULL)
    # And one that keeps starting threads after the launch, each a /proc/TID of its own
    # that the late masks could not know (probe A64).
    fixtures.threads = subprocess.Popen(
        [f"csbx-threads --token={canary}", "-I", "-S", "-c", THREADING_DECOY],
        executable=sys.executable, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    host_listener = _host_listener(fixtures)
    abstract_name = f"csbx-verify-{secrets.token_hex(6)}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen(8)
    fixtures.sockets += [listener, abstract]
    tmp_socket = f"/tmp/vscode-ipc-csbx-{secrets.token_hex(6)}.sock"
    try:
        ide = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ide.bind(tmp_socket)
        fixtures.sockets.append(ide)
        fixtures.files.append(tmp_socket)
    except OSError:
        tmp_socket = ""
    canaries = _plant_home_canaries(fixtures)
    _make_workspace_a_repository(workdir)
    # Check 61: a descriptor the launcher inherits, as from an IDE, must not reach inside.
    inherited = os.path.join(workdir, "inherited-descriptor")
    Path(inherited).write_text(canary)
    fixtures.inherited_fd = os.open(inherited, os.O_RDONLY)
    os.set_inheritable(fixtures.inherited_fd, True)
    shm_key = secrets.randbelow(1 << 30) + 1
    shm_id = load_libc().shmget(shm_key, 4096, 0o1000 | 0o600)  # IPC_CREAT
    fixtures.shm_id = shm_id if shm_id >= 0 else None
    facts = {
        "decoy_pid": fixtures.decoy.pid,
        "threads_pid": fixtures.threads.pid,
        "runner_pid": os.getpid(),
        "canary_prefix": CANARY_PREFIX,
        "canary_sha256": hashlib.sha256(canary.encode()).hexdigest(),
        "loopback_port": listener.getsockname()[1],
        "abstract_socket": abstract_name,
        "outer_tmp_socket": tmp_socket,
        "shm_key": shm_key if fixtures.shm_id is not None else None,
        "home_canaries": canaries,
        "host_addresses": list(host_addresses()),
        "host_listener": host_listener,
        "udp_echo_port": _udp_echo(fixtures),
        "host_sockets": _plant_host_sockets(fixtures, workdir),
        "root_only": _plant_root_only(fixtures),
        "inherited_fd": {"fd": fixtures.inherited_fd, "path": inherited},
    }
    return fixtures, facts, planted


def _plant_host_sockets(fixtures: Fixtures, workdir: str) -> list[str]:
    """Listening sockets outside the workspace, at paths no list could name (check 57)."""
    name = secrets.token_hex(4)
    places = [os.path.join(os.path.dirname(workdir), f"csbx-verify-{name}.sock")]
    if os.getuid() == 0:
        directory = f"/var/lib/csbx-verify-{name}"
        os.mkdir(directory, 0o755)
        fixtures.dirs.append(directory)
        places.append(os.path.join(directory, "app.sock"))
    made = []
    for path in places:
        with contextlib.suppress(OSError):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(8)
            fixtures.sockets.append(server)
            fixtures.files.append(path)
            made.append(path)
    return made


def plant_store_canary(fixtures: Fixtures, root: str) -> str:
    """Another agent's home in this user's store, with a login in it: what no agent's
    sandbox may read (check 89, probe A60)."""
    other = os.path.join(root, f"csbx-verify-{secrets.token_hex(4)}")
    os.makedirs(os.path.join(other, "home"), mode=0o700)
    fixtures.dirs.append(other)
    canary = os.path.join(other, "home", "auth.json")
    Path(canary).write_text('{"token": "csbx-store-canary"}\n')
    os.chmod(canary, 0o600)
    return canary


def _plant_root_only(fixtures: Fixtures) -> list[str]:
    """On a root launch: a file only root may read, outside the workspace (check 59)."""
    if os.getuid() != 0:
        return []
    directory = f"/var/lib/csbx-verify-{secrets.token_hex(4)}"
    os.mkdir(directory, 0o755)
    fixtures.dirs.append(directory)
    path = os.path.join(directory, "secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"csbx-root-only\n")
    os.close(fd)
    fixtures.files.append(path)
    private_dir = os.path.join(directory, "private")
    os.mkdir(private_dir, 0o700)
    Path(private_dir, "key").write_text("csbx\n")
    fixtures.files.append(os.path.join(private_dir, "key"))
    return [path, private_dir]


def forge_root_only_cache(fixtures: Fixtures, store: str) -> str:
    """On a root launch, after the plants: the root-only walk's cache replaced by one
    written whole and right that covers nothing and holds / and every directory in it at
    its time now (the plants' /var too), so that, trusted, it would leave /etc/shadow and
    the plants shown (every tree a launch shows is one of them or lies below one). It is
    group-writable: a cache another may write is never trusted (rootcache.py), the walk
    is made anew, and check 59 finds the covers. Put in place with that mode already (a
    rename): never, even for a moment, a cache a launch would trust. The launch writes
    the cache again; one still there at the end (no launch read it) is removed."""
    if os.getuid() != 0:
        return ""
    from claude_sandbox.launch.facts import dirtimes, rootcache

    times = {}
    # One level only: a mount below, however slow (a dead network share), is not asked.
    for directory in ["/", *(os.path.join("/", name) for name in os.listdir("/")
                             if name not in ("proc", "sys"))]:
        with contextlib.suppress(OSError):
            info = os.lstat(directory)
            if stat.S_ISDIR(info.st_mode):
                times[directory] = dirtimes.stamp(info)
    path = os.path.join(store, rootcache.CACHE_NAME)
    os.makedirs(store, mode=0o700, exist_ok=True)
    staged = f"{path}.forged-{secrets.token_hex(4)}"
    rootcache.save(staged, {}, times, time.time())
    os.unlink(staged + rootcache.TIMES)  # its times: the launch reads none of a refused cache
    os.chmod(staged, 0o660)
    os.replace(staged, path)
    fixtures.forged = (path, os.lstat(path).st_ino)
    return path


def cgroup_bases() -> dict[str, list[str]]:
    """Where the launch's cgroups will be made, per controller (check 58)."""
    from claude_sandbox.launch.session import cgroups

    facts = cgroups.probe_cgroups()
    return {"pids": [b for b in (facts.v2, facts.v1_pids) if b],
            "memory": [b for b in (facts.v2, facts.v1_memory) if b]}


def host_addresses() -> tuple[str, ...]:
    """Every local address of the host, a range (an AnyIP route) by its first address."""
    import ipaddress

    from claude_sandbox.jail.routes import host_addresses

    found = host_addresses(Path("/proc/net/fib_trie").read_text(encoding="ascii"),
                           Path("/proc/net/route").read_text(encoding="ascii"))
    return tuple(dict.fromkeys(
        str(next(ipaddress.ip_network(a).hosts(), ipaddress.ip_network(a).network_address))
        if "/" in a else a for a in found))


def _udp_echo(fixtures: Fixtures) -> int:
    """A UDP echo on every address of the host, as a host service bound to 0.0.0.0 is:
    multicast and broadcast from inside must not reach it (probe A58)."""
    import threading

    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("0.0.0.0", 0))
    fixtures.sockets.append(server)

    def echo() -> None:
        while True:
            try:
                data, peer = server.recvfrom(2048)
                server.sendto(data, peer)
            except OSError:  # closed by Fixtures.close
                return

    threading.Thread(target=echo, daemon=True).start()
    return int(server.getsockname()[1])


def _host_listener(fixtures: Fixtures) -> list[object] | None:
    """A TCP listener on every address of the host: what the jail must not reach (check 56)."""
    addresses = host_addresses()
    if not addresses:
        return None
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    fixtures.sockets.append(server)
    return [addresses[0], server.getsockname()[1]]


def _plant_home_canaries(fixtures: Fixtures) -> list[str]:
    """Files in the outer home (and ~/.config) that must not be visible inside (check 03)."""
    home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    name = f".csbx-canary-{secrets.token_hex(6)}"
    planted = []
    for relative in (name, f".config/{name}"):
        path = os.path.join(home, relative)
        if not os.path.isdir(os.path.dirname(path)):
            continue
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            fixtures.files.append(path)
            planted.append(relative)
    return planted


def _make_workspace_a_repository(workdir: str) -> None:
    """A git repository with hooks, .vscode and .claude present, .envrc and
    .vscode/tasks.json links to files inside (a dotfile manager's), and .mcp.json absent
    (check 52)."""
    git = paths.which("git", ("/usr/bin", "/bin"))
    if git is None:
        return
    subprocess.run([git, "init", "-q", workdir], check=False, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": workdir})
    for relative, text in ((".vscode/settings.json", "{}\n"), (".claude/settings.json", "{}\n")):
        path = Path(workdir, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    Path(workdir, "dotfiles").mkdir(exist_ok=True)
    Path(workdir, "dotfiles", "envrc").write_text("# the user's\n", encoding="utf-8")
    Path(workdir, "dotfiles", "tasks.json").write_text("{}\n", encoding="utf-8")
    with contextlib.suppress(FileExistsError):
        os.symlink("dotfiles/envrc", os.path.join(workdir, ".envrc"))
    with contextlib.suppress(FileExistsError):
        os.symlink("../dotfiles/tasks.json", os.path.join(workdir, ".vscode", "tasks.json"))
