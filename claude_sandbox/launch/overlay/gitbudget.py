"""What one session's end may spend on git, every repository and submodule together.

The session's end applies each git directory the session wrote (gitapply.py), and each
submodule's git directory inside it is one more, at any depth. The limits each one had
(git's own runs: gitcontrol.DEADLINE; packs to index: gitobjects.PACKS) were its own, so
a session that made a thousand submodules, or nested them, multiplied them, and the
user's terminal waited for all of it. One ExitBudget is shared by every repository of
one application: past its limits the rest is not applied but kept in the store and
named, as anything refused is (docs/adr/0010-the-workspace-exit.md).
"""

from __future__ import annotations

import time

SECONDS = 300.0  # one application's git work in all: objects, packs, git's runs
MODULES = 64  # submodule git directories applied, at every depth together
DEPTH = 4  # submodules within submodules
OUT_OF_TIME = (f"the session's end ran past the {SECONDS:.0f} s it gives all its git work; "
               "it is kept in the store")


class ExitBudget:
    """The clock and the counts one application shares (gitobjects.Budget keeps the
    packs' here too)."""

    def __init__(self, seconds: float = SECONDS) -> None:
        self.deadline = time.monotonic() + seconds
        self.modules = 0
        self.packs = 0
        self.pack_seconds = 0.0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def module_refusal(self, depth: int) -> str | None:
        """Why the submodule git directory at `depth` (1: the repository's own) is not
        applied, or None, and it is counted."""
        if depth > DEPTH:
            return f"a submodule nested more than {DEPTH} deep"
        if self.modules >= MODULES:
            return f"more submodules than the session's end applies ({MODULES})"
        if self.left() <= 0:
            return OUT_OF_TIME
        self.modules += 1
        return None
