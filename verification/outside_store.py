"""Checks 101 and 105, run outside: what the agent's and the launch's state stores hold.

101: the egress records a workspace's sessions leave in the user's state store stay
bounded (jail/egressrecord.py's prune; docs/explanation/egress-by-name.md).

One agent's flood is cut at a size limit per session; without a bound on the sessions,
an agent started again and again (a loop in a script, a scheduled task) would still fill
the disk the user's home is on, a record at a time. The runner plants more records than
are kept, as sessions long ended, then launches once in that workspace.

105: a link left in the agent's store where the sandbox mounts something is never followed
by a later launch (launch/session/mountpoints.py). bwrap makes its mount points while the
host is still reachable at /oldroot, so a link there would make a file wherever it leads.
The runner leaves the link itself, at ~/.netrc of the store (every launch mounts an empty
file there), as a session leaves one below a directory of its home it moved aside.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping

from outside import Result, _launch_in

PLANTED = 120
KEPT = 100  # the catalogue's figure, not read from the product: the check tests it
# Past the kernel's largest pid_max (2**22): a launcher that can never be running, so
# no planted record is kept as a live session's.
_DEAD = 4194305


def check_101_egress_records_bounded(shim: str, agent: str, store_root: str,
                                     environ: Mapping[str, str], jail_on: bool) -> Result:
    """120 records of ended sessions in a workspace's egress directory: one session there
    leaves the newest 100, its own among them."""
    if not jail_on:
        return Result("101", "SKIP", "egress-jail = off: no egress records")
    from claude_sandbox.jail import egressrecord

    workspace = tempfile.mkdtemp(prefix="csbx-verify-egress101-", dir="/var/tmp")
    where = egressrecord.directory(store_root, workspace)
    planted = [f"20000101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}Z-{_DEAD}"
               f"{egressrecord.SUFFIX}" for i in range(PLANTED)]
    try:
        for directory in (os.path.dirname(where), where):  # as the launch makes them
            os.makedirs(directory, mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)
        for name in planted:
            with open(os.path.join(where, name), "w", encoding="utf-8") as handle:
                handle.write('{"kind":"session","session":"planted"}\n')
        ran = _launch_in(shim, agent, workspace, environ, "true")
        left = sorted(os.listdir(where))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(where, ignore_errors=True)
    if ran.returncode != 0:
        return Result("101", "FAIL", f"the session failed: {ran.stderr[-300:]}")
    own = [name for name in left if name not in planted]
    kept = KEPT
    if len(left) != kept or len(own) != 1 or left[:-1] != planted[-(kept - 1):]:
        return Result("101", "FAIL", f"{len(left)} records left of {PLANTED} planted and one "
                      f"session (the session's own: {len(own)}); want the newest {kept}")
    return Result("101", "PASS", f"of {PLANTED} ended sessions' records and one session, the "
                  f"newest {kept} are left, the session's own among them")


def check_105_store_links_not_followed(shim: str, agent: str, store_home: str,
                                       environ: Mapping[str, str]) -> Result:
    """A link at the store's ~/.netrc into a directory of the runner's, through /oldroot:
    the next launch is refused with 77 and makes nothing there."""
    target = tempfile.mkdtemp(prefix="csbx-verify-mountpoint105-", dir="/var/tmp")
    workspace = tempfile.mkdtemp(prefix="csbx-verify-store105-", dir="/var/tmp")
    point = os.path.join(store_home, ".netrc")
    kept = point + ".csbx-verify-105"
    try:
        if not os.path.isdir(store_home):
            _launch_in(shim, agent, workspace, environ, "true")  # the store, made
        if os.path.lexists(point):
            os.rename(point, kept)
        os.symlink(f"/oldroot{target}/made", point)
        ran = _launch_in(shim, agent, workspace, environ, "true")
        made = os.listdir(target)
    finally:
        if os.path.islink(point):
            os.unlink(point)
        if os.path.lexists(kept):
            os.rename(kept, point)
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
    if made:
        return Result("105", "FAIL", f"the launch followed a link in the store: it made "
                      f"{made} outside it")
    if ran.returncode != 77 or "symbolic link" not in ran.stderr:
        return Result("105", "FAIL", f"a link at the store's ~/.netrc: status {ran.returncode}, "
                      f"not 77 ({ran.stderr[-300:]})")
    moved = _pinned_moved(shim, agent, workspace, environ)
    if moved:
        return Result("105", "FAIL", moved)
    return Result("105", "PASS", "a link at a mount point in the store: the launch refused "
                  "(77) and made nothing where it leads; a pinned directory cannot be "
                  "renamed in a session")


def _pinned_moved(shim: str, agent: str, workspace: str, environ: Mapping[str, str]) -> str:
    """What is wrong where a session renames a directory the plan pins (`--bind-fd` in
    `explain`): it must fail (EBUSY). "" where it fails, or where nothing is pinned."""
    shown = subprocess.run([shim, "explain", "--agent", agent], env=dict(environ), text=True,
                           capture_output=True, check=False, timeout=120).stdout
    pinned = [line.split("#")[0].split()[-1] for line in shown.splitlines()
              if line.strip().startswith("--bind-fd ")]
    if not pinned:
        return ""
    os.makedirs(workspace, exist_ok=True)
    try:
        ran = _launch_in(shim, agent, workspace, environ,
                         f"mv {pinned[0]} {pinned[0]}.csbx-verify-105 || echo REFUSED")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if "REFUSED" not in ran.stdout:
        return f"a session renamed {pinned[0]}, a directory the plan pins"
    return ""
