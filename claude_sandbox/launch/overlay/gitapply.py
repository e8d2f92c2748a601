"""After the session: what the agent's git wrote in its overlay, applied to the real one by rule.

Inside, a repository's git directory is an overlay (core/views.py): every write
lands in an upper directory in the store, so git works as it does outside
(`git config`, `remote add`, `push -u`, `submodule add`, worktrees) and nothing
reaches the real directory while the session runs. When it ends, the launcher
walks the upper directory and carries over, by the table below, only what git
makes and nothing git runs or follows (docs/adr/0010-the-workspace-exit.md):

- objects and packs, by their names; refs, HEAD and packed-refs as values
  that parse, each compared with what it was at launch, so a ref moved outside
  meanwhile is not overwritten (the agent's value is kept under
  refs/claude-sandbox/ instead); the index, when git would have let in every
  entry's path (none in .git, none outside the tree); logs and git's state files;
- config keys from an allow-list only (gitpolicy.py): remotes and submodules
  with network URLs, upstreams that name a remote, identity; never hooks,
  includes, fsmonitor, filters or helpers;
- never hooks, alternates, grafts, a rebase's todo list, or anything git does
  not make, and never a link, FIFO, socket or device: those are named in one
  line and kept in the store.

What hides changes from `git status` outside and was set in the session (the
index's skip-worktree and assume-unchanged bits, info/exclude, info/attributes,
replace refs) is applied and named with the files it hides. The applier writes
regular files only, each to a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core import paths
from claude_sandbox.core.record import record
from claude_sandbox.launch.overlay import (
    controlfiles,
    gitcontrol,
    gitobjects,
    gitreflog,
    gitrefs,
    gitrepo,
    gitstaged,
    gitstate,
)
from claude_sandbox.launch.overlay.gitbase import Snapshot, config_text, snapshot
from claude_sandbox.launch.overlay.gitbudget import ExitBudget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


# Top-level files git writes while it works, carried over as they are.
STATE_FILES = frozenset((
    "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_AUTOSTASH",
    "CHERRY_PICK_HEAD", "REVERT_HEAD", "COMMIT_EDITMSG", "SQUASH_MSG", "TAG_EDITMSG",
    "AUTO_MERGE", "BISECT_LOG", "BISECT_START", "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK",
    "BISECT_NAMES", "BISECT_TERMS", "NOTES_EDITMSG", "description", "shallow",
))  # fmt: skip
# The built-in control names, where the caller has no configuration of its own.
CONTROLS = controlfiles.names(controlfiles.CONTROL)
# Files git leaves for itself that mean nothing outside: dropped without a word.
_TRANSIENT = ("gc.log", "gc.pid", "index.lock", "HEAD.lock", "config.lock", "packed-refs.lock")
# Never carried over: each line says what it would do outside.
_REFUSED = (
    ("hooks/", "git runs hooks"),
    ("objects/info/alternates", "it makes git read objects from another directory"),
    ("objects/info/http-alternates", "it makes git read objects from another place"),
    ("info/grafts", "it rewrites the history git shows"),
    ("rebase-merge/", "a rebase in progress: its todo list holds commands git runs"),
    ("rebase-apply/", "a rebase or am in progress: git resumes it with what it holds"),
    ("sequencer/", "a cherry-pick or revert in progress: its todo list holds commands"),
)
# Applied, and named: each hides changes from `git status` and `git diff` outside.
_HIDING = ("info/exclude", "info/attributes", "info/sparse-checkout")


@record
class Result:
    lines: tuple[str, ...]  # one line per thing the user should know
    kept: bool  # something was not applied: the upper directory is worth keeping


def _entries(upper: str) -> Iterator[tuple[str, str]]:
    """(relative path, "dir" | "file" | "whiteout" | "opaque" | "other") under `upper`."""
    for name, entry in gitrepo.walk(upper, ordered=True):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            yield name, "opaque" if _opaque(entry.path) else "dir"
        elif stat.S_ISREG(info.st_mode):
            yield name, "file"
        elif stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
            yield name, "whiteout"  # overlayfs's mark of a deletion
        else:
            yield name, "other"


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "user.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def apply(upper: str, real: str, base: Snapshot | None, workspace: str, *,
          copy: bool = False, controls: frozenset[str] = CONTROLS,
          held: tuple[str, ...] = (), top: str | None = None,
          spend: ExitBudget | None = None, depth: int = 0) -> Result:
    """Carry what `upper` holds over to the git directory `real`; `base` is it at launch.

    `base` None: a git directory the launch did not see (a submodule's new one):
    what it holds now is the base. `copy`: never move a file out of `upper`, which
    sessions keep writing (review mode): a moved file would stay one inode with
    whatever in the upper is hard-linked to it. `controls`: the control names; a ref,
    HEAD, state file or index that would bring one's new content out waits
    (gitcontrol.py); `held`: the absolute paths the launch held, link targets included,
    read as control paths too, relative to `top` (the working tree; a submodule's is its
    superproject's joined with its path). `spend`: what every repository of this
    application shares (gitbudget.py); `depth`: how deep a submodule this one is.
    """
    spend = spend or ExitBudget()
    top = top or _top(real, workspace)
    controls = controls | gitcontrol.held_paths(held, top)
    lines: list[str] = []
    kept = False
    entries = list(_entries(upper))
    if base is None:
        base = snapshot(real)
    files = {rel for rel, kind in entries if kind == "file"}
    gone = {rel for rel, kind in entries if kind == "whiteout"}
    opaque = {rel for rel, kind in entries if kind == "opaque"}
    # The objects first, by content (gitobjects.py): what is read below reads them.
    hash_size = 32 if gitobjects.sha256(base.config) else 20
    budget = gitobjects.Budget(sha256=hash_size == 32, shared=spend)
    for rel in sorted(rel for rel in files if _classify(rel)[0] == "object"):
        refusal = gitobjects.place(upper, real, rel,
                                   lambda source, target: _place(source, target, copy), budget)
        if refusal is not None:
            lines.append(f"{real}/{rel}: not applied: {refusal}")
            kept = True
    missing = kept  # objects not carried, which the session's index may name
    modules = sorted({rel.split("/")[1] for rel in files | gone
                      if rel.startswith("modules/") and rel.count("/") >= 2})
    # The submodules' git directories first, each known as it was: a commit here that
    # moves one is read there too (gitcontrol.History._gitlinks).
    bases: dict[str, gitcontrol.History] = {}
    for name in modules:
        module = os.path.join(real, "modules", name)
        if (over := spend.module_refusal(depth + 1)) is not None:
            lines.append(f"{module}: not applied: {over}")
            kept = True
            continue
        sub_base = snapshot(module) if os.path.isdir(module) else None
        sub = apply(os.path.join(upper, "modules", name), module, sub_base, workspace,
                    copy=copy, controls=controls, held=held, top=os.path.join(top, name),
                    spend=spend, depth=depth + 1)
        lines += sub.lines
        kept = kept or sub.kept
        if sub_base is not None:
            bases[name] = gitcontrol.History(module, [
                *sub_base.loose, *sub_base.packed, ("HEAD", (sub_base.head or "").strip())],
                spend=spend)
    history = gitcontrol.History(real, [*base.loose, *base.packed,
                                        ("HEAD", (base.head or "").strip())],
                                 sha256=hash_size == 32, top=top, spend=spend)
    history.modules.update(bases)
    # Every value the session's refs, HEAD and state files name, read together first:
    # where none adds a control file's change, one git run clears them all.
    planned = gitrefs.planned(upper, base, files, gone, opaque)
    moves = {name: (old, new) for name, old, new in planned}
    head = gitrepo.read_small(os.path.join(upper, "HEAD")) if "HEAD" in files else None
    history.read([*(v for _, _, v in planned if v), *gitstate.ids(head or ""),
                  *_named(upper, files)], controls)
    for rel, kind in entries:
        if kind == "other":
            lines.append(f"{real}/{rel}: not applied: git makes only regular files and "
                         "directories (a link or special file)")
            kept = True
    for rel in sorted(files | gone):
        if rel.startswith("modules/") and rel.count("/") >= 2:
            continue  # a submodule's git directory: applied as one, above
        action, why = _classify(rel)
        if action == "refuse":
            if rel in files:
                lines.append(f"{real}/{rel}: not applied: {why}")
                kept = True
        elif action in ("copy", "hide"):
            if rel in gone:
                gitrefs.remove(os.path.join(real, rel))
            elif action == "copy" and (refusal := gitstate.copy_refusal(
                    upper, rel, history, controls) or gitreflog.refusal(upper, real, rel,
                                                                         moves, history)):
                lines.append(f"{real}/{rel}: not applied: {refusal}")
                kept = True
            else:
                _place(os.path.join(upper, rel), os.path.join(real, rel), copy)
                if action == "hide":
                    lines.append(f"{real}/{rel} was changed in the session: it hides files "
                                 "from git status and git diff outside; review it")
        elif action == "index":  # a linked worktree's
            refusal = "the objects above were not carried" if missing else \
                gitstaged.apply_worktree_index(os.path.join(upper, rel),
                                               os.path.join(real, rel), rel in gone,
                                               controls, hash_size, history)
            if refusal is not None:
                lines.append(f"{real}/{rel}: not applied: {refusal}")
                kept = True
        elif action == "unknown" and rel in files:
            lines.append(f"{real}/{rel}: not applied: not something git makes")
            kept = True
    ref_lines, refs_kept = gitrefs.apply(upper, real, base, files, gone, opaque, history,
                                         controls)
    head_lines, head_kept = _apply_head(upper, real, base, files, history, controls)
    lines += ref_lines + head_lines
    kept = kept or refs_kept or head_kept
    lines += _apply_config(upper, real, base, files, workspace)
    if missing and "index" in files:  # git gc and git commit would fail on it outside
        lines.append(f"{real}/index: not applied: the objects above were not carried")
        return Result(tuple(lines), True)
    index_lines, index_kept = gitstaged.apply_index(upper, real, base.index, files, controls,
                                                    hash_size, history)
    lines += index_lines
    kept = kept or index_kept
    return Result(tuple(lines), kept)


def ref_changes(upper: str, base: Snapshot) -> list[tuple[str, str | None, str | None]]:
    """What applying `upper` would do to the refs and HEAD: (name, old, new), None for
    absent, for `claude-sandbox review` to show before anything is applied."""
    entries = list(_entries(upper))
    files = {rel for rel, kind in entries if kind == "file"}
    gone = {rel for rel, kind in entries if kind == "whiteout"}
    opaque = {rel for rel, kind in entries if kind == "opaque"}
    found = gitrefs.planned(upper, base, files, gone, opaque)
    head = gitrepo.read_small(os.path.join(upper, "HEAD")) if "HEAD" in files else None
    if head is not None and head != base.head:
        found.append(("HEAD", (base.head or "").strip() or None, head.strip()))
    return found


def _classify(rel: str) -> tuple[str, str]:
    """What to do with one path of the upper directory: the table the module docstring reads."""
    if rel.endswith(_TRANSIENT) or "/tmp_" in rel or rel.endswith(".lock"):
        return "skip", ""
    if len(rel) > 1024 or rel.count("/") > 64:
        return "refuse", "nested deeper than git makes"
    for prefix, why in _REFUSED:
        if rel == prefix.rstrip("/") or rel.startswith(prefix):
            return "refuse", why
    if rel in _HIDING:
        return "hide", ""
    if rel in ("HEAD", "config", "index", "packed-refs") or rel.startswith("refs/"):
        return "special", ""  # each has its own step below
    if rel.startswith("logs/refs/remotes/"):
        # A remote-tracking ref's reflog is what `git rebase` (and `pull --rebase`) reads
        # for the fork point: a line naming the user's own commit drops it from the
        # rebase. The session's lines there are not carried; the refs themselves are.
        return "skip", ""
    if rel in STATE_FILES or rel.startswith(("logs/", "lfs/objects/")):
        return "copy", ""
    if rel.startswith("objects/"):
        return ("object", "") if _object_name(rel) else ("skip", "")
    if rel.startswith("worktrees/"):
        return _classify_worktree(rel)
    if rel.startswith(("info/", "lfs/")):
        return "skip", ""
    return "unknown", ""


def _object_name(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) == 3 and len(parts[1]) == 2 and gitrepo.is_object_id(parts[1] + parts[2]):
        return True
    if len(parts) == 3 and parts[1] == "pack" and parts[2].startswith("pack-"):
        stem, _, suffix = parts[2][5:].partition(".")
        return gitrepo.is_object_id(stem) and suffix in (
            "pack", "idx", "rev", "bitmap", "keep", "promisor", "mtimes")
    return False


def _top(real: str, workspace: str) -> str:
    """The working tree of the git directory `real`: its parent for a `.git`, else the
    workspace (a linked worktree's or a separate git directory's)."""
    return os.path.dirname(real) if os.path.basename(real) == ".git" else workspace


def _classify_worktree(rel: str) -> tuple[str, str]:
    """A linked worktree's metadata: its pointers must say what `git worktree add` writes."""
    parts = rel.split("/", 2)
    if len(parts) < 3:
        return "skip", ""
    leaf = parts[2]
    if leaf == "index":
        return "index", ""
    if leaf in ("commondir", "gitdir", "HEAD", "ORIG_HEAD", "locked",
                "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG", "COMMIT_EDITMSG", "AUTO_MERGE") or (
            leaf.startswith("logs/")):
        return "copy", ""
    for prefix, why in _REFUSED:
        if leaf.startswith(prefix):
            return "refuse", why
    if leaf == "config.worktree":
        return "refuse", "per-worktree configuration is not carried over"
    return "skip", ""


def _place(source: str, target: str, copy: bool = False) -> None:
    """`source` (a regular file of the upper) to `target`, by a rename into place."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = f"{target}.csbx-{os.getpid()}"
    moved = False
    if not copy:
        try:
            os.rename(source, temporary)  # the same file system: no copy
            moved = True
        except OSError:
            pass
    if not moved:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, stat.S_IMODE(os.fstat(fd).st_mode) & 0o755)
            try:
                while chunk := os.read(fd, 1 << 20):
                    os.write(out, chunk)
            finally:
                os.close(out)
        finally:
            os.close(fd)
    os.replace(temporary, target)


def _apply_head(upper: str, real: str, base: Snapshot, files: set[str],
                history: gitcontrol.History, controls: frozenset[str]) -> tuple[list[str], bool]:
    """HEAD applied, or a line why not; whether its value is left only in the store."""
    if "HEAD" not in files:
        return [], False
    text = gitrepo.read_small(os.path.join(upper, "HEAD"))
    if gitrepo.ref_value(text) is None or text is None:
        return [f"{real}/HEAD: not applied: not a ref or an object id"], False
    if text == base.head:
        return [], False
    if gitrepo.read_small(os.path.join(real, "HEAD")) != base.head:
        return [f"{real}/HEAD changed outside during the session; the session's HEAD "
                f"({text.strip()}) was not applied"], False
    if text.lower().startswith("ref: " + gitcontrol.OURS):
        return [f"{real}/HEAD: not applied: it points at the values the exit keeps aside, "
                "unread (refs/claude-sandbox/)"], False
    if gitrepo.is_object_id(text.strip()):  # detached: read like a ref's new value
        found = history.changes(text.strip(), controls)
        if found != ():
            keep = gitcontrol.HELD + "HEAD"
            if not gitrefs.aside(real, keep, text.strip(), history):
                return [f"{real}/HEAD: not applied: {gitrefs.nothing(text)}"], True
            return [gitcontrol.held_line(real, "HEAD", keep, found)], False
    gitrefs.write(os.path.join(real, "HEAD"), text)
    return [], False


def _named(upper: str, files: set[str]) -> list[str]:
    """Every object id the copied state files and reflogs name."""
    texts = (gitrepo.read_small(os.path.join(upper, rel), 64 << 20) or ""
             for rel in sorted(files) if _classify(rel)[0] == "copy"
             and gitstate.names_commits(rel))
    return [value for text in texts for value in gitstate.ids(text)]


def _apply_config(upper: str, real: str, base: Snapshot, files: set[str],
                  workspace: str) -> list[str]:
    if "config" not in files:
        return []
    from claude_sandbox.launch.overlay import gitpolicy, repoconfig

    try:
        old = repoconfig.parse(base.config)
        new = repoconfig.parse(config_text(upper, "config"))
        current = config_text(real, "config")
        applicable, refused = gitpolicy.split(repoconfig.changes(old, new), current)
        # core.worktree (a submodule's) must name a tree in the workspace: git outside
        # would otherwise check files out, and read attributes, wherever it points.
        # Resolved as git resolves it, through every link on the way.
        outside = [c for c in applicable if c.name == "core.worktree" and not all(
            _within(os.path.realpath(os.path.join(real, v or "")), workspace) for v in c.new)]
        applicable = tuple(c for c in applicable if c not in outside)
        refused = (*refused, *((c, "it names a tree outside the workspace") for c in outside))
        if applicable:
            gitrefs.write(os.path.join(real, "config"), repoconfig.rewrite(current, applicable))
    except repoconfig.ConfigSyntax as error:
        return [f"{real}/config: the session's changes were not applied ({error})"]
    return [f"{real}/config: {change.name} not applied: {why}" for change, why in refused]


_within = paths.under
