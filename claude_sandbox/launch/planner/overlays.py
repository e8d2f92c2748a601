"""The launch's overlays, as the plan names them: which directory, why, where its writes go.

core/views.py mounts them; gitsession.py makes their directories and, after the
session, applies the git ones by rule (ADR 0010).
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.record import record
from claude_sandbox.launch.planner.mounts import Writable


@record
class View:
    """An overlay mounted before bwrap starts (core/views.py): the real `target` below,
    read-only, and an upper directory in the store that takes every write.

    `kind` "git": a git directory, whose upper is per session and applied by rule
    when the session ends (gitapply.py); "control": an existing control
    directory, whose upper is the agent's own per-workspace copy, kept for the
    next session and never applied; "workspace": the whole workspace in review
    mode, whose upper holds the changes pending review, kept from session to
    session until `claude-sandbox review` applies or discards them (review.py).
    `store` holds the upper and work directories.
    """

    kind: str
    target: str
    store: str
    reason: str


def workspace_store(agent_store: str, workspace: str) -> str:
    """The agent's per-workspace directory in its store: views' uppers, kept changes."""
    return os.path.join(agent_store, "workspaces", paths.workspace_key(workspace))


def review_store(base: str) -> str:
    """Where review mode keeps the changes pending review, in `base` (workspace_store)."""
    return os.path.join(base, "review")


def views(layout: Writable, base: str, *, review: bool = False) -> tuple[View, ...]:
    """Every overlay of the launch, in `base` (workspace_store): in review mode the
    workspace first, then git directories, then control directories.

    In review mode the workspace's overlay takes every write under it, its git
    directories' and control files' too: only the views outside it remain (a linked
    worktree's git directory, an allow-write root's control files)."""
    found = []
    if review:
        found.append(View("workspace", layout.workspace, review_store(base),
                          "workspace-mode = review: the workspace is an overlay; nothing "
                          "reaches it until `claude-sandbox review` applies it (check 73)"))
    found += [View("git", repo.gitdir, os.path.join(base, "git", str(index)),
                   f"{repo.why}: an overlay; the session's changes are applied by rule when "
                   "it ends, never hooks, includes, links or special files (check 70)")
              for index, repo in enumerate(layout.repositories)]
    for plan in layout.controls:
        why = dict(plan.reasons)
        for path in plan.views:
            relative = os.path.relpath(path, layout.workspace).replace("/", "%")
            found.append(View("control", path, os.path.join(base, "controls", relative),
                              f"control path, an overlay: {why.get(path, '')} (check 52)"))
    if review:
        found = [found[0], *(v for v in found[1:] if not within(v.target, layout.workspace))]
    return tuple(found)


within = paths.under
