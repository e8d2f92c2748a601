"""Refs after the session: the agent's final values, each applied only where it is unchanged.

The agent's git may have moved refs as loose files, rewritten packed-refs, or
deleted refs (overlayfs whiteouts). This module works out every ref's value as
the agent's git saw it at the end, compares it with what it was at launch, and
applies each change only when the real ref still holds its launch value: a ref
moved outside during the session is never overwritten; the agent's value is
kept beside it under refs/claude-sandbox/ (gitapply.py, ADR 0010). Values are
written only after they parse as git's (an object id or `ref: refs/...`).
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.launch.overlay import gitcontrol, gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.launch.overlay.gitbase import Snapshot


def write(target: str, text: str | bytes) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = f"{target}.csbx-{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape"))
    os.replace(temporary, target)


def remove(path: str) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            import shutil

            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _agent_refs(upper: str, base: Snapshot, files: set[str], gone: set[str],
                opaque: set[str]) -> dict[str, str]:
    """Every ref as the agent's git saw it at the end: packed, then loose over it."""
    if "packed-refs" in files:
        packed = gitrepo.packed_refs(gitrepo.read_small(os.path.join(upper, "packed-refs"),
                                                        256 << 20))
    else:
        packed = dict(base.packed)

    def hidden(name: str) -> bool:  # deleted in the session, or under a recreated directory
        parts = name.split("/")
        return name in gone or any("/".join(parts[:i]) in gone | opaque
                                   for i in range(1, len(parts)))

    refs = packed
    refs.update((n, v) for n, v in base.loose if not hidden(n))
    for rel in files:
        if rel.startswith("refs/"):
            value = gitrepo.ref_value(gitrepo.read_small(os.path.join(upper, rel)))
            if value is not None and gitrepo.valid_refname(rel):
                refs[rel] = value
    return refs


def planned(upper: str, base: Snapshot, files: set[str], gone: set[str],
            opaque: set[str]) -> list[tuple[str, str | None, str | None]]:
    """(ref, value at the base, the agent's value) for every ref the agent's git changed;
    None: absent (a new ref, or a deleted one)."""
    touched = "packed-refs" in files or any(r.startswith("refs/") for r in files | gone)
    if not touched:
        return []
    before = dict(base.packed)
    before.update(base.loose)
    after = _agent_refs(upper, base, files, gone, opaque)
    return [(name, before.get(name), after.get(name))
            for name in sorted(set(before) | set(after)) if after.get(name) != before.get(name)]


def apply(upper: str, real: str, base: Snapshot, files: set[str], gone: set[str],
          opaque: set[str], history: gitcontrol.History | None = None,
          controls: frozenset[str] = frozenset()) -> tuple[list[str], bool]:
    """Apply the agent's ref changes; a line each for what was not, and whether a value
    is left only in the store (aside). `history`: where a value's new commits are read,
    and a ref whose commits change a control file waits under refs/claude-sandbox/held/
    (gitcontrol.py)."""
    lines: list[str] = []
    kept = False
    now = gitrepo.all_refs(real)
    deleted: list[str] = []
    for name, old, value in planned(upper, base, files, gone, opaque):
        if now.get(name) != old:  # moved outside during the session
            if value is not None:
                keep = "refs/claude-sandbox/" + name[len("refs/"):]
                written = aside(real, keep, value, history)
                kept = kept or not written
                lines.append(f"{real}: {name} changed outside during the session; the "
                             f"session's value " + (f"is kept as {keep}" if written
                                                    else nothing(value)))
            continue
        if value is not None and value.lower().startswith("ref: " + gitcontrol.OURS):
            lines.append(f"{real}: {name} not applied: it points at the values the exit "
                         "keeps aside, unread (refs/claude-sandbox/)")
            continue
        # A symbolic ref (ref: refs/...) names a ref, read where that ref moves.
        found = (history.changes(value, controls)
                 if history and value and gitrepo.is_object_id(value) else ())
        if value is not None and found != ():
            keep = gitcontrol.HELD + name[len("refs/"):]
            written = aside(real, keep, value, history)
            kept = kept or not written
            lines.append(gitcontrol.held_line(real, name, keep, found, existed=old is not None)
                         if written else
                         f"{real}: {name} was not moved: the session's value {nothing(value)}")
            continue
        if value is None:
            deleted.append(name)
            remove(os.path.join(real, name))
            lines.append(f"{real}: the session deleted {name}")
        else:
            write(os.path.join(real, name), value + "\n")
        if name.startswith("refs/replace/"):
            lines.append(f"{real}: the session set the replace ref {name}: git outside shows "
                         "another object in place of the one it names; review it")
    if deleted:
        _drop_packed(real, set(deleted))
    return lines, kept


def nothing(value: str) -> str:
    """What the line says of a value aside() did not write."""
    return (f"({value.strip()}) names objects this repository does not hold, or git could "
            "not tell; it is not written as a ref, which would make git gc and git fsck "
            "fail outside; it stays in the store")


def aside(real: str, keep: str, value: str, history: gitcontrol.History | None) -> bool:
    """Write `value` as the ref `keep` (under refs/claude-sandbox/) only where every
    object it reaches is in the repository (gitcontrol.History.complete), or where it
    names another ref: a ref to a missing object (an id the agent made up, or a commit
    whose objects were not carried) makes `git for-each-ref`, `git gc` and `git fsck`
    outside fail. Whether it was written; the caller keeps the session's directory when
    it was not."""
    if gitrepo.is_object_id(value) and (history is None or not history.complete([value])):
        return False
    write(os.path.join(real, keep), value + "\n")
    return True


def _drop_packed(real: str, names: set[str]) -> None:
    path = os.path.join(real, "packed-refs")
    text = gitrepo.read_small(path, 256 << 20)
    if text is None:
        return
    kept: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("^"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line.rstrip("\n").partition(" ")[2] in names
        if not dropping:
            kept.append(line)
    write(path, "".join(kept))
