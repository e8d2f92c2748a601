"""What a session reads: the system trees of /, by inversion (check 72).

The sandbox's root is bubblewrap's own empty one. Into it come the trees of /
that hold what the machine runs (SYSTEM_ROOTS), read-only; then the workspace,
the agent's store at $HOME, allow-read and the bin directories of the launching
PATH that lie elsewhere. Nothing else of / is shown, whatever its name: other users'
homes, /root on a user's launch, /srv, /mnt, /media, projects beside the
workspace, a volume mounted at an odd path. A list of what to hide would miss
the next one; this is the list of what to show.

The parents of a path that is shown (the workspace's /work, $HOME's /home) are
empty directories bubblewrap makes: their other entries are not there.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths

TYPE_CHECKING = False
if TYPE_CHECKING:

    from claude_sandbox.launch.facts.hostfacts import HostFacts
    from claude_sandbox.launch.planner.mounts import Writable

# .dockerenv: the empty marker programs read to tell they run in a container.
SYSTEM_ROOTS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt",
                "var", "sys", "nix", "snap", "gnu", ".dockerenv")

Entries = tuple[tuple[str, str | None], ...]  # the entries of /: (name, link target)


def system_entries(root_entries: Entries) -> list[tuple[str, str | None]]:
    """The system trees among the entries of /, as (path, link target or None): a link
    (merged /usr's /bin -> usr/bin) stays a link."""
    return [(f"/{name}", link) for name, link in root_entries if name in SYSTEM_ROOTS]


def shown_roots(root_entries: Entries) -> list[str]:
    return [path for path, link in system_entries(root_entries) if link is None]


_under = paths.under_any


# The sandbox's own mounts: a PATH directory in one of them is not brought back from
# the host (a /tmp/bin would undo the private /tmp).
_OWN = ("/tmp", "/dev", "/proc", "/sys")


def path_outside(facts: HostFacts, layout: Writable) -> list[str]:
    """PATH directories a session would not see otherwise (a /go/bin): shown read-only.

    Only a directory named bin or sbin: PATH comes from the launching environment,
    which may narrow the sandbox but not widen its reads to any directory it names.
    Never one a home, its dot entries or the store hold (layout.path_readable,
    workspace.readable_refusal)."""
    shown = [*shown_roots(facts.root_entries), *_OWN, *facts.runtime_dirs, facts.home,
             layout.workspace, *layout.allow_write, *layout.allow_read]
    found: list[str] = []
    for resolved in facts.path_real:
        if resolved not in found and not _under(resolved, shown) \
                and os.path.basename(resolved) in ("bin", "sbin") \
                and resolved in layout.path_readable and resolved in facts.path_dirs:
            found.append(resolved)
    return found
