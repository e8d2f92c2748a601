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
  repository already holds. The pack's reverse index, bitmap, mtimes, keep and promisor
  files are the session's word only and are dropped; git makes what it needs again.
"""

from __future__ import annotations

import hashlib
import os
import zlib

from claude_sandbox.core import paths
from claude_sandbox.core.process import capture

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

TIMEOUT = 300.0  # seconds for one pack's index: a pack that takes longer is kept back
_CHUNK = 1 << 20


def loose_refusal(source: str, name: str) -> str | None:
    """Why the loose object at `source` is not carried as `name` (its id), or None."""
    digest = hashlib.sha256() if len(name) == 64 else hashlib.sha1()
    inflate = zlib.decompressobj()
    try:
        with open(source, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(inflate.decompress(chunk))
        digest.update(inflate.flush())
    except (OSError, zlib.error) as error:
        return f"it does not read as an object ({error})"
    if not inflate.eof or digest.hexdigest() != name:
        return "its content is not the object its name says"
    return None


def place_pack(source: str, real_objects: str,
               place: Callable[[str, str], None]) -> str | None:
    """Index the pack at `source` anew and place it with that index in `real_objects`;
    why not, or None. `place(source, target)` moves or copies a file into place."""
    git = paths.find_tool("git")
    if git is None:
        return "git is not installed to index it"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="csbx-gitobjects-") as own:
        os.mkdir(os.path.join(own, "refs"))
        with open(os.path.join(own, "HEAD"), "w", encoding="ascii") as handle:
            handle.write("ref: refs/heads/none\n")
        index = os.path.join(own, "pack.idx")
        env = {"PATH": ":".join(paths.SYSTEM_DIRS), "HOME": own, "GIT_DIR": own,
               "GIT_OBJECT_DIRECTORY": real_objects, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": os.devnull, "GIT_NO_LAZY_FETCH": "1", "LC_ALL": "C"}
        name = os.path.basename(source)[len("pack-"):-len(".pack")]
        if len(name) == 64:
            with open(os.path.join(own, "config"), "w", encoding="ascii") as handle:
                handle.write("[core]\n\trepositoryformatversion = 1\n"
                             "[extensions]\n\tobjectformat = sha256\n")
        status, out = capture([git, "index-pack", "-o", index, source], env,
                              timeout=TIMEOUT)
        checksum = out.strip().rpartition("\t")[2] if status == 0 else ""
        if len(checksum) not in (40, 64) or checksum != name:
            return "git index-pack did not index it as the pack its name says"
        target = os.path.join(real_objects, "pack", f"pack-{checksum}")
        if os.path.lexists(target + ".idx"):
            return None  # the repository has it already
        place(source, target + ".pack")
        place(index, target + ".idx")  # last: git reads a pack once its index is there
    return None
