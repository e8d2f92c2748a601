"""Repositories the session made or changed without an overlay: checked, and what in
them git outside would run, from the session, quarantined (ADR 0010, check 70).

The agent can make a git directory anywhere in a live workspace, or change one
nested in it: `.git` directories, bare layouts, submodules' directories under
modules/. git outside runs their hooks and obeys their config: `config`, and
`config.worktree` once extensions.worktreeConfig (an allowed key) is set, and each
linked worktree's. So every hook made or changed in the session (by its ctime,
which no process sets back) is moved to the quarantine, and every such config
file is replaced by its allowed keys (gitpolicy.py), in the git directory and in
each submodule's under it, at any depth.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core import paths
from claude_sandbox.launch.overlay import gitcheck, gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator


def check_made(paths: Iterable[str], workspace: str, overlaid: Iterable[str], since_ns: int,
               quarantine: gitcheck.Quarantine) -> None:
    """Repositories the session made or changed without an overlay: checked, and their
    hooks and configuration from the session quarantined (the config is replaced by
    its allowed keys)."""
    done = {os.path.realpath(p) for p in overlaid}
    for path in paths:
        try:
            _check_one(path, workspace, done, since_ns, quarantine)
        except (OSError, UnicodeError, ValueError) as error:
            # The agent chooses what is there (a read-only hooks directory, a name no
            # encoding takes, a path too long for the quarantine): one repository it
            # made uncheckable is named loudly, and the others are still checked.
            quarantine.lines.append(f"warning: {path} could not be checked ({error}); git "
                                    "outside may run what the session left there: review it "
                                    "before running git in it")


def _check_one(path: str, workspace: str, done: set[str], since_ns: int,
               quarantine: gitcheck.Quarantine) -> None:
    """One repository, or the `.git` entry that leads to it."""
    gitdir = path
    if os.path.basename(path) == ".git" and os.path.islink(path):
        quarantine.take(path, "a .git that is a link: git outside would follow it to "
                        "whatever git directory the session chose")
        return
    if os.path.basename(path) == ".git" and _regular(path):
        target = gitrepo.gitfile_target(path)
        if target is None or not _inside(target, workspace):
            quarantine.take(path, "a .git file that names a git directory outside the "
                            "workspace: git outside would use that directory's config")
            return
        if not gitrepo.real_dir(target):
            # Nothing here can check what git would find there: it is not passed over.
            quarantine.take(path, "a .git file that names no git directory the launch "
                            "can check")
            return
        gitdir = target
    # A worktree's or submodule's git directory inside an overlaid one was applied
    # with it.
    resolved = os.path.realpath(gitdir)
    if any(_inside(resolved, d) for d in done) or not os.path.isdir(gitdir):
        return
    gitcheck.check(gitdir, quarantine)
    strip_made(gitdir, since_ns, quarantine)


def strip_made(gitdir: str, since_ns: int, quarantine: gitcheck.Quarantine) -> None:
    """What the session made or changed (ctime) that git outside runs, in `gitdir` and in
    every submodule's git directory under it: hooks quarantined, and each file git
    reads configuration from replaced by its allowed keys."""
    for directory in _with_modules(gitdir):
        for hook in _files(os.path.join(directory, "hooks")):
            # A hook rewritten in place is as much the agent's as a new one.
            if not hook.endswith(".sample") and _since(hook, since_ns):
                quarantine.take(hook, "a git hook made or changed in the session: git "
                                "outside runs it")
        for config in _config_files(directory):
            # A directory by a config's name is no config git reads, nor one to move.
            if _since(config, since_ns) and not gitrepo.real_dir(config):
                _strip_config(config, quarantine)
        for index in _index_files(directory):
            if _since(index, since_ns) and not gitrepo.real_dir(index):
                _check_index(index, quarantine)


def _index_files(gitdir: str) -> list[str]:
    """The index and each linked worktree's: git checks entries out where they name."""
    worktrees = _subdirs(os.path.join(gitdir, "worktrees"))
    return [os.path.join(gitdir, "index"), *(os.path.join(w, "index") for w in worktrees)]


def _check_index(index: str, quarantine: gitcheck.Quarantine) -> None:
    """An index git's own path rule would refuse an entry of (one at .git/hooks/...,
    which `git restore .` outside writes and then runs) is taken, whole."""
    from claude_sandbox.launch.overlay import gitindex

    try:
        data = gitindex.read(index)
        refused = gitindex.refused(data) if data is not None else ()
    except gitindex.IndexFormat as error:
        quarantine.take(index, f"an index the launch cannot read ({error}): what git "
                        "would check out from it cannot be told")
        return
    if refused:
        name, why = refused[0]
        quarantine.take(index, f"an index with an entry git would not have let in "
                        f"('{gitindex.shown(name)}': {why}): git outside writes it on restore")


def _config_files(gitdir: str) -> list[str]:
    """Every file git reads configuration from in `gitdir`: config; config.worktree, which
    extensions.worktreeConfig (an allowed key) makes git read, so it is judged whether or
    not that key is set now; each linked worktree's config.worktree."""
    worktrees = _subdirs(os.path.join(gitdir, "worktrees"))
    return [os.path.join(gitdir, "config"), os.path.join(gitdir, "config.worktree"),
            *(os.path.join(meta, "config.worktree") for meta in worktrees)]


def _strip_config(config: str, quarantine: gitcheck.Quarantine) -> None:
    """Quarantine `config` when it holds a key git would run or follow (gitpolicy.py), and
    put its allowed keys back in its place."""
    from claude_sandbox.launch.overlay import gitpolicy, repoconfig

    # One too long to read here is not taken as empty: git reads it whole.
    text = gitrepo.read_small(config, 4 << 20)
    try:
        parsed = repoconfig.parse(text) if text is not None else None
    except repoconfig.ConfigSyntax:
        parsed = None
    allowed: tuple[repoconfig.Change, ...] = ()
    if parsed is None:
        names = "it does not parse" if text is not None else "it cannot be read"
    else:
        allowed, refused = gitpolicy.split(repoconfig.changes((), parsed))
        names = ", ".join(change.name for change, _ in refused)
    if names:
        quarantine.take(config, f"configuration made or changed in the session that git "
                        f"would run or follow: {names}")
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(repoconfig.rewrite("", allowed))


# Any one of these names makes a directory under modules/ a submodule's git directory;
# one of a plant's own making need not be whole to be read by git.
_GIT_NAMES = frozenset({"HEAD", "config", "config.worktree", "hooks", "objects", "refs",
                        "commondir"})


def _with_modules(gitdir: str) -> Iterator[str]:
    """`gitdir`, then every git directory under its modules/ at any depth: a submodule's
    name may hold slashes (modules/a/b) and a submodule has its own (modules/a/modules/b).
    Iterative, bounded by the tree, links never followed."""
    gitdirs = [gitdir]
    while gitdirs:
        directory = gitdirs.pop()
        yield directory
        plain = _subdirs(os.path.join(directory, "modules"))
        while plain:
            candidate = plain.pop()
            if _GIT_NAMES.intersection(_names(candidate)):
                gitdirs.append(candidate)
            else:
                plain += _subdirs(candidate)


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _subdirs(path: str) -> list[str]:
    """The real directories in `path`, when `path` is one itself (a link is not entered)."""
    return [entry for entry, is_dir in _entries(path) if is_dir]


def _files(path: str) -> list[str]:
    """What in `path` is not a directory (quarantine moves files and links, not trees)."""
    return [entry for entry, is_dir in _entries(path) if not is_dir]


def _entries(path: str) -> list[tuple[str, bool]]:
    if not gitrepo.real_dir(path):
        return []
    try:
        with os.scandir(path) as listed:
            return sorted((e.path, e.is_dir(follow_symlinks=False)) for e in listed)
    except OSError:
        return []


def _since(path: str, since_ns: int) -> bool:
    try:
        return os.lstat(path).st_ctime_ns >= since_ns
    except OSError:
        return False


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


_inside = paths.under
