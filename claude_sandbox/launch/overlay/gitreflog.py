"""A branch's reflog from the session, carried only where its lines follow the branch.

`git rebase` (and `git pull --rebase`) finds the fork point in the reflog of the branch
the current one tracks: a commit named there is taken as the upstream's, and dropped
from the rebase. A line the session appended there naming the user's own commit would
drop that commit silently. So a branch's reflog is carried only where the session's
lines are appended to what is there and follow the branch's own moves in the session,
from its value at launch to the one applied, and where each commit they name is one
the branch reaches before or after: a forged chain through the user's commit on
another branch, or through one the session made there, names a commit it reaches in
neither. (A session that rewound the branch loses its reflog lines: a commit it
dropped is reached by neither.) The reflog of a branch the
session did not move gains no line. (A remote-tracking ref's reflog is not carried at all,
gitapply.py; the ids every reflog names are read by gitcontrol.py.)
"""

from __future__ import annotations

import os

from claude_sandbox.launch.overlay import gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.launch.overlay.gitcontrol import History


def refusal(upper: str, real: str, rel: str,
            moves: dict[str, tuple[str | None, str | None]], history: History) -> str | None:
    """Why the reflog `rel` is not carried, or None; `moves`: each ref the session
    changed, (its value at launch, the session's), None for absent."""
    if not rel.startswith("logs/refs/heads/"):
        return None
    ours = gitrepo.read_small(os.path.join(upper, rel), 64 << 20) or ""
    theirs = gitrepo.read_small(os.path.join(real, rel), 64 << 20) or ""
    if not ours.startswith(theirs):
        return "the session rewrote lines that were there"
    added = ours[len(theirs):].splitlines()
    name = rel[len("logs/"):]
    if name not in moves:
        return "the session added lines to a branch it did not move" if added else None
    old, new = moves[name]
    at = old or "0" * len(new or "0" * 40)
    for line in added:
        words = line.split("\t")[0].split()
        if len(words) < 2 or words[0] != at:
            return "its lines do not follow the branch's moves in the session"
        at = words[1]
    if new is None or at != new:
        return "its lines do not end where the branch does"
    named = {word for line in added for word in line.split("\t")[0].split()[:2]}
    for commit in sorted(named - {old, new, "0" * len(new)}):
        # Not "a commit the session made": one it made on the user's other branch would
        # pass, and drop the user's commits below it from a rebase there.
        if not (history.reaches(commit, new) or (old and history.reaches(commit, old))):
            return "a line names a commit the branch never held"
    return None
