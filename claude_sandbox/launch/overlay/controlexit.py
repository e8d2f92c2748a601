"""What the session left at a control path, taken out of the workspace when it ends.

A control path absent at launch, or a link on the way to one (controlfiles.py), is not
held by a mount: the session could make one, or replace the link with a file of its
own, and a program outside would run it (ADR 0010). When the session ends, what stands
there is moved into the agent's per-workspace store and named in one line, and a
replaced link is made again.

The move must not fail open. Into the store is a rename when both lie on one file
system; across file systems it is a copy, which refuses what cannot be copied (a FIFO,
a socket, a device: shutil raises for them). So the entry is first renamed, in its own
directory, to a name no program reads (`NAME.csbx-moved-TIME-RANDOM`), which cannot fail for a
reason the copy could; only then is it carried into the store. If the copy fails, it
stays under that name, and the line says where.
"""

from __future__ import annotations

import os
import time

from claude_sandbox.launch.overlay import controlfiles
from claude_sandbox.launch.planner.mounts import Writable


def quote(path: str) -> str:
    """`path` as one shell word. shlex is imported here, only when a session made a
    control path, as gitcheck and reviewcmd do: at the top, its import (with re's) cost
    every launch about 4 ms."""
    from shlex import quote as shell_quote

    return shell_quote(path)


def move_created(layout: Writable, store: str, lines: list[str], review: bool) -> None:
    """Every absent control path the session made, and every replaced link, handled."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for control_plan in layout.controls:
        if review and control_plan.root == layout.workspace:
            continue  # in the overlay, pending review
        for path in control_plan.absent:
            if os.path.lexists(path) and (target := move_away(path, store, stamp, lines)):
                lines.append(f"the session made the control path {path}: moved to {target} "
                             "(programs outside would run it); to keep it: "
                             f"mv {quote(target)} {quote(path)}")
        for link in control_plan.links:
            put_back(link, store, stamp, lines)


def move_away(path: str, store: str, stamp: str, lines: list[str]) -> str | None:
    """`path` out of the workspace: where it went, or None (and a warning) when even the
    rename in place failed."""
    import secrets
    import shutil

    target = os.path.join(store, "created", stamp, os.path.relpath(path, "/"))
    # Unguessable: a directory the session made in advance under the name would stop
    # the rename (ENOTEMPTY) and leave the plant in place.
    inert = f"{path}.csbx-moved-{stamp}-{secrets.token_hex(4)}"
    try:
        os.rename(path, inert)
    except OSError as error:
        lines.append(f"warning: the session left {path}, and it could not be moved away "
                     f"({error.strerror}): do not run programs in this workspace until it "
                     "is removed")
        return None
    try:
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        shutil.move(inert, target)
    except OSError as error:
        lines.append(f"warning: {path} could not be carried into the store "
                     f"({getattr(error, 'strerror', None) or error}); it is left at {inert}, "
                     "a name no program reads")
        return inert
    return target


def put_back(link: controlfiles.Link, store: str, stamp: str, lines: list[str]) -> None:
    """A link on the way to a control path is no mount point: the session could replace
    it with a file of its own. What stands there at the end, if not the same link, is
    moved away and the link made again. A link that is gone stays gone: another session
    in this workspace may have moved it away as its own plant, and making it again here
    would bring back what that session's agent made."""
    try:
        if os.readlink(link.path) == link.text:
            return
    except OSError:
        pass  # gone, or no longer a link
    if not os.path.lexists(link.path):
        return
    moved = move_away(link.path, store, stamp, lines)
    if moved is None:
        return
    try:
        os.symlink(link.text, link.path)
    except OSError as error:
        lines.append(f"warning: the link {link.path} -> {link.text} could not be made again "
                     f"({error.strerror})")
        return
    lines.append(f"the session replaced the link {link.path} -> {link.text}: the link is "
                 f"back, and what stood there is in {moved}")
