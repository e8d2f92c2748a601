"""The egress jail's preflight: each missing primitive refuses the launch in one line.

Run while the holder makes its namespaces, before its answer is read (start.begin),
so that a host without tun, user namespaces or a tool says what is wrong and how to
fix it in these words, not the holder's (docs/how-to/image.md); the holder is ended.
"""

from __future__ import annotations

import os

from claude_sandbox.core import engine, paths
from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError, jail_error
from claude_sandbox.jail.holderfork import is_tun


def _refused(why: str) -> SandboxError:
    return jail_error(why, EXIT_UNAVAILABLE)


def _check_tun() -> None:
    fix = 'add "--device=/dev/net/tun" to runArgs in devcontainer.json'
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _refused(f"/dev/net/tun is missing; {fix}") from None
    except OSError as exc:
        raise _refused(f"/dev/net/tun cannot be opened ({exc.strerror}); "
                       f"run `chmod 666 /dev/net/tun` as root, or {fix}") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not is_tun(st):
        raise _refused(f"/dev/net/tun is not the tun device (10:200); {fix}")


def _check_userns() -> None:
    """Refuse where the kernel, a sysctl or the container engine stops the namespaces
    (core/engine.py). These are what can be read without creating a namespace; anything
    else that refuses one shows up when the holder cannot start (start.py)."""
    if not os.path.exists("/proc/self/ns/user"):
        raise _refused("this kernel has no user namespaces")
    why = engine.blocker(engine.read())
    if why is not None:
        raise _refused(why)


def preflight(*, needs_socat: bool) -> None:
    """Fail closed before the jail is used: each missing primitive is one line."""
    for name in ("pasta", "iptables-restore", "iptables-save"):
        paths.tool(name)
    if needs_socat:
        paths.tool("socat")
        paths.tool("setpriv")
    _check_tun()
    _check_userns()
