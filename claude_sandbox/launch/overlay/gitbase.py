"""A real git directory as it was at launch: what the session's end compares with."""

from __future__ import annotations

import os

from claude_sandbox.core.record import record
from claude_sandbox.launch.overlay import gitrepo, gitstaged


@record
class Snapshot:
    """A real git directory at launch: what its refs, HEAD, config and index were."""

    head: str | None
    loose: tuple[tuple[str, str], ...]
    packed: tuple[tuple[str, str], ...]
    config: str
    index: tuple[int, int, int] | None  # inode, size, mtime


def snapshot(gitdir: str) -> Snapshot:
    loose = tuple((n, v) for n, v in gitrepo.loose_refs(gitdir) if v is not None)
    packed = gitrepo.packed_refs(gitrepo.read_small(os.path.join(gitdir, "packed-refs"),
                                                    256 << 20))
    return Snapshot(gitrepo.read_small(os.path.join(gitdir, "HEAD")), loose,
                    tuple(packed.items()), config_text(gitdir, "config"),
                    gitstaged.stat_of(os.path.join(gitdir, "index")))


def config_text(gitdir: str, name: str) -> str:
    return gitrepo.read_small(os.path.join(gitdir, name), 4 << 20) or ""
