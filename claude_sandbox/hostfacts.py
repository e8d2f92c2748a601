"""Probe the host once, into a frozen record the pure builder reads.

All file-system and identity probing for a launch lives here (STYLE: pure core,
facts injected), so bwrap.py can be tested over a matrix without a sandbox.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable, Iterable, Mapping

from . import mountinfo as mountinfo_module
from . import paths
from .errors import EXIT_REFUSED, EXIT_UNAVAILABLE, SandboxError
from .record import record


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
    agent_tmp: str | None  # the profile's scratch directory, prepared, or None
    # A fresh procfs can be mounted: nothing is mounted over parts of /proc. Container
    # runtimes mask /proc/kcore and friends, and the kernel then refuses a new procfs.
    proc_mountable: bool = False


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


def guard_entries(path_entries: Iterable[str]) -> tuple[GuardEntry, ...]:
    """Entry-point names in each existing PATH directory ahead of /usr/local/bin."""
    entries: list[GuardEntry] = []
    seen: set[str] = set()
    for directory in path_entries:
        if directory == paths.SHIM_DIR:
            break
        if not directory.startswith("/") or directory in seen or not os.path.isdir(directory):
            continue
        seen.add(directory)
        for name in paths.ENTRY_POINTS:
            state = _entry_state(os.path.join(directory, name))
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
    for mount in mountinfo_module.parse(mountinfo):
        if mount.mountpoint.startswith("/proc/") and "binfmt_misc" not in mount.mountpoint:
            return False
    return True


def _read_mountinfo() -> str:
    try:
        return mountinfo_module.read()
    except OSError:
        return "0 0 0:0 / /proc/unknown ro - none none ro"  # unknown: keep the outer /proc


def install_root(binary: str, home: str) -> str:
    """The npm package holding `binary` when it lives under $HOME, else the file.

    The $HOME mask hides an install that lives there (FACTS: agent CLIs), and a
    node launcher needs its whole package beside it, so the package comes back.
    """
    if not binary.startswith(home + "/"):
        return binary
    directory = os.path.dirname(binary)
    while directory.startswith(home + "/"):
        if os.path.isfile(os.path.join(directory, "package.json")):
            return directory
        directory = os.path.dirname(directory)
    return binary


def ensure_private_dir(path: str, uid: int) -> None:
    """Create `path` 0700 for `uid`, or refuse when what is there is not that."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise SandboxError(
            f"{path} exists but is not a directory owned by uid {uid}; remove it", EXIT_REFUSED
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def agent_tmp_dir(base: str, uid: int) -> str:
    """The agent's scratch directory: `base` when it is ours, else `base-UID`."""
    try:
        owner = os.lstat(base).st_uid
    except FileNotFoundError:
        owner = uid
    path = base if owner == uid else f"{base}-{uid}"
    ensure_private_dir(path, uid)
    return path


def prepare_state(home: str, dirs: Iterable[str], files: Iterable[tuple[str, str]]) -> None:
    """Create the agent's state so the read-write binds have sources that persist."""
    for relative in dirs:
        target = os.path.join(home, relative)
        if not os.path.lexists(target):
            os.makedirs(target, mode=0o700, exist_ok=True)
    for relative, initial in files:
        target = os.path.join(home, relative)
        if not os.path.lexists(target):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(initial)


def probe(
    environ: Mapping[str, str],
    *,
    agent: str,
    wanted: Callable[[str], Iterable[str]],
    tmp_base: str | None,
) -> HostFacts:
    """`wanted(home)` names the optional paths whose existence the builder needs."""
    uid, gid = os.getuid(), os.getgid()
    entry = pwd.getpwuid(uid)
    # The password database, not $HOME: a forged HOME must not move the mask.
    home = os.path.realpath(entry.pw_dir)
    try:
        cwd = os.path.realpath(os.getcwd())
    except FileNotFoundError:
        raise SandboxError("the current directory no longer exists", EXIT_REFUSED) from None
    path_entries = tuple(p for p in environ.get("PATH", "").split(":") if p)
    binary = real_binary(agent)
    return HostFacts(
        uid=uid,
        gid=gid,
        user=entry.pw_name,
        home=home,
        cwd=cwd,
        path=path_entries,
        existing=frozenset(p for p in wanted(home) if os.path.lexists(p)),
        real_binary=binary,
        real_root=install_root(binary, home),
        guard=guard_entries(path_entries),
        agent_tmp=agent_tmp_dir(tmp_base, uid) if tmp_base else None,
        proc_mountable=proc_mountable(_read_mountinfo()),
    )
