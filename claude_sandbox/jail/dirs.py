"""The jail's private directories under /tmp: made per launch, swept when their launcher is gone.
"""

from __future__ import annotations

import os
import stat
import sys

_DIR_PREFIX = "claude-sandbox-jail."


def _own_prefix() -> str:
    """This user's directories from this pid namespace: a /tmp shared with
    another container holds launches whose pids mean nothing here."""
    pid_ns = os.stat("/proc/self/ns/pid").st_ino
    return f"{_DIR_PREFIX}{os.getuid()}.{pid_ns}."


def make_private_dir() -> str:
    # 0700 and unguessable: pasta's pid file and the relays' unix sockets live
    # here; another user must not connect to them or plant files. The name
    # carries the launcher's pid and pid namespace, for sweep_stale_dirs. mkdir
    # refuses a name that exists, so nothing planted there is ever used.
    path = f"/tmp/{_own_prefix()}{os.getpid()}.{os.urandom(6).hex()}"
    os.mkdir(path, 0o700)
    return path


def sweep_stale_dirs(dead: int = 0) -> None:
    """Remove this user's private directories whose launcher is gone.

    A SIGKILLed launcher cannot remove its directory (its processes die with
    it: die_with_parent, --die-with-parent). The next launch does, for a
    directory of this uid and pid namespace whose launcher pid no longer
    exists; a reused pid only postpones that. Best effort: a sweep never
    stops a launch. `dead`: a launcher known to be gone though its pid still
    exists (the janitor's, not yet reaped).
    """
    try:
        mine = _own_prefix()
        entries = [e for e in os.scandir("/tmp") if e.name.startswith(mine)]
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(mine) :].split(".")[0]
        try:
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            if int(pid) != dead and os.path.exists(f"/proc/{pid}"):
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
                remove_dir(entry.path)
        except OSError:
            continue


def remove_at_teardown(path: str) -> None:
    """Remove the launch's private directory as a launch ends; where that fails, say so
    in one line instead of ending the launch with the error, whose own status and
    message (a refusal's, the session's) would be lost. The next launch's sweep
    (sweep_stale_dirs) removes it once this launcher is gone."""
    try:
        remove_dir(path)
    except OSError as error:
        sys.stderr.write(f"claude-sandbox: warning: cannot remove {path} "
                         f"({error.strerror or error}); the next launch removes it\n")


def remove_dir(path: str) -> None:
    """Remove a private directory and what is in it, following no link (a quick
    question's HOME holds the directories its program made: launch/quick.py)."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            try:
                os.chmod(entry.path, 0o700)  # one the program left read-only is emptied too
            except OSError:
                pass
            remove_dir(entry.path)
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
