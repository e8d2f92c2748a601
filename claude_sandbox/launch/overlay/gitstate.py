"""State files, reflogs and worktree pointers: carried only as git writes them, and read
for the commits they name (ADR 0010; the rule for refs is gitcontrol.py's).

A command outside takes up what these name: `git reset --hard ORIG_HEAD`, `git merge
--abort` (MERGE_AUTOSTASH), `git bisect reset` (BISECT_START), `git checkout -` (a
reflog's `checkout: moving from X to Y`), `git stash pop` (the stash reflog), a linked
worktree's HEAD. git reads each as a revision: an id in capitals, `ID~0` or a name git
resolves under refs/claude-sandbox/ would be taken where a plain id was checked. So
each is taken only in the form git writes it, and every id it names is read like a
ref's new value. The session's `shallow` list may not mark commits known at launch
(git would lose their history, as with a graft).
"""

from __future__ import annotations

import os

from claude_sandbox.launch.overlay import gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.launch.overlay.gitcontrol import History


def ids(text: str) -> list[str]:
    """Every object id in a state file or reflog: a line's value, a reflog's old and new
    ids, and any id its message names (`checkout: moving from ID to main`), in any case
    (git reads an id in capitals as the same id)."""
    words = (word.strip("'\"(),.:;").lower() for word in text.split())
    # The null id (a reflog's "before" of a new ref) names no object.
    return [word for word in words if gitrepo.is_object_id(word) and word.strip("0")]


# The state files git reads as one revision each (a line, or FETCH_HEAD's first field):
# what git writes there is a full object id, or a branch where noted.
_REVISIONS = frozenset(("ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD",
                        "REVERT_HEAD", "AUTO_MERGE", "MERGE_AUTOSTASH", "BISECT_START",
                        "BISECT_EXPECTED_REV", "HEAD"))
_MOVING = "checkout: moving from "


def _form_refusal(rel: str, text: str) -> str | None:
    """Why the state file or reflog `rel` is not in the form git writes it, or None.
    git reads these as revisions: a written `ID~0`, an id in capitals or another name
    would be resolved where a plain id would be read (`git bisect reset`, `git merge
    --abort`'s autostash, `git checkout -`)."""
    leaf = rel.rsplit("/", 1)[-1]
    lines = text.splitlines()
    if rel.startswith(("logs/", "worktrees/")) and "/logs/" in f"/{rel}":
        for line in lines:
            ids_, _, message = line.partition("\t")
            words = ids_.split()
            if len(words) < 2 or not all(_plain_id(w) for w in words[:2]):
                return "a reflog line not in the form git writes"
            if message.startswith(_MOVING):
                source, _, target = message[len(_MOVING):].partition(" to ")
                if not all(_plain_id(w) or _branch(w) for w in (source, target)):
                    return "a checkout line naming other than an id or a branch"
        return None
    if leaf not in _REVISIONS:
        return None
    for line in lines:
        first = line.split("\t")[0] if leaf == "FETCH_HEAD" else line
        if leaf == "HEAD" and first.startswith("ref: "):
            continue  # a worktree's HEAD naming a branch (refs/claude-sandbox/: refused)
        if not (_plain_id(first) or (leaf == "BISECT_START" and _branch(first))):
            return "not in the form git writes (a full object id)"
    return None


def names_commits(rel: str) -> bool:
    """Whether git takes up the commits the copied file `rel` names: a state file it
    reads as a revision, a reflog, a linked worktree's pointer. Messages (COMMIT_EDITMSG)
    name none, whatever ids their text quotes."""
    leaf = rel.rsplit("/", 1)[-1]
    return leaf in _REVISIONS or "/logs/" in f"/{rel}"


def _plain_id(word: str) -> bool:
    return gitrepo.is_object_id(word)  # lower-case hex of a full id's length


def _branch(word: str) -> bool:
    return gitrepo.valid_refname(f"refs/heads/{word}") and not gitrepo.is_object_id(
        word.lower())


def copy_refusal(upper: str, rel: str, history: History,
                  controls: frozenset[str]) -> str | None:
    """Why a state file, reflog or worktree pointer is not carried over, or None. Each
    names commits a command outside takes up (`git reset --hard ORIG_HEAD`, `git
    checkout -`, `git stash pop`, `git merge --abort` with MERGE_AUTOSTASH, `git bisect
    reset`): read like a ref's new value. A pointer into the values kept aside, or a
    shallow list that cuts the history known at launch, is refused too."""
    if rel.startswith("lfs/"):
        return None
    text = gitrepo.read_small(os.path.join(upper, rel), 64 << 20)
    if text is None:
        return "too large to read"
    if "claude-sandbox/" in text.lower():  # a ref, or a name git resolves to one, any case
        return "it names the values the exit keeps aside, unread (refs/claude-sandbox/)"
    form = _form_refusal(rel, text)
    if form is not None:
        return form
    if rel == "shallow":
        added = set(text.split()) - set((history.shallow or "").split())
        if not all(history.unknown(value) for value in added):
            return "it marks commits known at launch shallow: git would lose their history"
        return None
    if names_commits(rel) and any(history.changes(value, controls) != ()
                                  for value in ids(text)):
        return "it names the session's commits that change control files, or that git " \
               "cannot read"
    return None
