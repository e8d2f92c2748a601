"""Which paths the sandbox may make writable (the workspace and allow-write).

A writable path is a path whose contents programs outside will later read, so
it must hold nothing that runs or is trusted outside (ADR 0005). Refused, on
the resolved path (a symlink into one of them is refused too):

- `/`, a home directory or one of its ancestors: the sandbox's one writable
  hole would be the whole machine or someone's credentials;
- anything under a dot entry of a home (`~/.ssh`, `~/.bashrc`, `~/.config`,
  `~/.local/bin`, the agents' own directories, this sandbox's state store):
  a rule, not a list, because new credential stores and start-up files keep
  appearing there;
- a directory on the launching PATH, or under one: a program planted there
  runs when someone types its name;
- a system tree, or a directory that holds one: what the machine runs and how
  it boots;
- /tmp and /var/tmp themselves (a directory below them is fine): other
  programs' sockets live directly in them.

Every refusal exits with EXIT_CONFIG and names where the path came from.
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.core.record import record

SYSTEM_TREES = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot",
    "/proc", "/sys", "/dev", "/run", "/var/lib", "/var/spool", "/var/cache",
)  # fmt: skip
# Shared scratch trees: other programs' sockets and files live directly in them
# (tmux, X11, IDE and ssh-agent sockets); a directory below them is fine.
SHARED_TREES = ("/tmp", "/var/tmp")


@record
class PathRules:
    """The host facts a refusal needs, resolved (pure input for `forbidden_reason`)."""

    home: str  # the launching user's home
    homes: tuple[str, ...]  # every home whose dot-files matter: root's and login users'
    path_dirs: tuple[str, ...]  # the launching PATH's absolute entries
    store: str  # the sandbox's state store for this user


_within = paths.under


def _dot_entry(path: str, home: str) -> str | None:
    """`home/.X` when `path` is at or under a dot entry of `home`, else None."""
    if not path.startswith(home.rstrip("/") + "/"):
        return None
    first = path[len(home.rstrip("/")) + 1 :].split("/", 1)[0]
    return os.path.join(home, first) if first.startswith(".") else None


def readable_refusal(resolved: str, rules: PathRules) -> str | None:
    """Why `resolved` may not even be shown read-only (allow-read, a PATH directory), or
    None. Pure. `/`, a home, what holds one, a home's dot entries and the state store
    hold the credentials and the agents' state the sandbox keeps out."""
    if resolved == "/":
        return "it is the root directory"
    if resolved == rules.home:
        return f"it is your home directory {rules.home}"
    for home in (rules.home, *rules.homes):
        if home != "/" and _within(home, resolved):
            return f"it contains the home directory {home}" if home != resolved else (
                f"it is the home directory {home}")
        dot = _dot_entry(resolved, home)
        if dot is not None:
            return (f"it is under {dot}: a home's dot-files and dot-directories hold "
                    "credentials and code that runs at login or later")
    if _within(resolved, rules.store) or _within(rules.store, resolved):
        return f"it holds the sandbox's own state store {rules.store}"
    return None


def forbidden_reason(resolved: str, rules: PathRules) -> str | None:
    """Why `resolved` may not be writable, or None. Pure. Whatever may not be read may
    not be written; then what programs outside run from."""
    reason = readable_refusal(resolved, rules)
    if reason is not None:
        return reason
    for directory in rules.path_dirs:
        if _within(resolved, directory):
            return f"it is on PATH ({directory}): a program planted there runs outside"
    for tree in SYSTEM_TREES:
        if _within(resolved, tree):
            return f"it is under {tree}"
        if _within(tree, resolved):
            return f"it contains {tree}"
    for tree in SHARED_TREES:
        if _within(tree, resolved):
            return f"it is {tree} itself, or holds it: other programs' sockets live there"
    return None


def check_writable(
    path: str, rules: PathRules, *, what: str, where: str, directory: bool = True
) -> str:
    """The resolved path of something the sandbox may write, or a refusal naming `where`."""
    resolved = os.path.realpath(path)
    reason = forbidden_reason(resolved, rules)
    if reason is not None:
        via = "" if resolved == os.path.normpath(path) else f" (it resolves to {resolved})"
        raise SandboxError(
            f"refusing to make {path}{via} writable as the {what} ({where}): {reason}; "
            "cd into a project directory, or choose another path",
            EXIT_CONFIG,
        )
    if directory and not os.path.isdir(resolved):
        raise SandboxError(f"the {what} {path} ({where}) is not a directory", EXIT_CONFIG)
    if not os.path.exists(resolved):
        raise SandboxError(f"the {what} {path} ({where}) does not exist", EXIT_CONFIG)
    return resolved


def check_readable(path: str, rules: PathRules, *, where: str) -> str:
    """The resolved allow-read path, or a refusal naming `where`."""
    resolved = os.path.realpath(path)
    reason = readable_refusal(resolved, rules)
    if reason is not None:
        via = "" if resolved == os.path.normpath(path) else f" (it resolves to {resolved})"
        raise SandboxError(f"refusing to show {path}{via} as allow-read ({where}): {reason}",
                           EXIT_CONFIG)
    if not os.path.exists(resolved):
        raise SandboxError(f"the allow-read path {path} ({where}) does not exist", EXIT_CONFIG)
    return resolved
