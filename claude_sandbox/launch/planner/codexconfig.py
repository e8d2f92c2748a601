"""Codex inside the sandbox: the sandbox is its sandbox.

Codex builds its own sandbox for every command it runs (bubblewrap and seccomp).
Inside ours that fails as root (a user namespace mapping uid 0 needs CAP_SETFCAP,
which the sandbox has dropped: "setting up uid map: Operation not permitted"), so
every command codex ran failed, and as a user it only nested a second sandbox in
the first. Inside, codex's managed configuration (its top layer, which the user's
cannot override) therefore says `sandbox_mode = "danger-full-access"`: codex runs
its commands directly, inside this sandbox (ADR 0005). Outside, the managed file
is untouched.

The copy is made at each launch from the operator's managed file, so their own
settings stay in force; it reaches bwrap as data over a pipe, like the gitconfig.
"""

from __future__ import annotations

SETTING = 'sandbox_mode = "danger-full-access"'
WHY = ("# claude-sandbox: inside the sandbox, codex runs its commands in this sandbox "
       "rather than in one of its own\n")


def inside(text: str) -> str:
    """Pure: the managed config with our sandbox_mode, any top-level one replaced.

    A top-level key must come before the first [table]; lines of ours go first, and a
    top-level sandbox_mode of the operator's (before any table) is dropped, since TOML
    refuses a key set twice.
    """
    kept = []
    in_table = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            in_table = True
        if not in_table and stripped.replace(" ", "").startswith("sandbox_mode="):
            continue
        kept.append(line)
    body = "\n".join(kept)
    return WHY + SETTING + "\n" + (body + "\n" if body.strip() else "")
