"""Is this process already inside a claude-sandbox? Asked of the kernel, not the environment.

IS_SANDBOX=1 is set inside, but any outer environment can forge it, and a
forged variable must never make the shim run the real agent unwrapped
(architecture.md, step 2). The facts used here are ones only the sandbox has
together: a mount over the root-owned marker file (mounting needs privilege
over the mount namespace, which an unprivileged user outside does not have),
no effective capabilities, and no_new_privs.
"""

from __future__ import annotations

from claude_sandbox.core import mountinfo as mountinfo_module
from claude_sandbox.core import paths


def _confined(status: str) -> bool:
    lines = (line.partition(":") for line in status.splitlines())
    fields = {name: value.strip() for name, _, value in lines}
    return fields.get("NoNewPrivs") == "1" and int(fields.get("CapEff", "1"), 16) == 0


def _marker_mounted(mountinfo: str) -> bool:
    return any(m.mountpoint == paths.INSIDE_MARKER for m in mountinfo_module.parse(mountinfo))


def facts_say_inside(mountinfo: str, status: str) -> bool:
    """Pure: the decision from the text of /proc/self/mountinfo and /proc/self/status."""
    return _confined(status) and _marker_mounted(mountinfo)


def inside_sandbox() -> bool:
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as handle:
            if not _confined(handle.read()):
                return False  # the usual case at a shim: no need to read the mount table
        return _marker_mounted(mountinfo_module.read())
    except OSError:
        return False
