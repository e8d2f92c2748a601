"""Which directory may be the sandbox's writable root (DESIGN decision 5).

A root that is /, $HOME or one of its ancestors, or a system tree, would make
the sandbox's one writable hole the whole machine, the home's credentials or
the code that builds the sandbox. The check runs on the resolved path, so a
symlink into one of them is refused too.
"""

from __future__ import annotations

import os

from .errors import EXIT_REFUSED, SandboxError

SYSTEM_TREES = ("/etc", "/usr", "/proc", "/sys", "/dev", "/run", "/boot")


def forbidden_reason(resolved: str, home: str) -> str | None:
    """Why `resolved` may not be writable, or None. Pure."""
    if resolved == "/":
        return "it is the root directory"
    if resolved == home:
        return "it is your home directory"
    if home.startswith(resolved.rstrip("/") + "/"):
        return f"it contains your home directory {home}"
    for tree in SYSTEM_TREES:
        if resolved == tree or resolved.startswith(tree + "/"):
            return f"it is under {tree}"
    return None


def check_writable(path: str, home: str, *, what: str, directory: bool = True) -> str:
    """The resolved path of a directory the sandbox may write, or a refusal."""
    resolved = os.path.realpath(path)
    reason = forbidden_reason(resolved, home)
    if reason is not None:
        via = "" if resolved == os.path.normpath(path) else f" (it resolves to {resolved})"
        raise SandboxError(
            f"refusing to make {path}{via} writable as the {what}: {reason}; "
            "cd into a project directory or set workspace-root",
            EXIT_REFUSED,
        )
    if directory and not os.path.isdir(resolved):
        raise SandboxError(f"the {what} {path} is not a directory", EXIT_REFUSED)
    if not os.path.exists(resolved):
        raise SandboxError(f"the {what} {path} does not exist", EXIT_REFUSED)
    return resolved
