"""`claude-sandbox verify`: run the numbered checks inside the real sandbox.

The runner stays outside. It plants what the checks look for (a canary in an
outer process's environment, GH_TOKEN/OPENAI_API_KEY/DISPLAY in the launch
environment, a listener on the outer 127.0.0.1, an abstract socket, a socket
in the outer /tmp), writes the outside facts to a JSON file in a private
temporary workspace, and launches pytest there through the real shim, so the
checks see exactly what an agent sees. Secrets never ride on a command line:
the inside gets only the canary's prefix and hash. pytest writes its report
into the same workspace; the runner adds the checks only the outside can
judge (27, 35), renders the table and exits 1 on any FAIL or ESCAPED.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from claude_sandbox.core import paths
from claude_sandbox.core.process import load_libc
from claude_sandbox.launch import controlfiles, hostfacts, profiles, state
from claude_sandbox.launch.gather import load_config

INSTALLED_CHECKS = f"{paths.LIBEXEC}/verification"
TOOLS_PYTHON = f"{paths.TOOLS_VENV}/bin/python"
SHIM = f"{paths.SHIM_DIR}/claude-sandbox"
CANARY_PREFIX = "csbx-canary-"
LAUNCH_TIMEOUT = 600
FAILING = ("FAIL", "ESCAPED")
# Variables the runner plants in the launch environment: none may reach inside.
PLANTED = ("GH_TOKEN", "OPENAI_API_KEY", "DISPLAY", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK",
           "CSBX_CANARY")
# Paths whose outer st_dev the checks compare with the inside one: equal means
# a write there lands on the outer file system.
HOME_PATHS = (
    "", ".bashrc", ".profile", ".bash_profile", ".zshrc", ".gitconfig", ".npmrc", ".ssh",
    ".config", ".config/gh", ".config/glab-cli", ".config/autostart", ".config/systemd",
    ".config/git", ".local", ".local/bin", ".local/share", ".local/share/applications",
    ".local/share/claude", ".local/share/uv", ".local/share/uv/tools", ".local/share/pipx",
    ".local/share/nvim", ".local/state", ".cache", ".cache/pre-commit", ".cache/uv", ".npm",
    ".claude", ".claude/settings.json", ".claude.json", ".codex", ".codex/config.toml",
    ".codex/packages", ".pi", ".pi/agent", ".pi/agent/extensions",
)


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    name: str
    outcome: str  # PASS FAIL SKIP | BLOCKED ESCAPED EXPOSED
    detail: str
    kind: str = "check"


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
        if self.shm_id is not None:
            load_libc().shmctl(self.shm_id, 0, None)  # IPC_RMID
        for directory in self.dirs:
            shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def load_catalogue(directory: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(directory, "checks.yaml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _nameservers() -> list[str]:
    try:
        text = Path("/etc/resolv.conf").read_text(encoding="utf-8")
    except OSError:
        return []
    return [line.split()[1] for line in text.splitlines()
            if line.startswith("nameserver") and len(line.split()) > 1]


def _outer_tty_rdev() -> int | None:
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
        "host_addresses": list(_host_addresses()),
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


def _plant_store_canary(fixtures: Fixtures, root: str) -> str:
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


def _cgroup_bases() -> dict[str, list[str]]:
    """Where the launch's cgroups will be made, per controller (check 58)."""
    from claude_sandbox.launch import cgroups

    facts = cgroups.probe_cgroups()
    return {"pids": [b for b in (facts.v2, facts.v1_pids) if b],
            "memory": [b for b in (facts.v2, facts.v1_memory) if b]}


def _host_addresses() -> tuple[str, ...]:
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
    addresses = _host_addresses()
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


def outer_devs(paths_: Sequence[str]) -> dict[str, int]:
    devs = {}
    for path in paths_:
        with contextlib.suppress(OSError):
            devs[path] = os.stat(path).st_dev
    return devs


def outer_ids(paths_: Sequence[str]) -> dict[str, list[int]]:
    ids = {}
    for path in paths_:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            ids[path] = [info.st_dev, info.st_ino]
    return ids


def _allowed_name(agent: str, lines: tuple[str, ...]) -> str:
    """An exact name the allow-list allows on 80 and 443, for checks 77 and 78."""
    from claude_sandbox.jail import egresspolicy

    for rule in egresspolicy.rules_for(agent, lines):
        if not rule.pattern.startswith("*.") and rule.ports == egresspolicy.WEB_PORTS:
            return rule.pattern
    return ""


def brokered_facts(facts: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """What the launch will broker (credentials.py), for checks 04, 83 and 84: the
    variables and forge files that must hold sentinels, and each real value's SHA-256
    (never the value: the facts file is in the workspace, readable inside)."""
    import hashlib

    from claude_sandbox.launch import credentials

    forge = {} if facts["no_forge"] else credentials.read_forge(str(facts["home"]))
    brokered = credentials.broker(facts["credential_lines"], environ, forge)
    return {"brokered_variables": [name for name, _ in brokered.env],
            "brokered_sha256": [hashlib.sha256(s.real.encode()).hexdigest()
                                for s in brokered.secrets],
            "brokered_files": [os.path.join(str(facts["home"]), rel) for rel, _ in brokered.forge]}


def gather(agent: str, workdir: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The facts only the outside knows, for the checks inside."""
    cfg = load_config(agent, environ)
    home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    root = state.store_root(cfg.state_dir, home, os.getuid())
    # Made now (the launch would make it, with the same first import) so that its
    # inode can be compared with the $HOME the checks find inside.
    store_home = state.ensure_home(root, agent, home, profiles.get(agent).imports,
                                   os.getuid(), default_root=cfg.state_dir is None)
    path_entries = [p for p in environ.get("PATH", "").split(":") if p]
    watched = ["/dev", "/tmp", "/var/tmp", "/workspaces", os.path.dirname(workdir), "/etc",
               paths.SHIM_DIR, *path_entries,
               *(os.path.join(home, rel) if rel else home for rel in HOME_PATHS)]
    from claude_sandbox.launch import mounts

    real = os.path.realpath(os.path.join(paths.REAL_BIN_DIR, agent))
    return {
        "agent": agent,
        "uid": os.getuid(),
        "home": home,
        "store_home": store_home,
        "store_root": root,
        "toolchains": [p for p in (os.path.join(home, t) for t in mounts.TOOLCHAINS)
                       if os.path.isdir(p) and not os.path.islink(p)],
        "toolchain_secrets": list(hostfacts.probe_secrets(
            [os.path.join(home, g) for g in mounts.TOOLCHAIN_SECRETS])),
        "workspace": os.path.realpath(workdir),
        "workdir": workdir,
        "path": path_entries,
        "ipc_ns": os.readlink("/proc/self/ns/ipc"),
        "uts_ns": os.readlink("/proc/self/ns/uts"),
        "net_ns": os.readlink("/proc/self/ns/net"),
        "pid_ns": os.readlink("/proc/self/ns/pid"),
        "outer_devs": outer_devs(watched),
        "outer_ids": outer_ids(watched),
        "store_home_id": outer_ids([store_home]).get(store_home),
        "controls": [c.path for c in controlfiles.controls(cfg.protect, cfg.unprotect)],
        "outer_tty_rdev": _outer_tty_rdev(),
        "outer_nameservers": _nameservers(),
        "dns_forwarder": paths.DNS_FORWARDER,
        "egress_jail": cfg.egress_jail,
        "egress_policy": cfg.egress_policy,
        "upstream_proxy": _upstream_proxy(cfg, environ),
        "allowed_name": _allowed_name(agent, cfg.allow_domain),
        "tmpfs_size": cfg.tmpfs_size,
        "cgroup_bases": _cgroup_bases(),
        "jail_may_widen": "egress-jail" in cfg.env_may_widen,
        "hardening": cfg.hardening,
        "allow_vsock": cfg.allow_vsock,
        "agent_programs": _agent_programs(cfg.hardening, environ),
        "agent_connect": list(brokered_connect(cfg, environ)),
        "allow_write": list(cfg.allow_write),
        "pass_env": list(cfg.pass_env),
        "credential_lines": list(cfg.credential),
        "no_forge": cfg.no_forge,
        "tls_dir": os.path.join(root, "tls"),
        "max_pids": cfg.max_pids,
        "max_memory": cfg.max_memory,
        "real_binary": real,
        "runtime_sockets": [s for s in mounts.RUNTIME_SOCKETS if os.path.exists(s)],
        "allow_read": list(cfg.allow_read),
        "outer_root": sorted(os.listdir("/")),
        "other_homes": _other_homes(home),
    }


def _other_homes(home: str) -> list[str]:
    """Every other account's home that exists here: check 72 looks for them inside."""
    found = {os.path.realpath(e.pw_dir) for e in pwd.getpwall()
             if e.pw_dir not in ("", "/") and os.path.isdir(e.pw_dir)}
    from claude_sandbox.launch import reads

    # System accounts' homes lie in trees the sandbox shows, or nowhere.
    shown = [f"/{name}" for name in reads.SYSTEM_ROOTS] + ["/dev", "/proc", "/run", "/tmp",
                                                            "/nonexistent"]
    return sorted(h for h in found - {home, "/"}
                  if not any(h == t or h.startswith(t + "/") for t in shown))


def _upstream_proxy(cfg: Any, environ: Mapping[str, str]) -> str:
    """ADDRESS:PORT of the proxy the egress proxy chains to here, or "" (check 93)."""
    from claude_sandbox.jail import upstreamproxy
    from claude_sandbox.launch.gather import upstream_proxy

    if not cfg.egress_jail:
        return ""
    chained = upstreamproxy.Upstream.decode(upstream_proxy(environ, _host_addresses())[0])
    return f"{chained.address}:{chained.port}" if chained else ""


def _agent_programs(level: str, environ: Mapping[str, str]) -> list[str]:
    """Under brokered: what the checks' own interpreter may execute (launch/brokered.py)."""
    if level != "brokered":
        return []
    from claude_sandbox.launch import brokered

    return list(brokered.read(TOOLS_PYTHON, TOOLS_PYTHON, environ).programs)


def brokered_connect(cfg: Any, environ: Mapping[str, str]) -> tuple[int, ...]:
    """The ports the agent may connect to under brokered, from what could reach inside."""
    from claude_sandbox.launch import brokered

    passed = {name: environ[name] for name in cfg.pass_env if name in environ}
    return brokered.connect_ports(list(passed.values()), cfg.local_ports)


def shim_prefix(agent: str) -> list[str]:
    return [SHIM, "shell", "--agent", agent, "--"]


def _inside_argv(prefix: Sequence[str], directory: str, workdir: str, adversarial: bool,
                 files: Sequence[str] = ("test_checks.py", "test_brokered.py"),
                 report: str = "report.json") -> list[str]:
    tests = [os.path.join(directory, name) for name in files]
    if adversarial and "test_checks.py" in files:
        tests.append(os.path.join(directory, "test_adversarial.py"))
    select = [] if adversarial else ["-k", "not test_a"]
    return [*prefix, TOOLS_PYTHON, "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--rootdir", directory, "-c", os.path.join(directory, "pytest.ini"), *tests,
            *select, "--csbx-facts", os.path.join(workdir, "facts.json"),
            "--csbx-report", os.path.join(workdir, report)]


@dataclass(frozen=True, slots=True)
class Launch:
    status: int
    output: str
    rows: tuple[dict[str, Any], ...] | None  # None: no report came back


def launch(prefix: Sequence[str], directory: str, workdir: str, environ: Mapping[str, str],
           adversarial: bool, inherited: Sequence[int] = (), brokered: bool = False) -> Launch:
    """`inherited`: descriptors the launcher gets, as from whatever started it.

    `brokered`: the agent's commands run through a command server, so the catalogue
    runs twice. First as the agent itself (test_brokered.py: the side doors of its own
    process), then as a command the agent starts (`sh -c`, through the server): where
    every other check applies. The rows of both are one report."""
    if brokered:
        own = launch_once(_inside_argv(prefix, directory, workdir, adversarial,
                                       ("test_brokered.py",), "report-agent.json"),
                          workdir, environ, inherited, "report-agent.json")
        command = [*prefix, "/bin/sh", "-c", 'exec "$0" "$@"']
        rest = launch_once(_inside_argv(command, directory, workdir, adversarial),
                           workdir, environ, inherited)
        rows = None if own.rows is None or rest.rows is None else own.rows + rest.rows
        return Launch(rest.status or own.status, own.output + rest.output, rows)
    argv = _inside_argv(prefix, directory, workdir, adversarial)
    return launch_once(argv, workdir, environ, inherited)


def launch_once(argv: Sequence[str], workdir: str, environ: Mapping[str, str],
                inherited: Sequence[int], report_name: str = "report.json") -> Launch:
    process = subprocess.Popen(argv, cwd=workdir, env=dict(environ), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               pass_fds=tuple(inherited))
    late = Path(workdir, "late.json")
    late.with_suffix(".part").write_text(json.dumps({"launcher_pid": process.pid}))
    late.with_suffix(".part").replace(late)
    try:
        output, _ = process.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    report = Path(workdir, report_name)
    rows = None
    if report.exists():
        rows = tuple(json.loads(report.read_text(encoding="utf-8"))["rows"])
    return Launch(process.returncode, output.decode(errors="replace"), rows)


def _adversarial_outcome(row: dict[str, Any]) -> tuple[str, str]:
    detail = str(row.get("detail", ""))
    if row["outcome"] == "PASS":
        return "BLOCKED", detail
    if row["outcome"] == "FAIL":
        return "ESCAPED", detail
    if detail.startswith("EXPOSED"):
        return "EXPOSED", detail.removeprefix("EXPOSED").lstrip(": ")
    return "SKIP", detail


def merge(catalogue: dict[str, Any], inside: Launch, outside: Sequence[Any],
          adversarial: bool) -> list[Row]:
    by_id: dict[str, dict[str, Any]] = {}
    for row in inside.rows or ():
        by_id.setdefault(row["id"], row)  # a parametrised check: its first failure wins
        if row["outcome"] == "FAIL":
            by_id[row["id"]] = row
    for result in outside:
        by_id[result.number] = {"outcome": result.outcome, "detail": result.detail}
    missing = "the sandbox did not start" if inside.rows is None else "not run (no result)"
    rows = []
    for check in catalogue["checks"]:
        got = by_id.get(check["number"])
        if got is None:
            rows.append(Row(check["number"], check["name"], "FAIL", missing))
        else:
            rows.append(Row(check["number"], check["name"], got["outcome"], got["detail"]))
    if adversarial:
        for attempt in catalogue.get("adversarial", []):
            got = by_id.get(attempt["id"])
            if got is None:
                rows.append(Row(attempt["id"], attempt["name"], "ESCAPED"
                                if inside.rows is not None else "FAIL", missing, "adversarial"))
            else:
                outcome, detail = _adversarial_outcome(got)
                rows.append(Row(attempt["id"], attempt["name"], outcome, detail, "adversarial"))
    return rows


@contextlib.contextmanager
def workspace() -> Iterator[str]:
    # A directory of our own, 0700: it becomes the sandbox's writable root and
    # carries the facts in and the report out.
    workdir = tempfile.mkdtemp(prefix="claude-sandbox-verify-", dir="/tmp")
    try:
        yield os.path.realpath(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_suite(agent: str, *, directory: str = INSTALLED_CHECKS,
              prefix: Sequence[str] | None = None, adversarial: bool = False,
              environ: Mapping[str, str] | None = None, outside_checks: bool = True,
              run_agents: bool = True, echo: Sequence[str] | None = None
              ) -> tuple[list[Row], Launch]:
    """Run the catalogue for `agent`; `prefix` runs a command inside (default: the shim)."""
    sys.path.insert(0, directory)
    outside_module = importlib.import_module("outside")  # verification/outside.py

    sys.path.remove(directory)
    base_env = dict(os.environ if environ is None else environ)
    catalogue = load_catalogue(directory)
    with workspace() as workdir:
        fixtures, planted_facts, planted_env = plant(workdir)
        try:
            facts = {**gather(agent, workdir, base_env), **planted_facts}
            facts["store_canary"] = _plant_store_canary(fixtures, facts["store_root"])
            facts.update(brokered_facts(facts, {**base_env, **planted_env}))
            Path(workdir, "facts.json").write_text(json.dumps(facts, indent=1))
            results = []
            if outside_checks:
                results.append(outside_module.check_27_workspace_refusal(
                    SHIM, agent, facts["home"], workdir, base_env))
                results.append(outside_module.check_53_environment_only_narrows(
                    SHIM, agent, facts["home"], workdir, base_env, facts["jail_may_widen"]))
                results.append(outside_module.check_48_not_redirectable(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_94_quick_questions_unsteerable(
                    agent, workdir, base_env))
                results.append(outside_module.check_49_killed_launcher(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_60_hang_up_ends_the_session(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_70_git_holds_only_what_git_makes(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_71_launcher_git_unsteerable(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_73_review_keeps_the_workspace(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_74_review_plants_run_nothing_outside(
                    SHIM, agent, facts["home"], base_env))
                fronted = outside_module.fronted_record(
                    SHIM, agent, facts["home"], base_env, facts["allowed_name"],
                    facts["egress_policy"])
                results.append(outside_module.check_77_allowed_tls_name_reaches_its_host(
                    fronted, facts["allowed_name"]))
                results.append(outside_module.check_78_allowed_http_host_reaches_its_host(
                    fronted, facts["allowed_name"]))
                results.append(outside_module.check_82_dead_proxy_ends_reach(
                    SHIM, agent, facts["home"], base_env, bool(facts["egress_jail"])))
                seen, earlier = outside_module.injection_seen(
                    SHIM, agent, facts["home"], base_env, echo, facts["credential_lines"])
                # For probes A55 and A56 inside: the echo, and a sentinel of another session.
                facts.update(echo=list(echo or ()), earlier_sentinel=earlier,
                             echo_variable=outside_module.echo_variable(
                                 echo, facts["credential_lines"]))
                Path(workdir, "facts.json").write_text(json.dumps(facts, indent=1))
                results += [outside_module.check_85_real_value_at_its_host(seen),
                            outside_module.check_86_sentinel_elsewhere(seen),
                            outside_module.check_87_no_injection_in_the_clear(seen)]
            before = outside_module.snapshot()
            inside = launch(shim_prefix(agent) if prefix is None else prefix, directory, workdir,
                            {**base_env, **planted_env}, adversarial,
                            inherited=(fixtures.inherited_fd,),
                            brokered=facts["hardening"] == "brokered")
            if outside_checks:
                results.append(outside_module.check_35_no_leftovers(
                    before, ignore=[workdir, *fixtures.files]))
            else:
                results += [outside_module.Result(number, "SKIP", "outside checks not run")
                            for number in ("27", "48", "49", "60", "35", "53", "70", "71",
                                           "73", "74", "77", "78", "82", "85", "86", "87",
                                           "94")]
            results += post_checks(inside, facts, run_agents)
        finally:
            fixtures.close()
    return merge(catalogue, inside, results, adversarial), inside


def _full_list(facts: Mapping[str, Any]) -> str:
    """The session-end report's full list (aftermath.py), where a class was cut."""
    from claude_sandbox.launch import gitrepo, overlays

    store = os.path.dirname(str(facts["store_home"]))
    path = os.path.join(overlays.workspace_store(store, str(facts["workspace"])),
                        "last-session.txt")
    return gitrepo.read_small(path, 16 << 20) or ""  # never blocks on a planted FIFO


def post_checks(inside: Launch, facts: Mapping[str, Any], run_agents: bool = True
                ) -> list[Any]:
    """Adversarial plants confirmed from outside (they only count when they persisted),
    and check 54's outside half: the real agents started outside run no plant."""
    from claude_sandbox.tools import adversarial

    results: list[Any] = list(adversarial.confirm(inside.rows or (), facts,
                                                  inside.output + _full_list(facts)))
    for row in inside.rows or ():
        if row.get("id") != "54" or not row.get("markers"):
            continue
        refused = row.get("outcome") == "PASS"
        if not run_agents and refused:
            results.append(adversarial.Confirmed("54", "PASS", f"{row.get('detail', '')} "
                                                 "(--quick: the agents were not started)"))
            continue
        from claude_sandbox.tools import unwrapped

        got = unwrapped.run_all(str(facts["workspace"]), str(row["markers"]))
        if refused:
            results.append(adversarial.Confirmed("54", got.outcome, got.detail))
        else:
            results.append(adversarial.Confirmed("54", "FAIL", f"{row.get('detail', '')}; "
                                                 f"{got.detail}"))
    return results


# ------------------------------------------------------------------ output

def render_plain(rows: Sequence[Row]) -> str:
    checks = [r for r in rows if r.kind == "check"]
    attempts = [r for r in rows if r.kind == "adversarial"]
    lines = [f"claude-sandbox verify: {len(checks)} checks"]
    for row in checks:
        tail = f" \u2014 {row.detail}" if row.outcome != "PASS" and row.detail else ""
        lines.append(f"[{row.outcome}] {row.id} {row.name}{tail}")
    if attempts:
        lines.append(f"adversarial: {len(attempts)} attempts")
        for row in attempts:
            lines.append(f"[{row.outcome}] {row.id} {row.name} \u2014 {row.detail}")
    passed = sum(r.outcome == "PASS" for r in checks)
    failed = sum(r.outcome == "FAIL" for r in checks)
    skipped = sum(r.outcome == "SKIP" for r in checks)
    summary = f"Summary: {passed} PASS / {failed} FAIL"
    if skipped:
        summary += f" ({skipped} SKIP)"
    if attempts:
        escaped = sum(r.outcome == "ESCAPED" for r in attempts)
        blocked = sum(r.outcome == "BLOCKED" for r in attempts)
        summary += f"; adversarial {blocked} BLOCKED / {escaped} ESCAPED"
    lines.append(summary)
    return "\n".join(lines)


def render_rich(rows: Sequence[Row], agent: str) -> None:
    from rich.console import Console
    from rich.table import Table

    colours = {"PASS": "green", "BLOCKED": "green", "FAIL": "bold red", "ESCAPED": "bold red",
               "SKIP": "yellow", "EXPOSED": "yellow"}
    table = Table(title=f"claude-sandbox verify: {agent}")
    for column in ("#", "check", "result", "detail"):
        table.add_column(column, overflow="fold")
    for row in rows:
        colour = colours.get(row.outcome, "")
        table.add_row(row.id, row.name, f"[{colour}]{row.outcome}[/]", row.detail)
    Console().print(table)
    print(render_plain(rows).splitlines()[-1])


def write_junit(path: str, rows: Sequence[Row], agent: str) -> None:
    failures = sum(r.outcome in FAILING for r in rows)
    skipped = sum(r.outcome in ("SKIP", "EXPOSED") for r in rows)
    cases = []
    for row in rows:
        name = quoteattr(f"{row.id} {row.name}")
        body = ""
        if row.outcome in FAILING:
            body = f"<failure message={quoteattr(row.detail)}>{escape(row.detail)}</failure>"
        elif row.outcome in ("SKIP", "EXPOSED"):
            body = f"<skipped message={quoteattr(row.outcome + ': ' + row.detail)}/>"
        cases.append(f'  <testcase classname="claude-sandbox.{agent}" name={name}>{body}'
                     "</testcase>")
    xml = (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="claude-sandbox verify '
           f'{agent}" tests="{len(rows)}" failures="{failures}" skipped="{skipped}">\n'
           + "\n".join(cases) + "\n</testsuite>\n")
    Path(path).write_text(xml, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="claude-sandbox verify",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--agent", default=os.environ.get("CLAUDE_SANDBOX_AGENT", "claude"),
                        choices=profiles.AGENT_NAMES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--junit", metavar="FILE")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--adversarial", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--echo-host", nargs=2, default=None)
    options = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(INSTALLED_CHECKS, "checks.yaml")):
        print(f"claude-sandbox: no checks at {INSTALLED_CHECKS}; re-run the installer",
              file=sys.stderr)
        return 69
    try:
        rows, inside = run_suite(options.agent, adversarial=options.adversarial,
                                 run_agents=not options.quick, echo=options.echo_host)
    except Exception as error:  # a nameable failure of the runner itself, not a check
        print(f"claude-sandbox: verify could not run: {error}", file=sys.stderr)
        return 70
    if inside.rows is None:
        tail = "\n".join(inside.output.strip().splitlines()[-15:])
        print(f"claude-sandbox: the sandbox did not start (exit {inside.status}):\n{tail}",
              file=sys.stderr)
    if options.junit:
        write_junit(options.junit, rows, options.agent)
    if options.json:
        print(json.dumps({"agent": options.agent, "rows": [asdict(r) for r in rows]}, indent=1))
    elif options.plain:
        print(render_plain(rows))
    else:
        render_rich(rows, options.agent)
    return 1 if any(r.outcome in FAILING for r in rows) or inside.rows is None else 0


if __name__ == "__main__":
    sys.exit(main())
