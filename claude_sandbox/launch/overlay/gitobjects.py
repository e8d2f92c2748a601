"""The session's objects, carried over by their content, never by the names it gave them.

git finds an object by its id and, reading it, does not hash it again. A loose object
the session wrote under another object's id, or a pack index that lists an existing id
at an offset holding other bytes, would make the user's git read the agent's content
for a blob it already has: `HEAD:.envrc` changed with no ref moved, written into the
worktree at the next checkout of it. So (ADR 0010):

- a loose object is carried only when its bytes hash to its name, and never over one
  that is there;
- of a pack only the `.pack` is carried: its index is made again by `git index-pack`,
  which computes every id from the content and compares each with an object the
  repository already holds, and the pack is named by the checksum it computed. The
  pack's reverse index, bitmap, mtimes, keep and promisor files are the session's word
  only and are dropped; git makes what it needs again.

Each is checked as the copy placed beside its target, under a name git does not read,
never as the session's file: in review mode a session may still write that one.
"""

from __future__ import annotations

import os
import time

from claude_sandbox.core import paths
from claude_sandbox.core.spawn import capture
from claude_sandbox.launch.overlay import gitcontrol
from claude_sandbox.launch.overlay.gitbudget import OUT_OF_TIME, ExitBudget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


PACKS = 16  # packs one session's end indexes, every repository: more are kept in the store
PACK_SECONDS = 300.0  # for indexing them all: a pack past it is kept in the store
_CHUNK = 1 << 20
_KINDS = (b"blob", b"tree", b"commit", b"tag")


class Budget:
    """What the packs may cost the session's end: PACKS of them, indexed within
    PACK_SECONDS in all, counted across every repository of the application (`shared`,
    gitbudget.py), whose clock bounds the loose objects too; past any of them, the rest
    is kept in the store and named. `sha256`: this repository's object format."""

    def __init__(self, sha256: bool = False, shared: ExitBudget | None = None) -> None:
        self.sha256 = sha256
        self.shared = shared or ExitBudget()

    def refusal(self) -> str | None:
        if self.shared.left() <= 0:
            return OUT_OF_TIME
        if self.shared.packs >= PACKS or self.shared.pack_seconds >= PACK_SECONDS:
            return (f"more packs than the session's end indexes ({PACKS}, or "
                    f"{PACK_SECONDS:.0f} s in all): repack inside, or take it from the store")
        return None


def place(upper: str, real: str, rel: str, place_file: Callable[[str, str], None],
          budget: Budget | None = None) -> str | None:
    """Carry the object file `rel` of `upper` over to the git directory `real` by its
    content, checked as the copy `place_file` put beside its target under a name git
    does not read; why not, or None."""
    source, target = os.path.join(upper, rel), os.path.join(real, rel)
    parts = rel.split("/")
    if parts[1] == "pack" and not parts[2].endswith(".pack"):
        return None  # its index is made again; the rest is the session's word only
    if os.path.lexists(target):
        return None
    budget = budget or Budget()
    # Before anything is copied: a million loose objects take their time too, and a
    # pack past the budget need not be copied to be refused.
    over = budget.refusal() if parts[1] == "pack" else (
        OUT_OF_TIME if budget.shared.left() <= 0 else None)
    if over is not None:
        return over
    placed = os.path.join(os.path.dirname(target), f"csbx-check-{os.getpid()}")
    place_file(source, placed + (".pack" if parts[1] == "pack" else ""))
    if parts[1] != "pack":
        refusal = loose_refusal(placed, parts[1] + parts[2])
        if refusal is None:
            os.replace(placed, target)
            return None
        _remove(placed)
        return refusal
    started = time.monotonic()
    found = index_pack(placed + ".pack", os.path.join(real, "objects"),
                       min(PACK_SECONDS - budget.shared.pack_seconds, budget.shared.left()),
                       sha256=budget.sha256)
    budget.shared.packs += 1
    budget.shared.pack_seconds += time.monotonic() - started
    if isinstance(found, str):
        _remove(placed + ".pack")
        _remove(placed + ".idx")
        return found
    checksum, index = found
    named = os.path.join(os.path.dirname(target), f"pack-{checksum}")
    os.replace(placed + ".pack", named + ".pack")
    os.replace(index, named + ".idx")  # last: git reads a pack once its index is there
    return None


def sha256(config: str) -> bool:
    """Whether the repository's config at launch names sha256 as its object format."""
    from claude_sandbox.launch.overlay import repoconfig

    try:
        entries = repoconfig.parse(config)
    except repoconfig.ConfigSyntax:
        return False
    return any((e.section, e.key) == ("extensions", "objectformat")
               and (e.value or "").lower() == "sha256" for e in entries)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def loose_refusal(source: str, name: str) -> str | None:
    """Why the loose object at `source` is not carried as `name` (its id), or None. It
    inflates no further than the size its header declares (a zlib bomb is refused
    early), and nothing may follow the stream (git's fsck refuses such a file, and the
    user's next push would fail on it)."""
    # Here, not at the top: the launch path imports this module, and hashlib loads
    # OpenSSL's libcrypto (4-11 ms) for nothing a launch needs.
    import hashlib
    import zlib

    digest = hashlib.sha256() if len(name) == 64 else hashlib.sha1()
    inflate = zlib.decompressobj()
    declared: int | None = None
    seen = 0
    try:
        with open(source, "rb") as handle:
            while chunk := inflate.unconsumed_tail or handle.read(_CHUNK):
                out = inflate.decompress(chunk, _CHUNK)
                if declared is None:
                    head, nul, _ = out.partition(b"\0")
                    kind, _, size = head.partition(b" ")
                    if not nul or kind not in _KINDS or not size.isdigit():
                        return "it does not read as an object (no header of git's)"
                    declared = len(head) + 1 + int(size)
                seen += len(out)
                if seen > declared:
                    return "it holds more than its header says"
                digest.update(out)
                if inflate.eof:
                    break
            trailing = inflate.unused_data or handle.read(1)
    except (OSError, zlib.error, ValueError) as error:
        return f"it does not read as an object ({error})"
    if not inflate.eof or trailing or seen != declared:
        return "it does not read as one whole object"
    if digest.hexdigest() != name:
        return "its content is not the object its name says"
    return None


def index_pack(pack: str, real_objects: str, seconds: float = 300.0, *,
               sha256: bool = False) -> str | tuple[str, str]:
    """Index the pack at `pack` anew, over the objects of `real_objects` (of the object
    format `sha256` says): (its checksum, the index made), or why not. `pack` is the
    copy the applier placed, not the file the session may still write (review mode)."""
    git = paths.find_tool("git")
    if git is None:
        return "git is not installed to index it"
    index = pack[:-len(".pack")] + ".idx"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="csbx-gitobjects-") as prefix:
        status, out = capture([git, "index-pack", "-o", index, pack],
                              gitcontrol.own_env(gitcontrol.own_gitdir(prefix, sha256),
                                                 real_objects),
                              timeout=max(1.0, seconds), limit=1 << 20)
    checksum = out.strip().rpartition("\t")[2]
    if status == 0 and len(checksum) == (64 if sha256 else 40):
        return checksum, index
    return "git index-pack could not index it"
