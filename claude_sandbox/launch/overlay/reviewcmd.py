"""`claude-sandbox review`: show, diff, apply or discard the changes waiting in review mode.

The changes wait in each agent's per-workspace store (review.py). This command
runs outside the sandbox, as the user, holding the store's lock so no session
writes while it reads or applies. Names from the workspace are printed with
control characters escaped: a file name must not drive the terminal.
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.overlay import controlfiles, gitcheck, gitsession, review, reviewapply
from claude_sandbox.launch.overlay.review import Change
from claude_sandbox.launch.planner import overlays
from claude_sandbox.launch.session import state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

EXIT_NOT_ALL = 1  # some chosen changes were not applied: they stay pending
_DIFF_LIMIT = 64 << 10  # a line diff costs more than linear time: larger files get none
_COUNT_LIMIT = 4 << 20  # larger files get no line counts


def run(action: str, agent: str | None, paths: Sequence[str], *, every: bool,
        interactive: bool, yes: bool, environ: Mapping[str, str], force: bool = False,
        ask: Callable[[str], str] = input) -> int:
    """The `review` subcommand; its exit status."""
    workspace = os.path.realpath(environ.get("CLAUDE_SANDBOX_WORKSPACE_ROOT")
                                 or _file_root(agent) or os.getcwd())
    found = _stores(agent, workspace)
    if action == "show" and not paths:
        return _show_all(found, workspace)
    if not found:
        print(f"nothing waits for review in {workspace}")
        return 0
    if len(found) > 1:
        names = ", ".join(name for name, _, _ in found)
        raise SandboxError(f"changes of more than one agent wait in {workspace} ({names}): "
                           "choose one with --agent", EXIT_USAGE)
    name, directory, store = found[0]
    cfg = config.load(name, environ)
    control = controlfiles.names(controlfiles.controls(cfg.protect, cfg.unprotect))
    fd = review.lock(directory, workspace)
    try:
        if action == "discard":  # needs no listing: it works whatever the upper holds
            return _discard(directory, workspace, paths, every, yes)
        pending = review.changes(os.path.join(directory, "upper"), workspace, control)
        everything = every or (action == "diff" and not paths)
        chosen = _choose(pending, _relative(paths, workspace), everything)
        if action in ("show", "diff"):
            for change in chosen:
                _print_diff(directory, workspace, change)
            return 0
        if interactive:
            chosen = _ask_each(directory, workspace, pending, ask)
        elif not chosen:
            raise SandboxError("review apply: say what to apply: --all, -i, or paths (see "
                               "`claude-sandbox review`)", EXIT_USAGE)
        # The store the review directory was found in, chosen once, and the user's own
        # 0700 directory before anything is moved below it: with a shared state-dir, a
        # squat made meanwhile must not receive what the quarantine moves.
        if cfg.state_dir is not None:
            state.check_state_dir(cfg.state_dir, os.getuid())
        state.private_dir(store, os.getuid(), "the sandbox's state store")
        lines, complete = reviewapply.apply(directory, workspace, chosen,
                                            gitcheck.Quarantine(store), force=force,
                                            controls=control)
        for line in lines:
            print(_shown(line))
        left = review.count_pending(os.path.join(directory, "upper"), workspace)
        print(f"{left} change(s) still wait for review" if left else "nothing waits any more")
        return 0 if complete else EXIT_NOT_ALL
    finally:
        os.close(fd)


def _file_root(agent: str | None) -> str | None:
    cfg = config.load(agent or profiles.AGENT_NAMES[0], {})
    return cfg.workspace_root


def _stores(agent: str | None, workspace: str) -> list[tuple[str, str, str]]:
    """(agent, its review directory, its store) for each agent with changes waiting in
    `workspace`."""
    found = []
    for name in [agent] if agent else profiles.AGENT_NAMES:
        cfg = config.load(name, {})  # state-dir: the file's alone
        root = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
        base = overlays.workspace_store(os.path.join(root, name), workspace)
        directory = gitsession.upper_base(overlays.review_store(base))
        upper = os.path.join(directory, "upper")
        if os.path.isdir(upper) and review.count_pending(upper, workspace):
            found.append((name, directory, root))
    return found


def _show_all(found: Sequence[tuple[str, str, str]], workspace: str) -> int:
    if not found:
        print(f"nothing waits for review in {workspace}")
        return 0
    for name, directory, _ in found:
        cfg = config.load(name, {})
        control = controlfiles.names(controlfiles.controls(cfg.protect, cfg.unprotect))
        fd = review.lock(directory, workspace)
        try:
            pending = review.changes(os.path.join(directory, "upper"), workspace, control)
            print(f"{len(pending)} change(s) by {name} wait for review in {workspace}:")
            flagged = [c for c in pending if c.klass or c.refused]
            if flagged:
                print("  what a program outside could run or follow (review these first):")
                for change in flagged:
                    print("    " + _row(directory, workspace, change))
            rest = [c for c in pending if not (c.klass or c.refused)]
            if rest:
                print("  the rest:")
                for change in rest:
                    print("    " + _row(directory, workspace, change))
        finally:
            os.close(fd)
    print("diff: claude-sandbox review diff [PATH...]; apply: claude-sandbox review apply "
          "--all | -i | PATH...; discard: claude-sandbox review discard --all | PATH...")
    return 0


def _row(directory: str, workspace: str, change: Change) -> str:
    note = f"  never applied: {change.refused}" if change.refused else ""
    if change.what == "repository":
        refs = _refs(directory, workspace, change.path)
        gone = [name for name, _, new in refs if new is None]
        note = (f"  applied by rule: {len(refs)} ref(s) or HEAD changed"
                + (f", deletes {', '.join(gone[:5])}" if gone else "")
                + "; `review diff` lists them")
    elif change.kind == "link":
        try:
            note = f"  -> {os.readlink(os.path.join(directory, 'upper', change.path))}"
        except OSError:
            note = ""
    elif change.kind == "file" or change.what == "deleted":
        note = _counts(directory, workspace, change) + note
    return _shown(f"{change.what:<10} {change.kind:<7} {change.klass:<14} {change.path}"
                  f"{note}")


def _choose(pending: Sequence[Change], paths: Sequence[str], every: bool) -> list[Change]:
    if every:
        return list(pending)
    return [c for c in pending for p in paths
            if not p or c.path == p or c.path.startswith(p.rstrip("/") + "/")]


def _relative(paths: Sequence[str], workspace: str) -> list[str]:
    """Each path relative to the workspace; one from the current directory or absolute
    is taken as it resolves lexically. A path outside the workspace is an error."""
    found = []
    for path in paths:
        full = os.path.normpath(os.path.join(os.getcwd(), path))
        if not (full + "/").startswith(workspace.rstrip("/") + "/"):
            raise SandboxError(f"{path} is not inside the workspace {workspace}", EXIT_USAGE)
        found.append("" if full == workspace else os.path.relpath(full, workspace))
    return found


def _discard(directory: str, workspace: str, paths: Sequence[str], every: bool,
             yes: bool) -> int:
    if every and not yes:
        raise SandboxError("review discard --all drops every pending change; run it again "
                           "with --yes", EXIT_USAGE)
    chosen = [""] if every else _relative(paths, workspace)
    if not chosen:
        raise SandboxError("review discard: say what to discard: --all, or paths", EXIT_USAGE)
    for line in reviewapply.discard(directory, chosen, workspace):
        print(_shown(line))
    return 0


def _ask_each(directory: str, workspace: str, pending: Sequence[Change],
              ask: Callable[[str], str]) -> list[Change]:
    chosen = []
    for change in pending:
        while True:
            answer = ask(_row(directory, workspace, change) + "\n  apply? [y]es [n]o "
                         "[d]iff [q]uit: ").strip().lower()
            if answer == "d":
                _print_diff(directory, workspace, change)
                continue
            break
        if answer == "q":
            break
        if answer == "y":
            chosen.append(change)
    return chosen


def _texts(directory: str, workspace: str, change: Change, limit: int
           ) -> tuple[list[str], list[str]] | str:
    """The old and new lines of a changed, added or deleted regular text file; else why
    there are none."""
    if change.kind != "file" and change.what != "deleted":
        return ""
    new = _lines(os.path.join(directory, "upper", change.path), limit) \
        if change.kind == "file" else []
    real = os.path.join(workspace, change.path)
    old = _lines(real, limit) if os.path.lexists(real) else []
    if new is None or old is None:
        return f"no line diff: binary, or over {limit >> 10} KiB; read it yourself"
    return old, new


def _lines(path: str, limit: int) -> list[str] | None:
    from claude_sandbox.launch.overlay import gitrepo

    text = gitrepo.read_small(path, limit)
    if text is None or "\0" in text:
        return None
    return text.splitlines(keepends=True)


def _counts(directory: str, workspace: str, change: Change) -> str:
    """+added -removed lines, as multisets: linear in the files' size, unlike a diff."""
    texts = _texts(directory, workspace, change, _COUNT_LIMIT)
    if isinstance(texts, str):
        return f"  ({texts})" if texts else ""
    from collections import Counter

    old, new = Counter(texts[0]), Counter(texts[1])
    return f"  +{sum((new - old).values())} -{sum((old - new).values())}"


def _print_diff(directory: str, workspace: str, change: Change) -> None:
    if change.what == "repository":
        print(_row(directory, workspace, change))
        for name, old, new in _refs(directory, workspace, change.path):
            print(_shown(f"  {name}: {old or '(none)'} -> {new or '(deleted)'}"))
        return
    texts = _texts(directory, workspace, change, _DIFF_LIMIT)
    if isinstance(texts, str):
        print(_row(directory, workspace, change))
        if texts and change.kind == "file":
            from shlex import quote  # the names are the agent's: a pasted command runs them

            print(_shown(f"  {texts}: diff -u {quote(os.path.join(workspace, change.path))} "
                         f"{quote(os.path.join(directory, 'upper', change.path))}"))
        return
    import difflib

    for line in difflib.unified_diff(*texts, f"a/{change.path}", f"b/{change.path}"):
        sys.stdout.write(_shown(line.rstrip("\n")) + "\n")


def _refs(directory: str, workspace: str, rel: str) -> list[tuple[str, str | None, str | None]]:
    """What applying the repository at `rel` would do to its refs and HEAD."""
    from claude_sandbox.launch.overlay import gitapply

    upper, real = os.path.join(directory, "upper", rel), os.path.join(workspace, rel)
    try:
        return gitapply.ref_changes(upper, review.base(directory, rel, real))
    except (OSError, ValueError):
        return []


def _shown(text: str) -> str:
    return "".join(c if c.isprintable() or c in "\t" else c.encode("unicode_escape")
                   .decode("ascii") for c in text)

