"""The whole bubblewrap command line, as a pure function (docs/reference/mounts.md).

No other module adds a mount or a variable. bubblewrap applies its options in
order, so the order below is part of the security model: a mask follows the
bind it covers, an allow-write bind follows the masks it reaches through, and
the identity binds come last so nothing can cover them. Each step carries the
reason `claude-sandbox explain` prints beside it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from . import paths
from .config import Config
from .controlfiles import ControlPlan
from .errors import EXIT_REFUSED, SandboxError
from .hostfacts import HostFacts
from .profiles import Profile
from .record import record

# Container-engine and system-bus sockets, for the checks' and probes' reference:
# none of them is reached inside, by the mechanisms below, not by this list.
RUNTIME_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
    "/run/dbus/system_bus_socket",
)
# Runtime trees, where daemons put their sockets and secrets (/run/user, /run/secrets,
# docker.sock): each a fresh, empty tmpfs inside, so a socket there is not reachable,
# whether it existed at launch or is made later (ADR 0006; checks 12, 13, 36, 57).
RUNTIME_TREES = ("/run", "/var/run", "/var/tmp")
# Dotfiles that hold credentials or reach the outer display (checks 14, 15).
NULLED_DOTFILES = (".netrc", ".Xauthority", ".ICEauthority")
# Of the outer home only the forge CLIs' stores come back, read-only: gh aliases
# can run shell commands, so the agent must not be able to rewrite them.
FORGE_CONFIG = (".config/gh", ".config/glab-cli")
LOCAL_BIN_TOOLS = (".local/bin/uv", ".local/bin/uvx")
AGENT_SHELL = "/bin/bash"
# Passed through from the launching environment when set: terminal and locale.
PASSED_THROUGH = (
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "EDITOR",
    "VISUAL",
)


@record
class Op:
    """One bubblewrap option (or a few that only make sense together) and why."""

    args: tuple[str, ...]
    reason: str


@record
class Extras:
    """Per-launch inputs that are not host facts: fds and the jail's files."""

    gitconfig_fd: int
    codex_config_fd: int | None = None  # codex's managed config for inside (codexconfig.py)
    seccomp_fd: int | None = None
    resolv_conf: str | None = None  # the jail's generated resolv.conf
    jailed: bool = False


@record
class Writable:
    """Where the sandbox may write, resolved and checked (workspace.check_writable)."""

    workspace: str
    allow_write: tuple[str, ...] = ()
    # One plan per writable root: its control files, held read-only (check 52).
    controls: tuple[ControlPlan, ...] = ()


@record
class Plan:
    ops: tuple[Op, ...]
    env: tuple[tuple[str, str], ...]
    command: tuple[str, ...]
    layout: Writable  # what the launcher prepares for the ops: placeholders
    hide_outer_proc: bool = False  # _enter hides the outer processes (procmask.py)

    def argv(self, bwrap: str) -> list[str]:
        flat = [arg for op in self.ops for arg in op.args]
        return [bwrap, *flat, "--", *self.command]

    def environ(self) -> dict[str, str]:
        return dict(self.env)


def optional_paths(profile: Profile, home: str) -> tuple[str, ...]:
    """Every path whose existence changes the plan; hostfacts.probe checks them."""
    in_home = (*FORGE_CONFIG, *LOCAL_BIN_TOOLS)
    return (
        paths.UNWRAPPED_SETTINGS,
        paths.CODEX_MANAGED_CONFIG,
        *(os.path.join(home, rel) for rel in in_home),
    )


def _proc_ops(facts: HostFacts) -> list[Op]:
    """A fresh procfs where the kernel allows one; else the outer /proc, read-only.

    A fresh procfs shows only the sandbox's processes and lets a non-root agent
    build its own nested sandbox (codex writes /proc/self/uid_map). Container
    runtimes mask parts of /proc, and the kernel then refuses a new procfs: the
    outer one stays, read-only, with other processes' environ and fds closed by
    the user namespace and --cap-drop ALL (checks 33, 34).
    """
    if facts.proc_mountable:
        fresh = Op(("--proc", "/proc"), "a fresh procfs: only the sandbox's own processes")
        return [fresh, *_proc_read_only(facts)]
    outer = Op(
        ("--ro-bind", "/proc", "/proc"),
        "the outer /proc, read-only (this host masks parts of /proc: no fresh procfs)",
    )
    return [outer]


# Kernel knobs in a fresh procfs: root owns them and many writes check only the file
# mode, so uid 0 without capabilities could still set kernel.core_pattern to a program
# the kernel then runs as host root. Read-only for root; other uids cannot write them,
# and leaving their procfs whole lets a nested sandbox mount its own (codex).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def _proc_read_only(facts: HostFacts) -> list[Op]:
    if facts.uid != 0:
        return []
    reason = "kernel knobs read-only for root (check 46)"
    return [Op(("--ro-bind-try", path, path), reason) for path in PROC_READ_ONLY]


def writable_targets(ops: Sequence[Op]) -> tuple[str, ...]:
    """Every path the plan makes writable inside: read-write binds and tmpfs mounts."""
    targets = ["/dev/shm"]  # bwrap's private /dev holds a writable shm directory
    for op in ops:
        args = op.args[2:] if op.args[0] == "--size" else op.args  # --size N --tmpfs DEST
        if args[0] == "--bind":
            targets.append(args[2])
        elif args[0] == "--tmpfs":
            targets.append(args[1])
    return tuple(dict.fromkeys(targets))


def exec_targets(ops: Sequence[Op]) -> tuple[str, ...]:
    """Read-only binds of programs (the agent, uv, uvx) that may sit inside writable trees."""
    return tuple(
        op.args[2]
        for op in ops
        if op.args[0] == "--ro-bind"
        and op.args[1] not in ("/dev/null", paths.EMPTY_FILE)
        and op.args[1] != "/"
        and op.args[2] not in ("/proc", "/etc/resolv.conf")
    )


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _existing(home: str, exists: frozenset[str], relatives: Sequence[str]) -> list[str]:
    """The paths under $HOME among `relatives` that exist on this host, in order."""
    return [p for p in (os.path.join(home, rel) for rel in relatives) if p in exists]


def _home_ops(profile: Profile, config: Config, facts: HostFacts) -> list[Op]:
    home, exists = facts.home, facts.existing
    ops = [
        Op(
            ("--bind", facts.store_home, home),
            f"$HOME is {profile.name}'s one-way state store: the outer home, its agent "
            "directories, caches and start-up files are not here (checks 03, 51)",
        )
    ]
    if not config.no_forge:
        reason = "forge CLI config, read-only: ~/.config is a strict allow-list"
        ops += [Op(("--ro-bind", p, p), reason) for p in _existing(home, exists, FORGE_CONFIG)]
    for rel in NULLED_DOTFILES:
        path = os.path.join(home, rel)
        reason = f"{rel} reads as empty (checks 14, 15)"
        ops.append(Op(("--ro-bind", paths.EMPTY_FILE, path), reason))
    reason = "only uv and uvx come back from ~/.local/bin, read-only (check 32)"
    ops += [Op(("--ro-bind", p, p), reason) for p in _existing(home, exists, LOCAL_BIN_TOOLS)]
    return ops


def _binary_ops(profile: Profile, facts: HostFacts) -> list[Op]:
    ops: list[Op] = []
    if facts.real_root != facts.real_binary:
        ops.append(
            Op(
                ("--ro-bind", facts.real_root, facts.real_root),
                f"{profile.name}'s package lives under $HOME: back, read-only",
            )
        )
    ops.append(
        Op(
            ("--ro-bind", facts.real_binary, facts.real_binary),
            f"the real {profile.name} binary, read-only: it cannot rewrite itself",
        )
    )
    if profile.local_bin_alias:
        alias = os.path.join(facts.home, ".local/bin", profile.name)
        ops.append(
            Op(
                ("--ro-bind", facts.real_binary, alias),
                f"the real {profile.name} at ~/.local/bin for its native-install checks",
            )
        )
    return ops


def _guard_ops(facts: HostFacts, writable: Sequence[str]) -> list[Op]:
    """Check 22: entry points in writable PATH directories ahead of the shims."""
    ops: list[Op] = []
    for entry in facts.guard:
        if not _under(entry.directory, writable):
            continue
        path = os.path.join(entry.directory, entry.name)
        if entry.state == "other":
            raise SandboxError(
                f"{path} would shadow the sandbox's {entry.name} (it is ahead of "
                f"{paths.SHIM_DIR} on PATH and writable inside); remove it",
                EXIT_REFUSED,
            )
        ops.append(
            Op(
                ("--ro-bind", "/dev/null", path),
                "entry-point guard: nothing planted here can shadow the shim (check 22)",
            )
        )
    return ops


def _under_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _runtime_ops(config: Config, facts: HostFacts) -> list[Op]:
    """Fresh tmpfs over the runtime trees; what must come back, read-only."""
    size = str(config.tmpfs_size)
    ops = [Op(("--size", size, "--tmpfs", tree), f"a private {tree}: no daemon's socket "
              "or secret, then or later (checks 12, 13, 57)") for tree in facts.runtime_dirs]
    for path in restored(facts):
        why = ("/etc/resolv.conf leads here" if path == facts.resolv_target
               else "a PATH directory under a runtime tree")
        ops.append(Op(("--ro-bind-try", path, path), f"{why}: back, read-only"))
    for path in config.allow_socket:
        ops.append(Op(("--ro-bind", path, path), "allow-socket: the operator lets the "
                      "sandbox connect here (check 57)"))
    return ops


def restored(facts: HostFacts) -> list[str]:
    """What comes back from under the masked runtime trees: resolv.conf's target and
    PATH directories, resolved, never a tree itself (a PATH of `/run/.` would bring
    back all of /run)."""
    masked = list(facts.runtime_dirs)
    found: list[str] = []
    candidates = [facts.resolv_target] if facts.resolv_target != "/etc/resolv.conf" else []
    candidates += [os.path.realpath(e) for e in facts.path if e.startswith("/")]
    for path in candidates:
        if path not in masked and path not in found and _under_any(path, masked):
            found.append(path)
    return found


def _socket_ops(config: Config, facts: HostFacts, layout: Writable) -> list[Op]:
    """Every other socket bound or mounted on the host: covered, so it cannot be connected.

    A socket on a read-only mount still accepts connections; covering it with an
    empty file refuses them (ECONNREFUSED). Sockets in the workspace, the
    sandbox's own directories and what the operator allowed stay reachable.
    """
    own = [*facts.runtime_dirs, "/tmp", "/dev", facts.home, layout.workspace,
           *layout.allow_write, *config.allow_socket]
    if facts.agent_tmp:
        own.append(facts.agent_tmp)
    back = restored(facts)  # what came back from a masked tree is the host's again
    return [Op(("--ro-bind", paths.EMPTY_FILE, sock), "a socket of the host: not "
               "connectable inside (check 57)")
            for sock in facts.sockets
            if not _under_any(sock, own) or (_under_any(sock, back)
                                             and not _under_any(sock, config.allow_socket))]


def _control_ops(controls: Sequence[ControlPlan]) -> list[Op]:
    """After every writable bind: pins first, then the read-only control paths (ADR 0005)."""
    ops: list[Op] = []
    for plan in controls:
        ops += [Op(("--bind", path, path), "pinned: it holds a control path, so it cannot be "
                   "renamed away (check 52)") for path in plan.pinned]
        why = dict(plan.reasons)
        ops += [Op(("--ro-bind", path, path), f"control path, read-only: {why.get(path, '')} "
                   "(check 52)") for path in plan.read_only]
    return ops


def build_ops(
    profile: Profile,
    config: Config,
    facts: HostFacts,
    layout: Writable,
    extras: Extras,
) -> tuple[Op, ...]:
    ops: list[Op] = [
        Op(("--unshare-pid",), "own pid namespace (check 07)"),
        Op(("--unshare-ipc",), "own System V IPC (check 08)"),
        Op(("--unshare-uts",), "own hostname namespace (check 09)"),
        Op(("--unshare-cgroup-try",), "own cgroup view where the kernel allows it"),
        Op(
            ("--unshare-user", "--uid", str(facts.uid), "--gid", str(facts.gid)),
            "own user namespace as your own uid, root included: outer processes (bwrap's "
            "monitor, the launcher) sit in another one, so their /proc/PID/root, environ "
            "and fds stay closed even to uid 0 (checks 33, 34)",
        ),
    ]
    ops += [
        Op(("--die-with-parent",), "the sandbox ends when its launcher does"),
        Op(("--cap-drop", "ALL"), "no capabilities, even as root (check 06)"),
        Op(("--ro-bind", "/", "/"), "default deny by inversion: everything read-only"),
        *_proc_ops(facts),
        Op(("--dev", "/dev"), "a private /dev with only the basic devices (check 10)"),
        Op(("--size", str(config.tmpfs_size), "--tmpfs", "/dev/shm"),
           "a private /dev/shm of bounded size (check 58)"),
        Op(("--size", str(config.tmpfs_size), "--tmpfs", "/tmp"),
           "a private /tmp of bounded size: IDE sockets stay outside (checks 11, 58)"),
    ]
    ops += _runtime_ops(config, facts)
    ops += _socket_ops(config, facts, layout)
    ops += _home_ops(profile, config, facts)
    ops += _binary_ops(profile, facts)
    writable = [layout.workspace, *layout.allow_write]
    if facts.agent_tmp:
        ops.append(
            Op(
                ("--bind", facts.agent_tmp, facts.agent_tmp),
                f"{profile.name}'s scratch directory, 0700, container-local",
            )
        )
        writable.append(facts.agent_tmp)
    # Shallow first: an allow-write path that holds the workspace must not cover its
    # bind, or the workspace could be renamed away with its control files.
    for path in sorted([layout.workspace, *layout.allow_write], key=lambda p: p.count("/")):
        why = ("the workspace, writable (check 17)" if path == layout.workspace
               else "allow-write, after the masks it reaches through")
        ops.append(Op(("--bind", path, path), why))
    ops += _control_ops(layout.controls)
    ops += [Op(("--ro-bind", path, path), "allow-read: visible, never writable")
            for path in config.allow_read]
    writable.append(facts.home)
    ops += _guard_ops(facts, writable)
    if paths.UNWRAPPED_SETTINGS in facts.existing:
        ops.append(
            Op(
                ("--ro-bind", paths.EMPTY_SETTINGS, paths.UNWRAPPED_SETTINGS),
                "the unwrapped-only Claude Code policy is empty inside: your own hooks and "
                "MCP servers run here, sandboxed (check 54)",
            )
        )
    ops.append(
        Op(
            ("--ro-bind", "/dev/null", paths.INSIDE_MARKER),
            "the nesting fact: a mount only the sandbox has (architecture.md, step 2)",
        )
    )
    ops.append(
        Op(
            ("--ro-bind-data", str(extras.gitconfig_fd), paths.GITCONFIG_INSIDE),
            "the curated gitconfig, read-only (check 16)",
        )
    )
    if extras.codex_config_fd is not None and paths.CODEX_MANAGED_CONFIG in facts.existing:
        ops.append(
            Op(
                ("--ro-bind-data", str(extras.codex_config_fd), paths.CODEX_MANAGED_CONFIG),
                "codex runs its commands in this sandbox, not in one of its own, which "
                "cannot start here as root (codexconfig.py)",
            )
        )
    if extras.resolv_conf:
        ops.append(
            Op(
                ("--ro-bind", extras.resolv_conf, "/etc/resolv.conf"),
                "DNS through the jail's forwarder",
            )
        )
    ops.append(Op(("--chdir", facts.cwd), "start where you launched"))
    if extras.seccomp_fd is not None:
        ops.append(Op(("--seccomp", str(extras.seccomp_fd)), "the seccomp filter (check 23)"))
    return tuple(ops)


def inner_path(facts: HostFacts) -> str:
    """PATH inside: the caller's, with ~/.local/bin last, after system directories."""
    local_bin = os.path.join(facts.home, ".local/bin")
    entries = [entry for entry in facts.path if entry != local_bin] or list(paths.SYSTEM_DIRS)
    return ":".join([*entries, local_bin])


def build_env(
    profile: Profile,
    config: Config,
    facts: HostFacts,
    environ: Mapping[str, str],
    extras: Extras,
) -> tuple[tuple[str, str], ...]:
    """The sandbox's whole environment: an allow-list, never the caller's copy."""
    env: dict[str, str] = {
        "HOME": facts.home,
        "USER": facts.user,
        "LOGNAME": facts.user,
        "PATH": inner_path(facts),
        "SHELL": AGENT_SHELL,
    }
    for name in PASSED_THROUGH:
        if name in environ:
            env[name] = environ[name]
    for name, value in environ.items():
        if name.startswith("LC_"):
            env[name] = value
    env.update(
        {
            "IS_SANDBOX": "1",
            "IS_SANDBOX_AGENT": profile.name,
            "GIT_CONFIG_GLOBAL": paths.GITCONFIG_INSIDE,
            "GIT_CONFIG_SYSTEM": "/dev/null",
        }
    )
    env.update(profile.env)
    if profile.tmp_variable and facts.agent_tmp:
        env[profile.tmp_variable] = facts.agent_tmp
    for name in config.pass_env:
        if name in environ:
            env[name] = environ[name]
    return tuple(sorted(env.items()))


def build(
    profile: Profile,
    config: Config,
    facts: HostFacts,
    layout: Writable,
    extras: Extras,
    command: Sequence[str],
    environ: Mapping[str, str],
) -> Plan:
    return Plan(
        ops=build_ops(profile, config, facts, layout, extras),
        env=build_env(profile, config, facts, environ, extras),
        command=tuple(command),
        layout=layout,
        hide_outer_proc=not facts.proc_mountable,
    )
