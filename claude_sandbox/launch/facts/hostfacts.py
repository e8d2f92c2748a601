"""Probe the host once, into a frozen record the pure builder reads.

Most file-system and identity probing for a launch lives here (the rest is in
gather.py), so the plan (plan.py) can be tested over a matrix without a sandbox.
"""

from __future__ import annotations

import os
import pwd
import stat

from claude_sandbox.core import mountinfo as mountinfo_module
from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_REFUSED, EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.configure import profiles

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any


@record
class GuardEntry:
    """One entry-point name in a PATH directory ahead of /usr/local/bin."""

    directory: str
    name: str
    state: str  # "absent", "placeholder" (empty file or /dev/null) or "other"


@record
class HostFacts:
    uid: int
    gid: int
    user: str
    home: str
    cwd: str  # resolved, without symlinks
    path: tuple[str, ...]  # the caller's PATH entries, in order
    existing: frozenset[str]  # the optional paths the builder asked about that exist
    real_binary: str  # the agent's real binary, fully resolved
    real_root: str  # what must be visible for it to run: the file, or its npm package
    guard: tuple[GuardEntry, ...]
    agent_tmp: str | None  # the profile's scratch directory (made at launch), or None
    store_home: str  # the agent's one-way state store, bound at $HOME inside
    # A fresh procfs can be mounted: nothing is mounted over parts of /proc. Container
    # runtimes mask /proc/kcore and friends, and the kernel then refuses a new procfs.
    proc_mountable: bool = False
    # Every pathname socket a process has bound in this network namespace, and every
    # socket mounted somewhere (a host's docker.sock at an odd path), resolved.
    sockets: tuple[str, ...] = ()
    # Runtime directories that are real directories here (not symlinks), and the file
    # /etc/resolv.conf leads to: the runtime trees are masked, that file comes back.
    runtime_dirs: tuple[str, ...] = ()
    resolv_target: str = "/etc/resolv.conf"
    # The entries of /: (name, link target or None). Only the system trees among them
    # are shown inside (reads.py, check 72).
    root_entries: tuple[tuple[str, str | None], ...] = ()
    # The toolchain homes of the outer home that are real directories (mounts.TOOLCHAINS),
    # and the files in them that hold a credential (mounts.TOOLCHAIN_SECRETS), found.
    toolchains: tuple[str, ...] = ()
    toolchain_secrets: tuple[str, ...] = ()
    state_dir_real: str = ""  # the configured state-dir, resolved (empty: none configured)
    # PATH's absolute entries resolved, in order, and which of them are directories: read
    # here so that the planner reads nothing (path_facts).
    path_real: tuple[str, ...] = ()
    path_dirs: frozenset[str] = frozenset()


def path_facts(entries: tuple[str, ...]) -> dict[str, Any]:
    """PATH as the planner needs it: the entries, each absolute one resolved, and which
    of those are directories."""
    real = tuple(os.path.realpath(e) for e in entries if e.startswith("/"))
    return {"path": entries, "path_real": real,
            "path_dirs": frozenset(p for p in real if os.path.isdir(p))}


def root_entries() -> tuple[tuple[str, str | None], ...]:
    found = []
    with os.scandir("/") as entries:
        for entry in entries:
            link = os.readlink(entry.path) if entry.is_symlink() else None
            found.append((entry.name, link))
    return tuple(sorted(found))


def _entry_state(path: str) -> str:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    if stat.S_ISREG(info.st_mode) and info.st_size == 0 and not info.st_mode & 0o111:
        return "placeholder"  # the mount point a previous launch's guard bind left
    if stat.S_ISCHR(info.st_mode) and info.st_rdev == os.stat("/dev/null").st_rdev:
        return "placeholder"
    return "other"


def guard_entries(
    path_entries: Iterable[str], seen_as: Callable[[str], str | None] = lambda d: d
) -> tuple[GuardEntry, ...]:
    """Entry-point names in each existing PATH directory ahead of /usr/local/bin.

    `seen_as` maps a directory to the one the sandbox will show at that path
    (under $HOME: the agent's state store), which is the one inspected.
    """
    entries: list[GuardEntry] = []
    seen: set[str] = set()
    for directory in path_entries:
        if directory == paths.SHIM_DIR:
            break
        inside = seen_as(directory)
        if (not directory.startswith("/") or directory in seen or inside is None
                or not os.path.isdir(inside)):
            continue
        seen.add(directory)
        for name in profiles.ENTRY_POINTS:
            state = _entry_state(os.path.join(inside, name))
            entries.append(GuardEntry(directory, name, state))
    return tuple(entries)


def real_binary(agent: str) -> str:
    link = os.path.join(paths.REAL_BIN_DIR, agent)
    resolved = os.path.realpath(link)
    if not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise SandboxError(
            f"the real {agent} is not installed ({link} does not lead to a program); "
            f"as root, run `./install.sh --agents {agent}` from the claude-sandbox checkout",
            EXIT_UNAVAILABLE,
        )
    return resolved


def proc_mountable(mountinfo: str) -> bool:
    """Pure: whether /proc has no submounts (binfmt_misc aside), so bwrap --proc works."""
    return not any(m.mountpoint.startswith("/proc/") and "binfmt_misc" not in m.mountpoint
                   for m in mountinfo_module.parse(mountinfo))


def bound_sockets(proc_net_unix: str) -> list[str]:
    """Pure: the pathname of every socket in /proc/net/unix (abstract ones start with @)."""
    found = []
    for line in proc_net_unix.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/"):
            found.append(fields[7])
    return found


def socket_paths(mountinfo: str) -> tuple[str, ...]:
    """Sockets bound here and sockets mounted anywhere, as this process sees them."""
    candidates: list[str] = []
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as handle:
            candidates += bound_sockets(handle.read())
    except OSError:
        pass
    candidates += [m.mountpoint for m in mountinfo_module.parse(mountinfo)]
    found: list[str] = []
    for path in candidates:
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        try:
            if stat.S_ISSOCK(os.lstat(real).st_mode) and real not in found:
                found.append(real)
        except OSError:
            continue
    return tuple(found)


# Runtime trees, where daemons put their sockets and secrets (/run/user, /run/secrets,
# docker.sock): each a fresh, empty tmpfs inside, so a socket there is not reachable,
# whether it existed at launch or is made later (ADR 0006; checks 12, 13, 36, 57).
RUNTIME_DIRS = ("/run", "/var/run", "/var/tmp")


def install_root(binary: str, home: str) -> str:
    """The npm package holding `binary` when it lives under $HOME, else the file.

    The $HOME mask hides an install that lives there (measured with the agent CLIs), and a
    node launcher needs its whole package beside it, so the package comes back.
    """
    directory = os.path.dirname(binary)
    while directory.startswith(home + "/"):
        if os.path.isfile(os.path.join(directory, "package.json")):
            return directory
        directory = os.path.dirname(directory)
    return binary


def agent_tmp_dir(base: str, uid: int, fallback: str) -> str:
    """The agent's scratch directory: `base` when it is ours, else `base-UID`, else
    (when that name is taken by anything but our own directory: another local user can
    make it first in the shared /var/tmp, and refuse every launch of ours) `fallback`,
    a directory in the user's own state store.

    Only named here: the launch makes it (state.private_dir) once the plan is
    made, so that `explain` sees the same facts and creates nothing.
    """
    for candidate in (base, f"{base}-{uid}"):
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            return candidate  # made by the launch, 0700
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            return candidate
    return fallback


def login_homes(launching_home: str) -> tuple[str, ...]:
    """Homes whose dot-files run code at someone's login: root's and login users' (uid >= 1000).

    System accounts' "homes" (/usr/sbin, /var/www, /nonexistent) are left out:
    nobody logs in there, and refusing them would refuse ordinary directories.
    """
    homes = [launching_home]
    for entry in pwd.getpwall():
        if entry.pw_uid == 0 or 1000 <= entry.pw_uid < 65534:
            home = os.path.realpath(entry.pw_dir) if entry.pw_dir.startswith("/") else ""
            if home and home != "/" and home not in homes:
                homes.append(home)
    return tuple(homes)


def login_home() -> str:
    """This user's home from the password database, resolved: never $HOME, which the
    launching environment could point anywhere (a forged HOME must not move the mask)."""
    return os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)


def inside_view(home: str, store_home: str,
                hidden: Iterable[str] = ()) -> Callable[[str], str | None]:
    """Where the launcher can look at what the sandbox will show at a directory: under
    $HOME the agent's state store, nothing under a tree the sandbox replaces with an
    empty one (`hidden`), elsewhere the directory itself."""
    replaced = tuple(hidden)

    def seen_as(directory: str) -> str | None:
        if directory == home or directory.startswith(home + "/"):  # as written: home "/"
            return store_home + directory[len(home):]                # maps "/" alone
        if paths.under_any(directory, replaced):
            return None
        return directory

    return seen_as


def probe(
    environ: Mapping[str, str],
    *,
    agent: str,
    wanted: Iterable[str],
    tmp_base: str | None,
    store_home: str,
    toolchains: Iterable[str] = (),
    secrets: Iterable[str] = (),
    state_dir: str | None = None,
) -> HostFacts:
    """`wanted` names the optional paths whose existence the builder needs;
    `store_home` is the agent's state store; `toolchains` the toolchain homes to look
    for, `secrets` the files under the home that would hold a credential (patterns,
    probe_secrets)."""
    uid, gid = os.getuid(), os.getgid()
    entry = pwd.getpwuid(uid)
    home = login_home()
    try:
        cwd = os.path.realpath(os.getcwd())
    except FileNotFoundError:
        raise SandboxError("the current directory no longer exists", EXIT_REFUSED) from None
    path_entries = tuple(p for p in environ.get("PATH", "").split(":") if p)
    binary = real_binary(agent)
    try:
        mounts = mountinfo_module.read()
    except OSError:
        mounts = "0 0 0:0 / /proc/unknown ro - none none ro"  # unknown: keep the outer /proc

    return HostFacts(
        uid=uid,
        gid=gid,
        user=entry.pw_name,
        home=home,
        cwd=cwd,
        **path_facts(path_entries),
        existing=frozenset(p for p in wanted if os.path.lexists(p)),
        real_binary=binary,
        real_root=install_root(binary, home),
        guard=guard_entries(path_entries, inside_view(home, store_home)),
        agent_tmp=agent_tmp_dir(tmp_base, uid, os.path.join(os.path.dirname(store_home), "tmp"))
        if tmp_base else None,
        store_home=store_home,
        proc_mountable=proc_mountable(mounts),
        sockets=socket_paths(mounts),
        runtime_dirs=tuple(d for d in RUNTIME_DIRS
                           if os.path.isdir(d) and not os.path.islink(d)),
        resolv_target=os.path.realpath("/etc/resolv.conf"),
        root_entries=root_entries(),
        toolchains=tuple(p for p in toolchains if os.path.isdir(p) and not os.path.islink(p)),
        toolchain_secrets=probe_secrets(home, secrets),
        state_dir_real=os.path.realpath(state_dir) if state_dir else "",
    )


def probe_secrets(home: str, patterns: Iterable[str]) -> tuple[str, ...]:
    """The files under `home` that `patterns` name, in order, none twice. A pattern is
    relative; its only wildcard is `*` as a whole component: any name there, not one
    starting with a dot (as glob reads it). `home` is taken as it is, so a home named
    with `[` or `*` finds its own files. Not glob: its import, with fnmatch's and re's,
    cost every launch about 3 ms."""
    found: dict[str, None] = {}
    for pattern in patterns:
        paths = [home]
        for part in pattern.split("/"):
            if part == "*":
                paths = [os.path.join(p, name) for p in paths for name in _names(p)
                         if not name.startswith(".")]
            else:
                paths = [os.path.join(p, part) for p in paths]
        found.update(dict.fromkeys(sorted(p for p in paths if os.path.isfile(p))))
    return tuple(found)


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:  # absent, not a directory, unreadable: nothing there
        return []
