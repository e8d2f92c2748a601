"""The workspace's overlays around one session: made before it, applied and checked after.

Before the sandbox starts, each git directory the launch overlays is checked
(gitcheck.py: nothing but regular files and directories) and its refs, HEAD,
config and index are noted (gitbase.Snapshot); each overlay gets its upper and
work directories in the agent's per-workspace store. After the session, each
git upper is applied by rule (gitapply.py), the real directory is checked
again, and what was not applied is kept in the store and named. Repositories
the session made or changed that had no overlay (a nested one the agent
created) are checked the same way, and their hooks and configuration changed
in the session are quarantined (gitmade.py; ADR 0010, check 70).

A launcher killed before it applied leaves its session's directory behind. Each
session's directory holds a lock its launcher keeps for its whole life, so the
next launch in that workspace tells an interrupted session from a live one by
the lock, not by a process ID a container reuses. An interrupted session that
wrote nothing is removed; one that wrote is kept aside and named, so nothing the
agent's git wrote is lost or applied unread.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.process import fork_exec
from claude_sandbox.core.record import record
from claude_sandbox.launch.overlay import gitapply, gitbase, gitcheck, gitrepo
from claude_sandbox.launch.overlay.gitbudget import ExitBudget
from claude_sandbox.launch.overlay.gitmade import check_made as check_made
from claude_sandbox.launch.overlay.gitmade import strip_made as strip_made
from claude_sandbox.launch.planner.overlays import View

# check_made and strip_made live in gitmade.py; they are named here too, where the
# session's end and the review's apply import them.

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


@record
class Layer:
    """One overlay as mounted: its view, and where its upper and work directories are."""

    view: View
    upper: str
    work: str
    base: gitbase.Snapshot | None  # a git view's real directory at launch
    lock: int | None  # a git view's session lock, held until it is applied
    since_ns: int = 0  # when the layer was made: the session's start
    identity: tuple[int, int] = (0, 0)  # a git view's real directory at launch: device, inode


def _new_session(view: View) -> tuple[str, int]:
    """A session directory of this launch's, locked for as long as the launcher lives.

    Made under a dot name and renamed once locked: a concurrent launch never takes a
    directory that is still being made for an interrupted one."""
    sessions = os.path.join(upper_base(view.store), "sessions")
    os.makedirs(sessions, mode=0o700, exist_ok=True)
    name = os.urandom(8).hex()
    staging = os.path.join(sessions, f".new-{name}")
    os.mkdir(staging, 0o700)
    fd = os.open(os.path.join(staging, "lock"),
                 os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    directory = os.path.join(sessions, name)
    os.rename(staging, directory)
    return directory, fd


# overlayfs refuses an upper directory on overlayfs, and a container's root file system
# (where the store lies unless state-dir names a volume) often is one. Then the uppers
# go to /dev/shm, a tmpfs every container has, in a directory of this user's, 0700.
_SHM = "/dev/shm"


def upper_base(store: str) -> str:
    if _fstype(store) != "overlay":
        return store
    key = paths.sha256_hex(store.encode("utf-8", "surrogateescape"))[:16]
    base = os.path.join(_SHM, f"claude-sandbox-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SandboxError(f"{base} is not a directory of yours: the sandbox keeps the "
                           "session's git changes there; remove it", EXIT_REFUSED)
    os.chmod(base, 0o700)
    return os.path.join(base, key)


def _fstype(path: str) -> str:
    """The type of the file system `path` (or its nearest existing parent) lies on."""
    from claude_sandbox.core import mountinfo

    while not os.path.exists(path) and path != "/":
        path = os.path.dirname(path)
    real = os.path.realpath(path)
    best = ("", "")
    for mount in mountinfo.parse(mountinfo.read()):
        point = mount.mountpoint
        if paths.under(real, point) and len(point) >= len(best[0]):
            best = (point, mount.fstype)
    return best[1]


def prepare(views: Sequence[View], quarantine: gitcheck.Quarantine) -> tuple[Layer, ...]:
    """Check each git directory, note it, and make every overlay's directories."""
    layers = []
    for view in views:
        try:
            layers.append(_prepare_one(view, quarantine))
        except OSError as error:
            raise SandboxError(f"{view.store}: the session's overlay for {view.target} could "
                               f"not be made ({error.strerror or error}); the agent's store "
                               "must be writable", EXIT_REFUSED) from None
    return tuple(layers)


def _prepare_one(view: View, quarantine: gitcheck.Quarantine) -> Layer:
    base = lock = None
    if view.kind == "workspace":
        from claude_sandbox.launch.overlay import review

        pending = review.open_pending(upper_base(view.store), view.target)
        if pending.count:
            quarantine.lines.append(review.pending_line(pending.count, view.target,
                                                        at_launch=True))
        return Layer(view, pending.upper, pending.work, None, pending.lock, time.time_ns())
    if view.kind == "git":
        _keep_interrupted(view, quarantine)
        gitcheck.check(view.target, quarantine)
        base = gitbase.snapshot(view.target)
        directory, lock = _new_session(view)
    else:
        directory = upper_base(view.store)
    upper, work = os.path.join(directory, "upper"), os.path.join(directory, "work")
    for path in (upper, work):
        os.makedirs(path, mode=0o700, exist_ok=True)
    found = os.stat(view.target, follow_symlinks=False) if view.kind == "git" else None
    return Layer(view, upper, work, base, lock,
                 identity=(found.st_dev, found.st_ino) if found is not None else (0, 0))


def _through_a_link(layer: Layer) -> bool:
    """The git directory's path, real at launch (gitrepo.find), now passes a link."""
    return os.path.realpath(layer.view.target) != layer.view.target


def _replaced(layer: Layer) -> str | None:
    """Why the git directory is no longer the one the launch overlaid, or None. The
    session can rename a directory above it (a mount point's parent can be renamed) and
    leave a link, or a repository of its own with hooks and config, in its place: every
    write would then go there, and the user's git outside would run what it holds."""
    target = layer.view.target
    if _through_a_link(layer):
        return "a symbolic link now stands on the way to it"
    try:
        found = os.stat(target, follow_symlinks=False)
    except OSError:
        return "it is gone from where it was"
    if (found.st_dev, found.st_ino) != layer.identity:
        return "another directory now stands in its place"
    return None


def finish(layers: Iterable[Layer], workspace: str, quarantine: gitcheck.Quarantine,
           controls: frozenset[str] = gitapply.CONTROLS, held: tuple[str, ...] = ()) -> None:
    """Apply each git layer to its real directory, check it, keep what was not applied;
    in review mode, say what waits for review. `controls`: the control names, and `held`
    the paths the launch held, whose new content a ref or the index must not bring out
    (gitcontrol.py). Every layer shares one budget (gitbudget.py)."""
    spend = ExitBudget()
    for layer in layers:
        if layer.view.kind == "workspace":
            from claude_sandbox.launch.overlay import review

            try:
                count = review.note_seen(os.path.dirname(layer.upper), layer.upper,
                                         layer.view.target, layer.since_ns)
            except OSError as error:
                count = review.count_pending(layer.upper, layer.view.target)
                quarantine.lines.append(f"warning: what the workspace's files were could not "
                                        f"be noted ({error.strerror}): review apply asks "
                                        "for --force before it overwrites them")
            if count:
                quarantine.lines.append(review.pending_line(count, layer.view.target,
                                                            at_launch=False))
            if layer.lock is not None:
                os.close(layer.lock)
            continue
        if layer.view.kind != "git":
            continue
        directory = os.path.dirname(layer.upper)
        try:
            replaced = _replaced(layer)
            if replaced is None:
                result = gitapply.apply(layer.upper, layer.view.target, layer.base, workspace,
                                        controls=controls, held=held, spend=spend)
                gitcheck.check(layer.view.target, quarantine)
            else:
                result = gitapply.Result((f"{layer.view.target}: the session's git changes "
                                          f"were not applied: {replaced} (the session moved "
                                          "the git directory while it ran)",), True)
                if gitrepo.real_dir(layer.view.target) and not _through_a_link(layer):
                    # The session's own repository: checked as one it made, every hook
                    # and config in it the session's (since 0). Never through a link: what
                    # is behind one is another repository, which nothing here may write.
                    gitcheck.check(layer.view.target, quarantine)
                    strip_made(layer.view.target, 0, quarantine)
        except Exception as error:  # one layer's failure stops no other, nor the exit
            # Never half-applied in silence: what is left stays in the store, named.
            result = gitapply.Result((f"{layer.view.target}: the session's git changes could "
                                      f"not all be applied ({error})",), True)
        quarantine.lines += result.lines
        try:
            if result.kept:
                kept = _keep(layer.view, directory)
                quarantine.lines.append(f"what the session's git wrote and was not applied "
                                        f"is kept in {kept}")
            else:
                remove_tree(directory)
        except OSError as error:
            quarantine.lines.append(f"what the session's git wrote stays in {directory} "
                                    f"({error.strerror or error})")
        finally:
            if layer.lock is not None:
                os.close(layer.lock)


def _keep(view: View, directory: str) -> str:
    """Keep a session's upper directory aside, beside the sessions: a rename on one file
    system, never a copy (an upper holds overlayfs whiteouts, device files only root
    could make again). The work directory is overlayfs's scratch: removed first."""
    remove_tree(os.path.join(directory, "work"))
    kept = os.path.join(upper_base(view.store), "kept")
    os.makedirs(kept, mode=0o700, exist_ok=True)
    target = os.path.join(kept, f"{time.strftime('%Y%m%dT%H%M%S')}-{os.urandom(4).hex()}")
    os.rename(directory, target)
    return os.path.join(target, "upper")


def _keep_interrupted(view: View, quarantine: gitcheck.Quarantine) -> None:
    """A dead launcher's session was never applied: keep it aside, and say where."""
    sessions = os.path.join(upper_base(view.store), "sessions")
    try:
        names = os.listdir(sessions)
    except OSError:
        return
    for name in names:
        if name.startswith("."):
            continue  # being made, or a launch that died making it: holds nothing
        directory = os.path.join(sessions, name)
        lock = _claim(directory)
        if lock is None:
            continue  # its launcher is alive
        try:
            upper = os.path.join(directory, "upper")
            if not os.path.isdir(upper) or not os.listdir(upper):
                remove_tree(directory)  # it wrote nothing: nothing to keep or say
                continue
            kept = _keep(view, directory)
            quarantine.lines.append(
                f"an interrupted session's git changes to {view.target} were not applied; "
                f"they are kept in {kept}")
        finally:
            if lock >= 0:
                os.close(lock)


def _claim(directory: str) -> int | None:
    """A dead session's lock, taken (its fd), or -1 when it has no lock to take (made
    before locks, or broken): both are interrupted. None: its launcher lives, or another
    launch took the directory meanwhile."""
    try:
        fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1 if os.path.isdir(directory) else None
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_tree(path: str) -> None:
    """Remove a directory tree of ours; overlayfs leaves its work directory mode 000.

    The walk only opens directories up, top down, each before it is listed (_open_up: a
    last name swapped for a link meanwhile changes nothing it leads to; the callers run
    once the session has ended, or under the review lock). coreutils' rm then
    removes the tree by descriptors, following no link and staying on its file system,
    however deep. (Not shutil: its import, with fnmatch, re and the compressors, cost
    about 8 ms at the end of every launch in a git workspace, ADR 0004.)"""
    if os.path.islink(path):  # the walk would list what it names
        os.unlink(path)
        return
    _open_up(path)
    for _name, entry in gitrepo.walk(path):
        if entry.is_dir(follow_symlinks=False):
            _open_up(entry.path)
    rm = paths.find_tool("rm")
    if rm is None:
        return  # what stays is the store's, named by nothing: never a failed exit
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        fork_exec([rm, "-rf", "--one-file-system", "--", path],
                  {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, {0: null, 1: null, 2: null},
                  setsid=False).wait()
    finally:
        os.close(null)


def _open_up(directory: str) -> None:
    """Give `directory` its owner's bits, as the directory it is when opened: O_PATH
    needs no permission on it (mode 000 included), O_NOFOLLOW with O_DIRECTORY refuses
    a link there, and the mode is set through the descriptor's /proc name, which names
    that inode, not the path again."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        pass
    finally:
        os.close(fd)
