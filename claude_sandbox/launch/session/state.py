"""The one-way agent state store: each agent's home inside the sandbox.

Everything an agent writes outside the workspace (its settings and login,
caches, XDG data, shell history) lands in a directory that belongs to the
sandbox, per user and agent, and that no program outside reads or runs
(ADR 0005, docs/explanation/state-store.md). Inside, that directory is the
agent's $HOME; the outer ~/.claude, ~/.codex, ~/.cache and the rest are not
there at all, so a hook, an MCP server, an extension or a poisoned package
cache written inside cannot reach the next unsandboxed program.

The flow is one-way: on an agent's first launch (and on `claude-sandbox
state import`) its login and settings are copied in from the outer home;
nothing is ever copied out. Layout:

    STORE/                    ~/.local/state/claude-sandbox, or state-dir/UID; 0700
      AGENT/home/             the agent's $HOME inside the sandbox; 0700

The launcher creates a new home under a temporary name and renames it into
place, so a launch interrupted during the import leaves no half-made home.
"""

from __future__ import annotations

import os
import stat
import sys

from claude_sandbox.core.errors import EXIT_CONFIG, EXIT_REFUSED, EXIT_UNAVAILABLE, SandboxError
from claude_sandbox.launch.configure.profiles import Import

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

DEFAULT_RELATIVE = ".local/state/claude-sandbox"
# An import larger than this is cut short with a warning: it is meant for a
# login and settings, not for copying a whole cache.
IMPORT_LIMIT = 256 << 20


def store_root(state_dir: str | None, home: str, uid: int) -> str:
    """This user's store: under their home by default, else a per-uid directory of
    state-dir, unless something not the user's own stands at that name: a shared
    state-dir is 1777, and another user who makes the name first must not refuse every
    launch of this one (probe A67). Then the home's, which the launch names
    (`squatted_store`)."""
    if state_dir is None:
        return os.path.join(home, DEFAULT_RELATIVE)
    path = os.path.join(state_dir, str(uid))
    return path if squatted_store(path, uid) is None else os.path.join(home, DEFAULT_RELATIVE)


def squatted_store(path: str, uid: int) -> int | None:
    """The owner of what stands at `path` when it is not `uid`'s own directory; None when
    it is, or when nothing is there yet (the launch makes it)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return None if stat.S_ISDIR(info.st_mode) and info.st_uid == uid else info.st_uid


def agent_home(root: str, agent: str) -> str:
    return os.path.join(root, agent, "home")


def private_dir(path: str, uid: int, what: str) -> None:
    """`path` exists as a directory of `uid`, 0700 (made if absent); anything else there
    refuses the launch, naming it `what`."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise SandboxError(
            f"{path} should be {what}, a directory owned by uid {uid}; it is not: remove it",
            EXIT_REFUSED,
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def check_state_dir(state_dir: str, uid: int) -> None:
    """A state-dir others may not change under this user's store: root's or this user's,
    and sticky where others may write it. In a directory others may write without the
    sticky bit, another user could rename this user's checked store away and put one of
    their own at its name before bwrap binds it as the agent's home."""
    try:
        info = os.stat(state_dir)
    except OSError:
        info = None
    if info is None or not stat.S_ISDIR(info.st_mode):
        raise SandboxError(
            f"state-dir {state_dir} does not exist; create it (for several users: mode "
            "1777, each user's store is a 0700 subdirectory named by uid)", EXIT_CONFIG)
    if info.st_uid not in (0, uid) or (info.st_mode & 0o022 and not info.st_mode & 0o1000):
        raise SandboxError(
            f"state-dir {state_dir} lets others change what lies in it (owner uid "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}): it must be root's or "
            f"yours, and sticky where others may write it; as root: chown root "
            f"{state_dir} && chmod 1777 {state_dir}", EXIT_CONFIG)


def ensure_home(
    root: str, agent: str, outer_home: str, imports: Iterable[Import], uid: int,
    *, default_root: bool, said: list[str] | None = None,
) -> str:
    """The agent's store home, made (with the first import) when it is missing; what the
    import did is printed, and added to `said` (a launch says it again at the end: a
    full-screen agent covers it)."""
    if default_root:
        # ~/.local/state may not exist yet; the parts above the store are the user's.
        try:
            os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
        except OSError as error:
            raise _cannot_create(os.path.dirname(root), error) from None
    else:
        check_state_dir(os.path.dirname(root), uid)
    for directory in (root, os.path.join(root, agent)):
        try:
            private_dir(directory, uid, "the sandbox's state store")
        except OSError as error:
            raise _cannot_create(directory, error) from None
    home = agent_home(root, agent)
    if os.path.isdir(home) and not os.path.islink(home):
        return home
    import shutil  # only for a first launch: shutil costs ms at every import

    partial = f"{home}.new-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    os.mkdir(partial, 0o700)
    for line in import_into(outer_home, partial, imports):
        sys.stderr.write(f"claude-sandbox: {line}\n")
        if said is not None:
            said.append(line)
    try:
        os.rename(partial, home)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # a concurrent first launch won
        if not os.path.isdir(home):
            raise
    return home


def _cannot_create(path: str, error: OSError) -> SandboxError:
    where = error.filename or path
    owner = ""
    parent = os.path.dirname(str(where))
    try:
        owner = f" ({parent} belongs to uid {os.stat(parent).st_uid})"
    except OSError:
        pass
    return SandboxError(
        f"cannot create the agent state store at {path}: {error.strerror}{owner}; give the "
        "directory back to its user, or set state-dir in /etc/claude-sandbox.conf",
        EXIT_UNAVAILABLE,
    )


def import_into(outer_home: str, home: str, imports: Iterable[Import]) -> list[str]:
    """Copy each import from `outer_home` into `home`; lines that report what happened.

    Regular files and directories only; a symbolic link is followed to a
    regular file (settings kept in a dotfiles repository) but never to a
    directory, and sockets, devices and fifos are left out.
    """
    report: list[str] = []
    budget = [IMPORT_LIMIT]
    for item in imports:
        source = os.path.join(outer_home, item.path)
        if not os.path.lexists(source):
            continue
        target = os.path.join(home, item.path)
        if not _plain_below(home, target):
            report.append(f"warning: ~/{item.path} not imported: a symbolic link in the "
                          "store stands in its way (claude-sandbox state reset starts over)")
            continue
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        copied = _copy(source, target, "", item.skip, budget)
        if copied:
            report.append(f"state: copied {copied} file(s) of ~/{item.path} into the sandbox")
    if budget[0] < 0:
        report.append(f"warning: the import stopped at {IMPORT_LIMIT >> 20} MiB; "
                      "large files were left out")
    return report


def _plain_below(home: str, path: str) -> bool:
    """No component of `path` below `home` is a symbolic link (the agent may plant one
    in its store; an import must never write through it, out of the store)."""
    current = home
    for part in os.path.relpath(path, home).split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            return False
    return True


def _copy(source: str, target: str, relative: str, skip: tuple[str, ...],
          budget: list[int]) -> int:
    if relative and relative in skip:
        return 0
    try:
        info = os.lstat(source)
        if stat.S_ISLNK(info.st_mode):
            info = os.stat(source)
            if not stat.S_ISREG(info.st_mode):
                return 0
    except OSError:
        return 0
    if os.path.islink(target):
        return 0  # planted in the store: never written through
    if stat.S_ISDIR(info.st_mode):
        os.makedirs(target, mode=0o700, exist_ok=True)
        count = 0
        try:
            names = sorted(os.listdir(source))
        except OSError:
            return 0
        for name in names:
            count += _copy(os.path.join(source, name), os.path.join(target, name),
                           f"{relative}/{name}" if relative else name, skip, budget)
        return count
    if not stat.S_ISREG(info.st_mode):
        return 0
    if info.st_size > budget[0]:
        budget[0] = -1
        return 0
    try:
        with open(source, "rb") as reader:
            data = reader.read()
    except OSError:
        return 0
    budget[0] -= len(data)
    if os.path.lexists(target) and not os.path.isfile(target):
        return 0
    temporary = f"{target}.import-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     stat.S_IMODE(info.st_mode) & 0o700 or 0o600)
    except OSError:
        return 0
    with os.fdopen(fd, "wb") as writer:
        writer.write(data)
    os.replace(temporary, target)
    return 1


def reset(root: str, agent: str) -> bool:
    """Remove an agent's store; whether there was one."""
    import shutil

    directory = os.path.join(root, agent)
    if not os.path.lexists(directory):
        return False
    shutil.rmtree(directory)
    return True
