"""The session's index, applied to the real git directory by rule (gitapply.py, ADR 0010).

An index is applied only when every entry is one git would have let in (git reads an
index's paths unchecked, and would write an entry naming .git/hooks/ there at the
user's next checkout), and when it stages no control file's content that the index
outside does not already hold: `git checkout .` outside would write it into the
worktree, where the program that runs it finds it (gitcontrol.py). The bits that hide
changes from `git status` outside (skip-worktree, assume-unchanged) set in the session
are applied and named.
"""

from __future__ import annotations

import os

from claude_sandbox.launch.overlay import gitcontrol, gitrefs


def apply_index(upper: str, real: str, at_launch: tuple[int, int, int] | None,
                files: set[str], controls: frozenset[str], hash_size: int = 20,
                history: gitcontrol.History | None = None) -> tuple[list[str], bool]:
    """(lines, whether the session's index was refused and is worth keeping).
    `at_launch`: the real index's inode, size and time when the session began;
    `hash_size`: the repository's object ids' (20, or 32 for sha256)."""
    if "index" not in files:
        return [], False
    from claude_sandbox.launch.overlay import gitindex  # re and hashlib: only when used
    target = os.path.join(real, "index")
    if stat_of(target) != at_launch:
        return [f"{target} changed outside during the session; the session's index was not "
                "applied (git status outside shows its own)"], False
    lines = []
    try:
        before = set(gitindex.read_hidden(target))
        data = checked(os.path.join(upper, "index"), target, controls, hash_size, history)
        hidden = [pair for pair in gitindex.hidden(data) if pair not in before]
        if history is not None and not history.complete(_new_ids(data, target, hash_size)):
            # A staged blob that is missing makes git commit and git gc fail outside.
            raise gitindex.IndexFormat("it names objects this repository does not hold, "
                                       "or git could not tell")
    except gitindex.IndexFormat as error:
        return [f"{target}: the session's index was not applied ({error})"], True
    for bit in ("skip-worktree", "assume-unchanged"):
        names = [path for path, kind in hidden if kind == bit]
        if names:
            # The names are the agent's: escaped, so that none drives the terminal.
            lines.append(f"{real}: the session marked {len(names)} file(s) {bit}, so git "
                         f"status and git diff outside do not show their changes: "
                         f"{_shown(names, 10)} (undo: git update-index --no-{bit} FILE)")
    # The bytes checked, not the file: a session still running (review mode) could
    # replace it meanwhile.
    gitrefs.write(target, data)
    return lines, False


def apply_worktree_index(source: str, target: str, gone: bool, controls: frozenset[str],
                         hash_size: int = 20,
                         history: gitcontrol.History | None = None) -> str | None:
    """A linked worktree's index, by the main index's rules; why not, or None."""
    from claude_sandbox.launch.overlay import gitindex  # it imports `re`: not at launch

    if gone:
        gitrefs.remove(target)
        return None
    try:
        gitrefs.write(target, checked(source, target, controls, hash_size, history))
    except gitindex.IndexFormat as error:
        return f"the session's index ({error})"
    return None


def checked(path: str, target: str, controls: frozenset[str], hash_size: int = 20,
            history: gitcontrol.History | None = None) -> bytes:
    """The index file at `path`, read once, its entries alone (gitindex's
    without_extensions); IndexFormat, naming the entries, where git would not have let
    one of them in, or where it stages a control file's content that the index at
    `target` (the real one, now) does not hold."""
    from claude_sandbox.launch.overlay import gitindex  # it imports `re`: not at launch

    data = gitindex.read(path) or b""
    refused = gitindex.refused(data)
    if refused:
        named = "; ".join(f"'{gitindex.shown(name)}': {why}" for name, why in refused[:3])
        more = f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise gitindex.IndexFormat(f"git would not let in {len(refused)} of its entries: "
                                   f"{named}{more}")
    staged = gitcontrol.staged_changes(gitindex.read(target), data, controls, history)
    if staged:
        raise gitindex.IndexFormat(
            f"it stages control files ({_shown(staged, 5)}), which programs outside run; "
            "`git checkout .` would write them into the worktree")
    return gitindex.without_extensions(data, hash_size)


def _new_ids(data: bytes, target: str, hash_size: int) -> list[str]:
    """The object ids the index `data` names that the real index at `target` does not,
    submodules' commits (gitlinks) left out: those are the submodule's to hold."""
    from claude_sandbox.launch.overlay import gitindex

    now = {oid for _, oid in gitindex.staged(gitindex.read(target) or b"",
                                             hash_size=hash_size)}
    links = {oid for _, oid in gitindex.gitlinks(data, hash_size=hash_size)}
    return sorted({oid for _, oid in gitindex.staged(data, hash_size=hash_size)}
                  - now - links)


def _shown(names: list[str], most: int) -> str:
    from claude_sandbox.launch.overlay import gitindex  # it imports `re`: not at launch

    return ", ".join(gitindex.shown(n) for n in names[:most]) + (
        f" and {len(names) - most} more" if len(names) > most else "")


def stat_of(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)
