"""Root is not a skeleton key: on a root launch, find what only root's own modes let it read.

Launched as root, the agent is uid 0, the owner of /etc/shadow, host keys and every
root-only file, and dropping capabilities does not change ownership. An identity
inside that cannot read them would also lose the root-owned workspace, so they are
hidden instead (ADR 0006): an entry outside the workspace is covered with an empty
one before the agent starts (the late-mount helper, procmask.py) when uid 0 *without
capabilities* may read it and others may not. That is decided by the owner's modes:
the owner class for a root-owned entry, the group class for one of root's groups, the
other class for the rest. So another user's 0600 files need no cover (DAC keeps them
out already), and the walk does not descend where root without capabilities could not
search: what an unprivileged user can make costs no mount, however much of it there
is, and only the listing of a directory it changed (docs/adr/0006).

Only what the sandbox shows from the host at its own path, read-only, is walked: the
system trees, the toolchains of root's home, allow-read (the plan's read-only binds).
The rest of / is not there inside (reads.py, check 72), so neither its root-only files
nor what any user makes in it (a home, a project's node_modules, /tmp) costs a root
launch anything. Finding them takes a walk of those trees, about a second on a dev
container's image, so the result is cached in root's state store with two times of
every directory walked: its status-change time, which only the kernel sets, and its
modification time, which the directory's owner may set back (dirtimes.stamp). A launch
re-lists only the directories whose times changed (a file created, renamed or removed
there), so a new secret is found at the next launch; a directory changed below another
changed one is re-listed once, with it. A file's mode changed in place (chmod) does not
change its directory's times, and a re-listed directory's entries are judged again but
not the directory itself: the cache is rebuilt in full when it is more than a day old.
All of it runs in the late-mount helper: the cache and its times from the launch's
start, while the launcher plans (rootcache.py), the rest once the plan says which trees
are shown, while bwrap sets up.
"""

from __future__ import annotations

import os
import stat
import time

from claude_sandbox.core import mountinfo, paths
from claude_sandbox.core.record import record
from claude_sandbox.launch.facts import rootcache
from claude_sandbox.launch.facts.rootcache import CACHE_NAME, Prefetched, save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from claude_sandbox.launch.facts import rootmemo
    from claude_sandbox.launch.facts.hostfacts import HostFacts
    from claude_sandbox.launch.planner.mounts import Mount, Writable

# Pseudo and per-boot file systems: not files an administrator keeps.
PSEUDO_FS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "devtmpfs",
                       "debugfs", "tracefs", "securityfs", "pstore", "bpf", "configfs",
                       "fusectl", "hugetlbfs", "binfmt_misc", "autofs", "nsfs", "efivarfs",
                       "selinuxfs", "rpc_pipefs"})
HIDE, DESCEND, SKIP = "hide", "descend", "skip"
# The walk's own modules (dirtimes, rootmemo) are imported where it walks: a launch whose
# trees are all views (ADR 0020) plans with this module and never walks.


def _roots_bits(info: os.stat_result, groups: frozenset[int]) -> int:
    """The rwx bits uid 0 without capabilities gets on `info`: the owner's when it owns it,
    the group's when it is in its group, the others' otherwise (the kernel's order)."""
    if info.st_uid == 0:
        return (info.st_mode >> 6) & 7
    if info.st_gid in groups:
        return (info.st_mode >> 3) & 7
    return info.st_mode & 7


def judge(info: os.stat_result, groups: frozenset[int]) -> str:
    """HIDE an entry that gives root a right others lack (a file: read; a directory: list
    or search); DESCEND into a directory root may search, where what lies inside may still
    be root's; SKIP the rest (a link, what others may read as root may, what DAC keeps
    from root already).

    Compared right by right, never against others' full access: another user's 0711
    directory gives root exactly what it gives everyone, so it is walked, not covered (a
    cover each once let a user who may write in a shown tree make every root launch
    mount 20,000 of them, towards the kernel's mount limit; probe A66)."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return SKIP
    root, others = _roots_bits(info, groups), mode & 7
    if stat.S_ISDIR(mode):
        if root & ~others & 0o5:
            return HIDE
        return DESCEND if root & 0o1 else SKIP  # what root cannot enter, nothing inside
    return HIDE if root & ~others & 0o4 else SKIP


# A directory with at least this many entries, owned by another user than root, keeps
# each entry's inode, and what was judged of those not skipped, in a file of its own
# beside the cache: listing it again after one change then costs a readdir, a dict of
# names and inodes and a set difference in C, not a stat per entry (an unprivileged
# user's 20,000 files: about 190 ms a launch with a stat each, measured, while it kept
# adding one; 115 ms with a Python verdict each; 10-30 ms now).
LARGE = 1000


# A verdict as a memo keeps it (rootmemo.CODES): a directory to hide is told from a file.
_VERDICTS = {"f": (HIDE, False), "D": (HIDE, True), "d": (DESCEND, True), "s": (SKIP, False)}
_CODES = {value: code for code, value in _VERDICTS.items()}


def _verdicts(directory: str, owner: int, entries: list[os.DirEntry[str]],
              skip: frozenset[str], groups: frozenset[int], listings: rootmemo.Listings | None,
              ) -> Iterable[tuple[str, str, bool]]:
    """(path, verdict, is a directory) of each entry of `directory` not skipped by SKIP.

    In a large directory another user owns, only entries new since its memo (by name,
    inode and kind) are judged. Only such a directory keeps one: no entry there can become root's
    own but by root's hand, whereas a reused inode in root's directory (a file deleted and
    made again 0600 under its name) would pass as the entry it was."""
    if listings is None or len(entries) < LARGE or owner == 0:
        for entry in entries:
            if entry.path in skip:
                continue
            try:
                verdict = judge(entry.stat(follow_symlinks=False), groups)
            except OSError:
                continue
            if verdict != SKIP:
                yield entry.path, verdict, entry.is_dir(follow_symlinks=False)
        return
    # The type is in the key too (readdir's d_type, no stat): a name made again as the
    # other kind may get the freed inode back.
    now = {entry.name: f"{entry.inode()}/" if entry.is_dir(follow_symlinks=False)
           else str(entry.inode()) for entry in entries}
    for path in skip:
        if os.path.dirname(path) == directory:
            now.pop(os.path.basename(path), None)
    known, codes = listings.load(directory)
    new = dict(now.items() - known.items())  # the set difference runs in C
    codes = {name: code for name, code in codes.items() if name not in new and name in now}
    for name in new:
        try:
            info = os.lstat(os.path.join(directory, name))
        except OSError:
            continue
        verdict = judge(info, groups)
        if verdict != SKIP:
            codes[name] = _CODES[(verdict, stat.S_ISDIR(info.st_mode))]
    if new or len(now) != len(known):
        listings.save(directory, now, codes)
    for name, code in codes.items():
        verdict, is_dir = _VERDICTS[code]
        yield os.path.join(directory, name), verdict, is_dir


def _scan(directory: str, skip: frozenset[str], hidden: dict[str, bool],
          dirs: dict[str, int], groups: frozenset[int], listings: rootmemo.Listings | None = None,
          ) -> None:
    """Walk `directory`: record what to hide (not descending into it) and dir times."""
    from claude_sandbox.launch.facts.dirtimes import stamp

    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            info = os.lstat(current)
            # The status-change time too, not only the modification time: a directory's
            # owner may set the latter back (utimensat) once root has made a file in it,
            # and the refresh would then not list it again; only the kernel sets the
            # former, on every entry made, removed or renamed there, and on utimensat.
            dirs[current] = stamp(info)
            entries = list(os.scandir(current))
        except OSError:
            continue
        for path, verdict, is_dir in _verdicts(current, info.st_uid, entries, skip, groups,
                                               listings):
            if verdict == HIDE:
                hidden[path] = is_dir
            elif verdict == DESCEND:
                stack.append(path)


def _below(path: str, roots: set[str]) -> bool:
    """Whether `path` is one of `roots` or lies beneath one: one set lookup per ancestor."""
    while True:
        if path in roots:
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def refresh(hidden: dict[str, bool], dirs: dict[str, int], skip: Iterable[str],
            groups: frozenset[int], listings: rootmemo.Listings | None = None,
            own: Iterable[str] = (), known: frozenset[str] | None = None) -> bool:
    """Re-list, in place, the directories whose time changed; whether any did.

    Linear in what is cached: a directory changed beneath another changed one (an
    `rm -rf node_modules` changes thousands) is dropped and re-listed with it, once.
    `own`: this launch's writable places. What lies in them is not covered on this
    launch, so their directories are not read: their cached times stay, and the next
    launch that shows them read-only finds what changed there. A workspace inside a
    system tree (/usr/src/app) then costs its own launches nothing, however many
    directories the agent makes in it. `known`: the changed directories among all of
    `dirs`, read before (rootcache.prefetch), `own`'s then left out."""
    from claude_sandbox.launch.facts import dirtimes

    ours = tuple(o for o in own if o in dirs)  # only a place the walk went into
    prefixes = tuple(o.rstrip("/") + "/" for o in ours)
    candidates = [d for d in (dirs if known is None else known)
                  if not (ours and (d in ours or d.startswith(prefixes)))]
    changed = dirtimes.changed(candidates, dirs) if known is None else set(candidates)
    if not changed:
        return False
    roots = {d for d in changed if not _below(os.path.dirname(d), changed) or d == "/"}
    # Few roots remain, and str.startswith takes them all at once: one C call per path.
    prefixes = tuple(r.rstrip("/") + "/" for r in roots)
    for path in [p for p in hidden if p.startswith(prefixes)]:
        del hidden[path]
    for path in [d for d in dirs if d in roots or d.startswith(prefixes)]:
        del dirs[path]
    skipped = frozenset(skip)
    for directory in sorted(roots):
        if os.path.isdir(directory) and not os.path.islink(directory):
            _scan(directory, skipped, hidden, dirs, groups, listings)
    return True


def _groups() -> frozenset[int]:
    """The groups a root launch's agent keeps: its gid and supplementary groups (bwrap's
    user namespace forbids setgroups, so they stay)."""
    return frozenset([os.getgid(), *os.getgroups()])


def private_paths(cache: str, skip: Iterable[str], roots: Iterable[str],
                  own: Iterable[str] = (), *, save_cache: bool = True,
                  early: Prefetched | None = None) -> dict[str, bool]:
    """What to hide on this root launch: the cache, brought up to date (but in `own`,
    this launch's writable places: refresh), with each of `roots` (the trees the
    sandbox shows) it does not hold walked anew, whatever their parents' modes, minus
    `skip` (and below). `early`: the cache and its changed directories, read before
    the plan (rootcache.prefetch)."""
    from claude_sandbox.launch.facts import rootmemo

    groups = _groups()
    roots = list(roots)
    cached = early.cache if early is not None else rootcache.read(cache)
    fresh = cached is not None and rootcache.fresh(cached.made, time.time())
    known = early.changed if early is not None else None
    stale = early.times_stale if early else not os.path.exists(cache + rootcache.TIMES)
    # The times of every directory are loaded only where this launch uses them: a change
    # to re-list, a tree not walked before, a times file to write again (rootcache.py).
    dirs = None
    # A tree shown through a view now (ADR 0020) is not the walk's: a cache that holds one
    # is loaded, to drop it (below).
    if cached is not None and fresh and (known is None or known or not set(roots)
                                          <= cached.walked or (stale and save_cache)
                                          or not cached.walked <= set(roots)):
        dirs = early.dirs if early is not None and early.dirs is not None else (
            rootcache.directories(cached))
        fresh = dirs is not None
    # The full rebuild judges every entry again (a mode changed in place); the memos of
    # large directories serve only refreshes between rebuilds.
    listings = rootmemo.Listings(f"{cache}.d") if save_cache else rootmemo.ReadOnly(
        f"{cache}.d")
    rebuild = rootmemo.Rebuild(listings.directory) if save_cache else (
        rootmemo.ReadOnlyRebuild(listings.directory))
    if cached is None or not fresh:
        hidden: dict[str, bool] = {}
        dirs, made = {}, time.time()
    else:
        hidden, made = dict(cached.hidden), cached.made
    dropped = cached is not None and fresh and not cached.walked <= set(roots)
    if dropped and dirs is not None:
        # What the cache holds of a tree no longer walked is dropped, so that no launch
        # reads its times again (the early reading included: rootcache.prefetch).
        dirs = {d: t for d, t in dirs.items() if _under(d, roots)}
        hidden = {p: d for p, d in hidden.items() if _under(p, roots)}
        known = None if known is None else frozenset(d for d in known if _under(d, roots))
    if dirs is None:  # nothing changed, and every tree shown was walked before
        return hidden
    changed = refresh(hidden, dirs, skip, groups, listings, own, known) if fresh else False
    for root in roots:
        if root not in dirs and not _under(root, hidden):
            _scan(root, frozenset(skip), hidden, dirs, groups, listings if fresh else rebuild)
            changed = True
    if not save_cache:  # `explain`: it creates nothing
        return hidden
    if cached is None or not fresh:
        rebuild.prune()
    if changed or dropped or cached is None:
        save(cache, hidden, dirs, made, roots)
    elif stale:
        try:  # for the times file alone: a store that cannot take it costs time only
            save(cache, hidden, dirs, made, roots)
        except OSError:
            pass
    if cached is None:  # the caches of earlier versions, with what they walked
        rootcache.remove_old(os.path.dirname(cache))
    return hidden


def shown_trees(mounts: Iterable[Mount], skip: Iterable[str]) -> list[str]:
    """The directories the sandbox shows from the host at their own path, read-only (its
    ro-bind mounts), outermost only, none in `skip` (and below): what the walk covers.
    A writable bind (the workspace, allow-write, the store) is the agent's own."""
    masked = tuple(skip)
    found = sorted({m.source for m in mounts if m.kind in ("ro-bind", "ro-bind-try")
                    and m.source == m.dest and not _under(m.source, masked)
                    and os.path.isdir(m.source) and not os.path.islink(m.source)})
    return [path for path in found if not _under(os.path.dirname(path), found)]


_under = paths.under_any


@record
class Walk:
    """What a root launch's walk takes from the plan (for_launch's arguments, resolved):
    plain paths, so that the late-mount helper can be told them (procmask.py)."""

    cache: str  # the cache's path in root's state store
    skip: tuple[str, ...]  # never walked: the runtime trees, pseudo file systems, the store
    roots: tuple[str, ...]  # the trees the sandbox shows read-only
    own: tuple[str, ...]  # this launch's writable places: not read again (refresh)
    bound: tuple[str, ...]  # shown whatever lies around them: allow-read, the toolchains
    shown: tuple[str, ...]  # the places whose covers the sandbox's own mounts make moot


def plan_walk(store: str, facts: HostFacts, layout: Writable, mounts: Iterable[Mount]) -> Walk:
    """The walk of a root launch: the trees the sandbox shows read-only, outside the
    workspace and the other writable places. `store`: the launch's own, chosen once
    (state.store_root): chosen again, a shared state-dir's squat made or removed
    meanwhile could move the cache to a directory another user holds."""
    pseudo = [m.mountpoint for m in mountinfo.parse(mountinfo.read())
              if m.fstype in PSEUDO_FS and m.mountpoint != "/"]
    masked = [*facts.runtime_dirs, "/run", "/proc", "/sys", "/dev", "/tmp", store]
    # A writable place inside a shown tree (a workspace under /opt) is walked too, and
    # only filtered below: the cache serves every launch, whatever its workspace. Its
    # directories are not read again on a launch that writes it (refresh's `own`).
    skip = [*masked, *pseudo]
    # Trees shown whatever their parents' modes are walked however they lie, even under a
    # private place (an allow-read under /run): the skip list holds only below them.
    bound = [*layout.allow_read, *facts.toolchains]
    roots = shown_trees(mounts, skip)
    roots += [b for b in bound if os.path.isdir(b) and not os.path.islink(b)
              and not _under(b, roots)]
    # A writable place is not read again unless it holds one of those (covered even
    # inside the workspace, below).
    own = [place for place in (layout.workspace, *layout.allow_write)
           if not any(_under(b, place) for b in bound)]
    return Walk(os.path.join(store, CACHE_NAME), tuple(skip), tuple(roots), tuple(own),
                tuple(bound), (*masked, facts.home, layout.workspace, *layout.allow_write))


def covers(walk: Walk, *, save_cache: bool = True,
           early: Prefetched | None = None) -> dict[str, bool]:
    """The paths of `walk`'s trees that root keeps from others, each a directory or not."""
    if early is not None and early.path != walk.cache:
        early = None  # read from another cache than this walk's: not this walk's
    private = private_paths(walk.cache, walk.skip, walk.roots, walk.own,
                            save_cache=save_cache, early=early)
    return {path: is_dir for path, is_dir in private.items()
            if _under(path, walk.roots)
            and (_under(path, walk.bound) or not _under(path, walk.shown))}


def for_launch(store: str, facts: HostFacts, layout: Writable, mounts: Iterable[Mount], *,
               save_cache: bool = True) -> dict[str, bool]:
    """On a root launch: the paths of the trees the sandbox shows read-only that root keeps
    from others, outside the workspace and the other writable places."""
    return covers(plan_walk(store, facts, layout, mounts), save_cache=save_cache)
