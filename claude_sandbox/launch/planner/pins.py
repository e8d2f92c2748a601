"""Which mount points lie in the agent's store, and the directories above them, pinned.

Pure, for the plan: session/mountpoints.py makes those mount points and opens the pinned
directories before bwrap starts (it says why, check 105).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from claude_sandbox.launch.planner.mounts import Mount

PIN = "pin"  # the mount kind of a pinned directory; its source names its descriptor


def in_store(home: str, mounts: Sequence[Mount]) -> list[Mount]:
    """The mounts whose mount point lies in the store: below `home`, and below no mount
    made before them but $HOME's own (one below the workspace's bind, or a toolchain's,
    is made in that tree, not in the store)."""
    found = []
    for index, mount in enumerate(mounts):
        if not mount.dest.startswith(home + "/") or mount.kind == PIN:
            continue
        above = [m.dest for m in mounts[:index]
                 if m.kind != PIN and mount.dest.startswith(m.dest.rstrip("/") + "/")]
        if above and max(above, key=len) == home:
            found.append(mount)
    return found


def pinned(home: str, mounts: Sequence[Mount]) -> list[str]:
    """The directories between `home` and each mount point in the store, shallow first."""
    return above(home, in_store(home, mounts))


def above(home: str, stored: Sequence[Mount]) -> list[str]:
    """The directories between `home` and each of `stored` (in_store), shallow first."""
    found: set[str] = set()
    for mount in stored:
        parts = mount.dest[len(home) + 1:].split("/")[:-1]
        found.update(os.path.join(home, *parts[:depth]) for depth in range(1, len(parts) + 1))
    return sorted(found, key=lambda path: (path.count("/"), path))


def pin_name(directory: str) -> str:
    """The descriptor name of a pinned directory (render.py, making.py)."""
    return f"{PIN}:{directory}"
