"""Every mount and every variable of the sandbox, as pure functions (docs/reference/mounts.md).

No other module adds a mount or a variable. bubblewrap applies its mounts in
order, so the order below is part of the security model: a mask follows the
bind it covers, an allow-write bind follows the masks it reaches through, and
the identity binds come last so nothing can cover them. Each mount carries the
reason `claude-sandbox explain` prints beside it; render.py turns them into
bwrap's options.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.configure.config import Config
from claude_sandbox.launch.configure.profiles import Profile
from claude_sandbox.launch.facts.hostfacts import HostFacts
from claude_sandbox.launch.overlay.controlfiles import ControlPlan
from claude_sandbox.launch.overlay.gitrepo import Repository
from claude_sandbox.launch.planner import reads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# Container-engine and system-bus sockets, for the checks' and probes' reference:
# none of them is reached inside, by the mechanisms below, not by this list.
RUNTIME_SOCKETS = (
    "/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
    "/run/containerd/containerd.sock", "/run/dbus/system_bus_socket",
)  # fmt: skip
# Dotfiles that hold credentials or reach the outer display (checks 14, 15).
NULLED_DOTFILES = (".netrc", ".Xauthority", ".ICEauthority")
# Of the outer home only the forge CLIs' stores come back, read-only: gh aliases
# can run shell commands, so the agent must not be able to rewrite them.
FORGE_CONFIG = (".config/gh", ".config/glab-cli")
LOCAL_BIN_TOOLS = (".local/bin/uv", ".local/bin/uvx")
# Toolchain homes of the outer home shown read-only at the same place in the agent's
# home: compilers, interpreters and their installed versions, no credential among them
# (cargo keeps its login in ~/.cargo/credentials.toml: only its bin comes back). A
# PATH entry into them then works inside as outside; nothing written inside reaches them.
TOOLCHAINS = (".cargo/bin", ".rustup", ".pyenv", ".nvm", ".bun/bin", ".deno/bin")
# Files in those homes that may hold a credential (an npm token in a node version's
# global npmrc, an index password in a Python's pip.conf): covered with an empty file.
TOOLCHAIN_SECRETS = (".nvm/versions/node/*/etc/npmrc", ".pyenv/versions/*/pip.conf",
                     ".pyenv/versions/*/etc/pip.conf", ".pyenv/versions/*/.pypirc")
# The descriptors a launch binds as data, by name: the run step gives them numbers.
GITCONFIG, CODEX_CONFIG, RESOLV_CONF = "gitconfig", "codex-config", "resolv-conf"
# The closed set of mount kinds: bwrap's own, and "data" (a descriptor bound read-only).
MOUNT_KINDS = ("bind", "ro-bind", "ro-bind-try", "tmpfs", "proc", "dev", "symlink",
               "remount-ro", "data", "pin")  # pin: planner/pins.py


@record
class Mount:
    """One mount inside the sandbox, and why.

    `kind`: bwrap's bind, ro-bind, ro-bind-try, tmpfs, proc, dev, symlink (`source` is
    the link's text) or remount-ro, or "data", or "pin"; "bind" and "tmpfs" are writable.
    For "data", `source` names a descriptor of the plan (plan.py), whose content is bound
    read-only; for "pin", the store's directory's descriptor (pins.py). `runs`: a program
    (or a tree of them) bound read-only that must stay executable where its surroundings
    are writable (harsh).
    """

    kind: str
    dest: str
    reason: str
    source: str = ""
    size: int | None = None
    runs: bool = False


@record
class Option:
    """A bubblewrap option that is not a mount (namespaces, identity, capabilities)."""

    args: tuple[str, ...]
    reason: str


@record
class Writable:
    """Where the sandbox may write, resolved and checked (workspace.check_writable)."""

    workspace: str
    allow_write: tuple[str, ...] = ()
    # One plan per writable root: its control files, held (check 52).
    controls: tuple[ControlPlan, ...] = ()
    # The git directories the sandbox shows as overlays (gitrepo.find, check 70).
    repositories: tuple[Repository, ...] = ()
    # allow-read, resolved and checked (workspace.check_readable), and the launching
    # PATH's directories that may be shown read-only (not a home's, not the store's).
    allow_read: tuple[str, ...] = ()
    path_readable: tuple[str, ...] = ()


def optional_paths(home: str) -> tuple[str, ...]:
    """Every path whose existence changes the plan; hostfacts.probe checks them."""
    return (paths.UNWRAPPED_SETTINGS, paths.CODEX_MANAGED_CONFIG, paths.ENTER_STAGE,
            *(os.path.join(home, rel) for rel in (*FORGE_CONFIG, *LOCAL_BIN_TOOLS)))


# Kernel knobs in a fresh procfs: root owns them and many writes check only the file
# mode, so uid 0 without capabilities could still set kernel.core_pattern to a program
# the kernel then runs as host root. Read-only for root; other uids cannot write them,
# and leaving their procfs whole lets a nested sandbox mount its own (codex).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def _proc_mounts(facts: HostFacts, brokered: bool) -> list[Mount]:
    """A fresh procfs where the kernel allows one; else the outer /proc, read-only.

    A fresh procfs shows only the sandbox's processes and lets a non-root agent
    build its own nested sandbox (codex writes /proc/self/uid_map). Container
    runtimes mask parts of /proc, and the kernel then refuses a new procfs: the
    outer one stays, read-only, with other processes' environ and fds closed by
    the user namespace and --cap-drop ALL (checks 33, 34). Under brokered (never
    root) it stays writable: the agent's view and each command's namespaces write
    their own uid_map; the runtime's masks come along read-only, and what the uid
    does not own stays closed to it.
    """
    if not facts.proc_mountable and brokered:
        return [Mount("bind", "/proc", "the outer /proc (this host masks parts of /proc: no "
                      "fresh procfs); writable for brokered's own uid maps (check 33)",
                      source="/proc")]
    if not facts.proc_mountable:
        return [Mount("ro-bind", "/proc", "the outer /proc, read-only (this host masks parts "
                      "of /proc: no fresh procfs; check 33)", source="/proc")]
    found = [Mount("proc", "/proc", "a fresh procfs: only the sandbox's own processes "
                   "(check 33)")]
    if facts.uid == 0:
        reason = "kernel knobs read-only for root (check 46)"
        found += [Mount("ro-bind-try", path, reason, source=path) for path in PROC_READ_ONLY]
    return found


def _system_mounts(facts: HostFacts) -> list[Mount]:
    """Reads by inversion: only the system trees of / (reads.py, check 72)."""
    return [Mount("symlink", path, "a system tree's link, as on the host (check 72)", source=link)
            if link is not None else
            _same("ro-bind", path, "a system tree, read-only; nothing else of / is shown "
                  "(check 72)")
            for path, link in reads.system_entries(facts.root_entries)]


def _same(kind: str, path: str, reason: str, *, runs: bool = False) -> Mount:
    return Mount(kind, path, reason, source=path, runs=runs)


under = paths.under_any  # the one containment test (core/paths.py)


def _existing(home: str, exists: frozenset[str], relatives: Sequence[str]) -> list[str]:
    return [p for p in (os.path.join(home, rel) for rel in relatives) if p in exists]


def _home_mounts(profile: Profile, config: Config, facts: HostFacts) -> list[Mount]:
    home, exists = facts.home, facts.existing
    found = [Mount("bind", home, f"$HOME is {profile.name}'s one-way state store: the outer "
                   "home, its agent directories, caches and start-up files are not here "
                   "(checks 03, 51)", source=facts.store_home)]
    if not config.no_forge:
        reason = "forge CLI config, read-only: ~/.config is a strict allow-list (check 39)"
        found += [_same("ro-bind", p, reason, runs=True)
                  for p in _existing(home, exists, FORGE_CONFIG)]
    for rel in NULLED_DOTFILES:
        found.append(Mount("ro-bind", os.path.join(home, rel),
                           f"{rel} reads as empty (checks 14, 15)", source=paths.EMPTY_FILE))
    reason = "only uv and uvx come back from ~/.local/bin, read-only (check 32)"
    found += [_same("ro-bind", p, reason, runs=True)
              for p in _existing(home, exists, LOCAL_BIN_TOOLS)]
    found += [_same("ro-bind", p, "a toolchain of your home, read-only: no credential in it "
                    "(check 92)", runs=True) for p in facts.toolchains]
    found += [Mount("ro-bind", p, "a toolchain's file that may hold a credential reads as "
                    "empty (check 92)", source=paths.EMPTY_FILE)
              for p in facts.toolchain_secrets]
    return found


def _binary_mounts(profile: Profile, facts: HostFacts) -> list[Mount]:
    found: list[Mount] = []
    if facts.real_root != facts.real_binary:
        found.append(_same("ro-bind", facts.real_root,
                           f"{profile.name}'s package lives under $HOME: back, read-only "
                           "(check 32)",
                           runs=True))
    found.append(_same("ro-bind", facts.real_binary,
                       f"the real {profile.name} binary, read-only: it cannot rewrite itself "
                       "(check 32)",
                       runs=True))
    if profile.local_bin_alias:
        alias = os.path.join(facts.home, ".local/bin", profile.name)
        found.append(Mount("ro-bind", alias, f"the real {profile.name} at ~/.local/bin for "
                           "its native-install checks (check 32)", source=facts.real_binary,
                           runs=True))
    return found


def _guard_mounts(facts: HostFacts, writable: Sequence[str]) -> list[Mount]:
    """Check 22: entry points in writable PATH directories ahead of the shims."""
    found: list[Mount] = []
    for entry in facts.guard:
        # A toolchain of the home is read-only inside: nothing can be planted there.
        if not under(entry.directory, writable) or under(entry.directory, facts.toolchains):
            continue
        path = os.path.join(entry.directory, entry.name)
        if entry.state == "other":
            raise SandboxError(
                f"{path} would shadow the sandbox's {entry.name} (it is ahead of "
                f"{paths.SHIM_DIR} on PATH and writable inside); remove it",
                EXIT_REFUSED,
            )
        found.append(Mount("ro-bind", path, "entry-point guard: nothing planted here can "
                           "shadow the shim (check 22)", source="/dev/null"))
    return found


def _runtime_mounts(config: Config, facts: HostFacts) -> list[Mount]:
    """Fresh tmpfs over the runtime trees; what must come back, read-only."""
    found = [Mount("tmpfs", tree, f"a private {tree}: no daemon's socket or secret, then or "
                   "later (checks 12, 13, 57)", size=config.tmpfs_size)
             for tree in facts.runtime_dirs]
    for path in restored(facts):
        why = ("/etc/resolv.conf leads here" if path == facts.resolv_target
               else "a PATH directory under a runtime tree")
        found.append(_same("ro-bind-try", path, f"{why}: back, read-only"))
    # -try: a socket whose service is not running now has nothing to connect to, and a
    # launch need not fail for it (the launch says so in one line).
    found += [_same("ro-bind-try", path, "allow-socket: the operator lets the sandbox connect "
                    "here (check 57)") for path in config.allow_socket]
    return found


def _store_mounts(config: Config, facts: HostFacts) -> list[Mount]:
    """A `state-dir` in a tree the sandbox shows is covered: every user's and every
    agent's store is there, and an agent's login is another agent's to read (check 89).
    This agent's own home comes back at $HOME (_home_mounts)."""
    if config.state_dir is None:
        return []
    # Where it really is: a link into a shown tree would otherwise show every store.
    real = facts.state_dir_real or config.state_dir
    if not under(real, reads.shown_roots(facts.root_entries)):
        return []
    return [Mount("tmpfs", real, "state-dir: the stores of other agents and users are not "
                  "here; this agent's own is $HOME (check 89)", size=1 << 20)]


def restored(facts: HostFacts) -> list[str]:
    """What comes back from under the masked runtime trees: resolv.conf's target and
    PATH directories, resolved, never a tree itself (a PATH of `/run/.` would bring
    back all of /run)."""
    masked = list(facts.runtime_dirs)
    found: list[str] = []
    candidates = [facts.resolv_target] if facts.resolv_target != "/etc/resolv.conf" else []
    candidates += facts.path_real
    for path in candidates:
        if path not in masked and path not in found and under(path, masked):
            found.append(path)
    return found


def _socket_mounts(config: Config, facts: HostFacts, layout: Writable,
                   on_path: Sequence[str]) -> list[Mount]:
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
    # A socket in a tree the sandbox does not show needs no cover, and a cover would
    # make its parent directories, and so their names, appear inside.
    shown = [*reads.shown_roots(facts.root_entries), *own, *back, *layout.allow_read,
             *on_path]
    return [Mount("ro-bind", sock, "a socket of the host: not connectable inside (check 57)",
                  source=paths.EMPTY_FILE)
            for sock in facts.sockets
            if under(sock, shown) and (not under(sock, own) or (
                under(sock, back) and not under(sock, config.allow_socket)))]


def _control_mounts(layout: Writable, review: bool) -> list[Mount]:
    """After every writable bind: git directories outside the workspace, pins, then the
    read-only control paths (ADR 0005, ADR 0010); in review mode, none in the workspace."""
    roots = [layout.workspace, *layout.allow_write]
    found = [_same("bind", repo.gitdir, "the workspace's git directory lies outside it (a "
                   "subdirectory or a linked worktree): its overlay, writable (check 70)")
             for repo in layout.repositories if not under(repo.gitdir, roots)]
    for plan in [p for p in layout.controls if not (review and p.root == layout.workspace)]:
        found += [_same("bind", path, "pinned: it holds a control path, so it cannot be "
                        "renamed away (check 52)") for path in plan.pinned]
        why = dict(plan.reasons)
        found += [_same("ro-bind", path, f"control path, read-only: {why.get(path, '')} "
                        "(check 52)", runs=True) for path in plan.read_only]
    return found


def options(facts: HostFacts) -> tuple[Option, ...]:
    """Namespaces, identity and capabilities: everything bwrap sets that is not a mount."""
    return (
        Option(("--unshare-pid",), "own pid namespace (check 07)"),
        Option(("--unshare-ipc",), "own System V IPC (check 08)"),
        Option(("--unshare-uts",), "own hostname namespace (check 09)"),
        Option(("--unshare-cgroup-try",), "own cgroup view where the kernel allows it "
               "(check 95)"),
        Option(
            ("--unshare-user", "--uid", str(facts.uid), "--gid", str(facts.gid)),
            "own user namespace as your own uid, root included: outer processes (bwrap's "
            "monitor, the launcher) sit in another one, so their /proc/PID/root, environ "
            "and fds stay closed even to uid 0 (checks 33, 34)",
        ),
        Option(("--die-with-parent",), "the sandbox ends when its launcher does (check 49)"),
        Option(("--cap-drop", "ALL"), "no capabilities, even as root (check 06)"),
    )


def build(profile: Profile, config: Config, facts: HostFacts, layout: Writable, *,
          codex_config: bool, jailed: bool) -> tuple[Mount, ...]:
    """Every mount, in bwrap's order. `codex_config`: the launch holds codex's managed
    config for inside; `jailed`: /etc/resolv.conf names the jail's forwarder."""
    size = config.tmpfs_size
    found: list[Mount] = [
        *_system_mounts(facts),
        *_proc_mounts(facts, config.hardening == "brokered"),
        Mount("dev", "/dev", "a private /dev with only the basic devices (check 10)"),
        Mount("tmpfs", "/dev/shm", "a private /dev/shm of bounded size (check 58)", size=size),
        Mount("tmpfs", "/tmp", "a private /tmp of bounded size: IDE sockets stay outside "
              "(checks 11, 58)", size=size),
    ]
    found += _runtime_mounts(config, facts)
    found += _store_mounts(config, facts)
    on_path = reads.path_outside(facts, layout)  # PATH directories elsewhere, shown
    shown_again = [*layout.allow_read, *on_path]  # read-only binds made further down
    masks = _socket_mounts(config, facts, layout, on_path)
    found += [m for m in masks if not under(m.dest, shown_again)]
    found += _home_mounts(profile, config, facts)
    found += _binary_mounts(profile, facts)
    writable = [layout.workspace, *layout.allow_write]
    if facts.agent_tmp:
        found.append(_same("bind", facts.agent_tmp,
                           f"{profile.name}'s scratch directory, 0700, container-local "
                           "(check 44)"))
        writable.append(facts.agent_tmp)
    # Shallow first: an allow-write path that holds the workspace must not cover its
    # bind, or the workspace could be renamed away with its control files.
    for path in sorted([layout.workspace, *layout.allow_write], key=lambda p: p.count("/")):
        why = ("allow-write, after the masks it reaches through (check 17)"
               if path != layout.workspace
               else "the workspace, writable (check 17)" if config.workspace_mode == "live"
               else "the workspace's overlay, writable; review applies it (checks 17, 73)")
        found.append(_same("bind", path, why))
    found += _control_mounts(layout, config.workspace_mode == "review")
    found += [_same("ro-bind", path, "allow-read: visible, never writable (check 72)",
                    runs=True)
              for path in layout.allow_read]
    found += [_same("ro-bind", path, "a directory on the launching PATH outside the system "
                    "trees: its programs, read-only (check 72)", runs=True)
              for path in on_path]
    # A socket under those binds is covered after them: before, the bind would show the
    # host's socket again over its cover.
    found += [m for m in masks if under(m.dest, shown_again)]
    writable.append(facts.home)
    found += _guard_mounts(facts, writable)
    if paths.UNWRAPPED_SETTINGS in facts.existing:
        found.append(Mount("ro-bind", paths.UNWRAPPED_SETTINGS, "the unwrapped-only Claude "
                           "Code policy is empty inside: your own hooks and MCP servers run "
                           "here, sandboxed (check 54)", source=paths.EMPTY_SETTINGS))
    found.append(Mount("ro-bind", paths.INSIDE_MARKER, "the nesting fact: a mount only the "
                       "sandbox has (architecture.md, step 2; check 41)", source="/dev/null"))
    found.append(Mount("data", paths.GITCONFIG_INSIDE, "the curated gitconfig, read-only "
                       "(check 16)", source=GITCONFIG))
    if codex_config and paths.CODEX_MANAGED_CONFIG in facts.existing:
        found.append(Mount("data", paths.CODEX_MANAGED_CONFIG, "codex runs its commands in "
                           "this sandbox, not in one of its own, which cannot start here as "
                           "root (codexconfig.py, check 96)", source=CODEX_CONFIG))
    if jailed:
        found.append(Mount("data", "/etc/resolv.conf",
                           "DNS through the jail's forwarder (check 31)", source=RESOLV_CONF))
    # bubblewrap's /dev is an unbounded tmpfs a root agent could write: read-only once its
    # mount points are made (device nodes still open for writing; /dev/shm, /dev/pts and
    # /dev/mqueue are mounts of their own), so neither a place to keep files nor a way
    # past the tmpfs caps (check 91).
    found.append(Mount("remount-ro", "/dev", "bubblewrap's /dev: no files made there, the "
                       "devices still writable (check 91)"))
    # Last: bubblewrap's own root, where the mount points above were made, becomes
    # read-only (the mounts on it keep their own modes), so it is neither a place to
    # write outside the bounded tmpfs mounts nor a way to fill memory (check 72).
    found.append(Mount("remount-ro", "/", "the sandbox's own root: read-only once every "
                       "mount point is made (check 72)"))
    return tuple(found)
